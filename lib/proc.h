/*
 * proc.h - what every process that starts children needs around fork and wait: the child's
 * clean start (proc_spawn: master/spawn.c's workers, master/sandbox_local.c's jails) and a wait
 * status said in words for logs and error sentences.
 */
#ifndef KG_LIB_PROC_H
#define KG_LIB_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* proc_status_text - "exited with status 1" / "killed by signal 9 (SIGKILL)" into buf */
const char *proc_status_text(int status, char *buf, size_t cap);

/* How proc_spawn starts a child: stdin from /dev/null, stdout to /dev/null or to stderr, no
 * other descriptor, the default signal state, tied to this process (proc_child_enter). */
struct proc_how {
	bool stdout_to_stderr;
	bool setsid;              /* a session and process group of its own */
	int nice;                 /* its nice value (what this thread has if it cannot be set) */
};

/* proc_spawn - start path with argv that way; the pid, or a negative errno */
pid_t proc_spawn(const char *path, char *const argv[], const struct proc_how *how);

/* the spawning process's pid, for proc_child_enter */
#define PROC_PARENT_ENV "KG_SPAWN_PARENT"

/* proc_wait_exit - wait at most timeout_ms for the child pid to end (on its pidfd, not by
 * sleeping) and reap it into *status (may be NULL). 1 when it ended (or was reaped elsewhere),
 * 0 when it still runs, a negative errno on failure. */
int proc_wait_exit(pid_t pid, int timeout_ms, int *status);

/* proc_wait_gone - wait at most timeout_ms for the processes pids[0..n) (any, not only
 * children) to end, on their pidfds; returns how many still run */
size_t proc_wait_gone(const pid_t *pids, size_t n, int timeout_ms);

/* proc_child_enter - first thing in main(): a child of proc_spawn dies with its parent (the
 * parent-death signal; an exit if the parent is already gone) */
void proc_child_enter(void);

#endif
