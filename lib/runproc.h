/*
 * runproc.h - run one child process with a deadline, kill everything it started, and capture
 * its stdout and stderr within a fixed memory cap.
 *
 * Called by the agent (agent/pipeline.c, agent/gobuild.c: the Go toolchain and the user's
 * binary, with agent/runproc.c's namespaces as the launcher) and by the master (master/kubecfg.c:
 * a kubeconfig's exec credential plugin, contained). Safe to call from a thread of a
 * multi-threaded process: the child does only async-signal-safe work between fork and exec.
 */
#ifndef KG_LIB_RUNPROC_H
#define KG_LIB_RUNPROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "lib/mono.h" /* mono_since_ms for the durations callers time */

struct sock_fprog;
struct runproc_launcher;

struct runproc_opts {
	const char *const *argv;  /* argv[0] without a slash is looked up in envp's PATH */
	const char *const *envp;  /* the child's whole environment; NULL: an empty one */
	const char *cwd;          /* NULL: inherit */
	int timeout_ms;           /* <= 0: no deadline */
	int term_signal;          /* sent to the group at the deadline; 0: send nothing then
				   * (the child has its own deadline, e.g. a context) */
	int grace_ms;             /* after the deadline, before SIGKILL to the group */
	size_t out_cap;           /* bytes kept of stdout; 0: RUNPROC_DEFAULT_CAP_BYTES */
	size_t err_cap;           /* bytes kept of stderr; 0: RUNPROC_DEFAULT_CAP_BYTES */
	bool keep_tail;           /* over the cap keep head and tail halves with a marker line;
				   * false keeps only the head */
	bool kill_at_cap;         /* a child writing more than a cap is killed (result .over_cap)
				   * instead of drained to the end */
	bool merge_stderr;        /* stderr goes into the stdout capture (compiler output) */
	bool contain;             /* below a small reaper of ours, so nothing the child starts
				   * outlives it: not a fork that exits, a setsid, a double fork, a
				   * child that closed its output and keeps running */
	const struct sock_fprog *seccomp; /* installed in the child just before exec; NULL: none */
	const struct runproc_launcher *launcher; /* NULL: a plain fork (or the reaper, contain) */
};

struct runproc_capture {
	char *data;        /* NUL-terminated; may contain other NULs; never NULL after a run */
	size_t len;        /* bytes in data, marker included */
	uint64_t total;    /* bytes the child wrote (with kill_at_cap: up to the kill) */
	bool truncated;
};

struct runproc_result {
	int exit_code;     /* -1 when killed by a signal */
	int signal;        /* 0 when it exited */
	bool timed_out;    /* we reached the deadline (whatever happened after) */
	bool over_cap;     /* kill_at_cap: it wrote more than a cap and was killed */
	bool cancelled;    /* the thread's watch asked for it to stop (runproc_watch): killed */
	long wall_ms;
	long user_ms, sys_ms, maxrss_kb;  /* rusage of the child and its reaped descendants */
	struct runproc_capture out, err;
};

/*
 * runproc_run - start argv in a new session (its own process group), stdin /dev/null, die with
 * the calling thread (PR_SET_PDEATHSIG), and wait for it. When the main child ends, whatever it
 * left behind in its group is killed (contain: whatever it left behind at all). Returns 0 when
 * the child ran (whatever its status), -ENOENT/-EACCES/... when it could not be started,
 * -ENOMEM.
 */
int runproc_run(const struct runproc_opts *o, struct runproc_result *r);
void runproc_result_free(struct runproc_result *r);

/*
 * A call someone is watching (agent/server.c sets it for the thread that runs a call): every
 * child this thread starts is killed at once, its whole group or pid namespace, when cancel_fd
 * becomes readable, and none starts after that (runproc_run returns -ECANCELED); and each line
 * a child writes is handed to line() as it is read, until line() returns false (the watcher
 * has seen enough: the rest is only captured). stream is 1 (stdout) or 2 (stderr; a merged
 * capture reports its lines as 2, since compilers and go write there). A line longer than
 * RUNPROC_LINE_MAX comes in pieces; the text has no newline.
 */
#define RUNPROC_LINE_MAX 1024
struct runproc_watch {
	int cancel_fd;                 /* -1: not cancellable */
	bool (*line)(void *ctx, int stream, const char *text, size_t len); /* NULL: none */
	void *ctx;
};
/* runproc_watch_set - this thread's watch (copied; NULL: none) */
void runproc_watch_set(const struct runproc_watch *w);
/* runproc_cancelled - has this thread's watch asked its children to stop? */
bool runproc_cancelled(void);

/* runproc_signame - "SIGKILL" for SIGKILL, "SIG<n>" for a number without a name; thread-safe */
const char *runproc_signame(int sig);

/*
 * A launcher starts the process runproc_run waits for and signals as a group, in place of a
 * plain fork: agent/runproc.c's puts an init in namespaces of its own above the program. It
 * runs in the runner's thread; what it forks does only async-signal-safe work.
 */
struct runproc_child {
	const char *path;             /* argv[0] resolved */
	const struct runproc_opts *o;
	pid_t parent;                 /* who forks the program, for its parent check */
	int in, out, err;             /* the program's stdin, stdout and stderr */
	int report;                   /* the program writes an errno here if it cannot start */
};
struct runproc_launcher {
	/* start - fork; the pid, or a negative errno. *status_fd: -1, or the read end of a pipe
	 * (O_NONBLOCK) on which the launched init writes the program's own wait status */
	pid_t (*start)(const struct runproc_child *c, int *status_fd);
};

/* runproc_child_exec - in a forked child: the program's stdio and default signals, no other
 * descriptor, prep() (when given; a nonzero return is an errno), the seccomp filter, execve.
 * own_session: setsid first. Never returns: a failure goes to c->report as an errno and the
 * child exits 127. Async-signal-safe. */
void runproc_child_exec(const struct runproc_child *c, bool own_session, int (*prep)(void))
	__attribute__((noreturn));

/* runproc_report_errno - wait on the read end of a child's report pipe (runproc_child_exec's
 * c->report): 0 when it closed without a word (the exec happened), else the errno the child
 * reported (EIO for a report of 0). The caller closes fd. Async-signal-safe. */
int runproc_report_errno(int fd);

/* runproc_close_except - close every descriptor from 3 up but the n in keep (sorted in place);
 * for a forked init that lives as long as the program and must not hold the runner's sockets.
 * Async-signal-safe. */
void runproc_close_except(int *keep, size_t n);

#endif
