/*
 * agent_client.c - the worker's side of the agent's HTTP API: claim, health, execute, doc.
 *
 * Called by the worker's sandbox backends; the server is agent/server.c and the protocol is in
 * docs/agent-api.md. One request of lib/http_client.c (a libcurl handle of its own) per call: calls are seconds long and one at a
 * time, so connection reuse would buy nothing and would make "the sandbox died" harder to see.
 *
 * The /execute answer is an NDJSON stream parsed as it arrives, so progress reaches the model
 * while the build runs. Everything the agent sends is untrusted (the user's code runs next to
 * it): line sizes are bounded, every line must be a JSON object, nothing may follow the result.
 */
#include "worker/agent_client.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "agent/artifacts.h"
#include "ipc/log.h"
#include "lib/buf.h"
#include "lib/http_client.h"
#include "lib/mono.h"
#include "policy/limits.h"


static const char ac_died[] = "the sandbox stopped responding in the middle of the call";

enum ac_kind { AC_CLAIM, AC_HEALTH, AC_EXECUTE, AC_DOC, AC_READ };

/* One transfer's state, shared with the http_client callbacks. */
struct ac_xfer {
	enum ac_kind kind;
	long status;            /* HTTP status, known from the first body byte */
	int rc;                 /* set when a callback aborts the transfer */
	char *err;
	size_t errlen;
	/* whole answers (everything but a 200 /execute), at most max bytes */
	struct buf ans;
	size_t max;
	/* the /execute stream's unfinished line */
	struct buf line;
	json_t *result;
	agent_progress_fn progress;
	void *ctx;
	agent_event_fn on_event;
	void *ectx;
	volatile int *cancel;
	long long cancel_seen_ms; /* when *cancel was first seen set; 0: not yet */
	char ctype[128];        /* AC_READ: the answer's Content-Type */
};

