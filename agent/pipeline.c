/*
 * pipeline.c - one execute_go_code call inside the sandbox (wipe, normalize, write, build, run,
 * result) and one lookup_package_docs call (go doc in the session's module).
 *
 * Called by the agent's HTTP server (agent/server.c, through agent/agent_main.c) on a thread
 * of its own, one call at a time. The Go toolchain work lives in agent/gobuild.c, process
 * supervision in agent/runproc.c, compiler-output parsing in agent/diag.c. Everything under
 * app_dir may have been shaped by an earlier user program (symlinks, odd modes, deep trees),
 * so the wipe and the writes go through directory descriptors and never follow a link.
 */
#include "agent/pipeline.h"
#include "ipc/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "agent/artifacts.h"
#include "agent/diag.h"
#include "agent/fastbuild.h"
#include "agent/gobuild.h"
#include "agent/gotest.h"
#include "agent/metadata.h"
#include "agent/normalize.h"
#include "agent/runproc.h"
#include "ipc/log.h"
#include "policy/cgroup.h"
#include "policy/limits.h"

#ifndef KG_RUNTIME_DIR
#define KG_RUNTIME_DIR "/var/cache/kode-gopher/runtime"
#endif

#define PL_GEN_FILE        "kode_gopher_main.go"
#define PL_PERSIST         "persist"

/* The configuration with defaults filled in. */
struct pl_cfg {
	const char *app_dir, *state_dir, *runtime_dir;
	char gomodcache[PATH_MAX], gocache[PATH_MAX];
	char home[PATH_MAX], tmp[PATH_MAX], rundir[PATH_MAX], docdir[PATH_MAX];
	const char *go_bin;
	int default_timeout_ms, max_timeout_ms;
	size_t output_cap, doc_cap;
	const struct sock_fprog *user_filter;
	long long memory_limit, disk_limit;
	int pids_limit;
	int oom_events;
	struct gobuild_env env;
};

/* pathf - snprintf into a path buffer; -ENAMETOOLONG instead of a silently cut path */
static int pathf(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* mkdir_private - mkdir 0700 that accepts an existing directory */
static int mkdir_private(const char *path)
{
	if (mkdir(path, 0700) == 0 || errno == EEXIST)
		return 0;
	return -errno;
}

/* telemetry_off - the go command's telemetry mode file in home says off (what `go telemetry
 * off` writes; GOTELEMETRY is only reported, never read): otherwise every go command starts a
 * second go process to watch it for crashes, and keeps counters under home */
static void telemetry_off(const char *home)
{
	char dir[PATH_MAX], path[PATH_MAX + 8];
	struct stat st;
	if (pathf(dir, sizeof(dir), "%s/.config/go/telemetry", home) != 0 ||
	    pathf(path, sizeof(path), "%s/mode", dir) != 0 || stat(path, &st) == 0)
		return;
	int fd = fs_mkdir_p(dir, 0700) == 0 ?
		 open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600) : -1;
	if (fd < 0 || fs_write_all(fd, "off\n", 4) != 0)
		log_warn("the go command's telemetry could not be turned off in %s", dir);
	if (fd >= 0)
		close(fd);
}

/* pl_cfg_init - defaults, derived paths and the state directory's skeleton */
static int pl_cfg_init(const struct pipeline_config *in, struct pl_cfg *c)
{
	memset(c, 0, sizeof(*c));
	if (!in || !in->app_dir || !in->state_dir)
		return -EINVAL;
	c->app_dir = in->app_dir;
	c->state_dir = in->state_dir;
	c->runtime_dir = in->runtime_dir ? in->runtime_dir : KG_RUNTIME_DIR;
	c->go_bin = in->go_bin ? in->go_bin : "go";
	c->default_timeout_ms = in->default_timeout_ms > 0 ? in->default_timeout_ms : 60000;
	c->max_timeout_ms = in->max_timeout_ms > 0 ? in->max_timeout_ms : 300000;
	c->output_cap = in->output_cap ? in->output_cap : 1024 * 1024;
	c->doc_cap = in->doc_cap ? in->doc_cap : 64 * 1024;
	c->user_filter = in->user_filter;
	c->memory_limit = in->memory_limit;
	c->disk_limit = in->disk_limit;
	c->pids_limit = in->pids_limit;
	c->oom_events = in->oom_events;
	int rc = 0;
	if (in->gomodcache_dir)
		rc |= pathf(c->gomodcache, sizeof(c->gomodcache), "%s", in->gomodcache_dir);
	else
		rc |= pathf(c->gomodcache, sizeof(c->gomodcache), "%s/gomodcache", c->runtime_dir);
	if (in->gocache_dir)
		rc |= pathf(c->gocache, sizeof(c->gocache), "%s", in->gocache_dir);
	else
		rc |= pathf(c->gocache, sizeof(c->gocache), "%s/gocache", c->runtime_dir);
	rc |= pathf(c->home, sizeof(c->home), "%s/home", c->state_dir);
	rc |= pathf(c->tmp, sizeof(c->tmp), "%s/tmp", c->state_dir);
	rc |= pathf(c->rundir, sizeof(c->rundir), "%s/run", c->state_dir);
	rc |= pathf(c->docdir, sizeof(c->docdir), "%s/doc", c->state_dir);
	if (rc)
		return -ENAMETOOLONG;
	if ((rc = mkdir_private(c->state_dir)) < 0 || (rc = mkdir_private(c->home)) < 0 ||
	    (rc = mkdir_private(c->tmp)) < 0 || (rc = mkdir_private(c->rundir)) < 0)
		return rc;
	telemetry_off(c->home);
	const char *path = getenv("PATH");
	c->env = (struct gobuild_env){
		.go_bin = c->go_bin,
		.path = path && *path ? path : NULL,
		.home = c->home,
		.gomodcache = c->gomodcache,
		.gocache = c->gocache,
		.tmpdir = c->tmp,
		.runtime_dir = c->runtime_dir,
	};
	return 0;
}

/* ---- wiping /app ---- */

/* wipe_below - remove everything below dfd (dfd itself stays), but a real directory named
 * persist when keep_persist; never follows a link, bounded descriptors however deep
 * (fs_rm_tree_at). Nothing of the program runs any more: its namespace died with it. Returns
 * the number of entries that could not be removed. */
static unsigned wipe_below(int dfd, bool keep_persist)
{
	int dup = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
	DIR *d = dup >= 0 ? fdopendir(dup) : NULL;
	if (!d) {
		if (dup >= 0)
			close(dup);
		return 1;
	}
	/* the dup shares the offset with dfd, which an earlier pass left at the end */
	rewinddir(d);
	/* a program may have made it read-only or unlistable; it is the agent's own */
	struct stat top;
	if (fstat(dfd, &top) == 0 && (top.st_mode & 0700) != 0700)
		fchmod(dfd, (top.st_mode & 07777) | 0700);
	unsigned failed = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (keep_persist && strcmp(de->d_name, PL_PERSIST) == 0) {
			struct stat st;
			/* keep persist only if it is a real directory; a symlink named persist goes */
			if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISDIR(st.st_mode))
				continue;
		}
		if (fs_rm_tree_at(dfd, de->d_name) != 0)
			failed++;
	}
	closedir(d);
	return failed;
}

