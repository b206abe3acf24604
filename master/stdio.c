/*
 * stdio.c - the stdio transport: one MCP session, one worker (serve's local mode).
 *
 * Newline-delimited JSON-RPC from stdin goes to the worker as REQ_MCP, one line a message; the
 * worker's answers and notifications go to stdout, one line each. The master does not parse
 * JSON: it frames lines, bounds them, and keeps what supervision needs, which the worker tells
 * it (NOTE_SESSION: the initialize to replay; NOTE_ACCEPTED: the id of a slow request).
 *
 * If the worker crashes, its in-flight calls are answered with a JSON-RPC error, a fresh worker
 * is started (throttled if it keeps dying at startup), and the client's initialize is replayed
 * to it so the session goes on. stdin EOF ends everything within a second.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/frame.h"
#include "master/monitor.h"
#include "master/sandbox.h"
#include "master/stdio.h"
#include "policy/limits.h"

struct inflight {
	uint32_t seq;
	bool replay;
	char *id;     /* JSON text of the request id, once the worker said it accepted it */
	char *msg;    /* the line itself until then: if the worker dies before reading it, the
		       * next worker gets it (once) */
	size_t len;
	bool resent;
};

struct relay {
	const struct serve_config *cfg;
	char rundir[512];
	char session[SESSION_ID_HEX + 1];
	struct worker w;
	unsigned nspawned;
	uint32_t seq;
	bool eof, done;
	struct frame in; /* stdin's lines, bounded by MCP_MAX_MESSAGE */
	/* supervision */
	char *init;
	size_t init_len;
	struct inflight *fl;
	size_t nfl, capfl;
	struct spawn_throttle throttle; /* start-up failures; a configuration error stops serve */
	bool served; /* the current worker answered something: it did not die at startup */
};

/* out_line - one message and a newline to stdout; a closed stdout ends the session */
static void out_line(struct relay *r, const char *msg, size_t len)
{
	struct iovec iov[2] = { { (void *)msg, len }, { "\n", 1 } };
	size_t total = len + 1;
	while (total > 0) {
		ssize_t n = writev(STDOUT_FILENO, iov, 2);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			log_info("stdout closed (%s); ending the session", strerror(errno));
			r->done = true;
			return;
		}
		total -= (size_t)n;
		for (int i = 0; i < 2 && n > 0; i++) {
			size_t take = (size_t)n < iov[i].iov_len ? (size_t)n : iov[i].iov_len;
			iov[i].iov_base = (char *)iov[i].iov_base + take;
			iov[i].iov_len -= take;
			n -= (ssize_t)take;
		}
	}
}

/* fl_add - remember a message sent to the worker until it answers */
static struct inflight *fl_add(struct relay *r, uint32_t seq, bool replay)
{
	if (r->nfl == r->capfl) {
		r->capfl = r->capfl ? r->capfl * 2 : 16;
		r->fl = realloc(r->fl, r->capfl * sizeof(*r->fl));
		if (!r->fl)
			abort();
	}
	r->fl[r->nfl] = (struct inflight){ .seq = seq, .replay = replay };
	return &r->fl[r->nfl++];
}

static struct inflight *fl_find(struct relay *r, uint32_t seq)
{
	for (size_t i = 0; i < r->nfl; i++)
		if (r->fl[i].seq == seq)
			return &r->fl[i];
	return NULL;
}

static void fl_remove(struct relay *r, struct inflight *f)
{
	free(f->id);
	free(f->msg);
	*f = r->fl[--r->nfl];
}

/* relay_send_line - a complete line from stdin goes to the worker */
static void relay_send_line(void *ctx, const char *line, size_t len)
{
	struct relay *r = ctx;
	struct ipc_buf b;
	uint32_t seq = ++r->seq;
	if (ipc_pack_req_mcp(&b, seq, line, len, false) != 0)
		return;
	struct inflight *f = fl_add(r, seq, false);
	if ((f->msg = malloc(len)) != NULL) {
		memcpy(f->msg, line, len);
		f->len = len;
	}
	if (channel_send(&r->w, &b) != 0)
		log_warn("could not pass a message to the worker; it will be answered when it restarts");
}

