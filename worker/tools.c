/*
 * tools.c - what the model is told about the two tools, and the checks on what it sends.
 *
 * The descriptions are the model's manual: they state the snippet contract, how to send several
 * files and import a helper package, and what comes back. Keep them in step with
 * docs/snippets-and-results.md and agent/normalize.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/normalize.h"
#include "policy/limits.h"
#include "worker/worker.h"

static json_t *execute_output_base(void);

static const char execute_description[] =
	"Build and run Go code in this session's sandbox with the real Go toolchain (Go 1.26) and "
	"return a structured result.\n"
	"\n"
	"Send either `code` (one Go file) or `files` (several), not both.\n"
	"\n"
	"Snippet (preferred): any package name except main, declaring\n"
	"    func run(ctx context.Context) (any, error)\n"
	"kode-gopher adds a main that calls run with a context cancelled at the timeout and returns "
	"the value as JSON in result.value; a returned error comes back as result.kind \"error\", a "
	"panic (in any goroutine) as \"panic\" with its stack. Example:\n"
	"    package snippet\n"
	"    import (\"context\"; \"cloud.google.com/go/storage\")\n"
	"    func run(ctx context.Context) (any, error) {\n"
	"        c, err := storage.NewClient(ctx)\n"
	"        if err != nil { return nil, err }\n"
	"        defer c.Close()\n"
	"        return map[string]any{\"ok\": true}, nil\n"
	"    }\n"
	"\n"
	"Program: `package main` with `func main()` runs as it is; its exit code, stdout and stderr "
	"come back.\n"
	"\n"
	"Several files: files: [{path, content}]. Files in the top directory form the main package "
	"(the snippet or program); a subdirectory is a helper package, imported through the module "
	"path \"" NORM_MODULE_PATH "\", e.g. files at \"util/util.go\" (package util) are imported as "
	"\"" NORM_MODULE_PATH "/util\". Do not send go.mod: it is written from a lockfile.\n"
	"\n"
	"Precompiled and fast: the standard library, cloud.google.com/go/{storage, bigquery, "
	"pubsub/v2, firestore, container/apiv1, compute/apiv1, logging, secretmanager, "
	"resourcemanager, iam}, google.golang.org/api, golang.org/x/oauth2, golang.org/x/sync. Any "
	"other pure-Go module works too: the missing imports are fetched from the module proxy "
	"(`go get` for exactly those packages, `go mod tidy` if that fails), which is slower the "
	"first time in a session; result.tidied is true. cgo is off. Google credentials are found "
	"by the client libraries on their own.\n"
	"\n"
	"Sandbox: /app is the working directory and is wiped before every call, except "
	"/app/persist, which keeps files across calls in this session (cache intermediate data "
	"there). Default timeout 60 s (timeout_seconds to change); stdout and stderr are capped "
	"at 1 MiB each, keeping the head and the tail.\n"
	"\n"
	"Tests: when the files include _test.go files (or mode is \"test\"), kode-gopher runs go "
	"test on every package that has them instead of running main or run: phase \"test\", mode "
	"\"test\", tests [{package, name (subtests as Parent/sub), status pass|fail|skip, elapsed "
	"(s), output, and for benchmarks iterations, ns_per_op, bytes_per_op, allocs_per_op}], "
	"packages [{package, status, coverage}], test_totals {tests, passed, failed, skipped}; "
	"result.kind ok or test_failure (naming the failed tests). Options in test: {run, skip, "
	"bench (regexps as for go test -run/-skip/-bench), benchtime (\"100x\", \"1s\"), count, "
	"cover (coverage %), short}. Fuzz targets run their seed corpus only. race is not "
	"available (it needs cgo). A test file that does not compile is phase build with "
	"diagnostics. Send mode \"run\" to run main or run although _test.go files are present.\n"
	"\n"
	"Artifacts: files the code writes under /app/out (KODE_GOPHER_OUT; out/ from the working "
	"directory) come back with the result: images (PNG, JPEG, GIF, WebP, SVG, recognised by "
	"content) as image content, text and other files as embedded resources, up to 2 MiB in all "
	"and 32 files; larger ones as resource links to read with resources/read. structuredContent "
	"artifacts lists each (name, size, media_type, embedded, note); artifacts_note names a cap "
	"that was hit. Links, hard links and special files are never read. /app/out is emptied "
	"before every call; files in /app/persist and /app/out are also the session's MCP "
	"resources (sandbox:///app/persist/..., sandbox:///app/out/...).\n"
	"\n"
	"Result: phase (normalize, build, run or test), mode (wrapped, program or test), exit_code, "
	"build_ms, duration_ms, tidied, result {kind: ok | error | panic | unencodable | exit | "
	"timeout | killed | test_failure | build_error | normalize_error, value | message | stack}, "
	"diagnostics [{file, line, column, message}] for build errors, stdout, stderr, artifacts. "
	"isError is true when there is something to fix: for phase build, fix the code rather "
	"than retrying.";

static const char doc_description[] =
	"Show Go documentation (`go doc`) for a package, or for one symbol in it, as the sandbox's "
	"module sees it: the standard library, the precompiled Google Cloud modules, and anything "
	"an earlier execute_go_code call in this session tidied in. Use it to check an API before "
	"writing code. Examples: {package: \"cloud.google.com/go/storage\", symbol: \"Client\"}, "
	"{package: \"fmt\", symbol: \"Println\"}, {package: \"cloud.google.com/go/bigquery\"}. "
	"Symbols may be Type.Method. Nothing in /app is changed.";

/* execute_output_schema - the shape of structuredContent for execute_go_code */
static json_t *execute_output_schema(void)
{
	json_t *s = execute_output_base();
	json_t *props = json_object_get(s, "properties");
	json_t *num = json_pack("{s:s}", "type", "number");
	json_object_set_new(props, "tests", json_pack(
		"{s:s, s:s, s:{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s, s:[s,s,s]}, s:O, s:{s:s}, "
		"s:{s:s}, s:{s:s}, s:O, s:{s:s}, s:{s:s}}, s:[s,s,s]}}",
		"type", "array", "description", "test mode: every test, subtest, fuzz seed and "
		"benchmark, in the order they ran", "items", "type", "object", "properties",
		"package", "type", "string", "name", "type", "string", "status", "type", "string",
		"enum", "pass", "fail", "skip", "elapsed", num, "output", "type", "string",
		"output_truncated", "type", "boolean", "iterations", "type", "integer", "ns_per_op",
		num, "bytes_per_op", "type", "integer", "allocs_per_op", "type", "integer",
		"required", "package", "name", "status"));
	json_object_set_new(props, "packages", json_pack(
		"{s:s, s:{s:s, s:{s:{s:s}, s:{s:s}, s:O, s:{s:[s,s]}, s:{s:s}}}}",
		"type", "array", "items", "type", "object", "properties", "package", "type", "string",
		"status", "type", "string", "elapsed", num, "coverage", "type", "number", "null",
		"output", "type", "string"));
	json_object_set_new(props, "test_totals", json_pack(
		"{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}}}",
		"type", "object", "properties", "packages", "type", "integer", "tests", "type",
		"integer", "passed", "type", "integer", "failed", "type", "integer", "skipped", "type",
		"integer", "benchmarks", "type", "integer", "listed", "type", "integer"));
	json_object_set_new(props, "artifacts", json_pack(
		"{s:s, s:s, s:{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:[s,s]}, s:{s:s}, "
		"s:{s:s}}, s:[s,s,s]}}",
		"type", "array", "description", "files the code wrote under /app/out; the embedded "
		"ones are also in the result's content blocks", "items", "type", "object",
		"properties", "name", "type", "string", "path", "type", "string", "uri", "type",
		"string", "size", "type", "integer", "media_type", "type", "string", "null",
		"embedded", "type", "boolean", "note", "type", "string", "required", "name", "size",
		"embedded"));
	json_object_set_new(props, "artifacts_note", json_pack("{s:s}", "type", "string"));
	json_object_set_new(props, "output_note", json_pack(
		"{s:s, s:s}", "type", "string", "description", "present when stdout and stderr were "
		"cut in the middle so that the answer fits the 4 MiB message limit"));
	json_decref(num);
	return s;
}

