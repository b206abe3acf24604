/*
 * master.h - what the master's files share: the worker slot, the serve settings, and the
 * entry points of every subcommand (dispatched by master/main.c).
 */
#ifndef KG_MASTER_H
#define KG_MASTER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "ipc/chan.h"
#include "ipc/log.h"
#include "lib/mono.h"
#include "lib/proc.h"
#include "lib/random.h"
#include "policy/limits.h"

#define SESSION_ID_HEX 32 /* 128 random bits */

/* Settings of `serve` (and of `exec`, which runs the same path). */
struct serve_config {
	enum log_level log_level;
	const char *seccomp;      /* "kill" (default), "log", "off" */
	const char *runtime_dir;  /* base Go caches; KG_RUNTIME_DIR */
	const char *sandbox_root; /* where sandbox directories live */
	int default_timeout_s;
	int max_timeout_s;
	bool persistent;
	const char *claim;        /* --claim NAME: reattach to a kept sandbox */
	const char *network;      /* --sandbox-network on (default) | host | none */
	long long memory;         /* --sandbox-memory, bytes */
	long long disk;           /* --sandbox-disk, bytes; 0: none (off, or not possible here) */
	int pids;                 /* --sandbox-pids */
	/* the shared server (serve --http) */
	const char *http;         /* ADDR:PORT, NULL for stdio */
	int session_timeout_s;    /* idle sessions end (15 min) */
	int unused_session_timeout_s; /* ... sooner while they never made a tool call (2 min) */
	int max_sessions_per_peer; /* open sessions one client address may hold */
	int max_connections_per_peer; /* open HTTP connections one client address may hold */
	int max_sandboxes_per_user;
	int claim_lease_s;        /* passed to the backend (10 min) */
	int workers_min_idle;     /* pre-started idle workers */
	int max_workers;
	const char *auth;         /* "none" (loopback only) or "google" (master/auth.h) */
	const char *public_url, *oauth_client_file, *allowed_domains, *allowed_users, *oidc_issuer;
	const char *oauth_ca_file;  /* CAs for sign-in's outgoing requests, instead of the system's */
	bool client_metadata_loopback; /* tests: client metadata documents on this machine */
	const char *token_store, *token_store_key_file; /* sign-ins kept across restarts */
	const char *tls_cert, *tls_key; /* HTTPS served directly (master/tls.h) */
	const char *accounting_log;
	const char *allowed_hosts; /* comma-separated extra Host values */
	const char *allowed_origins; /* comma-separated extra Origin values */
	/* the programs' Google credentials, passed to each worker (docs/credentials.md) */
	const char *credentials;  /* --credentials MODE; NULL: adc over stdio, none with --http */
	const char *token_endpoint, *iam_endpoint, *metadata_host, *project, *scopes;
	/* sandboxes from a Kubernetes warm pool (--backend kubernetes; master/kubecfg.h) */
	bool kubernetes;
	const char *kubeconfig, *kube_context, *kube_namespace;
	const char *warm_pool;    /* go-runtime-pool */
	const char *agent_access; /* auto | pod-ip | proxy */
	int agent_port;           /* 8888 */
	int claim_ready_timeout_s; /* how long a claim may take to be Ready (2 min) */
};

/* One worker process and its channel (Postfix's master_proc, nginx's ngx_process_t). */
struct worker {
	pid_t pid;
	const struct serve_config *cfg;
	bool hello;               /* HELLO received: it is ready for messages */
	bool ended;               /* broke the contract and was killed (master/monitor.c) */
	uint64_t seen;            /* message types received, a bit each (IPC_ONCE) */
	int connected;            /* its channel has a live pipe (set from nng's threads; atomic) */
	int spawning;             /* being started, pid not known yet: a dial now waits (atomic) */
	nng_socket sock;
	int recv_fd;
	char ipc_path[256];
	char session[SESSION_ID_HEX + 1];
	double started;           /* monotonic seconds */
	/* its sandbox (local backend): the agent process the master started on its request */
	pid_t sandbox_pid;
	char sandbox_name[64];
	char sandbox_dir[512];
	bool sandbox_keep;
	int sandbox_lock;         /* descriptor + 1 of <dir>/lock, flocked while in use; 0: none */
	int claim_attempts;       /* --claim's sandbox tried so many times */
	/* its sandbox's start while it runs on the spawner thread (master/sandbox_local.c), under
	 * mu; the monitor ends a worker that sends REQ_SANDBOX again meanwhile */
	struct sandbox_start *sandbox_start;
	bool prestart;            /* started ahead of need, no session has taken it yet: it and
				   * its sandbox yield the CPU (spawn_prestart_done ends that) */
	pthread_mutex_t *mu;      /* the lock its transport holds while the monitor answers it
				   * (the shared server's pool.mu; NULL: stdio, exec). A sandbox
				   * start of such a worker runs on the spawner thread, which
				   * reaches the worker only under it */
	/* its SandboxClaim and agent relay (Kubernetes backend: master/sandbox_kube.c) */
	struct kb_peer *kube;
	/* its REQ_TOKEN rate (master/monitor.c) */
	double tok_allow, tok_at;
	/* its own identity on a root serve (master/identity.c): uid = gid; 0 when it has none */
	uid_t uid;
	bool id_held;             /* the worker holds a reference to uid (master/identity.c) */
};

