/*
 * test_runproc.c - unit tests for lib/runproc.c and agent/runproc.c's launcher: exit codes,
 * signals, deadlines that kill the whole process group, capped capture (head + marker + tail)
 * with bounded memory, a child killed at the cap, stdin from /dev/null, a clean environment and
 * no leaked descriptors; contained runs (the master's credential plugin) and isolated ones (the
 * agent's user program) leave no process behind, however the child tries.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/runproc.h"
#include "tests/unit/testutil.h"

static const char *const test_env[] = { "PATH=/usr/local/bin:/usr/bin:/bin", "KG_TEST=1", NULL };

/* run_sh - run one shell command line with the given options filled in */
static int run_sh(const char *script, struct runproc_opts *o, struct runproc_result *r)
{
	const char *argv[] = { "sh", "-c", script, NULL };
	o->argv = argv;
	if (!o->envp)
		o->envp = test_env;
	return runproc_run(o, r);
}

/* The watch: lines as they come; a cancel from another thread kills the child */
struct watched {
	int pipe[2];
	int lines;
	char first[64];
};
static bool watch_line(void *ctx, int stream, const char *text, size_t len)
{
	struct watched *w = ctx;
	if (w->lines++ == 0)
		snprintf(w->first, sizeof(w->first), "%d:%.*s", stream, (int)len, text);
	if (w->lines == 2 && write(w->pipe[1], "x", 1) != 1)
		abort(); /* the second line: cancel */
	return w->lines < 3;
}

static void test_watch_cancel(void **state)
{
	(void)state;
	struct watched w = { .lines = 0 };
	assert_int_equal(pipe(w.pipe), 0);
	struct runproc_watch rw = { .cancel_fd = w.pipe[0], .line = watch_line, .ctx = &w };
	runproc_watch_set(&rw);
	struct runproc_opts o = { .timeout_ms = 60000 };
	struct runproc_result r;
	assert_int_equal(run_sh("echo one; echo two; echo three; exec sleep 30", &o, &r), 0);
	assert_true(r.cancelled);
	assert_int_equal(r.signal, SIGKILL);
	assert_string_equal(w.first, "1:one");
	assert_true(w.lines >= 2 && w.lines <= 3); /* false from the callback stops the lines */
	assert_non_null(strstr(r.out.data, "one\ntwo\n"));
	runproc_result_free(&r);
	/* cancelled: nothing more starts on this thread */
	assert_true(runproc_cancelled());
	assert_int_equal(run_sh("echo never", &o, &r), -ECANCELED);
	runproc_watch_set(NULL);
	assert_false(runproc_cancelled());
	assert_int_equal(run_sh("echo again", &o, &r), 0);
	assert_string_equal(r.out.data, "again\n");
	runproc_result_free(&r);
	close(w.pipe[0]);
	close(w.pipe[1]);
}

static void test_echo(void **state)
{
	(void)state;
	struct runproc_opts o = { 0 };
	struct runproc_result r;
	const char *argv[] = { "echo", "hello", NULL };
	o.argv = argv;
	o.envp = test_env;
	assert_int_equal(runproc_run(&o, &r), 0);
	assert_int_equal(r.exit_code, 0);
	assert_int_equal(r.signal, 0);
	assert_false(r.timed_out);
	assert_string_equal(r.out.data, "hello\n");
	assert_int_equal(r.out.len, 6);
	assert_false(r.out.truncated);
	assert_string_equal(r.err.data, "");
	runproc_result_free(&r);
}

static void test_exit_code_and_stderr(void **state)
{
	(void)state;
	struct runproc_opts o = { 0 };
	struct runproc_result r;
	assert_int_equal(run_sh("echo oops >&2; exit 3", &o, &r), 0);
	assert_int_equal(r.exit_code, 3);
	assert_int_equal(r.signal, 0);
	assert_string_equal(r.err.data, "oops\n");
	assert_string_equal(r.out.data, "");
	runproc_result_free(&r);
}

