/*
 * server.c - the agent's HTTP API inside the sandbox: claim, health, execute (NDJSON stream), doc.
 *
 * Started by agent_main() through agent_server_start(); the worker's client is
 * worker/agent_client.c; the protocol is in docs/agent-api.md.
 *
 * Threading: libmicrohttpd runs one thread per connection, so a handler may block. POST /execute
 * starts the handler on a thread of its own (the "job") that queues NDJSON lines; the
 * connection's content reader blocks on the queue and hands MHD one line at a time.
 *
 * Cancellation: each call (execute or doc) holds the busy slot and a pipe; POST /cancel, or the
 * client going away mid-stream, writes to it, and the call's thread (agent/runproc.c's watch)
 * kills what runs, the `go` command's process group or the program's pid namespace, and starts
 * nothing more. The handler still returns and frees the slot itself, so the caches (go writes
 * them atomically) and the busy flag are left as after any failed build; the result says
 * "cancelled". The same watch hands the children's output lines to the stream as log events,
 * within SRV_LOG_* limits.
 *
 * Every request body is read to its end before an error answer is queued: answering early and
 * closing with unread bytes makes the kernel reset the connection, and the client would then see
 * "sandbox gone" instead of the 401 or 404 it deserves. The one exception is a Content-Length
 * over the limit, answered at once (curl waits for "100 Continue" on such bodies).
 */
#include "agent/server.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <microhttpd.h>
#include <netdb.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agent/artifacts.h"
#include "agent/runproc.h"
#include "ipc/log.h"
#include "lib/ascii.h"
#include "lib/mono.h"
#include "policy/limits.h"

enum srv_route { SRV_NONE, SRV_HEALTH, SRV_CLAIM, SRV_EXECUTE, SRV_DOC, SRV_TOKEN, SRV_RELEASE,
		 SRV_FILES, SRV_CANCEL };

/* One queued NDJSON line (newline included). */
struct srv_line {
	struct srv_line *next;
	size_t len;
	bool progress;            /* counted in progress_bytes */
	char data[];
};

/* One POST /execute in flight: shared by the handler thread and the HTTP response. */
struct srv_job {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct srv_line *head, *tail;
	size_t off;               /* bytes of head already handed to MHD */
	size_t progress_bytes;    /* queued progress, bounded by SRV_PROGRESS_QUEUE_BYTES */
	bool done;                /* the result line is queued */
	bool abandoned;           /* the response is gone: drop further lines */
	int refs;
	struct timespec next_beat;
	struct agent_server *srv;
	json_t *req;
	/* the live lines (srv_job_line, on the job's thread only) */
	char phase[16];           /* the phase of the last progress event */
	unsigned log_lines, log_seen, log_dropped;
	size_t log_bytes;
	double log_tokens;
	struct timespec log_refill;
	bool log_capped;
};

struct agent_server {
	struct MHD_Daemon *mhd;
	struct agent_handlers h;
	size_t max_body;
	int heartbeat_ms;
	int port;
	char *unix_path;
	dev_t sock_dev;
	ino_t sock_ino;
	atomic_bool stopping;

	pthread_mutex_t mu;       /* guards everything below */
	bool claimed;
	unsigned char secret_hash[32];
	bool busy;
	bool cancelled;           /* the running call was cancelled */
	int cancel_rd, cancel_wr; /* the running call's cancel pipe; -1 when idle */
	bool thread_live;
	pthread_t thread;
};

/* Per-request state, MHD's *con_cls. */
struct srv_req {
	enum srv_route route;
	int err_status;           /* nonzero: answer this once the body is drained */
	const char *err_msg;
	const char *allow;        /* for 405 */
	bool responded;
	char *body;
	size_t len, cap;
};

/* srv_before - a < b for monotonic timespecs */
static bool srv_before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* srv_sha256 - digest of a secret; secrets are compared as digests so the length leaks nothing */
static int srv_sha256(const char *s, size_t n, unsigned char out[32])
{
	unsigned int len = 0;
	if (EVP_Digest(s, n, out, &len, EVP_sha256(), NULL) != 1 || len != 32)
		return -EIO;
	return 0;
}

/* ---- answers ---- */

