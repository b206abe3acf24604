/*
 * test_pipeline.c - end-to-end tests of agent/pipeline.c with the real Go toolchain: snippets
 * (ok, error, panic in run and in another goroutine, timeout), programs (exit status, panic),
 * build errors with diagnostics, the binary cache, /app wiping (persist kept, planted symlinks
 * never followed), import resolution through a local file:// module proxy, go doc, and the
 * direct build path (agent/fastbuild.c): the binary it links against go build's, and the fall
 * back to go build on every kind of change.
 *
 * Everything lives in a temporary directory with a scratch lockfile (`module app`, no
 * requirements), so only the standard library is needed. GOCACHE is kept between runs in
 * $KG_TEST_GOCACHE (default /tmp/kg-test-gocache) so that only the first run compiles std.
 */
#include <ctype.h>
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/fastbuild.h"
#include "agent/gobuild.h"
#include "agent/pipeline.h"

static char root[] = "/tmp/kg-pipeline-XXXXXX";
static char app_dir[512], state_dir[512], runtime_dir[512], modcache[512], proxy_dir[512];
static struct pipeline_config cfg;

/* writef - create a file (and its parents' last level) with the given content */
static void writef(const char *path, const char *content)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(content, f);
	fclose(f);
}

/* exists - lstat succeeds */
static int exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

/* get - a member by dotted path ("result.kind") */
static json_t *get(json_t *o, const char *path)
{
	char buf[128];
	snprintf(buf, sizeof(buf), "%s", path);
	json_t *cur = o;
	for (char *tok = strtok(buf, "."); tok && cur; tok = strtok(NULL, "."))
		cur = json_object_get(cur, tok);
	return cur;
}

static const char *gets(json_t *o, const char *path)
{
	const char *s = json_string_value(get(o, path));
	return s ? s : "<missing>";
}

/* dump - print a result when a test is about to fail on it */
static void dump(json_t *o)
{
	char *s = json_dumps(o, JSON_INDENT(1));
	fprintf(stderr, "%s\n", s);
	free(s);
}

/* execute - one call with the given files (path, content, path, content, ..., NULL) */
static json_t *execute_v(int timeout_ms, json_t *env, va_list ap)
{
	json_t *files = json_array();
	for (;;) {
		const char *p = va_arg(ap, const char *);
		if (!p)
			break;
		const char *c = va_arg(ap, const char *);
		json_array_append_new(files, json_pack("{s:s,s:s}", "path", p, "content", c));
	}
	json_t *req = json_pack("{s:o}", "files", files);
	if (timeout_ms)
		json_object_set_new(req, "timeout_ms", json_integer(timeout_ms));
	if (env)
		json_object_set_new(req, "env", env);
	json_t *res = pipeline_execute(&cfg, req, NULL, NULL);
	json_decref(req);
	assert_non_null(res);
	return res;
}

static json_t *execute(const char *first, ...)
{
	va_list ap;
	va_start(ap, first);
	json_t *files = json_array();
	const char *p = first;
	while (p) {
		const char *c = va_arg(ap, const char *);
		json_array_append_new(files, json_pack("{s:s,s:s}", "path", p, "content", c));
		p = va_arg(ap, const char *);
	}
	va_end(ap);
	json_t *req = json_pack("{s:o}", "files", files);
	json_t *res = pipeline_execute(&cfg, req, NULL, NULL);
	json_decref(req);
	assert_non_null(res);
	return res;
}

static json_t *execute_opts(int timeout_ms, json_t *env, ...)
{
	va_list ap;
	va_start(ap, env);
	json_t *r = execute_v(timeout_ms, env, ap);
	va_end(ap);
	return r;
}

/* expect_kind - assert phase and result kind, dumping the result otherwise */
static void expect_kind(json_t *r, const char *phase, const char *kind)
{
	if (strcmp(gets(r, "phase"), phase) != 0 || strcmp(gets(r, "result.kind"), kind) != 0)
		dump(r);
	assert_string_equal(gets(r, "phase"), phase);
	assert_string_equal(gets(r, "result.kind"), kind);
}

/* ---- a local module proxy: one module example.com/kghello v1.0.0 ---- */

static uint32_t crc32_buf(const char *p, size_t n)
{
	uint32_t c = 0xFFFFFFFFu;
	for (size_t i = 0; i < n; i++) {
		c ^= (unsigned char)p[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
	}
	return ~c;
}

static void put16(FILE *f, unsigned v)
{
	fputc((int)(v & 0xff), f);
	fputc((int)((v >> 8) & 0xff), f);
}

static void put32(FILE *f, uint32_t v)
{
	put16(f, v & 0xffff);
	put16(f, v >> 16);
}

/* write_zip - a stored (uncompressed) zip of n name/content pairs */
static void write_zip(const char *path, const char *const *names, const char *const *data, int n)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	long offs[8];
	for (int i = 0; i < n; i++) {
		offs[i] = ftell(f);
		size_t nl = strlen(names[i]), dl = strlen(data[i]);
		put32(f, 0x04034b50);
		put16(f, 20), put16(f, 0), put16(f, 0), put16(f, 0), put16(f, 0x21);
		put32(f, crc32_buf(data[i], dl)), put32(f, (uint32_t)dl), put32(f, (uint32_t)dl);
		put16(f, (unsigned)nl), put16(f, 0);
		fwrite(names[i], 1, nl, f);
		fwrite(data[i], 1, dl, f);
	}
	long cd = ftell(f);
	for (int i = 0; i < n; i++) {
		size_t nl = strlen(names[i]), dl = strlen(data[i]);
		put32(f, 0x02014b50);
		put16(f, 20), put16(f, 20), put16(f, 0), put16(f, 0), put16(f, 0), put16(f, 0x21);
		put32(f, crc32_buf(data[i], dl)), put32(f, (uint32_t)dl), put32(f, (uint32_t)dl);
		put16(f, (unsigned)nl), put16(f, 0), put16(f, 0), put16(f, 0), put16(f, 0);
		put32(f, 0), put32(f, (uint32_t)offs[i]);
		fwrite(names[i], 1, nl, f);
	}
	long end = ftell(f);
	put32(f, 0x06054b50);
	put16(f, 0), put16(f, 0), put16(f, (unsigned)n), put16(f, (unsigned)n);
	put32(f, (uint32_t)(end - cd)), put32(f, (uint32_t)cd), put16(f, 0);
	fclose(f);
}

static void make_proxy(void)
{
	char p[600];
	snprintf(proxy_dir, sizeof(proxy_dir), "%s/proxy", root);
	snprintf(p, sizeof(p), "mkdir -p %s/example.com/kghello/@v", proxy_dir);
	assert_int_equal(system(p), 0);
	const char *mod = "module example.com/kghello\n\ngo 1.21\n";
	snprintf(p, sizeof(p), "%s/example.com/kghello/@v/list", proxy_dir);
	writef(p, "v1.0.0\n");
	snprintf(p, sizeof(p), "%s/example.com/kghello/@v/v1.0.0.info", proxy_dir);
	writef(p, "{\"Version\":\"v1.0.0\",\"Time\":\"2024-01-01T00:00:00Z\"}\n");
	snprintf(p, sizeof(p), "%s/example.com/kghello/@v/v1.0.0.mod", proxy_dir);
	writef(p, mod);
	snprintf(p, sizeof(p), "%s/example.com/kghello/@v/v1.0.0.zip", proxy_dir);
	const char *names[] = { "example.com/kghello@v1.0.0/go.mod",
				"example.com/kghello@v1.0.0/hello.go" };
	const char *data[] = { mod, "package kghello\n\n// Hello greets.\nfunc Hello() string "
				    "{ return \"hello from kghello\" }\n" };
	write_zip(p, names, data, 2);
}

