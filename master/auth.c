/*
 * auth.c - MCP authorization (2025-11-25) for `serve --http --auth google`: kode-gopher as the
 * authorization server its MCP clients see and as the resource server that guards /mcp.
 *
 * Resource server: a /mcp request carries `Authorization: Bearer` with an access token this
 * master minted (HS256 under a key made at start-up, audience = this server's /mcp, RFC 8707),
 * or gets 401 with `WWW-Authenticate: Bearer resource_metadata=...` pointing at the Protected
 * Resource Metadata (RFC 9728). Authorization server: RFC 8414 metadata, /authorize (code flow,
 * PKCE S256 required, exact redirect URIs, loopback ones on any port as RFC 8252 says), the
 * sign-in itself through the upstream provider (master/oidc.c), /token (authorization code,
 * refresh tokens rotated with reuse detection), /register (RFC 7591, bounded).
 *
 * master/http.c calls auth_route for the endpoints and auth_bearer for /mcp, from its
 * connection threads; every table here is bounded (auth.h) and guarded by one lock, which is
 * never held across a request to the provider. Codes and tokens are kept only as SHA-256
 * hashes, and none is logged. All of it lives in memory (a restart signs everyone out), unless
 * --token-store keeps the clients, sign-ins, sign-outs and the token key in an encrypted file
 * (master/tokenstore.c: auth_store_dump and auth_store_load at the end of this file).
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/base64.h"
#include "lib/http_client.h"
#include "lib/random.h"
#include "lib/secret.h"
#include "master/auth.h"
#include "master/tokenstore.h"
#include "master/usertoken.h"
#include "policy/limits.h"

#define ID_HEX 32 /* 128-bit identifiers: client ids, sign-in states */
#define SECRET_HEX 64 /* 256-bit codes and refresh tokens */
#define CLIENT_ID_MAX AUTH_MAX_URI_BYTES /* a registered client's hex id, or a metadata URL */

struct client {              /* (declared in auth.h) */
	bool live, used;         /* used: someone signed in through it (kept over unused ones) */
	char id[CLIENT_ID_MAX];  /* 32 hex digits (registered), or its metadata document's URL */
	time_t expires;          /* a metadata document's: refetched after */
	char name[129];
	char redirect[AUTH_MAX_REDIRECT_URIS][AUTH_MAX_URI_BYTES];
	int nredirect;
	time_t created;
};

_Static_assert(sizeof(struct client) <= AUTH_CLIENT_BYTES, "AUTH_CLIENT_BYTES holds a client");

struct pending_signin {       /* between /authorize and the provider's callback */
	bool live;
	char state[ID_HEX + 1];   /* what the provider echoes */
	char nonce[ID_HEX + 1];
	char verifier[SECRET_HEX + 1]; /* our PKCE towards the provider */
	char client_id[CLIENT_ID_MAX];
	char redirect_uri[AUTH_MAX_URI_BYTES];
	char client_state[AUTH_MAX_URI_BYTES];
	char challenge[64];
	char scope[AUTH_MAX_URI_BYTES];
	time_t created;
};

struct code {
	bool live, redeemed;
	unsigned char hash[32];
	char client_id[CLIENT_ID_MAX];
	char redirect_uri[AUTH_MAX_URI_BYTES];
	char challenge[64];
	char scope[AUTH_MAX_URI_BYTES];
	char user[AUTH_USER_MAX];
	unsigned long grant;      /* the refresh-token family it started, to revoke on replay */
	time_t created;
};

struct grant {                /* one sign-in's refresh-token family */
	bool live;
	unsigned long family;
	unsigned char hash[32], prev[32]; /* the current token and the one it replaced */
	bool has_prev;
	char client_id[CLIENT_ID_MAX];
	char scope[AUTH_MAX_URI_BYTES];
	char user[AUTH_USER_MAX];
	time_t created, last;
};

static struct {
	bool on;
	const struct serve_config *cfg;
	char public_url[AUTH_MAX_URI_BYTES]; /* the issuer */
	char resource[AUTH_MAX_URI_BYTES + 8];
	char callback[AUTH_MAX_URI_BYTES + 24];
	unsigned char key[32];
	pthread_mutex_t mu;
	struct client clients[AUTH_MAX_CLIENTS];
	struct client cimd[AUTH_MAX_CIMD];    /* client metadata documents, cached */
	struct pending_signin pending[AUTH_MAX_PENDING];
	struct code codes[AUTH_MAX_CODES];
	struct grant grants[AUTH_MAX_GRANTS];
	unsigned long next_family;
	/* metrics */
	unsigned long signins_ok, signins_refused, signins_failed, registrations, tokens_refused;
} A = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* ---- small helpers ---- */

static void sha256(const char *s, unsigned char out[32])
{
	SHA256((const unsigned char *)s, strlen(s), out);
}

/* html_escape - text for an HTML page */
static void html_escape(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '&': fputs("&amp;", f); break;
		case '"': fputs("&quot;", f); break;
		case '\'': fputs("&#39;", f); break;
		default: fputc(*s, f);
		}
	}
}

/* printable - bytes a URI, a state or a name may hold: visible ASCII */
static bool printable(const char *s, size_t max, bool spaces)
{
	size_t n = 0;
	for (; *s; s++, n++)
		if ((unsigned char)*s < (spaces ? ' ' : '!') || (unsigned char)*s > '~')
			return false;
	return n < max;
}

/* respond - queue an answer; headers is "Name: value\n..." */
static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *type,
			       const char *body, const char *headers)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(body ? strlen(body) : 0,
								 (void *)(body ? body : ""), MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	if (type)
		MHD_add_response_header(r, "Content-Type", type);
	MHD_add_response_header(r, "Cache-Control", "no-store");
	for (const char *p = headers; p && *p;) {
		const char *nl = strchr(p, '\n'), *colon = strchr(p, ':');
		size_t l = nl ? (size_t)(nl - p) : strlen(p);
		if (colon && (size_t)(colon - p) < l) {
			char name[64], val[8192];
			snprintf(name, sizeof(name), "%.*s", (int)(colon - p), p);
			snprintf(val, sizeof(val), "%.*s", (int)(l - (size_t)(colon - p) - 2), colon + 2);
			MHD_add_response_header(r, name, val);
		}
		p = nl ? nl + 1 : NULL;
	}
	enum MHD_Result q = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return q;
}

#define CORS_ANY "Access-Control-Allow-Origin: *\nAccess-Control-Allow-Headers: Content-Type, Authorization, " \
		 "MCP-Protocol-Version\nAccess-Control-Allow-Methods: GET, POST, OPTIONS\n"

static enum MHD_Result respond_json(struct MHD_Connection *c, unsigned status, json_t *v)
{
	char *s = v ? json_dumps(v, JSON_COMPACT) : NULL;
	json_decref(v);
	enum MHD_Result q = respond(c, s ? status : 500, "application/json", s ? s : "{\"error\":\"server_error\"}",
				    CORS_ANY);
	free(s);
	return q;
}

/* oauth_error - RFC 6749 5.2's JSON error */
static enum MHD_Result oauth_error(struct MHD_Connection *c, unsigned status, const char *error, const char *desc)
{
	return respond_json(c, status, json_pack("{s:s, s:s}", "error", error, "error_description", desc));
}

/* page - a small HTML page a person sees in their browser */
static enum MHD_Result page(struct MHD_Connection *c, unsigned status, const char *title, const char *text)
{
	char *b = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&b, &n);
	if (!f)
		return MHD_NO;
	fputs("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>kode-gopher: ", f);
	html_escape(f, title);
	fputs("</title></head>\n<body style=\"font-family: sans-serif; max-width: 40em; margin: 3em auto\">\n<h1>", f);
	html_escape(f, title);
	fputs("</h1>\n<p>", f);
	html_escape(f, text);
	fputs("</p>\n</body></html>\n", f);
	fclose(f);
	enum MHD_Result q = respond(c, status, "text/html; charset=utf-8", b,
				    "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'\n"
				    "X-Frame-Options: DENY\n");
	free(b);
	return q;
}

/* ---- configuration ---- */

/* loopback_authority - the URL's "http://HOST" part names this machine; its length, or 0 */
static size_t loopback_prefix(const char *u)
{
	static const char *const local[] = { "http://127.0.0.1", "http://localhost", "http://[::1]" };
	for (size_t i = 0; i < 3; i++) {
		size_t n = strlen(local[i]);
		if (strncasecmp(u, local[i], n) == 0 && (u[n] == ':' || u[n] == '/' || u[n] == '\0'))
			return n;
	}
	return 0;
}

/* loopback_host - "127.0.0.1", "localhost" or "[::1]", then a port, a path or nothing */
static bool loopback_host(const char *h)
{
	char u[AUTH_MAX_URI_BYTES];
	snprintf(u, sizeof(u), "http://%s", h);
	return loopback_prefix(u) != 0;
}

