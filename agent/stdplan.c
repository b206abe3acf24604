/*
 * stdplan.c - the runtime's standard-library plan (stdplan.h): read, checked against what this
 * sandbox sees, and turned into the importcfg.link go build would write for a main package of
 * standard imports, which agent/fastbuild.c then takes as it takes go build's own.
 *
 * Called by agent/fastbuild.c (fastbuild_prepare) when an import set has no plan yet. Read anew
 * each time (about 40 KB, once per new import set): a runtime rebuilt under a running sandbox is
 * seen at once.
 */
#include "agent/stdplan.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/normalize.h"
#include "ipc/fsutil.h"

#define SP_HEADER "kode-gopher std plan v1"

struct sp_pkg {
	const char *name, *file, *size, *imports; /* in the plan's text; file "-": none */
	bool in;                                   /* in the closure */
};

static int read_small(const char *dir, const char *name, size_t max, char **data, size_t *len)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fs_read_fd(fd, max, data, len);
	close(fd);
	return rc;
}

static int cmp_pkg(const void *a, const void *b)
{
	return strcmp(((const struct sp_pkg *)a)->name, ((const struct sp_pkg *)b)->name);
}

static struct sp_pkg *find(struct sp_pkg *v, size_t n, const char *name)
{
	struct sp_pkg key = { .name = name };
	return bsearch(&key, v, n, sizeof(*v), cmp_pkg);
}

