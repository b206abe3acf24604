/*
 * serve.c - `kode-gopher serve`: settings, then the transport loop.
 *
 * Over stdio (the local, single-session mode) the master relays newline-delimited JSON-RPC
 * between stdin/stdout and one worker (master/stdio.c). The settings here are also what `exec`
 * uses, since it runs the same path.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/gcreds.h"
#include "master/auth.h"
#include "master/kubecfg.h"
#include "master/master.h"
#include "master/pool.h"
#include "master/sandbox_kube.h"
#include "master/stdio.h"
#include "master/tls.h"
#include "policy/volume.h"

/* `make debug` builds with "log": a denied syscall is logged by name instead of killing */
#ifndef KG_SECCOMP_DEFAULT
#define KG_SECCOMP_DEFAULT "kill"
#endif

static const char serve_usage[] =
	"usage: kode-gopher serve [options]\n"
	"\n"
	"Serve MCP over stdio: newline-delimited JSON-RPC on stdin/stdout, logs on stderr.\n"
	"An MCP client starts this command; each serve process is one MCP session with one sandbox.\n"
	"With --http, serve Streamable HTTP on /mcp instead: one shared server, many sessions.\n"
	"\n"
	"options:\n"
	"  --log-level LEVEL       debug, info, warn, error or off (default info)\n"
	"  --runtime-dir DIR       the precompiled Go caches made by `make runtime`\n"
	"                          (default " KG_RUNTIME_DIR ")\n"
	"  --sandbox-root DIR      where sandbox directories live (default /var/lib/kode-gopher/sandboxes\n"
	"                          as root, else ~/.local/state/kode-gopher/sandboxes)\n"
	"  --timeout SECONDS       default run timeout of execute_go_code (default 60)\n"
	"  --max-timeout SECONDS   largest timeout_seconds a call may ask for (default 300)\n"
	"  --sandbox-network MODE  on (default): a network of its own per sandbox; programs reach\n"
	"                          the outside (Google's APIs) through slirp4netns, never the\n"
	"                          host's loopback or its other addresses; none: no network at\n"
	"                          all; host: the host's network, loopback included (only for one\n"
	"                          user on their own machine)\n"
	"  --sandbox-memory SIZE   memory limit of a sandbox, builds included (default 4g)\n"
	"  --sandbox-pids N        process and thread limit of a sandbox (default 512)\n"
	"  --sandbox-disk SIZE     disk limit of a sandbox: /app, /app/persist and its cache layers\n"
	"                          on a file system of their own, as root (default 10g; off: none)\n"
	"  --persistent            keep the sandbox when the session ends (reattach with --claim)\n"
	"  --claim NAME            reattach to a kept sandbox (local) or SandboxClaim (kubernetes),\n"
	"                          with its /app/persist and caches\n"
	"  --claim-lease DUR       lease of each sandbox claim, renewed while the session lives;\n"
	"                          a crashed server's claims expire after it (default 10m)\n"
	"  --seccomp MODE          the worker's syscall filter: kill (default; log in a\n"
	"                          `make debug` build), log (debugging:\n"
	"                          log a denied syscall and fail it instead of killing), off\n"
	"  --credentials MODE      the programs' Google credentials: adc (the default over stdio:\n"
	"                          your ADC file, for the run only), metadata (tokens minted from\n"
	"                          your ADC, served by a metadata-server emulator), server,\n"
	"                          service-account:EMAIL, user (the signed-in user's own token;\n"
	"                          needs --auth google), none (the default with --http)\n"
	"  --project ID            the project programs see (default $GOOGLE_CLOUD_PROJECT)\n"
	"  --scopes LIST           default OAuth scopes, comma-separated (default cloud-platform;\n"
	"                          with --credentials user, what sign-in asks users to grant)\n"
	"  --token-endpoint URL, --iam-endpoint URL, --metadata-host HOST\n"
	"                          where tokens are minted (docs/credentials.md)\n"
	"\n"
	"shared server (--http):\n"
	"  --http [ADDR]           serve Streamable HTTP at http://ADDR/mcp (default 127.0.0.1:8080),\n"
	"                          with /healthz and /metrics (Prometheus) beside it\n"
	"  --session-timeout DUR   idle sessions end and release their sandbox (default 15m)\n"
	"  --unused-session-timeout DUR  sessions that never made a tool call end sooner, so\n"
	"                          abandoned ones give their worker back (default 2m)\n"
	"  --max-sessions-per-peer N  open sessions one client address may hold; past it a new\n"
	"                          session gets 429 with Retry-After (default 32)\n"
	"  --max-connections-per-peer N  open HTTP connections one client address may hold;\n"
	"                          past it a new one is closed as it is accepted (default 64,\n"
	"                          at most 512, the limit of all connections)\n"
	"  --max-sandboxes-per-user N  open sandboxes per user (default 2)\n"
	"  --workers-min-idle N    workers (and sandboxes) started ahead of need (default 2)\n"
	"  --max-workers N         at most this many workers, so sessions (default 64); past it a\n"
	"                          new session gets 503 with Retry-After at once\n"
	"  --auth none             no sign-in: everyone is user \"local\"; loopback addresses only\n"
	"  --auth google           users sign in with Google; MCP clients get this server's own\n"
	"                          OAuth tokens (docs/deploy-for-a-team.md). With it:\n"
	"  --public-url URL        where users reach this server, like https://kg.example.com\n"
	"                          (default on a loopback address: http://ADDR:PORT)\n"
	"  --oauth-client-file F   the OAuth client JSON Google Cloud's console downloads\n"
	"  --allowed-domains LIST  Google Workspace domains whose users may sign in (the hd claim)\n"
	"  --allowed-users LIST    email addresses that may sign in (comma-separated)\n"
	"  --oidc-issuer URL       the OpenID provider (default https://accounts.google.com)\n"
	"  --oauth-ca-file FILE    CA certificates for sign-in's own requests (the provider, client\n"
	"                          metadata documents) instead of the system's\n"
	"  --client-metadata-loopback  tests only: fetch client metadata documents from this\n"
	"                          machine's loopback addresses (normally refused)\n"
	"  --token-store FILE      keep sign-ins (and --credentials user's Google grants) across\n"
	"                          restarts in FILE, encrypted; without it a restart signs\n"
	"                          everyone out\n"
	"  --token-store-key-file KEY  the store's key, readable by this user only: 32 random\n"
	"                          bytes (openssl rand -hex 32 > KEY)\n"
	"  --tls-cert FILE, --tls-key FILE  serve HTTPS: the PEM certificate chain and its key\n"
	"                          (without them, terminate TLS in a proxy in front)\n"
	"  --accounting-log PATH   JSON lines, one per call and per session end (- for stderr);\n"
	"                          its directory must exist\n"
	"  --allowed-hosts LIST    extra Host header values to accept (comma-separated)\n"
	"  --allowed-origins LIST  extra Origin values to accept (comma-separated)\n"
	"\n"
	"sandboxes in a Kubernetes cluster (agent-sandbox warm pool; docs/getting-started.md):\n"
	"  --backend NAME          local (default: a jail on this machine) or kubernetes\n"
	"  --kubeconfig PATH       default $KUBECONFIG, then ~/.kube/config, then the pod's own\n"
	"                          service account when running in a cluster\n"
	"  --context NAME          kubeconfig context (default: its current-context)\n"
	"  --namespace NS          where claims are made (default: the context's namespace, or\n"
	"                          default)\n"
	"  --warm-pool NAME        the SandboxWarmPool to claim from (default go-runtime-pool)\n"
	"  --agent-access MODE     pod-ip: reach the sandbox's agent on its pod IP (inside the\n"
	"                          cluster); proxy: through the API server's pods/proxy (from\n"
	"                          outside); auto (default): pod-ip in a cluster, else proxy\n"
	"  --agent-port N          the agent's port in the sandbox pod (default 8888)\n"
	"  --claim-ready-timeout DUR  how long a new claim may take to become Ready (default 2m)\n"
	"  -h, --help              this text\n"
	"\n"
	"DUR is a number with its unit: 90s, 15m or 2h.\n"
	"\n"
	"Register with Claude Code:\n"
	"  claude mcp add kode-gopher -- /path/to/kode-gopher serve\n";