int auth_option(struct serve_config *cfg, const char *name, const char *val)
{
	if (strcmp(name, "public-url") == 0) {
		size_t n = strlen(val);
		const char *host = strncmp(val, "https://", 8) == 0 ? val + 8 : NULL;
		if (!printable(val, AUTH_MAX_URI_BYTES - 64, false) ||
		    !((host && *host && *host != '/') || loopback_prefix(val)) ||
		    strchr(host ? host : val + 7, '/') != (n && val[n - 1] == '/' ? val + n - 1 : NULL) ||
		    strpbrk(val, "?#@")) {
			fprintf(stderr, "kode-gopher: --public-url wants the server's address as its users "
				"reach it, like https://kode-gopher.example.com (http:// only on a loopback "
				"address), without a path\n");
			return -1;
		}
		cfg->public_url = val;
	} else if (strcmp(name, "oauth-client-file") == 0) {
		cfg->oauth_client_file = val;
	} else if (strcmp(name, "allowed-domains") == 0) {
		cfg->allowed_domains = val;
	} else if (strcmp(name, "allowed-users") == 0) {
		cfg->allowed_users = val;
	} else if (strcmp(name, "oauth-ca-file") == 0) {
		cfg->oauth_ca_file = val;
	} else if (strcmp(name, "client-metadata-loopback") == 0) {
		cfg->client_metadata_loopback = true;
	} else if (strcmp(name, "token-store") == 0) {
		cfg->token_store = val;
	} else if (strcmp(name, "token-store-key-file") == 0) {
		cfg->token_store_key_file = val;
	} else if (strcmp(name, "oidc-issuer") == 0) {
		if (!printable(val, AUTH_MAX_URI_BYTES - 64, false) ||
		    !(strncmp(val, "https://", 8) == 0 || loopback_prefix(val))) {
			fprintf(stderr, "kode-gopher: --oidc-issuer wants the provider's https:// issuer URL "
				"(default https://accounts.google.com)\n");
			return -1;
		}
		cfg->oidc_issuer = val;
	} else {
		return 0;
	}
	return 1;
}

int auth_check_config(const struct serve_config *cfg)
{
	bool google = strcmp(cfg->auth, "google") == 0;
	if (!google && cfg->credentials && strcmp(cfg->credentials, "user") == 0) {
		fprintf(stderr, "kode-gopher: --credentials user runs programs as the signed-in Google "
			"user: it needs serve --http --auth google (docs/credentials.md)\n");
		return -1;
	}
	if (!google && (cfg->token_store || cfg->token_store_key_file)) {
		fprintf(stderr, "kode-gopher: --token-store keeps sign-ins across restarts: it needs serve "
			"--http --auth google\n");
		return -1;
	}
	if (!cfg->token_store != !cfg->token_store_key_file) {
		fprintf(stderr, "kode-gopher: --token-store FILE and --token-store-key-file KEY go together: "
			"the store is encrypted with the key (32 random bytes: openssl rand -hex 32 > KEY; "
			"docs/shared-server.md)\n");
		return -1;
	}
	if (!google) {
		if (cfg->public_url || cfg->oauth_client_file || cfg->allowed_domains || cfg->allowed_users ||
		    cfg->oidc_issuer || cfg->oauth_ca_file || cfg->client_metadata_loopback)
			log_warn("--public-url, --oauth-client-file, --allowed-domains, --allowed-users and "
				 "--oidc-issuer apply to --auth google only; ignored");
		return 0;
	}
	if (!cfg->http) {
		fprintf(stderr, "kode-gopher: --auth google is for the shared server: add --http\n");
		return -1;
	}
	if (!cfg->oauth_client_file) {
		fprintf(stderr, "kode-gopher: --auth google needs --oauth-client-file FILE: the OAuth "
			"client JSON that Google Cloud's console downloads (docs/deploy-for-a-team.md)\n");
		return -1;
	}
	if (!(cfg->allowed_domains && *cfg->allowed_domains) && !(cfg->allowed_users && *cfg->allowed_users)) {
		fprintf(stderr, "kode-gopher: --auth google needs --allowed-domains (Google Workspace "
			"domains) or --allowed-users (email addresses): who may sign in\n");
		return -1;
	}
	return 0;
}

int auth_init_local(const char *public_url, const unsigned char key[32])
{
	if (public_url != A.public_url)
		snprintf(A.public_url, sizeof(A.public_url), "%s", public_url);
	size_t n = strlen(A.public_url);
	if (n && A.public_url[n - 1] == '/')
		A.public_url[n - 1] = '\0';
	snprintf(A.resource, sizeof(A.resource), "%s/mcp", A.public_url);
	snprintf(A.callback, sizeof(A.callback), "%s/oauth/callback", A.public_url);
	if (key)
		memcpy(A.key, key, sizeof(A.key));
	else if (RAND_bytes(A.key, sizeof(A.key)) != 1)
		return -1;
	return 0;
}

int auth_init(const struct serve_config *cfg, const char *where)
{
	if (strcmp(cfg->auth, "google") != 0)
		return 0;
	A.cfg = cfg;
	utok_on_revoked(auth_user_revoked);
	if (cfg->public_url) {
		snprintf(A.public_url, sizeof(A.public_url), "%s", cfg->public_url);
	} else if (loopback_prefix(where) || (strncmp(where, "https://", 8) == 0 && loopback_host(where + 8))) {
		snprintf(A.public_url, sizeof(A.public_url), "%.*s", (int)(strlen(where) - 4), where);
	} else {
		log_error("--auth google on a public address needs --public-url https://HOST: the address "
			  "users and Google reach this server at");
		return -1;
	}
	if (auth_init_local(A.public_url, NULL) != 0)
		return -1;
	char err[PATH_MAX + 600];
	if (oidc_init(cfg, err, sizeof(err)) != 0) {
		log_error("--auth google: %s", err);
		return -1;
	}
	/* the sign-ins of a store belong to this resource, this provider and this OAuth client */
	char bind[3 * AUTH_MAX_URI_BYTES + 16];
	snprintf(bind, sizeof(bind), "%s %s", A.resource, oidc_binding());
	static const struct tstore_owner signins = { auth_store_dump, auth_store_load },
					 grants = { utok_store_dump, utok_store_load };
	if (tstore_open(cfg, bind, &signins, &grants, err, sizeof(err)) != 0) {
		log_error("%s", err);
		return -1;
	}
	A.on = true;
	log_info("sign-in on: resource %s, who may sign in: %s%s%s", A.resource,
		 cfg->allowed_domains ? "domains " : "", cfg->allowed_domains ? cfg->allowed_domains : "",
		 cfg->allowed_users ? " and listed users" : "");
	return 0;
}

bool auth_enabled(void)
{
	return A.on;
}

bool auth_host_ok(const char *host)
{
	if (!A.on || !host)
		return false;
	const char *h = strstr(A.public_url, "://");
	return h && strcasecmp(h + 3, host) == 0;
}

/* ---- redirect URIs ---- */

/* redirect_valid - what a client may register: https, http on a loopback address, or a
 * private-use scheme with a dot (com.example.app:/cb, RFC 8252 7.1); no fragment */
static bool redirect_valid(const char *u)
{
	if (!printable(u, AUTH_MAX_URI_BYTES, false) || strpbrk(u, "#\"<>\\`{}|^"))
		return false;
	if (strncmp(u, "https://", 8) == 0)
		return u[8] && u[8] != '/';
	if (strncmp(u, "http://", 7) == 0)
		return loopback_prefix(u) != 0;
	const char *colon = strchr(u, ':');
	if (!colon || colon == u || !isalpha((unsigned char)u[0]) || !memchr(u, '.', (size_t)(colon - u)))
		return false;
	for (const char *p = u; p < colon; p++)
		if (!isalnum((unsigned char)*p) && !strchr("+.-", *p))
			return false;
	return colon[1] != '\0';
}

/* loopback_rest - for http://LOOPBACK[:port]rest: the host's length and where rest starts */
static bool loopback_rest(const char *u, size_t *hostlen, const char **rest)
{
	size_t n = loopback_prefix(u);
	if (!n)
		return false;
	const char *p = u + n;
	if (*p == ':') {
		long port = 0;
		int digits = 0;
		for (p++; isdigit((unsigned char)*p) && digits < 6; p++, digits++)
			port = port * 10 + (*p - '0');
		if (digits == 0 || digits > 5 || port < 1 || port > 65535)
			return false;
	}
	if (*p != '/' && *p != '\0')
		return false;
	*hostlen = n;
	*rest = p;
	return true;
}

/* redirect_match - the exact string, or RFC 8252 7.3: a loopback URI with any port */
static bool redirect_match(const char *registered, const char *asked)
{
	if (strcmp(registered, asked) == 0)
		return true;
	size_t h1, h2;
	const char *r1, *r2;
	return loopback_rest(registered, &h1, &r1) && loopback_rest(asked, &h2, &r2) && h1 == h2 &&
	       strncasecmp(registered, asked, h1) == 0 && strcmp(r1, r2) == 0;
}

/* is_url_id - a Client ID Metadata Document's client_id */
static bool is_url_id(const char *id)
{
	return id && strncmp(id, "https://", 8) == 0;
}

