/*
 * exec.c - `kode-gopher exec` and `kode-gopher sandboxes`.
 *
 * exec runs Go files once through exactly the path a model's call takes: it starts
 * `kode-gopher serve` as a child, speaks MCP to it over a pipe (initialize, one tools/call),
 * prints the result and exits 0 when the result is ok. sandboxes lists and removes the sandboxes
 * that exec --keep and serve --persistent leave behind.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "master/stdio.h"

static const char exec_usage[] =
	"usage: kode-gopher exec [options] FILE... | -\n"
	"\n"
	"Build and run Go code once, through the same worker and sandbox path as a model's\n"
	"execute_go_code call, and print the result. One file (or - for stdin) is sent as `code`;\n"
	"several are sent as `files` with the paths given (a subdirectory is a helper package,\n"
	"imported as \"app/<dir>\"). The exit status is 0 when the result is ok, 1 when it is not,\n"
	"2 on a usage or server error.\n"
	"\n"
	"options:\n"
	"  --json                print the result JSON instead of a summary\n"
	"  --timeout SECONDS     run timeout (default 60)\n"
	"  --keep                keep the sandbox afterwards and print its name\n"
	"  --claim NAME          run in a kept sandbox (its /app/persist and caches)\n"
	"  --log-level LEVEL     server log level on stderr (default warn)\n"
	"  --runtime-dir DIR     the precompiled Go caches (default " KG_RUNTIME_DIR ")\n"
	"  --sandbox-root DIR    where sandboxes live\n"
	"  --sandbox-network on|none, --sandbox-memory SIZE, --sandbox-pids N\n"
	"                        sandbox limits, as for serve\n"
	"  --credentials MODE    the program's Google credentials, as for serve (default adc)\n"
	"  --backend kubernetes  run in a sandbox pod claimed from a warm pool; with\n"
	"                        --kubeconfig, --context, --namespace, --warm-pool,\n"
	"                        --agent-access, --agent-port, --claim-lease, --claim-ready-timeout\n"
	"                        as for serve (--keep leaves the SandboxClaim, without a lease)\n"
	"  -h, --help            this text\n"
	"\n"
	"examples:\n"
	"  kode-gopher exec snippet.go\n"
	"  echo 'package main; import \"fmt\"; func main() { fmt.Println(42) }' | kode-gopher exec -\n"
	"  kode-gopher exec --keep --json main.go util/util.go\n";

/* read_all - a whole file (or stdin for "-"), bounded */
static char *read_all(const char *path, size_t *len)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 65536, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		if (n == cap && (cap *= 2) > MCP_MAX_MESSAGE) {
			free(buf);
			buf = NULL;
			errno = EFBIG;
			break;
		}
		char *nb = n == cap ? buf : realloc(buf, cap);
		if (!nb) {
			free(buf);
			buf = NULL;
			break;
		}
		buf = nb;
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	if (f != stdin)
		fclose(f);
	if (buf) {
		buf[n < cap ? n : cap - 1] = '\0';
		*len = n;
	}
	return buf;
}

/* exec_send - one JSON-RPC message to the server */
static int exec_send(FILE *to, json_t *msg)
{
	int r = json_dumpf(msg, to, JSON_COMPACT);
	json_decref(msg);
	fputc('\n', to);
	return r == 0 && fflush(to) == 0 ? 0 : -EPIPE;
}

/* exec_read - the next message with the given id; progress goes to stderr on the way */
static json_t *exec_read(FILE *from, int id, bool show_progress)
{
	char *line = NULL;
	size_t cap = 0;
	json_t *found = NULL;
	while (!found && getline(&line, &cap, from) > 0) {
		json_t *m = json_loads(line, JSON_ALLOW_NUL, NULL);
		if (!m)
			continue;
		json_t *jid = json_object_get(m, "id");
		const char *method = json_string_value(json_object_get(m, "method"));
		if (jid && json_integer_value(jid) == id)
			found = m;
		else {
			if (show_progress && method && strcmp(method, "notifications/progress") == 0)
				fprintf(stderr, "… %s\n",
					json_string_value(json_object_get(json_object_get(m, "params"), "message")));
			json_decref(m);
		}
	}
	free(line);
	return found;
}

