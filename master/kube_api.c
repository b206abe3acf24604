/*
 * kube_api.c - the master's Kubernetes API client: JSON requests and watches with the server's
 * own credential (master/kubecfg.c). See kube_api.h; master/sandbox_kube.c is its user.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ipc/log.h"
#include "lib/http_client.h"
#include "lib/rfc3339.h"
#include "master/kube_api.h"
#include "master/kubecfg.h"
#include "policy/limits.h"

static int kube_stopped;                 /* kube_api_stop: every transfer ends */
static __thread const bool *kube_cancel; /* this thread's: its transfers end when *it is true */

void kube_api_stop(void)
{
	__atomic_store_n(&kube_stopped, 1, __ATOMIC_SEQ_CST);
}

void kube_api_cancel_on(const bool *flag)
{
	kube_cancel = flag;
}

/* kube_abort - polled during a transfer: kube_api_stop, or this thread's cancel flag */
static bool kube_abort(void *ud)
{
	(void)ud;
	return __atomic_load_n(&kube_stopped, __ATOMIC_SEQ_CST) ||
	       (kube_cancel && __atomic_load_n(kube_cancel, __ATOMIC_SEQ_CST));
}

/* ---- requests ---- */

struct kube_xfer {
	char *buf;
	size_t len, cap;
	bool too_big;
	/* watches: events are handed out line by line */
	kube_watch_fn fn;
	void *ctx;
	int stop;                 /* fn's nonzero answer */
	char *rv_out;
	size_t rv_cap;
	long status;
};

/* kube_watch_line - one watch event: hand it to fn, or its verdict */
static int kube_watch_line(const char *p, size_t n, kube_watch_fn fn, void *ctx, char *rv_out,
			   size_t rv_cap)
{
	json_error_t je;
	json_t *ev = json_loadb(p, n, 0, &je);
	const char *type = json_string_value(json_object_get(ev, "type"));
	json_t *obj = json_object_get(ev, "object");
	int r = 0;
	if (!type || !json_is_object(obj)) {
		r = -EIO;
	} else if (strcmp(type, "ERROR") == 0) {
		json_int_t code = json_integer_value(json_object_get(obj, "code"));
		r = code == 410 ? -ESTALE : -EIO;
	} else {
		const char *rv = json_string_value(
			json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));
		if (rv && rv_out)
			snprintf(rv_out, rv_cap, "%s", rv);
		if (strcmp(type, "BOOKMARK") != 0)
			r = fn(ctx, type, obj);
	}
	json_decref(ev);
	return r;
}

/* kube_watch_lines - the watch's line splitting, apart from the transfer (see kube.h) */
int kube_watch_lines(char *buf, size_t *len, kube_watch_fn fn, void *ctx, char *rv_out,
		     size_t rv_cap)
{
	char *nl;
	while ((nl = memchr(buf, '\n', *len))) {
		size_t line = (size_t)(nl - buf);
		int r = line ? kube_watch_line(buf, line, fn, ctx, rv_out, rv_cap) : 0;
		memmove(buf, nl + 1, *len - line - 1);
		*len -= line + 1;
		if (r)
			return r;
	}
	return 0;
}

/* kube_data - the answer as it arrives: collected, and a watch's whole lines handed out */
static int kube_data(void *ud, const struct http_response *r, const char *p, size_t n)
{
	struct kube_xfer *x = ud;
	if (x->len + n > KUBE_MAX_ANSWER_BYTES) {
		x->too_big = true;
		return -EFBIG;
	}
	if (x->len + n + 1 > x->cap) {
		size_t cap = x->cap ? x->cap : 4096;
		while (cap < x->len + n + 1)
			cap *= 2;
		char *b = realloc(x->buf, cap);
		if (!b)
			return -ENOMEM;
		x->buf = b;
		x->cap = cap;
	}
	memcpy(x->buf + x->len, p, n);
	x->len += n;
	x->buf[x->len] = '\0';
	x->status = r->status;
	if (!x->fn || x->status != 200)
		return 0;
	/* a watch: hand out whole lines */
	int e = kube_watch_lines(x->buf, &x->len, x->fn, x->ctx, x->rv_out, x->rv_cap);
	if (e)
		x->stop = e;
	return e;
}

/* kube_status_error - a non-2xx answer as an errno and a sentence naming the server's reason */
static int kube_status_error(struct kube_xfer *x, const char *method, const char *path,
			     char *err, size_t errlen)
{
	json_t *j = x->buf ? json_loadb(x->buf, x->len, 0, NULL) : NULL;
	const char *msg = json_string_value(json_object_get(j, "message"));
	const char *reason = json_string_value(json_object_get(j, "reason"));
	char why[600];
	if (msg)
		snprintf(why, sizeof(why), "%s", msg);
	else
		snprintf(why, sizeof(why), "%.200s", x->buf ? x->buf : "no explanation given");
	int r;
	switch (x->status) {
	case 404: r = -ENOENT; break;
	case 409: r = reason && strcmp(reason, "AlreadyExists") == 0 ? -EEXIST : -EAGAIN; break;
	case 410: r = -ESTALE; break;
	case 401:
	case 403: r = -EACCES; break;
	case 400:
	case 422: r = -EINVAL; break;
	default: r = -EIO; break;
	}
	snprintf(err, errlen, "the Kubernetes API server refused %s %s (HTTP %ld%s%s): %s", method,
		 path, x->status, reason ? " " : "", reason ? reason : "", why);
	json_decref(j);
	return r;
}

