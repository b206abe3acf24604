/*
 * http.c - the Streamable HTTP transport (MCP 2025-11-25) of the shared server: `serve --http`.
 *
 * libmicrohttpd serves /mcp, /healthz and /metrics, one thread per connection: a POST hands its
 * message to the session's worker (master/pool.c) and waits for the answer, which goes back as
 * application/json, or as text/event-stream when the worker has accepted a slow call (tools/call)
 * and the client takes event streams, so progress notifications arrive while it runs. The
 * master does not parse JSON-RPC: whether a message was an initialize, and its id, come from
 * the worker (NOTE_SESSION, NOTE_ACCEPTED).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "master/auth.h"
#include "master/pool.h"
#include "master/tls.h"

#define HTTP_WAIT_S 3600 /* the longest a request waits for its worker */

static const char *const http_versions[] = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05" };

struct req {
	char *body;
	size_t len;
	bool too_big;
};

static char http_port[16];
static bool http_loopback;

/* rpc_error - a JSON-RPC error body the transport itself sends */
static char *rpc_error(const char *id, int code, const char *msg)
{
	char *out = NULL;
	if (asprintf(&out, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":%d,\"message\":\"%s\"}}",
		     id ? id : "null", code, msg) < 0)
		return NULL;
	return out;
}

/* cors - the headers every /mcp answer carries */
static void cors(struct MHD_Response *r, const char *origin)
{
	if (origin) {
		MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
		MHD_add_response_header(r, "Vary", "Origin");
	}
	MHD_add_response_header(r, "Access-Control-Expose-Headers", "Mcp-Session-Id, MCP-Protocol-Version");
	MHD_add_response_header(r, "Access-Control-Allow-Headers",
				"Content-Type, Accept, Authorization, Mcp-Session-Id, MCP-Protocol-Version, "
				"Last-Event-ID");
	MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
}

/* reply - queue a whole answer (body copied; NULL body = empty) */
static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
			     const char *body, size_t len, const char *origin, const char *sid)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(body ? len : 0, (void *)(body ? body : ""),
								 MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	if (type)
		MHD_add_response_header(r, "Content-Type", type);
	if (sid)
		MHD_add_response_header(r, "Mcp-Session-Id", sid);
	cors(r, origin);
	enum MHD_Result q = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return q;
}

/* reply_error - an HTTP status with a JSON-RPC error body */
static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, int code, const char *msg,
				   const char *origin)
{
	char *b = rpc_error(NULL, code, msg);
	enum MHD_Result q = reply(c, status, "application/json", b, b ? strlen(b) : 0, origin, NULL);
	free(b);
	return q;
}

/* list_has - is v one of the comma-separated values in list? */
static bool list_has(const char *list, const char *v)
{
	size_t n = strlen(v);
	for (const char *p = list; p && *p;) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (l == n && strncasecmp(p, v, n) == 0)
			return true;
		p = e ? e + 1 : NULL;
	}
	return false;
}

/* host_ok - the Host header names us (DNS rebinding defence) */
static bool host_ok(const char *host)
{
	if (!host)
		return false;
	if (list_has(pool.cfg->allowed_hosts, host) || auth_host_ok(host))
		return true;
	if (!http_loopback)
		return !pool.cfg->allowed_hosts; /* bound publicly and no list: any */
	static const char *const names[] = { "localhost", "127.0.0.1", "[::1]" };
	for (size_t i = 0; i < 3; i++) {
		size_t n = strlen(names[i]);
		if (strncasecmp(host, names[i], n) == 0 &&
		    (host[n] == '\0' || (host[n] == ':' && strcmp(host + n + 1, http_port) == 0)))
			return true;
	}
	return false;
}

/* origin_ok - browsers send Origin: only our own pages (or listed ones) may call */
static bool origin_ok(const char *origin)
{
	if (!origin)
		return true;
	if (list_has(pool.cfg->allowed_origins, origin))
		return true;
	static const char *const ok[] = { "http://localhost", "http://127.0.0.1", "http://[::1]",
					  "https://localhost", "https://127.0.0.1", "https://[::1]" };
	for (size_t i = 0; i < 6; i++) {
		size_t n = strlen(ok[i]);
		if (strncasecmp(origin, ok[i], n) == 0 && (origin[n] == '\0' || origin[n] == ':'))
			return http_loopback;
	}
	return false;
}