/* srv_send_json - queue a JSON answer (steals obj) */
static enum MHD_Result srv_send_json(struct MHD_Connection *c, struct srv_req *r,
				     unsigned int status, json_t *obj, const char *allow)
{
	char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
	json_decref(obj);
	if (!text)
		return MHD_NO;
	/* a trailing newline, so answers read well in a terminal */
	size_t len = strlen(text);
	char *body = realloc(text, len + 2);
	if (!body) {
		free(text);
		return MHD_NO;
	}
	body[len] = '\n';
	body[len + 1] = '\0';
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(len + 1, body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	if (status == MHD_HTTP_UNAUTHORIZED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	if (allow)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
	enum MHD_Result ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	if (r)
		r->responded = true;
	return ret;
}

/* srv_send_piece - queue a read of a file: the header as one line of JSON, then the bytes raw
 * (steals both), so they pass no JSON encoder here and no parser in the worker */
static enum MHD_Result srv_send_piece(struct MHD_Connection *c, struct srv_req *r, json_t *head,
				      unsigned char *bytes, size_t n)
{
	char *text = json_dumps(head, JSON_COMPACT);
	json_decref(head);
	size_t hl = text ? strlen(text) : 0;
	char *body = text && hl < ARTIFACTS_PIECE_HEAD_BYTES ? malloc(hl + 1 + n) : NULL;
	if (!body) {
		free(text);
		free(bytes);
		return MHD_NO;
	}
	memcpy(body, text, hl);
	body[hl] = '\n';
	memcpy(body + hl + 1, bytes, n);
	free(text);
	free(bytes);
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(hl + 1 + n, body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	/* room for the whole piece in the socket where the system allows it (net.core.wmem_max):
	 * the worker reads it without this thread being woken for every 200 KiB */
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	int want = hl + 1 + n < (size_t)INT_MAX / 2 ? (int)(hl + 1 + n) : INT_MAX / 2;
	if (ci && want > 256 * 1024)
		(void)setsockopt(ci->connect_fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof(want));
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ARTIFACTS_PIECE_TYPE);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	if (r)
		r->responded = true;
	return ret;
}

/* srv_send_error - queue {"error": msg} */
static enum MHD_Result srv_send_error(struct MHD_Connection *c, struct srv_req *r,
				      unsigned int status, const char *msg)
{
	if (status >= 500)
		log_warn("answering %u: %s", status, msg);
	else
		log_debug("answering %u: %s", status, msg);
	return srv_send_json(c, r, status, json_pack("{s:s}", "error", msg),
			     r ? r->allow : NULL);
}

/* ---- the /execute job ---- */

/* srv_job_unref - drop one reference; the last one frees the queue and the request */
static void srv_job_unref(struct srv_job *job)
{
	pthread_mutex_lock(&job->mu);
	int left = --job->refs;
	pthread_mutex_unlock(&job->mu);
	if (left > 0)
		return;
	for (struct srv_line *l = job->head, *next; l; l = next) {
		next = l->next;
		free(l);
	}
	json_decref(job->req);
	pthread_cond_destroy(&job->cv);
	pthread_mutex_destroy(&job->mu);
	free(job);
}

/* srv_job_append - queue text + "\n"; called with job->mu held */
static int srv_job_append(struct srv_job *job, const char *text, size_t len, bool progress)
{
	struct srv_line *l = malloc(sizeof(*l) + len + 1);
	if (!l)
		return -ENOMEM;
	memcpy(l->data, text, len);
	l->data[len] = '\n';
	l->len = len + 1;
	l->progress = progress;
	l->next = NULL;
	if (progress)
		job->progress_bytes += l->len;
	if (job->tail)
		job->tail->next = l;
	else
		job->head = l;
	job->tail = l;
	pthread_cond_broadcast(&job->cv);
	return 0;
}

/* srv_job_push - serialize one event (stolen) onto the stream */
static int srv_job_push(struct srv_job *job, json_t *ev, bool progress)
{
	char *text = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
	json_decref(ev);
	if (!text)
		return -ENOMEM;
	size_t len = strlen(text);
	int rc = 0;
	pthread_mutex_lock(&job->mu);
	if (job->abandoned) {
		/* nobody is reading any more */
	} else if (progress && job->progress_bytes + len > SRV_PROGRESS_QUEUE_BYTES) {
		/* A reader that slow is stuck; progress is advisory, the result is not. */
		log_debug("dropping a progress line: %zu bytes already queued", job->progress_bytes);
	} else {
		rc = srv_job_append(job, text, len, progress);
	}
	pthread_mutex_unlock(&job->mu);
	free(text);
	return rc;
}

/* srv_text - a JSON string of at most max bytes from bytes that may not be UTF-8 (then
 * non-ASCII becomes '?'); progress lines must stay far below the client's 64 KiB line limit */
static json_t *srv_text(const char *s, size_t max)
{
	if (!s)
		s = "";
	size_t n = strnlen(s, max + 1);
	if (n > max) {
		n = max;
		while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
			n--; /* do not cut a UTF-8 sequence */
	}
	json_t *j = json_stringn(s, n);
	if (j)
		return j;
	char *copy = strndup(s, n);
	if (!copy)
		return NULL;
	for (char *p = copy; *p; p++)
		if ((unsigned char)*p >= 0x80)
			*p = '?';
	j = json_stringn(copy, n);
	free(copy);
	return j;
}

/* srv_job_progress - the pipeline's progress callback: one progress line */
static void srv_job_progress(void *pctx, const char *phase, const char *message)
{
	struct srv_job *job = pctx;
	json_t *ev = json_object();
	if (!ev)
		return;
	json_object_set_new(ev, "event", json_string("progress"));
	json_object_set_new(ev, "phase", srv_text(phase, SRV_PHASE_MAX_BYTES));
	snprintf(job->phase, sizeof(job->phase), "%s", phase ? phase : "");
	json_object_set_new(ev, "message", srv_text(message, SRV_MESSAGE_MAX_BYTES));
	srv_job_push(job, ev, true);
}

/* srv_job_line - the watch's line callback (agent/runproc.h): one output line of a child as
 * a log event, within the SRV_LOG_* limits; false when the call's children need no more
 * watching */
static bool srv_job_line(void *ctx, int stream, const char *text, size_t len)
{
	struct srv_job *job = ctx;
	if (job->log_capped)
		return false;
	if (++job->log_seen > SRV_LOG_SEEN_MAX || job->log_lines >= SRV_LOG_MAX_LINES ||
	    job->log_bytes + len > SRV_LOG_MAX_BYTES) {
		job->log_capped = true;
		char msg[300];
		snprintf(msg, sizeof(msg), "further output is not streamed (%u lines, %zu bytes "
			 "streamed, %u dropped over the rate of %d lines a second); the result "
			 "keeps the head and tail of it", job->log_lines, job->log_bytes,
			 job->log_dropped, SRV_LOG_LINES_PER_S);
		srv_job_push(job, json_pack("{s:s, s:s, s:s, s:o}", "event", "log", "phase",
					    job->phase, "stream", "agent", "text",
					    srv_text(msg, SRV_MESSAGE_MAX_BYTES)), true);
		return false;
	}
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (job->log_refill.tv_sec == 0)
		job->log_tokens = SRV_LOG_BURST_LINES;
	else
		job->log_tokens += ((double)(now.tv_sec - job->log_refill.tv_sec) +
				    (double)(now.tv_nsec - job->log_refill.tv_nsec) / 1e9) * SRV_LOG_LINES_PER_S;
	if (job->log_tokens > SRV_LOG_BURST_LINES)
		job->log_tokens = SRV_LOG_BURST_LINES;
	job->log_refill = now;
	if (job->log_tokens < 1) {
		job->log_dropped++;
		return true;
	}
	job->log_tokens -= 1;
	job->log_lines++;
	job->log_bytes += len;
	char cut[RUNPROC_LINE_MAX + 1];
	memcpy(cut, text, len);
	cut[len] = '\0'; /* a NUL inside ends the line's text */
	srv_job_push(job, json_pack("{s:s, s:s, s:s, s:o}", "event", "log", "phase", job->phase,
				    "stream", stream == 1 ? "stdout" : "stderr", "text",
				    srv_text(cut, RUNPROC_LINE_MAX)), true);
	return true;
}

/* srv_cancelled_result - what a cancelled call returns (nobody may read it) */
static json_t *srv_cancelled_result(void)
{
	return json_pack("{s:s, s:{s:s, s:s}}", "phase", "cancelled", "result", "kind", "cancelled",
			 "message", "the call was cancelled; what ran was killed");
}

/* srv_internal_result - the result object for a handler that produced nothing usable */
static json_t *srv_internal_result(const char *why)
{
	return json_pack("{s:s, s:{s:s, s:s}}", "phase", "internal", "result", "kind",
			 "internal_error", "message", why);
}

static bool srv_cancel_running(struct agent_server *s);
static bool srv_drop_busy(struct agent_server *s);

/* srv_job_run - the job thread: run the handler, free the busy slot, queue the result */
static void *srv_job_run(void *arg)
{
	struct srv_job *job = arg;
	struct agent_server *s = job->srv;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);

	pthread_mutex_lock(&s->mu);
	/* "log_lines": false - the client takes no log lines: do not even split them */
	bool lines = !json_is_false(json_object_get(job->req, "log_lines"));
	struct runproc_watch w = { .cancel_fd = s->cancel_rd, .line = lines ? srv_job_line : NULL,
				   .ctx = job };
	pthread_mutex_unlock(&s->mu);
	runproc_watch_set(&w);
	json_t *res = s->h.execute(s->h.ctx, job->req, srv_job_progress, job);
	runproc_watch_set(NULL);
	/* Free the slot before the result goes out: a client that gets its result and at once
	 * sends the next call must not find the sandbox busy. */
	bool cancelled = srv_drop_busy(s);
	if (cancelled) {
		json_decref(res);
		res = srv_cancelled_result();
	}
	if (!json_is_object(res)) {
		json_decref(res);
		res = srv_internal_result("the agent's pipeline returned no result; see the agent's log");
	}
	json_t *ev = json_pack("{s:s, s:o}", "event", "result", "result", res);
	if (srv_job_push(job, ev, false) < 0) {
		/* Most likely a value json_dumps refuses; still end the stream with a result. */
		ev = json_pack("{s:s, s:o}", "event", "result", "result",
			       srv_internal_result("the agent could not encode the result"));
		srv_job_push(job, ev, false);
	}

	long ms = mono_since_ms(&t0);
	pthread_mutex_lock(&job->mu);
	job->done = true;
	bool abandoned = job->abandoned;
	pthread_cond_broadcast(&job->cv);
	pthread_mutex_unlock(&job->mu);
	log_info("execute %s in %ld ms%s", cancelled ? "cancelled" : "finished", ms,
		 abandoned ? " (the client had gone; result dropped)" : "");
	srv_job_unref(job);
	return NULL;
}

/* srv_stream_read - MHD content reader: block until a line, the end, or a heartbeat is due */
static ssize_t srv_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct srv_job *job = cls;
	(void)pos;
	pthread_mutex_lock(&job->mu);
	for (;;) {
		if (job->head) {
			struct srv_line *l = job->head;
			size_t n = l->len - job->off;
			if (n > max)
				n = max;
			memcpy(buf, l->data + job->off, n);
			job->off += n;
			if (job->off == l->len) {
				job->head = l->next;
				if (!job->head)
					job->tail = NULL;
				job->off = 0;
				if (l->progress)
					job->progress_bytes -= l->len;
				free(l);
			}
			job->next_beat = mono_after(job->srv->heartbeat_ms);
			pthread_mutex_unlock(&job->mu);
			return (ssize_t)n;
		}
		if (job->done) {
			pthread_mutex_unlock(&job->mu);
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
		if (atomic_load(&job->srv->stopping)) {
			pthread_mutex_unlock(&job->mu);
			/* no terminating chunk: the client must see an interrupted call */
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		struct timespec poll = mono_after(SRV_POLL_MS);
		if (!srv_before(&job->next_beat, &poll)) {
			pthread_cond_timedwait(&job->cv, &job->mu, &poll);
			continue;
		}
		struct timespec now = mono_after(0);
		if (srv_before(&now, &job->next_beat)) {
			pthread_cond_timedwait(&job->cv, &job->mu, &job->next_beat);
			continue;
		}
		static const char beat[] = "{\"event\":\"heartbeat\"}";
		if (srv_job_append(job, beat, sizeof(beat) - 1, false) < 0) {
			pthread_mutex_unlock(&job->mu);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
	}
}

/* srv_stream_free - MHD is done with the response: the job keeps running if it must */
static void srv_stream_free(void *cls)
{
	struct srv_job *job = cls;
	pthread_mutex_lock(&job->mu);
	bool cancel = false;
	if (!job->done) {
		job->abandoned = true;
		cancel = true;
		log_info("%s; the execute call is cancelled",
			 atomic_load(&job->srv->stopping) ? "the agent is stopping"
							  : "the client went away");
	}
	pthread_mutex_unlock(&job->mu);
	if (cancel)
		srv_cancel_running(job->srv);
	srv_job_unref(job);
}

/* ---- request handling ---- */

/* srv_route_of - map a path to a route and the methods it takes */
static enum srv_route srv_route_of(const char *url, const char **allow)
{
	static const struct {
		const char *path;
		enum srv_route route;
		const char *allow;
	} routes[] = {
		{ "/health", SRV_HEALTH, "GET, HEAD" },
		{ "/claim", SRV_CLAIM, "POST" },
		{ "/execute", SRV_EXECUTE, "POST" },
		{ "/doc", SRV_DOC, "POST" },
		{ "/token", SRV_TOKEN, "POST" },
		{ "/release", SRV_RELEASE, "POST" },
		{ "/files", SRV_FILES, "POST" },
		{ "/cancel", SRV_CANCEL, "POST" },
	};
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
		if (strcmp(url, routes[i].path) == 0) {
			*allow = routes[i].allow;
			return routes[i].route;
		}
	*allow = NULL;
	return SRV_NONE;
}

/* srv_check_auth - NULL if the bearer secret matches the claim, else the sentence for 401 */
static const char *srv_check_auth(struct agent_server *s, struct MHD_Connection *c)
{
	unsigned char want[32], got[32];
	pthread_mutex_lock(&s->mu);
	bool claimed = s->claimed;
	memcpy(want, s->secret_hash, sizeof(want));
	pthread_mutex_unlock(&s->mu);
	if (!claimed)
		return "this sandbox has not been claimed yet; POST /claim first";

	/* Through the API server's pods/proxy the Authorization header belongs to the API server
	 * (which removes it after authenticating), so the secret may come in its own header too. */
	const char *tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, AGENT_SECRET_HEADER);
	if (!tok) {
		const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
							    MHD_HTTP_HEADER_AUTHORIZATION);
		if (!h || strncasecmp(h, "Bearer ", 7) != 0)
			return "this request needs the header `Authorization: Bearer <secret>` (or `"
			       AGENT_SECRET_HEADER ": <secret>`) with the secret given to POST /claim";
		tok = h + 7;
	}
	while (*tok == ' ')
		tok++;
	if (srv_sha256(tok, strlen(tok), got) < 0)
		return "the bearer secret could not be checked";
	if (CRYPTO_memcmp(want, got, sizeof(want)) != 0)
		return "the bearer secret does not match the one this sandbox was claimed with";
	return NULL;
}

/* srv_begin - first call for a request: route, method, auth, declared size */
static enum MHD_Result srv_begin(struct agent_server *s, struct MHD_Connection *c,
				 struct srv_req *r, const char *url, const char *method)
{
	r->route = srv_route_of(url, &r->allow);
	if (r->route == SRV_NONE) {
		r->err_status = MHD_HTTP_NOT_FOUND;
		r->err_msg = "there is no such endpoint; the agent serves /health, /claim, "
			     "/execute, /doc, /token, /cancel, /release and /files";
		r->allow = NULL;
	} else if (r->route == SRV_HEALTH ? (strcmp(method, "GET") != 0 &&
					     strcmp(method, "HEAD") != 0)
					  : strcmp(method, "POST") != 0) {
		r->err_status = MHD_HTTP_METHOD_NOT_ALLOWED;
		r->err_msg = r->route == SRV_HEALTH ? "this endpoint takes GET"
						    : "this endpoint takes POST";
	} else if (r->route == SRV_EXECUTE || r->route == SRV_DOC || r->route == SRV_TOKEN ||
		   r->route == SRV_RELEASE || r->route == SRV_FILES || r->route == SRV_CANCEL) {
		const char *why = srv_check_auth(s, c);
		if (why) {
			r->err_status = MHD_HTTP_UNAUTHORIZED;
			r->err_msg = why;
		}
	}
	if (r->err_status != MHD_HTTP_METHOD_NOT_ALLOWED)
		r->allow = NULL;

	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
						     MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl) {
		char *end;
		errno = 0;
		unsigned long long n = strtoull(cl, &end, 10);
		if (errno == 0 && end != cl && n > s->max_body) {
			char msg[128];
			snprintf(msg, sizeof(msg), "the request body is larger than the %zu bytes "
				 "this agent accepts", s->max_body);
			return srv_send_error(c, r, MHD_HTTP_CONTENT_TOO_LARGE, msg);
		}
	}
	return MHD_YES;
}

