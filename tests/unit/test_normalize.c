/*
 * test_normalize.c - unit tests for agent/normalize.c (and agent/golex.c, runtime/main.go.tmpl).
 *
 * Most tests feed files to normalize() and check the mode, the rewrite and the error sentence.
 * test_build_and_run builds a normalized snippet with the real Go toolchain (standard library
 * only) and runs it for each result kind; it is skipped when `go` is not on PATH.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/normalize.h"

#define ERRLEN 1024

/* norm_files - run normalize on n (path, content) pairs given as varargs */
static int norm_files(struct norm_result *r, char *err, size_t n, ...)
{
	struct src_file f[16];
	va_list ap;

	assert_true(n <= 16);
	va_start(ap, n);
	for (size_t i = 0; i < n; i++) {
		f[i].path = va_arg(ap, char *);
		f[i].content = va_arg(ap, char *);
		f[i].len = strlen(f[i].content);
	}
	va_end(ap);
	return normalize(f, n, r, err, ERRLEN);
}

/* expect_error - normalize must refuse the files with a sentence containing want */
static void expect_error(int rc, const struct norm_result *r, const char *err, const char *want)
{
	if (rc != -EINVAL || !strstr(err, want))
		fail_msg("rc=%d err=\"%s\", wanted -EINVAL and \"%s\"", rc, err, want);
	assert_null(r->files);
	assert_int_equal(r->nfiles, 0);
}

/* count_lines - newlines in a buffer */
static size_t count_lines(const char *s, size_t len)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++)
		n += s[i] == '\n';
	return n;
}

static const char snippet_foo[] =
	"// Package foo lists things.\n"
	"package foo\n"
	"\n"
	"import \"context\"\n"
	"\n"
	"func run(ctx context.Context) (any, error) {\n"
	"\treturn 42, nil\n"
	"}\n";

/* test_snippet_rewrite - package foo with run: moved to main in place, generated main added */
static void test_snippet_rewrite(void **state)
{
	struct norm_result r;
	char err[ERRLEN];
	(void)state;

	assert_int_equal(norm_files(&r, err, 1, "main.go", snippet_foo), 0);
	assert_int_equal(r.mode, NORM_SNIPPET);
	assert_int_equal(r.nfiles, 2);
	assert_string_equal(r.files[0].path, "main.go");

	const char *want =
		"// Package foo lists things.\n"
		"package main\n"
		"\n"
		"import \"context\"\n"
		"\n"
		"func run(ctx context.Context) (any, error) {\n"
		"\treturn 42, nil\n"
		"}\n";
	assert_string_equal(r.files[0].content, want);
	assert_int_equal(r.files[0].len, strlen(want));
	assert_int_equal(count_lines(r.files[0].content, r.files[0].len),
			 count_lines(snippet_foo, strlen(snippet_foo)));

	assert_string_equal(r.files[1].path, NORM_GEN_MAIN_FILE);
	assert_int_equal(strlen(r.files[1].content), r.files[1].len);
	assert_non_null(strstr(r.files[1].content, "\npackage main\n"));
	assert_non_null(strstr(r.files[1].content, "\nfunc main() {\n"));
	assert_non_null(strstr(r.files[1].content, "run(ctx)"));
	assert_non_null(strstr(r.files[1].content, "KODE_GOPHER_RESULT"));
	normalize_free(&r);
	assert_null(r.files);
	normalize_free(&r); /* twice is harmless */
}

/* test_snippet_spellings - interface{}, unnamed or blank parameter, named results, layout */
static void test_snippet_spellings(void **state)
{
	static const char *const ok[] = {
		"package foo\nimport \"context\"\nfunc run(_ context.Context) (interface{}, error) { return nil, nil }\n",
		"package foo\nimport \"context\"\nfunc run(context.Context) (interface {}, error) { return nil, nil }\n",
		"package foo\nimport \"context\"\nfunc run(c context.Context) (v any, err error) { return }\n",
		"package foo\nimport \"context\"\nfunc run(\n\tctx context.Context, // the deadline\n) (\n\tany,\n\terror,\n) {\n\treturn nil, nil\n}\n",
		"package foo\nimport \"context\"\nfunc run(context context.Context) (any /* v */, error) { return nil, nil }\n",
		"package foo;import \"context\";func run(ctx context.Context)(any,error){return 1,nil}",
	};
	(void)state;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct norm_result r;
		char err[ERRLEN];
		int rc = norm_files(&r, err, 1, "main.go", ok[i]);

		if (rc)
			fail_msg("case %zu: rc=%d err=%s", i, rc, err);
		assert_int_equal(r.mode, NORM_SNIPPET);
		assert_int_equal(strncmp(r.files[0].content, "package main", 12), 0);
		normalize_free(&r);
	}
}