/* execute_output_base - the fields every execute_go_code result has */
static json_t *execute_output_base(void)
{
	return json_pack(
		"{s:s, s:{"
		"s:{s:s, s:[s,s,s,s,s]}, s:{s:[s,s]}, s:{s:[s,s]}, s:{s:[s,s]}, s:{s:s}, s:{s:s},"
		"s:{s:s}, s:{s:s}, s:{s:[s,s], s:[s,s,s,n]}, s:{s:s},"
		"s:{s:s, s:{s:{s:s}, s:{}, s:{s:s}, s:{s:s}, s:{s:s}}, s:[s]},"
		"s:{s:s, s:{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}}}},"
		"s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}},"
		"s:[s,s]}",
		"type", "object", "properties",
		"phase", "type", "string", "enum", "normalize", "build", "run", "test", "internal",
		"mode", "type", "string", "null",
		"exit_code", "type", "integer", "null",
		"signal", "type", "string", "null",
		"build_ms", "type", "integer",
		"duration_ms", "type", "integer",
		"tidied", "type", "boolean",
		"cached_build", "type", "boolean",
		"build_path", "type", "string", "null", "enum", "direct", "go build", "cached",
		"build_path_reason", "type", "string",
		"result", "type", "object", "properties", "kind", "type", "string", "value",
		"message", "type", "string", "stack", "type", "string", "type", "type", "string",
		"required", "kind",
		"diagnostics", "type", "array", "items", "type", "object", "properties", "file", "type",
		"string", "line", "type", "integer", "column", "type", "integer", "message", "type", "string",
		"build_output", "type", "string",
		"stdout", "type", "string",
		"stderr", "type", "string",
		"stdout_truncated", "type", "boolean",
		"stderr_truncated", "type", "boolean",
		"timings", "type", "object",
		"retried", "type", "boolean",
		"sandbox", "type", "string",
		"tidy_output", "type", "string",
		"required", "phase", "result");
}

