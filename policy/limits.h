/*
 * limits.h - the named limits of supervision, the worker contract and every outgoing request,
 * each with its unit (Dovecot names its settings; so do we). Read by the master (spawn.c,
 * pool.c, stdio.c, http.c, kubecfg.c, sandbox_local.c) and the worker (main.c, agent_client.c,
 * creds.c, kube.c, sandbox_kube.c, call.c, resources.c), and the agent for what it shares with
 * the worker (artifacts.c). The agent's own limits (in agent/) move here as they are touched.
 */
#ifndef KG_POLICY_LIMITS_H
#define KG_POLICY_LIMITS_H

/* A worker that has not said HELLO this long after it was started is killed. */
#define WORKER_HELLO_TIMEOUT_MS 10000

/* A worker that dies before serving any request of a session is a start-up failure: the next
 * start waits FIRST, then twice as long after each further failure, at most MAX; the first
 * request a worker serves resets it (Postfix's throttle). */
#define WORKER_START_BACKOFF_FIRST_MS 500
#define WORKER_START_BACKOFF_MAX_MS 60000

/* How long a worker told REQ_SHUTDOWN may take to leave before it is killed: the Kubernetes
 * backend deletes its SandboxClaim on the way out. */
#define WORKER_LEAVE_LOCAL_MS 800
#define WORKER_LEAVE_KUBE_MS 6000

/* What a session's end leaves to do (reap and remove its sandbox, close its channel) is done by
 * a background thread of the master at this nice value (serving runs at 0); a shutdown drains
 * it with up to this many threads (master/later.c). */
#define LATER_NICE 10
#define LATER_DRAIN_THREADS 8
/* how long a release waits for a dead jail's processes to leave its cgroups before giving up on
 * removing them (the next start sweeps what is left): a pid namespace empties after its init
 * dies, which took over 100 ms on a slow guest */
#define SANDBOX_CGROUP_RM_WAIT_MS 3000

/* Workers started ahead of need (the shared server's warm pool) run their start-up at this nice
 * value, as root, and get 0 back when a session takes them. */
#define WORKER_PRESTART_NICE 10

/* --credentials user: REQ_TOKEN requests one worker may make, a burst and then per minute
 * (the worker caches tokens; the master's answer is refused above this, not the worker ended). */
#define WORKER_TOKEN_BURST 20
#define WORKER_TOKEN_PER_MINUTE 30

/* ---- the master ---- */

/* The longest a request over HTTP waits for its worker's answer; an initialize, for the
 * session's first answer. */
#define HTTP_WAIT_S 3600
#define HTTP_INIT_WAIT_S 60

/* After a failed removal of a released sandbox, the wait before the one retry. */
#define SANDBOX_RM_RETRY_MS 100

/* The kubeconfig and files it names; an exec credential plugin's run and output; the deletion
 * of a dead worker's SandboxClaim. */
#define KC_MAX_FILE_BYTES (4u * 1024 * 1024)
#define KC_EXEC_TIMEOUT_S 60
#define KC_EXEC_MAX_OUT_BYTES (1u * 1024 * 1024)
#define KC_DELETE_TIMEOUT_MS 15000

/* ---- the worker's outgoing requests ---- */

/* To its sandbox's agent: connecting, claiming it, a documentation lookup and its answer, a
 * token the agent's metadata emulator asked for. */
#define AC_CONNECT_TIMEOUT_MS 10000L
#define AC_CLAIM_TIMEOUT_MS 15000L
#define AC_DOC_TIMEOUT_MS 120000L
#define AC_DOC_MAX_ANSWER_BYTES (8u * 1024 * 1024)
#define AC_TOKEN_TIMEOUT_MS 10000L

/* To token endpoints (Google's, a service account's, IAM): an answer, the whole request,
 * connecting. */
#define CR_HTTP_MAX_BYTES (1u << 20)
#define CR_TIMEOUT_MS 30000L
#define CR_CONNECT_TIMEOUT_MS 10000L

/* ---- artifacts and the session's files (agent/artifacts.c, worker/call.c, worker/resources.c) ----
 * Both sides hold them: the agent picks what a result embeds, and the worker, which fetches the
 * bytes (POST /files, op read), does not embed more whatever the agent says. */
#define ARTIFACTS_MAX_COUNT 32                      /* listed in one result */
#define ARTIFACTS_EMBED_BYTES (2u * 1024 * 1024)    /* embedded in one result, all files */
#define ARTIFACTS_READ_BYTES (1024u * 1024)         /* one resources/read; a /files read's default */
#define ARTIFACTS_PAGE 100                          /* resources/list page */
#define ARTIFACTS_WALK_MAX 10000                    /* entries looked at in one walk */
#define ARTIFACTS_MAX_DEPTH 8
#define ARTIFACTS_SNIFF_BYTES 512                   /* what the media type is sniffed from */
#define ARTIFACTS_WATCH_MAX 32                      /* resources/subscribe: files per session */
/* the header line before a /files read's bytes (application/x-kode-gopher-file) */
#define ARTIFACTS_PIECE_HEAD_BYTES (16u * 1024)

/* To the Kubernetes API server: connecting, an answer; one call of the sandbox backend, and
 * the wait for the agent of a Ready pod to listen. */
#define KUBE_CONNECT_TIMEOUT_MS 10000
#define KUBE_MAX_ANSWER_BYTES (8u * 1024 * 1024)
#define KB_CALL_MS 15000
#define KB_AGENT_WAIT_MS 30000

#endif