/* test_program - package main with func main is run as sent */
static void test_program(void **state)
{
	static const char prog[] =
		"package main\n\nimport \"fmt\"\n\nfunc run() {}\n\nfunc main() { fmt.Println(\"hi\") }\n";
	struct norm_result r;
	char err[ERRLEN];
	(void)state;

	assert_int_equal(norm_files(&r, err, 2, "main.go", prog, "data/in.json", "{\"a\":1}"), 0);
	assert_int_equal(r.mode, NORM_PROGRAM);
	assert_int_equal(r.nfiles, 2);
	assert_string_equal(r.files[0].content, prog);
	assert_string_equal(r.files[1].path, "data/in.json");
	assert_string_equal(r.files[1].content, "{\"a\":1}");
	normalize_free(&r);
}

/* test_program_without_main - package main must declare main */
static void test_program_without_main(void **state)
{
	struct norm_result r;
	char err[ERRLEN];
	int rc;
	(void)state;

	rc = norm_files(&r, err, 1, "main.go",
			"package main\nimport \"context\"\nfunc run(ctx context.Context) (any, error) { return 1, nil }\n"
			"func (t T) main() {}\nvar f = func() { main := 1; _ = main }\n");
	expect_error(rc, &r, err, "package main needs func main(); or send a snippet: any other package "
		     "name with func run(ctx context.Context) (any, error) (main.go:3 declares run, so "
		     "renaming the package, for example to package snippet, may be all that is missing)");

	rc = norm_files(&r, err, 1, "main.go", "package main\n\nfunc helper() {}\n");
	expect_error(rc, &r, err, "package main needs func main(); or send a snippet: any other package "
		     "name with func run(ctx context.Context) (any, error)");
	assert_null(strstr(err, "declares run"));
}

/* test_snippet_without_run - any other package must declare run, with hints for near misses */
static void test_snippet_without_run(void **state)
{
	struct norm_result r;
	char err[ERRLEN];
	int rc;
	(void)state;

	rc = norm_files(&r, err, 1, "main.go", "package foo\n\nfunc helper() {}\n");
	expect_error(rc, &r, err, "package foo has no func run: a snippet is any package other than main "
		     "that declares func run(ctx context.Context) (any, error)");

	rc = norm_files(&r, err, 1, "main.go", "package foo\n\nfunc main() {}\n");
	expect_error(rc, &r, err, "main.go:3 declares func main(): to run it as a program, name the package main");

	rc = norm_files(&r, err, 1, "main.go",
			"package foo\nimport \"context\"\nfunc Run(ctx context.Context) (any, error) { return 1, nil }\n");
	expect_error(rc, &r, err, "main.go:3 declares func Run; the name must be lower-case run");

	/* a method named run is not the snippet's run */
	rc = norm_files(&r, err, 1, "main.go",
			"package foo\nimport \"context\"\ntype T int\nfunc (T) run(ctx context.Context) (any, error) { return 1, nil }\n");
	expect_error(rc, &r, err, "package foo has no func run");
}

