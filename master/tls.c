/*
 * tls.c - HTTPS for the shared server (master/tls.h): --tls-cert (a PEM chain) and --tls-key
 * (its PEM private key), loaded with GnuTLS and handed to libmicrohttpd through its certificate
 * callback, so that SIGHUP can load them again (tls_reload, from the main loop): a handshake
 * after the reload gets the new certificate, and connections already open keep theirs.
 *
 * A pair that cannot be read, does not parse, or whose key does not match the certificate is
 * refused: at start-up the server does not start; on a reload the old pair stays in use. Every
 * pair loaded is kept until the server stops, since a handshake under way may still use it
 * (reloads are rare and a pair is a few KiB); the keys are freed by GnuTLS, the files' bytes
 * wiped as soon as they are parsed.
 */
#include <errno.h>
#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "master/tls.h"
#include "policy/limits.h"

struct tls_pair {
	gnutls_pcert_st pcert[TLS_MAX_CHAIN];
	unsigned n;
	gnutls_privkey_t key;
	struct tls_pair *older;
};

static struct {
	const char *cert_path, *key_path;
	struct tls_pair *cur;     /* what new handshakes get (atomic) */
	pthread_mutex_t mu;       /* reloads */
	unsigned long reloads;
} T = { .mu = PTHREAD_MUTEX_INITIALIZER };

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

static void tls_pair_free(struct tls_pair *p)
{
	for (unsigned i = 0; i < p->n; i++)
		gnutls_pcert_deinit(&p->pcert[i]);
	if (p->key)
		gnutls_privkey_deinit(p->key);
	free(p);
}

/* tls_matches - does the key sign what the certificate's public key verifies? */
static bool tls_matches(struct tls_pair *p)
{
	static const unsigned char probe[] = "kode-gopher: does the key match the certificate?";
	gnutls_datum_t data = { (unsigned char *)probe, sizeof(probe) }, sig = { NULL, 0 };
	int pk = gnutls_pubkey_get_pk_algorithm(p->pcert[0].pubkey, NULL);
	gnutls_sign_algorithm_t algo = gnutls_pk_to_sign(pk, GNUTLS_DIG_SHA256);
	bool ok = algo != GNUTLS_SIGN_UNKNOWN &&
		  gnutls_privkey_sign_data2(p->key, algo, 0, &data, &sig) == 0 &&
		  gnutls_pubkey_verify_data2(p->pcert[0].pubkey, algo, 0, &data, &sig) >= 0;
	gnutls_free(sig.data);
	return ok;
}

/* tls_load - the pair from the two files; NULL with the reason logged */
static struct tls_pair *tls_load(void)
{
	size_t clen = 0, klen = 0;
	char *cert = tls_read(T.cert_path, "--tls-cert", &clen);
	char *key = cert ? tls_read(T.key_path, "--tls-key", &klen) : NULL;
	struct tls_pair *p = key ? calloc(1, sizeof(*p)) : NULL;
	const char *why = NULL;
	if (p) {
		gnutls_datum_t c = { (unsigned char *)cert, (unsigned)clen }, k = { (unsigned char *)key, (unsigned)klen };
		unsigned n = TLS_MAX_CHAIN;
		if (!strstr(cert, "-----BEGIN CERTIFICATE-----") || !strstr(key, "PRIVATE KEY-----"))
			why = "--tls-cert wants a PEM certificate chain and --tls-key its PEM private key";
		else if (gnutls_pcert_list_import_x509_raw(p->pcert, &n, &c, GNUTLS_X509_FMT_PEM, 0) < 0 || n == 0)
			why = "--tls-cert is not a PEM certificate chain GnuTLS can read (at most 8 certificates)";
		else
			p->n = n; /* imported: tls_pair_free deinits them */
		if (!why && (gnutls_privkey_init(&p->key) < 0 ||
			     gnutls_privkey_import_x509_raw(p->key, &k, GNUTLS_X509_FMT_PEM, NULL, 0) < 0))
			why = "--tls-key is not an unencrypted PEM private key";
		if (!why && !tls_matches(p))
			why = "--tls-key is not the private key of --tls-cert's first certificate";
		if (why) {
			log_error("%s", why);
			tls_pair_free(p);
			p = NULL;
		}
	}
	if (key)
		explicit_bzero(key, klen);
	free(key);
	free(cert);
	return p;
}

/* tls_pick - GnuTLS asks which certificate a handshake presents: the current pair */
static int tls_pick(gnutls_session_t s, const gnutls_datum_t *req_ca, int nreq,
		    const gnutls_pk_algorithm_t *pk, int npk, gnutls_pcert_st **pcert,
		    unsigned int *pcert_length, gnutls_privkey_t *key)
{
	(void)s, (void)req_ca, (void)nreq, (void)pk, (void)npk;
	struct tls_pair *p = __atomic_load_n(&T.cur, __ATOMIC_ACQUIRE);
	if (!p)
		return -1;
	*pcert = p->pcert;
	*pcert_length = p->n;
	*key = p->key;
	return 0;
}

int tls_options(const struct serve_config *cfg, struct MHD_OptionItem *ops, unsigned *flags, void **keep)
{
	*keep = NULL;
	ops[0] = (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL };
	if (!cfg->tls_cert)
		return 0;
	if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES ||
	    MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK) != MHD_YES) {
		log_error("this libmicrohttpd has no TLS with a certificate callback: terminate HTTPS "
			  "in a proxy in front instead");
		return -1;
	}
	T.cert_path = cfg->tls_cert;
	T.key_path = cfg->tls_key;
	struct tls_pair *p = tls_load();
	if (!p)
		return -1;
	__atomic_store_n(&T.cur, p, __ATOMIC_RELEASE);
	ops[0] = (struct MHD_OptionItem){ MHD_OPTION_HTTPS_CERT_CALLBACK, 0, (void *)tls_pick };
	ops[1] = (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL };
	*flags |= MHD_USE_TLS;
	*keep = &T;
	return 0;
}

bool tls_enabled(void)
{
	return __atomic_load_n(&T.cur, __ATOMIC_ACQUIRE) != NULL;
}

int tls_reload(void)
{
	if (!tls_enabled())
		return 0;
	pthread_mutex_lock(&T.mu);
	struct tls_pair *p = tls_load();
	if (p) {
		p->older = T.cur;
		__atomic_store_n(&T.cur, p, __ATOMIC_RELEASE);
		T.reloads++;
		log_info("reloaded the TLS certificate from %s and its key from %s (reload %lu); new "
			 "connections get it, open ones keep theirs", T.cert_path, T.key_path, T.reloads);
	} else {
		log_error("SIGHUP: the TLS certificate was not reloaded (see above); connections keep "
			  "getting the one loaded before");
	}
	pthread_mutex_unlock(&T.mu);
	return p ? 0 : -1;
}

void tls_free(void *keep)
{
	if (!keep)
		return;
	pthread_mutex_lock(&T.mu);
	struct tls_pair *p = __atomic_exchange_n(&T.cur, NULL, __ATOMIC_ACQ_REL);
	while (p) {
		struct tls_pair *o = p->older;
		tls_pair_free(p);
		p = o;
	}
	pthread_mutex_unlock(&T.mu);
}
