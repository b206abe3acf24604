/*
 * gotest.h - test mode's result: the events `go tool test2json` prints for one run of a test
 * binary, folded into the structured `tests` and `packages` lists of an execute result.
 *
 * Called by agent/pipeline.c, which builds the test binaries (agent/gobuild.c) and runs each
 * under test2json in the program's own namespaces (agent/runproc.c). The events are untrusted
 * (the test prints what it likes, and could print lines that look like events): every line is
 * bounded, anything that is not an event of a known shape is ignored, and the lists are capped.
 */
#ifndef KG_GOTEST_H
#define KG_GOTEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include "policy/limits.h"

struct gotest_report;

/* gotest_report_new - an empty report; text_cap bounds the plain output (stdout) it gathers */
struct gotest_report *gotest_report_new(size_t text_cap);
void gotest_report_free(struct gotest_report *r);

/* gotest_report_feed - the test2json output of one package's run (a JSON object per line);
 * pkg is the import path the run was for: events naming another package are ignored */
void gotest_report_feed(struct gotest_report *r, const char *pkg, const char *data, size_t len);

/* gotest_report_package - a package with no run: status "build_fail", "no_tests" or "fail",
 * with a line of output (NULL for none) */
void gotest_report_package(struct gotest_report *r, const char *pkg, const char *status,
			   const char *output);

/*
 * gotest_report_finish - the lists for the result:
 *   tests:    [{package, name, status: pass|fail|skip, elapsed (s), output, output_truncated,
 *               iterations?, ns_per_op?, bytes_per_op?, allocs_per_op?}]
 *   packages: [{package, status: pass|fail|skip|no_tests|build_fail, elapsed, coverage|null,
 *               output}]
 *   totals:   {packages, tests, passed, failed, skipped, benchmarks, listed}
 *   failed:   the names of up to 10 failed tests, for a message ("TestA, TestB/x")
 * text gets what `go test -v` would print (the events' output in order), capped.
 * Returns 0, -ENOMEM.
 */
int gotest_report_finish(struct gotest_report *r, json_t **tests, json_t **packages,
			 json_t **totals, char *failed, size_t failed_len, char **text,
			 size_t *text_len, bool *text_truncated);

/* gotest_report_elapsed - the run's wall time for a package test2json gave no time for */
void gotest_report_elapsed(struct gotest_report *r, const char *pkg, double seconds);

/* gotest_report_timed_out - a binary panicked with "test timed out after" */
bool gotest_report_timed_out(const struct gotest_report *r);

#endif
