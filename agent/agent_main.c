/*
 * agent_main.c - `kode-gopher agent`: the program inside every sandbox.
 *
 * Dispatched by master/main.c (argv[0] is "agent"). In a pod it is the container's entrypoint
 * and listens on tcp:0.0.0.0:8888; in the local jail the master starts it on a unix socket in
 * the sandbox's directory. It parses its flags, prepares the directories, serves the HTTP API of
 * agent/server.c with the pipeline of agent/pipeline.c behind it, and stops on SIGTERM/SIGINT.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/metadata.h"
#include "agent/pipeline.h"
#include "agent/runproc.h"
#include "policy/seccomp.h"
#include <linux/filter.h>
#include "agent/server.h"
#include "ipc/fsutil.h"
#include "ipc/log.h"
#include "policy/cgroup.h"

#ifndef KG_RUNTIME_DIR
#define KG_RUNTIME_DIR "/var/cache/kode-gopher/runtime"
#endif

#define AM_DEFAULT_LISTEN   "tcp:0.0.0.0:8888"
#define AM_DEFAULT_APP      "/app"
#define AM_DEFAULT_STATE    "/var/lib/kode-gopher-agent"

static const char am_usage[] =
	"usage: kode-gopher agent [options]\n"
	"\n"
	"The program that runs inside every sandbox: it serves the HTTP API the worker calls\n"
	"(claim, health, execute, doc; see docs/agent-api.md), writes the model's files into the\n"
	"app directory, builds them with the Go toolchain against the warm caches, runs them, and\n"
	"answers `go doc`. It logs to stderr and stops on SIGTERM or SIGINT.\n"
	"\n"
	"options:\n"
	"  --listen ADDR       unix:/path/agent.sock (created with mode 0600) or tcp:HOST:PORT\n"
	"                      (default " AM_DEFAULT_LISTEN ")\n"
	"  --app-dir DIR       where the model's files go; wiped before every execute except\n"
	"                      DIR/persist (default " AM_DEFAULT_APP ")\n"
	"  --state-dir DIR     the agent's private state that survives wipes (default\n"
	"                      " AM_DEFAULT_STATE " with the default app dir, otherwise\n"
	"                      APP-DIR/../state)\n"
	"  --runtime-dir DIR   the lockfile and base Go caches prepared by `make runtime`\n"
	"                      (default " KG_RUNTIME_DIR ")\n"
	"  --gomodcache DIR    module cache to build with (default RUNTIME-DIR/gomodcache)\n"
	"  --gocache DIR       build cache to build with (default RUNTIME-DIR/gocache)\n"
	"  --go PATH           the go command (default: go from PATH)\n"
	"  --log-level LEVEL   debug, info, warn, error or off (default info)\n"
	"  --max-timeout SECONDS  largest run timeout a call may ask for (default 300)\n"
	"  --memory-limit BYTES, --pids-limit N, --disk-limit BYTES\n"
	"                      the sandbox's limits, named in results a limit ended\n"
	"  --help              print this text\n";

static int am_sig_pipe[2] = { -1, -1 };
static volatile sig_atomic_t am_sig_count;

/* am_on_signal - note the signal and wake the main loop; a second one ends us at once */
static void am_on_signal(int sig)
{
	if (am_sig_count++ > 0)
		_exit(128 + sig);
	int saved = errno;
	char c = (char)sig;
	ssize_t w = write(am_sig_pipe[1], &c, 1);
	(void)w;
	errno = saved;
}

