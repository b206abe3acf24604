/*
 * gobuild.c - go.mod/go.sum selection, go build, import resolution, binary cache and go doc.
 *
 * Called by agent/pipeline.c for every execute and doc request. Each go command gets an
 * environment assembled here from the config, never the agent's own environment, so a
 * GOFLAGS or GOPROXY in the agent cannot change what is built; the network is used only while
 * resolving imports the lockfile does not cover.
 */
#include "agent/gobuild.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/diag.h"
#include "ipc/fsutil.h"
#include "ipc/log.h"
#include "policy/limits.h"

/* Everything but the inputs that decides what `go build` produces; part of the cache key so a
 * change of flags here invalidates old binaries. */
static const char gobuild_flags_tag[] =
	"kode-gopher bin v4\0go build -trimpath -buildvcs=false -ldflags=" GOBUILD_LDFLAGS
	" -gcflags=" GOBUILD_MAIN_GCFLAGS "\0CGO_ENABLED=0 GOFLAGS=-mod=mod";

/* gobuild_build_flags - see gobuild.h */
const char *const gobuild_build_flags[] = {
	"-trimpath", "-buildvcs=false",
	/* no symbol table or DWARF: stacks still come from pclntab, and the link is a third
	 * faster */
	"-ldflags=" GOBUILD_LDFLAGS,
	/* the main package only (a -gcflags without a pattern applies to the packages named):
	 * docs/snippets-and-results.md, "How a call is built" */
	"-gcflags=" GOBUILD_MAIN_GCFLAGS,
	NULL,
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

/* gobuild_strv_free - free a NULL-terminated array of strings */
void gobuild_strv_free(char **v)
{
	if (!v)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

struct envb {
	char **v;
	size_t n;
	int err;
};

/* envb_add - append NAME=value (skipped when value is NULL) */
static void envb_add(struct envb *b, const char *name, const char *value)
{
	if (!value || b->err)
		return;
	char **nv = realloc(b->v, (b->n + 2) * sizeof(*nv));
	if (!nv) {
		b->err = -ENOMEM;
		return;
	}
	b->v = nv;
	if (asprintf(&b->v[b->n], "%s=%s", name, value) < 0) {
		b->v[b->n] = NULL;
		b->err = -ENOMEM;
		return;
	}
	b->v[++b->n] = NULL;
}

/* go_env - the toolchain's whole environment; online adds the agent's proxy settings */
static char **go_env(const struct gobuild_env *e, bool online);

/* gobuild_environ - see gobuild.h */
char **gobuild_environ(const struct gobuild_env *e)
{
	return go_env(e, false);
}

static char **go_env(const struct gobuild_env *e, bool online)
{
	struct envb b = { 0 };
	envb_add(&b, "PATH", e->path ? e->path : "/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin");
	envb_add(&b, "HOME", e->home);
	envb_add(&b, "GOMODCACHE", e->gomodcache);
	envb_add(&b, "GOCACHE", e->gocache);
	envb_add(&b, "TMPDIR", e->tmpdir);
	envb_add(&b, "GOFLAGS", "-mod=mod");
	envb_add(&b, "GOTOOLCHAIN", "local");
	envb_add(&b, "CGO_ENABLED", "0");
	envb_add(&b, "GOENV", "off");
	envb_add(&b, "GOTELEMETRY", "off");
	/* the linker dominates a build against the warm cache; collecting less often cuts its CPU
	 * time by about a fifth (bench/README.md), at the cost of a few hundred MB while linking */
	envb_add(&b, "GOGC", "400");
	/* a GOROOT the agent was started with locates the toolchain; it changes nothing else */
	envb_add(&b, "GOROOT", getenv("GOROOT"));
	if (online) {
		const char *proxy = getenv("GOPROXY");
		envb_add(&b, "GOPROXY", proxy && *proxy ? proxy : GOBUILD_DEFAULT_PROXY);
		static const char *const pass[] = { "GOSUMDB",     "GOPRIVATE",   "GONOPROXY",
						    "GONOSUMDB",   "GOINSECURE",  "GOAUTH",
						    "HTTPS_PROXY", "HTTP_PROXY",  "NO_PROXY",
						    "https_proxy", "http_proxy",  "no_proxy",
						    "SSL_CERT_FILE", "SSL_CERT_DIR" };
		for (size_t i = 0; i < sizeof(pass) / sizeof(pass[0]); i++)
			envb_add(&b, pass[i], getenv(pass[i]));
	} else {
		envb_add(&b, "GOPROXY", "off");
		envb_add(&b, "GOSUMDB", "off");
	}
	if (b.err) {
		gobuild_strv_free(b.v);
		return NULL;
	}
	return b.v;
}

/*
 * hold_trim - tell the go command its build cache was trimmed just now, before each command.
 *
 * At exit a go command trims GOCACHE when GOCACHE/trim.txt is more than a day old, removing
 * every entry unused for five days by its mtime. In a sandbox GOCACHE is this session's overlay
 * on the base cache (`make runtime`, often days old): a trim there deletes the base's entries
 * from the session's view (whiteouts in the upper layer) and the next build starts from
 * nothing. Trimming the base is the operator's business (make runtime), never a session's.
 * Written under a temporary name and renamed: a rename replaces a base-only trim.txt without
 * copying it up, which the kernel refuses for a root-owned base in the sandbox's user namespace.
 */
static void hold_trim(const struct gobuild_env *e)
{
	if (!e->gocache || !*e->gocache)
		return;
	char path[PATH_MAX], tmp[PATH_MAX], now[24];
	if (pathf(path, sizeof(path), "%s/trim.txt", e->gocache) != 0 ||
	    pathf(tmp, sizeof(tmp), "%s/.trim.txt.kg%d", e->gocache, (int)getpid()) != 0)
		return;
	int n = snprintf(now, sizeof(now), "%lld", (long long)time(NULL));
	int r = fs_replace_data_at(AT_FDCWD, path, now, (size_t)n, 0644, 0);
	if (r != 0) {
		static bool said;
		if (!said)
			log_warn("cannot hold off the go command's trim of %s, so it may trim the base "
				 "cache's entries from this sandbox's view: %s", e->gocache, strerror(-r));
		said = true;
	}
}

/* run_go - one go command in dir with the standard limits */
static int run_go(const struct gobuild_env *e, bool online, const char *dir,
		  const char *const *argv, int timeout_ms, size_t cap, bool merge,
		  struct runproc_result *r)
{
	char **env = go_env(e, online);
	if (!env)
		return -ENOMEM;
	hold_trim(e);
	struct runproc_opts o = {
		.argv = argv,
		.envp = (const char *const *)env,
		.cwd = dir,
		.timeout_ms = timeout_ms,
		.term_signal = SIGTERM,
		.grace_ms = GOBUILD_GRACE_MS,
		.out_cap = cap,
		.err_cap = cap,
		.keep_tail = merge,
		.merge_stderr = merge,
	};
	int rc = runproc_run(&o, r);
	gobuild_strv_free(env);
	if (rc < 0)
		log_warn("could not run %s %s: %s", argv[0], argv[1], strerror(-rc));
	return rc;
}

static pthread_mutex_t version_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gobuild_tools tools_cache;
static char version_bin[PATH_MAX];

/* gobuild_toolchain - see gobuild.h */
int gobuild_toolchain(const struct gobuild_env *e, struct gobuild_tools *t)
{
	int rc = 0;
	pthread_mutex_lock(&version_lock);
	if (!tools_cache.version[0] || strcmp(version_bin, e->go_bin) != 0) {
		const char *argv[] = { e->go_bin, "env", "GOVERSION", "GOROOT", "GOTOOLDIR", NULL };
		struct runproc_result r;
		memset(&tools_cache, 0, sizeof(tools_cache));
		rc = run_go(e, false, NULL, argv, 60000, 3 * PATH_MAX, false, &r);
		if (rc == 0) {
			char *fields[3] = { tools_cache.version, tools_cache.goroot,
					    tools_cache.tooldir };
			size_t caps[3] = { sizeof(tools_cache.version), sizeof(tools_cache.goroot),
					   sizeof(tools_cache.tooldir) };
			const char *p = r.out.data;
			for (int i = 0; i < 3 && rc == 0; i++) {
				size_t n = strcspn(p, "\r\n");
				/* GOROOT and GOTOOLDIR are absolute; a version like go1.26.8 */
				if (r.exit_code != 0 || n == 0 || n >= caps[i] ||
				    (i > 0 && p[0] != '/')) {
					log_error("go env GOVERSION GOROOT GOTOOLDIR failed: %.200s",
						  r.err.data);
					rc = -EIO;
					break;
				}
				memcpy(fields[i], p, n);
				fields[i][n] = '\0';
				p += n;
				p += strspn(p, "\r\n");
			}
			if (rc == 0)
				snprintf(version_bin, sizeof(version_bin), "%s", e->go_bin);
			else
				memset(&tools_cache, 0, sizeof(tools_cache));
			runproc_result_free(&r);
		}
	}
	if (rc == 0)
		*t = tools_cache;
	pthread_mutex_unlock(&version_lock);
	return rc;
}

/* gobuild_go_version - see gobuild.h */
int gobuild_go_version(const struct gobuild_env *e, char *out, size_t outlen)
{
	struct gobuild_tools t;
	int rc = gobuild_toolchain(e, &t);
	if (rc == 0)
		snprintf(out, outlen, "%s", t.version);
	return rc;
}

/* read_at - whole regular file (not a symlink) below dirfd, at most max bytes */
static int read_at(int dirfd, const char *name, size_t max, char **data, size_t *len)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fs_read_fd(fd, max, data, len);
	close(fd);
	return rc;
}

/* write_at - create name below dirfd; excl refuses an existing name, otherwise the file is
 * replaced by rename so a reader never sees half of it */
static int write_at(int dirfd, const char *name, const char *data, size_t len, bool excl)
{
	if (!excl)
		return fs_replace_data_at(dirfd, name, data, len, 0644, 0);
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	int rc = fs_write_all(fd, data, len);
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

/* load_pair - go.mod and go.sum from one directory; both must exist */
static int load_pair(const char *dir, struct gobuild_modfiles *m)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	int rc = read_at(dfd, "go.mod", GOBUILD_MAX_MODFILE_BYTES, &m->gomod, &m->gomod_len);
	if (rc == 0)
		rc = read_at(dfd, "go.sum", GOBUILD_MAX_MODFILE_BYTES, &m->gosum, &m->gosum_len);
	close(dfd);
	if (rc < 0)
		gobuild_modfiles_free(m);
	return rc;
}

/* gobuild_load_modfiles - see gobuild.h */
int gobuild_load_modfiles(const char *state_dir, const char *runtime_dir, const char *goversion,
			  struct gobuild_modfiles *m)
{
	char dir[PATH_MAX];
	memset(m, 0, sizeof(*m));
	if (load_pair(state_dir, m) == 0) {
		m->source = "session";
		return 0;
	}
	int rc = pathf(dir, sizeof(dir), "%s/lock", runtime_dir);
	if (rc == 0)
		rc = load_pair(dir, m);
	if (rc == 0) {
		m->source = "lockfile";
		return 0;
	}
	if (rc == -ENOMEM)
		return rc;
	/* no prepared runtime (a development machine before `make runtime`): stdlib only */
	int major = 1, minor = 0;
	if (sscanf(goversion, "go%d.%d", &major, &minor) != 2)
		minor = 22;
	if (asprintf(&m->gomod, "module %s\n\ngo %d.%d\n", NORM_MODULE_PATH, major, minor) < 0) {
		m->gomod = NULL;
		return -ENOMEM;
	}
	m->gomod_len = strlen(m->gomod);
	m->gosum = strdup("");
	if (!m->gosum) {
		gobuild_modfiles_free(m);
		return -ENOMEM;
	}
	m->gosum_len = 0;
	m->source = "default";
	log_warn("no lockfile in %s/lock; building against the standard library only",
		 runtime_dir);
	return 0;
}

/* gobuild_modfiles_free - release both buffers */
void gobuild_modfiles_free(struct gobuild_modfiles *m)
{
	free(m->gomod);
	free(m->gosum);
	m->gomod = m->gosum = NULL;
	m->gomod_len = m->gosum_len = 0;
}

/* gobuild_write_modfiles - see gobuild.h */
int gobuild_write_modfiles(int dirfd, const struct gobuild_modfiles *m, bool excl)
{
	/* go.sum first: a crash between the two leaves extra sums, which go ignores */
	int rc = write_at(dirfd, "go.sum", m->gosum, m->gosum_len, excl);
	if (rc == 0)
		rc = write_at(dirfd, "go.mod", m->gomod, m->gomod_len, excl);
	return rc;
}

/* gobuild_save_modfiles - see gobuild.h */
int gobuild_save_modfiles(const char *app_dir, const char *state_dir)
{
	struct gobuild_modfiles m = { 0 };
	int rc = load_pair(app_dir, &m);
	if (rc < 0)
		return rc;
	int sfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd < 0) {
		rc = -errno;
	} else {
		rc = gobuild_write_modfiles(sfd, &m, false);
		close(sfd);
	}
	gobuild_modfiles_free(&m);
	return rc;
}

