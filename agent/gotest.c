/*
 * gotest.c - fold test2json events into test mode's structured result (see gotest.h).
 *
 * Called by agent/pipeline.c after each test binary's run. The events come from a program the
 * model wrote, through test2json: a line is parsed only when it is a bounded JSON object, and
 * only the fields of test2json's event shape are read. Tests are kept in the order they first
 * ran; a test that never finished (the binary panicked or timed out in it) is a failure.
 */
#include "agent/gotest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/diag.h"

#define GT_FAILED_NAMES 10

/* A capped text: the head up to cap, and how much was dropped. */
struct gt_text {
	char *data;
	size_t len, cap;
	size_t dropped;
};

struct gt_test {
	char *pkg, *name;
	const char *status;       /* NULL until a pass, fail or skip */
	double elapsed;
	struct gt_text out;
	bool bench;
	bool has_result;          /* a "BenchmarkX-N  N  x ns/op" line was seen */
	long long iterations, bytes_per_op, allocs_per_op;
	double ns_per_op;
	bool has_mem;
};

struct gt_pkg {
	char *name;
	const char *status;
	double elapsed;
	struct gt_text out;
	bool has_cover;
	double cover;
};

struct gotest_report {
	struct gt_test *tests;
	size_t ntests, captests;
	size_t unlisted, unlisted_passed, unlisted_failed, unlisted_skipped;
	struct gt_pkg *pkgs;
	size_t npkgs, cappkgs;
	struct gt_text text;
	size_t last;              /* index of the test the previous event named */
	bool timed_out;
	bool oom;
};

/* gt_text_add - append within the cap, counting what does not fit */
static void gt_text_add(struct gt_text *t, const char *s, size_t n)
{
	size_t room = t->cap > t->len ? t->cap - t->len : 0;
	size_t take = n < room ? n : room;
	if (take) {
		char *g = realloc(t->data, t->len + take + 1);
		if (!g) {
			t->dropped += n;
			return;
		}
		t->data = g;
		memcpy(t->data + t->len, s, take);
		t->len += take;
		t->data[t->len] = '\0';
	}
	t->dropped += n - take;
}

/* gt_text_json - the text as a JSON string, with a marker line when some was dropped */
static json_t *gt_text_json(const struct gt_text *t)
{
	if (!t->dropped)
		return diag_json_string(t->data ? t->data : "", t->len);
	char marker[96];
	int m = snprintf(marker, sizeof(marker), "%s… [%zu bytes omitted] …\n",
			 t->len && t->data[t->len - 1] != '\n' ? "\n" : "", t->dropped);
	char *all = malloc(t->len + (size_t)m + 1);
	if (!all)
		return NULL;
	if (t->len)
		memcpy(all, t->data, t->len);
	memcpy(all + t->len, marker, (size_t)m + 1);
	json_t *j = diag_json_string(all, t->len + (size_t)m);
	free(all);
	return j;
}

struct gotest_report *gotest_report_new(size_t text_cap)
{
	struct gotest_report *r = calloc(1, sizeof(*r));
	if (r)
		r->text.cap = text_cap;
	return r;
}

void gotest_report_free(struct gotest_report *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->ntests; i++) {
		free(r->tests[i].pkg);
		free(r->tests[i].name);
		free(r->tests[i].out.data);
	}
	for (size_t i = 0; i < r->npkgs; i++) {
		free(r->pkgs[i].name);
		free(r->pkgs[i].out.data);
	}
	free(r->tests);
	free(r->pkgs);
	free(r->text.data);
	free(r);
}

/* gt_pkg_get - the package's entry, created on first sight */
static struct gt_pkg *gt_pkg_get(struct gotest_report *r, const char *name)
{
	for (size_t i = 0; i < r->npkgs; i++)
		if (strcmp(r->pkgs[i].name, name) == 0)
			return &r->pkgs[i];
	if (r->npkgs == r->cappkgs) {
		size_t nc = r->cappkgs ? 2 * r->cappkgs : 8;
		struct gt_pkg *g = realloc(r->pkgs, nc * sizeof(*g));
		if (!g)
			return NULL;
		r->pkgs = g;
		r->cappkgs = nc;
	}
	struct gt_pkg *p = &r->pkgs[r->npkgs];
	memset(p, 0, sizeof(*p));
	if (!(p->name = strdup(name)))
		return NULL;
	p->out.cap = GOTEST_PKG_OUTPUT_CAP;
	r->npkgs++;
	return p;
}