/* client_find - a registered client, or a cached metadata document (under mu) */
static struct client *client_find(const char *id)
{
	if (is_url_id(id)) {
		time_t now = time(NULL);
		for (int i = 0; i < AUTH_MAX_CIMD; i++)
			if (A.cimd[i].live && A.cimd[i].expires > now && strcmp(A.cimd[i].id, id) == 0)
				return &A.cimd[i];
		return NULL;
	}
	if (!id || strlen(id) != ID_HEX)
		return NULL;
	for (int i = 0; i < AUTH_MAX_CLIENTS; i++)
		if (A.clients[i].live && strcmp(A.clients[i].id, id) == 0)
			return &A.clients[i];
	return NULL;
}

static bool client_redirect_ok(const struct client *cl, const char *uri)
{
	for (int k = 0; k < cl->nredirect; k++)
		if (redirect_match(cl->redirect[k], uri))
			return true;
	return false;
}

/* ---- Client ID Metadata Documents ---- */

/* cimd_url_ok - https, a host, a path other than "/", no fragment, credentials, dot segments */
static bool cimd_url_ok(const char *u)
{
	if (!is_url_id(u) || !printable(u, AUTH_MAX_URI_BYTES, false) || strpbrk(u, "#\"<>\\`{}|^"))
		return false;
	const char *host = u + 8, *path = strchr(host, '/');
	const char *at = strchr(host, '@');
	return path && path != host && path[1] != '\0' && (!at || at > path) && !strstr(path, "/./") &&
	       !strstr(path, "/../") && strcmp(path + strlen(path) - 2, "/.") != 0 &&
	       strcmp(path + strlen(path) - 3, "/..") != 0;
}

/* cimd_fetch - fetch and check a client's metadata document into cl (no lock held) */
static int cimd_fetch(const char *url, struct client *cl, char *why, size_t cap)
{
	char cache[256] = "";
	struct oidc_fetch_opts o = { AUTH_CIMD_MAX_BYTES, AUTH_CIMD_TIMEOUT_MS, true,
				     !A.cfg || !A.cfg->client_metadata_loopback, cache };
	char *body;
	size_t len;
	long status;
	int r = oidc_fetch_opts(url, &o, NULL, NULL, NULL, &status, &body, &len);
	if (r != 0 || status != 200) {
		snprintf(why, cap, r == -EFBIG ? "The application's client metadata document is larger than "
			 "5 KiB." : "The application's client metadata document could not be read (%s).",
			 r == 0 ? "its server did not answer 200" : "no answer from its server");
		if (r == 0)
			free(body);
		return -ENOENT;
	}
	r = auth_client_metadata_parse(url, body, len, cl, why, cap);
	free(body);
	if (r == 0)
		cl->expires = cl->created + auth_cache_seconds(cache);
	return r;
}

long auth_cache_seconds(const char *cc)
{
	long s = -1;
	bool none = false;
	for (const char *p = cc ? cc : ""; *p;) {
		while (*p == ' ' || *p == ',' || *p == '\t')
			p++;
		size_t l = strcspn(p, ",");
		if ((l >= 8 && strncasecmp(p, "no-store", 8) == 0) || (l >= 8 && strncasecmp(p, "no-cache", 8) == 0))
			none = true;
		else if ((l > 8 && strncasecmp(p, "max-age=", 8) == 0) || (l > 9 && strncasecmp(p, "s-maxage=", 9) == 0)) {
			const char *v = strchr(p, '=') + 1;
			char *end;
			long n = strtol(v, &end, 10);
			if (end > v && (end == p + l || *end == ' ' || *end == ',') && n >= 0 && (s < 0 || n < s))
				s = n;
		}
		p += l;
	}
	if (none)
		return AUTH_CIMD_MIN_CACHE_S;
	if (s < 0)
		return AUTH_CIMD_CACHE_S;
	return s < AUTH_CIMD_MIN_CACHE_S ? AUTH_CIMD_MIN_CACHE_S : s > AUTH_CIMD_MAX_CACHE_S ? AUTH_CIMD_MAX_CACHE_S : s;
}

int auth_client_metadata_parse(const char *url, const char *body, size_t len, struct client *cl, char *why,
			       size_t cap)
{
	int r;
	json_t *m = len <= AUTH_CIMD_MAX_BYTES ? json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
	const char *id = json_string_value(json_object_get(m, "client_id"));
	const char *name = json_string_value(json_object_get(m, "client_name"));
	const char *method = json_string_value(json_object_get(m, "token_endpoint_auth_method"));
	json_t *uris = json_object_get(m, "redirect_uris"), *u;
	size_t i;
	r = -EINVAL;
	if (!json_is_object(m) || !id || strcmp(id, url) != 0)
		snprintf(why, cap, "The application's client metadata document names another client_id.");
	else if (json_object_get(m, "client_secret") || (method && strcmp(method, "none") != 0))
		snprintf(why, cap, "The application's client metadata document asks for a client secret, "
			 "which this server does not use with metadata documents.");
	else if (!json_is_array(uris) || json_array_size(uris) == 0 || json_array_size(uris) > AUTH_MAX_REDIRECT_URIS)
		snprintf(why, cap, "The application's client metadata document lists no redirect_uris "
			 "(or more than 8).");
	else
		r = 0;
	memset(cl, 0, sizeof(*cl));
	json_array_foreach(r == 0 ? uris : NULL, i, u) {
		if (!json_is_string(u) || !redirect_valid(json_string_value(u))) {
			snprintf(why, cap, "The application's client metadata document lists a redirect URI "
				 "this server does not accept.");
			r = -EINVAL;
			break;
		}
		snprintf(cl->redirect[cl->nredirect++], AUTH_MAX_URI_BYTES, "%s", json_string_value(u));
	}
	if (r == 0) {
		cl->live = true;
		cl->created = time(NULL);
		cl->expires = cl->created + AUTH_CIMD_CACHE_S;
		snprintf(cl->id, sizeof(cl->id), "%s", url);
		snprintf(cl->name, sizeof(cl->name), "%s", name && printable(name, sizeof(cl->name), true) ? name : "");
	}
	json_decref(m);
	return r;
}

/* client_get - a copy of a client: registered, cached, or its metadata document fetched now;
 * 0, or -ENOENT/-EINVAL with a sentence for the person in why */
static int client_get(const char *id, struct client *out, char *why, size_t cap)
{
	pthread_mutex_lock(&A.mu);
	struct client *cl = client_find(id);
	if (cl)
		*out = *cl;
	pthread_mutex_unlock(&A.mu);
	if (cl)
		return 0;
	if (!is_url_id(id)) {
		snprintf(why, cap, "The application that sent you here is not registered with this "
			 "kode-gopher server (or its registration has expired). Go back to it and connect again.");
		return -ENOENT;
	}
	if (!cimd_url_ok(id)) {
		snprintf(why, cap, "The application's client_id is not a usable https:// URL.");
		return -EINVAL;
	}
	int r = cimd_fetch(id, out, why, cap);
	if (r != 0) {
		log_info("client metadata document refused: %s", why);
		return r;
	}
	pthread_mutex_lock(&A.mu);
	struct client *slot = &A.cimd[0];
	for (int i = 0; i < AUTH_MAX_CIMD; i++) {
		if (!A.cimd[i].live || strcmp(A.cimd[i].id, id) == 0) {
			slot = &A.cimd[i];
			break;
		}
		if (A.cimd[i].expires < slot->expires)
			slot = &A.cimd[i];
	}
	*slot = *out;
	pthread_mutex_unlock(&A.mu);
	log_info("client metadata document read: %s \"%s\"", id, out->name);
	return 0;
}

/* ---- metadata ---- */

static enum MHD_Result metadata_resource(struct MHD_Connection *c)
{
	return respond_json(c, 200, json_pack("{s:s, s:[s], s:[s], s:s, s:[s]}", "resource", A.resource,
					      "authorization_servers", A.public_url, "bearer_methods_supported",
					      "header", "resource_name", "kode-gopher", "scopes_supported", AUTH_SCOPE));
}

static enum MHD_Result metadata_server(struct MHD_Connection *c)
{
	char a[AUTH_MAX_URI_BYTES + 16], t[AUTH_MAX_URI_BYTES + 16], r[AUTH_MAX_URI_BYTES + 16];
	snprintf(a, sizeof(a), "%s/authorize", A.public_url);
	snprintf(t, sizeof(t), "%s/token", A.public_url);
	snprintf(r, sizeof(r), "%s/register", A.public_url);
	return respond_json(c, 200, json_pack(
		"{s:s, s:s, s:s, s:s, s:[s], s:[s,s], s:[s], s:[s], s:b, s:b, s:[s]}", "issuer", A.public_url,
		"authorization_endpoint", a, "token_endpoint", t, "registration_endpoint", r,
		"response_types_supported", "code", "grant_types_supported", "authorization_code", "refresh_token",
		"code_challenge_methods_supported", "S256", "token_endpoint_auth_methods_supported", "none",
		"authorization_response_iss_parameter_supported", 1, "client_id_metadata_document_supported", 1,
		"scopes_supported", AUTH_SCOPE));
}

