/*
 * fastbuild.h - the direct build path: a call's main package compiled and linked with the
 * toolchain's own compile and link, from the import configuration that an earlier `go build`
 * of the same import set wrote in this sandbox, instead of running the go command (which
 * loads and checks the whole package graph, 668 packages for the storage client, each time).
 *
 * Called by agent/pipeline.c: fastbuild_prepare for every run-mode build, fastbuild_build
 * before `go build`, fastbuild_capture after a `go build` that succeeded. Anything that could
 * make the result differ from what `go build` would produce sends the call to `go build`
 * (docs/snippets-and-results.md, "How a call is built"): other imports, another go.mod or
 * go.sum, helper packages, build constraints or non-Go sources in the main package, another
 * toolchain, other flags or environment, a package file in the build cache that is missing or
 * changed. The plans live in the agent's memory, so they last as long as its sandbox.
 */
#ifndef KG_FASTBUILD_H
#define KG_FASTBUILD_H

#include <stdbool.h>
#include <stddef.h>

#include "agent/gobuild.h"
#include "agent/normalize.h"
#include "policy/limits.h"

/* What one call's build needs to know about the direct path. */
struct fastbuild_call {
	bool eligible;       /* the main package is one the direct path can build */
	char key[65];        /* the plan's key: imports, go.mod, go.sum, toolchain, flags, env */
	char why[300];       /* why the direct path was not taken (set by prepare or build) */
	char **imports;      /* sorted, distinct; NULL-terminated */
	size_t nimports;
	char **gofiles;      /* the main package's files as compile gets them ("./main.go"),
			      * sorted as the go command sorts them; NULL-terminated */
	size_t ngofiles;
	char lang[16];       /* -lang: "go1.26" */
	struct gobuild_tools tools;
};

/*
 * fastbuild_prepare - decide whether files (a normalized run-mode call, generated main
 * included) can take the direct path, and compute its key. fc->eligible false with fc->why
 * when not. Returns 0, or -ENOMEM.
 */
int fastbuild_prepare(const struct gobuild_env *e, const char *app_dir,
		      const struct src_file *files, size_t n, const struct gobuild_modfiles *m,
		      struct fastbuild_call *fc);
void fastbuild_call_free(struct fastbuild_call *fc);

/* fastbuild_planned - is there a plan for fc->key (fastbuild_build may still find it stale)?
 * When not, fc->why says so. */
bool fastbuild_planned(struct fastbuild_call *fc);

/*
 * fastbuild_build - compile and link the main package in app_dir directly with the plan for
 * fc->key; the binary lands in state_dir/bin/<hex> (as gobuild_build's). Returns 1 when built,
 * 0 when the call must go to `go build` (fc->why says why: no plan, a changed cache file, the
 * compiler refused the code, ...).
 */
int fastbuild_build(const struct gobuild_env *e, struct fastbuild_call *fc, const char *app_dir,
		    const char *state_dir, const char *hex);

/*
 * fastbuild_capture - after gobuild_build built fc's files: remember the plan for fc->key from
 * go's work directory (b001/importcfg and b001/importcfg.link) and the state of every package
 * file they name. Nothing is remembered when the files do not match what prepare expected.
 */
void fastbuild_capture(const struct gobuild_env *e, const struct fastbuild_call *fc,
		       const char *workdir);

/* fastbuild_forget_all - drop every plan (tests) */
void fastbuild_forget_all(void);

/* ---- the pure parts, for tests/unit/test_fastbuild.c ---- */

/*
 * fastbuild_imports - append the import paths of one Go file (its import declarations after
 * the package clause) to *v (NULL-terminated, *n entries; grown here). -EINVAL when the
 * imports are not plain: a path with an escape or an odd byte, a malformed declaration.
 */
int fastbuild_imports(const char *src, size_t len, char ***v, size_t *n);

/* fastbuild_go_lang - "go1.26" from go.mod's go directive ("go 1.26.0"); -ENOENT without one */
int fastbuild_go_lang(const char *gomod, size_t len, char *out, size_t outlen);

/* fastbuild_file_ok - NULL when a root .go file of this name and content is compiled as
 * it is by go build on linux/amd64 (no build constraint, no GOOS/GOARCH suffix, no //go:debug
 * or //go:embed), else the reason */
const char *fastbuild_file_ok(const char *name, const char *content, size_t len);

/* fastbuild_build_id - a build ID in the go command's shape (four 20-character parts) for
 * the binary keyed hex; compile_id is the main package's ("X/X") */
void fastbuild_build_id(const char *hex, char link_id[84], char compile_id[42]);

#endif
