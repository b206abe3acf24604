/*
 * limits.h - the named limits of supervision, the worker contract and every outgoing request,
 * each with its unit (Dovecot names its settings; so do we). Read by the master, the worker,
 * the agent, the jail (policy/), the log (ipc/log.c) and lib/ (runproc.c, gcreds.c,
 * http_client.h): a timeout, cap, poll interval or backoff is named here once, not in its
 * file. Macros only, so any folder may include it.
 */
#ifndef KG_POLICY_LIMITS_H
#define KG_POLICY_LIMITS_H

/* A worker that has not said HELLO this long after it was started is killed. */
#define WORKER_HELLO_TIMEOUT_MS 10000
/* a worker's dial that comes while the master is still starting it waits this long at most for
 * its pid (master/channel.c) */
#define CHANNEL_SPAWN_WAIT_MS 2000
#define CHANNEL_SPAWN_POLL_MS 1 /* how often that dial looks again */

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
#define SANDBOX_CGROUP_RM_POLL_MS 5          /* how often that wait tries the removal again */
#define SANDBOX_PROBE_CGROUP_RM_WAIT_MS 100  /* the same wait for the start-up probe's jail */

/* Workers started ahead of need (the shared server's warm pool) run their start-up at this nice
 * value, as root, and get 0 back when a session takes them. */
#define WORKER_PRESTART_NICE 10
/* the shared server's main loop, which routes every session's messages, runs ahead of the
 * rest when serve is root (master/pool.c); the children it starts get their own nice values */
#define POOL_LOOP_NICE (-5)
/* the threads that start the shared server's workers and sandboxes (directories, lock, CPU
 * group, the spawn: master/later.c) run below the main loop, level with the jails */
#define SPAWNER_NICE 0

/* --credentials user: REQ_TOKEN requests one worker may make, a burst and then per minute
 * (the worker caches tokens; the master's answer is refused above this, not the worker ended). */
#define WORKER_TOKEN_BURST 20
#define WORKER_TOKEN_PER_MINUTE 30

/* ---- the master ---- */

/* The longest a request over HTTP waits for its worker's answer; an initialize, for the
 * session's first answer. */
#define HTTP_WAIT_S 3600
#define HTTP_INIT_WAIT_S 60
#define HTTP_INIT_TRIES 3 /* workers a new session's initialize may go to (one died first) */
/* The shared server's main loop wakes at least this often (a worker's end, a drain) even with
 * no message, and a shutdown looks this often whether its ending workers are gone. */
#define POOL_TICK_MS 250
#define POOL_END_POLL_MS 20

/* One log line (ipc/log.c), the time and the function's name included: longer is cut. The
 * rate limit: a call site writes LOG_BURST_LINES per LOG_WINDOW_S, then is counted; a process
 * writes at most LOG_PROCESS_LINES_PER_S; LOG_SITES call sites are tracked. */
#define LOG_LINE_MAX_BYTES 2048
#define LOG_WINDOW_S            10
#define LOG_BURST_LINES         20
#define LOG_PROCESS_LINES_PER_S 200
#define LOG_SITES               128

/* A sandbox's jail (policy/jail.c): its descriptors and largest file (rlimits), its /tmp
 * tmpfs (a mount option), and the defaults of --memory and --pids. */
#define JAIL_NOFILE 4096
#define JAIL_FSIZE_BYTES (1ull << 30)
#define JAIL_TMP_SIZE "1g"
#define JAIL_DEFAULT_MEMORY_BYTES (4ll << 30)
#define JAIL_DEFAULT_PIDS 512 /* jail's and serve's --help say "default 512" (4 GiB / 4g for memory) */

/* A sandbox's disk (policy/volume.c): LOOP_CONFIGURE refused as busy is tried this often, the
 * pause doubling from 1 ms up to the MAX (about 1.7 s in all); the volume list read at most. */
#define VOLUME_LOOP_TRIES 32
#define VOLUME_LOOP_PAUSE_MAX_MS 64
#define VOLUME_LIST_MAX_BYTES 65536

/* After a failed removal of a released sandbox, the wait before the one retry. */
#define SANDBOX_RM_RETRY_MS 100

