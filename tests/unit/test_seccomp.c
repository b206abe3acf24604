/*
 * test_seccomp.c - the worker's filter: allowed work goes on, anything else is fatal (kill mode)
 * or logged and failed (log mode), including what the argument filters refuse (socket kinds,
 * ioctl requests, clone's namespace flags, another process's limits, other prctls), and writes
 * where Landlock is absent. Each case runs in a forked child, since filters are forever.
 */
#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "policy/seccomp.h"

static void *thread_fn(void *arg)
{
	return arg;
}

/* in_child_flags - run fn under the filter (with flags) in a child; return its wait status */
static int in_child_flags(const char *mode, unsigned flags, int (*fn)(void))
{
	pid_t pid = fork();
	if (pid == 0) {
		if (seccomp_worker_lockdown(mode, flags) != 0)
			_exit(100);
		_exit(fn());
	}
	int status;
	waitpid(pid, &status, 0);
	return status;
}

static int in_child(const char *mode, int (*fn)(void))
{
	return in_child_flags(mode, 0, fn);
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
	/* the sockets, ioctls and limits a worker uses */
	int fds[] = { socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP),
		      socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0), socket(AF_UNIX, SOCK_STREAM, 0) };
	for (size_t i = 0; i < 3; i++)
		if (fds[i] < 0)
			return 5;
	int n = 0, on = 1;
	if (ioctl(sv[0], FIONREAD, &n) != 0 || ioctl(fds[0], FIONBIO, &on) != 0)
		return 6;
	(void)isatty(STDERR_FILENO); /* TCGETS */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 7;
	int fd = open("/dev/null", O_WRONLY | O_CLOEXEC); /* Landlock guards files: any mode */
	if (fd < 0)
		return 8;
	close(fd);
	return 0;
}

/* what the argument filters refuse: each kills the worker */
static int raw_icmp(void)
{
	return socket(AF_INET, SOCK_RAW, IPPROTO_ICMP) >= 0 ? 0 : 1;
}

static int ping_socket(void)
{
	return socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP) >= 0 ? 0 : 1;
}

static int unix_dgram(void)
{
	return socket(AF_UNIX, SOCK_DGRAM, 0) >= 0 ? 0 : 1;
}

static int sctp_stream(void)
{
	return socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP) >= 0 ? 0 : 1;
}

static int ioctl_tiocsti(void)
{
	char c = 'x';
	return ioctl(STDIN_FILENO, TIOCSTI, &c);
}

static int prlimit_other(void)
{
	struct rlimit rl;
	return (int)prlimit(getppid(), RLIMIT_NOFILE, NULL, &rl);
}

static int clone_namespace(void)
{
	/* the kernel would refuse these flags anyway; the filter must not let them reach it */
	return (int)syscall(SYS_clone, CLONE_THREAD | CLONE_SIGHAND | CLONE_VM | CLONE_NEWNET, 0, 0, 0, 0);
}

static int prctl_other(void)
{
	return prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
}

/* without Landlock: reading goes on, writing and creating fail with EACCES */
static int read_only_files(void)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	close(fd);
	static const int bad[] = { O_WRONLY, O_RDWR, O_RDONLY | O_CREAT, O_RDONLY | O_TRUNC,
				   O_RDONLY | O_APPEND };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (open("/dev/null", bad[i] | O_CLOEXEC, 0600) >= 0 || errno != EACCES)
			return 10 + (int)i;
	if (open("/tmp", O_TMPFILE | O_RDWR, 0600) >= 0 || errno != EACCES)
		return 20;
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
	int (*bad[])(void) = { do_exec,     do_fork,       do_mount,      do_raw_socket,
			       raw_icmp,    ping_socket,   unix_dgram,    sctp_stream,
			       ioctl_tiocsti, prlimit_other, clone_namespace, prctl_other };
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

static void test_read_only(void **st)
{
	(void)st;
	int status = in_child_flags("kill", SECCOMP_WORKER_READ_ONLY, read_only_files);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_bad_mode(void **st)
{
	(void)st;
	assert_int_equal(seccomp_worker_lockdown("sometimes", 0), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_allowed),
		cmocka_unit_test(test_kill_mode),
		cmocka_unit_test(test_log_mode),
		cmocka_unit_test(test_read_only),
		cmocka_unit_test(test_bad_mode),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