static void test_merge_stderr(void **state)
{
	(void)state;
	struct runproc_opts o = { .merge_stderr = true };
	struct runproc_result r;
	assert_int_equal(run_sh("echo a; echo b >&2; echo c", &o, &r), 0);
	assert_string_equal(r.out.data, "a\nb\nc\n");
	assert_string_equal(r.err.data, "");
	runproc_result_free(&r);
}

static void test_signal(void **state)
{
	(void)state;
	struct runproc_opts o = { 0 };
	struct runproc_result r;
	assert_int_equal(run_sh("kill -SEGV $$", &o, &r), 0);
	assert_int_equal(r.exit_code, -1);
	assert_int_equal(r.signal, SIGSEGV);
	assert_string_equal(runproc_signame(r.signal), "SIGSEGV");
	assert_string_equal(runproc_signame(SIGKILL), "SIGKILL");
	runproc_result_free(&r);
}

/* proc_gone - the pid no longer runs (absent, or a zombie waiting for its new parent) */
static int proc_gone(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *rp = strrchr(buf, ')');
	return rp && (rp[2] == 'Z' || rp[2] == 'X');
}

static void test_timeout_kills_group(void **state)
{
	(void)state;
	char pidfile[] = "/tmp/kg-runproc-XXXXXX";
	int fd = mkstemp(pidfile);
	assert_true(fd >= 0);
	close(fd);
	char script[256];
	snprintf(script, sizeof(script), "sleep 100 & echo $! > %s; sleep 100", pidfile);
	struct runproc_opts o = { .timeout_ms = 300, .term_signal = SIGTERM, .grace_ms = 200 };
	struct runproc_result r;
	assert_int_equal(run_sh(script, &o, &r), 0);
	assert_true(r.timed_out);
	assert_true(r.signal == SIGTERM || r.signal == SIGKILL);
	assert_true(r.wall_ms >= 300);
	assert_true(r.wall_ms < 5000);
	runproc_result_free(&r);

	FILE *f = fopen(pidfile, "r");
	assert_non_null(f);
	int bg = 0;
	assert_int_equal(fscanf(f, "%d", &bg), 1);
	fclose(f);
	unlink(pidfile);
	assert_true(bg > 0);
	for (int i = 0; i < 50 && !proc_gone(bg); i++)
		usleep(20000);
	assert_true(proc_gone(bg));
}

static void test_timeout_ignoring_term(void **state)
{
	(void)state;
	/* a child that ignores SIGTERM still dies with SIGKILL after the grace */
	struct runproc_opts o = { .timeout_ms = 200, .term_signal = SIGTERM, .grace_ms = 300 };
	struct runproc_result r;
	assert_int_equal(run_sh("trap '' TERM; sleep 100 & wait; sleep 100", &o, &r), 0);
	assert_true(r.timed_out);
	assert_int_equal(r.signal, SIGKILL);
	assert_true(r.wall_ms >= 500);
	runproc_result_free(&r);
}

static void test_no_term_signal_waits_grace(void **state)
{
	(void)state;
	/* snippet mode: nothing at the deadline, the child may finish within the grace */
	struct runproc_opts o = { .timeout_ms = 200, .grace_ms = 2000 };
	struct runproc_result r;
	assert_int_equal(run_sh("sleep 0.5; echo finished", &o, &r), 0);
	assert_true(r.timed_out);
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out.data, "finished\n");
	runproc_result_free(&r);
}

static void test_leftover_background_killed(void **state)
{
	(void)state;
	/* the main child exits; its background job holds stdout open and must not stall us */
	struct runproc_opts o = { .timeout_ms = 10000 };
	struct runproc_result r;
	assert_int_equal(run_sh("sleep 100 & echo hi", &o, &r), 0);
	assert_false(r.timed_out);
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out.data, "hi\n");
	assert_true(r.wall_ms < 3000);
	runproc_result_free(&r);
}