/* The kubeconfig and files it names; an exec credential plugin's run and output; the deletion
 * of a dead worker's SandboxClaim. */
#define KC_MAX_FILE_BYTES (4u * 1024 * 1024)
#define KC_EXEC_TIMEOUT_S 60
#define KC_EXEC_MAX_OUT_BYTES (1u * 1024 * 1024) /* its stdout (the ExecCredential); more: killed */
#define KC_EXEC_MAX_ERR_BYTES (64u * 1024)       /* its stderr, for our log; more: killed */
#define KC_EXEC_GRACE_MS 2000                    /* after SIGTERM at the deadline, before SIGKILL */
#define KC_EXEC_LOG_LINES 20                     /* lines of its stderr we log */
#define KC_EXEC_LOG_LINE_CHARS 300               /* bytes of each line we log */
#define KC_DELETE_TIMEOUT_MS 15000

/* ---- the Google credentials settings (lib/gcreds.c) ---- */
#define GCREDS_MAX_ADC_BYTES   (64 * 1024) /* an ADC file larger than this is refused */
#define GCREDS_MAX_EMAIL_BYTES 256         /* service-account:EMAIL's email */

/* ---- the worker's outgoing requests ---- */

/* To its sandbox's agent: connecting, claiming it, a documentation lookup and its answer, a
 * token the agent's metadata emulator asked for. */
#define AC_CONNECT_TIMEOUT_MS 10000L
#define AC_CLAIM_TIMEOUT_MS 15000L
#define AC_DOC_TIMEOUT_MS 120000L
#define AC_DOC_MAX_ANSWER_BYTES (8u * 1024 * 1024)
#define AC_TOKEN_TIMEOUT_MS 10000L
/* TCP keep-alive to an agent reached over TCP (idle, then between probes), and the receive
 * buffer for a /files read */
#define AC_KEEPALIVE_IDLE_S 30L
#define AC_KEEPALIVE_INTVL_S 10L
#define AC_READ_BUFFER_BYTES (512L * 1024)
#define AC_BUSY_POLL_MS 50 /* a sandbox busy with an earlier call is asked again this often */
/* A call's end (worker/call.c) is looked for in steps of this while a session waits for it. */
#define CALL_END_POLL_MS 10

/* Test mode (go test): the -run, -skip and -bench patterns and -count, checked by the worker
 * (its tool schema, worker/tools.c) and again by the agent (agent/pipeline.c). */
#define TEST_PATTERN_MAX_BYTES 256
#define TEST_COUNT_MAX 100

/* To token endpoints (Google's, a service account's, IAM): an answer, the whole request,
 * connecting. */
#define CR_HTTP_MAX_BYTES (1u << 20)
#define CR_TIMEOUT_MS 30000L
#define CR_CONNECT_TIMEOUT_MS 10000L
#define CR_HTTP_MAX_HEADERS 4 /* extra header lines one token request sends */

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


/* ---- every outgoing request (lib/http_client.c) ---- */
#define HTTP_WANT_HEADERS_MAX 4 /* answer headers one request may ask to be handed back */

/* ---- the master's Kubernetes backend (master/sandbox_kube.c): one API call, a deletion, and
 * each request a worker's relay forwards ---- */
#define KB_CALL_MS 15000
#define KB_DELETE_MS 15000
#define KB_RELAY_MAX_HEAD_BYTES 16384           /* a relayed request's line and headers */
#define KB_RELAY_MAX_BODY_BYTES (8u * 1024 * 1024 + 4096) /* the agent's own limit, and a little */
#define KB_RELAY_READ_TIMEOUT_S 30       /* for the request to arrive */
#define KB_RELAY_CONNECT_MS 10000
#define KB_RELAY_STALL_S 90              /* the agent sends a heartbeat every 10 s */
#define KB_RELAY_KEEPALIVE_S 60          /* TCP keep-alive probes to the pod (idle, interval) */
#define KB_CONFLICT_BACKOFF_MS 100       /* a 409 Conflict is tried again after this, doubling */