/* relay_send_toobig - a line we dropped: the worker answers it with an error */
static void relay_send_toobig(void *ctx, const char *head, size_t hlen, const char *tail,
			      size_t tlen, uint64_t size)
{
	struct relay *r = ctx;
	log_warn("dropped a %llu-byte message: over the %u-byte limit", (unsigned long long)size,
		 MCP_MAX_MESSAGE);
	struct ipc_buf b;
	uint32_t seq = ++r->seq;
	if (ipc_pack_req_mcp_toobig(&b, seq, head, hlen, tail, tlen, size) == 0) {
		fl_add(r, seq, false);
		channel_send(&r->w, &b);
	}
}

/* relay_read_stdin - one read; EOF ends the session */
static void relay_read_stdin(struct relay *r)
{
	char buf[65536];
	ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	const struct frame_ops ops = { r, relay_send_line, relay_send_toobig };
	if (n <= 0) {
		frame_finish(&r->in, &ops); /* a last line without a newline */
		log_info("stdin closed; shutting down");
		r->eof = true;
		return;
	}
	frame_feed(&r->in, buf, (size_t)n, &ops);
}

/* relay_start_worker - a fresh worker for the session */
static void relay_start_worker(struct relay *r)
{
	int rc = spawn_worker(&r->w, r->cfg, r->rundir, ++r->nspawned, r->session);
	r->served = false;
	if (rc != 0) {
		log_error("cannot start a worker: %s", strerror(-rc));
		spawn_start_failed(&r->throttle);
	}
}

/* relay_worker_died - answer what it had in flight, then plan its replacement */
static void relay_worker_died(struct relay *r, int status)
{
	char how[96];
	proc_status_text(status, how, sizeof(how));
	bool crash = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* a worker that dies before serving anything is a start-up failure: throttle (Postfix);
	 * spawn_ended reports it once per interval, or stops on a configuration error */
	bool startup = !r->eof && !r->done && spawn_ended(&r->throttle, &r->w, status, r->served, false);
	if (r->throttle.stopped[0])
		r->done = true; /* serve exits: no worker could serve this session */
	if (crash && !r->eof && !startup)
		log_error("worker pid %d %s", (int)r->w.pid, how);
	else if (!startup)
		log_info("worker pid %d %s", (int)r->w.pid, how);
	for (size_t i = 0; i < r->nfl;) {
		struct inflight *f = &r->fl[i];
		if (!f->replay && !r->eof && !f->id && f->msg && !f->resent) {
			f->resent = true; /* never read: the next worker gets it */
			i++;
			continue;
		}
		if (!f->replay && !r->eof && f->id) {
			char why[400];
			snprintf(why, sizeof(why), "The sandbox process crashed while handling this "
				 "request (worker %s). A fresh one has been started; the call can be "
				 "retried, and files in /app/persist are gone.", how);
			char *msg = jsonrpc_error(f->id, -32603, why, "worker_crashed");
			if (msg)
				out_line(r, msg, strlen(msg));
			free(msg);
		} else if (!f->replay && !r->eof) {
			log_warn("a message was in flight through two worker crashes; dropping it");
		}
		fl_remove(r, f);
	}
	r->w.pid = 0;
	spawn_stop(&r->w, 0, true);
}

/* ---- what the monitor (master/monitor.c) asks of this transport; ctx is the relay ---- */

/* relay_on_hello - a new worker: replay the session's initialize and what never got read */
static void relay_on_hello(void *ctx)
{
	struct relay *r = ctx;
	if (r->init) {
		struct ipc_buf b;
		uint32_t seq = ++r->seq;
		if (ipc_pack_req_mcp(&b, seq, r->init, r->init_len, true) == 0) {
			fl_add(r, seq, true);
			channel_send(&r->w, &b);
			log_info("replayed the session's initialize to the new worker");
		}
	}
	for (size_t i = 0; i < r->nfl; i++) {
		struct inflight *p = &r->fl[i];
		struct ipc_buf b;
		if (p->resent && p->msg && ipc_pack_req_mcp(&b, p->seq, p->msg, p->len, false) == 0)
			channel_send(&r->w, &b);
	}
}

