/*
 * test_monitor.c - the master's dispatch (master/monitor.c) against a worker that breaks the
 * contract: a message its phase does not permit, a once-only message twice, an answer to a
 * request never sent, a master-only message, inputs no honest worker sends (a sandbox or claim
 * it names itself, another session's claim, an API path, a state that does not exist). Each
 * must end the worker. And the Kubernetes agent relay (master/sandbox_kube.c): it forwards a
 * worker's agent requests, streamed, to its own pod only, refuses other processes, and ends a
 * worker that asks it for anything else (a raw API path).
 *
 * The "worker" is a real child process (it only sleeps) so that ending it is observable as a
 * SIGKILL; the messages are encoded and decoded with the real codec, and the monitor's answers
 * travel over a real nng pair (inproc://) to the test, which reads them.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ipc/chan.h"
#include "ipc/ipc.h"
#include "master/master.h"
#include "master/auth.h"
#include "master/monitor.h"
#include "master/sandbox_kube.h"
#include "master/usertoken.h"
#include "policy/limits.h"

#define SID "0123456789abcdef0123456789abcdef"

struct fake {
	struct serve_config cfg;
	struct worker w;
	nng_socket peer; /* the worker's end of the channel */
	int hellos, answers, notes, sessions, calls, quotas;
	bool busy, deny;
	const char *user;
};

static int url_n;

/* fake ops: seq 5 is a client message waiting for its answer, seq 6 one whose client gave up */
static void f_hello(void *ctx) { ((struct fake *)ctx)->hellos++; }
static enum mon_pending f_answer(void *ctx, uint32_t seq, struct ipc_bytes msg)
{
	(void)msg;
	struct fake *f = ctx;
	if (seq == 5) {
		f->answers++;
		return MON_PENDING;
	}
	return seq == 6 ? MON_GAVE_UP : MON_NEVER;
}
static void f_note(void *ctx, uint32_t rel, struct ipc_bytes msg)
{
	(void)rel, (void)msg;
	((struct fake *)ctx)->notes++;
}
static enum mon_pending f_accepted(void *ctx, uint32_t seq, struct ipc_bytes id)
{
	(void)ctx, (void)id;
	return seq == 5 ? MON_PENDING : MON_NEVER;
}
static void f_session(void *ctx, const struct ipc_session *s)
{
	(void)s;
	((struct fake *)ctx)->sessions++;
}
static void f_state(void *ctx, bool busy) { ((struct fake *)ctx)->busy = busy; }
static bool f_quota(void *ctx, char *err, size_t errlen)
{
	struct fake *f = ctx;
	f->quotas++;
	if (f->deny)
		snprintf(err, errlen, "over the limit");
	return !f->deny;
}
static void f_call(void *ctx, const struct ipc_call *c)
{
	(void)c;
	((struct fake *)ctx)->calls++;
}
static const char *f_user(void *ctx) { return ((struct fake *)ctx)->user; }
static const struct mon_ops f_ops = { f_hello, f_answer, f_note, f_accepted, f_session, f_state,
				      f_quota, f_call, f_user };

static int setup(void **st)
{
	struct fake *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->cfg.max_sandboxes_per_user = 1;
	f->w.cfg = &f->cfg;
	snprintf(f->w.session, sizeof(f->w.session), "%s", SID);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (;;)
			pause();
	}
	f->w.pid = pid;
	char url[64];
	snprintf(url, sizeof(url), "inproc://test-monitor-%d", ++url_n);
	assert_int_equal(chan_listen(&f->w.sock, url), 0);
	assert_int_equal(chan_dial(&f->peer, url), 0);
	f->w.connected = 1;
	*st = f;
	return 0;
}

static int teardown(void **st)
{
	struct fake *f = *st;
	if (f->w.pid > 0) {
		kill(f->w.pid, SIGKILL);
		waitpid(f->w.pid, NULL, 0);
	}
	nng_close(f->peer);
	nng_close(f->w.sock);
	free(f);
	return 0;
}

/* send_as_worker - encode, decode (as the master's channel would) and dispatch in phase */
static int dispatch(struct fake *f, unsigned phase, struct ipc_buf *b)
{
	struct ipc_msg m;
	assert_int_equal(ipc_decode(b->sb.data, b->sb.size, &m), 0);
	ipc_buf_free(b);
	struct mon_peer p = { &f->w, phase, &f_ops, f };
	int r = mon_dispatch(&p, &m);
	ipc_msg_free(&m);
	return r;
}

/* assert_ended - the worker process was killed by the monitor */
static void assert_ended(struct fake *f)
{
	int status = 0;
	assert_true(f->w.ended);
	assert_int_equal(waitpid(f->w.pid, &status, 0), f->w.pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGKILL);
	f->w.pid = 0;
}

static void assert_alive(struct fake *f)
{
	assert_false(f->w.ended);
	assert_int_equal(waitpid(f->w.pid, NULL, WNOHANG), 0);
}

static void hello(struct fake *f)
{
	struct ipc_buf b;
	assert_int_equal(ipc_pack_hello(&b, 1, (uint64_t)f->w.pid, "test"), 0);
	assert_int_equal(dispatch(f, IPC_PH_STARTING, &b), 0);
	assert_true(f->w.hello);
	assert_int_equal(f->hellos, 1);
}

