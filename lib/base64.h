/*
 * base64.h - base64 (RFC 4648 §4) and base64url (§5), both directions, for JWTs and JWKs
 * (master and worker), PKCE challenges (master) and kubeconfig data fields (master).
 * Hand-written rather than EVP_DecodeBlock: that one accepts either alphabet's characters
 * mixed, stray low bits and leading space, and counts padding as data, so every caller
 * wrapped it in its own fix-ups.
 */
#ifndef KG_LIB_BASE64_H
#define KG_LIB_BASE64_H

#include <stddef.h>

enum {
	B64_URL = 1u << 0, /* the URL alphabet ('-', '_'); without it '+', '/' */
	/* B64_LAX: white space (any byte up to ' ') skipped, up to two '=' at the end, and the
	 * last character's unused low bits ignored (kubeconfigs, tokens of other issuers).
	 * Without it: no white space, no padding, those bits zero (one encoding per value). */
	B64_LAX = 1u << 1,
};

/* B64_DECODED_MAX - enough room for what len characters decode to */
#define B64_DECODED_MAX(len) ((len) / 4 * 3 + 3)

/* b64_decode - decode in[0..len) into out (cap bytes; B64_DECODED_MAX(len) always suffice).
 * 0 with *outlen set, -EINVAL (not base64 of that kind), -ENOSPC (over cap) */
int b64_decode(const char *in, size_t len, unsigned flags, unsigned char *out, size_t cap,
	       size_t *outlen);

/* b64_decode_alloc - the same into a malloc'd buffer with a NUL after the data; NULL: not
 * base64 of that kind (errno EINVAL) or out of memory (ENOMEM) */
unsigned char *b64_decode_alloc(const char *in, size_t len, unsigned flags, size_t *outlen);

/* b64_encode - with B64_URL base64url without padding (JWTs, PKCE), else base64 with padding;
 * malloc'd, NUL-terminated; NULL when out of memory */
char *b64_encode(const unsigned char *in, size_t len, unsigned flags);

#endif