/* srv_take_body - keep (or, for a request already refused, count) one piece of the body */
static enum MHD_Result srv_take_body(struct agent_server *s, struct srv_req *r,
				     const char *data, size_t n)
{
	if (r->len + n > s->max_body || r->len + n < r->len) {
		/* A chunked upload past the limit: MHD cannot answer mid-body, so hang up. */
		log_warn("closing a connection whose chunked body passed %zu bytes", s->max_body);
		return MHD_NO;
	}
	if (r->err_status) {
		r->len += n;
		return MHD_YES;
	}
	if (r->len + n > r->cap) {
		size_t cap = r->cap ? r->cap : 4096;
		while (cap < r->len + n)
			cap *= 2;
		if (cap > s->max_body)
			cap = s->max_body;
		char *b = realloc(r->body, cap);
		if (!b)
			return MHD_NO;
		r->body = b;
		r->cap = cap;
	}
	memcpy(r->body + r->len, data, n);
	r->len += n;
	return MHD_YES;
}

/* srv_parse_object - the body as a JSON object, or a 400 sentence in msg */
static json_t *srv_parse_object(struct srv_req *r, char *msg, size_t msglen)
{
	if (r->len == 0) {
		snprintf(msg, msglen, "the request body is empty; send a JSON object");
		return NULL;
	}
	json_error_t jerr;
	json_t *j = json_loadb(r->body, r->len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j) {
		snprintf(msg, msglen, "the request body is not valid JSON: %s (line %d, column %d)",
			 jerr.text, jerr.line, jerr.column);
		return NULL;
	}
	if (!json_is_object(j)) {
		json_decref(j);
		snprintf(msg, msglen, "the request body must be a JSON object");
		return NULL;
	}
	return j;
}

