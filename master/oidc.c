/*
 * oidc.c - the master as an OpenID Connect client of Google (or of --oidc-issuer): its OAuth
 * client from --oauth-client-file, the provider's discovery document and signing keys read at
 * start-up, the authorization-code exchange after a person signed in, and the checks on the ID
 * token that decide who they are and whether they may use this server.
 *
 * Called by master/auth.c from the HTTP connection threads (so the key set has a lock). Every
 * request goes out through lib/http_client.c under the AUTH_FETCH_ limits, to https:// URLs or, for the
 * tests' provider, plain http:// on a loopback address. Nothing here logs a code, a token or
 * the client secret.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "ipc/ipc.h"
#include "lib/buf.h"
#include "lib/http_client.h"
#include "lib/secret.h"
#include "master/auth.h"
#include "policy/limits.h"

#define OIDC_GOOGLE "https://accounts.google.com"

static struct {
	char issuer[AUTH_MAX_URI_BYTES];
	char *client_id, *client_secret;
	char *authorization_endpoint, *token_endpoint, *jwks_uri;
	const char *allowed_domains, *allowed_users;
	const char *ca_file;  /* --oauth-ca-file: instead of the system's CAs */
	char cloud_scopes[IPC_TOKEN_SCOPES_MAX]; /* --credentials user: --scopes, space-separated */
	pthread_mutex_t mu;  /* jwks, jwks_at */
	json_t *jwks;
	time_t jwks_at;
} oidc = { .mu = PTHREAD_MUTEX_INITIALIZER };

const char *oidc_binding(void)
{
	static char b[2 * AUTH_MAX_URI_BYTES + 8];
	snprintf(b, sizeof(b), "%s %s", oidc.issuer, oidc.client_id ? oidc.client_id : "");
	return b;
}

/* oidc_url_ok - https://, or http:// to this machine (the tests' provider) */
static bool oidc_url_ok(const char *u)
{
	if (!u || strlen(u) >= AUTH_MAX_URI_BYTES)
		return false;
	for (const char *p = u; *p; p++)
		if (*p <= ' ' || *p > '~')
			return false;
	if (strncmp(u, "https://", 8) == 0)
		return u[8] != '\0' && u[8] != '/';
	static const char *const local[] = { "http://127.0.0.1", "http://localhost", "http://[::1]" };
	for (size_t i = 0; i < 3; i++) {
		size_t n = strlen(local[i]);
		if (strncmp(u, local[i], n) == 0 && (u[n] == ':' || u[n] == '/' || u[n] == '\0'))
			return true;
	}
	return false;
}

int oidc_fetch(const char *url, const char *form, const char *user, const char *pass, long *status,
	       char **body, size_t *len)
{
	struct oidc_fetch_opts o = { AUTH_FETCH_MAX_BYTES, AUTH_FETCH_TIMEOUT_MS, false, false, NULL };
	return oidc_fetch_opts(url, &o, form, user, pass, status, body, len);
}

int oidc_fetch_opts(const char *url, const struct oidc_fetch_opts *o, const char *form, const char *user,
		    const char *pass, long *status, char **body, size_t *len)
{
	*body = NULL;
	*len = 0;
	*status = 0;
	if (o->https_only ? strncmp(url, "https://", 8) != 0 : !oidc_url_ok(url))
		return -EINVAL;
	/* RFC 6749 2.3.1: the id and secret are form-encoded before Basic's base64 */
	char *eu = user && pass ? http_escape(user) : NULL, *ep = user && pass ? http_escape(pass) : NULL;
	if (user && pass && (!eu || !ep)) {
		secret_free(eu);
		secret_free(ep);
		return -ENOMEM;
	}
	const char *const hdr[] = { "Accept: application/json", NULL };
	struct http_request q = {
		.url = url, .body = form, .body_len = form ? strlen(form) : 0, .headers = hdr,
		.timeout_ms = o->timeout_ms, .max_bytes = o->max_bytes, .ca_file = oidc.ca_file,
		/* the client chose this URL: no proxy (the address check must see the real peer) */
		.public_only = o->public_only, .user = eu, .pass = ep,
		.want_headers = (const char *const[]){ "Cache-Control", NULL },
	};
	struct http_response r;
	int rc = http_perform(&q, &r);
	secret_free(eu);
	secret_free(ep);
	*status = r.status;
	if (o->cache_control)
		snprintf(o->cache_control, 256, "%s", r.header[0]);
	if (rc != 0) {
		if (r.fail == HTTP_FAIL_ADDRESS)
			log_warn("refused to fetch from a non-public address: %s", r.err);
		else
			log_debug("%s", r.err);
		http_response_free(&r);
		return rc == -EFBIG ? -EFBIG : -EIO;
	}
	*body = r.body.data; /* NUL-terminated, "" when empty */
	*len = r.body.len;
	return 0;
}

