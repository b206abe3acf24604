/*
 * fuzz_jwt.c - libFuzzer target for sign-in's parsers of untrusted bytes (master/jwt.c,
 * master/auth.c, master/oidc.c): a bearer token as auth_check_access reads it, and an ID token
 * with a key set as oidc_sign_in reads them (jwt_parse, jwt_verify_jwks with the JWK decoding,
 * oidc_check_claims).
 *
 * Built by tests/fuzz/Makefile. The input is "JWKS-JSON \n TOKEN": everything before the first
 * newline is the key set (any bytes; not JSON is fine), the rest the token, passed without a
 * terminating NUL so ASan sees a read past its length. Besides "no crash, no leak": a token
 * nobody signed is never accepted, and a refusal of an ID token always says why.
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "master/auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	if (!ready) {
		unsigned char key[32] = { 1 };
		log_init("fuzz", LOG_LVL_OFF);
		auth_init_local("http://127.0.0.1:8080", key);
		ready = true;
	}
	const uint8_t *nl = memchr(data, '\n', size);
	size_t klen = nl ? (size_t)(nl - data) : 0;
	const uint8_t *tok = nl ? nl + 1 : data;
	size_t tlen = size - (size_t)(tok - data);
	char *t = malloc(tlen ? tlen : 1);
	if (!t)
		return 0;
	memcpy(t, tok, tlen);
	char user[AUTH_USER_MAX];
	/* the key is not in the input: a token that passes would be a forgery */
	if (auth_check_access(t, tlen, 1800000000, user, sizeof(user)) == 0)
		__builtin_trap();
	json_t *jwks = klen ? json_loadb((const char *)data, klen, 0, NULL) : NULL;
	struct jwt j;
	if (jwt_parse(t, tlen, &j) == 0) {
		int v = jwks ? jwt_verify_jwks(&j, jwks) : -1;
		(void)v;
		struct oidc_identity id;
		char why[600] = "";
		if (oidc_check_claims(j.claims, "https://idp.test", "client-1", "n-1", "example.com",
				      "alice@example.com", 1800000000, &id, why, sizeof(why)) != 0 && !why[0])
			__builtin_trap();
		jwt_free(&j);
	}
	json_decref(jwks);
	free(t);
	return 0;
}