/* exec_print_summary - what a person wants to see of a result */
static void exec_print_summary(json_t *sc)
{
	json_t *res = json_object_get(sc, "result");
	const char *phase = json_string_value(json_object_get(sc, "phase"));
	const char *kind = json_string_value(json_object_get(res, "kind"));
	const char *mode = json_string_value(json_object_get(sc, "mode"));
	printf("%s: %s%s%s", phase ? phase : "?", kind ? kind : "?", mode ? " (" : "", mode ? mode : "");
	printf("%s  build %lld ms%s, run %lld ms", mode ? ")" : "",
	       json_integer_value(json_object_get(sc, "build_ms")),
	       json_is_true(json_object_get(sc, "cached_build")) ? " (cached)" :
	       json_is_true(json_object_get(sc, "tidied")) ? " (tidied)" : "",
	       json_integer_value(json_object_get(sc, "duration_ms")));
	if (json_is_integer(json_object_get(sc, "exit_code")))
		printf(", exit %lld", json_integer_value(json_object_get(sc, "exit_code")));
	printf("\n");
	json_t *v = json_object_get(res, "value");
	if (v) {
		char *t = json_dumps(v, JSON_INDENT(2) | JSON_ENCODE_ANY);
		printf("value: %s\n", t ? t : "?");
		free(t);
	}
	const char *msg = json_string_value(json_object_get(res, "message"));
	if (msg)
		printf("message: %s\n", msg);
	const char *stack = json_string_value(json_object_get(res, "stack"));
	if (stack)
		printf("stack:\n%s\n", stack);
	json_t *diags = json_object_get(sc, "diagnostics");
	size_t i;
	json_t *d;
	json_array_foreach(diags, i, d)
		printf("%s:%lld:%lld: %s\n", json_string_value(json_object_get(d, "file")),
		       json_integer_value(json_object_get(d, "line")),
		       json_integer_value(json_object_get(d, "column")),
		       json_string_value(json_object_get(d, "message")));
	const char *out = json_string_value(json_object_get(sc, "stdout"));
	const char *err = json_string_value(json_object_get(sc, "stderr"));
	if (out && *out)
		printf("--- stdout ---\n%s%s", out, out[strlen(out) - 1] == '\n' ? "" : "\n");
	if (err && *err)
		printf("--- stderr ---\n%s%s", err, err[strlen(err) - 1] == '\n' ? "" : "\n");
}

/* exec_args - the tool call's arguments from the files on the command line */
static json_t *exec_args(int n, char **paths, int timeout_s)
{
	json_t *args = json_object();
	if (timeout_s > 0)
		json_object_set_new(args, "timeout_seconds", json_integer(timeout_s));
	json_t *files = json_array();
	for (int i = 0; i < n; i++) {
		size_t len = 0;
		char *content = read_all(paths[i], &len);
		if (!content) {
			fprintf(stderr, "kode-gopher exec: cannot read %s: %s\n", paths[i], strerror(errno));
			json_decref(files);
			json_decref(args);
			return NULL;
		}
		const char *p = paths[i];
		while (p[0] == '.' && p[1] == '/')
			p += 2;
		json_array_append_new(files, json_pack("{s:s, s:s%}", "path", strcmp(p, "-") == 0 ? "main.go" : p,
						       "content", content, len));
		free(content);
	}
	if (n == 1) {
		json_object_set(args, "code", json_object_get(json_array_get(files, 0), "content"));
		json_decref(files);
	} else {
		json_object_set_new(args, "files", files);
	}
	return args;
}