/* oidc_get_json - GET a JSON object */
static json_t *oidc_get_json(const char *url, char *err, size_t cap)
{
	char *body;
	size_t len;
	long status;
	int r = oidc_fetch(url, NULL, NULL, NULL, &status, &body, &len);
	if (r != 0) {
		snprintf(err, cap, "cannot read %s: %s", url, r == -EFBIG ? "it is too large" :
			 r == -EINVAL ? "not an https:// URL" : "no answer");
		return NULL;
	}
	json_t *v = status == 200 ? json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
	free(body);
	if (!json_is_object(v)) {
		snprintf(err, cap, "%s answered HTTP %ld without a JSON object", url, status);
		json_decref(v);
		return NULL;
	}
	return v;
}

/* oidc_endpoint - one URL member of the discovery document, copied */
static int oidc_endpoint(const json_t *doc, const char *name, char **out, char *err, size_t cap)
{
	const char *u = json_string_value(json_object_get(doc, name));
	if (!oidc_url_ok(u)) {
		snprintf(err, cap, "the provider's discovery document has no usable %s", name);
		return -1;
	}
	*out = strdup(u);
	return *out ? 0 : -1;
}

/* oidc_read_client - Google Cloud console's client JSON: {"web": {"client_id", "client_secret"}} */
static int oidc_read_client(const char *path, char *err, size_t cap)
{
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > OIDC_CLIENT_FILE_MAX_BYTES) {
		snprintf(err, cap, "--oauth-client-file %s: cannot read it (the JSON file Google Cloud's "
			 "console downloads for a web application client)", path);
		return -1;
	}
	if (st.st_mode & 0077)
		log_warn("--oauth-client-file %s can be read by other users; it holds the client secret "
			 "(chmod 600 it)", path);
	json_error_t je;
	json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	json_t *web = json_object_get(doc, "web");
	const char *id = json_string_value(json_object_get(web, "client_id"));
	const char *secret = json_string_value(json_object_get(web, "client_secret"));
	if (!id || !secret || !*id || !*secret || strlen(id) > 256 || strlen(secret) > 256) {
		snprintf(err, cap, "--oauth-client-file %s: expected {\"web\": {\"client_id\": ..., "
			 "\"client_secret\": ...}} as Google Cloud's console downloads it for a web "
			 "application client%s", path, doc ? "" : " (it is not JSON)");
		json_decref(doc);
		return -1;
	}
	oidc.client_id = strdup(id);
	oidc.client_secret = strdup(secret);
	json_decref(doc);
	return oidc.client_id && oidc.client_secret ? 0 : -1;
}

/* oidc_load_jwks - fetch the provider's keys (under mu) */
static int oidc_load_jwks(char *err, size_t cap)
{
	json_t *k = oidc_get_json(oidc.jwks_uri, err, cap);
	if (!k || !json_is_array(json_object_get(k, "keys"))) {
		if (k)
			snprintf(err, cap, "%s is not a JSON Web Key Set", oidc.jwks_uri);
		json_decref(k);
		return -1;
	}
	json_decref(oidc.jwks);
	oidc.jwks = k;
	oidc.jwks_at = time(NULL);
	return 0;
}

