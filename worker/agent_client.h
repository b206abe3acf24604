/*
 * agent_client.h - the worker's client for the agent's HTTP API (lib/http_client.c).
 *
 * Called by the worker's sandbox backends (local jail: unix socket; Kubernetes: pod IP) to
 * claim a sandbox, check its health, and make execute and doc calls. The protocol is in
 * docs/agent-api.md; the server is agent/server.c.
 *
 * The process must call http_global_init() once before the first call (the worker's main does,
 * before it starts any thread). Each call is a request of its own, never installs signal
 * handlers, and may run on any thread.
 *
 * Errors are negative errno values with a sentence in err:
 *   -ENOENT, -ECONNREFUSED, -EHOSTUNREACH   nobody listens there: the sandbox is gone
 *   -EPIPE        the sandbox stopped responding in the middle of the call (reset, EOF before
 *                 the answer was complete, no byte for AGENT_CLIENT_STALL_S seconds)
 *   -ETIMEDOUT    no answer within the call's deadline (connect, health, claim, doc)
 *   -ECANCELED    *cancel became nonzero
 *   -EBUSY        409: another call is still running in the sandbox
 *   -EALREADY     409 on claim: someone else claimed this sandbox
 *   -EACCES       401: the secret is missing or wrong
 *   -EMSGSIZE     the request is over the agent's 8 MiB limit (checked here, or 413)
 *   -EINVAL       400: the agent rejected the request; err carries its sentence
 *   -ESRCH        404: no such endpoint, or (POST /token) no token request waits for that id
 *   -EPROTO       an answer that does not follow the protocol
 *   -EIO, -ENOMEM anything else
 * agent_client_gone() says which of these mean "claim a fresh sandbox and retry once".
 */
#ifndef KG_AGENT_CLIENT_H
#define KG_AGENT_CLIENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include "policy/limits.h"

struct agent_endpoint {
	const char *unix_path;  /* non-NULL: connect to this unix socket */
	const char *base_url;   /* "http://localhost" with unix_path (NULL means that), or
				 * "http://10.0.0.5:8888", or the pod proxy's URL; no trailing slash */
	char secret[65];        /* hex, set by agent_client_claim; "" sends no Authorization */
	/* unix_path is the master's relay to a Kubernetes sandbox (master/sandbox_kube.c): its
	 * 502/503, and the API server's own Status answers it passes on, mean the pod is gone */
	bool relay;
};

/* agent_client_claim - generate a 256-bit secret (RAND_bytes, hex) into ep->secret and
 * POST /claim it. */
int agent_client_claim(struct agent_endpoint *ep, char *err, size_t errlen);

/* agent_client_health - GET /health within timeout_ms; 0 if the agent answers {"ok":true} */
int agent_client_health(const struct agent_endpoint *ep, int timeout_ms, char *err,
			size_t errlen);

/* agent_client_wait_idle - poll /health until the agent is not busy (after a cancelled call the
 * run goes on in the sandbox); 0, -ETIMEDOUT after timeout_ms, or a health error */
int agent_client_wait_idle(const struct agent_endpoint *ep, int timeout_ms, char *err,
			   size_t errlen);

typedef void (*agent_progress_fn)(void *ctx, const char *phase, const char *message);

/*
 * agent_client_execute - POST /execute and follow its NDJSON stream.
 *   req:      the pipeline_execute request ({"files":[...], "timeout_ms"?, "env"?})
 *   progress: called on this thread for each progress event (may be NULL)
 *   cancel:   nonzero ends the call with -ECANCELED if the stream has not ended by itself
 *             AGENT_CLIENT_CANCEL_GRACE_MS after it was seen (the caller sends POST /cancel,
 *             agent_client_cancel, from another thread). May be NULL.
 * Returns 0 and *result (a new reference to the result object), or a negative errno above.
 */
int agent_client_execute(const struct agent_endpoint *ep, json_t *req, agent_progress_fn progress,
			 void *ctx, volatile int *cancel, json_t **result, char *err,
			 size_t errlen);