/* wait_on - wait for p to progress (under mu); false on timeout */
static bool wait_on(struct pending *p, double secs)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)secs;
	return pthread_cond_timedwait(&p->cv, &pool.mu, &ts) == 0;
}

/* gone_answer - the worker died, or the session was ended, with this request in flight */
static char *gone_answer(struct pending *p)
{
	char msg[300];
	if (p->ended)
		snprintf(msg, sizeof(msg), "The session ended before this request was answered (%s); "
			 "start a new session to go on.", p->gone_why);
	else
		snprintf(msg, sizeof(msg), "The sandbox process crashed while handling this request (%s). "
			 "The session has ended: start a new one.", p->gone_why);
	return rpc_error(p->id, p->ended ? -32000 : -32603, msg);
}

/* ---- text/event-stream ---- */

struct sse {
	struct pending *p;
	char *buf;
	size_t len, off;
	bool last;
	double deadline;
};

/* sse_event - "event: message\ndata: <json>\n\n" */
static void sse_event(struct sse *x, const char *data, size_t len)
{
	free(x->buf);
	x->buf = NULL;
	x->off = 0;
	FILE *f = open_memstream(&x->buf, &x->len);
	if (!f)
		return;
	fputs("event: message\ndata: ", f);
	fwrite(data, 1, len, f);
	fputs("\n\n", f);
	fclose(f);
}

/* sse_reader - MHD asks for more of the stream; blocking is fine: one thread per connection */
static ssize_t sse_reader(void *cls, uint64_t pos, char *out, size_t max)
{
	(void)pos;
	struct sse *x = cls;
	pthread_mutex_lock(&pool.mu);
	for (;;) {
		if (x->buf && x->off < x->len) {
			size_t n = x->len - x->off < max ? x->len - x->off : max;
			memcpy(out, x->buf + x->off, n);
			x->off += n;
			pthread_mutex_unlock(&pool.mu);
			return (ssize_t)n;
		}
		if (x->last) {
			pthread_mutex_unlock(&pool.mu);
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
		struct pending *p = x->p;
		if (p->q) {
			struct event *e = p->q;
			p->q = e->next;
			if (!p->q)
				p->qtail = NULL;
			sse_event(x, e->data, e->len);
			free(e);
		} else if (p->done) {
			x->last = true;
			if (p->alen)
				sse_event(x, p->answer, p->alen);
		} else if (p->gone || spawn_now() > x->deadline) {
			char *b = p->gone ? gone_answer(p) : rpc_error(p->id, -32603, "timed out waiting for the worker");
			x->last = true;
			if (b)
				sse_event(x, b, strlen(b));
			free(b);
		} else {
			wait_on(p, 1);
		}
	}
}

/* sse_free - the stream is over (or the client went away) */
static void sse_free(void *cls)
{
	struct sse *x = cls;
	pthread_mutex_lock(&pool.mu);
	pool_pending_free(x->p);
	pthread_mutex_unlock(&pool.mu);
	free(x->buf);
	free(x);
}

/* answer_pending - wait for the worker and answer the POST (takes mu held, releases it) */
static enum MHD_Result answer_pending(struct MHD_Connection *c, struct pending *p, bool sse_ok,
				      const char *origin, const char *sid)
{
	double deadline = spawn_now() + HTTP_WAIT_S;
	while (!p->done && !p->gone && !(p->accepted && sse_ok) && spawn_now() < deadline)
		wait_on(p, 1);
	if (!p->done && !p->gone && p->accepted && sse_ok) {
		struct sse *x = calloc(1, sizeof(*x));
		struct MHD_Response *r = x ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024,
									   sse_reader, x, sse_free) : NULL;
		if (!r) {
			free(x);
			pool_pending_free(p);
			pthread_mutex_unlock(&pool.mu);
			return MHD_NO;
		}
		x->p = p;
		x->deadline = deadline;
		pthread_mutex_unlock(&pool.mu);
		MHD_add_response_header(r, "Content-Type", "text/event-stream");
		MHD_add_response_header(r, "Cache-Control", "no-cache");
		if (sid)
			MHD_add_response_header(r, "Mcp-Session-Id", sid);
		cors(r, origin);
		enum MHD_Result q = MHD_queue_response(c, MHD_HTTP_OK, r);
		MHD_destroy_response(r);
		return q;
	}
	unsigned status;
	char *body = NULL;
	size_t len = 0;
	static const char unaddressed[] = "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":";
	if (p->done && p->alen) {
		/* an error the worker could not address to a request (not JSON, not JSON-RPC, a
		 * batch) means the input was not accepted: 400, with the error as the body */
		status = p->alen > sizeof(unaddressed) - 1 &&
				 memcmp(p->answer, unaddressed, sizeof(unaddressed) - 1) == 0
			 ? MHD_HTTP_BAD_REQUEST : MHD_HTTP_OK;
		body = p->answer;
		len = p->alen;
		p->answer = NULL;
	} else if (p->done) {
		status = MHD_HTTP_ACCEPTED; /* a notification or a response: nothing to say */
	} else {
		status = p->id ? MHD_HTTP_OK : MHD_HTTP_INTERNAL_SERVER_ERROR;
		body = p->gone ? gone_answer(p) : rpc_error(p->id, -32603, "timed out waiting for the worker");
		len = body ? strlen(body) : 0;
	}
	pool_pending_free(p);
	pthread_mutex_unlock(&pool.mu);
	enum MHD_Result q = reply(c, status, body ? "application/json" : NULL, body, len, origin, sid);
	free(body);
	return q;
}

