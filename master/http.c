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
#include <jansson.h>
#include <malloc.h>
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
#include "policy/limits.h"
#include "lib/rpcid.h" /* rpcid_scan: a request's id for the transport's own errors */

#define HTTP_RPC_CANCELLED -32800 /* the answer to a cancelled request on a JSON POST (as LSP) */

static const char *const http_versions[] = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05" };

/* One request's body. Kept whole only up to `limit` (set when the headers are in); past it, or
 * when it will be refused anyway, only its two ends are kept, to read the id from. */
struct req {
	char *body;
	size_t len, cap, limit;
	size_t total;             /* bytes received */
	bool too_big;             /* over MCP_MAX_MESSAGE */
	bool discard;             /* keeping only head and tail */
	bool over_session;        /* its session has too much waiting: answered 429 */
	char head[IPC_TOOBIG_KEEP], tail[IPC_TOOBIG_KEEP];
	size_t hlen, tlen;
	/* bytes reserved in its session's inflight_bytes while the body arrives */
	int slot;
	size_t reserved;
	char sid[SESSION_ID_HEX + 1];
	char *id;                 /* the request's id as JSON, read from the body's ends; NULL: none */
	bool id_read;
};

static char http_port[16];
static bool http_loopback;

/* request_id - the id of the request in rq, for an error the transport answers itself.
 * Only the ends of the body are scanned (rpcid_scan, bounded and fuzzed): the master does not
 * parse JSON-RPC, and an id it cannot read this way is answered with null. */
static const char *request_id(struct req *rq)
{
	if (rq->id_read)
		return rq->id;
	rq->id_read = true;
	json_t *id;
	if (rq->discard) {
		id = rpcid_scan(rq->head, rq->hlen, rq->tail, rq->tlen);
	} else {
		if (!rq->body || !rq->len)
			return NULL;
		size_t keep = rq->len < IPC_TOOBIG_KEEP ? rq->len : IPC_TOOBIG_KEEP;
		id = rpcid_scan(rq->body, keep, rq->body + rq->len - keep, keep);
	}
	if (id)
		rq->id = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
	json_decref(id);
	return rq->id;
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

/* reply_full - queue a whole answer (body copied; NULL body = empty); retry_s > 0 adds
 * Retry-After */
static enum MHD_Result reply_full(struct MHD_Connection *c, unsigned status, const char *type,
				  const char *body, size_t len, const char *origin, const char *sid,
				  int retry_s)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(body ? len : 0, (void *)(body ? body : ""),
								 MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	if (type)
		MHD_add_response_header(r, "Content-Type", type);
	if (sid)
		MHD_add_response_header(r, "Mcp-Session-Id", sid);
	if (retry_s > 0) {
		char v[16];
		snprintf(v, sizeof(v), "%d", retry_s);
		MHD_add_response_header(r, "Retry-After", v);
	}
	cors(r, origin);
	enum MHD_Result q = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return q;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
			     const char *body, size_t len, const char *origin, const char *sid)
{
	return reply_full(c, status, type, body, len, origin, sid, 0);
}

/* reply_rpc - an HTTP status with a JSON-RPC error body for request id (NULL: null) */
static enum MHD_Result reply_rpc(struct MHD_Connection *c, unsigned status, const char *id, int code,
				 const char *msg, const char *origin, int retry_s)
{
	char *b = jsonrpc_error(id, code, msg, NULL);
	enum MHD_Result q = reply_full(c, status, "application/json", b, b ? strlen(b) : 0, origin, NULL,
				       retry_s);
	free(b);
	return q;
}

/* reply_error - an HTTP status with a JSON-RPC error body that has no id */
static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, int code, const char *msg,
				   const char *origin)
{
	return reply_rpc(c, status, NULL, code, msg, origin, 0);
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

/* http_origin_parse - split an Origin (RFC 6454: scheme "://" host [":" port], nothing else) into
 * its scheme, host and port; false if it is not one (userinfo, a path, a bad port) */
bool http_origin_parse(const char *o, char *scheme, size_t scap, char *host, size_t hcap, long *port)
{
	const char *sep = strstr(o, "://");
	if (!sep || sep == o || (size_t)(sep - o) >= scap)
		return false;
	for (const char *p = o; p < sep; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
			return false;
	snprintf(scheme, scap, "%.*s", (int)(sep - o), o);
	for (char *p = scheme; *p; p++)
		*p = (char)(*p | 0x20);
	const char *h = sep + 3, *e;
	if (*h == '[') {
		if (!(e = strchr(h, ']')))
			return false;
		e++;
	} else {
		e = h + strcspn(h, ":");
	}
	if (e == h || (size_t)(e - h) >= hcap)
		return false;
	for (const char *p = h; p < e; p++) /* no userinfo, path, query or fragment */
		if (*p == '@' || *p == '/' || *p == '?' || *p == '#' || *p == '\\' || *p <= ' ' || *p > '~')
			return false;
	snprintf(host, hcap, "%.*s", (int)(e - h), h);
	for (char *p = host; *p; p++)
		*p = (char)(*p >= 'A' && *p <= 'Z' ? *p | 0x20 : *p);
	if (*e == '\0') {
		*port = strcmp(scheme, "https") == 0 ? 443 : 80;
		return true;
	}
	if (*e != ':' || !e[1] || strspn(e + 1, "0123456789") != strlen(e + 1) || strlen(e + 1) > 5)
		return false;
	*port = strtol(e + 1, NULL, 10);
	return *port > 0 && *port <= 65535;
}

/* origin_ok - browsers send Origin: only our own pages (or listed ones) may call. The origin is
 * parsed and its scheme, host and port compared exactly: a prefix match would let
 * http://localhost:1@evil.example through. */
static bool origin_ok(const char *origin)
{
	if (!origin)
		return true;
	if (list_has(pool.cfg->allowed_origins, origin))
		return true;
	char scheme[8], host[64];
	long port;
	if (!http_loopback || !http_origin_parse(origin, scheme, sizeof(scheme), host, sizeof(host), &port))
		return false;
	if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)
		return false;
	if (strcmp(host, "localhost") != 0 && strcmp(host, "127.0.0.1") != 0 && strcmp(host, "[::1]") != 0)
		return false;
	return port == strtol(http_port, NULL, 10);
}

/* http_media_admits - does a list of media ranges (an Accept header) admit type ("application/json")?
 * Wildcard ranges (any type, or any subtype of the major type) count; a range with q=0 refuses. */
bool http_media_admits(const char *list, const char *type)
{
	const char *slash = strchr(type, '/');
	size_t major = slash ? (size_t)(slash - type) : strlen(type);
	for (const char *p = list; p && *p;) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		char item[128];
		if (n < sizeof(item)) {
			memcpy(item, p, n);
			item[n] = '\0';
			char *params = strchr(item, ';');
			if (params)
				*params++ = '\0';
			char *r = item + strspn(item, " \t");
			for (char *t = r + strlen(r); t > r && (t[-1] == ' ' || t[-1] == '\t');)
				*--t = '\0';
			bool q0 = false;
			for (char *q = params; q && *q;) {
				q += strspn(q, " \t");
				if ((q[0] == 'q' || q[0] == 'Q') && q[1] == '=')
					q0 = strtod(q + 2, NULL) <= 0;
				q = strchr(q, ';');
				q = q ? q + 1 : NULL;
			}
			bool match = strcasecmp(r, type) == 0 || strcmp(r, "*/*") == 0 ||
				     (strlen(r) == major + 2 && strncasecmp(r, type, major) == 0 &&
				      strcmp(r + major, "/*") == 0);
			if (match && !q0)
				return true;
		}
		p = end ? end + 1 : NULL;
	}
	return false;
}

