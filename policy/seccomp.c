/*
 * seccomp.c - the worker's allow list, as a table (OpenSSH's sandbox-seccomp-filter.c in spirit).
 *
 * A worker parses untrusted JSON-RPC and talks to a sandbox that runs untrusted code, so once it
 * is set up it may only do what serving needs: memory, threads, time, poll/epoll, and sockets of
 * the kinds it already uses (AF_UNIX for nng and the local agent, AF_INET/AF_INET6 for agents on
 * pod IPs and for Google's APIs through libcurl). No exec, no fork (clone only for threads), no
 * ptrace, no mount, no namespace changes, no new files outside what libcurl's resolver reads.
 * Called once by worker/main.c after the channel and the call thread are up.
 */
#include "policy/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <ucontext.h>
#include <unistd.h>

#include "ipc/log.h"

/* Plain allows: no argument filtering needed. */
static const char *const allow_plain[] = {
	/* memory */
	"brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "membarrier",
	/* threads and signals */
	"futex", "set_robust_list", "get_robust_list", "rseq", "set_tid_address", "gettid",
	"getpid", "getppid", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack",
	"restart_syscall", "exit", "exit_group", "sched_yield", "sched_getaffinity",
	/* time */
	"clock_gettime", "clock_getres", "gettimeofday", "nanosleep", "clock_nanosleep", "time",
	/* descriptors */
	"read", "write", "readv", "writev", "pread64", "pwrite64", "close", "lseek", "dup", "dup3",
	"fcntl", "ioctl", "pipe2", "eventfd2", "poll", "ppoll", "select", "pselect6",
	"epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "timerfd_create",
	"timerfd_settime", "fstat", "newfstatat", "statx", "fstatfs",
	/* files: libcurl's resolver and TLS read /etc (hosts, resolv.conf, nsswitch, CA certs) */
	"openat", "getdents64", "readlink", "access", "faccessat", "faccessat2", "getcwd",
	/* sockets of the permitted families (socket itself is filtered below) */
	"connect", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "shutdown",
	"getsockopt", "setsockopt", "getsockname", "getpeername", "bind",
	/* identity and limits, read only */
	"getuid", "geteuid", "getgid", "getegid", "getrandom", "uname", "sysinfo", "getrusage",
	"prlimit64", "getpriority",
};

static const char *const mode_names[] = { "kill", "log", "off" };

/* seccomp_sigsys - debug mode: name the syscall and fail it with ENOSYS */
static void seccomp_sigsys(int sig, siginfo_t *info, void *uctx)
{
	(void)sig;
	ucontext_t *uc = uctx;
	char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, info->si_syscall);
	char line[160];
	int n = snprintf(line, sizeof(line), "seccomp: worker %d made denied syscall %d (%s)\n",
			 (int)getpid(), info->si_syscall, name ? name : "?");
	ssize_t w = write(STDERR_FILENO, line, (size_t)n);
	(void)w;
#ifdef __x86_64__
	uc->uc_mcontext.gregs[REG_RAX] = -ENOSYS;
#else
	(void)uc;
#endif
}

/* add - one rule, with a readable failure */
static int add(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n,
	       const struct scmp_arg_cmp *args)
{
	int nr = seccomp_syscall_resolve_name(name);
	if (nr == __NR_SCMP_ERROR) {
		log_debug("syscall %s does not exist here; skipped", name);
		return 0;
	}
	int r = seccomp_rule_add_array(ctx, action, nr, n, args);
	if (r != 0)
		log_error("seccomp rule for %s: %s", name, strerror(-r));
	return r;
}

int seccomp_worker_lockdown(const char *mode)
{
	int m = 0;
	while (m < 3 && strcmp(mode, mode_names[m]) != 0)
		m++;
	if (m == 3)
		return -EINVAL;
	if (m == 2) {
		log_warn("seccomp is off for this worker (--seccomp off)");
		return 0;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -errno;
	if (m == 1) {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = seccomp_sigsys;
		sa.sa_flags = SA_SIGINFO;
		sigaction(SIGSYS, &sa, NULL);
	}
	scmp_filter_ctx ctx = seccomp_init(m == 1 ? SCMP_ACT_TRAP : SCMP_ACT_KILL_PROCESS);
	if (!ctx)
		return -ENOMEM;
	int r = 0;
	for (size_t i = 0; r == 0 && i < sizeof(allow_plain) / sizeof(allow_plain[0]); i++)
		r = add(ctx, SCMP_ACT_ALLOW, allow_plain[i], 0, NULL);

	/* clone: threads only (CLONE_THREAD set); a fork would escape the filter's purpose */
	struct scmp_arg_cmp thread = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD);
	if (r == 0)
		r = add(ctx, SCMP_ACT_ALLOW, "clone", 1, &thread);
	/* clone3 hides its flags in memory a filter cannot read: make glibc fall back to clone */
	if (r == 0)
		r = add(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL);
	/* sockets: only the families in use */
	static const int families[] = { AF_UNIX, AF_INET, AF_INET6 };
	for (size_t i = 0; r == 0 && i < 3; i++) {
		struct scmp_arg_cmp fam = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)families[i]);
		r = add(ctx, SCMP_ACT_ALLOW, "socket", 1, &fam);
		if (r == 0 && families[i] == AF_UNIX)
			r = add(ctx, SCMP_ACT_ALLOW, "socketpair", 1, &fam);
	}
	/* signals: only to itself (abort, pthread_kill) */
	struct scmp_arg_cmp self = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)getpid());
	if (r == 0)
		r = add(ctx, SCMP_ACT_ALLOW, "tgkill", 1, &self);
	/* prctl: naming threads, and nothing else */
	struct scmp_arg_cmp name = SCMP_A0(SCMP_CMP_EQ, PR_SET_NAME);
	if (r == 0)
		r = add(ctx, SCMP_ACT_ALLOW, "prctl", 1, &name);
	if (r == 0)
		r = seccomp_load(ctx);
	seccomp_release(ctx);
	if (r == 0)
		log_debug("seccomp filter installed (mode %s)", mode);
	return r;
}