/* post_initialize - a POST without a session: it must be an initialize, which opens one */
static enum MHD_Result post_initialize(struct MHD_Connection *c, struct req *rq, const char *origin,
				       const char *user)
{
	pthread_mutex_lock(&pool.mu);
	int i = pool_take_idle(30);
	if (i < 0) {
		char why[300];
		snprintf(why, sizeof(why), "%s", pool_unavailable() ? pool_unavailable() :
			 "the server is at its --max-workers limit; try again later");
		pthread_mutex_unlock(&pool.mu);
		return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, -32000, why, origin);
	}
	struct slot *s = &pool.slots[i];
	spawn_random_hex(s->w.session, SESSION_ID_HEX / 2);
	snprintf(s->user, sizeof(s->user), "%s", user); /* "local" with --auth none */
	s->opened = spawn_now();
	struct ipc_buf b;
	if (ipc_pack_note_assign(&b, 0, s->w.session, s->user) == 0)
		spawn_send(&s->w, &b);
	struct pending *p = pool_send(i, rq->body, rq->len);
	if (!p) {
		pool_end_session(i, "worker unreachable");
		pthread_mutex_unlock(&pool.mu);
		return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, -32603, "the worker is gone", origin);
	}
	double deadline = spawn_now() + 60;
	while (!p->done && !p->gone && spawn_now() < deadline)
		wait_on(p, 1);
	if (p->done && s->initialized && s->state == SLOT_OPENING) {
		char sid[SESSION_ID_HEX + 1];
		snprintf(sid, sizeof(sid), "%s", s->w.session);
		s->state = SLOT_SESSION;
		pool.sessions_total++;
		log_info("session %.8s… opened for %s (worker pid %d)", sid, s->user, (int)s->w.pid);
		return answer_pending(c, p, false, origin, sid);
	}
	/* not an initialize (or it failed): this worker saw untrusted input without a session, and
	 * workers are never reused, so it goes */
	pool_pending_free(p);
	pool_end_session(i, "no session opened");
	pthread_mutex_unlock(&pool.mu);
	return reply_error(c, MHD_HTTP_BAD_REQUEST, -32000,
			   "Bad Request: no valid session. Send initialize without an Mcp-Session-Id "
			   "header to open one, then send that header with every request", origin);
}