/* srv_valid_secret - 32..256 visible ASCII characters */
static bool srv_valid_secret(const char *s, size_t n)
{
	return n >= AGENT_SECRET_MIN && n <= AGENT_SECRET_MAX && ascii_visible(s, n);
}

/* srv_health - GET /health: liveness, and whether a claim or a call holds the sandbox */
static enum MHD_Result srv_health(struct agent_server *s, struct MHD_Connection *c,
				  struct srv_req *r)
{
	pthread_mutex_lock(&s->mu);
	bool claimed = s->claimed, busy = s->busy;
	pthread_mutex_unlock(&s->mu);
	return srv_send_json(c, r, MHD_HTTP_OK,
			     json_pack("{s:b, s:b, s:b}", "ok", 1, "claimed", claimed, "busy",
				       busy), NULL);
}

/* srv_claim - POST /claim: accept the one secret of this agent's lifetime */
static enum MHD_Result srv_claim(struct agent_server *s, struct MHD_Connection *c,
				 struct srv_req *r)
{
	char msg[256];
	json_t *req = srv_parse_object(r, msg, sizeof(msg));
	if (!req)
		return srv_send_error(c, r, MHD_HTTP_BAD_REQUEST, msg);
	json_t *sec = json_object_get(req, "secret");
	if (!json_is_string(sec) ||
	    !srv_valid_secret(json_string_value(sec), json_string_length(sec))) {
		json_decref(req);
		snprintf(msg, sizeof(msg), "\"secret\" must be a string of %d to %d visible ASCII "
			 "characters", AGENT_SECRET_MIN, AGENT_SECRET_MAX);
		return srv_send_error(c, r, MHD_HTTP_BAD_REQUEST, msg);
	}
	unsigned char hash[32];
	int rc = srv_sha256(json_string_value(sec), json_string_length(sec), hash);
	json_decref(req);
	if (rc < 0)
		return srv_send_error(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR,
				      "the agent could not hash the secret");