static void test_cap_head_and_tail(void **state)
{
	(void)state;
	struct runproc_opts o = { .out_cap = 1000, .keep_tail = true };
	struct runproc_result r;
	assert_int_equal(run_sh("head -c 3000 /dev/zero | tr '\\0' a; "
				"head -c 3000 /dev/zero | tr '\\0' b",
				&o, &r),
			 0);
	assert_true(r.out.truncated);
	assert_int_equal(r.out.total, 6000);
	const char *marker = "\n\xe2\x80\xa6 [5000 bytes omitted] \xe2\x80\xa6\n";
	size_t ml = strlen(marker);
	assert_int_equal(r.out.len, 1000 + ml);
	for (size_t i = 0; i < 500; i++)
		assert_int_equal(r.out.data[i], 'a');
	assert_memory_equal(r.out.data + 500, marker, ml);
	for (size_t i = 500 + ml; i < r.out.len; i++)
		assert_int_equal(r.out.data[i], 'b');
	runproc_result_free(&r);
}

static void test_cap_exact_fit_not_truncated(void **state)
{
	(void)state;
	struct runproc_opts o = { .out_cap = 1000, .keep_tail = true };
	struct runproc_result r;
	assert_int_equal(run_sh("head -c 700 /dev/zero | tr '\\0' a; "
				"head -c 300 /dev/zero | tr '\\0' b",
				&o, &r),
			 0);
	assert_false(r.out.truncated);
	assert_int_equal(r.out.len, 1000);
	assert_int_equal(r.out.data[699], 'a');
	assert_int_equal(r.out.data[700], 'b');
	assert_int_equal(r.out.data[999], 'b');
	runproc_result_free(&r);
}

static void test_cap_head_only(void **state)
{
	(void)state;
	struct runproc_opts o = { .out_cap = 100 };
	struct runproc_result r;
	assert_int_equal(run_sh("head -c 5000 /dev/zero | tr '\\0' x", &o, &r), 0);
	assert_true(r.out.truncated);
	assert_int_equal(r.out.len, 100);
	assert_int_equal(r.out.total, 5000);
	runproc_result_free(&r);
}

static void test_large_output_bounded(void **state)
{
	(void)state;
	struct rusage before, after;
	getrusage(RUSAGE_SELF, &before);
	struct runproc_opts o = { .out_cap = 1024 * 1024, .err_cap = 1024 * 1024, .keep_tail = true };
	struct runproc_result r;
	/* 10 MiB on stdout and 100 MiB on stderr, both read concurrently */
	assert_int_equal(run_sh("head -c 10485760 /dev/zero; head -c 104857600 /dev/zero >&2", &o,
				&r),
			 0);
	getrusage(RUSAGE_SELF, &after);
	assert_int_equal(r.exit_code, 0);
	assert_int_equal(r.out.total, 10485760);
	assert_int_equal(r.err.total, 104857600);
	assert_true(r.out.truncated && r.err.truncated);
	assert_true(r.out.len <= 1024 * 1024 + 64);
	assert_true(r.err.len <= 1024 * 1024 + 64);
	/* two 1 MiB captures plus buffers; 110 MiB went through */
	assert_true(after.ru_maxrss - before.ru_maxrss < 16 * 1024);
	runproc_result_free(&r);
}

static void test_stdin_devnull(void **state)
{
	(void)state;
	struct runproc_opts o = { .timeout_ms = 5000 };
	struct runproc_result r;
	assert_int_equal(run_sh("cat; readlink /proc/self/fd/0", &o, &r), 0);
	assert_false(r.timed_out);
	assert_string_equal(r.out.data, "/dev/null\n");
	runproc_result_free(&r);
}