/* test_wrong_run_signature - the error quotes what was found and says what is needed */
static void test_wrong_run_signature(void **state)
{
	struct norm_result r;
	char err[ERRLEN];
	int rc;
	(void)state;

	rc = norm_files(&r, err, 1, "main.go",
			"package foo\n\nimport \"context\"\n\nfunc run(ctx context.Context) error {\n\treturn nil\n}\n");
	expect_error(rc, &r, err, "main.go:5: `func run(ctx context.Context) error` is not the signature a "
		     "snippet needs: its results must be (any, error)");
	assert_non_null(strstr(err, "declare it as func run(ctx context.Context) (any, error)"));

	rc = norm_files(&r, err, 1, "main.go",
			"package foo\nimport stdctx \"context\"\nfunc run(ctx stdctx.Context) (any, error) { return 1, nil }\n");
	expect_error(rc, &r, err, "import \"context\" without an alias");

	rc = norm_files(&r, err, 1, "main.go", "package foo\nfunc run() (any, error) { return 1, nil }\n");
	expect_error(rc, &r, err, "its one parameter must be a context.Context");

	rc = norm_files(&r, err, 1, "main.go",
			"package foo\nimport \"context\"\nfunc run(ctx context.Context, n int) (any, error) { return 1, nil }\n");
	expect_error(rc, &r, err, "its one parameter must be a context.Context");

	rc = norm_files(&r, err, 1, "main.go",
			"package foo\nimport \"context\"\nfunc run[T any](ctx context.Context) (T, error) { var t T; return t, nil }\n");
	expect_error(rc, &r, err, "it must not have type parameters");

	rc = norm_files(&r, err, 1, "main.go",
			"package foo\nimport \"context\"\nfunc run(ctx context.Context) (string, error) { return \"\", nil }\n");
	expect_error(rc, &r, err, "its results must be (any, error), where interface{} may stand for any");

	/* run is fine but the snippet also declares main */
	rc = norm_files(&r, err, 2, "main.go", snippet_foo, "other.go", "package foo\n\n\nfunc main() {}\n");
	expect_error(rc, &r, err, "other.go:4: a snippet must not declare func main()");
}

/* test_no_package_clause - the first token must be `package` */
static void test_no_package_clause(void **state)
{
	struct norm_result r;
	char err[ERRLEN];
	int rc;
	(void)state;

	rc = norm_files(&r, err, 1, "main.go", "// hello\nimport \"fmt\"\n\nfunc main() { fmt.Println() }\n");
	expect_error(rc, &r, err, "main.go: no package clause: a Go file must start with `package <name>`");
	assert_non_null(strstr(err, "line 2 starts with `import`"));

	rc = norm_files(&r, err, 1, "main.go", "");
	expect_error(rc, &r, err, "main.go: no package clause");

	rc = norm_files(&r, err, 1, "main.go", "/* package foo */ // package bar\n");
	expect_error(rc, &r, err, "main.go: no package clause");

	rc = norm_files(&r, err, 1, "main.go", "package \"foo\"\n");
	expect_error(rc, &r, err, "main.go:1: no package clause: `package` must be followed by the package name");

	rc = norm_files(&r, err, 1, "main.go", "package _\n");
	expect_error(rc, &r, err, "`package _` is not allowed");
}

/* test_comments_and_strings - "package" and "func run" inside comments and literals fool nothing */
static void test_comments_and_strings(void **state)
{
	static const char src[] =
		"// package fake\n"
		"/* package fake2\n"
		"   func main() {} */\n"
		"package foo // not package bar\n"
		"\n"
		"import \"context\"\n"
		"\n"
		"var s = \"func main() {\"\n"
		"var q = \"\\\"func main() {\\\\\"\n"
		"var raw = `\n"
		"func main() {\n"
		"package x\n"
		"`\n"
		"var c = '\"'\n"
		"var d = '\\''\n"
		"\n"
		"// func main() {}\n"
		"/* func run(ctx context.Context) error { */\n"
		"type T struct{ f func(int) }\n"
		"func (T) main() {}\n"
		"var f = func() { func2 := 0; _ = func2 }\n"
		"var n = 1.5e+3 + 0x1p-2\n"
		"\n"
		"func run(ctx context.Context) (any, error) { return s + q + raw + string(c) + string(d), nil }\n";
	struct norm_result r;
	char err[ERRLEN];
	int rc;
	(void)state;

	rc = norm_files(&r, err, 1, "main.go", src);
	if (rc)
		fail_msg("rc=%d err=%s", rc, err);
	assert_int_equal(r.mode, NORM_SNIPPET);
	/* exactly the clause's name changed */
	assert_int_equal(r.files[0].len, strlen(src) + 1);
	assert_non_null(strstr(r.files[0].content, "\npackage main // not package bar\n"));
	assert_non_null(strstr(r.files[0].content, "// package fake\n/* package fake2\n"));
	assert_non_null(strstr(r.files[0].content, "\npackage x\n"));
	normalize_free(&r);

	/* the only run is in a comment or a string */
	rc = norm_files(&r, err, 1, "main.go",
			"package foo\n// func run(ctx context.Context) (any, error) {}\n"
			"var s = `func run(ctx context.Context) (any, error) {}`\n");
	expect_error(rc, &r, err, "package foo has no func run");

	/* an unterminated comment hides the rest */
	rc = norm_files(&r, err, 1, "main.go", "package foo\n/* func run(ctx context.Context) (any, error) {}\n");
	expect_error(rc, &r, err, "package foo has no func run");

	/* run nested in a function body is not top-level */
	rc = norm_files(&r, err, 1, "main.go",
			"package main\nfunc f() {\n\tfunc main() {}\n}\n");
	expect_error(rc, &r, err, "package main needs func main()");
}