	pthread_mutex_lock(&s->mu);
	bool already = s->claimed;
	if (!already) {
		memcpy(s->secret_hash, hash, sizeof(hash));
		s->claimed = true;
	}
	pthread_mutex_unlock(&s->mu);
	OPENSSL_cleanse(hash, sizeof(hash));
	if (already) {
		log_warn("refused a second claim");
		return srv_send_error(c, r, MHD_HTTP_CONFLICT, "this sandbox is already claimed");
	}
	log_info("sandbox claimed");
	return srv_send_json(c, r, MHD_HTTP_OK, json_pack("{s:b}", "ok", 1), NULL);
}

/* srv_release - POST /release: the claim holder lets go, so a later session can claim this
 * sandbox (a persistent sandbox in a cluster, reattached with --claim); /app stays */
static enum MHD_Result srv_release(struct agent_server *s, struct MHD_Connection *c,
				   struct srv_req *r)
{
	pthread_mutex_lock(&s->mu);
	bool busy = s->busy;
	if (!busy) {
		s->claimed = false;
		OPENSSL_cleanse(s->secret_hash, sizeof(s->secret_hash));
	}
	pthread_mutex_unlock(&s->mu);
	if (busy)
		return srv_send_error(c, r, MHD_HTTP_CONFLICT, "a call is still running; release "
				      "the sandbox when it has finished");
	log_info("sandbox released by its claim holder");
	return srv_send_json(c, r, MHD_HTTP_OK, json_pack("{s:b}", "ok", 1), NULL);
}

/* srv_take_busy - reserve the one call slot and its cancel pipe; false if another call holds
 * it (without a pipe the call still runs, only not cancellable) */
static bool srv_take_busy(struct agent_server *s)
{
	pthread_mutex_lock(&s->mu);
	bool ok = !s->busy;
	if (ok) {
		int p[2];
		s->busy = true;
		s->cancelled = false;
		if (pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0) {
			s->cancel_rd = p[0];
			s->cancel_wr = p[1];
		}
	}
	pthread_mutex_unlock(&s->mu);
	return ok;
}

