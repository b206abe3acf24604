/*
 * server.h - the agent's HTTP API (libmicrohttpd), served inside every sandbox.
 *
 * Started by agent_main() (agent/agent_main.c) for `kode-gopher agent`; the worker talks to it
 * with worker/agent_client.c. The protocol is documented in docs/agent-api.md. The server does
 * routing, the claim handshake, bearer authentication, size limits and the NDJSON stream; the
 * work itself goes through a small handler table, which agent_main fills with pipeline_execute
 * and pipeline_doc and the unit tests fill with fakes.
 */
#ifndef KG_AGENT_SERVER_H
#define KG_AGENT_SERVER_H

#include <jansson.h>
#include <stddef.h>

#include "agent/pipeline.h"
#include "policy/limits.h"

/* The header that carries the claim secret where Authorization cannot (the API server's pod
 * proxy); Authorization: Bearer works everywhere else. */
#define AGENT_SECRET_HEADER "X-Kode-Gopher-Secret"

/*
 * The work behind POST /execute and POST /doc. Each is called with the server's "busy" slot
 * held, so never concurrently with itself or the other. execute runs on a thread of its own and
 * may call progress any number of times; both return a new reference (NULL is reported to the
 * client as an internal error).
 */
struct agent_handlers {
	json_t *(*execute)(void *ctx, json_t *req, pipeline_progress_fn progress, void *pctx);
	json_t *(*doc)(void *ctx, json_t *req);
	/* POST /token: the worker's answer to a token_request of the running call (optional;
	 * NULL answers 404). 0; -ENOENT (404) when nothing waits for it; else 400 with msg. */
	int (*token)(void *ctx, json_t *answer, char *msg, size_t msglen);
	/* POST /files: list or read the session's files (optional; NULL answers 404). Takes no
	 * call slot: it only reads. A read sets *bytes (malloc'd, taken by the server): the answer
	 * is then the returned object as one line of JSON and the bytes after it, as
	 * ARTIFACTS_PIECE_TYPE (agent/artifacts.h). */
	json_t *(*files)(void *ctx, json_t *req, unsigned char **bytes, size_t *nbytes);
	void *ctx;
};

struct agent_server_options {
	const char *listen;              /* "unix:/path/agent.sock" or "tcp:HOST:PORT" (port 0 ok) */
	struct agent_handlers handlers;
	size_t max_body;                 /* 0: AGENT_MAX_BODY */
	int heartbeat_ms;                /* 0: AGENT_HEARTBEAT_MS */
};

struct agent_server;

/*
 * agent_server_start - bind, listen and serve on MHD's own threads.
 * A unix socket is created with mode 0600 (a stale socket at the path is replaced; any other
 * file there is an error). Returns 0 and *out, or a negative errno with a sentence in err.
 */
int agent_server_start(const struct agent_server_options *opt, struct agent_server **out,
		       char *err, size_t errlen);

/*
 * agent_server_event - push one event object (stolen) onto the stream of the running
 * /execute; pctx is the progress context its handler was given. Used for token_request events
 * of the metadata emulator, which must reach the worker however much progress is queued.
 */
void agent_server_event(void *pctx, json_t *ev);

/* agent_server_port - the bound TCP port (useful with tcp:HOST:0), 0 for a unix socket */
int agent_server_port(const struct agent_server *s);

/*
 * agent_server_stop - stop accepting, end open /execute streams without their result (the
 * client sees the connection drop), wait for a running handler to return, unlink the unix
 * socket, free. NULL is a no-op.
 */
void agent_server_stop(struct agent_server *s);

#endif
