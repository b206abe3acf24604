/*
 * http_client.c - see http_client.h. The only file of the tree that sets libcurl options.
 */
#include "lib/http_client.h"

#include <curl/curl.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#ifndef KG_VERSION
#define KG_VERSION "dev"
#endif
#define HTTP_USER_AGENT "kode-gopher/" KG_VERSION

/* One transfer's state, shared with libcurl's callbacks. */
struct hc_xfer {
	const struct http_request *q;
	struct http_response *r;
	CURL *h;
	bool head_seen;      /* status and type read (before the first byte) */
	bool too_big;
	int stopped;         /* on_data's nonzero answer */
	bool addr_refused;   /* public_only refused an address */
	char refused[INET6_ADDRSTRLEN];
};

int http_global_init(void)
{
	return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -EIO;
}

/* hc_head - the answer's status, type and length, once */
static void hc_head(struct hc_xfer *x)
{
	if (x->head_seen)
		return;
	x->head_seen = true;
	struct http_response *r = x->r;
	curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &r->status);
	char *ct = NULL;
	curl_easy_getinfo(x->h, CURLINFO_CONTENT_TYPE, &ct);
	/* only a plain media type: nothing a caller copies on can carry another header */
	if (ct && strlen(ct) < sizeof(r->content_type)) {
		bool plain = true;
		for (const char *p = ct; *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f)
				plain = false;
		if (plain)
			snprintf(r->content_type, sizeof(r->content_type), "%s", ct);
	}
	curl_off_t cl = -1;
	curl_easy_getinfo(x->h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
	r->content_length = cl;
}

static size_t hc_write(char *p, size_t size, size_t n, void *ud)
{
	struct hc_xfer *x = ud;
	size_t len = size * n;
	hc_head(x);
	if (x->q->on_data) {
		int s = x->q->on_data(x->q->ctx, x->r, p, len);
		if (s) {
			x->stopped = s;
			return 0;
		}
		return len;
	}
	size_t max = x->q->max_bytes ? x->q->max_bytes : (size_t)-1 / 2;
	int e = buf_add(&x->r->body, p, len, max);
	if (e == -EFBIG)
		x->too_big = true;
	else if (e)
		x->stopped = -ENOMEM;
	return e ? 0 : len;
}

static int hc_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
	(void)a, (void)b, (void)c, (void)d;
	struct hc_xfer *x = ud;
	return x->q->abort(x->q->ctx) ? 1 : 0;
}