int oidc_init(const struct serve_config *cfg, char *err, size_t cap)
{
	http_global_init();
	oidc.allowed_domains = cfg->allowed_domains;
	oidc.allowed_users = cfg->allowed_users;
	oidc.ca_file = cfg->oauth_ca_file;
	oidc.cloud_scopes[0] = '\0';
	if (cfg->credentials && strcmp(cfg->credentials, "user") == 0) {
		snprintf(oidc.cloud_scopes, sizeof(oidc.cloud_scopes), "%s",
			 cfg->scopes && *cfg->scopes ? cfg->scopes : "https://www.googleapis.com/auth/cloud-platform");
		for (char *p = oidc.cloud_scopes; *p; p++)
			if (*p == ',')
				*p = ' ';
	}
	snprintf(oidc.issuer, sizeof(oidc.issuer), "%s", cfg->oidc_issuer ? cfg->oidc_issuer : OIDC_GOOGLE);
	size_t n = strlen(oidc.issuer);
	if (n && oidc.issuer[n - 1] == '/')
		oidc.issuer[--n] = '\0';
	if (oidc_read_client(cfg->oauth_client_file, err, cap) != 0)
		return -1;
	char url[AUTH_MAX_URI_BYTES + 40];
	snprintf(url, sizeof(url), "%s/.well-known/openid-configuration", oidc.issuer);
	json_t *doc = oidc_get_json(url, err, cap);
	if (!doc)
		return -1;
	const char *iss = json_string_value(json_object_get(doc, "issuer"));
	int r = -1;
	if (!iss || strcmp(iss, oidc.issuer) != 0) /* OpenID Connect Discovery 4.3 */
		snprintf(err, cap, "%s names issuer \"%s\", not %s", url, iss ? iss : "", oidc.issuer);
	else if (oidc_endpoint(doc, "authorization_endpoint", &oidc.authorization_endpoint, err, cap) == 0 &&
		 oidc_endpoint(doc, "token_endpoint", &oidc.token_endpoint, err, cap) == 0 &&
		 oidc_endpoint(doc, "jwks_uri", &oidc.jwks_uri, err, cap) == 0) {
		pthread_mutex_lock(&oidc.mu);
		r = oidc_load_jwks(err, cap);
		pthread_mutex_unlock(&oidc.mu);
	}
	json_decref(doc);
	if (r == 0)
		log_info("sign-in through %s (OAuth client %.12s…)", oidc.issuer, oidc.client_id);
	return r;
}

void oidc_shutdown(void)
{
	json_decref(oidc.jwks);
	oidc.jwks = NULL;
	free(oidc.client_id);
	free(oidc.client_secret);
	free(oidc.authorization_endpoint);
	free(oidc.token_endpoint);
	free(oidc.jwks_uri);
	oidc.client_id = oidc.client_secret = NULL;
	oidc.authorization_endpoint = oidc.token_endpoint = oidc.jwks_uri = NULL;
}

char *oidc_authorize_url(const char *redirect_uri, const char *state, const char *nonce,
			 const char *code_challenge)
{
	/* --credentials user: the Cloud scopes too, and a refresh token for them (Google gives one
	 * with access_type=offline, and again on a later sign-in only with prompt=consent; other
	 * providers with OpenID Connect's offline_access scope) */
	bool google = strcmp(oidc.issuer, OIDC_GOOGLE) == 0, cloud = oidc.cloud_scopes[0] != '\0';
	char scope[sizeof(oidc.cloud_scopes) + 40];
	snprintf(scope, sizeof(scope), "openid email%s%s%s", cloud ? " " : "", oidc.cloud_scopes,
		 cloud && !google ? " offline_access" : "");
	char *cid = http_escape(oidc.client_id), *ru = http_escape(redirect_uri);
	char *sc = http_escape(scope);
	char *out = NULL;
	if (cid && ru && sc &&
	    asprintf(&out, "%s%cresponse_type=code&client_id=%s&redirect_uri=%s&scope=%s"
		     "&state=%s&nonce=%s&code_challenge=%s&code_challenge_method=S256%s",
		     oidc.authorization_endpoint, strchr(oidc.authorization_endpoint, '?') ? '&' : '?', cid,
		     ru, sc, state, nonce, code_challenge,
		     cloud && google ? "&access_type=offline&prompt=consent" : "") < 0)
		out = NULL;
	free(cid);
	free(ru);
	free(sc);
	return out;
}