/* serve_backend_init - with --backend kubernetes, resolve the cluster access now, so a bad
 * kubeconfig is reported at start-up rather than at the first tool call */
int serve_backend_init(struct serve_config *cfg)
{
	if (!cfg->kubernetes) {
		if (cfg->kubeconfig || cfg->kube_context || cfg->kube_namespace)
			log_warn("--kubeconfig, --context and --namespace apply to --backend kubernetes "
				 "only; ignored");
		const char *why = cfg->disk > 0 ? volume_unavailable() : NULL;
		if (why) {
			log_warn("the sandbox disk limit (--sandbox-disk %lld MiB) is not in force: %s; "
				 "sandboxes write to the host's disk under %s without a limit",
				 cfg->disk >> 20, why, cfg->sandbox_root);
			cfg->disk = 0;
		} else if (cfg->disk > 0) {
			log_debug("sandbox disk limit: %lld MiB each (a file system image per sandbox)",
				 cfg->disk >> 20);
		}
		return 0;
	}
	char err[1024];
	if (kubecfg_load(cfg, err, sizeof(err)) != 0) {
		fprintf(stderr, "kode-gopher: --backend kubernetes: %s\n", err);
		return -1;
	}
	log_info("kubernetes: %s, warm pool %s", kubecfg_describe(), cfg->warm_pool);
	return 0;
}