/* ---- /register (RFC 7591) ---- */

/* client_slot - a free entry, or the oldest one nobody has signed in through (under mu) */
static struct client *client_slot(void)
{
	struct client *oldest = NULL;
	for (int i = 0; i < AUTH_MAX_CLIENTS; i++) {
		struct client *cl = &A.clients[i];
		if (!cl->live)
			return cl;
		if (!cl->used && (!oldest || cl->created < oldest->created))
			oldest = cl;
	}
	return oldest;
}

static enum MHD_Result do_register(struct MHD_Connection *c, const char *body, size_t len)
{
	if (len > AUTH_MAX_FORM_BYTES)
		return oauth_error(c, 413, "invalid_client_metadata", "the registration is too large");
	json_t *m = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, NULL);
	json_t *uris = json_object_get(m, "redirect_uris"), *u;
	size_t i;
	const char *name = json_string_value(json_object_get(m, "client_name"));
	const char *method = json_string_value(json_object_get(m, "token_endpoint_auth_method"));
	if (!json_is_object(m)) {
		json_decref(m);
		return oauth_error(c, 400, "invalid_client_metadata", "the registration is not a JSON object");
	}
	if (!json_is_array(uris) || json_array_size(uris) == 0 || json_array_size(uris) > AUTH_MAX_REDIRECT_URIS) {
		json_decref(m);
		return oauth_error(c, 400, "invalid_redirect_uri", "redirect_uris must list 1 to 8 URIs");
	}
	json_array_foreach(uris, i, u) {
		if (!json_is_string(u) || !redirect_valid(json_string_value(u))) {
			json_decref(m);
			return oauth_error(c, 400, "invalid_redirect_uri",
					   "each redirect URI must be https://, http:// on a loopback address "
					   "(127.0.0.1, [::1], localhost) or a private-use scheme like "
					   "com.example.app:/callback, without a fragment, under 512 bytes");
		}
	}
	if (method && strcmp(method, "none") != 0 && strcmp(method, "client_secret_basic") != 0 &&
	    strcmp(method, "client_secret_post") != 0) {
		json_decref(m);
		return oauth_error(c, 400, "invalid_client_metadata", "token_endpoint_auth_method must be none");
	}
	json_t *gt = json_object_get(m, "grant_types"), *g;
	json_array_foreach(gt, i, g) {
		const char *s = json_string_value(g);
		if (!s || (strcmp(s, "authorization_code") && strcmp(s, "refresh_token"))) {
			json_decref(m);
			return oauth_error(c, 400, "invalid_client_metadata",
					   "grant_types may be authorization_code and refresh_token only");
		}
	}
	pthread_mutex_lock(&A.mu);
	struct client *cl = client_slot();
	if (!cl) {
		pthread_mutex_unlock(&A.mu);
		json_decref(m);
		return oauth_error(c, 503, "temporarily_unavailable", "the client registry is full; try again later");
	}
	memset(cl, 0, sizeof(*cl));
	cl->live = true;
	cl->created = time(NULL);
	random_hex(cl->id, ID_HEX / 2);
	snprintf(cl->name, sizeof(cl->name), "%s", name && printable(name, sizeof(cl->name), true) ? name : "");
	json_array_foreach(uris, i, u)
		snprintf(cl->redirect[cl->nredirect++], AUTH_MAX_URI_BYTES, "%s", json_string_value(u));
	json_t *ans = json_pack("{s:s, s:I, s:s, s:O, s:[s,s], s:[s], s:s}", "client_id", cl->id,
				"client_id_issued_at", (json_int_t)cl->created, "client_name", cl->name,
				"redirect_uris", uris, "grant_types", "authorization_code", "refresh_token",
				"response_types", "code", "token_endpoint_auth_method", "none");
	log_info("client registered: %.8s… \"%s\"", cl->id, cl->name);
	A.registrations++;
	unsigned long gen = tstore_changed();
	pthread_mutex_unlock(&A.mu);
	json_decref(m);
	tstore_sync(gen);
	return respond_json(c, 201, ans);
}

/* ---- /authorize ---- */

struct dup_count {
	const char *key;
	int n;
};

static enum MHD_Result count_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	(void)kind;
	(void)value;
	struct dup_count *d = cls;
	d->n += strcmp(key, d->key) == 0;
	return MHD_YES;
}

/* query - one query parameter; NULL if absent; *dup if it came more than once */
static const char *query(struct MHD_Connection *c, const char *key, bool *dup)
{
	struct dup_count d = { key, 0 };
	MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, count_arg, &d);
	if (d.n > 1)
		*dup = true;
	return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
}

/* redirect_to - the authorization response (RFC 6749 4.1.2, RFC 9207 iss) */
static enum MHD_Result redirect_to(struct MHD_Connection *c, const char *uri, const char *k1, const char *v1,
				   const char *state)
{
	char *loc = NULL;
	char *e1 = http_escape(v1), *es = state ? http_escape(state) : NULL;
	char *ei = http_escape(A.public_url);
	enum MHD_Result q = MHD_NO;
	if (e1 && ei && asprintf(&loc, "Location: %s%c%s=%s%s%s&iss=%s\n", uri, strchr(uri, '?') ? '&' : '?', k1, e1,
				 es ? "&state=" : "", es ? es : "", ei) >= 0) {
		q = respond(c, 302, NULL, NULL, loc);
		explicit_bzero(loc, strlen(loc));
	}
	free(loc);
	secret_free(e1); /* the code */
	free(es);
	free(ei);
	return q;
}

/* pending_slot - a free entry, or the oldest (under mu) */
static struct pending_signin *pending_slot(time_t now)
{
	struct pending_signin *oldest = &A.pending[0];
	for (int i = 0; i < AUTH_MAX_PENDING; i++) {
		struct pending_signin *p = &A.pending[i];
		if (p->live && now - p->created > AUTH_PENDING_S)
			p->live = false;
		if (!p->live)
			return p;
		if (p->created < oldest->created)
			oldest = p;
	}
	return oldest;
}

/* pkce_challenge - BASE64URL(SHA256(verifier)) */
static void pkce_challenge(const char *verifier, char out[64])
{
	unsigned char d[32];
	sha256(verifier, d);
	char *e = b64_encode(d, 32, B64_URL);
	snprintf(out, 64, "%s", e ? e : "");
	free(e);
}

static enum MHD_Result do_authorize(struct MHD_Connection *c)
{
	bool dup = false;
	const char *client_id = query(c, "client_id", &dup), *redirect_uri = query(c, "redirect_uri", &dup);
	const char *response_type = query(c, "response_type", &dup), *state = query(c, "state", &dup);
	const char *challenge = query(c, "code_challenge", &dup), *method = query(c, "code_challenge_method", &dup);
	const char *resource = query(c, "resource", &dup), *scope = query(c, "scope", &dup);
	struct client cl;
	char why[300];
	/* RFC 6749 4.1.2.1: without a known client and its redirect URI, tell the person, not the URI */
	if (!client_id || client_get(client_id, &cl, why, sizeof(why)) != 0)
		return page(c, 400, "Unknown application", client_id ? why : "The request names no application.");
	if (!redirect_uri || !client_redirect_ok(&cl, redirect_uri))
		return page(c, 400, "Wrong return address",
			    "The application that sent you here asked to be answered at an address it did "
			    "not register. Go back to it and connect again; if that keeps happening, "
			    "tell its authors.");
	if (dup)
		return redirect_to(c, redirect_uri, "error", "invalid_request", state);
	if (state && !printable(state, AUTH_MAX_URI_BYTES, false))
		return redirect_to(c, redirect_uri, "error", "invalid_request", NULL);
	if (!response_type || strcmp(response_type, "code") != 0)
		return redirect_to(c, redirect_uri, "error", "unsupported_response_type", state);
	if (!challenge || !method || strcmp(method, "S256") != 0 || strlen(challenge) != 43 ||
	    !printable(challenge, 64, false))
		return redirect_to(c, redirect_uri, "error", "invalid_request", state); /* PKCE S256 required */
	if (resource && strcmp(resource, A.resource) != 0)
		return redirect_to(c, redirect_uri, "error", "invalid_target", state);
	if (scope && !printable(scope, AUTH_MAX_URI_BYTES, true))
		return redirect_to(c, redirect_uri, "error", "invalid_scope", state);
	char upstream_challenge[64];
	pthread_mutex_lock(&A.mu);
	time_t now = time(NULL);
	struct pending_signin *p = pending_slot(now);
	memset(p, 0, sizeof(*p));
	p->live = true;
	p->created = now;
	random_hex(p->state, ID_HEX / 2);
	random_hex(p->nonce, ID_HEX / 2);
	random_hex(p->verifier, SECRET_HEX / 2);
	snprintf(p->client_id, sizeof(p->client_id), "%s", client_id);
	snprintf(p->redirect_uri, sizeof(p->redirect_uri), "%s", redirect_uri);
	snprintf(p->client_state, sizeof(p->client_state), "%s", state ? state : "");
	snprintf(p->challenge, sizeof(p->challenge), "%s", challenge);
	/* RFC 6749 3.3: what is granted is this server's one scope, whatever else was asked for
	 * (the token answer says so); a request naming others still gets it */
	snprintf(p->scope, sizeof(p->scope), "%s", AUTH_SCOPE);
	pkce_challenge(p->verifier, upstream_challenge);
	char *url = oidc_authorize_url(A.callback, p->state, p->nonce, upstream_challenge);
	pthread_mutex_unlock(&A.mu);
	char *loc = NULL;
	enum MHD_Result q = MHD_NO;
	if (url && asprintf(&loc, "Location: %s\n", url) >= 0)
		q = respond(c, 302, NULL, NULL, loc);
	free(url);
	free(loc);
	return q;
}