/* test_bom - a byte-order mark is skipped and kept */
static void test_bom(void **state)
{
	struct norm_result r;
	char err[ERRLEN];
	(void)state;

	assert_int_equal(norm_files(&r, err, 1, "main.go",
				    "\xEF\xBB\xBFpackage foo\nimport \"context\"\n"
				    "func run(ctx context.Context) (any, error) { return 1, nil }\n"), 0);
	assert_int_equal(r.mode, NORM_SNIPPET);
	assert_int_equal(strncmp(r.files[0].content, "\xEF\xBB\xBFpackage main\n", 16), 0);
	normalize_free(&r);
}

/* test_mixed_packages - the root files must agree on the package, naming both files if not */
static void test_mixed_packages(void **state)
{
	struct norm_result r;
	char err[ERRLEN];
	int rc;
	(void)state;

	rc = norm_files(&r, err, 2, "main.go", snippet_foo, "util.go", "package bar\n");
	expect_error(rc, &r, err, "main.go is package foo but util.go is package bar: all .go files in "
		     "the root directory must have the same package clause");

	/* two files of one snippet: both move to main, and run may live in either */
	rc = norm_files(&r, err, 2, "a.go", "package foo\n\nfunc helper() int { return 1 }\n",
			"b.go", snippet_foo);
	assert_int_equal(rc, 0);
	assert_int_equal(r.nfiles, 3);
	assert_string_equal(r.files[0].content, "package main\n\nfunc helper() int { return 1 }\n");
	assert_int_equal(strncmp(r.files[1].content, "// Package foo lists things.\npackage main\n", 42), 0);
	normalize_free(&r);

	/* tests, ignored names and testdata are not part of the build, so they are not checked */
	rc = norm_files(&r, err, 4, "main.go", snippet_foo, "main_test.go", "package foo_test\n",
			"_scratch.go", "not go at all", "testdata/x.go", "nor this");
	assert_int_equal(rc, 0);
	assert_int_equal(r.mode, NORM_SNIPPET);
	assert_string_equal(r.files[1].content, "package foo_test\n");
	assert_string_equal(r.files[2].content, "not go at all");
	normalize_free(&r);
}

/* test_helper_package - Go files in subdirectories are left alone but need a package clause */
static void test_helper_package(void **state)
{
	static const char util[] = "package util\n\nfunc Shout(s string) string { return s + \"!\" }\n";
	struct norm_result r;
	char err[ERRLEN];
	int rc;
	(void)state;

	rc = norm_files(&r, err, 3, "main.go", snippet_foo, "util/util.go", util, "pkg/deep/d.go", "package main\n");
	assert_int_equal(rc, 0);
	assert_int_equal(r.mode, NORM_SNIPPET);
	assert_int_equal(r.nfiles, 4);
	assert_string_equal(r.files[1].path, "util/util.go");
	assert_string_equal(r.files[1].content, util);
	assert_string_equal(r.files[2].content, "package main\n");
	assert_string_equal(r.files[3].path, "kode_gopher_main.go");
	normalize_free(&r);

	rc = norm_files(&r, err, 2, "main.go", snippet_foo, "util/util.go", "func Shout() {}\n");
	expect_error(rc, &r, err, "util/util.go: no package clause");

	rc = norm_files(&r, err, 1, "util/util.go", util);
	expect_error(rc, &r, err, "no .go file in the root directory");
}

/* test_cgo - import "C" is refused with a sentence naming cgo, in any spelling of the import
 * and in a helper package too; a "C" that is not an import, or a file with a build
 * constraint (perhaps the cgo half of a pair), is left to the go command */
