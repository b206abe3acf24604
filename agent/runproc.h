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
};

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

/* runproc_signame - "SIGKILL" for SIGKILL, "SIG<n>" for a number without a name; thread-safe */
const char *runproc_signame(int sig);

/* runproc_elapsed_ms - milliseconds on the monotonic clock since *start */
long runproc_elapsed_ms(const struct timespec *start);

#endif
