/*
 * sandbox.h - the master's sandbox backends as one interface: what the monitor, supervision
 * and the transports ask of a worker's sandbox, whichever backend serves it.
 *
 * The layers, bottom up: lib/ and ipc/; a worker's channel (master/channel.c), identities
 * (master/identity.c), the background queue (master/later.c); the backends
 * (master/sandbox_local.c; master/sandbox_kube.c over master/kube_api.c over
 * master/kubecfg.c, which is configuration and credentials only); supervision
 * (master/spawn.c) and the monitor (master/monitor.c), which reach a sandbox only through this
 * table; the transports (master/stdio.c, master/pool.c); http, serve, exec. No file calls one
 * of a layer above it (tests/layers.sh checks).
 */
#ifndef KG_MASTER_SANDBOX_H
#define KG_MASTER_SANDBOX_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "master/master.h"

struct sandbox_backend {
	const char *name; /* "local", "kubernetes" */
	/* answer - REQ_SANDBOX, already checked by master/monitor.c: spawn (a second spawn
	 * replaces the first) or release; the backend sends ANS_SANDBOX, now or from a thread of
	 * its own. user: the session's, for labels ("local" when none) */
	void (*answer)(struct worker *w, uint32_t seq, bool spawn, const char *user);
	/* reaped - a child of the master exited: was it w's sandbox? (NULL: the backend starts
	 * no child processes) */
	bool (*reaped)(struct worker *w, pid_t pid, int status);
	/* released - the worker sent "release" on its way out (a message drained after it
	 * exited): give its sandbox back as asked (NULL: release does the same) */
	void (*released)(struct worker *w);
	/* release - the worker is gone: what its sandbox holds goes, unless kept. wait: return
	 * only when all is done (stdio's end, exec); else the slow part runs in the background */
	void (*release)(struct worker *w, bool wait);
	/* taken - a session took w, a pre-started worker: its sandbox is a session's now (the
	 * local backend raises its CPU weight); NULL: nothing changes */
	void (*taken)(struct worker *w);
};

extern const struct sandbox_backend sandbox_local_backend;
extern const struct sandbox_backend sandbox_kube_backend;

/* sandbox_backend - the backend serving cfg's workers */
static inline const struct sandbox_backend *sandbox_backend(const struct serve_config *cfg)
{
	return cfg->kubernetes ? &sandbox_kube_backend : &sandbox_local_backend;
}

#endif