/* list_has_ci - is v one of the comma-separated values in list (ignoring case)? */
static bool list_has_ci(const char *list, const char *v)
{
	size_t n = strlen(v);
	for (const char *p = list; p && *p;) {
		while (*p == ' ')
			p++;
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		while (l && p[l - 1] == ' ')
			l--;
		if (l == n && n && strncasecmp(p, v, n) == 0)
			return true;
		p = e ? e + 1 : NULL;
	}
	return false;
}

/* oidc_name_ok - an email address or a domain in the few characters they use: nothing a log
 * line, a process title or a JSON string has to escape */
static bool oidc_name_ok(const char *s, bool email)
{
	size_t n = strlen(s), at = 0;
	if (n == 0 || n > 254)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '@')
			at++;
		else if (!isalnum(c) && !strchr(".-_+%", c))
			return false;
	}
	if (!email)
		return at == 0;
	const char *a = strchr(s, '@');
	return at == 1 && a != s && a[1] != '\0';
}

/* claim_time - a NumericDate claim */
static bool claim_time(const json_t *claims, const char *name, double *out)
{
	json_t *v = json_object_get(claims, name);
	if (!json_is_number(v))
		return false;
	*out = json_number_value(v);
	return true;
}

int oidc_check_claims(const json_t *claims, const char *issuer, const char *client_id, const char *nonce,
		      const char *allowed_domains, const char *allowed_users, time_t now,
		      struct oidc_identity *id, char *why, size_t cap)
{
	memset(id, 0, sizeof(*id));
	const char *iss = json_string_value(json_object_get(claims, "iss"));
	/* Google's ID tokens name their issuer with or without the scheme */
	if (!iss || (strcmp(iss, issuer) != 0 &&
		     !(strcmp(issuer, OIDC_GOOGLE) == 0 && strcmp(iss, "accounts.google.com") == 0))) {
		snprintf(why, cap, "the ID token was issued by someone else");
		return -EACCES;
	}
	json_t *aud = json_object_get(claims, "aud");
	bool for_us = false;
	size_t i, naud = 0;
	json_t *a;
	if (json_is_string(aud)) {
		for_us = strcmp(json_string_value(aud), client_id) == 0;
		naud = 1;
	} else if (json_is_array(aud)) {
		json_array_foreach(aud, i, a)
			for_us |= json_is_string(a) && strcmp(json_string_value(a), client_id) == 0;
		naud = json_array_size(aud);
	}
	const char *azp = json_string_value(json_object_get(claims, "azp"));
	if (!for_us || (naud > 1 && (!azp || strcmp(azp, client_id) != 0)) || (azp && strcmp(azp, client_id) != 0)) {
		snprintf(why, cap, "the ID token was issued to another application");
		return -EACCES;
	}
	double exp, iat;
	if (!claim_time(claims, "exp", &exp) || exp + AUTH_CLOCK_SKEW_S < (double)now ||
	    (claim_time(claims, "iat", &iat) && iat > (double)now + AUTH_CLOCK_SKEW_S)) {
		snprintf(why, cap, "the ID token has expired (or this server's clock is wrong)");
		return -EACCES;
	}
	const char *tn = json_string_value(json_object_get(claims, "nonce"));
	if (!tn || strcmp(tn, nonce) != 0) {
		snprintf(why, cap, "the ID token belongs to another sign-in");
		return -EACCES;
	}
	const char *email = json_string_value(json_object_get(claims, "email"));
	json_t *ev = json_object_get(claims, "email_verified");
	bool verified = json_is_true(ev) || (json_is_string(ev) && strcmp(json_string_value(ev), "true") == 0);
	if (!email || !oidc_name_ok(email, true)) {
		snprintf(why, cap, "the provider did not say which email address you signed in with");
		return -EACCES;
	}
	for (i = 0; email[i]; i++)
		id->email[i] = (char)tolower((unsigned char)email[i]);
	const char *hd = json_string_value(json_object_get(claims, "hd"));
	if (hd && oidc_name_ok(hd, false))
		snprintf(id->hd, sizeof(id->hd), "%s", hd);
	if (!verified) {
		snprintf(why, cap, "the email address %s is not verified with the provider; verify it "
			 "there, then sign in again", id->email);
		return -EACCES;
	}
	if (list_has_ci(allowed_users, id->email) || (id->hd[0] && list_has_ci(allowed_domains, id->hd)))
		return 0;
	if (allowed_domains && *allowed_domains)
		snprintf(why, cap, "%s may not use this server: it accepts the Google Workspace accounts of "
			 "%s%s. Sign in with such an account, or ask the server's operator to add you "
			 "to --allowed-users.", id->email, allowed_domains,
			 id->hd[0] ? "" : " (yours is not a Workspace account)");
	else
		snprintf(why, cap, "%s may not use this server: ask its operator to add you to "
			 "--allowed-users.", id->email);
	return -EACCES;
}