/* Supervision shared by both transports (master/spawn.c): start-up failures throttle the next
 * start; a configuration error stops starting workers at all. */
struct spawn_throttle {
	double backoff_s;         /* 0: no failure since the last worker served a request */
	double until;             /* no start before this (monotonic seconds) */
	double logged_until;      /* one log line per interval */
	unsigned failures;        /* start-up failures since the last one logged */
	char stopped[240];        /* non-empty: why no worker will be started any more */
};

/* master/identity.c */
/* identity_init - at serve's start: may workers get identities of their own (root)? Logs what
 * it decided, and for a serve that is not root that workers share its uid. */
bool identity_init(void);
bool identity_on(void);
/* identity_base - where the runtime directories of such a serve go (0711, root's); NULL if none */
const char *identity_base(void);
/* identity_take - a free uid for worker w (w->uid, w->id_held); 0 with w->uid 0 when identities
 * are off; a negative errno when none can be had (the worker must not start then) */
int identity_take(struct worker *w);
/* identity_release - the worker is gone: drop its reference to its uid, which is given back
 * once no release of its sandboxes is under way either */
void identity_release(struct worker *w);
/* identity_ref, identity_unref - a reference to uid for a sandbox release (any thread) */
void identity_ref(uid_t uid);
void identity_unref(uid_t uid);

/* master/spawn.c */
/* spawn_ended - a worker ended (status from wait); served: it answered a request of its session;
 * on_purpose: the master ended it. Updates t: a start-up failure throttles, IPC_EXIT_CONFIG
 * stops. Returns true when it was a start-up failure or a configuration error. */
bool spawn_ended(struct spawn_throttle *t, const struct worker *w, int status, bool served,
		 bool on_purpose);
/* spawn_start_failed - fork or the channel failed: wait before the next try, as for a failure */
void spawn_start_failed(struct spawn_throttle *t);
/* spawn_served - a worker served a request: start-up is fine again */
void spawn_served(struct spawn_throttle *t);
/* spawn_may_start - not throttled and not stopped */
bool spawn_may_start(const struct spawn_throttle *t);
/* spawn_hello_overdue - started long enough ago without a HELLO to be killed */
bool spawn_hello_overdue(const struct worker *w, double now);
int spawn_runtime_dir(char *out, size_t cap);
void spawn_runtime_dir_remove(const char *dir);
int spawn_worker(struct worker *w, const struct serve_config *cfg, const char *runtime_dir,
		 unsigned n, const char *session);
/* spawn_prestart_done - a session took pre-started worker w (under the transport's lock): its
 * sandbox's weight goes up; returns what spawn_renice needs (-1: nothing to do) */
int spawn_prestart_done(struct worker *w);
/* spawn_renice - every thread of that worker back to nice 0, without the lock (slow: /proc) */
void spawn_renice(int tasks);
/* spawn_stop - ask a worker to leave, wait up to grace_ms, kill it, reap it, and let go of
 * what it held (spawn_forget: wait says whether its sandbox's release is waited for) */
void spawn_stop(struct worker *w, int grace_ms, bool wait);
/* spawn_forget - a dead worker's sandbox goes back through its backend (master/sandbox.h), a
 * release it had queued on its way out counting as asked; then its identity */
void spawn_forget(struct worker *w, bool wait);

/* master/channel.c: the master's end of one worker's channel (an nng pair1 socket, ipc/chan.h) */
/* channel_listen - listen on ipc://w->ipc_path, admitting only the pid in w->pid; 0 or -errno */
int channel_listen(struct worker *w);
/* channel_send - send to a worker; a failure means the worker is gone. A queue full of
 * messages for a live worker is waited out (up to the send timeout); a worker whose channel
 * is gone is not, so a master that holds a lock never hangs on a dead worker. */
int channel_send(struct worker *w, struct ipc_buf *b);
/* channel_live - the worker runs and has said HELLO: what channel_send checks before sending */
static inline bool channel_live(const struct worker *w)
{
	return w->pid > 0 && w->hello;
}
/* channel_send_checked - channel_send once the caller has seen, under the lock that guards w,
 * that the worker is live (channel_live): it reads only w->sock and w->connected, so it may run
 * without that lock while w cannot be reused (master/pool.c: a slot's senders) */
int channel_send_checked(struct worker *w, struct ipc_buf *b);
/* channel_close - close the socket (nng waits for its threads: up to 50 ms on a loaded host)
 * and remove its path; w must not be reused before this returns (nng's callbacks point at it) */