/* ---- /oauth/callback: the provider sends the person back ---- */

/* code_slot - a free entry, or the oldest (under mu) */
static struct code *code_slot(time_t now)
{
	struct code *oldest = &A.codes[0];
	for (int i = 0; i < AUTH_MAX_CODES; i++) {
		struct code *k = &A.codes[i];
		if (k->live && now - k->created > AUTH_CODE_S * 10)
			k->live = false; /* kept a while after use, to see a replay */
		if (!k->live)
			return k;
		if (k->created < oldest->created)
			oldest = k;
	}
	return oldest;
}

static enum MHD_Result do_callback(struct MHD_Connection *c)
{
	bool dup = false;
	const char *state = query(c, "state", &dup), *code = query(c, "code", &dup), *error = query(c, "error", &dup);
	struct pending_signin p;
	bool found = false;
	pthread_mutex_lock(&A.mu);
	time_t now = time(NULL);
	for (int i = 0; state && i < AUTH_MAX_PENDING && !found; i++) {
		struct pending_signin *e = &A.pending[i];
		if (e->live && strcmp(e->state, state) == 0) {
			found = now - e->created <= AUTH_PENDING_S;
			p = *e;
			memset(e, 0, sizeof(*e)); /* one answer per sign-in */
		}
	}
	pthread_mutex_unlock(&A.mu);
	if (!found)
		return page(c, 400, "Sign-in expired",
			    "This sign-in is unknown or took longer than 10 minutes. Go back to your MCP "
			    "client and connect again.");
	const char *cstate = p.client_state[0] ? p.client_state : NULL;
	if (error || !code || dup) {
		log_info("sign-in not completed at the provider (%s)", error && printable(error, 64, false) ? error : "no code");
		return redirect_to(c, p.redirect_uri, "error", "access_denied", cstate);
	}
	struct oidc_identity id;
	struct oidc_grant grant;
	char why[600];
	int r = oidc_sign_in(code, p.verifier, A.callback, p.nonce, &id, &grant, why, sizeof(why));
	explicit_bzero(p.verifier, sizeof(p.verifier));
	if (r != 0) {
		pthread_mutex_lock(&A.mu);
		(*(r == -EACCES ? &A.signins_refused : &A.signins_failed))++;
		pthread_mutex_unlock(&A.mu);
	}
	if (r == -EACCES) {
		log_warn("sign-in refused%s%s: %s", id.email[0] ? " for " : "", id.email, why);
		return page(c, 403, "You may not use this server", why);
	}
	if (r != 0) {
		log_warn("sign-in failed: %s", why);
		return page(c, 502, "Sign-in failed", why);
	}
	/* --credentials user: the user's Google tokens stay here, in the master */
	utok_signed_in(id.email, &grant);
	char secret[SECRET_HEX + 1];
	pthread_mutex_lock(&A.mu);
	struct client *cl = client_find(p.client_id);
	if (!cl && !is_url_id(p.client_id)) {
		pthread_mutex_unlock(&A.mu);
		return page(c, 400, "Unknown application",
			    "The application you are signing in to was removed while you signed in. Go "
			    "back to it and connect again.");
	}
	if (cl && !cl->used) {
		cl->used = true;
		tstore_changed();
	}
	A.signins_ok++;
	struct code *k = code_slot(now);
	memset(k, 0, sizeof(*k));
	k->live = true;
	k->created = time(NULL);
	random_hex(secret, SECRET_HEX / 2);
	sha256(secret, k->hash);
	snprintf(k->client_id, sizeof(k->client_id), "%s", p.client_id);
	snprintf(k->redirect_uri, sizeof(k->redirect_uri), "%s", p.redirect_uri);
	snprintf(k->challenge, sizeof(k->challenge), "%s", p.challenge);
	snprintf(k->scope, sizeof(k->scope), "%s", p.scope);
	snprintf(k->user, sizeof(k->user), "%s", id.email);
	log_info("signed in: %s (client %.*s… \"%s\")", id.email, is_url_id(p.client_id) ? 120 : 8, p.client_id,
		 cl ? cl->name : "");
	pthread_mutex_unlock(&A.mu);
	enum MHD_Result q = redirect_to(c, p.redirect_uri, "code", secret, cstate);
	explicit_bzero(secret, sizeof(secret));
	return q;
}

/* ---- /token ---- */

struct form {
	char *keys[16], *vals[16];
	int n;
	bool dup, bad;
};

