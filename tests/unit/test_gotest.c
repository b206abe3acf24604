/*
 * test_gotest.c - unit tests for agent/gotest.c (test2json events into test mode's result)
 * against event streams as go1.26's test2json prints them, and for the content sniffing of
 * agent/artifacts.c: a split benchmark line, -count runs, a panic that leaves a test
 * unfinished, coverage, events of another package or out of shape, and media types that the
 * content decides rather than the name.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent/artifacts.h"
#include "agent/gotest.h"

#define EV(action, test, out) \
	"{\"Action\":\"" action "\",\"Package\":\"app\"" test out "}\n"
#define T(name) ",\"Test\":\"" name "\""
#define O(text) ",\"Output\":\"" text "\""

struct folded {
	json_t *tests, *pkgs, *totals;
	char failed[256];
	char *text;
	size_t tl;
	bool trunc;
};

static void fold(const char *stream, struct folded *f)
{
	struct gotest_report *r = gotest_report_new(1 << 20);
	assert_non_null(r);
	gotest_report_feed(r, "app", stream, strlen(stream));
	memset(f, 0, sizeof(*f));
	assert_int_equal(gotest_report_finish(r, &f->tests, &f->pkgs, &f->totals, f->failed,
					      sizeof(f->failed), &f->text, &f->tl, &f->trunc), 0);
	gotest_report_free(r);
}

static void folded_free(struct folded *f)
{
	json_decref(f->tests);
	json_decref(f->pkgs);
	json_decref(f->totals);
	free(f->text);
}

static json_t *test_at(struct folded *f, size_t i)
{
	assert_true(i < json_array_size(f->tests));
	return json_array_get(f->tests, i);
}

static const char *str(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static json_int_t total(struct folded *f, const char *k)
{
	return json_integer_value(json_object_get(f->totals, k));
}

static void test_benchmark_split_line(void **state)
{
	(void)state;
	struct folded f;
	fold(EV("start", "", "")
	     EV("run", T("BenchmarkAdd"), "")
	     EV("output", T("BenchmarkAdd"), O("BenchmarkAdd-2   \\t"))
	     EV("output", T("BenchmarkAdd"), O("     200\\t        15.83 ns/op\\t       8 B/op\\t       1 allocs/op\\n"))
	     EV("output", "", O("PASS\\n"))
	     EV("output", "", O("coverage: 62.5% of statements\\n"))
	     "{\"Action\":\"pass\",\"Package\":\"app\",\"Elapsed\":0.25}\n", &f);
	json_t *b = test_at(&f, 0);
	assert_string_equal(str(b, "status"), "pass");
	assert_int_equal(json_integer_value(json_object_get(b, "iterations")), 200);
	assert_true(json_real_value(json_object_get(b, "ns_per_op")) > 15.8);
	assert_int_equal(json_integer_value(json_object_get(b, "bytes_per_op")), 8);
	assert_int_equal(json_integer_value(json_object_get(b, "allocs_per_op")), 1);
	json_t *p = json_array_get(f.pkgs, 0);
	assert_string_equal(str(p, "status"), "pass");
	assert_true(json_real_value(json_object_get(p, "coverage")) == 62.5);
	assert_int_equal(total(&f, "benchmarks"), 1);
	folded_free(&f);
}

static void test_count_runs_are_separate(void **state)
{
	(void)state;
	struct folded f;
	fold(EV("run", T("TestFlaky"), "") EV("fail", T("TestFlaky"), "")
	     EV("run", T("TestFlaky"), "") EV("pass", T("TestFlaky"), "")
	     EV("fail", "", ""), &f);
	assert_int_equal(json_array_size(f.tests), 2);
	assert_string_equal(str(test_at(&f, 0), "status"), "fail");
	assert_string_equal(str(test_at(&f, 1), "status"), "pass");
	assert_int_equal(total(&f, "failed"), 1);
	assert_string_equal(f.failed, "TestFlaky");
	folded_free(&f);
}

static void test_unfinished_and_hostile_lines(void **state)
{
	(void)state;
	struct folded f;
	/* the binary died inside TestHang: no verdict for it or the package */
	fold(EV("run", T("TestOK"), "") EV("pass", T("TestOK"), "")
	     EV("run", T("TestHang"), "")
	     EV("output", T("TestHang"), O("panic: test timed out after 1s\\n"))
	     /* what a test may print to look like events: another package, wrong types,
	      * duplicate keys, an array, half a line */
	     "{\"Action\":\"pass\",\"Package\":\"app/other\",\"Test\":\"TestHang\"}\n"
	     "{\"Action\":\"pass\",\"Package\":\"app\",\"Test\":7}\n"
	     "{\"Action\":\"pass\",\"Action\":\"pass\",\"Package\":\"app\",\"Test\":\"TestHang\"}\n"
	     "[1,2,3]\n{\"Action\":\"pa", &f);
	assert_int_equal(json_array_size(f.tests), 2);
	assert_string_equal(str(test_at(&f, 1), "name"), "TestHang");
	assert_string_equal(str(test_at(&f, 1), "status"), "fail");
	assert_string_equal(str(json_array_get(f.pkgs, 0), "status"), "fail");
	assert_int_equal(total(&f, "tests"), 2);
	assert_int_equal(total(&f, "passed") + total(&f, "failed"), 2);
	assert_non_null(strstr(f.text, "panic: test timed out"));
	folded_free(&f);
}