/* srv_drop_busy - release the call slot; true if the call was cancelled */
static bool srv_drop_busy(struct agent_server *s)
{
	pthread_mutex_lock(&s->mu);
	s->busy = false;
	bool cancelled = s->cancelled;
	s->cancelled = false;
	if (s->cancel_rd >= 0)
		close(s->cancel_rd);
	if (s->cancel_wr >= 0)
		close(s->cancel_wr);
	s->cancel_rd = s->cancel_wr = -1;
	pthread_mutex_unlock(&s->mu);
	return cancelled;
}

/* srv_cancel_running - stop the running call, if there is one; true if there was */
static bool srv_cancel_running(struct agent_server *s)
{
	pthread_mutex_lock(&s->mu);
	bool running = s->busy;
	if (running && !s->cancelled) {
		s->cancelled = true;
		if (s->cancel_wr >= 0 && write(s->cancel_wr, "x", 1) < 0)
			log_warn("cannot signal the running call to stop: %s", strerror(errno));
		log_info("cancelling the running call");
	}
	pthread_mutex_unlock(&s->mu);
	return running;
}

/* srv_cancel - POST /cancel: the claim holder stops the running call */
static enum MHD_Result srv_cancel(struct agent_server *s, struct MHD_Connection *c,
				  struct srv_req *r)
{
	bool running = srv_cancel_running(s);
	return srv_send_json(c, r, MHD_HTTP_OK, json_pack("{s:b, s:b}", "ok", 1, "cancelled",
							  running), NULL);
}

/* srv_execute - POST /execute: start the job thread and stream its lines */
static enum MHD_Result srv_execute(struct agent_server *s, struct MHD_Connection *c,
				   struct srv_req *r)
{
	char msg[256];
	json_t *req = srv_parse_object(r, msg, sizeof(msg));
	if (!req)
		return srv_send_error(c, r, MHD_HTTP_BAD_REQUEST, msg);
	if (!srv_take_busy(s)) {
		json_decref(req);
		return srv_send_error(c, r, MHD_HTTP_CONFLICT, "busy");
	}

	struct srv_job *job = calloc(1, sizeof(*job));
	if (!job) {
		json_decref(req);
		srv_drop_busy(s);
		return MHD_NO;
	}
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&job->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&job->mu, NULL);
	job->srv = s;
	job->req = req;
	job->refs = 2; /* the thread and the response */
	job->next_beat = mono_after(s->heartbeat_ms);

	struct MHD_Response *resp = MHD_create_response_from_callback(
		MHD_SIZE_UNKNOWN, SRV_STREAM_BLOCK_BYTES, srv_stream_read, job, srv_stream_free);
	if (!resp) {
		job->refs = 1;
		srv_job_unref(job);
		srv_drop_busy(s);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/x-ndjson");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");

	pthread_mutex_lock(&s->mu);
	if (s->thread_live) {
		/* The previous job freed the slot; it only has its result to queue. */
		pthread_join(s->thread, NULL);
		s->thread_live = false;
	}
	int rc = pthread_create(&s->thread, NULL, srv_job_run, job);
	if (rc == 0)
		s->thread_live = true;
	pthread_mutex_unlock(&s->mu);
	if (rc != 0) {
		log_error("cannot start the execute thread: %s", strerror(rc));
		srv_drop_busy(s);
		job->done = true;
		MHD_destroy_response(resp); /* frees the response's reference */
		srv_job_unref(job);         /* and the thread's */
		return srv_send_error(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR,
				      "the agent could not start a thread for this call");
	}
	log_info("execute started");
	enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	r->responded = true;
	return ret;
}

/* srv_doc - POST /doc: run the doc handler on this connection's thread */
static enum MHD_Result srv_doc(struct agent_server *s, struct MHD_Connection *c,
			       struct srv_req *r)
{
	char msg[256];
	json_t *req = srv_parse_object(r, msg, sizeof(msg));
	if (!req)
		return srv_send_error(c, r, MHD_HTTP_BAD_REQUEST, msg);
	json_t *pkg = json_object_get(req, "package");
	json_t *sym = json_object_get(req, "symbol");
	if (!json_is_string(pkg) || json_string_length(pkg) == 0 ||
	    (sym && !json_is_string(sym) && !json_is_null(sym))) {
		json_decref(req);
		return srv_send_error(c, r, MHD_HTTP_BAD_REQUEST,
				      "/doc needs {\"package\": string, \"symbol\"?: string}");
	}
	if (!srv_take_busy(s)) {
		json_decref(req);
		return srv_send_error(c, r, MHD_HTTP_CONFLICT, "busy");
	}
	pthread_mutex_lock(&s->mu);
	struct runproc_watch w = { .cancel_fd = s->cancel_rd };
	pthread_mutex_unlock(&s->mu);
	runproc_watch_set(&w);
	json_t *res = s->h.doc(s->h.ctx, req);
	runproc_watch_set(NULL);
	srv_drop_busy(s);
	json_decref(req);
	if (!json_is_object(res)) {
		json_decref(res);
		res = json_pack("{s:b, s:s}", "ok", 0, "error",
				"the agent's doc lookup returned nothing; see the agent's log");
	}
	return srv_send_json(c, r, MHD_HTTP_OK, res, NULL);
}

/* srv_token - POST /token: the worker's answer to a token_request of the running call. It
 * does not take the busy slot: the execute it belongs to holds it. */