/* form_decode - percent-decoding in place, '+' as space; false on a bad escape or a NUL */
static bool form_decode(char *s)
{
	char *o = s;
	for (; *s; s++) {
		if (*s == '+') {
			*o++ = ' ';
		} else if (*s == '%') {
			if (!isxdigit((unsigned char)s[1]) || !isxdigit((unsigned char)s[2]))
				return false;
			char hex[3] = { s[1], s[2], 0 };
			char ch = (char)strtol(hex, NULL, 16);
			if (ch == '\0')
				return false;
			*o++ = ch;
			s += 2;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
	return true;
}

/* form_parse - application/x-www-form-urlencoded into f (buf is modified and owned by the caller) */
static void form_parse(char *buf, struct form *f)
{
	memset(f, 0, sizeof(*f));
	for (char *save = NULL, *kv = strtok_r(buf, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
		char *eq = strchr(kv, '=');
		if (!eq || f->n == 16) {
			f->bad = true;
			return;
		}
		*eq = '\0';
		if (!form_decode(kv) || !form_decode(eq + 1)) {
			f->bad = true;
			return;
		}
		for (int i = 0; i < f->n; i++)
			f->dup |= strcmp(f->keys[i], kv) == 0;
		f->keys[f->n] = kv;
		f->vals[f->n++] = eq + 1;
	}
}

static const char *form_get(const struct form *f, const char *k)
{
	for (int i = 0; i < f->n; i++)
		if (strcmp(f->keys[i], k) == 0)
			return f->vals[i];
	return NULL;
}

/* grant_slot - a free entry, or the least recently used (under mu) */
static struct grant *grant_slot(time_t now)
{
	struct grant *lru = &A.grants[0];
	for (int i = 0; i < AUTH_MAX_GRANTS; i++) {
		struct grant *g = &A.grants[i];
		if (g->live && now - g->created > AUTH_REFRESH_TOKEN_S)
			g->live = false;
		if (!g->live)
			return g;
		if (g->last < lru->last)
			lru = g;
	}
	return lru;
}

/* grant_revoke - end a refresh-token family (under mu) */
static void grant_revoke(unsigned long family)
{
	for (int i = 0; i < AUTH_MAX_GRANTS; i++)
		if (A.grants[i].live && A.grants[i].family == family)
			memset(&A.grants[i], 0, sizeof(A.grants[i]));
	tstore_changed();
}

/* tokens_answer - a new access token, and the family's next refresh token (under mu) */
static json_t *tokens_answer(struct grant *g, time_t now)
{
	char rt[SECRET_HEX + 1], jti[ID_HEX + 1];
	random_hex(rt, SECRET_HEX / 2);
	random_hex(jti, ID_HEX / 2);
	if (g->live && g->last) {
		memcpy(g->prev, g->hash, 32);
		g->has_prev = true;
	}
	sha256(rt, g->hash);
	g->last = now;
	json_t *claims = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:s, s:I}", "iss", A.public_url, "aud", A.resource,
				   "sub", g->user, "client_id", g->client_id, "iat", (json_int_t)now, "exp",
				   (json_int_t)(now + AUTH_ACCESS_TOKEN_S), "jti", jti, "kg_grant", (json_int_t)g->family);
	if (claims && g->scope[0])
		json_object_set_new(claims, "scope", json_string(g->scope));
	char *at = claims ? jwt_sign_hs256(claims, "at+jwt", A.key, sizeof(A.key)) : NULL;
	json_decref(claims);
	json_t *ans = at ? json_pack("{s:s, s:s, s:i, s:s}", "access_token", at, "token_type", "Bearer",
				     "expires_in", AUTH_ACCESS_TOKEN_S, "refresh_token", rt) : NULL;
	if (ans && g->scope[0])
		json_object_set_new(ans, "scope", json_string(g->scope));
	if (at)
		explicit_bzero(at, strlen(at));
	free(at);
	explicit_bzero(rt, sizeof(rt));
	return ans;
}

static enum MHD_Result token_code(struct MHD_Connection *c, const struct form *f, const char *client_id)
{
	const char *code = form_get(f, "code"), *redirect_uri = form_get(f, "redirect_uri");
	const char *verifier = form_get(f, "code_verifier");
	if (!code || !redirect_uri)
		return oauth_error(c, 400, "invalid_request", "code and redirect_uri are required");
	size_t vl = verifier ? strlen(verifier) : 0;
	if (vl < AUTH_PKCE_VERIFIER_MIN || vl > AUTH_PKCE_VERIFIER_MAX ||
	    strspn(verifier, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~") != vl)
		return oauth_error(c, 400, "invalid_request", "code_verifier (PKCE, RFC 7636) is required");
	unsigned char h[32];
	char challenge[64];
	sha256(code, h);
	pkce_challenge(verifier, challenge);
	pthread_mutex_lock(&A.mu);
	time_t now = time(NULL);
	struct code *k = NULL;
	for (int i = 0; i < AUTH_MAX_CODES && !k; i++)
		if (A.codes[i].live && CRYPTO_memcmp(A.codes[i].hash, h, 32) == 0)
			k = &A.codes[i];
	const char *why = NULL;
	if (!k) {
		why = "the authorization code is unknown or has expired";
	} else if (k->redeemed) {
		/* RFC 6749 4.1.2: a code used twice revokes what it gave */
		grant_revoke(k->grant);
		k->live = false;
		log_warn("an authorization code of %s was used twice; the tokens it gave are revoked", k->user);
		why = "the authorization code was already used";
	} else if (now - k->created > AUTH_CODE_S) {
		why = "the authorization code has expired";
	} else if (strcmp(k->client_id, client_id) != 0) {
		why = "the authorization code was issued to another client";
	} else if (strcmp(k->redirect_uri, redirect_uri) != 0) {
		why = "redirect_uri differs from the authorization request's";
	} else if (strcmp(k->challenge, challenge) != 0) {
		why = "code_verifier does not match the code_challenge (PKCE)";
	}
	if (why) {
		if (k && !k->redeemed)
			k->live = false; /* a wrong verifier burns the code: no guessing */
		pthread_mutex_unlock(&A.mu);
		return oauth_error(c, 400, "invalid_grant", why);
	}
	k->redeemed = true;
	struct grant *g = grant_slot(now);
	memset(g, 0, sizeof(*g));
	g->live = true;
	g->family = ++A.next_family;
	g->created = now;
	snprintf(g->client_id, sizeof(g->client_id), "%s", k->client_id);
	snprintf(g->scope, sizeof(g->scope), "%s", k->scope);
	snprintf(g->user, sizeof(g->user), "%s", k->user);
	k->grant = g->family;
	json_t *ans = tokens_answer(g, now);
	unsigned long gen = tstore_changed();
	pthread_mutex_unlock(&A.mu);
	tstore_sync(gen); /* the refresh token is kept before the client has it */
	return respond_json(c, ans ? 200 : 500, ans);
}

static enum MHD_Result token_refresh(struct MHD_Connection *c, const struct form *f, const char *client_id)
{
	const char *rt = form_get(f, "refresh_token");
	if (!rt)
		return oauth_error(c, 400, "invalid_request", "refresh_token is required");
	unsigned char h[32];
	sha256(rt, h);
	pthread_mutex_lock(&A.mu);
	time_t now = time(NULL);
	struct grant *g = NULL;
	for (int i = 0; i < AUTH_MAX_GRANTS && !g; i++) {
		struct grant *e = &A.grants[i];
		if (!e->live)
			continue;
		if (CRYPTO_memcmp(e->hash, h, 32) == 0) {
			g = e;
		} else if (e->has_prev && CRYPTO_memcmp(e->prev, h, 32) == 0) {
			/* a rotated-out token came back: someone holds a copy; end the family */
			log_warn("a replaced refresh token of %s was used again; that sign-in is revoked", e->user);
			grant_revoke(e->family);
			pthread_mutex_unlock(&A.mu);
			return oauth_error(c, 400, "invalid_grant", "the refresh token was already used; sign in again");
		}
	}
	const char *why = !g ? "the refresh token is unknown or has expired; sign in again"
		: now - g->created > AUTH_REFRESH_TOKEN_S ? "the sign-in has expired; sign in again"
		: strcmp(g->client_id, client_id) != 0 ? "the refresh token was issued to another client"
		: !is_url_id(client_id) && !client_find(client_id) ? "the client is no longer registered; connect again"
		: NULL;
	if (why) {
		pthread_mutex_unlock(&A.mu);
		return oauth_error(c, 400, "invalid_grant", why);
	}
	json_t *ans = tokens_answer(g, now);
	unsigned long gen = tstore_changed();
	pthread_mutex_unlock(&A.mu);
	tstore_sync(gen);
	return respond_json(c, ans ? 200 : 500, ans);
}

static enum MHD_Result do_token(struct MHD_Connection *c, const char *body, size_t len)
{
	if (len > AUTH_MAX_FORM_BYTES)
		return oauth_error(c, 413, "invalid_request", "the token request is too large");
	char *buf = strndup(body ? body : "", len);
	if (!buf || strlen(buf) != len) {
		free(buf);
		return oauth_error(c, 400, "invalid_request", "the token request is not a form");
	}
	struct form f;
	form_parse(buf, &f);
	const char *grant = form_get(&f, "grant_type"), *client_id = form_get(&f, "client_id");
	const char *resource = form_get(&f, "resource");
	enum MHD_Result q;
	if (f.bad || f.dup)
		q = oauth_error(c, 400, "invalid_request", "the form is malformed or repeats a parameter");
	else if (!grant)
		q = oauth_error(c, 400, "invalid_request", "grant_type is required");
	else if (!client_id)
		q = oauth_error(c, 401, "invalid_client", "client_id is required (public clients, no secret)");
	else if (resource && strcmp(resource, A.resource) != 0)
		q = oauth_error(c, 400, "invalid_target", "this server issues tokens for its own /mcp only");
	else if (strcmp(grant, "authorization_code") == 0 || strcmp(grant, "refresh_token") == 0) {
		struct client cl;
		char why[300];
		if (client_get(client_id, &cl, why, sizeof(why)) != 0)
			q = oauth_error(c, 401, "invalid_client", "the client is not registered (or its "
					"registration expired); register again");
		else if (grant[0] == 'a')
			q = token_code(c, &f, client_id);
		else
			q = token_refresh(c, &f, client_id);
	} else
		q = oauth_error(c, 400, "unsupported_grant_type", "grant_type must be authorization_code or refresh_token");
	explicit_bzero(buf, len);
	free(buf);
	return q;
}

/* ---- the resource server ---- */

/* Users signed out by the server (their Google grant was revoked): the access tokens of the
 * sign-ins (refresh-token families, the token's kg_grant) they had until then are refused; a
 * later sign-in has a higher family. An entry is needed only as long as such a token lives
 * (AUTH_MAX_REVOKED of them, policy/limits.h). */
static struct {
	pthread_mutex_t mu;
	int n;
	struct { char user[AUTH_USER_MAX]; time_t at; unsigned long upto; } e[AUTH_MAX_REVOKED];
} rv = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* revoked_grant - was user signed out after the sign-in (family) a token belongs to? */
static bool revoked_grant(const char *user, unsigned long family, time_t now)
{
	if (__atomic_load_n(&rv.n, __ATOMIC_ACQUIRE) == 0)
		return false;
	bool r = false;
	pthread_mutex_lock(&rv.mu);
	for (int i = 0; i < AUTH_MAX_REVOKED; i++)
		if (rv.e[i].at && now - rv.e[i].at <= AUTH_ACCESS_TOKEN_S && family <= rv.e[i].upto &&
		    strcmp(rv.e[i].user, user) == 0)
			r = true;
	pthread_mutex_unlock(&rv.mu);
	return r;
}

void auth_user_revoked(const char *user)
{
	time_t now = time(NULL);
	pthread_mutex_lock(&A.mu);
	for (int i = 0; i < AUTH_MAX_GRANTS; i++)
		if (A.grants[i].live && strcmp(A.grants[i].user, user) == 0)
			grant_revoke(A.grants[i].family);
	unsigned long upto = A.next_family; /* every sign-in so far */
	pthread_mutex_unlock(&A.mu);
	pthread_mutex_lock(&rv.mu);
	int slot = 0;
	for (int i = 0; i < AUTH_MAX_REVOKED; i++) {
		if (rv.e[i].at && strcmp(rv.e[i].user, user) == 0) {
			slot = i;
			break;
		}
		if (!rv.e[i].at || now - rv.e[i].at > AUTH_ACCESS_TOKEN_S || rv.e[i].at < rv.e[slot].at)
			slot = i; /* free, expired, or the oldest */
	}
	snprintf(rv.e[slot].user, sizeof(rv.e[slot].user), "%s", user);
	rv.e[slot].at = now;
	rv.e[slot].upto = upto;
	__atomic_store_n(&rv.n, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&rv.mu);
	tstore_changed();
}

int auth_check_access(const char *tok, size_t len, time_t now, char *user, size_t cap)
{
	struct jwt j;
	if (jwt_parse(tok, len, &j) != 0)
		return -EACCES;
	int r = -EACCES;
	const char *typ = json_string_value(json_object_get(j.header, "typ"));
	const char *iss = json_string_value(json_object_get(j.claims, "iss"));
	const char *aud = json_string_value(json_object_get(j.claims, "aud"));
	const char *sub = json_string_value(json_object_get(j.claims, "sub"));
	json_t *exp = json_object_get(j.claims, "exp"), *fam = json_object_get(j.claims, "kg_grant");
	if (typ && strcmp(typ, "at+jwt") == 0 && jwt_verify_hs256(&j, A.key, sizeof(A.key)) == 0 && iss &&
	    strcmp(iss, A.public_url) == 0 && aud && strcmp(aud, A.resource) == 0 && json_is_integer(exp) &&
	    json_integer_value(exp) > now && json_is_integer(fam) && json_integer_value(fam) > 0 && sub &&
	    strlen(sub) < cap && !revoked_grant(sub, (unsigned long)json_integer_value(fam), now)) {
		snprintf(user, cap, "%s", sub);
		/* RFC 6750 3.1: a valid token without the scope /mcp needs is insufficient_scope */
		const char *sc = json_string_value(json_object_get(j.claims, "scope"));
		r = sc && oidc_scope_has(sc, AUTH_SCOPE, strlen(AUTH_SCOPE)) ? 0 : -EPERM;
	}
	jwt_free(&j);
	return r;
}

/* A verified access token is remembered, so a session's next requests skip the JWS decoding,
 * the JSON and the HMAC (bench/signinbench.mjs measures what that saves). Direct-mapped by a
 * hash of the token; a hit is a constant-time comparison of the whole token. */
static struct {
	pthread_mutex_t mu;
	struct { size_t len; char tok[AUTH_TOKEN_CACHE_BYTES]; char user[AUTH_USER_MAX]; time_t exp; unsigned long fam; } e[AUTH_TOKEN_CACHE];
} tc = { .mu = PTHREAD_MUTEX_INITIALIZER };

static unsigned token_slot(const char *t, size_t len)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)t[i]) * 16777619u;
	return h % AUTH_TOKEN_CACHE;
}

