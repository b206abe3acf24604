/*
 * gcreds.c - the --credentials modes and the Application Default Credentials file, for the
 * master and the worker alike (gcreds.h).
 */
#include "lib/gcreds.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/ascii.h"
#include "policy/limits.h" /* GCREDS_*: macros only */

/* gcreds_mode_name - see gcreds.h */
const char *gcreds_mode_name(enum creds_mode m)
{
	static const char *const names[] = { "none", "adc", "metadata", "service-account",
					     "server", "user" };
	return m <= CREDS_USER ? names[m] : "?";
}

/* gcreds_parse_mode - see gcreds.h */
int gcreds_parse_mode(const char *arg, enum creds_mode *mode, const char **email_out, char *err,
		      size_t errlen)
{
	static const struct { const char *name; enum creds_mode m; } modes[] = {
		{ "adc", CREDS_ADC }, { "metadata", CREDS_METADATA }, { "server", CREDS_SERVER },
		{ "user", CREDS_USER }, { "none", CREDS_NONE },
	};
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if (strcmp(arg, modes[i].name) == 0) {
			*mode = modes[i].m;
			*email_out = NULL;
			return 0;
		}
	if (strncmp(arg, "service-account:", 16) == 0) {
		const char *email = arg + 16;
		const char *at = strchr(email, '@');
		if (!ascii_visible_str(email, GCREDS_MAX_EMAIL_BYTES) || !at || at == email || !at[1] || strchr(email, '/') ||
		    strchr(email, '?') || strchr(email, '#') || strchr(email, '%')) {
			snprintf(err, errlen, "--credentials service-account:EMAIL wants a service "
				 "account's email, like runner@my-project.iam.gserviceaccount.com");
			return -EINVAL;
		}
		*mode = CREDS_SERVICE_ACCOUNT;
		*email_out = email;
		return 0;
	}
	snprintf(err, errlen, "--credentials wants adc, metadata, service-account:EMAIL, server, "
		 "user or none");
	return -EINVAL;
}

/* gcreds_adc_path - see gcreds.h */
void gcreds_adc_path(char *out, size_t cap, bool *explicit)
{
	const char *gac = getenv("GOOGLE_APPLICATION_CREDENTIALS");
	*explicit = gac && *gac;
	if (*explicit) {
		snprintf(out, cap, "%s", gac);
		return;
	}
	const char *cfgdir = getenv("CLOUDSDK_CONFIG"), *home = getenv("HOME");
	if (cfgdir && *cfgdir)
		snprintf(out, cap, "%s/application_default_credentials.json", cfgdir);
	else
		snprintf(out, cap, "%s/.config/gcloud/application_default_credentials.json",
			 home && *home ? home : "/nonexistent");
}

/* gcreds_adc_read - see gcreds.h */
char *gcreds_adc_read(size_t *len, bool *absent, char *err, size_t errlen)
{
	char path[PATH_MAX];
	bool explicit;
	gcreds_adc_path(path, sizeof(path), &explicit);
	*absent = false;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		*absent = e == ENOENT && !explicit;
		if (*absent)
			snprintf(err, errlen, "there are no Application Default Credentials (%.200s does "
				 "not exist and GOOGLE_APPLICATION_CREDENTIALS is not set); run "
				 "`gcloud auth application-default login`", path);
		else
			snprintf(err, errlen, "cannot read the Application Default Credentials %.200s: %s",
				 path, strerror(e));
		return NULL;
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > GCREDS_MAX_ADC_BYTES) {
		close(fd);
		snprintf(err, errlen, "the Application Default Credentials %.200s are not a regular file "
			 "of at most %d bytes", path, GCREDS_MAX_ADC_BYTES);
		return NULL;
	}
	char *buf = malloc(GCREDS_MAX_ADC_BYTES + 1);
	size_t n = 0;
	ssize_t r = 0;
	while (buf && n < GCREDS_MAX_ADC_BYTES + 1 &&
	       (r = read(fd, buf + n, GCREDS_MAX_ADC_BYTES + 1 - n)) > 0)
		n += (size_t)r;
	close(fd);
	if (!buf || r < 0 || n > GCREDS_MAX_ADC_BYTES) {
		if (buf)
			OPENSSL_cleanse(buf, n);
		free(buf);
		snprintf(err, errlen, "cannot read the Application Default Credentials %.200s", path);
		return NULL;
	}
	buf[n] = '\0';
	*len = n;
	return buf;
}