/* hc_socket - libcurl is about to connect: with public_only, only to public addresses */
static curl_socket_t hc_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a)
{
	(void)purpose;
	struct hc_xfer *x = ud;
	if (!http_addr_public(&a->addr)) {
		x->addr_refused = true;
		const void *ip = a->addr.sa_family == AF_INET6
				       ? (const void *)&((struct sockaddr_in6 *)&a->addr)->sin6_addr
				       : (const void *)&((struct sockaddr_in *)&a->addr)->sin_addr;
		if (!inet_ntop(a->addr.sa_family, ip, x->refused, sizeof(x->refused)))
			snprintf(x->refused, sizeof(x->refused), "?");
		return CURL_SOCKET_BAD;
	}
	return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

/* hc_fail - r->fail and the sentence for a failed transfer; the negative errno */
static int hc_fail(struct hc_xfer *x, CURLcode cc, const char *cerr)
{
	const struct http_request *q = x->q;
	struct http_response *r = x->r;
	char what[400];
	int e;
	if (cerr[0])
		snprintf(r->detail, sizeof(r->detail), "%s", cerr);
	else if (cc != CURLE_OK)
		snprintf(r->detail, sizeof(r->detail), "%s", curl_easy_strerror(cc));
	long oserr = 0;
	double connect_s = 0;
	if (x->stopped && x->stopped != -ENOMEM) {
		r->fail = HTTP_FAIL_STOPPED;
		snprintf(what, sizeof(what), "stopped by its reader (%s)", strerror(-x->stopped));
		e = x->stopped;
	} else if (x->stopped == -ENOMEM || cc == CURLE_OUT_OF_MEMORY) {
		r->fail = HTTP_FAIL_OTHER;
		snprintf(what, sizeof(what), "out of memory");
		e = -ENOMEM;
	} else if (x->too_big || cc == CURLE_FILESIZE_EXCEEDED) {
		r->fail = HTTP_FAIL_TOO_BIG;
		snprintf(what, sizeof(what), "the answer is larger than %zu bytes", q->max_bytes);
		e = -EFBIG;
	} else {
		switch (cc) {
		case CURLE_ABORTED_BY_CALLBACK:
			r->fail = HTTP_FAIL_ABORTED;
			snprintf(what, sizeof(what), "cancelled");
			e = -ECANCELED;
			break;
		case CURLE_COULDNT_CONNECT:
			r->fail = HTTP_FAIL_CONNECT;
			curl_easy_getinfo(x->h, CURLINFO_OS_ERRNO, &oserr);
			r->os_errno = (int)oserr;
			if (x->addr_refused) {
				r->fail = HTTP_FAIL_ADDRESS;
				snprintf(what, sizeof(what), "refused to connect to %s, a non-public "
					 "address", x->refused);
				e = -EACCES;
			} else if (oserr == ENOENT) {
				snprintf(what, sizeof(what), "no such socket");
				e = -ENOENT;
			} else if (oserr == EHOSTUNREACH || oserr == ENETUNREACH) {
				snprintf(what, sizeof(what), "the host is unreachable");
				e = -EHOSTUNREACH;
			} else {
				snprintf(what, sizeof(what), "connection refused");
				e = -ECONNREFUSED;
			}
			break;
		case CURLE_COULDNT_RESOLVE_HOST:
		case CURLE_COULDNT_RESOLVE_PROXY:
			r->fail = HTTP_FAIL_RESOLVE;
			snprintf(what, sizeof(what), "the host's name does not resolve");
			e = -EHOSTUNREACH;
			break;
		case CURLE_OPERATION_TIMEDOUT:
			r->fail = HTTP_FAIL_TIMEOUT;
			curl_easy_getinfo(x->h, CURLINFO_CONNECT_TIME, &connect_s);
			if (connect_s <= 0 && !q->unix_socket)
				snprintf(what, sizeof(what), "could not connect within %ld ms",
					 q->connect_timeout_ms ? q->connect_timeout_ms : q->timeout_ms);
			else if (x->head_seen && q->stall_s)
				snprintf(what, sizeof(what), "nothing arrived for %ld s", q->stall_s);
			else if (q->timeout_ms)
				snprintf(what, sizeof(what), "no answer within %ld ms", q->timeout_ms);
			else
				snprintf(what, sizeof(what), "nothing arrived for %ld s", q->stall_s);
			e = -ETIMEDOUT;
			break;
		case CURLE_SEND_ERROR:
		case CURLE_RECV_ERROR:
		case CURLE_GOT_NOTHING:
		case CURLE_PARTIAL_FILE:
		case CURLE_HTTP2:
		case CURLE_HTTP2_STREAM:
			r->fail = HTTP_FAIL_BROKEN;
			snprintf(what, sizeof(what), "the connection broke before the whole answer "
				 "(%s)", r->detail);
			e = -EPIPE;
			break;
		case CURLE_UNSUPPORTED_PROTOCOL:
			r->fail = HTTP_FAIL_SETUP;
			snprintf(what, sizeof(what), "only %s is allowed here",
				 q->protocols ? q->protocols : "http,https");
			e = -EINVAL;
			break;
		case CURLE_SSL_CONNECT_ERROR:
		case CURLE_PEER_FAILED_VERIFICATION:
		case CURLE_SSL_CERTPROBLEM:
		case CURLE_SSL_CACERT_BADFILE:
		case CURLE_SSL_CIPHER:
			r->fail = HTTP_FAIL_TLS;
			snprintf(what, sizeof(what), "TLS failed: %s", r->detail);
			e = -EPROTO;
			break;
		default:
			r->fail = HTTP_FAIL_OTHER;
			snprintf(what, sizeof(what), "%s", r->detail);
			e = -EIO;
			break;
		}
	}
	double total = 0;
	curl_easy_getinfo(x->h, CURLINFO_TOTAL_TIME, &total);
	const char *method = q->method ? q->method : q->body ? "POST" : "GET";
	size_t ul = strcspn(q->url, "?"); /* the query may carry what a log should not */
	snprintf(r->err, sizeof(r->err), "%s %.*s%s%s: %s (after %.1f s)", method,
		 (int)(ul < 200 ? ul : 200), q->url, q->unix_socket ? " via " : "",
		 q->unix_socket ? q->unix_socket : "", what, total);
	return e;
}

/* hc_line_ok - a header line (or value) with no control character: a CR or LF in it would end
 * the line and start another header, or the body, where its writer chose */
static bool hc_line_ok(const char *s)
{
	for (; *s; s++)
		if (((unsigned char)*s < 0x20 && *s != '\t') || *s == 0x7f)
			return false;
	return true;
}

/* hc_headers - the request's header list; 0, -EINVAL (a line with a control character) or
 * -ENOMEM */
static int hc_headers(const struct http_request *q, struct curl_slist **out)
{
	for (size_t i = 0; q->headers && q->headers[i]; i++)
		if (!hc_line_ok(q->headers[i]))
			return -EINVAL;
	if ((q->bearer && !hc_line_ok(q->bearer)) || !hc_line_ok(q->url))
		return -EINVAL;
	if (q->method && (!*q->method || strspn(q->method, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != strlen(q->method)))
		return -EINVAL; /* a method is one upper-case token: no space, no second line */
	struct curl_slist *l = NULL, *n;
	for (size_t i = 0; q->headers && q->headers[i]; i++) {
		if (!(n = curl_slist_append(l, q->headers[i])))
			goto nomem;
		l = n;
	}
	if (q->bearer) {
		size_t len = strlen(q->bearer) + 32;
		char *line = malloc(len);
		if (!line)
			goto nomem;
		snprintf(line, len, "Authorization: Bearer %s", q->bearer);
		n = curl_slist_append(l, line);
		OPENSSL_cleanse(line, len);
		free(line);
		if (!n)
			goto nomem;
		l = n;
	}
	*out = l;
	return 0;
nomem:
	curl_slist_free_all(l);
	return -ENOMEM;
}

int http_perform(const struct http_request *q, struct http_response *r)
{
	memset(r, 0, sizeof(*r));
	r->content_length = -1;
	struct hc_xfer x = { .q = q, .r = r };
	const char *method = q->method ? q->method : q->body ? "POST" : "GET";
	if (!q->url || !*q->url) {
		r->fail = HTTP_FAIL_SETUP;
		snprintf(r->err, sizeof(r->err), "%s: no URL to send the request to", method);
		return -EINVAL;
	}
	struct curl_slist *hdr = NULL;
	int he = hc_headers(q, &hdr);
	if (he == -EINVAL) {
		r->fail = HTTP_FAIL_SETUP;
		snprintf(r->err, sizeof(r->err), "refused to send a request whose URL or a header "
			 "holds a control character, or whose method is not one upper-case word (a CR "
			 "or LF would start a header of its own)");
		return -EINVAL;
	}
	CURL *h = he == 0 ? curl_easy_init() : NULL;
	if (!h) {
		curl_slist_free_all(hdr);
		r->fail = HTTP_FAIL_SETUP;
		snprintf(r->err, sizeof(r->err), "%s %.200s: out of memory building the request",
			 method, q->url);
		return -ENOMEM;
	}
	x.h = h;
	char cerr[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(h, CURLOPT_URL, q->url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, q->protocols ? q->protocols : "http,https");
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
	curl_easy_setopt(h, CURLOPT_USERAGENT, HTTP_USER_AGENT);
	if (q->connect_timeout_ms)
		curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, q->connect_timeout_ms);
	if (q->timeout_ms)
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, q->timeout_ms);
	if (q->stall_s) {
		curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, q->stall_s);
	}
	if (q->max_bytes && !q->on_data)
		curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)q->max_bytes);
	if (q->no_proxy || q->public_only)
		curl_easy_setopt(h, CURLOPT_PROXY, "");
	if (q->public_only) {
		curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, hc_socket);
		curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, &x);
	}
	if (q->unix_socket)
		curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, q->unix_socket);
	if (q->keepalive_idle_s) {
		curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
		curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, q->keepalive_idle_s);
		curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL,
				 q->keepalive_intvl_s ? q->keepalive_intvl_s : q->keepalive_idle_s);
	}
	if (q->buffer_size)
		curl_easy_setopt(h, CURLOPT_BUFFERSIZE, q->buffer_size);
	if (q->ca_blob) {
		struct curl_blob b = { (void *)q->ca_blob, q->ca_len, CURL_BLOB_COPY };
		curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
	} else if (q->ca_file) {
		curl_easy_setopt(h, CURLOPT_CAINFO, q->ca_file);
	}
	if (q->cert_blob && q->key_blob) {
		struct curl_blob c = { (void *)q->cert_blob, q->cert_len, CURL_BLOB_COPY };
		struct curl_blob k = { (void *)q->key_blob, q->key_len, CURL_BLOB_COPY };
		curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &c);
		curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
		curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &k);
		curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
	}
	if (q->insecure) {
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	if (q->user && q->pass) {
		curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
		curl_easy_setopt(h, CURLOPT_USERNAME, q->user);
		curl_easy_setopt(h, CURLOPT_PASSWORD, q->pass);
	}
	if (hdr)
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	if (q->body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->body_len);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->body);
	}
	if (strcmp(method, q->body ? "POST" : "GET") != 0)
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, hc_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
	if (q->abort) {
		curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, hc_progress);
		curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
		curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	}

	CURLcode cc = curl_easy_perform(h);
	hc_head(&x); /* an answer without a body */
	int rc = 0;
	if (cc != CURLE_OK || x.too_big || x.stopped) {
		rc = hc_fail(&x, cc, cerr);
	} else {
		for (size_t i = 0; q->want_headers && q->want_headers[i] && i < HTTP_WANT_HEADERS_MAX; i++) {
			struct curl_header *v = NULL;
			if (curl_easy_header(h, q->want_headers[i], 0, CURLH_HEADER, -1, &v) == CURLHE_OK)
				snprintf(r->header[i], sizeof(r->header[i]), "%s", v->value);
		}
	}
	if (rc == 0 && !q->on_data && !r->body.data && buf_reserve(&r->body, 1) != 0) {
		r->fail = HTTP_FAIL_OTHER;
		snprintf(r->err, sizeof(r->err), "%s %.200s: out of memory", method, q->url);
		rc = -ENOMEM;
	}
	if (r->body.data && !r->body.len)
		r->body.data[0] = '\0';
	curl_slist_free_all(hdr);
	curl_easy_cleanup(h);
	return rc;
}