/* pl_wipe_app - empty app_dir except a real persist/ directory, creating both as needed */
static int pl_wipe_app(const char *app_dir)
{
	if (mkdir(app_dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	int fd = open(app_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	unsigned failed = wipe_below(fd, true);
	if (failed)
		log_warn("%u entries under %s could not be removed", failed, app_dir);
	int rc = 0;
	if (mkdirat(fd, PL_PERSIST, 0755) < 0 && errno != EEXIST)
		rc = -errno;
	close(fd);
	return rc;
}

/* ---- writing the normalized files ---- */

/* pl_write_file - create one file below dirfd through descriptors, never following a link.
 * Files under persist/ may replace what an earlier call left there (by rename); anywhere else
 * the freshly wiped tree makes O_EXCL the right check. */
static int pl_write_file(int topfd, const struct src_file *f)
{
	char path[NORM_MAX_PATH + 1];
	if (pathf(path, sizeof(path), "%s", f->path) < 0)
		return -ENAMETOOLONG;
	bool in_persist = strncmp(path, PL_PERSIST "/", strlen(PL_PERSIST) + 1) == 0;
	int dfd = fcntl(topfd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return -errno;
	char *comp = path;
	int rc = 0;
	for (;;) {
		char *slash = strchr(comp, '/');
		if (!slash)
			break;
		*slash = '\0';
		if (!*comp || strcmp(comp, ".") == 0 || strcmp(comp, "..") == 0) {
			rc = -EINVAL;
			break;
		}
		if (mkdirat(dfd, comp, 0755) < 0 && errno != EEXIST) {
			rc = -errno;
			break;
		}
		int sub = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0) {
			rc = -errno;
			break;
		}
		close(dfd);
		dfd = sub;
		comp = slash + 1;
	}
	if (rc == 0 && (!*comp || strcmp(comp, ".") == 0 || strcmp(comp, "..") == 0))
		rc = -EINVAL;
	if (rc == 0) {
		/* under persist/ the new content goes to a fresh file renamed over the old name, so
		 * a hard link planted there never makes us write into another file */
		char tmp[64];
		snprintf(tmp, sizeof(tmp), ".kg-write-%d", (int)getpid());
		const char *target = in_persist ? tmp : comp;
		if (in_persist)
			unlinkat(dfd, tmp, 0);
		int fd = openat(dfd, target, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
				0644);
		if (fd < 0) {
			rc = -errno;
		} else {
			const char *p = f->content;
			size_t n = f->len;
			while (n && rc == 0) {
				ssize_t w = write(fd, p, n);
				if (w < 0 && errno == EINTR)
					continue;
				if (w < 0)
					rc = -errno;
				else {
					p += w;
					n -= (size_t)w;
				}
			}
			if (close(fd) < 0 && rc == 0)
				rc = -errno;
			if (in_persist) {
				if (rc == 0 && renameat(dfd, tmp, dfd, comp) < 0)
					rc = -errno;
				if (rc < 0)
					unlinkat(dfd, tmp, 0);
			}
		}
	}
	close(dfd);
	return rc;
}

/* ---- results ---- */

/* set_text - key = JSON string of arbitrary bytes */
static void set_text(json_t *o, const char *key, const char *s, size_t len)
{
	json_t *j = diag_json_string(s ? s : "", s ? len : 0);
	json_object_set_new(o, key, j ? j : json_string(""));
}

/* kind_msg - {"kind":kind,"message":msg} */
static json_t *kind_msg(const char *kind, const char *msg)
{
	json_t *r = json_object();
	json_object_set_new(r, "kind", json_string(kind));
	set_text(r, "message", msg, strlen(msg));
	return r;
}

/* result_new - the result object with every field present and neutral */
static json_t *result_new(void)
{
	json_t *o = json_object();
	json_object_set_new(o, "phase", json_string("internal"));
	json_object_set_new(o, "mode", json_null());
	json_object_set_new(o, "exit_code", json_null());
	json_object_set_new(o, "signal", json_null());
	json_object_set_new(o, "build_ms", json_integer(0));
	json_object_set_new(o, "duration_ms", json_integer(0));
	json_object_set_new(o, "tidied", json_false());
	json_object_set_new(o, "cached_build", json_false());
	json_object_set_new(o, "build_path", json_null());
	json_object_set_new(o, "result", json_null());
	json_object_set_new(o, "stdout", json_string(""));
	json_object_set_new(o, "stderr", json_string(""));
	json_object_set_new(o, "stdout_truncated", json_false());
	json_object_set_new(o, "stderr_truncated", json_false());
	json_object_set_new(o, "artifacts", json_array());
	return o;
}

/* internal_result - the fallback when the pipeline itself failed */
static json_t *internal_result(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_error("%s", msg);
	json_t *o = result_new();
	if (o)
		json_object_set_new(o, "result", kind_msg("internal_error", msg));
	return o;
}

struct timings {
	long normalize_ms, write_ms, tidy_ms, build_ms, run_ms, total_ms;
	long cpu_user_ms, cpu_sys_ms, max_rss_kb;
};

/* finish - set phase/mode/timings on a result */
static json_t *finish(json_t *o, const char *phase, const char *mode, struct timings *t,
		      const struct timespec *t0)
{
	t->total_ms = mono_since_ms(t0);
	json_object_set_new(o, "phase", json_string(phase));
	json_object_set_new(o, "mode", mode ? json_string(mode) : json_null());
	json_object_set_new(o, "build_ms", json_integer(t->tidy_ms + t->build_ms));
	json_t *tj = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "normalize_ms",
			       (json_int_t)t->normalize_ms, "write_ms", (json_int_t)t->write_ms,
			       "tidy_ms", (json_int_t)t->tidy_ms, "build_ms",
			       (json_int_t)t->build_ms, "run_ms", (json_int_t)t->run_ms, "total_ms",
			       (json_int_t)t->total_ms, "cpu_user_ms", (json_int_t)t->cpu_user_ms,
			       "cpu_sys_ms", (json_int_t)t->cpu_sys_ms, "max_rss_kb",
			       (json_int_t)t->max_rss_kb);
	json_object_set_new(o, "timings", tj);
	return o;
}

/* seconds_text - "60 s", "1.5 s" */
static void seconds_text(int ms, char *buf, size_t len)
{
	if (ms % 1000 == 0)
		snprintf(buf, len, "%d s", ms / 1000);
	else
		snprintf(buf, len, "%.1f s", ms / 1000.0);
}

/* read_small - a regular file (no symlink) below dirfd up to max bytes; -EFBIG above */
static int read_small(int dirfd, const char *name, size_t max, char **data, size_t *len)
{
	*data = NULL;
	*len = 0;
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	struct stat st;
	/* a second link would be a file the program linked here for us to read out */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
		close(fd);
		return -EINVAL;
	}
	int rc = fs_read_fd(fd, max, data, len);
	close(fd);
	return rc;
}

/* find_line_start - first occurrence of needle at the start of a line in s[0..len) */
static const char *find_line_start(const char *s, size_t len, const char *needle)
{
	size_t nl = strlen(needle);
	for (const char *p = s; p && (size_t)(p - s) + nl <= len;) {
		const char *hit = memmem(p, len - (size_t)(p - s), needle, nl);
		if (!hit)
			return NULL;
		if (hit == s || hit[-1] == '\n')
			return hit;
		p = hit + 1;
	}
	return NULL;
}

/* parse_crash - a Go runtime crash report ("panic: ..." or "fatal error: ..." followed by
 * goroutine stacks) into {kind:"panic", message, stack}; NULL when text holds none */
static json_t *parse_crash(const char *text, size_t len)
{
	const char *start = find_line_start(text, len, "panic: ");
	const char *fatal = find_line_start(text, len, "fatal error: ");
	if (!start || (fatal && fatal < start))
		start = fatal;
	if (!start)
		return NULL;
	size_t rest = len - (size_t)(start - text);
	const char *gor = find_line_start(start, rest, "goroutine ");
	if (!gor)
		return NULL;
	const char *msg = start;
	if (strncmp(msg, "panic: ", 7) == 0)
		msg += 7;
	size_t mlen = (size_t)(gor - msg);
	while (mlen && (msg[mlen - 1] == '\n' || msg[mlen - 1] == ' ' || msg[mlen - 1] == '\r'))
		mlen--;
	size_t slen = len - (size_t)(gor - text);
	while (slen && (gor[slen - 1] == '\n'))
		slen--;
	if (slen > PL_STACK_MAX_BYTES)
		slen = PL_STACK_MAX_BYTES;
	json_t *r = json_object();
	json_object_set_new(r, "kind", json_string("panic"));
	set_text(r, "message", msg, mlen);
	set_text(r, "stack", gor, slen);
	return r;
}

/* load_result_file - the generated main's result: one object with a known kind */
static json_t *load_result_file(int rundirfd, char *why, size_t whylen)
{
	char *data;
	size_t len;
	int rc = read_small(rundirfd, "result.json", PL_RESULT_MAX_BYTES, &data, &len);
	if (rc == -ENOENT)
		return NULL;
	if (rc == -EFBIG) {
		snprintf(why, whylen, "run's result is larger than %d MiB; return a smaller value "
				      "(a summary), or write the data to /app/persist and return its path",
			 PL_RESULT_MAX_BYTES / (1024 * 1024));
		return NULL;
	}
	if (rc < 0) {
		snprintf(why, whylen, "the result file could not be read: %s", strerror(-rc));
		return NULL;
	}
	json_error_t err;
	/* strings may hold NUL (Go writes it as \u0000), which jansson refuses by default */
	json_t *doc = json_loadb(data, len, JSON_ALLOW_NUL, &err);
	if (!doc && strstr(err.text, "too big"))
		/* Go encodes uint64 and big.Int exactly; jansson's integers are 64-bit signed */
		doc = json_loadb(data, len, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &err);
	free(data);
	if (!doc && strstr(err.text, "depth")) {
		/* the code's value, not the sandbox: the generated main checks the same limit first */
		json_t *r = json_object();
		json_object_set_new(r, "kind", json_string("unencodable"));
		json_object_set_new(r, "message", json_sprintf(
			"run returned a value nested too deeply (arrays and objects); a result may be "
			"nested at most %d levels: flatten it, or write it to /app/persist and return its "
			"path", PL_RESULT_MAX_DEPTH));
		return r;
	}
	if (!doc) {
		snprintf(why, whylen, "the result file is not valid JSON: %s", err.text);
		return NULL;
	}
	const char *kind = json_string_value(json_object_get(doc, "kind"));
	static const char *const kinds[] = { "ok", "error", "panic", "unencodable" };
	bool known = false;
	for (size_t i = 0; kind && i < sizeof(kinds) / sizeof(kinds[0]); i++)
		known |= strcmp(kind, kinds[i]) == 0;
	if (!json_is_object(doc) || !known) {
		snprintf(why, whylen, "the result file has no known kind");
		json_decref(doc);
		return NULL;
	}
	json_t *r = json_object();
	json_object_set_new(r, "kind", json_string(kind));
	if (strcmp(kind, "ok") == 0) {
		json_t *v = json_object_get(doc, "value");
		json_object_set(r, "value", v ? v : json_null());
	} else {
		static const char *const fields[] = { "message", "type", "stack" };
		for (size_t i = 0; i < 3; i++) {
			json_t *v = json_object_get(doc, fields[i]);
			if (json_is_string(v))
				json_object_set(r, fields[i], v);
		}
		if (!json_object_get(r, "message"))
			json_object_set_new(r, "message", json_string(""));
	}
	json_decref(doc);
	return r;
}

/* run_location - where the snippet declares run (for errors in the generated main) */
static void run_location(const struct norm_result *nr, const char **file, int *line)
{
	*file = NULL;
	*line = 0;
	for (size_t i = 0; i < nr->nfiles; i++) {
		const struct src_file *f = &nr->files[i];
		size_t pl = strlen(f->path);
		if (strchr(f->path, '/') || pl < 3 || strcmp(f->path + pl - 3, ".go") != 0 ||
		    strcmp(f->path, PL_GEN_FILE) == 0)
			continue;
		const char *hit = find_line_start(f->content, f->len, "func run(");
		if (!hit)
			continue;
		int ln = 1;
		for (const char *p = f->content; p < hit; p++)
			ln += *p == '\n';
		*file = f->path;
		*line = ln;
		return;
	}
}

/* build_error_result - phase "build" with the compiler's errors */
static json_t *build_error_result(json_t *o, const struct pl_cfg *c, const struct norm_result *nr,
				  const char *out, size_t len, bool timed_out, const char *extra)
{
	size_t clen = 0;
	char *clean = diag_clean_output(out, len, c->app_dir, &clen);
	if (!clean)
		return o;
	if (extra) {
		size_t el = strlen(extra);
		char *grown = realloc(clean, clen + el + 2);
		if (grown) {
			clean = grown;
			if (clen && clean[clen - 1] != '\n')
				clean[clen++] = '\n';
			memcpy(clean + clen, extra, el);
			clen += el;
			clean[clen] = '\0';
		}
	}
	if (extra) {
		/* the lookup was tried online and failed: "disabled by GOPROXY=off" would only
		 * mislead the model into thinking the network is off */
		static const char *const noise[] = { ": module lookup disabled by GOPROXY=off",
						     ": import lookup disabled by -mod=readonly" };
		for (size_t i = 0; i < sizeof(noise) / sizeof(noise[0]); i++) {
			size_t nl = strlen(noise[i]);
			char *hit;
			while ((hit = memmem(clean, clen, noise[i], nl))) {
				memmove(hit, hit + nl, clen - (size_t)(hit - clean) - nl + 1);
				clen -= nl;
			}
		}
	}
	struct diag_opts dopts = { .app_dir = c->app_dir };
	if (nr->mode == NORM_SNIPPET) {
		dopts.gen_file = PL_GEN_FILE;
		run_location(nr, &dopts.run_file, &dopts.run_line);
	}
	struct diag_list dl = { 0 };
	if (diag_parse(clean, clen, &dopts, &dl) < 0)
		dl.n = 0;
	char first[1024];
	if (timed_out)
		snprintf(first, sizeof(first), "the build took longer than %d minutes and was stopped",
			 GOBUILD_TIMEOUT_MS / 60000);
	else if (extra)
		snprintf(first, sizeof(first), "%s", extra);
	else
		diag_first_error(clean, clen, &dl, first, sizeof(first));
	if (!first[0])
		snprintf(first, sizeof(first), "go build failed without an error message");
	json_object_set_new(o, "result", kind_msg("build_error", first));
	json_t *dj = diag_to_json(&dl);
	json_object_set_new(o, "diagnostics", dj ? dj : json_array());
	set_text(o, "build_output", clean, clen);
	diag_list_free(&dl);
	free(clean);
	return o;
}

/* ---- the request ---- */

/* parse_files - req.files into src_file views of the JSON strings (no copies) */
static int parse_files(json_t *req, struct src_file **out, size_t *n, char *err, size_t errlen)
{
	json_t *files = json_object_get(req, "files");
	if (!json_is_array(files) || json_array_size(files) == 0) {
		snprintf(err, errlen, "files must be a non-empty array of {\"path\", \"content\"} "
				      "objects (or send code as one string)");
		return -EINVAL;
	}
	size_t cnt = json_array_size(files);
	struct src_file *v = calloc(cnt, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < cnt; i++) {
		json_t *f = json_array_get(files, i);
		json_t *p = json_object_get(f, "path"), *c = json_object_get(f, "content");
		if (!json_is_object(f) || !json_is_string(p) || !json_is_string(c)) {
			snprintf(err, errlen, "files[%zu] must be an object with string fields path and "
					      "content", i);
			free(v);
			return -EINVAL;
		}
		if (strlen(json_string_value(p)) != json_string_length(p)) {
			snprintf(err, errlen, "files[%zu].path contains a NUL byte", i);
			free(v);
			return -EINVAL;
		}
		v[i].path = (char *)json_string_value(p);
		v[i].content = (char *)json_string_value(c);
		v[i].len = json_string_length(c);
	}
	*out = v;
	*n = cnt;
	return 0;
}

/* env_name_ok - a portable environment variable name */
static bool env_name_ok(const char *s)
{
	if (!*s || (*s >= '0' && *s <= '9'))
		return false;
	for (; *s; s++)
		if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
		      (*s >= '0' && *s <= '9') || *s == '_'))
			return false;
	return true;
}