static int setup(void **state)
{
	(void)state;
	if (!mkdtemp(root))
		return -1;
	snprintf(app_dir, sizeof(app_dir), "%s/app", root);
	snprintf(state_dir, sizeof(state_dir), "%s/state", root);
	snprintf(runtime_dir, sizeof(runtime_dir), "%s/runtime", root);
	snprintf(modcache, sizeof(modcache), "%s/modcache", root);
	char p[600];
	mkdir(runtime_dir, 0755);
	snprintf(p, sizeof(p), "%s/lock", runtime_dir);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/lock/go.mod", runtime_dir);
	writef(p, "module app\n\ngo 1.26\n");
	snprintf(p, sizeof(p), "%s/lock/go.sum", runtime_dir);
	writef(p, "");
	const char *gocache = getenv("KG_TEST_GOCACHE");
	cfg = (struct pipeline_config){
		.app_dir = app_dir,
		.state_dir = state_dir,
		.runtime_dir = runtime_dir,
		.gomodcache_dir = modcache,
		.gocache_dir = gocache ? gocache : "/tmp/kg-test-gocache",
		.default_timeout_ms = 60000,
		.max_timeout_ms = 300000,
		.output_cap = 1024 * 1024,
		.doc_cap = 64 * 1024,
	};
	make_proxy();
	snprintf(p, sizeof(p), "file://%s", proxy_dir);
	setenv("GOPROXY", p, 1);
	setenv("GOSUMDB", "off", 1);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[600];
	/* the module cache is read-only by design */
	snprintf(cmd, sizeof(cmd), "chmod -R u+w %s 2>/dev/null; rm -rf %s", root, root);
	return system(cmd) == 0 ? 0 : -1;
}

static const char *snippet_ok = "package snippet\n"
				"\n"
				"import (\n"
				"\t\"context\"\n"
				"\t\"fmt\"\n"
				")\n"
				"\n"
				"type Point struct {\n"
				"\tName string `json:\"name\"`\n"
				"\tN    int    `json:\"n\"`\n"
				"}\n"
				"\n"
				"func run(ctx context.Context) (any, error) {\n"
				"\tfmt.Println(\"hello\")\n"
				"\treturn Point{Name: \"x\", N: 3}, nil\n"
				"}\n";

static void test_snippet_ok_then_cached(void **state)
{
	(void)state;
	struct timespec a, b;
	json_t *r = execute("main.go", snippet_ok, NULL);
	expect_kind(r, "run", "ok");
	assert_string_equal(gets(r, "mode"), "wrapped");
	assert_string_equal(gets(r, "result.value.name"), "x");
	assert_int_equal(json_integer_value(get(r, "result.value.n")), 3);
	assert_string_equal(gets(r, "stdout"), "hello\n");
	assert_int_equal(json_integer_value(get(r, "exit_code")), 0);
	assert_true(json_is_null(get(r, "signal")));
	assert_true(json_is_false(get(r, "cached_build")));
	assert_true(json_is_false(get(r, "tidied")));
	assert_true(json_is_false(get(r, "stdout_truncated")));
	assert_non_null(get(r, "timings.total_ms"));
	assert_non_null(get(r, "timings.max_rss_kb"));
	json_decref(r);

	/* identical resubmit: same binary, no build */
	clock_gettime(CLOCK_MONOTONIC, &a);
	r = execute("main.go", snippet_ok, NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	expect_kind(r, "run", "ok");
	assert_true(json_is_true(get(r, "cached_build")));
	assert_int_equal(json_integer_value(get(r, "build_ms")), 0);
	fprintf(stderr, "cached snippet: %ld ms end to end\n",
		(b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000);
	json_decref(r);

	/* a different snippet with a warm build cache: the time the report quotes */
	char src[1024];
	snprintf(src, sizeof(src), "%s\n// %ld\n", snippet_ok, (long)time(NULL));
	clock_gettime(CLOCK_MONOTONIC, &a);
	r = execute("main.go", src, NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	expect_kind(r, "run", "ok");
	assert_true(json_is_false(get(r, "cached_build")));
	fprintf(stderr, "warm-cache stdlib snippet: %ld ms end to end (build_ms %lld, run %lld)\n",
		(b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000,
		(long long)json_integer_value(get(r, "build_ms")),
		(long long)json_integer_value(get(r, "duration_ms")));
	json_decref(r);
}

static void test_snippet_error(void **state)
{
	(void)state;
	json_t *r = execute("main.go",
			    "package x\n\nimport (\n\t\"context\"\n\t\"errors\"\n)\n\n"
			    "func run(ctx context.Context) (any, error) {\n"
			    "\treturn nil, errors.New(\"boom\")\n}\n",
			    NULL);
	expect_kind(r, "run", "error");
	assert_string_equal(gets(r, "result.message"), "boom");
	assert_string_equal(gets(r, "result.type"), "*errors.errorString");
	assert_int_equal(json_integer_value(get(r, "exit_code")), 1);
	json_decref(r);
}

static void test_snippet_panic(void **state)
{
	(void)state;
	json_t *r = execute("main.go",
			    "package x\n\nimport \"context\"\n\n"
			    "func run(ctx context.Context) (any, error) {\n"
			    "\tpanic(\"oh no\")\n}\n",
			    NULL);
	expect_kind(r, "run", "panic");
	assert_string_equal(gets(r, "result.message"), "oh no");
	assert_non_null(strstr(gets(r, "result.stack"), "goroutine"));
	json_decref(r);

	/* a panic in another goroutine reaches the crash file, not the result file */
	r = execute("main.go",
		    "package x\n\nimport (\n\t\"context\"\n\t\"time\"\n)\n\n"
		    "func run(ctx context.Context) (any, error) {\n"
		    "\tgo func() { panic(\"in a goroutine\") }()\n"
		    "\ttime.Sleep(10 * time.Second)\n\treturn 1, nil\n}\n",
		    NULL);
	expect_kind(r, "run", "panic");
	assert_string_equal(gets(r, "result.message"), "in a goroutine");
	assert_non_null(strstr(gets(r, "result.stack"), "goroutine "));
	assert_int_equal(json_integer_value(get(r, "exit_code")), 2);
	json_decref(r);
}

static void test_snippet_timeout(void **state)
{
	(void)state;
	/* ignores its context: killed after the grace */
	json_t *r = execute_opts(500, NULL, "main.go",
				 "package x\n\nimport (\n\t\"context\"\n\t\"time\"\n)\n\n"
				 "func run(ctx context.Context) (any, error) {\n"
				 "\ttime.Sleep(time.Hour)\n\treturn 1, nil\n}\n",
				 NULL);
	expect_kind(r, "run", "timeout");
	assert_string_equal(gets(r, "result.message"),
			    "the program ran past its 0.5 s timeout and was killed");
	assert_true(json_integer_value(get(r, "duration_ms")) < 5000);
	json_decref(r);

	/* honours its context: still a timeout, with run's error */
	r = execute_opts(1000, NULL, "main.go",
			 "package x\n\nimport \"context\"\n\n"
			 "func run(ctx context.Context) (any, error) {\n"
			 "\t<-ctx.Done()\n\treturn nil, ctx.Err()\n}\n",
			 NULL);
	expect_kind(r, "run", "timeout");
	assert_non_null(strstr(gets(r, "result.message"), "context deadline exceeded"));
	json_decref(r);
}

static void test_program_exit_and_panic(void **state)
{
	(void)state;
	json_t *r = execute("main.go",
			    "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\n"
			    "func main() {\n\tfmt.Fprintln(os.Stderr, \"bad\")\n\tos.Exit(3)\n}\n",
			    NULL);
	expect_kind(r, "run", "exit");
	assert_string_equal(gets(r, "mode"), "program");
	assert_int_equal(json_integer_value(get(r, "exit_code")), 3);
	assert_string_equal(gets(r, "result.message"), "the program exited with status 3");
	assert_string_equal(gets(r, "stderr"), "bad\n");
	json_decref(r);

	r = execute("main.go", "package main\n\nfunc main() {\n\tvar m map[string]int\n"
			       "\tm[\"a\"] = 1\n}\n",
		    NULL);
	expect_kind(r, "run", "panic");
	assert_string_equal(gets(r, "result.message"), "assignment to entry in nil map");
	assert_non_null(strstr(gets(r, "result.stack"), "main.main()"));
	json_decref(r);

	r = execute("main.go", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Print(\"ok\") }\n",
		    NULL);
	expect_kind(r, "run", "ok");
	assert_string_equal(gets(r, "stdout"), "ok");
	json_decref(r);
}

static void test_result_edges(void **state)
{
	(void)state;
	/* a value JSON cannot hold */
	json_t *r = execute("main.go",
			    "package x\n\nimport \"context\"\n\n"
			    "func run(ctx context.Context) (any, error) {\n"
			    "\treturn make(chan int), nil\n}\n",
			    NULL);
	expect_kind(r, "run", "unencodable");
	assert_string_equal(gets(r, "result.type"), "chan int");
	json_decref(r);

	/* integers beyond int64 survive as numbers */
	r = execute("main.go",
		    "package x\n\nimport (\n\t\"context\"\n\t\"math\"\n)\n\n"
		    "func run(ctx context.Context) (any, error) {\n"
		    "\treturn []uint64{math.MaxUint64, 7}, nil\n}\n",
		    NULL);
	expect_kind(r, "run", "ok");
	assert_true(json_is_number(json_array_get(get(r, "result.value"), 0)));
	assert_true(json_number_value(json_array_get(get(r, "result.value"), 1)) == 7.0);
	json_decref(r);

	/* killed by a signal nobody sent on purpose */
	r = execute("main.go",
		    "package main\n\nimport (\n\t\"os\"\n\t\"syscall\"\n)\n\n"
		    "func main() { syscall.Kill(os.Getpid(), syscall.SIGKILL) }\n",
		    NULL);
	expect_kind(r, "run", "killed");
	assert_string_equal(gets(r, "signal"), "SIGKILL");
	assert_true(json_is_null(get(r, "exit_code")));
	assert_string_equal(gets(r, "result.message"),
			    "the program was killed by SIGKILL (out of memory?)");
	json_decref(r);

	/* a program past its timeout gets SIGTERM */
	r = execute_opts(300, NULL, "main.go",
			 "package main\n\nimport \"time\"\n\nfunc main() { time.Sleep(time.Hour) }\n",
			 NULL);
	expect_kind(r, "run", "timeout");
	assert_string_equal(gets(r, "signal"), "SIGTERM");
	assert_string_equal(gets(r, "result.message"),
			    "the program ran past its 0.3 s timeout and was killed");
	json_decref(r);

	/* output over the cap keeps head and tail; invalid UTF-8 is repaired */
	struct pipeline_config small = cfg;
	small.output_cap = 1000;
	json_t *req = json_pack(
		"{s:[{s:s,s:s}]}", "files", "path", "main.go", "content",
		"package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n\t\"strings\"\n)\n\n"
		"func main() {\n\tfmt.Print(\"HEAD\", strings.Repeat(\"x\", 1<<20), \"TAIL\")\n"
		"\tos.Stderr.Write([]byte{'a', 0xff, 'b'})\n}\n");
	r = pipeline_execute(&small, req, NULL, NULL);
	json_decref(req);
	expect_kind(r, "run", "ok");
	assert_true(json_is_true(get(r, "stdout_truncated")));
	assert_true(json_is_false(get(r, "stderr_truncated")));
	const char *out = gets(r, "stdout");
	assert_memory_equal(out, "HEAD", 4);
	assert_string_equal(out + strlen(out) - 4, "TAIL");
	assert_non_null(strstr(out, "bytes omitted]"));
	assert_string_equal(gets(r, "stderr"), "a\xef\xbf\xbd" "b");
	json_decref(r);
}

struct progress_log {
	char seen[256];
};

static void on_progress(void *ctx, const char *phase, const char *message)
{
	struct progress_log *l = ctx;
	assert_non_null(message);
	size_t n = strlen(l->seen);
	snprintf(l->seen + n, sizeof(l->seen) - n, "%s ", phase);
}

static void test_progress(void **state)
{
	(void)state;
	struct progress_log l = { "" };
	char src[1024];
	snprintf(src, sizeof(src), "%s\n// progress %ld\n", snippet_ok, (long)time(NULL));
	json_t *req = json_pack("{s:[{s:s,s:s}]}", "files", "path", "main.go", "content", src);
	json_t *r = pipeline_execute(&cfg, req, on_progress, &l);
	json_decref(req);
	expect_kind(r, "run", "ok");
	assert_string_equal(l.seen, "normalize build run ");
	json_decref(r);
}

static void test_build_error(void **state)
{
	(void)state;
	json_t *r = execute("main.go",
			    "package main\n\nimport \"app/helper\"\n\n"
			    "func main() {\n\thelper.H()\n\tx = 1\n}\n",
			    "helper/h.go", "package helper\n\nfunc H() int { return y }\n", NULL);
	expect_kind(r, "build", "build_error");
	assert_string_equal(gets(r, "mode"), "program");
	assert_string_equal(gets(r, "result.message"), "helper/h.go:3:23: undefined: y");
	json_t *d = get(r, "diagnostics");
	assert_true(json_array_size(d) >= 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(d, 0), "file")),
			    "helper/h.go");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(d, 0), "line")), 3);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(d, 0), "column")), 23);
	assert_non_null(strstr(gets(r, "build_output"), "# app/helper\nhelper/h.go:3:23"));
	assert_null(strstr(gets(r, "build_output"), app_dir));
	assert_true(json_is_null(get(r, "exit_code")));
	json_decref(r);

	/* the main package after the helper is fixed */
	r = execute("main.go",
		    "package main\n\nimport \"app/helper\"\n\n"
		    "func main() {\n\thelper.H()\n\tx = 1\n}\n",
		    "helper/h.go", "package helper\n\nfunc H() int { return 1 }\n", NULL);
	expect_kind(r, "build", "build_error");
	assert_string_equal(gets(r, "result.message"), "main.go:7:2: undefined: x");
	json_decref(r);
}