static void test_cgo(void **state)
{
	static const struct {
		const char *path, *src;
		unsigned line;
	} refused[] = {
		{ "main.go", "package main\n\nimport \"C\"\n\nfunc main() {}\n", 3 },
		{ "main.go", "package main\n\n// #include <stdio.h>\nimport \"C\"\n\nfunc main() {}\n", 4 },
		{ "main.go", "package main\n\nimport (\n\t\"fmt\"\n\t\"C\"\n)\n\nfunc main() { fmt.Println() }\n", 5 },
		{ "main.go", "package main\n\nimport \"fmt\"\nimport `C`\n\nfunc main() { fmt.Println() }\n", 4 },
		{ "main.go", "package main\nimport (\"os\"; \"C\")\nfunc main() { os.Exit(0) }\n", 2 },
	};
	struct norm_result r;
	char err[ERRLEN], want[64];
	int rc;
	(void)state;

	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		rc = norm_files(&r, err, 1, refused[i].path, refused[i].src);
		snprintf(want, sizeof(want), "%s:%u: import \"C\" needs cgo", refused[i].path, refused[i].line);
		expect_error(rc, &r, err, want);
		assert_non_null(strstr(err, "cgo is off in the sandbox"));
	}
	rc = norm_files(&r, err, 2, "main.go", snippet_foo, "c/c.go", "package c\n\nimport \"C\"\n");
	expect_error(rc, &r, err, "c/c.go:3: import \"C\" needs cgo, and cgo is off in the sandbox");

	/* "C" elsewhere is a string, and a constrained file is the go command's to judge */
	rc = norm_files(&r, err, 1, "main.go", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"C\") }\n");
	assert_int_equal(rc, 0);
	normalize_free(&r);
	rc = norm_files(&r, err, 2, "main.go", "package main\n\nfunc main() {}\n", "c_cgo.go",
			"//go:build cgo\n\npackage main\n\nimport \"C\"\n");
	assert_int_equal(rc, 0);
	normalize_free(&r);
}

/* test_bad_paths - every path rule, each with its own sentence */
static void test_bad_paths(void **state)
{
	static const struct {
		const char *path, *want;
	} bad[] = {
		{ "..", "contains \"..\"" },
		{ "../x.go", "contains \"..\"" },
		{ "a/../main.go", "contains \"..\"" },
		{ "/abs.go", "is absolute" },
		{ "/etc/passwd", "is absolute" },
		{ "a//b.go", "empty segment" },
		{ "a/", "empty segment" },
		{ "./x.go", "\".\" segment" },
		{ "a\\b.go", "backslash" },
		{ "go.mod", "\"go.mod\" cannot be sent" },
		{ "sub/go.sum", "\"sub/go.sum\" cannot be sent" },
		{ "go.work", "cannot be sent" },
		{ "kode_gopher_main.go", "is reserved" },
		{ "a b.go", "contains a character other than" },
		{ "x\ny.go", "\"x y.go\" contains a character other than" },
		{ "\xff.go", "\"?.go\" contains a character other than" },
		{ "", "empty path" },
	};
	struct norm_result r;
	char err[ERRLEN];
	int rc;
	(void)state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		rc = norm_files(&r, err, 2, "main.go", snippet_foo, bad[i].path, "package foo\n");
		expect_error(rc, &r, err, bad[i].want);
		/* the sentence must survive JSON encoding */
		json_t *j = json_string(err);

		assert_non_null(j);
		json_decref(j);
	}

	char longpath[NORM_MAX_PATH + 2];

	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[sizeof(longpath) - 1] = '\0';
	rc = norm_files(&r, err, 2, "main.go", snippet_foo, longpath, "x");
	expect_error(rc, &r, err, "bytes long; the limit is 256");

	rc = norm_files(&r, err, 2, "main.go", snippet_foo, "main.go", snippet_foo);
	expect_error(rc, &r, err, "main.go was sent twice");

	rc = norm_files(&r, err, 3, "main.go", snippet_foo, "util", "x", "util/u.go", "package util\n");
	expect_error(rc, &r, err, "util is sent as a file but util/u.go needs it to be a directory");
	rc = norm_files(&r, err, 3, "main.go", snippet_foo, "a/b/c.go", "package c\n", "a/b", "x");
	expect_error(rc, &r, err, "a/b is sent as a file but a/b/c.go needs it to be a directory");

	/* similar but fine */
	rc = norm_files(&r, err, 4, "main.go", snippet_foo, "util.go", "package foo\n", "util/u.go",
			"package util\n", ".config/x-y_z.v2.json", "{}");
	assert_int_equal(rc, 0);
	normalize_free(&r);
}

