/*
 * test_auth.c - unit tests for sign-in's token code: the JWS codec and signature checks of
 * master/jwt.c (RS256 and ES256 with keys made here by OpenSSL, HS256), kode-gopher's access
 * tokens (auth_check_access: audience, issuer, expiry, type, key) and the ID token's claims
 * (oidc_check_claims: issuer, audience, azp, expiry, nonce, email_verified, hd, allowed users),
 * each at a fixed clock, so expiry is tested without waiting; and the token store's seal
 * (master/tokenstore.c: AES-256-GCM, every changed byte refused, another key refused), its key
 * file formats, and a round trip of what auth.c keeps.
 */
#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "lib/base64.h"
#include "master/auth.h"
#include "master/tokenstore.h"

#define NOW ((time_t)1800000000)

/* sign_with - a compact JWS over header and claims with an asymmetric key (RS256 or ES256) */
static char *sign_with(EVP_PKEY *key, const char *header, const json_t *claims, bool ec)
{
	char *cj = json_dumps(claims, JSON_COMPACT);
	char *h = b64_encode((const unsigned char *)header, strlen(header), B64_URL);
	char *c = b64_encode((const unsigned char *)cj, strlen(cj), B64_URL);
	char *input = NULL;
	assert_true(asprintf(&input, "%s.%s", h, c) > 0);
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	size_t siglen = 0;
	assert_int_equal(EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, key), 1);
	assert_int_equal(EVP_DigestSign(md, NULL, &siglen, (unsigned char *)input, strlen(input)), 1);
	unsigned char *sig = malloc(siglen);
	assert_int_equal(EVP_DigestSign(md, sig, &siglen, (unsigned char *)input, strlen(input)), 1);
	unsigned char raw[64];
	if (ec) { /* DER ECDSA-Sig-Value to JWS's r||s */
		const unsigned char *p = sig;
		ECDSA_SIG *s = d2i_ECDSA_SIG(NULL, &p, (long)siglen);
		assert_non_null(s);
		BN_bn2binpad(ECDSA_SIG_get0_r(s), raw, 32);
		BN_bn2binpad(ECDSA_SIG_get0_s(s), raw + 32, 32);
		ECDSA_SIG_free(s);
	}
	char *se = b64_encode(ec ? raw : sig, ec ? 64 : siglen, B64_URL);
	char *out = NULL;
	assert_true(asprintf(&out, "%s.%s", input, se) > 0);
	EVP_MD_CTX_free(md);
	free(cj), free(h), free(c), free(input), free(sig), free(se);
	return out;
}

/* bn_b64 - a key parameter as base64url */
static char *bn_b64(EVP_PKEY *key, const char *name, int pad)
{
	BIGNUM *bn = NULL;
	assert_int_equal(EVP_PKEY_get_bn_param(key, name, &bn), 1);
	unsigned char buf[1024];
	int n = pad ? BN_bn2binpad(bn, buf, pad) : BN_bn2bin(bn, buf);
	BN_free(bn);
	return b64_encode(buf, (size_t)n, B64_URL);
}

static json_t *claims_base(void)
{
	return json_pack("{s:s, s:s, s:I, s:I, s:s, s:s, s:b}", "iss", "https://idp.test", "aud", "client-1",
			 "exp", (json_int_t)NOW + 300, "iat", (json_int_t)NOW - 5, "nonce", "n-1", "email",
			 "Alice@Example.com", "email_verified", 1);
}

