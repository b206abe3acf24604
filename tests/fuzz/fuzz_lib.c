/*
 * fuzz_lib.c - libFuzzer target for the shared parsers in lib/ that read untrusted text:
 * base64 and base64url (lib/base64.c: JWT parts, JWKs, kubeconfig data fields) and RFC 3339
 * times (lib/rfc3339.c: exec plugins' and Google's expiry times).
 *
 * Built by tests/fuzz/Makefile. The first byte picks the decoder's flags, the rest is the
 * text, passed without a NUL to the decoder so ASan sees a read past its length. Besides
 * "no crash, no leak": what a strict decode takes is exactly what the encoder writes (one
 * encoding per value), whatever decodes re-encodes and decodes to the same bytes, and a time
 * that parses as UTC formats back to the same seconds.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lib/base64.h"
#include "lib/rfc3339.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0 || size > 4096)
		return 0;
	unsigned flags = data[0] & (B64_URL | B64_LAX);
	const char *in = (const char *)data + 1;
	size_t len = size - 1;
	char *copy = malloc(len);
	if (!copy)
		return 0;
	memcpy(copy, in, len);
	size_t n = 0;
	unsigned char *out = malloc(B64_DECODED_MAX(len) + 1);
	if (out && b64_decode(copy, len, flags, out, B64_DECODED_MAX(len), &n) == 0) {
		if (n > B64_DECODED_MAX(len))
			__builtin_trap();
		char *e = b64_encode(out, n, flags);
		if (e) {
			if ((flags & B64_URL) && !(flags & B64_LAX) &&
			    (strlen(e) != len || memcmp(e, copy, len) != 0))
				__builtin_trap(); /* strict: one encoding per value */
			size_t m = 0;
			unsigned char *again = malloc(B64_DECODED_MAX(strlen(e)) + 1);
			if (again) {
				if (b64_decode(e, strlen(e), flags | B64_LAX, again,
					       B64_DECODED_MAX(strlen(e)), &m) != 0 ||
				    m != n || memcmp(again, out, n) != 0)
					__builtin_trap();
				free(again);
			}
			free(e);
		}
	}
	free(out);
	free(copy);

	char *s = malloc(len + 1);
	if (!s)
		return 0;
	memcpy(s, in, len);
	s[len] = '\0';
	time_t t;
	if (rfc3339_parse(s, &t) == 0 && len >= 1 && (s[len - 1] == 'Z' || s[len - 1] == 'z')) {
		char back[RFC3339_LEN + 1];
		time_t t2;
		rfc3339_format(t, back, sizeof(back));
		/* it must come back, unless a leap second pushed 9999 into year 10000 */
		if (back[0] ? rfc3339_parse(back, &t2) != 0 || t2 != t : !strstr(s, ":60"))
			__builtin_trap();
	}
	free(s);
	return 0;
}
