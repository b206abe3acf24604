/*
 * test_agent_http.c - unit tests for the agent's HTTP API (agent/server.c) and the worker's
 * client for it (worker/agent_client.c), over real unix sockets.
 *
 * Each test starts the server in-process on a socket in a temporary directory with a table of
 * fake handlers (so the HTTP layer is tested without Go), then talks to it with agent_client or,
 * for requests the client never makes, with lib/http_client.c directly. A small hand-written HTTP responder
 * sends the client broken streams. test_real_pipeline runs the real pipeline behind the server
 * with a standard-library-only runtime directory; it is skipped when pipeline.c is not linked
 * in or `go` is not on PATH.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/artifacts.h"
#include "agent/pipeline.h"
#include "agent/runproc.h"
#include "agent/server.h"
#include "ipc/log.h"
#include "lib/http_client.h"
#include "worker/agent_client.h"

/* Resolved only when agent/pipeline.c is part of the link. */
#pragma weak pipeline_execute
#pragma weak pipeline_doc

#define ERRLEN 512

/* ---- fake handlers ---- */

struct fake {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool block;          /* execute waits for release after its progress events */
	bool started;        /* execute has sent its progress */
	bool released;
	int finished;        /* executes that returned */
	size_t big;          /* bytes of "stdout" in the result */
	int sleep_ms;        /* execute sleeps this long before returning */
	bool odd_progress;   /* also send an oversized and a non-UTF-8 progress message */
	bool child;          /* run a real child through runproc (prints, then sleeps 30 s) */
};

/* fake_execute - three progress events, optionally block or sleep, echo the request */
static json_t *fake_execute(void *ctx, json_t *req, pipeline_progress_fn progress, void *pctx)
{
	struct fake *f = ctx;
	progress(pctx, "normalize", "normalizing");
	progress(pctx, "build", "building");
	progress(pctx, "run", "running");
	if (f->odd_progress) {
		char *m = malloc(100001);
		memset(m, 'm', 100000);
		memcpy(m + 2047, "\xc3\xa9", 2); /* an é across the server's 2048-byte cut */
		m[100000] = '\0';
		progress(pctx, "build", m);
		free(m);
		progress(pctx, "run", "caf\xe9 \xff");
	}
	pthread_mutex_lock(&f->mu);
	f->started = true;
	pthread_cond_broadcast(&f->cv);
	if (f->block) {
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 20; /* never hang the suite */
		while (!f->released)
			if (pthread_cond_timedwait(&f->cv, &f->mu, &dl) != 0)
				break;
	}
	pthread_mutex_unlock(&f->mu);
	if (f->sleep_ms)
		usleep((useconds_t)f->sleep_ms * 1000);
	if (f->child) {
		static const char *const argv[] = { "sh", "-c", "echo child says hi; exec sleep 30", NULL };
		static const char *const envp[] = { "PATH=/usr/bin:/bin", NULL };
		struct runproc_opts o = { .argv = argv, .envp = envp, .timeout_ms = 60000 };
		struct runproc_result rr;
		if (runproc_run(&o, &rr) == 0)
			runproc_result_free(&rr);
	}

	json_t *res = json_pack("{s:s, s:i, s:O}", "phase", "run", "exit_code", 0, "echo", req);
	if (f->big) {
		char *s = malloc(f->big + 1);
		for (size_t i = 0; i < f->big; i++)
			s[i] = (char)('a' + i % 26);
		s[f->big] = '\0';
		json_object_set_new(res, "stdout", json_string(s));
		free(s);
	}
	pthread_mutex_lock(&f->mu);
	f->finished++;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	return res;
}

/* fake_doc - echo the package */
static json_t *fake_doc(void *ctx, json_t *req)
{
	(void)ctx;
	return json_pack("{s:b, s:s+, s:b}", "ok", 1, "text", "package ",
			 json_string_value(json_object_get(req, "package")), "truncated", 0);
}

/* fake_wait_started - until execute has sent its progress */
static void fake_wait_started(struct fake *f)
{
	pthread_mutex_lock(&f->mu);
	while (!f->started)
		pthread_cond_wait(&f->cv, &f->mu);
	pthread_mutex_unlock(&f->mu);
}

