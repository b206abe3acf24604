/*
 * runproc.h - run one child process with a deadline, kill its whole process group, and capture
 * its stdout and stderr within a fixed memory cap.
 *
 * Called by the agent's pipeline (agent/pipeline.c, agent/gobuild.c) for `go build`, `go get`,
 * `go doc` and the user's binary. Safe to call from a thread of a multi-threaded process: the
 * child does only async-signal-safe work between fork and exec.
 */
#ifndef KG_RUNPROC_H
#define KG_RUNPROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "lib/mono.h" /* mono_since_ms for the durations callers time */

struct sock_fprog;

struct runproc_opts {
	const char *const *argv;  /* argv[0] without a slash is looked up in envp's PATH */
	const char *const *envp;  /* the child's whole environment; NULL: an empty one */
	const char *cwd;          /* NULL: inherit */
	int timeout_ms;           /* <= 0: no deadline */
	int term_signal;          /* sent to the group at the deadline; 0: send nothing then
				   * (the child has its own deadline, e.g. a context) */
	int grace_ms;             /* after the deadline, before SIGKILL to the group */
	size_t out_cap;           /* bytes kept of stdout; 0: 1 MiB */
	size_t err_cap;           /* bytes kept of stderr; 0: 1 MiB */
	bool keep_tail;           /* over the cap keep head and tail halves with a marker line;
				   * false keeps only the head */
	bool merge_stderr;        /* stderr goes into the stdout capture (compiler output) */
	const struct sock_fprog *seccomp; /* installed in the child just before exec; NULL: none */
	bool isolate;             /* in the program's own namespaces (runproc_isolation_init);
				   * ignored where isolation is not available */
};

/*
 * The user's program is isolated from the agent that starts it: it runs in its own user, pid,
 * mount and ipc namespaces, below a small init (the agent's forked copy) that reaps and then
 * exits with the program. So it cannot name, signal, ptrace or prlimit the agent (it sees only
 * its own pids, with a fresh /proc), nothing it starts outlives it (when the program ends its
 * namespace's init ends, and the kernel kills every process left in the namespace, setsid,
 * double fork or not), its /tmp is a tmpfs of its own that goes with it, and the agent's files
 * are read-only or hidden in its view.
 */
#define RUNPROC_ISO_MAX_PATHS 8
struct runproc_isolation {
	const char *hide[RUNPROC_ISO_MAX_PATHS];     /* an empty read-only tmpfs over each */
	const char *readonly[RUNPROC_ISO_MAX_PATHS]; /* made read-only (with what is under it) */
	const char *writable[RUNPROC_ISO_MAX_PATHS]; /* under a read-only one, stays writable */
	const char *tmpfs[RUNPROC_ISO_MAX_PATHS];    /* a fresh tmpfs for each run (/tmp) */
	unsigned long long tmpfs_bytes;              /* size of each fresh tmpfs; 0: 1 GiB */
};

/*
 * runproc_isolation_init - remember the isolation for later runs with .isolate and try it once
 * (a throwaway init in the namespaces, with every mount): 0 when it works here; a negative errno
 * (the kernel or a container runtime refuses nested user namespaces, /proc cannot be mounted)
 * and runs with .isolate go without, as before. Call once, before any thread runs a child.
 */
int runproc_isolation_init(const struct runproc_isolation *iso);

struct runproc_capture {
	char *data;        /* NUL-terminated; may contain other NULs; never NULL after a run */
	size_t len;        /* bytes in data, marker included */
	uint64_t total;    /* bytes the child wrote */
	bool truncated;
};

struct runproc_result {
	int exit_code;     /* -1 when killed by a signal */
	int signal;        /* 0 when it exited */
	bool timed_out;    /* we reached the deadline (whatever happened after) */
	bool cancelled;    /* the thread's watch asked for it to stop (runproc_watch): killed */
	long wall_ms;
	long user_ms, sys_ms, maxrss_kb;  /* rusage of the child and its reaped descendants */
	struct runproc_capture out, err;
};

/*
 * runproc_run - start argv in a new session (its own process group), stdin /dev/null, die with
 * the calling thread (PR_SET_PDEATHSIG), and wait for it. When the main child ends, whatever it
 * left behind in its group is killed. Returns 0 when the child ran (whatever its status),
 * -ENOENT/-EACCES/... when it could not be started, -ENOMEM.
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


#endif
