/*
 * kube.c - the worker's Kubernetes API client: credentials from the master, JSON requests,
 * watches. See kube.h for the contract; worker/sandbox_kube.c is its user.
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ipc/ipc.h"
#include "ipc/kubetls.h"
#include "lib/buf.h"
#include "lib/rfc3339.h"
#include "policy/limits.h"
#include "worker/kube.h"
#include "worker/worker.h"


struct kube_api {
	struct session *s;
	pthread_mutex_t mu;        /* guards everything below */
	bool have;                 /* credentials arrived */
	char server[2049], sni[256], ns[254];
	char *ca, *cert, *key;     /* PEM, NUL-terminated; NULL when absent */
	size_t ca_len, cert_len, key_len;
	char *token;               /* bearer token or NULL */
	bool insecure, in_cluster;
	time_t expires;            /* 0: never */
};

static struct kube_api kube = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* the one outstanding REQ_KUBE, answered on the main thread */
static pthread_cond_t kube_cv = PTHREAD_COND_INITIALIZER;
static unsigned kube_seq;       /* under kube.mu; 0 = none pending */
static bool kube_answered;
static char kube_error[512];

static void kube_forget(struct kube_api *k)
{
	if (k->token)
		OPENSSL_cleanse(k->token, strlen(k->token));
	if (k->key)
		OPENSSL_cleanse(k->key, k->key_len);
	free(k->ca), free(k->cert), free(k->key), free(k->token);
	k->ca = k->cert = k->key = k->token = NULL;
	k->ca_len = k->cert_len = k->key_len = 0;
}

static char *kube_dup(struct ipc_bytes b, size_t *len)
{
	if (!b.len)
		return NULL;
	char *p = malloc(b.len + 1);
	if (!p)
		abort();
	memcpy(p, b.ptr, b.len);
	p[b.len] = '\0';
	if (len)
		*len = b.len;
	return p;
}

/* kube_answer - see kube.h */
void kube_answer(struct session *s, const struct ipc_msg *m)
{
	(void)s;
	const struct ipc_kube_ans *a = &m->u.kube_ans;
	struct kube_api *k = &kube;
	pthread_mutex_lock(&k->mu);
	kube_seq = 0;
	kube_answered = true;
	kube_error[0] = '\0';
	if (!a->ok) {
		ipc_bytes_str(a->error, kube_error, sizeof(kube_error));
		if (!kube_error[0])
			snprintf(kube_error, sizeof(kube_error), "the server has no Kubernetes access");
	} else {
		kube_forget(k);
		ipc_bytes_str(a->server, k->server, sizeof(k->server));
		ipc_bytes_str(a->sni, k->sni, sizeof(k->sni));
		ipc_bytes_str(a->namespace, k->ns, sizeof(k->ns));
		k->ca = kube_dup(a->ca, &k->ca_len);
		k->cert = kube_dup(a->cert, &k->cert_len);
		k->key = kube_dup(a->key, &k->key_len);
		k->token = kube_dup(a->token, NULL);
		k->insecure = a->insecure;
		k->in_cluster = a->in_cluster;
		k->expires = (time_t)a->expires;
		k->have = true;
	}
	pthread_cond_broadcast(&kube_cv);
	pthread_mutex_unlock(&k->mu);
}

unsigned kube_pending_seq(void)
{
	pthread_mutex_lock(&kube.mu);
	unsigned seq = kube_seq;
	pthread_mutex_unlock(&kube.mu);
	return seq;
}

/* kube_fetch - ask the master for credentials (refresh: the last were refused) and wait;
 * under k->mu */
static int kube_fetch(struct kube_api *k, bool refresh, char *err, size_t errlen)
{
	if (!kube_seq) {
		kube_seq = session_next_seq(k->s);
		if (!kube_seq)
			kube_seq = session_next_seq(k->s);
		kube_answered = false;
		struct ipc_buf b;
		if (ipc_pack_req_kube(&b, kube_seq, refresh) != 0 || session_send(k->s, &b) != 0) {
			kube_seq = 0;
			snprintf(err, errlen, "cannot ask the server for Kubernetes credentials");
			return -EIO;
		}
	}
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 90; /* an exec plugin may take a while (the master bounds it at 60 s) */
	while (!kube_answered)
		if (pthread_cond_timedwait(&kube_cv, &k->mu, &until) == ETIMEDOUT) {
			snprintf(err, errlen, "the server did not hand out Kubernetes credentials "
				 "within 90 s");
			return -ETIMEDOUT;
		}
	if (kube_error[0]) {
		snprintf(err, errlen, "%s", kube_error);
		return -EACCES;
	}
	return 0;
}