static void test_honest_worker_is_answered(void **st)
{
	struct fake *f = *st;
	struct ipc_buf b;
	hello(f);
	assert_int_equal(ipc_pack_req_quota(&b, 9), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), 0);
	struct ipc_msg m;
	assert_int_equal(chan_recv(f->peer, &m, 0, NULL), 0);
	assert_int_equal(m.type, IPC_ANS_QUOTA);
	assert_int_equal(m.seq, 9);
	assert_true(m.u.quota_ans.ok);
	ipc_msg_free(&m);
	assert_int_equal(ipc_pack_ans_mcp(&b, 5, "{}", 2), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), 0);
	assert_int_equal(f->answers, 1);
	/* an answer whose client gave up is dropped, not held against the worker */
	assert_int_equal(ipc_pack_ans_mcp(&b, 6, "{}", 2), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), 0);
	assert_int_equal(ipc_pack_note_state(&b, 10, "busy"), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), 0);
	assert_true(f->busy);
	assert_int_equal(ipc_pack_note_session(&b, 11, "{}", 2, "2025-06-18"), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), 0);
	/* in ENDING a quota request is refused, not fatal: it may have crossed REQ_SHUTDOWN */
	assert_int_equal(ipc_pack_req_quota(&b, 12), 0);
	assert_int_equal(dispatch(f, IPC_PH_ENDING, &b), 0);
	assert_int_equal(chan_recv(f->peer, &m, 0, NULL), 0);
	assert_int_equal(m.type, IPC_ANS_QUOTA);
	assert_false(m.u.quota_ans.ok);
	ipc_msg_free(&m);
	assert_int_equal(f->quotas, 1);
	assert_alive(f);
}

static void test_hello_with_another_pid(void **st)
{
	struct fake *f = *st;
	struct ipc_buf b;
	assert_int_equal(ipc_pack_hello(&b, 1, (uint64_t)f->w.pid + 1, "test"), 0);
	assert_int_equal(dispatch(f, IPC_PH_STARTING, &b), -EPERM);
	assert_false(f->w.hello);
	assert_ended(f);
}

static void test_out_of_phase_before_hello(void **st)
{
	struct fake *f = *st;
	struct ipc_buf b;
	assert_int_equal(ipc_pack_req_quota(&b, 2), 0);
	assert_int_equal(dispatch(f, IPC_PH_STARTING, &b), -EPERM);
	assert_int_equal(f->quotas, 0);
	assert_ended(f);
}

static void test_out_of_phase_idle(void **st)
{
	struct fake *f = *st;
	struct ipc_buf b;
	hello(f);
	/* a pre-started worker has no session: it cannot have initialized one */
	assert_int_equal(ipc_pack_note_session(&b, 2, "{}", 2, "2025-06-18"), 0);
	assert_int_equal(dispatch(f, IPC_PH_IDLE, &b), -EPERM);
	assert_int_equal(f->sessions, 0);
	assert_ended(f);
}

static void test_hello_twice(void **st)
{
	struct fake *f = *st;
	struct ipc_buf b;
	hello(f);
	assert_int_equal(ipc_pack_hello(&b, 2, (uint64_t)f->w.pid, "test"), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), -EPERM);
	assert_int_equal(f->hellos, 1);
	assert_ended(f);
}

static void test_once_only_twice(void **st)
{
	struct fake *f = *st;
	struct ipc_buf b;
	hello(f);
	assert_int_equal(ipc_pack_note_session(&b, 2, "{}", 2, "2025-06-18"), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), 0);
	assert_int_equal(ipc_pack_note_session(&b, 3, "{}", 2, "2025-06-18"), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), -EPERM);
	assert_int_equal(f->sessions, 1);
	assert_ended(f);
}

static void test_unsolicited_answer(void **st)
{
	struct fake *f = *st;
	struct ipc_buf b;
	hello(f);
	assert_int_equal(ipc_pack_ans_mcp(&b, 77, "{\"id\":1}", 8), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), -EPERM);
	assert_int_equal(f->answers, 0);
	assert_ended(f);
}

static void test_unsolicited_accepted(void **st)
{
	struct fake *f = *st;
	struct ipc_buf b;
	hello(f);
	assert_int_equal(ipc_pack_note_accepted(&b, 77, "1", 1), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), -EPERM);
	assert_ended(f);
}

static void test_master_only_messages(void **st)
{
	struct fake *f = *st;
	struct ipc_buf b;
	hello(f);
	assert_int_equal(ipc_pack_ans_quota(&b, 2, true, ""), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), -EPERM);
	assert_ended(f);
}

static void test_after_the_end_nothing_counts(void **st)
{
	struct fake *f = *st;
	struct ipc_buf b;
	hello(f);
	assert_int_equal(ipc_pack_req_shutdown(&b, 2, "mine"), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), -EPERM);
	assert_ended(f);
	/* what it still had queued is dropped */
	assert_int_equal(ipc_pack_note_call(&b, 3, "execute_go_code", "ok", 1, 1, 1, 1, 1, 1, 1), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), -EPERM);
	assert_int_equal(f->calls, 0);
}

