/*
 * exec.c - `kode-gopher exec` and `kode-gopher sandboxes`.
 *
 * exec runs Go files once through exactly the path a model's call takes: it starts
 * `kode-gopher serve` as a child, speaks MCP to it over a pipe (initialize, one tools/call),
 * prints the result the way `go run` would and exits 0 when the result is ok. sandboxes lists and removes the sandboxes
 * that exec --keep and serve --persistent leave behind.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/normalize.h"
#include "ipc/fsutil.h"
#include "lib/base64.h"
#include "master/stdio.h"
#include "policy/volume.h"
#include "lib/gcreds.h"

static const char exec_usage[] =
	"usage: kode-gopher exec [options] FILE... | DIR | -\n"
	"\n"
	"Build and run Go code once, through the same worker and sandbox path as a model's\n"
	"execute_go_code call. The files are sent with their paths relative to the directory that\n"
	"holds them all (a DIR sends every file under it): .go files there are the main package, a\n"
	"subdirectory is a helper package imported as \"app/<dir>\". - reads one file from stdin.\n"
	"\n"
	"Like `go run`: the program's stdout goes to stdout (and a snippet's returned value, as\n"
	"JSON), its stderr to stderr, then one summary line on stderr; colour only on a terminal.\n"
	"With _test.go files it runs go test instead and prints what go test prints: the failing\n"
	"tests' output, benchmark lines, and a line per package (ok, FAIL, or no test files).\n"
	"Exit status: 0 when the result is ok, 1 when it is not (the code has something to fix),\n"
	"2 on a usage error or when the server or the sandbox failed (no result, or phase internal).\n"
	"\n"
	"options:\n"
	"  --json                print the result JSON on stdout instead (artifacts' bytes\n"
	"                        included: data in base64, or text)\n"
	"  --out DIR             write the files the code left in /app/out to DIR\n"
	"  --run REGEXP, --bench REGEXP, --cover\n"
	"                        test mode (any _test.go file among the files): go test's -run,\n"
	"                        -bench and -cover\n"
	"  --timeout SECONDS     run timeout, 1 to 300 (default 60)\n"
	"  --keep                keep the sandbox afterwards and print its name\n"
	"  --claim NAME          run in a kept sandbox (its /app/persist and caches)\n"
	"  --log-level LEVEL     server log level on stderr (default warn)\n"
	"  --runtime-dir DIR     the precompiled Go caches (default " KG_RUNTIME_DIR ")\n"
	"  --sandbox-root DIR    where sandboxes live\n"
	"  --sandbox-network on|host|none, --sandbox-memory SIZE, --sandbox-pids N,\n"
	"  --sandbox-disk SIZE, --seccomp MODE\n"
	"                        as for serve\n"
	"  --credentials MODE    the program's Google credentials, as for serve (default adc when\n"
	"                        an ADC file exists, else none); with --project, --scopes,\n"
	"                        --token-endpoint, --iam-endpoint, --metadata-host\n"
	"  --backend kubernetes  run in a sandbox pod claimed from a warm pool; with\n"
	"                        --kubeconfig, --context, --namespace, --warm-pool,\n"
	"                        --agent-access, --agent-port, --claim-lease, --claim-ready-timeout\n"
	"                        as for serve (--keep leaves the SandboxClaim, without a lease)\n"
	"  -h, --help            this text\n"
	"\n"
	"examples:\n"
	"  kode-gopher exec snippet.go\n"
	"  echo 'package main; import \"fmt\"; func main() { fmt.Println(42) }' | kode-gopher exec -\n"
	"  kode-gopher exec --keep --json main.go util/util.go\n"
	"  kode-gopher exec ~/src/tool           # every file under it\n"
	"  kode-gopher exec --cover ~/src/calc   # its _test.go files: go test\n"
	"  kode-gopher exec --out charts plot.go # what plot.go writes to /app/out\n";

/* read_all - a whole file (or stdin for "-"), bounded by the largest message */
static char *read_all(const char *path, size_t *len)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 65536, n = 0;
	char *buf = malloc(cap + 1);
	while (buf) {
		if (n == cap) {
			if (cap * 2 > MCP_MAX_MESSAGE) {
				free(buf);
				buf = NULL;
				errno = EFBIG;
				break;
			}
			char *nb = realloc(buf, cap * 2 + 1);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	if (f != stdin)
		fclose(f);
	if (buf) {
		buf[n] = '\0';
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

/* exec_read - the next message with the given id; progress goes to stderr on the way, on one
 * terminal line that is rewritten and cleared at the end, so only the result stays */
static json_t *exec_read(FILE *from, int id, bool show_progress)
{
	char *line = NULL;
	size_t cap = 0;
	json_t *found = NULL;
	bool shown = false;
	while (!found && getline(&line, &cap, from) > 0) {
		json_t *m = json_loads(line, JSON_ALLOW_NUL, NULL);
		if (!m)
			continue;
		json_t *jid = json_object_get(m, "id");
		const char *method = json_string_value(json_object_get(m, "method"));
		if (jid && json_integer_value(jid) == id)
			found = m;
		else {
			const char *pm = json_string_value(json_object_get(json_object_get(m, "params"), "message"));
			if (show_progress && method && strcmp(method, "notifications/progress") == 0 && pm) {
				fprintf(stderr, "\r\033[K… %.*s", (int)strcspn(pm, "\r\n"), pm);
				fflush(stderr);
				shown = true;
			}
			json_decref(m);
		}
	}
	if (shown)
		fputs("\r\033[K", stderr);
	free(line);
	return found;
}

/* ---- the terminal output ---- */

/* exec_put - a stream as it is, with a newline after it on a terminal if it lacks one */
static void exec_put(FILE *f, const char *s)
{
	if (!s || !*s)
		return;
	fputs(s, f);
	if (s[strlen(s) - 1] != '\n' && isatty(fileno(f)))
		fputc('\n', f);
	fflush(f);
}

/* exec_color - colour on stderr only when it is a terminal that wants it (no-color.org) */
static bool exec_color(void)
{
	const char *term = getenv("TERM");
	return isatty(STDERR_FILENO) && !getenv("NO_COLOR") && !(term && strcmp(term, "dumb") == 0);
}

static void exec_print_tests(json_t *sc);

/* exec_print_summary - what a person wants to see of a result, in the order `go run` shows
 * it: the program's output, what went wrong (once), then one summary line */
static void exec_print_summary(json_t *sc)
{
	json_t *res = json_object_get(sc, "result");
	const char *phase = json_string_value(json_object_get(sc, "phase"));
	const char *kind = json_string_value(json_object_get(res, "kind"));
	const char *mode = json_string_value(json_object_get(sc, "mode"));
	const char *msg = json_string_value(json_object_get(res, "message"));
	const char *stack = json_string_value(json_object_get(res, "stack"));
	const char *out = json_string_value(json_object_get(sc, "stdout"));
	const char *err = json_string_value(json_object_get(sc, "stderr"));
	bool tested = phase && strcmp(phase, "test") == 0;
	bool ran = (phase && strcmp(phase, "run") == 0) || tested;

	if (tested)
		exec_print_tests(sc);
	else
		exec_put(stdout, out);
	json_t *v = json_object_get(res, "value");
	if (v && kind && strcmp(kind, "ok") == 0) {
		char *t = json_dumps(v, JSON_INDENT(2) | JSON_ENCODE_ANY);
		/* on its own line, even after output without a final newline */
		bool glued = out && *out && out[strlen(out) - 1] != '\n' && !isatty(STDOUT_FILENO);
		printf("%s%s\n", glued ? "\n" : "", t ? t : "?");
		free(t);
	}
	fflush(stdout);
	exec_put(stderr, err);

	/* a program's panic is already in its stderr, with the stack */
	if (stack && *stack && !(err && strstr(err, stack)))
		fprintf(stderr, "%s%s", stack, stack[strlen(stack) - 1] == '\n' ? "" : "\n");
	json_t *diags = json_object_get(sc, "diagnostics");
	size_t i, ndiag = json_array_size(diags);
	json_t *d;
	json_array_foreach(diags, i, d)
		fprintf(stderr, "%s:%lld:%lld: %s\n", json_string_value(json_object_get(d, "file")),
			json_integer_value(json_object_get(d, "line")),
			json_integer_value(json_object_get(d, "column")),
			json_string_value(json_object_get(d, "message")));
	if (phase && strcmp(phase, "build") == 0 && ndiag == 0) {
		const char *bo = json_string_value(json_object_get(sc, "build_output"));
		exec_put(stderr, bo && *bo ? bo : msg);
	}

	/* the summary line */
	bool color = exec_color();
	bool ok = ran && kind && strcmp(kind, "ok") == 0;
	fprintf(stderr, "%s%s%s", color ? (ok ? "\033[1;32m" : "\033[1;31m") : "", kind ? kind : "?",
		color ? "\033[0m" : "");
	if (mode)
		fprintf(stderr, " (%s)", mode);
	/* the message, unless it was shown above or the numbers say it */
	if (phase && strcmp(phase, "build") == 0)
		fprintf(stderr, ": %zu error%s", ndiag ? ndiag : 1, ndiag > 1 ? "s" : "");
	else if (msg && *msg && !(kind && strcmp(kind, "exit") == 0))
		fprintf(stderr, ": %s", msg);
	if (phase && (strcmp(phase, "build") == 0 || ran)) {
		fprintf(stderr, " · build %lld ms%s", json_integer_value(json_object_get(sc, "build_ms")),
			json_is_true(json_object_get(sc, "cached_build")) ? " (cached)" :
			json_is_true(json_object_get(sc, "tidied")) ? " (modules added)" : "");
	}
	if (ran) {
		fprintf(stderr, ", run %lld ms", json_integer_value(json_object_get(sc, "duration_ms")));
		if (json_is_integer(json_object_get(sc, "exit_code")))
			fprintf(stderr, ", exit %lld", json_integer_value(json_object_get(sc, "exit_code")));
		const char *sig = json_string_value(json_object_get(sc, "signal"));
		if (sig)
			fprintf(stderr, ", %s", sig);
		bool to = json_is_true(json_object_get(sc, "stdout_truncated"));
		bool te = json_is_true(json_object_get(sc, "stderr_truncated"));
		if (to || te)
			fprintf(stderr, ", %s%s%s truncated to its first and last 512 KiB", to ? "stdout" : "",
				to && te ? " and " : "", te ? "stderr" : "");
	}
	if (json_is_true(json_object_get(sc, "retried")))
		fprintf(stderr, ", retried in a fresh sandbox");
	size_t na = json_array_size(json_object_get(sc, "artifacts"));
	if (na)
		fprintf(stderr, ", %zu artifact%s in /app/out", na, na == 1 ? "" : "s");
	fputc('\n', stderr);
	const char *note = json_string_value(json_object_get(sc, "artifacts_note"));
	if (note)
		fprintf(stderr, "artifacts: %s\n", note);
}

/* exec_print_tests - test mode, as `go test` prints it: the failed tests' output, the
 * benchmarks' lines, one line per package */
static void exec_print_tests(json_t *sc)
{
	size_t i;
	json_t *t;
	json_array_foreach(json_object_get(sc, "tests"), i, t) {
		const char *st = json_string_value(json_object_get(t, "status"));
		const char *name = json_string_value(json_object_get(t, "name"));
		if (st && strcmp(st, "fail") == 0) {
			/* a subtest's output is in its own entry; a parent shows only its own */
			exec_put(stdout, json_string_value(json_object_get(t, "output")));
		} else if (name && json_is_number(json_object_get(t, "ns_per_op"))) {
			printf("%-24s %10lld %14.2f ns/op", name,
			       json_integer_value(json_object_get(t, "iterations")),
			       json_number_value(json_object_get(t, "ns_per_op")));
			if (json_is_integer(json_object_get(t, "bytes_per_op")))
				printf(" %8lld B/op %8lld allocs/op",
				       json_integer_value(json_object_get(t, "bytes_per_op")),
				       json_integer_value(json_object_get(t, "allocs_per_op")));
			putchar('\n');
		}
	}
	json_t *p;
	json_array_foreach(json_object_get(sc, "packages"), i, p) {
		const char *st = json_string_value(json_object_get(p, "status"));
		const char *name = json_string_value(json_object_get(p, "package"));
		double el = json_number_value(json_object_get(p, "elapsed"));
		json_t *cov = json_object_get(p, "coverage");
		if (st && strcmp(st, "no_tests") == 0)
			printf("?   \t%s\t[no test files]\n", name);
		else if (st && strcmp(st, "pass") == 0)
			printf("ok  \t%s\t%.3fs", name, el);
		else {
			/* what the package printed outside its tests: an init panic, a crash */
			const char *out = json_string_value(json_object_get(p, "output"));
			if (out && strstr(out, "panic"))
				exec_put(stdout, out);
			printf("FAIL\t%s\t%.3fs", name, el);
		}
		if (st && strcmp(st, "no_tests") != 0) {
			if (json_is_number(cov))
				printf("\tcoverage: %.1f%% of statements", json_number_value(cov));
			putchar('\n');
		}
	}
	fflush(stdout);
	json_t *tt = json_object_get(sc, "test_totals");
	if (tt)
		fprintf(stderr, "%lld passed, %lld failed, %lld skipped of %lld tests in %lld "
			"package%s\n", json_integer_value(json_object_get(tt, "passed")),
			json_integer_value(json_object_get(tt, "failed")),
			json_integer_value(json_object_get(tt, "skipped")),
			json_integer_value(json_object_get(tt, "tests")),
			json_integer_value(json_object_get(tt, "packages")),
			json_integer_value(json_object_get(tt, "packages")) == 1 ? "" : "s");
}

/* ---- artifacts ---- */

/* exec_artifact_bytes - put each embedded artifact's bytes back into structuredContent from the
 * content blocks, for --json: the server writes one block per artifact that has a media type,
 * in the order of the list (worker/call.c, artifact_block) */
static void exec_artifact_bytes(json_t *result, json_t *sc)
{
	json_t *blocks = json_object_get(result, "content");
	size_t next = 1, i;
	json_t *a;
	json_array_foreach(json_object_get(sc, "artifacts"), i, a) {
		if (!json_is_string(json_object_get(a, "media_type")))
			continue;
		json_t *b = json_array_get(blocks, next++);
		const char *type = json_string_value(json_object_get(b, "type"));
		json_t *r = json_object_get(b, "resource");
		if (type && strcmp(type, "image") == 0)
			json_object_set(a, "data", json_object_get(b, "data"));
		else if (type && strcmp(type, "resource") == 0 && json_object_get(r, "text"))
			json_object_set(a, "text", json_object_get(r, "text"));
		else if (type && strcmp(type, "resource") == 0)
			json_object_set(a, "data", json_object_get(r, "blob"));
	}
}

/* exec_out_open - create DIR/name for writing, never through a link; the name comes from the
 * sandbox, so each component must be a plain name */
static int exec_out_open(int dirfd, const char *name)
{
	char buf[PATH_MAX];
	if (snprintf(buf, sizeof(buf), "%s", name) >= (int)sizeof(buf))
		return -ENAMETOOLONG;
	int dfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
	char *comp = buf;
	for (;;) {
		char *slash = strchr(comp, '/');
		if (slash)
			*slash = '\0';
		if (!*comp || strcmp(comp, ".") == 0 || strcmp(comp, "..") == 0) {
			close(dfd);
			return -EINVAL;
		}
		if (!slash)
			break;
		if (mkdirat(dfd, comp, 0755) < 0 && errno != EEXIST) {
			close(dfd);
			return -errno;
		}
		int sub = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(dfd);
		if (sub < 0)
			return -errno;
		dfd = sub;
		comp = slash + 1;
	}
	int fd = openat(dfd, comp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	int e = errno;
	close(dfd);
	return fd < 0 ? -e : fd;
}

/* exec_write_out - --out DIR: every artifact, read in pieces with resources/read (so files
 * too large to embed come too); returns how many could not be written */
static int exec_write_out(FILE *to, FILE *from, json_t *sc, const char *dir)
{
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "kode-gopher exec: --out %s cannot be made: %s\n", dir, strerror(errno));
		return 1;
	}
	int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0) {
		fprintf(stderr, "kode-gopher exec: --out %s cannot be opened: %s\n", dir, strerror(errno));
		return 1;
	}
	int failed = 0, id = 100;
	size_t i;
	json_t *a;
	json_array_foreach(json_object_get(sc, "artifacts"), i, a) {
		const char *name = json_string_value(json_object_get(a, "name"));
		const char *uri = json_string_value(json_object_get(a, "uri"));
		if (!name || !uri || !json_is_string(json_object_get(a, "media_type")))
			continue; /* a link or special file: listed, never read */
		int fd = exec_out_open(dirfd, name);
		if (fd < 0) {
			fprintf(stderr, "kode-gopher exec: %s/%s cannot be written: %s\n", dir, name,
				strerror(-fd));
			failed++;
			continue;
		}
		bool ok = true;
		for (long long off = 0; ok;) {
			char piece[PATH_MAX + 64];
			snprintf(piece, sizeof(piece), "%s?offset=%lld", uri, off);
			json_t *resp = NULL;
			ok = exec_send(to, json_pack("{s:s, s:i, s:s, s:{s:s}}", "jsonrpc", "2.0", "id", ++id,
						     "method", "resources/read", "params", "uri",
						     piece)) == 0 &&
			     (resp = exec_read(from, id, false)) != NULL;
			json_t *res = json_object_get(resp, "result");
			json_t *c = json_array_get(json_object_get(res, "contents"), 0);
			json_t *meta = json_object_get(res, "_meta");
			const char *text = json_string_value(json_object_get(c, "text"));
			const char *blob = json_string_value(json_object_get(c, "blob"));
			size_t n = 0;
			unsigned char *bytes = NULL;
			if (ok && text) {
				n = json_string_length(json_object_get(c, "text"));
				bytes = (unsigned char *)strndup(text, n);
			} else if (ok && blob) {
				bytes = b64_decode_alloc(blob, strlen(blob), B64_LAX, &n);
			}
			if (!bytes) {
				const char *m = json_string_value(json_object_get(json_object_get(resp, "error"), "message"));
				fprintf(stderr, "kode-gopher exec: %s could not be read: %s\n", name,
					m ? m : "no answer");
				ok = false;
			} else {
				ok = fs_write_all(fd, bytes, n) == 0;
				free(bytes);
				off += (long long)n;
				if (json_is_true(json_object_get(meta, "kode-gopher/eof")) || n == 0) {
					json_decref(resp);
					break;
				}
			}
			json_decref(resp);
		}
		if (close(fd) != 0)
			ok = false;
		if (!ok)
			failed++;
	}
	close(dirfd);
	return failed;
}

/* ---- the files on the command line ---- */

struct exec_files {
	char *abs[NORM_MAX_FILES + 1]; /* absolute, resolved paths */
	bool walked[NORM_MAX_FILES + 1]; /* found under a directory operand, not named */
	size_t n;
	char root[PATH_MAX];          /* the directory that holds them all */
	bool have_root;
};

/* exec_add - one file to send; false (with a sentence) when there are too many */
static bool exec_add(struct exec_files *fs, const char *abs, bool walked)
{
	for (size_t i = 0; i < fs->n; i++)
		if (strcmp(fs->abs[i], abs) == 0)
			return true; /* named twice, e.g. `exec . main.go` */
	if (fs->n == NORM_MAX_FILES) {
		fprintf(stderr, "kode-gopher exec: more than %d files: one call takes at most %d; name "
			"the files to send instead of their directory\n", NORM_MAX_FILES, NORM_MAX_FILES);
		return false;
	}
	fs->walked[fs->n] = walked;
	fs->abs[fs->n] = strdup(abs);
	return fs->abs[fs->n++] != NULL;
}

/* exec_common_root - narrow the root to the directory that holds both it and dir */
static void exec_common_root(struct exec_files *fs, const char *dir)
{
	if (!fs->have_root) {
		snprintf(fs->root, sizeof(fs->root), "%s", dir);
		fs->have_root = true;
		return;
	}
	size_t i = 0, last = 0;
	for (; fs->root[i] && fs->root[i] == dir[i]; i++)
		if (fs->root[i] == '/')
			last = i;
	if (fs->root[i] == '\0' && (dir[i] == '\0' || dir[i] == '/'))
		return; /* dir is the root or under it */
	if (dir[i] == '\0' && fs->root[i] == '/')
		last = i; /* the root is under dir */
	fs->root[last ? last : 1] = '\0';
}

/* exec_walk - every regular file under dir (sorted, hidden entries, go.mod and go.sum left
 * out: the sandbox writes go.mod from its lockfile) */
static bool exec_walk(struct exec_files *fs, const char *dir, int depth)
{
	struct dirent **ents;
	int n = scandir(dir, &ents, NULL, alphasort);
	if (n < 0) {
		fprintf(stderr, "kode-gopher exec: cannot read the directory %s: %s\n", dir, strerror(errno));
		return false;
	}
	bool good = true;
	for (int i = 0; i < n; i++) {
		const char *nm = ents[i]->d_name;
		char p[PATH_MAX];
		struct stat st;
		if (good && nm[0] != '.' && strcmp(nm, "go.mod") && strcmp(nm, "go.sum") &&
		    snprintf(p, sizeof(p), "%s/%s", dir, nm) < (int)sizeof(p) && lstat(p, &st) == 0) {
			if (S_ISREG(st.st_mode))
				good = exec_add(fs, p, true);
			else if (S_ISDIR(st.st_mode) && depth < 16)
				good = exec_walk(fs, p, depth + 1);
		}
		free(ents[i]);
	}
	free(ents);
	return good;
}

/* exec_collect - the operands as files under one root */
static bool exec_collect(struct exec_files *fs, int n, char **operands)
{
	for (int i = 0; i < n; i++) {
		char abs[PATH_MAX];
		struct stat st;
		if (!realpath(operands[i], abs) || stat(abs, &st) != 0) {
			fprintf(stderr, "kode-gopher exec: cannot read %s: %s\n", operands[i], strerror(errno));
			return false;
		}
		if (S_ISDIR(st.st_mode)) {
			exec_common_root(fs, abs);
			size_t before = fs->n;
			if (!exec_walk(fs, abs, 0))
				return false;
			if (fs->n == before) {
				fprintf(stderr, "kode-gopher exec: %s holds no files to send\n", operands[i]);
				return false;
			}
		} else if (S_ISREG(st.st_mode)) {
			char dir[PATH_MAX];
			snprintf(dir, sizeof(dir), "%s", abs);
			char *slash = strrchr(dir, '/');
			slash[slash == dir ? 1 : 0] = '\0';
			exec_common_root(fs, dir);
			if (!exec_add(fs, abs, false))
				return false;
		} else {
			fprintf(stderr, "kode-gopher exec: %s is neither a file nor a directory\n", operands[i]);
			return false;
		}
	}
	return true;
}

/* exec_args - the tool call's arguments from the operands: `code` for stdin, else `files` with
 * paths relative to the directory that holds them all, so myfile.go stays myfile.go in
 * diagnostics and stacks */
static json_t *exec_args(int n, char **operands, int timeout_s)
{
	json_t *args = json_object();
	if (timeout_s > 0)
		json_object_set_new(args, "timeout_seconds", json_integer(timeout_s));
	size_t len = 0;
	struct stat st;
	/* stdin, or a pipe such as `exec <(generate)`, is one file without a name */
	bool piped = n == 1 && (strcmp(operands[0], "-") == 0 ||
				(stat(operands[0], &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))));
	if (piped) {
		char *content = read_all(operands[0], &len);
		if (!content) {
			fprintf(stderr, "kode-gopher exec: cannot read %s: %s\n",
				strcmp(operands[0], "-") == 0 ? "stdin" : operands[0], strerror(errno));
			json_decref(args);
			return NULL;
		}
		json_t *code = json_stringn(content, len);
		free(content);
		if (!code) {
			fprintf(stderr, "kode-gopher exec: %s is not UTF-8 text: send Go source\n",
				strcmp(operands[0], "-") == 0 ? "stdin" : operands[0]);
			json_decref(args);
			return NULL;
		}
		json_object_set_new(args, "code", code);
		return args;
	}
	for (int i = 0; i < n; i++)
		if (strcmp(operands[i], "-") == 0) {
			fprintf(stderr, "kode-gopher exec: - (stdin) is one file on its own; it cannot be "
				"combined with other files\n");
			json_decref(args);
			return NULL;
		}
	struct exec_files fs = { .n = 0 };
	json_t *files = json_array();
	bool good = exec_collect(&fs, n, operands);
	size_t rl = strlen(fs.root);
	for (size_t i = 0; good && i < fs.n; i++) {
		char *content = read_all(fs.abs[i], &len);
		if (!content) {
			fprintf(stderr, "kode-gopher exec: cannot read %s: %s\n", fs.abs[i], strerror(errno));
			good = false;
			break;
		}
		const char *rel = fs.abs[i] + rl + (rl > 1);
		json_t *f = json_pack("{s:s, s:s%}", "path", rel, "content", content, len);
		free(content);
		if (!f && fs.walked[i]) {
			fprintf(stderr, "kode-gopher exec: leaving out %s: it is not UTF-8 text, and the "
				"tool takes text files only\n", rel);
			continue;
		}
		if (!f) {
			fprintf(stderr, "kode-gopher exec: %s is not UTF-8 text: the tool takes text files "
				"only\n", fs.abs[i]);
			good = false;
			break;
		}
		json_array_append_new(files, f);
	}
	/* the agent would say "no .go file in the root directory" about a root the user never named */
	bool root_go = false;
	for (size_t i = 0; good && i < fs.n; i++) {
		const char *rel = fs.abs[i] + rl + (rl > 1);
		size_t l = strlen(rel);
		root_go |= !strchr(rel, '/') && l > 3 && strcmp(rel + l - 3, ".go") == 0;
	}
	if (good && !root_go) {
		fprintf(stderr, "kode-gopher exec: no .go file directly in %s, the directory that holds "
			"all the files: the main package's files go there, helper packages in its "
			"subdirectories\n", fs.root);
		good = false;
	}
	for (size_t i = 0; i < fs.n; i++)
		free(fs.abs[i]);
	if (!good) {
		json_decref(files);
		json_decref(args);
		return NULL;
	}
	json_object_set_new(args, "files", files);
	return args;
}