/* serve_default_sandbox_root - a per-user place for sandbox directories */
static const char *serve_default_sandbox_root(void)
{
	static char buf[PATH_MAX];
	if (getuid() == 0)
		return "/var/lib/kode-gopher/sandboxes";
	const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
	if (state && *state)
		snprintf(buf, sizeof(buf), "%s/kode-gopher/sandboxes", state);
	else
		snprintf(buf, sizeof(buf), "%s/.local/state/kode-gopher/sandboxes", home ? home : "/tmp");
	return buf;
}

/* serve_config_defaults - the defaults every subcommand starts from */
void serve_config_defaults(struct serve_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->log_level = LOG_LVL_INFO;
	cfg->seccomp = KG_SECCOMP_DEFAULT;
	cfg->runtime_dir = getenv("KODE_GOPHER_RUNTIME_DIR") ? getenv("KODE_GOPHER_RUNTIME_DIR")
							       : KG_RUNTIME_DIR;
	cfg->sandbox_root = getenv("KODE_GOPHER_SANDBOX_ROOT") ? getenv("KODE_GOPHER_SANDBOX_ROOT")
								 : serve_default_sandbox_root();
	cfg->default_timeout_s = SERVE_DEFAULT_TIMEOUT_S;
	cfg->max_timeout_s = SERVE_MAX_TIMEOUT_S;
	cfg->network = "on";
	cfg->memory = JAIL_DEFAULT_MEMORY_BYTES;
	cfg->pids = JAIL_DEFAULT_PIDS;
	cfg->disk = VOLUME_DEFAULT_BYTES;
	cfg->session_timeout_s = SERVE_SESSION_TIMEOUT_S;
	cfg->unused_session_timeout_s = SERVE_UNUSED_SESSION_TIMEOUT_S;
	cfg->max_sessions_per_peer = SERVE_MAX_SESSIONS_PER_PEER;
	cfg->max_connections_per_peer = HTTP_MAX_CONNECTIONS_PER_PEER;
	cfg->max_sandboxes_per_user = SERVE_MAX_SANDBOXES_PER_USER;
	cfg->claim_lease_s = SERVE_CLAIM_LEASE_S;
	cfg->workers_min_idle = 2;
	cfg->max_workers = 64;
	cfg->auth = "none";
	cfg->warm_pool = "go-runtime-pool";
	cfg->agent_access = "auto";
	cfg->agent_port = 8888;
	cfg->claim_ready_timeout_s = 120;
}

