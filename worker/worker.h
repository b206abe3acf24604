/*
 * worker.h - one MCP session in its own process: what the worker's files share.
 *
 * Threads: the main thread reads IPC messages and answers everything that is quick (initialize,
 * ping, tools/list, cancellations); tool calls queue up and run one at a time on the call
 * thread, which talks to the sandbox's agent. The two meet only under session.mu.
 */
#ifndef KG_WORKER_H
#define KG_WORKER_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ipc/chan.h"
#include "ipc/log.h"
#include "policy/limits.h"
#include "worker/agent_client.h"
#include "worker/splice.h"

enum worker_state { WS_BEFORE_INIT, WS_READY, WS_BUSY, WS_CLOSING, WS_COUNT };

/* A call's progress goes up to CALL_PROGRESS_TOTAL (normalize 0-1, tidy and build 1-2, run or
 * test 2-3); job.cancel is CALL_CANCEL_SESSION_END when the session ends. The queue's and the
 * live output's limits are in policy/limits.h. */
#define CALL_PROGRESS_TOTAL 3
#define CALL_CANCEL_SESSION_END 2

struct mcp_batch; /* a JSON-RPC batch still gathering its answers (worker/mcp.c) */

struct job {
	uint32_t seq;        /* the REQ_MCP it came in */
	json_t *id;          /* JSON-RPC id */
	char tool[40];
	json_t *args;
	json_t *progress_token; /* NULL: the client did not ask for progress */
	volatile int cancel;  /* 1: the client cancelled it; CALL_CANCEL_SESSION_END: the session ends */
	size_t bytes;        /* the size of the message it came in, for the queue's limit */
	struct mcp_batch *batch; /* NULL, or the batch it answers into */
	bool resource;       /* resources/list or resources/read (tool holds the method): the
			      * call thread answers with a whole JSON-RPC response */
	struct splices *splices; /* base64 for the answer's placeholders (worker/splice.h) */
	struct job *next;
};

/* worker/monitor_wrap.c: one outstanding request of each kind to the master */
enum mm_kind { MM_SANDBOX, MM_QUOTA, MM_TOKEN, MM_ADC, MM_KINDS };
struct mm_req {
	uint32_t seq, ans_type;
	bool pending;              /* sent, no answer yet */
	bool answered;             /* answer in ans, not taken yet */
	struct ipc_msg ans;
};

struct session;

/* One sandbox backend as the worker sees it (worker/sandbox.c): what differs between a local
 * jail and a Kubernetes claim. Everything else is the same REQ_SANDBOX to the master and the
 * same agent client; the master does the backend's work (master/sandbox_local.c,
 * master/sandbox_kube.c). */
struct sandbox_ops {
	const char *name;          /* "local", "kubernetes" */
	bool warm;                 /* ask at start-up, while the client initializes */
	bool relay;                /* the answer's socket is the master's relay to a pod */
	int health_timeout_ms;     /* one /health try */
	int agent_wait_ms;         /* how long a fresh sandbox's agent may take to answer */
	int poll_ms;               /* between two tries */
	int (*answer_wait_ms)(const struct session *s); /* how long the master may take */
	bool (*lost)(int rc);      /* does an agent_client error mean "gone, retry in a new one"? */
	void (*end)(struct session *s); /* session end */
	void (*refused)(struct session *s, char *err, size_t errlen); /* its agent was claimed
								      * already (NULL: say so) */
};
extern const struct sandbox_ops sandbox_local_ops, sandbox_kube_ops;

/* The call thread's side of the session's sandbox. */
struct sandbox {
	const struct sandbox_ops *ops;
	bool persistent;           /* --persistent: keep it, release its agent at the end */
	int ready_s;               /* --claim-ready-timeout */
	bool quota_granted;        /* the master said yes once: the session's sandbox counts */
	bool claimed;              /* the handshake succeeded: ep is ready for calls */
	struct agent_endpoint ep;
	char path[600];            /* the answer's socket */
	/* The agent's socket, pinned once it answers (before any user code has run in the
	 * sandbox): every later connection goes to that inode through /proc/self/fd, so nothing
	 * that renames or replaces the path later (a symlink to a host socket) can redirect the
	 * session. */
	int sock_fd;               /* descriptor + 1; 0: none */
	char pinned[64];
};