/* exec_adc_absent - no ADC file where the worker would look: a run with --credentials adc
 * would only warn, so exec runs without credentials and says nothing */
static bool exec_adc_absent(void)
{
	char path[PATH_MAX];
	bool explicit;
	gcreds_adc_path(path, sizeof(path), &explicit);
	return !explicit && access(path, F_OK) != 0;
}

/* exec_run - exec_main's work; sargv and names have room for every option passed on */
static int exec_run(int argc, char **argv, const char **sargv, char (*names)[40])
{
	struct serve_config cfg;
	serve_config_defaults(&cfg);
	bool as_json = false, keep = false, cover = false;
	const char *out_dir = NULL, *run_re = NULL, *bench_re = NULL;
	int timeout_s = 0;
	static const struct option opts[] = {
		{ "json", no_argument, 0, 'j' },           { "keep", no_argument, 0, 'k' },
		{ "out", required_argument, 0, 'o' },      { "run", required_argument, 0, 'r' },
		{ "bench", required_argument, 0, 'b' },    { "cover", no_argument, 0, 'c' },
		{ "timeout", required_argument, 0, 't' },  { "help", no_argument, 0, 'h' },
		/* the rest are serve's, checked here and passed on as they came */
		{ "claim", required_argument, 0, 0 },      { "log-level", required_argument, 0, 0 },
		{ "runtime-dir", required_argument, 0, 0 }, { "sandbox-root", required_argument, 0, 0 },
		{ "sandbox-network", required_argument, 0, 0 }, { "sandbox-memory", required_argument, 0, 0 },
		{ "sandbox-pids", required_argument, 0, 0 }, { "seccomp", required_argument, 0, 0 },
		{ "sandbox-disk", required_argument, 0, 0 },
		{ "credentials", required_argument, 0, 0 }, { "project", required_argument, 0, 0 },
		{ "scopes", required_argument, 0, 0 },     { "token-endpoint", required_argument, 0, 0 },
		{ "iam-endpoint", required_argument, 0, 0 }, { "metadata-host", required_argument, 0, 0 },
		{ "claim-lease", required_argument, 0, 0 }, SERVE_KUBE_OPTIONS,
		{ 0, 0, 0, 0 }
	};
	int na = 0;
	sargv[na++] = "kode-gopher";
	sargv[na++] = "serve";
	sargv[na++] = "--log-level";
	sargv[na++] = "warn";
	int c, idx, nn = 0;
	if (cli_check_long("exec", argc, argv, opts) != 0)
		return 2;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, &idx)) != -1) {
		switch (c) {
		case 'j': as_json = true; break;
		case 'k': keep = true; break;
		case 'o': out_dir = optarg; break;
		case 'r': run_re = optarg; break;
		case 'b': bench_re = optarg; break;
		case 'c': cover = true; break;
		case 't': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || v < 1 || v > SERVE_MAX_TIMEOUT_S) {
				fprintf(stderr, "kode-gopher exec: --timeout wants whole seconds from 1 to %d "
					"(the longest a call may run), not \"%s\"\n", SERVE_MAX_TIMEOUT_S, optarg);
				return 2;
			}
			timeout_s = (int)v;
			break;
		}
		case 'h': fputs(exec_usage, stdout); return 0;
		case 0:
			if (serve_config_option(&cfg, opts[idx].name, optarg) <= 0)
				return 2; /* it said what is wrong */
			snprintf(names[nn], sizeof(names[0]), "--%s", opts[idx].name);
			sargv[na++] = names[nn++];
			sargv[na++] = optarg;
			break;
		default:
			cli_bad_option("exec", opts, c, cli_word(argv, argc, optind, optopt));
			return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "kode-gopher exec: name the Go files to run, their directory, or - for "
			"stdin (`kode-gopher exec --help` shows examples)\n");
		return 2;
	}
	if (keep)
		sargv[na++] = "--persistent";
	if (!cfg.credentials && exec_adc_absent()) {
		sargv[na++] = "--credentials";
		sargv[na++] = "none";
	}
	sargv[na] = NULL;
	json_t *args = exec_args(argc - optind, argv + optind, timeout_s);
	if (!args)
		return 2;
	if (run_re || bench_re || cover) {
		json_t *t = json_object();
		if (run_re)
			json_object_set_new(t, "run", json_string(run_re));
		if (bench_re)
			json_object_set_new(t, "bench", json_string(bench_re));
		if (cover)
			json_object_set_new(t, "cover", json_true());
		json_object_set_new(args, "test", t);
	}

	/* the server, as an MCP client would start it */
	int to_srv[2], from_srv[2];
	pid_t pid = -1;
	if (pipe2(to_srv, O_CLOEXEC) || pipe2(from_srv, O_CLOEXEC) || (pid = fork()) < 0) {
		fprintf(stderr, "kode-gopher exec: cannot start the server: %s\n", strerror(errno));
		json_decref(args);
		return 2;
	}
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
			int unwritten = out_dir ? exec_write_out(to, from, sc, out_dir) : 0;
			if (as_json) {
				exec_artifact_bytes(result, sc);
				json_dumpf(sc, stdout, JSON_INDENT(2));
				putchar('\n');
				fflush(stdout);
			} else {
				exec_print_summary(sc);
			}
			const char *phase = json_string_value(json_object_get(sc, "phase"));
			status = phase && strcmp(phase, "internal") == 0 ? 2 :
				 json_is_true(json_object_get(result, "isError")) ? 1 : 0;
			if (unwritten && status == 0)
				status = 2;
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