/* fake_release - let a blocked execute return */
static void fake_release(struct fake *f)
{
	pthread_mutex_lock(&f->mu);
	f->released = true;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

/* ---- fixture: a server on a unix socket in a temp dir ---- */

struct fx {
	char dir[64];
	char sock[100];
	char listen[112];
	struct agent_server *srv;
	struct agent_endpoint ep;
	struct fake fake;
};

/* fx_start - start (or restart) the server with the fake handlers */
static void fx_start(struct fx *x, int heartbeat_ms)
{
	struct agent_server_options opt = {
		.listen = x->listen,
		.handlers = { .execute = fake_execute, .doc = fake_doc, .ctx = &x->fake },
		.heartbeat_ms = heartbeat_ms,
	};
	char err[ERRLEN];
	int rc = agent_server_start(&opt, &x->srv, err, sizeof(err));
	if (rc != 0)
		fail_msg("agent_server_start: %d %s", rc, err);
}

/* fx_setup - cmocka setup: temp dir, server, endpoint */
static int fx_setup(void **state)
{
	struct fx *x = calloc(1, sizeof(*x));
	snprintf(x->dir, sizeof(x->dir), "/tmp/kg-ahttp-XXXXXX");
	if (!mkdtemp(x->dir))
		return -1;
	snprintf(x->sock, sizeof(x->sock), "%s/agent.sock", x->dir);
	snprintf(x->listen, sizeof(x->listen), "unix:%s", x->sock);
	pthread_mutex_init(&x->fake.mu, NULL);
	pthread_cond_init(&x->fake.cv, NULL);
	x->ep.unix_path = x->sock;
	x->ep.base_url = "http://localhost";
	fx_start(x, 0);
	*state = x;
	return 0;
}

/* fx_teardown - stop the server, remove the temp dir */
static int fx_teardown(void **state)
{
	struct fx *x = *state;
	fake_release(&x->fake);
	agent_server_stop(x->srv);
	unlink(x->sock);
	rmdir(x->dir);
	free(x);
	return 0;
}

/* ---- lib/http_client.c directly, for requests agent_client never sends ---- */

struct raw {
	long status;
	char *body;
	size_t len;
	char ctype[128];
	char allow[64];
	char te[64];
	char www[64];
};

/* raw_req - one request over the unix socket through lib/http_client.c (not through the
 * agent_client under test); 0, or the client's negative errno */
static int raw_req(const char *sock, const char *method, const char *path,
		   const char *secret, const char *body, size_t len, struct raw *r)
{
	memset(r, 0, sizeof(*r));
	char url[256];
	snprintf(url, sizeof(url), "http://localhost%s", path);
	const char *hdr[] = { "Content-Type: application/json", NULL };
	const char *want[] = { "Allow", "Transfer-Encoding", "WWW-Authenticate", NULL };
	struct http_request q = { .url = url, .method = method, .body = body, .body_len = len,
				  .headers = hdr, .bearer = secret, .unix_socket = sock,
				  .timeout_ms = 20000, .want_headers = want };
	struct http_response a;
	int e = http_perform(&q, &a);
	r->status = a.status;
	r->body = a.body.data; /* taken over: the tests free it */
	r->len = a.body.len;
	snprintf(r->ctype, sizeof(r->ctype), "%.*s", (int)sizeof(r->ctype) - 1, a.content_type);
	snprintf(r->allow, sizeof(r->allow), "%.*s", (int)sizeof(r->allow) - 1, a.header[0]);
	snprintf(r->te, sizeof(r->te), "%.*s", (int)sizeof(r->te) - 1, a.header[1]);
	snprintf(r->www, sizeof(r->www), "%.*s", (int)sizeof(r->www) - 1, a.header[2]);
	return e;
}

/* raw_error_has - the body is {"error": sentence} and the sentence contains want */
static void raw_error_has(const struct raw *r, long status, const char *want)
{
	if (r->status != status)
		fail_msg("status %ld, wanted %ld; body %s", r->status, status,
			 r->body ? r->body : "(none)");
	json_t *j = json_loadb(r->body, r->len, 0, NULL);
	const char *e = json_string_value(json_object_get(j, "error"));
	if (!e || !strstr(e, want))
		fail_msg("error body %s does not contain \"%s\"", r->body ? r->body : "(none)",
			 want);
	assert_int_equal(json_object_size(j), 1);
	assert_string_equal(r->ctype, "application/json");
	json_decref(j);
}

/* claim - agent_client_claim must succeed */
static void claim(struct fx *x)
{
	char err[ERRLEN];
	int rc = agent_client_claim(&x->ep, err, sizeof(err));
	if (rc != 0)
		fail_msg("claim: %d %s", rc, err);
	assert_int_equal(strlen(x->ep.secret), 64);
}

/* ---- progress capture ---- */

struct seen {
	char phases[8][16];
	char messages[8][32];
	size_t lens[8];
	int n;
	volatile int *cancel;   /* set on the first event when non-NULL */
	pid_t kill_pid;         /* SIGKILL this process on the first event when nonzero */
};

/* on_progress - the client's progress callback */
static void on_progress(void *ctx, const char *phase, const char *message)
{
	struct seen *s = ctx;
	if (s->n < 8) {
		snprintf(s->phases[s->n], sizeof(s->phases[0]), "%s", phase);
		snprintf(s->messages[s->n], sizeof(s->messages[0]), "%s", message);
		s->lens[s->n] = strlen(message);
	}
	__atomic_add_fetch(&s->n, 1, __ATOMIC_RELEASE);
	if (s->cancel)
		*s->cancel = 1;
	if (s->kill_pid > 0) {
		kill(s->kill_pid, SIGKILL);
		s->kill_pid = 0;
	}
}

/* exec_req - a small execute request */
static json_t *exec_req(void)
{
	return json_pack("{s:[{s:s, s:s}], s:i}", "files", "path", "main.go", "content",
			 "package main\n\nfunc main() {}\n", "timeout_ms", 5000);
}

/* ---- tests ---- */

/* test_socket_mode - the unix socket is 0660 (its owner and its group: the worker's gid in a local sandbox of a root serve), and gone after stop */
static void test_socket_mode(void **state)
{
	struct fx *x = *state;
	struct stat st;
	assert_int_equal(lstat(x->sock, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0660);
	assert_int_equal(agent_server_port(x->srv), 0);

	agent_server_stop(x->srv);
	assert_int_not_equal(lstat(x->sock, &st), 0);
	/* a stale socket left by a killed agent is replaced; another file is not */
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", x->sock);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	fx_start(x, 0);
	assert_int_equal(lstat(x->sock, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0660);
	agent_server_stop(x->srv);

	FILE *f = fopen(x->sock, "w");
	fclose(f);
	struct agent_server_options opt = {
		.listen = x->listen,
		.handlers = { .execute = fake_execute, .doc = fake_doc, .ctx = &x->fake },
	};
	char err[ERRLEN];
	assert_int_equal(agent_server_start(&opt, &x->srv, err, sizeof(err)), -EEXIST);
	assert_non_null(strstr(err, "is not a socket"));
	unlink(x->sock);
	fx_start(x, 0);
}

/* test_health - answers before and after the claim, without auth */
static void test_health(void **state)
{
	struct fx *x = *state;
	char err[ERRLEN];
	assert_int_equal(agent_client_health(&x->ep, 2000, err, sizeof(err)), 0);

	struct raw r;
	assert_int_equal(raw_req(x->sock, "GET", "/health", NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "{\"ok\":true,\"claimed\":false,\"busy\":false}\n");
	free(r.body);

	claim(x);
	assert_int_equal(raw_req(x->sock, "GET", "/health", NULL, NULL, 0, &r), 0);
	assert_string_equal(r.body, "{\"ok\":true,\"claimed\":true,\"busy\":false}\n");
	free(r.body);
	assert_int_equal(agent_client_health(&x->ep, 2000, err, sizeof(err)), 0);
}

/* test_claim_once - one claim per lifetime; bad secrets are 400 */
static void test_claim_once(void **state)
{
	struct fx *x = *state;
	char err[ERRLEN];
	struct raw r;

	assert_int_equal(raw_req(x->sock, "POST", "/claim", NULL, "{\"secret\":\"short\"}", 18, &r),
			 0);
	raw_error_has(&r, 400, "32 to 256 visible ASCII");
	free(r.body);
	const char *spaced = "{\"secret\":\"aaaaaaaaaaaaaaaa aaaaaaaaaaaaaaaaaaaaaaa\"}";
	assert_int_equal(raw_req(x->sock, "POST", "/claim", NULL, spaced, strlen(spaced), &r),
			 0);
	raw_error_has(&r, 400, "visible ASCII");
	free(r.body);

	claim(x);
	struct agent_endpoint other = { .unix_path = x->sock };
	assert_int_equal(agent_client_claim(&other, err, sizeof(err)), -EALREADY);
	assert_non_null(strstr(err, "already claimed"));
	assert_string_equal(other.secret, "");

	char body[128];
	int n = snprintf(body, sizeof(body), "{\"secret\":\"%s\"}", x->ep.secret);
	assert_int_equal(raw_req(x->sock, "POST", "/claim", NULL, body, (size_t)n, &r), 0);
	raw_error_has(&r, 409, "this sandbox is already claimed");
	free(r.body);

	/* the first claim still holds */
	json_t *req = json_pack("{s:s}", "package", "fmt"), *res = NULL;
	assert_int_equal(agent_client_doc(&x->ep, req, &res, err, sizeof(err)), 0);
	json_decref(res);
	json_decref(req);
}

/* test_auth - execute and doc need the claimed secret */
static void test_auth(void **state)
{
	struct fx *x = *state;
	char err[ERRLEN];
	json_t *req = exec_req(), *res = NULL;
	struct raw r;

	/* before any claim */
	strcpy(x->ep.secret, "0123456789abcdef0123456789abcdef");
	assert_int_equal(agent_client_execute(&x->ep, req, NULL, NULL, NULL, &res, err,
					      sizeof(err)), -EACCES);
	assert_non_null(strstr(err, "not been claimed"));
	assert_null(res);
	x->ep.secret[0] = '\0';

	claim(x);
	struct agent_endpoint none = { .unix_path = x->sock };
	assert_int_equal(agent_client_execute(&none, req, NULL, NULL, NULL, &res, err,
					      sizeof(err)), -EACCES);
	assert_non_null(strstr(err, "Authorization: Bearer"));
	struct agent_endpoint wrong = { .unix_path = x->sock };
	memcpy(wrong.secret, x->ep.secret, sizeof(wrong.secret));
	wrong.secret[10] = wrong.secret[10] == 'a' ? 'b' : 'a';
	assert_int_equal(agent_client_execute(&wrong, req, NULL, NULL, NULL, &res, err,
					      sizeof(err)), -EACCES);
	assert_non_null(strstr(err, "does not match"));
	json_t *dreq = json_pack("{s:s}", "package", "fmt");
	assert_int_equal(agent_client_doc(&wrong, dreq, &res, err, sizeof(err)), -EACCES);
	json_decref(dreq);

	/* a longer secret is wrong too (digests are compared, not prefixes) */
	char longer[80];
	snprintf(longer, sizeof(longer), "%sX", x->ep.secret);
	char *body = json_dumps(req, JSON_COMPACT);
	assert_int_equal(raw_req(x->sock, "POST", "/execute", longer, body, strlen(body), &r),
			 0);
	raw_error_has(&r, 401, "does not match");
	assert_string_equal(r.www, "Bearer");
	free(r.body);
	assert_int_equal(raw_req(x->sock, "POST", "/execute", NULL, body, strlen(body), &r),
			 0);
	raw_error_has(&r, 401, "Authorization");
	free(r.body);
	free(body);
	assert_int_equal(x->fake.finished, 0);
	json_decref(req);
}

/* test_execute_stream - progress events in order, then the result */
static void test_execute_stream(void **state)
{
	struct fx *x = *state;
	char err[ERRLEN];
	claim(x);
	json_t *req = exec_req(), *res = NULL;
	struct seen seen = { 0 };
	int rc = agent_client_execute(&x->ep, req, on_progress, &seen, NULL, &res, err,
				      sizeof(err));
	if (rc != 0)
		fail_msg("execute: %d %s", rc, err);
	assert_int_equal(seen.n, 3);
	assert_string_equal(seen.phases[0], "normalize");
	assert_string_equal(seen.phases[1], "build");
	assert_string_equal(seen.messages[1], "building");
	assert_string_equal(seen.phases[2], "run");
	assert_string_equal(json_string_value(json_object_get(res, "phase")), "run");
	assert_true(json_equal(json_object_get(res, "echo"), req));
	json_decref(res);

	/* the wire format, as documented */
	char *body = json_dumps(req, JSON_COMPACT);
	struct raw r;
	assert_int_equal(raw_req(x->sock, "POST", "/execute", x->ep.secret, body, strlen(body), &r),
			 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.ctype, "application/x-ndjson");
	assert_string_equal(r.te, "chunked");
	assert_non_null(strstr(r.body, "{\"event\":\"progress\",\"phase\":\"build\","
				       "\"message\":\"building\"}\n"));
	const char *last = strstr(r.body, "{\"event\":\"result\",\"result\":{");
	assert_non_null(last);
	assert_ptr_equal(strchr(last, '\n'), r.body + r.len - 1);
	free(r.body);
	free(body);

	/* back-to-back calls never find the slot still taken by the previous one (the slot is
	 * freed before the result line is sent) */
	for (int i = 0; i < 30; i++) {
		rc = agent_client_execute(&x->ep, req, NULL, NULL, NULL, &res, err, sizeof(err));
		if (rc != 0)
			fail_msg("call %d after the first: %d %s", i, rc, err);
		json_decref(res);
	}
	json_decref(req);
}

/* test_execute_large_result - a multi-megabyte result line crosses many reads intact */
static void test_execute_large_result(void **state)
{
	struct fx *x = *state;
	char err[ERRLEN];
	claim(x);
	x->fake.big = 3 * 1024 * 1024 + 17;
	x->fake.odd_progress = true;
	json_t *req = exec_req(), *res = NULL;
	struct seen seen = { 0 };
	int rc = agent_client_execute(&x->ep, req, on_progress, &seen, NULL, &res, err,
				      sizeof(err));
	if (rc != 0)
		fail_msg("execute: %d %s", rc, err);
	/* progress messages are cut to 2048 bytes, never inside a UTF-8 sequence */
	assert_int_equal(seen.n, 5);
	assert_int_equal(seen.lens[3], 2047);
	assert_string_equal(seen.messages[4], "caf? ?");
	const char *out = json_string_value(json_object_get(res, "stdout"));
	assert_non_null(out);
	assert_int_equal(strlen(out), x->fake.big);
	assert_int_equal(out[x->fake.big - 1], 'a' + (x->fake.big - 1) % 26);
	json_decref(res);
	json_decref(req);
}

/* test_doc - POST /doc returns the handler's object; bad requests are 400 */
static void test_doc(void **state)
{
	struct fx *x = *state;
	char err[ERRLEN];
	claim(x);
	json_t *req = json_pack("{s:s, s:s}", "package", "cloud.google.com/go/storage", "symbol",
				"Client"), *res = NULL;
	assert_int_equal(agent_client_doc(&x->ep, req, &res, err, sizeof(err)), 0);
	assert_true(json_is_true(json_object_get(res, "ok")));
	assert_string_equal(json_string_value(json_object_get(res, "text")),
			    "package cloud.google.com/go/storage");
	json_decref(res);
	json_decref(req);

	req = json_pack("{s:i}", "package", 3);
	assert_int_equal(agent_client_doc(&x->ep, req, &res, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "\"package\": string"));
	json_decref(req);
}

/* ---- POST /files: the real artifacts_files behind the server, agent_client_read in front ---- */

static int files_appfd = -1;

static json_t *files_handler(void *ctx, json_t *req, unsigned char **bytes, size_t *nbytes)
{
	(void)ctx;
	return artifacts_files(files_appfd, req, bytes, nbytes);
}

/* files_write - a file of n bytes below the app dir */
static void files_write(const char *app, const char *rel, const unsigned char *p, size_t n)
{
	char path[300];
	snprintf(path, sizeof(path), "%s/%s", app, rel);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(p, 1, n, f), n);
	fclose(f);
}

/* files_refused - a read the agent refuses: {"error"} containing want, no bytes */
static void files_refused(struct fx *x, const char *path, long long off, size_t len,
			  const char *want)
{
	json_t *head = NULL;
	unsigned char *bytes = NULL;
	size_t n = 0;
	char err[ERRLEN];
	int rc = agent_client_read(&x->ep, path, off, len, &head, &bytes, &n, err, sizeof(err));
	if (rc != 0)
		fail_msg("read %s: %d %s", path, rc, err);
	const char *e = json_string_value(json_object_get(head, "error"));
	if (!e || !strstr(e, want))
		fail_msg("read %s: wanted a refusal with \"%s\", got %s", path, want,
			 e ? e : "a piece");
	assert_null(bytes);
	json_decref(head);
}

/* test_files_read - pieces come raw after a header line and match the file byte for byte
 * (binary, text, at an offset, the last one short); links, FIFOs, escapes and bad lengths are
 * refused with a sentence */
static void test_files_read(void **state)
{
	struct fx *x = *state;
	agent_server_stop(x->srv);
	char app[80];
	snprintf(app, sizeof(app), "%s/app", x->dir);
	char sub[120];
	assert_int_equal(mkdir(app, 0755), 0);
	snprintf(sub, sizeof(sub), "%s/out", app);
	assert_int_equal(mkdir(sub, 0755), 0);
	snprintf(sub, sizeof(sub), "%s/persist", app);
	assert_int_equal(mkdir(sub, 0755), 0);
	size_t big = 1536 * 1024;
	unsigned char *png = malloc(big);
	for (size_t i = 0; i < big; i++)
		png[i] = (unsigned char)(i * 7 + (i >> 9));
	memcpy(png, "\x89PNG\r\n\x1a\n", 8);
	files_write(app, "out/chart.png", png, big);
	files_write(app, "out/notes.csv", (const unsigned char *)"a,b\n1,2\n", 8);
	files_write(app, "persist/secret", (const unsigned char *)"x", 1);
	snprintf(sub, sizeof(sub), "%s/out/link", app);
	assert_int_equal(symlink("/etc/passwd", sub), 0);
	snprintf(sub, sizeof(sub), "%s/out/fifo", app);
	assert_int_equal(mkfifo(sub, 0644), 0);
	files_appfd = open(app, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(files_appfd >= 0);

	struct agent_server_options opt = {
		.listen = x->listen,
		.handlers = { .execute = fake_execute, .doc = fake_doc, .files = files_handler,
			      .ctx = &x->fake },
	};
	char err[ERRLEN];
	assert_int_equal(agent_server_start(&opt, &x->srv, err, sizeof(err)), 0);
	claim(x);

	/* the whole image in one piece, as the worker reads an artifact */
	json_t *head = NULL;
	unsigned char *bytes = NULL;
	size_t n = 0;
	int rc = agent_client_read(&x->ep, "out/chart.png", 0, 2 * 1024 * 1024, &head, &bytes, &n,
				   err, sizeof(err));
	if (rc != 0)
		fail_msg("read: %d %s", rc, err);
	assert_int_equal(n, big);
	assert_memory_equal(bytes, png, big);
	assert_string_equal(json_string_value(json_object_get(head, "media_type")), "image/png");
	assert_int_equal(json_integer_value(json_object_get(head, "size")), big);
	assert_true(json_is_true(json_object_get(head, "eof")));
	assert_true(json_is_false(json_object_get(head, "text")));
	json_decref(head);
	free(bytes);

	/* a resources/read piece from an offset: 1 MiB, then the short rest */
	rc = agent_client_read(&x->ep, "out/chart.png", 1000, 1024 * 1024, &head, &bytes, &n, err,
			       sizeof(err));
	assert_int_equal(rc, 0);
	assert_int_equal(n, 1024 * 1024);
	assert_memory_equal(bytes, png + 1000, n);
	assert_true(json_is_false(json_object_get(head, "eof")));
	json_decref(head);
	free(bytes);
	rc = agent_client_read(&x->ep, "out/chart.png", 1000 + 1024 * 1024, 1024 * 1024, &head,
			       &bytes, &n, err, sizeof(err));
	assert_int_equal(rc, 0);
	assert_int_equal(n, big - 1000 - 1024 * 1024);
	assert_memory_equal(bytes, png + 1000 + 1024 * 1024, n);
	assert_true(json_is_true(json_object_get(head, "eof")));
	json_decref(head);
	free(bytes);

	/* text, whole: text true, sniffed by content and refined by the name */
	rc = agent_client_read(&x->ep, "out/notes.csv", 0, 100, &head, &bytes, &n, err, sizeof(err));
	assert_int_equal(rc, 0);
	assert_int_equal(n, 8);
	assert_memory_equal(bytes, "a,b\n1,2\n", 8);
	assert_string_equal(json_string_value(json_object_get(head, "media_type")), "text/csv");
	assert_true(json_is_true(json_object_get(head, "text")));
	json_decref(head);
	free(bytes);

	files_refused(x, "out/link", 0, 100, "not a regular file");
	files_refused(x, "out/fifo", 0, 100, "not a regular file");
	files_refused(x, "out/../persist/secret", 0, 100, "no empty, . or .. segment");
	files_refused(x, "out//chart.png", 0, 100, "no empty");
	files_refused(x, "/etc/passwd", 0, 100, "below persist/ or out/");
	files_refused(x, "out/none", 0, 100, "does not exist");
	files_refused(x, "out/chart.png", -1, 100, "offset must be");
	files_refused(x, "out/chart.png", 0, 2 * 1024 * 1024 + 1, "length must be 1 to");
	/* a length the client never sends, straight to the server */
	struct raw r;
	char body[200];
	int bl = snprintf(body, sizeof(body), "{\"op\":\"read\",\"path\":\"out/chart.png\","
			  "\"length\":0}");
	assert_int_equal(raw_req(x->sock, "POST", "/files", x->ep.secret, body, (size_t)bl, &r),
			 0);
	raw_error_has(&r, 200, "length must be 1 to");
	free(r.body);

	/* resources/subscribe's stamps: files only (a link or a FIFO has none), paths that escape
	 * left out; a rewrite, a removal and a new file are changes, an untouched file is not */
	json_t *watch = json_pack("[s, s, s, s, s, s]", "out/chart.png", "out/link", "out/fifo",
				  "out/../persist/secret", "persist/secret", "persist/later");
	json_t *st = artifacts_stamps(files_appfd, watch);
	assert_true(json_is_string(json_object_get(st, "out/chart.png")));
	assert_true(json_is_null(json_object_get(st, "out/link")));
	assert_true(json_is_null(json_object_get(st, "out/fifo")));
	assert_null(json_object_get(st, "out/../persist/secret"));
	assert_true(json_is_null(json_object_get(st, "persist/later")));
	files_write(app, "persist/secret", (const unsigned char *)"xy", 2);
	files_write(app, "persist/later", (const unsigned char *)"new", 3);
	snprintf(sub, sizeof(sub), "%s/out/link", app);
	unlink(sub);
	json_t *o = json_object();
	artifacts_watch_changed(files_appfd, st, o);
	json_t *ch = json_object_get(o, "watch_changed");
	assert_int_equal(json_array_size(ch), 2);
	assert_string_equal(json_string_value(json_array_get(ch, 0)), "persist/secret");
	assert_string_equal(json_string_value(json_array_get(ch, 1)), "persist/later");
	json_decref(o);
	json_decref(st);
	json_decref(watch);

	close(files_appfd);
	files_appfd = -1;
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", app);
	assert_int_equal(system(cmd), 0);
	free(png);
}

/* piece_check - agent_client_read_piece on a hand-made answer */
static int piece_check(const char *ctype, const char *body, size_t len, size_t asked)
{
	json_t *head = NULL;
	size_t at = 0, n = 0;
	char err[ERRLEN] = "";
	int rc = agent_client_read_piece(ctype, body, len, "out/x", 5, asked, &head, &at, &n, err,
					 sizeof(err));
	if (rc == 0) {
		assert_non_null(head);
		if (!json_object_get(head, "error")) {
			assert_int_equal(at + n, len);
		}
	} else {
		assert_null(head);
		assert_true(strlen(err) > 10);
	}
	json_decref(head);
	return rc;
}

/* test_read_piece - what the worker takes as a piece: the header names the path and offset it
 * asked for, and its length is exactly the bytes after it, at most what was asked; anything
 * else (another type, no header line, a lie about the length, duplicate keys, a media type
 * that is not a plain token) is -EPROTO */
static void test_read_piece(void **state)
{
	(void)state;
	const char *T = "application/x-kode-gopher-file";
	const char *good = "{\"path\":\"out/x\",\"size\":9,\"media_type\":\"image/png\","
			   "\"offset\":5,\"length\":4,\"eof\":true,\"text\":false}\n\x89P\0G";
	size_t gl = strlen(good) + 2; /* the NUL and the G after it */
	assert_int_equal(piece_check(T, good, gl, 4), 0);
	assert_int_equal(piece_check(T, good, gl, 3), -EPROTO);      /* more than asked */
	assert_int_equal(piece_check(T, good, gl - 1, 4), -EPROTO);  /* fewer than it says */
	assert_int_equal(piece_check("application/octet-stream", good, gl, 4), -EPROTO);
	assert_int_equal(piece_check(NULL, good, gl, 4), -EPROTO);
	assert_int_equal(piece_check("application/json", "{\"error\":\"no\"}", 14, 4), 0);
	assert_int_equal(piece_check("application/json", "{\"error\":\"no\",\"x\":1}", 20, 4),
			 -EPROTO);
	assert_int_equal(piece_check("application/json", "{\"error\":3}", 11, 4), -EPROTO);
	static const char *const bad[] = {
		"{\"path\":\"out/y\",\"size\":9,\"media_type\":\"a/b\",\"offset\":5,\"length\":4,"
		"\"eof\":true,\"text\":false}\nabcd",
		"{\"path\":\"out/x\",\"size\":9,\"media_type\":\"a/b\",\"offset\":0,\"length\":4,"
		"\"eof\":true,\"text\":false}\nabcd",
		"{\"path\":\"out/x\",\"size\":-1,\"media_type\":\"a/b\",\"offset\":5,\"length\":4,"
		"\"eof\":true,\"text\":false}\nabcd",
		"{\"path\":\"out/x\",\"size\":9,\"media_type\":\"a/b\\r\\nX: y\",\"offset\":5,"
		"\"length\":4,\"eof\":true,\"text\":false}\nabcd",
		"{\"path\":\"out/x\",\"size\":9,\"media_type\":\"a/b\",\"offset\":5,\"length\":4,"
		"\"length\":4,\"eof\":true,\"text\":false}\nabcd",
		"{\"path\":\"out/x\",\"size\":9,\"media_type\":\"a/b\",\"offset\":5,\"length\":\"4\","
		"\"eof\":true,\"text\":false}\nabcd",
		"{\"path\":\"out/x\",\"size\":9,\"media_type\":\"a/b\",\"offset\":5,\"length\":4,"
		"\"eof\":1,\"text\":false}\nabcd",
		"{\"path\":\"out/x\",\"size\":9,\"media_type\":\"a/b\",\"offset\":5,\"length\":4,"
		"\"eof\":true}\nabcd",
		"[1]\nabcd",
		"abcd",
		"",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (piece_check(T, bad[i], strlen(bad[i]), 4) != -EPROTO)
			fail_msg("piece %zu was taken: %s", i, bad[i]);
	/* a header line that never ends within ARTIFACTS_PIECE_HEAD_BYTES */
	size_t hl = 20000;
	char *h = malloc(hl);
	memset(h, ' ', hl);
	h[0] = '{';
	h[hl - 2] = '}';
	h[hl - 1] = '\n';
	assert_int_equal(piece_check(T, h, hl, 4), -EPROTO);
	free(h);
}

/* exec_thread - run one execute on another thread */
struct exec_call {
	struct agent_endpoint *ep;
	struct seen seen;
	volatile int cancel;
	bool use_cancel;
	int rc;
	char err[ERRLEN];
	json_t *res;
};

static void *exec_thread(void *arg)
{
	struct exec_call *c = arg;
	json_t *req = exec_req();
	c->rc = agent_client_execute(c->ep, req, on_progress, &c->seen,
				     c->use_cancel ? &c->cancel : NULL, &c->res, c->err,
				     sizeof(c->err));
	json_decref(req);
	return NULL;
}

/* test_busy - one call at a time: a second execute or doc is 409 */
static void test_busy(void **state)
{
	struct fx *x = *state;
	char err[ERRLEN];
	claim(x);
	x->fake.block = true;
	struct exec_call c = { .ep = &x->ep };
	pthread_t t;
	pthread_create(&t, NULL, exec_thread, &c);
	fake_wait_started(&x->fake);

	json_t *req = exec_req(), *res = NULL;
	assert_int_equal(agent_client_execute(&x->ep, req, NULL, NULL, NULL, &res, err,
					      sizeof(err)), -EBUSY);
	assert_non_null(strstr(err, "still running another call"));
	json_t *dreq = json_pack("{s:s}", "package", "fmt");
	assert_int_equal(agent_client_doc(&x->ep, dreq, &res, err, sizeof(err)), -EBUSY);
	struct raw r;
	char *body = json_dumps(req, JSON_COMPACT);
	assert_int_equal(raw_req(x->sock, "POST", "/execute", x->ep.secret, body, strlen(body), &r),
			 0);
	raw_error_has(&r, 409, "busy");
	free(r.body);
	free(body);
	assert_int_equal(raw_req(x->sock, "GET", "/health", NULL, NULL, 0, &r), 0);
	assert_string_equal(r.body, "{\"ok\":true,\"claimed\":true,\"busy\":true}\n");
	free(r.body);

	fake_release(&x->fake);
	pthread_join(t, NULL);
	if (c.rc != 0)
		fail_msg("the first execute: %d %s", c.rc, c.err);
	json_decref(c.res);
	assert_int_equal(agent_client_doc(&x->ep, dreq, &res, err, sizeof(err)), 0);
	json_decref(res);
	json_decref(dreq);
	json_decref(req);
}

/* test_errors - 404, 405, 400 for bad JSON, 413 for an oversize body */
static void test_errors(void **state)
{
	struct fx *x = *state;
	struct raw r;
	claim(x);

	assert_int_equal(raw_req(x->sock, "GET", "/nope", NULL, NULL, 0, &r), 0);
	raw_error_has(&r, 404, "no such endpoint");
	free(r.body);
	assert_int_equal(raw_req(x->sock, "POST", "/nope", x->ep.secret, "{}", 2, &r), 0);
	raw_error_has(&r, 404, "no such endpoint");
	free(r.body);
	assert_int_equal(raw_req(x->sock, "GET", "/execute", x->ep.secret, NULL, 0, &r), 0);
	raw_error_has(&r, 405, "takes POST");
	assert_string_equal(r.allow, "POST");
	free(r.body);
	assert_int_equal(raw_req(x->sock, "POST", "/health", NULL, "{}", 2, &r), 0);
	raw_error_has(&r, 405, "takes GET");
	assert_string_equal(r.allow, "GET, HEAD");
	free(r.body);

	const char *bad = "{\"files\": [";
	assert_int_equal(raw_req(x->sock, "POST", "/execute", x->ep.secret, bad, strlen(bad), &r),
			 0);
	raw_error_has(&r, 400, "not valid JSON");
	free(r.body);
	assert_int_equal(raw_req(x->sock, "POST", "/execute", x->ep.secret, "[1]", 3, &r),
			 0);
	raw_error_has(&r, 400, "must be a JSON object");
	free(r.body);
	assert_int_equal(raw_req(x->sock, "POST", "/execute", x->ep.secret, "{} x", 4, &r),
			 0);
	raw_error_has(&r, 400, "not valid JSON");
	free(r.body);
	assert_int_equal(raw_req(x->sock, "POST", "/doc", x->ep.secret, "", 0, &r), 0);
	raw_error_has(&r, 400, "empty");
	free(r.body);
	const char *dup = "{\"package\":\"a\",\"package\":\"b\"}";
	assert_int_equal(raw_req(x->sock, "POST", "/doc", x->ep.secret, dup, strlen(dup), &r),
			 0);
	raw_error_has(&r, 400, "duplicate");
	free(r.body);

	size_t big = AGENT_MAX_BODY + 1;
	char *huge = malloc(big);
	memset(huge, ' ', big);
	huge[0] = '{';
	huge[big - 1] = '}';
	assert_int_equal(raw_req(x->sock, "POST", "/execute", x->ep.secret, huge, big, &r),
			 0);
	raw_error_has(&r, 413, "larger than");
	free(r.body);
	/* exactly at the limit is accepted (and is valid JSON) */
	assert_int_equal(raw_req(x->sock, "POST", "/execute", x->ep.secret, huge, big - 1, &r),
			 0);
	assert_int_equal(r.status, 400); /* "{   ...   " without the closing brace */
	free(r.body);
	free(huge);

	/* the client refuses to send what the agent would refuse */
	char *s = malloc(AGENT_CLIENT_MAX_BODY + 1);
	memset(s, 'x', AGENT_CLIENT_MAX_BODY);
	s[AGENT_CLIENT_MAX_BODY] = '\0';
	json_t *req = json_pack("{s:s}", "code", s), *res = NULL;
	free(s);
	char err[ERRLEN];
	assert_int_equal(agent_client_execute(&x->ep, req, NULL, NULL, NULL, &res, err,
					      sizeof(err)), -EMSGSIZE);
	json_decref(req);
	assert_int_equal(x->fake.finished, 0);
	assert_int_equal(agent_client_health(&x->ep, 2000, err, sizeof(err)), 0);
}

/* stop_thread - agent_server_stop on another thread (it waits for the handler) */
static void *stop_thread(void *arg)
{
	agent_server_stop(arg);
	return NULL;
}

/* test_stop_mid_execute - stopping the server mid-stream is -EPIPE for the client */
static void test_stop_mid_execute(void **state)
{
	struct fx *x = *state;
	claim(x);
	x->fake.block = true;
	struct exec_call c = { .ep = &x->ep };
	pthread_t t, st;
	pthread_create(&t, NULL, exec_thread, &c);
	fake_wait_started(&x->fake);
	/* wait until the client has read the progress, so the cut comes after it */
	for (int i = 0; i < 2000 && __atomic_load_n(&c.seen.n, __ATOMIC_ACQUIRE) < 3; i++)
		usleep(1000);
	struct agent_server *srv = x->srv;
	x->srv = NULL;
	pthread_create(&st, NULL, stop_thread, srv);
	pthread_join(t, NULL); /* the client gives up before the handler returns */
	assert_int_equal(c.rc, -EPIPE);
	assert_non_null(strstr(c.err, "the sandbox stopped responding in the middle of the call"));
	assert_true(agent_client_gone(c.rc));
	assert_int_equal(c.seen.n, 3);
	assert_null(c.res);
	fake_release(&x->fake);
	pthread_join(st, NULL);
	assert_int_equal(x->fake.finished, 1);
	fx_start(x, 0); /* for teardown */
}

/* test_kill_mid_execute - the agent process dies mid-call: -EPIPE, then -ECONNREFUSED */
static void test_kill_mid_execute(void **state)
{
	struct fx *x = *state;
	char err[ERRLEN];
	agent_server_stop(x->srv);
	x->srv = NULL;

	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		x->fake.block = true;
		fx_start(x, 0);
		for (;;)
			pause();
	}
	for (int i = 0; i < 200 && agent_client_health(&x->ep, 1000, err, sizeof(err)) != 0; i++)
		usleep(10000);
	claim(x);
	json_t *req = exec_req(), *res = NULL;
	struct seen seen = { .kill_pid = pid };
	int rc = agent_client_execute(&x->ep, req, on_progress, &seen, NULL, &res, err,
				      sizeof(err));
	assert_int_equal(rc, -EPIPE);
	assert_non_null(strstr(err, "the sandbox stopped responding in the middle of the call"));
	assert_null(res);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));

	/* the socket is still there, nobody listens: refused; once removed: no such file */
	rc = agent_client_execute(&x->ep, req, NULL, NULL, NULL, &res, err, sizeof(err));
	assert_int_equal(rc, -ECONNREFUSED);
	assert_true(agent_client_gone(rc));
	unlink(x->sock);
	rc = agent_client_health(&x->ep, 1000, err, sizeof(err));
	assert_int_equal(rc, -ENOENT);
	assert_non_null(strstr(err, "the sandbox is gone"));
	assert_true(agent_client_gone(rc));
	json_decref(req);
	fx_start(x, 0);
}

/* test_cancel - a cancelled call returns at once; the agent stays busy until the run ends */
static void test_cancel(void **state)
{
	struct fx *x = *state;
	char err[ERRLEN];
	claim(x);
	x->fake.block = true;
	struct exec_call c = { .ep = &x->ep, .use_cancel = true };
	c.seen.cancel = &c.cancel;
	pthread_t t;
	pthread_create(&t, NULL, exec_thread, &c);
	pthread_join(t, NULL);
	assert_int_equal(c.rc, -ECANCELED);
	assert_false(agent_client_gone(c.rc));

	json_t *req = exec_req(), *res = NULL;
	assert_int_equal(agent_client_execute(&x->ep, req, NULL, NULL, NULL, &res, err,
					      sizeof(err)), -EBUSY);
	assert_int_equal(agent_client_wait_idle(&x->ep, 200, err, sizeof(err)), -ETIMEDOUT);
	assert_non_null(strstr(err, "still busy"));
	fake_release(&x->fake);
	assert_int_equal(agent_client_wait_idle(&x->ep, 5000, err, sizeof(err)), 0);
	assert_int_equal(x->fake.finished, 1);
	int rc = agent_client_execute(&x->ep, req, NULL, NULL, NULL, &res, err, sizeof(err));
	if (rc != 0)
		fail_msg("execute after the abandoned one: %d %s", rc, err);
	json_decref(res);
	json_decref(req);
}

/* on_log - collect the text of log events */
struct logs {
	pthread_mutex_t mu;
	char text[256];
	int n;
};
static void on_log(void *ctx, json_t *ev)
{
	struct logs *l = ctx;
	if (strcmp(json_string_value(json_object_get(ev, "event")), "log") != 0)
		return;
	pthread_mutex_lock(&l->mu);
	snprintf(l->text, sizeof(l->text), "%s %s %s", json_string_value(json_object_get(ev, "phase")),
		 json_string_value(json_object_get(ev, "stream")),
		 json_string_value(json_object_get(ev, "text")));
	l->n++;
	pthread_mutex_unlock(&l->mu);
}

struct kill_call {
	struct agent_endpoint *ep;
	struct logs logs;
	int rc;
	json_t *res;
	char err[ERRLEN];
};
static void *kill_thread(void *arg)
{
	struct kill_call *c = arg;
	json_t *req = exec_req();
	c->rc = agent_client_execute_ev(c->ep, req, NULL, NULL, on_log, &c->logs, NULL, &c->res,
					c->err, sizeof(c->err));
	json_decref(req);
	return NULL;
}

/* test_cancel_kills - POST /cancel kills the running child; the stream ends with a cancelled
 * result, the child's line came as a log event, and the sandbox is free at once */
static void test_cancel_kills(void **state)
{
	struct fx *x = *state;
	char err[ERRLEN];
	claim(x);
	x->fake.child = true;
	struct kill_call c = { .ep = &x->ep, .logs = { .mu = PTHREAD_MUTEX_INITIALIZER } };
	pthread_t t;
	pthread_create(&t, NULL, kill_thread, &c);
	for (int i = 0; i < 2000; i++) { /* the child's line: it runs */
		pthread_mutex_lock(&c.logs.mu);
		int n = c.logs.n;
		pthread_mutex_unlock(&c.logs.mu);
		if (n)
			break;
		usleep(10000);
	}
	assert_string_equal(c.logs.text, "run stdout child says hi");
	bool running = false;
	assert_int_equal(agent_client_cancel(&x->ep, &running, err, sizeof(err)), 0);
	assert_true(running);
	pthread_join(t, NULL);
	if (c.rc != 0)
		fail_msg("execute: %d %s", c.rc, c.err);
	assert_string_equal(json_string_value(json_object_get(c.res, "phase")), "cancelled");
	json_decref(c.res);
	/* nothing runs any more: a cancel now finds nothing, a new call starts */
	assert_int_equal(agent_client_cancel(&x->ep, &running, err, sizeof(err)), 0);
	assert_false(running);
	x->fake.child = false;
	json_t *req = exec_req(), *res = NULL;
	assert_int_equal(agent_client_execute(&x->ep, req, NULL, NULL, NULL, &res, err, sizeof(err)), 0);
	json_decref(res);
	json_decref(req);
}

/* test_heartbeat - a quiet run carries heartbeats, which the client skips */
static void test_heartbeat(void **state)
{
	struct fx *x = *state;
	char err[ERRLEN];
	agent_server_stop(x->srv);
	fx_start(x, 50);
	claim(x);
	x->fake.sleep_ms = 300;
	json_t *req = exec_req(), *res = NULL;
	struct seen seen = { 0 };
	int rc = agent_client_execute(&x->ep, req, on_progress, &seen, NULL, &res, err,
				      sizeof(err));
	if (rc != 0)
		fail_msg("execute: %d %s", rc, err);
	assert_int_equal(seen.n, 3);
	json_decref(res);

	char *body = json_dumps(req, JSON_COMPACT);
	struct raw r;
	assert_int_equal(raw_req(x->sock, "POST", "/execute", x->ep.secret, body, strlen(body), &r),
			 0);
	assert_non_null(strstr(r.body, "{\"event\":\"heartbeat\"}\n"));
	free(r.body);
	free(body);
	json_decref(req);
}

/* test_tcp - the same API over TCP, as in a pod (tcp:HOST:0 picks a free port) */
static void test_tcp(void **state)
{
	struct fx *x = *state;
	struct agent_server_options opt = {
		.listen = "tcp:127.0.0.1:0",
		.handlers = { .execute = fake_execute, .doc = fake_doc, .ctx = &x->fake },
	};
	struct agent_server *srv = NULL;
	char err[ERRLEN], url[64];
	assert_int_equal(agent_server_start(&opt, &srv, err, sizeof(err)), 0);
	int port = agent_server_port(srv);
	assert_true(port > 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	struct agent_endpoint ep = { .base_url = url };
	assert_int_equal(agent_client_health(&ep, 2000, err, sizeof(err)), 0);
	assert_int_equal(agent_client_claim(&ep, err, sizeof(err)), 0);
	json_t *req = exec_req(), *res = NULL;
	struct seen seen = { 0 };
	int rc = agent_client_execute(&ep, req, on_progress, &seen, NULL, &res, err, sizeof(err));
	if (rc != 0)
		fail_msg("execute over tcp: %d %s", rc, err);
	assert_int_equal(seen.n, 3);
	json_decref(res);
	json_decref(req);
	agent_server_stop(srv);
	rc = agent_client_health(&ep, 2000, err, sizeof(err));
	assert_int_equal(rc, -ECONNREFUSED);
	assert_true(agent_client_gone(rc));
}

/* ---- a hand-written responder that sends the client bad streams ---- */

struct canned {
	int lfd;
	const char *answer;
};

/* canned_serve - accept one connection, read the request head and body, send the answer */
static void *canned_serve(void *arg)
{
	struct canned *c = arg;
	int fd = accept(c->lfd, NULL, NULL);
	if (fd < 0)
		return NULL;
	char buf[65536];
	size_t len = 0;
	for (;;) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		buf[len] = '\0';
		char *end = strstr(buf, "\r\n\r\n");
		if (!end)
			continue;
		const char *cl = strcasestr(buf, "Content-Length:");
		size_t want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 15, NULL, 10) : 0);
		if (len >= want)
			break;
	}
	ssize_t w = write(fd, c->answer, strlen(c->answer));
	(void)w;
	shutdown(fd, SHUT_WR);
	while (read(fd, buf, sizeof(buf)) > 0) {
	}
	close(fd);
	return NULL;
}