/* build_run_env - the program's whole environment: a minimal base, then req.env, then the
 * credentials' variables (extra), then the snippet contract (neither can be overridden) */
static char **build_run_env(const struct pl_cfg *c, json_t *reqenv, json_t *extra, bool snippet,
			    int timeout_ms, char *err, size_t errlen)
{
	json_t *m = json_object();
	const char *path = getenv("PATH");
	const char *tmp = getenv("TMPDIR");
	json_object_set_new(m, "PATH", json_string(path && *path ? path
								  : "/usr/local/bin:/usr/bin:/bin"));
	json_object_set_new(m, "HOME", json_string(c->app_dir));
	json_object_set_new(m, "TMPDIR", json_string(tmp && *tmp ? tmp : "/tmp"));
	if (reqenv && !json_is_null(reqenv)) {
		if (!json_is_object(reqenv) || json_object_size(reqenv) > PL_MAX_ENV_VARS) {
			snprintf(err, errlen, "env must be an object of at most %d string values",
				 PL_MAX_ENV_VARS);
			json_decref(m);
			return NULL;
		}
		const char *k;
		json_t *v;
		json_object_foreach(reqenv, k, v)
		{
			if (!env_name_ok(k) || !json_is_string(v) ||
			    strlen(json_string_value(v)) != json_string_length(v) ||
			    strncmp(k, "KODE_GOPHER_", 12) == 0) {
				snprintf(err, errlen, "env entry %.64s is not a NAME=string pair the "
						      "program may receive", k);
				json_decref(m);
				return NULL;
			}
			json_object_set(m, k, v);
		}
	}
	if (extra)
		json_object_update(m, extra);
	char outdir[PATH_MAX + 8];
	snprintf(outdir, sizeof(outdir), "%s/" ARTIFACTS_DIR, c->app_dir);
	json_object_set_new(m, "KODE_GOPHER_OUT", json_string(outdir));
	if (snippet) {
		char p[PATH_MAX + 32], ms[32];
		snprintf(p, sizeof(p), "%s/result.json", c->rundir);
		json_object_set_new(m, "KODE_GOPHER_RESULT", json_string(p));
		snprintf(p, sizeof(p), "%s/crash.txt", c->rundir);
		json_object_set_new(m, "KODE_GOPHER_CRASH", json_string(p));
		snprintf(ms, sizeof(ms), "%d", timeout_ms);
		json_object_set_new(m, "KODE_GOPHER_TIMEOUT_MS", json_string(ms));
	}
	char **env = calloc(json_object_size(m) + 1, sizeof(*env));
	size_t i = 0;
	const char *k;
	json_t *v;
	json_object_foreach(m, k, v)
	{
		if (env && asprintf(&env[i++], "%s=%s", k, json_string_value(v)) < 0) {
			env[--i] = NULL;
			gobuild_strv_free(env);
			env = NULL;
		}
	}
	json_decref(m);
	if (!env)
		snprintf(err, errlen, "out of memory");
	return env;
}

/* ---- credentials for the run (docs/credentials.md) ---- */

/* What the run's credentials left to undo. */
struct pl_creds {
	char adc_path[PATH_MAX];      /* non-empty: the ADC copy, deleted when the run ends */
	bool metadata;                /* the emulator is listening */
	json_t *env;                  /* the run's credential variables */
};

/* pl_creds_dir - state_dir/credentials, emptied of anything an earlier run left (an agent
 * killed mid-run cannot delete its copy); returns an O_DIRECTORY fd or a negative errno */
static int pl_creds_dir(const struct pl_cfg *c, char *dir, size_t cap)
{
	int rc = pathf(dir, cap, "%s/credentials", c->state_dir);
	if (rc < 0 || (rc = mkdir_private(dir)) < 0)
		return rc;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	wipe_below(fd, false);
	return fd;
}

/* pl_creds_begin - set up the call's credentials for its run; 0, or -errno with a sentence
 * (which never quotes a secret) */
static int pl_creds_begin(const struct pipeline_config *cfg, const struct pl_cfg *c,
			  json_t *creds, void *ctx, struct pl_creds *pc, char *err, size_t errlen)
{
	const char *mode = json_string_value(json_object_get(creds, "mode"));
	if (!creds || json_is_null(creds))
		return 0;
	if (!json_is_object(creds) || !mode) {
		snprintf(err, errlen, "credentials must be an object with a mode");
		return -EINVAL;
	}
	if (!(pc->env = json_object()))
		return -ENOMEM;
	if (strcmp(mode, "adc") == 0) {
		json_t *text = json_object_get(creds, "adc");
		if (!json_is_string(text) || json_string_length(text) == 0 ||
		    json_string_length(text) > 64 * 1024) {
			snprintf(err, errlen, "credentials.adc must be the text of an ADC file (at most "
				 "64 KiB)");
			return -EINVAL;
		}
		char dir[PATH_MAX], name[40], hex[17];
		int dfd = pl_creds_dir(c, dir, sizeof(dir));
		if (dfd < 0) {
			snprintf(err, errlen, "the credentials directory cannot be prepared: %s",
				 strerror(-dfd));
			return dfd;
		}
		unsigned char rnd[8];
		if (RAND_bytes(rnd, sizeof(rnd)) != 1) {
			close(dfd);
			snprintf(err, errlen, "no randomness for the credentials file's name");
			return -EIO;
		}
		for (size_t i = 0; i < sizeof(rnd); i++)
			snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
		/* a fresh name per run: a path a program saw names nothing once its run is over */
		snprintf(name, sizeof(name), "adc-%s.json", hex);
		int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		int rc = fd < 0 ? -errno : 0;
		const char *p = json_string_value(text);
		size_t left = json_string_length(text);
		while (rc == 0 && left) {
			ssize_t n = write(fd, p, left);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				rc = n < 0 ? -errno : -EIO;
				break;
			}
			p += n;
			left -= (size_t)n;
		}
		if (fd >= 0 && close(fd) != 0 && rc == 0)
			rc = -errno;
		/* the agent keeps no copy of the refresh token or key beyond the file */
		OPENSSL_cleanse((char *)json_string_value(text), json_string_length(text));
		if (rc < 0) {
			unlinkat(dfd, name, 0);
			close(dfd);
			snprintf(err, errlen, "the credentials file could not be written: %s",
				 strerror(-rc));
			return rc;
		}
		close(dfd);
		if (pathf(pc->adc_path, sizeof(pc->adc_path), "%s/%s", dir, name) < 0)
			return -ENAMETOOLONG;
		json_object_set_new(pc->env, "GOOGLE_APPLICATION_CREDENTIALS",
				    json_string(pc->adc_path));
		return 0;
	}
	if (strcmp(mode, "metadata") == 0) {
		if (!cfg->metadata || !cfg->event) {
			snprintf(err, errlen, "this agent has no metadata-server emulator");
			return -ENOTSUP;
		}
		struct metadata_view v;
		int rc = metadata_view_from_json(creds, mono_s(), &v, err, errlen);
		if (rc < 0)
			return rc;
		char host[64];
		rc = metadata_server_begin(cfg->metadata, &v, cfg->event, ctx, host, sizeof(host), err,
					   errlen);
		if (rc < 0)
			return rc;
		pc->metadata = true;
		/* host:port, as each library wants it: Go and google-auth read GCE_METADATA_HOST,
		 * google-auth's probe GCE_METADATA_IP, older clients GCE_METADATA_ROOT */
		json_object_set_new(pc->env, "GCE_METADATA_HOST", json_string(host));
		json_object_set_new(pc->env, "GCE_METADATA_IP", json_string(host));
		json_object_set_new(pc->env, "GCE_METADATA_ROOT", json_string(host));
		return 0;
	}
	snprintf(err, errlen, "credentials.mode %.32s is not adc or metadata", mode);
	return -EINVAL;
}

