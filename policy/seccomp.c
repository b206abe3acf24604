/*
 * seccomp.c - the worker's allow list, as a table (OpenSSH's sandbox-seccomp-filter.c in spirit).
 *
 * A worker parses untrusted JSON-RPC and talks to a sandbox that runs untrusted code, so once it
 * is set up it may only do what serving needs: memory, threads, time, poll/epoll, and sockets of
 * the kinds it already uses (AF_UNIX for nng and the local agent, AF_INET/AF_INET6 for agents on
 * pod IPs and for Google's APIs through libcurl). No exec, no fork (clone only for threads), no
 * ptrace, no mount, no namespace changes, no new files outside what libcurl's resolver reads.
 * Called once by worker/main.c after the channel and the call thread are up.
 *
 * Arguments are checked where a filter can see them (not behind pointers): socket families,
 * types and protocols; the ioctl requests a worker makes; clone only for a thread and never
 * with a namespace flag; prctl only to name a thread; prlimit64 and tgkill only on itself;
 * and, where Landlock is absent, openat only for reading.
 */
#include "policy/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
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
	"fcntl", "pipe2", "eventfd2", "poll", "ppoll", "select", "pselect6",
	"epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "timerfd_create",
	"timerfd_settime", "fstat", "newfstatat", "statx", "fstatfs",
	/* files: libcurl's resolver and TLS read /etc (hosts, resolv.conf, nsswitch, CA certs);
	 * openat is below */
	"getdents64", "readlink", "access", "faccessat", "faccessat2", "getcwd",
	/* sockets of the permitted families (socket itself is filtered below); no listen, no
	 * accept: bind is for glibc's netlink query, a worker serves nothing */
	"connect", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "shutdown",
	"getsockopt", "setsockopt", "getsockname", "getpeername", "bind",
	/* identity and limits, read only */
	"getuid", "geteuid", "getgid", "getegid", "getrandom", "uname", "sysinfo", "getrusage",
	"getpriority",
};

/* The ioctl requests in use: isatty and the terminal size (stdio, logs), non-blocking and
 * close-on-exec flags, bytes waiting, and an interface index for a scoped IPv6 address (glibc's
 * resolver). Nothing that reaches a device or a terminal's input. */
static const unsigned long ioctl_ok[] = { TCGETS, TIOCGWINSZ, FIONBIO, FIONREAD, FIOCLEX,
					  FIONCLEX, SIOCGIFINDEX, SIOCGIFNAME };

/* socket(family, type, protocol) a worker makes: unix streams (nng, the agent, curl's wakeup
 * pair, nscd); TCP and UDP over IPv4 and IPv6 (libcurl, glibc's resolver); protocol 0 or the
 * type's own */
static const struct {
	int family, type, protocol;
} socket_ok[] = {
	{ AF_UNIX, SOCK_STREAM, 0 },
	{ AF_INET, SOCK_STREAM, 0 },  { AF_INET, SOCK_STREAM, IPPROTO_TCP },
	{ AF_INET, SOCK_DGRAM, 0 },   { AF_INET, SOCK_DGRAM, IPPROTO_UDP },
	{ AF_INET6, SOCK_STREAM, 0 }, { AF_INET6, SOCK_STREAM, IPPROTO_TCP },
	{ AF_INET6, SOCK_DGRAM, 0 },  { AF_INET6, SOCK_DGRAM, IPPROTO_UDP },
};
#define SOCK_TYPE_MASK 0xf /* the type without SOCK_NONBLOCK and SOCK_CLOEXEC */

/* clone's namespace flags: a worker's threads never make a namespace */
#define CLONE_NS_FLAGS                                                                           \
	(CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS |  \
	 CLONE_NEWCGROUP)

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

