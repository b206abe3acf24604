/*
 * kubetls.c - see kubetls.h.
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/kubetls.h"

int kube_tls_apply(CURL *h, const struct kube_tls *t, struct curl_slist **hdr)
{
	if (t->ca) {
		struct curl_blob b = { (void *)t->ca, t->ca_len, CURL_BLOB_COPY };
		curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
	}
	if (t->cert && t->key) {
		struct curl_blob c = { (void *)t->cert, t->cert_len, CURL_BLOB_COPY };
		struct curl_blob k = { (void *)t->key, t->key_len, CURL_BLOB_COPY };
		curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &c);
		curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
		curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &k);
		curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
	}
	if (t->insecure) {
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	if (!t->token)
		return 0;
	size_t n = strlen(t->token) + 32;
	char *line = malloc(n);
	if (!line)
		return -ENOMEM;
	snprintf(line, n, "Authorization: Bearer %s", t->token);
	struct curl_slist *h2 = curl_slist_append(*hdr, line);
	OPENSSL_cleanse(line, n);
	free(line);
	if (!h2)
		return -ENOMEM;
	*hdr = h2;
	return 0;
}