/* ---- the master's Kubernetes API client (master/kube_api.c): connecting, an answer ---- */
#define KUBE_CONNECT_TIMEOUT_MS 10000
#define KUBE_MAX_ANSWER_BYTES (8u * 1024 * 1024)

/* ---- sign-in (master/oidc.c, master/jwt.c, master/tls.c) ---- */
#define OIDC_CLIENT_FILE_MAX_BYTES (64 * 1024)
#define JWT_MAX_KEY_BYTES 1024 /* an RSA modulus of 8192 bits */
#define TLS_MAX_CHAIN 8

/* ---- the worker's credentials (worker/creds.c) ---- */
#define CR_CACHE        8        /* tokens kept per kind */
#define CR_FAIL_HOLD_S  5.0      /* a failed mint is answered from memory this long */
#define CR_KEY_MAX_BYTES      1200
#define CR_LIFETIME_S     3600     /* seconds asked for, and assumed when an answer omits it */
#define CR_MAX_SCOPES   32
#define CR_MAX_FIELD_BYTES    512

/* ---- the agent's pipeline (agent/pipeline.c, agent/gobuild.c) ---- */
#define PL_GRACE_MS        2000
#define PL_RESULT_MAX_BYTES      (16 * 1024 * 1024)
/* deepest nesting of a returned value (kodeGopherMaxDepth in runtime/main.go.tmpl) */
#define PL_RESULT_MAX_DEPTH 512
#define PL_DISK_RESERVE_MIN_BYTES (8ll << 20)   /* a standard-library build's binary, twice */
#define PL_DISK_RESERVE_MAX_BYTES (256ll << 20)
#define PL_CRASH_MAX_BYTES       (256 * 1024)
#define PL_STACK_MAX_BYTES       (64 * 1024)
#define PL_MAX_ENV_VARS         256
#define PL_DOC_MAX_PKG_CHARS     256
#define PL_DOC_MAX_SYM_CHARS     128
#define GOBUILD_MAX_MODFILE_BYTES (16 * 1024 * 1024)
#define GOBUILD_DOC_TIMEOUT_MS 60000
#define GOBUILD_GRACE_MS 2000

/* ---- child processes run by lib/runproc.c (the agent's, the master's credential plugin) ---- */
#define RUNPROC_DEFAULT_CAP_BYTES (1024 * 1024) /* of stdout and of stderr, when a run names none */
/* After a run, how long we wait for its process group's leftovers to be reaped. */
#define RUNPROC_REAP_WAIT_MS 3000
/* After the main child is gone and its group killed, how long we still wait for pipe EOF: a
 * process that escaped the group with setsid could hold the pipe open forever. */
#define RUNPROC_DRAIN_MS 1000
/* Poll interval when pidfd_open is unavailable (old kernel or a seccomp filter refusing it). */
#define RUNPROC_TICK_MS 20

/* ---- the agent's HTTP server (agent/server.c) and metadata emulator (agent/metadata_server.c)
 * ---- */
#define SRV_STREAM_BLOCK_BYTES     (64 * 1024)
#define SRV_PROGRESS_QUEUE_BYTES   (4u * 1024 * 1024) /* queued progress bytes before we drop some */
#define SRV_POLL_MS          250                /* how often a blocked reader looks at "stopping" */
#define SRV_CONN_LIMIT       32
#define SRV_CONN_TIMEOUT_S   120
#define SRV_PHASE_MAX_BYTES        64
#define SRV_MESSAGE_MAX_BYTES      2048
/* Live output lines (log events) of one call: at most this many lines and bytes are streamed,
 * and at most SRV_LOG_LINES_PER_S lines a second after a burst of SRV_LOG_BURST_LINES; lines
 * past the rate are dropped (and counted), and after SRV_LOG_SEEN_MAX lines in all the call's
 * children are not watched any more. The result keeps its own head and tail of the output either way. */
#define SRV_LOG_MAX_LINES    2000
#define SRV_LOG_MAX_BYTES    (256u * 1024)
#define SRV_LOG_LINES_PER_S         100
#define SRV_LOG_BURST_LINES        200
#define SRV_LOG_SEEN_MAX     20000
#define MS_CONN_LIMIT     32
#define MS_CONN_TIMEOUT_S 60
#define MS_ERROR_MAX_BYTES      512