static enum mon_pending relay_on_answer(void *ctx, uint32_t seq, struct ipc_bytes msg)
{
	struct relay *r = ctx;
	struct inflight *f = fl_find(r, seq);
	if (!f)
		return MON_NEVER;
	r->served = true;
	spawn_served(&r->throttle);
	if (!f->replay && msg.len > 0)
		out_line(r, msg.ptr, msg.len);
	fl_remove(r, f);
	return MON_PENDING;
}

static void relay_on_note(void *ctx, uint32_t rel, struct ipc_bytes msg)
{
	(void)rel; /* one client: everything goes to stdout */
	out_line(ctx, msg.ptr, msg.len);
}

static enum mon_pending relay_on_accepted(void *ctx, uint32_t seq, struct ipc_bytes id)
{
	struct inflight *f = fl_find(ctx, seq);
	if (!f)
		return MON_NEVER;
	if (!f->id) {
		f->id = strndup(id.ptr, id.len);
		free(f->msg); /* read and accepted: it will not be sent again */
		f->msg = NULL;
	}
	return MON_PENDING;
}

static void relay_on_session(void *ctx, const struct ipc_session *sess)
{
	struct relay *r = ctx;
	free(r->init);
	r->init = malloc(sess->init.len ? sess->init.len : 1);
	if (!r->init)
		abort();
	memcpy(r->init, sess->init.ptr, sess->init.len);
	r->init_len = sess->init.len;
}

static void relay_on_state(void *ctx, bool busy)
{
	log_debug("worker %d is %s", (int)((struct relay *)ctx)->w.pid, busy ? "busy" : "idle");
}

/* relay_on_quota - one stdio session is one user's only sandbox: always yes */
static bool relay_on_quota(void *ctx, char *err, size_t errlen)
{
	(void)ctx, (void)err, (void)errlen;
	return true;
}

static void relay_on_call(void *ctx, const struct ipc_call *c)
{
	(void)ctx, (void)c;
}

static const struct mon_ops relay_mon_ops = {
	.hello = relay_on_hello, .mcp_answer = relay_on_answer, .mcp_note = relay_on_note,
	.accepted = relay_on_accepted, .session = relay_on_session, .state = relay_on_state,
	.quota = relay_on_quota, .call = relay_on_call,
};

/* relay_from_worker - one message from the worker, through the monitor. The stdio worker has
 * its session from the start: after HELLO it is in session. */
static int relay_from_worker(struct relay *r, struct ipc_msg *m)
{
	struct mon_peer peer = { &r->w, r->w.hello ? IPC_PH_SESSION : IPC_PH_STARTING,
				 &relay_mon_ops, r };
	return mon_dispatch(&peer, m);
}

/* relay_drain_worker - everything the worker has sent so far */
static void relay_drain_worker(struct relay *r)
{
	for (;;) {
		struct ipc_msg m;
		int rc = chan_recv(r->w.sock, &m, NNG_FLAG_NONBLOCK, NULL);
		if (rc == -EAGAIN || rc == -ESHUTDOWN)
			return;
		if (rc == -EPROTO) {
			mon_end(&r->w, "sent an undecodable message");
			return;
		}
		if (rc == 0) {
			int dr = relay_from_worker(r, &m);
			ipc_msg_free(&m);
			if (dr != 0)
				return;
		}
		if (r->w.pid <= 0)
			return;
	}
}

/* relay_reap - collect every child that ended */
static void relay_reap(struct relay *r)
{
	int status;
	pid_t pid;
	const struct sandbox_backend *sb = sandbox_backend(r->cfg);
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		if (pid == r->w.pid) {
			relay_drain_worker(r); /* what it said before it died still counts */
			relay_worker_died(r, status);
		}
		else if (!sb->reaped || !sb->reaped(&r->w, pid, status))
			log_debug("reaped pid %d", (int)pid);
	}
}