static void test_bad_state(void **st)
{
	struct fake *f = *st;
	struct ipc_buf b;
	hello(f);
	assert_int_equal(ipc_pack_note_state(&b, 2, "root"), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), -EPERM);
	assert_ended(f);
}

static void test_sandbox_named_by_the_worker(void **st)
{
	struct fake *f = *st;
	struct ipc_buf b;
	hello(f);
	assert_int_equal(ipc_pack_req_sandbox(&b, 2, "spawn", "kg-of-another-session"), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), -EPERM);
	assert_ended(f);
}

static void test_sandbox_unknown_op(void **st)
{
	struct fake *f = *st;
	struct ipc_buf b;
	hello(f);
	assert_int_equal(ipc_pack_req_sandbox(&b, 2, "chown", ""), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), -EPERM);
	assert_ended(f);
}

/* A worker waits for the answer to its REQ_SANDBOX: one sent while the sandbox it asked for is
 * still starting (on the spawner thread, master/sandbox_local.c) ends it, whatever the op and
 * phase, and it gets no answer; the start itself is left to undo itself when the worker is
 * reaped. */
static void test_sandbox_asked_twice(void **st)
{
	static const char *const ops[] = { "spawn", "release" };
	static const unsigned phases[] = { IPC_PH_IDLE, IPC_PH_SESSION, IPC_PH_ENDING };
	for (size_t o = 0; o < 2; o++)
		for (size_t k = 0; k < sizeof(phases) / sizeof(phases[0]); k++) {
			struct fake *f = *st;
			if (o || k) {
				teardown(st);
				setup(st);
				f = *st;
			}
			struct ipc_buf b;
			struct ipc_msg m;
			hello(f);
			struct sandbox_start *starting = (struct sandbox_start *)&f->w; /* opaque: only set */
			f->w.sandbox_start = starting;
			assert_int_equal(ipc_pack_req_sandbox(&b, 2, ops[o], ""), 0);
			/* the log says which worker and why, in one line */
			FILE *log = tmpfile();
			assert_non_null(log);
			fflush(stderr);
			int saved = dup(STDERR_FILENO);
			assert_true(saved >= 0 && dup2(fileno(log), STDERR_FILENO) == STDERR_FILENO);
			log_init("test", LOG_LVL_ERROR); /* 6 lines: within the site's burst */
			int r = dispatch(f, phases[k], &b);
			log_init("test", LOG_LVL_OFF);
			fflush(stderr);
			dup2(saved, STDERR_FILENO);
			close(saved);
			char line[600] = "", want[80];
			rewind(log);
			assert_non_null(fgets(line, sizeof(line), log));
			fclose(log);
			assert_int_equal(r, -EPERM);
			snprintf(want, sizeof(want), "worker pid %d (session ", (int)f->w.pid);
			assert_non_null(strstr(line, want));
			assert_non_null(strstr(line, "sent REQ_SANDBOX while the sandbox it asked for is still "
						   "starting"));
			assert_non_null(strstr(line, ipc_phase_name(phases[k])));
			assert_ended(f);
			assert_ptr_equal(f->w.sandbox_start, starting); /* the monitor leaves it be */
			assert_int_equal(chan_recv(f->peer, &m, NNG_FLAG_NONBLOCK, NULL), -EAGAIN);
			f->w.sandbox_start = NULL;
		}
}

/* On Kubernetes the worker can only say "spawn" or "release" with no name: every way of naming
 * a claim or an API object ends it, in every phase it may send REQ_SANDBOX. */
static void test_kube_names_nothing(void **st)
{
	static const char *const names[] = {
		"kg-deadbeef-x7k2q",      /* another session's claim */
		"go-runtime-pool-abcde",  /* a claim of nobody's session */
		"kg-01234567-x7k2q",      /* even one shaped like its own: it never made it */
		"/api/v1/namespaces/kg-test/secrets", /* a raw API path */
		"../sandboxclaims",
	};
	static const unsigned phases[] = { IPC_PH_SESSION, IPC_PH_IDLE, IPC_PH_ENDING };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		for (size_t k = 0; k < 3; k++) {
			void *fst;
			setup(&fst);
			struct fake *f = fst;
			f->cfg.kubernetes = true;
			hello(f);
			struct ipc_buf b;
			const char *op = k == 2 ? "release" : "spawn";
			assert_int_equal(ipc_pack_req_sandbox(&b, 2, op, names[i]), 0);
			assert_int_equal(dispatch(f, phases[k], &b), -EPERM);
			assert_ended(f);
			assert_null(f->w.kube); /* nothing was started for it */
			teardown(&fst);
		}
	(void)st;
}

