/*
 * test_seccomp_threads.c - the worker's seccomp filter (policy/seccomp.c) binds every thread of
 * the process, including those started before it was loaded (the call and minter threads, and
 * nng's), and lets glibc's resolver ask the routing table (NETLINK_ROUTE) as libcurl's name
 * lookups of Google's token endpoints need, while other netlink families stay out of reach.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>
#include <linux/netlink.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "policy/seccomp.h"

static volatile int go;
static int (*in_thread)(void);

/* early_thread - started before the lockdown; does its thing once told to */
static void *early_thread(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&go, __ATOMIC_SEQ_CST))
		usleep(1000);
	return (void *)(long)in_thread();
}

/* with_early_thread - fork; in the child start a thread, lock down, let the thread run fn */
static int with_early_thread(int (*fn)(void))
{
	pid_t pid = fork();
	if (pid == 0) {
		pthread_t t;
		in_thread = fn;
		if (pthread_create(&t, NULL, early_thread, NULL) != 0)
			_exit(101);
		if (seccomp_worker_lockdown("kill", 0) != 0)
			_exit(100);
		__atomic_store_n(&go, 1, __ATOMIC_SEQ_CST);
		void *rv;
		pthread_join(t, &rv);
		_exit((int)(long)rv);
	}
	int status;
	waitpid(pid, &status, 0);
	return status;
}

static int packet_socket(void)
{
	return socket(AF_PACKET, SOCK_RAW, 0) >= 0 ? 0 : 1;
}

static int route_socket(void)
{
	return socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE) >= 0 ? 0 : 1;
}

static int audit_socket(void)
{
	return socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_AUDIT) >= 0 ? 0 : 1;
}

static void test_earlier_threads_are_bound(void **st)
{
	(void)st;
	int status = with_early_thread(packet_socket);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGSYS);
}

static void test_netlink_route_only(void **st)
{
	(void)st;
	int status = with_early_thread(route_socket);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	status = with_early_thread(audit_socket);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGSYS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_earlier_threads_are_bound),
		cmocka_unit_test(test_netlink_route_only),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