/* http_content_type_json - the Content-Type is application/json (parameters such as charset allowed) */
bool http_content_type_json(const char *ct)
{
	if (!ct)
		return false;
	ct += strspn(ct, " \t");
	size_t n = strcspn(ct, "; \t");
	return n == 16 && strncasecmp(ct, "application/json", 16) == 0;
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
	return jsonrpc_error(p->id, p->ended ? -32000 : -32603, msg, NULL);
}

/* ---- text/event-stream ---- */

/*
 * One connection reading a call's SSE stream: the POST that started the call, or a GET that
 * resumes it with Last-Event-ID. Events are numbered per stream (pool.h: the priming event 0,
 * then the notifications and the answer in order) and sent with the id "<stream>-<n>"; the
 * pending keeps the last SSE_REPLAY_* of them, so a resumption sends those after its cursor.
 * The pending outlives a dropped connection (pool_pending_sweep frees it later); a second
 * reader of the same stream supersedes the first.
 */
struct sse {
	struct pending *p;
	char *buf;
	size_t len, off;
	bool last;             /* the stream's last bytes are in buf */
	bool complete;         /* ... and they were the answer (or the end of a call without one) */
	bool prime;            /* send the priming event first */
	unsigned reader;       /* its number in p->reader */
	uint64_t cursor;       /* the next event number to send */
	double deadline, quiet_until;
};

/* sse_put - an event into x->buf: an id, then (data == NULL) a comment line, (len == 0 and
 * retry) the priming event, or a message */
