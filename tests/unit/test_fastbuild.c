/*
 * test_fastbuild.c - the pure parts of the direct build path (agent/fastbuild.c): reading a
 * file's imports, go.mod's language version, which main-package files the direct path compiles
 * as go build would, and the shape of its build IDs. The path itself, against go build, is in
 * test_pipeline.c (test_direct_build).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent/fastbuild.h"

/* imports - the imports of src joined by spaces, or "EINVAL" */
static const char *imports(const char *src)
{
	static char out[1024];
	char **v = NULL;
	size_t n = 0;
	int rc = fastbuild_imports(src, strlen(src), &v, &n);
	out[0] = '\0';
	if (rc < 0)
		snprintf(out, sizeof(out), "%s", rc == -EINVAL ? "EINVAL" : "error");
	for (size_t i = 0; i < n; i++) {
		if (rc == 0)
			snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s", i ? " " : "", v[i]);
		free(v[i]);
	}
	free(v);
	return out;
}

static void test_imports(void **state)
{
	(void)state;
	assert_string_equal(imports("package main\n\nfunc main() {}\n"), "");
	assert_string_equal(imports("package main\nimport \"fmt\"\n"), "fmt");
	assert_string_equal(imports("\xef\xbb\xbf// c\npackage x /* c */\n\nimport (\n\t\"context\"\n"
				    "\tf \"fmt\" // the printer\n\t_ \"embed\"\n\t. \"strings\"\n"
				    "\t`net/http`\n)\nimport \"os\"; import (\"io\"; \"bytes\")\n"
				    "var x = 1\nimport \"after\"\n"),
			    "context fmt embed strings net/http os io bytes");
	assert_string_equal(imports("package x\nimport (\n\t\"cloud.google.com/go/storage\"\n"
				    "\t\"github.com/google/uuid\"\n\t\"gopkg.in/yaml.v3\"\n)\n"),
			    "cloud.google.com/go/storage github.com/google/uuid gopkg.in/yaml.v3");
	/* whatever the go command would read differently goes to go build */
	assert_string_equal(imports("package x\nimport \"\\x66mt\"\n"), "EINVAL");
	assert_string_equal(imports("package x\nimport \"a b\"\n"), "EINVAL");
	assert_string_equal(imports("package x\nimport \"\"\n"), "EINVAL");
	assert_string_equal(imports("package x\nimport \"fmt\n"), "EINVAL");
	assert_string_equal(imports("package x\nimport (\n\t\"fmt\"\n"), "EINVAL");
	assert_string_equal(imports("package x\nimport fmt\n"), "EINVAL");
	assert_string_equal(imports("package x\nimport 'f'\n"), "EINVAL");
	assert_string_equal(imports("x\n"), "EINVAL");
	assert_string_equal(imports(""), "EINVAL");
	assert_string_equal(imports("package x\nimport \"a\xc3\xa9\"\n"), "EINVAL");
}

static void test_go_lang(void **state)
{
	(void)state;
	char l[16];
	const char *m = "module app\n\ngo 1.26.0\n\nrequire x v1\n";
	assert_int_equal(fastbuild_go_lang(m, strlen(m), l, sizeof(l)), 0);
	assert_string_equal(l, "go1.26");
	m = "module app\n  go\t1.21\n";
	assert_int_equal(fastbuild_go_lang(m, strlen(m), l, sizeof(l)), 0);
	assert_string_equal(l, "go1.21");
	m = "module app\n\ntoolchain go1.26.8\n";
	assert_int_equal(fastbuild_go_lang(m, strlen(m), l, sizeof(l)), -ENOENT);
	m = "module app\ngo 1\n";
	assert_int_equal(fastbuild_go_lang(m, strlen(m), l, sizeof(l)), -EINVAL);
	m = "module app\ngo 1.x\n";
	assert_int_equal(fastbuild_go_lang(m, strlen(m), l, sizeof(l)), -EINVAL);
	m = "module app\ngo 1.26";
	assert_int_equal(fastbuild_go_lang(m, 16, l, sizeof(l)), -EINVAL); /* cut before the minor */
	m = "module app\ngo 1.222222222222222222\n";
	assert_int_equal(fastbuild_go_lang(m, strlen(m), l, sizeof(l)), -EINVAL);
}

static void test_file_ok(void **state)
{
	(void)state;
	const char *plain = "package main\n\nfunc main() {}\n";
	assert_null(fastbuild_file_ok("main.go", plain, strlen(plain)));
	assert_null(fastbuild_file_ok("kode_gopher_main.go", plain, strlen(plain)));
	assert_null(fastbuild_file_ok("linux.go", plain, strlen(plain))); /* no underscore: no tag */
	assert_null(fastbuild_file_ok("my_helpers.go", plain, strlen(plain)));
	static const char *const bad_names[] = { "x_linux.go", "x_amd64.go", "x_windows_arm64.go",
						 "x_test.go", "_x.go", ".x.go", "x_linux_amd64.go",
						 "main.txt", "x_wasip1.go" };
	for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++)
		assert_non_null(fastbuild_file_ok(bad_names[i], plain, strlen(plain)));
	static const char *const bad[] = {
		"//go:build linux\n\npackage main\n",
		"// +build linux\n\npackage main\n",
		"//go:debug panicnil=1\npackage main\n",
		"package main\n\nimport _ \"embed\"\n\n//go:embed x\nvar s string\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_non_null(fastbuild_file_ok("main.go", bad[i], strlen(bad[i])));
}

static void test_build_id(void **state)
{
	(void)state;
	char a[84], ac[42], b[84], bc[42];
	fastbuild_build_id("00", a, ac);
	fastbuild_build_id("01", b, bc);
	/* four parts of 20 characters, like the go command's */
	assert_int_equal(strlen(a), 83);
	for (int i = 0; i < 83; i++)
		assert_true(i % 21 == 20 ? a[i] == '/' : a[i] != '/');
	assert_int_equal(strlen(ac), 41);
	assert_string_not_equal(a, b);
	char again[84], againc[42];
	fastbuild_build_id("00", again, againc);
	assert_string_equal(a, again);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_imports),
		cmocka_unit_test(test_go_lang),
		cmocka_unit_test(test_file_ok),
		cmocka_unit_test(test_build_id),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
