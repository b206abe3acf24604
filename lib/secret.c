/*
 * secret.c - see secret.h.
 */
#include "lib/secret.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

/* secret_free - see secret.h (OPENSSL_cleanse: a wipe the compiler may not drop) */
void secret_free(char *s)
{
	if (s) {
		OPENSSL_cleanse(s, strlen(s));
		free(s);
	}
}