/* REQ_ADC: the master reads the file for a mode that uses one, anew each time */
static void test_adc_read_by_the_master(void **st)
{
	struct fake *f = *st;
	char path[] = "/tmp/kg-test-adc-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "{\"type\":\"authorized_user\"}", 27), 27);
	close(fd);
	setenv("GOOGLE_APPLICATION_CREDENTIALS", path, 1);
	f->cfg.credentials = "adc";
	hello(f);
	struct ipc_buf b;
	struct ipc_msg m;
	assert_int_equal(ipc_pack_req_adc(&b, 7), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), 0);
	assert_int_equal(chan_recv(f->peer, &m, 0, NULL), 0);
	assert_int_equal(m.type, IPC_ANS_ADC);
	assert_int_equal(m.seq, 7);
	assert_true(m.u.adc_ans.ok);
	assert_int_equal(m.u.adc_ans.text.len, 27);
	ipc_msg_free(&m);
	/* gone now: the answer says so, and the worker lives on */
	unlink(path);
	assert_int_equal(ipc_pack_req_adc(&b, 8), 0);
	assert_int_equal(dispatch(f, IPC_PH_ENDING, &b), 0);
	assert_int_equal(chan_recv(f->peer, &m, 0, NULL), 0);
	assert_false(m.u.adc_ans.ok);
	assert_int_equal(m.u.adc_ans.text.len, 0);
	assert_non_null(memmem(m.u.adc_ans.error.ptr, m.u.adc_ans.error.len, path, strlen(path)));
	ipc_msg_free(&m);
	unsetenv("GOOGLE_APPLICATION_CREDENTIALS");
	assert_alive(f);
}

/* REQ_ADC in a mode that uses no ADC file (none, user) is a breach */
static void test_adc_in_a_mode_without_one(void **st)
{
	static const char *const modes[] = { NULL, "none", "user" };
	for (size_t i = 0; i < 3; i++) {
		struct fake *f = *st;
		if (i > 0) {
			teardown(st);
			setup(st);
			f = *st;
		}
		f->cfg.credentials = modes[i];
		struct ipc_buf b;
		hello(f);
		assert_int_equal(ipc_pack_req_adc(&b, 2), 0);
		assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), -EPERM);
		assert_ended(f);
	}
}

/* the credential messages (REQ_KUBE, ANS_KUBE, NOTE_CLAIM) are no part of the contract any
 * more: a type past the table is refused by the decoder, which the transports treat as a breach */
static void test_kube_credential_messages_gone(void **st)
{
	(void)st;
	for (uint32_t t = 1; t < IPC_TYPE_MAX; t++)
		assert_true(strstr(ipc_type_name(t), "KUBE") == NULL &&
			    strstr(ipc_type_name(t), "CLAIM") == NULL);
	/* [version, type, seq, {}] */
	const unsigned char raw[] = { 0x94, IPC_VERSION, IPC_TYPE_MAX, 0x01, 0x80 };
	struct ipc_msg m;
	assert_int_equal(ipc_decode(raw, sizeof(raw), &m), -EPROTO);
}

/* a claim before the session exists, or over the user's limit, is refused by the master itself
 * (the worker's REQ_QUOTA is not trusted to have come first), without an API call */
static void test_kube_spawn_refused_by_the_master(void **st)
{
	struct fake *f = *st;
	struct ipc_buf b;
	struct ipc_msg m;
	f->cfg.kubernetes = true;
	hello(f);
	assert_int_equal(ipc_pack_req_sandbox(&b, 2, "spawn", ""), 0);
	assert_int_equal(dispatch(f, IPC_PH_IDLE, &b), 0);
	assert_int_equal(chan_recv(f->peer, &m, 0, NULL), 0);
	assert_int_equal(m.type, IPC_ANS_SANDBOX);
	assert_false(m.u.sandbox_ans.ok);
	assert_int_equal(m.u.sandbox_ans.socket.len, 0);
	ipc_msg_free(&m);
	f->deny = true;
	assert_int_equal(ipc_pack_req_sandbox(&b, 3, "spawn", ""), 0);
	assert_int_equal(dispatch(f, IPC_PH_SESSION, &b), 0);
	assert_int_equal(chan_recv(f->peer, &m, 0, NULL), 0);
	assert_int_equal(m.seq, 3);
	assert_false(m.u.sandbox_ans.ok);
	char why[200];
	ipc_bytes_str(m.u.sandbox_ans.error, why, sizeof(why));
	assert_string_equal(why, "over the limit");
	ipc_msg_free(&m);
	assert_null(f->w.kube);
	assert_alive(f);
}

/* ---- the agent relay (master/sandbox_kube.c), against a real child and a real HTTP peer ---- */

/* A one-connection HTTP server standing in for a pod's agent on 127.0.0.1. */
struct agent {
	int lfd, port;
	pthread_t t;
	char req[8192];        /* what arrived: request line and headers */
	size_t req_len;
	bool got;
	int release[2];        /* stream mode: the rest is sent once a byte arrives here */
	bool stream;
};