/* pl_creds_end - the run is over: delete the ADC copy, stop the emulator (idempotent) */
static void pl_creds_end(const struct pipeline_config *cfg, struct pl_creds *pc)
{
	if (pc->adc_path[0]) {
		if (unlink(pc->adc_path) != 0 && errno != ENOENT)
			log_warn("the credentials copy %s could not be deleted: %s", pc->adc_path,
				 strerror(errno));
		pc->adc_path[0] = '\0';
	}
	if (pc->metadata) {
		metadata_server_end(cfg->metadata);
		pc->metadata = false;
	}
	json_decref(pc->env);
	pc->env = NULL;
}

/* run_outcome - the result object for what the binary did */
static json_t *run_outcome(const struct pl_cfg *c, bool snippet, int timeout_ms,
			   const struct runproc_result *r)
{
	char secs[32];
	seconds_text(timeout_ms, secs, sizeof(secs));
	char msg[512];
	bool over = r->timed_out || r->wall_ms >= timeout_ms;
	if (snippet) {
		char why[256] = "";
		int rfd = open(c->rundir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		json_t *res = rfd >= 0 ? load_result_file(rfd, why, sizeof(why)) : NULL;
		if (res) {
			const char *kind = json_string_value(json_object_get(res, "kind"));
			if (over && strcmp(kind, "error") == 0) {
				/* run gave up because its context ran out: that is the timeout */
				const char *em = json_string_value(json_object_get(res, "message"));
				snprintf(msg, sizeof(msg), "the program ran past its %s timeout; run "
							   "returned the error: %.300s",
					 secs, em ? em : "");
				json_decref(res);
				res = kind_msg("timeout", msg);
			}
			close(rfd);
			return res;
		}
		if (why[0] && !r->timed_out && r->signal == 0) {
			if (rfd >= 0)
				close(rfd);
			return kind_msg("internal_error", why);
		}
		if (r->timed_out) {
			if (rfd >= 0)
				close(rfd);
			snprintf(msg, sizeof(msg), "the program ran past its %s timeout and was killed",
				 secs);
			return kind_msg("timeout", msg);
		}
		char *crash = NULL;
		size_t clen = 0;
		if (rfd >= 0 && read_small(rfd, "crash.txt", PL_CRASH_MAX_BYTES, &crash, &clen) == 0) {
			json_t *p = parse_crash(crash, clen);
			free(crash);
			if (p) {
				close(rfd);
				return p;
			}
		}
		if (rfd >= 0)
			close(rfd);
		/* no crash file (e.g. a panic before the crash output was set): try stderr */
		json_t *p = parse_crash(r->err.data, r->err.len);
		if (p && r->exit_code == 2)
			return p;
		json_decref(p);
		if (r->signal) {
			snprintf(msg, sizeof(msg), "the program was killed by %s%s",
				 runproc_signame(r->signal),
				 r->signal == SIGKILL ? " (out of memory?)" : "");
			return kind_msg("killed", msg);
		}
		const char *wfail = r->exit_code == 3 ? strstr(r->err.data, "kode-gopher: cannot write")
						      : NULL;
		if (wfail) {
			/* the generated main's own exit status for an unwritable result file */
			snprintf(msg, sizeof(msg), "%.*s", (int)strcspn(wfail, "\n"), wfail);
			return kind_msg("internal_error", msg);
		}
		snprintf(msg, sizeof(msg), "the program exited with status %d before run returned "
					   "(did something call os.Exit or log.Fatal?)",
			 r->exit_code);
		return kind_msg("exit", msg);
	}
	if (r->timed_out) {
		snprintf(msg, sizeof(msg), "the program ran past its %s timeout and was %s", secs,
			 r->signal ? "killed" : "stopped");
		return kind_msg("timeout", msg);
	}
	if (r->signal) {
		snprintf(msg, sizeof(msg), "the program was killed by %s%s", runproc_signame(r->signal),
			 r->signal == SIGKILL ? " (out of memory?)" : "");
		return kind_msg("killed", msg);
	}
	if (r->exit_code == 0) {
		json_t *o = json_object();
		json_object_set_new(o, "kind", json_string("ok"));
		return o;
	}
	if (r->exit_code == 2) {
		json_t *p = parse_crash(r->err.data, r->err.len);
		if (p)
			return p;
	}
	snprintf(msg, sizeof(msg), "the program exited with status %d", r->exit_code);
	return kind_msg("exit", msg);
}

/* disk_full - when the sandbox's disk limit is what failed text's writes (ENOSPC, EDQUOT, or
 * /app's file system full now), the sentence that says so into buf; false otherwise */
static bool disk_full(const struct pl_cfg *c, const char *text, size_t len, char *buf, size_t cap)
{
	if (c->disk_limit <= 0)
		return false;
	struct statvfs v;
	bool said = text && (memmem(text, len, "no space left on device", 23) ||
			     memmem(text, len, "disk quota exceeded", 19));
	bool stat_ok = statvfs(c->app_dir, &v) == 0;
	/* ext4 keeps a few blocks back from a write that fails: "full" is under 1 MiB left */
	bool no_blocks = stat_ok && (unsigned long long)v.f_bavail * v.f_frsize < (1ull << 20);
	bool no_inodes = stat_ok && v.f_files > 0 && v.f_favail == 0;
	if (!said && !no_blocks && !no_inodes)
		return false;
	snprintf(buf, cap, "the sandbox's disk is full%s: it allows %lld MiB for /app, /app/persist "
		 "and the session's caches together; write less, or remove files from /app/persist "
		 "(the rest of /app is wiped before each call)",
		 no_inodes && !no_blocks ? " (no more files: all its inodes are used)" : "",
		 c->disk_limit >> 20);
	return true;
}

/*
 * disk_reserve - the agent's reserve on the sandbox's own disk (a file in the state directory,
 * allocated but never written, so it costs the host nothing). A program may fill /app/persist,
 * which the wipe keeps; without room the next build would fail too, and the session could never
 * run the program that cleans up. So: when, after the wipe, less than the reserve is free, the
 * reserve goes and this call builds in its place; whenever twice that is free again, it comes
 * back. Only where /app is on a file system of the limit's size (the local jail's, policy/volume.c).
 */
static void disk_reserve(const struct pl_cfg *c)
{
	struct statvfs v;
	if (c->disk_limit <= 0 || statvfs(c->app_dir, &v) != 0 ||
	    (long long)v.f_blocks * (long long)v.f_frsize > c->disk_limit)
		return;
	long long size = c->disk_limit / 8, free_b = (long long)v.f_bavail * (long long)v.f_frsize;
	size = size < PL_DISK_RESERVE_MIN_BYTES ? PL_DISK_RESERVE_MIN_BYTES : size > PL_DISK_RESERVE_MAX_BYTES ? PL_DISK_RESERVE_MAX_BYTES : size;
	char path[PATH_MAX];
	if (pathf(path, sizeof(path), "%s/.disk-reserve", c->state_dir) != 0)
		return;
	struct stat st;
	bool have = lstat(path, &st) == 0;
	if (have && free_b < size) {
		unlink(path);
		log_info("the sandbox's disk is nearly full (%lld KiB free): its reserve of %lld MiB is "
			 "given to this call", free_b >> 10, size >> 20);
	} else if (!have && free_b >= 2 * size) {
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0 && fallocate(fd, 0, 0, size) != 0)
			unlink(path);
		if (fd >= 0)
			close(fd);
	}
}