static void test_normalize_errors(void **state)
{
	(void)state;
	json_t *r = execute("main.go", "package main\n\nfunc helper() {}\n", NULL);
	expect_kind(r, "normalize", "normalize_error");
	assert_true(json_is_null(get(r, "mode")));
	assert_true(strlen(gets(r, "result.message")) > 10);
	json_decref(r);

	json_t *req = json_pack("{s:[{s:s,s:i}]}", "files", "path", "main.go", "content", 5);
	r = pipeline_execute(&cfg, req, NULL, NULL);
	json_decref(req);
	expect_kind(r, "normalize", "normalize_error");
	assert_non_null(strstr(gets(r, "result.message"), "files[0]"));
	json_decref(r);

	req = json_pack("{s:s}", "files", "nope");
	r = pipeline_execute(&cfg, req, NULL, NULL);
	json_decref(req);
	expect_kind(r, "normalize", "normalize_error");
	json_decref(r);
}

static void test_persist_and_env(void **state)
{
	(void)state;
	const char *writer = "package main\n\nimport \"os\"\n\nfunc main() {\n"
			     "\tos.WriteFile(\"persist/data.txt\", []byte(\"kept\"), 0o644)\n"
			     "\tos.WriteFile(\"junk.txt\", []byte(\"gone\"), 0o644)\n"
			     "\tos.MkdirAll(\"deep/a/b\", 0o755)\n}\n";
	json_t *r = execute("main.go", writer, NULL);
	expect_kind(r, "run", "ok");
	json_decref(r);
	char p[700];
	snprintf(p, sizeof(p), "%s/junk.txt", app_dir);
	assert_true(exists(p));

	const char *reader = "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n"
			     "\tb, err := os.ReadFile(\"persist/data.txt\")\n"
			     "\t_, err2 := os.Stat(\"junk.txt\")\n"
			     "\tfmt.Println(string(b), err, os.IsNotExist(err2), os.Getenv(\"FOO\"), "
			     "os.Getenv(\"HOME\"))\n}\n";
	r = execute_opts(0, json_pack("{s:s}", "FOO", "bar"), "main.go", reader, NULL);
	expect_kind(r, "run", "ok");
	char want[700];
	snprintf(want, sizeof(want), "kept <nil> true bar %s\n", app_dir);
	assert_string_equal(gets(r, "stdout"), want);
	json_decref(r);
	snprintf(p, sizeof(p), "%s/deep", app_dir);
	assert_false(exists(p));

	/* files sent into persist/ replace what is there, never writing through a link */
	char victim[600];
	snprintf(victim, sizeof(victim), "%s/victim.txt", root);
	writef(victim, "untouched");
	snprintf(p, sizeof(p), "%s/persist/hard.txt", app_dir);
	assert_int_equal(link(victim, p), 0);
	snprintf(p, sizeof(p), "%s/persist/soft.txt", app_dir);
	assert_int_equal(symlink(victim, p), 0);
	r = execute("main.go", reader, "persist/hard.txt", "new", "persist/soft.txt", "new", NULL);
	expect_kind(r, "run", "ok");
	json_decref(r);
	FILE *f = fopen(victim, "r");
	char vb[32] = "";
	assert_non_null(fgets(vb, sizeof(vb), f));
	fclose(f);
	assert_string_equal(vb, "untouched");
	snprintf(p, sizeof(p), "%s/persist/hard.txt", app_dir);
	f = fopen(p, "r");
	assert_non_null(fgets(vb, sizeof(vb), f));
	fclose(f);
	assert_string_equal(vb, "new");

	/* the contract variables cannot be overridden */
	r = execute_opts(0, json_pack("{s:s}", "KODE_GOPHER_RESULT", "/tmp/x"), "main.go", reader,
			 NULL);
	expect_kind(r, "internal", "internal_error");
	json_decref(r);
}