/* parse_duration - "15m", "90s" or "2h": the unit is required, since a bare number could
 * as well mean minutes as seconds */
static int parse_duration(const char *opt, const char *s, int *out)
{
	char *end;
	long v = strtol(s, &end, 10);
	int mul = *end == 'h' ? 3600 : *end == 'm' ? 60 : 1;
	if (end != s && *end == '\0' && v > 0) {
		fprintf(stderr, "kode-gopher: %s wants a duration with its unit (s, m or h), like "
			"%lds or %ldm, not \"%s\"\n", opt, v, v, s);
		return -1;
	}
	if (end == s || v <= 0 || strchr("hms", *end) == NULL || end[1] || v > 864000 / mul) {
		fprintf(stderr, "kode-gopher: %s wants a duration like 15m, 90s or 2h, not \"%s\"\n", opt, s);
		return -1;
	}
	*out = (int)v * mul;
	return 0;
}

/* parse_bytes - "512m", "4g" or plain bytes; at least 64 MiB */
static int parse_bytes(const char *s, long long *out)
{
	char *end;
	long long v = strtoll(s, &end, 10);
	int shift = 0;
	if (end != s && end[0] && !end[1]) {
		const char *units = "kmg", *u = strchr(units, end[0] | 0x20);
		if (u)
			shift = 10 * (int)(u - units + 1);
		else
			return -1;
	} else if (end == s || *end) {
		return -1;
	}
	if (v <= 0 || v > (1ll << 50) >> shift)
		return -1;
	*out = v << shift;
	return *out >= (64ll << 20) ? 0 : -1;
}

/* serve_parse_int - a positive integer option, or a clear complaint */
int serve_parse_int(const char *opt, const char *val, int min, int max, int *out)
{
	char *end;
	long v = strtol(val, &end, 10);
	if (*val == '\0' || *end != '\0' || v < min || v > max) {
		fprintf(stderr, "kode-gopher: %s wants a whole number from %d to %d, not \"%s\"\n", opt,
			min, max, val);
		return -1;
	}
	*out = (int)v;
	return 0;
}

/* serve_dns_label - a Kubernetes object name: lower-case alphanumerics, '-' and '.', at most
 * 253 characters, starting and ending alphanumeric */
bool serve_dns_label(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 253 || s[0] == '-' || s[0] == '.' || s[n - 1] == '-' || s[n - 1] == '.')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
		      s[i] == '.'))
			return false;
	return true;
}