static void test_jwt_parse_shapes(void **state)
{
	(void)state;
	struct jwt j;
	const char *bad[] = { "", "a.b", "a.b.c.d", "a.b.c.d.e", "e30.e30.", "e30.e30", "W10.e30.AAAA",
			      "e30.W10.AAAA", "e30.eyJhIjoxLCJhIjoyfQ.AAAA" /* duplicate key */, "e30.e30.AA=A" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(jwt_parse(bad[i], strlen(bad[i]), &j), -EINVAL);
	assert_int_equal(jwt_parse("e30.e30.AAAA", 12, &j), 0);
	jwt_free(&j);
	char *big = malloc(AUTH_MAX_JWT_BYTES + 2);
	memset(big, 'A', AUTH_MAX_JWT_BYTES + 1);
	memcpy(big, "e30.e30.", 8);
	big[AUTH_MAX_JWT_BYTES + 1] = '\0';
	assert_int_equal(jwt_parse(big, strlen(big), &j), -EINVAL);
	free(big);
}

static void test_rs256_and_es256(void **state)
{
	(void)state;
	EVP_PKEY *rsa = EVP_RSA_gen(2048), *ec = EVP_EC_gen("P-256");
	assert_non_null(rsa);
	assert_non_null(ec);
	char *n = bn_b64(rsa, OSSL_PKEY_PARAM_RSA_N, 0), *e = bn_b64(rsa, OSSL_PKEY_PARAM_RSA_E, 0);
	char *x = bn_b64(ec, OSSL_PKEY_PARAM_EC_PUB_X, 32), *y = bn_b64(ec, OSSL_PKEY_PARAM_EC_PUB_Y, 32);
	json_t *jwks = json_pack("{s:[{s:s,s:s,s:s,s:s,s:s},{s:s,s:s,s:s,s:s,s:s}]}", "keys", "kty", "RSA", "kid", "r1",
				 "use", "sig", "n", n, "e", e, "kty", "EC", "kid", "e1", "crv", "P-256", "x", x, "y", y);
	json_t *c = claims_base();
	struct jwt j;
	char *t = sign_with(rsa, "{\"alg\":\"RS256\",\"kid\":\"r1\"}", c, false);
	assert_int_equal(jwt_parse(t, strlen(t), &j), 0);
	assert_int_equal(jwt_verify_jwks(&j, jwks), 0);
	jwt_free(&j);
	/* the same bytes with another claim: the signature no longer holds */
	char *dot = strchr(t, '.');
	char *payload2 = b64_encode((const unsigned char *)"{\"email\":\"eve@x\"}", 17, B64_URL);
	char *forged = NULL;
	assert_true(asprintf(&forged, "%.*s.%s%s", (int)(dot - t), t, payload2, strrchr(t, '.')) > 0);
	assert_int_equal(jwt_parse(forged, strlen(forged), &j), 0);
	assert_int_equal(jwt_verify_jwks(&j, jwks), -EBADMSG);
	jwt_free(&j);
	/* a key id nobody has: ENOKEY (the caller refetches the key set) */
	char *t2 = sign_with(rsa, "{\"alg\":\"RS256\",\"kid\":\"r9\"}", c, false);
	assert_int_equal(jwt_parse(t2, strlen(t2), &j), 0);
	assert_int_equal(jwt_verify_jwks(&j, jwks), -ENOKEY);
	jwt_free(&j);
	/* algorithm confusion: the header says none, or HS256 */
	const char *algs[] = { "{\"alg\":\"none\",\"kid\":\"r1\"}", "{\"alg\":\"HS256\",\"kid\":\"r1\"}",
			       "{\"alg\":\"ES256\",\"kid\":\"r1\"}" };
	for (int i = 0; i < 3; i++) {
		char *t3 = sign_with(rsa, algs[i], c, false);
		assert_int_equal(jwt_parse(t3, strlen(t3), &j), 0);
		assert_int_not_equal(jwt_verify_jwks(&j, jwks), 0);
		jwt_free(&j);
		free(t3);
	}
	char *t4 = sign_with(ec, "{\"alg\":\"ES256\",\"kid\":\"e1\"}", c, true);
	assert_int_equal(jwt_parse(t4, strlen(t4), &j), 0);
	assert_int_equal(jwt_verify_jwks(&j, jwks), 0);
	j.sig[5] ^= 1;
	assert_int_equal(jwt_verify_jwks(&j, jwks), -EBADMSG);
	jwt_free(&j);
	free(t), free(t2), free(t4), free(forged), free(payload2), free(n), free(e), free(x), free(y);
	json_decref(c);
	json_decref(jwks);
	EVP_PKEY_free(rsa);
	EVP_PKEY_free(ec);
}

/* access - an access token with these claims changed, signed with key */
static char *access_token(const unsigned char *key, const char *typ, const char *k, json_t *v)
{
	json_t *c = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:s}", "iss", "http://127.0.0.1:8080", "aud",
			      "http://127.0.0.1:8080/mcp", "sub", "alice@example.com", "iat", (json_int_t)NOW,
			      "exp", (json_int_t)NOW + AUTH_ACCESS_TOKEN_S, "kg_grant", (json_int_t)1, "scope",
			      "openid mcp");
	if (k)
		json_object_set_new(c, k, v);
	char *t = jwt_sign_hs256(c, typ, key, 32);
	json_decref(c);
	return t;
}