static struct gt_test *gt_test_new(struct gotest_report *r, const char *pkg, const char *name);

/* gt_test_get - the test's entry; NULL beyond GOTEST_MAX_TESTS (create: on its run event) */
static struct gt_test *gt_test_get(struct gotest_report *r, const char *pkg, const char *name,
				   bool create)
{
	/* a test's events mostly come together: look at the last one first, then backwards */
	if (r->last < r->ntests && strcmp(r->tests[r->last].name, name) == 0 &&
	    strcmp(r->tests[r->last].pkg, pkg) == 0)
		return &r->tests[r->last];
	for (size_t i = r->ntests; i-- > 0;)
		if (strcmp(r->tests[i].name, name) == 0 && strcmp(r->tests[i].pkg, pkg) == 0) {
			r->last = i;
			return &r->tests[i];
		}
	if (!create)
		return NULL;
	return gt_test_new(r, pkg, name);
}

/* gt_test_new - a new entry (a test's first run, or its next one with -count) */
static struct gt_test *gt_test_new(struct gotest_report *r, const char *pkg, const char *name)
{
	if (r->ntests >= GOTEST_MAX_TESTS)
		return NULL;
	if (r->ntests == r->captests) {
		size_t nc = r->captests ? 2 * r->captests : 32;
		struct gt_test *g = realloc(r->tests, nc * sizeof(*g));
		if (!g)
			return NULL;
		r->tests = g;
		r->captests = nc;
	}
	struct gt_test *t = &r->tests[r->ntests];
	memset(t, 0, sizeof(*t));
	t->pkg = strdup(pkg);
	t->name = strdup(name);
	if (!t->pkg || !t->name) {
		free(t->pkg);
		free(t->name);
		return NULL;
	}
	t->out.cap = GOTEST_TEST_OUTPUT_CAP;
	t->bench = strncmp(name, "Benchmark", 9) == 0;
	r->last = r->ntests++;
	return t;
}

/* gt_bench_line - "BenchmarkX-2   \t 100\t 15.83 ns/op\t 0 B/op\t 0 allocs/op" for test t */
static void gt_bench_line(struct gt_test *t, const char *line, size_t n)
{
	char buf[512];
	if (n >= sizeof(buf))
		return;
	memcpy(buf, line, n);
	buf[n] = '\0';
	char *save = NULL, *tok = strtok_r(buf, " \t\n", &save);
	if (!tok)
		return;
	/* the first field is the benchmark's name with its -GOMAXPROCS suffix */
	const char *base = strrchr(t->name, '/');
	base = base ? base + 1 : t->name;
	size_t tl = strlen(t->name), bl = strlen(base), kl = strlen(tok);
	bool named = (kl >= tl && strncmp(tok, t->name, tl) == 0) ||
		     (kl >= bl && strncmp(tok, base, bl) == 0);
	if (!named || !(tok = strtok_r(NULL, " \t\n", &save)))
		return;
	char *end;
	long long iters = strtoll(tok, &end, 10);
	if (*end || iters <= 0)
		return;
	bool ns = false;
	for (char *v; (v = strtok_r(NULL, " \t\n", &save));) {
		char *unit = strtok_r(NULL, " \t\n", &save);
		if (!unit)
			break;
		double d = strtod(v, &end);
		if (*end)
			break;
		if (strcmp(unit, "ns/op") == 0) {
			t->ns_per_op = d;
			ns = true;
		} else if (strcmp(unit, "B/op") == 0) {
			t->bytes_per_op = (long long)d;
			t->has_mem = true;
		} else if (strcmp(unit, "allocs/op") == 0) {
			t->allocs_per_op = (long long)d;
			t->has_mem = true;
		}
	}
	if (ns) {
		t->iterations = iters;
		t->has_result = true;
	}
}

