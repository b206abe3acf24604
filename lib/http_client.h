/*
 * http_client.h - the one HTTP client of the tree: every outgoing request of the master (sign-in
 * with the OpenID provider, client metadata documents, the Kubernetes API server, the agent
 * relay's upstream) and of the worker (its sandbox's agent, token endpoints) is a struct
 * http_request handed to http_perform. libcurl is set up only in lib/http_client.c, so the
 * settings every request shares (no signals, no redirects followed, the user agent, which
 * protocols, timeouts, a cap on the answer, TLS trust) are written once.
 *
 * Called by master/oidc.c, master/auth.c (through oidc_fetch_opts), master/kube_api.c,
 * master/sandbox_kube.c, worker/agent_client.c and worker/creds.c. Calls only libcurl.
 *
 * Redirects are never followed: a 3xx is an answer like any other (its status and body), so a
 * server cannot send a credential on to a host the caller did not name.
 */
#ifndef KG_LIB_HTTP_CLIENT_H
#define KG_LIB_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "lib/buf.h"
#include "policy/limits.h"

struct http_response;

/* http_data_fn - a streamed answer: called for each piece as it arrives, after r's status,
 * content type and content length are filled in; 0 goes on, anything else (a negative errno)
 * stops the transfer and is http_perform's answer */
typedef int (*http_data_fn)(void *ctx, const struct http_response *r, const char *p, size_t n);
/* http_abort_fn - polled while the transfer runs (a few times a second at least): true ends it
 * (-ECANCELED) */
typedef bool (*http_abort_fn)(void *ctx);

struct http_request {
	const char *url;             /* required */
	const char *method;          /* NULL: POST when there is a body, else GET */
	const char *body;            /* sent as is, body_len bytes (need not end in NUL) */
	size_t body_len;
	const char *const *headers;  /* "Name: value" lines, NULL-terminated; "Name:" removes one */
	const char *protocols;       /* libcurl's list, e.g. "https"; NULL: "http,https" */
	long connect_timeout_ms;     /* 0: libcurl's default (300 s) */
	long timeout_ms;             /* the whole request; 0: none (use stall_s) */
	long stall_s;                /* end a transfer when nothing arrived this long; 0: never */
	size_t max_bytes;            /* cap on a collected answer (-EFBIG past it); 0: no cap */
	bool no_proxy;               /* never through a proxy of the environment */
	bool public_only;            /* connect only to public addresses (http_addr_public), and
				      * never through a proxy: a URL someone else chose */
	const char *unix_socket;     /* connect to this socket instead of the URL's host */
	long keepalive_idle_s;       /* TCP keep-alive: probes after this long idle, every */
	long keepalive_intvl_s;      /* keepalive_intvl_s; 0: off */
	long buffer_size;            /* libcurl's receive buffer; 0: its default */
	/* TLS: the CA bundle (PEM blob, copied, or a file), a client certificate and key (PEM,
	 * both or neither), or no verification at all (a kubeconfig's insecure-skip-tls-verify) */
	const char *ca_blob;
	size_t ca_len;
	const char *ca_file;
	const char *cert_blob, *key_blob;
	size_t cert_len, key_len;
	bool insecure;
	const char *bearer;          /* "Authorization: Bearer <bearer>", or NULL */
	const char *user, *pass;     /* HTTP Basic, sent as given (both or neither) */
	/* answer headers to copy into r->header[i], at most HTTP_WANT_HEADERS_MAX names,
	 * NULL-terminated */
	const char *const *want_headers;
	http_data_fn on_data;        /* stream the answer to it instead of collecting it */
	http_abort_fn abort;
	void *ctx;                   /* for on_data and abort */
};

/* what went wrong, for callers that word their own sentences */
enum http_fail {
	HTTP_FAIL_NONE = 0,
	HTTP_FAIL_SETUP,     /* the request was not sent: bad fields, out of memory (-EINVAL, -ENOMEM) */
	HTTP_FAIL_CONNECT,   /* refused (-ECONNREFUSED), no such socket (-ENOENT), unreachable (-EHOSTUNREACH) */
	HTTP_FAIL_RESOLVE,   /* the host's name does not resolve (-EHOSTUNREACH) */
	HTTP_FAIL_ADDRESS,   /* public_only and the host has a non-public address (-EACCES) */
	HTTP_FAIL_TIMEOUT,   /* timeout_ms, connect_timeout_ms or stall_s passed (-ETIMEDOUT) */
	HTTP_FAIL_BROKEN,    /* the connection broke, or closed before a whole answer (-EPIPE) */
	HTTP_FAIL_TOO_BIG,   /* the answer passed max_bytes (-EFBIG) */
	HTTP_FAIL_ABORTED,   /* abort said so (-ECANCELED) */
	HTTP_FAIL_STOPPED,   /* on_data stopped it (its answer) */
	HTTP_FAIL_TLS,       /* the TLS handshake or the peer's certificate (-EPROTO) */
	HTTP_FAIL_OTHER,     /* -EIO */
};

struct http_response {
	long status;             /* the HTTP status, 0 when no answer arrived */
	struct buf body;         /* the answer (not with on_data), NUL-terminated */
	char content_type[128];  /* "" if none, or if it holds a control character */
	long long content_length; /* -1 if not announced */
	char header[HTTP_WANT_HEADERS_MAX][256]; /* want_headers' values, "" if absent */
	enum http_fail fail;
	int os_errno;            /* HTTP_FAIL_CONNECT: the connect's errno, when known */
	char detail[256];        /* libcurl's own words for a failure, "" if none */
	char err[512];           /* a sentence naming method, URL, what happened and when:
				  * "GET http://127.0.0.1:9/x: connection refused (after 0.0 s)" */
};

/* http_global_init - libcurl's process-wide set-up, once, before any thread makes a request;
 * 0 or -EIO */
int http_global_init(void);

/* http_perform - make one request. 0 when an answer arrived (whatever its status), else a
 * negative errno with r->fail, r->err and (for some failures) r->detail set. r is zeroed first;
 * http_response_free it either way. */
int http_perform(const struct http_request *q, struct http_response *r);

/* http_response_free - wipe (answers hold tokens) and free the body */
void http_response_free(struct http_response *r);

/* http_escape - s percent-encoded as a URL's query or a form's value, malloc'd; NULL when out
 * of memory */
char *http_escape(const char *s);

/* http_addr_public - not loopback, private, link-local, CGNAT, multicast or reserved (IPv4,
 * IPv6, and IPv4 inside IPv6 as mapped or NAT64 addresses) */
bool http_addr_public(const struct sockaddr *sa);

/* http_url_host - the host of a URL, for sentences (never its path or query); "?" if none */
void http_url_host(const char *url, char *out, size_t cap);

#endif
