/*
 * kubetls.h - put a Kubernetes API server's TLS settings and a credential on a libcurl handle.
 * Used by the master only (master/kubecfg.c kubecfg_apply, for master/kube_api.c and the agent
 * relay of master/sandbox_kube.c): no worker holds a credential to put on a handle.
 */
#ifndef KG_KUBETLS_H
#define KG_KUBETLS_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>

struct kube_tls {
	const char *ca;     /* PEM bundle, or NULL for the system's CAs */
	size_t ca_len;
	const char *cert;   /* client certificate and key (PEM), both or neither */
	size_t cert_len;
	const char *key;
	size_t key_len;
	const char *token;  /* bearer token, or NULL */
	bool insecure;      /* insecure-skip-tls-verify */
};

/* kube_tls_apply - set the options (blobs are copied) and append the Authorization header to
 * *hdr; 0, or -ENOMEM (the header could not be added) */
int kube_tls_apply(CURL *h, const struct kube_tls *t, struct curl_slist **hdr);

#endif
