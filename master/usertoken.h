/*
 * usertoken.h - `--credentials user`: the signed-in users' Google grants, which only the master
 * (the monitor) holds, and the access tokens it mints from them for a worker's REQ_TOKEN
 * (master/usertoken.c; docs/credentials.md).
 *
 * master/auth.c hands over what a sign-in brought (utok_signed_in); master/monitor.c asks for a
 * token for the user of the session whose worker asked (utok_request) and sends what can be
 * said at once; what needs the provider is answered later, from a thread of this module,
 * through the transport's deliver function, which finds the worker again by pid and session.
 */
#ifndef KG_USERTOKEN_H
#define KG_USERTOKEN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "master/master.h"
#include "policy/limits.h"

/* What a worker is told. */
struct utok_answer {
	bool ok;
	unsigned status;           /* 200; 403: sign in again, or a scope not granted; 503: later */
	char error[1024];
	char *token;               /* ok: malloc'd, wiped by utok_answer_clear */
	long expires_in;
};
void utok_answer_clear(struct utok_answer *a);

/* deliver - send a to the worker pid of session, as the answer to seq (the transport takes its
 * own lock; a worker that has gone is skipped) */
typedef void (*utok_deliver_fn)(pid_t pid, const char *session, uint32_t seq, const struct utok_answer *a);

void utok_init(utok_deliver_fn deliver);
/* utok_on_revoked - who is told that a user's Google grant is gone (master/auth.c ends their
 * refresh tokens): a hook, so that this file, below auth.c, never calls up into it */
void utok_on_revoked(void (*fn)(const char *user));
bool utok_enabled(void);
/* utok_signed_in - keep user's grant (the tokens are moved out of g) */
struct oidc_grant;
void utok_signed_in(const char *user, struct oidc_grant *g);
/* utok_scopes_ok - REQ_TOKEN's scopes as an honest worker sends them: printable, comma-separated,
 * at most 32, none empty */
bool utok_scopes_ok(const char *scopes);
/* utok_request - a token of user for scopes, for the worker pid of session, request seq: true
 * with *now filled when the answer is known at once; false when it will be delivered */
bool utok_request(pid_t pid, const char *session, uint32_t seq, const char *user, const char *scopes,
		  struct utok_answer *now);
/* utok_shutdown - wipe every grant (waits for refreshes in flight) */
void utok_shutdown(void);

#endif
