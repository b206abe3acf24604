/*
 * creds.c - the session's credential sources, token minting and caching (see worker/creds.h).
 *
 * Called by worker/call.c: creds_for_call on the call thread before each execute request, and
 * creds_answer on the minter thread for each token request the sandbox's metadata emulator
 * makes during a run. One mutex guards the caches and serializes minting: a session runs one
 * call at a time, so two mints at once would only be two requests for the same token.
 *
 * The ADC file is read anew for every mint and every adc-mode call (openat is allowed after the
 * seccomp lockdown), so a long session follows `gcloud auth application-default login`. Cached
 * tokens are dropped when the file's content changes.
 */
#include "worker/creds.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ipc/log.h"
#include "lib/ascii.h"
#include "lib/base64.h"
#include "lib/buf.h"
#include "lib/gcreds.h"
#include "lib/http_client.h"
#include "lib/mono.h"
#include "lib/rfc3339.h"
#include "lib/secret.h"
#include "policy/limits.h"

#define CR_MSG          512

/* One cached token. */
struct cr_tok {
	char *key;        /* scope key, or audience + format */
	char *value;
	char type[16];
	double expires;   /* CLOCK_MONOTONIC seconds */
};

struct creds {
	struct creds_config cfg;
	char *copies[6];              /* the strings cfg points to */
	pthread_mutex_t mu;
	struct cr_tok access[CR_CACHE], ident[CR_CACHE];
	unsigned char adc_hash[32];
	bool adc_hash_set;
	bool warned_no_adc;
	char *email;                  /* learned from an id_token (authorized_user) */
	char *host_project, *host_numeric, *host_universe, *host_email;
	bool host_info;               /* the host's metadata server was asked once */
	char *user_email;
	creds_user_fn user_fn;        /* user mode: asks the master */
	void *user_arg;
	/* the last failure, answered again for CR_FAIL_HOLD_S (clients retry a 503 at once) */
	char fail_key[CR_KEY_MAX_BYTES];
	double fail_until;
	int fail_status;
	char fail_msg[CR_MSG];
};

/* What a credentials file (or the host) is. */
enum cr_type { CR_AUTHORIZED_USER, CR_SERVICE_ACCOUNT, CR_IMPERSONATED, CR_HOST, CR_USER };

/* A source: views into a parsed ADC document (doc), or the host's metadata server. */
struct cr_src {
	enum cr_type type;
	json_t *doc;          /* owned by the outermost source */
	const char *client_id, *client_secret, *refresh_token;
	const char *client_email, *private_key, *private_key_id, *token_uri;
	const char *project, *universe;
	const char *target_email, *impersonation_url;
	json_t *delegates;
	struct cr_src *inner; /* impersonated: the source credentials */
};

/* A freshly minted token. */
struct cr_minted {
	char *token;          /* access token, or ID token */
	char type[16];
	long expires_in;
	char *id_token;       /* authorized_user: the refresh answer's id_token (for the email) */
};

/* ---- small helpers ---- */

/* cr_str - a string member of a JSON object, or NULL */
static const char *cr_str(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s && *s ? s : NULL;
}

/* creds_scrub - see creds.h */
void creds_scrub(char *msg, size_t cap, const char *const *secrets)
{
	static const char red[] = "[redacted]";
	if (!cap)
		return;
	char *out = malloc(cap);
	if (!out) {
		snprintf(msg, cap, "%s", red); /* nothing can be checked: say nothing */
		return;
	}
	for (size_t i = 0; secrets && secrets[i]; i++) {
		size_t n = strlen(secrets[i]), o = 0;
		if (n < 4) /* as short as an ordinary word: not a secret worth the name */
			continue;
		for (const char *p = msg; *p && o + 1 < cap;) {
			if (strncmp(p, secrets[i], n) == 0) {
				for (size_t k = 0; red[k] && o + 1 < cap; k++)
					out[o++] = red[k];
				p += n;
			} else {
				out[o++] = *p++;
			}
		}
		out[o] = '\0';
		memcpy(msg, out, o + 1);
	}
	free(out);
}

/* cr_printable - copy at most max bytes of s, control and non-ASCII bytes as '?' */
static void cr_printable(char *out, size_t cap, const char *s, size_t max)
{
	size_t o = 0;
	for (size_t i = 0; s && s[i] && i < max && o + 1 < cap; i++)
		out[o++] = ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) ? '?' : s[i];
	if (cap)
		out[o] = '\0';
}

/* ---- base64url and JWTs ---- */

/* creds_jwt_payload - see creds.h */
json_t *creds_jwt_payload(const char *jwt)
{
	const char *a = jwt ? strchr(jwt, '.') : NULL;
	const char *b = a ? strchr(a + 1, '.') : NULL;
	if (!b)
		return NULL;
	size_t n;
	unsigned char *raw = b - a - 1 > 1 << 20 ? NULL
			   : b64_decode_alloc(a + 1, (size_t)(b - a - 1), B64_URL | B64_LAX, &n);
	if (!raw)
		return NULL;
	json_t *j = json_loadb((const char *)raw, n, JSON_REJECT_DUPLICATES, NULL);
	free(raw);
	if (!json_is_object(j)) {
		json_decref(j);
		return NULL;
	}
	return j;
}

/* creds_jwt_sign - see creds.h */
int creds_jwt_sign(const char *pem, const char *kid, json_t *claims, char **out, char *err,
		   size_t errlen)
{
	*out = NULL;
	json_t *hdr = json_pack("{s:s, s:s}", "alg", "RS256", "typ", "JWT");
	if (hdr && kid)
		json_object_set_new(hdr, "kid", json_string(kid));
	char *h = hdr ? json_dumps(hdr, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	char *c = json_dumps(claims, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(hdr);
	char *hb = h ? b64_encode((unsigned char *)h, strlen(h), B64_URL) : NULL;
	char *cb = c ? b64_encode((unsigned char *)c, strlen(c), B64_URL) : NULL;
	free(h);
	free(c);
	int rc = -ENOMEM;
	char *input = NULL;
	unsigned char *sig = NULL;
	EVP_PKEY *key = NULL;
	EVP_MD_CTX *md = NULL;
	if (!hb || !cb || asprintf(&input, "%s.%s", hb, cb) < 0) {
		input = NULL;
		snprintf(err, errlen, "out of memory");
		goto done;
	}
	BIO *bio = BIO_new_mem_buf(pem, -1);
	key = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, (void *)"") : NULL;
	BIO_free(bio);
	if (!key || EVP_PKEY_base_id(key) != EVP_PKEY_RSA) {
		snprintf(err, errlen, "the service account's private_key is not an RSA private key "
			 "in PEM form");
		rc = -EINVAL;
		goto done;
	}
	size_t siglen = 0;
	md = EVP_MD_CTX_new();
	if (!md || EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, key) != 1 ||
	    EVP_DigestSign(md, NULL, &siglen, (unsigned char *)input, strlen(input)) != 1 ||
	    !(sig = malloc(siglen)) ||
	    EVP_DigestSign(md, sig, &siglen, (unsigned char *)input, strlen(input)) != 1) {
		snprintf(err, errlen, "signing the token request with the service account's key "
			 "failed");
		rc = -EIO;
		goto done;
	}
	char *sb = b64_encode(sig, siglen, B64_URL);
	if (!sb || asprintf(out, "%s.%s", input, sb) < 0) {
		*out = NULL;
		free(sb);
		snprintf(err, errlen, "out of memory");
		goto done;
	}
	free(sb);
	rc = 0;
done:
	EVP_MD_CTX_free(md);
	EVP_PKEY_free(key);
	free(sig);
	free(input);
	free(hb);
	free(cb);
	return rc;
}

