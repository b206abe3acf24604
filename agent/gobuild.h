/*
 * gobuild.h - the Go toolchain side of the pipeline: go.mod/go.sum selection, `go build`,
 * resolving missing imports (`go get`, falling back to `go mod tidy`), the content-addressed
 * binary cache, and `go doc`.
 *
 * Called by agent/pipeline.c. Every go command runs with a fixed environment built here (never
 * the agent's own), offline (GOPROXY=off) except while resolving imports, when the agent's
 * GOPROXY (default https://proxy.golang.org,direct) is passed through.
 */
#ifndef KG_GOBUILD_H
#define KG_GOBUILD_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "agent/normalize.h"
#include "agent/runproc.h"
#include "policy/limits.h"

#define GOBUILD_DEFAULT_PROXY "https://proxy.golang.org,direct"
/* the linker flags of every build: no symbol table, no DWARF */
#define GOBUILD_LDFLAGS      "-s -w"
/* the compiler flags of the main package (never its dependencies), split at spaces: no
 * inlining, which cuts the compile of a main package that instantiates many generics (the
 * Cloud clients) by about a third, and no DWARF, which the link's -w drops anyway (what `go
 * run` gives its main package; about a quarter less compile again); the trades are in
 * docs/snippets-and-results.md */
#define GOBUILD_MAIN_GCFLAGS "-l -dwarf=false"

struct gobuild_env {
	const char *go_bin;       /* "go" or an absolute path */
	const char *path;         /* PATH for the toolchain */
	const char *home;         /* state_dir/home */
	const char *gomodcache;
	const char *gocache;
	const char *tmpdir;       /* state_dir/tmp */
	const char *runtime_dir;  /* its standard-library plan seeds the direct path (agent/stdplan.h);
				   * NULL: none */
};

struct gobuild_modfiles {
	char *gomod, *gosum;
	size_t gomod_len, gosum_len;
	const char *source;       /* "session" (saved after a tidy), "lockfile" or "default" */
};

/* The toolchain, from `go env GOVERSION GOROOT GOTOOLDIR`, asked once per process. */
struct gobuild_tools {
	char version[64];         /* "go1.26.8" */
	char goroot[PATH_MAX];
	char tooldir[PATH_MAX];   /* where compile and link are */
};
int gobuild_toolchain(const struct gobuild_env *e, struct gobuild_tools *t);

/* gobuild_go_version - "go1.26.8" (gobuild_toolchain's) */
int gobuild_go_version(const struct gobuild_env *e, char *out, size_t outlen);

/* gobuild_environ - the whole environment every offline go command gets (NULL-terminated,
 * free with gobuild_strv_free); NULL when out of memory */
char **gobuild_environ(const struct gobuild_env *e);

/* gobuild_build_flags - the flags of `go build` between "build" and "-o", NULL-terminated */
extern const char *const gobuild_build_flags[];

/* gobuild_load_modfiles - state_dir/go.mod+go.sum if a resolve saved them, else
 * runtime_dir/lock/go.mod+go.sum, else a bare `module app` for goversion (no precompiled modules) */
int gobuild_load_modfiles(const char *state_dir, const char *runtime_dir, const char *goversion,
			  struct gobuild_modfiles *m);
void gobuild_modfiles_free(struct gobuild_modfiles *m);

/* gobuild_write_modfiles - go.mod and go.sum into dirfd; excl: O_EXCL (a freshly wiped /app),
 * otherwise replaced atomically */
int gobuild_write_modfiles(int dirfd, const struct gobuild_modfiles *m, bool excl);

/* gobuild_save_modfiles - copy app_dir's go.mod/go.sum (after a resolve) to state_dir */
int gobuild_save_modfiles(const char *app_dir, const char *state_dir);

/* gobuild_cache_key - SHA-256 hex over the files (sorted by path, length-prefixed), go.mod,
 * go.sum, the Go version and the build flags */
int gobuild_cache_key(const struct src_file *files, size_t n, const struct gobuild_modfiles *m,
		      const char *goversion, char hex[65]);

/* gobuild_cache_lookup - 1 and the binary's path if state_dir/bin/<hex> exists (and marks it
 * recently used), 0 if not */