/* serve_config_option - one shared option of serve and exec; 1 handled, 0 not ours, -1 bad */
int serve_config_option(struct serve_config *cfg, const char *name, const char *val)
{
	if (strcmp(name, "log-level") == 0) {
		if (log_parse_level(val, &cfg->log_level) != 0) {
			fprintf(stderr, "kode-gopher: --log-level wants debug, info, warn, error or off\n");
			return -1;
		}
	} else if (strcmp(name, "runtime-dir") == 0) {
		cfg->runtime_dir = val;
	} else if (strcmp(name, "sandbox-root") == 0) {
		cfg->sandbox_root = val;
	} else if (strcmp(name, "timeout") == 0) {
		return serve_parse_int("--timeout", val, 1, 86400, &cfg->default_timeout_s) ? -1 : 1;
	} else if (strcmp(name, "max-timeout") == 0) {
		return serve_parse_int("--max-timeout", val, 1, 86400, &cfg->max_timeout_s) ? -1 : 1;
	} else if (strcmp(name, "seccomp") == 0) {
		if (strcmp(val, "kill") && strcmp(val, "log") && strcmp(val, "off")) {
			fprintf(stderr, "kode-gopher: --seccomp wants kill, log or off\n");
			return -1;
		}
		cfg->seccomp = val;
	} else if (strcmp(name, "sandbox-network") == 0) {
		if (strcmp(val, "on") && strcmp(val, "host") && strcmp(val, "none")) {
			fprintf(stderr, "kode-gopher: --sandbox-network wants on, host or none\n");
			return -1;
		}
		cfg->network = val;
	} else if (strcmp(name, "sandbox-memory") == 0) {
		if (parse_bytes(val, &cfg->memory) != 0) {
			fprintf(stderr, "kode-gopher: --sandbox-memory wants a size of at least 64m, "
				"like 2g or 512m\n");
			return -1;
		}
	} else if (strcmp(name, "sandbox-disk") == 0) {
		if (strcmp(val, "off") == 0) {
			cfg->disk = 0;
		} else if (parse_bytes(val, &cfg->disk) != 0) {
			fprintf(stderr, "kode-gopher: --sandbox-disk wants a size of at least 64m, like "
				"10g or 512m, or off\n");
			return -1;
		}
	} else if (strcmp(name, "sandbox-pids") == 0) {
		return serve_parse_int("--sandbox-pids", val, 16, 1 << 20, &cfg->pids) ? -1 : 1;
	} else if (strcmp(name, "http") == 0) {
		cfg->http = val ? val : "127.0.0.1:8080";
	} else if (strcmp(name, "session-timeout") == 0) {
		return parse_duration("--session-timeout", val, &cfg->session_timeout_s) ? -1 : 1;
	} else if (strcmp(name, "unused-session-timeout") == 0) {
		return parse_duration("--unused-session-timeout", val, &cfg->unused_session_timeout_s) ? -1 : 1;
	} else if (strcmp(name, "max-sessions-per-peer") == 0) {
		return serve_parse_int("--max-sessions-per-peer", val, 1, 10000, &cfg->max_sessions_per_peer) ? -1 : 1;
	} else if (strcmp(name, "max-connections-per-peer") == 0) {
		return serve_parse_int("--max-connections-per-peer", val, 1, HTTP_MAX_CONNECTIONS,
				       &cfg->max_connections_per_peer) ? -1 : 1;
	} else if (strcmp(name, "claim-lease") == 0) {
		return parse_duration("--claim-lease", val, &cfg->claim_lease_s) ? -1 : 1;
	} else if (strcmp(name, "max-sandboxes-per-user") == 0) {
		return serve_parse_int("--max-sandboxes-per-user", val, 1, 10000, &cfg->max_sandboxes_per_user) ? -1 : 1;
	} else if (strcmp(name, "workers-min-idle") == 0) {
		return serve_parse_int("--workers-min-idle", val, 0, 1000, &cfg->workers_min_idle) ? -1 : 1;
	} else if (strcmp(name, "max-workers") == 0) {
		return serve_parse_int("--max-workers", val, 1, 10000, &cfg->max_workers) ? -1 : 1;
	} else if (strcmp(name, "auth") == 0) {
		if (strcmp(val, "none") != 0 && strcmp(val, "google") != 0) {
			fprintf(stderr, "kode-gopher: --auth wants none (loopback only) or google\n");
			return -1;
		}
		cfg->auth = val;
	} else if (strcmp(name, "accounting-log") == 0) {
		cfg->accounting_log = val;
	} else if (strcmp(name, "allowed-hosts") == 0) {
		cfg->allowed_hosts = val;
	} else if (strcmp(name, "allowed-origins") == 0) {
		cfg->allowed_origins = val;
	} else if (strcmp(name, "credentials") == 0) {
		enum creds_mode mode;
		const char *email;
		char err[256];
		if (gcreds_parse_mode(val, &mode, &email, err, sizeof(err)) != 0) {
			fprintf(stderr, "kode-gopher: %s\n", err);
			return -1;
		}
		cfg->credentials = val;
	} else if (strcmp(name, "token-endpoint") == 0 || strcmp(name, "iam-endpoint") == 0) {
		if (strncmp(val, "https://", 8) != 0 && strncmp(val, "http://", 7) != 0) {
			fprintf(stderr, "kode-gopher: --%s wants an https:// URL\n", name);
			return -1;
		}
		*(name[0] == 't' ? &cfg->token_endpoint : &cfg->iam_endpoint) = val;
	} else if (strcmp(name, "metadata-host") == 0) {
		cfg->metadata_host = val;
	} else if (strcmp(name, "project") == 0) {
		cfg->project = val;
	} else if (strcmp(name, "scopes") == 0) {
		for (const char *p = val; *p; p++)
			if (*p <= ' ' || *p > '~') {
				fprintf(stderr, "kode-gopher: --scopes wants scopes separated by commas\n");
				return -1;
			}
		cfg->scopes = val;
	} else if (strcmp(name, "backend") == 0) {
		if (strcmp(val, "local") && strcmp(val, "kubernetes")) {
			fprintf(stderr, "kode-gopher: --backend wants local or kubernetes\n");
			return -1;
		}
		cfg->kubernetes = strcmp(val, "kubernetes") == 0;
	} else if (strcmp(name, "kubeconfig") == 0) {
		cfg->kubeconfig = val;
	} else if (strcmp(name, "context") == 0) {
		cfg->kube_context = val;
	} else if (strcmp(name, "namespace") == 0) {
		if (!serve_dns_label(val)) {
			fprintf(stderr, "kode-gopher: --namespace wants a Kubernetes namespace name "
				"(lower-case letters, digits and '-'), not \"%s\"\n", val);
			return -1;
		}
		cfg->kube_namespace = val;
	} else if (strcmp(name, "warm-pool") == 0) {
		if (!serve_dns_label(val)) {
			fprintf(stderr, "kode-gopher: --warm-pool wants a SandboxWarmPool's name, not "
				"\"%s\"\n", val);
			return -1;
		}
		cfg->warm_pool = val;
	} else if (strcmp(name, "agent-access") == 0) {
		if (strcmp(val, "auto") && strcmp(val, "pod-ip") && strcmp(val, "proxy")) {
			fprintf(stderr, "kode-gopher: --agent-access wants auto, pod-ip or proxy\n");
			return -1;
		}
		cfg->agent_access = val;
	} else if (strcmp(name, "agent-port") == 0) {
		return serve_parse_int("--agent-port", val, 1, 65535, &cfg->agent_port) ? -1 : 1;
	} else if (strcmp(name, "claim-ready-timeout") == 0) {
		return parse_duration("--claim-ready-timeout", val, &cfg->claim_ready_timeout_s) ? -1 : 1;
	} else if (strcmp(name, "claim") == 0) {
		cfg->claim = val;
	} else if (strcmp(name, "persistent") == 0) {
		cfg->persistent = true;
	} else {
		int r = auth_option(cfg, name, val);
		return r ? r : tls_option(cfg, name, val);
	}
	return 1;
}