int exec_main(int argc, char **argv)
{
	/* kode-gopher serve --log-level warn, the options passed on, 3 more, NULL */
	const char **sargv = calloc((size_t)argc * 2 + 12, sizeof(*sargv));
	char (*names)[40] = calloc((size_t)argc + 1, sizeof(*names));
	int r = sargv && names ? exec_run(argc, argv, sargv, names) : 2;
	free(sargv);
	free(names);
	return r;
}

/* ---- kode-gopher sandboxes ---- */

static const char sandboxes_usage[] =
	"usage: kode-gopher sandboxes list [--sandbox-root DIR]\n"
	"       kode-gopher sandboxes rm [--force] NAME... [--sandbox-root DIR]\n"
	"\n"
	"List or remove the sandboxes kept by `exec --keep` and `serve --persistent`. list prints\n"
	"a header, then one line per sandbox: its name, has-persist when /app/persist holds\n"
	"something, in-use (a session holds it) or idle, its age, and the host disk it takes.\n"
	"rm refuses a sandbox in use unless --force. Both first remove\n"
	"what sessions killed before they could release left behind (sandboxes that were not kept).\n"
	"The default DIR is serve's default --sandbox-root ($KODE_GOPHER_SANDBOX_ROOT if set).\n";

/* sandboxes_has_persist - does root/name/app/persist hold anything? 1, 0, or -1: cannot tell */
static int sandboxes_has_persist(const char *root, const char *name)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", root, name);
	int v = volume_has_persist(p);
	if (v != -ENOENT)
		return v < 0 ? -1 : v;
	snprintf(p, sizeof(p), "%s/%s/app/persist", root, name);
	DIR *d = opendir(p);
	if (!d)
		return 0;
	struct dirent *e;
	bool any = false;
	while (!any && (e = readdir(d)) != NULL)
		any = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	closedir(d);
	return any;
}