int seccomp_worker_lockdown(const char *mode, unsigned flags)
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
	/* every thread, not only this one: the call and minter threads and nng's own were
	 * started before the filter, and a filter binds only the thread that loads it unless
	 * synchronized */
	int r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
	for (size_t i = 0; r == 0 && i < sizeof(allow_plain) / sizeof(allow_plain[0]); i++)
		r = add(ctx, SCMP_ACT_ALLOW, allow_plain[i], 0, NULL);

	/* clone: threads only (CLONE_THREAD set, no namespace flag); a fork would escape the
	 * filter's purpose */
	struct scmp_arg_cmp thread = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD | CLONE_NS_FLAGS,
					     CLONE_THREAD);
	if (r == 0)
		r = add(ctx, SCMP_ACT_ALLOW, "clone", 1, &thread);
	/* clone3 hides its flags in memory a filter cannot read: make glibc fall back to clone */
	if (r == 0)
		r = add(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL);
	/* sockets: only the families, types and protocols in use */
	for (size_t i = 0; r == 0 && i < sizeof(socket_ok) / sizeof(socket_ok[0]); i++) {
		struct scmp_arg_cmp sk[3] = {
			SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)socket_ok[i].family),
			SCMP_A1(SCMP_CMP_MASKED_EQ, SOCK_TYPE_MASK, (scmp_datum_t)socket_ok[i].type),
			SCMP_A2(SCMP_CMP_EQ, (scmp_datum_t)socket_ok[i].protocol),
		};
		r = add(ctx, SCMP_ACT_ALLOW, "socket", 3, sk);
		if (r == 0 && socket_ok[i].family == AF_UNIX)
			r = add(ctx, SCMP_ACT_ALLOW, "socketpair", 3, sk);
	}
	/* ioctl: the requests above (the kernel reads the low 32 bits) */
	for (size_t i = 0; r == 0 && i < sizeof(ioctl_ok) / sizeof(ioctl_ok[0]); i++) {
		struct scmp_arg_cmp req = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)ioctl_ok[i]);
		r = add(ctx, SCMP_ACT_ALLOW, "ioctl", 1, &req);
	}
	/* limits: its own only (glibc's getrlimit and setrlimit pass pid 0) */
	struct scmp_arg_cmp self0 = SCMP_A0(SCMP_CMP_EQ, 0);
	if (r == 0)
		r = add(ctx, SCMP_ACT_ALLOW, "prlimit64", 1, &self0);
	/* openat: with Landlock the kernel keeps the worker to its files, so any mode; without,
	 * reading only, and a write or a create fails (a thread's name in /proc/self/task, say) */
	if (r == 0 && !(flags & SECCOMP_WORKER_READ_ONLY))
		r = add(ctx, SCMP_ACT_ALLOW, "openat", 0, NULL);
	static const int write_bits[] = { O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, O_APPEND, __O_TMPFILE };
	if (r == 0 && (flags & SECCOMP_WORKER_READ_ONLY)) {
		struct scmp_arg_cmp ro = SCMP_A2(SCMP_CMP_MASKED_EQ, O_ACCMODE | O_CREAT | O_TRUNC |
						 O_APPEND | __O_TMPFILE, O_RDONLY);
		r = add(ctx, SCMP_ACT_ALLOW, "openat", 1, &ro);
		for (size_t i = 0; r == 0 && i < sizeof(write_bits) / sizeof(write_bits[0]); i++) {
			struct scmp_arg_cmp w = SCMP_A2(SCMP_CMP_MASKED_EQ, (scmp_datum_t)write_bits[i],
							(scmp_datum_t)write_bits[i]);
			r = add(ctx, SCMP_ACT_ERRNO(EACCES), "openat", 1, &w);
		}
	}
	/* glibc's getaddrinfo asks the kernel's routing table (a NETLINK_ROUTE socket) to order the
	 * addresses of a name that has several, as oauth2.googleapis.com has: libcurl's resolver */
	struct scmp_arg_cmp nl[2] = { SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
				      SCMP_A2(SCMP_CMP_EQ, NETLINK_ROUTE) };
	if (r == 0)
		r = add(ctx, SCMP_ACT_ALLOW, "socket", 2, nl);
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