/* Called on the execute thread for each token_request event the agent's metadata emulator
 * sends during a run (answer with agent_client_token from another thread, since this one is
 * busy reading the stream), each heartbeat, and each log event (checked: "phase", "stream" and
 * "text" are strings). event is borrowed. */
typedef void (*agent_event_fn)(void *ctx, json_t *event);

/* agent_client_execute_ev - agent_client_execute with token requests handed to on_event */
int agent_client_execute_ev(const struct agent_endpoint *ep, json_t *req,
			    agent_progress_fn progress, void *ctx, agent_event_fn on_event,
			    void *ectx, volatile int *cancel, json_t **result, char *err,
			    size_t errlen);

/*
 * agent_client_read_stream - what agent_client_execute_ev makes of the body of a 200 /execute
 * answer, without the transfer: the bytes as they arrived (npieces pieces of len[i] bytes),
 * every line checked and acted on as in a call (progress, on_event), one result at the end.
 * Returns 0 and *result, or -EPROTO, -ENOMEM, or -EPIPE (no result) with a sentence in err.
 * The transfer calls the same code piece by piece; this entry is for tests/fuzz/ and tests/unit/.
 */
int agent_client_read_stream(const char *const *piece, const size_t *len, size_t npieces,
			     agent_progress_fn progress, void *ctx, agent_event_fn on_event,
			     void *ectx, json_t **result, char *err, size_t errlen);

/* agent_client_token - POST /token {"id",...}: the worker's answer to a token_request; 0, or
 * -ESRCH (404: nobody waits for it any more) and the usual errors */
int agent_client_token(const struct agent_endpoint *ep, json_t *answer, char *err,
		       size_t errlen);

/* agent_client_files - POST /files {"op":"list",...}; 0 and *result = the agent's answer
 * (docs/agent-api.md; an {"error"} answer is the caller's to pass on) */
int agent_client_files(const struct agent_endpoint *ep, json_t *req, json_t **result, char *err,
		       size_t errlen);

/*
 * agent_client_read - POST /files {"op":"read", "path", "offset", "length"}: one piece of a
 * file, raw. 0 and either *head = {"error": sentence} (*bytes NULL), or *head = the piece's
 * header {path, size, media_type, offset, length, eof, text} (checked: the path and offset
 * asked for, length the number of bytes that came, at most the length asked for) and *bytes
 * (malloc'd, *nbytes of them; the caller frees both).
 */
int agent_client_read(const struct agent_endpoint *ep, const char *path, long long offset,
		      size_t length, json_t **head, unsigned char **bytes, size_t *nbytes,
		      char *err, size_t errlen);

/*
 * agent_client_read_piece - the checks of agent_client_read on an answer's body without the
 * transfer (for the unit tests and the fuzz target): ctype the answer's Content-Type; body[0..len)
 * is not changed. 0 and *head (a new reference, the header or {"error"}), and for a piece
 * *at and *n, where its bytes lie in body; -EPROTO with a sentence otherwise.
 */
int agent_client_read_piece(const char *ctype, const char *body, size_t len, const char *path,
			    long long offset, size_t length, json_t **head, size_t *at,
			    size_t *n, char *err, size_t errlen);

/* agent_client_doc - POST /doc {"package","symbol"?}; 0 and *result = the agent's answer
 * ({"ok":true,"text",...} or {"ok":false,"error"}) */
int agent_client_doc(const struct agent_endpoint *ep, json_t *req, json_t **result, char *err,
		     size_t errlen);

/* agent_client_release - POST /release with the secret: the agent is unclaimed again (its
 * /app stays), so a later session can claim it; the secret is wiped from ep */
int agent_client_release(struct agent_endpoint *ep, char *err, size_t errlen);

/* agent_client_cancel - POST /cancel: the agent kills the running call's build or program and
 * ends its stream with a "cancelled" result; 0 and *running (whether a call was running) */
int agent_client_cancel(const struct agent_endpoint *ep, bool *running, char *err, size_t errlen);

/* agent_client_gone - true for the errors that mean the sandbox is gone or unreachable */
bool agent_client_gone(int rc);

#endif
