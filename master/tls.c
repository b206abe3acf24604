/*
 * tls.c - HTTPS for the shared server (master/tls.h): read --tls-cert and --tls-key (PEM) and
 * hand them to libmicrohttpd. The key's bytes are wiped when the server stops.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "master/tls.h"

struct tls_files {
	char *cert, *key;
	size_t key_len;
};

int tls_option(struct serve_config *cfg, const char *name, const char *val)
{
	if (strcmp(name, "tls-cert") == 0)
		cfg->tls_cert = val;
	else if (strcmp(name, "tls-key") == 0)
		cfg->tls_key = val;
	else
		return 0;
	return 1;
}

int tls_check_config(const struct serve_config *cfg)
{
	if (!cfg->tls_cert != !cfg->tls_key) {
		fprintf(stderr, "kode-gopher: HTTPS needs both --tls-cert FILE (the PEM certificate "
			"chain) and --tls-key FILE (its PEM private key)\n");
		return -1;
	}
	if (cfg->tls_cert && !cfg->http) {
		fprintf(stderr, "kode-gopher: --tls-cert and --tls-key are for the shared server: add --http\n");
		return -1;
	}
	return 0;
}

/* tls_read - a whole PEM file, NUL-terminated */
static char *tls_read(const char *path, const char *what, size_t *len)
{
	FILE *f = fopen(path, "re");
	struct stat st;
	char *buf = NULL;
	if (!f || fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    st.st_size > TLS_MAX_FILE_BYTES || !(buf = malloc((size_t)st.st_size + 1)) ||
	    fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
		log_error("%s %s: cannot read it (a PEM file of at most 1 MiB)", what, path);
		free(buf);
		if (f)
			fclose(f);
		return NULL;
	}
	fclose(f);
	buf[st.st_size] = '\0';
	*len = (size_t)st.st_size;
	return buf;
}

int tls_options(const struct serve_config *cfg, struct MHD_OptionItem *ops, unsigned *flags, void **keep)
{
	*keep = NULL;
	ops[0] = (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL };
	if (!cfg->tls_cert)
		return 0;
	if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
		log_error("this libmicrohttpd has no TLS: terminate HTTPS in a proxy in front instead");
		return -1;
	}
	struct tls_files *t = calloc(1, sizeof(*t));
	size_t clen;
	if (!t || !(t->cert = tls_read(cfg->tls_cert, "--tls-cert", &clen)) ||
	    !(t->key = tls_read(cfg->tls_key, "--tls-key", &t->key_len))) {
		tls_free(t);
		return -1;
	}
	if (!strstr(t->cert, "-----BEGIN CERTIFICATE-----") || !strstr(t->key, "PRIVATE KEY-----")) {
		log_error("--tls-cert wants a PEM certificate chain and --tls-key its PEM private key");
		tls_free(t);
		return -1;
	}
	ops[0] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_CERT, 0, t->cert };
	ops[1] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_MEM_KEY, 0, t->key };
	ops[2] = (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL };
	*flags |= MHD_USE_TLS;
	*keep = t;
	return 0;
}

void tls_free(void *keep)
{
	struct tls_files *t = keep;
	if (!t)
		return;
	if (t->key)
		explicit_bzero(t->key, t->key_len);
	free(t->key);
	free(t->cert);
	free(t);
}