static void sse_put(struct sse *x, uint64_t no, const char *data, size_t len, bool prime)
{
	free(x->buf);
	x->buf = NULL;
	x->off = 0;
	FILE *f = open_memstream(&x->buf, &x->len);
	if (!f)
		return;
	if (!data && !prime)
		fputs(": keepalive\n\n", f);
	else if (prime)
		fprintf(f, "id: %s-%llu\nretry: %d\ndata: \n\n", x->p->stream, (unsigned long long)no,
			SSE_RETRY_MS);
	else {
		fprintf(f, "id: %s-%llu\nevent: message\ndata: ", x->p->stream, (unsigned long long)no);
		fwrite(data, 1, len, f);
		fputs("\n\n", f);
	}
	fclose(f);
	x->quiet_until = mono_s() + SSE_KEEPALIVE_S;
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
		struct pending *p = x->p;
		if (x->last) {
			x->complete = true;
			pthread_mutex_unlock(&pool.mu);
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
		if (p->reader != x->reader) {
			/* a resumption took the stream over: this connection is a dead one */
			pthread_mutex_unlock(&pool.mu);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		struct event *e = p->q;
		while (e && e->no < x->cursor)
			e = e->next;
		if (x->prime) {
			x->prime = false;
			sse_put(x, 0, NULL, 0, true);
		} else if (e) {
			sse_put(x, e->no, e->data, e->len, false);
			x->cursor = e->no + 1;
		} else if (p->done) {
			x->last = true;
			if (p->alen && x->cursor <= p->answer_no)
				sse_put(x, p->answer_no, p->answer, p->alen, false);
		} else if (p->gone || mono_s() > x->deadline) {
			char *b = p->gone ? gone_answer(p)
					  : jsonrpc_error(p->id, -32603, "timed out waiting for the worker", NULL);
			x->last = true;
			if (b)
				sse_put(x, p->ev_next, b, strlen(b), false);
			free(b);
		} else if (mono_s() >= x->quiet_until) {
			sse_put(x, 0, NULL, 0, false);
		} else {
			wait_on(p, 1);
		}
	}
}

/* sse_free - the stream is over, or the client went away: then the pending waits for a
 * resumption (pool_pending_sweep frees it if none comes) */
static void sse_free(void *cls)
{
	struct sse *x = cls;
	pthread_mutex_lock(&pool.mu);
	struct pending *p = x->p;
	if (p->reader == x->reader) {
		/* an answer sent is the end; a call that ended without one (cancelled) stays
		 * findable, so that a client resuming it learns that nothing more comes */
		if (x->complete && p->done && p->alen) {
			pool_pending_free(p);
		} else {
			p->attached = false;
			p->detached_at = mono_s();
			pthread_cond_broadcast(&p->cv);
		}
	}
	pthread_mutex_unlock(&pool.mu);
	free(x->buf);
	free(x);
}

/* sse_respond - answer with p's SSE stream from event number cursor (prime: the priming event
 * first); takes mu held, releases it */
static enum MHD_Result sse_respond(struct MHD_Connection *c, struct pending *p, uint64_t cursor,
				   bool prime, double deadline, const char *origin, const char *sid)
{
	struct sse *x = calloc(1, sizeof(*x));
	struct MHD_Response *r = x ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024,
								   sse_reader, x, sse_free) : NULL;
	if (!r) {
		free(x);
		if (!p->attached)
			pool_pending_free(p);
		pthread_mutex_unlock(&pool.mu);
		return MHD_NO;
	}
	if (!p->stream[0])
		random_hex(p->stream, SSE_STREAM_ID_HEX / 2);
	x->p = p;
	x->reader = ++p->reader;
	x->cursor = cursor;
	x->prime = prime;
	x->deadline = deadline;
	x->quiet_until = mono_s() + SSE_KEEPALIVE_S;
	p->attached = true;
	pthread_cond_broadcast(&p->cv); /* a reader it supersedes notices */
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

/* answer_pending - wait for the worker and answer the POST (takes mu held, releases it) */
static enum MHD_Result answer_pending(struct MHD_Connection *c, struct pending *p, bool sse_ok,
				      const char *origin, const char *sid)
{
	double deadline = mono_s() + HTTP_WAIT_S;
	while (!p->done && !p->gone && !(p->accepted && sse_ok) && mono_s() < deadline)
		wait_on(p, 1);
	if (!p->done && !p->gone && p->accepted && sse_ok)
		return sse_respond(c, p, 1, true, deadline, origin, sid);
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
	} else if (p->done && p->accepted) {
		/* a tools/call the client cancelled: MCP sends no result, but this POST asked for
		 * JSON and must get an answer, so it gets an error that says what happened */
		status = MHD_HTTP_OK;
		body = jsonrpc_error(p->id, HTTP_RPC_CANCELLED, "Request cancelled: the client sent "
				     "notifications/cancelled for it, so no result follows", NULL);
		len = body ? strlen(body) : 0;
	} else if (p->done) {
		status = MHD_HTTP_ACCEPTED; /* a notification or a response: nothing to say */
	} else {
		status = p->id ? MHD_HTTP_OK : MHD_HTTP_INTERNAL_SERVER_ERROR;
		body = p->gone ? gone_answer(p)
			       : jsonrpc_error(p->id, -32603, "timed out waiting for the worker", NULL);
		len = body ? strlen(body) : 0;
	}
	pool_pending_free(p);
	pthread_mutex_unlock(&pool.mu);
	enum MHD_Result q = reply(c, status, body ? "application/json" : NULL, body, len, origin, sid);
	free(body);
	return q;
}