struct kube_api *kube_api_get(struct session *s, char *err, size_t errlen)
{
	struct kube_api *k = &kube;
	pthread_mutex_lock(&k->mu);
	k->s = s;
	int r = 0;
	/* an exec plugin's credential expires: fetch a new one a minute ahead */
	if (!k->have || (k->expires && time(NULL) + 60 >= k->expires))
		r = kube_fetch(k, false, err, errlen);
	pthread_mutex_unlock(&k->mu);
	return r == 0 ? k : NULL;
}

struct kube_api *kube_api_cached(void)
{
	pthread_mutex_lock(&kube.mu);
	bool have = kube.have;
	pthread_mutex_unlock(&kube.mu);
	return have ? &kube : NULL;
}

/* kube_refresh - the API server said 401: credentials again, once */
static int kube_refresh(struct kube_api *k, char *err, size_t errlen)
{
	pthread_mutex_lock(&k->mu);
	int r = kube_fetch(k, true, err, errlen);
	pthread_mutex_unlock(&k->mu);
	return r;
}

const char *kube_api_server(struct kube_api *k) { return k->server; }
const char *kube_api_namespace(struct kube_api *k) { return k->ns; }
bool kube_api_in_cluster(struct kube_api *k) { return k->in_cluster; }

int kube_api_curl(struct kube_api *k, CURL *h, struct curl_slist **hdr, char *err, size_t errlen)
{
	pthread_mutex_lock(&k->mu);
	struct kube_tls t = { k->ca, k->ca_len, k->cert, k->cert_len, k->key, k->key_len, k->token,
			      k->insecure };
	int r = kube_tls_apply(h, &t, hdr);
	pthread_mutex_unlock(&k->mu);
	if (r != 0)
		snprintf(err, errlen, "out of memory building a request");
	return r;
}

/* ---- requests ---- */

struct kube_xfer {
	struct buf in;
	bool too_big;
	/* watches: events are handed out line by line */
	kube_watch_fn fn;
	void *ctx;
	int stop;                 /* fn's nonzero answer */
	char *rv_out;
	size_t rv_cap;
	long status;
	CURL *h;
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

static size_t kube_write(char *p, size_t size, size_t nmemb, void *ud)
{
	struct kube_xfer *x = ud;
	size_t n = size * nmemb;
	int added = buf_add(&x->in, p, n, KUBE_MAX_ANSWER_BYTES);
	if (added < 0) {
		x->too_big = added == -EFBIG;
		return 0;
	}
	if (!x->fn)
		return n;
	if (!x->status)
		curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
	if (x->status != 200)
		return n;
	/* a watch: hand out whole lines */
	int r = kube_watch_lines(x->in.data, &x->in.len, x->fn, x->ctx, x->rv_out, x->rv_cap);
	if (r) {
		x->stop = r;
		return 0;
	}
	return n;
}

/* kube_status_error - a non-2xx answer as an errno and a sentence naming the server's reason */
static int kube_status_error(struct kube_xfer *x, const char *method, const char *path,
			     char *err, size_t errlen)
{
	json_t *j = x->in.data ? json_loadb(x->in.data, x->in.len, 0, NULL) : NULL;
	const char *msg = json_string_value(json_object_get(j, "message"));
	const char *reason = json_string_value(json_object_get(j, "reason"));
	char why[600];
	if (msg)
		snprintf(why, sizeof(why), "%s", msg);
	else
		snprintf(why, sizeof(why), "%.200s", x->in.data ? x->in.data : "no explanation given");
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
static int kube_perform(struct kube_api *k, const char *method, const char *path,
			const char *ctype, const char *body, long timeout_ms, struct kube_xfer *x,
			char *err, size_t errlen)
{
	char url[4096], cerr[CURL_ERROR_SIZE] = "", ct[128];
	snprintf(url, sizeof(url), "%s%s", k->server, path);
	CURL *h = curl_easy_init();
	if (!h) {
		snprintf(err, errlen, "libcurl could not create a handle");
		return -ENOMEM;
	}
	x->h = h;
	struct curl_slist *hdr = curl_slist_append(NULL, "Accept: application/json");
	if (body) {
		snprintf(ct, sizeof(ct), "Content-Type: %s", ctype ? ctype : "application/json");
		hdr = curl_slist_append(hdr, ct);
	}
	int r = kube_api_curl(k, h, &hdr, err, errlen);
	if (r == 0) {
		curl_easy_setopt(h, CURLOPT_URL, url);
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
		curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https,http");
		curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
		curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)KUBE_CONNECT_TIMEOUT_MS);
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
		curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, kube_write);
		curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
		curl_easy_setopt(h, CURLOPT_USERAGENT, "kode-gopher/" KG_VERSION);
		if (body) {
			curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
			curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
		}
		CURLcode cc = curl_easy_perform(h);
		if (!x->status)
			curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &x->status);
		if (x->stop) {
			r = x->stop;
		} else if (cc == CURLE_OPERATION_TIMEDOUT && x->fn && x->status == 200) {
			r = 0; /* our own deadline for the watch */
		} else if (cc == CURLE_OPERATION_TIMEDOUT) {
			snprintf(err, errlen, "the Kubernetes API server at %s did not answer %s %s "
				 "within %ld ms", k->server, method, path, timeout_ms);
			r = -ETIMEDOUT;
		} else if (x->too_big) {
			snprintf(err, errlen, "the Kubernetes API server's answer to %s %s is larger "
				 "than %u bytes", method, path, KUBE_MAX_ANSWER_BYTES);
			r = -EIO;
		} else if (cc != CURLE_OK) {
			snprintf(err, errlen, "the Kubernetes API server at %s is unreachable: %s",
				 k->server, cerr[0] ? cerr : curl_easy_strerror(cc));
			r = -EHOSTUNREACH;
		} else if (x->status < 200 || x->status > 299) {
			r = kube_status_error(x, method, path, err, errlen);
		}
	}
	curl_slist_free_all(hdr);
	curl_easy_cleanup(h);
	return r;
}