static void test_output_is_capped(void **state)
{
	(void)state;
	size_t n = GOTEST_TEST_OUTPUT_CAP / 10 + 100;
	char *s = malloc(n * 80 + 256), *p = s;
	p += sprintf(p, EV("run", T("TestLoud"), ""));
	for (size_t i = 0; i < n; i++)
		p += sprintf(p, EV("output", T("TestLoud"), O("0123456789")));
	sprintf(p, EV("pass", T("TestLoud"), ""));
	struct folded f;
	fold(s, &f);
	free(s);
	json_t *t = test_at(&f, 0);
	assert_true(json_is_true(json_object_get(t, "output_truncated")));
	assert_true(json_string_length(json_object_get(t, "output")) < GOTEST_TEST_OUTPUT_CAP + 64);
	assert_non_null(strstr(str(t, "output"), "bytes omitted"));
	folded_free(&f);
}

static void test_sniff(void **state)
{
	(void)state;
	const unsigned char png[] = "\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
	assert_string_equal(artifacts_sniff(png, sizeof(png) - 1, "chart.txt"), "image/png");
	assert_string_equal(artifacts_sniff((const unsigned char *)"\xff\xd8\xff\xe0", 4, "a"), "image/jpeg");
	assert_string_equal(artifacts_sniff((const unsigned char *)"GIF89a..", 8, NULL), "image/gif");
	assert_string_equal(artifacts_sniff((const unsigned char *)"RIFF\0\0\0\0WEBPVP8 ", 16, NULL),
			    "image/webp");
	const char *svg = "<?xml version=\"1.0\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\"/>";
	assert_string_equal(artifacts_sniff((const unsigned char *)svg, strlen(svg), "x.txt"),
			    "image/svg+xml");
	/* a name alone never makes an image, and binary is binary whatever it is called */
	assert_string_equal(artifacts_sniff((const unsigned char *)"just text\n", 10, "x.png"),
			    "text/plain");
	assert_string_equal(artifacts_sniff((const unsigned char *)"a,b\n1,2\n", 8, "x.csv"), "text/csv");
	assert_string_equal(artifacts_sniff((const unsigned char *)"{\"a\":1}", 7, "x.json"),
			    "application/json");
	assert_string_equal(artifacts_sniff((const unsigned char *)"\0\1\2\3", 4, "x.csv"),
			    "application/octet-stream");
	/* a UTF-8 character cut by the sample's end is still text */
	assert_string_equal(artifacts_sniff((const unsigned char *)"caf\xc3", 4, "x"), "text/plain");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_benchmark_split_line),
		cmocka_unit_test(test_count_runs_are_separate),
		cmocka_unit_test(test_unfinished_and_hostile_lines),
		cmocka_unit_test(test_output_is_capped),
		cmocka_unit_test(test_sniff),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