/* ac_fail - record a verdict from inside a callback (the first one wins) */
static void ac_fail(struct ac_xfer *x, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void ac_fail(struct ac_xfer *x, int rc, const char *fmt, ...)
{
	if (x->rc)
		return;
	x->rc = rc;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(x->err, x->errlen, fmt, ap);
	va_end(ap);
	/* the sentence may quote the sandbox's bytes (jansson's context of a bad line, an event
	 * name cut at 32 bytes, a content type): keep it printable ASCII, so that it survives the
	 * JSON encoding on its way to the model instead of emptying the answer */
	for (char *p = x->errlen ? x->err : ""; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
			*p = '?';
}

/* ac_line - act on one complete NDJSON line of the /execute stream */
static int ac_line(struct ac_xfer *x, const char *s, size_t n)
{
	if (n && s[n - 1] == '\r')
		n--;
	if (n == 0)
		return 0;
	if (x->result) {
		ac_fail(x, -EPROTO, "the sandbox sent more data after the result of the call");
		return -1;
	}
	json_error_t jerr;
	json_t *ev = json_loadb(s, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
	const char *name = json_string_value(json_object_get(ev, "event"));
	if (!json_is_object(ev) || !name) {
		json_decref(ev);
		ac_fail(x, -EPROTO, "the sandbox sent a stream line that is not a JSON event "
			"object%s%s", ev ? "" : ": ", ev ? "" : jerr.text);
		return -1;
	}
	int rc = 0;
	if (strcmp(name, "progress") == 0) {
		const char *phase = json_string_value(json_object_get(ev, "phase"));
		const char *msg = json_string_value(json_object_get(ev, "message"));
		if (n > AGENT_CLIENT_MAX_LINE || !phase || !msg) {
			ac_fail(x, -EPROTO, "the sandbox sent a malformed progress event");
			rc = -1;
		} else if (x->progress) {
			x->progress(x->ctx, phase, msg);
		}
	} else if (strcmp(name, "result") == 0) {
		json_t *res = json_object_get(ev, "result");
		if (!json_is_object(res)) {
			ac_fail(x, -EPROTO, "the sandbox sent a result event without a result object");
			rc = -1;
		} else {
			x->result = json_incref(res);
		}
	} else if (n > AGENT_CLIENT_MAX_LINE) {
		ac_fail(x, -EPROTO, "the sandbox sent an oversized \"%.32s\" event", name);
		rc = -1;
	} else if (strcmp(name, "log") == 0) {
		if (!json_is_string(json_object_get(ev, "phase")) ||
		    !json_is_string(json_object_get(ev, "stream")) ||
		    !json_is_string(json_object_get(ev, "text"))) {
			ac_fail(x, -EPROTO, "the sandbox sent a malformed log event");
			rc = -1;
		} else if (x->on_event) {
			x->on_event(x->ectx, ev);
		}
	} else if ((strcmp(name, "token_request") == 0 || strcmp(name, "heartbeat") == 0) &&
		   x->on_event) {
		x->on_event(x->ectx, ev);
	}
	/* events added by newer agents carry nothing for us */
	json_decref(ev);
	return rc;
}

/* ac_feed - split stream bytes into lines, bounded by AGENT_CLIENT_MAX_RESULT */
static int ac_feed(struct ac_xfer *x, const char *p, size_t n)
{
	while (n) {
		const char *nl = memchr(p, '\n', n);
		size_t take = nl ? (size_t)(nl - p) : n;
		if (nl && x->line.len == 0) {
			/* the whole line is in this piece: no copy */
			if (ac_line(x, p, take) < 0)
				return -1;
		} else {
			int g = buf_add(&x->line, p, take, AGENT_CLIENT_MAX_RESULT);
			if (g < 0) {
				ac_fail(x, g == -ENOMEM ? -ENOMEM : -EPROTO,
					g == -ENOMEM ? "out of memory reading the sandbox's answer"
						     : "the sandbox sent a line longer than %u bytes",
					AGENT_CLIENT_MAX_RESULT);
				return -1;
			}
			if (nl) {
				int r = ac_line(x, x->line.data, x->line.len);
				x->line.len = 0;
				if (r < 0)
					return -1;
			}
		}
		if (!nl)
			break;
		p += take + 1;
		n -= take + 1;
	}
	return 0;
}

/*
 * ac_stream_end - the /execute stream ended cleanly: it must have carried the result, and
 * nothing after it, not even an unfinished line (the agent ends every line with a newline;
 * bytes after the result's line that never got one are still data after the result)
 */
static int ac_stream_end(struct ac_xfer *x, char *err, size_t errlen)
{
	if (!x->result) {
		/* a clean end of the stream without the result is still a dead call */
		snprintf(err, errlen, "%s (the stream ended before the result)", ac_died);
		return -EPIPE;
	}
	if (x->line.len) {
		snprintf(err, errlen, "the sandbox sent more data after the result of the call");
		return -EPROTO;
	}
	return 0;
}

/* ac_data - the answer as it arrives: stream for a 200 /execute, collect otherwise; 0, or the
 * verdict that stops the transfer */
static int ac_data(void *ud, const struct http_response *r, const char *p, size_t n)
{
	struct ac_xfer *x = ud;
	if (!x->status) {
		x->status = r->status;
		const char *ct = r->content_type[0] ? r->content_type : NULL;
		if (x->kind == AC_EXECUTE && x->status == 200 &&
		    (!ct || strncasecmp(ct, "application/x-ndjson", 20) != 0)) {
			ac_fail(x, -EPROTO, "the sandbox answered /execute with %s instead of an "
				"NDJSON stream", ct ? ct : "no content type");
			return x->rc;
		}
		if (x->kind == AC_READ) {
			snprintf(x->ctype, sizeof(x->ctype), "%s", r->content_type);
			/* one allocation for the piece, not a doubling from 4 KiB */
			long long cl = r->content_length;
			if (x->status == 200 && cl > 0 && (size_t)cl <= x->max &&
			    buf_reserve(&x->ans, (size_t)cl) < 0) {
				ac_fail(x, -ENOMEM, "out of memory reading the sandbox's answer");
				return x->rc;
			}
		}
	}
	if (x->kind == AC_EXECUTE && x->status == 200)
		return ac_feed(x, p, n) == 0 ? 0 : x->rc ? x->rc : -EPROTO;

	size_t max = x->status == 200 ? x->max : AGENT_CLIENT_MAX_LINE;
	if (x->ans.len + n > max) {
		if (x->status != 200)
			return 0; /* an error sentence: its head is enough */
		ac_fail(x, -EPROTO, "the sandbox's answer is larger than %zu bytes", max);
		return x->rc;
	}
	if (buf_add(&x->ans, p, n, max) < 0) {
		ac_fail(x, -ENOMEM, "out of memory reading the sandbox's answer");
		return x->rc;
	}
	return 0;
}


/* ac_abort - polled during the transfer: a cancelled call ends its stream itself (POST
 * /cancel kills what runs and the agent sends its result); one that does not within
 * AGENT_CLIENT_CANCEL_GRACE_MS is cut here */
static bool ac_abort(void *ud)
{
	struct ac_xfer *x = ud;
	if (!x->cancel || !*x->cancel)
		return false;
	long long now = mono_ms();
	if (!x->cancel_seen_ms)
		x->cancel_seen_ms = now;
	return x->kind != AC_EXECUTE || now - x->cancel_seen_ms >= AGENT_CLIENT_CANCEL_GRACE_MS;
}

/* ac_where - the endpoint, for sentences */
static const char *ac_where(const struct agent_endpoint *ep)
{
	return ep->unix_path ? ep->unix_path : ep->base_url ? ep->base_url : "(no address)";
}

/* ac_transport_error - a failed transfer as a negative errno and a sentence */
static int ac_transport_error(const struct agent_endpoint *ep, struct ac_xfer *x,
			      const struct http_response *r, int e, long timeout_ms, char *err,
			      size_t errlen)
{
	const char *what = r->detail[0] ? r->detail : r->err;
	switch (r->fail) {
	case HTTP_FAIL_CONNECT:
		if (e == -ENOENT) {
			snprintf(err, errlen, "no sandbox agent is listening at %s (the socket does "
				 "not exist): the sandbox is gone", ac_where(ep));
			return -ENOENT;
		}
		if (e == -EHOSTUNREACH) {
			snprintf(err, errlen, "the sandbox at %s is unreachable: %s", ac_where(ep),
				 what);
			return -EHOSTUNREACH;
		}
		snprintf(err, errlen, "the sandbox's agent at %s refused the connection: %s",
			 ac_where(ep), what);
		return -ECONNREFUSED;
	case HTTP_FAIL_RESOLVE:
		snprintf(err, errlen, "cannot resolve the sandbox address %s: %s", ac_where(ep),
			 what);
		return -EHOSTUNREACH;
	case HTTP_FAIL_TIMEOUT:
		if (x->kind == AC_EXECUTE && x->status) {
			snprintf(err, errlen, "%s: nothing arrived for %d seconds", ac_died,
				 AGENT_CLIENT_STALL_S);
			return -EPIPE;
		}
		snprintf(err, errlen, "the sandbox at %s did not answer within %ld ms",
			 ac_where(ep), timeout_ms ? timeout_ms : AC_CONNECT_TIMEOUT_MS);
		return -ETIMEDOUT;
	case HTTP_FAIL_BROKEN: /* through the API server's pod proxy (HTTP/2), a stream reset */
		snprintf(err, errlen, "%s (%s)", ac_died, what);
		return -EPIPE;
	default:
		if (e == -ENOMEM) {
			snprintf(err, errlen, "out of memory talking to the sandbox");
			return -ENOMEM;
		}
		snprintf(err, errlen, "talking to the sandbox at %s failed: %s", ac_where(ep),
			 what);
		return -EIO;
	}
}

/* ac_status_error - a non-200 answer as a negative errno and a sentence */
static int ac_status_error(struct ac_xfer *x, char *err, size_t errlen)
{
	json_t *j = x->ans.data ? json_loadb(x->ans.data, x->ans.len, 0, NULL) : NULL;
	const char *why = json_string_value(json_object_get(j, "error"));
	if (!why)
		why = "no explanation given";
	int rc;
	switch (x->status) {
	case 400:
		snprintf(err, errlen, "the sandbox rejected the request: %s", why);
		rc = -EINVAL;
		break;
	case 401:
		snprintf(err, errlen, "the sandbox refused this session's credentials: %s", why);
		rc = -EACCES;
		break;
	case 409:
		if (x->kind == AC_CLAIM) {
			snprintf(err, errlen, "this sandbox was already claimed by someone else");
			rc = -EALREADY;
		} else {
			snprintf(err, errlen, "the sandbox is still running another call");
			rc = -EBUSY;
		}
		break;
	case 404:
		snprintf(err, errlen, "the sandbox has no such endpoint or request: %s", why);
		rc = -ESRCH;
		break;
	case 413:
		snprintf(err, errlen, "the request is larger than the sandbox accepts: %s", why);
		rc = -EMSGSIZE;
		break;
	case 503:
		snprintf(err, errlen, "the sandbox is shutting down: %s", why);
		rc = -ECONNRESET;
		break;
	default:
		snprintf(err, errlen, "the sandbox answered HTTP %ld, which this client does not "
			 "expect: %s", x->status, why);
		rc = x->status >= 500 ? -EIO : -EPROTO;
		break;
	}
	json_decref(j);
	return rc;
}

/* ac_is_kube_status - is the answer the API server's own Status object (not the agent's)? */
static bool ac_is_kube_status(struct ac_xfer *x)
{
	json_t *j = x->ans.data ? json_loadb(x->ans.data, x->ans.len, 0, NULL) : NULL;
	const char *kind = json_string_value(json_object_get(j, "kind"));
	bool yes = kind && strcmp(kind, "Status") == 0;
	json_decref(j);
	return yes;
}

/* ac_proxy_error - the master's relay (or the API server's pod proxy behind it), not the agent,
 * refused: the pod is gone or out of reach */
static int ac_proxy_error(struct ac_xfer *x, char *err, size_t errlen)
{
	json_t *j = x->ans.data ? json_loadb(x->ans.data, x->ans.len, 0, NULL) : NULL;
	const char *msg = json_string_value(json_object_get(j, "message"));
	char why[400];
	snprintf(why, sizeof(why), "%s", msg ? msg : x->ans.len ? x->ans.data : "no explanation");
	snprintf(err, errlen, "the server could not reach the sandbox's pod (HTTP %ld): %s%s",
		 x->status, why,
		 strstr(why, "address not allowed")
			 ? " (the API server proxies only to routable pod IPs; where kode-gopher "
			   "can reach pod IPs itself, use --agent-access pod-ip)"
			 : "");
	json_decref(j);
	if (x->status == 404)
		return -ENOENT;
	return x->status == 502 || x->status == 503 ? -ECONNREFUSED : -EIO;
}

/*
 * ac_call - one request; on 0, a whole answer is in x->ans or, for /execute, the
 * result in x->result. The caller frees x->ans, x->line and x->result.
 */
static int ac_call(const struct agent_endpoint *ep, const char *path, const char *body,
		   size_t bodylen, long timeout_ms, struct ac_xfer *x, char *err, size_t errlen)
{
	char url[512], auth[128] = "";
	const char *base = ep->base_url ? ep->base_url : "http://localhost";
	if ((size_t)snprintf(url, sizeof(url), "%s%s", base, path) >= sizeof(url)) {
		snprintf(err, errlen, "the sandbox address %s is too long", base);
		return -EINVAL;
	}
	x->err = err;
	x->errlen = errlen;

	const char *hdr[4];
	int nh = 0;
	if (body)
		hdr[nh++] = "Content-Type: application/json";
	if (ep->secret[0]) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", ep->secret);
		hdr[nh++] = auth;
	}
	if (ep->relay) /* the master's relay reads the body only after its head: no waiting */
		hdr[nh++] = "Expect:";
	hdr[nh] = NULL;
	struct http_request q = {
		.url = url, .body = body, .body_len = body ? bodylen : 0, .headers = hdr,
		.unix_socket = ep->unix_path,
		.no_proxy = true, /* never send a sandbox secret through a proxy */
		.connect_timeout_ms = timeout_ms && timeout_ms < AC_CONNECT_TIMEOUT_MS
					      ? timeout_ms : AC_CONNECT_TIMEOUT_MS,
		.timeout_ms = timeout_ms,
		/* /execute: no overall deadline (the agent bounds the run); a silent stream is a
		 * dead one */
		.stall_s = x->kind == AC_EXECUTE ? AGENT_CLIENT_STALL_S : 0,
		.keepalive_idle_s = ep->unix_path ? 0 : AC_KEEPALIVE_IDLE_S,
		.keepalive_intvl_s = AC_KEEPALIVE_INTVL_S,
		/* a piece of up to 2 MiB: fewer, bigger reads */
		.buffer_size = x->kind == AC_READ ? AC_READ_BUFFER_BYTES : 0,
		.on_data = ac_data, .abort = x->cancel ? ac_abort : NULL, .ctx = x,
	};
	struct http_response r;
	int e = http_perform(&q, &r);
	OPENSSL_cleanse(auth, sizeof(auth));
	int rc = 0;
	if (x->rc) {
		rc = x->rc;
	} else if (r.fail == HTTP_FAIL_ABORTED && x->cancel && *x->cancel) {
		snprintf(err, errlen, "the call was cancelled");
		rc = -ECANCELED;
	} else if (e != 0) {
		rc = ac_transport_error(ep, x, &r, e, timeout_ms, err, errlen);
	} else {
		if (!x->status)
			x->status = r.status;
		if (x->status != 200 && ep->relay && (x->status == 502 || x->status == 503 ||
						      ac_is_kube_status(x))) {
			rc = ac_proxy_error(x, err, errlen);
		} else if (x->status != 200) {
			rc = ac_status_error(x, err, errlen);
		} else if (x->kind == AC_EXECUTE) {
			rc = ac_stream_end(x, err, errlen);
		}
	}
	if (rc < 0 && rc != -EBUSY && rc != -EALREADY)
		log_debug("%s %s: %s", path, ac_where(ep), err);
	http_response_free(&r);
	return rc;
}

/* ac_xfer_free - release what a transfer collected */
static void ac_xfer_free(struct ac_xfer *x)
{
	buf_free(&x->ans);
	buf_free(&x->line);
	json_decref(x->result);
}

/* agent_client_read_stream - the /execute stream's parsing without the transfer (see .h) */
int agent_client_read_stream(const char *const *piece, const size_t *len, size_t npieces,
			     agent_progress_fn progress, void *ctx, agent_event_fn on_event,
			     void *ectx, json_t **result, char *err, size_t errlen)
{
	struct ac_xfer x = { .kind = AC_EXECUTE, .status = 200, .err = err, .errlen = errlen,
			     .progress = progress, .ctx = ctx, .on_event = on_event, .ectx = ectx };
	int rc = 0;
	for (size_t i = 0; i < npieces && !rc; i++)
		if (ac_feed(&x, piece[i], len[i]) < 0)
			rc = x.rc ? x.rc : -EPROTO;
	if (!rc)
		rc = ac_stream_end(&x, err, errlen);
	if (rc == 0) {
		*result = x.result;
		x.result = NULL;
	}
	ac_xfer_free(&x);
	return rc;
}

/* ac_answer - the collected 200 answer as a JSON object, or -EPROTO */
static int ac_answer(struct ac_xfer *x, json_t **out, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *j = x->ans.len ? json_loadb(x->ans.data, x->ans.len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr) : NULL;
	if (!json_is_object(j)) {
		json_decref(j);
		snprintf(err, errlen, "the sandbox's answer is not a JSON object");
		return -EPROTO;
	}
	*out = j;
	return 0;
}

/* agent_client_claim - make a fresh secret and hand it to the agent once */
int agent_client_claim(struct agent_endpoint *ep, char *err, size_t errlen)
{
	unsigned char raw[32];
	if (RAND_bytes(raw, sizeof(raw)) != 1) {
		snprintf(err, errlen, "the system could not supply random bytes for a secret");
		return -EIO;
	}
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < sizeof(raw); i++) {
		ep->secret[2 * i] = hex[raw[i] >> 4];
		ep->secret[2 * i + 1] = hex[raw[i] & 15];
	}
	ep->secret[64] = '\0';
	OPENSSL_cleanse(raw, sizeof(raw));

	char body[96];
	int n = snprintf(body, sizeof(body), "{\"secret\":\"%s\"}", ep->secret);
	/* /claim carries no Authorization header: send it from a copy without the secret */
	struct agent_endpoint anon = { .unix_path = ep->unix_path, .base_url = ep->base_url,
				       .relay = ep->relay };
	struct ac_xfer x = { .kind = AC_CLAIM, .max = AGENT_CLIENT_MAX_LINE };
	int rc = ac_call(&anon, "/claim", body, (size_t)n, AC_CLAIM_TIMEOUT_MS, &x, err, errlen);
	OPENSSL_cleanse(body, sizeof(body));
	json_t *ans = NULL;
	if (rc == 0)
		rc = ac_answer(&x, &ans, err, errlen);
	if (rc == 0 && !json_is_true(json_object_get(ans, "ok"))) {
		snprintf(err, errlen, "the sandbox did not confirm the claim");
		rc = -EPROTO;
	}
	json_decref(ans);
	ac_xfer_free(&x);
	if (rc < 0)
		OPENSSL_cleanse(ep->secret, sizeof(ep->secret));
	return rc;
}

/* agent_client_health - is the agent up and answering */
int agent_client_health(const struct agent_endpoint *ep, int timeout_ms, char *err,
			size_t errlen)
{
	struct ac_xfer x = { .kind = AC_HEALTH, .max = AGENT_CLIENT_MAX_LINE };
	int rc = ac_call(ep, "/health", NULL, 0, timeout_ms > 0 ? timeout_ms : 5000, &x, err,
			 errlen);
	json_t *ans = NULL;
	if (rc == 0)
		rc = ac_answer(&x, &ans, err, errlen);
	if (rc == 0 && !json_is_true(json_object_get(ans, "ok"))) {
		snprintf(err, errlen, "the sandbox's agent reports that it is not healthy");
		rc = -EPROTO;
	}
	json_decref(ans);
	ac_xfer_free(&x);
	return rc;
}

/* agent_client_wait_idle - until /health says busy:false */
int agent_client_wait_idle(const struct agent_endpoint *ep, int timeout_ms, char *err,
			   size_t errlen)
{
	long long deadline = mono_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	for (;;) {
		long long left = deadline - mono_ms();
		struct ac_xfer x = { .kind = AC_HEALTH, .max = AGENT_CLIENT_MAX_LINE };
		int rc = ac_call(ep, "/health", NULL, 0, left > 5000 ? 5000 : left > 100 ? left : 100,
				 &x, err, errlen);
		json_t *ans = NULL;
		if (rc == 0)
			rc = ac_answer(&x, &ans, err, errlen);
		json_t *busy = json_object_get(ans, "busy");
		if (rc == 0 && !json_is_boolean(busy)) {
			snprintf(err, errlen, "the sandbox's health answer lacks \"busy\"");
			rc = -EPROTO;
		}
		bool idle = rc == 0 && json_is_false(busy);
		json_decref(ans);
		ac_xfer_free(&x);
		if (rc < 0 || idle)
			return rc;
		if (mono_ms() + AC_BUSY_POLL_MS > deadline) {
			snprintf(err, errlen, "the sandbox is still busy with an earlier call after "
				 "%d ms", timeout_ms);
			return -ETIMEDOUT;
		}
		usleep(AC_BUSY_POLL_MS * 1000);
	}
}

/* ac_body - a request object as compact JSON within the agent's limit */
static char *ac_body(json_t *req, size_t *len, int *rc, char *err, size_t errlen)
{
	char *body = json_is_object(req) ? json_dumps(req, JSON_COMPACT) : NULL;
	if (!body) {
		snprintf(err, errlen, "the request for the sandbox is not a JSON object");
		*rc = -EINVAL;
		return NULL;
	}
	*len = strlen(body);
	if (*len > AGENT_CLIENT_MAX_BODY) {
		snprintf(err, errlen, "the request is %zu bytes, more than the %u the sandbox "
			 "accepts; send fewer or smaller files", *len, AGENT_CLIENT_MAX_BODY);
		free(body);
		*rc = -EMSGSIZE;
		return NULL;
	}
	return body;
}

/* agent_client_execute - POST /execute, report progress, return the result */
int agent_client_execute(const struct agent_endpoint *ep, json_t *req, agent_progress_fn progress,
			 void *ctx, volatile int *cancel, json_t **result, char *err,
			 size_t errlen)
{
	return agent_client_execute_ev(ep, req, progress, ctx, NULL, NULL, cancel, result, err,
				       errlen);
}

/* agent_client_execute_ev - POST /execute, with token requests handed to on_event */
int agent_client_execute_ev(const struct agent_endpoint *ep, json_t *req,
			    agent_progress_fn progress, void *ctx, agent_event_fn on_event,
			    void *ectx, volatile int *cancel, json_t **result, char *err,
			    size_t errlen)
{
	*result = NULL;
	size_t len;
	int rc;
	char *body = ac_body(req, &len, &rc, err, errlen);
	if (!body)
		return rc;
	struct ac_xfer x = { .kind = AC_EXECUTE, .progress = progress, .ctx = ctx,
			     .on_event = on_event, .ectx = ectx, .cancel = cancel };
	rc = ac_call(ep, "/execute", body, len, 0, &x, err, errlen);
	OPENSSL_cleanse(body, len); /* it may carry credentials */
	free(body);
	if (rc == 0) {
		*result = x.result;
		x.result = NULL;
	}
	ac_xfer_free(&x);
	return rc;
}

/* ac_post_answer - POST req to path and take its whole JSON answer (/doc, /files) */
static int ac_post_answer(const struct agent_endpoint *ep, const char *path, json_t *req,
			  json_t **result, char *err, size_t errlen)
{
	*result = NULL;
	size_t len;
	int rc;
	char *body = ac_body(req, &len, &rc, err, errlen);
	if (!body)
		return rc;
	struct ac_xfer x = { .kind = AC_DOC, .max = AC_DOC_MAX_ANSWER_BYTES };
	rc = ac_call(ep, path, body, len, AC_DOC_TIMEOUT_MS, &x, err, errlen);
	free(body);
	if (rc == 0)
		rc = ac_answer(&x, result, err, errlen);
	ac_xfer_free(&x);
	return rc;
}

/* agent_client_doc - POST /doc */
int agent_client_doc(const struct agent_endpoint *ep, json_t *req, json_t **result, char *err,
		     size_t errlen)
{
	return ac_post_answer(ep, "/doc", req, result, err, errlen);
}

/* agent_client_files - POST /files */
int agent_client_files(const struct agent_endpoint *ep, json_t *req, json_t **result, char *err,
		       size_t errlen)
{
	return ac_post_answer(ep, "/files", req, result, err, errlen);
}

/* agent_client_read_piece - see agent_client.h */
int agent_client_read_piece(const char *ctype, const char *body, size_t len, const char *path,
			    long long offset, size_t length, json_t **head, size_t *at,
			    size_t *n, char *err, size_t errlen)
{
	*head = NULL;
	*at = *n = 0;
	json_error_t jerr;
	if (ctype && strncasecmp(ctype, "application/json", 16) == 0) {
		/* a refusal: {"error": sentence} and nothing else */
		json_t *j = len <= AGENT_CLIENT_MAX_LINE
				    ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
		if (!json_is_string(json_object_get(j, "error")) || json_object_size(j) != 1) {
			json_decref(j);
			snprintf(err, errlen, "the sandbox answered a file read with JSON that is not "
				 "a refusal");
			return -EPROTO;
		}
		*head = j;
		return 0;
	}
	if (!ctype || strcasecmp(ctype, ARTIFACTS_PIECE_TYPE) != 0) {
		snprintf(err, errlen, "the sandbox answered a file read as %.60s, not %s",
			 ctype ? ctype : "no content type", ARTIFACTS_PIECE_TYPE);
		return -EPROTO;
	}
	const char *nl = memchr(body, '\n', len < ARTIFACTS_PIECE_HEAD_BYTES ? len
								  : ARTIFACTS_PIECE_HEAD_BYTES);
	json_t *h = nl ? json_loadb(body, (size_t)(nl - body), JSON_REJECT_DUPLICATES, &jerr) : NULL;
	const char *hp = json_string_value(json_object_get(h, "path"));
	json_t *size = json_object_get(h, "size"), *off = json_object_get(h, "offset");
	json_t *hl = json_object_get(h, "length");
	const char *mt = json_string_value(json_object_get(h, "media_type"));
	size_t rest = nl ? len - (size_t)(nl + 1 - body) : 0;
	bool ok = h && hp && strcmp(hp, path) == 0 && json_is_integer(size) &&
		  json_integer_value(size) >= 0 && json_is_integer(off) &&
		  json_integer_value(off) == offset && json_is_integer(hl) &&
		  json_integer_value(hl) >= 0 && (size_t)json_integer_value(hl) == rest &&
		  rest <= length && mt && strlen(mt) < 128 && strspn(mt, "abcdefghijklmnopqrstuvwxyz"
			"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-./") == strlen(mt) &&
		  json_is_boolean(json_object_get(h, "eof")) &&
		  json_is_boolean(json_object_get(h, "text"));
	if (!ok) {
		json_decref(h);
		snprintf(err, errlen, "the sandbox answered a read of /app/%.200s with a piece that "
			 "does not match the request", path);
		return -EPROTO;
	}
	*head = h;
	*at = (size_t)(nl + 1 - body);
	*n = rest;
	return 0;
}

/* agent_client_read - see agent_client.h */
int agent_client_read(const struct agent_endpoint *ep, const char *path, long long offset,
		      size_t length, json_t **head, unsigned char **bytes, size_t *nbytes,
		      char *err, size_t errlen)
{
	*head = NULL;
	*bytes = NULL;
	*nbytes = 0;
	json_t *req = json_pack("{s:s, s:s, s:I, s:I}", "op", "read", "path", path, "offset",
				(json_int_t)offset, "length", (json_int_t)length);
	size_t len;
	int rc;
	char *body = ac_body(req, &len, &rc, err, errlen);
	json_decref(req);
	if (!body)
		return rc;
	struct ac_xfer x = { .kind = AC_READ, .max = length + ARTIFACTS_PIECE_HEAD_BYTES };
	rc = ac_call(ep, "/files", body, len, AC_DOC_TIMEOUT_MS, &x, err, errlen);
	free(body);
	size_t at = 0, n = 0;
	if (rc == 0)
		rc = agent_client_read_piece(x.ctype, x.ans.data ? x.ans.data : "", x.ans.len, path,
					     offset, length, head, &at, &n, err, errlen);
	if (rc == 0 && json_object_get(*head, "length")) {
		/* the bytes to the front of the buffer, which the caller then owns */
		memmove(x.ans.data, x.ans.data + at, n);
		*bytes = (unsigned char *)x.ans.data;
		*nbytes = n;
		x.ans.data = NULL;
	}
	ac_xfer_free(&x);
	return rc;
}

/* agent_client_token - POST /token: the answer to one token_request */
int agent_client_token(const struct agent_endpoint *ep, json_t *answer, char *err,
		       size_t errlen)
{
	size_t len;
	int rc;
	char *body = ac_body(answer, &len, &rc, err, errlen);
	if (!body)
		return rc;
	struct ac_xfer x = { .kind = AC_DOC, .max = AGENT_CLIENT_MAX_LINE };
	rc = ac_call(ep, "/token", body, len, AC_TOKEN_TIMEOUT_MS, &x, err, errlen);
	OPENSSL_cleanse(body, len);
	free(body);
	ac_xfer_free(&x);
	return rc;
}

/* agent_client_cancel - POST /cancel: stop the running call; *running says whether one ran */
int agent_client_cancel(const struct agent_endpoint *ep, bool *running, char *err, size_t errlen)
{
	struct ac_xfer x = { .kind = AC_DOC, .max = AGENT_CLIENT_MAX_LINE };
	*running = false;
	int rc = ac_call(ep, "/cancel", "{}", 2, AC_TOKEN_TIMEOUT_MS, &x, err, errlen);
	json_t *ans = NULL;
	if (rc == 0)
		rc = ac_answer(&x, &ans, err, errlen);
	if (rc == 0)
		*running = json_is_true(json_object_get(ans, "cancelled"));
	json_decref(ans);
	ac_xfer_free(&x);
	return rc;
}

/* agent_client_gone - the errors after which the caller claims a fresh sandbox */
bool agent_client_gone(int rc)
{
	switch (-rc) {
	case ENOENT:
	case ECONNREFUSED:
	case ECONNRESET:
	case EPIPE:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case ETIMEDOUT:
		return true;
	default:
		return false;
	}
}

/* agent_client_release - POST /release: give the claim back (a kept sandbox in a cluster, so
 * a later session can claim it again) */
int agent_client_release(struct agent_endpoint *ep, char *err, size_t errlen)
{
	struct ac_xfer x = { .kind = AC_DOC, .max = AGENT_CLIENT_MAX_LINE };
	int rc = ac_call(ep, "/release", "{}", 2, AC_TOKEN_TIMEOUT_MS, &x, err, errlen);
	ac_xfer_free(&x);
	if (rc == 0)
		OPENSSL_cleanse(ep->secret, sizeof(ep->secret));
	return rc;
}