/* tools_list - the tools/list result's array */
json_t *tools_list(int max_timeout_s)
{
	json_t *exec_in = json_pack(
		"{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s, s:i, s:{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s}}, "
		"s:[s,s], s:b}}, s:{s:s, s:s, s:i, s:i}}, s:b}",
		"type", "object", "properties",
		"code", "type", "string", "description",
		"One Go source file: a snippet (package other than main with func run(ctx "
		"context.Context) (any, error)) or a package main program.",
		"files", "type", "array", "description",
		"Several files instead of code; subdirectories are helper packages imported as "
		"\"" NORM_MODULE_PATH "/<dir>\".",
		"maxItems", NORM_MAX_FILES, "items", "type", "object", "properties", "path", "type", "string",
		"description", "Relative path, e.g. main.go or util/util.go", "content", "type", "string",
		"description", "The file's contents", "required", "path", "content",
		"additionalProperties", 0,
		"timeout_seconds", "type", "integer", "description",
		"Run timeout in seconds (default 60).", "minimum", 1, "maximum", max_timeout_s,
		"additionalProperties", 0);
	json_t *props = json_object_get(exec_in, "properties");
	json_object_set_new(props, "mode", json_pack(
		"{s:s, s:[s,s], s:s}", "type", "string", "enum", "run", "test", "description",
		"run (main or run) or test (go test); default: test when a _test.go file is sent"));
	json_object_set_new(props, "test", json_pack(
		"{s:s, s:s, s:{s:{s:s, s:i}, s:{s:s, s:i}, s:{s:s, s:i}, s:{s:s, s:s}, "
		"s:{s:s, s:i, s:i}, s:{s:s}, s:{s:s}, s:{s:s, s:s}}, s:b}",
		"type", "object", "description", "go test options (implies mode test)", "properties",
		"run", "type", "string", "maxLength", TEST_PATTERN_MAX_BYTES,
		"skip", "type", "string", "maxLength", TEST_PATTERN_MAX_BYTES,
		"bench", "type", "string", "maxLength", TEST_PATTERN_MAX_BYTES,
		"benchtime", "type", "string", "pattern", "^[0-9]+(x|s|ms)$",
		"count", "type", "integer", "minimum", 1, "maximum", TEST_COUNT_MAX,
		"cover", "type", "boolean", "short", "type", "boolean",
		"race", "type", "boolean", "description", "not available: the race detector needs "
		"cgo, which is off in the sandbox",
		"additionalProperties", 0));
	json_t *doc_in = json_pack(
		"{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s}}, s:[s], s:b}", "type", "object", "properties",
		"package", "type", "string", "description",
		"Import path, e.g. cloud.google.com/go/storage or net/http", "symbol", "type", "string",
		"description", "Optional symbol: Func, Type, Type.Method or Type.Field", "required",
		"package", "additionalProperties", 0);
	json_t *doc_out = json_pack(
		"{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}}, s:[s,s]}", "type", "object", "properties",
		"package", "type", "string", "symbol", "type", "string", "text", "type", "string",
		"truncated", "type", "boolean", "required", "package", "text");
	return json_pack(
		"[{s:s, s:s, s:s, s:o, s:o, s:{s:s, s:b, s:b, s:b, s:b}},"
		" {s:s, s:s, s:s, s:o, s:o, s:{s:s, s:b, s:b, s:b, s:b}}]",
		"name", "execute_go_code", "title", "Run Go code", "description", execute_description,
		"inputSchema", exec_in, "outputSchema", execute_output_schema(), "annotations", "title",
		"Run Go code", "readOnlyHint", 0, "destructiveHint", 1, "idempotentHint", 0,
		"openWorldHint", 1,
		"name", "lookup_package_docs", "title", "Look up Go package docs", "description",
		doc_description, "inputSchema", doc_in, "outputSchema", doc_out, "annotations", "title",
		"Look up Go package docs", "readOnlyHint", 1, "destructiveHint", 0, "idempotentHint", 1,
		"openWorldHint", 0);
}