/* oom_kills - the kernel's count of OOM kills in the sandbox's memory cgroup, or -1 */
static long long oom_kills(const struct pl_cfg *c)
{
	if (c->oom_events <= 0)
		return -1;
	char buf[512];
	ssize_t n = pread(c->oom_events - 1, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return cgroup_parse_oom_kills(buf);
}

/* resource_hint - when a sandbox limit ended the program, say which, in words a model can act
 * on: the kernel's SIGKILL or Go's "failed to create new OS thread" mean nothing by themselves */
static json_t *resource_hint(const struct pl_cfg *c, const struct runproc_result *r,
			     bool oom_killed, json_t *res)
{
	const char *err = r->err.data ? r->err.data : "";
	const char *msg = json_string_value(json_object_get(res, "message"));
	char hint[512] = "";
	bool oom = (oom_killed && !r->timed_out && (r->signal || r->exit_code != 0)) ||
		   strstr(err, "runtime: out of memory") || strstr(err, "cannot allocate memory") ||
		   (r->signal == SIGKILL && !r->timed_out && c->memory_limit > 0 &&
		    (long long)r->maxrss_kb * 1024 >= c->memory_limit * 7 / 10);
	bool procs = strstr(err, "failed to create new OS thread") ||
		     strstr(err, "resource temporarily unavailable") ||
		     strstr(err, "pthread_create failed") ||
		     (msg && strstr(msg, "fork/exec") && strstr(msg, "resource temporarily unavailable"));
	const char *kind = json_string_value(json_object_get(res, "kind"));
	if (kind && strcmp(kind, "ok") == 0)
		return res;
	size_t errlen = r->err.data ? r->err.len : 0, outlen = r->out.data ? r->out.len : 0;
	if (disk_full(c, err, errlen, hint, sizeof(hint)) ||
	    disk_full(c, r->out.data, outlen, hint, sizeof(hint)) ||
	    (msg && disk_full(c, msg, strlen(msg), hint, sizeof(hint))))
		; /* the disk's sentence is in hint */
	else if (oom)
		snprintf(hint, sizeof(hint), "the program ran out of memory: the sandbox allows %lld MiB "
			 "(builds included); use less, e.g. stream or summarize the data",
			 c->memory_limit >> 20);
	else if (procs)
		snprintf(hint, sizeof(hint), "the program hit the sandbox's limit of %d processes and "
			 "threads (too many processes); start fewer", c->pids_limit);
	else if (r->signal == SIGKILL && !r->timed_out)
		snprintf(hint, sizeof(hint), "the program was killed by SIGKILL; if it used a lot of "
			 "memory it probably ran out (the sandbox allows %lld MiB)", c->memory_limit >> 20);
	if (!hint[0] || (c->memory_limit <= 0 && c->disk_limit <= 0))
		return res;
	char full[1024];
	snprintf(full, sizeof(full), "%s%s%.400s", hint, msg ? ": " : "", msg ? msg : "");
	json_object_set_new(res, "message", json_string(full));
	return res;
}

/* progress_say - call the progress callback if there is one */
static void progress_say(pipeline_progress_fn fn, void *ctx, const char *phase, const char *fmt,
			 ...)
{
	if (!fn)
		return;
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fn(ctx, phase, msg);
}

/* reload_modfiles - go.mod/go.sum as they are in app_dir now (after a resolve) */
static int reload_modfiles(const char *app_dir, struct gobuild_modfiles *m)
{
	struct gobuild_modfiles n = { 0 };
	int rc = gobuild_load_modfiles(app_dir, "/nonexistent", "go1.0", &n);
	if (rc < 0 || strcmp(n.source, "session") != 0) {
		gobuild_modfiles_free(&n);
		return rc < 0 ? rc : -ENOENT;
	}
	gobuild_modfiles_free(m);
	*m = n;
	m->source = "session";
	return 0;
}

/* ---- test mode ---- */


/* What the call asked of go test (docs/snippets-and-results.md, "Test mode"). */
struct pl_test_opts {
	const char *run, *skip, *bench, *benchtime;
	int count;
	bool cover, shortm;
};

/* pl_pattern_ok - a -run/-bench regexp: bounded, printable, no NUL */
static bool pl_pattern_ok(json_t *v)
{
	const char *s = json_string_value(v);
	if (!s || json_string_length(v) != strlen(s) || strlen(s) > TEST_PATTERN_MAX_BYTES)
		return false;
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

/* pl_test_opts - req.test into opts; -EINVAL with a sentence (the agent checks again what the
 * worker checked: the side that runs it distrusts) */
static int pl_test_opts(json_t *t, struct pl_test_opts *o, char *err, size_t errlen)
{
	memset(o, 0, sizeof(*o));
	o->count = 1;
	if (!t || json_is_null(t))
		return 0;
	if (!json_is_object(t)) {
		snprintf(err, errlen, "test must be an object such as {\"run\": \"TestX\"}");
		return -EINVAL;
	}
	const char *k;
	json_t *v;
	json_object_foreach(t, k, v) {
		if (strcmp(k, "run") == 0 || strcmp(k, "skip") == 0 || strcmp(k, "bench") == 0) {
			if (!pl_pattern_ok(v)) {
				snprintf(err, errlen, "test.%s must be a regular expression of at most %d "
					 "printable bytes", k, TEST_PATTERN_MAX_BYTES);
				return -EINVAL;
			}
			const char **dst = k[0] == 'r' ? &o->run : k[0] == 's' ? &o->skip : &o->bench;
			*dst = json_string_value(v);
		} else if (strcmp(k, "benchtime") == 0) {
			const char *s = json_string_value(v);
			char *end = NULL;
			long n = s ? strtol(s, &end, 10) : 0;
			if (!s || n <= 0 || n > 100000 ||
			    !(strcmp(end, "x") == 0 || strcmp(end, "s") == 0 || strcmp(end, "ms") == 0)) {
				snprintf(err, errlen, "test.benchtime must be like \"100x\", \"1s\" or "
					 "\"200ms\"");
				return -EINVAL;
			}
			o->benchtime = s;
		} else if (strcmp(k, "count") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 1 ||
			    json_integer_value(v) > TEST_COUNT_MAX) {
				snprintf(err, errlen, "test.count must be a whole number from 1 to %d",
					 TEST_COUNT_MAX);
				return -EINVAL;
			}
			o->count = (int)json_integer_value(v);
		} else if (strcmp(k, "cover") == 0 || strcmp(k, "short") == 0) {
			if (!json_is_boolean(v)) {
				snprintf(err, errlen, "test.%s must be true or false", k);
				return -EINVAL;
			}
			*(k[0] == 'c' ? &o->cover : &o->shortm) = json_is_true(v);
		} else if (strcmp(k, "race") == 0) {
			if (json_is_true(v)) {
				snprintf(err, errlen, "test.race is not available: the race detector needs "
					 "cgo, and cgo is off in the sandbox; run the tests without race");
				return -EINVAL;
			}
		} else {
			snprintf(err, errlen, "test has no option %.40s (it takes run, skip, bench, "
				 "benchtime, count, cover, short)", k);
			return -EINVAL;
		}
	}
	return 0;
}

/* pl_import_path - "app" for the root, "app/<dir>" for a subdirectory */
static void pl_import_path(const char *dir, char *buf, size_t len)
{
	if (strcmp(dir, ".") == 0)
		snprintf(buf, len, "%s", NORM_MODULE_PATH);
	else
		snprintf(buf, len, "%s/%s", NORM_MODULE_PATH, dir);
}

/* pl_test_build - go test -c for every package, resolving missing imports once; 0 with every
 * binary built (bins[i][0] == '\0' for a package without tests), 1 when o now holds the build
 * failure, <0 on a sandbox fault (o holds it) */
static int pl_test_build(const struct pl_cfg *c, const struct norm_result *nr,
			 const struct pl_test_opts *to, char (*bins)[PATH_MAX], json_t **o,
			 struct timings *tm, bool *tidied, pipeline_progress_fn progress, void *ctx)
{
	struct timespec ts;
	for (int attempt = 0; attempt < 2; attempt++) {
		bool resolve = false;
		for (size_t i = 0; i < nr->ntest_dirs; i++) {
			struct runproc_result br = { 0 };
			bool built = false;
			char ipath[PATH_MAX];
			pl_import_path(nr->test_dirs[i], ipath, sizeof(ipath));
			progress_say(progress, ctx, "build", "go test -c %s", ipath);
			if (pathf(bins[i], PATH_MAX, "%s/tbin/%zu.test", c->state_dir, i) < 0)
				return -ENAMETOOLONG;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			int rc = gobuild_test_build(&c->env, c->app_dir, nr->test_dirs[i], bins[i],
						    to->cover, &br, &built);
			tm->build_ms += mono_since_ms(&ts);
			if (rc < 0) {
				json_decref(*o);
				*o = internal_result("go test could not be started: %s", strerror(-rc));
				return rc;
			}
			if (built) {
				runproc_result_free(&br);
				continue;
			}
			if (br.exit_code == 0 && !br.timed_out) {
				bins[i][0] = '\0'; /* no test files for this build (constraints) */
				runproc_result_free(&br);
				continue;
			}
			if (attempt == 0 && !br.timed_out && gobuild_needs_resolve(br.out.data, br.out.len)) {
				char **pkgs = NULL;
				size_t npkgs = 0;
				char *why = NULL, *tlog = NULL;
				if (gobuild_missing_packages(br.out.data, br.out.len, &pkgs, &npkgs) < 0) {
					runproc_result_free(&br);
					return -ENOMEM;
				}
				progress_say(progress, ctx, "tidy", "adding the modules for %s%s",
					     npkgs ? pkgs[0] : "the imports", npkgs > 1 ? " and others" : "");
				clock_gettime(CLOCK_MONOTONIC, &ts);
				rc = gobuild_resolve(&c->env, c->app_dir, pkgs, npkgs, &why, &tlog);
				tm->tidy_ms += mono_since_ms(&ts);
				gobuild_strv_free(pkgs);
				if (tlog) {
					size_t tl = 0;
					char *clean = diag_clean_output(tlog, strlen(tlog), c->app_dir, &tl);
					if (clean)
						set_text(*o, "tidy_output", clean,
							 tl > GOBUILD_OUTPUT_CAP ? GOBUILD_OUTPUT_CAP : tl);
					free(clean);
					free(tlog);
				}
				if (rc == -EAGAIN) {
					build_error_result(*o, c, nr, br.out.data, br.out.len, false, why);
					free(why);
					runproc_result_free(&br);
					return 1;
				}
				free(why);
				if (rc < 0) {
					runproc_result_free(&br);
					json_decref(*o);
					*o = internal_result("resolving the imports failed: %s", strerror(-rc));
					return rc;
				}
				*tidied = true;
				if ((rc = gobuild_save_modfiles(c->app_dir, c->state_dir)) < 0)
					log_warn("the session's go.mod could not be saved: %s", strerror(-rc));
				runproc_result_free(&br);
				resolve = true;
				break;
			}
			build_error_result(*o, c, nr, br.out.data, br.out.len, br.timed_out, NULL);
			runproc_result_free(&br);
			return 1;
		}
		if (!resolve)
			return 0;
	}
	return 0;
}

/* pl_test - test mode from the build on: go test -c per package, each binary run by test2json
 * in the program's own namespaces with the call's environment and one shared deadline */
static json_t *pl_test(const struct pipeline_config *cfg, struct pl_cfg *c, json_t *req,
		       const struct norm_result *nr, json_t *o, struct timings *tm,
		       const struct timespec *t0, int timeout_ms, pipeline_progress_fn progress,
		       void *ctx)
{
	char err[1024] = "";
	struct pl_test_opts to;
	if (pl_test_opts(json_object_get(req, "test"), &to, err, sizeof(err)) < 0) {
		json_object_set_new(o, "result", kind_msg("normalize_error", err));
		return finish(o, "normalize", "test", tm, t0);
	}
	char tbin[PATH_MAX];
	if (pathf(tbin, sizeof(tbin), "%s/tbin", c->state_dir) < 0 || mkdir_private(tbin) < 0) {
		json_decref(o);
		return internal_result("the test binaries' directory cannot be made");
	}
	int tfd = open(tbin, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (tfd >= 0) {
		wipe_below(tfd, false);
		close(tfd);
	}
	char (*bins)[PATH_MAX] = calloc(nr->ntest_dirs, PATH_MAX);
	if (!bins) {
		json_decref(o);
		return internal_result("out of memory");
	}
	bool tidied = false;
	int rc = pl_test_build(c, nr, &to, bins, &o, tm, &tidied, progress, ctx);
	json_object_set_new(o, "tidied", json_boolean(tidied));
	if (rc != 0) {
		free(bins);
		return rc < 0 ? o : finish(o, "build", "test", tm, t0);
	}
	char t2j[PATH_MAX];
	if ((rc = gobuild_test2json(&c->env, t2j, sizeof(t2j))) < 0) {
		free(bins);
		json_decref(o);
		return internal_result("the toolchain's test2json could not be found: %s", strerror(-rc));
	}

	struct pl_creds pcr = { .adc_path = "" };
	rc = pl_creds_begin(cfg, c, json_object_get(req, "credentials"), ctx, &pcr, err, sizeof(err));
	char **envp = rc < 0 ? NULL
			     : build_run_env(c, json_object_get(req, "env"), pcr.env, false,
					     timeout_ms, err, sizeof(err));
	if (!envp) {
		pl_creds_end(cfg, &pcr);
		free(bins);
		json_decref(o);
		return internal_result("the tests' environment could not be set up: %s", err);
	}
	struct gotest_report *rep = gotest_report_new(c->output_cap);
	int exit_code = 0, sig = 0;
	bool timed_out = false;
	long wall = 0;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	for (size_t i = 0; rep && i < nr->ntest_dirs; i++) {
		char ipath[PATH_MAX], cwd[PATH_MAX], a_timeout[48], a_run[TEST_PATTERN_MAX_BYTES + 16],
			a_skip[TEST_PATTERN_MAX_BYTES + 16], a_bench[TEST_PATTERN_MAX_BYTES + 16],
			a_benchtime[48], a_count[32];
		pl_import_path(nr->test_dirs[i], ipath, sizeof(ipath));
		if (!bins[i][0]) {
			gotest_report_package(rep, ipath, "no_tests", "no test files\n");
			continue;
		}
		long left = timeout_ms - mono_since_ms(&ts);
		if (left <= 0) {
			timed_out = true;
			gotest_report_package(rep, ipath, "fail", "not run: the call's timeout ran out\n");
			continue;
		}
		if (pathf(cwd, sizeof(cwd), "%s/%s", c->app_dir, nr->test_dirs[i]) < 0)
			continue;
		const char *argv[20];
		int n = 0;
		argv[n++] = t2j;
		argv[n++] = "-p";
		argv[n++] = ipath;
		argv[n++] = bins[i];
		argv[n++] = "-test.v=test2json";
		argv[n++] = "-test.paniconexit0";
		snprintf(a_timeout, sizeof(a_timeout), "-test.timeout=%ldms", left);
		argv[n++] = a_timeout;
		snprintf(a_count, sizeof(a_count), "-test.count=%d", to.count);
		argv[n++] = a_count;
		if (to.run) {
			snprintf(a_run, sizeof(a_run), "-test.run=%s", to.run);
			argv[n++] = a_run;
		}
		if (to.skip) {
			snprintf(a_skip, sizeof(a_skip), "-test.skip=%s", to.skip);
			argv[n++] = a_skip;
		}
		if (to.bench) {
			snprintf(a_bench, sizeof(a_bench), "-test.bench=%s", to.bench);
			argv[n++] = a_bench;
			argv[n++] = "-test.benchmem";
		}
		if (to.benchtime) {
			snprintf(a_benchtime, sizeof(a_benchtime), "-test.benchtime=%s", to.benchtime);
			argv[n++] = a_benchtime;
		}
		if (to.shortm)
			argv[n++] = "-test.short";
		argv[n] = NULL;
		progress_say(progress, ctx, "test", "testing %s", ipath);
		struct runproc_opts ro = {
			.argv = argv,
			.envp = (const char *const *)envp,
			.cwd = cwd,
			/* the binary's own -test.timeout fires first and prints the stacks */
			.timeout_ms = (int)left + PL_GRACE_MS,
			.term_signal = SIGTERM,
			.grace_ms = PL_GRACE_MS,
			.out_cap = GOTEST_EVENTS_CAP,
			.err_cap = 64 * 1024,
			.keep_tail = true,
			.merge_stderr = true,
			.seccomp = c->user_filter,
			.launcher = runproc_isolated(),
		};
		struct runproc_result rr;
		rc = runproc_run(&ro, &rr);
		if (rc < 0) {
			gotest_report_package(rep, ipath, "fail", "the test binary could not be started\n");
			exit_code = exit_code ? exit_code : 1;
			continue;
		}
		gotest_report_feed(rep, ipath, rr.out.data, rr.out.len);
		gotest_report_elapsed(rep, ipath, rr.wall_ms / 1000.0);
		wall += rr.wall_ms;
		tm->cpu_user_ms += rr.user_ms;
		tm->cpu_sys_ms += rr.sys_ms;
		if (rr.maxrss_kb > tm->max_rss_kb)
			tm->max_rss_kb = rr.maxrss_kb;
		timed_out |= rr.timed_out;
		if (rr.signal && !sig)
			sig = rr.signal;
		if (rr.exit_code > 0 && !exit_code)
			exit_code = rr.exit_code;
		runproc_result_free(&rr);
	}
	tm->run_ms = mono_since_ms(&ts);
	pl_creds_end(cfg, &pcr);
	gobuild_strv_free(envp);
	free(bins);
	json_t *tests = NULL, *pkgs = NULL, *totals = NULL;
	char failed[1024], *text = NULL;
	size_t text_len = 0;
	bool text_trunc = false;
	if (!rep || gotest_report_finish(rep, &tests, &pkgs, &totals, failed, sizeof(failed), &text,
					 &text_len, &text_trunc) < 0) {
		gotest_report_free(rep);
		json_decref(o);
		return internal_result("out of memory while gathering the test results");
	}
	timed_out |= gotest_report_timed_out(rep);
	gotest_report_free(rep);
	json_object_set_new(o, "exit_code", sig ? json_null() : json_integer(exit_code));
	json_object_set_new(o, "signal", sig ? json_string(runproc_signame(sig)) : json_null());
	json_object_set_new(o, "duration_ms", json_integer(wall));
	set_text(o, "stdout", text, text_len);
	json_object_set_new(o, "stdout_truncated", json_boolean(text_trunc));
	free(text);
	json_int_t nfail = json_integer_value(json_object_get(totals, "failed"));
	json_int_t ntests = json_integer_value(json_object_get(totals, "tests"));
	const char *bad_pkg = NULL;
	size_t k;
	json_t *p;
	json_array_foreach(pkgs, k, p) {
		const char *st = json_string_value(json_object_get(p, "status"));
		if (st && strcmp(st, "fail") == 0 && !bad_pkg)
			bad_pkg = json_string_value(json_object_get(p, "package"));
	}
	char msg[1400], secs[32];
	seconds_text(timeout_ms, secs, sizeof(secs));
	json_t *res;
	if (timed_out) {
		snprintf(msg, sizeof(msg), "the tests ran past their %s timeout and were stopped%s%s",
			 secs, failed[0] ? "; failed or unfinished: " : "", failed);
		res = kind_msg("timeout", msg);
	} else if (nfail) {
		snprintf(msg, sizeof(msg), "%lld of %lld tests failed: %s", (long long)nfail,
			 (long long)ntests, failed);
		res = kind_msg("test_failure", msg);
	} else if (bad_pkg) {
		snprintf(msg, sizeof(msg), "package %s failed outside any test (see packages[].output): "
			 "an init, TestMain or os.Exit, or a crash", bad_pkg);
		res = kind_msg("test_failure", msg);
	} else {
		res = json_pack("{s:s}", "kind", "ok");
	}
	json_object_set_new(o, "result", res);
	json_object_set_new(o, "tests", tests);
	json_object_set_new(o, "packages", pkgs);
	json_object_set_new(o, "test_totals", totals);
	return finish(o, "test", "test", tm, t0);
}

/* pipeline_execute - see pipeline.h */
/* pl_files_after - what the worker learns of the session's files after a call (takes before):
 * the digest of both directories (notifications/resources/list_changed) and the watched files
 * that changed since before (notifications/resources/updated) */
static void pl_files_after(const struct pl_cfg *c, int appfd, json_t *before, json_t *o)
{
	int fd = appfd >= 0 ? appfd : open(c->app_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0 && o) {
		char digest[65];
		artifacts_digest(fd, digest);
		json_object_set_new(o, "resources_digest", json_string(digest));
		artifacts_watch_changed(fd, before, o);
	}
	if (fd >= 0 && fd != appfd)
		close(fd);
	json_decref(before);
}

/* pipeline_warm - see pipeline.h */
void pipeline_warm(const struct pipeline_config *cfg)
{
	struct pl_cfg c;
	struct gobuild_tools t;
	if (pl_cfg_init(cfg, &c) == 0 && gobuild_toolchain(&c.env, &t) < 0)
		log_warn("the toolchain could not be asked where its tools are; the first call asks again");
}

/* pl_files_before - the watched files' stamps before the call changes anything */
static json_t *pl_files_before(const struct pl_cfg *c, json_t *req)
{
	json_t *watch = json_object_get(req, "watch");
	if (!json_is_array(watch) || !json_array_size(watch))
		return NULL;
	int fd = open(c->app_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	json_t *st = fd >= 0 ? artifacts_stamps(fd, watch) : NULL;
	if (fd >= 0)
		close(fd);
	return st;
}

json_t *pipeline_execute(const struct pipeline_config *cfg, json_t *req,
			 pipeline_progress_fn progress, void *ctx)
{
	struct timespec t0, ts;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct timings tm = { 0 };
	struct pl_cfg c;
	int rc = pl_cfg_init(cfg, &c);
	if (rc < 0)
		return internal_result("the agent's directories are not usable: %s", strerror(-rc));
	if (!json_is_object(req))
		return internal_result("the execute request must be a JSON object");

	char err[1024] = "";
	json_t *jt = json_object_get(req, "timeout_ms");
	int timeout_ms = c.default_timeout_ms;
	if (jt && !json_is_null(jt)) {
		if (!json_is_integer(jt) || json_integer_value(jt) <= 0)
			return internal_result("timeout_ms must be a positive integer");
		json_int_t v = json_integer_value(jt);
		timeout_ms = v > c.max_timeout_ms ? c.max_timeout_ms : (int)v;
	}

	/* 1. wipe (the files watched for resources/subscribe are looked at first) */
	json_t *watched = pl_files_before(&c, req);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	rc = pl_wipe_app(c.app_dir);
	if (rc < 0) {
		json_decref(watched);
		return internal_result("%s could not be prepared: %s", c.app_dir, strerror(-rc));
	}
	disk_reserve(&c);
	long wipe_ms = mono_since_ms(&ts);

	/* 2. normalize */
	progress_say(progress, ctx, "normalize", "checking the files");
	clock_gettime(CLOCK_MONOTONIC, &ts);
	struct src_file *in = NULL;
	size_t nin = 0;
	json_t *o = result_new();
	if (!o) {
		json_decref(watched);
		return NULL;
	}
	rc = parse_files(req, &in, &nin, err, sizeof(err));
	if (rc == -ENOMEM) {
		json_decref(o);
		json_decref(watched);
		return internal_result("out of memory");
	}
	struct norm_result nr = { 0 };
	json_t *jm = json_object_get(req, "mode");
	const char *want = json_string_value(jm);
	if (rc == 0 && jm && !json_is_null(jm) && (!want || (strcmp(want, "run") != 0 &&
							     strcmp(want, "test") != 0))) {
		snprintf(err, sizeof(err), "mode must be \"run\" or \"test\"");
		rc = -EINVAL;
	}
	/* test mode when asked, or (unless run is asked) when _test.go files were sent */
	bool test = want ? strcmp(want, "test") == 0
			 : json_object_get(req, "test") || (rc == 0 && normalize_has_tests(in, nin));
	if (rc == 0)
		rc = test ? normalize_tests(in, nin, &nr, err, sizeof(err))
			  : normalize(in, nin, &nr, err, sizeof(err));
	free(in);
	tm.normalize_ms = mono_since_ms(&ts);
	if (rc < 0) {
		json_object_set_new(o, "result", kind_msg("normalize_error",
							  rc == -ENOMEM ? "out of memory" : err));
		o = finish(o, "normalize", test ? "test" : NULL, &tm, &t0);
		pl_files_after(&c, -1, watched, o); /* the wipe may have removed the last call's out/ */
		return o;
	}
	const char *mode = nr.mode == NORM_SNIPPET ? "wrapped"
			   : nr.mode == NORM_TEST  ? "test"
						   : "program";
	bool snippet = nr.mode == NORM_SNIPPET;

	/* 3. write */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	struct gobuild_modfiles mf = { 0 };
	struct fastbuild_call fbc = { 0 };
	char goversion[64], hex[65], bin[PATH_MAX];
	char **pkgs = NULL;
	char *why_ahead = NULL; /* why resolving the imports before the build failed */
	char **envp = NULL;
	struct pl_creds pcr = { .adc_path = "" };
	int appfd = open(c.app_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (appfd < 0) {
		json_decref(o);
		o = internal_result("%s cannot be opened: %s", c.app_dir, strerror(errno));
		goto out;
	}
	for (size_t i = 0; i < nr.nfiles; i++) {
		rc = pl_write_file(appfd, &nr.files[i]);
		if (rc == -EEXIST || rc == -ELOOP || rc == -ENOTDIR || rc == -EISDIR) {
			char m[512];
			snprintf(m, sizeof(m), "%s cannot be written: %s (a file, directory or link "
					       "left in /app/persist is in the way)",
				 nr.files[i].path, strerror(-rc));
			json_object_set_new(o, "result", kind_msg("normalize_error", m));
			o = finish(o, "normalize", mode, &tm, &t0);
			goto out;
		}
		if (rc < 0) {
			json_decref(o);
			o = internal_result("%s could not be written: %s", nr.files[i].path,
					    strerror(-rc));
			goto out;
		}
	}
	if ((rc = gobuild_go_version(&c.env, goversion, sizeof(goversion))) < 0) {
		json_decref(o);
		o = internal_result("the Go toolchain (%s) could not be run: %s", c.go_bin,
				    strerror(-rc));
		goto out;
	}
	if ((rc = gobuild_load_modfiles(c.state_dir, c.runtime_dir, goversion, &mf)) < 0 ||
	    (rc = gobuild_write_modfiles(appfd, &mf, true)) < 0) {
		json_decref(o);
		o = internal_result("go.mod could not be written: %s", strerror(-rc));
		goto out;
	}
	if ((rc = artifacts_prepare(appfd)) < 0) {
		json_decref(o);
		o = internal_result("/app/" ARTIFACTS_DIR " could not be made: %s", strerror(-rc));
		goto out;
	}
	tm.write_ms = wipe_ms + mono_since_ms(&ts);
	if (nr.mode == NORM_TEST) {
		o = pl_test(cfg, &c, req, &nr, o, &tm, &t0, timeout_ms, progress, ctx);
		if (o && strcmp(json_string_value(json_object_get(o, "phase")), "test") == 0)
			artifacts_collect(appfd, o);
		goto out;
	}

	/* 4. the binary cache */
	if ((rc = gobuild_cache_key(nr.files, nr.nfiles, &mf, goversion, hex)) < 0) {
		json_decref(o);
		o = internal_result("the build cache key could not be computed");
		goto out;
	}
	bool cached = gobuild_cache_lookup(c.state_dir, hex, bin, sizeof(bin)) == 1;
	bool tidied = false;
	if (cached)
		progress_say(progress, ctx, "build", "using the binary built for identical files");

	/* 5. build: directly with compile and link when an earlier go build left a plan for
	 * these imports (agent/fastbuild.c), else go build, resolving imports once if go.mod does
	 * not cover them */
	struct runproc_result br = { 0 };
	bool built = cached, direct = false, said = false;
	/* imports no module of go.mod can provide are resolved before the first build: that
	 * build would only fail on them, at the cost of loading the whole module graph (about a
	 * tenth of a second, the gap to doing it by hand, issue 17), as would a direct build; what
	 * slips through (a module nested under a required one) is still found by the build below */
	char **early = NULL;
	size_t nearly = 0;
	if (!cached) {
		char **imports = NULL;
		size_t nimports = 0;
		bool oom = false;
		for (size_t i = 0; i < nr.nfiles && !oom; i++) {
			const char *p = nr.files[i].path;
			size_t pl = strlen(p);
			/* go build's files; one that is not plain Go to the scanner is left to it */
			if (pl > 3 && strcmp(p + pl - 3, ".go") == 0 &&
			    !(pl >= 8 && strcmp(p + pl - 8, "_test.go") == 0) &&
			    fastbuild_imports(nr.files[i].content, nr.files[i].len, &imports,
					      &nimports) == -ENOMEM)
				oom = true;
		}
		if (oom || gobuild_uncovered(&mf, imports, nimports, &early, &nearly) < 0)
			nearly = 0;
		gobuild_strv_free(imports);
		if (!nearly) {
			gobuild_strv_free(early);
			early = NULL;
		}
	}
	if (!cached && !nearly) {
		if ((rc = fastbuild_prepare(&c.env, c.app_dir, nr.files, nr.nfiles, &mf, &fbc)) < 0) {
			json_decref(o);
			o = internal_result("out of memory");
			goto out;
		}
		if (fbc.eligible && fastbuild_planned(&fbc)) {
			/* one build message for the build, whichever path makes it */
			said = true;
			progress_say(progress, ctx, "build", "compiling and linking directly");
			clock_gettime(CLOCK_MONOTONIC, &ts);
			built = direct = fastbuild_build(&c.env, &fbc, c.app_dir, c.state_dir, hex) == 1;
			tm.build_ms += mono_since_ms(&ts);
		}
	}
	int attempts = nearly ? 3 : 2;
	for (int attempt = 0; !built && attempt < attempts; attempt++) {
		bool ahead = attempt == 0 && nearly; /* resolving before any build */
		size_t npkgs = 0;
		if (ahead) {
			pkgs = early;
			npkgs = nearly;
			early = NULL;
			nearly = 0;
		} else {
			if (attempt || !said)
				progress_say(progress, ctx, "build", attempt ? "building again with "
									       "the added modules"
									     : "go build");
			char work[PATH_MAX];
			clock_gettime(CLOCK_MONOTONIC, &ts);
			rc = gobuild_build(&c.env, c.app_dir, c.state_dir, hex, &br, &built, work,
					   sizeof(work));
			if (rc == 0 && built) {
				fastbuild_capture(&c.env, &fbc, work);
				gobuild_work_remove(work);
			}
			tm.build_ms += mono_since_ms(&ts);
			if (rc < 0) {
				json_decref(o);
				o = internal_result("go build could not be started: %s", strerror(-rc));
				goto out;
			}
			if (built || attempt == attempts - 1 || br.timed_out ||
			    !gobuild_needs_resolve(br.out.data, br.out.len))
				break;
			if (gobuild_missing_packages(br.out.data, br.out.len, &pkgs, &npkgs) < 0) {
				json_decref(o);
				o = internal_result("out of memory");
				goto out;
			}
		}
		progress_say(progress, ctx, "tidy", "adding the modules for %s%s",
			     npkgs ? pkgs[0] : "the imports", npkgs > 1 ? " and others" : "");
		clock_gettime(CLOCK_MONOTONIC, &ts);
		char *why = NULL, *tlog = NULL;
		rc = gobuild_resolve(&c.env, c.app_dir, pkgs, npkgs, &why, &tlog);
		tm.tidy_ms += mono_since_ms(&ts);
		if (tlog) {
			size_t tl = 0;
			char *clean = diag_clean_output(tlog, strlen(tlog), c.app_dir, &tl);
			if (clean && tl > GOBUILD_OUTPUT_CAP)
				tl = GOBUILD_OUTPUT_CAP;
			if (clean)
				set_text(o, "tidy_output", clean, tl);
			free(clean);
			free(tlog);
		}
		gobuild_strv_free(pkgs);
		pkgs = NULL;
		if (rc == -EAGAIN && ahead) {
			/* no module provides them (a typo, a private module): one build, whose errors
			 * say where, with why the resolve failed; not a second resolve */
			free(why_ahead);
			why_ahead = why;
			attempts = 1;
			attempt = -1;
			continue;
		}
		if (rc == -EAGAIN) {
			build_error_result(o, &c, &nr, br.out.data, br.out.len, false, why);
			free(why);
			runproc_result_free(&br);
			o = finish(o, "build", mode, &tm, &t0);
			goto out;
		}
		free(why);
		if (rc < 0) {
			json_decref(o);
			runproc_result_free(&br);
			o = internal_result("resolving the imports failed: %s", strerror(-rc));
			goto out;
		}
		tidied = true;
		if ((rc = gobuild_save_modfiles(c.app_dir, c.state_dir)) < 0)
			log_warn("the session's go.mod could not be saved: %s", strerror(-rc));
		/* the binary is keyed on the go.mod it was built with, so an identical later call
		 * (which starts from the saved go.mod) finds it */
		if (reload_modfiles(c.app_dir, &mf) == 0 &&
		    gobuild_cache_key(nr.files, nr.nfiles, &mf, goversion, hex) == 0 &&
		    gobuild_cache_lookup(c.state_dir, hex, bin, sizeof(bin)) == 1)
			built = cached = true;
		/* the plan this build leaves is for the new go.mod */
		fastbuild_call_free(&fbc);
		if (fastbuild_prepare(&c.env, c.app_dir, nr.files, nr.nfiles, &mf, &fbc) < 0)
			fbc.eligible = false;
		snprintf(fbc.why, sizeof(fbc.why), "go.mod had to be extended for the imports");
		runproc_result_free(&br);
	}
	json_object_set_new(o, "tidied", json_boolean(tidied));
	json_object_set_new(o, "cached_build", json_boolean(cached));
	json_object_set_new(o, "build_path", json_string(cached ? "cached" : direct ? "direct"
										     : "go build"));
	if (!cached && !direct)
		set_text(o, "build_path_reason", fbc.why, strlen(fbc.why));
	if (!built) {
		char full[512];
		bool disk = disk_full(&c, br.out.data, br.out.data ? br.out.len : 0, full, sizeof(full));
		build_error_result(o, &c, &nr, br.out.data, br.out.len, br.timed_out,
				   disk ? full : why_ahead);
		runproc_result_free(&br);
		o = finish(o, "build", mode, &tm, &t0);
		goto out;
	}
	runproc_result_free(&br);
	if (!cached && pathf(bin, sizeof(bin), "%s/bin/%s", c.state_dir, hex) < 0) {
		json_decref(o);
		o = internal_result("the state directory path is too long");
		goto out;
	}

	/* 6. run */
	int rfd = open(c.rundir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (rfd >= 0) {
		wipe_below(rfd, false);
		close(rfd);
	}
	rc = pl_creds_begin(cfg, &c, json_object_get(req, "credentials"), ctx, &pcr, err,
			    sizeof(err));
	if (rc < 0) {
		json_decref(o);
		o = internal_result("the credentials could not be set up for the run: %s", err);
		goto out;
	}
	envp = build_run_env(&c, json_object_get(req, "env"), pcr.env, snippet, timeout_ms, err,
			     sizeof(err));
	if (!envp) {
		json_decref(o);
		o = internal_result("%s", err);
		goto out;
	}
	char secs[32];
	seconds_text(timeout_ms, secs, sizeof(secs));
	progress_say(progress, ctx, "run", "running (timeout %s)", secs);
	const char *argv[] = { bin, NULL };
	struct runproc_opts ro = {
		.argv = argv,
		.envp = (const char *const *)envp,
		.cwd = c.app_dir,
		.timeout_ms = timeout_ms,
		/* a snippet's context expires by its own deadline (so run sees DeadlineExceeded,
		 * not a cancellation); a program gets SIGTERM; both get the grace before SIGKILL */
		.term_signal = snippet ? 0 : SIGTERM,
		.grace_ms = PL_GRACE_MS,
		.out_cap = c.output_cap,
		.err_cap = c.output_cap,
		.keep_tail = true,
		.seccomp = c.user_filter,
		.launcher = runproc_isolated(),
	};
	struct runproc_result rr;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	long long oom0 = oom_kills(&c);
	rc = runproc_run(&ro, &rr);
	tm.run_ms = mono_since_ms(&ts);
	/* the kernel's own word that it killed something of the sandbox's for memory */
	bool oom_killed = oom0 >= 0 && oom_kills(&c) > oom0;
	pl_creds_end(cfg, &pcr);
	if (rc < 0) {
		json_decref(o);
		o = internal_result("the program could not be started: %s", strerror(-rc));
		goto out;
	}
	tm.cpu_user_ms = rr.user_ms;
	tm.cpu_sys_ms = rr.sys_ms;
	tm.max_rss_kb = rr.maxrss_kb;

	/* 7. result */
	json_object_set_new(o, "exit_code", rr.signal ? json_null() : json_integer(rr.exit_code));
	json_object_set_new(o, "signal",
			    rr.signal ? json_string(runproc_signame(rr.signal)) : json_null());
	json_object_set_new(o, "duration_ms", json_integer(rr.wall_ms));
	set_text(o, "stdout", rr.out.data, rr.out.len);
	set_text(o, "stderr", rr.err.data, rr.err.len);
	json_object_set_new(o, "stdout_truncated", json_boolean(rr.out.truncated));
	json_object_set_new(o, "stderr_truncated", json_boolean(rr.err.truncated));
	json_object_set_new(o, "result", resource_hint(&c, &rr, oom_killed, run_outcome(&c, snippet, timeout_ms, &rr)));
	runproc_result_free(&rr);
	o = finish(o, "run", mode, &tm, &t0);
	artifacts_collect(appfd, o);

out:
	/* the worker tells the client when the session's files changed */
	if (appfd >= 0)
		pl_files_after(&c, appfd, watched, o);
	else
		json_decref(watched);
	disk_reserve(&c);
	pl_creds_end(cfg, &pcr);
	gobuild_strv_free(envp);
	gobuild_strv_free(pkgs);
	free(why_ahead);
	gobuild_modfiles_free(&mf);
	fastbuild_call_free(&fbc);
	if (appfd >= 0)
		close(appfd);
	normalize_free(&nr);
	return o;
}

/* ---- lookup_package_docs ---- */

/* doc_pkg_ok - an import path: safe to pass to go doc as an argument */
static bool doc_pkg_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > PL_DOC_MAX_PKG_CHARS || s[0] == '-' || s[0] == '/' || s[0] == '.' ||
	    s[n - 1] == '/' || strstr(s, "//") || strstr(s, ".."))
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '.' || *s == '_' || *s == '-' || *s == '~' ||
		      *s == '/' || *s == '+'))
			return false;
	return true;
}

/* doc_sym_ok - Name or Type.Method with ASCII identifiers */
static bool doc_sym_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > PL_DOC_MAX_SYM_CHARS)
		return false;
	int dots = 0;
	bool start = true;
	for (; *s; s++) {
		bool letter = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_';
		bool digit = *s >= '0' && *s <= '9';
		if (*s == '.') {
			if (start || ++dots > 1)
				return false;
			start = true;
			continue;
		}
		if (!letter && !(digit && !start))
			return false;
		start = false;
	}
	return !start;
}

