/*
 * gcreds.h - the server's Google credentials settings that the master and the worker both
 * read: the --credentials modes (said and parsed once), and the Application Default
 * Credentials file (where it is, its text).
 *
 * Called by master/serve.c (checks --credentials), master/monitor.c (answers REQ_ADC with the
 * file's text: a worker's own identity cannot read the operator's file), master/exec.c (is
 * there a file at all) and worker/creds.c, worker/main.c (the session's credentials).
 */
#ifndef KG_LIB_GCREDS_H
#define KG_LIB_GCREDS_H

#include <stdbool.h>
#include <stddef.h>

enum creds_mode { CREDS_NONE, CREDS_ADC, CREDS_METADATA, CREDS_SERVICE_ACCOUNT, CREDS_SERVER,
		  CREDS_USER };

/* gcreds_parse_mode - "adc", "metadata", "service-account:EMAIL", "server", "user" or "none"
 * into *mode (and *email, pointing into arg, or NULL); 0 or -EINVAL with a sentence */
int gcreds_parse_mode(const char *arg, enum creds_mode *mode, const char **email, char *err,
		      size_t errlen);
/* gcreds_mode_name - "adc", "metadata", ... */
const char *gcreds_mode_name(enum creds_mode m);

/* gcreds_adc_path - where the Application Default Credentials file is looked for:
 * $GOOGLE_APPLICATION_CREDENTIALS (*explicit set), else gcloud's well-known file */
void gcreds_adc_path(char *out, size_t cap, bool *explicit);
/* gcreds_adc_read - the text of the file at gcreds_adc_path (malloc'd: wipe and free it), or
 * NULL with a sentence (*absent: there is no file and none was named); at most
 * GCREDS_MAX_ADC_BYTES */
char *gcreds_adc_read(size_t *len, bool *absent, char *err, size_t errlen);

#endif