/* ---- sign-in's authorization server (master/auth.c, master/usertoken.c) ---- */
/* lifetimes */
#define AUTH_ACCESS_TOKEN_S 1800        /* an access token kode-gopher mints (30 min) */
#define AUTH_REFRESH_TOKEN_S (14 * 86400) /* a refresh token, rotated on every use */
#define AUTH_CODE_S 60                  /* an authorization code, used once */
#define AUTH_PENDING_S 600              /* a sign-in between /authorize and the provider's answer */
#define AUTH_CLOCK_SKEW_S 60            /* tolerated difference to the provider's clock */
#define AUTH_JWKS_REFRESH_MIN_S 60      /* an unknown key id refetches the JWKS at most this often */

/* bounded tables (each full table drops its oldest entry, see auth.c for which) */
#define AUTH_MAX_CLIENTS 256            /* registered clients (RFC 7591) */
#define AUTH_MAX_REDIRECT_URIS 8        /* per client */
#define AUTH_MAX_URI_BYTES 512          /* a redirect URI, a state, a client name */
#define AUTH_MAX_PENDING 512            /* sign-ins waiting for the provider */
#define AUTH_MAX_CODES 512              /* authorization codes not yet redeemed */
#define AUTH_MAX_GRANTS 4096            /* refresh-token families (one per sign-in) */
#define AUTH_MAX_CIMD 128               /* client metadata documents cached */

/* Client ID Metadata Documents: a client_id that is an https:// URL is fetched from there */
#define AUTH_CIMD_MAX_BYTES (5 * 1024)  /* a document (the draft's suggested cap) */
#define AUTH_CIMD_TIMEOUT_MS 5000
#define AUTH_CIMD_CACHE_S 3600          /* a document is refetched after this long, unless its
					 * Cache-Control says otherwise, within: */
#define AUTH_CIMD_MIN_CACHE_S 60        /* (no-store too: a fetch per request is an amplifier) */
#define AUTH_CIMD_MAX_CACHE_S 86400

/* the resource server: users signed out by the server whose earlier access tokens are refused
 * (an entry lives as long as such a token), and the cache of verified access tokens (entries,
 * and the longest token it holds) */
#define AUTH_MAX_REVOKED 256
#define AUTH_TOKEN_CACHE 64
#define AUTH_TOKEN_CACHE_BYTES 1024

/* sizes of untrusted input */
#define AUTH_MAX_FORM_BYTES (16 * 1024) /* a token request's form, a registration's JSON */
#define AUTH_MAX_JWT_BYTES (16 * 1024)  /* a bearer token or an ID token */
#define AUTH_FETCH_MAX_BYTES (256 * 1024) /* a document fetched from the provider */
#define AUTH_FETCH_TIMEOUT_MS 10000
#define AUTH_USER_MAX 256               /* an email address (254) and its NUL */
#define AUTH_PKCE_VERIFIER_MIN 43       /* RFC 7636 */
#define AUTH_PKCE_VERIFIER_MAX 128

/* ---- the worker's session: its queue, a call's live output and cancel (worker/) ---- */
/* Tool calls waiting behind the running one: past either limit a call gets a JSON-RPC error at
 * once instead of joining the queue (the same over stdio and HTTP). */
#define WORKER_MAX_QUEUED_CALLS 16
#define WORKER_MAX_QUEUED_BYTES (16u * 1024 * 1024) /* the queued calls' messages, in all */

/* What a client sees of a running call (worker/call.c): a progress heartbeat after CALL_HEARTBEAT_MS
 * without one (the agent beats every second, so the gap stays under 5 s), and at most
 * CALL_LOG_MAX_LINES / CALL_LOG_MAX_BYTES of log lines, CALL_LOG_RATE a second after a burst
 * of CALL_LOG_BURST, each cut at CALL_LOG_LINE_MAX bytes. */