/* body_keep_ends - switch rq to keeping only the ends of its body */
static void body_keep_ends(struct req *rq)
{
	if (rq->discard)
		return;
	rq->discard = true;
	rq->hlen = rq->len < IPC_TOOBIG_KEEP ? rq->len : IPC_TOOBIG_KEEP;
	rq->tlen = rq->hlen;
	if (rq->len) {
		memcpy(rq->head, rq->body, rq->hlen);
		memcpy(rq->tail, rq->body + rq->len - rq->tlen, rq->tlen);
	}
	free(rq->body);
	rq->body = NULL;
	rq->len = rq->cap = 0;
}

/* body_add - more of the body (0, or -ENOMEM) */
static int body_add(struct req *rq, const char *data, size_t n)
{
	rq->total += n;
	if (rq->total > MCP_MAX_MESSAGE)
		rq->too_big = true;
	if (!rq->discard && rq->total > rq->limit)
		body_keep_ends(rq); /* keep reading (so the client sees our answer), keep the ends */
	if (!rq->discard) {
		if (rq->len + n + 1 > rq->cap) {
			size_t cap = rq->cap ? rq->cap * 2 : 64 * 1024;
			while (cap < rq->len + n + 1)
				cap *= 2;
			if (cap > rq->limit + 1)
				cap = rq->limit + 1;
			char *nb = realloc(rq->body, cap);
			if (!nb)
				return -ENOMEM;
			rq->body = nb;
			rq->cap = cap;
		}
		memcpy(rq->body + rq->len, data, n);
		rq->len += n;
		return 0;
	}
	size_t h = n < IPC_TOOBIG_KEEP - rq->hlen ? n : IPC_TOOBIG_KEEP - rq->hlen;
	memcpy(rq->head + rq->hlen, data, h);
	rq->hlen += h;
	if (n >= IPC_TOOBIG_KEEP) {
		memcpy(rq->tail, data + n - IPC_TOOBIG_KEEP, IPC_TOOBIG_KEEP);
		rq->tlen = IPC_TOOBIG_KEEP;
	} else {
		if (rq->tlen + n > IPC_TOOBIG_KEEP) {
			size_t drop = rq->tlen + n - IPC_TOOBIG_KEEP;
			memmove(rq->tail, rq->tail + drop, rq->tlen - drop);
			rq->tlen -= drop;
		}
		memcpy(rq->tail + rq->tlen, data, n);
		rq->tlen += n;
	}
	return 0;
}

/* body_release - give back what rq reserved in its session's inflight_bytes (under mu) */
static void body_release(struct req *rq)
{
	if (!rq->reserved)
		return;
	struct slot *s = &pool.slots[rq->slot];
	if (s->state == SLOT_SESSION && strcmp(s->w.session, rq->sid) == 0)
		s->inflight_bytes -= rq->reserved <= s->inflight_bytes ? rq->reserved : s->inflight_bytes;
	rq->reserved = 0;
}

/* body_plan - the headers are in: how much of the body to keep. A POST to an open session
 * reserves its Content-Length (or the largest message) against the session's waiting bytes,
 * and one that would pass them is read but not kept; so is one to a session that does not
 * exist. An initialize (no session yet) is kept up to HTTP_MAX_INIT_BYTES. */
static void body_plan(struct MHD_Connection *c, const char *url, const char *method, struct req *rq)
{
	rq->limit = MCP_MAX_MESSAGE;
	if (strcmp(url, "/mcp") != 0 || strcmp(method, "POST") != 0)
		return;
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	unsigned long long want = MCP_MAX_MESSAGE;
	if (cl && *cl >= '0' && *cl <= '9')
		want = strtoull(cl, NULL, 10);
	if (want > MCP_MAX_MESSAGE) {
		rq->limit = 0; /* 413 when it is in */
		return;
	}
	const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
	if (!sid) {
		rq->limit = HTTP_MAX_INIT_BYTES;
		return;
	}
	pthread_mutex_lock(&pool.mu);
	int i = pool_find_session(sid);
	if (i < 0) {
		rq->limit = 0; /* 404 when it is in */
	} else {
		struct slot *s = &pool.slots[i];
		if (s->inflight >= SESSION_MAX_WAITING_REQUESTS ||
		    s->inflight_bytes + want > SESSION_MAX_WAITING_BYTES) {
			rq->over_session = true;
			rq->limit = 0;
		} else {
			s->inflight_bytes += want;
			rq->reserved = (size_t)want;
			rq->slot = i;
			snprintf(rq->sid, sizeof(rq->sid), "%s", sid);
		}
	}
	pthread_mutex_unlock(&pool.mu);
}