/* test_limits - file count, one file's size, the total size */
static void test_limits(void **state)
{
	struct src_file f[NORM_MAX_FILES + 1];
	char paths[NORM_MAX_FILES + 1][16];
	struct norm_result r;
	char err[ERRLEN];
	int rc;
	(void)state;

	for (size_t i = 0; i < NORM_MAX_FILES + 1; i++) {
		snprintf(paths[i], sizeof(paths[i]), "f%zu.go", i);
		f[i].path = paths[i];
		f[i].content = (char *)snippet_foo;
		f[i].len = strlen(snippet_foo);
	}
	rc = normalize(f, NORM_MAX_FILES + 1, &r, err, sizeof(err));
	expect_error(rc, &r, err, "65 files were sent; the limit is 64");
	rc = normalize(f, NORM_MAX_FILES, &r, err, sizeof(err));
	assert_int_equal(rc, 0);
	assert_int_equal(r.nfiles, NORM_MAX_FILES + 1);
	normalize_free(&r);

	rc = normalize(f, 0, &r, err, sizeof(err));
	expect_error(rc, &r, err, "no files were sent");

	char *big = malloc(NORM_MAX_FILE_BYTES + 1);

	assert_non_null(big);
	memset(big, 'x', NORM_MAX_FILE_BYTES + 1);
	struct src_file g[6] = {
		{ .path = "main.go", .content = (char *)snippet_foo, .len = strlen(snippet_foo) },
		{ .path = "big.txt", .content = big, .len = NORM_MAX_FILE_BYTES + 1 },
	};
	rc = normalize(g, 2, &r, err, sizeof(err));
	expect_error(rc, &r, err, "big.txt is 1048577 bytes; the limit is 1048576 bytes per file");

	g[1].len = NORM_MAX_FILE_BYTES; /* exactly the limit is fine */
	assert_int_equal(normalize(g, 2, &r, err, sizeof(err)), 0);
	normalize_free(&r);

	static char names[4][16];
	for (size_t i = 2; i < 6; i++) {
		snprintf(names[i - 2], sizeof(names[0]), "big%zu.txt", i);
		g[i].path = names[i - 2];
		g[i].content = big;
		g[i].len = NORM_MAX_FILE_BYTES;
	}
	rc = normalize(g, 6, &r, err, sizeof(err));
	expect_error(rc, &r, err, "the files add up to more than 4194304 bytes");
	free(big);
}

/* test_err_buffer - tiny buffers, odd bytes and NULL content are handled */
static void test_err_buffer(void **state)
{
	struct norm_result r;
	char small[12];
	int rc;
	(void)state;

	struct src_file f = { .path = "main.go", .content = (char *)"package foo\n", .len = 12 };
	rc = normalize(&f, 1, &r, small, sizeof(small));
	assert_int_equal(rc, -EINVAL);
	assert_true(strlen(small) < sizeof(small));
	rc = normalize(&f, 1, &r, NULL, 0);
	assert_int_equal(rc, -EINVAL);

	/* a cut must not leave half a UTF-8 character: the package name is non-ASCII */
	char err[ERRLEN];
	rc = norm_files(&r, err, 2, "main.go", "package ñññññ\n", "b.go", "package b\n");
	expect_error(rc, &r, err, "main.go is package ñññññ but b.go is package b");
	for (size_t len = 1; len < 40; len++) {
		char buf[40];

		normalize(&(struct src_file){ .path = "main.go", .content = (char *)"package ñññññ\n",
					      .len = strlen("package ñññññ\n") }, 1, &r, buf, len);
		json_t *j = json_string(buf);

		assert_non_null(j);
		json_decref(j);
	}

	/* invalid UTF-8 in a package name is replaced in the sentence */
	rc = norm_files(&r, err, 1, "main.go", "package \xff\xfe\n");
	expect_error(rc, &r, err, "package ?? has no func run");

	struct src_file empty = { .path = "main.go", .content = NULL, .len = 0 };
	rc = normalize(&empty, 1, &r, err, sizeof(err));
	expect_error(rc, &r, err, "main.go: no package clause");
	struct src_file broken = { .path = "main.go", .content = NULL, .len = 3 };
	rc = normalize(&broken, 1, &r, err, sizeof(err));
	expect_error(rc, &r, err, "main.go has no content");

	src_files_free(NULL, 3);
	normalize_free(NULL);
}

/* ---- the real toolchain ---- */