static void test_env_cwd_and_fds(void **state)
{
	(void)state;
	int leak = open("/dev/null", O_RDONLY); /* no O_CLOEXEC: must still not leak */
	assert_true(leak >= 0);
	struct runproc_opts o = { .cwd = "/tmp" };
	struct runproc_result r;
	assert_int_equal(run_sh("pwd; env | sort | grep -v '^PWD=' | grep -v '^SHLVL=' "
				"| grep -v '^_='",
				&o, &r),
			 0);
	assert_string_equal(r.out.data, "/tmp\nKG_TEST=1\nPATH=/usr/local/bin:/usr/bin:/bin\n");
	runproc_result_free(&r);

	/* ls itself, no shell in between: 3 is the directory ls reads, anything above leaked */
	const char *argv[] = { "ls", "/proc/self/fd", NULL };
	struct runproc_opts o2 = { .argv = argv, .envp = test_env };
	assert_int_equal(runproc_run(&o2, &r), 0);
	close(leak);
	assert_string_equal(r.out.data, "0\n1\n2\n3\n");
	runproc_result_free(&r);
}

static void test_exec_failure(void **state)
{
	(void)state;
	struct runproc_opts o = { 0 };
	struct runproc_result r;
	const char *argv[] = { "/nonexistent/kg-binary", NULL };
	o.argv = argv;
	assert_int_equal(runproc_run(&o, &r), -ENOENT);
	const char *argv2[] = { "kg-no-such-command", NULL };
	o.argv = argv2;
	o.envp = test_env;
	assert_int_equal(runproc_run(&o, &r), -ENOENT);
	o.argv = (const char *[]){ "true", NULL };
	o.cwd = "/nonexistent-dir";
	assert_int_equal(runproc_run(&o, &r), -ENOENT);
}

static void test_rusage(void **state)
{
	(void)state;
	struct runproc_opts o = { 0 };
	struct runproc_result r;
	assert_int_equal(run_sh("i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done", &o, &r), 0);
	assert_true(r.user_ms + r.sys_ms > 0);
	assert_true(r.maxrss_kb > 0);
	runproc_result_free(&r);
}

/* ---- the program's own namespaces ---- */

/* iso_ready - isolation set up for the tests below (a private /tmp), or skip with the reason */
static bool iso_ready(void)
{
	static int state; /* 0 untried, 1 on, -1 refused */
	if (state == 0) {
		struct runproc_isolation iso = { .tmpfs = { "/tmp" } };
		int rc = runproc_isolation_init(&iso);
		state = rc == 0 ? 1 : -1;
		if (rc != 0)
			fprintf(stderr, "# isolation refused on this host: %s\n", strerror(-rc));
	}
	return state == 1;
}

/* Contained: every way a shell has to leave a process behind, each holding the output pipe or
 * not, and the run still ends when the main child does, with nothing left. */
static void test_contain_leaves_nothing(void **state)
{
	(void)state;
	char digits[16], script[1024];
	marker_digits(digits, sizeof(digits));
	const char *m = digits;
	snprintf(script, sizeof(script),
		 /* fork then exit (holds stdout), setsid (its own group), double fork (reparented
		  * past the shell), a child that closed its output and ignores hangup and term, a
		  * grandchild of a setsid child, a stopped one */
		 "sleep 7777.%s1 & setsid sleep 7777.%s2 & (setsid sleep 7777.%s3 &) ; "
		 "(exec >&- 2>&- </dev/null; trap '' HUP TERM; exec sleep 7777.%s4) & "
		 "setsid sh -c 'sleep 7777.%s5 & sleep 7777.%s6' & "
		 "(sleep 7777.%s7 & kill -STOP $!) ; echo started",
		 m, m, m, m, m, m, m);
	struct runproc_opts o = { .timeout_ms = 60000, .contain = true };
	struct runproc_result r;
	assert_int_equal(run_sh(script, &o, &r), 0);
	assert_false(r.timed_out);
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out.data, "started\n");
	assert_int_equal(count_marker(digits), 0);
	runproc_result_free(&r);
}

