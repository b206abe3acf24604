/*
 * base64.c - see base64.h.
 */
#include "lib/base64.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

/* b64_alphabet - the 64 characters of the alphabet flags name */
static const char *b64_alphabet(unsigned flags)
{
	return flags & B64_URL ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
			       : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

/* b64_value - one character's six bits in the alphabet flags name, or -1 */
static int b64_value(unsigned char c, unsigned flags)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	bool url = flags & B64_URL;
	if (c == (url ? '-' : '+'))
		return 62;
	if (c == (url ? '_' : '/'))
		return 63;
	return -1;
}

/* b64_decode - see base64.h */
int b64_decode(const char *in, size_t len, unsigned flags, unsigned char *out, size_t cap,
	       size_t *outlen)
{
	bool lax = flags & B64_LAX;
	size_t n = 0, data = 0, pad = 0;
	unsigned acc = 0;
	int bits = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)in[i];
		if (lax && c <= ' ')
			continue;
		if (lax && c == '=') {
			pad++;
			continue;
		}
		int v = b64_value(c, flags);
		if (v < 0 || pad) /* not of the alphabet, or data after padding */
			return -EINVAL;
		acc = ((acc << 6) | (unsigned)v) & 0xfff;
		bits += 6;
		data++;
		if (bits >= 8) {
			bits -= 8;
			if (n == cap)
				return -ENOSPC;
			out[n++] = (unsigned char)(acc >> bits);
		}
	}
	/* one character left over holds no whole byte; strict: the unused bits must be zero */
	if (pad > 2 || data % 4 == 1 || (!lax && bits && (acc & ((1u << bits) - 1))))
		return -EINVAL;
	*outlen = n;
	return 0;
}

/* b64_decode_alloc - see base64.h */
unsigned char *b64_decode_alloc(const char *in, size_t len, unsigned flags, size_t *outlen)
{
	unsigned char *out = malloc(B64_DECODED_MAX(len) + 1);
	if (!out) {
		errno = ENOMEM;
		return NULL;
	}
	size_t n;
	if (b64_decode(in, len, flags, out, B64_DECODED_MAX(len), &n) < 0) {
		free(out);
		errno = EINVAL;
		return NULL;
	}
	out[n] = '\0';
	*outlen = n;
	return out;
}

/* b64_encode - see base64.h */
char *b64_encode(const unsigned char *in, size_t len, unsigned flags)
{
	const char *abc = b64_alphabet(flags);
	bool pad = !(flags & B64_URL);
	char *out = malloc((len + 2) / 3 * 4 + 1);
	if (!out)
		return NULL;
	size_t n = 0, i = 0;
	for (; i + 2 < len; i += 3) {
		unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 | in[i + 2];
		out[n++] = abc[v >> 18];
		out[n++] = abc[(v >> 12) & 63];
		out[n++] = abc[(v >> 6) & 63];
		out[n++] = abc[v & 63];
	}
	if (i < len) {
		unsigned v = (unsigned)in[i] << 16 | (i + 1 < len ? (unsigned)in[i + 1] << 8 : 0);
		out[n++] = abc[v >> 18];
		out[n++] = abc[(v >> 12) & 63];
		if (i + 1 < len)
			out[n++] = abc[(v >> 6) & 63];
		else if (pad)
			out[n++] = '=';
		if (pad)
			out[n++] = '=';
	}
	out[n] = '\0';
	return out;
}
