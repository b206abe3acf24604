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
 * Also sets no_new_privs. Returns 0 or a negative errno.
 */
int seccomp_worker_lockdown(const char *mode);

#endif