int kube_api_call(struct kube_api *k, const char *method, const char *path, const char *ctype,
		  json_t *body, long timeout_ms, json_t **out, char *err, size_t errlen)
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
		r = kube_perform(k, method, path, ctype, text, timeout_ms, &x, err, errlen);
		if (r == 0 && out) {
			json_error_t je;
			*out = x.in.len ? json_loadb(x.in.data, x.in.len, 0, &je) : json_object();
			if (!*out) {
				snprintf(err, errlen, "the Kubernetes API server's answer to %s %s is "
					 "not JSON: %s", method, path, je.text);
				r = -EIO;
			}
		}
		bool unauthorized = x.status == 401;
		buf_free(&x.in);
		if (r == -EAGAIN && strcmp(method, "POST") != 0) {
			/* 409 Conflict: someone wrote the object in between; a patch applies again */
			log_debug("%s %s: conflict, trying again", method, path);
			usleep(100000u << attempt);
			continue;
		}
		if (!unauthorized || refreshed)
			break;
		/* 401: the credential expired or was revoked; ask the master once for a fresh one */
		refreshed = true;
		char ferr[512];
		if (kube_refresh(k, ferr, sizeof(ferr)) != 0) {
			snprintf(err, errlen, "%s", ferr);
			break;
		}
	}
	free(text);
	return r;
}

int kube_api_watch(struct kube_api *k, const char *path, const char *rv, int timeout_s,
		   kube_watch_fn fn, void *ctx, char *rv_out, size_t cap, char *err,
		   size_t errlen)
{
	char full[3072];
	snprintf(full, sizeof(full), "%s%swatch=1&allowWatchBookmarks=true&timeoutSeconds=%d%s%s",
		 path, strchr(path, '?') ? "&" : "?", timeout_s, rv && rv[0] ? "&resourceVersion=" : "",
		 rv && rv[0] ? rv : "");
	struct kube_xfer x = { .fn = fn, .ctx = ctx, .rv_out = rv_out, .rv_cap = cap };
	/* the server ends the watch after timeout_s; our own deadline is a little later */
	int r = kube_perform(k, "GET", full, NULL, NULL, (timeout_s + 5) * 1000L, &x, err, errlen);
	if (r == -ESTALE)
		snprintf(err, errlen, "the watch's resourceVersion is too old (410 Gone)");
	else if (r == -EIO && x.stop == -EIO)
		snprintf(err, errlen, "the Kubernetes API server sent a watch event this client "
			 "does not understand");
	buf_free(&x.in);
	return r;
}

void kube_time_rfc3339(long offset_s, char *out, size_t cap)
{
	rfc3339_format(time(NULL) + offset_s, out, cap);
}