/* put_lp - hash a length-prefixed field (8-byte little-endian length) */
static int put_lp(EVP_MD_CTX *ctx, const void *p, size_t n)
{
	unsigned char len[8];
	for (int i = 0; i < 8; i++)
		len[i] = (unsigned char)((uint64_t)n >> (8 * i));
	return EVP_DigestUpdate(ctx, len, 8) == 1 && EVP_DigestUpdate(ctx, p, n) == 1 ? 0 : -EIO;
}

/* cmp_path - qsort_r order for file indices by path */
static int cmp_path(const void *a, const void *b, void *arg)
{
	const struct src_file *f = arg;
	return strcmp(f[*(const size_t *)a].path, f[*(const size_t *)b].path);
}

/* gobuild_cache_key - see gobuild.h */
int gobuild_cache_key(const struct src_file *files, size_t n, const struct gobuild_modfiles *m,
		      const char *goversion, char hex[65])
{
	size_t *idx = malloc((n ? n : 1) * sizeof(*idx));
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int rc = -ENOMEM;
	if (!idx || !ctx)
		goto out;
	for (size_t i = 0; i < n; i++)
		idx[i] = i;
	qsort_r(idx, n, sizeof(*idx), cmp_path, (void *)files);
	rc = -EIO;
	if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
		goto out;
	if (put_lp(ctx, gobuild_flags_tag, sizeof(gobuild_flags_tag)) < 0 ||
	    put_lp(ctx, goversion, strlen(goversion)) < 0 ||
	    put_lp(ctx, m->gomod, m->gomod_len) < 0 || put_lp(ctx, m->gosum, m->gosum_len) < 0)
		goto out;
	uint64_t count = n;
	if (put_lp(ctx, &count, sizeof(count)) < 0)
		goto out;
	for (size_t i = 0; i < n; i++) {
		const struct src_file *f = &files[idx[i]];
		if (put_lp(ctx, f->path, strlen(f->path)) < 0 || put_lp(ctx, f->content, f->len) < 0)
			goto out;
	}
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	if (EVP_DigestFinal_ex(ctx, md, &mdlen) != 1 || mdlen != 32)
		goto out;
	for (unsigned int i = 0; i < mdlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	rc = 0;
out:
	EVP_MD_CTX_free(ctx);
	free(idx);
	return rc;
}

/* gobuild_cache_lookup - see gobuild.h */
int gobuild_cache_lookup(const char *state_dir, const char *hex, char *path, size_t pathlen)
{
	struct stat st;
	if (pathf(path, pathlen, "%s/bin/%s", state_dir, hex) < 0)
		return 0;
	if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode) || !(st.st_mode & S_IXUSR))
		return 0;
	/* mtime is the LRU clock for pruning */
	utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW);
	return 1;
}

