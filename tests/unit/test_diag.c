/*
 * test_diag.c - unit tests for agent/diag.c against real `go build` / `go vet` output captured
 * from go1.26: type errors across packages, syntax errors, "too many errors", go.mod errors,
 * unresolvable imports, errors in the generated main, path cleaning and UTF-8 repair.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent/diag.h"

static const struct diag_opts opts = {
	.app_dir = "/app",
	.gen_file = "kode_gopher_main.go",
	.run_file = "main.go",
	.run_line = 5,
};

/* parse - parse a literal, asserting success */
static void parse(const char *out, struct diag_list *dl)
{
	assert_int_equal(diag_parse(out, strlen(out), &opts, dl), 0);
}

static void assert_diag(const struct diag *d, const char *file, int line, int col, const char *msg)
{
	assert_string_equal(d->file, file);
	assert_int_equal(d->line, line);
	assert_int_equal(d->column, col);
	assert_string_equal(d->message, msg);
}

static void test_two_packages(void **state)
{
	(void)state;
	const char *out = "# app/helper\n"
			  "helper/h.go:3:23: undefined: y\n"
			  "# app\n"
			  "./main.go:4:2: \"fmt\" imported and not used\n"
			  "./main.go:5:2: \"app/helper\" imported and not used\n";
	struct diag_list dl;
	parse(out, &dl);
	assert_int_equal(dl.n, 3);
	assert_diag(&dl.items[0], "helper/h.go", 3, 23, "undefined: y");
	assert_diag(&dl.items[1], "main.go", 4, 2, "\"fmt\" imported and not used");
	assert_diag(&dl.items[2], "main.go", 5, 2, "\"app/helper\" imported and not used");
	char first[256];
	diag_first_error(out, strlen(out), &dl, first, sizeof(first));
	assert_string_equal(first, "helper/h.go:3:23: undefined: y");
	diag_list_free(&dl);
}

static void test_too_many_errors_and_continuation(void **state)
{
	(void)state;
	const char *out = "# app\n"
			  "./main.go:6:14: undefined: a\n"
			  "./main.go:6:17: undefined: b\n"
			  "./main.go:9:6: main redeclared in this block\n"
			  "\t./main.go:5:6: other declaration of main\n"
			  "./main.go:6:38: too many errors\n";
	struct diag_list dl;
	parse(out, &dl);
	assert_int_equal(dl.n, 3);
	assert_diag(&dl.items[0], "main.go", 6, 14, "undefined: a");
	assert_diag(&dl.items[2], "main.go", 9, 6,
		    "main redeclared in this block\n\tmain.go:5:6: other declaration of main");
	diag_list_free(&dl);
}

static void test_syntax_error(void **state)
{
	(void)state;
	const char *out = "# app\n./main.go:6:17: syntax error: unexpected newline in argument list; "
			  "possibly missing comma or )\n";
	struct diag_list dl;
	parse(out, &dl);
	assert_int_equal(dl.n, 1);
	assert_diag(&dl.items[0], "main.go", 6, 17,
		    "syntax error: unexpected newline in argument list; possibly missing comma or )");
	diag_list_free(&dl);
}

static void test_gomod_error(void **state)
{
	(void)state;
	const char *out = "go: errors parsing go.mod:\n/app/go.mod:4: unknown directive: foo\n";
	struct diag_list dl;
	parse(out, &dl);
	assert_int_equal(dl.n, 1);
	assert_diag(&dl.items[0], "go.mod", 4, 0, "unknown directive: foo");
	char first[256];
	diag_first_error(out, strlen(out), &dl, first, sizeof(first));
	assert_string_equal(first, "go.mod:4: unknown directive: foo");
	diag_list_free(&dl);
}

static void test_unresolved_imports(void **state)
{
	(void)state;
	const char *out =
		"go: finding module for package github.com/google/uuid\n"
		"main.go:6:2: package app/nothere is not in std (/usr/local/go/src/app/nothere)\n"
		"main.go:7:2: cannot find module providing package github.com/google/uuid: module "
		"lookup disabled by GOPROXY=off\n"
		"main.go:3:16: missing go.sum entry for module providing package "
		"github.com/google/uuid (imported by app); to add:\n"
		"\tgo get app\n";
	struct diag_list dl;
	parse(out, &dl);
	assert_int_equal(dl.n, 3);
	assert_diag(&dl.items[0], "main.go", 6, 2,
		    "package app/nothere is not in std (/usr/local/go/src/app/nothere)");
	assert_string_equal(dl.items[2].message,
			    "missing go.sum entry for module providing package github.com/google/uuid "
			    "(imported by app); to add:\n\tgo get app");
	diag_list_free(&dl);
}

static void test_vet_prefix(void **state)
{
	(void)state;
	const char *out = "# app\n# [app]\nvet: ./main.go:6:17: cannot use 5 (untyped int constant) "
			  "as string value in variable declaration\n";
	struct diag_list dl;
	parse(out, &dl);
	assert_int_equal(dl.n, 1);
	assert_diag(&dl.items[0], "main.go", 6, 17,
		    "cannot use 5 (untyped int constant) as string value in variable declaration");
	diag_list_free(&dl);
}