/* canned_execute - run one execute against a canned answer */
static int canned_execute(const char *dir, const char *answer, char *err, size_t errlen)
{
	char path[100];
	snprintf(path, sizeof(path), "%.70s/canned.sock", dir);
	unlink(path);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 1), 0);
	struct canned c = { .lfd = lfd, .answer = answer };
	pthread_t t;
	pthread_create(&t, NULL, canned_serve, &c);
	struct agent_endpoint ep = { .unix_path = path };
	strcpy(ep.secret, "0123456789abcdef0123456789abcdef");
	json_t *req = exec_req(), *res = NULL;
	struct seen seen = { 0 };
	int rc = agent_client_execute(&ep, req, on_progress, &seen, NULL, &res, err, errlen);
	pthread_join(t, NULL);
	close(lfd);
	unlink(path);
	json_decref(req);
	if (rc == 0)
		json_decref(res);
	return rc;
}

#define NDJSON_HEAD "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n" \
		    "Transfer-Encoding: chunked\r\n\r\n"

/* test_bad_streams - garbage, extra data, a missing result, the wrong type */
static void test_bad_streams(void **state)
{
	struct fx *x = *state;
	char err[ERRLEN];
	assert_int_equal(canned_execute(x->dir, NDJSON_HEAD "6\r\nhello\n\r\n0\r\n\r\n", err,
					sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "not a JSON event"));
	assert_int_equal(canned_execute(x->dir, NDJSON_HEAD "3\r\n[]\n\r\n0\r\n\r\n", err,
					sizeof(err)), -EPROTO);
	const char *two = NDJSON_HEAD "27\r\n{\"event\":\"result\",\"result\":{\"a\":1}}\n{}\n\r\n"
				      "0\r\n\r\n";
	assert_int_equal(canned_execute(x->dir, two, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "after the result"));
	/* an unfinished line after the result is data after the result too (found by
	 * fuzz_agent_stream: tests/fuzz/corpus/fuzz_agent_stream/regress-unterminated-after-result) */
	const char *tail = NDJSON_HEAD "39\r\n{\"event\":\"result\",\"result\":{\"a\":1}}\n"
				       "{\"event\":\"heartbeat\"}\r\n0\r\n\r\n";
	assert_int_equal(canned_execute(x->dir, tail, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "after the result"));
	const char *noresult = NDJSON_HEAD "16\r\n{\"event\":\"heartbeat\"}\n\r\n0\r\n\r\n";
	assert_int_equal(canned_execute(x->dir, noresult, err, sizeof(err)), -EPIPE);
	assert_non_null(strstr(err, "ended before the result"));
	const char *cut = NDJSON_HEAD "100\r\n{\"event\":\"result\",\"res";
	assert_int_equal(canned_execute(x->dir, cut, err, sizeof(err)), -EPIPE);
	const char *html = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 2\r\n"
			   "\r\nhi";
	assert_int_equal(canned_execute(x->dir, html, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "text/html"));
	const char *ok = NDJSON_HEAD "1F\r\n{\"event\":\"result\",\"result\":{}}\n\r\n0\r\n\r\n";
	assert_int_equal(canned_execute(x->dir, ok, err, sizeof(err)), 0);
	const char *noprog = NDJSON_HEAD "15\r\n{\"event\":\"progress\"}\n\r\n0\r\n\r\n";
	assert_int_equal(canned_execute(x->dir, noprog, err, sizeof(err)), -EPROTO);
}