struct cache_ent {
	char name[72];
	struct timespec mtime;
};

/* cmp_mtime - oldest first */
static int cmp_mtime(const void *a, const void *b)
{
	const struct cache_ent *x = a, *y = b;
	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return 0;
}

/* cache_prune - keep the GOBUILD_CACHE_MAX most recently used binaries */
static void cache_prune(const char *bindir)
{
	DIR *d = opendir(bindir);
	if (!d)
		return;
	struct cache_ent ents[GOBUILD_CACHE_MAX * 4];
	size_t n = 0;
	struct dirent *de;
	while ((de = readdir(d)) && n < sizeof(ents) / sizeof(ents[0])) {
		struct stat st;
		if (strlen(de->d_name) != 64 || fstatat(dirfd(d), de->d_name, &st,
							AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		memcpy(ents[n].name, de->d_name, 65); /* 64 hex digits and the NUL */
		ents[n].mtime = st.st_mtim;
		n++;
	}
	if (n > GOBUILD_CACHE_MAX) {
		qsort(ents, n, sizeof(ents[0]), cmp_mtime);
		for (size_t i = 0; i < n - GOBUILD_CACHE_MAX; i++)
			unlinkat(dirfd(d), ents[i].name, 0);
	}
	closedir(d);
}

/* gobuild_cache_put - see gobuild.h */
int gobuild_cache_put(const char *state_dir, const char *tmp, const char *hex)
{
	char bindir[PATH_MAX], final[PATH_MAX];
	if (pathf(bindir, sizeof(bindir), "%s/bin", state_dir) < 0 ||
	    pathf(final, sizeof(final), "%s/%s", bindir, hex) < 0)
		return -ENAMETOOLONG;
	if (mkdir(bindir, 0700) < 0 && errno != EEXIST)
		return -errno;
	if (rename(tmp, final) < 0)
		return -errno;
	cache_prune(bindir);
	return 0;
}

/* work_dir - the first line go build -work prints, "WORK=<dir>", taken out of r's output; dir
 * is kept only when it is a go-build directory below our own TMPDIR */
static void work_dir(const struct gobuild_env *e, struct runproc_result *r, char *dir, size_t len)
{
	dir[0] = '\0';
	if (!r->out.data || strncmp(r->out.data, "WORK=", 5) != 0)
		return;
	size_t n = strcspn(r->out.data, "\n");
	size_t tl = strlen(e->tmpdir);
	const char *p = r->out.data + 5;
	size_t pl = n - 5;
	if (pl < len && pl > tl + 10 && strncmp(p, e->tmpdir, tl) == 0 &&
	    strncmp(p + tl, "/go-build", 9) == 0 && !memchr(p + tl + 1, '/', pl - tl - 1)) {
		memcpy(dir, p, pl);
		dir[pl] = '\0';
	}
	size_t cut = r->out.data[n] == '\n' ? n + 1 : n;
	memmove(r->out.data, r->out.data + cut, r->out.len - cut + 1);
	r->out.len -= cut;
}

/* gobuild_work_remove - see gobuild.h */
void gobuild_work_remove(const char *dir)
{
	if (!dir || !dir[0])
		return;
	const char *slash = strrchr(dir, '/');
	char parent[PATH_MAX];
	if (!slash || pathf(parent, sizeof(parent), "%.*s", (int)(slash - dir), dir) < 0)
		return;
	int pfd = open(parent[0] ? parent : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (pfd < 0)
		return;
	int rc = fs_rm_tree_at(pfd, slash + 1);
	if (rc < 0 && rc != -ENOENT)
		log_warn("go's work directory %s could not be removed: %s", dir, strerror(-rc));
	close(pfd);
}

/* gobuild_build - see gobuild.h */
int gobuild_build(const struct gobuild_env *e, const char *app_dir, const char *state_dir,
		  const char *hex, struct runproc_result *r, bool *built, char *work,
		  size_t worklen)
{
	char bindir[PATH_MAX], tmp[PATH_MAX], wd[PATH_MAX];
	*built = false;
	if (work && worklen)
		work[0] = '\0';
	if (pathf(bindir, sizeof(bindir), "%s/bin", state_dir) < 0 ||
	    pathf(tmp, sizeof(tmp), "%s/build-%s-%d", e->tmpdir, hex, (int)getpid()) < 0)
		return -ENAMETOOLONG;
	if (mkdir(bindir, 0700) < 0 && errno != EEXIST)
		return -errno;
	unlink(tmp);
	const char *argv[16];
	size_t na = 0;
	argv[na++] = e->go_bin;
	argv[na++] = "build";
	for (const char *const *f = gobuild_build_flags; *f; f++)
		argv[na++] = *f;
	/* keep go's work directory: its importcfg files are what the direct path
	 * (agent/fastbuild.c) builds later calls with */
	argv[na++] = "-work";
	argv[na++] = "-o";
	argv[na++] = tmp;
	argv[na++] = ".";
	argv[na] = NULL;
	int rc = run_go(e, false, app_dir, argv, GOBUILD_TIMEOUT_MS, GOBUILD_OUTPUT_CAP, true, r);
	if (rc < 0)
		return rc;
	work_dir(e, r, wd, sizeof(wd));
	if (r->exit_code == 0 && !r->timed_out) {
		if ((rc = gobuild_cache_put(state_dir, tmp, hex)) < 0) {
			runproc_result_free(r);
			unlink(tmp);
			gobuild_work_remove(wd);
			return rc;
		}
		*built = true;
	} else {
		unlink(tmp);
	}
	if (*built && work && worklen > strlen(wd))
		snprintf(work, worklen, "%s", wd);
	else
		gobuild_work_remove(wd);
	return 0;
}

static const char *const resolve_markers[] = {
	"no required module provides package ",
	"cannot find module providing package ",
	"missing go.sum entry for module providing package ",
};

/* gobuild_test_build - see gobuild.h */
int gobuild_test_build(const struct gobuild_env *e, const char *app_dir, const char *dir,
		       const char *out, bool cover, struct runproc_result *r, bool *built)
{
	char pkg[PATH_MAX];
	*built = false;
	/* "./x", never "x": a bare path would name a standard-library or module package */
	if (pathf(pkg, sizeof(pkg), "./%s", dir) < 0)
		return -ENAMETOOLONG;
	unlink(out);
	const char *argv[] = { e->go_bin, "test", "-c", "-trimpath", "-buildvcs=false",
			       "-ldflags=-s -w", "-o", out, cover ? "-cover" : pkg,
			       cover ? pkg : NULL, NULL };
	int rc = run_go(e, false, app_dir, argv, GOBUILD_TIMEOUT_MS, GOBUILD_OUTPUT_CAP, true, r);
	if (rc < 0)
		return rc;
	struct stat st;
	*built = r->exit_code == 0 && !r->timed_out && stat(out, &st) == 0 && S_ISREG(st.st_mode);
	return 0;
}

static pthread_mutex_t test2json_lock = PTHREAD_MUTEX_INITIALIZER;
static char test2json_path[PATH_MAX];

/* gobuild_test2json - see gobuild.h */
int gobuild_test2json(const struct gobuild_env *e, char *path, size_t len)
{
	pthread_mutex_lock(&test2json_lock);
	struct stat st;
	int rc = 0;
	if (!test2json_path[0] || stat(test2json_path, &st) != 0) {
		const char *argv[] = { e->go_bin, "tool", "-n", "test2json", NULL };
		struct runproc_result r;
		test2json_path[0] = '\0';
		rc = run_go(e, false, e->tmpdir, argv, GOBUILD_TIMEOUT_MS, 4096, false, &r);
		if (rc == 0) {
			size_t n = strcspn(r.out.data, "\r\n");
			if (r.exit_code == 0 && n > 0 && n < sizeof(test2json_path) &&
			    r.out.data[0] == '/') {
				memcpy(test2json_path, r.out.data, n);
				test2json_path[n] = '\0';
			} else {
				log_warn("go tool -n test2json failed: %.300s", r.out.data);
				rc = -ENOENT;
			}
			runproc_result_free(&r);
		}
	}
	if (rc == 0 && pathf(path, len, "%s", test2json_path) < 0)
		rc = -ENAMETOOLONG;
	pthread_mutex_unlock(&test2json_lock);
	return rc;
}

/* gobuild_needs_resolve - see gobuild.h */
bool gobuild_needs_resolve(const char *out, size_t len)
{
	(void)len; /* runproc output is NUL-terminated */
	for (size_t i = 0; i < sizeof(resolve_markers) / sizeof(resolve_markers[0]); i++)
		if (strstr(out, resolve_markers[i]))
			return true;
	/* a module the lockfile names indirectly but the offline cache lacks (say an earlier
	 * download was cut short): only an online resolve can fill it in */
	return strstr(out, "missing go.sum entry") != NULL ||
	       strstr(out, "module lookup disabled by GOPROXY=off") != NULL;
}

/* fetchable_path - an import path go get may be asked for: no flag, no odd bytes, a dotted
 * first element (so neither std nor our own module) */
static bool fetchable_path(const char *p, size_t n)
{
	if (n == 0 || n > NORM_MAX_PATH || p[0] == '-' || p[0] == '/' || p[0] == '.')
		return false;
	bool dot = false, first = true;
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		if (c == '/')
			first = false;
		else if (c == '.' && first)
			dot = true;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-' || c == '~' || c == '/' || c == '+'))
			return false;
	}
	return dot;
}

/* gobuild_missing_packages - see gobuild.h */
int gobuild_missing_packages(const char *out, size_t len, char ***pkgs, size_t *n)
{
	(void)len;
	char **v = calloc(GOBUILD_MAX_MISSING + 1, sizeof(*v));
	size_t k = 0;
	if (!v)
		return -ENOMEM;
	for (size_t m = 0; m < sizeof(resolve_markers) / sizeof(resolve_markers[0]); m++) {
		const char *p = out;
		while (k < GOBUILD_MAX_MISSING && (p = strstr(p, resolve_markers[m]))) {
			p += strlen(resolve_markers[m]);
			size_t pl = strcspn(p, " ;:\t\r\n()\"");
			if (pl && fetchable_path(p, pl)) {
				bool dup = false;
				for (size_t i = 0; i < k && !dup; i++)
					dup = strlen(v[i]) == pl && memcmp(v[i], p, pl) == 0;
				if (!dup && !(v[k++] = strndup(p, pl))) {
					gobuild_strv_free(v);
					return -ENOMEM;
				}
			}
			p += pl;
		}
	}
	*pkgs = v;
	*n = k;
	return 0;
}

/* mod_required - does go.mod (text) require a module whose path is p or a /-prefix of p? A
 * line that names a module is "require PATH VERSION" or, in a require block, "PATH VERSION";
 * a quoted path is taken without its quotes. */
static bool mod_required(const char *gomod, size_t len, const char *p)
{
	size_t pl = strlen(p);
	bool block = false;
	for (const char *l = gomod, *end = gomod + len; l < end;) {
		const char *nl = memchr(l, '\n', (size_t)(end - l));
		const char *e = nl ? nl : end;
		while (l < e && (*l == ' ' || *l == '\t'))
			l++;
		bool named = block;
		if ((size_t)(e - l) >= 8 && !memcmp(l, "require", 7) && (l[7] == ' ' || l[7] == '\t')) {
			l += 8;
			while (l < e && (*l == ' ' || *l == '\t'))
				l++;
			if (l < e && *l == '(') {
				block = true;
				named = false;
			} else {
				named = true;
			}
		} else if (block && l < e && *l == ')') {
			block = named = false;
		}
		if (named && l < e) {
			bool q = *l == '"';
			const char *m = l + q, *me = m;
			while (me < e && *me != ' ' && *me != '\t' && *me != '"')
				me++;
			size_t ml = (size_t)(me - m);
			if (ml && ml <= pl && !memcmp(m, p, ml) && (ml == pl || p[ml] == '/'))
				return true;
		}
		l = nl ? nl + 1 : end;
	}
	return false;
}

/* gobuild_uncovered - see gobuild.h */
int gobuild_uncovered(const struct gobuild_modfiles *m, char *const *imports, size_t nimports,
		      char ***pkgs, size_t *n)
{
	char **v = calloc(GOBUILD_MAX_MISSING + 1, sizeof(*v));
	size_t k = 0;
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < nimports && k < GOBUILD_MAX_MISSING; i++) {
		const char *p = imports[i];
		bool dup = false;
		for (size_t j = 0; j < k && !dup; j++)
			dup = strcmp(v[j], p) == 0;
		if (dup || !fetchable_path(p, strlen(p)) || mod_required(m->gomod, m->gomod_len, p))
			continue;
		if (!(v[k++] = strdup(p))) {
			gobuild_strv_free(v);
			return -ENOMEM;
		}
	}
	*pkgs = v;
	*n = k;
	return 0;
}

/* mod_requires - {path: version} of the go.mod in dir, via `go mod edit -json` */
static json_t *mod_requires(const struct gobuild_env *e, const char *dir)
{
	const char *argv[] = { e->go_bin, "mod", "edit", "-json", NULL };
	struct runproc_result r;
	if (run_go(e, false, dir, argv, 60000, 16 * 1024 * 1024, false, &r) < 0)
		return NULL;
	json_t *res = NULL;
	if (r.exit_code == 0 && !r.out.truncated) {
		json_t *doc = json_loadb(r.out.data, r.out.len, 0, NULL);
		json_t *req = json_object_get(doc, "Require");
		res = json_object();
		size_t i;
		json_t *it;
		json_array_foreach(req, i, it)
		{
			const char *p = json_string_value(json_object_get(it, "Path"));
			const char *v = json_string_value(json_object_get(it, "Version"));
			if (res && p && v)
				json_object_set_new(res, p, json_string(v));
		}
		json_decref(doc);
	}
	runproc_result_free(&r);
	return res;
}

/* union_gosum - add to app_dir/go.sum the lines of old it lost (extra lines are harmless) */
static int union_gosum(int dfd, const char *old, size_t oldlen)
{
	char *cur = NULL;
	size_t curlen = 0;
	int rc = read_at(dfd, "go.sum", GOBUILD_MAX_MODFILE_BYTES, &cur, &curlen);
	if (rc == -ENOENT) {
		cur = strdup("");
		rc = cur ? 0 : -ENOMEM;
	}
	if (rc < 0)
		return rc;
	char *merged = malloc(curlen + oldlen + 2);
	if (!merged) {
		free(cur);
		return -ENOMEM;
	}
	memcpy(merged, cur, curlen);
	size_t ml = curlen;
	if (ml && merged[ml - 1] != '\n')
		merged[ml++] = '\n';
	for (const char *p = old, *end = old + oldlen; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = (size_t)((nl ? nl : end) - p);
		bool found = false;
		for (const char *q = cur; n && !found && (q = memmem(q, curlen - (size_t)(q - cur), p, n));
		     q += n)
			found = (q == cur || q[-1] == '\n') && (q[n] == '\n' || q[n] == '\0');
		if (n && !found) {
			memcpy(merged + ml, p, n);
			ml += n;
			merged[ml++] = '\n';
		}
		p = nl ? nl + 1 : end;
	}
	rc = write_at(dfd, "go.sum", merged, ml, false);
	free(merged);
	free(cur);
	return rc;
}

/* tidy_keeping - `go mod tidy`, then put back the requirements (and sums) it dropped, so the
 * precompiled modules stay available offline to later calls in the session */
static int tidy_keeping(const struct gobuild_env *e, const char *app_dir, struct runproc_result *r)
{
	json_t *before = mod_requires(e, app_dir);
	int dfd = open(app_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char *oldsum = NULL;
	size_t oldlen = 0;
	if (dfd >= 0 && read_at(dfd, "go.sum", GOBUILD_MAX_MODFILE_BYTES, &oldsum, &oldlen) < 0)
		oldsum = NULL;
	const char *argv[] = { e->go_bin, "mod", "tidy", NULL };
	int rc = run_go(e, true, app_dir, argv, GOBUILD_TIMEOUT_MS, GOBUILD_OUTPUT_CAP, true, r);
	if (rc == 0 && r->exit_code == 0 && !r->timed_out && before) {
		json_t *after = mod_requires(e, app_dir);
		const char *argv2[GOBUILD_MAX_MISSING * 8 + 5];
		char *owned[GOBUILD_MAX_MISSING * 8];
		size_t na = 0, no = 0;
		argv2[na++] = e->go_bin;
		argv2[na++] = "mod";
		argv2[na++] = "edit";
		const char *path;
		json_t *ver;
		json_object_foreach(before, path, ver)
		{
			if (!after || json_object_get(after, path) || no >= sizeof(owned) / sizeof(owned[0]))
				continue;
			if (!fetchable_path(path, strlen(path)))
				continue;
			if (asprintf(&owned[no], "-require=%s@%s", path, json_string_value(ver)) < 0)
				break;
			argv2[na++] = owned[no++];
		}
		argv2[na] = NULL;
		if (no) {
			struct runproc_result r2;
			if (run_go(e, false, app_dir, argv2, 60000, 4096, true, &r2) == 0) {
				if (r2.exit_code != 0)
					log_warn("go mod edit could not restore requirements: %.200s",
						 r2.out.data);
				runproc_result_free(&r2);
			}
		}
		for (size_t i = 0; i < no; i++)
			free(owned[i]);
		if (oldsum && dfd >= 0)
			union_gosum(dfd, oldsum, oldlen);
		json_decref(after);
	}
	json_decref(before);
	free(oldsum);
	if (dfd >= 0)
		close(dfd);
	return rc;
}

/* failure_sentence - "<what>: <go's first error line>" */
static char *failure_sentence(const char *what, const struct runproc_result *r)
{
	char first[1024];
	diag_first_error(r->out.data, r->out.len, NULL, first, sizeof(first));
	char *s = NULL;
	if (r->timed_out) {
		if (asprintf(&s, "%s: it took longer than %d minutes", what,
			     GOBUILD_TIMEOUT_MS / 60000) < 0)
			s = NULL;
	} else if (asprintf(&s, "%s: %s", what, first[0] ? first : "go exited with an error") < 0) {
		s = NULL;
	}
	return s;
}

/* log_append - add a command's output to the resolve log handed back to the caller */
static void log_append(char **log, const char *cmd, const struct runproc_result *r)
{
	if (!log)
		return;
	char *n = NULL;
	if (asprintf(&n, "%s$ %s\n%s", *log ? *log : "", cmd, r->out.data ? r->out.data : "") < 0)
		return;
	free(*log);
	*log = n;
}

/* gobuild_resolve - see gobuild.h */
int gobuild_resolve(const struct gobuild_env *e, const char *app_dir, char *const *pkgs,
		    size_t n, char **msg, char **output)
{
	struct runproc_result r;
	*msg = NULL;
	if (output)
		*output = NULL;
	int rc;
	if (n) {
		const char *argv[GOBUILD_MAX_MISSING + 4];
		size_t na = 0;
		argv[na++] = e->go_bin;
		argv[na++] = "get";
		for (size_t i = 0; i < n && i < GOBUILD_MAX_MISSING; i++)
			argv[na++] = pkgs[i];
		argv[na] = NULL;
		rc = run_go(e, true, app_dir, argv, GOBUILD_TIMEOUT_MS, GOBUILD_OUTPUT_CAP, true, &r);
		if (rc < 0)
			return rc;
		char cmd[1024] = "go get";
		for (size_t i = 0; i < n && i < GOBUILD_MAX_MISSING; i++) {
			size_t cl = strlen(cmd);
			snprintf(cmd + cl, sizeof(cmd) - cl, " %s", pkgs[i]);
		}
		log_append(output, cmd, &r);
		bool ok = r.exit_code == 0 && !r.timed_out;
		if (ok) {
			runproc_result_free(&r);
			return 0;
		}
		log_info("go get failed (%.300s); trying go mod tidy", r.out.data);
		*msg = failure_sentence("could not add the modules that provide the imports", &r);
		runproc_result_free(&r);
	}
	rc = tidy_keeping(e, app_dir, &r);
	if (rc < 0)
		return rc;
	log_append(output, "go mod tidy", &r);
	if (r.exit_code == 0 && !r.timed_out) {
		free(*msg);
		*msg = NULL;
		runproc_result_free(&r);
		return 0;
	}
	if (!*msg)
		*msg = failure_sentence("go mod tidy could not resolve the imports", &r);
	runproc_result_free(&r);
	return *msg ? -EAGAIN : -ENOMEM;
}

/* strip_all - remove every occurrence of needle from s, in place */
static void strip_all(char *s, const char *needle)
{
	size_t nl = strlen(needle);
	char *hit;
	while ((hit = strstr(s, needle)))
		memmove(hit, hit + nl, strlen(hit + nl) + 1);
}

/* clean_doc_error - the lines of go doc's stderr that say what is wrong: its own "doc: ..."
 * lines when there are any, without the module-lookup noise of its search through the module
 * graph (which is incomplete offline) and without GOPATH listings */
static char *clean_doc_error(const char *s)
{
	size_t cap = 2048;
	char *o = malloc(cap);
	if (!o)
		return NULL;
	bool have_doc = strstr(s, "doc: ") != NULL;
	size_t n = 0;
	for (const char *p = s; *p;) {
		size_t l = strcspn(p, "\n");
		const char *line = p;
		p += l;
		if (*p)
			p++;
		if (l == 0 || line[0] == '\t' || line[0] == ' ' ||
		    (l >= 12 && memcmp(line, "exit status ", 12) == 0) ||
		    (l >= 4 && memcmp(line, "go: ", 4) == 0))
			continue;
		if (l >= 5 && memcmp(line, "doc: ", 5) == 0) {
			line += 5;
			l -= 5;
		} else if (have_doc) {
			continue;
		}
		/* "... in any of:" introduced a GOPATH listing we dropped */
		while (l && (line[l - 1] == ':' || line[l - 1] == ' '))
			l--;
		if (l > 1000)
			l = 1000;
		if (n + 2 + l + 1 > cap)
			break;
		if (n) {
			memcpy(o + n, "; ", 2);
			n += 2;
		}
		memcpy(o + n, line, l);
		n += l;
	}
	o[n] = '\0';
	return o;
}

/* doc_name_import - `go doc DIR` heads a package outside the main module whose source has no
 * import comment with `package uuid // import "."`: name the import path the caller asked for.
 * text is malloc'd; returns it or its replacement */
static char *doc_name_import(char *text, const char *pkg)
{
	static const char dot[] = " // import \".\"";
	size_t first = strcspn(text, "\n"), dl = sizeof(dot) - 1;
	if (strncmp(text, "package ", 8) != 0 || first < dl || memcmp(text + first - dl, dot, dl) != 0)
		return text;
	size_t head = first - 2; /* up to and with the opening quote */
	size_t pl = strlen(pkg), rest = strlen(text + first);
	char *o = malloc(head + pl + 1 + rest + 1);
	if (!o)
		return text;
	memcpy(o, text, head);
	memcpy(o + head, pkg, pl);
	o[head + pl] = '"';
	memcpy(o + head + pl + 1, text + first, rest + 1);
	free(text);
	return o;
}

/* gobuild_doc - see gobuild.h */
int gobuild_doc(const struct gobuild_env *e, const char *doc_dir, const struct gobuild_modfiles *m,
		const char *pkg, const char *sym, size_t cap, char **text, bool *truncated,
		char **err)
{
	*text = *err = NULL;
	*truncated = false;
	if (mkdir(doc_dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	int dfd = open(doc_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	int rc = gobuild_write_modfiles(dfd, m, false);
	close(dfd);
	if (rc < 0)
		return rc;

	/* `go doc <import path>` walks the whole module graph (`go list -m all`), which the
	 * offline cache does not hold: ask go list for the one package's directory (it loads only
	 * what that package needs, like a build) and show that directory */
	const char *largv[] = { e->go_bin, "list", "-e", "-f",
				"{{.Dir}}\t{{with .Error}}{{.Err}}{{end}}", pkg, NULL };
	struct runproc_result r;
	rc = run_go(e, false, doc_dir, largv, GOBUILD_DOC_TIMEOUT_MS, 64 * 1024, false, &r);
	if (rc < 0)
		return rc;
	char *dir = NULL;
	if (r.timed_out) {
		*err = strdup("go list took longer than a minute");
	} else {
		size_t dl = strcspn(r.out.data, "\t\n");
		if (r.exit_code == 0 && dl > 0 && r.out.data[0] == '/') {
			dir = strndup(r.out.data, dl);
			if (!dir)
				rc = -ENOMEM;
		} else {
			const char *why = r.out.data[dl] == '\t' ? r.out.data + dl + 1 : "";
			if (!*why)
				why = r.err.data;
			*err = strndup(why, strcspn(why, "\n"));
			if (*err) {
				strip_all(*err, ": module lookup disabled by GOPROXY=off");
				if (!**err) {
					free(*err);
					*err = strdup("go list could not find it");
				}
			}
		}
	}
	runproc_result_free(&r);
	if (!dir)
		return *err ? 0 : (rc < 0 ? rc : -ENOMEM);

	const char *argv[] = { e->go_bin, "doc", dir, sym, NULL };
	rc = run_go(e, false, doc_dir, argv, GOBUILD_DOC_TIMEOUT_MS, cap, false, &r);
	free(dir);
	if (rc < 0)
		return rc;
	if (r.exit_code == 0 && !r.timed_out) {
		*text = doc_name_import(r.out.data, pkg);
		r.out.data = NULL;
		*truncated = r.out.truncated;
	} else if (r.timed_out) {
		*err = strdup("go doc took longer than a minute");
	} else {
		*err = clean_doc_error(r.err.data);
		if (*err && !**err) {
			free(*err);
			*err = strdup("go doc failed without saying why");
		}
	}
	runproc_result_free(&r);
	if (!*text && !*err)
		return -ENOMEM;
	return 0;
}