/* oidc_grant_take - the Google tokens of a token endpoint's answer into g (copied) */
static void oidc_grant_take(const json_t *ans, struct oidc_grant *g)
{
	const char *rt = json_string_value(json_object_get(ans, "refresh_token"));
	const char *at = json_string_value(json_object_get(ans, "access_token"));
	const char *sc = json_string_value(json_object_get(ans, "scope"));
	json_t *ei = json_object_get(ans, "expires_in");
	if (rt && *rt && strlen(rt) < IPC_TOKEN_MAX)
		g->refresh_token = strdup(rt);
	if (at && *at && strlen(at) < IPC_TOKEN_MAX)
		g->access_token = strdup(at);
	g->expires_in = json_is_integer(ei) && json_integer_value(ei) > 0 && json_integer_value(ei) <= 86400
		? (long)json_integer_value(ei) : 0;
	if (sc && strlen(sc) < sizeof(g->scope))
		snprintf(g->scope, sizeof(g->scope), "%s", sc);
}

/* oidc_grant_clear - see auth.h */
void oidc_grant_clear(struct oidc_grant *g)
{
	secret_free(g->refresh_token);
	secret_free(g->access_token);
	memset(g, 0, sizeof(*g));
}

int oidc_refresh(const char *refresh_token, struct oidc_grant *g, char *why, size_t cap)
{
	memset(g, 0, sizeof(*g));
	char *er = http_escape(refresh_token);
	char *form = NULL, *body = NULL;
	size_t len;
	long status;
	if (er && asprintf(&form, "grant_type=refresh_token&refresh_token=%s", er) < 0)
		form = NULL;
	secret_free(er);
	int r = form ? oidc_fetch(oidc.token_endpoint, form, oidc.client_id, oidc.client_secret, &status,
				   &body, &len) : -ENOMEM;
	if (form) {
		explicit_bzero(form, strlen(form));
		free(form);
	}
	if (r != 0) {
		snprintf(why, cap, "the sign-in provider's token endpoint did not answer; try again in a moment");
		return -EIO;
	}
	json_t *ans = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
	explicit_bzero(body, len);
	free(body);
	const char *e = json_string_value(json_object_get(ans, "error"));
	if (status == 200 && json_is_object(ans)) {
		oidc_grant_take(ans, g);
		json_decref(ans);
		if (g->access_token)
			return 0;
		snprintf(why, cap, "the sign-in provider answered a refresh without an access token");
		return -EIO;
	}
	/* RFC 6749 5.2: invalid_grant is a refresh token that was revoked, expired or belongs to
	 * someone else: only signing in again helps */
	bool gone = e && strcmp(e, "invalid_grant") == 0;
	log_warn("the provider refused to refresh a user's Google token: HTTP %ld %s", status,
		 e && oidc_name_ok(e, false) ? e : "");
	snprintf(why, cap, "%s", gone ? "revoked or expired" : "the provider refused");
	json_decref(ans);
	return gone ? -EACCES : -EIO;
}