/* serve_runtime_check - local sandboxes mount the precompiled Go caches: without them every
 * sandbox would die at its first mount, far from the cause, so say it at start */
static int serve_runtime_check(const char *dir)
{
	static const char *const subdirs[] = { "gomodcache", "gocache" };
	for (size_t i = 0; i < sizeof(subdirs) / sizeof(subdirs[0]); i++) {
		char p[PATH_MAX];
		struct stat st;
		snprintf(p, sizeof(p), "%s/%s", dir, subdirs[i]);
		if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
			fprintf(stderr, "kode-gopher: no Go runtime caches in %s (%s: %s): run `make runtime` "
				"in the kode-gopher checkout to prepare them (a few minutes, once), or point "
				"--runtime-dir at them\n", dir, p, stat(p, &st) != 0 ? strerror(errno) :
				"not a directory");
			return -1;
		}
	}
	return 0;
}

/* serve_sandbox_root_check - as root each local sandbox runs as a user of its own, which must be
 * able to reach its directory: a --sandbox-root under a 0700 directory (a home, a mktemp -d)
 * would fail every sandbox with "mkdir .../root: Permission denied" from inside the jail */
static int serve_sandbox_root_check(const char *root)
{
	if (getuid() != 0 || root[0] != '/')
		return 0;
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s", root);
	for (char *slash = strrchr(p, '/'); slash; slash = strrchr(p, '/')) {
		struct stat st;
		if (slash == p)
			slash[1] = '\0';
		if (stat(p, &st) == 0 && S_ISDIR(st.st_mode) && !(st.st_mode & S_IXOTH) &&
		    strcmp(p, root) != 0) {
			fprintf(stderr, "kode-gopher: --sandbox-root %s is inside %s (mode %04o), which other "
				"users cannot enter; run as root, each sandbox is a user of its own and must "
				"reach its directory: choose a root elsewhere (the default is "
				"/var/lib/kode-gopher/sandboxes) or `chmod o+x %s`\n", root, p,
				(unsigned)(st.st_mode & 07777), p);
			return -1;
		}
		if (slash == p)
			break;
		*slash = '\0';
	}
	return 0;
}