/* check_cached - auth_check_access through the cache */
static int check_cached(const char *t, size_t len, time_t now, char *user, size_t cap)
{
	unsigned k = token_slot(t, len);
	pthread_mutex_lock(&tc.mu);
	bool hit = tc.e[k].len == len && len && tc.e[k].exp > now && CRYPTO_memcmp(tc.e[k].tok, t, len) == 0 &&
		   strlen(tc.e[k].user) < cap;
	unsigned long fam = tc.e[k].fam;
	if (hit)
		snprintf(user, cap, "%s", tc.e[k].user);
	pthread_mutex_unlock(&tc.mu);
	if (hit)
		return revoked_grant(user, fam, now) ? -EACCES : 0;
	int r = auth_check_access(t, len, now, user, cap);
	if (r != 0)
		return r;
	struct jwt j;
	if (len < AUTH_TOKEN_CACHE_BYTES && jwt_parse(t, len, &j) == 0) {
		pthread_mutex_lock(&tc.mu);
		memcpy(tc.e[k].tok, t, len);
		tc.e[k].len = len;
		tc.e[k].exp = (time_t)json_integer_value(json_object_get(j.claims, "exp"));
		tc.e[k].fam = (unsigned long)json_integer_value(json_object_get(j.claims, "kg_grant"));
		snprintf(tc.e[k].user, sizeof(tc.e[k].user), "%s", user);
		pthread_mutex_unlock(&tc.mu);
		jwt_free(&j);
	}
	return 0;
}

bool auth_bearer(struct MHD_Connection *c, char *user, size_t cap, enum MHD_Result *q)
{
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	bool bearer = h && strncasecmp(h, "Bearer ", 7) == 0;
	int r = -EACCES;
	if (bearer) {
		const char *t = h + 7;
		while (*t == ' ')
			t++;
		r = check_cached(t, strlen(t), time(NULL), user, cap);
		if (r == 0)
			return true; /* the common case: nothing more to make */
	}
	char hdr[AUTH_MAX_URI_BYTES * 2 + 200];
	int n = snprintf(hdr, sizeof(hdr), "WWW-Authenticate: Bearer resource_metadata=\"%s/.well-known/"
			 "oauth-protected-resource/mcp\"", A.public_url);
	if (bearer) {
		pthread_mutex_lock(&A.mu);
		A.tokens_refused++;
		pthread_mutex_unlock(&A.mu);
		if (r == -EPERM) {
			snprintf(hdr + n, sizeof(hdr) - (size_t)n, ", error=\"insufficient_scope\", scope=\"%s\", "
				 "error_description=\"this token does not carry the scope %s that /mcp needs; "
				 "authorize again with it\"\nAccess-Control-Expose-Headers: WWW-Authenticate\n"
				 "Access-Control-Allow-Origin: *\n", AUTH_SCOPE, AUTH_SCOPE);
			char *body = jsonrpc_error(NULL, -32001, "Forbidden: the access token lacks the scope "
						   "mcp (authorize again with scope=mcp)", NULL);
			*q = respond(c, body ? 403 : 500, body ? "application/json" : NULL, body ? body : "", hdr);
			free(body);
			return false;
		}
		snprintf(hdr + n, sizeof(hdr) - (size_t)n, ", scope=\"%s\", error=\"invalid_token\", "
			 "error_description=\"the access token is not valid here (expired, or not issued by "
			 "this server for it)\"", AUTH_SCOPE);
	} else {
		/* RFC 6750 3: the scope a client should ask for (MCP: scope selection from the 401) */
		snprintf(hdr + n, sizeof(hdr) - (size_t)n, ", scope=\"%s\"", AUTH_SCOPE);
	}
	strcat(hdr, "\nAccess-Control-Expose-Headers: WWW-Authenticate\nAccess-Control-Allow-Origin: *\n");
	char *body = jsonrpc_error(NULL, -32001, "Unauthorized: sign in first (this server uses "
				   "OAuth; your MCP client finds how from the WWW-Authenticate header)", NULL);
	*q = respond(c, body ? 401 : 500, body ? "application/json" : NULL, body ? body : "", hdr);
	free(body);
	return false;
}

void auth_metrics(char **m, size_t *len)
{
	if (!A.on)
		return;
	pthread_mutex_lock(&A.mu);
	int clients = 0, grants = 0;
	for (int i = 0; i < AUTH_MAX_CLIENTS; i++)
		clients += A.clients[i].live;
	for (int i = 0; i < AUTH_MAX_GRANTS; i++)
		grants += A.grants[i].live;
	char *add = NULL;
	int n = asprintf(&add,
		"# HELP kode_gopher_signins_total Sign-ins through the provider, by result.\n"
		"# TYPE kode_gopher_signins_total counter\n"
		"kode_gopher_signins_total{result=\"ok\"} %lu\nkode_gopher_signins_total{result=\"refused\"} %lu\n"
		"kode_gopher_signins_total{result=\"failed\"} %lu\n"
		"# HELP kode_gopher_oauth_clients Registered OAuth clients (at most %d).\n# TYPE kode_gopher_oauth_clients gauge\n"
		"kode_gopher_oauth_clients %d\n"
		"# HELP kode_gopher_oauth_registrations_total Client registrations (RFC 7591).\n"
		"# TYPE kode_gopher_oauth_registrations_total counter\nkode_gopher_oauth_registrations_total %lu\n"
		"# HELP kode_gopher_oauth_grants Live sign-ins with a refresh token.\n# TYPE kode_gopher_oauth_grants gauge\n"
		"kode_gopher_oauth_grants %d\n"
		"# HELP kode_gopher_bearer_refused_total /mcp requests whose token was refused.\n"
		"# TYPE kode_gopher_bearer_refused_total counter\nkode_gopher_bearer_refused_total %lu\n",
		A.signins_ok, A.signins_refused, A.signins_failed, AUTH_MAX_CLIENTS, clients, A.registrations, grants,
		A.tokens_refused);
	pthread_mutex_unlock(&A.mu);
	if (n < 0)
		return;
	char *nm = realloc(*m, *len + (size_t)n + 1);
	if (nm) {
		memcpy(nm + *len, add, (size_t)n + 1);
		*m = nm;
		*len += (size_t)n;
	}
	free(add);
}

/* ---- routing ---- */