static void test_wipe_never_follows_symlinks(void **state)
{
	(void)state;
	char outside[600], p[700], q[700];
	snprintf(outside, sizeof(outside), "%s/outside", root);
	mkdir(outside, 0755);
	snprintf(p, sizeof(p), "%s/keep.txt", outside);
	writef(p, "precious");
	snprintf(p, sizeof(p), "%s/sub", outside);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/sub/keep2.txt", outside);
	writef(p, "precious");

	/* what a hostile program could leave in /app */
	mkdir(app_dir, 0755);
	snprintf(p, sizeof(p), "%s/link", app_dir);
	assert_int_equal(symlink(outside, p), 0);
	snprintf(p, sizeof(p), "%s/dir", app_dir);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/dir/link2", app_dir);
	snprintf(q, sizeof(q), "%s/sub", outside);
	assert_int_equal(symlink(q, p), 0);
	snprintf(p, sizeof(p), "%s/locked", app_dir);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/locked/f", app_dir);
	writef(p, "x");
	snprintf(p, sizeof(p), "%s/locked", app_dir);
	chmod(p, 0);
	/* persist itself replaced by a link to the outside */
	snprintf(p, sizeof(p), "%s/persist", app_dir);
	char cmd[800];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", p);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(symlink(outside, p), 0);
	/* a deep tree (more levels than the wipe keeps open at once) */
	snprintf(cmd, sizeof(cmd), "cd %s && d=deep; for i in $(seq 1 150); do d=$d/d; done; "
				   "mkdir -p $d && touch $d/f",
		 app_dir);
	assert_int_equal(system(cmd), 0);

	json_t *r = execute("main.go", "package main\n\nfunc main() {}\n", NULL);
	expect_kind(r, "run", "ok");
	json_decref(r);

	snprintf(p, sizeof(p), "%s/keep.txt", outside);
	assert_true(exists(p));
	snprintf(p, sizeof(p), "%s/sub/keep2.txt", outside);
	assert_true(exists(p));
	snprintf(p, sizeof(p), "%s/link", app_dir);
	assert_false(exists(p));
	snprintf(p, sizeof(p), "%s/dir", app_dir);
	assert_false(exists(p));
	snprintf(p, sizeof(p), "%s/locked", app_dir);
	assert_false(exists(p));
	snprintf(p, sizeof(p), "%s/deep", app_dir);
	assert_false(exists(p));
	struct stat st;
	snprintf(p, sizeof(p), "%s/persist", app_dir);
	assert_int_equal(lstat(p, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	/* nothing else is left, not even the pieces of the deep tree moved up while wiping */
	snprintf(cmd, sizeof(cmd), "test \"$(ls -A %s | tr '\\n' ' ')\" = "
				   "'go.mod go.sum main.go out persist '",
		 app_dir);
	assert_int_equal(system(cmd), 0);
}

/* ---- the direct build path (agent/fastbuild.c) ---- */

/* std_snippet - a standard-library snippet returning "direct <tag>" (with strings imported,
 * the tag upper-cased); the text lives in a ring of static buffers */
static const char *std_snippet(const char *tag, const char *extra)
{
	static char ring[4][1024];
	static int next;
	char *out = ring[next++ % 4];
	bool up = extra && strcmp(extra, "strings") == 0;
	snprintf(out, sizeof(ring[0]),
		 "package snippet\n\nimport (\n\t\"context\"\n\t\"fmt\"\n%s%s%s)\n\n"
		 "func run(ctx context.Context) (any, error) {\n"
		 "\treturn fmt.Sprintf(\"direct %%s\", %s\"%s\"%s), nil\n}\n",
		 extra ? "\t\"" : "", extra ? extra : "", extra ? "\"\n" : "",
		 up ? "strings.ToUpper(" : "", tag, up ? ")" : "");
	return out;
}

/* run_path - execute the files (path, content, ..., NULL), expect kind ok with want_value;
 * the result replaces *keep; returns build_path */
static const char *run_path(json_t **keep, const char *want_value, const char *path, const char *content, ...)
{
	va_list ap;
	va_start(ap, content);
	json_t *files = json_array();
	for (const char *p = path, *c = content; p; p = va_arg(ap, const char *), c = p ? va_arg(ap, const char *) : NULL)
		json_array_append_new(files, json_pack("{s:s,s:s}", "path", p, "content", c));
	va_end(ap);
	json_t *req = json_pack("{s:o}", "files", files);
	json_t *r = pipeline_execute(&cfg, req, NULL, NULL);
	json_decref(req);
	assert_non_null(r);
	expect_kind(r, "run", "ok");
	if (want_value && strcmp(gets(r, "result.value"), want_value) != 0)
		dump(r);
	if (want_value)
		assert_string_equal(gets(r, "result.value"), want_value);
	json_decref(*keep);
	*keep = r;
	return gets(r, "build_path");
}

/* reason - build_path_reason of a result */
static const char *reason(json_t *r)
{
	const char *s = json_string_value(json_object_get(r, "build_path_reason"));
	return s ? s : "";
}

/* expect_path - build_path is want; for "go build", the reason holds because */
static void expect_path(json_t *r, const char *want, const char *because)
{
	const char *got = gets(r, "build_path");
	if (strcmp(got, want) != 0 || (because && !strstr(reason(r), because))) {
		fprintf(stderr, "build_path %s (%s), wanted %s (%s)\n", got, reason(r), want,
			because ? because : "");
		dump(r);
	}
	assert_string_equal(got, want);
	if (because)
		assert_non_null(strstr(reason(r), because));
}

/* newest_bin - the most recently modified binary in state_dir/bin */
static void newest_bin(char *out, size_t len)
{
	char dir[600];
	snprintf(dir, sizeof(dir), "%s/bin", state_dir);
	DIR *d = opendir(dir);
	assert_non_null(d);
	struct dirent *de;
	struct timespec best = { 0 };
	out[0] = '\0';
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		struct stat st;
		char p[900];
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		if (stat(p, &st) == 0 && (st.st_mtim.tv_sec > best.tv_sec ||
					  (st.st_mtim.tv_sec == best.tv_sec && st.st_mtim.tv_nsec > best.tv_nsec))) {
			best = st.st_mtim;
			snprintf(out, len, "%s", p);
		}
	}
	closedir(d);
	assert_true(out[0] != '\0');
}

/* slurp - a whole file */
static unsigned char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *b = malloc((size_t)n);
	assert_non_null(b);
	assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return b;
}

/* blank_build_ids - zero the Go build ID note and the GNU build-id note the linker derives
 * from it (the two things that name a build rather than describe it); returns how many */
static int blank_build_ids(unsigned char *b, size_t n)
{
	assert_true(n > sizeof(Elf64_Ehdr) && memcmp(b, ELFMAG, SELFMAG) == 0);
	Elf64_Ehdr *eh = (Elf64_Ehdr *)b;
	assert_true(eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) <= n);
	Elf64_Shdr *sh = (Elf64_Shdr *)(b + eh->e_shoff);
	const char *names = (const char *)b + sh[eh->e_shstrndx].sh_offset;
	int k = 0;
	for (int i = 0; i < eh->e_shnum; i++) {
		const char *nm = names + sh[i].sh_name;
		if (sh[i].sh_type == SHT_NOTE && (strcmp(nm, ".note.go.buildid") == 0 ||
						  strcmp(nm, ".note.gnu.build-id") == 0)) {
			assert_true(sh[i].sh_offset + sh[i].sh_size <= n);
			memset(b + sh[i].sh_offset, 0, sh[i].sh_size);
			k++;
		}
	}
	return k;
}