bool tools_known(const char *name)
{
	return strcmp(name, "execute_go_code") == 0 || strcmp(name, "lookup_package_docs") == 0;
}

/* only_keys - every key of obj is one of the allowed ones */
static const char *only_keys(json_t *obj, const char *const *allowed, const char *what, char *buf,
			     size_t cap)
{
	const char *k;
	json_t *v;
	json_object_foreach(obj, k, v) {
		bool ok = false;
		for (const char *const *a = allowed; *a; a++)
			ok |= strcmp(k, *a) == 0;
		if (!ok) {
			snprintf(buf, cap, "%s: unknown argument \"%.60s\"", what, k);
			return buf;
		}
	}
	return NULL;
}

/* check_test - the go test options */
static const char *check_test(json_t *test, json_t *mode, char *buf, size_t cap)
{
	static const char *const keys[] = { "run", "skip", "bench", "benchtime", "count", "cover",
					    "short", "race", NULL };
	if (!json_is_object(test))
		return "execute_go_code: \"test\" must be an object such as {\"run\": \"TestParse\"}";
	if (mode && strcmp(json_string_value(mode), "run") == 0)
		return "execute_go_code: \"test\" options go with mode \"test\", not \"run\"";
	const char *bad = only_keys(test, keys, "execute_go_code: test", buf, cap);
	if (bad)
		return bad;
	if (json_is_true(json_object_get(test, "race")))
		return "execute_go_code: test.race is not available: the race detector needs cgo, and "
		       "cgo is off in the sandbox; run the tests without race";
	static const char *const pats[] = { "run", "skip", "bench" };
	for (size_t i = 0; i < 3; i++) {
		json_t *v = json_object_get(test, pats[i]);
		if (v && (!json_is_string(v) || json_string_length(v) > TEST_PATTERN_MAX_BYTES ||
			  strlen(json_string_value(v)) != json_string_length(v))) {
			snprintf(buf, cap, "execute_go_code: test.%s must be a regular expression of at "
				 "most %d bytes, as for go test -%s", pats[i], TEST_PATTERN_MAX_BYTES,
				 pats[i]);
			return buf;
		}
	}
	json_t *bt = json_object_get(test, "benchtime");
	if (bt) {
		const char *s = json_string_value(bt);
		char *end = NULL;
		long n = s ? strtol(s, &end, 10) : 0;
		if (!s || n <= 0 || n > 100000 || !(strcmp(end, "x") == 0 || strcmp(end, "s") == 0 ||
						    strcmp(end, "ms") == 0))
			return "execute_go_code: test.benchtime must be a count or a duration such as "
			       "\"100x\", \"1s\" or \"200ms\"";
	}
	json_t *cnt = json_object_get(test, "count");
	if (cnt && (!json_is_integer(cnt) || json_integer_value(cnt) < 1 ||
		    json_integer_value(cnt) > TEST_COUNT_MAX)) {
		snprintf(buf, cap, "execute_go_code: test.count must be a whole number from 1 to %d",
			 TEST_COUNT_MAX);
		return buf;
	}
	static const char *const flags[] = { "cover", "short", "race" };
	for (size_t i = 0; i < 3; i++) {
		json_t *v = json_object_get(test, flags[i]);
		if (v && !json_is_boolean(v)) {
			snprintf(buf, cap, "execute_go_code: test.%s must be true or false", flags[i]);
			return buf;
		}
	}
	return NULL;
}