bool auth_route(struct MHD_Connection *c, const char *url, const char *method, const char *body,
		size_t len, enum MHD_Result *q)
{
	if (!A.on)
		return false;
	bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
	bool options = strcmp(method, "OPTIONS") == 0;
	enum { NONE, PRM, ASM, AUTHZ, CB, TOKEN, REG } which = NONE;
	if (strcmp(url, "/.well-known/oauth-protected-resource") == 0 ||
	    strcmp(url, "/.well-known/oauth-protected-resource/mcp") == 0)
		which = PRM;
	else if (strcmp(url, "/.well-known/oauth-authorization-server") == 0)
		which = ASM;
	else if (strcmp(url, "/authorize") == 0)
		which = AUTHZ;
	else if (strcmp(url, "/oauth/callback") == 0)
		which = CB;
	else if (strcmp(url, "/token") == 0)
		which = TOKEN;
	else if (strcmp(url, "/register") == 0)
		which = REG;
	if (which == NONE)
		return false;
	if (options && which != AUTHZ && which != CB)
		*q = respond(c, 204, NULL, NULL, CORS_ANY);
	else if (get && which == PRM)
		*q = metadata_resource(c);
	else if (get && which == ASM)
		*q = metadata_server(c);
	else if (get && which == AUTHZ)
		*q = do_authorize(c);
	else if (get && which == CB)
		*q = do_callback(c);
	else if (post && which == TOKEN)
		*q = do_token(c, body, len);
	else if (post && which == REG)
		*q = do_register(c, body, len);
	else
		*q = oauth_error(c, 405, "invalid_request", (which == TOKEN || which == REG) ? "use POST" : "use GET");
	return true;
}

/* ---- kept across restarts (--token-store, master/tokenstore.c) ---- */

static void hex32(const unsigned char h[32], char out[65])
{
	static const char d[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		out[2 * i] = d[h[i] >> 4];
		out[2 * i + 1] = d[h[i] & 15];
	}
	out[64] = '\0';
}

static bool unhex32(const char *s, unsigned char h[32])
{
	if (!s || strlen(s) != 64 || strspn(s, "0123456789abcdef") != 64)
		return false;
	for (int i = 0; i < 32; i++) {
		unsigned v;
		sscanf(s + 2 * i, "%2x", &v);
		h[i] = (unsigned char)v;
	}
	return true;
}

/* fits - s is a string that fits (with its NUL) in cap bytes */
static bool fits(const char *s, size_t cap)
{
	return s && strlen(s) < cap;
}

json_t *auth_store_dump(void)
{
	json_t *clients = json_array(), *grants = json_array(), *revoked = json_array();
	char *key = b64_encode(A.key, sizeof(A.key), 0);
	pthread_mutex_lock(&A.mu);
	for (int i = 0; i < AUTH_MAX_CLIENTS; i++) {
		const struct client *cl = &A.clients[i];
		if (!cl->live)
			continue;
		json_t *r = json_array();
		for (int k = 0; k < cl->nredirect; k++)
			json_array_append_new(r, json_string(cl->redirect[k]));
		json_array_append_new(clients, json_pack("{s:s, s:s, s:o, s:I, s:b}", "id", cl->id, "name", cl->name,
							 "redirect_uris", r, "created", (json_int_t)cl->created,
							 "used", cl->used));
	}
	for (int i = 0; i < AUTH_MAX_GRANTS; i++) {
		const struct grant *g = &A.grants[i];
		if (!g->live)
			continue;
		char h[65], p[65];
		hex32(g->hash, h);
		hex32(g->prev, p);
		json_array_append_new(grants, json_pack("{s:I, s:s, s:s*, s:s, s:s, s:s, s:I, s:I}", "family",
							(json_int_t)g->family, "hash", h, "prev", g->has_prev ? p : NULL,
							"client_id", g->client_id, "scope", g->scope, "user", g->user,
							"created", (json_int_t)g->created, "last", (json_int_t)g->last));
	}
	json_int_t next = (json_int_t)A.next_family;
	pthread_mutex_unlock(&A.mu);
	pthread_mutex_lock(&rv.mu);
	for (int i = 0; i < AUTH_MAX_REVOKED; i++)
		if (rv.e[i].at)
			json_array_append_new(revoked, json_pack("{s:s, s:I, s:I}", "user", rv.e[i].user, "at",
								 (json_int_t)rv.e[i].at, "upto", (json_int_t)rv.e[i].upto));
	pthread_mutex_unlock(&rv.mu);
	json_t *v = json_pack("{s:s?, s:I, s:o, s:o, s:o}", "key", key, "next_family", next, "clients", clients,
			      "grants", grants, "revoked", revoked);
	if (key)
		explicit_bzero(key, strlen(key));
	free(key);
	return v;
}

int auth_store_load(const json_t *v, char *err, size_t cap)
{
	const char *key = NULL;
	json_int_t next = 0;
	json_t *clients = NULL, *grants = NULL, *revoked = NULL, *e;
	unsigned char k[32];
	size_t kl = 0, i;
	if (json_unpack((json_t *)v, "{s:s, s:I, s:o, s:o, s:o}", "key", &key, "next_family", &next, "clients", &clients,
			"grants", &grants, "revoked", &revoked) != 0 ||
	    b64_decode(key, strlen(key), B64_LAX, k, sizeof(k), &kl) != 0 || kl != sizeof(k) || next < 0 ||
	    !json_is_array(clients) || !json_is_array(grants) || !json_is_array(revoked) ||
	    json_array_size(clients) > AUTH_MAX_CLIENTS || json_array_size(grants) > AUTH_MAX_GRANTS ||
	    json_array_size(revoked) > AUTH_MAX_REVOKED) {
		snprintf(err, cap, "its sign-in part is malformed");
		return -1;
	}
	int n = 0;
	pthread_mutex_lock(&A.mu);
	memcpy(A.key, k, sizeof(A.key));
	explicit_bzero(k, sizeof(k));
	A.next_family = (unsigned long)next;
	json_array_foreach(clients, i, e) {
		const char *id = NULL, *name = NULL;
		json_t *r = NULL, *u;
		json_int_t created = 0;
		int used = 0;
		size_t j;
		struct client *cl = &A.clients[i];
		if (json_unpack(e, "{s:s, s:s, s:o, s:I, s:b}", "id", &id, "name", &name, "redirect_uris", &r, "created",
				&created, "used", &used) != 0 || !fits(id, sizeof(cl->id)) || !fits(name, sizeof(cl->name)) ||
		    !json_is_array(r) || json_array_size(r) > AUTH_MAX_REDIRECT_URIS)
			goto bad;
		memset(cl, 0, sizeof(*cl));
		json_array_foreach(r, j, u) {
			if (!fits(json_string_value(u), AUTH_MAX_URI_BYTES))
				goto bad;
			snprintf(cl->redirect[cl->nredirect++], AUTH_MAX_URI_BYTES, "%s", json_string_value(u));
		}
		cl->live = true;
		cl->used = used;
		cl->created = (time_t)created;
		snprintf(cl->id, sizeof(cl->id), "%s", id);
		snprintf(cl->name, sizeof(cl->name), "%s", name);
		n++;
	}
	json_array_foreach(grants, i, e) {
		const char *h = NULL, *p = NULL, *cid = NULL, *scope = NULL, *user = NULL;
		json_int_t fam = 0, created = 0, last = 0;
		struct grant *g = &A.grants[i];
		memset(g, 0, sizeof(*g));
		if (json_unpack(e, "{s:I, s:s, s?s, s:s, s:s, s:s, s:I, s:I}", "family", &fam, "hash", &h, "prev", &p,
				"client_id", &cid, "scope", &scope, "user", &user, "created", &created, "last", &last) != 0 ||
		    fam <= 0 || fam > next || !unhex32(h, g->hash) || (p && !unhex32(p, g->prev)) ||
		    !fits(cid, sizeof(g->client_id)) || !fits(scope, sizeof(g->scope)) || !fits(user, sizeof(g->user)))
			goto bad;
		g->live = true;
		g->has_prev = p != NULL;
		g->family = (unsigned long)fam;
		g->created = (time_t)created;
		g->last = (time_t)last;
		snprintf(g->client_id, sizeof(g->client_id), "%s", cid);
		snprintf(g->scope, sizeof(g->scope), "%s", scope);
		snprintf(g->user, sizeof(g->user), "%s", user);
		n++;
	}
	pthread_mutex_unlock(&A.mu);
	pthread_mutex_lock(&rv.mu);
	json_array_foreach(revoked, i, e) {
		const char *user = NULL;
		json_int_t at = 0, upto = 0;
		if (json_unpack(e, "{s:s, s:I, s:I}", "user", &user, "at", &at, "upto", &upto) != 0 ||
		    !fits(user, AUTH_USER_MAX) || at <= 0 || upto < 0) {
			pthread_mutex_unlock(&rv.mu);
			snprintf(err, cap, "its sign-out list is malformed");
			return -1;
		}
		snprintf(rv.e[i].user, sizeof(rv.e[i].user), "%s", user);
		rv.e[i].at = (time_t)at;
		rv.e[i].upto = (unsigned long)upto;
		__atomic_store_n(&rv.n, 1, __ATOMIC_RELEASE);
		n++;
	}
	pthread_mutex_unlock(&rv.mu);
	return n;
bad:
	memset(A.clients, 0, sizeof(A.clients));
	memset(A.grants, 0, sizeof(A.grants));
	pthread_mutex_unlock(&A.mu);
	snprintf(err, cap, "a client or sign-in in it is malformed");
	return -1;
}