static void *fake_agent_main(void *arg)
{
	struct agent *a = arg;
	int fd = accept(a->lfd, NULL, NULL);
	if (fd < 0)
		return NULL;
	while (a->req_len < sizeof(a->req) - 1) {
		ssize_t n = read(fd, a->req + a->req_len, sizeof(a->req) - 1 - a->req_len);
		if (n <= 0)
			break;
		a->req_len += (size_t)n;
		a->req[a->req_len] = '\0';
		if (strstr(a->req, "\r\n\r\n"))
			break;
	}
	a->got = true;
	if (a->stream) {
		const char *h = "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n\r\n"
				"{\"event\":\"progress\"}\n";
		if (write(fd, h, strlen(h)) < 0)
			a->got = false;
		char c;
		if (read(a->release[0], &c, 1) == 1) {
			const char *rest = "{\"event\":\"result\"}\n";
			if (write(fd, rest, strlen(rest)) < 0)
				a->got = false;
		}
	} else {
		const char *h = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
				"Content-Length: 11\r\n\r\n{\"ok\":true}";
		if (write(fd, h, strlen(h)) < 0)
			a->got = false;
	}
	close(fd);
	return NULL;
}

static void agent_start(struct agent *a, bool stream)
{
	memset(a, 0, sizeof(*a));
	a->stream = stream;
	assert_int_equal(pipe(a->release), 0);
	a->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	assert_int_equal(bind(a->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(a->lfd, 4), 0);
	assert_int_equal(getsockname(a->lfd, (struct sockaddr *)&sa, &sl), 0);
	a->port = ntohs(sa.sin_port);
	assert_int_equal(pthread_create(&a->t, NULL, fake_agent_main, a), 0);
}

static void agent_stop(struct agent *a)
{
	shutdown(a->lfd, SHUT_RDWR);
	assert_true(write(a->release[1], "x", 1) == 1);
	pthread_join(a->t, NULL);
	close(a->lfd);
	close(a->release[0]), close(a->release[1]);
}

/* relay_conn - connect to the relay socket (from whichever process calls it) */
static int relay_conn(const char *path)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
		return -1;
	return fd;
}

/* read_all - until EOF, into buf (NUL-terminated) */
static size_t read_all(int fd, char *buf, size_t cap)
{
	size_t n = 0;
	ssize_t r;
	while (n < cap - 1 && (r = read(fd, buf + n, cap - 1 - n)) > 0)
		n += (size_t)r;
	buf[n] = '\0';
	return n;
}

/* A worker that sends one request through its relay: a real child process, the relay's worker.
 * It waits for the socket's path on go[0], sends req, and exits 0 if the answer contains want
 * (stream: it reports the first line on said[1] before it reads on). */
struct relay_child {
	pid_t pid;
	int go[2], said[2];
};

static void relay_child_start(struct fake *f, struct relay_child *c, const char *req,
			      const char *want, bool stream)
{
	assert_int_equal(pipe(c->go), 0);
	assert_int_equal(pipe(c->said), 0);
	/* the setup's sleeping child is not the one that will connect */
	kill(f->w.pid, SIGKILL);
	waitpid(f->w.pid, NULL, 0);
	fflush(NULL);
	c->pid = fork();
	assert_true(c->pid >= 0);
	if (c->pid == 0) {
		char path[200] = "";
		ssize_t n = read(c->go[0], path, sizeof(path) - 1);
		if (n <= 0)
			_exit(2);
		path[n] = '\0';
		int fd = relay_conn(path);
		if (fd < 0 || write(fd, req, strlen(req)) != (ssize_t)strlen(req))
			_exit(3);
		static char ans[16384];
		if (stream) {
			size_t got = 0;
			while (!strstr(ans, "progress") && got < sizeof(ans) - 1) {
				ssize_t r = read(fd, ans + got, sizeof(ans) - 1 - got);
				if (r <= 0)
					_exit(4);
				got += (size_t)r;
				ans[got] = '\0';
			}
			if (write(c->said[1], "1", 1) != 1)
				_exit(5);
			read_all(fd, ans + got, sizeof(ans) - got);
		} else {
			read_all(fd, ans, sizeof(ans));
		}
		_exit(strstr(ans, want) ? 0 : 1);
	}
	/* the child's ends are the child's: if it exits early, the test reads EOF, not forever */
	close(c->go[0]);
	close(c->said[1]);
	f->w.pid = c->pid;
}

static void relay_child_close(struct relay_child *c)
{
	close(c->go[1]), close(c->said[0]);
}