static void test_access_tokens(void **state)
{
	(void)state;
	unsigned char key[32], other[32];
	memset(key, 7, sizeof(key));
	memset(other, 8, sizeof(other));
	assert_int_equal(auth_init_local("http://127.0.0.1:8080/", key), 0);
	char user[AUTH_USER_MAX];
	char *t = access_token(key, "at+jwt", NULL, NULL);
	assert_int_equal(auth_check_access(t, strlen(t), NOW, user, sizeof(user)), 0);
	assert_string_equal(user, "alice@example.com");
	assert_int_equal(auth_check_access(t, strlen(t), NOW + AUTH_ACCESS_TOKEN_S, user, sizeof(user)), -EACCES);
	free(t);
	struct { const char *typ, *k; json_t *v; const unsigned char *key; } bad[] = {
		{ "at+jwt", "aud", json_string("http://127.0.0.1:9090/mcp"), key },    /* another resource */
		{ "at+jwt", "aud", json_string("http://127.0.0.1:8080"), key },        /* not /mcp */
		{ "at+jwt", "aud", json_pack("[s]", "http://127.0.0.1:8080/mcp"), key }, /* one string only */
		{ "at+jwt", "iss", json_string("http://127.0.0.1:9090"), key },        /* another issuer */
		{ "at+jwt", "exp", json_integer(NOW - 1), key },                       /* expired */
		{ "at+jwt", "exp", json_string("9999999999"), key },
		{ "at+jwt", "sub", json_integer(5), key },
		{ "at+jwt", "kg_grant", json_string("1"), key },                       /* not a sign-in of ours */
		{ "at+jwt", "kg_grant", json_integer(0), key },
		{ "JWT", NULL, NULL, key },                                            /* an ID token's type */
		{ "at+jwt", NULL, NULL, other },                                       /* another key */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		t = access_token(bad[i].key, bad[i].typ, bad[i].k, bad[i].v);
		assert_int_equal(auth_check_access(t, strlen(t), NOW, user, sizeof(user)), -EACCES);
		free(t);
	}
	/* valid, but without the scope /mcp needs: insufficient_scope (403), not invalid_token */
	json_t *narrow[] = { json_string("openid email"), json_string("mcpx"), json_string(""), json_integer(1), NULL };
	for (size_t i = 0; narrow[i]; i++) {
		t = access_token(key, "at+jwt", "scope", narrow[i]);
		assert_int_equal(auth_check_access(t, strlen(t), NOW, user, sizeof(user)), -EPERM);
		free(t);
	}
	t = access_token(key, "at+jwt", "scope", json_string(AUTH_SCOPE));
	assert_int_equal(auth_check_access(t, strlen(t), NOW, user, sizeof(user)), 0);
	free(t);
}

/* a client metadata document is kept as its Cache-Control says, within bounds */
static void test_cimd_cache_seconds(void **state)
{
	(void)state;
	assert_int_equal(auth_cache_seconds(""), AUTH_CIMD_CACHE_S);
	assert_int_equal(auth_cache_seconds(NULL), AUTH_CIMD_CACHE_S);
	assert_int_equal(auth_cache_seconds("public, max-age=600"), 600);
	assert_int_equal(auth_cache_seconds("max-age=600, s-maxage=300"), 300);
	assert_int_equal(auth_cache_seconds("MAX-AGE=7200"), 7200);
	assert_int_equal(auth_cache_seconds("max-age=0"), AUTH_CIMD_MIN_CACHE_S);
	assert_int_equal(auth_cache_seconds("no-store"), AUTH_CIMD_MIN_CACHE_S);
	assert_int_equal(auth_cache_seconds("max-age=600, no-cache"), AUTH_CIMD_MIN_CACHE_S);
	assert_int_equal(auth_cache_seconds("max-age=99999999999"), AUTH_CIMD_MAX_CACHE_S);
	assert_int_equal(auth_cache_seconds("max-age=-5"), AUTH_CIMD_CACHE_S);
	assert_int_equal(auth_cache_seconds("max-age=12abc"), AUTH_CIMD_CACHE_S);
	assert_int_equal(auth_cache_seconds("max-age="), AUTH_CIMD_CACHE_S);
}

static int check(json_t *c, const char *domains, const char *users, struct oidc_identity *id, char *why)
{
	int r = oidc_check_claims(c, "https://idp.test", "client-1", "n-1", domains, users, NOW, id, why, 600);
	json_decref(c);
	return r;
}

/* with - claims_base with one claim replaced (v NULL: removed) */
static json_t *with(const char *k, json_t *v)
{
	json_t *c = claims_base();
	if (v)
		json_object_set_new(c, k, v);
	else
		json_object_del(c, k);
	return c;
}