/* go_build_by_hand - go build in app_dir with the agent's flags and environment, to out;
 * gcflags, when not NULL, stands for the agent's -gcflags= flag */
static void go_build_by_hand(const char *out, const char *gcflags)
{
	struct gobuild_env e = { .go_bin = cfg.go_bin ? cfg.go_bin : "go", .path = getenv("PATH"),
				 .gocache = cfg.gocache_dir, .gomodcache = modcache };
	char home[600], tmp[600];
	snprintf(home, sizeof(home), "%s/home", state_dir);
	snprintf(tmp, sizeof(tmp), "%s/tmp", state_dir);
	e.home = home;
	e.tmpdir = tmp;
	char **env = gobuild_environ(&e);
	assert_non_null(env);
	const char *argv[16];
	size_t na = 0;
	argv[na++] = e.go_bin;
	argv[na++] = "build";
	for (const char *const *f = gobuild_build_flags; *f; f++)
		argv[na++] = gcflags && strncmp(*f, "-gcflags=", 9) == 0 ? gcflags : *f;
	argv[na++] = "-o";
	argv[na++] = out;
	argv[na++] = ".";
	argv[na] = NULL;
	struct runproc_opts o = { .argv = argv, .envp = (const char *const *)env, .cwd = app_dir,
				  .timeout_ms = 300000, .merge_stderr = true };
	struct runproc_result r;
	assert_int_equal(runproc_run(&o, &r), 0);
	if (r.exit_code != 0)
		fprintf(stderr, "go build by hand: %s\n", r.out.data);
	assert_int_equal(r.exit_code, 0);
	runproc_result_free(&r);
	gobuild_strv_free(env);
}

/* export_file - the build cache's file for a standard package, as go list names it */
static void export_file(const char *pkg, char *out, size_t len)
{
	char cmd[1200];
	snprintf(cmd, sizeof(cmd), "cd %s && GOCACHE=%s GOMODCACHE=%s GOFLAGS=-mod=mod GOTOOLCHAIN=local "
		 "CGO_ENABLED=0 GOENV=off GOPROXY=off go list -trimpath -export -f '{{.Export}}' %s", app_dir,
		 cfg.gocache_dir, modcache, pkg);
	FILE *f = popen(cmd, "r");
	assert_non_null(f);
	assert_non_null(fgets(out, (int)len, f));
	pclose(f);
	out[strcspn(out, "\n")] = '\0';
	assert_true(out[0] == '/');
}

static void test_direct_build(void **state)
{
	(void)state;
	fastbuild_forget_all();
	/* a build cache of this test's own: it touches and deletes package files, and other
	 * test runs on the machine share the default one (their go builds would touch what this
	 * test's plans check, and this test's deletions would be theirs) */
	char priv[600], cmd[1400];
	const char *shared = cfg.gocache_dir;
	snprintf(priv, sizeof(priv), "%s/gocache", root);
	snprintf(cmd, sizeof(cmd), "if [ -d '%s' ]; then cp -a '%s' '%s'; else mkdir -p '%s'; fi",
		 shared, shared, priv, priv);
	assert_int_equal(system(cmd), 0);
	cfg.gocache_dir = priv;
	json_t *r = NULL;
	const char *a = std_snippet("one", NULL), *b = std_snippet("two", NULL);

	/* the first build of an import set is go build's; it leaves the plan */
	run_path(&r, "direct one", "main.go", a, NULL);
	expect_path(r, "go build", "not built by go build before");
	run_path(&r, "direct two", "main.go", b, NULL);
	expect_path(r, "direct", NULL);

	/* the binary is go build's, byte for byte, but for the build ID and the GNU build-id
	 * note derived from it */
	char direct[900], byhand[900];
	newest_bin(direct, sizeof(direct));
	snprintf(byhand, sizeof(byhand), "%s/by-hand", root);
	go_build_by_hand(byhand, NULL);
	size_t dl, hl;
	unsigned char *db = slurp(direct, &dl), *hb = slurp(byhand, &hl);
	assert_int_equal(dl, hl);
	assert_true(memcmp(db, hb, dl) != 0); /* the build IDs differ */
	assert_int_equal(blank_build_ids(db, dl), 2);
	assert_int_equal(blank_build_ids(hb, hl), 2);
	assert_int_equal(memcmp(db, hb, dl), 0);
	free(hb);
	unlink(byhand);
	/* and the main package was compiled without DWARF (-dwarf=false, as go run does): with
	 * only -l the same source links to other bytes */
	go_build_by_hand(byhand, "-gcflags=-l");
	hb = slurp(byhand, &hl);
	assert_int_equal(blank_build_ids(hb, hl), 2);
	assert_true(hl != dl || memcmp(db, hb, dl) != 0);
	free(db);
	free(hb);
	unlink(byhand);

	/* a new import: go build, then direct for that set too */
	const char *c = std_snippet("three", "strings"), *d = std_snippet("four", "strings");
	run_path(&r, "direct THREE", "main.go", c, NULL);
	expect_path(r, "go build", "not built by go build before");
	run_path(&r, "direct FOUR", "main.go", d, NULL);
	expect_path(r, "direct", NULL);
	/* the first set's plan is still there */
	a = std_snippet("five", NULL);
	run_path(&r, "direct five", "main.go", a, NULL);
	expect_path(r, "direct", NULL);

	/* a helper package: always go build */
	run_path(&r, "6", "main.go",
		 "package snippet\n\nimport (\n\t\"context\"\n\t\"fmt\"\n\n\t\"app/h\"\n)\n\n"
		 "func run(ctx context.Context) (any, error) { return fmt.Sprint(h.N), nil }\n",
		 "h/h.go", "package h\n\nconst N = 6\n", NULL);
	expect_path(r, "go build", "helper packages");
	/* a second file of the main package is fine; a build constraint or an OS suffix is not */
	run_path(&r, "direct seven", "main.go", std_snippet("seven", NULL), "more.go",
		 "package snippet\n\nconst More = 1\n", NULL);
	expect_path(r, "direct", NULL);
	run_path(&r, "direct eight", "main.go", std_snippet("eight", NULL), "more_linux.go",
		 "package snippet\n\nconst More = 1\n", NULL);
	expect_path(r, "go build", "GOOS");
	run_path(&r, "direct nine", "main.go", std_snippet("nine", NULL), "more.go",
		 "//go:build linux\n\npackage snippet\n\nconst More = 1\n", NULL);
	expect_path(r, "go build", "build constraint");

	/* a package file in the build cache touched, then one deleted: go build, which puts it
	 * back, then direct again */
	char exp[900];
	export_file("fmt", exp, sizeof(exp));
	struct timespec ts[2] = { { .tv_sec = 1000000000 }, { .tv_sec = 1000000000 } };
	assert_int_equal(utimensat(AT_FDCWD, exp, ts, 0), 0);
	run_path(&r, "direct ten", "main.go", std_snippet("ten", NULL), NULL);
	expect_path(r, "go build", "package fmt changed or is gone");
	run_path(&r, "direct eleven", "main.go", std_snippet("eleven", NULL), NULL);
	expect_path(r, "direct", NULL);
	export_file("fmt", exp, sizeof(exp));
	assert_int_equal(unlink(exp), 0);
	run_path(&r, "direct twelve", "main.go", std_snippet("twelve", NULL), NULL);
	expect_path(r, "go build", "package fmt changed or is gone");
	/* that go build compiled fmt again and linked it from its work directory, which is gone:
	 * no plan from it; the next go build links fmt from the cache */
	run_path(&r, "direct twelve b", "main.go", std_snippet("twelve b", NULL), NULL);
	expect_path(r, "go build", "not built by go build before");
	run_path(&r, "direct thirteen", "main.go", std_snippet("thirteen", NULL), NULL);
	expect_path(r, "direct", NULL);

	/* the session's go.mod changed (as a resolve changes it): go build */
	char gm[700];
	snprintf(gm, sizeof(gm), "%s/go.mod", state_dir);
	char gs[700];
	snprintf(gs, sizeof(gs), "%s/go.sum", state_dir);
	/* (an earlier test may have left the session a go.mod: put back what was there) */
	size_t ogml = 0, ogsl = 0;
	unsigned char *ogm = exists(gm) ? slurp(gm, &ogml) : NULL;
	unsigned char *ogs = exists(gs) ? slurp(gs, &ogsl) : NULL;
	writef(gm, "module app\n\ngo 1.26\n\n// changed\n");
	writef(gs, "");
	run_path(&r, "direct fourteen", "main.go", std_snippet("fourteen", NULL), NULL);
	expect_path(r, "go build", "not built by go build before");
	run_path(&r, "direct fifteen", "main.go", std_snippet("fifteen", NULL), NULL);
	expect_path(r, "direct", NULL);
	unlink(gm);
	unlink(gs);
	if (ogm) {
		FILE *f = fopen(gm, "wb");
		assert_non_null(f);
		fwrite(ogm, 1, ogml, f);
		fclose(f);
		f = fopen(gs, "wb");
		assert_non_null(f);
		if (ogs)
			fwrite(ogs, 1, ogsl, f);
		fclose(f);
	}
	free(ogm);
	free(ogs);

	/* another toolchain (here: another go binary), then the same one replaced in place */
	char wrap[700];
	snprintf(wrap, sizeof(wrap), "%s/go-wrapper", root);
	writef(wrap, "#!/bin/sh\nexec go \"$@\"\n");
	chmod(wrap, 0755);
	cfg.go_bin = wrap;
	run_path(&r, "direct sixteen", "main.go", std_snippet("sixteen", NULL), NULL);
	expect_path(r, "go build", "not built by go build before");
	run_path(&r, "direct seventeen", "main.go", std_snippet("seventeen", NULL), NULL);
	expect_path(r, "direct", NULL);
	unlink(wrap);
	writef(wrap, "#!/bin/sh\n# a new version\nexec go \"$@\"\n");
	chmod(wrap, 0755);
	run_path(&r, "direct eighteen", "main.go", std_snippet("eighteen", NULL), NULL);
	expect_path(r, "go build", "not built by go build before");
	cfg.go_bin = NULL;

	/* the agent's environment reaches the go command (GOROOT here): go build */
	run_path(&r, "direct nineteen", "main.go", std_snippet("nineteen", NULL), NULL);
	expect_path(r, "direct", NULL);
	char goroot[600];
	FILE *f = popen("go env GOROOT", "r");
	assert_non_null(f);
	assert_non_null(fgets(goroot, sizeof(goroot), f));
	pclose(f);
	goroot[strcspn(goroot, "\n")] = '\0';
	setenv("GOROOT", goroot, 1);
	run_path(&r, "direct twenty", "main.go", std_snippet("twenty", NULL), NULL);
	expect_path(r, "go build", "not built by go build before");
	unsetenv("GOROOT");
	/* GOFLAGS is the agent's own (-mod=mod) for both paths: one in its environment changes
	 * neither, so the plan holds */
	run_path(&r, "direct twenty b", "main.go", std_snippet("twenty b", NULL), NULL);
	setenv("GOFLAGS", "-gcflags=-N -tags=evil", 1);
	run_path(&r, "direct twenty c", "main.go", std_snippet("twenty c", NULL), NULL);
	expect_path(r, "direct", NULL);
	unsetenv("GOFLAGS");

	/* code that does not compile: the direct compile fails, go build reports the errors */
	run_path(&r, "direct twentyone", "main.go", std_snippet("twentyone", NULL), NULL);
	json_t *req = json_pack("{s:[{s:s,s:s}]}", "files", "path", "main.go", "content",
				"package snippet\n\nimport (\n\t\"context\"\n\t\"fmt\"\n)\n\n"
				"func run(ctx context.Context) (any, error) { return fmt.Sprint(nope), nil }\n");
	json_decref(r);
	r = pipeline_execute(&cfg, req, NULL, NULL);
	json_decref(req);
	expect_kind(r, "build", "build_error");
	expect_path(r, "go build", "direct compile failed");
	assert_non_null(strstr(gets(r, "result.message"), "undefined: nope"));
	assert_non_null(strstr(gets(r, "build_output"), "# app"));

	/* what a hostile call could try at the boundary: an import the reader does not see (after
	 * a declaration, where go refuses it too) gets go build's error, not a stale importcfg's;
	 * a file name that reads as a compiler flag is a file */
	run_path(&r, "direct twentytwo", "main.go", std_snippet("twentytwo", NULL), NULL);
	req = json_pack("{s:[{s:s,s:s}]}", "files", "path", "main.go", "content",
			"package snippet\n\nimport (\n\t\"context\"\n\t\"fmt\"\n)\n\nvar x = 1\n\n"
			"import \"os\"\n\nfunc run(ctx context.Context) (any, error) { return fmt.Sprint(os.Args[0], x), nil }\n");
	json_decref(r);
	r = pipeline_execute(&cfg, req, NULL, NULL);
	json_decref(req);
	expect_kind(r, "build", "build_error");
	expect_path(r, "go build", "direct compile failed");
	assert_non_null(strstr(gets(r, "build_output"), "imports must appear before other declarations"));
	run_path(&r, "direct twentythree", "main.go", std_snippet("twentythree", NULL), "-dynlink.go",
		 "package snippet\n\nconst dash = 1\n", NULL);
	expect_path(r, "direct", NULL);

	json_decref(r);
	fastbuild_forget_all();
	cfg.gocache_dir = shared;
}