#define CALL_HEARTBEAT_MS 3000
#define CALL_LOG_MAX_LINES 2000
#define CALL_LOG_MAX_BYTES (256u * 1024)
#define CALL_LOG_RATE 100
#define CALL_LOG_BURST 200
#define CALL_LOG_LINE_MAX 1024
/* A cancel that reaches the agent before the call did is sent again, this often. */
#define CALL_CANCEL_TRIES 100
#define CALL_CANCEL_RETRY_MS 20
/* At the session's end, how long the worker waits for a cancelled call to stop. */
#define WORKER_STOP_CALL_WAIT_MS 2000

/* worker/monitor_wrap.c: how long a request to the master is waited for, by kind */
#define MM_TOKEN_WAIT_MS 20000 /* the master may ask the sign-in provider first (10 s at most) */
#define MM_QUOTA_WAIT_MS 60000
#define MM_ADC_WAIT_MS 30000
#define MM_SANDBOX_WAIT_MS 60000

/* The worker's credentials (worker/creds.c): $SSL_CERT_FILE's size, and the life a cached token
 * must still have to be handed out (else it is minted anew). */
#define CREDS_MAX_CA_FILE            (4 * 1024 * 1024)
#define CREDS_REFRESH_MARGIN         300

/* ---- the shared server (master/http.c, master/pool.c) ---- */
/* Limits of the HTTP transport and its sessions (docs/shared-server.md). The ones an operator
 * may change are serve flags; their defaults are here. */
#define HTTP_HEADER_TIMEOUT_S 10          /* a connection silent this long before its request
					   * headers are in is closed (slow-header clients) */
#define HTTP_REQUEST_TIMEOUT_S 300        /* inactivity allowed once a request is being served */
#define HTTP_KEEPALIVE_TIMEOUT_S 30       /* an idle kept-alive connection between requests */
#define HTTP_MAX_CONNECTIONS 512          /* open connections (one thread each) in all */
#define HTTP_MAX_CONNECTIONS_PER_PEER 64  /* --max-connections-per-peer default: open connections
					   * from one peer address (slow-header clients) */
#define HTTP_WORKER_WAIT_S 30             /* a new session waits this long for a starting worker */
#define HTTP_RETRY_AFTER_MAX_S 600        /* the longest Retry-After we suggest */
#define HTTP_MALLOC_MMAP_BYTES (128u * 1024) /* blocks this large are mmapped (freed at once) */
#define HTTP_MAX_INIT_BYTES (1024u * 1024) /* a POST without a session (an initialize) */
#define SESSION_MAX_WAITING_REQUESTS 64   /* requests of one session waiting for its worker */
#define SESSION_MAX_WAITING_BYTES (32u * 1024 * 1024) /* their bodies, in all */
#define SERVE_MAX_SESSIONS_PER_PEER 32    /* --max-sessions-per-peer default */
#define HTTP_EVICT_MIN_IDLE_S 30          /* a session never used, idle this long, may give its
					   * worker to a new one (less with a short
					   * --unused-session-timeout: a quarter of it) */
#define SERVE_UNUSED_SESSION_TIMEOUT_S 120 /* --unused-session-timeout default */
#define SERVE_SESSION_TIMEOUT_S (15 * 60)  /* --session-timeout default */
#define SERVE_MAX_SANDBOXES_PER_USER 2    /* --max-sandboxes-per-user default */
#define SERVE_CLAIM_LEASE_S (10 * 60)     /* --claim-lease default */
#define ACCT_SESSION_ID_CHARS 8           /* of a session id in the accounting log: a prefix */
#define POOL_CALL_LABELS 48               /* tool x kind counters of /metrics */
/* SSE streams of tool calls (master/http.c; docs/shared-server.md): every event has an id
 * "<stream>-<n>"; a client that lost the connection resumes with GET and Last-Event-ID while
 * the call runs, and for SSE_RESUME_WINDOW_S after it ended unread. What is kept for that is
 * bounded: the last SSE_REPLAY_EVENTS notifications and SSE_REPLAY_BYTES of them (older ones
 * go first), and the result. */
#define SSE_RETRY_MS 1000                 /* the retry: field: reconnect after this long */
#define SSE_KEEPALIVE_S 15                /* a comment line after this much silence, so neither
					   * the request timeout nor a proxy ends a quiet call */
