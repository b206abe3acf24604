/*
 * auth.h - sign-in for the shared server (`serve --http --auth google`): the limits, the JSON
 * Web Token codec (master/jwt.c), the upstream OpenID Connect client (master/oidc.c) and the
 * MCP authorization server and resource server (master/auth.c) that master/http.c calls into.
 *
 * kode-gopher is the OAuth authorization server its MCP clients see (MCP authorization
 * 2025-11-25: RFC 9728 resource metadata, RFC 8414 server metadata, RFC 7591 registration,
 * authorization code with PKCE S256, RFC 8707 resource-bound tokens) and signs its users in
 * with Google (or any OpenID provider, --oidc-issuer) under its own OAuth client. What the MCP
 * client gets is kode-gopher's own token, never Google's. docs/shared-server.md tells the rest.
 */
#ifndef KG_AUTH_H
#define KG_AUTH_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "master/master.h"
#include "policy/limits.h"

/* The one scope this server grants and /mcp requires (RFC 6750 3.1: a valid token without it
 * gets 403 insufficient_scope). Every authorization grants it, whatever else a client asked for. */
#define AUTH_SCOPE "mcp"

/* lifetimes, tables, sizes of untrusted input: AUTH_* in policy/limits.h */

/* ---- master/jwt.c: JWS compact serialization (RFC 7515/7519), RS256, ES256, HS256 ---- */

struct jwt {
	json_t *header, *claims;
	unsigned char *sig;
	size_t siglen;
	char *input;         /* the signing input: BASE64URL(header) '.' BASE64URL(payload) */
	size_t input_len;
};

/* jwt_parse - split and decode a compact JWS (no check of its signature); 0 or -EINVAL */
int jwt_parse(const char *tok, size_t len, struct jwt *out);
void jwt_free(struct jwt *j);
/* jwt_verify_jwks - the signature checks out with the JWKS key its header names (RS256 or
 * ES256 only); 0, -ENOKEY when no key has that id, -EBADMSG otherwise */
int jwt_verify_jwks(const struct jwt *j, const json_t *jwks);
/* jwt_verify_hs256 / jwt_sign_hs256 - kode-gopher's own tokens */
int jwt_verify_hs256(const struct jwt *j, const unsigned char *key, size_t keylen);
char *jwt_sign_hs256(const json_t *claims, const char *typ, const unsigned char *key, size_t keylen);

/* ---- master/oidc.c: the upstream OpenID provider (Google) ---- */

struct oidc_identity {
	char email[AUTH_USER_MAX];
	char hd[256];        /* the Workspace domain, "" for a consumer account */
};

/* The user's Google tokens of one token endpoint answer (--credentials user); the strings are
 * malloc'd, wiped by oidc_grant_clear */
struct oidc_grant {
	char *refresh_token, *access_token;
	long expires_in;     /* seconds, 0: not said */
	char scope[1200];    /* what the user granted, space-separated ("" if not said) */
};
void oidc_grant_clear(struct oidc_grant *g);
/* oidc_scope_has - is the scope w (n bytes) one of the space-separated scopes of list (a
 * grant's scope, an access token's)? */
bool oidc_scope_has(const char *list, const char *w, size_t n);

/* oidc_init - read the OAuth client file, the provider's discovery document and its keys */
int oidc_init(const struct serve_config *cfg, char *err, size_t cap);
void oidc_shutdown(void);
/* oidc_binding - "ISSUER CLIENT_ID": whose sign-ins these are (a token store names it) */
const char *oidc_binding(void);
/* oidc_authorize_url - where the browser goes to sign in (malloc'd) */
char *oidc_authorize_url(const char *redirect_uri, const char *state, const char *nonce,
			 const char *code_challenge);
/* oidc_sign_in - redeem the provider's code, verify the ID token, and check who may sign in;
 * 0, or -EACCES with a sentence for the person in why (not allowed, not verified), or -EIO
 * (the provider failed; why says so). With --credentials user, *grant (if not NULL) gets the
 * user's Google tokens; the caller clears it. */
int oidc_sign_in(const char *code, const char *verifier, const char *redirect_uri, const char *nonce,
		 struct oidc_identity *id, struct oidc_grant *grant, char *why, size_t cap);
/* oidc_refresh - a new access token from the user's refresh token (RFC 6749 6): 0 and *g
 * (refresh_token set only when the provider rotated it), -EACCES when the grant was revoked or
 * has expired (invalid_grant: only signing in again helps), -EIO otherwise */
int oidc_refresh(const char *refresh_token, struct oidc_grant *g, char *why, size_t cap);
/* oidc_check_claims - the ID token's claims against the issuer, our client, the nonce and the
 * allowed domains and users, at time now (master/oidc.c; also the unit tests') */