void http_response_free(struct http_response *r)
{
	buf_wipe_free(&r->body);
}

char *http_escape(const char *s)
{
	char *e = curl_easy_escape(NULL, s, 0);
	if (!e)
		return NULL;
	char *out = strdup(e);
	OPENSSL_cleanse(e, strlen(e)); /* a form's value may be a secret */
	curl_free(e);
	return out;
}

void http_url_host(const char *url, char *out, size_t cap)
{
	snprintf(out, cap, "?");
	CURLU *u = curl_url();
	char *host = NULL;
	if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK && host)
		snprintf(out, cap, "%s", host);
	curl_free(host);
	curl_url_cleanup(u);
}

bool http_addr_public(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
		static const struct { uint32_t net, mask; } no[] = {
			{ 0x00000000, 0xff000000 }, { 0x0a000000, 0xff000000 }, { 0x64400000, 0xffc00000 },
			{ 0x7f000000, 0xff000000 }, { 0xa9fe0000, 0xffff0000 }, { 0xac100000, 0xfff00000 },
			{ 0xc0000000, 0xffffff00 }, { 0xc0000200, 0xffffff00 }, { 0xc0a80000, 0xffff0000 },
			{ 0xc6120000, 0xfffe0000 }, { 0xc6336400, 0xffffff00 }, { 0xcb007100, 0xffffff00 },
			{ 0xe0000000, 0xe0000000 }, /* multicast, reserved, broadcast */
		};
		for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
			if ((a & no[i].mask) == no[i].net)
				return false;
		return true;
	}
	if (sa->sa_family != AF_INET6)
		return false;
	const uint8_t *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b };
	if (memcmp(b, mapped, 12) == 0 || memcmp(b, nat64, 12) == 0) {
		struct sockaddr_in v4 = { .sin_family = AF_INET };
		memcpy(&v4.sin_addr, b + 12, 4);
		return http_addr_public((const struct sockaddr *)&v4);
	}
	static const uint8_t zero[15] = { 0 };
	if (memcmp(b, zero, 15) == 0) /* :: and ::1 */
		return false;
	if ((b[0] & 0xfe) == 0xfc || (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) || b[0] == 0xff ||
	    (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8))
		return false; /* unique local, link-local, multicast, documentation */
	return true;
}
