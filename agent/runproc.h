/*
 * runproc.h - the agent's children: lib/runproc.h's runner (deadline, group kill, capped
 * capture) plus the namespaces the user's program runs in (runproc_isolated, a launcher).
 *
 * Called by the agent's pipeline (agent/pipeline.c, agent/gobuild.c) for `go build`, `go get`,
 * `go doc` and the user's binary.
 */
#ifndef KG_RUNPROC_H
#define KG_RUNPROC_H

#include "lib/runproc.h"

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
 * runproc_isolation_init - remember the isolation for later runs with runproc_isolated() and
 * try it once (a throwaway init in the namespaces, with every mount): 0 when it works here; a
 * negative errno (the kernel or a container runtime refuses nested user namespaces, /proc
 * cannot be mounted) and runs go without, as before. Call once, before any thread runs a child.
 */
int runproc_isolation_init(const struct runproc_isolation *iso);

/* runproc_isolated - the launcher for runproc_opts.launcher that starts the program in those
 * namespaces; NULL (a plain run) where isolation is not available here */
const struct runproc_launcher *runproc_isolated(void);

#endif
