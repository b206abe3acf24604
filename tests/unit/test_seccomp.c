/*
 * test_seccomp.c - the worker's filter: allowed work goes on, anything else is fatal (kill mode)
 * or logged and failed (log mode). Each case runs in a forked child, since filters are forever.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "policy/seccomp.h"

static void *thread_fn(void *arg)
{
	return arg;
}

/* in_child - run fn under the filter in a child; return its wait status */
static int in_child(const char *mode, int (*fn)(void))
{
	pid_t pid = fork();
	if (pid == 0) {
		if (seccomp_worker_lockdown(mode) != 0)
			_exit(100);
		_exit(fn());
	}
	int status;
	waitpid(pid, &status, 0);
	return status;
}

static int allowed_work(void)
{
	pthread_t t;
	if (pthread_create(&t, NULL, thread_fn, NULL) != 0)
		return 1;
	pthread_join(t, NULL);
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		return 2;
	if (write(sv[0], "x", 1) != 1)
		return 3;
	char c;
	if (read(sv[1], &c, 1) != 1)
		return 4;
	void *p = malloc(1 << 20);
	free(p);
	return 0;
}

static int do_exec(void)
{
	char *argv[] = { "/bin/true", NULL };
	execv("/bin/true", argv);
	return 0;
}

static int do_fork(void)
{
	/* glibc's fork is clone without CLONE_THREAD */
	pid_t p = fork();
	if (p == 0)
		_exit(0);
	return 0;
}

static int do_mount(void)
{
	int r = mount("none", "/tmp", "tmpfs", 0, NULL);
	return r == -1 && errno == ENOSYS ? 42 : 0;
}

static int do_raw_socket(void)
{
	int fd = socket(AF_PACKET, SOCK_RAW, 0);
	return fd < 0 && errno == ENOSYS ? 42 : 0;
}

static void test_allowed(void **st)
{
	(void)st;
	int status = in_child("kill", allowed_work);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_kill_mode(void **st)
{
	(void)st;
	int (*bad[])(void) = { do_exec, do_fork, do_mount, do_raw_socket };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int status = in_child("kill", bad[i]);
		assert_true(WIFSIGNALED(status));
		assert_int_equal(WTERMSIG(status), SIGSYS);
	}
}

static void test_log_mode(void **st)
{
	(void)st;
	/* the call fails with ENOSYS and the process lives on */
	int status = in_child("log", do_mount);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 42);
	status = in_child("log", do_raw_socket);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 42);
}

static void test_bad_mode(void **st)
{
	(void)st;
	assert_int_equal(seccomp_worker_lockdown("sometimes"), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_allowed),
		cmocka_unit_test(test_kill_mode),
		cmocka_unit_test(test_log_mode),
		cmocka_unit_test(test_bad_mode),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
