/*
 * fuzz_gotest.c - libFuzzer target for what test mode reads from the user's side: the test2json
 * event stream folded by agent/gotest.c (gotest_report_feed, gotest_report_finish) and the
 * content sniffing of artifacts in agent/artifacts.c (artifacts_sniff).
 *
 * Built by tests/fuzz/Makefile. The input is the stream of one package's run (the test binary
 * prints what it likes, so lines that look like events are the attacker's); its first bytes
 * are also sniffed. Besides "no crash, no leak": the lists stay within their caps, every test
 * has a status of the three, the totals add up, and the plain text stays within its cap.
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/artifacts.h"
#include "agent/gotest.h"

#define FUZZ_TEXT_CAP 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *mt = artifacts_sniff(data, size < ARTIFACTS_SNIFF_BYTES ? size : ARTIFACTS_SNIFF_BYTES,
					 size & 1 ? "x.csv" : "x.json");
	if (!mt || !strchr(mt, '/'))
		__builtin_trap();

	struct gotest_report *r = gotest_report_new(FUZZ_TEXT_CAP);
	if (!r)
		return 0;
	gotest_report_feed(r, "app", (const char *)data, size);
	gotest_report_package(r, "app/x", "no_tests", "no test files\n");
	json_t *tests = NULL, *pkgs = NULL, *totals = NULL;
	char failed[256], *text = NULL;
	size_t tl = 0;
	bool trunc = false;
	if (gotest_report_finish(r, &tests, &pkgs, &totals, failed, sizeof(failed), &text, &tl,
				 &trunc) == 0) {
		if (json_array_size(tests) > GOTEST_MAX_TESTS || tl > FUZZ_TEXT_CAP)
			__builtin_trap();
		size_t i;
		json_t *t;
		json_array_foreach(tests, i, t) {
			const char *st = json_string_value(json_object_get(t, "status"));
			if (!st || (strcmp(st, "pass") && strcmp(st, "fail") && strcmp(st, "skip")))
				__builtin_trap();
			if (json_string_length(json_object_get(t, "output")) > GOTEST_TEST_OUTPUT_CAP + 64)
				__builtin_trap();
		}
		json_int_t n = json_integer_value(json_object_get(totals, "tests"));
		json_int_t sum = json_integer_value(json_object_get(totals, "passed")) +
				 json_integer_value(json_object_get(totals, "failed")) +
				 json_integer_value(json_object_get(totals, "skipped"));
		if (n != sum || strlen(failed) >= sizeof(failed))
			__builtin_trap();
		json_decref(tests);
		json_decref(pkgs);
		json_decref(totals);
		free(text);
	}
	gotest_report_free(r);
	return 0;
}