int exec_main(int argc, char **argv)
{
	struct serve_config cfg;
	serve_config_defaults(&cfg);
	cfg.log_level = LOG_LVL_WARN;
	bool as_json = false, keep = false;
	int timeout_s = 0;
	static const struct option opts[] = {
		{ "json", no_argument, 0, 'j' },           { "keep", no_argument, 0, 'k' },
		{ "claim", required_argument, 0, 0 },      { "timeout", required_argument, 0, 't' },
		{ "log-level", required_argument, 0, 0 },  { "runtime-dir", required_argument, 0, 0 },
		{ "sandbox-root", required_argument, 0, 0 }, { "help", no_argument, 0, 'h' },
		{ "sandbox-network", required_argument, 0, 0 }, { "sandbox-memory", required_argument, 0, 0 },
		{ "sandbox-pids", required_argument, 0, 0 }, { "credentials", required_argument, 0, 0 },
		{ "claim-lease", required_argument, 0, 0 }, SERVE_KUBE_OPTIONS,
		{ 0, 0, 0, 0 }
	};
	/* the Kubernetes settings go to the server as they came */
	const char *kube_args[24];
	int nkube = 0;
	int c, idx;
	while ((c = getopt_long(argc, argv, "h", opts, &idx)) != -1) {
		switch (c) {
		case 'j': as_json = true; break;
		case 'k': keep = true; break;
		case 't':
			if (serve_parse_int("--timeout", optarg, 1, 86400, &timeout_s))
				return 2;
			break;
		case 'h': fputs(exec_usage, stdout); return 0;
		case 0:
			if (serve_config_option(&cfg, opts[idx].name, optarg) > 0) {
				static char names[24][32];
				if (idx >= 12 && nkube < 24) { /* claim-lease and SERVE_KUBE_OPTIONS */
					int k = nkube / 2;
					snprintf(names[k], sizeof(names[0]), "--%s", opts[idx].name);
					kube_args[nkube] = names[k];
					kube_args[nkube + 1] = optarg;
					nkube += 2;
				}
				break;
			}
			/* fall through */
		default: fputs(exec_usage, stderr); return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "kode-gopher exec: name at least one Go file, or - for stdin\n\n%s", exec_usage);
		return 2;
	}
	json_t *args = exec_args(argc - optind, argv + optind, timeout_s);
	if (!args)
		return 2;

	/* the server, as an MCP client would start it */
	int to_srv[2], from_srv[2];
	if (pipe2(to_srv, O_CLOEXEC) || pipe2(from_srv, O_CLOEXEC))
		return 2;
	static const char *const lv[] = { "debug", "info", "warn", "error", "off" };
	char mem[32], pids[16];
	snprintf(mem, sizeof(mem), "%lld", cfg.memory);
	snprintf(pids, sizeof(pids), "%d", cfg.pids);
	const char *sargv[48] = { "kode-gopher", "serve", "--log-level", lv[cfg.log_level], "--runtime-dir",
				  cfg.runtime_dir, "--sandbox-root", cfg.sandbox_root, "--sandbox-network",
				  cfg.network ? "on" : "none", "--sandbox-memory", mem, "--sandbox-pids", pids };
	int na = 14;
	if (keep)
		sargv[na++] = "--persistent";
	if (cfg.credentials) {
		sargv[na++] = "--credentials";
		sargv[na++] = cfg.credentials;
	}
	if (cfg.claim) {
		sargv[na++] = "--claim";
		sargv[na++] = cfg.claim;
	}
	for (int i = 0; i < nkube; i++)
		sargv[na++] = kube_args[i];
	char tmo[16];
	if (timeout_s > 0) {
		snprintf(tmo, sizeof(tmo), "%d", timeout_s > 300 ? timeout_s : 300);
		sargv[na++] = "--max-timeout";
		sargv[na++] = tmo;
	}
	sargv[na] = NULL;
	pid_t pid = fork();
	if (pid < 0)
		return 2;
	if (pid == 0) {
		dup2(to_srv[0], STDIN_FILENO);
		dup2(from_srv[1], STDOUT_FILENO);
		execv("/proc/self/exe", (char **)sargv);
		_exit(127);
	}
	close(to_srv[0]);
	close(from_srv[1]);
	signal(SIGPIPE, SIG_IGN);
	FILE *to = fdopen(to_srv[1], "w"), *from = fdopen(from_srv[0], "r");
	bool progress = !as_json && isatty(STDERR_FILENO);
	int status = 2;
	json_t *resp = NULL;
	if (exec_send(to, json_pack("{s:s, s:i, s:s, s:{s:s, s:{}, s:{s:s, s:s}}}", "jsonrpc", "2.0",
				    "id", 1, "method", "initialize", "params", "protocolVersion",
				    "2025-11-25", "capabilities", "clientInfo", "name", "kode-gopher exec",
				    "version", KG_VERSION)) == 0 &&
	    (resp = exec_read(from, 1, false)) != NULL && json_object_get(resp, "result") &&
	    exec_send(to, json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method", "notifications/initialized")) == 0 &&
	    exec_send(to, json_pack("{s:s, s:i, s:s, s:{s:s, s:O, s:{s:s}}}", "jsonrpc", "2.0", "id", 2,
				    "method", "tools/call", "params", "name", "execute_go_code",
				    "arguments", args, "_meta", "progressToken", "exec")) == 0) {
		json_decref(resp);
		resp = exec_read(from, 2, progress);
		json_t *result = json_object_get(resp, "result");
		json_t *sc = json_object_get(result, "structuredContent");
		if (sc) {
			if (as_json) {
				json_dumpf(sc, stdout, JSON_INDENT(2));
				putchar('\n');
			} else {
				exec_print_summary(sc);
			}
			status = json_is_true(json_object_get(result, "isError")) ? 1 : 0;
			const char *kept = json_string_value(json_object_get(sc, "sandbox"));
			if (keep && cfg.kubernetes)
				fprintf(stderr, "kept SandboxClaim %s, without a lease (reattach with "
					"--claim %s; remove with `kubectl delete sandboxclaim %s%s%s`)\n",
					kept, kept, kept, cfg.kube_namespace ? " -n " : "",
					cfg.kube_namespace ? cfg.kube_namespace : "");
			else if (keep)
				fprintf(stderr, "kept sandbox %s (reattach with --claim %s; remove with "
					"`kode-gopher sandboxes rm %s`)\n", kept, kept, kept);
		} else if (result) {
			const char *t = json_string_value(json_object_get(json_array_get(json_object_get(result, "content"), 0), "text"));
			fprintf(stderr, "kode-gopher exec: %s\n", t ? t : "the call failed");
			status = 1;
		} else {
			const char *m = json_string_value(json_object_get(json_object_get(resp, "error"), "message"));
			fprintf(stderr, "kode-gopher exec: %s\n", m ? m : "the server ended without an answer");
		}
	} else {
		fprintf(stderr, "kode-gopher exec: the server did not start (see the messages above)\n");
	}
	json_decref(resp);
	json_decref(args);
	fclose(to); /* stdin EOF: the server releases the sandbox (unless kept) and exits */
	int ws;
	waitpid(pid, &ws, 0);
	fclose(from);
	return status;
}

/* ---- kode-gopher sandboxes ---- */

static const char sandboxes_usage[] =
	"usage: kode-gopher sandboxes list | rm NAME... [--sandbox-root DIR]\n"
	"\n"
	"List or remove the sandboxes kept by `exec --keep` and `serve --persistent`.\n";

int sandboxes_main(int argc, char **argv)
{
	struct serve_config cfg;
	serve_config_defaults(&cfg);
	const char *root = cfg.sandbox_root;
	int first = 1;
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		fputs(sandboxes_usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--sandbox-root") == 0)
			root = argv[i + 1];
	if (strcmp(argv[1], "list") == 0) {
		DIR *d = opendir(root);
		if (!d)
			return 0; /* none yet */
		struct dirent *e;
		while ((e = readdir(d)) != NULL) {
			if (e->d_name[0] == '.')
				continue;
			char p[PATH_MAX];
			struct stat st;
			snprintf(p, sizeof(p), "%s/%s/app/persist", root, e->d_name);
			bool live = false;
			char sock[PATH_MAX];
			snprintf(sock, sizeof(sock), "%s/%s/agent.sock", root, e->d_name);
			live = access(sock, F_OK) == 0;
			printf("%s\t%s\t%s\n", e->d_name, stat(p, &st) == 0 ? "has-persist" : "-",
			       live ? "in-use" : "idle");
		}
		closedir(d);
		return 0;
	}
	if (strcmp(argv[1], "rm") == 0) {
		int rc = 0;
		for (int i = first + 1; i < argc; i++) {
			if (strcmp(argv[i], "--sandbox-root") == 0) {
				i++;
				continue;
			}
			if (strchr(argv[i], '/') || argv[i][0] == '.') {
				fprintf(stderr, "kode-gopher sandboxes: \"%s\" is not a sandbox name\n", argv[i]);
				rc = 1;
				continue;
			}
			int dfd = open(root, O_RDONLY | O_DIRECTORY);
			int r = dfd < 0 ? -errno : sandbox_local_rm_tree(dfd, argv[i]);
			if (dfd >= 0)
				close(dfd);
			if (r != 0) {
				fprintf(stderr, "kode-gopher sandboxes: cannot remove %s: %s\n", argv[i], strerror(-r));
				rc = 1;
			} else {
				printf("removed %s\n", argv[i]);
			}
		}
		return rc;
	}
	fputs(sandboxes_usage, stderr);
	return 2;
}