/* ---- the sandbox's filters ---- */

/* What user code never needs; EPERM so a program sees an error it can report, not a crash. The
 * agent's filter leaves out the entries marked in agent_may (it builds the program's own
 * namespaces, agent/runproc.c); the program's filter, stacked on the agent's, denies them all. */
static const char *const jail_deny[] = {
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "mount", "umount2",
	"pivot_root", "chroot", "unshare", "setns", "move_mount", "open_tree", "fsopen",
	"fsconfig", "fsmount", "fspick", "mount_setattr", "bpf", "perf_event_open", "kexec_load",
	"kexec_file_load", "keyctl", "add_key", "request_key", "init_module", "finit_module",
	"delete_module", "swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd",
	"open_by_handle_at", "name_to_handle_at", "userfaultfd", "iopl", "ioperm",
	"lookup_dcookie", "clock_settime", "clock_adjtime", "settimeofday", "adjtimex", "syslog",
	"fanotify_init", "vhangup", "sethostname", "setdomainname", "personality", "uselib",
	"nfsservctl", "_sysctl", "pciconfig_read", "pciconfig_write", "io_uring_setup",
};
/* the agent mounts the program's /proc, /tmp and read-only views in the program's own mount
 * namespace (it has no capability anywhere else, so mount fails in the jail's) */
static const char *const agent_may[] = { "mount" };

/* clone's namespace flags; the agent may create the program's user, mount, pid and ipc ones */
static const struct {
	unsigned long flag;
	bool agent_may;
} ns_flags[] = {
	{ CLONE_NEWUSER, true }, { CLONE_NEWNS, true }, { CLONE_NEWPID, true },
	{ CLONE_NEWIPC, true },  { CLONE_NEWNET, false }, { CLONE_NEWUTS, false },
	{ CLONE_NEWCGROUP, false },
};

/* agent_allowed - is this deny-list entry lifted for the agent? */
static bool agent_allowed(const char *name)
{
	for (size_t i = 0; i < sizeof(agent_may) / sizeof(agent_may[0]); i++)
		if (strcmp(name, agent_may[i]) == 0)
			return true;
	return false;
}

/* sandbox_rules - the deny list into ctx: all of it for a program, less agent_may for the agent */
static int sandbox_rules(scmp_filter_ctx ctx, bool agent)
{
	int r = 0;
	uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
	for (size_t i = 0; r == 0 && i < sizeof(jail_deny) / sizeof(jail_deny[0]); i++)
		if (!agent || !agent_allowed(jail_deny[i]))
			r = add(ctx, eperm, jail_deny[i], 0, NULL);
	/* new namespaces through clone: any CLONE_NEW* flag */
	for (size_t i = 0; r == 0 && i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++) {
		if (agent && ns_flags[i].agent_may)
			continue;
		struct scmp_arg_cmp f = SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i].flag, ns_flags[i].flag);
		r = add(ctx, eperm, "clone", 1, &f);
	}
	/* clone3's flags are out of a filter's reach: make libc fall back to clone */
	if (r == 0)
		r = add(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL);
	/* packet sockets, and raw sockets of any family */
	struct scmp_arg_cmp packet = SCMP_A0(SCMP_CMP_EQ, AF_PACKET);
	if (r == 0)
		r = add(ctx, eperm, "socket", 1, &packet);
	struct scmp_arg_cmp raw = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_RAW);
	if (r == 0)
		r = add(ctx, eperm, "socket", 1, &raw);
	return r;
}

int seccomp_jail_apply(void)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return -ENOMEM;
	int r = sandbox_rules(ctx, true);
	if (r == 0)
		r = seccomp_load(ctx);
	seccomp_release(ctx);
	return r;
}