/* stream_read - agent_client_read_stream on one piece */
static int stream_read(const char *text, size_t len, char *err, size_t errlen)
{
	const char *piece[1] = { text };
	size_t plen[1] = { len };
	json_t *res = NULL;
	int rc = agent_client_read_stream(piece, plen, 1, NULL, NULL, NULL, NULL, &res, err, errlen);
	json_decref(res);
	return rc;
}

/*
 * test_stream_sentences_are_utf8 - an error sentence that quotes the sandbox's bytes must
 * still be a JSON string, or the model gets an empty answer instead of it (found by
 * fuzz_agent_stream: tests/fuzz/corpus/fuzz_agent_stream/regress-error-not-utf8)
 */
static void test_stream_sentences_are_utf8(void **state)
{
	(void)state;
	char err[ERRLEN];
	/* jansson quotes the bytes near a syntax error, here half a UTF-8 character */
	const char bad[] = "{\"event\":\"result\",\"result\":{\"stdout\":\"\\u0\xc6\x9a\"}}\n";
	assert_int_equal(stream_read(bad, sizeof(bad) - 1, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "not a JSON event"));
	json_t *j = json_string(err);
	assert_non_null(j);
	json_decref(j);
	/* an oversized event's name is quoted cut at 32 bytes: here in the middle of an e-acute */
	size_t pad = AGENT_CLIENT_MAX_LINE + 16;
	char *big = malloc(pad + 200);
	assert_non_null(big);
	int n = sprintf(big, "{\"event\":\"%s\xc3\xa9\",\"pad\":\"", "0123456789012345678901234567890");
	memset(big + n, 'x', pad);
	strcpy(big + n + pad, "\"}\n");
	assert_int_equal(stream_read(big, strlen(big), err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "oversized"));
	j = json_string(err);
	assert_non_null(j);
	json_decref(j);
	free(big);
}

