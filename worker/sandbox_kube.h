/*
 * sandbox_kube.h - the worker's Kubernetes sandbox backend (worker/sandbox_kube.c): claims
 * from an agent-sandbox warm pool. worker/sandbox.c calls it when kube_settings.on is set.
 */
#ifndef KG_WORKER_SANDBOX_KUBE_H
#define KG_WORKER_SANDBOX_KUBE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct session;
struct agent_endpoint;

/* The worker's --backend kubernetes settings (filled by worker/main.c). */
struct kube_settings {
	bool on;
	const char *warm_pool;  /* SandboxWarmPool to claim from */
	const char *access;     /* "auto", "pod-ip" or "proxy" */
	int port;               /* the agent's port in the pod */
	int lease_s;            /* shutdownTime = now + lease, renewed every lease/3 */
	int ready_s;            /* how long a claim may take to be Ready */
	const char *claim;      /* --claim NAME, or NULL */
	bool persistent;        /* no lease; the claim stays at session end */
};
extern struct kube_settings kube_settings;

/* sandbox_kube_get - the session's sandbox: claimed (created, or --claim adopted), Ready,
 * and its agent claimed; 0, or a negative errno with a sentence in err */
int sandbox_kube_get(struct session *s, struct agent_endpoint **ep, char *err, size_t errlen);
/* sandbox_kube_replace - the sandbox died mid-call: --claim's claim once more, else a new
 * claim (the old one is deleted) */
int sandbox_kube_replace(struct session *s, struct agent_endpoint **ep, char *err,
			 size_t errlen);
/* sandbox_kube_lost - does this agent_client error mean the pod is gone or was replaced? */
bool sandbox_kube_lost(int rc);
/* sandbox_kube_name - the current SandboxClaim's name ("" before the first call) */
const char *sandbox_kube_name(void);
/* sandbox_kube_have - a claimed sandbox is connected (a call ran in this session) */
bool sandbox_kube_have(void);
/* sandbox_kube_claim_ready - a SandboxClaim object (from the API server: untrusted shape) is
 * Ready and names its sandbox: 1; else 0, with why (cap bytes) saying what it lacks */
int sandbox_kube_claim_ready(json_t *claim, char *why, size_t cap);

/* sandbox_kube_release - session end: stop renewing; delete the claim, or with --persistent
 * leave it and release its agent */
void sandbox_kube_release(struct session *s);

#endif