/* stdio_serve - the stdio transport's loop */
int stdio_serve(const struct serve_config *cfg)
{
	struct relay *r = calloc(1, sizeof(*r));
	if (!r)
		return 1;
	r->cfg = cfg;
	frame_init(&r->in, MCP_MAX_MESSAGE);
	int rc = sig_init();
	if (rc == 0)
		rc = spawn_runtime_dir(r->rundir, sizeof(r->rundir));
	if (rc != 0) {
		log_error("cannot create the runtime directory: %s", strerror(-rc));
		free(r);
		return 1;
	}
	struct stat st;
	if (fstat(STDOUT_FILENO, &st) == 0 && S_ISFIFO(st.st_mode) &&
	    fcntl(STDOUT_FILENO, F_SETPIPE_SZ, STDIO_PIPE_BYTES) < 0)
		log_debug("stdout stays a pipe of its own size: %s", strerror(errno));
	random_hex(r->session, SESSION_ID_HEX / 2);
	log_info("kode-gopher %s serving MCP on stdio (session %.8s…)", KG_VERSION, r->session);
	relay_start_worker(r);

	while (!r->done) {
		struct pollfd p[3];
		int np = 0, ifd = -1, wfd = -1;
		p[np++] = (struct pollfd){ .fd = sig_fd(), .events = POLLIN };
		if (r->w.pid > 0 && r->w.recv_fd >= 0) {
			wfd = np;
			p[np++] = (struct pollfd){ .fd = r->w.recv_fd, .events = POLLIN };
		}
		/* lines the worker has not taken yet are held here: past the bound, stdin waits
		 * (the client's pipe fills) instead of this process growing */
		size_t held = 0;
		for (size_t i = 0; i < r->nfl; i++)
			held += r->fl[i].msg ? r->fl[i].len : 0;
		if (channel_live(&r->w) && !r->eof && held < STDIO_MAX_HELD_BYTES) {
			ifd = np;
			p[np++] = (struct pollfd){ .fd = STDIN_FILENO, .events = POLLIN };
		}
		int timeout = -1;
		double now = mono_s();
		if (r->w.pid <= 0 && !r->eof) {
			double wait = r->throttle.until - now;
			timeout = wait > 0 ? (int)(wait * 1000) + 1 : 0;
		} else if (r->w.pid > 0 && !r->w.hello) {
			double wait = r->w.started + WORKER_HELLO_TIMEOUT_MS / 1000.0 - now;
			timeout = wait > 0 ? (int)(wait * 1000) + 1 : 0;
		}
		if (poll(p, (nfds_t)np, timeout) < 0 && errno != EINTR)
			break;
		unsigned sig = sig_take();
		if (sig & SIG_CHLD)
			relay_reap(r);
		if (sig & (SIG_TERM | SIG_HUP)) {
			log_info("signal received; shutting down");
			break;
		}
		if (wfd >= 0 && r->w.pid > 0 && (p[wfd].revents & POLLIN))
			relay_drain_worker(r);
		if (ifd >= 0 && r->w.pid > 0 && (p[ifd].revents & (POLLIN | POLLHUP | POLLERR)))
			relay_read_stdin(r);
		if (r->eof || r->done)
			break;
		if (spawn_hello_overdue(&r->w, mono_s()))
			mon_end(&r->w, "said no HELLO within %d ms of its start", WORKER_HELLO_TIMEOUT_MS);
		if (r->w.pid <= 0 && spawn_may_start(&r->throttle))
			relay_start_worker(r);
	}
	/* a Kubernetes worker deletes its SandboxClaim on the way out: give it time for that */
	spawn_stop(&r->w, r->cfg->kubernetes ? WORKER_LEAVE_KUBE_MS : WORKER_LEAVE_LOCAL_MS, true);
	spawn_runtime_dir_remove(r->rundir);
	while (r->nfl)
		fl_remove(r, &r->fl[0]);
	free(r->fl);
	frame_free(&r->in);
	free(r->init);
	rc = r->throttle.stopped[0] ? 1 : 0;
	free(r);
	return rc;
}