/* retry_after - seconds until an open session's idle timeout frees a worker (under mu) */
static int retry_after(void)
{
	double now = mono_s(), best = HTTP_RETRY_AFTER_MAX_S;
	for (int i = 0; i < pool.nslots; i++) {
		const struct slot *s = &pool.slots[i];
		if (s->state == SLOT_ENDING || s->state == SLOT_CLOSING || s->state == SLOT_SPAWNING ||
		    s->state == SLOT_STARTING)
			best = 1;
		else if (s->state == SLOT_SESSION && s->inflight == 0 && !s->busy) {
			double left = s->last_active + pool_idle_limit(s) - now;
			if (left < best)
				best = left;
		}
	}
	int r = (int)(best + 0.999);
	return r < 1 ? 1 : r;
}

/* worker_coming - could waiting get a new session a worker? One is idle or starting, a slot is
 * free (one can start) or a worker is on its way out; not when every slot holds a session. */
static bool worker_coming(void)
{
	for (int i = 0; i < pool.nslots; i++)
		if (pool.slots[i].state != SLOT_SESSION && pool.slots[i].state != SLOT_OPENING)
			return true;
	return false;
}

/* evict_unused - end the session idle longest among those that never made a tool call and
 * hold no request, if it has been idle a while (HTTP_EVICT_MIN_IDLE_S, or a quarter of
 * --unused-session-timeout if that is less): its worker goes to a new session. key: only
 * sessions of that user (by_user) or peer address; NULL: any. True if one was ended. */
static bool evict_unused(const char *key, bool by_user)
{
	double now = mono_s(), min_idle = pool.cfg->unused_session_timeout_s / 4.0;
	if (min_idle > HTTP_EVICT_MIN_IDLE_S)
		min_idle = HTTP_EVICT_MIN_IDLE_S;
	int best = -1;
	for (int i = 0; i < pool.nslots; i++) {
		const struct slot *s = &pool.slots[i];
		if (s->state != SLOT_SESSION || s->calls || s->inflight || s->busy ||
		    now - s->last_active < min_idle)
			continue;
		if (key && strcmp(by_user ? s->user : s->peer, key) != 0)
			continue;
		if (best < 0 || s->last_active < pool.slots[best].last_active)
			best = i;
	}
	if (best < 0)
		return false;
	pool_end_session(best, "evicted: idle and never used, and its worker was needed for a new session");
	return true;
}

/* peer_address - the client's address, as text */
static void peer_address(struct MHD_Connection *c, char *out, size_t cap)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	snprintf(out, cap, "?");
	if (!ci || !ci->client_addr)
		return;
	const struct sockaddr *sa = ci->client_addr;
	if (sa->sa_family == AF_INET) {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)cap);
	} else if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED(a))
			inet_ntop(AF_INET, &a->s6_addr[12], out, (socklen_t)cap);
		else
			inet_ntop(AF_INET6, a, out, (socklen_t)cap);
	}
}

