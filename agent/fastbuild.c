/*
 * fastbuild.c - the direct build path: compile and link of the main package from a plan that
 * an earlier `go build` of the same import set left (fastbuild.h says when it applies).
 *
 * Called by agent/pipeline.c on its one call thread. What the go command would pass its tools
 * for a module's main package (cmd/go/internal/work/gc.go, go1.26) is rebuilt here: compile
 * gets -p main -lang -complete -buildid -goversion -c -nolocalimports -importcfg -pack and the
 * package's files, sorted, with the -trimpath rewrite "<dir>=>app;<objdir>=>"; link gets
 * -buildmode=exe -buildid -s -w -extld with GOROOT cleared (as -trimpath does). The import
 * configurations are go's own, read from its work directory; only the main package's line of
 * the link configuration is ours. The binary equals go build's but for its build ID (ours has
 * the go command's shape and is derived from the binary cache key) and the GNU build-id note
 * the linker derives from it: tests/unit/test_pipeline.c compares the two byte for byte.
 */
#include "agent/fastbuild.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/golex.h"
#include "agent/runproc.h"
#include "agent/stdplan.h"
#include "ipc/fsutil.h"
#include "ipc/log.h"
#include "lib/base64.h"

#define FB_GRACE_MS 2000
#define FB_NO_PLAN "this import set, go.mod and toolchain were not built by go build before in " \
		   "this sandbox"

/* One package file a plan links, and its state when go build last used it. */
struct fb_file {
	char *pkg, *path;
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
};

struct fb_plan {
	char key[65];
	char *cfg;                /* compile's importcfg, as go wrote it */
	char *head, *tail;        /* the link importcfg before and after the main package's line */
	struct fb_file *files;
	size_t nfiles;
	unsigned long long used;  /* LRU clock */
};

static pthread_mutex_t fb_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fb_plan *fb_plans[FASTBUILD_MAX_PLANS];
static unsigned long long fb_clock;

/* ---- the pure parts ---- */

/* strv_push - append a copy of s[0..len) to a NULL-terminated array */
static int strv_push(char ***v, size_t *n, const char *s, size_t len)
{
	char **nv = realloc(*v, (*n + 2) * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	*v = nv;
	if (!(nv[*n] = strndup(s, len)))
		return -ENOMEM;
	nv[++*n] = NULL;
	return 0;
}

/* path_char - a byte an import path may hold here; anything else sends the call to go build,
 * which knows the whole rule */
static bool path_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == '-' || c == '~' || c == '+' || c == '/';
}

/* semi_next - the next token that is not an explicit semicolon */
static void semi_next(struct golex *lx, struct golex_token *t)
{
	do
		golex_next(lx, t);
	while (golex_is_punct(lx, t, ';'));
}

/* fastbuild_imports - see fastbuild.h */
int fastbuild_imports(const char *src, size_t len, char ***v, size_t *n)
{
	struct golex lx;
	struct golex_token t;
	golex_init(&lx, src, len);
	golex_next(&lx, &t);
	if (!golex_is(&lx, &t, "package"))
		return -EINVAL;
	golex_next(&lx, &t);
	if (t.kind != GOLEX_IDENT)
		return -EINVAL;
	semi_next(&lx, &t);
	while (golex_is(&lx, &t, "import")) {
		golex_next(&lx, &t);
		bool group = golex_is_punct(&lx, &t, '(');
		if (group)
			semi_next(&lx, &t);
		for (;;) {
			if (group && golex_is_punct(&lx, &t, ')')) {
				semi_next(&lx, &t);
				break;
			}
			if (t.kind == GOLEX_IDENT || golex_is_punct(&lx, &t, '.'))
				golex_next(&lx, &t); /* the name: x, _ or . */
			if (t.kind != GOLEX_LITERAL || t.len < 3 || t.len > NORM_MAX_PATH + 2)
				return -EINVAL;
			const char *s = src + t.off;
			if ((s[0] != '"' && s[0] != '`') || s[t.len - 1] != s[0])
				return -EINVAL;
			for (size_t i = 1; i + 1 < t.len; i++)
				if (!path_char(s[i]))
					return -EINVAL;
			int rc = strv_push(v, n, s + 1, t.len - 2);
			if (rc < 0)
				return rc;
			semi_next(&lx, &t);
			if (!group)
				break;
			if (t.kind == GOLEX_EOF)
				return -EINVAL;
		}
	}
	return 0;
}

/* fastbuild_go_lang - see fastbuild.h */
int fastbuild_go_lang(const char *gomod, size_t len, char *out, size_t outlen)
{
	for (const char *p = gomod, *end = gomod + len; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		while (p < le && (*p == ' ' || *p == '\t'))
			p++;
		if (le - p > 3 && p[0] == 'g' && p[1] == 'o' && (p[2] == ' ' || p[2] == '\t')) {
			p += 2;
			while (p < le && (*p == ' ' || *p == '\t'))
				p++;
			/* major.minor: digits, a dot, digits */
			size_t a = strspn(p, "0123456789");
			size_t b = p + a < le && p[a] == '.' ? strspn(p + a + 1, "0123456789") : 0;
			if (a == 0 || b == 0 || p + a + 1 + b > le || a + b + 4 > outlen)
				return -EINVAL;
			snprintf(out, outlen, "go%.*s", (int)(a + 1 + b), p);
			return 0;
		}
		p = nl ? nl + 1 : end;
	}
	return -ENOENT;
}