int oidc_sign_in(const char *code, const char *verifier, const char *redirect_uri, const char *nonce,
		 struct oidc_identity *id, struct oidc_grant *grant, char *why, size_t cap)
{
	if (grant)
		memset(grant, 0, sizeof(*grant));
	char *ec = http_escape(code), *er = http_escape(redirect_uri);
	char *form = NULL, *body = NULL;
	size_t len;
	long status;
	int r = -EIO;
	if (ec && er && asprintf(&form, "grant_type=authorization_code&code=%s&redirect_uri=%s&code_verifier=%s",
				 ec, er, verifier) < 0)
		form = NULL;
	secret_free(ec);
	free(er);
	if (!form || oidc_fetch(oidc.token_endpoint, form, oidc.client_id, oidc.client_secret, &status,
				&body, &len) != 0) {
		snprintf(why, cap, "the sign-in provider did not answer; try again");
		free(form);
		return -EIO;
	}
	explicit_bzero(form, strlen(form));
	free(form);
	json_t *ans = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
	explicit_bzero(body, len);
	free(body);
	const char *idt = json_string_value(json_object_get(ans, "id_token"));
	struct jwt j;
	if (status != 200 || !idt) {
		const char *e = json_string_value(json_object_get(ans, "error"));
		log_warn("the provider's token endpoint refused the code: HTTP %ld %s", status, e ? e : "");
		snprintf(why, cap, "the sign-in provider refused the sign-in (%s); try again",
			 e && oidc_name_ok(e, false) ? e : "no ID token");
		json_decref(ans);
		return -EIO;
	}
	if (jwt_parse(idt, strlen(idt), &j) != 0) {
		snprintf(why, cap, "the sign-in provider sent an ID token that is not a JWT");
		json_decref(ans);
		return -EIO;
	}
	if (grant && oidc.cloud_scopes[0])
		oidc_grant_take(ans, grant);
	json_decref(ans);
	pthread_mutex_lock(&oidc.mu);
	int v = jwt_verify_jwks(&j, oidc.jwks);
	if (v == -ENOKEY && time(NULL) - oidc.jwks_at >= AUTH_JWKS_REFRESH_MIN_S) {
		char err[300];
		if (oidc_load_jwks(err, sizeof(err)) == 0)
			v = jwt_verify_jwks(&j, oidc.jwks);
		else
			log_warn("%s", err);
	}
	pthread_mutex_unlock(&oidc.mu);
	if (v != 0) {
		log_warn("an ID token failed its signature check (%s)", v == -ENOKEY ? "unknown key" : "bad signature");
		snprintf(why, cap, "the ID token's signature is not the provider's");
		r = -EACCES;
	} else {
		r = oidc_check_claims(j.claims, oidc.issuer, oidc.client_id, nonce, oidc.allowed_domains,
				      oidc.allowed_users, time(NULL), id, why, cap);
	}
	jwt_free(&j);
	if (r != 0 && grant)
		oidc_grant_clear(grant);
	return r;
}

/* oidc_scope_has - see auth.h */
bool oidc_scope_has(const char *list, const char *w, size_t n)
{
	for (const char *p = list; *p;) {
		while (*p == ' ')
			p++;
		size_t l = strcspn(p, " ");
		if (l == n && strncmp(p, w, n) == 0)
			return true;
		p += l;
	}
	return false;
}