void channel_close(struct worker *w);

/* master/sandbox_local.c: the local backend's housekeeping (its per-worker part is
 * sandbox_local_backend, master/sandbox.h) */
/* sandbox_local_in_use - is root/name held by a live session? *holder gets its pid (or 0) */
bool sandbox_local_in_use(const char *root, const char *name, long *holder);
struct cgroup_plan;
/* sandbox_local_limits - at start-up: decide how sandboxes are limited here (cgroup v2, v1, a
 * systemd user scope or rlimits) and log one line per limit kind */
void sandbox_local_limits(const struct serve_config *cfg);
/* sandbox_local_probe - enter a sandbox's cgroups the way a jail does (`jail --cgroup-probe`)
 * and write what each limit got to out; after sandbox_local_limits. 0, or -errno / -EIO */
int sandbox_local_probe(const struct serve_config *cfg, FILE *out);
/* sandbox_local_plan - the plan sandbox_local_limits made, or NULL */
const struct cgroup_plan *sandbox_local_plan(void);
/* sandbox_local_sweep - remove what sessions that ended without releasing (killed) left in
 * root: only directories with a lock file nobody holds and no kept marker */
void sandbox_local_sweep(const char *root);

/* master/later.c: what the main loop must not wait for, on a low-priority thread of its own */
/* later_run - queue fn(arg); false if it could not be queued (then run it yourself) */
bool later_run(void (*fn)(void *), void *arg);
/* later_drain - wait until every queued job is done (in parallel when many: a shutdown) */
void later_drain(void);
/* later_spawn - queue fn(arg) for a spawner, a long-lived thread (nice SPAWNER_NICE) that
 * starts the shared server's children in order: its workers (kg-workers) or their sandboxes
 * (kg-sandboxes); false if it could not be queued (then run it yourself) */
enum later_spawner { LATER_WORKERS, LATER_SANDBOXES };
bool later_spawn(enum later_spawner which, void (*fn)(void *), void *arg);
/* later_spawn_drain - wait until the spawners have nothing left to do (a shutdown) */
void later_spawn_drain(void);

/* master/sig.c: handlers only set flags and poke a pipe */
int sig_init(void);
int sig_fd(void);
/* sig_take - returns and clears the pending flags */
unsigned sig_take(void);
#define SIG_CHLD 1u
#define SIG_TERM 2u
#define SIG_HUP 4u  /* serve --http reloads its TLS certificate; stdio ends as on SIG_TERM */

/* master/http.c: the Streamable HTTP transport (serve --http) */
int http_serve(const struct serve_config *cfg);
/* the header parsers it uses on untrusted bytes (tests/unit/test_http_headers.c, fuzz) */
bool http_origin_parse(const char *origin, char *scheme, size_t scap, char *host, size_t hcap,
		       long *port);
bool http_media_admits(const char *accept, const char *type);
bool http_content_type_json(const char *content_type);

/* master/jsonrpc.c: jsonrpc_error - a JSON-RPC error the master answers itself, malloc'd
 * compact JSON (NULL: out of memory). id: the request's id as JSON text (NULL or not JSON:
 * null); reason: error.data.reason, or NULL for none */
char *jsonrpc_error(const char *id, int code, const char *msg, const char *reason);

/* master/serve.c: settings shared by serve and exec */
int serve_backend_init(struct serve_config *cfg);
bool serve_dns_label(const char *s);
/* the Kubernetes backend's options (serve and exec) */
#define SERVE_KUBE_OPTIONS                                                                       \
	{ "backend", required_argument, 0, 0 }, { "kubeconfig", required_argument, 0, 0 },        \
	{ "context", required_argument, 0, 0 }, { "namespace", required_argument, 0, 0 },         \
	{ "warm-pool", required_argument, 0, 0 }, { "agent-access", required_argument, 0, 0 },    \
	{ "agent-port", required_argument, 0, 0 },                                               \
	{ "claim-ready-timeout", required_argument, 0, 0 }

/* master/cli.c: command-line mistakes, said in one line. Callers set opterr = 0 and start
 * getopt_long's optstring with ':' so a missing value comes back as ':' */
struct option;
const char *cli_nearest(const char *word, const struct option *opts);
void cli_bad_option(const char *cmd, const struct option *opts, int c, const char *word);
const char *cli_word(char **argv, int argc, int ind, int opt);
/* cli_check_long - every --word names one option (exactly, or by an abbreviation that fits
 * only it); 0, or -1 after saying which word is wrong */
int cli_check_long(const char *cmd, int argc, char **argv, const struct option *opts);

/* subcommands */
int serve_main(int argc, char **argv);
int exec_main(int argc, char **argv);
int worker_main(int argc, char **argv);
int agent_main(int argc, char **argv);
int jail_main(int argc, char **argv);
int sandboxes_main(int argc, char **argv);
/* master/doctor.c: `kode-gopher doctor` */
int doctor_main(int argc, char **argv);

#endif
