/*
 * random.c - see random.h.
 */
#include "lib/random.h"

#include <stdlib.h>

#include <openssl/rand.h>

/* random_hex - see random.h */
void random_hex(char *out, size_t nbytes)
{
	static const char digits[] = "0123456789abcdef";
	unsigned char b[64];
	if (nbytes > sizeof(b))
		nbytes = sizeof(b);
	if (RAND_bytes(b, (int)nbytes) != 1)
		abort(); /* no randomness: session ids and tokens would be guessable */
	for (size_t i = 0; i < nbytes; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * nbytes] = '\0';
}