static const char build_snippet[] =
	"package demo\n"
	"\n"
	"import (\n"
	"\t\"context\"\n"
	"\t\"errors\"\n"
	"\t\"os\"\n"
	"\t\"syscall\"\n"
	"\t\"time\"\n"
	"\n"
	"\t\"app/util\"\n"
	")\n"
	"\n"
	"type point struct {\n"
	"\tX, Y int\n"
	"\tTag  string `json:\"tag\"`\n"
	"}\n"
	"\n"
	"func run(ctx context.Context) (any, error) {\n"
	"\tswitch os.Getenv(\"KG_CASE\") {\n"
	"\tcase \"ok\":\n"
	"\t\treturn []point{{1, 2, util.Shout(\"a<b>&c\")}}, nil\n"
	"\tcase \"nil\":\n"
	"\t\treturn nil, nil\n"
	"\tcase \"error\":\n"
	"\t\treturn nil, errors.New(\"it failed\")\n"
	"\tcase \"panic\":\n"
	"\t\tpanic(\"boom\") // line 27\n"
	"\tcase \"gopanic\":\n"
	"\t\tgo func() { panic(\"boom in a goroutine\") }()\n"
	"\t\ttime.Sleep(10 * time.Second)\n"
	"\tcase \"chan\":\n"
	"\t\treturn make(chan int), nil\n"
	"\tcase \"timeout\":\n"
	"\t\t<-ctx.Done()\n"
	"\t\treturn nil, ctx.Err()\n"
	"\tcase \"sigterm\":\n"
	"\t\tsyscall.Kill(os.Getpid(), syscall.SIGTERM)\n"
	"\t\t<-ctx.Done()\n"
	"\t\treturn nil, ctx.Err()\n"
	"\t}\n"
	"\treturn nil, errors.New(\"unknown case\")\n"
	"}\n";

static const char build_util[] =
	"package util\n\nfunc Shout(s string) string { return s + \"!\" }\n";

/* write_file - create dir/path (and its directory) with content, never following a link */
static void write_file(const char *dir, const char *path, const char *content, size_t len)
{
	char full[4096], *slash;
	int fd;

	snprintf(full, sizeof(full), "%s/%s", dir, path);
	slash = strrchr(full, '/');
	if (slash > full + strlen(dir)) {
		*slash = '\0';
		mkdir(full, 0700);
		*slash = '/';
	}
	fd = open(full, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, content, len), (ssize_t)len);
	close(fd);
}

/* run_case - run the built snippet with KG_CASE=name; the exit status, and the result or NULL */
static int run_case(const char *dir, const char *name, const char *timeout_ms, json_t **result)
{
	char cmd[8192], path[4096];
	int st;

	snprintf(path, sizeof(path), "%s/result.json", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/crash.txt", dir);
	unlink(path);
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && KG_CASE=%s KODE_GOPHER_RESULT='%s/result.json' KODE_GOPHER_CRASH='%s/crash.txt' "
		 "KODE_GOPHER_TIMEOUT_MS=%s ./snippet >stdout.txt 2>stderr.txt",
		 dir, name, dir, dir, timeout_ms);
	st = system(cmd);
	assert_true(st != -1 && WIFEXITED(st));
	snprintf(path, sizeof(path), "%s/result.json", dir);
	*result = json_load_file(path, 0, NULL);
	return WEXITSTATUS(st);
}

/* read_all - a small file's content, NUL-terminated; "" if missing */
static char *read_all(const char *dir, const char *name)
{
	char path[4096];
	static char buf[65536];
	FILE *f;
	size_t n = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "r");
	if (f) {
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
	}
	buf[n] = '\0';
	return buf;
}

/* result_str - a string member of the result object, or "" */
static const char *result_str(json_t *res, const char *key)
{
	const char *s = json_string_value(json_object_get(res, key));

	return s ? s : "";
}