#define SSE_REPLAY_EVENTS 512
#define SSE_REPLAY_BYTES (2u * 1024 * 1024)
#define SSE_RESUME_WINDOW_S 60

/* ---- execute_go_code's run timeout (serve --timeout, --max-timeout) ---- */
/* the run timeout of execute_go_code: its default, and the largest a call may ask for unless
 * serve --max-timeout allows more */
#define SERVE_DEFAULT_TIMEOUT_S 60
#define SERVE_MAX_TIMEOUT_S     300

/* ---- serve over stdio (master/stdio.c) ---- */
/* client lines read but not yet taken by the worker; past it stdin is not read (backpressure) */
#define STDIO_MAX_HELD_BYTES (8u * 1024 * 1024)

/* the capacity asked for stdout when it is a pipe (Linux lets any user have 1 MiB): an answer
 * with an artifact's base64 goes in with a write or two, and the client reads it without
 * waiting for this process to be scheduled again every 64 KiB */
#define STDIO_PIPE_BYTES (1024 * 1024)

/* ---- TLS files (master/tls.c) ---- */
#define TLS_MAX_FILE_BYTES (1024 * 1024) /* a PEM certificate chain or key */

/* ---- the token store (master/tokenstore.c) ---- */
#define TSTORE_MAX_BYTES (64 * 1024 * 1024) /* a store file read at start-up */
#define TSTORE_SYNC_WAIT_MS 5000            /* an answer waits at most this for its write */