/* post_initialize - a POST without a session: it must be an initialize, which opens one */
static enum MHD_Result post_initialize(struct MHD_Connection *c, struct req *rq, const char *origin,
				       const char *user)
{
	char peer[48];
	peer_address(c, peer, sizeof(peer));
	pthread_mutex_lock(&pool.mu);
	/* new sessions per client: per signed-in user with sign-in (many users may share one
	 * address behind a proxy), else per peer address */
	bool by_user = auth_enabled();
	int mine = 0;
	for (int k = 0; k < pool.nslots; k++)
		mine += (pool.slots[k].state == SLOT_SESSION || pool.slots[k].state == SLOT_OPENING) &&
			strcmp(by_user ? pool.slots[k].user : pool.slots[k].peer, by_user ? user : peer) == 0;
	if (mine >= pool.cfg->max_sessions_per_peer && !evict_unused(by_user ? user : peer, by_user)) {
		int ra = retry_after();
		pthread_mutex_unlock(&pool.mu);
		char msg[300];
		snprintf(msg, sizeof(msg), "Too many sessions: this %s already has %d open (the limit, "
			 "--max-sessions-per-peer, is %d). End one with DELETE, or try again in %d s.",
			 by_user ? "user" : "client address", mine, pool.cfg->max_sessions_per_peer, ra);
		log_info("new session from %s (%s) refused: %d open, limit %d", peer, user, mine,
			 pool.cfg->max_sessions_per_peer);
		return reply_rpc(c, MHD_HTTP_TOO_MANY_REQUESTS, request_id(rq), -32000, msg, origin, ra);
	}
	/* wait for a worker only while one can come (a session never used may give its worker);
	 * at --max-workers, answer at once. An idle worker can die before the main loop has seen
	 * it (killed, out of memory): then the initialize never reached a worker, and it goes to
	 * another one, up to HTTP_INIT_TRIES in all. */
	for (int attempt = 1;; attempt++) {
		int i = -1;
		if (!worker_coming())
			evict_unused(NULL, false);
		for (double until = mono_s() + HTTP_WORKER_WAIT_S; i < 0 && worker_coming() &&
		     !pool_unavailable() && !pool.stopping && mono_s() < until;)
			i = pool_take_idle(0.25);
		if (i < 0) {
			int ra = retry_after();
			char msg[300];
			if (pool_unavailable()) /* no worker will ever come (a configuration error) */
				snprintf(msg, sizeof(msg), "%s", pool_unavailable());
			else
				snprintf(msg, sizeof(msg), "The server is at its --max-workers limit (%d sessions); "
					 "try again in %d s, when an idle session has ended.", pool.cfg->max_workers, ra);
			pthread_mutex_unlock(&pool.mu);
			return reply_rpc(c, MHD_HTTP_SERVICE_UNAVAILABLE, request_id(rq), -32000, msg, origin,
					 pool_unavailable() ? 0 : ra);
		}
		struct slot *s = &pool.slots[i];
		pid_t wpid = s->w.pid;
		int tasks = spawn_prestart_done(&s->w);
		random_hex(s->w.session, SESSION_ID_HEX / 2);
		snprintf(s->user, sizeof(s->user), "%s", user); /* "local" with --auth none */
		snprintf(s->peer, sizeof(s->peer), "%s", peer);
		s->opened = mono_s();
		struct ipc_buf b;
		bool assign = ipc_pack_note_assign(&b, 0, s->w.session, s->user) == 0;
		struct pending *p = pool_send(i, assign ? &b : NULL, rq->body, rq->len);
		if (!p) {
			if (tasks >= 0)
				close(tasks);
			if (s->w.pid == wpid) /* (mu was let go while sending) */
				pool_end_session(i, "worker unreachable");
			if (attempt < HTTP_INIT_TRIES && !pool.stopping)
				continue;
			pthread_mutex_unlock(&pool.mu);
			return reply_rpc(c, MHD_HTTP_INTERNAL_SERVER_ERROR, request_id(rq), -32603,
					 "The worker for this session is gone; try again.", origin, 0);
		}
		if (tasks >= 0) { /* its priority back without the lock (the /proc reads took ms), as
				   * the wait below lets it go too */
			pthread_mutex_unlock(&pool.mu);
			spawn_renice(tasks);
			pthread_mutex_lock(&pool.mu);
		}
		double deadline = mono_s() + HTTP_INIT_WAIT_S;
		while (!p->done && !p->gone && mono_s() < deadline)
			wait_on(p, 1);
		if (p->done && s->initialized && s->state == SLOT_OPENING) {
			char sid[SESSION_ID_HEX + 1];
			snprintf(sid, sizeof(sid), "%s", s->w.session);
			s->state = SLOT_SESSION;
			pool.sessions_total++;
			log_info("session %.8s… opened for %s from %s (worker pid %d)", sid, s->user, peer,
				 (int)s->w.pid);
			return answer_pending(c, p, false, origin, sid);
		}
		if (p->gone && !p->done) { /* the worker died before it answered: never the client's fault */
			pool_pending_free(p);
			/* (mu was let go while waiting: the slot may hold another worker by now) */
			if (s->w.pid == wpid)
				pool_end_session(i, "its worker died before it answered initialize");
			if (attempt < HTTP_INIT_TRIES && !pool.stopping) {
				log_info("a new session's worker (pid %d) died before it answered initialize; "
					 "trying another", (int)wpid);
				continue;
			}
			pthread_mutex_unlock(&pool.mu);
			return reply_rpc(c, MHD_HTTP_SERVICE_UNAVAILABLE, request_id(rq), -32000,
					 "The workers given to this new session died before they answered; try "
					 "again (the server's log says why they died).", origin, retry_after());
		}
		/* not an initialize (or it failed): this worker saw untrusted input without a session, and
		 * workers are never reused, so it goes. What the worker answered (a malformed initialize's
		 * -32602, a parse error) is the body; a notification, a success (a ping) or silence gets
		 * the generic one. */
		char *answer = NULL;
		if (p->done && p->alen) {
			json_t *a = json_loadb(p->answer, p->alen, 0, NULL);
			if (json_is_object(json_object_get(a, "error")))
				answer = strndup(p->answer, p->alen);
			json_decref(a);
		}
		pool_pending_free(p);
		if (s->w.pid == wpid)
			pool_end_session(i, "no session opened");
		pthread_mutex_unlock(&pool.mu);
		if (answer) {
			enum MHD_Result q = reply(c, MHD_HTTP_BAD_REQUEST, "application/json", answer,
						  strlen(answer), origin, NULL);
			free(answer);
			return q;
		}
		return reply_rpc(c, MHD_HTTP_BAD_REQUEST, request_id(rq), -32000,
				 "Bad Request: no valid session. Send initialize without an Mcp-Session-Id "
				 "header to open one, then send that header with every request", origin, 0);
	}
}