/* user_rules - the user program's filter, built but not loaded */
static scmp_filter_ctx user_rules(int agent_pid)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return NULL;
	int r = sandbox_rules(ctx, false);
	/* pids are ints in a 64-bit register: compare the low 32 bits */
	const int32_t protect[] = { 1, -1, agent_pid, -agent_pid };
	static const char *const calls[] = { "kill", "tgkill", "tkill", "rt_sigqueueinfo",
					     "rt_tgsigqueueinfo", "pidfd_open" };
	for (size_t c = 0; r == 0 && c < sizeof(calls) / sizeof(calls[0]); c++)
		for (size_t i = 0; r == 0 && i < 4; i++) {
			struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu,
							(scmp_datum_t)(uint32_t)protect[i]);
			r = add(ctx, SCMP_ACT_ERRNO(EPERM), calls[c], 1, &a);
		}
	/* another process's limits, priority, scheduling or memory placement: the agent runs
	 * as the same uid (the Go runtime raises its own RLIMIT_NOFILE: pid 0, itself) */
	static const char *const self_only[] = { "prlimit64", "sched_setaffinity",
						 "sched_setscheduler", "sched_setparam",
						 "sched_setattr", "migrate_pages", "move_pages" };
	struct scmp_arg_cmp other = SCMP_A0(SCMP_CMP_NE, 0);
	for (size_t i = 0; r == 0 && i < sizeof(self_only) / sizeof(self_only[0]); i++)
		r = add(ctx, SCMP_ACT_ERRNO(EPERM), self_only[i], 1, &other);
	/* setpriority and ioprio_set name a process, a group or a whole uid (the agent's) */
	struct scmp_arg_cmp not_process = SCMP_A0(SCMP_CMP_NE, PRIO_PROCESS);
	struct scmp_arg_cmp not_self = SCMP_A1(SCMP_CMP_NE, 0);
	struct scmp_arg_cmp not_ioprio_process = SCMP_A0(SCMP_CMP_NE, 1 /* IOPRIO_WHO_PROCESS */);
	if (r == 0)
		r = add(ctx, SCMP_ACT_ERRNO(EPERM), "setpriority", 1, &not_process);
	if (r == 0)
		r = add(ctx, SCMP_ACT_ERRNO(EPERM), "setpriority", 1, &not_self);
	if (r == 0)
		r = add(ctx, SCMP_ACT_ERRNO(EPERM), "ioprio_set", 1, &not_ioprio_process);
	if (r == 0)
		r = add(ctx, SCMP_ACT_ERRNO(EPERM), "ioprio_set", 1, &not_self);
	if (r != 0) {
		seccomp_release(ctx);
		return NULL;
	}
	return ctx;
}

int seccomp_user_apply(int agent_pid)
{
	scmp_filter_ctx ctx = user_rules(agent_pid);
	if (!ctx)
		return -ENOMEM;
	int r = seccomp_load(ctx);
	seccomp_release(ctx);
	return r;
}

int seccomp_user_prepare(int agent_pid, struct sock_fprog *prog)
{
	scmp_filter_ctx ctx = user_rules(agent_pid);
	if (!ctx)
		return -ENOMEM;
	/* libseccomp 2.5 exports only to a descriptor: go through a memfd */
	int fd = memfd_create("kg-seccomp", MFD_CLOEXEC);
	int r = fd < 0 ? -errno : seccomp_export_bpf(ctx, fd);
	seccomp_release(ctx);
	if (r == 0) {
		off_t size = lseek(fd, 0, SEEK_END);
		struct sock_filter *f = size > 0 ? malloc((size_t)size) : NULL;
		if (!f || pread(fd, f, (size_t)size, 0) != size) {
			free(f);
			r = -EIO;
		} else {
			prog->filter = f;
			prog->len = (unsigned short)((size_t)size / sizeof(struct sock_filter));
		}
	}
	if (fd >= 0)
		close(fd);
	return r;
}