/* gt_terminal - "pass", "fail", "skip" as static strings; NULL for other actions */
static const char *gt_terminal(const char *action)
{
	static const char *const st[] = { "pass", "fail", "skip" };
	for (size_t i = 0; i < 3; i++)
		if (strcmp(action, st[i]) == 0)
			return st[i];
	return NULL;
}

/* gt_event - one event object */
static void gt_event(struct gotest_report *r, const char *want_pkg, json_t *ev)
{
	const char *action = json_string_value(json_object_get(ev, "Action"));
	const char *pkgname = json_string_value(json_object_get(ev, "Package"));
	json_t *jt = json_object_get(ev, "Test");
	const char *test = json_string_value(jt);
	json_t *jo = json_object_get(ev, "Output");
	json_t *je = json_object_get(ev, "Elapsed");
	if (!action || !pkgname || strcmp(pkgname, want_pkg) != 0 || (jt && !test) ||
	    (test && (!*test || json_string_length(jt) > 1024)))
		return;
	struct gt_pkg *p = gt_pkg_get(r, pkgname);
	if (!p) {
		r->oom = true;
		return;
	}
	const char *term = gt_terminal(action);
	if (strcmp(action, "output") == 0 && json_is_string(jo)) {
		const char *o = json_string_value(jo);
		size_t ol = json_string_length(jo);
		gt_text_add(&r->text, o, ol);
		if (strstr(o, "panic: test timed out after"))
			r->timed_out = true;
		if (!test) {
			double c;
			if (sscanf(o, "coverage: %lf%% of statements", &c) == 1) {
				p->cover = c;
				p->has_cover = true;
			}
			gt_text_add(&p->out, o, ol);
			return;
		}
		struct gt_test *t = gt_test_get(r, pkgname, test, true);
		if (!t)
			return;
		gt_text_add(&t->out, o, ol);
		return;
	}
	if (!test) {
		if (term) {
			p->status = term;
			if (json_is_number(je))
				p->elapsed = json_number_value(je);
		}
		return;
	}
	bool run = strcmp(action, "run") == 0;
	struct gt_test *t = gt_test_get(r, pkgname, test, run || term);
	/* with -count each run of a test is an entry of its own */
	if (run && t && t->status)
		t = gt_test_new(r, pkgname, test);
	if (!term)
		return;
	if (!t) {
		r->unlisted++;
		if (term[0] == 'p')
			r->unlisted_passed++;
		else if (term[0] == 'f')
			r->unlisted_failed++;
		else
			r->unlisted_skipped++;
		return;
	}
	t->status = term;
	if (json_is_number(je))
		t->elapsed = json_number_value(je);
}

/* gotest_report_feed - see gotest.h */
void gotest_report_feed(struct gotest_report *r, const char *pkg, const char *data, size_t len)
{
	if (!r || !data)
		return;
	if (!gt_pkg_get(r, pkg))
		r->oom = true;
	size_t i = 0;
	while (i < len) {
		const char *nl = memchr(data + i, '\n', len - i);
		size_t n = nl ? (size_t)(nl - data) - i : len - i;
		if (n > 1 && n <= GOTEST_LINE_MAX && data[i] == '{') {
			json_t *ev = json_loadb(data + i, n, JSON_REJECT_DUPLICATES, NULL);
			if (json_is_object(ev))
				gt_event(r, pkg, ev);
			json_decref(ev);
		}
		i += n + 1;
	}
}

/* gotest_report_package - see gotest.h */
void gotest_report_package(struct gotest_report *r, const char *pkg, const char *status,
			   const char *output)
{
	struct gt_pkg *p = r ? gt_pkg_get(r, pkg) : NULL;
	if (!p)
		return;
	p->status = status;
	if (output)
		gt_text_add(&p->out, output, strlen(output));
}

void gotest_report_elapsed(struct gotest_report *r, const char *pkg, double seconds)
{
	struct gt_pkg *p = r ? gt_pkg_get(r, pkg) : NULL;
	if (p && p->elapsed <= 0)
		p->elapsed = seconds;
}

bool gotest_report_timed_out(const struct gotest_report *r)
{
	return r && r->timed_out;
}