/* parse_event_id - "<stream>-<n>" as this server writes them; false for anything else */
static bool parse_event_id(const char *v, char *stream, size_t cap, uint64_t *n)
{
	if (strlen(v) < SSE_STREAM_ID_HEX + 2 || v[SSE_STREAM_ID_HEX] != '-' || cap <= SSE_STREAM_ID_HEX)
		return false;
	if (strspn(v, "0123456789abcdef") != SSE_STREAM_ID_HEX)
		return false;
	const char *num = v + SSE_STREAM_ID_HEX + 1;
	if (strspn(num, "0123456789") != strlen(num) || strlen(num) > 18)
		return false;
	memcpy(stream, v, SSE_STREAM_ID_HEX);
	stream[SSE_STREAM_ID_HEX] = '\0';
	*n = strtoull(num, NULL, 10);
	return true;
}

/* get_resume - GET with Last-Event-ID: the rest of a call's SSE stream after that event */
static enum MHD_Result get_resume(struct MHD_Connection *c, const char *sid, const char *user,
				  const char *origin)
{
	const char *last = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Last-Event-ID");
	const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
	char stream[SSE_STREAM_ID_HEX + 1];
	uint64_t n;
	if (!sid)
		return reply_error(c, MHD_HTTP_BAD_REQUEST, -32000, "Bad Request: resuming a stream "
				   "needs the Mcp-Session-Id header of its session", origin);
	if (!accept || !http_media_admits(accept, "text/event-stream"))
		return reply_error(c, MHD_HTTP_NOT_ACCEPTABLE, -32000, "Not Acceptable: a resumed "
				   "stream is text/event-stream; send Accept: text/event-stream", origin);
	if (!parse_event_id(last, stream, sizeof(stream), &n))
		return reply_error(c, MHD_HTTP_BAD_REQUEST, -32000, "Bad Request: Last-Event-ID is "
				   "not an event id this server sent (they look like "
				   "0123456789abcdef-12)", origin);
	pthread_mutex_lock(&pool.mu);
	int i = pool_find_session(sid);
	if (i >= 0 && strcmp(pool.slots[i].user, user) != 0)
		i = -1; /* another user's session: as if it did not exist */
	if (i < 0) {
		pthread_mutex_unlock(&pool.mu);
		return reply_error(c, MHD_HTTP_NOT_FOUND, -32001, "Session not found: it ended or never "
				   "existed; start a new one with initialize", origin);
	}
	struct pending *p = pool_find_stream(i, stream);
	if (!p || p->gone) {
		pthread_mutex_unlock(&pool.mu);
		char msg[200];
		snprintf(msg, sizeof(msg), "Not found: no stream %s in this session: its call ended "
			 "and was read, or ended more than %d s ago unread", stream, SSE_RESUME_WINDOW_S);
		return reply_error(c, MHD_HTTP_NOT_FOUND, -32001, msg, origin);
	}
	if (p->done && !p->alen && (!p->qtail || p->qtail->no <= n)) {
		/* a call that ended without an answer (it was cancelled): nothing more comes */
		pthread_mutex_unlock(&pool.mu);
		return reply(c, MHD_HTTP_NO_CONTENT, NULL, NULL, 0, origin, NULL);
	}
	log_debug("stream %s resumed after event %llu", stream, (unsigned long long)n);
	return sse_respond(c, p, n + 1, false, mono_s() + HTTP_WAIT_S, origin, NULL);
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
	if (strcmp(method, "GET") == 0 && MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Last-Event-ID"))
		return get_resume(c, sid, user, origin);
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
		return reply_rpc(c, MHD_HTTP_CONTENT_TOO_LARGE, request_id(rq), -32600, msg, origin, 0);
	}
	if (!sid && rq->discard) {
		char msg[200];
		snprintf(msg, sizeof(msg), "the request body is over the %u KiB an initialize may take "
			 "(no session yet): send initialize first, then the rest with its Mcp-Session-Id",
			 HTTP_MAX_INIT_BYTES >> 10);
		return reply_rpc(c, MHD_HTTP_CONTENT_TOO_LARGE, request_id(rq), -32600, msg, origin, 0);
	}
	/* Streamable HTTP: a POST carries application/json and accepts application/json (and
	 * text/event-stream, which tool calls use when it is accepted) */
	if (!http_content_type_json(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type")))
		return reply_rpc(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, request_id(rq), -32000,
				 "Unsupported Media Type: send the JSON-RPC message with Content-Type: "
				 "application/json", origin, 0);
	const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
	if (!accept || !http_media_admits(accept, "application/json"))
		return reply_rpc(c, MHD_HTTP_NOT_ACCEPTABLE, request_id(rq), -32000,
				 "Not Acceptable: send Accept: application/json, text/event-stream", origin, 0);
	bool sse_ok = http_media_admits(accept, "text/event-stream");
	if (rq->total == 0)
		return reply_error(c, MHD_HTTP_BAD_REQUEST, -32700, "Parse error: empty body", origin);
	if (!sid)
		return post_initialize(c, rq, origin, user);
	const char *ver = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version");
	if (ver) {
		bool ok = false;
		for (size_t k = 0; k < 4; k++)
			ok |= strcmp(ver, http_versions[k]) == 0;
		if (!ok)
			return reply_rpc(c, MHD_HTTP_BAD_REQUEST, request_id(rq), -32000,
					 "Bad Request: unsupported MCP-Protocol-Version (this server speaks "
					 "2025-11-25, 2025-06-18, 2025-03-26 and 2024-11-05)", origin, 0);
	}
	pthread_mutex_lock(&pool.mu);
	int i = pool_find_session(sid);
	if (i >= 0 && strcmp(pool.slots[i].user, user) != 0) {
		/* a session answers only the user who opened it; to anyone else it does not exist */
		log_warn("user %s sent a request to a session of another user; refused", user);
		i = -1;
	}
	if (i < 0) {
		pthread_mutex_unlock(&pool.mu);
		return reply_rpc(c, MHD_HTTP_NOT_FOUND, request_id(rq), -32001, "Session not found: it "
				 "ended or never existed; start a new one with initialize", origin, 0);
	}
	struct slot *s = &pool.slots[i];
	if (rq->over_session || rq->discard) {
		int n = s->inflight;
		size_t bytes = s->inflight_bytes;
		pthread_mutex_unlock(&pool.mu);
		char msg[300];
		snprintf(msg, sizeof(msg), "Too many requests waiting in this session (%d, %zu KiB; the "
			 "limits are %d requests and %u MiB): wait for their answers before sending more",
			 n, bytes >> 10, SESSION_MAX_WAITING_REQUESTS, SESSION_MAX_WAITING_BYTES >> 20);
		return reply_rpc(c, MHD_HTTP_TOO_MANY_REQUESTS, request_id(rq), -32000, msg, origin, 1);
	}
	body_release(rq); /* from here the message counts as waiting (pool_send) */
	struct pending *p = pool_send(i, NULL, rq->body, rq->len);
	if (!p) {
		pthread_mutex_unlock(&pool.mu);
		return reply_rpc(c, MHD_HTTP_NOT_FOUND, request_id(rq), -32001,
				 "Session not found: its worker is gone", origin, 0);
	}
	/* the worker has its copy: keep no body while waiting for the answer */
	free(rq->body);
	rq->body = NULL;
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
		/* the headers are in: the short header timeout gives way to the request's */
		MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)HTTP_REQUEST_TIMEOUT_S);
		body_plan(c, url, method, rq);
		return MHD_YES;
	}
	if (*size) {
		int r = body_add(rq, data, *size);
		*size = 0;
		return r == 0 ? MHD_YES : MHD_NO;
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
		auth_metrics(&m, &len);
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
	(void)t;
	struct req *rq = *ctx;
	if (rq) {
		if (rq->reserved) {
			pthread_mutex_lock(&pool.mu);
			body_release(rq);
			pthread_mutex_unlock(&pool.mu);
		}
		free(rq->body);
		free(rq->id);
		free(rq);
		MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)HTTP_KEEPALIVE_TIMEOUT_S);
	}
	*ctx = NULL;
}