static void test_resolve_through_proxy(void **state)
{
	(void)state;
	const char *src = "package x\n\nimport (\n\t\"context\"\n\n\t\"example.com/kghello\"\n)\n\n"
			  "func run(ctx context.Context) (any, error) {\n"
			  "\treturn kghello.Hello(), nil\n}\n";
	json_t *r = execute("main.go", src, NULL);
	expect_kind(r, "run", "ok");
	assert_true(json_is_true(get(r, "tidied")));
	assert_string_equal(gets(r, "result.value"), "hello from kghello");
	assert_non_null(strstr(gets(r, "tidy_output"), "$ go get"));
	assert_non_null(strstr(gets(r, "tidy_output"), "go: added example.com/kghello v1.0.0"));
	json_decref(r);

	/* the session's go.mod now covers it: no second resolve, and the binary is cached */
	r = execute("main.go", src, NULL);
	expect_kind(r, "run", "ok");
	assert_true(json_is_false(get(r, "tidied")));
	assert_true(json_is_true(get(r, "cached_build")));
	json_decref(r);

	char p[700];
	snprintf(p, sizeof(p), "%s/go.mod", state_dir);
	FILE *f = fopen(p, "r");
	assert_non_null(f);
	char buf[4096];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	assert_non_null(strstr(buf, "example.com/kghello v1.0.0"));

	/* go doc sees the session's modules */
	json_t *req = json_pack("{s:s,s:s}", "package", "example.com/kghello", "symbol", "Hello");
	r = pipeline_doc(&cfg, req);
	json_decref(req);
	if (!json_is_true(get(r, "ok")))
		dump(r);
	assert_true(json_is_true(get(r, "ok")));
	assert_non_null(strstr(gets(r, "text"), "Hello greets."));
	json_decref(r);

	/* a module no proxy has is a build error the model can act on */
	r = execute("main.go",
		    "package main\n\nimport \"example.com/nothere/pkg\"\n\nfunc main() { pkg.X() }\n",
		    NULL);
	expect_kind(r, "build", "build_error");
	assert_true(json_is_false(get(r, "tidied")));
	assert_non_null(strstr(gets(r, "result.message"), "example.com/nothere/pkg"));
	assert_true(json_array_size(get(r, "diagnostics")) >= 1);
	assert_null(strstr(gets(r, "build_output"), "GOPROXY=off"));
	json_decref(r);
}