/* kube_perform - one request (a watch when x->fn is set) */
static int kube_perform(const char *method, const char *path, const char *ctype,
			const char *body, long timeout_ms, bool refresh, struct kube_xfer *x,
			char *err, size_t errlen)
{
	char url[4096], ct[128];
	snprintf(ct, sizeof(ct), "Content-Type: %s", ctype ? ctype : "application/json");
	const char *hdr[] = { "Accept: application/json", body ? ct : NULL, NULL };
	struct http_request q = {
		.method = method, .body = body, .body_len = body ? strlen(body) : 0, .headers = hdr,
		.protocols = "https,http", .connect_timeout_ms = KUBE_CONNECT_TIMEOUT_MS,
		.timeout_ms = timeout_ms, .on_data = kube_data, .abort = kube_abort, .ctx = x,
	};
	struct kubecfg_cred c;
	int r = kubecfg_request(&q, &c, refresh, url, sizeof(url), path, err, errlen);
	if (r != 0)
		return r;
	struct http_response a;
	int e = http_perform(&q, &a);
	kubecfg_cred_free(&c);
	if (!x->status)
		x->status = a.status;
	if (x->stop) {
		r = x->stop;
	} else if (a.fail == HTTP_FAIL_ABORTED) {
		snprintf(err, errlen, "%s %s was cut short: nobody waits for it any more",
			 method, path);
		r = -ECANCELED;
	} else if (a.fail == HTTP_FAIL_TIMEOUT && x->fn && x->status == 200) {
		r = 0; /* our own deadline for the watch */
	} else if (a.fail == HTTP_FAIL_TIMEOUT) {
		snprintf(err, errlen, "the Kubernetes API server at %s did not answer %s %s "
			 "within %ld ms", kubecfg_server(), method, path, timeout_ms);
		r = -ETIMEDOUT;
	} else if (x->too_big) {
		snprintf(err, errlen, "the Kubernetes API server's answer to %s %s is larger "
			 "than %u bytes", method, path, KUBE_MAX_ANSWER_BYTES);
		r = -EIO;
	} else if (e == -ENOMEM) {
		snprintf(err, errlen, "out of memory for %s %s", method, path);
		r = -ENOMEM;
	} else if (e != 0) {
		snprintf(err, errlen, "the Kubernetes API server at %s is unreachable: %s",
			 kubecfg_server(), a.detail[0] ? a.detail : a.err);
		r = -EHOSTUNREACH;
	} else if (x->status < 200 || x->status > 299) {
		r = kube_status_error(x, method, path, err, errlen);
	}
	http_response_free(&a);
	return r;
}

int kube_api_call(const char *method, const char *path, const char *ctype, json_t *body,
		  long timeout_ms, json_t **out, char *err, size_t errlen)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	if (body && !text) {
		snprintf(err, errlen, "out of memory encoding a request");
		return -ENOMEM;
	}
	int r = 0;
	bool refreshed = false;
	for (int attempt = 0; attempt < 4; attempt++) {
		struct kube_xfer x = { 0 };
		r = kube_perform(method, path, ctype, text, timeout_ms, refreshed, &x, err, errlen);
		if (r == 0 && out) {
			json_error_t je;
			*out = x.len ? json_loadb(x.buf, x.len, 0, &je) : json_object();
			if (!*out) {
				snprintf(err, errlen, "the Kubernetes API server's answer to %s %s is "
					 "not JSON: %s", method, path, je.text);
				r = -EIO;
			}
		}
		bool unauthorized = x.status == 401;
		free(x.buf);
		if (r == -EAGAIN && strcmp(method, "POST") != 0) {
			/* 409 Conflict: someone wrote the object in between; a patch applies again */
			log_debug("%s %s: conflict, trying again", method, path);
			usleep((KB_CONFLICT_BACKOFF_MS * 1000u) << attempt);
			continue;
		}
		if (!unauthorized || refreshed)
			break;
		/* 401: the credential expired or was revoked; once more with a fresh one (an exec
		 * plugin runs again) */
		refreshed = true;
	}
	free(text);
	return r;
}

int kube_api_watch(const char *path, const char *rv, int timeout_s, kube_watch_fn fn, void *ctx,
		   char *rv_out, size_t cap, char *err, size_t errlen)
{
	char full[3072];
	snprintf(full, sizeof(full), "%s%swatch=1&allowWatchBookmarks=true&timeoutSeconds=%d%s%s",
		 path, strchr(path, '?') ? "&" : "?", timeout_s, rv && rv[0] ? "&resourceVersion=" : "",
		 rv && rv[0] ? rv : "");
	struct kube_xfer x = { .fn = fn, .ctx = ctx, .rv_out = rv_out, .rv_cap = cap };
	/* the server ends the watch after timeout_s; our own deadline is a little later */
	int r = kube_perform("GET", full, NULL, NULL, (timeout_s + 5) * 1000L, false, &x, err, errlen);
	if (r == -ESTALE)
		snprintf(err, errlen, "the watch's resourceVersion is too old (410 Gone)");
	else if (r == -EIO && x.stop == -EIO)
		snprintf(err, errlen, "the Kubernetes API server sent a watch event this client "
			 "does not understand");
	free(x.buf);
	return r;
}

void kube_time_rfc3339(long offset_s, char *out, size_t cap)
{
	rfc3339_format(time(NULL) + offset_s, out, cap);
}