/* ---- users' Google tokens (master/usertoken.c) ---- */
#define UTOK_MAX_USERS 4096        /* users whose grant is kept (the least recently used goes) */
#define UTOK_MAX_WAITING 1024      /* token requests waiting for the provider, in all */
#define UTOK_MAX_REFRESHING 16     /* refreshes at the provider at once */
#define UTOK_MIN_LEFT_S 360        /* a kept access token with less life is refreshed first
				    * (the worker's own margin, CREDS_REFRESH_MARGIN, plus a minute) */

/* ---- the worker's agent client (worker/agent_client.c) ---- */
/* An /execute stream that carries no byte for this long is a dead sandbox (the agent sends a
 * heartbeat every 10 s while a call runs). */
#define AGENT_CLIENT_STALL_S 60
/* After a cancel, how long the stream may take to end by itself (the agent kills the run at
 * POST /cancel and sends its result) before the client cuts it. */
#define AGENT_CLIENT_CANCEL_GRACE_MS 3000
/* Answer size limits: the result line of /execute, and any other answer or event line. */
#define AGENT_CLIENT_MAX_RESULT (32u * 1024 * 1024)
#define AGENT_CLIENT_MAX_LINE   (64u * 1024)
/* The request body limit the agent enforces (AGENT_MAX_BODY in agent/server.h). */
#define AGENT_CLIENT_MAX_BODY   (8u * 1024 * 1024)

/* ---- compiler diagnostics (agent/diag.c) ---- */
#define DIAG_MAX_ITEMS   100
#define DIAG_MAX_MESSAGE 4096

/* ---- the direct build path (agent/fastbuild.c) ---- */
#define FASTBUILD_MAX_PLANS     16                /* import sets remembered (LRU) */
#define FASTBUILD_MAX_PACKAGES  8192              /* packagefile lines in one importcfg */
#define FASTBUILD_MAX_CFG_BYTES (4 * 1024 * 1024) /* one importcfg file */
#define FASTBUILD_MAX_IMPORTS   1024              /* distinct imports of one main package */

/* ---- go build, get and tidy (agent/gobuild.c) ---- */
#define GOBUILD_TIMEOUT_MS   (5 * 60 * 1000)   /* build, get, tidy: each */
#define GOBUILD_OUTPUT_CAP   (64 * 1024)       /* compiler output kept */
#define GOBUILD_CACHE_MAX    16                /* binaries kept in state_dir/bin (LRU) */
#define GOBUILD_MAX_MISSING  64                /* import paths resolved in one go get */

/* ---- test mode (agent/gotest.c) ---- */
#define GOTEST_MAX_TESTS        2000          /* listed in `tests`; beyond, only counted */
#define GOTEST_TEST_OUTPUT_CAP  (16 * 1024)   /* a test's own output kept (head) */
#define GOTEST_PKG_OUTPUT_CAP   (16 * 1024)   /* a package's output outside any test */
#define GOTEST_EVENTS_CAP       (16 * 1024 * 1024) /* test2json output read of one package */
#define GOTEST_LINE_MAX         (256 * 1024)  /* a longer event line is dropped */

/* ---- the sandbox's metadata server (agent/metadata.c) ---- */
#define METADATA_MAX_TARGET   4096  /* request-target bytes (path and query) */
#define METADATA_MAX_PARAMS   32    /* query parameters looked at */
#define METADATA_MAX_SCOPES   32    /* scopes in one ?scopes= or in the default set */
#define METADATA_MAX_SCOPE    256   /* bytes of one scope */
#define METADATA_MAX_FIELD    512   /* email, project id, universe domain, audience */
#define METADATA_MAX_TOKEN    8192  /* bytes of one access or ID token */
#define METADATA_MAX_TOKENS   8     /* access tokens cached per run, one per scope set */
/* A cached access token with less than this many seconds left is fetched anew: the Go auth
 * library treats a token within 225 s of its expiry as unusable, and would otherwise ask for
 * the same soon-to-expire token on every API call. */
#define METADATA_MIN_LIFETIME 240
/* How long a request waits for the worker's answer to a token_request. */
#define METADATA_FETCH_TIMEOUT_MS 30000
/* Token requests in flight at once (more wait for a free slot or get 503). */
#define METADATA_MAX_PENDING 8

/* ---- the normalizer (agent/normalize.c) ---- */
#define NORM_MAX_FILES      64
#define NORM_MAX_FILE_BYTES (1024 * 1024)       /* one file */
#define NORM_MAX_TOTAL_BYTES (4 * 1024 * 1024)  /* all files together */
#define NORM_MAX_PATH       256

/* ---- the agent's HTTP server (agent/server.c) ---- */
/* Largest request body the server reads; larger ones get 413. */
#define AGENT_MAX_BODY (8u * 1024 * 1024)
/* Secrets handed over by POST /claim: this many visible ASCII characters. */
#define AGENT_SECRET_MIN 32
#define AGENT_SECRET_MAX 256
/* How often an idle /execute stream carries {"event":"heartbeat"}, so the client can tell a
 * long build from a dead sandbox, and the worker can send its client progress heartbeats
 * (worker/call.c) while a build or a run is silent. */
#define AGENT_HEARTBEAT_MS 1000

/* ---- the standard-library plan (agent/stdplan.c) ---- */
#define STDPLAN_MAX_BYTES (1024 * 1024)
#define STDPLAN_MAX_PKGS  2048

/* ---- sandboxes' CPU weights (policy/cgroup.c) ---- */
/* the v2 cpu.weight of each sandbox (the default of every cgroup is 100): sandboxes are peers,
 * each gets an equal share when several are busy */
#define CGROUP_CPU_WEIGHT 100
/* the v1 cpu.shares of each sandbox (the root group has 1024): sandboxes share the CPU evenly
 * among themselves, behind the server's own processes */
#define CGROUP_CPU_SHARES 512
/* a sandbox started ahead of need (the shared server's warm pool) warms up at 1/16 of a session
 * sandbox's weight, so a refill never takes the CPU from a running call; the master raises it
 * to the session's when a session takes the sandbox (cgroup_cpu_weight). A weight counts among
 * the sandboxes only (sibling groups under kode-gopher), not against the server's own processes. */
#define CGROUP_CPU_WEIGHT_PRESTART 6
#define CGROUP_CPU_SHARES_PRESTART 32

/* ---- host addresses a sandbox must not reach (policy/netif.c) ---- */
#define NETIF_MAX_HOST_ADDRS 64

/* ---- a sandbox's disk (serve --sandbox-disk default) ---- */
#define VOLUME_DEFAULT_BYTES (10ll << 30)

#endif