/* doc_error - {"ok":false,"error":msg} */
static json_t *doc_error(const char *msg)
{
	json_t *o = json_object();
	json_object_set_new(o, "ok", json_false());
	set_text(o, "error", msg, strlen(msg));
	return o;
}

/* pipeline_doc - see pipeline.h */
json_t *pipeline_doc(const struct pipeline_config *cfg, json_t *req)
{
	struct pl_cfg c;
	int rc = pl_cfg_init(cfg, &c);
	if (rc < 0)
		return doc_error("the agent's directories are not usable; this is a problem with the "
				 "sandbox, not the request");
	json_t *jp = json_object_get(req, "package");
	json_t *js = json_object_get(req, "symbol");
	if (!json_is_string(jp) || !doc_pkg_ok(json_string_value(jp)))
		return doc_error("package must be an import path such as \"fmt\" or "
				 "\"cloud.google.com/go/storage\"");
	const char *pkg = json_string_value(jp);
	const char *sym = NULL;
	if (js && !json_is_null(js)) {
		if (!json_is_string(js) || (json_string_length(js) &&
					    !doc_sym_ok(json_string_value(js))))
			return doc_error("symbol must be an exported name such as \"Client\" or a "
					 "method such as \"Client.Bucket\"");
		if (json_string_length(js))
			sym = json_string_value(js);
	}

	char goversion[64];
	if ((rc = gobuild_go_version(&c.env, goversion, sizeof(goversion))) < 0)
		return doc_error("the Go toolchain could not be run in the sandbox");
	struct gobuild_modfiles mf;
	if (gobuild_load_modfiles(c.state_dir, c.runtime_dir, goversion, &mf) < 0)
		return doc_error("the session's go.mod could not be read");
	char *text = NULL, *gerr = NULL;
	bool truncated = false;
	rc = gobuild_doc(&c.env, c.docdir, &mf, pkg, sym, c.doc_cap, &text, &truncated, &gerr);
	gobuild_modfiles_free(&mf);
	if (rc < 0)
		return doc_error("go doc could not be run in the sandbox");
	json_t *o;
	if (text) {
		o = json_object();
		json_object_set_new(o, "ok", json_true());
		set_text(o, "text", text, strlen(text));
		json_object_set_new(o, "truncated", json_boolean(truncated));
	} else {
		char msg[2048];
		if (sym && (strstr(gerr, "no symbol") || strstr(gerr, "no method") ||
			    strstr(gerr, "no field")))
			snprintf(msg, sizeof(msg), "%s (look up the package without a symbol to see "
						   "what it exports)", gerr);
		else
			snprintf(msg, sizeof(msg), "no package %s in the session's module: %s "
						   "(packages beyond the standard library and the "
						   "precompiled modules become available after an "
						   "execute_go_code call that imports them)",
				 pkg, gerr);
		o = doc_error(msg);
	}
	free(text);
	free(gerr);
	return o;
}

/* pipeline_files - see pipeline.h */
json_t *pipeline_files(const struct pipeline_config *cfg, json_t *req, unsigned char **bytes,
		       size_t *nbytes)
{
	*bytes = NULL;
	*nbytes = 0;
	int fd = cfg && cfg->app_dir ? open(cfg->app_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (fd < 0)
		return json_pack("{s:s}", "error", "the sandbox's /app cannot be opened");
	json_t *o = artifacts_files(fd, req, bytes, nbytes);
	close(fd);
	return o;
}
