/*
 * tls.h - HTTPS served by kode-gopher itself (`serve --http --tls-cert FILE --tls-key FILE`),
 * for deployments without a TLS-terminating proxy in front: libmicrohttpd's TLS (GnuTLS) with
 * the certificate chain and key read at start-up and again on SIGHUP. master/tls.c; used by
 * master/http.c.
 */
#ifndef KG_TLS_H
#define KG_TLS_H

#include <microhttpd.h>
#include <stdbool.h>

#include "master/master.h"
#include "policy/limits.h"

/* tls_option - --tls-cert, --tls-key; 1 handled, 0 not ours */
int tls_option(struct serve_config *cfg, const char *name, const char *val);
/* tls_check_config - both or neither; 0 or -1 with a sentence on stderr */
int tls_check_config(const struct serve_config *cfg);
/* tls_options - the daemon's TLS options into ops (at most 3 entries, MHD_OPTION_END last) and
 * its flag; 0, or -1 with the reason logged. *keep holds what ops point at: free it after the
 * daemon stops (tls_free) */
int tls_options(const struct serve_config *cfg, struct MHD_OptionItem *ops, unsigned *flags, void **keep);
void tls_free(void *keep);
/* tls_enabled - HTTPS is served */
bool tls_enabled(void);
/* tls_reload - SIGHUP: read --tls-cert and --tls-key again; new handshakes get the new pair.
 * 0, or -1 (logged) and the old pair stays. Nothing to do without TLS. */
int tls_reload(void);
#define TLS_OPTIONS { "tls-cert", required_argument, 0, 0 }, { "tls-key", required_argument, 0, 0 }

#endif