struct session {
	nng_socket sock;
	char id[40];
	char user[256];            /* "" until known; the title and accounting name it */
	int default_timeout_s, max_timeout_s;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	enum worker_state state;   /* under mu */
	unsigned phase;            /* the contract's phase (IPC_PH_*), under mu */
	uint64_t seen;             /* message types received, a bit each (IPC_ONCE), under mu */
	char protocol[16];
	char client_name[64];
	int mcp_log_level;         /* index into mcp_log_levels; logging/setLevel */

	struct job *queue, *queue_tail, *running; /* under mu */

	/* the session's sandbox, as the master last answered REQ_SANDBOX */
	bool sandbox_ok;           /* under mu */
	char sandbox_socket[600];
	char sandbox_name[254];     /* a local sandbox's, or the SandboxClaim's */
	char sandbox_gone[200];     /* non-empty: the master saw the current sandbox end */
	struct sandbox sb;         /* and the call thread's side of it (worker/sandbox.c) */

	struct mm_req mm[MM_KINDS]; /* outstanding requests to the master (worker/monitor_wrap.c) */

	uint32_t out_seq;          /* seq of worker-originated messages; atomic */

	struct creds *creds;       /* the session's Google credentials (worker/creds.h) */

	/* the agent's digest of /app/persist and /app/out after the last call (call thread
	 * only): a new one means notifications/resources/list_changed */
	char files_digest[65];
	/* resources/subscribe: the watched files, path ("persist/x") -> the URI the client named,
	 * at most ARTIFACTS_WATCH_MAX (under mu; NULL until the first) */
	json_t *subscriptions;
};

/* worker/session.c: the session's state and its way to the master (calls no other file) */
int session_send(struct session *s, struct ipc_buf *b);
uint32_t session_next_seq(struct session *s);
void session_set_state(struct session *s, enum worker_state st);

/* worker/mcp.c: the JSON-RPC / MCP layer */
void mcp_handle(struct session *s, uint32_t seq, const char *msg, size_t len, bool replay);
void mcp_handle_toobig(struct session *s, uint32_t seq, const struct ipc_toobig *t);

/* worker/mcp_send.c: what goes to the client (below mcp.c and the call thread) */
#define RPC_PARSE_ERROR -32700
#define RPC_INVALID_REQUEST -32600
#define RPC_METHOD_NOT_FOUND -32601
#define RPC_INVALID_PARAMS -32602
#define RPC_INTERNAL_ERROR -32603
#define RPC_SERVER_ERROR -32000
/* RFC 5424 severities, as MCP's logging/setLevel names them, most severe first */
#define MCP_LOG_LEVELS 8
extern const char *const mcp_log_levels[MCP_LOG_LEVELS];
/* One JSON-RPC batch (protocol 2025-03-26): its answers, gathered under s->mu until every
 * element has been handled and the last of its tool calls has finished. */
struct mcp_batch {
	uint32_t seq;
	json_t *responses;   /* array */
	struct splices *splices; /* its answers' base64, chained (worker/splice.h) */
	int waiting;         /* its tool calls not answered yet */
	bool dispatched;     /* every element has been handled */
};
/* mcp_batch_send - the batch's one answer (frees b) */
void mcp_batch_send(struct session *s, struct mcp_batch *b);
/* mcp_reply - answer REQ_MCP seq with a response (steals the reference; NULL = no response) */
void mcp_reply(struct session *s, uint32_t seq, json_t *response);
json_t *mcp_error(json_t *id, int code, const char *message);
/* mcp_answer_job - a queued tool call's response (stolen; NULL: none, it was cancelled), sent
 * alone or, for a call from a batch, with the rest of the batch once its last call is done,
 * with the base64 of j->splices (taken) in place of their placeholders */
void mcp_answer_job(struct session *s, struct job *j, json_t *response);
void mcp_notify(struct session *s, uint32_t rel, const char *method, json_t *params);
/* mcp_log - a notifications/message {"stream":"server","text"} about request rel (a REQ_MCP
 * seq: it goes on that request's stream; server messages that belong to no request are not
 * sent), when the client's logging/setLevel lets the level through */