/* ---- configuration ---- */

/* creds_new - see creds.h */
struct creds *creds_new(const struct creds_config *cfg)
{
	struct creds *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->cfg = *cfg;
	const char **fields[] = { &c->cfg.service_account, &c->cfg.token_endpoint,
				  &c->cfg.iam_endpoint, &c->cfg.metadata_host, &c->cfg.project,
				  &c->cfg.scopes };
	for (size_t i = 0; i < 6; i++)
		if (*fields[i]) {
			c->copies[i] = strdup(*fields[i]);
			if (!c->copies[i]) {
				creds_free(c);
				return NULL;
			}
			*fields[i] = c->copies[i];
		}
	pthread_mutex_init(&c->mu, NULL);
	return c;
}

/* cr_cache_clear - forget every cached token */
static void cr_cache_clear(struct creds *c)
{
	for (size_t i = 0; i < CR_CACHE; i++) {
		struct cr_tok *t[2] = { &c->access[i], &c->ident[i] };
		for (int k = 0; k < 2; k++) {
			free(t[k]->key);
			secret_free(t[k]->value);
			memset(t[k], 0, sizeof(*t[k]));
		}
	}
	c->fail_until = 0;
}

/* creds_free - see creds.h */
void creds_free(struct creds *c)
{
	if (!c)
		return;
	cr_cache_clear(c);
	for (size_t i = 0; i < 6; i++)
		free(c->copies[i]);
	free(c->email);
	free(c->host_project);
	free(c->host_numeric);
	free(c->host_universe);
	free(c->host_email);
	free(c->user_email);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

/* creds_mode - see creds.h */
enum creds_mode creds_mode(const struct creds *c)
{
	return c->cfg.mode;
}

/* creds_set_user - see creds.h */
int creds_set_user(struct creds *c, const char *email, creds_user_fn fn, void *arg)
{
	if (email && !ascii_visible_str(email, CR_MAX_FIELD_BYTES))
		return -EINVAL;
	char *e = email ? strdup(email) : NULL;
	if (email && !e)
		return -ENOMEM;
	pthread_mutex_lock(&c->mu);
	free(c->user_email);
	c->user_email = e;
	c->user_fn = fn;
	c->user_arg = arg;
	cr_cache_clear(c);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

/* cr_read_adc - the ADC file's text, from the master or from the file */
static char *cr_read_adc(const struct creds *c, size_t *len, bool *absent, char *err, size_t errlen)
{
	if (c->cfg.read_adc)
		return c->cfg.read_adc(c->cfg.read_adc_arg, len, absent, err, errlen);
	return gcreds_adc_read(len, absent, err, errlen);
}

/* cr_wipe_json - overwrite every string in a JSON value (they may be secrets) */
static void cr_wipe_json(json_t *j)
{
	if (json_is_string(j)) {
		OPENSSL_cleanse((char *)json_string_value(j), json_string_length(j));
	} else if (json_is_object(j)) {
		const char *k;
		json_t *v;
		json_object_foreach(j, k, v)
			cr_wipe_json(v);
	} else if (json_is_array(j)) {
		size_t i;
		json_t *v;
		json_array_foreach(j, i, v)
			cr_wipe_json(v);
	}
}

/* creds_wipe - see creds.h */
void creds_wipe(json_t *j)
{
	cr_wipe_json(j);
}

/* cr_src_free - wipe the document's secrets and free the source chain */
static void cr_src_free(struct cr_src *s)
{
	if (!s)
		return;
	if (s->doc) {
		cr_wipe_json(s->doc);
		json_decref(s->doc);
	}
	if (s->inner)
		s->inner->doc = NULL; /* a view into ours */
	cr_src_free(s->inner);
	free(s);
}

/* cr_src_parse - one credentials object (doc stays owned by the caller) */
static int cr_src_parse(json_t *o, int depth, struct cr_src **out, char *err, size_t errlen)
{
	const char *type = cr_str(o, "type");
	struct cr_src *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->universe = cr_str(o, "universe_domain");
	if (type && strcmp(type, "authorized_user") == 0) {
		s->type = CR_AUTHORIZED_USER;
		s->client_id = cr_str(o, "client_id");
		s->client_secret = cr_str(o, "client_secret");
		s->refresh_token = cr_str(o, "refresh_token");
		s->token_uri = cr_str(o, "token_uri");
		s->project = cr_str(o, "quota_project_id");
		if (!s->client_id || !s->client_secret || !s->refresh_token) {
			snprintf(err, errlen, "the authorized_user credentials lack client_id, "
				 "client_secret or refresh_token");
			free(s);
			return -EINVAL;
		}
	} else if (type && strcmp(type, "service_account") == 0) {
		s->type = CR_SERVICE_ACCOUNT;
		s->client_email = cr_str(o, "client_email");
		s->private_key = cr_str(o, "private_key");
		s->private_key_id = cr_str(o, "private_key_id");
		s->token_uri = cr_str(o, "token_uri");
		s->project = cr_str(o, "project_id");
		if (!s->client_email || !s->private_key) {
			snprintf(err, errlen, "the service_account key lacks client_email or "
				 "private_key");
			free(s);
			return -EINVAL;
		}
	} else if (type && strcmp(type, "impersonated_service_account") == 0 && depth == 0) {
		s->type = CR_IMPERSONATED;
		s->impersonation_url = cr_str(o, "service_account_impersonation_url");
		s->delegates = json_object_get(o, "delegates");
		s->project = cr_str(o, "quota_project_id");
		/* .../serviceAccounts/EMAIL:generateAccessToken */
		const char *sa = s->impersonation_url ? strstr(s->impersonation_url,
							       "/serviceAccounts/") : NULL;
		const char *colon = sa ? strrchr(sa, ':') : NULL;
		json_t *src = json_object_get(o, "source_credentials");
		int rc = json_is_object(src) && colon && colon > sa + 17
				 ? cr_src_parse(src, depth + 1, &s->inner, err, errlen)
				 : -EINVAL;
		if (rc < 0) {
			if (rc == -EINVAL && !(json_is_object(src) && colon && colon > sa + 17))
				snprintf(err, errlen, "the impersonated_service_account credentials "
					 "lack service_account_impersonation_url or "
					 "source_credentials");
			free(s);
			return rc;
		}
		char *t = strndup(sa + 17, (size_t)(colon - sa - 17));
		if (!t) {
			cr_src_free(s->inner);
			free(s);
			return -ENOMEM;
		}
		/* kept in the document so it lives as long as the other views */
		json_object_set_new(o, "__target_email", json_string(t));
		free(t);
		s->target_email = cr_str(o, "__target_email");
		if (!s->target_email || !ascii_visible_str(s->target_email, 256)) {
			snprintf(err, errlen, "the impersonation URL does not name a service account");
			cr_src_free(s->inner);
			free(s);
			return -EINVAL;
		}
	} else {
		snprintf(err, errlen, "credentials of type %.40s are not supported here (only "
			 "authorized_user, service_account and impersonated_service_account); use "
			 "--credentials adc to hand the file to the program as it is",
			 type ? type : "(none)");
		free(s);
		return -EINVAL;
	}
	*out = s;
	return 0;
}

/* cr_src_adc - the source the ADC file describes; -ENOENT when there is no ADC file */
static int cr_src_adc(struct creds *c, struct cr_src **out, char *err, size_t errlen)
{
	size_t len = 0;
	bool absent;
	char *text = cr_read_adc(c, &len, &absent, err, errlen);
	if (!text)
		return absent ? -ENOENT : -EACCES;
	unsigned char hash[32];
	unsigned int hl = 0;
	EVP_Digest(text, len, hash, &hl, EVP_sha256(), NULL);
	if (c->adc_hash_set && memcmp(hash, c->adc_hash, sizeof(hash)) != 0) {
		log_info("the Application Default Credentials changed; minting new tokens");
		cr_cache_clear(c);
		free(c->email);
		c->email = NULL;
	}
	memcpy(c->adc_hash, hash, sizeof(hash));
	c->adc_hash_set = true;
	json_error_t jerr;
	json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	OPENSSL_cleanse(text, len);
	free(text);
	if (!json_is_object(doc)) {
		json_decref(doc);
		snprintf(err, errlen, "the Application Default Credentials file is not a JSON object");
		return -EINVAL;
	}
	int rc = cr_src_parse(doc, 0, out, err, errlen);
	if (rc < 0) {
		cr_wipe_json(doc);
		json_decref(doc);
		return rc;
	}
	(*out)->doc = doc;
	return 0;
}

/* cr_src_server - the server's own credentials: its ADC, else the host's metadata server */
static int cr_src_server(struct creds *c, struct cr_src **out, char *err, size_t errlen)
{
	int rc = cr_src_adc(c, out, err, errlen);
	if (rc != -ENOENT)
		return rc;
	struct cr_src *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->type = CR_HOST;
	*out = s;
	return 0;
}

/* cr_src_for_mode - the source this session's mode mints from */
static int cr_src_for_mode(struct creds *c, struct cr_src **out, char *err, size_t errlen)
{
	*out = NULL;
	switch (c->cfg.mode) {
	case CREDS_METADATA:
		return cr_src_adc(c, out, err, errlen);
	case CREDS_SERVER:
	case CREDS_SERVICE_ACCOUNT:
		return cr_src_server(c, out, err, errlen);
	case CREDS_USER: {
		struct cr_src *s = calloc(1, sizeof(*s));
		if (!s)
			return -ENOMEM;
		s->type = CR_USER;
		*out = s;
		return 0;
	}
	default:
		snprintf(err, errlen, "this session's credentials mode mints no tokens");
		return -EINVAL;
	}
}

/* ---- HTTP ---- */

/* $SSL_CERT_FILE's certificates, read once before the worker took its identity */
static struct {
	char *data;
	size_t len;
} cr_ca;

/* creds_load_ca - see creds.h */
int creds_load_ca(void)
{
	const char *ca = getenv("SSL_CERT_FILE");
	if (!ca || !*ca || cr_ca.len)
		return 0;
	int fd = open(ca, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    st.st_size > CREDS_MAX_CA_FILE) {
		int e = fd < 0 ? errno : EINVAL;
		if (fd >= 0)
			close(fd);
		log_warn("SSL_CERT_FILE %s is not a readable file of at most %d bytes; it is not "
			 "trusted for the token endpoints", ca, CREDS_MAX_CA_FILE);
		return -e;
	}
	char *buf = malloc((size_t)st.st_size);
	ssize_t n = buf ? read(fd, buf, (size_t)st.st_size) : -1;
	close(fd);
	if (n != st.st_size) {
		free(buf);
		return -EIO;
	}
	cr_ca.data = buf;
	cr_ca.len = (size_t)n;
	return 0;
}

struct cr_http {
	struct buf b;
	long status;
};

/* cr_http_free - wipe (answers hold tokens) and free */
static void cr_http_free(struct cr_http *h)
{
	buf_wipe_free(&h->b);
	h->status = 0;
}

/* cr_host_of - the host of a URL, for sentences (never the path or query) */
static void cr_host_of(const char *url, char *out, size_t cap)
{
	char host[300];
	http_url_host(url, host, sizeof(host));
	cr_printable(out, cap, host, 255);
}

/* cr_plain_ok - plain http only to this machine or a metadata server on the link */
static bool cr_plain_ok(const char *url)
{
	char host[300];
	cr_host_of(url, host, sizeof(host));
	return strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 ||
	       strcmp(host, "[::1]") == 0 || strcmp(host, "::1") == 0 ||
	       strncmp(host, "169.254.", 8) == 0 || strcmp(host, "metadata.google.internal") == 0;
}

/*
 * cr_http - one request: POST when body is non-NULL (content type ctype), else GET. headers:
 * extra header lines, NULL-terminated. 0 with h filled (any status), or -EIO with a sentence
 * that names only the host.
 */
static int cr_http(const char *url, const char *ctype, const char *body,
		   const char *const *headers, struct cr_http *h, char *err, size_t errlen)
{
	memset(h, 0, sizeof(*h));
	char host[300];
	cr_host_of(url, host, sizeof(host));
	bool https = strncasecmp(url, "https://", 8) == 0;
	if (!https && !(strncasecmp(url, "http://", 7) == 0 && cr_plain_ok(url))) {
		snprintf(err, errlen, "refusing to send credentials to %s without TLS: use an "
			 "https:// endpoint (plain http is only for this machine)", host);
		return -EINVAL;
	}
	const char *hl[CR_HTTP_MAX_HEADERS + 3];
	size_t nh = 0;
	char ct[128];
	if (body) {
		snprintf(ct, sizeof(ct), "Content-Type: %s", ctype);
		hl[nh++] = ct;
	}
	for (size_t i = 0; headers && headers[i] && nh < CR_HTTP_MAX_HEADERS + 1; i++)
		hl[nh++] = headers[i];
	hl[nh++] = "Expect:";
	hl[nh] = NULL;
	/* the convention Go, OpenSSL and Python share for an extra or private CA: read at
	 * start-up (creds_load_ca), else from the file */
	const char *ca = getenv("SSL_CERT_FILE");
	struct http_request q = {
		.url = url, .body = body, .body_len = body ? strlen(body) : 0, .headers = hl,
		.protocols = https ? "https" : "http", .timeout_ms = CR_TIMEOUT_MS,
		.connect_timeout_ms = CR_CONNECT_TIMEOUT_MS, .max_bytes = CR_HTTP_MAX_BYTES,
		.ca_blob = cr_ca.len ? cr_ca.data : NULL, .ca_len = cr_ca.len,
		.ca_file = !cr_ca.len && ca && *ca ? ca : NULL,
	};
	struct http_response r;
	int rc = http_perform(&q, &r);
	h->status = r.status;
	h->b = r.body; /* cr_http_free wipes it */
	if (rc != 0) {
		/* libcurl's words or the client's own, never the URL's path or query */
		char why[sizeof(r.detail)], big[64];
		snprintf(big, sizeof(big), "the answer is larger than %u bytes", CR_HTTP_MAX_BYTES);
		cr_printable(why, sizeof(why), rc == -EFBIG ? big : r.detail[0] ? r.detail :
			     "the request could not be sent", 200);
		snprintf(err, errlen, "cannot reach %.200s: %.200s", host, why);
		cr_http_free(h);
		return -EIO;
	}
	return 0;
}

/* cr_form - append "&name=value" (value URL-encoded) to a growing form body */
static int cr_form(char **body, const char *name, const char *value)
{
	char *enc = http_escape(value);
	if (!enc)
		return -ENOMEM;
	char *next = NULL;
	int n = asprintf(&next, "%s%s%s=%s", *body ? *body : "", *body ? "&" : "", name, enc);
	secret_free(enc);
	if (n < 0)
		return -ENOMEM;
	secret_free(*body);
	*body = next;
	return 0;
}

/* creds_oauth_error - see creds.h */
void creds_oauth_error(const char *what, long status, const char *body, size_t len, char *err,
		       size_t errlen)
{
	json_t *j = body ? json_loadb(body, len, 0, NULL) : NULL;
	char code[128] = "", desc[256] = "";
	cr_printable(code, sizeof(code), cr_str(j, "error"), 100);
	cr_printable(desc, sizeof(desc), cr_str(j, "error_description"), 200);
	json_decref(j);
	if (code[0])
		snprintf(err, errlen, "the token endpoint refused %s (HTTP %ld): %s%s%s%s", what,
			 status, code, desc[0] ? " (" : "", desc, desc[0] ? ")" : "");
	else
		snprintf(err, errlen, "the token endpoint refused %s (HTTP %ld)", what, status);
}

/* cr_iam_error - a sentence from an IAM Credentials error answer: status and message only */
static void cr_iam_error(const char *what, long status, const char *body, size_t len, char *err,
			 size_t errlen)
{
	json_t *j = body ? json_loadb(body, len, 0, NULL) : NULL;
	json_t *e = json_object_get(j, "error");
	char st[64] = "", msg[320] = "";
	cr_printable(st, sizeof(st), cr_str(e, "status"), 60);
	cr_printable(msg, sizeof(msg), cr_str(e, "message"), 300);
	json_decref(j);
	snprintf(err, errlen, "IAM Credentials refused to %s (HTTP %ld)%s%s%s%s", what, status,
		 st[0] ? ": " : "", st, msg[0] ? ": " : "", msg);
}

/* cr_status_of - the answer status a failed upstream HTTP status deserves */
static int cr_status_of(long http)
{
	return http == 429 || http >= 500 || http == 0 ? 503 : 403;
}

/* cr_parse_token - {"access_token","expires_in","token_type","id_token"?} of a token answer */
static int cr_parse_token(const struct cr_http *h, const char *field, struct cr_minted *m,
			  char *err, size_t errlen)
{
	json_t *j = json_loadb(h->b.data ? h->b.data : "", h->b.len, 0, NULL);
	const char *tok = cr_str(j, field);
	int rc = 0;
	if (!tok || !ascii_visible_str(tok, 8192)) {
		snprintf(err, errlen, "the token endpoint's answer has no usable %s", field);
		rc = -EPROTO;
	} else {
		json_t *ein = json_object_get(j, "expires_in");
		m->expires_in = json_is_integer(ein) ? (long)json_integer_value(ein)
			      : json_is_string(ein) ? atol(json_string_value(ein))
						    : CR_LIFETIME_S;
		if (m->expires_in <= 0 || m->expires_in > 86400 * 7)
			m->expires_in = CR_LIFETIME_S;
		const char *tt = cr_str(j, "token_type");
		snprintf(m->type, sizeof(m->type), "%s",
			 tt && strlen(tt) < sizeof(m->type) && ascii_visible_str(tt, 15) ? tt : "Bearer");
		m->token = strdup(tok);
		const char *idt = cr_str(j, "id_token");
		if (idt && strcmp(field, "id_token") != 0)
			m->id_token = strdup(idt);
		if (!m->token)
			rc = -ENOMEM;
	}
	cr_wipe_json(j);
	json_decref(j);
	return rc;
}

/* cr_jwt_lifetime - seconds an ID token has left, from its exp claim (0: unknown) */
static long cr_jwt_lifetime(const char *jwt)
{
	json_t *p = creds_jwt_payload(jwt);
	json_t *exp = json_object_get(p, "exp");
	long left = json_is_integer(exp) ? (long)(json_integer_value(exp) - time(NULL)) : 0;
	json_decref(p);
	return left > 0 ? left : 0;
}

/* cr_time_left - seconds from now until an RFC 3339 time like 2024-05-01T12:00:00.5Z, or
 * CR_LIFETIME_S if it is none or not within a week */
static long cr_time_left(const char *s)
{
	time_t t;
	if (rfc3339_parse(s, &t) < 0)
		return CR_LIFETIME_S;
	long left = (long)(t - time(NULL));
	return left > 0 && left <= 86400 * 7 ? left : CR_LIFETIME_S;
}

/* ---- minting ---- */

/* cr_token_endpoint - the flag, else the file's token_uri, else Google's */
static const char *cr_token_endpoint(const struct creds *c, const struct cr_src *s)
{
	if (c->cfg.token_endpoint)
		return c->cfg.token_endpoint;
	if (s->token_uri)
		return s->token_uri;
	return CREDS_DEFAULT_TOKEN_ENDPOINT;
}

/* cr_metadata_host - where the host's metadata server is */
static const char *cr_metadata_host(const struct creds *c)
{
	const char *env = getenv("GCE_METADATA_HOST");
	return c->cfg.metadata_host ? c->cfg.metadata_host
				    : env && *env ? env : CREDS_DEFAULT_METADATA_HOST;
}

/* cr_refresh - authorized_user: the refresh-token grant */
static int cr_refresh(const struct creds *c, const struct cr_src *s, struct cr_minted *m,
		      int *status, char *err, size_t errlen)
{
	char *form = NULL;
	if (cr_form(&form, "grant_type", "refresh_token") || cr_form(&form, "client_id", s->client_id) ||
	    cr_form(&form, "client_secret", s->client_secret) ||
	    cr_form(&form, "refresh_token", s->refresh_token)) {
		secret_free(form);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	struct cr_http h;
	int rc = cr_http(cr_token_endpoint(c, s), "application/x-www-form-urlencoded", form, NULL,
			 &h, err, errlen);
	secret_free(form);
	if (rc < 0) {
		*status = 503;
		return rc;
	}
	if (h.status != 200) {
		creds_oauth_error("the refresh token", h.status, h.b.data, h.b.len, err, errlen);
		if (h.status == 400 || h.status == 401)
			snprintf(err + strlen(err), errlen - strlen(err), "; sign in again with "
				 "`gcloud auth application-default login`");
		*status = cr_status_of(h.status);
		cr_http_free(&h);
		return -EACCES;
	}
	rc = cr_parse_token(&h, "access_token", m, err, errlen);
	cr_http_free(&h);
	if (rc < 0)
		*status = 503;
	return rc;
}

/* cr_jwt_grant - service_account: the JWT-bearer grant, for scopes or an ID token audience */
static int cr_jwt_grant(const struct creds *c, const struct cr_src *s, const char *scopes,
			const char *audience, struct cr_minted *m, int *status, char *err,
			size_t errlen)
{
	const char *endpoint = cr_token_endpoint(c, s);
	time_t now = time(NULL);
	json_t *claims = json_pack("{s:s, s:s, s:I, s:I}", "iss", s->client_email, "aud", endpoint,
				   "iat", (json_int_t)now, "exp", (json_int_t)(now + CR_LIFETIME_S));
	if (claims && audience)
		json_object_set_new(claims, "target_audience", json_string(audience));
	else if (claims)
		json_object_set_new(claims, "scope", json_string(scopes));
	char *jwt = NULL;
	int rc = claims ? creds_jwt_sign(s->private_key, s->private_key_id, claims, &jwt, err, errlen)
			: -ENOMEM;
	json_decref(claims);
	if (rc < 0) {
		*status = 403;
		return rc;
	}
	char *form = NULL;
	if (cr_form(&form, "grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer") ||
	    cr_form(&form, "assertion", jwt)) {
		secret_free(jwt);
		secret_free(form);
		return -ENOMEM;
	}
	secret_free(jwt);
	struct cr_http h;
	rc = cr_http(endpoint, "application/x-www-form-urlencoded", form, NULL, &h, err, errlen);
	secret_free(form);
	if (rc < 0) {
		*status = 503;
		return rc;
	}
	if (h.status != 200) {
		creds_oauth_error("the service account key", h.status, h.b.data, h.b.len, err, errlen);
		*status = cr_status_of(h.status);
		cr_http_free(&h);
		return -EACCES;
	}
	rc = cr_parse_token(&h, audience ? "id_token" : "access_token", m, err, errlen);
	cr_http_free(&h);
	if (rc < 0)
		*status = 503;
	else if (audience)
		m->expires_in = cr_jwt_lifetime(m->token);
	return rc;
}

/* cr_host_get - GET a path of the host's metadata server; 0 with h (status may be 404) */
static int cr_host_get(const struct creds *c, const char *path, struct cr_http *h, char *err,
		       size_t errlen)
{
	char url[2048];
	if ((size_t)snprintf(url, sizeof(url), "http://%s/computeMetadata/v1/%s",
			     cr_metadata_host(c), path) >= sizeof(url)) {
		snprintf(err, errlen, "the metadata request is too long");
		return -ENAMETOOLONG;
	}
	static const char *const flavor[] = { "Metadata-Flavor: Google", NULL };
	int rc = cr_http(url, NULL, NULL, flavor, h, err, errlen);
	if (rc == 0 && h->status != 200 && h->status != 404) {
		snprintf(err, errlen, "the host's metadata server answered HTTP %ld for %.200s",
			 h->status, path);
		cr_http_free(h);
		return -EIO;
	}
	return rc;
}

/* cr_host_token - the host's metadata server: an access token for scopes, or an ID token */
static int cr_host_token(const struct creds *c, const char *scopes, const char *audience,
			 bool full, bool licenses, struct cr_minted *m, int *status, char *err,
			 size_t errlen)
{
	char *q = http_escape(audience ? audience : scopes);
	char path[3000];
	if (!q)
		return -ENOMEM;
	if (audience)
		snprintf(path, sizeof(path), "instance/service-accounts/default/identity?audience=%s"
			 "&format=%s%s", q, full ? "full" : "standard", licenses ? "&licenses=TRUE" : "");
	else
		snprintf(path, sizeof(path), "instance/service-accounts/default/token?scopes=%s", q);
	free(q);
	struct cr_http h;
	int rc = cr_host_get(c, path, &h, err, errlen);
	if (rc < 0) {
		*status = 503;
		return rc;
	}
	if (h.status != 200) {
		snprintf(err, errlen, "the host's metadata server has no %s",
			 audience ? "ID token for that audience" : "token for these scopes");
		*status = 404;
		cr_http_free(&h);
		return -ENOENT;
	}
	if (audience) {
		m->token = strndup(h.b.data ? h.b.data : "", h.b.len);
		while (m->token && *m->token && strchr("\r\n ", m->token[strlen(m->token) - 1]))
			m->token[strlen(m->token) - 1] = '\0';
		rc = m->token && ascii_visible_str(m->token, 8192) ? 0 : -EPROTO;
		if (rc == 0)
			m->expires_in = cr_jwt_lifetime(m->token);
		else
			snprintf(err, errlen, "the host's metadata server sent an unusable ID token");
	} else {
		rc = cr_parse_token(&h, "access_token", m, err, errlen);
	}
	cr_http_free(&h);
	if (rc < 0)
		*status = 503;
	return rc;
}

/* cr_iam - IAM Credentials generateAccessToken / generateIdToken for email, authorized by
 * bearer */
static int cr_iam(const struct creds *c, const char *url_from_file, const char *email,
		  const char *bearer, json_t *delegates, const char *scopes, const char *audience,
		  struct cr_minted *m, int *status, char *err, size_t errlen)
{
	const char *verb = audience ? "generateIdToken" : "generateAccessToken";
	char url[1024];
	if (url_from_file && !c->cfg.iam_endpoint && !audience)
		snprintf(url, sizeof(url), "%s", url_from_file);
	else
		snprintf(url, sizeof(url), "%s/v1/projects/-/serviceAccounts/%s:%s",
			 c->cfg.iam_endpoint ? c->cfg.iam_endpoint : CREDS_DEFAULT_IAM_ENDPOINT,
			 email, verb);
	json_t *req = json_object();
	if (audience) {
		json_object_set_new(req, "audience", json_string(audience));
		json_object_set_new(req, "includeEmail", json_true());
	} else {
		json_t *sc = json_array();
		char *copy = strdup(scopes);
		char *save = NULL;
		for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t;
		     t = strtok_r(NULL, ",", &save))
			json_array_append_new(sc, json_string(t));
		free(copy);
		json_object_set_new(req, "scope", sc);
		json_object_set_new(req, "lifetime", json_string("3600s"));
	}
	if (json_is_array(delegates) && json_array_size(delegates))
		json_object_set(req, "delegates", delegates);
	char *body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	char *auth = NULL;
	if (!body || asprintf(&auth, "Authorization: Bearer %s", bearer) < 0) {
		free(body);
		return -ENOMEM;
	}
	const char *hdr[] = { auth, NULL };
	struct cr_http h;
	int rc = cr_http(url, "application/json", body, hdr, &h, err, errlen);
	free(body);
	secret_free(auth);
	if (rc < 0) {
		*status = 503;
		return rc;
	}
	char what[400];
	snprintf(what, sizeof(what), "mint %s for %.256s",
		 audience ? "an ID token" : "an access token", email);
	if (h.status != 200) {
		cr_iam_error(what, h.status, h.b.data, h.b.len, err, errlen);
		*status = cr_status_of(h.status);
		cr_http_free(&h);
		return -EACCES;
	}
	json_t *j = json_loadb(h.b.data ? h.b.data : "", h.b.len, 0, NULL);
	const char *tok = cr_str(j, audience ? "token" : "accessToken");
	if (!tok || !ascii_visible_str(tok, 8192) || !(m->token = strdup(tok))) {
		snprintf(err, errlen, "IAM Credentials' answer has no usable token");
		rc = -EPROTO;
		*status = 503;
	} else {
		snprintf(m->type, sizeof(m->type), "Bearer");
		m->expires_in = audience ? cr_jwt_lifetime(m->token)
					 : cr_time_left(cr_str(j, "expireTime"));
	}
	cr_wipe_json(j);
	json_decref(j);
	cr_http_free(&h);
	return rc;
}

static int cr_mint(struct creds *c, const struct cr_src *s, const char *scopes,
		   const char *audience, bool full, bool licenses, struct cr_minted *m,
		   int *status, char *err, size_t errlen);

/* cr_mint_via_iam - the base source's cloud-platform token, then IAM Credentials for target */
static int cr_mint_via_iam(struct creds *c, const struct cr_src *base, const char *url_from_file,
			   const char *target, json_t *delegates, const char *scopes,
			   const char *audience, struct cr_minted *m, int *status, char *err,
			   size_t errlen)
{
	struct cr_minted src = { 0 };
	int rc = cr_mint(c, base, CREDS_DEFAULT_SCOPE, NULL, false, false, &src, status, err,
			 errlen);
	if (rc == 0)
		rc = cr_iam(c, url_from_file, target, src.token, delegates, scopes, audience, m,
			    status, err, errlen);
	secret_free(src.token);
	secret_free(src.id_token);
	return rc;
}

/* cr_mint - an access token for scopes (comma key), or with audience an ID token, from s */
static int cr_mint(struct creds *c, const struct cr_src *s, const char *scopes,
		   const char *audience, bool full, bool licenses, struct cr_minted *m,
		   int *status, char *err, size_t errlen)
{
	memset(m, 0, sizeof(*m));
	snprintf(m->type, sizeof(m->type), "Bearer");
	char spaced[CR_KEY_MAX_BYTES];
	snprintf(spaced, sizeof(spaced), "%s", scopes ? scopes : "");
	for (char *p = spaced; *p; p++)
		if (*p == ',')
			*p = ' ';
	switch (s->type) {
	case CR_AUTHORIZED_USER:
		if (audience) {
			snprintf(err, errlen, "user credentials cannot mint ID tokens for an audience; "
				 "use a service account (--credentials service-account:EMAIL)");
			*status = 404;
			return -ENOTSUP;
		}
		return cr_refresh(c, s, m, status, err, errlen);
	case CR_SERVICE_ACCOUNT:
		return cr_jwt_grant(c, s, spaced, audience, m, status, err, errlen);
	case CR_IMPERSONATED:
		return cr_mint_via_iam(c, s->inner, s->impersonation_url, s->target_email,
				       s->delegates, scopes, audience, m, status, err, errlen);
	case CR_HOST:
		return cr_host_token(c, scopes, audience, full, licenses, m, status, err, errlen);
	case CR_USER:
		if (audience) {
			snprintf(err, errlen, "the signed-in user's credentials cannot mint ID tokens");
			*status = 404;
			return -ENOTSUP;
		}
		if (!c->user_fn) {
			snprintf(err, errlen, "this session has no signed-in Google user: --credentials "
				 "user needs the user to sign in to the server");
			*status = 403;
			return -EACCES;
		}
		return c->user_fn(c->user_arg, scopes ? scopes : CREDS_DEFAULT_SCOPE, &m->token,
				  &m->expires_in, status, err, errlen);
	}
	return -EINVAL;
}

/* cr_can_identity - can this mode and source mint ID tokens? */
static bool cr_can_identity(const struct creds *c, const struct cr_src *s)
{
	if (c->cfg.mode == CREDS_SERVICE_ACCOUNT)
		return true;
	return s && (s->type == CR_SERVICE_ACCOUNT || s->type == CR_IMPERSONATED ||
		     s->type == CR_HOST);
}

/* ---- the cache ---- */

/* cr_cache_find - a cached token for key with more than margin seconds left */
static struct cr_tok *cr_cache_find(struct cr_tok *tab, const char *key, double margin)
{
	double now = mono_s();
	for (size_t i = 0; i < CR_CACHE; i++)
		if (tab[i].key && strcmp(tab[i].key, key) == 0 && tab[i].expires - now > margin)
			return &tab[i];
	return NULL;
}

/* cr_cache_put - keep a minted token (replacing the same key, or the one expiring first) */
static void cr_cache_put(struct cr_tok *tab, const char *key, const struct cr_minted *m)
{
	if (m->expires_in <= 0)
		return; /* unknown lifetime: not worth keeping */
	size_t slot = 0;
	for (size_t i = 0; i < CR_CACHE; i++) {
		if (tab[i].key && strcmp(tab[i].key, key) == 0) {
			slot = i;
			break;
		}
		if (!tab[i].key || tab[i].expires < tab[slot].expires)
			slot = i;
		if (!tab[i].key)
			break;
	}
	char *k = strdup(key), *v = strdup(m->token);
	if (!k || !v) {
		free(k);
		secret_free(v);
		return;
	}
	free(tab[slot].key);
	secret_free(tab[slot].value);
	tab[slot].key = k;
	tab[slot].value = v;
	snprintf(tab[slot].type, sizeof(tab[slot].type), "%s", m->type);
	tab[slot].expires = mono_s() + (double)m->expires_in;
}

/* cr_secrets - the secrets a sentence must never carry (views, valid while s and c live) */
static void cr_secrets(const struct creds *c, const struct cr_src *s, const char **out,
		       size_t cap)
{
	size_t n = 0;
	for (const struct cr_src *p = s; p && n + 4 < cap; p = p->inner) {
		out[n++] = p->refresh_token;
		out[n++] = p->client_secret;
		out[n++] = p->private_key;
	}
	for (size_t i = 0; i < CR_CACHE && n + 3 < cap; i++) {
		if (c->access[i].value)
			out[n++] = c->access[i].value;
		if (c->ident[i].value)
			out[n++] = c->ident[i].value;
	}
	out[n] = NULL;
	/* drop the NULL holes the source fields may have left */
	size_t w = 0;
	for (size_t r = 0; r < n; r++)
		if (out[r])
			out[w++] = out[r];
	out[w] = NULL;
}

/* cr_scrub_all - scrub a sentence of every secret in play, a PEM key's base64 lines too */
static void cr_scrub_all(const struct creds *c, const struct cr_src *s, char *msg, size_t cap)
{
	const char *secrets[64];
	cr_secrets(c, s, secrets, 64);
	creds_scrub(msg, cap, secrets);
	for (const struct cr_src *p = s; p; p = p->inner) {
		if (!p->private_key)
			continue;
		char *copy = strdup(p->private_key);
		char *save = NULL;
		for (char *line = copy ? strtok_r(copy, "\n", &save) : NULL; line;
		     line = strtok_r(NULL, "\n", &save)) {
			const char *one[] = { strlen(line) >= 16 && line[0] != '-' ? line : NULL,
					      NULL };
			creds_scrub(msg, cap, one);
		}
		if (copy)
			secret_free(copy);
	}
}

/*
 * cr_get - the cached or freshly minted token for key (scopes key, or audience key) under
 * c->mu. On success *tok points into the cache (or, for a token that cannot be cached, into
 * *fresh, which the caller frees). Fills the identity facts of the source when asked.
 */
static int cr_get(struct creds *c, const char *scopes, const char *audience, bool full,
		  bool licenses, struct cr_tok **tok, struct cr_minted *fresh, int *status,
		  char *err, size_t errlen)
{
	char key[CR_KEY_MAX_BYTES];
	if (audience)
		snprintf(key, sizeof(key), "%s\n%d%d", audience, full, licenses);
	else
		snprintf(key, sizeof(key), "%s", scopes);
	struct cr_tok *tab = audience ? c->ident : c->access;
	memset(fresh, 0, sizeof(*fresh));
	*tok = NULL;
	*status = 503;
	double now = mono_s();
	if (c->fail_until > now && strcmp(c->fail_key, key) == 0) {
		*status = c->fail_status;
		snprintf(err, errlen, "%s", c->fail_msg);
		return -EAGAIN;
	}
	struct cr_src *s = NULL;
	int rc = cr_src_for_mode(c, &s, err, errlen);
	if (rc == 0 && (*tok = cr_cache_find(tab, key, CREDS_REFRESH_MARGIN)) != NULL) {
		cr_src_free(s);
		return 0;
	}
	if (rc < 0) {
		*status = rc == -ENOENT || rc == -EINVAL ? 403 : 503;
	} else if (audience && !cr_can_identity(c, s)) {
		snprintf(err, errlen, "these credentials cannot mint ID tokens");
		*status = 404;
		rc = -ENOTSUP;
	} else if (c->cfg.mode == CREDS_SERVICE_ACCOUNT) {
		rc = cr_mint_via_iam(c, s, NULL, c->cfg.service_account, NULL, scopes, audience,
				     fresh, status, err, errlen);
	} else {
		rc = cr_mint(c, s, scopes, audience, full, licenses, fresh, status, err, errlen);
	}
	if (rc == 0) {
		if (fresh->id_token && !audience) {
			/* the refresh answer's id_token names the user; keep only the email */
			json_t *p = creds_jwt_payload(fresh->id_token);
			const char *email = cr_str(p, "email");
			if (email && ascii_visible_str(email, CR_MAX_FIELD_BYTES)) {
				free(c->email);
				c->email = strdup(email);
			}
			json_decref(p);
		}
		cr_cache_put(tab, key, fresh);
		struct cr_tok *cached = cr_cache_find(tab, key, 0);
		if (cached) {
			secret_free(fresh->token);
			secret_free(fresh->id_token);
			memset(fresh, 0, sizeof(*fresh));
			*tok = cached;
		}
		log_info("minted %s (%s mode, valid %ld s)",
			 audience ? "an ID token" : "an access token", gcreds_mode_name(c->cfg.mode),
			 cached ? (long)(cached->expires - now) : fresh->expires_in);
	} else {
		cr_scrub_all(c, s, err, errlen);
		log_warn("no Google token for this call: %s", err);
		snprintf(c->fail_key, sizeof(c->fail_key), "%s", key);
		snprintf(c->fail_msg, sizeof(c->fail_msg), "%s", err);
		c->fail_status = *status;
		c->fail_until = now + CR_FAIL_HOLD_S;
	}
	cr_src_free(s);
	return rc;
}

/* ---- facts about the identity ---- */

/* cr_host_fact - one text value of the host's metadata server, or NULL */
static char *cr_host_fact(const struct creds *c, const char *path)
{
	struct cr_http h;
	char err[256];
	if (cr_host_get(c, path, &h, err, sizeof(err)) < 0) {
		log_debug("host metadata %s: %s", path, err);
		return NULL;
	}
	char *v = NULL;
	if (h.status == 200 && h.b.data) {
		v = strndup(h.b.data, h.b.len);
		if (v && !ascii_visible_str(v, CR_MAX_FIELD_BYTES)) {
			free(v);
			v = NULL;
		}
	}
	cr_http_free(&h);
	return v;
}

/* cr_host_facts - ask the host's metadata server once for project, number, email, universe */
static void cr_host_facts(struct creds *c)
{
	if (c->host_info)
		return;
	c->host_info = true;
	c->host_project = cr_host_fact(c, "project/project-id");
	c->host_numeric = cr_host_fact(c, "project/numeric-project-id");
	c->host_email = cr_host_fact(c, "instance/service-accounts/default/email");
	c->host_universe = cr_host_fact(c, "universe/universe-domain");
}

/* cr_project_of_email - "p" from "name@p.iam.gserviceaccount.com" */
static char *cr_project_of_email(const char *email)
{
	const char *at = email ? strchr(email, '@') : NULL;
	const char *dot = at ? strstr(at, ".iam.gserviceaccount.com") : NULL;
	return dot && dot > at + 1 ? strndup(at + 1, (size_t)(dot - at - 1)) : NULL;
}

/* cr_facts - email, project, numeric project, universe and id_tokens into o (under c->mu) */
static void cr_facts(struct creds *c, const struct cr_src *s, json_t *o)
{
	const char *email = NULL, *project = NULL, *universe = NULL;
	if (s && s->type == CR_HOST)
		cr_host_facts(c);
	if (c->cfg.mode == CREDS_SERVICE_ACCOUNT)
		email = c->cfg.service_account;
	else if (s && s->type == CR_SERVICE_ACCOUNT)
		email = s->client_email;
	else if (s && s->type == CR_IMPERSONATED)
		email = s->target_email;
	else if (s && s->type == CR_HOST)
		email = c->host_email;
	else if (s && s->type == CR_USER)
		email = c->user_email;
	else
		email = c->email;
	const char *env = getenv("GOOGLE_CLOUD_PROJECT");
	project = c->cfg.project ? c->cfg.project
		: env && *env ? env
		: s && s->project ? s->project
		: s && s->inner && s->inner->project ? s->inner->project
		: s && s->type == CR_HOST ? c->host_project : NULL;
	char *derived = project ? NULL : cr_project_of_email(email);
	universe = s && s->universe ? s->universe
		 : s && s->type == CR_HOST && c->host_universe ? c->host_universe
							       : "googleapis.com";
	json_object_set_new(o, "email", json_string(email && ascii_visible_str(email, CR_MAX_FIELD_BYTES)
							    ? email : "default"));
	if (project && ascii_visible_str(project, CR_MAX_FIELD_BYTES))
		json_object_set_new(o, "project_id", json_string(project));
	else if (derived && ascii_visible_str(derived, CR_MAX_FIELD_BYTES))
		json_object_set_new(o, "project_id", json_string(derived));
	free(derived);
	if (s && s->type == CR_HOST && c->host_numeric)
		json_object_set_new(o, "numeric_project_id", json_string(c->host_numeric));
	json_object_set_new(o, "universe_domain",
			    json_string(ascii_visible_str(universe, CR_MAX_FIELD_BYTES) ? universe
									    : "googleapis.com"));
	json_object_set_new(o, "id_tokens", json_boolean(cr_can_identity(c, s)));
}

/* cr_default_scopes - the configured default scope set as a key ("a,b") */
static void cr_default_scopes(const struct creds *c, char *out, size_t cap)
{
	snprintf(out, cap, "%s", c->cfg.scopes && *c->cfg.scopes ? c->cfg.scopes
								     : CREDS_DEFAULT_SCOPE);
	for (char *p = out; *p; p++)
		if (*p == ' ')
			*p = ',';
}

/* ---- the two entry points ---- */

/* creds_for_call - see creds.h */
json_t *creds_for_call(struct creds *c)
{
	char err[CR_MSG];
	if (c->cfg.mode == CREDS_NONE)
		return NULL;
	pthread_mutex_lock(&c->mu);
	if (c->cfg.mode == CREDS_ADC) {
		size_t len = 0;
		bool absent;
		char *text = cr_read_adc(c, &len, &absent, err, sizeof(err));
		json_t *out = NULL;
		if (!text) {
			if (!absent || !c->warned_no_adc)
				log_warn("programs run without Google credentials: %s", err);
			c->warned_no_adc = true;
		} else {
			out = json_pack("{s:s, s:s%}", "mode", "adc", "adc", text, len);
			OPENSSL_cleanse(text, len);
			free(text);
		}
		pthread_mutex_unlock(&c->mu);
		return out;
	}
	json_t *o = json_pack("{s:s}", "mode", "metadata");
	char scopes[CR_KEY_MAX_BYTES];
	cr_default_scopes(c, scopes, sizeof(scopes));
	json_t *sc = json_array();
	char copy[CR_KEY_MAX_BYTES];
	snprintf(copy, sizeof(copy), "%s", scopes);
	char *save = NULL;
	for (char *t = strtok_r(copy, ",", &save); t && sc; t = strtok_r(NULL, ",", &save))
		json_array_append_new(sc, json_string(t));
	json_object_set_new(o, "scopes", sc);
	/* mint first: the refresh answer may name the user */
	struct cr_tok *tok = NULL;
	struct cr_minted fresh;
	int status = 0;
	int rc = cr_get(c, scopes, NULL, false, false, &tok, &fresh, &status, err, sizeof(err));
	if (rc == 0) {
		const char *value = tok ? tok->value : fresh.token;
		long left = tok ? (long)(tok->expires - mono_s()) : fresh.expires_in;
		json_object_set_new(o, "access_token", json_string(value));
		json_object_set_new(o, "token_type", json_string(tok ? tok->type : fresh.type));
		json_object_set_new(o, "expires_in", json_integer(left > 0 ? left : 1));
	}
	secret_free(fresh.token);
	secret_free(fresh.id_token);
	struct cr_src *s = NULL;
	char ignored[CR_MSG];
	if (cr_src_for_mode(c, &s, ignored, sizeof(ignored)) < 0)
		s = NULL;
	cr_facts(c, s, o);
	cr_src_free(s);
	pthread_mutex_unlock(&c->mu);
	return o;
}

/* cr_scopes_key - a token_request's scopes as the cache key (sorted, unique, comma-joined) */
static int cr_scopes_key(json_t *arr, char *out, size_t cap)
{
	if (!json_is_array(arr) || json_array_size(arr) == 0 ||
	    json_array_size(arr) > CR_MAX_SCOPES)
		return -EINVAL;
	const char *items[CR_MAX_SCOPES];
	size_t n = 0;
	size_t i;
	json_t *e;
	json_array_foreach(arr, i, e)
	{
		const char *s = json_string_value(e);
		if (!s || !ascii_visible_str(s, 256) || strchr(s, ','))
			return -EINVAL;
		items[n++] = s;
	}
	/* insertion sort: at most 32 */
	for (size_t a = 1; a < n; a++)
		for (size_t b = a; b > 0 && strcmp(items[b - 1], items[b]) > 0; b--) {
			const char *t = items[b];
			items[b] = items[b - 1];
			items[b - 1] = t;
		}
	size_t off = 0;
	out[0] = '\0';
	for (size_t k = 0; k < n; k++) {
		if (k && strcmp(items[k], items[k - 1]) == 0)
			continue;
		int w = snprintf(out + off, cap - off, "%s%s", off ? "," : "", items[k]);
		if (w < 0 || (size_t)w >= cap - off)
			return -EINVAL;
		off += (size_t)w;
	}
	return 0;
}

/* creds_answer - see creds.h */
json_t *creds_answer(struct creds *c, json_t *event)
{
	json_t *id = json_object_get(event, "id");
	if (!json_is_integer(id))
		return NULL;
	const char *kind = json_string_value(json_object_get(event, "kind"));
	char err[CR_MSG] = "";
	int status = 400;
	json_t *out = NULL;
	char scopes[CR_KEY_MAX_BYTES];
	const char *audience = NULL, *format = NULL;
	bool identity = kind && strcmp(kind, "identity") == 0;
	if (c->cfg.mode == CREDS_NONE || c->cfg.mode == CREDS_ADC) {
		snprintf(err, sizeof(err), "this session serves no tokens through the metadata "
			 "server (--credentials %s)", gcreds_mode_name(c->cfg.mode));
		status = 404;
	} else if (identity) {
		audience = json_string_value(json_object_get(event, "audience"));
		format = json_string_value(json_object_get(event, "format"));
		if (!audience || !ascii_visible_str(audience, CR_MAX_FIELD_BYTES)) {
			snprintf(err, sizeof(err), "the token request has no usable audience");
			audience = NULL;
		}
	} else if (!kind || strcmp(kind, "access") != 0 ||
		   cr_scopes_key(json_object_get(event, "scopes"), scopes, sizeof(scopes)) < 0) {
		snprintf(err, sizeof(err), "the token request is malformed");
	}
	if (!err[0]) {
		pthread_mutex_lock(&c->mu);
		struct cr_tok *tok = NULL;
		struct cr_minted fresh;
		bool full = format && strcmp(format, "full") == 0;
		bool lic = json_is_true(json_object_get(event, "licenses"));
		int rc = cr_get(c, identity ? NULL : scopes, audience, full, lic, &tok, &fresh,
				&status, err, sizeof(err));
		if (rc == 0) {
			const char *value = tok ? tok->value : fresh.token;
			if (identity) {
				out = json_pack("{s:O, s:s}", "id", id, "id_token", value);
			} else {
				long left = tok ? (long)(tok->expires - mono_s()) : fresh.expires_in;
				out = json_pack("{s:O, s:s, s:s, s:I}", "id", id, "access_token", value,
						"token_type", tok ? tok->type : fresh.type, "expires_in",
						(json_int_t)(left > 0 ? left : 1));
			}
		}
		secret_free(fresh.token);
		secret_free(fresh.id_token);
		pthread_mutex_unlock(&c->mu);
	}
	if (!out)
		out = json_pack("{s:O, s:s, s:i}", "id", id, "error",
				err[0] ? err : "the token could not be minted", "status", status);
	return out;
}