int gobuild_cache_lookup(const char *state_dir, const char *hex, char *path, size_t pathlen);

/*
 * gobuild_build - `go build <gobuild_build_flags> -work -o <tmp> .` in app_dir (offline); on
 * success the binary lands in state_dir/bin/<hex> and *built is true. r gets the compiler
 * output (merged stdout+stderr in r->out, without go's WORK= line) and status. When built and
 * work is not NULL, work gets go's kept work directory (its b001/ holds the main package's
 * importcfg files); the caller removes it with gobuild_work_remove. Otherwise it is removed
 * here. Returns 0 when go ran, negative errno when it could not.
 */
int gobuild_build(const struct gobuild_env *e, const char *app_dir, const char *state_dir,
		  const char *hex, struct runproc_result *r, bool *built, char *work,
		  size_t worklen);

/* gobuild_work_remove - remove a work directory gobuild_build handed out ("" is nothing) */
void gobuild_work_remove(const char *dir);

/* gobuild_cache_put - move the binary at tmp to state_dir/bin/<hex> (same file system) and
 * keep the binary cache within GOBUILD_CACHE_MAX */
int gobuild_cache_put(const char *state_dir, const char *tmp, const char *hex);

/*
 * gobuild_test_build - `go test -c -o <out> [-cover] ./<dir>` in app_dir (offline, vet as go test
 * runs it, the flags of gobuild_build). *built is true when the test binary exists (go writes
 * none for a package without test files). r as for gobuild_build.
 */
int gobuild_test_build(const struct gobuild_env *e, const char *app_dir, const char *dir,
		       const char *out, bool cover, struct runproc_result *r, bool *built);

/* gobuild_test2json - the path of the toolchain's test2json (`go tool -n test2json`, which
 * builds it into the build cache the first time), asked once per process while it exists */
int gobuild_test2json(const struct gobuild_env *e, char *path, size_t len);

/* gobuild_needs_resolve - does this build output say imports are not covered by go.mod? */
bool gobuild_needs_resolve(const char *out, size_t len);

/* gobuild_missing_packages - the fetchable import paths named in the output (validated, at most
 * GOBUILD_MAX_MISSING); *pkgs is a NULL-terminated array, free with gobuild_strv_free */
int gobuild_missing_packages(const char *out, size_t len, char ***pkgs, size_t *n);
void gobuild_strv_free(char **v);

/*
 * gobuild_uncovered - of the import paths imports (fastbuild_imports), each once, the
 * fetchable ones (a dotted first element: not the standard library, not the app's own
 * packages) that no module go.mod requires can provide (no required path is the import or a
 * /-prefix of it): what `go build` would fail on with "no required module provides package",
 * known without running it. At most GOBUILD_MAX_MISSING; *pkgs NULL-terminated, free with
 * gobuild_strv_free. A path a required module might provide is never listed, so an empty list
 * only means "build and see".
 */
int gobuild_uncovered(const struct gobuild_modfiles *m, char *const *imports, size_t nimports,
		      char ***pkgs, size_t *n);

/*
 * gobuild_resolve - `go get <pkgs>` online in app_dir; if that fails (or pkgs is empty),
 * `go mod tidy`, keeping the requirements tidy would drop (the precompiled modules). On
 * failure *msg gets a sentence with go's own first error. output (may be NULL) gets what the
 * go commands printed, each after a "$ go get ..." line. The caller frees both.
 * Returns 0 when go.mod now covers the imports, -EAGAIN when go refused, negative errno else.
 */
int gobuild_resolve(const struct gobuild_env *e, const char *app_dir, char *const *pkgs,
		    size_t n, char **msg, char **output);

/*
 * gobuild_doc - `go doc <pkg> [<sym>]` offline in doc_dir (created, go.mod/go.sum written
 * from m). On success *text (head up to cap) and *truncated; on a lookup failure *err is go
 * doc's own message, cleaned of GOPATH noise. Returns 0 either way, negative errno when go
 * could not run.
 */
int gobuild_doc(const struct gobuild_env *e, const char *doc_dir, const struct gobuild_modfiles *m,
		const char *pkg, const char *sym, size_t cap, char **text, bool *truncated,
		char **err);

#endif