/* Every GOOS and GOARCH go/build knows (syslist.go, with the reserved ones): a file name with
 * one of them after an underscore may carry a build constraint. */
static const char *const fb_sys[] = {
	"aix", "android", "darwin", "dragonfly", "freebsd", "hurd", "illumos", "ios", "js",
	"linux", "nacl", "netbsd", "openbsd", "plan9", "solaris", "wasip1", "windows", "zos",
	"386", "amd64", "amd64p32", "arm", "armbe", "arm64", "arm64be", "loong64", "mips",
	"mipsle", "mips64", "mips64le", "mips64p32", "mips64p32le", "ppc", "ppc64", "ppc64le",
	"riscv", "riscv64", "s390", "s390x", "sparc", "sparc64", "wasm", "test",
};

/* fastbuild_file_ok - see fastbuild.h */
const char *fastbuild_file_ok(const char *name, const char *content, size_t len)
{
	size_t nl = strlen(name);
	if (nl < 4 || strcmp(name + nl - 3, ".go") != 0)
		return "is not a .go file";
	if (name[0] == '_' || name[0] == '.')
		return "is a name the go command skips";
	/* name_GOOS_GOARCH.go: any part after the first that names a system */
	const char *p = strchr(name, '_');
	while (p && p < name + nl - 3) {
		const char *q = p + 1;
		size_t l = strcspn(q, "_.");
		for (size_t i = 0; i < sizeof(fb_sys) / sizeof(fb_sys[0]); i++)
			if (strlen(fb_sys[i]) == l && memcmp(q, fb_sys[i], l) == 0)
				return "has a GOOS, GOARCH or _test suffix in its name";
		p = strchr(q, '_');
	}
	/* build constraints, //go:debug (the link's default GODEBUG) and //go:embed (an embedcfg);
	 * looked for anywhere, not only where they count: a false alarm only costs a go build */
	static const char *const marks[] = { "go:build", "+build", "go:debug", "go:embed" };
	for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++)
		if (memmem(content, len, marks[i], strlen(marks[i])))
			return "has a build constraint, //go:debug or //go:embed line";
	return NULL;
}