static void test_id_token_claims(void **state)
{
	(void)state;
	struct oidc_identity id;
	char why[600];
	assert_int_equal(check(with("hd", json_string("example.com")), "example.com", NULL, &id, why), 0);
	assert_string_equal(id.email, "alice@example.com"); /* one user, however the address is cased */
	assert_string_equal(id.hd, "example.com");
	assert_int_equal(check(claims_base(), NULL, "alice@EXAMPLE.com", &id, why), 0);
	json_t *multi = with("aud", json_pack("[s,s]", "client-1", "other"));
	json_object_set_new(multi, "azp", json_string("client-1"));
	assert_int_equal(check(multi, NULL, "alice@example.com", &id, why), 0);
	struct { const char *k; json_t *v; const char *domains, *users, *why; } bad[] = {
		{ "iss", json_string("https://evil.test"), NULL, "alice@example.com", "someone else" },
		{ "aud", json_string("client-2"), NULL, "alice@example.com", "another application" },
		{ "aud", json_pack("[s,s]", "client-1", "other"), NULL, "alice@example.com", "another application" },
		{ "azp", json_string("other"), NULL, "alice@example.com", "another application" },
		{ "exp", json_integer(NOW - AUTH_CLOCK_SKEW_S - 1), NULL, "alice@example.com", "expired" },
		{ "exp", NULL, NULL, "alice@example.com", "expired" },
		{ "iat", json_integer(NOW + AUTH_CLOCK_SKEW_S + 60), NULL, "alice@example.com", "expired" },
		{ "nonce", json_string("n-2"), NULL, "alice@example.com", "another sign-in" },
		{ "nonce", NULL, NULL, "alice@example.com", "another sign-in" },
		{ "email_verified", json_false(), NULL, "alice@example.com", "not verified" },
		{ "email_verified", NULL, NULL, "alice@example.com", "not verified" },
		{ "email", json_string("alice\"@example.com"), NULL, "alice@example.com", "which email" },
		{ "email", json_string("alice@ex@ample.com"), NULL, "alice@example.com", "which email" },
		{ "hd", json_string("other.com"), "example.com", NULL, "Workspace accounts of example.com" },
		{ "hd", NULL, "example.com", NULL, "not a Workspace account" },
		{ "hd", json_string("example.com"), NULL, "bob@example.com", "--allowed-users" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why[0] = '\0';
		assert_int_equal(check(with(bad[i].k, bad[i].v), bad[i].domains, bad[i].users, &id, why), -EACCES);
		if (!strstr(why, bad[i].why))
			fail_msg("case %zu (%s): \"%s\" does not say \"%s\"", i, bad[i].k, why, bad[i].why);
	}
	/* an email domain is not a Workspace domain: only hd counts */
	assert_int_equal(check(claims_base(), "example.com", NULL, &id, why), -EACCES);
	/* Google names its issuer either way */
	json_t *g = with("iss", json_string("accounts.google.com"));
	assert_int_equal(oidc_check_claims(g, "https://accounts.google.com", "client-1", "n-1", NULL, "alice@example.com",
					   NOW, &id, why, sizeof(why)), 0);
	json_decref(g);
}

static void test_store_key_formats(void **state)
{
	(void)state;
	unsigned char k[TSTORE_KEY_BYTES], want[TSTORE_KEY_BYTES];
	for (int i = 0; i < TSTORE_KEY_BYTES; i++)
		want[i] = (unsigned char)(i * 7 + 1);
	assert_int_equal(tstore_parse_key(want, sizeof(want), k), 0); /* raw */
	assert_memory_equal(k, want, sizeof(k));
	char hex[80] = "  ";
	for (int i = 0; i < TSTORE_KEY_BYTES; i++)
		sprintf(hex + 2 + 2 * i, "%02X", want[i]);
	strcat(hex, "\n");
	memset(k, 0, sizeof(k));
	assert_int_equal(tstore_parse_key((unsigned char *)hex, strlen(hex), k), 0);
	assert_memory_equal(k, want, sizeof(k));
	char *b64 = b64_encode(want, sizeof(want), 0);
	char line[64];
	snprintf(line, sizeof(line), "%s\n", b64);
	memset(k, 0, sizeof(k));
	assert_int_equal(tstore_parse_key((unsigned char *)line, strlen(line), k), 0);
	assert_memory_equal(k, want, sizeof(k));
	free(b64);
	/* what is not a key */
	const char *bad[] = { "", "hunter2\n", "00112233", "zz" "00112233445566778899aabbccddeeff00112233445566778899aabbccddee",
			      "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f00" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(tstore_parse_key((const unsigned char *)bad[i], strlen(bad[i]), k), -EINVAL);
	hex[5] = 'g'; /* a non-hex digit */
	assert_int_equal(tstore_parse_key((unsigned char *)hex, strlen(hex), k), -EINVAL);
}

static void test_store_seal(void **state)
{
	(void)state;
	unsigned char key[TSTORE_KEY_BYTES], other[TSTORE_KEY_BYTES];
	memset(key, 0x5a, sizeof(key));
	memset(other, 0x5b, sizeof(other));
	const char *plain = "{\"version\":1,\"secret\":\"alice@example.com 1//refresh\"}";
	unsigned char *blob = NULL, *blob2 = NULL, *out = NULL;
	size_t blen = 0, blen2 = 0, olen = 0;
	assert_int_equal(tstore_seal(key, (const unsigned char *)plain, strlen(plain), &blob, &blen), 0);
	assert_int_equal(blen, 8 + 12 + strlen(plain) + 16);
	assert_null(memmem(blob, blen, "alice", 5));
	assert_int_equal(tstore_seal(key, (const unsigned char *)plain, strlen(plain), &blob2, &blen2), 0);
	assert_memory_not_equal(blob + 8, blob2 + 8, 12); /* a fresh nonce each time */
	assert_int_equal(tstore_unseal(key, blob, blen, &out, &olen), 0);
	assert_int_equal(olen, strlen(plain));
	assert_string_equal((char *)out, plain);
	free(out);
	assert_int_equal(tstore_unseal(other, blob, blen, &out, &olen), -EBADMSG);
	/* every byte after the magic is checked: nonce, ciphertext, tag */
	for (size_t i = 8; i < blen; i++) {
		blob[i] ^= 0x01;
		assert_int_equal(tstore_unseal(key, blob, blen, &out, &olen), -EBADMSG);
		blob[i] ^= 0x01;
	}
	blob[0] ^= 0x01; /* the magic */
	assert_int_equal(tstore_unseal(key, blob, blen, &out, &olen), -EINVAL);
	blob[0] ^= 0x01;
	assert_int_equal(tstore_unseal(key, blob, blen - 1, &out, &olen), -EBADMSG); /* cut short */
	assert_int_equal(tstore_unseal(key, blob, 20, &out, &olen), -EINVAL);
	assert_int_equal(tstore_unseal(key, (const unsigned char *)"not a store", 11, &out, &olen), -EINVAL);
	free(blob);
	free(blob2);
}

/* what auth.c keeps comes back as it was: the token key (an access token minted before still
 * checks), and a malformed part is refused whole */
static void test_store_auth_round_trip(void **state)
{
	(void)state;
	unsigned char key[32];
	memset(key, 0x42, sizeof(key));
	assert_int_equal(auth_init_local("https://kg.example.com", key), 0);
	json_t *v = auth_store_dump();
	assert_non_null(v);
	char *a = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
	unsigned char other[32];
	memset(other, 0x17, sizeof(other));
	assert_int_equal(auth_init_local("https://kg.example.com", other), 0);
	char err[200];
	assert_true(auth_store_load(v, err, sizeof(err)) >= 0);
	json_t *w = auth_store_dump();
	char *b = json_dumps(w, JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(a, b); /* the key came back */
	json_object_set_new(v, "key", json_string("c2hvcnQ="));
	assert_int_equal(auth_store_load(v, err, sizeof(err)), -1);
	json_object_set_new(w, "grants", json_pack("[{s:I, s:s, s:s, s:s, s:s, s:I, s:I}]", "family", (json_int_t)1,
						   "hash", "nothex", "client_id", "c", "scope", "mcp", "user", "u",
						   "created", (json_int_t)1, "last", (json_int_t)1));
	assert_int_equal(auth_store_load(w, err, sizeof(err)), -1);
	assert_string_equal(err, "a client or sign-in in it is malformed");
	free(a);
	free(b);
	json_decref(v);
	json_decref(w);
}

int main(void)
{
	log_init("test", LOG_LVL_OFF);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_jwt_parse_shapes),
		cmocka_unit_test(test_rs256_and_es256),
		cmocka_unit_test(test_access_tokens),
		cmocka_unit_test(test_cimd_cache_seconds),
		cmocka_unit_test(test_id_token_claims),
		cmocka_unit_test(test_store_key_formats),
		cmocka_unit_test(test_store_seal),
		cmocka_unit_test(test_store_auth_round_trip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
