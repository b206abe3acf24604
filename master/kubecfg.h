/*
 * kubecfg.h - the master's Kubernetes access: kubeconfig (or in-cluster service account),
 * credential plugins. The credential never leaves the master: master/kube_api.c uses it for
 * the calls master/sandbox_kube.c makes on a worker's behalf.
 *
 * Workers cannot read the operator's kubeconfig through a bug of theirs and cannot exec, so
 * the master resolves the access once (kubectl's rules: --kubeconfig, else $KUBECONFIG's files
 * merged, else ~/.kube/config, else the pod's service account). Exec credential plugins
 * (client.authentication.k8s.io, e.g. gke-gcloud-auth-plugin) run here, in the master, and
 * their output is cached until it expires.
 */
#ifndef KG_MASTER_KUBECFG_H
#define KG_MASTER_KUBECFG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct serve_config;

/* kubecfg_load - resolve the access named by cfg (kubeconfig, context, namespace) and get a
 * first credential; 0, or -1 with a sentence in err. Call once before workers start. */
int kubecfg_load(const struct serve_config *cfg, char *err, size_t errlen);

/* A copy of the current access (owned; kubecfg_cred_free). Only the master holds it: no part
 * of it goes to a worker. */
struct kubecfg_cred {
	char *server, *ns;
	char *ca, *cert, *key;     /* PEM, NUL-terminated; NULL when absent */
	size_t ca_len, cert_len, key_len;
	char *token;               /* bearer token or NULL */
	bool insecure, in_cluster;
	time_t expires;            /* an exec plugin's credential; 0: never */
};
/* kubecfg_current - the current credential, running the exec plugin again if the cached one
 * expires within 90 s, or if the API server refused it (refresh) and the last run is over 10 s
 * old; a token file is read again each time (projected tokens rotate). 0, or -1 with err. */
int kubecfg_current(struct kubecfg_cred *c, bool refresh, char *err, size_t errlen);
void kubecfg_cred_free(struct kubecfg_cred *c);

/* kubecfg_request - the API server's URL for path into url (q->url points to it), and its TLS
 * settings and the current credential onto q, pointing into *c: kubecfg_cred_free(c) after the
 * request. 0, or a negative errno (-EACCES: no credential) with err set and nothing to free */
struct http_request;
int kubecfg_request(struct http_request *q, struct kubecfg_cred *c, bool refresh, char *url,
		    size_t urlcap, const char *path, char *err, size_t errlen);
const char *kubecfg_server(void);
const char *kubecfg_namespace(void);
bool kubecfg_in_cluster(void);

/* kubecfg_describe - "context NAME, server URL, namespace NS" for logs */
const char *kubecfg_describe(void);

/* yaml_to_json - parse one YAML document (block or flow style, so JSON too) into jansson
 * values: mappings become objects, sequences arrays, scalars strings (plain null, ~ and empty
 * become null). Anchors and aliases are refused. NULL with a sentence in err. */
json_t *yaml_to_json(const char *text, size_t len, char *err, size_t errlen);

#endif