/* serve_accounting_check - an accounting log that cannot be written is a start-up error: a
 * server that ran without the accounting its operator asked for would be found out too late */
static int serve_accounting_check(const char *path)
{
	if (strcmp(path, "off") == 0 || strcmp(path, "-") == 0)
		return 0;
	/* created 0600, as the pool opens it (docs/shared-server.md: session ids and users) */
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	int e = errno;
	const char *slash = strrchr(path, '/');
	int dirlen = slash ? (slash == path ? 1 : (int)(slash - path)) : 1;
	fprintf(stderr, "kode-gopher serve: --accounting-log %s: cannot open it for appending: %s", path,
		strerror(e));
	if (e == ENOENT)
		fprintf(stderr, " (create its directory first: `sudo install -d -o \"$USER\" %.*s`)",
			dirlen, slash ? path : ".");
	fputc('\n', stderr);
	return -1;
}

int serve_main(int argc, char **argv)
{
	struct serve_config cfg;
	serve_config_defaults(&cfg);
	static const struct option opts[] = {
		{ "log-level", required_argument, 0, 0 },   { "runtime-dir", required_argument, 0, 0 },
		{ "sandbox-root", required_argument, 0, 0 }, { "timeout", required_argument, 0, 0 },
		{ "max-timeout", required_argument, 0, 0 },  { "seccomp", required_argument, 0, 0 },
		{ "claim", required_argument, 0, 0 },        { "persistent", no_argument, 0, 0 },
		{ "sandbox-network", required_argument, 0, 0 }, { "sandbox-memory", required_argument, 0, 0 },
		{ "sandbox-pids", required_argument, 0, 0 }, { "sandbox-disk", required_argument, 0, 0 },
		{ "http", optional_argument, 0, 0 },         { "session-timeout", required_argument, 0, 0 },
		{ "unused-session-timeout", required_argument, 0, 0 },
		{ "max-sessions-per-peer", required_argument, 0, 0 },
		{ "max-connections-per-peer", required_argument, 0, 0 },
		{ "claim-lease", required_argument, 0, 0 },  { "max-sandboxes-per-user", required_argument, 0, 0 },
		{ "workers-min-idle", required_argument, 0, 0 }, { "max-workers", required_argument, 0, 0 },
		{ "auth", required_argument, 0, 0 },         { "accounting-log", required_argument, 0, 0 },
		{ "allowed-hosts", required_argument, 0, 0 }, { "allowed-origins", required_argument, 0, 0 },
		{ "credentials", required_argument, 0, 0 },  { "token-endpoint", required_argument, 0, 0 },
		{ "iam-endpoint", required_argument, 0, 0 }, { "metadata-host", required_argument, 0, 0 },
		{ "project", required_argument, 0, 0 },      { "scopes", required_argument, 0, 0 },
		SERVE_KUBE_OPTIONS, AUTH_OPTIONS, TLS_OPTIONS,
		{ "help", no_argument, 0, 'h' },             { 0, 0, 0, 0 }
	};
	int c, idx;
	if (cli_check_long("serve", argc, argv, opts) != 0)
		return 2;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, &idx)) != -1) {
		if (c == 'h') {
			fputs(serve_usage, stdout);
			return 0;
		}
		if (c == '?' || c == ':') {
			cli_bad_option("serve", opts, c, cli_word(argv, argc, optind, optopt));
			return 2;
		}
		/* --http takes an optional ADDR, also as the next word (`--http 0.0.0.0:9000`) */
		if (c == 0 && strcmp(opts[idx].name, "http") == 0 && !optarg && optind < argc &&
		    argv[optind][0] != '-')
			optarg = argv[optind++];
		if (c != 0 || serve_config_option(&cfg, opts[idx].name, optarg) <= 0)
			return 2; /* serve_config_option said what is wrong */
	}
	if (optind < argc) {
		fprintf(stderr, "kode-gopher serve: unexpected argument \"%s\" (serve takes options "
			"only; `kode-gopher serve --help` lists them)\n", argv[optind]);
		return 2;
	}
	if (cfg.default_timeout_s > cfg.max_timeout_s)
		cfg.max_timeout_s = cfg.default_timeout_s;
	if (!cfg.credentials)
		cfg.credentials = cfg.http ? "none" : "adc";
	if (cfg.http && strcmp(cfg.credentials, "adc") == 0) {
		fprintf(stderr, "kode-gopher serve: --credentials adc would hand this server's own "
			"credentials file to every user's programs; with --http use server, "
			"service-account:EMAIL, user or none\n");
		return 2;
	}
	if (auth_check_config(&cfg) != 0 || tls_check_config(&cfg) != 0)
		return 2;
	log_init("master", cfg.log_level);
	if (serve_backend_init(&cfg) != 0)
		return 2;
	if (!cfg.kubernetes && (serve_runtime_check(cfg.runtime_dir) != 0 ||
				serve_sandbox_root_check(cfg.sandbox_root) != 0))
		return 2;
	if (cfg.http && !cfg.kubernetes && (cfg.claim || cfg.persistent)) {
		fprintf(stderr, "kode-gopher serve: --%s names one kept sandbox for one session; with "
			"--http every client's session gets a sandbox of its own, so it is refused here "
			"(use it with stdio serve or exec)\n", cfg.claim ? "claim" : "persistent");
		return 2;
	}
	if (cfg.http) {
		if (!cfg.accounting_log)
			cfg.accounting_log = "off";
		if (serve_accounting_check(cfg.accounting_log) != 0)
			return 2;
		if (cfg.workers_min_idle > cfg.max_workers)
			cfg.workers_min_idle = cfg.max_workers;
	}
	/* after every check, so that a refused start is one line: what sessions killed before
	 * they could release left in the root, the limits in force, the workers' identities */
	if (!cfg.kubernetes) {
		sandbox_local_sweep(cfg.sandbox_root);
		sandbox_local_limits(&cfg);
	}
	if (cfg.http) {
		identity_init();
		int r = http_serve(&cfg);
		sandbox_kube_shutdown();
		return r;
	}
	/* someone typed `kode-gopher serve` to try it: say what it waits for */
	if (isatty(STDIN_FILENO))
		fprintf(stderr, "kode-gopher serve: waiting for MCP messages (JSON-RPC lines) on stdin; an "
			"MCP client starts this command. To run Go code from a shell, use `kode-gopher "
			"exec FILE`. Ctrl-D ends.\n");
	identity_init();
	int r = stdio_serve(&cfg);
	sandbox_kube_shutdown();
	return r;
}