static long long sandboxes_du_total;

/* sandboxes_du_one - nftw: add one file's blocks */
static int sandboxes_du_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)path, (void)flag, (void)ftw;
	sandboxes_du_total += (long long)st->st_blocks * 512;
	return 0;
}

/* sandboxes_size - bytes root/name takes on the host's disk (its image's blocks, when it has
 * one, and the few files beside it); FTW_MOUNT: never into a mount */
static long long sandboxes_size(const char *root, const char *name)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", root, name);
	sandboxes_du_total = 0;
	nftw(p, sandboxes_du_one, 16, FTW_PHYS | FTW_MOUNT);
	return sandboxes_du_total;
}

/* sandboxes_human - a size like du -h: 512K, 4.3M, 1.2G */
static void sandboxes_human(long long b, char *out, size_t cap)
{
	static const char units[] = "KMGT";
	double v = (double)b / 1024;
	int u = 0;
	while (v >= 1024 && u < 3) {
		v /= 1024;
		u++;
	}
	if (v < 10 && u > 0)
		snprintf(out, cap, "%.1f%c", v, units[u]);
	else
		snprintf(out, cap, "%.0f%c", v, units[u]);
}

/* sandboxes_age - time since root/name was made, like 45s, 12m, 3h, 5d */
static void sandboxes_age(const char *root, const char *name, char *out, size_t cap)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", root, name);
	struct statx sx;
	time_t made;
	if (statx(AT_FDCWD, p, AT_SYMLINK_NOFOLLOW, STATX_BTIME | STATX_MTIME, &sx) != 0) {
		snprintf(out, cap, "?");
		return;
	}
	made = (sx.stx_mask & STATX_BTIME) ? (time_t)sx.stx_btime.tv_sec : (time_t)sx.stx_mtime.tv_sec;
	long long d = (long long)(time(NULL) - made);
	if (d < 0)
		d = 0;
	if (d < 120)
		snprintf(out, cap, "%llds", d);
	else if (d < 2 * 3600)
		snprintf(out, cap, "%lldm", d / 60);
	else if (d < 2 * 86400)
		snprintf(out, cap, "%lldh", d / 3600);
	else
		snprintf(out, cap, "%lldd", d / 86400);
}

