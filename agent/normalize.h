/*
 * normalize.h - step 1 of a tool call: turn what the model sent into a buildable module.
 *
 * Called by the agent's execute pipeline (agent/pipeline.c) inside the sandbox. Parsing of the
 * user's Go source happens only here. Every input is untrusted: sizes are bounded and every
 * failure is a sentence the model can act on.
 */
#ifndef KG_NORMALIZE_H
#define KG_NORMALIZE_H

#include <stddef.h>
#include "policy/limits.h"

/* The module path user files live under; helper packages are imported as "app/<dir>". */
#define NORM_MODULE_PATH "app"

/* The generated main normalize adds to a snippet (runtime/main.go.tmpl); a user file may not
 * have this name. */
#define NORM_GEN_MAIN_FILE "kode_gopher_main.go"

struct src_file {
	char *path;     /* relative, slash-separated, as the model sent it (after validation) */
	char *content;  /* NUL-terminated; len excludes the NUL */
	size_t len;
};

enum norm_mode { NORM_SNIPPET, NORM_PROGRAM, NORM_TEST };

struct norm_result {
	enum norm_mode mode;
	struct src_file *files; /* what to write under /app: the user's files, rewritten where
				 * needed, plus the generated main for a snippet */
	size_t nfiles;
	/* NORM_TEST: the directories holding _test.go files ("." for the root), in the order
	 * sent; each is one package for `go test` */
	char **test_dirs;
	size_t ntest_dirs;
};

/*
 * normalize - validate paths and sizes, classify, rewrite.
 *   in/n:   the files as sent (for a bare `code` string the caller passes one file "main.go")
 *   out:    filled on success; free with normalize_free
 *   err:    on failure, one sentence for the model (e.g. "main.go: no package clause: a Go file
 *           must start with `package <name>`")
 * Returns 0 or -EINVAL (input the model must fix) or -ENOMEM.
 *
 * Rules: paths relative, no "..", no absolute, no empty segment, no backslash, no duplicates,
 * only *.go files are parsed, go.mod/go.sum/go.work are rejected (the lockfile provides them),
 * other files (data, .txt, .json) allowed; files in the root directory form the main package. A root package named other
 * than main that declares `func run(ctx context.Context) (any, error)` (any spelling of the
 * context parameter name; interface{} accepted for any) is a snippet: its package clauses
 * become `package main` and the generated main (runtime/main.go.tmpl) is added as
 * "kode_gopher_main.go". A root `package main` must declare func main(). Anything else is an
 * error naming what is missing.
 */
int normalize(const struct src_file *in, size_t n, struct norm_result *out, char *err, size_t errlen);
void normalize_free(struct norm_result *r);

/*
 * normalize_tests - test mode: the same checks of paths, sizes, package clauses and cgo, but
 * nothing is classified or rewritten (a package is tested as it is; a snippet's run is just a
 * function there) and every file is written as sent. out->test_dirs lists the packages to test.
 * -EINVAL with a sentence when no _test.go file is among them.
 */
int normalize_tests(const struct src_file *in, size_t n, struct norm_result *out, char *err,
		    size_t errlen);
/* normalize_has_tests - 1 when a _test.go file the go command would see is among in */
int normalize_has_tests(const struct src_file *in, size_t n);
void src_files_free(struct src_file *files, size_t n);

#endif