/* check_execute - execute_go_code's arguments against its input schema */
static const char *check_execute(json_t *args, int max_timeout_s, char *buf, size_t cap)
{
	static const char *const keys[] = { "code", "files", "timeout_seconds", "mode", "test",
					    NULL };
	const char *bad = only_keys(args, keys, "execute_go_code", buf, cap);
	if (bad)
		return bad;
	json_t *code = json_object_get(args, "code"), *files = json_object_get(args, "files");
	json_t *tmo = json_object_get(args, "timeout_seconds");
	if ((code != NULL) == (files != NULL))
		return "execute_go_code: send exactly one of \"code\" (a string with one Go file) and "
		       "\"files\" (an array of {path, content})";
	if (code && !json_is_string(code))
		return "execute_go_code: \"code\" must be a string holding Go source";
	if (code && json_string_length(code) == 0)
		return "execute_go_code: \"code\" is empty";
	if (files) {
		if (!json_is_array(files) || json_array_size(files) == 0)
			return "execute_go_code: \"files\" must be a non-empty array of {path, content}";
		if (json_array_size(files) > NORM_MAX_FILES) {
			snprintf(buf, cap, "execute_go_code: %zu files is too many; the limit is %d",
				 json_array_size(files), NORM_MAX_FILES);
			return buf;
		}
		size_t i;
		json_t *f;
		json_array_foreach(files, i, f) {
			static const char *const fkeys[] = { "path", "content", NULL };
			json_t *p = json_object_get(f, "path"), *c = json_object_get(f, "content");
			if (!json_is_object(f) || !json_is_string(p) || !json_is_string(c)) {
				snprintf(buf, cap, "execute_go_code: files[%zu] must be an object with string "
					 "\"path\" and \"content\"", i);
				return buf;
			}
			char what[64];
			snprintf(what, sizeof(what), "execute_go_code: files[%zu]", i);
			if ((bad = only_keys(f, fkeys, what, buf, cap)))
				return bad;
		}
	}
	json_t *mode = json_object_get(args, "mode"), *test = json_object_get(args, "test");
	if (mode && (!json_is_string(mode) || (strcmp(json_string_value(mode), "run") != 0 &&
					       strcmp(json_string_value(mode), "test") != 0)))
		return "execute_go_code: \"mode\" must be \"run\" or \"test\"";
	if (test && (bad = check_test(test, mode, buf, cap)))
		return bad;
	if (tmo) {
		if (!json_is_integer(tmo) || json_integer_value(tmo) < 1 ||
		    json_integer_value(tmo) > max_timeout_s) {
			snprintf(buf, cap, "execute_go_code: \"timeout_seconds\" must be a whole number "
				 "from 1 to %d", max_timeout_s);
			return buf;
		}
	}
	return NULL;
}

/* check_doc - lookup_package_docs's arguments */
static const char *check_doc(json_t *args, char *buf, size_t cap)
{
	static const char *const keys[] = { "package", "symbol", NULL };
	const char *bad = only_keys(args, keys, "lookup_package_docs", buf, cap);
	if (bad)
		return bad;
	json_t *p = json_object_get(args, "package"), *sym = json_object_get(args, "symbol");
	if (!json_is_string(p) || json_string_length(p) == 0)
		return "lookup_package_docs: \"package\" must be a non-empty string, e.g. "
		       "\"cloud.google.com/go/storage\"";
	if (sym && !json_is_string(sym))
		return "lookup_package_docs: \"symbol\" must be a string, e.g. \"Client\" or \"Client.Bucket\"";
	return NULL;
}

/* tools_check_args - the input schema, checked by hand so the error names the problem */
const char *tools_check_args(const char *name, json_t *args, int max_timeout_s, char *buf, size_t cap)
{
	if (args && !json_is_object(args))
		return "the tool's arguments must be a JSON object";
	json_t *empty = NULL;
	if (!args)
		args = empty = json_object();
	const char *r = strcmp(name, "execute_go_code") == 0 ? check_execute(args, max_timeout_s, buf, cap)
							   : check_doc(args, buf, cap);
	json_decref(empty);
	return r;
}

/* tools_error_result - see worker.h */
json_t *tools_error_result(const char *tool, const char *kind, const char *message, json_t *args)
{
	json_t *sc;
	if (strcmp(tool, "lookup_package_docs") == 0) {
		json_t *pkg = json_object_get(args, "package"), *sym = json_object_get(args, "symbol");
		sc = json_pack("{s:s, s:s, s:s, s:b}", "package", json_is_string(pkg) ? json_string_value(pkg) : "",
			       "symbol", json_is_string(sym) ? json_string_value(sym) : "", "text", message,
			       "truncated", 0);
	} else {
		/* bad arguments stop before normalize; a sandbox that cannot be had is the server's */
		sc = json_pack("{s:s, s:n, s:n, s:n, s:i, s:i, s:b, s:{s:s, s:s}, s:s, s:s}", "phase",
			       strcmp(kind, "invalid_arguments") == 0 ? "normalize" : "internal", "mode",
			       "exit_code", "signal", "build_ms", 0, "duration_ms", 0, "tidied", 0, "result",
			       "kind", kind, "message", message, "stdout", "", "stderr", "");
	}
	return json_pack("{s:[{s:s, s:s}], s:o, s:b}", "content", "type", "text", "text", message,
			 "structuredContent", sc, "isError", 1);
}