int sandboxes_main(int argc, char **argv)
{
	struct serve_config cfg;
	serve_config_defaults(&cfg);
	const char *root = cfg.sandbox_root;
	static const struct option opts[] = {
		{ "sandbox-root", required_argument, 0, 'r' }, { "force", no_argument, 0, 'f' },
		{ "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 }
	};
	int c, idx;
	bool force = false;
	if (cli_check_long("sandboxes", argc, argv, opts) != 0)
		return 2;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, &idx)) != -1) {
		if (c == 'h') {
			fputs(sandboxes_usage, stdout);
			return 0;
		}
		if (c == 'f') {
			force = true;
			continue;
		}
		if (c != 'r') {
			cli_bad_option("sandboxes", opts, c, cli_word(argv, argc, optind, optopt));
			return 2;
		}
		if (!*optarg) {
			fprintf(stderr, "kode-gopher sandboxes: --sandbox-root needs a directory\n");
			return 2;
		}
		root = optarg;
	}
	/* what sessions killed before they could release left here goes first */
	sandbox_local_sweep(root);
	const char *cmd = optind < argc ? argv[optind] : NULL;
	if (!cmd || (strcmp(cmd, "list") && strcmp(cmd, "rm"))) {
		if (cmd)
			fprintf(stderr, "kode-gopher sandboxes: unknown command \"%s\": use list or rm\n", cmd);
		else
			fputs(sandboxes_usage, stderr);
		return 2;
	}
	if (strcmp(cmd, "list") == 0) {
		if (optind + 1 < argc) {
			fprintf(stderr, "kode-gopher sandboxes: list takes no names (\"%s\")\n", argv[optind + 1]);
			return 2;
		}
		DIR *d = opendir(root);
		if (!d && errno != ENOENT) {
			fprintf(stderr, "kode-gopher sandboxes: cannot read %s: %s\n", root, strerror(errno));
			return 1;
		}
		struct dirent *e;
		int shown = 0;
		while (d && (e = readdir(d)) != NULL) {
			if (e->d_name[0] == '.')
				continue;
			long holder;
			bool live = sandbox_local_in_use(root, e->d_name, &holder);
			int persist = sandboxes_has_persist(root, e->d_name);
			char age[32], size[16];
			sandboxes_age(root, e->d_name, age, sizeof(age));
			sandboxes_human(sandboxes_size(root, e->d_name), size, sizeof(size));
			if (shown++ == 0)
				printf("NAME\tPERSIST\tSTATE\tAGE\tSIZE\n");
			printf("%s\t%s\t%s\t%s\t%s\n", e->d_name,
			       persist > 0 ? "has-persist" : persist == 0 ? "-" : "?",
			       live ? "in-use" : "idle", age, size);
		}
		if (d)
			closedir(d);
		/* stdout stays a list (empty) for scripts; a person reads why */
		if (shown == 0)
			fprintf(stderr, "no kept sandboxes in %s (`exec --keep` and `serve --persistent` "
				"keep one)\n", root);
		return 0;
	}
	if (optind + 1 >= argc) {
		fprintf(stderr, "kode-gopher sandboxes: rm wants the names of the sandboxes to remove "
			"(`kode-gopher sandboxes list` shows them)\n");
		return 2;
	}
	int rc = 0;
	for (int i = optind + 1; i < argc; i++) {
		if (strchr(argv[i], '/') || argv[i][0] == '.') {
			fprintf(stderr, "kode-gopher sandboxes: \"%s\" is not a sandbox name\n", argv[i]);
			rc = 1;
			continue;
		}
		int dfd = open(root, O_RDONLY | O_DIRECTORY);
		struct stat st;
		if (dfd >= 0 && fstatat(dfd, argv[i], &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT) {
			/* the remover takes a missing tree for removed; a person asked for this one */
			fprintf(stderr, "kode-gopher sandboxes: there is no sandbox %s in %s "
				"(`kode-gopher sandboxes list` shows them)\n", argv[i], root);
			close(dfd);
			rc = 1;
			continue;
		}
		long holder;
		if (!force && sandbox_local_in_use(root, argv[i], &holder)) {
			fprintf(stderr, "kode-gopher sandboxes: %s is in use by a session (kode-gopher pid "
				"%ld); end it first, or remove it anyway with --force\n", argv[i], holder);
			close(dfd);
			rc = 1;
			continue;
		}
		int r = dfd < 0 ? -errno : fs_rm_tree_at(dfd, argv[i]);
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