/* http_on_hup - SIGHUP: the TLS certificate is read again (open connections keep theirs) */
static void http_on_hup(void)
{
	if (tls_enabled())
		tls_reload();
	else
		log_info("SIGHUP: nothing to reload (no --tls-cert)");
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
	/* Bodies and IPC buffers of up to 4 MiB come and go on many connection threads: kept in
	 * glibc's per-thread arenas after free, they would make the process as big as the worst
	 * moment of each thread. Large blocks are mapped and unmapped instead, and few arenas used,
	 * so the server's size follows what it holds (the per-session limits in pool.h). */
	mallopt(M_MMAP_THRESHOLD, HTTP_MALLOC_MMAP_BYTES);
	mallopt(M_ARENA_MAX, 2);
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
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_HEADER_TIMEOUT_S,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_MAX_CONNECTIONS,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->max_connections_per_peer,
		MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
	if (!d) {
		log_error("cannot start the HTTP server");
		return 1;
	}
	log_info("kode-gopher %s serving MCP on %s (auth %s, %d idle workers kept ready, at most %d)",
		 KG_VERSION, where, cfg->auth, cfg->workers_min_idle, cfg->max_workers);
	pool.on_hup = http_on_hup;
	pool_loop();
	log_info("shutting down: open sessions end");
	pool_shutdown();
	MHD_stop_daemon(d);
	tls_free(tls_keep);
	return 0;
}