/* Contained, at the deadline: a child that ignores SIGTERM and its escaped helpers all go */
static void test_contain_deadline(void **state)
{
	(void)state;
	char digits[16], script[512];
	marker_digits(digits, sizeof(digits));
	snprintf(script, sizeof(script),
		 "(setsid sleep 7777.%s8 &); sleep 7777.%s9 & trap '' TERM; echo up; "
		 "while :; do sleep 1; done", digits, digits);
	struct runproc_opts o = { .timeout_ms = 300, .term_signal = SIGTERM, .grace_ms = 100,
				  .contain = true };
	struct runproc_result r;
	assert_int_equal(run_sh(script, &o, &r), 0);
	assert_true(r.timed_out);
	assert_int_equal(r.signal, SIGKILL);
	assert_int_equal(count_marker(digits), 0);
	runproc_result_free(&r);
	/* SIGTERM reaches the program through the reaper, and its own status is reported */
	assert_int_equal(run_sh("trap 'exit 3' TERM; echo up; while :; do sleep 1; done", &o, &r), 0);
	assert_true(r.timed_out);
	assert_int_equal(r.exit_code, 3);
	assert_int_equal(r.signal, 0);
	assert_string_equal(r.out.data, "up\n");
	runproc_result_free(&r);
}

/* Contained: status, signal, stdin /dev/null, an exec failure, like a plain run */
static void test_contain_status(void **state)
{
	(void)state;
	struct runproc_opts o = { .contain = true };
	struct runproc_result r;
	assert_int_equal(run_sh("cat; echo out; echo err >&2; exit 7", &o, &r), 0);
	assert_int_equal(r.exit_code, 7);
	assert_string_equal(r.out.data, "out\n");
	assert_string_equal(r.err.data, "err\n");
	runproc_result_free(&r);
	assert_int_equal(run_sh("kill -SEGV $$", &o, &r), 0);
	assert_int_equal(r.signal, SIGSEGV);
	assert_int_equal(r.exit_code, -1);
	runproc_result_free(&r);
	const char *argv[] = { "/nonexistent/kg", NULL };
	struct runproc_opts bad = { .argv = argv, .contain = true };
	assert_int_equal(runproc_run(&bad, &r), -ENOENT);
	const char *argv2[] = { "kg-no-such-command-anywhere", NULL };
	struct runproc_opts bad2 = { .argv = argv2, .envp = test_env, .contain = true };
	assert_int_equal(runproc_run(&bad2, &r), -ENOENT);
}

/* kill_at_cap: a flood on stdout or on stderr is killed at the cap, not read to its end (the
 * child would otherwise run until its deadline), contained or not */
static void test_kill_at_cap(void **state)
{
	(void)state;
	for (int contain = 0; contain <= 1; contain++) {
		struct runproc_opts o = { .out_cap = 4096, .err_cap = 4096, .kill_at_cap = true,
					  .contain = contain };
		struct runproc_result r;
		assert_int_equal(run_sh("exec yes flood", &o, &r), 0);
		assert_true(r.over_cap);
		assert_false(r.timed_out);
		assert_int_equal(r.signal, SIGKILL);
		assert_true(r.out.truncated);
		assert_int_equal(r.out.len, 4096);
		runproc_result_free(&r);
		/* on stderr, from a grandchild, with the main child waiting */
		assert_int_equal(run_sh("(yes flood >&2) & wait", &o, &r), 0);
		assert_true(r.over_cap);
		assert_true(r.err.truncated);
		runproc_result_free(&r);
		/* exactly at the cap is not over it */
		assert_int_equal(run_sh("head -c 4096 /dev/zero", &o, &r), 0);
		assert_false(r.over_cap);
		assert_int_equal(r.exit_code, 0);
		assert_int_equal(r.out.len, 4096);
		runproc_result_free(&r);
	}
}