/* fastbuild_build_id - see fastbuild.h */
void fastbuild_build_id(const char *hex, char link_id[84], char compile_id[42])
{
	char part[4][21];
	for (int i = 0; i < 4; i++) {
		unsigned char md[EVP_MAX_MD_SIZE];
		unsigned int mdlen = 0;
		char in[160]; /* the prefix and a 64-digit hex key: 85 bytes; snprintf's count is hashed */
		int l = snprintf(in, sizeof(in), "kode-gopher direct %d %s", i, hex);
		if (l < 0 || (size_t)l >= sizeof(in))
			l = (int)strlen(in);
		if (EVP_Digest(in, (size_t)l, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen < 15)
			memset(md, 0, 15);
		char *b = b64_encode(md, 15, B64_URL); /* 15 bytes: 20 characters, no padding */
		snprintf(part[i], sizeof(part[i]), "%s", b ? b : "AAAAAAAAAAAAAAAAAAAA");
		free(b);
	}
	snprintf(link_id, 84, "%s/%s/%s/%s", part[0], part[1], part[2], part[3]);
	snprintf(compile_id, 42, "%s/%s", part[1], part[1]);
}

/* ---- the key ---- */

struct hasher {
	EVP_MD_CTX *ctx;
	int err;
};

/* h_put - one length-prefixed field */
static void h_put(struct hasher *h, const void *p, size_t n)
{
	unsigned char len[8];
	for (int i = 0; i < 8; i++)
		len[i] = (unsigned char)((uint64_t)n >> (8 * i));
	if (!h->err && (EVP_DigestUpdate(h->ctx, len, 8) != 1 || EVP_DigestUpdate(h->ctx, p, n) != 1))
		h->err = -EIO;
}

static void h_str(struct hasher *h, const char *s)
{
	h_put(h, s, strlen(s));
}

/* h_file - a file by its identity: path and what stat says (a toolchain replaced in place
 * changes at least its inode or its mtime) */
static void h_file(struct hasher *h, const char *path)
{
	struct stat st;
	char buf[PATH_MAX + 160];
	if (stat(path, &st) < 0)
		snprintf(buf, sizeof(buf), "%s missing", path);
	else
		snprintf(buf, sizeof(buf), "%s %llu %llu %lld %lld.%09ld %lld.%09ld", path,
			 (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
			 (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
			 (long long)st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
	h_str(h, buf);
}

/* go_path - the go binary the toolchain environment finds */
static void go_path(const struct gobuild_env *e, char *out, size_t len)
{
	snprintf(out, len, "%s", e->go_bin);
	if (strchr(e->go_bin, '/'))
		return;
	char list[4096];
	snprintf(list, sizeof(list), "%s", e->path ? e->path : "/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin");
	char *save = NULL;
	for (char *d = strtok_r(list, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		char cand[PATH_MAX];
		if (snprintf(cand, sizeof(cand), "%s/%s", *d ? d : ".", e->go_bin) < (int)sizeof(cand) &&
		    access(cand, X_OK) == 0) {
			snprintf(out, len, "%s", cand);
			return;
		}
	}
}

/* plan_key - the key of everything but the main package's own files */
static int plan_key(const struct gobuild_env *e, const char *app_dir, const struct fastbuild_call *fc,
		    const struct gobuild_modfiles *m, char hex[65])
{
	struct hasher h = { .ctx = EVP_MD_CTX_new() };
	if (!h.ctx)
		return -ENOMEM;
	if (EVP_DigestInit_ex(h.ctx, EVP_sha256(), NULL) != 1)
		h.err = -EIO;
	h_str(&h, "kode-gopher direct build v1");
	h_str(&h, app_dir);
	for (size_t i = 0; i < fc->nimports; i++)
		h_str(&h, fc->imports[i]);
	h_str(&h, "go.mod");
	h_put(&h, m->gomod, m->gomod_len);
	h_put(&h, m->gosum, m->gosum_len);
	h_str(&h, fc->tools.version);
	h_str(&h, fc->tools.goroot);
	h_str(&h, fc->tools.tooldir);
	char p[PATH_MAX + 16];
	go_path(e, p, sizeof(p));
	h_file(&h, p);
	snprintf(p, sizeof(p), "%s/compile", fc->tools.tooldir);
	h_file(&h, p);
	snprintf(p, sizeof(p), "%s/link", fc->tools.tooldir);
	h_file(&h, p);
	snprintf(p, sizeof(p), "%s/VERSION", fc->tools.goroot);
	h_file(&h, p);
	h_str(&h, "flags");
	for (const char *const *f = gobuild_build_flags; *f; f++)
		h_str(&h, *f);
	char **env = gobuild_environ(e);
	if (!env) {
		EVP_MD_CTX_free(h.ctx);
		return -ENOMEM;
	}
	h_str(&h, "env");
	for (char **v = env; *v; v++)
		h_str(&h, *v);
	gobuild_strv_free(env);
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	if (!h.err && (EVP_DigestFinal_ex(h.ctx, md, &mdlen) != 1 || mdlen != 32))
		h.err = -EIO;
	EVP_MD_CTX_free(h.ctx);
	if (h.err)
		return h.err;
	for (unsigned int i = 0; i < mdlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	return 0;
}

/* ---- prepare ---- */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* has_suffix - s ends with suf */
static bool has_suffix(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && strcmp(s + a - b, suf) == 0;
}

/* other_source - a file the go command would compile, assemble or link besides the .go files */
static bool other_source(const char *name)
{
	static const char *const ext[] = { ".s", ".S", ".sx", ".c", ".cc", ".cpp", ".cxx", ".c++",
					   ".h", ".hh", ".hpp", ".hxx", ".m", ".f", ".F", ".for",
					   ".f90", ".swig", ".swigcxx", ".syso" };
	if (strcmp(name, "default.pgo") == 0) /* -pgo=auto would build everything with it */
		return true;
	for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++)
		if (has_suffix(name, ext[i]))
			return true;
	return false;
}

/* has_directive - a go.mod line that starts with word */
static bool has_directive(const char *s, size_t len, const char *word)
{
	size_t wl = strlen(word);
	for (const char *p = s, *end = s + len; p < end;) {
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		if ((size_t)(end - p) > wl && memcmp(p, word, wl) == 0 &&
		    (p[wl] == ' ' || p[wl] == '\t' || p[wl] == '('))
			return true;
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		p = nl ? nl + 1 : end;
	}
	return false;
}

static int seed(const struct gobuild_env *e, struct fastbuild_call *fc,
		const struct gobuild_modfiles *m);

#define NOPE(...)                                                        \
	do {                                                             \
		snprintf(fc->why, sizeof(fc->why), __VA_ARGS__);         \
		return 0;                                                \
	} while (0)

/* fastbuild_prepare - see fastbuild.h */
int fastbuild_prepare(const struct gobuild_env *e, const char *app_dir,
		      const struct src_file *files, size_t n, const struct gobuild_modfiles *m,
		      struct fastbuild_call *fc)
{
	memset(fc, 0, sizeof(*fc));
	int rc;
	for (size_t i = 0; i < n; i++) {
		const struct src_file *f = &files[i];
		if (strchr(f->path, '/')) {
			if (has_suffix(f->path, ".go"))
				NOPE("helper packages (%.200s) are built by go build", f->path);
			continue;
		}
		if (other_source(f->path))
			NOPE("%.200s is not Go source the direct path compiles", f->path);
		if (!has_suffix(f->path, ".go"))
			continue;
		const char *bad = fastbuild_file_ok(f->path, f->content, f->len);
		if (bad)
			NOPE("%.200s %s", f->path, bad);
		rc = fastbuild_imports(f->content, f->len, &fc->imports, &fc->nimports);
		if (rc == -ENOMEM)
			return rc;
		if (rc < 0)
			NOPE("the imports of %.200s are not plain import paths", f->path);
		char dot[NORM_MAX_PATH + 3];
		int l = snprintf(dot, sizeof(dot), "./%s", f->path);
		if ((rc = strv_push(&fc->gofiles, &fc->ngofiles, dot, (size_t)l)) < 0)
			return rc;
	}
	if (!fc->ngofiles)
		NOPE("there is no Go file in the top directory");
	qsort(fc->gofiles, fc->ngofiles, sizeof(char *), cmp_str);
	if (fc->imports) {
		qsort(fc->imports, fc->nimports, sizeof(char *), cmp_str);
		size_t k = 0;
		for (size_t i = 0; i < fc->nimports; i++) {
			if (k && strcmp(fc->imports[k - 1], fc->imports[i]) == 0)
				free(fc->imports[i]);
			else
				fc->imports[k++] = fc->imports[i];
		}
		fc->imports[k] = NULL;
		fc->nimports = k;
	}
	if (fc->nimports > FASTBUILD_MAX_IMPORTS)
		NOPE("the main package has more than %d imports", FASTBUILD_MAX_IMPORTS);
	for (size_t i = 0; i < fc->nimports; i++)
		if (strcmp(fc->imports[i], "C") == 0 || strcmp(fc->imports[i], "embed") == 0)
			NOPE("the main package imports %s", fc->imports[i]);
	if ((rc = gobuild_toolchain(e, &fc->tools)) < 0)
		NOPE("the toolchain could not be asked where its tools are");
	char tl[16];
	const char *v = fc->tools.version;
	size_t a = strncmp(v, "go", 2) == 0 ? strspn(v + 2, "0123456789") : 0;
	size_t b = a && v[2 + a] == '.' ? strspn(v + 3 + a, "0123456789") : 0;
	snprintf(tl, sizeof(tl), "go%.*s", b ? (int)(a + 1 + b) : 0, v + 2);
	if (!b || fastbuild_go_lang(m->gomod, m->gomod_len, fc->lang, sizeof(fc->lang)) < 0 ||
	    strcmp(tl, fc->lang) != 0)
		NOPE("go.mod's go version (%s) is not the toolchain's (%s): go build computes the "
		     "GODEBUG defaults then", fc->lang[0] ? fc->lang : "none", v);
	if (has_directive(m->gomod, m->gomod_len, "godebug"))
		NOPE("go.mod has a godebug directive");
	if ((rc = plan_key(e, app_dir, fc, m, fc->key)) == -ENOMEM)
		return rc;
	if (rc < 0)
		NOPE("the build's key could not be computed");
	fc->eligible = true;
	return seed(e, fc, m);
}

/* fastbuild_call_free - see fastbuild.h */
void fastbuild_call_free(struct fastbuild_call *fc)
{
	gobuild_strv_free(fc->imports);
	gobuild_strv_free(fc->gofiles);
	fc->imports = fc->gofiles = NULL;
	fc->nimports = fc->ngofiles = 0;
}

/* ---- plans ---- */

static void plan_free(struct fb_plan *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nfiles; i++) {
		free(p->files[i].pkg);
		free(p->files[i].path);
	}
	free(p->files);
	free(p->cfg);
	free(p->head);
	free(p->tail);
	free(p);
}

/* plan_slot - the index of key's plan, or -1 (fb_lock held) */
static int plan_slot(const char *key)
{
	for (int i = 0; i < FASTBUILD_MAX_PLANS; i++)
		if (fb_plans[i] && strcmp(fb_plans[i]->key, key) == 0)
			return i;
	return -1;
}

/* plan_drop - forget key's plan (fb_lock held) */
static void plan_drop(const char *key)
{
	int i = plan_slot(key);
	if (i >= 0) {
		plan_free(fb_plans[i]);
		fb_plans[i] = NULL;
	}
}

/* fastbuild_forget_all - see fastbuild.h */
void fastbuild_forget_all(void)
{
	pthread_mutex_lock(&fb_lock);
	for (int i = 0; i < FASTBUILD_MAX_PLANS; i++) {
		plan_free(fb_plans[i]);
		fb_plans[i] = NULL;
	}
	pthread_mutex_unlock(&fb_lock);
}

/* plan_store - keep pl as key's plan, in place of the least recently used one when full */
static void plan_store(struct fb_plan *pl, const char *key)
{
	memcpy(pl->key, key, sizeof(pl->key));
	pthread_mutex_lock(&fb_lock);
	plan_drop(pl->key);
	int slot = -1;
	for (int i = 0; i < FASTBUILD_MAX_PLANS; i++) {
		if (!fb_plans[i]) {
			slot = i;
			break;
		}
		if (slot < 0 || fb_plans[i]->used < fb_plans[slot]->used)
			slot = i;
	}
	plan_free(fb_plans[slot]);
	pl->used = ++fb_clock;
	fb_plans[slot] = pl;
	pthread_mutex_unlock(&fb_lock);
}

/* file_same - the package file is still the one go build used */
static bool file_same(const struct fb_file *f)
{
	struct stat st;
	return stat(f->path, &st) == 0 && S_ISREG(st.st_mode) && st.st_dev == f->dev &&
	       st.st_ino == f->ino && st.st_size == f->size &&
	       st.st_mtim.tv_sec == f->mtime.tv_sec && st.st_mtim.tv_nsec == f->mtime.tv_nsec;
}

/* read_cfg - one importcfg file of go's work directory */
static int read_cfg(const char *workdir, const char *name, char **data, size_t *len)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof(path), "%s/b001/%s", workdir, name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fs_read_fd(fd, FASTBUILD_MAX_CFG_BYTES, data, len);
	close(fd);
	return rc;
}

/* cfg_line - the next line of an importcfg: kind 'p' (packagefile pkg=path), 'm' (modinfo),
 * '#' (comment or empty); -EINVAL for anything else. *next moves past it. */
static int cfg_line(const char **next, const char *end, const char **line, size_t *ll,
		    const char **pkg, size_t *pl, const char **path, size_t *fl)
{
	const char *p = *next;
	const char *nl = memchr(p, '\n', (size_t)(end - p));
	const char *le = nl ? nl : end;
	*line = p;
	*ll = (size_t)(le - p);
	*next = nl ? nl + 1 : end;
	if (le == p || *p == '#')
		return '#';
	if (*ll > 8 && memcmp(p, "modinfo ", 8) == 0)
		return 'm';
	static const char pf[] = "packagefile ";
	if (*ll <= sizeof(pf) || memcmp(p, pf, sizeof(pf) - 1) != 0)
		return -EINVAL;
	const char *k = p + sizeof(pf) - 1;
	const char *eq = memchr(k, '=', (size_t)(le - k));
	if (!eq || eq == k || eq + 1 == le)
		return -EINVAL;
	*pkg = k;
	*pl = (size_t)(eq - k);
	*path = eq + 1;
	*fl = (size_t)(le - eq - 1);
	return 'p';
}

/* capture_link - the plan's link configuration and package files from go's importcfg.link */
static int capture_link(const struct gobuild_env *e, struct fb_plan *pl, const char *text,
			size_t len, const char *workdir, char *why, size_t whylen)
{
	(void)workdir;
	size_t gl = strlen(e->gocache);
	const char *end = text + len, *next = text, *split = NULL, *after = NULL;
	while (next < end) {
		const char *line, *pkg, *path;
		size_t ll, pkl, fl;
		const char *at = next;
		int k = cfg_line(&next, end, &line, &ll, &pkg, &pkl, &path, &fl);
		if (k < 0) {
			snprintf(why, whylen, "a line of importcfg.link is not understood: %.80s", line);
			return -EINVAL;
		}
		if (k != 'p')
			continue;
		if (pkl == strlen(NORM_MODULE_PATH) && memcmp(pkg, NORM_MODULE_PATH, pkl) == 0) {
			/* go's archive of this call's main package: in its work directory, or in
			 * the build cache when it had compiled the same files before */
			if (split) {
				snprintf(why, whylen, "importcfg.link names the main package oddly");
				return -EINVAL;
			}
			split = at;
			after = next;
			continue;
		}
		/* every other package comes from the build cache, by its content's name */
		if (fl <= gl + 1 || memcmp(path, e->gocache, gl) != 0 || path[gl] != '/' ||
		    memmem(path, fl, "/..", 3) || fl >= PATH_MAX) {
			snprintf(why, whylen, "package %.*s is not linked from the build cache", (int)pkl, pkg);
			return -EINVAL;
		}
		if (pl->nfiles >= FASTBUILD_MAX_PACKAGES) {
			snprintf(why, whylen, "more than %d packages are linked", FASTBUILD_MAX_PACKAGES);
			return -E2BIG;
		}
		struct fb_file *nf = realloc(pl->files, (pl->nfiles + 1) * sizeof(*nf));
		if (!nf)
			return -ENOMEM;
		pl->files = nf;
		struct fb_file *f = &pl->files[pl->nfiles];
		memset(f, 0, sizeof(*f));
		f->pkg = strndup(pkg, pkl);
		f->path = strndup(path, fl);
		if (!f->pkg || !f->path) {
			free(f->pkg);
			free(f->path);
			return -ENOMEM;
		}
		pl->nfiles++;
		struct stat st;
		if (stat(f->path, &st) < 0 || !S_ISREG(st.st_mode)) {
			snprintf(why, whylen, "the build cache has no file for package %s", f->pkg);
			return -ENOENT;
		}
		f->dev = st.st_dev;
		f->ino = st.st_ino;
		f->size = st.st_size;
		f->mtime = st.st_mtim;
	}
	if (!split) {
		snprintf(why, whylen, "importcfg.link does not name the main package");
		return -EINVAL;
	}
	pl->head = strndup(text, (size_t)(split - text));
	pl->tail = strndup(after, (size_t)(end - after));
	return pl->head && pl->tail ? 0 : -ENOMEM;
}

/* linked_file - the file the plan links for pkg[0..pl), or NULL */
static const char *linked_file(const struct fb_plan *p, const char *pkg, size_t pl)
{
	for (size_t i = 0; i < p->nfiles; i++)
		if (strlen(p->files[i].pkg) == pl && memcmp(p->files[i].pkg, pkg, pl) == 0)
			return p->files[i].path;
	return NULL;
}

/*
 * capture_compile - compile's importcfg: the imports prepare found (and runtime, which go adds;
 * never unsafe, which is the compiler's own), each with the file the link configuration names.
 * When go compiled the main package itself (not when its archive was in the build cache), its
 * own importcfg must say exactly that.
 */
static int capture_compile(const struct fastbuild_call *fc, struct fb_plan *pl, const char *text,
			   size_t len, char *why, size_t whylen)
{
	size_t want = 0, cap = 32;
	bool runtime = false;
	for (size_t i = 0; i < fc->nimports; i++)
		runtime |= strcmp(fc->imports[i], "runtime") == 0;
	for (size_t i = 0; i <= fc->nimports; i++) {
		const char *imp = i < fc->nimports ? fc->imports[i] : runtime ? NULL : "runtime";
		if (!imp || strcmp(imp, "unsafe") == 0)
			continue;
		const char *f = linked_file(pl, imp, strlen(imp));
		if (!f) {
			snprintf(why, whylen, "the link does not name the import %.200s", imp);
			return -EINVAL;
		}
		cap += strlen(imp) + strlen(f) + 14;
		want++;
	}
	char *cfg = malloc(cap);
	if (!cfg)
		return -ENOMEM;
	size_t n = (size_t)snprintf(cfg, cap, "# import config\n");
	for (size_t i = 0; i <= fc->nimports; i++) {
		const char *imp = i < fc->nimports ? fc->imports[i] : runtime ? NULL : "runtime";
		if (imp && strcmp(imp, "unsafe") != 0)
			n += (size_t)snprintf(cfg + n, cap - n, "packagefile %s=%s\n", imp,
					      linked_file(pl, imp, strlen(imp)));
	}
	pl->cfg = cfg;
	if (!text)
		return 0;
	size_t seen = 0;
	for (const char *end = text + len, *next = text; next < end;) {
		const char *line, *pkg, *path;
		size_t ll, pkl, fl;
		int k = cfg_line(&next, end, &line, &ll, &pkg, &pkl, &path, &fl);
		if (k == '#')
			continue;
		const char *mine = k == 'p' ? linked_file(pl, pkg, pkl) : NULL;
		char needle[PATH_MAX + 16];
		int nl = mine ? snprintf(needle, sizeof(needle), "\npackagefile %.*s=", (int)pkl, pkg) : 0;
		const char *at = mine ? strstr(cfg, needle) : NULL;
		if (!at || strlen(mine) != fl || memcmp(mine, path, fl) != 0 || nl <= 0) {
			snprintf(why, whylen, "go's importcfg line %.120s is not what the imports say",
				 line);
			return -EINVAL;
		}
		seen++;
	}
	if (seen != want) {
		snprintf(why, whylen, "go's importcfg names %zu packages, the imports %zu", seen, want);
		return -EINVAL;
	}
	return 0;
}

/* fastbuild_capture - see fastbuild.h */
void fastbuild_capture(const struct gobuild_env *e, const struct fastbuild_call *fc,
		       const char *workdir)
{
	if (!fc->eligible || !workdir || !workdir[0])
		return;
	char *cfg = NULL, *link = NULL, why[300] = "";
	size_t cl = 0, ll = 0;
	struct fb_plan *pl = calloc(1, sizeof(*pl));
	int rc = pl ? 0 : -ENOMEM;
	/* no importcfg when go found the main package's archive in the build cache */
	if (rc == 0 && (rc = read_cfg(workdir, "importcfg", &cfg, &cl)) < 0 && rc != -ENOENT)
		snprintf(why, sizeof(why), "b001/importcfg: %s", strerror(-rc));
	if (rc == -ENOENT)
		rc = 0;
	if (rc == 0 && (rc = read_cfg(workdir, "importcfg.link", &link, &ll)) < 0)
		snprintf(why, sizeof(why), "b001/importcfg.link: %s", strerror(-rc));
	if (rc == 0)
		rc = capture_link(e, pl, link, ll, workdir, why, sizeof(why));
	if (rc == 0)
		rc = capture_compile(fc, pl, cfg, cl, why, sizeof(why));
	free(cfg);
	free(link);
	if (rc < 0) {
		log_info("no direct build plan for these imports: %s", why[0] ? why : strerror(-rc));
		plan_free(pl);
		return;
	}
	plan_store(pl, fc->key);
}

/*
 * seed - an import set with no plan yet: one from the runtime's standard-library plan, taken
 * as go build's own importcfg.link would be (agent/stdplan.h), so that a new sandbox's first
 * standard-library build is direct too. fc->why says why not. 0, or -ENOMEM.
 */
static int seed(const struct gobuild_env *e, struct fastbuild_call *fc,
		const struct gobuild_modfiles *m)
{
	if (!e->runtime_dir)
		return 0;
	pthread_mutex_lock(&fb_lock);
	bool have = plan_slot(fc->key) >= 0;
	pthread_mutex_unlock(&fb_lock);
	if (have)
		return 0;
	char *text = NULL, why[300] = "";
	size_t len = 0;
	struct fb_plan *pl = NULL;
	int rc = stdplan_link_cfg(e->runtime_dir, e, &fc->tools, m, fc->imports, fc->nimports,
				  &text, &len, why, sizeof(why));
	if (rc == 1 && !(pl = calloc(1, sizeof(*pl))))
		rc = -ENOMEM;
	if (rc == 1 && (rc = capture_link(e, pl, text, len, NULL, why, sizeof(why))) == 0 &&
	    (rc = capture_compile(fc, pl, NULL, 0, why, sizeof(why))) == 0)
		rc = 1;
	free(text);
	if (rc == 1) {
		plan_store(pl, fc->key);
		log_debug("a direct build plan for these imports from the runtime's standard-library plan");
		return 0;
	}
	plan_free(pl);
	if (rc == -ENOMEM)
		return rc;
	snprintf(fc->why, sizeof(fc->why), FB_NO_PLAN ", and the runtime's standard-library plan "
		 "does not apply: %.150s", why[0] ? why : strerror(-rc));
	return 0;
}

/* ---- build ---- */

/* write_file - a new file in dir */
static int write_file(const char *dir, const char *name, const char *a, const char *b,
		      const char *c)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int rc = fs_write_all(fd, a, strlen(a));
	if (rc == 0 && b)
		rc = fs_write_all(fd, b, strlen(b));
	if (rc == 0 && c)
		rc = fs_write_all(fd, c, strlen(c));
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

/* tool_env - the go commands' environment with GOROOT as the go command gives its tools:
 * the toolchain's for compile, empty for link (what -trimpath does) */
static char **tool_env(const struct gobuild_env *e, const char *goroot)
{
	char **env = gobuild_environ(e);
	if (!env)
		return NULL;
	size_t n = 0, k = 0;
	for (; env[n]; n++)
		if (strncmp(env[n], "GOROOT=", 7) == 0)
			free(env[n]);
		else
			env[k++] = env[n];
	env[k] = NULL;
	char **nv = realloc(env, (k + 2) * sizeof(*nv));
	if (!nv) {
		gobuild_strv_free(env);
		return NULL;
	}
	if (asprintf(&nv[k], "GOROOT=%s", goroot) < 0) {
		nv[k] = NULL;
		gobuild_strv_free(nv);
		return NULL;
	}
	nv[k + 1] = NULL;
	return nv;
}

/* run_tool - one tool run; 0 when it exited 0, else why says how it failed */
static int run_tool(const char *const *argv, char **env, const char *cwd, const char *what,
		    char *why, size_t whylen)
{
	struct runproc_opts o = {
		.argv = argv,
		.envp = (const char *const *)env,
		.cwd = cwd,
		.timeout_ms = GOBUILD_TIMEOUT_MS,
		.term_signal = SIGTERM,
		.grace_ms = FB_GRACE_MS,
		.out_cap = GOBUILD_OUTPUT_CAP,
		.err_cap = GOBUILD_OUTPUT_CAP,
		.merge_stderr = true,
	};
	struct runproc_result r;
	int rc = runproc_run(&o, &r);
	if (rc < 0) {
		snprintf(why, whylen, "%s could not be started (%s)", what, strerror(-rc));
		return rc;
	}
	/* where a direct build's time goes, for `serve --log-level debug` */
	log_debug("%s: %ld ms, CPU %ld ms user + %ld ms system", what, r.wall_ms, r.user_ms,
		  r.sys_ms);
	if (r.exit_code != 0 || r.timed_out) {
		snprintf(why, whylen, "%s %s (%.*s)", what, r.timed_out ? "timed out" : "failed",
			 (int)strcspn(r.out.data ? r.out.data : "", "\n"), r.out.data ? r.out.data : "");
		rc = -EIO;
	}
	runproc_result_free(&r);
	return rc;
}

/* fastbuild_planned - see fastbuild.h */
bool fastbuild_planned(struct fastbuild_call *fc)
{
	if (!fc->eligible)
		return false;
	pthread_mutex_lock(&fb_lock);
	bool yes = plan_slot(fc->key) >= 0;
	pthread_mutex_unlock(&fb_lock);
	if (!yes && !fc->why[0]) /* (or why the runtime's plan did not apply: seed) */
		snprintf(fc->why, sizeof(fc->why), FB_NO_PLAN);
	return yes;
}

/* fastbuild_build - see fastbuild.h */
int fastbuild_build(const struct gobuild_env *e, struct fastbuild_call *fc, const char *app_dir,
		    const char *state_dir, const char *hex)
{
	if (!fc->eligible)
		return 0;
	char *cfg = NULL, *head = NULL, *tail = NULL;
	pthread_mutex_lock(&fb_lock);
	int slot = plan_slot(fc->key);
	if (slot < 0) {
		pthread_mutex_unlock(&fb_lock);
		snprintf(fc->why, sizeof(fc->why), FB_NO_PLAN);
		return 0;
	}
	struct fb_plan *pl = fb_plans[slot];
	for (size_t i = 0; i < pl->nfiles; i++) {
		if (!file_same(&pl->files[i])) {
			snprintf(fc->why, sizeof(fc->why), "the build cache's file for package %.150s "
				 "changed or is gone since go build used it", pl->files[i].pkg);
			plan_drop(fc->key);
			pthread_mutex_unlock(&fb_lock);
			return 0;
		}
	}
	pl->used = ++fb_clock;
	cfg = strdup(pl->cfg);
	head = strdup(pl->head);
	tail = strdup(pl->tail);
	pthread_mutex_unlock(&fb_lock);

	char dir[PATH_MAX], real[PATH_MAX], mainpkg[PATH_MAX + 16], line[PATH_MAX + 40];
	char trim[2 * PATH_MAX + 16], out[PATH_MAX + 16], ccfg[PATH_MAX + 16], lcfg[PATH_MAX + 16];
	char lang[32], cflag[16], link_id[84], compile_id[42], ldbuf[64], buildid[100];
	char compile[PATH_MAX + 16], link[PATH_MAX + 16];
	char **cenv = NULL, **lenv = NULL;
	int ok = 0;
	dir[0] = '\0';
	if (!cfg || !head || !tail || !realpath(app_dir, real) ||
	    snprintf(dir, sizeof(dir), "%s/direct-XXXXXX", e->tmpdir) >= (int)sizeof(dir) ||
	    !mkdtemp(dir)) {
		snprintf(fc->why, sizeof(fc->why), "the direct build's work directory could not be made");
		dir[0] = '\0';
		goto out;
	}
	snprintf(mainpkg, sizeof(mainpkg), "%s/_pkg_.a", dir);
	snprintf(line, sizeof(line), "packagefile %s=%s\n", NORM_MODULE_PATH, mainpkg);
	snprintf(ccfg, sizeof(ccfg), "%s/importcfg", dir);
	snprintf(lcfg, sizeof(lcfg), "%s/importcfg.link", dir);
	snprintf(out, sizeof(out), "%s/a.out", dir);
	if (write_file(dir, "importcfg", cfg, NULL, NULL) < 0 ||
	    write_file(dir, "importcfg.link", head, line, tail) < 0) {
		snprintf(fc->why, sizeof(fc->why), "the direct build's importcfg could not be written");
		goto out;
	}
	snprintf(trim, sizeof(trim), "%s=>%s;%s=>", real, NORM_MODULE_PATH, dir);
	snprintf(lang, sizeof(lang), "-lang=%s", fc->lang);
	fastbuild_build_id(hex, link_id, compile_id);
	snprintf(buildid, sizeof(buildid), "-buildid=%s", link_id);
	snprintf(compile, sizeof(compile), "%s/compile", fc->tools.tooldir);
	snprintf(link, sizeof(link), "%s/link", fc->tools.tooldir);
	/* the go command's -c: backend concurrency, min(4, GOMAXPROCS), none on one CPU; it
	 * changes nothing in the output */
	cpu_set_t cpus;
	int ncpu = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
	snprintf(cflag, sizeof(cflag), "-c=%d", ncpu > 4 ? 4 : ncpu);

	const char *cargv[40 + NORM_MAX_FILES];
	size_t na = 0;
	cargv[na++] = compile;
	cargv[na++] = "-o";
	cargv[na++] = mainpkg;
	cargv[na++] = "-trimpath";
	cargv[na++] = trim;
	cargv[na++] = "-p";
	cargv[na++] = "main";
	cargv[na++] = lang;
	cargv[na++] = "-complete";
	cargv[na++] = "-buildid";
	cargv[na++] = compile_id;
	cargv[na++] = "-goversion";
	cargv[na++] = fc->tools.version;
	if (ncpu > 1)
		cargv[na++] = cflag;
	char gcbuf[64];
	snprintf(gcbuf, sizeof(gcbuf), "%s", GOBUILD_MAIN_GCFLAGS);
	for (char *save = NULL, *tok = strtok_r(gcbuf, " ", &save); tok && na < 24;
	     tok = strtok_r(NULL, " ", &save))
		cargv[na++] = tok;
	cargv[na++] = "-nolocalimports";
	cargv[na++] = "-importcfg";
	cargv[na++] = ccfg;
	cargv[na++] = "-pack";
	for (size_t i = 0; i < fc->ngofiles && na + 1 < sizeof(cargv) / sizeof(cargv[0]); i++)
		cargv[na++] = fc->gofiles[i];
	cargv[na] = NULL;
	if (!(cenv = tool_env(e, fc->tools.goroot)) || !(lenv = tool_env(e, ""))) {
		snprintf(fc->why, sizeof(fc->why), "out of memory");
		goto out;
	}
	if (run_tool(cargv, cenv, real, "the direct compile", fc->why, sizeof(fc->why)) < 0) {
		/* the code's own errors: go build reports them as it always did */
		goto out;
	}
	const char *largv[16];
	na = 0;
	largv[na++] = link;
	largv[na++] = "-o";
	largv[na++] = out;
	largv[na++] = "-importcfg";
	largv[na++] = lcfg;
	largv[na++] = "-buildmode=exe";
	largv[na++] = buildid;
	snprintf(ldbuf, sizeof(ldbuf), "%s", GOBUILD_LDFLAGS);
	for (char *save = NULL, *tok = strtok_r(ldbuf, " ", &save); tok && na < 12;
	     tok = strtok_r(NULL, " ", &save))
		largv[na++] = tok;
	largv[na++] = "-extld=gcc";
	largv[na++] = mainpkg;
	largv[na] = NULL;
	if (run_tool(largv, lenv, real, "the direct link", fc->why, sizeof(fc->why)) < 0) {
		pthread_mutex_lock(&fb_lock);
		plan_drop(fc->key);
		pthread_mutex_unlock(&fb_lock);
		goto out;
	}
	int rc = gobuild_cache_put(state_dir, out, hex);
	if (rc < 0) {
		snprintf(fc->why, sizeof(fc->why), "the binary could not be kept: %s", strerror(-rc));
		goto out;
	}
	ok = 1;
out:
	if (dir[0])
		gobuild_work_remove(dir);
	gobuild_strv_free(cenv);
	gobuild_strv_free(lenv);
	free(cfg);
	free(head);
	free(tail);
	return ok;
}