static void relay_setup_dir(struct fake *f, char *dir, size_t cap)
{
	snprintf(dir, cap, "/tmp/kg-test-relay.XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(f->w.ipc_path, sizeof(f->w.ipc_path), "%s/w.ipc", dir);
}

static int wait_child(pid_t pid)
{
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return status;
}

#define SECRET "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* an agent endpoint goes through, with the sandbox's secret and nothing else the worker added */
static void test_relay_forwards_the_agent_only(void **st)
{
	struct fake *f = *st;
	struct agent a;
	struct relay_child c;
	char dir[64], base[64], sock[200];
	f->cfg.kubernetes = true;
	relay_setup_dir(f, dir, sizeof(dir));
	agent_start(&a, false);
	relay_child_start(f, &c, "GET /health HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer "
			  SECRET "\r\nX-Evil: 1\r\n\r\n", "{\"ok\":true}", false);
	snprintf(base, sizeof(base), "http://127.0.0.1:%d", a.port);
	assert_int_equal(sandbox_kube_relay_test(&f->w, base, sock, sizeof(sock)), 0);
	assert_int_equal(write(c.go[1], sock, strlen(sock)), (ssize_t)strlen(sock));
	int status = wait_child(c.pid);
	f->w.pid = 0;
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	agent_stop(&a);
	assert_true(a.got);
	assert_non_null(strstr(a.req, "GET /health HTTP/1.1\r\n"));
	assert_non_null(strstr(a.req, "Authorization: Bearer " SECRET "\r\n"));
	assert_null(strstr(a.req, "X-Evil")); /* only the headers the agent reads go on */
	sandbox_kube_worker_gone(&f->w);
	assert_int_equal(access(sock, F_OK), -1); /* the socket goes with the worker */
	relay_child_close(&c);
	rmdir(dir);
}

/* the /execute stream is relayed as it arrives, not after the agent has finished */
static void test_relay_streams(void **st)
{
	struct fake *f = *st;
	struct agent a;
	struct relay_child c;
	char dir[64], base[64], sock[200], one;
	f->cfg.kubernetes = true;
	relay_setup_dir(f, dir, sizeof(dir));
	agent_start(&a, true);
	relay_child_start(f, &c, "POST /execute HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
			  "application/json\r\nContent-Length: 2\r\n\r\n{}", "result", true);
	snprintf(base, sizeof(base), "http://127.0.0.1:%d", a.port);
	assert_int_equal(sandbox_kube_relay_test(&f->w, base, sock, sizeof(sock)), 0);
	assert_int_equal(write(c.go[1], sock, strlen(sock)), (ssize_t)strlen(sock));
	/* the child has the first line while the agent still holds the rest */
	assert_int_equal(read(c.said[0], &one, 1), 1);
	assert_int_equal(write(a.release[1], "x", 1), 1);
	int status = wait_child(c.pid);
	f->w.pid = 0;
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	agent_stop(&a);
	sandbox_kube_worker_gone(&f->w);
	relay_child_close(&c);
	rmdir(dir);
}

/* anything but an agent endpoint (a raw API path, a traversal, a query, an absolute URL, a
 * method the endpoint does not take) ends the worker, and nothing reaches the pod */
static void test_relay_raw_paths_end_the_worker(void **st)
{
	static const char *const reqs[] = {
		"GET /api/v1/namespaces/kg-test/secrets HTTP/1.1\r\n\r\n",
		"GET /health/../../../../api/v1/namespaces/kg-test/pods HTTP/1.1\r\n\r\n",
		"GET /health?watch=1 HTTP/1.1\r\n\r\n",
		"DELETE /claim HTTP/1.1\r\n\r\n",
		"GET /execute HTTP/1.1\r\n\r\n",
		"GET /files HTTP/1.1\r\n\r\n",
		"GET http://10.0.0.1:8888/health HTTP/1.1\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
		void *fst;
		setup(&fst);
		struct fake *f = fst;
		struct agent a;
		struct relay_child c;
		char dir[64], base[64], sock[200];
		f->cfg.kubernetes = true;
		relay_setup_dir(f, dir, sizeof(dir));
		agent_start(&a, false);
		relay_child_start(f, &c, reqs[i], "never", false);
		snprintf(base, sizeof(base), "http://127.0.0.1:%d", a.port);
		assert_int_equal(sandbox_kube_relay_test(&f->w, base, sock, sizeof(sock)), 0);
		assert_int_equal(write(c.go[1], sock, strlen(sock)), (ssize_t)strlen(sock));
		int status = wait_child(c.pid);
		f->w.pid = 0;
		if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
			fail_msg("request %zu: the worker was not ended (status 0x%x)", i, status);
		agent_stop(&a);
		assert_false(a.got);
		sandbox_kube_worker_gone(&f->w);
		relay_child_close(&c);
		rmdir(dir);
		teardown(&fst);
	}
	(void)st;
}

/* another process (here: the test itself) gets nothing from a worker's relay */
static void test_relay_only_its_worker(void **st)
{
	struct fake *f = *st;
	struct agent a;
	char dir[64], base[64], sock[200], ans[256];
	f->cfg.kubernetes = true;
	relay_setup_dir(f, dir, sizeof(dir));
	agent_start(&a, false);
	snprintf(base, sizeof(base), "http://127.0.0.1:%d", a.port);
	assert_int_equal(sandbox_kube_relay_test(&f->w, base, sock, sizeof(sock)), 0);
	struct stat sb;
	assert_int_equal(stat(sock, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
	int fd = relay_conn(sock);
	assert_true(fd >= 0);
	const char *req = "GET /health HTTP/1.1\r\n\r\n";
	/* the relay may close before the request is written: either way no answer comes back
	 * (and no SIGPIPE: a write to the closed socket ended the whole test program, 1 run in 30) */
	ssize_t wr = send(fd, req, strlen(req), MSG_NOSIGNAL);
	(void)wr;
	assert_int_equal(read_all(fd, ans, sizeof(ans)), 0);
	close(fd);
	agent_stop(&a);
	assert_false(a.got);
	assert_alive(f);
	sandbox_kube_worker_gone(&f->w);
	rmdir(dir);
}

/* ---- REQ_TOKEN: --credentials user ---- */

static int delivered;
static void f_deliver(pid_t pid, const char *session, uint32_t seq, const struct utok_answer *a)
{
	(void)pid, (void)session, (void)seq, (void)a;
	delivered++;
}

/* token_setup - a worker of alice's session on a --credentials user server */
static int token_setup(void **st)
{
	setup(st);
	struct fake *f = *st;
	f->cfg.credentials = "user";
	f->user = "alice@example.com";
	utok_init(f_deliver);
	return 0;
}

/* ask - REQ_TOKEN for scopes in phase; the monitor's answer, read from the worker's end */
static int ask(struct fake *f, unsigned phase, const char *scopes, struct ipc_msg *ans)
{
	struct ipc_buf b;
	assert_int_equal(ipc_pack_req_token(&b, 9, scopes), 0);
	int r = dispatch(f, phase, &b);
	if (r == 0 && ans) {
		assert_int_equal(chan_recv(f->peer, ans, 0, NULL), 0);
		assert_int_equal(ans->type, IPC_ANS_TOKEN);
		assert_int_equal(ans->seq, 9);
	}
	return r;
}

static bool ans_says(const struct ipc_msg *a, const char *what)
{
	char e[1100];
	ipc_bytes_str(a->u.token_ans.error, e, sizeof(e));
	return strstr(e, what) != NULL;
}

/* keep - a sign-in of user with an access token good for an hour, scopes granted */
static void keep(const char *user, const char *access, const char *scope)
{
	struct oidc_grant g = { .refresh_token = strdup("1//refresh-of-a-test"), .access_token = strdup(access),
				.expires_in = 3600 };
	snprintf(g.scope, sizeof(g.scope), "%s", scope);
	utok_signed_in(user, &g);
	assert_null(g.refresh_token); /* taken: the master's only copy */
}

static void test_token_in_another_mode(void **st)
{
	struct fake *f = *st;
	f->cfg.credentials = "server";
	hello(f);
	assert_int_equal(ask(f, IPC_PH_SESSION, "https://www.googleapis.com/auth/cloud-platform", NULL), -EPERM);
	assert_ended(f);
}

static void test_token_before_a_session(void **st)
{
	struct fake *f = *st;
	hello(f);
	assert_int_equal(ask(f, IPC_PH_IDLE, "https://www.googleapis.com/auth/cloud-platform", NULL), -EPERM);
	assert_ended(f);
}

static void test_token_scopes_no_honest_worker_sends(void **st)
{
	static const char *const bad[] = { "a,,b", ",a", "a,", "a b", "a\tb", "a\"b", "\x7f" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		token_setup(st);
		struct fake *f = *st;
		hello(f);
		assert_int_equal(ask(f, IPC_PH_SESSION, bad[i], NULL), -EPERM);
		assert_ended(f);
		teardown(st);
	}
	char many[2000] = "s";
	for (int i = 0; i < 40; i++)
		strcat(many, ",s");
	token_setup(st);
	struct fake *f = *st;
	hello(f);
	assert_int_equal(ask(f, IPC_PH_SESSION, many, NULL), -EPERM);
	assert_ended(f);
	teardown(st);
	*st = NULL;
}

static void test_token_is_the_sessions_users_only(void **st)
{
	struct fake *f = *st;
	hello(f);
	keep("alice@example.com", "ya29.alice", "openid email https://www.googleapis.com/auth/cloud-platform");
	struct ipc_msg a;
	assert_int_equal(ask(f, IPC_PH_SESSION, "https://www.googleapis.com/auth/cloud-platform", &a), 0);
	assert_true(a.u.token_ans.ok);
	assert_int_equal(a.u.token_ans.token.len, strlen("ya29.alice"));
	assert_memory_equal(a.u.token_ans.token.ptr, "ya29.alice", a.u.token_ans.token.len);
	assert_true(a.u.token_ans.expires_in > 3000 && a.u.token_ans.expires_in <= 3600);
	ipc_msg_free(&a);
	/* a Cloud API's own scope is part of cloud-platform */
	assert_int_equal(ask(f, IPC_PH_SESSION, "https://www.googleapis.com/auth/devstorage.full_control,"
			     "https://www.googleapis.com/auth/cloud-platform", &a), 0);
	assert_true(a.u.token_ans.ok);
	ipc_msg_free(&a);
	/* a scope outside the grant: refused with a sentence, the worker lives */
	assert_int_equal(ask(f, IPC_PH_SESSION, "https://www.googleapis.com/auth/drive", &a), 0);
	assert_false(a.u.token_ans.ok);
	assert_int_equal(a.u.token_ans.status, 403);
	assert_true(ans_says(&a, "does not include the scope https://www.googleapis.com/auth/drive"));
	assert_int_equal(a.u.token_ans.token.len, 0);
	ipc_msg_free(&a);
	/* another session's user without a grant of their own gets nothing of alice's */
	f->user = "bob@example.com";
	assert_int_equal(ask(f, IPC_PH_SESSION, "https://www.googleapis.com/auth/cloud-platform", &a), 0);
	assert_false(a.u.token_ans.ok);
	assert_int_equal(a.u.token_ans.status, 403);
	assert_true(ans_says(&a, "Sign in to the server again"));
	assert_int_equal(a.u.token_ans.token.len, 0);
	ipc_msg_free(&a);
	/* a session without a signed-in user (auth none: "local") */
	f->user = "local";
	assert_int_equal(ask(f, IPC_PH_SESSION, "https://www.googleapis.com/auth/cloud-platform", &a), 0);
	assert_false(a.u.token_ans.ok);
	ipc_msg_free(&a);
	/* the session is ending: refused, not a breach */
	f->user = "alice@example.com";
	assert_int_equal(ask(f, IPC_PH_ENDING, "https://www.googleapis.com/auth/cloud-platform", &a), 0);
	assert_false(a.u.token_ans.ok);
	ipc_msg_free(&a);
	assert_alive(f);
	assert_int_equal(delivered, 0); /* all of it was known at once */
}

static void test_token_rate_is_bounded(void **st)
{
	struct fake *f = *st;
	hello(f);
	keep("alice@example.com", "ya29.alice", "https://www.googleapis.com/auth/cloud-platform");
	int ok = 0, refused = 0;
	for (int i = 0; i < WORKER_TOKEN_BURST + 40; i++) {
		struct ipc_msg a;
		assert_int_equal(ask(f, IPC_PH_SESSION, "https://www.googleapis.com/auth/cloud-platform", &a), 0);
		if (a.u.token_ans.ok)
			ok++;
		else if (a.u.token_ans.status == 503 && ans_says(&a, "too often"))
			refused++;
		ipc_msg_free(&a);
	}
	/* the burst is served; the bucket refills at 30 a minute, so of 40 more only those the
	 * loop's own duration refilled are (it would have to take 80 s to refill them all) */
	assert_true(ok >= WORKER_TOKEN_BURST);
	assert_true(refused >= 1);
	assert_int_equal(ok + refused, WORKER_TOKEN_BURST + 40);
	assert_alive(f);
}

/* every worker -> master type is permitted in at least one phase, and every answer-flagged
 * type and every master -> worker type is refused from a worker in every phase */
static void test_table_shape(void **st)
{
	(void)st;
	for (uint32_t t = 1; t < IPC_TYPE_MAX; t++) {
		const struct ipc_contract *c = ipc_contract_of(t);
		assert_non_null(c);
		assert_true(c->phases != 0);
		assert_true(c->dir == IPC_W2M || c->dir == IPC_M2W);
		for (unsigned ph = IPC_PH_STARTING; ph <= IPC_PH_ENDING; ph <<= 1)
			if (c->dir == IPC_M2W)
				assert_false(ipc_permitted(t, IPC_W2M, ph));
	}
	assert_true(ipc_permitted(IPC_HELLO, IPC_W2M, IPC_PH_STARTING));
	assert_false(ipc_permitted(IPC_HELLO, IPC_W2M, IPC_PH_SESSION));
	assert_null(ipc_contract_of(IPC_TYPE_MAX));
}

int main(void)
{
	log_init("test", LOG_LVL_OFF);
	/* as in the master (master/sig.c): a write to a socket the other side has closed is EPIPE,
	 * which the tests expect (a relay refuses a stranger by closing at once), not the end of
	 * the test process (it died of SIGPIPE in about one run of four) */
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_honest_worker_is_answered, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hello_with_another_pid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_out_of_phase_before_hello, setup, teardown),
		cmocka_unit_test_setup_teardown(test_out_of_phase_idle, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hello_twice, setup, teardown),
		cmocka_unit_test_setup_teardown(test_once_only_twice, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unsolicited_answer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unsolicited_accepted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_master_only_messages, setup, teardown),
		cmocka_unit_test_setup_teardown(test_after_the_end_nothing_counts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_state, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sandbox_named_by_the_worker, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sandbox_unknown_op, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sandbox_asked_twice, setup, teardown),
		cmocka_unit_test_setup_teardown(test_adc_read_by_the_master, setup, teardown),
		cmocka_unit_test_setup_teardown(test_adc_in_a_mode_without_one, setup, teardown),
		cmocka_unit_test(test_kube_names_nothing),
		cmocka_unit_test(test_kube_credential_messages_gone),
		cmocka_unit_test_setup_teardown(test_kube_spawn_refused_by_the_master, setup, teardown),
		cmocka_unit_test_setup_teardown(test_relay_forwards_the_agent_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_relay_streams, setup, teardown),
		cmocka_unit_test(test_relay_raw_paths_end_the_worker),
		cmocka_unit_test_setup_teardown(test_relay_only_its_worker, setup, teardown),
		cmocka_unit_test_setup_teardown(test_token_in_another_mode, token_setup, teardown),
		cmocka_unit_test_setup_teardown(test_token_before_a_session, token_setup, teardown),
		cmocka_unit_test(test_token_scopes_no_honest_worker_sends),
		cmocka_unit_test_setup_teardown(test_token_is_the_sessions_users_only, token_setup, teardown),
		cmocka_unit_test_setup_teardown(test_token_rate_is_bounded, token_setup, teardown),
		cmocka_unit_test(test_table_shape),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