/* sha256_hex - of p[0..n) */
static int sha256_hex(const void *p, size_t n, char hex[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int ml = 0;
	if (EVP_Digest(p, n, md, &ml, EVP_sha256(), NULL) != 1 || ml != 32)
		return -EIO;
	for (unsigned int i = 0; i < ml; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	return 0;
}

/* main_may_import - a standard package a main package outside the standard library may import:
 * not internal, not vendored, not a command's */
static bool main_may_import(const char *p)
{
	if (strncmp(p, "vendor/", 7) == 0 || strncmp(p, "cmd/", 4) == 0 || strcmp(p, "internal") == 0 ||
	    strncmp(p, "internal/", 9) == 0)
		return false;
	for (const char *s = strstr(p, "/internal"); s; s = strstr(s + 1, "/internal"))
		if (s[9] == '/' || s[9] == '\0')
			return false;
	return true;
}

/* env_has - the go command's environment holds exactly kv */
static bool env_has(char **env, const char *kv)
{
	for (char **v = env; v && *v; v++)
		if (strcmp(*v, kv) == 0)
			return true;
	return false;
}

#define NO(...)                                           \
	do {                                              \
		snprintf(why, whylen, __VA_ARGS__);       \
		rc = 0;                                   \
		goto out;                                 \
	} while (0)

/* stdplan_link_cfg - see stdplan.h */
int stdplan_link_cfg(const char *runtime_dir, const struct gobuild_env *e,
		     const struct gobuild_tools *t, const struct gobuild_modfiles *m,
		     char *const *imports, size_t n, char **text, size_t *len, char *why,
		     size_t whylen)
{
	char *plan = NULL, *stamp = NULL, *lock = NULL, **env = NULL, *out = NULL;
	size_t pl = 0, sl = 0, ll = 0, npkgs = 0;
	struct sp_pkg *pkgs = NULL;
	const char *modinfo = NULL;
	bool seen_compile = false, seen_link = false;
	int rc = read_small(runtime_dir, STDPLAN_FILE, STDPLAN_MAX_BYTES, &plan, &pl);
	*text = NULL;
	*len = 0;
	if (rc == -ENOMEM)
		goto out;
	if (rc < 0)
		NO("the runtime has no standard-library plan (%s/" STDPLAN_FILE ": %s; `make runtime` "
		   "writes it)", runtime_dir, strerror(-rc));
	if ((rc = read_small(runtime_dir, "stamp", 4096, &stamp, &sl)) == -ENOMEM ||
	    (rc == 0 && (rc = read_small(runtime_dir, "lock/go.mod", 1 << 20, &lock, &ll)) == -ENOMEM))
		goto out;
	if (rc < 0)
		NO("the runtime's stamp or lockfile cannot be read (%s)", strerror(-rc));
	while (sl && (stamp[sl - 1] == '\n' || stamp[sl - 1] == ' '))
		stamp[--sl] = '\0';
	if (!(env = gobuild_environ(e))) {
		rc = -ENOMEM;
		goto out;
	}
	char flags[512];
	size_t fl = 0;
	for (const char *const *f = gobuild_build_flags; *f; f++)
		fl += (size_t)snprintf(flags + fl, sizeof(flags) - fl, "%s%s", fl ? " " : "", *f);
	char lockhex[65];
	if (sha256_hex(lock, ll, lockhex) < 0)
		NO("the lockfile's digest could not be computed");
	if (!(pkgs = calloc(STDPLAN_MAX_PKGS, sizeof(*pkgs)))) {
		rc = -ENOMEM;
		goto out;
	}

	/* the header: every line must be what this sandbox sees */
	int line = 0;
	for (char *p = plan, *end = plan + pl; p < end; line++) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			NO("the standard-library plan is cut short");
		*nl = '\0';
		char *l = p, *val = strchr(l, ' ');
		p = nl + 1;
		if (line == 0) {
			if (strcmp(l, SP_HEADER) != 0)
				NO("the standard-library plan is of another version");
			continue;
		}
		if (!val)
			NO("a line of the standard-library plan is not understood");
		*val++ = '\0';
		if (strcmp(l, "pkg") == 0) {
			char *f[4];
			for (int i = 0; i < 4; i++) {
				f[i] = val;
				val = i < 3 ? strchr(val, ' ') : NULL;
				if (i < 3 && !val)
					NO("a package line of the standard-library plan is not understood");
				if (val)
					*val++ = '\0';
			}
			if (npkgs >= STDPLAN_MAX_PKGS)
				NO("the standard-library plan has more than %d packages", STDPLAN_MAX_PKGS);
			pkgs[npkgs++] = (struct sp_pkg){ .name = f[0], .file = f[1], .size = f[2],
							 .imports = f[3] };
		} else if (strcmp(l, "stamp") == 0) {
			if (strcmp(val, stamp) != 0)
				NO("the standard-library plan was made for another runtime (stamp %.16s…, "
				   "the runtime's %.16s…)", val, stamp);
		} else if (strcmp(l, "lock") == 0) {
			if (strcmp(val, lockhex) != 0)
				NO("the standard-library plan was made with another lockfile");
		} else if (strcmp(l, "version") == 0) {
			if (strcmp(val, t->version) != 0)
				NO("the standard-library plan is for %.40s, the toolchain is %s", val, t->version);
		} else if (strcmp(l, "goroot") == 0) {
			if (strcmp(val, t->goroot) != 0)
				NO("the standard-library plan is for another GOROOT");
		} else if (strcmp(l, "tooldir") == 0) {
			if (strcmp(val, t->tooldir) != 0)
				NO("the standard-library plan is for another GOTOOLDIR");
		} else if (strcmp(l, "gocache") == 0) {
			if (strcmp(val, e->gocache) != 0)
				NO("the standard-library plan is for another build cache (%.200s)", val);
		} else if (strcmp(l, "flags") == 0) {
			if (strcmp(val, flags) != 0)
				NO("the standard-library plan is for other build flags (%.200s)", val);
		} else if (strcmp(l, "env") == 0) {
			if (!env_has(env, val))
				NO("the standard-library plan is for another environment (%.100s)", val);
		} else if (strcmp(l, "tool") == 0) {
			/* <path> <size> <mtime seconds> */
			char *mtime = strrchr(val, ' ');
			if (mtime)
				*mtime++ = '\0';
			char *size = mtime ? strrchr(val, ' ') : NULL, *path = val;
			if (!size || size == path)
				NO("a tool line of the standard-library plan is not understood");
			*size++ = '\0';
			struct stat st;
			char have[64] = "";
			if (stat(path, &st) == 0)
				snprintf(have, sizeof(have), "%lld %lld", (long long)st.st_size,
					 (long long)st.st_mtim.tv_sec);
			char want_st[64];
			snprintf(want_st, sizeof(want_st), "%s %s", size, mtime);
			if (strcmp(have, want_st) != 0)
				NO("the toolchain's %.200s changed since the standard-library plan was made", path);
			char want[PATH_MAX + 16];
			snprintf(want, sizeof(want), "%s/compile", t->tooldir);
			seen_compile |= strcmp(path, want) == 0;
			snprintf(want, sizeof(want), "%s/link", t->tooldir);
			seen_link |= strcmp(path, want) == 0;
		} else if (strcmp(l, "modinfo") == 0) {
			if (modinfo)
				NO("the standard-library plan has two modinfo lines");
			val[-1] = ' ';
			modinfo = l;
		} else if (strcmp(l, "script") != 0) {
			NO("a line of the standard-library plan is not understood (%.40s)", l);
		}
	}
	if (line == 0 || !modinfo || !seen_compile || !seen_link || !npkgs)
		NO("the standard-library plan is incomplete");
	if (m->gomod_len != ll || memcmp(m->gomod, lock, ll) != 0)
		NO("go.mod is not the runtime's lockfile");

	/* the closure of the imports and of runtime, which go links into every program */
	qsort(pkgs, npkgs, sizeof(*pkgs), cmp_pkg);
	size_t *queue = calloc(npkgs + 1, sizeof(*queue)), qn = 0;
	if (!queue) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i <= n; i++) {
		const char *imp = i < n ? imports[i] : "runtime";
		struct sp_pkg *k = find(pkgs, npkgs, imp);
		if (!k || !main_may_import(imp)) {
			free(queue);
			NO("%.200s is not a standard package a main package may import", imp);
		}
		if (!k->in) {
			k->in = true;
			queue[qn++] = (size_t)(k - pkgs);
		}
	}
	for (size_t q = 0; q < qn; q++) {
		const struct sp_pkg *k = &pkgs[queue[q]];
		if (strcmp(k->imports, "-") == 0)
			continue;
		for (const char *s = k->imports; *s;) {
			size_t w = strcspn(s, ",");
			char dep[NORM_MAX_PATH + 1];
			if (w == 0 || w > NORM_MAX_PATH) {
				free(queue);
				NO("the standard-library plan names an odd import of %.100s", k->name);
			}
			memcpy(dep, s, w);
			dep[w] = '\0';
			struct sp_pkg *d = find(pkgs, npkgs, dep);
			if (!d) {
				free(queue);
				NO("the standard-library plan does not name %.100s, an import of %.100s", dep,
				   k->name);
			}
			if (!d->in) {
				d->in = true;
				queue[qn++] = (size_t)(d - pkgs);
			}
			s += w;
			if (*s == ',')
				s++;
		}
	}
	free(queue);

	/* every file linked: in the build cache, of the plan's size (its name is its content's
	 * digest, so a file of that name and size is the one go list named) */
	size_t gl = strlen(e->gocache), cap = strlen(modinfo) + 64;
	for (size_t i = 0; i < npkgs; i++) {
		const struct sp_pkg *k = &pkgs[i];
		if (!k->in || strcmp(k->name, "unsafe") == 0)
			continue;
		struct stat st;
		char sz[32];
		if (strcmp(k->file, "-") == 0 || strncmp(k->file, e->gocache, gl) != 0 ||
		    k->file[gl] != '/' || strstr(k->file, "/..") || stat(k->file, &st) != 0 ||
		    !S_ISREG(st.st_mode))
			NO("the build cache has no file for package %.150s", k->name);
		snprintf(sz, sizeof(sz), "%lld", (long long)st.st_size);
		if (strcmp(sz, k->size) != 0)
			NO("the build cache's file for package %.150s is not the one the standard-library "
			   "plan names", k->name);
		cap += strlen(k->name) + strlen(k->file) + 16;
	}
	if (!(out = malloc(cap))) {
		rc = -ENOMEM;
		goto out;
	}
	size_t o = (size_t)snprintf(out, cap, "packagefile %s=-\n", NORM_MODULE_PATH);
	for (size_t i = 0; i < npkgs; i++)
		if (pkgs[i].in && strcmp(pkgs[i].name, "unsafe") != 0)
			o += (size_t)snprintf(out + o, cap - o, "packagefile %s=%s\n", pkgs[i].name,
					      pkgs[i].file);
	o += (size_t)snprintf(out + o, cap - o, "%s\n", modinfo);
	*text = out;
	*len = o;
	out = NULL;
	rc = 1;
out:
	free(out);
	free(pkgs);
	free(plan);
	free(stamp);
	free(lock);
	gobuild_strv_free(env);
	return rc;
}