static void test_isolated_leaves_nothing(void **state)
{
	(void)state;
	if (!iso_ready())
		skip();
	char digits[16], marker[64], script[512];
	snprintf(digits, sizeof(digits), "%06d", (int)(getpid() % 1000000));
	snprintf(marker, sizeof(marker), "7777.%s", digits);
	/* every way to leave something behind that a shell has, then report our pid */
	snprintf(script, sizeof(script),
		 "sleep %s1 & setsid sleep %s2 & (setsid sleep %s3 &) ; "
		 "(trap '' HUP TERM; exec sleep %s4) & echo $$; ls /proc | grep -c '^[0-9]'",
		 marker, marker, marker, marker);
	struct runproc_opts o = { .launcher = runproc_isolated(), .timeout_ms = 20000 };
	struct runproc_result r;
	assert_int_equal(run_sh(script, &o, &r), 0);
	assert_int_equal(r.exit_code, 0);
	/* the shell is pid 2 of its own namespace (its init is 1) */
	assert_true(strncmp(r.out.data, "2\n", 2) == 0);
	assert_int_equal(count_marker(digits), 0);
	runproc_result_free(&r);
}

static void test_isolated_status_and_tmp(void **state)
{
	(void)state;
	if (!iso_ready())
		skip();
	struct runproc_opts o = { .launcher = runproc_isolated() };
	struct runproc_result r;
	/* a /tmp of its own: what it writes is not on the host's, and is gone afterwards */
	assert_int_equal(run_sh("echo x > /tmp/kg-runproc-iso && ls /tmp; exit 7", &o, &r), 0);
	assert_int_equal(r.exit_code, 7);
	assert_int_equal(r.signal, 0);
	assert_string_equal(r.out.data, "kg-runproc-iso\n");
	assert_int_not_equal(access("/tmp/kg-runproc-iso", F_OK), 0);
	runproc_result_free(&r);
	/* a program killed by a signal is reported so, not as its init's exit */
	assert_int_equal(run_sh("kill -SEGV $$", &o, &r), 0);
	assert_int_equal(r.signal, SIGSEGV);
	runproc_result_free(&r);
	/* the deadline kills the whole namespace */
	o.timeout_ms = 300;
	o.term_signal = SIGTERM;
	assert_int_equal(run_sh("trap '' TERM; while :; do :; done", &o, &r), 0);
	assert_true(r.timed_out);
	assert_int_equal(r.signal, SIGKILL);
	runproc_result_free(&r);
	/* an exec failure is still an error of runproc_run */
	const char *argv[] = { "/nonexistent/kg", NULL };
	struct runproc_opts bad = { .argv = argv, .launcher = runproc_isolated() };
	assert_int_equal(runproc_run(&bad, &r), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_echo),
		cmocka_unit_test(test_exit_code_and_stderr),
		cmocka_unit_test(test_merge_stderr),
		cmocka_unit_test(test_signal),
		cmocka_unit_test(test_timeout_kills_group),
		cmocka_unit_test(test_timeout_ignoring_term),
		cmocka_unit_test(test_no_term_signal_waits_grace),
		cmocka_unit_test(test_leftover_background_killed),
		cmocka_unit_test(test_cap_head_and_tail),
		cmocka_unit_test(test_cap_exact_fit_not_truncated),
		cmocka_unit_test(test_cap_head_only),
		cmocka_unit_test(test_large_output_bounded),
		cmocka_unit_test(test_stdin_devnull),
		cmocka_unit_test(test_env_cwd_and_fds),
		cmocka_unit_test(test_exec_failure),
		cmocka_unit_test(test_rusage),
		cmocka_unit_test(test_watch_cancel),
		cmocka_unit_test(test_contain_leaves_nothing),
		cmocka_unit_test(test_contain_deadline),
		cmocka_unit_test(test_contain_status),
		cmocka_unit_test(test_kill_at_cap),
		cmocka_unit_test(test_isolated_leaves_nothing),
		cmocka_unit_test(test_isolated_status_and_tmp),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