static void test_tidy_keeps_lockfile_requirements(void **state)
{
	(void)state;
	/* `go mod tidy` (the fallback when go get fails) drops requirements nothing imports; the
	 * lockfile's must survive it, sums included, or later calls lose the precompiled set.
	 * Runs after test_resolve_through_proxy, whose module is now in the module cache. */
	char dir[600], p[700];
	snprintf(dir, sizeof(dir), "%s/tidy", root);
	mkdir(dir, 0755);
	snprintf(p, sizeof(p), "%s/go.mod", dir);
	writef(p, "module app\n\ngo 1.26\n\nrequire example.com/kghello v1.0.0\n");
	char sum[700];
	snprintf(sum, sizeof(sum), "%s/go.sum", state_dir);
	FILE *f = fopen(sum, "r");
	assert_non_null(f);
	char sums[4096];
	size_t n = fread(sums, 1, sizeof(sums) - 1, f);
	fclose(f);
	sums[n] = '\0';
	assert_non_null(strstr(sums, "example.com/kghello v1.0.0 h1:"));
	snprintf(p, sizeof(p), "%s/go.sum", dir);
	writef(p, sums);
	snprintf(p, sizeof(p), "%s/main.go", dir);
	writef(p, "package main\n\nfunc main() {}\n");

	char home[700], tmp[700];
	snprintf(home, sizeof(home), "%s/home", state_dir);
	snprintf(tmp, sizeof(tmp), "%s/tmp", state_dir);
	struct gobuild_env e = {
		.go_bin = "go",
		.path = getenv("PATH"),
		.home = home,
		.gomodcache = modcache,
		.gocache = cfg.gocache_dir,
		.tmpdir = tmp,
	};
	char *why = NULL;
	char *tlog = NULL;
	assert_int_equal(gobuild_resolve(&e, dir, NULL, 0, &why, &tlog), 0);
	assert_non_null(strstr(tlog, "$ go mod tidy"));
	free(tlog);
	assert_null(why);
	snprintf(p, sizeof(p), "%s/go.mod", dir);
	f = fopen(p, "r");
	assert_non_null(f);
	char buf[4096];
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	assert_non_null(strstr(buf, "example.com/kghello v1.0.0"));
	snprintf(p, sizeof(p), "%s/go.sum", dir);
	f = fopen(p, "r");
	assert_non_null(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	assert_non_null(strstr(buf, "example.com/kghello v1.0.0 h1:"));
}

static void test_doc(void **state)
{
	(void)state;
	json_t *req = json_pack("{s:s,s:s}", "package", "fmt", "symbol", "Println");
	json_t *r = pipeline_doc(&cfg, req);
	json_decref(req);
	if (!json_is_true(get(r, "ok")))
		dump(r);
	assert_true(json_is_true(get(r, "ok")));
	assert_non_null(strstr(gets(r, "text"), "func Println(a ...any) (n int, err error)"));
	assert_true(json_is_false(get(r, "truncated")));
	json_decref(r);

	req = json_pack("{s:s}", "package", "cloud.google.com/go/nope");
	r = pipeline_doc(&cfg, req);
	json_decref(req);
	assert_true(json_is_false(get(r, "ok")));
	assert_non_null(strstr(gets(r, "error"),
			       "no package cloud.google.com/go/nope in the session's module: "));
	assert_null(strstr(gets(r, "error"), "GOPATH"));
	json_decref(r);

	req = json_pack("{s:s}", "package", "nope");
	r = pipeline_doc(&cfg, req);
	json_decref(req);
	assert_true(json_is_false(get(r, "ok")));
	assert_non_null(strstr(gets(r, "error"), "no package nope in the session's module: "
						 "package nope is not in std"));
	assert_null(strstr(gets(r, "error"), state_dir));
	json_decref(r);

	req = json_pack("{s:s,s:s}", "package", "fmt", "symbol", "Nope");
	r = pipeline_doc(&cfg, req);
	json_decref(req);
	assert_true(json_is_false(get(r, "ok")));
	assert_non_null(strstr(gets(r, "error"), "no symbol Nope in package fmt"));
	json_decref(r);

	/* full package docs are capped */
	struct pipeline_config small = cfg;
	small.doc_cap = 200;
	req = json_pack("{s:s}", "package", "net/http");
	r = pipeline_doc(&small, req);
	json_decref(req);
	assert_true(json_is_true(get(r, "ok")));
	assert_true(json_is_true(get(r, "truncated")));
	assert_true(strlen(gets(r, "text")) <= 200);
	json_decref(r);

	const char *bad[] = { "-toolexec=x", "", "../etc", "a b", "/abs" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		req = json_pack("{s:s}", "package", bad[i]);
		r = pipeline_doc(&cfg, req);
		json_decref(req);
		assert_true(json_is_false(get(r, "ok")));
		assert_non_null(strstr(gets(r, "error"), "package must be an import path"));
		json_decref(r);
	}
	req = json_pack("{s:s,s:s}", "package", "fmt", "symbol", "-x");
	r = pipeline_doc(&cfg, req);
	json_decref(req);
	assert_true(json_is_false(get(r, "ok")));
	json_decref(r);
}


/* plan_edit - the test runtime's stdplan: the pristine copy with one sed expression applied
 * (NULL: as made), then a new fastbuild memory, so the next call asks the plan again */
static void plan_edit(const char *sed)
{
	char cmd[2400];
	if (sed)
		snprintf(cmd, sizeof(cmd), "sed '%s' %s/stdplan.orig > %s/stdplan", sed, runtime_dir,
			 runtime_dir);
	else
		snprintf(cmd, sizeof(cmd), "cp %s/stdplan.orig %s/stdplan", runtime_dir, runtime_dir);
	assert_int_equal(system(cmd), 0);
	fastbuild_forget_all();
}

/* seeded - one fresh standard-library call, with no plan in memory, built by path (why) */
static void seeded(const char *tag, const char *extra, const char *path, const char *why)
{
	json_t *r = NULL;
	char want[64];
	snprintf(want, sizeof(want), "direct %s", tag);
	if (extra && strcmp(extra, "strings") == 0)
		for (char *p = want + 7; *p; p++) /* the tag, through strings.ToUpper */
			*p = (char)toupper((unsigned char)*p);
	run_path(&r, want, "main.go", std_snippet(tag, extra), NULL);
	expect_path(r, path, why);
	json_decref(r);
}

/* test_seeded_plan - the runtime's standard-library plan (runtime/stdplan.sh, agent/stdplan.c):
 * a sandbox's first standard-library build is direct, byte for byte go build's; anything the
 * plan names that differs from what the agent sees sends the call to go build */
static void test_seeded_plan(void **state)
{
	(void)state;
	assert_int_equal(access("runtime/stdplan.sh", X_OK), 0);
	char priv[600], cmd[4200], p[700];
	const char *shared = cfg.gocache_dir;
	snprintf(priv, sizeof(priv), "%s/gocache-seed", root);
	snprintf(cmd, sizeof(cmd), "if [ -d '%s' ]; then cp -a '%s' '%s'; else mkdir -p '%s'; fi",
		 shared, shared, priv, priv);
	assert_int_equal(system(cmd), 0);
	cfg.gocache_dir = priv;
	/* the lockfile's go.mod, as a new sandbox has it (an earlier test may have saved one) */
	snprintf(cmd, sizeof(cmd), "rm -f %s/go.mod %s/go.sum", state_dir, state_dir);
	assert_int_equal(system(cmd), 0);
	snprintf(p, sizeof(p), "%s/stamp", runtime_dir);
	writef(p, "test-runtime-1\n");
	/* the plan of the packages the generated main and the snippets import (the real one has
	 * all of std: tests/e2e/exec.test.mjs); the cache is this test's, so go may fill it */
	snprintf(cmd, sizeof(cmd), "RUNTIME_DIR=%s GOCACHE_DIR=%s GOMODCACHE_DIR=%s "
		 "STDPLAN_CACHE_WRITABLE=1 STDPLAN_PACKAGES='bytes context encoding/json fmt os "
		 "os/signal path/filepath runtime/debug strconv syscall time strings' "
		 "runtime/stdplan.sh && cp %s/stdplan %s/stdplan.orig", runtime_dir, priv, modcache,
		 runtime_dir, runtime_dir);
	assert_int_equal(system(cmd), 0);
	fastbuild_forget_all();

	/* no go build before, and yet direct: for the generated main's imports and with strings */
	json_t *r = NULL;
	run_path(&r, "direct s1", "main.go", std_snippet("s1", NULL), NULL);
	expect_path(r, "direct", NULL);
	json_decref(r);
	r = NULL;
	char direct[900], byhand[900];
	newest_bin(direct, sizeof(direct));
	snprintf(byhand, sizeof(byhand), "%s/by-hand-seed", root);
	go_build_by_hand(byhand, NULL);
	size_t dl, hl;
	unsigned char *db = slurp(direct, &dl), *hb = slurp(byhand, &hl);
	assert_int_equal(dl, hl);
	assert_int_equal(blank_build_ids(db, dl), 2);
	assert_int_equal(blank_build_ids(hb, hl), 2);
	assert_int_equal(memcmp(db, hb, dl), 0);
	free(db);
	free(hb);
	unlink(byhand);
	seeded("s2", "strings", "direct", NULL);

	/* a package the plan does not hold, and one a main package may not import */
	fastbuild_forget_all();
	run_path(&r, NULL, "main.go", "package main\n\nimport _ \"archive/tar\"\n\nfunc main() {}\n", NULL);
	expect_path(r, "go build", "archive/tar is not a standard package");
	json_decref(r);
	json_t *req = json_pack("{s:[{s:s,s:s}]}", "files", "path", "main.go", "content",
				"package main\n\nimport _ \"internal/abi\"\n\nfunc main() {}\n");
	fastbuild_forget_all();
	r = pipeline_execute(&cfg, req, NULL, NULL);
	json_decref(req);
	expect_kind(r, "build", "build_error");
	assert_non_null(strstr(reason(r), "internal/abi is not a standard package a main package may import"));
	assert_non_null(strstr(gets(r, "build_output"), "use of internal package"));
	json_decref(r);

	/* each thing the plan names, changed */
	plan_edit("s/^stamp .*/stamp test-runtime-0/");
	seeded("s4", NULL, "go build", "made for another runtime");
	plan_edit("s/^version .*/version go1.0/");
	seeded("s5", NULL, "go build", "is for go1.0");
	plan_edit("s|^gocache .*|gocache /elsewhere|");
	seeded("s6", NULL, "go build", "another build cache");
	plan_edit("s/^flags .*/flags -trimpath/");
	seeded("s7", NULL, "go build", "other build flags");
	plan_edit("s/^env CGO_ENABLED=0/env CGO_ENABLED=1/");
	seeded("s8", NULL, "go build", "another environment");
	plan_edit("/^tool .*\\/compile /s/ [0-9]*$/ 1/");
	seeded("s9", NULL, "go build", "compile changed since");
	plan_edit("/^tool .*\\/link /d");
	seeded("s10", NULL, "go build", "incomplete");
	plan_edit("s/^lock .*/lock 00/");
	seeded("s11", NULL, "go build", "another lockfile");
	plan_edit("/^pkg fmt /s/ [0-9]* / 1 /");
	seeded("s12", NULL, "go build", "package fmt is not the one");
	plan_edit("s|^pkg fmt [^ ]* |pkg fmt /etc/passwd |");
	seeded("s13", NULL, "go build", "no file for package fmt");
	plan_edit("s/^kode-gopher std plan v1/kode-gopher std plan v2/");
	seeded("s14", NULL, "go build", "another version");
	plan_edit("/^pkg internal\\/bytealg /d"); /* an import of the imports' */
	seeded("s15", NULL, "go build", "does not name internal/bytealg, an import of");
	snprintf(cmd, sizeof(cmd), "head -c 300 %s/stdplan.orig > %s/stdplan", runtime_dir, runtime_dir);
	assert_int_equal(system(cmd), 0);
	fastbuild_forget_all();
	seeded("s16", NULL, "go build", "cut short");
	snprintf(p, sizeof(p), "%s/stdplan", runtime_dir);
	unlink(p);
	fastbuild_forget_all();
	seeded("s17", NULL, "go build", "has no standard-library plan");
	/* the runtime rebuilt (its stamp) under the plan */
	plan_edit(NULL);
	seeded("s18", NULL, "direct", NULL);
	snprintf(p, sizeof(p), "%s/stamp", runtime_dir);
	writef(p, "test-runtime-2\n");
	fastbuild_forget_all();
	seeded("s19", NULL, "go build", "made for another runtime");
	writef(p, "test-runtime-1\n");
	/* a session whose go.mod is no longer the lockfile's */
	plan_edit(NULL);
	snprintf(p, sizeof(p), "%s/go.mod", state_dir);
	writef(p, "module app\n\ngo 1.26\n\n// changed\n");
	snprintf(p, sizeof(p), "%s/go.sum", state_dir);
	writef(p, "");
	seeded("s20", NULL, "go build", "go.mod is not the runtime's lockfile");
	snprintf(cmd, sizeof(cmd), "rm -f %s/go.mod %s/go.sum %s/stdplan %s/stdplan.orig %s/stamp",
		 state_dir, state_dir, runtime_dir, runtime_dir, runtime_dir);
	assert_int_equal(system(cmd), 0);
	fastbuild_forget_all();
	cfg.gocache_dir = shared;
}


/* test_telemetry_off - the go command's telemetry is off in the agent's home (its mode file):
 * no counters kept there, so no crash-watching second go process with each go command */
static void test_telemetry_off(void **state)
{
	(void)state;
	json_t *r = execute("main.go", "package main\n\nfunc main() { println(\"telemetry\") }\n", NULL);
	expect_kind(r, "run", "ok");
	json_decref(r);
	char p[700];
	snprintf(p, sizeof(p), "%s/home/.config/go/telemetry/mode", state_dir);
	size_t n = 0;
	unsigned char *m = slurp(p, &n);
	assert_int_equal(n, 4);
	assert_memory_equal(m, "off\n", 4);
	free(m);
	snprintf(p, sizeof(p), "%s/home/.config/go/telemetry/local", state_dir);
	assert_false(exists(p));
}

/* test_uncovered - the imports go.mod cannot provide, known before any build (issue 17) */
static void test_uncovered(void **state)
{
	(void)state;
	const char *mod = "module app\n\ngo 1.26\n\nrequire github.com/google/btree v1.1.3\n"
			  "require (\n\tcloud.google.com/go v0.1.0\n\t\"golang.org/x/text\" v0.3.0 // indirect\n)\n"
			  "replace github.com/dustin/go-humanize => ./x\n";
	struct gobuild_modfiles m = { .gomod = (char *)mod, .gomod_len = strlen(mod) };
	char *imports[] = { "fmt", "app/util", "github.com/google/btree", "github.com/google/btreeX",
			    "github.com/dustin/go-humanize", "cloud.google.com/go/storage",
			    "golang.org/x/text/language", "-flag.example/x", "example.com/a b",
			    "github.com/google/btreeX", NULL };
	char **u = NULL;
	size_t nu = 0;
	assert_int_equal(gobuild_uncovered(&m, imports, 10, &u, &nu), 0);
	assert_int_equal(nu, 2);
	assert_string_equal(u[0], "github.com/google/btreeX"); /* once, though imported twice */
	assert_string_equal(u[1], "github.com/dustin/go-humanize"); /* a replace is no requirement */
	assert_null(u[2]);
	gobuild_strv_free(u);
	/* no go.mod at all: every fetchable import */
	struct gobuild_modfiles none = { 0 };
	assert_int_equal(gobuild_uncovered(&none, imports, 10, &u, &nu), 0);
	assert_int_equal(nu, 5);
	gobuild_strv_free(u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_snippet_ok_then_cached),
		cmocka_unit_test(test_snippet_error),
		cmocka_unit_test(test_snippet_panic),
		cmocka_unit_test(test_snippet_timeout),
		cmocka_unit_test(test_program_exit_and_panic),
		cmocka_unit_test(test_result_edges),
		cmocka_unit_test(test_progress),
		cmocka_unit_test(test_build_error),
		cmocka_unit_test(test_normalize_errors),
		cmocka_unit_test(test_persist_and_env),
		cmocka_unit_test(test_wipe_never_follows_symlinks),
		cmocka_unit_test(test_resolve_through_proxy),
		cmocka_unit_test(test_tidy_keeps_lockfile_requirements),
		cmocka_unit_test(test_doc),
		cmocka_unit_test(test_direct_build),
		cmocka_unit_test(test_seeded_plan),
		cmocka_unit_test(test_telemetry_off),
		cmocka_unit_test(test_uncovered),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
