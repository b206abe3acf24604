/*
 * metadata.h - the metadata-server emulator inside the sandbox: what a program's Google Cloud
 * libraries (Go, Python google-auth, gcloud) ask a GCE metadata server, answered from the
 * credentials the worker sent with the call.
 *
 * Two halves:
 *   agent/metadata.c         the pure part: the run's view of its credentials (parsed from the
 *                            execute request's "credentials" object) and metadata_answer, one
 *                            request in, one response out, no I/O (the fuzz target's subject:
 *                            tests/fuzz/fuzz_metadata.c; unit tests: tests/unit/test_metadata.c)
 *   agent/metadata_server.c  the listener (libmicrohttpd on a loopback address of its own, for
 *                            the length of one run) and the channel that asks the worker for a
 *                            token the view does not hold yet (a "token_request" event on the
 *                            execute stream, answered by POST /token; docs/agent-api.md)
 *
 * Called by agent/pipeline.c around the run of the user's binary, which gets GCE_METADATA_HOST,
 * GCE_METADATA_IP and GCE_METADATA_ROOT pointing at the listener. No refresh token or key ever
 * reaches the sandbox this way: only access tokens and ID tokens, minted by the worker.
 */
#ifndef KG_METADATA_H
#define KG_METADATA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include "policy/limits.h"

/* One access token the run holds, for one set of scopes. */
struct metadata_token {
	char *scopes;          /* the scope set's key: sorted, de-duplicated, comma-joined */
	char *access_token;
	char token_type[16];   /* "Bearer" */
	double expires;        /* CLOCK_MONOTONIC seconds */
};

/* What one run's emulator knows. Built by metadata_view_from_json; tokens are added as they
 * are fetched (metadata_view_add_token). */
struct metadata_view {
	char *email;               /* the service account (or user) the tokens stand for */
	char *project_id;          /* NULL: unknown (404) */
	char *numeric_project_id;  /* NULL: unknown (404) */
	char *universe_domain;     /* "googleapis.com" unless the credentials say otherwise */
	char *scopes[METADATA_MAX_SCOPES];  /* the default scope set, in the order given */
	size_t nscopes;
	char *scopes_key;          /* the default set's key */
	bool id_tokens;            /* the worker's source can mint ID tokens (identity) */
	struct metadata_token tokens[METADATA_MAX_TOKENS];
	size_t ntokens;
};

/*
 * metadata_view_from_json - the run's view from the execute request's credentials object:
 *   {"mode":"metadata", "email", "project_id"?, "numeric_project_id"?, "universe_domain"?,
 *    "scopes":[...], "id_tokens"?: bool,
 *    "access_token"?, "token_type"?, "expires_in"?}   (the token for the default scopes)
 * now is CLOCK_MONOTONIC seconds. 0, or -EINVAL with a sentence in err (which never quotes a
 * token). Free with metadata_view_free.
 */
int metadata_view_from_json(json_t *creds, double now, struct metadata_view *v, char *err,
			    size_t errlen);
void metadata_view_free(struct metadata_view *v);

/* metadata_view_add_token - keep a fetched token for scopes_key (copies; replaces an older one
 * for the same key, or the one closest to expiry when the cache is full); 0 or -errno */
int metadata_view_add_token(struct metadata_view *v, const char *scopes_key,
			    const char *access_token, const char *token_type, double expires);

/* One HTTP request as the listener received it. */
struct metadata_request {
	const char *method;
	const char *target;    /* the raw request-target: path and query, percent-encoded */
	size_t target_len;
	const char *flavor;    /* the Metadata-Flavor header, NULL if absent */
	bool forwarded;        /* an X-Forwarded-For header was present */
};

enum metadata_need {
	METADATA_NEED_NONE,     /* the response is complete */
	METADATA_NEED_ACCESS,   /* fetch an access token for need_scopes, then answer again */
	METADATA_NEED_IDENTITY, /* fetch an ID token for need_audience: it is the 200 body */
};

struct metadata_response {
	int status;               /* HTTP status (0 while something is needed) */
	const char *content_type; /* static */
	char *body;               /* malloc'd, NUL-terminated; len bytes */
	size_t len;
	enum metadata_need need;
	char *need_scopes;        /* METADATA_NEED_ACCESS: the scope set's key */
	char *need_audience;      /* METADATA_NEED_IDENTITY */
	bool need_full;           /* format=full */
	bool need_licenses;       /* licenses=TRUE */
};

/*
 * metadata_answer - the emulator's whole behaviour for one request, without I/O:
 *   every response carries Metadata-Flavor: Google (the listener adds it);
 *   X-Forwarded-For present, or Metadata-Flavor not "Google": 403;
 *   GET /, project/project-id, project/numeric-project-id, universe/universe-domain (and
 *   universe_domain), instance/service-accounts/ and .../{default,EMAIL}/ (with
 *   ?recursive=true as JSON), .../email, .../scopes, .../aliases, .../token (?scopes=),
 *   .../identity?audience= (&format=full, &licenses=TRUE); anything else 404.
 * A token with at least min_left seconds of life in the view answers token requests;
 * otherwise need says what to fetch. Returns 0 (out filled), or -ENOMEM.
 */
int metadata_answer(const struct metadata_view *v, const struct metadata_request *rq,
		    double now, int min_left, struct metadata_response *out);
void metadata_response_free(struct metadata_response *r);

/* metadata_scopes_key - a scope list ("a,b" or "a b") as the sorted, de-duplicated key; NULL
 * (and *bad = true) when it is empty, too long or has characters a scope cannot have */
char *metadata_scopes_key(const char *list, bool *bad);

/* ---- agent/metadata_server.c: the listener for one run ---- */

/* How the emulator asks the worker for a token: push one event object (stolen) onto the
 * running call's stream. */
typedef void (*metadata_event_fn)(void *ctx, json_t *event);

struct metadata_server;

/* metadata_server_new - the agent's one emulator (not listening yet); NULL on ENOMEM */
struct metadata_server *metadata_server_new(void);

/*
 * metadata_server_begin - listen for one run on a random 127.x.y.z address and an ephemeral
 * port. Takes the view (*v is emptied). ev/ev_ctx carry token requests to the worker.
 * host gets "127.x.y.z:port" for GCE_METADATA_HOST. 0, or a negative errno with a sentence.
 */
int metadata_server_begin(struct metadata_server *s, struct metadata_view *v,
			  metadata_event_fn ev, void *ev_ctx, char *host, size_t hostlen,
			  char *err, size_t errlen);

/* metadata_server_end - stop listening, fail waiting requests, forget every token */
void metadata_server_end(struct metadata_server *s);

/*
 * metadata_server_deliver - the worker's answer to a token_request (POST /token):
 *   {"id":"N", "access_token", "token_type"?, "expires_in"} | {"id", "id_token"} |
 *   {"id", "error":"sentence", "status"?: 403|503}
 * 0; -ENOENT when no request with that id waits (the run ended, or it timed out); -EINVAL
 * with a sentence for an answer that does not fit the request.
 */
int metadata_server_deliver(struct metadata_server *s, json_t *answer, char *err,
			    size_t errlen);

void metadata_server_free(struct metadata_server *s);

#endif