/* handle_mcp - /mcp */
static enum MHD_Result handle_mcp(struct MHD_Connection *c, const char *method, struct req *rq,
				  const char *origin)
{
	const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
	if (strcmp(method, "OPTIONS") == 0)
		return reply(c, MHD_HTTP_NO_CONTENT, NULL, NULL, 0, origin, NULL);
	char user[AUTH_USER_MAX] = "local";
	enum MHD_Result unauthorized;
	if (auth_enabled() && !auth_bearer(c, user, sizeof(user), &unauthorized))
		return unauthorized;
	if (strcmp(method, "GET") == 0) {
		/* no server-initiated messages outside a request: no standalone stream */
		struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
		MHD_add_response_header(r, "Allow", "POST, DELETE, OPTIONS");
		cors(r, origin);
		enum MHD_Result q = MHD_queue_response(c, MHD_HTTP_METHOD_NOT_ALLOWED, r);
		MHD_destroy_response(r);
		return q;
	}
	if (strcmp(method, "DELETE") == 0) {
		if (!sid)
			return reply_error(c, MHD_HTTP_BAD_REQUEST, -32000, "DELETE needs the Mcp-Session-Id header", origin);
		pthread_mutex_lock(&pool.mu);
		int i = pool_find_session(sid);
		if (i >= 0 && strcmp(pool.slots[i].user, user) != 0)
			i = -1; /* another user's session: as if it did not exist */
		if (i >= 0)
			pool_end_session(i, "the client ended it (DELETE)");
		pthread_mutex_unlock(&pool.mu);
		if (i < 0)
			return reply_error(c, MHD_HTTP_NOT_FOUND, -32001, "Session not found", origin);
		return reply(c, MHD_HTTP_OK, NULL, NULL, 0, origin, NULL);
	}
	if (strcmp(method, "POST") != 0)
		return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, -32000, "use POST, GET, DELETE or OPTIONS", origin);
	if (rq->too_big) {
		char msg[160];
		snprintf(msg, sizeof(msg), "the request body is over the %u MiB limit", MCP_MAX_MESSAGE >> 20);
		return reply_error(c, MHD_HTTP_CONTENT_TOO_LARGE, -32600, msg, origin);
	}
	if (rq->len == 0)
		return reply_error(c, MHD_HTTP_BAD_REQUEST, -32700, "Parse error: empty body", origin);
	if (!sid)
		return post_initialize(c, rq, origin, user);
	const char *ver = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version");
	if (ver) {
		bool ok = false;
		for (size_t k = 0; k < 4; k++)
			ok |= strcmp(ver, http_versions[k]) == 0;
		if (!ok)
			return reply_error(c, MHD_HTTP_BAD_REQUEST, -32000,
					   "Bad Request: unsupported MCP-Protocol-Version", origin);
	}
	const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
	bool sse_ok = accept && (strstr(accept, "text/event-stream") || strstr(accept, "*/*"));
	pthread_mutex_lock(&pool.mu);
	int i = pool_find_session(sid);
	if (i >= 0 && strcmp(pool.slots[i].user, user) != 0) {
		/* a session answers only the user who opened it; to anyone else it does not exist */
		log_warn("user %s sent a request to a session of another user; refused", user);
		i = -1;
	}
	if (i < 0) {
		pthread_mutex_unlock(&pool.mu);
		return reply_error(c, MHD_HTTP_NOT_FOUND, -32001, "Session not found: it ended or never "
				   "existed; start a new one with initialize", origin);
	}
	struct pending *p = pool_send(i, rq->body, rq->len);
	if (!p) {
		pthread_mutex_unlock(&pool.mu);
		return reply_error(c, MHD_HTTP_NOT_FOUND, -32001, "Session not found: its worker is gone", origin);
	}
	return answer_pending(c, p, sse_ok, origin, NULL);
}