/* am_mkdirs - create dir and its parents (mode applies to the last one); it must be a dir */
static int am_mkdirs(const char *dir, mode_t mode)
{
	int r = fs_mkdir_p(dir, mode);
	if (r)
		return r;
	struct stat st;
	if (stat(dir, &st) != 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* am_execute - the /execute handler: the pipeline with this agent's configuration */
static json_t *am_execute(void *ctx, json_t *req, pipeline_progress_fn progress, void *pctx)
{
	return pipeline_execute(ctx, req, progress, pctx);
}

/* am_token - the /token handler: a token the metadata emulator asked the worker for */
static int am_token(void *ctx, json_t *answer, char *msg, size_t msglen)
{
	const struct pipeline_config *cfg = ctx;
	return metadata_server_deliver(cfg->metadata, answer, msg, msglen);
}

/* am_doc - the /doc handler */
static json_t *am_doc(void *ctx, json_t *req)
{
	return pipeline_doc(ctx, req);
}

/* am_files - the /files handler */
static json_t *am_files(void *ctx, json_t *req, unsigned char **bytes, size_t *nbytes)
{
	return pipeline_files(ctx, req, bytes, nbytes);
}

/* am_default_state - the state dir: fixed in a pod, beside the app dir elsewhere */
static int am_default_state(const char *app_dir, char *out, size_t cap)
{
	if (strcmp(app_dir, AM_DEFAULT_APP) == 0)
		return snprintf(out, cap, "%s", AM_DEFAULT_STATE) < (int)cap ? 0 : -ENAMETOOLONG;
	char parent[PATH_MAX];
	if (snprintf(parent, sizeof(parent), "%s", app_dir) >= (int)sizeof(parent))
		return -ENAMETOOLONG;
	size_t n = strlen(parent);
	while (n > 1 && parent[n - 1] == '/')
		parent[--n] = '\0';
	char *slash = strrchr(parent, '/');
	if (!slash)
		snprintf(parent, sizeof(parent), ".");
	else if (slash == parent)
		parent[1] = '\0';
	else
		*slash = '\0';
	return snprintf(out, cap, "%s%sstate", parent, parent[strlen(parent) - 1] == '/' ? "" : "/")
			< (int)cap ? 0 : -ENAMETOOLONG;
}

/* agent_main - `kode-gopher agent` */
/* am_isolation - the user's programs in namespaces of their own (agent/runproc.h): the agent's
 * socket hidden, the state (binaries, go.mod, credentials) and the Go caches read-only but for
 * the run directory the result is written to, a /tmp of each run's own */
static void am_isolation(const char *listen, const char *app_dir, const char *state_dir,
			 const char *runtime_dir, const char *modcache, const char *gocache)
{
	static char sockdir[PATH_MAX], rundir[PATH_MAX], mod[PATH_MAX], gc[PATH_MAX];
	struct runproc_isolation iso = { 0 };
	if (strncmp(listen, "unix:", 5) == 0 && strlen(listen + 5) < sizeof(sockdir)) {
		strcpy(sockdir, listen + 5);
		char *slash = strrchr(sockdir, '/');
		if (slash && slash != sockdir) {
			*slash = '\0';
			iso.hide[0] = sockdir;
		}
	}
	if ((size_t)snprintf(rundir, sizeof(rundir), "%s/run", state_dir) >= sizeof(rundir) ||
	    (size_t)snprintf(mod, sizeof(mod), "%s/gomodcache", runtime_dir) >= sizeof(mod) ||
	    (size_t)snprintf(gc, sizeof(gc), "%s/gocache", runtime_dir) >= sizeof(gc)) {
		log_warn("the state or runtime path is too long for the programs' namespaces");
		return;
	}
	am_mkdirs(rundir, 0700);
	iso.readonly[0] = state_dir;
	iso.readonly[1] = modcache ? modcache : mod;
	iso.readonly[2] = gocache ? gocache : gc;
	iso.writable[0] = rundir;
	/* a /tmp of each run's own, unless the agent's own directories are there (an agent run by
	 * hand with --app-dir /tmp/...): the program must still see them */
	const char *const ours[] = { app_dir, state_dir, iso.readonly[1], iso.readonly[2] };
	bool under_tmp = false;
	for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
		under_tmp |= strcmp(ours[i], "/tmp") == 0 || strncmp(ours[i], "/tmp/", 5) == 0;
	if (!under_tmp)
		iso.tmpfs[0] = "/tmp";
	int r = runproc_isolation_init(&iso);
	if (r == 0)
		log_info("programs run in namespaces of their own (pid, mount, user, ipc)");
	else
		log_warn("programs cannot have namespaces of their own here (%s): they run beside "
			 "the agent, kept from it only by the seccomp filter", strerror(-r));
}

/* am_warm - the toolchain asked ahead of the first call (pipeline_warm) */
static void *am_warm(void *pcfg)
{
	pipeline_warm(pcfg);
	return NULL;
}

/* am_oom_events - the descriptor of the sandbox's memory group's counters the jail handed us
 * ($KG_OOM_EVENTS_FD), + 1; 0: none. Close-on-exec from here on: the go command and the
 * programs have no use for it. */
static int am_oom_events(void)
{
	const char *v = getenv(CGROUP_OOM_FD_ENV);
	char *end;
	long fd = v ? strtol(v, &end, 10) : -1;
	unsetenv(CGROUP_OOM_FD_ENV);
	if (!v || *end || fd < 3 || fd > 1 << 20 || fcntl((int)fd, F_SETFD, FD_CLOEXEC) != 0)
		return 0;
	return (int)fd + 1;
}

int agent_main(int argc, char **argv)
{
	enum { OPT_LISTEN = 1, OPT_APP, OPT_STATE, OPT_RUNTIME, OPT_MODCACHE, OPT_GOCACHE, OPT_GO,
	       OPT_LOG, OPT_MAX_TIMEOUT, OPT_MEMORY, OPT_PIDS, OPT_DISK, OPT_HELP };
	static const struct option longopts[] = {
		{ "listen", required_argument, NULL, OPT_LISTEN },
		{ "app-dir", required_argument, NULL, OPT_APP },
		{ "state-dir", required_argument, NULL, OPT_STATE },
		{ "runtime-dir", required_argument, NULL, OPT_RUNTIME },
		{ "gomodcache", required_argument, NULL, OPT_MODCACHE },
		{ "gocache", required_argument, NULL, OPT_GOCACHE },
		{ "go", required_argument, NULL, OPT_GO },
		{ "log-level", required_argument, NULL, OPT_LOG },
		{ "max-timeout", required_argument, NULL, OPT_MAX_TIMEOUT },
		{ "memory-limit", required_argument, NULL, OPT_MEMORY },
		{ "pids-limit", required_argument, NULL, OPT_PIDS },
		{ "disk-limit", required_argument, NULL, OPT_DISK },
		{ "help", no_argument, NULL, OPT_HELP },
		{ NULL, 0, NULL, 0 },
	};
	const char *listen = AM_DEFAULT_LISTEN, *app_dir = AM_DEFAULT_APP, *state_dir = NULL;
	const char *runtime_dir = KG_RUNTIME_DIR, *modcache = NULL, *gocache = NULL, *go = NULL;
	enum log_level level = LOG_LVL_INFO;
	long max_timeout_s = 300;
	long long memory_limit = 0, disk_limit = 0;
	long pids_limit = 0;

	opterr = 0;
	optind = 0; /* glibc: a full re-initialization, in case someone parsed before us */
	int c;
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_LISTEN: listen = optarg; break;
		case OPT_APP: app_dir = optarg; break;
		case OPT_STATE: state_dir = optarg; break;
		case OPT_RUNTIME: runtime_dir = optarg; break;
		case OPT_MODCACHE: modcache = optarg; break;
		case OPT_GOCACHE: gocache = optarg; break;
		case OPT_GO: go = optarg; break;
		case OPT_MEMORY: memory_limit = atoll(optarg); break;
		case OPT_PIDS: pids_limit = atol(optarg); break;
		case OPT_DISK: disk_limit = atoll(optarg); break;
		case OPT_MAX_TIMEOUT:
			max_timeout_s = strtol(optarg, NULL, 10);
			if (max_timeout_s < 1 || max_timeout_s > 86400) {
				fprintf(stderr, "kode-gopher agent: --max-timeout wants seconds from 1 "
					"to 86400\n");
				return 2;
			}
			break;
		case OPT_LOG:
			if (log_parse_level(optarg, &level) < 0) {
				fprintf(stderr, "kode-gopher agent: --log-level %s: expected debug, info, "
					"warn, error or off\n", optarg);
				return 2;
			}
			break;
		case 'h':
		case OPT_HELP:
			fputs(am_usage, stdout);
			return 0;
		default:
			if (optopt > ' ' && optopt < 127)
				fprintf(stderr, "kode-gopher agent: option -%c is unknown or needs a "
					"value; see `kode-gopher agent --help`\n", optopt);
			else
				fprintf(stderr, "kode-gopher agent: %s is unknown or needs a value; see "
					"`kode-gopher agent --help`\n", argv[optind - 1]);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kode-gopher agent: unexpected argument \"%s\"; see "
			"`kode-gopher agent --help`\n", argv[optind]);
		return 2;
	}
	log_init("agent", level);

	char state_buf[PATH_MAX];
	if (!state_dir) {
		if (am_default_state(app_dir, state_buf, sizeof(state_buf)) < 0) {
			log_error("--app-dir %s is too long", app_dir);
			return 1;
		}
		state_dir = state_buf;
	}
	int r;
	if ((r = am_mkdirs(app_dir, 0755)) < 0) {
		log_error("cannot create the app directory %s: %s", app_dir, strerror(-r));
		return 1;
	}
	if ((r = am_mkdirs(state_dir, 0700)) < 0) {
		log_error("cannot create the state directory %s: %s", state_dir, strerror(-r));
		return 1;
	}
	char lock[PATH_MAX];
	snprintf(lock, sizeof(lock), "%s/lock/go.mod", runtime_dir);
	if (access(lock, R_OK) != 0)
		log_warn("%s is missing: builds will fail until the runtime is prepared "
			 "(`make runtime`, or --runtime-dir)", lock);

	struct pipeline_config pcfg = {
		.app_dir = app_dir,
		.state_dir = state_dir,
		.runtime_dir = runtime_dir,
		.gomodcache_dir = modcache,
		.gocache_dir = gocache,
		.go_bin = go,
		.default_timeout_ms = 60000,
		.max_timeout_ms = (int)max_timeout_s * 1000,
		.memory_limit = memory_limit,
		.disk_limit = disk_limit,
		.pids_limit = (int)pids_limit,
		.oom_events = am_oom_events(),
		.output_cap = 1024 * 1024,
		.doc_cap = 64 * 1024,
	};
	/* the user's programs run as our uid: not dumpable, our /proc/PID/mem and friends are out
	 * of their reach (and so is ptrace, which seccomp refuses anyway) */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	/* user programs may not signal the agent, the sandbox's init, or everyone */
	static struct sock_fprog user_filter;
	if (seccomp_user_prepare((int)getpid(), &user_filter) == 0)
		pcfg.user_filter = &user_filter;
	else
		log_warn("cannot compile the user programs' seccomp filter; running without it");
	am_isolation(listen, app_dir, state_dir, runtime_dir, modcache, gocache);

	/* the metadata-server emulator, listening only while a run with metadata credentials
	 * goes on (docs/credentials.md) */
	pcfg.metadata = metadata_server_new();
	pcfg.event = agent_server_event;
	if (!pcfg.metadata) {
		log_error("out of memory");
		return 1;
	}

	if (pipe2(am_sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		log_error("cannot create the signal pipe: %s", strerror(errno));
		return 1;
	}
	struct sigaction sa = { .sa_handler = am_on_signal, .sa_flags = SA_RESTART };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct agent_server_options opt = {
		.listen = listen,
		.handlers = { .execute = am_execute, .doc = am_doc, .token = am_token, .files = am_files, .ctx = &pcfg },
	};
	struct agent_server *srv = NULL;
	char err[512];
	if ((r = agent_server_start(&opt, &srv, err, sizeof(err))) < 0) {
		log_error("%s", err);
		close(am_sig_pipe[0]);
		close(am_sig_pipe[1]);
		return 1;
	}
	log_info("app %s, state %s, runtime %s", app_dir, state_dir, runtime_dir);
	pthread_t warm;
	if (pthread_create(&warm, NULL, am_warm, &pcfg) == 0)
		pthread_detach(warm);

	struct pollfd pfd = { .fd = am_sig_pipe[0], .events = POLLIN };
	char sig = 0;
	for (;;) {
		int n = poll(&pfd, 1, -1);
		if (n < 0 && errno != EINTR) {
			log_error("poll: %s", strerror(errno));
			break;
		}
		if (n > 0 && read(am_sig_pipe[0], &sig, 1) == 1)
			break;
	}
	log_info("stopping on %s", sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "error");
	agent_server_stop(srv);
	metadata_server_free(pcfg.metadata);
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	close(am_sig_pipe[0]);
	close(am_sig_pipe[1]);
	return 0;
}