static enum MHD_Result srv_token(struct agent_server *s, struct MHD_Connection *c,
				 struct srv_req *r)
{
	char msg[256];
	if (!s->h.token)
		return srv_send_error(c, r, MHD_HTTP_NOT_FOUND, "this agent takes no tokens");
	json_t *req = srv_parse_object(r, msg, sizeof(msg));
	if (!req)
		return srv_send_error(c, r, MHD_HTTP_BAD_REQUEST, msg);
	int rc = s->h.token(s->h.ctx, req, msg, sizeof(msg));
	json_decref(req); /* its strings went through the body buffer, which is wiped */
	if (rc == -ENOENT)
		return srv_send_error(c, r, MHD_HTTP_NOT_FOUND, msg);
	if (rc < 0)
		return srv_send_error(c, r, MHD_HTTP_BAD_REQUEST, msg);
	return srv_send_json(c, r, MHD_HTTP_OK, json_pack("{s:b}", "ok", 1), NULL);
}

/* srv_files - POST /files: list or read the session's files, without the call slot */
static enum MHD_Result srv_files(struct agent_server *s, struct MHD_Connection *c,
				 struct srv_req *r)
{
	char msg[256];
	if (!s->h.files)
		return srv_send_error(c, r, MHD_HTTP_NOT_FOUND, "this agent serves no files");
	json_t *req = srv_parse_object(r, msg, sizeof(msg));
	if (!req)
		return srv_send_error(c, r, MHD_HTTP_BAD_REQUEST, msg);
	unsigned char *bytes = NULL;
	size_t nbytes = 0;
	json_t *res = s->h.files(s->h.ctx, req, &bytes, &nbytes);
	json_decref(req);
	if (!json_is_object(res)) {
		json_decref(res);
		free(bytes);
		res = json_pack("{s:s}", "error", "the agent could not list or read the files");
		bytes = NULL;
	}
	if (!bytes)
		return srv_send_json(c, r, MHD_HTTP_OK, res, NULL);
	return srv_send_piece(c, r, res, bytes, nbytes);
}

/* agent_server_event - see server.h */
void agent_server_event(void *pctx, json_t *ev)
{
	if (!pctx) {
		json_decref(ev);
		return;
	}
	srv_job_push(pctx, ev, false);
}

/* srv_access - MHD's access handler: headers, then body pieces, then the final call */
static enum MHD_Result srv_access(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version,
				  const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct agent_server *s = cls;
	struct srv_req *r = *con_cls;
	(void)version;

	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			return MHD_NO;
		*con_cls = r;
		return srv_begin(s, c, r, url, method);
	}
	if (r->responded)
		return MHD_YES;
	if (*upload_data_size) {
		enum MHD_Result ret = srv_take_body(s, r, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return ret;
	}
	if (r->err_status)
		return srv_send_error(c, r, (unsigned int)r->err_status, r->err_msg);
	if (atomic_load(&s->stopping))
		return srv_send_error(c, r, MHD_HTTP_SERVICE_UNAVAILABLE,
				      "the agent is shutting down");
	switch (r->route) {
	case SRV_HEALTH:
		return srv_health(s, c, r);
	case SRV_CLAIM:
		return srv_claim(s, c, r);
	case SRV_EXECUTE:
		return srv_execute(s, c, r);
	case SRV_DOC:
		return srv_doc(s, c, r);
	case SRV_TOKEN:
		return srv_token(s, c, r);
	case SRV_RELEASE:
		return srv_release(s, c, r);
	case SRV_FILES:
		return srv_files(s, c, r);
	case SRV_CANCEL:
		return srv_cancel(s, c, r);
	case SRV_NONE:
		break;
	}
	return MHD_NO;
}

/* srv_completed - MHD is done with a request: free its state */
static void srv_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			  enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)c;
	(void)toe;
	struct srv_req *r = *con_cls;
	if (!r)
		return;
	if (r->body)
		OPENSSL_cleanse(r->body, r->len); /* may hold the claim secret */
	free(r->body);
	free(r);
	*con_cls = NULL;
}

/* srv_mhd_log - route libmicrohttpd's own messages into our log */
static void srv_mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char line[512];
	vsnprintf(line, sizeof(line), fmt, ap);
	size_t n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	log_warn("libmicrohttpd: %s", line);
}

/* ---- listening ---- */

/* srv_listen_unix - bind a 0660 unix socket at path: the owner's and its group's, which in a
 * local sandbox of a root serve is its worker's own gid (the jail makes the directory setgid,
 * policy/jail.c); the directory around it keeps everyone else out */
static int srv_listen_unix(struct agent_server *s, const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (path[0] != '/' || strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "--listen unix:%s: the socket path must be absolute and "
			 "shorter than %zu bytes", path, sizeof(sa.sun_path));
		return -EINVAL;
	}
	strcpy(sa.sun_path, path);

	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "%s exists and is not a socket; remove it or choose "
				 "another --listen path", path);
			return -EEXIST;
		}
		unlink(path); /* a stale socket from an agent that did not exit cleanly */
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot create a unix socket: %s", strerror(e));
		return -e;
	}
	/* umask, not a later chmod, so the socket is never connectable by others. */
	mode_t old = umask(0117);
	int b = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	int e = errno;
	umask(old);
	if (b < 0) {
		close(fd);
		snprintf(err, errlen, "cannot bind %s: %s", path, strerror(e));
		return -e;
	}
	if (chmod(path, 0660) < 0 || listen(fd, 64) < 0 || stat(path, &st) < 0) {
		e = errno;
		close(fd);
		unlink(path);
		snprintf(err, errlen, "cannot listen on %s: %s", path, strerror(e));
		return -e;
	}
	s->unix_path = strdup(path);
	if (!s->unix_path) {
		close(fd);
		unlink(path);
		return -ENOMEM;
	}
	s->sock_dev = st.st_dev;
	s->sock_ino = st.st_ino;
	return fd;
}