static void test_generated_main(void **state)
{
	(void)state;
	const char *out =
		"# app\n"
		"./kode_gopher_main.go:6:45: cannot use run (value of type func(ctx "
		"context.Context) (int, error)) as func(context.Context) (any, error) value in "
		"variable declaration\n";
	struct diag_list dl;
	parse(out, &dl);
	assert_int_equal(dl.n, 1);
	assert_string_equal(dl.items[0].file, "main.go");
	assert_int_equal(dl.items[0].line, 5);
	assert_int_equal(dl.items[0].column, 1);
	assert_non_null(strstr(dl.items[0].message, "the generated main cannot call your run"));
	assert_non_null(strstr(dl.items[0].message, "(int, error)"));
	assert_non_null(strstr(dl.items[0].message, "func run(ctx context.Context) (any, error)"));
	diag_list_free(&dl);

	/* without a known run location the generated file is named as it is */
	struct diag_opts o2 = { .app_dir = "/app", .gen_file = "kode_gopher_main.go" };
	assert_int_equal(diag_parse(out, strlen(out), &o2, &dl), 0);
	assert_int_equal(dl.n, 1);
	assert_string_equal(dl.items[0].file, "kode_gopher_main.go");
	assert_int_equal(dl.items[0].line, 6);
	assert_int_equal(dl.items[0].column, 45);
	diag_list_free(&dl);
}

static void test_no_positions(void **state)
{
	(void)state;
	const char *out = "go: go.mod requires go >= 1.99 (running go 1.26.8; GOTOOLCHAIN=local)\n";
	struct diag_list dl;
	parse(out, &dl);
	assert_int_equal(dl.n, 0);
	char first[256];
	diag_first_error(out, strlen(out), &dl, first, sizeof(first));
	assert_string_equal(first,
			    "go: go.mod requires go >= 1.99 (running go 1.26.8; GOTOOLCHAIN=local)");
	diag_list_free(&dl);
	diag_first_error("", 0, NULL, first, sizeof(first));
	assert_string_equal(first, "");
}

static void test_limits(void **state)
{
	(void)state;
	size_t n = 300;
	char *out = malloc(n * 40);
	size_t o = 0;
	for (size_t i = 0; i < n; i++)
		o += (size_t)sprintf(out + o, "./main.go:%zu:1: undefined: v%zu\n", i + 1, i);
	struct diag_list dl;
	assert_int_equal(diag_parse(out, o, &opts, &dl), 0);
	assert_int_equal(dl.n, DIAG_MAX_ITEMS);
	diag_list_free(&dl);
	free(out);

	/* absurd numbers are not positions */
	const char *big = "main.go:99999999999:1: x\n";
	assert_int_equal(diag_parse(big, strlen(big), &opts, &dl), 0);
	assert_int_equal(dl.n, 0);
	diag_list_free(&dl);
}

static void test_clean_output(void **state)
{
	(void)state;
	const char *out = "# app\n./main.go:1:1: x\n\t./main.go:2:2: other declaration of x\n"
			  "/app/go.mod:4: unknown directive: foo\n"
			  "go: /app/helper/h.go: open (/app/x): denied\n"
			  "/application/keep.go:1:1: y\n";
	size_t len;
	char *c = diag_clean_output(out, strlen(out), "/app", &len);
	assert_non_null(c);
	assert_string_equal(c, "# app\nmain.go:1:1: x\n\tmain.go:2:2: other declaration of x\n"
			       "go.mod:4: unknown directive: foo\n"
			       "go: helper/h.go: open (x): denied\n"
			       "/application/keep.go:1:1: y\n");
	assert_int_equal(len, strlen(c));
	free(c);
}

static void test_json(void **state)
{
	(void)state;
	const char *out = "./main.go:2:3: bad \xff byte\n";
	struct diag_list dl;
	parse(out, &dl);
	json_t *j = diag_to_json(&dl);
	assert_non_null(j);
	char *s = json_dumps(j, JSON_COMPACT);
	assert_string_equal(
		s, "[{\"file\":\"main.go\",\"line\":2,\"column\":3,\"message\":\"bad \xef\xbf\xbd byte\"}]");
	free(s);
	json_decref(j);
	diag_list_free(&dl);
}

static void test_json_string_utf8(void **state)
{
	(void)state;
	struct {
		const char *in;
		size_t len;
		const char *want;
	} cases[] = {
		{ "plain", 5, "plain" },
		{ "\xc3\xa9", 2, "\xc3\xa9" },
		{ "\xc3", 1, "\xef\xbf\xbd" },                 /* cut sequence */
		{ "\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd" }, /* overlong */
		{ "\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" }, /* surrogate */
		{ "\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80" },
		{ "\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *j = diag_json_string(cases[i].in, cases[i].len);
		assert_non_null(j);
		assert_string_equal(json_string_value(j), cases[i].want);
		json_decref(j);
	}
	/* embedded NUL survives */
	json_t *j = diag_json_string("a\0b", 3);
	assert_non_null(j);
	assert_int_equal(json_string_length(j), 3);
	json_decref(j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_packages),
		cmocka_unit_test(test_too_many_errors_and_continuation),
		cmocka_unit_test(test_syntax_error),
		cmocka_unit_test(test_gomod_error),
		cmocka_unit_test(test_unresolved_imports),
		cmocka_unit_test(test_vet_prefix),
		cmocka_unit_test(test_generated_main),
		cmocka_unit_test(test_no_positions),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_clean_output),
		cmocka_unit_test(test_json),
		cmocka_unit_test(test_json_string_utf8),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
