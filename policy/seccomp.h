/*
 * seccomp.h - the worker's syscall filter (policy/seccomp.c).
 */
#ifndef KG_SECCOMP_H
#define KG_SECCOMP_H

/*
 * seccomp_worker_lockdown - install the worker's allow list with default action kill.
 *   mode "kill": a syscall off the list kills the process (the normal case);
 *   mode "log":  it is logged to stderr by name and fails with ENOSYS instead (debugging: run
 *                the tests with --seccomp log to find a missing entry);
 *   mode "off":  no filter (only for debugging on hosts without seccomp).
 * Also sets no_new_privs. flags: SECCOMP_WORKER_READ_ONLY (Landlock is not there to guard the
 * file system) makes every openat that could write or create fail with EACCES.
 * Returns 0 or a negative errno.
 */
#define SECCOMP_WORKER_READ_ONLY 0x1u
int seccomp_worker_lockdown(const char *mode, unsigned flags);

#endif

/*
 * seccomp_jail_apply - the filter on everything in a local sandbox (agent, go, user programs):
 * allow by default, and fail with EPERM what user code never needs: ptrace, mount and friends,
 * namespaces (unshare, setns, clone with CLONE_NEW*), bpf, perf_event_open, kexec, keyctl,
 * modules, raw and packet sockets, and the like. Needs no_new_privs (or CAP_SYS_ADMIN). The
 * agent keeps mount and clone with new user, mount, pid and ipc namespaces, for the program's
 * own namespaces (agent/runproc.c); the program's filter below takes those away again.
 */
int seccomp_jail_apply(void);

/*
 * seccomp_user_apply - the user's program's filter, installed by the agent just before exec: the
 * whole sandbox deny list (nothing lifted for it), and it may not signal (kill, tgkill, tkill,
 * rt_sigqueueinfo, rt_tgsigqueueinfo, or a pidfd) its parent (the agent), pid 1, or everyone
 * (-1), nor set another process's limits (prlimit64 with a pid).
 */
int seccomp_user_apply(int agent_pid);

/* seccomp_user_prepare - the same rules compiled to a BPF program, for a forked child of a
 * threaded process to install with prctl alone (no allocation after fork). Free prog->filter. */
struct sock_fprog;
int seccomp_user_prepare(int agent_pid, struct sock_fprog *prog);