/* srv_listen_tcp - bind HOST:PORT ("[v6]:port" for IPv6) */
static int srv_listen_tcp(struct agent_server *s, const char *spec, char *err, size_t errlen)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof(host) || !colon[1]) {
		snprintf(err, errlen, "--listen tcp:%s: expected tcp:HOST:PORT", spec);
		return -EINVAL;
	}
	memcpy(host, spec, (size_t)(colon - spec));
	host[colon - spec] = '\0';
	char *h = host;
	size_t hl = strlen(h);
	if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
		h[hl - 1] = '\0';
		h++;
	}
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	int g = getaddrinfo(h, colon + 1, &hints, &ai);
	if (g != 0) {
		snprintf(err, errlen, "--listen tcp:%s: %s", spec, gai_strerror(g));
		return -EINVAL;
	}
	int fd = -1, e = 0;
	for (struct addrinfo *p = ai; p; p = p->ai_next) {
		fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, p->ai_addr, p->ai_addrlen) == 0 && listen(fd, 64) == 0)
			break;
		e = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd < 0) {
		snprintf(err, errlen, "cannot listen on tcp:%s: %s", spec, strerror(e));
		return -(e ? e : EADDRNOTAVAIL);
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET)
			s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		else if (ss.ss_family == AF_INET6)
			s->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	return fd;
}

/* agent_server_start - bind, listen and start MHD's threads */
int agent_server_start(const struct agent_server_options *opt, struct agent_server **out,
		       char *err, size_t errlen)
{
	*out = NULL;
	if (!opt->listen || !opt->handlers.execute || !opt->handlers.doc) {
		snprintf(err, errlen, "the agent server needs a listen address and both handlers");
		return -EINVAL;
	}
	struct agent_server *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->mu, NULL);
	atomic_init(&s->stopping, false);
	s->h = opt->handlers;
	s->max_body = opt->max_body ? opt->max_body : AGENT_MAX_BODY;
	s->heartbeat_ms = opt->heartbeat_ms > 0 ? opt->heartbeat_ms : AGENT_HEARTBEAT_MS;
	s->cancel_rd = s->cancel_wr = -1;

	int fd;
	if (strncmp(opt->listen, "unix:", 5) == 0) {
		fd = srv_listen_unix(s, opt->listen + 5, err, errlen);
	} else if (strncmp(opt->listen, "tcp:", 4) == 0) {
		fd = srv_listen_tcp(s, opt->listen + 4, err, errlen);
	} else {
		snprintf(err, errlen, "--listen %s: expected unix:/path or tcp:HOST:PORT",
			 opt->listen);
		fd = -EINVAL;
	}
	if (fd < 0) {
		free(s->unix_path);
		pthread_mutex_destroy(&s->mu);
		free(s);
		return fd;
	}

	s->mhd = MHD_start_daemon(
		MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG,
		0, NULL, NULL, srv_access, s,
		MHD_OPTION_EXTERNAL_LOGGER, srv_mhd_log, (void *)NULL,
		MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned int)SRV_CONN_LIMIT,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)SRV_CONN_TIMEOUT_S,
		MHD_OPTION_NOTIFY_COMPLETED, srv_completed, (void *)NULL,
		MHD_OPTION_END);
	if (!s->mhd) {
		close(fd);
		if (s->unix_path)
			unlink(s->unix_path);
		snprintf(err, errlen, "libmicrohttpd could not start on %s; see the log above",
			 opt->listen);
		free(s->unix_path);
		pthread_mutex_destroy(&s->mu);
		free(s);
		return -EIO;
	}
	log_info("listening on %s", opt->listen);
	*out = s;
	return 0;
}

/* agent_server_port - the bound TCP port, 0 for a unix socket */
int agent_server_port(const struct agent_server *s)
{
	return s ? s->port : 0;
}

/* agent_server_stop - end streams, stop MHD, wait for a running handler, clean up */
void agent_server_stop(struct agent_server *s)
{
	if (!s)
		return;
	atomic_store(&s->stopping, true);
	/* Readers poll "stopping" every SRV_POLL_MS, so MHD's joins finish promptly; a /doc
	 * handler in progress is waited for. */
	MHD_stop_daemon(s->mhd);

	pthread_mutex_lock(&s->mu);
	bool live = s->thread_live, busy = s->busy;
	s->thread_live = false;
	pthread_mutex_unlock(&s->mu);
	if (live) {
		if (busy)
			log_info("waiting for the running execute call to finish");
		pthread_join(s->thread, NULL);
	}
	if (s->unix_path) {
		struct stat st;
		/* only our own socket: another agent may have taken the path since */
		if (lstat(s->unix_path, &st) == 0 && st.st_dev == s->sock_dev &&
		    st.st_ino == s->sock_ino)
			unlink(s->unix_path);
		free(s->unix_path);
	}
	OPENSSL_cleanse(s->secret_hash, sizeof(s->secret_hash));
	pthread_mutex_destroy(&s->mu);
	free(s);
	log_info("stopped");
}
