/*
 * sandbox_kube.h - Kubernetes sandboxes, claimed by the master on a worker's request
 * (master/sandbox_kube.c). The counterpart of sandbox_local_* for --backend kubernetes.
 *
 * A worker never holds the server's credential: on REQ_SANDBOX "spawn" the master creates (or,
 * with --claim, adopts) a SandboxClaim named for the worker's session, watches it until it is
 * Ready, renews its lease while the worker lives and deletes it when the worker releases it or
 * dies. The worker reaches its agent through a relay the master listens on for it alone (a unix
 * socket in the master's runtime directory): the relay forwards only the agent's own endpoints,
 * only to that claim's pod (its IP, or the API server's pods/proxy with the server's
 * credential), and only for the worker's pid. docs/kubernetes.md says what that leaves a
 * compromised worker.
 */
#ifndef KG_MASTER_SANDBOX_KUBE_H
#define KG_MASTER_SANDBOX_KUBE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct worker;

/* sandbox_kube_answer - REQ_SANDBOX on the Kubernetes backend, checked by master/monitor.c:
 * spawn (a claim made Ready; a second spawn replaces the first) or release. The work runs on a
 * thread of its own; ANS_SANDBOX follows when it is done. user labels the claim. */
void sandbox_kube_answer(struct worker *w, uint32_t seq, bool spawn, const char *user);

/* sandbox_kube_released - the worker said "release" on its way out (a message drained after it
 * exited): give the claim back, no answer */
void sandbox_kube_released(struct worker *w);

/* sandbox_kube_worker_gone - the worker is gone: its relay closes, and a claim it still holds
 * (it died without releasing it) is deleted now, unless --persistent keeps it */
void sandbox_kube_worker_gone(struct worker *w);

/* sandbox_kube_shutdown - before the master exits: wait (up to 16 s) for deletions under way */
void sandbox_kube_shutdown(void);

/* sandbox_kube_claim_ready - a SandboxClaim object (from the API server: untrusted shape) is
 * Ready and names its sandbox: 1; else 0, with why (cap bytes) saying what it lacks */
int sandbox_kube_claim_ready(json_t *claim, char *why, size_t cap);

/* sandbox_kube_relay_test - for tests/unit: give w a relay to base_url (an agent's
 * "http://IP:PORT") without a cluster; its socket path goes to sock. 0 or a negative errno. */
int sandbox_kube_relay_test(struct worker *w, const char *base_url, char *sock, size_t cap);

#endif
