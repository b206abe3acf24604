/*
 * kubecfg.h - the master's Kubernetes access: kubeconfig (or in-cluster service account),
 * credential plugins, and the answer to a worker's REQ_KUBE.
 *
 * Workers cannot read the operator's kubeconfig through a bug of theirs and cannot exec, so
 * the master resolves the access once (kubectl's rules: --kubeconfig, else $KUBECONFIG's files
 * merged, else ~/.kube/config, else the pod's service account) and hands each worker only the
 * server, CA, namespace and current credential. Exec credential plugins
 * (client.authentication.k8s.io, e.g. gke-gcloud-auth-plugin) run here, in the master, on a
 * worker's request, and their output is cached until it expires.
 */
#ifndef KG_MASTER_KUBECFG_H
#define KG_MASTER_KUBECFG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct serve_config;
struct worker;

/* kubecfg_load - resolve the access named by cfg (kubeconfig, context, namespace) and get a
 * first credential; 0, or -1 with a sentence in err. Call once before workers start. */
int kubecfg_load(const struct serve_config *cfg, char *err, size_t errlen);

/* kubecfg_answer - a worker's REQ_KUBE: send ANS_KUBE with the current credential, running
 * the exec plugin again if the cached one expires within 90 s, or if the worker says the API
 * server refused it (refresh) and the last run is over 10 s old */
void kubecfg_answer(struct worker *w, uint32_t seq, bool refresh);

struct ipc_claim_note;
/* kubecfg_note_claim - a worker's NOTE_CLAIM: remember which claim it holds */
void kubecfg_note_claim(struct worker *w, const struct ipc_claim_note *n);
/* kubecfg_worker_gone - the worker is gone: if it died holding a claim it would have deleted,
 * delete it now (in the background), so a crash does not leave a pod for a whole lease */
void kubecfg_worker_gone(struct worker *w);

/* kubecfg_shutdown - before the master exits: wait (up to 16 s) for those deletions */
void kubecfg_shutdown(void);

/* kubecfg_describe - "context NAME, server URL, namespace NS" for logs */
const char *kubecfg_describe(void);

/* yaml_to_json - parse one YAML document (block or flow style, so JSON too) into jansson
 * values: mappings become objects, sequences arrays, scalars strings (plain null, ~ and empty
 * become null). Anchors and aliases are refused. NULL with a sentence in err. */
json_t *yaml_to_json(const char *text, size_t len, char *err, size_t errlen);

#endif