/* test_build_and_run - the normalized snippet builds, and each outcome becomes its result kind */
static void test_build_and_run(void **state)
{
	char dir[] = "/tmp/kg-normalize-XXXXXX", cmd[8192], err[ERRLEN];
	struct norm_result r;
	json_t *res;
	int code;
	(void)state;

	if (system("go version >/dev/null 2>&1") != 0)
		skip();
	/* go needs somewhere for its build cache; a test environment may have no HOME */
	if (!getenv("GOCACHE") && !getenv("HOME") && !getenv("XDG_CACHE_HOME"))
		setenv("GOCACHE", "/tmp/kg-normalize-gocache", 0);
	assert_non_null(mkdtemp(dir));
	assert_int_equal(norm_files(&r, err, 2, "main.go", build_snippet, "util/util.go", build_util), 0);
	assert_int_equal(r.mode, NORM_SNIPPET);
	for (size_t i = 0; i < r.nfiles; i++)
		write_file(dir, r.files[i].path, r.files[i].content, r.files[i].len);
	write_file(dir, "go.mod", "module app\n\ngo 1.26\n", 20);
	normalize_free(&r);

	/* the template is gofmt'd Go */
	snprintf(cmd, sizeof(cmd), "cd '%s' && test -z \"$(gofmt -l kode_gopher_main.go)\"", dir);
	assert_int_equal(system(cmd), 0);

	snprintf(cmd, sizeof(cmd), "cd '%s' && GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 "
		 "go build -o snippet . >build.txt 2>&1", dir);
	if (system(cmd) != 0)
		fail_msg("go build failed: %s", read_all(dir, "build.txt"));

	code = run_case(dir, "ok", "10000", &res);
	assert_int_equal(code, 0);
	assert_non_null(res);
	assert_string_equal(result_str(res, "kind"), "ok");
	char *value = json_dumps(json_object_get(res, "value"), JSON_COMPACT);
	assert_string_equal(value, "[{\"X\":1,\"Y\":2,\"tag\":\"a<b>&c!\"}]");
	free(value);
	assert_int_equal(json_object_size(res), 2);
	json_decref(res);
	/* the raw file: the value is embedded as it was encoded, without HTML escapes */
	assert_non_null(strstr(read_all(dir, "result.json"), "\"tag\":\"a<b>&c!\""));

	code = run_case(dir, "nil", "10000", &res);
	assert_int_equal(code, 0);
	assert_string_equal(result_str(res, "kind"), "ok");
	assert_true(json_is_null(json_object_get(res, "value")));
	json_decref(res);

	code = run_case(dir, "error", "10000", &res);
	assert_int_equal(code, 1);
	assert_string_equal(result_str(res, "kind"), "error");
	assert_string_equal(result_str(res, "message"), "it failed");
	assert_string_equal(result_str(res, "type"), "*errors.errorString");
	json_decref(res);

	code = run_case(dir, "panic", "10000", &res);
	assert_int_equal(code, 2);
	assert_string_equal(result_str(res, "kind"), "panic");
	assert_string_equal(result_str(res, "message"), "boom");
	/* line numbers survived the rewrite: the stack points at the model's own line */
	assert_non_null(strstr(result_str(res, "stack"), "/main.go:27"));
	json_decref(res);

	code = run_case(dir, "gopanic", "10000", &res);
	assert_int_equal(code, 2);
	assert_null(res);
	const char *crash = read_all(dir, "crash.txt");
	if (!strstr(crash, "panic: boom in a goroutine") || !strstr(crash, "goroutine "))
		fail_msg("crash file: %s", crash);
	assert_non_null(strstr(crash, "/main.go:29"));

	code = run_case(dir, "chan", "10000", &res);
	assert_int_equal(code, 1);
	assert_string_equal(result_str(res, "kind"), "unencodable");
	assert_string_equal(result_str(res, "type"), "chan int");
	assert_string_equal(result_str(res, "message"), "run returned a value of type chan int that cannot "
			    "be encoded as JSON: json: unsupported type: chan int");
	json_decref(res);

	code = run_case(dir, "timeout", "100", &res);
	assert_int_equal(code, 1);
	assert_string_equal(result_str(res, "kind"), "error");
	assert_string_equal(result_str(res, "message"), "context deadline exceeded");
	json_decref(res);

	code = run_case(dir, "sigterm", "10000", &res);
	assert_int_equal(code, 1);
	assert_string_equal(result_str(res, "message"), "context canceled");
	json_decref(res);

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_snippet_rewrite),
		cmocka_unit_test(test_snippet_spellings),
		cmocka_unit_test(test_program),
		cmocka_unit_test(test_program_without_main),
		cmocka_unit_test(test_snippet_without_run),
		cmocka_unit_test(test_wrong_run_signature),
		cmocka_unit_test(test_no_package_clause),
		cmocka_unit_test(test_comments_and_strings),
		cmocka_unit_test(test_bom),
		cmocka_unit_test(test_mixed_packages),
		cmocka_unit_test(test_helper_package),
		cmocka_unit_test(test_cgo),
		cmocka_unit_test(test_bad_paths),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_err_buffer),
		cmocka_unit_test(test_build_and_run),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