/* ---- the real pipeline ---- */

/* write_file - create path with content */
static void write_file(const char *path, const char *content)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(content, f);
	fclose(f);
}

/* test_real_pipeline - pipeline_execute and pipeline_doc behind the server, stdlib only */
static void test_real_pipeline(void **state)
{
	struct fx *x = *state;
	if (!pipeline_execute || !pipeline_doc || system("go version >/dev/null 2>&1") != 0) {
		skip();
		return;
	}
	char rt[256], path[512], app[256], st[256], mod[512], cache[512];
	snprintf(rt, sizeof(rt), "%s/runtime", x->dir);
	snprintf(app, sizeof(app), "%s/app", x->dir);
	snprintf(st, sizeof(st), "%s/state", x->dir);
	snprintf(mod, sizeof(mod), "%s/gomodcache", rt);
	snprintf(cache, sizeof(cache), "%s/gocache", rt);
	mkdir(rt, 0755);
	mkdir(app, 0755);
	mkdir(st, 0700);
	mkdir(mod, 0755);
	mkdir(cache, 0755);
	snprintf(path, sizeof(path), "%s/lock", rt);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/lock/go.mod", rt);
	write_file(path, "module app\n\ngo 1.26\n");
	snprintf(path, sizeof(path), "%s/lock/go.sum", rt);
	write_file(path, "");

	struct pipeline_config pcfg = {
		.app_dir = app, .state_dir = st, .runtime_dir = rt,
		.default_timeout_ms = 60000, .max_timeout_ms = 300000,
		.output_cap = 1024 * 1024, .doc_cap = 64 * 1024,
	};
	agent_server_stop(x->srv);
	struct agent_server_options opt = {
		.listen = x->listen,
		.handlers = { .execute = (json_t * (*)(void *, json_t *, pipeline_progress_fn,
						       void *))pipeline_execute,
			      .doc = (json_t * (*)(void *, json_t *))pipeline_doc,
			      .ctx = &pcfg },
	};
	char err[ERRLEN];
	assert_int_equal(agent_server_start(&opt, &x->srv, err, sizeof(err)), 0);
	claim(x);

	json_t *req = json_pack(
		"{s:[{s:s, s:s}]}", "files", "path", "main.go", "content",
		"package snippet\n\nimport \"context\"\n\n"
		"func run(ctx context.Context) (any, error) {\n"
		"\treturn map[string]int{\"answer\": 42}, nil\n}\n");
	json_t *res = NULL;
	struct seen seen = { 0 };
	int rc = agent_client_execute(&x->ep, req, on_progress, &seen, NULL, &res, err,
				      sizeof(err));
	if (rc != 0)
		fail_msg("execute: %d %s", rc, err);
	char *dump = json_dumps(res, JSON_COMPACT);
	json_t *value = json_object_get(json_object_get(res, "result"), "value");
	if (json_integer_value(json_object_get(value, "answer")) != 42)
		fail_msg("unexpected result %s", dump);
	free(dump);
	assert_true(seen.n >= 1);
	json_decref(res);
	json_decref(req);

	req = json_pack("{s:s, s:s}", "package", "strings", "symbol", "Cut");
	rc = agent_client_doc(&x->ep, req, &res, err, sizeof(err));
	if (rc != 0)
		fail_msg("doc: %d %s", rc, err);
	const char *text = json_string_value(json_object_get(res, "text"));
	if (!text || !strstr(text, "func Cut("))
		fail_msg("unexpected doc answer %s", json_dumps(res, JSON_COMPACT));
	json_decref(res);
	json_decref(req);

	agent_server_stop(x->srv);
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "chmod -R u+w %s/runtime %s/app %s/state 2>/dev/null; "
		 "rm -rf %s/runtime %s/app %s/state", x->dir, x->dir, x->dir, x->dir, x->dir,
		 x->dir);
	assert_int_equal(system(cmd), 0);
	fx_start(x, 0);
}

int main(void)
{
	/* a hang is a failure, not a stuck build */
	alarm(300);
	signal(SIGPIPE, SIG_IGN);
	log_init("test", LOG_LVL_ERROR);
	http_global_init();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_socket_mode, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_health, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_claim_once, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_auth, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_execute_stream, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_execute_large_result, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_doc, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_files_read, fx_setup, fx_teardown),
		cmocka_unit_test(test_read_piece),
		cmocka_unit_test_setup_teardown(test_busy, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_errors, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_stop_mid_execute, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_kill_mid_execute, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_cancel, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_heartbeat, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_cancel_kills, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_tcp, fx_setup, fx_teardown),
		cmocka_unit_test(test_stream_sentences_are_utf8),
		cmocka_unit_test_setup_teardown(test_bad_streams, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_real_pipeline, fx_setup, fx_teardown),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	return failed;
}
