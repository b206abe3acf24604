/*
 * creds.h - the session's Google credentials: where they come from, and what one execute call
 * carries into the sandbox (docs/credentials.md).
 *
 * The worker creates one `struct creds` per session from its --credentials flags (worker/main.c)
 * and asks it, on the call thread, for the "credentials" object of each execute request
 * (worker/call.c). During a run the agent's metadata emulator may ask for more tokens (other
 * scopes, a refresh, an ID token): the worker's minter thread answers each token_request event
 * with creds_answer. All outgoing HTTP goes through libcurl; RS256 signatures use libcrypto.
 *
 * Modes (--credentials):
 *   adc                   the user's Application Default Credentials file itself goes into the
 *                         sandbox for the run (GOOGLE_APPLICATION_CREDENTIALS) and is deleted
 *                         after it; nothing is minted here
 *   metadata              tokens are minted here from those ADC and served by the emulator: no
 *                         refresh token or key enters the sandbox
 *   service-account:EMAIL IAM Credentials generateAccessToken for EMAIL, with the server's own
 *                         credentials (its ADC, else the host's metadata server)
 *   server                the server's own token (its ADC, else the host's metadata server)
 *   user                  the signed-in user's token, which only the master can mint (it keeps
 *                         the user's Google grant): asked for through creds_set_user's source
 *   none                  no credentials at all
 *
 * Secrets (refresh tokens, keys, access and ID tokens) never appear in a log line or an error
 * sentence: errors from token endpoints keep only the OAuth error code and description, and
 * every sentence is scrubbed of the secrets in play before it leaves this module.
 */
#ifndef KG_CREDS_H
#define KG_CREDS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/gcreds.h" /* enum creds_mode, the ADC file */
#include "policy/limits.h"

#define CREDS_DEFAULT_TOKEN_ENDPOINT "https://oauth2.googleapis.com/token"
#define CREDS_DEFAULT_IAM_ENDPOINT   "https://iamcredentials.googleapis.com"
#define CREDS_DEFAULT_METADATA_HOST  "169.254.169.254"
#define CREDS_DEFAULT_SCOPE          "https://www.googleapis.com/auth/cloud-platform"

struct creds_config {
	enum creds_mode mode;
	const char *service_account; /* service-account:EMAIL */
	const char *token_endpoint;  /* NULL: the key file's token_uri, else Google's */
	const char *iam_endpoint;    /* NULL: the impersonation URL of the ADC file, else Google's */
	const char *metadata_host;   /* the host's metadata server (server and service-account
				      * modes without ADC); NULL: $GCE_METADATA_HOST, else
				      * 169.254.169.254 */
	const char *project;         /* NULL: $GOOGLE_CLOUD_PROJECT, then what the credentials say */
	const char *scopes;          /* comma-separated default scopes; NULL: cloud-platform */
	/* where the ADC file's text comes from: a worker asks its master (worker/monitor_wrap.c
	 * mm_adc; its own identity cannot read the operator's file); NULL reads the file here
	 * (gcreds_adc_read) */
	char *(*read_adc)(void *arg, size_t *len, bool *absent, char *err, size_t errlen);
	void *read_adc_arg;
};

/* creds_load_ca - read $SSL_CERT_FILE (a private CA for the token endpoints) into memory, while
 * the worker may still read it (before it takes its own identity); 0 or a negative errno */
int creds_load_ca(void);

/* creds_mode - the mode c was made for */
struct creds;
enum creds_mode creds_mode(const struct creds *c);

struct creds;

/* creds_new - copies cfg; NULL on ENOMEM */
struct creds *creds_new(const struct creds_config *cfg);
void creds_free(struct creds *c);

/*
 * creds_for_call - the "credentials" object of one execute request (docs/agent-api.md), or
 * NULL when the call carries none (mode none; adc without an ADC file, which is logged once):
 *   {"mode":"adc", "adc":"<the file's text>"}
 *   {"mode":"metadata", "email", "project_id"?, "numeric_project_id"?, "universe_domain",
 *    "scopes":[...], "id_tokens":bool, "access_token"?, "token_type"?, "expires_in"?}
 * A token that cannot be minted now is left out (and logged): the emulator asks again when
 * the program wants one, and the program gets the reason. Thread-safe.
 */
json_t *creds_for_call(struct creds *c);

/*
 * creds_answer - the body of POST /token for one token_request event of the agent:
 *   {"id", "access_token", "token_type", "expires_in"} | {"id", "id_token"} |
 *   {"id", "error": sentence, "status": 403 (refused) | 404 (not possible) | 503 (try later)}
 * NULL only when the event has no integer id (nothing can be answered). Thread-safe.
 */
json_t *creds_answer(struct creds *c, json_t *event);

/* creds_wipe - overwrite every string in a credentials object or answer before it is freed */
void creds_wipe(json_t *j);

/* creds_user_fn - `user` mode's source: an access token of the session's user for scopes (the
 * comma-separated key): 0 with *token (malloc'd) and *expires_in, or a negative errno with a
 * sentence in err and the emulator's *status (403 refused, 503 try later) */
typedef int (*creds_user_fn)(void *arg, const char *scopes, char **token, long *expires_in,
			     int *status, char *err, size_t errlen);
/* creds_set_user - `user` mode: the session's signed-in user (the emulator's email) and where
 * their tokens come from (worker/monitor_wrap.c's mm_token: REQ_TOKEN to the master) */
int creds_set_user(struct creds *c, const char *email, creds_user_fn fn, void *arg);

/* ---- exposed for the unit tests ---- */

/* creds_jwt_sign - header.claims.signature, RS256 with a PEM private key (PKCS#8 or PKCS#1);
 * kid may be NULL. 0 and *out (malloc'd), or a negative errno with a sentence. */
int creds_jwt_sign(const char *pem, const char *kid, json_t *claims, char **out, char *err,
		   size_t errlen);

/* creds_jwt_payload - the decoded (unverified) claims of a JWT, or NULL */
json_t *creds_jwt_payload(const char *jwt);

/* creds_oauth_error - a sentence from a token endpoint's error answer: only its "error" and
 * "error_description" fields, printable and bounded */
void creds_oauth_error(const char *what, long status, const char *body, size_t len, char *err,
		       size_t errlen);

/* creds_scrub - replace every occurrence of each non-empty secret (NULL-terminated list) in
 * msg with "[redacted]", in place */
void creds_scrub(char *msg, size_t cap, const char *const *secrets);

#endif