/* handle - every request */
static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
			      const char *version, const char *data, size_t *size, void **ctx)
{
	(void)cls;
	(void)version;
	struct req *rq = *ctx;
	if (!rq) {
		if (!(rq = calloc(1, sizeof(*rq))))
			return MHD_NO;
		*ctx = rq;
		return MHD_YES;
	}
	if (*size) {
		if (!rq->too_big && rq->len + *size <= MCP_MAX_MESSAGE) {
			char *nb = realloc(rq->body, rq->len + *size + 1);
			if (!nb)
				return MHD_NO;
			rq->body = nb;
			memcpy(rq->body + rq->len, data, *size);
			rq->len += *size;
		} else {
			rq->too_big = true; /* keep reading (so the client sees our answer), keep nothing */
			free(rq->body);
			rq->body = NULL;
			rq->len = 0;
		}
		*size = 0;
		return MHD_YES;
	}
	const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
	if (!host_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host")))
		return reply_error(c, MHD_HTTP_FORBIDDEN, -32000, "Forbidden: this Host is not served here", NULL);
	if (!origin_ok(origin))
		return reply_error(c, MHD_HTTP_FORBIDDEN, -32000, "Forbidden: this Origin may not call", NULL);
	enum MHD_Result q;
	if (auth_route(c, url, method, rq->body, rq->len, &q))
		return q;
	if (strcmp(url, "/mcp") == 0)
		return handle_mcp(c, method, rq, origin);
	if (strcmp(url, "/healthz") == 0 && strcmp(method, "GET") == 0)
		return reply(c, MHD_HTTP_OK, "text/plain", "ok\n", 3, NULL, NULL);
	if (strcmp(url, "/metrics") == 0 && strcmp(method, "GET") == 0) {
		char *m = NULL;
		size_t len = 0;
		pthread_mutex_lock(&pool.mu);
		pool_metrics(&m, &len);
		pthread_mutex_unlock(&pool.mu);
		enum MHD_Result q = reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4", m, len, NULL, NULL);
		free(m);
		return q;
	}
	return reply_error(c, MHD_HTTP_NOT_FOUND, -32000, "Not found: the MCP endpoint is /mcp", NULL);
}

/* completed - MHD is done with a request */
static void completed(void *cls, struct MHD_Connection *c, void **ctx, enum MHD_RequestTerminationCode t)
{
	(void)cls;
	(void)c;
	(void)t;
	struct req *rq = *ctx;
	if (rq) {
		free(rq->body);
		free(rq);
	}
	*ctx = NULL;
}

/* http_listen - bind ADDR:PORT ourselves (so port 0 works and the log says where we are) */
static int http_listen(const char *spec, char *where, size_t cap)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof(host))
		return -EINVAL;
	memcpy(host, spec, (size_t)(colon - spec));
	host[colon - spec] = '\0';
	snprintf(http_port, sizeof(http_port), "%s", colon + 1);
	int port = atoi(colon + 1);
	if (port < 0 || port > 65535)
		return -EINVAL;
	if (strcmp(host, "localhost") == 0)
		snprintf(host, sizeof(host), "127.0.0.1");
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	socklen_t sl;
	int fam;
	char bare[256];
	snprintf(bare, sizeof(bare), "%s", host[0] == '[' ? host + 1 : host);
	if (bare[0] && bare[strlen(bare) - 1] == ']')
		bare[strlen(bare) - 1] = '\0';
	struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, bare, &a4->sin_addr) == 1) {
		fam = AF_INET;
		a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)port);
		sl = sizeof(*a4);
		http_loopback = (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
	} else if (inet_pton(AF_INET6, bare, &a6->sin6_addr) == 1) {
		fam = AF_INET6;
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)port);
		sl = sizeof(*a6);
		http_loopback = IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr);
	} else {
		return -EINVAL;
	}
	int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 128) != 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return -e;
	}
	sl = sizeof(ss);
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	port = ntohs(fam == AF_INET ? a4->sin_port : a6->sin6_port);
	snprintf(http_port, sizeof(http_port), "%d", port);
	snprintf(where, cap, "http://%s%s%s:%d/mcp", fam == AF_INET6 ? "[" : "", bare,
		 fam == AF_INET6 ? "]" : "", port);
	return fd;
}

int http_serve(const struct serve_config *cfg)
{
	char where[300];
	int fd = http_listen(cfg->http, where, sizeof(where));
	if (fd < 0) {
		log_error("cannot listen on %s: %s", cfg->http, fd == -EINVAL ? "expected HOST:PORT" : strerror(-fd));
		return 1;
	}
	if (cfg->tls_cert) {
		memmove(where + 5, where + 4, strlen(where + 4) + 1); /* http:// -> https:// */
		where[4] = 's';
	}
	if (strcmp(cfg->auth, "none") == 0 && !http_loopback) {
		log_error("--auth none serves everyone as user \"local\" and is allowed only on a loopback "
			  "address (like 127.0.0.1:8080); for a team, use --auth google");
		close(fd);
		return 1;
	}
	if (auth_init(cfg, where) != 0) {
		close(fd);
		return 1;
	}
	if (sig_init() != 0 || pool_init(cfg) != 0) {
		log_error("cannot set up the server");
		return 1;
	}
	struct MHD_OptionItem tls[3];
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
	void *tls_keep;
	if (tls_options(cfg, tls, &flags, &tls_keep) != 0)
		return 1;
	struct MHD_Daemon *d = MHD_start_daemon(
		flags, 0, NULL,
		NULL, handle, NULL, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)300, MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024,
		MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
	if (!d) {
		log_error("cannot start the HTTP server");
		return 1;
	}
	log_info("kode-gopher %s serving MCP on %s (auth %s, %d idle workers kept ready, at most %d)",
		 KG_VERSION, where, cfg->auth, cfg->workers_min_idle, cfg->max_workers);
	pool_loop();
	log_info("shutting down: open sessions end");
	pool_shutdown();
	MHD_stop_daemon(d);
	tls_free(tls_keep);
	return 0;
}