/* gotest_report_finish - see gotest.h */
int gotest_report_finish(struct gotest_report *r, json_t **tests, json_t **packages,
			 json_t **totals, char *failed, size_t failed_len, char **text,
			 size_t *text_len, bool *text_truncated)
{
	json_t *ta = json_array(), *pa = json_array();
	size_t passed = r->unlisted_passed, nfailed = r->unlisted_failed;
	size_t skipped = r->unlisted_skipped, benches = 0, named = 0;
	if (failed_len)
		failed[0] = '\0';
	if (!ta || !pa || r->oom)
		goto nomem;
	for (size_t i = 0; i < r->npkgs; i++) {
		struct gt_pkg *p = &r->pkgs[i];
		/* a binary that died without a package verdict failed */
		const char *st = p->status ? p->status : "fail";
		json_t *o = json_pack("{s:s, s:s, s:f, s:o, s:o}", "package", p->name, "status", st,
				      "elapsed", p->elapsed, "coverage",
				      p->has_cover ? json_real(p->cover) : json_null(), "output",
				      gt_text_json(&p->out));
		if (!o || json_array_append_new(pa, o) < 0)
			goto nomem;
	}
	for (size_t i = 0; i < r->ntests; i++) {
		struct gt_test *t = &r->tests[i];
		/* test2json hands on a benchmark's name before it runs and its figures after, as two
		 * pieces of one line: parse the whole lines of what was kept */
		for (const char *l = t->bench ? t->out.data : NULL; l && *l;) {
			const char *nl = strchr(l, '\n');
			size_t n = nl ? (size_t)(nl - l) : strlen(l);
			if (strncmp(l, "Benchmark", 9) == 0)
				gt_bench_line(t, l, n);
			l = nl ? nl + 1 : NULL;
		}
		const char *st = t->status;
		if (!st) {
			/* a benchmark reports its line and no verdict; anything else unfinished
			 * was running when the binary died */
			struct gt_pkg *p = gt_pkg_get(r, t->pkg);
			st = t->bench && t->has_result && p && p->status && strcmp(p->status, "pass") == 0
				     ? "pass"
				     : "fail";
		}
		if (t->bench)
			benches++;
		if (st[0] == 'p')
			passed++;
		else if (st[0] == 's')
			skipped++;
		else {
			nfailed++;
			if (named < GT_FAILED_NAMES && failed_len) {
				size_t fl = strlen(failed);
				snprintf(failed + fl, failed_len - fl, "%s%s", fl ? ", " : "", t->name);
				named++;
			} else if (named == GT_FAILED_NAMES && failed_len) {
				size_t fl = strlen(failed);
				snprintf(failed + fl, failed_len - fl, ", …");
				named++;
			}
		}
		json_t *o = json_pack("{s:s, s:s, s:s, s:f, s:o, s:b}", "package", t->pkg, "name",
				      t->name, "status", st, "elapsed", t->elapsed, "output",
				      gt_text_json(&t->out), "output_truncated", t->out.dropped > 0);
		if (!o)
			goto nomem;
		if (t->has_result) {
			json_object_set_new(o, "iterations", json_integer(t->iterations));
			json_object_set_new(o, "ns_per_op", json_real(t->ns_per_op));
			if (t->has_mem) {
				json_object_set_new(o, "bytes_per_op", json_integer(t->bytes_per_op));
				json_object_set_new(o, "allocs_per_op", json_integer(t->allocs_per_op));
			}
		}
		if (json_array_append_new(ta, o) < 0)
			goto nomem;
	}
	*totals = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "packages", (json_int_t)r->npkgs,
			    "tests", (json_int_t)(r->ntests + r->unlisted), "passed",
			    (json_int_t)passed, "failed", (json_int_t)nfailed, "skipped",
			    (json_int_t)skipped, "benchmarks", (json_int_t)benches, "listed",
			    (json_int_t)r->ntests);
	if (!*totals)
		goto nomem;
	*tests = ta;
	*packages = pa;
	*text = r->text.data ? r->text.data : strdup("");
	*text_len = r->text.len;
	*text_truncated = r->text.dropped > 0;
	r->text.data = NULL;
	r->text.len = 0;
	return *text ? 0 : -ENOMEM;
nomem:
	json_decref(ta);
	json_decref(pa);
	return -ENOMEM;
}