void mcp_log(struct session *s, uint32_t rel, const char *level, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* mcp_log_data - the same with structured data (stolen) */
void mcp_log_data(struct session *s, uint32_t rel, const char *level, json_t *data);
bool mcp_log_enabled(struct session *s, const char *level);

/* worker/tools.c: the tools' descriptions and argument checks */
json_t *tools_list(int max_timeout_s);
bool tools_known(const char *name);
/* tools_check_args - NULL if fine, else a sentence naming the problem (static storage) */
const char *tools_check_args(const char *name, json_t *args, int max_timeout_s, char *buf, size_t cap);
/* tools_error_result - a CallToolResult with isError for a call that did not get to run: the
 * sentence as text, and structuredContent matching the tool's outputSchema (kind names why:
 * invalid_arguments, sandbox_limit, internal_error) */
json_t *tools_error_result(const char *tool, const char *kind, const char *message, json_t *args);

/* worker/resources.c: the session's files as MCP resources (on the call thread) */
json_t *resources_templates(void);
/* resources_answer - the JSON-RPC response to a resources/list or resources/read job */
json_t *resources_answer(struct session *s, struct job *j);
/* resources_subscribe - resources/subscribe (on) or resources/unsubscribe, answered at once (the
 * main thread): a file of the session's is watched from its next execute_go_code call on */
json_t *resources_subscribe(struct session *s, json_t *id, json_t *params, bool on);
/* resources_watch - the watched paths for an execute request (a new array), NULL when none */
json_t *resources_watch(struct session *s);
/* resources_updated - notifications/resources/updated about request rel for each watched file
 * that the agent's result says changed during the call; removes "watch_changed" from res */
void resources_updated(struct session *s, uint32_t rel, json_t *res);

/* worker/call.c: the call thread */
int call_start(struct session *s);
void call_enqueue(struct session *s, struct job *j);
void call_cancel(struct session *s, json_t *request_id);
/* call_stop_running - the session ends: cancel a running call, wait up to wait_ms for it */
void call_stop_running(struct session *s, int wait_ms);
void job_free(struct job *j);

/* worker/sandbox.c: the session's sandbox, obtained from the master */
/* sandbox_init - the session's backend (worker/main.c, from its options) */
void sandbox_init(struct session *s, bool kube, bool persistent, int ready_s);
/* sandbox_start - at start-up: a backend that warms asks for its sandbox now */
void sandbox_start(struct session *s);
void sandbox_request(struct session *s, const char *op);
void sandbox_answer(struct session *s, const struct ipc_msg *m);
void sandbox_gone(struct session *s, const struct ipc_msg *m);
/* sandbox_get - wait for the sandbox and claim it; 0 or negative errno with err set */
struct agent_endpoint;
int sandbox_get(struct session *s, struct agent_endpoint **ep, char *err, size_t errlen);
/* sandbox_replace - the sandbox died: ask for a fresh one (its /app/persist starts empty) */
int sandbox_replace(struct session *s, struct agent_endpoint **ep, char *err, size_t errlen);
const char *sandbox_name(struct session *s);
/* sandbox_have - the session has a claimed sandbox already (without claiming one) */
bool sandbox_have(struct session *s);
/* sandbox_lost - does this agent_client error mean the sandbox is gone (retry in a new one)? */
bool sandbox_lost(struct session *s, int rc);
/* sandbox_end - session end: give the sandbox back (Kubernetes: delete or keep the claim) */
void sandbox_end(struct session *s);

/* worker/session.c: the process title for the current state */
void session_title(struct session *s);

/* worker/monitor_wrap.c: requests to the master */
struct ipc_buf;
int mm_send(struct session *s, enum mm_kind k, uint32_t ans_type, uint32_t seq, struct ipc_buf *b);
bool mm_outstanding(struct session *s, enum mm_kind k);
bool mm_expects(struct session *s, const struct ipc_msg *m); /* under mu */
bool mm_deliver(struct session *s, struct ipc_msg *m);
int mm_wait(struct session *s, enum mm_kind k, int timeout_ms, struct ipc_msg *ans);
/* mm_token - --credentials user: the session user's access token for scopes, from the master
 * (a creds_user_fn; arg is the session). One at a time: creds calls it under its own lock. */
int mm_token(void *arg, const char *scopes, char **token, long *expires_in, int *status, char *err,
	     size_t errlen);
/* mm_quota - call thread: may this session claim a sandbox? 0, or -EDQUOT / -EIO with err set */
int mm_quota(struct session *s, char *err, size_t errlen);
int mm_sandbox(struct session *s, const char *op);
/* mm_adc - any thread: the ADC file's text, read by the master (mon_answer_adc); malloc'd, to be
 * wiped and freed; NULL with err set (*absent: there simply is none). Fits creds_config's
 * read_adc. */
char *mm_adc(void *session, size_t *len, bool *absent, char *err, size_t errlen);

/* worker/proctitle.c */
void proctitle_init(int argc, char **argv);
void proctitle_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