int oidc_check_claims(const json_t *claims, const char *issuer, const char *client_id, const char *nonce,
		      const char *allowed_domains, const char *allowed_users, time_t now,
		      struct oidc_identity *id, char *why, size_t cap);
/* oidc_fetch - one request (lib/http_client.c) under the AUTH_FETCH_ limits: GET, or POST of a form
 * with HTTP Basic client authentication; the body is NUL-terminated */
int oidc_fetch(const char *url, const char *form, const char *user, const char *pass, long *status,
	       char **body, size_t *len);
struct oidc_fetch_opts {
	size_t max_bytes;
	long timeout_ms;
	bool https_only;   /* not even http:// to loopback */
	bool public_only;  /* connect to public addresses only (a URL a client chose) */
	char *cache_control; /* out, if not NULL: the answer's Cache-Control (cap 256), "" if none */
};
/* auth_cache_seconds - how long to keep a client metadata document whose answer said
 * cache_control: max-age (or s-maxage) within [AUTH_CIMD_MIN_CACHE_S, AUTH_CIMD_MAX_CACHE_S],
 * no-store/no-cache the minimum, nothing usable AUTH_CIMD_CACHE_S */
long auth_cache_seconds(const char *cache_control);
int oidc_fetch_opts(const char *url, const struct oidc_fetch_opts *o, const char *form, const char *user,
		    const char *pass, long *status, char **body, size_t *len);

/* ---- master/auth.c: what master/http.c calls ---- */

/* auth_init - after the listening socket is bound (where = "http://ADDR:PORT/mcp") */
int auth_init(const struct serve_config *cfg, const char *where);
bool auth_enabled(void);
/* auth_init_local - the issuer, resource and token key alone (key NULL: a random one); what
 * auth_init does before it reaches the provider, and what the unit tests set up */
int auth_init_local(const char *public_url, const unsigned char key[32]);
/* auth_host_ok - the Host of --public-url is always ours */
bool auth_host_ok(const char *host);
/* auth_route - the OAuth endpoints and metadata; true if url is one (the answer is queued) */
bool auth_route(struct MHD_Connection *c, const char *url, const char *method, const char *body,
		size_t len, enum MHD_Result *q);
/* auth_bearer - a /mcp request's token: true and the user's email, or false with the 401
 * queued in *q */
bool auth_bearer(struct MHD_Connection *c, char *user, size_t cap, enum MHD_Result *q);
/* auth_metrics - sign-in's series appended to the /metrics text in *m (nothing without sign-in) */
void auth_metrics(char **m, size_t *len);
/* auth_user_revoked - user's Google grant is gone (master/usertoken.c): end their refresh
 * tokens and refuse the access tokens issued to them so far, so their MCP clients sign in again */
void auth_user_revoked(const char *user);
/* auth_check_access - kode-gopher's access token at time now: 0 and its user, -EPERM when it
 * is valid but lacks AUTH_SCOPE (the user is set), or -EACCES */
int auth_check_access(const char *tok, size_t len, time_t now, char *user, size_t cap);
/* auth_client_metadata_parse - a Client ID Metadata Document fetched from url, checked into
 * *cl (master/auth.c's registry entry); 0, or -EINVAL with a sentence in why */
struct client;
int auth_client_metadata_parse(const char *url, const char *body, size_t len, struct client *cl, char *why,
			       size_t cap);
/* AUTH_CLIENT_BYTES - room for a struct client (tests/fuzz) */
#define AUTH_CLIENT_BYTES 8192

/* auth_option - serve's --public-url, --oauth-client-file, --allowed-domains, --allowed-users,
 * --oidc-issuer, --oauth-ca-file, --client-metadata-loopback, --token-store,
 * --token-store-key-file; 1 handled, 0 not ours, -1 bad */
int auth_option(struct serve_config *cfg, const char *name, const char *val);
/* auth_check_config - what --auth google needs, said at start-up; 0 or -1 */
int auth_check_config(const struct serve_config *cfg);
#define AUTH_OPTIONS                                                                              \
	{ "public-url", required_argument, 0, 0 }, { "oauth-client-file", required_argument, 0, 0 }, \
	{ "allowed-domains", required_argument, 0, 0 }, { "allowed-users", required_argument, 0, 0 }, \
	{ "oidc-issuer", required_argument, 0, 0 }, { "oauth-ca-file", required_argument, 0, 0 },    \
	{ "client-metadata-loopback", no_argument, 0, 0 }, { "token-store", required_argument, 0, 0 }, \
	{ "token-store-key-file", required_argument, 0, 0 }

#endif
