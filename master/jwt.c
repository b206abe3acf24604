/*
 * jwt.c - JSON Web Tokens as sign-in needs them: the compact JWS form (RFC 7515) decoded with
 * its size limits, signatures checked with OpenSSL's libcrypto against a JWKS (RS256 and ES256,
 * what Google and the usual providers sign ID tokens with) or kode-gopher's own HMAC key
 * (HS256, its access tokens: the master is both their issuer and their only reader).
 *
 * Called by master/oidc.c (the provider's ID token) and master/auth.c (bearer tokens), both
 * with untrusted bytes; tests/fuzz/fuzz_jwt.c feeds it any. Claims are checked by the callers.
 */
#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <stdlib.h>
#include <string.h>

#include "lib/base64.h"
#include "master/auth.h"
#include "policy/limits.h"

/* jwt_json_part - decode one base64url part into a JSON object */
static json_t *jwt_json_part(const char *p, size_t len)
{
	unsigned char *buf = malloc(len / 4 * 3 + 3);
	size_t n;
	json_t *v = NULL;
	if (buf && b64_decode(p, len, B64_URL, buf, len / 4 * 3 + 3, &n) == 0) {
		v = json_loadb((const char *)buf, n, JSON_REJECT_DUPLICATES, NULL);
		if (v && !json_is_object(v)) {
			json_decref(v);
			v = NULL;
		}
	}
	free(buf);
	return v;
}

void jwt_free(struct jwt *j)
{
	json_decref(j->header);
	json_decref(j->claims);
	free(j->sig);
	free(j->input);
	memset(j, 0, sizeof(*j));
}

int jwt_parse(const char *tok, size_t len, struct jwt *out)
{
	memset(out, 0, sizeof(*out));
	if (len == 0 || len > AUTH_MAX_JWT_BYTES || memchr(tok, '\0', len))
		return -EINVAL;
	const char *d1 = memchr(tok, '.', len);
	const char *d2 = d1 ? memchr(d1 + 1, '.', len - (size_t)(d1 + 1 - tok)) : NULL;
	if (!d1 || !d2 || memchr(d2 + 1, '.', len - (size_t)(d2 + 1 - tok)))
		return -EINVAL; /* exactly three parts: JWE (five) and unsigned forms are not taken */
	size_t slen = len - (size_t)(d2 + 1 - tok);
	out->header = jwt_json_part(tok, (size_t)(d1 - tok));
	out->claims = jwt_json_part(d1 + 1, (size_t)(d2 - d1 - 1));
	out->sig = malloc(slen / 4 * 3 + 3);
	out->input_len = (size_t)(d2 - tok);
	out->input = strndup(tok, out->input_len);
	if (!out->header || !out->claims || !out->sig || !out->input || slen == 0 ||
	    b64_decode(d2 + 1, slen, B64_URL, out->sig, slen / 4 * 3 + 3, &out->siglen) != 0) {
		jwt_free(out);
		return -EINVAL;
	}
	return 0;
}

/* jwt_alg - the header's alg, "" if none */
static const char *jwt_alg(const struct jwt *j)
{
	const char *a = json_string_value(json_object_get(j->header, "alg"));
	return a ? a : "";
}

/* jwk_bytes - one base64url member of a JWK */
static int jwk_bytes(const json_t *jwk, const char *name, unsigned char *out, size_t cap, size_t *n)
{
	const char *s = json_string_value(json_object_get(jwk, name));
	return s ? b64_decode(s, strlen(s), B64_URL, out, cap, n) : -EINVAL;
}

/* jwk_key - an RSA or P-256 public key from a JWK */
static EVP_PKEY *jwk_key(const json_t *jwk, bool ec)
{
	unsigned char a[JWT_MAX_KEY_BYTES], b[JWT_MAX_KEY_BYTES];
	unsigned char pub[65]; /* the builder keeps a pointer to it until OSSL_PARAM_BLD_to_param */
	size_t an, bn;
	EVP_PKEY *key = NULL;
	OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
	OSSL_PARAM *params = NULL;
	BIGNUM *n = NULL, *e = NULL;
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_from_name(NULL, ec ? "EC" : "RSA", NULL);
	if (!bld || !ctx)
		goto out;
	if (ec) {
		const char *crv = json_string_value(json_object_get(jwk, "crv"));
		if (!crv || strcmp(crv, "P-256") || jwk_bytes(jwk, "x", a, sizeof(a), &an) ||
		    jwk_bytes(jwk, "y", b, sizeof(b), &bn) || an != 32 || bn != 32)
			goto out;
		pub[0] = 4; /* uncompressed point */
		memcpy(pub + 1, a, 32);
		memcpy(pub + 33, b, 32);
		if (!OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) ||
		    !OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, pub, sizeof(pub)))
			goto out;
	} else {
		if (jwk_bytes(jwk, "n", a, sizeof(a), &an) || jwk_bytes(jwk, "e", b, sizeof(b), &bn) ||
		    an < 256 || bn == 0 || bn > 8) /* at least 2048 bits */
			goto out;
		n = BN_bin2bn(a, (int)an, NULL);
		e = BN_bin2bn(b, (int)bn, NULL);
		if (!n || !e || !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, n) ||
		    !OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, e))
			goto out;
	}
	params = OSSL_PARAM_BLD_to_param(bld);
	if (!params || EVP_PKEY_fromdata_init(ctx) <= 0 ||
	    EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_PUBLIC_KEY, params) <= 0)
		key = NULL;
out:
	OSSL_PARAM_free(params);
	OSSL_PARAM_BLD_free(bld);
	EVP_PKEY_CTX_free(ctx);
	BN_free(n);
	BN_free(e);
	return key;
}

/* es256_der - JWS's raw r||s as the DER ECDSA-Sig-Value libcrypto verifies */
static unsigned char *es256_der(const unsigned char *sig, int *len)
{
	ECDSA_SIG *s = ECDSA_SIG_new();
	BIGNUM *r = BN_bin2bn(sig, 32, NULL), *ss = BN_bin2bn(sig + 32, 32, NULL);
	unsigned char *der = NULL;
	*len = 0;
	if (s && r && ss && ECDSA_SIG_set0(s, r, ss) == 1) {
		r = ss = NULL; /* owned by s now */
		*len = i2d_ECDSA_SIG(s, &der);
	}
	BN_free(r);
	BN_free(ss);
	ECDSA_SIG_free(s);
	return *len > 0 ? der : NULL;
}

/* jwt_verify_key - the signature with one public key */
static int jwt_verify_key(const struct jwt *j, EVP_PKEY *key, bool ec)
{
	unsigned char *der = NULL;
	const unsigned char *sig = j->sig;
	size_t siglen = j->siglen;
	if (ec) {
		int dl;
		if (j->siglen != 64 || !(der = es256_der(j->sig, &dl)))
			return -EBADMSG;
		sig = der;
		siglen = (size_t)dl;
	}
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	int ok = md && EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, key) == 1 &&
		 EVP_DigestVerify(md, sig, siglen, (const unsigned char *)j->input, j->input_len) == 1;
	EVP_MD_CTX_free(md);
	OPENSSL_free(der);
	return ok ? 0 : -EBADMSG;
}

int jwt_verify_jwks(const struct jwt *j, const json_t *jwks)
{
	const char *alg = jwt_alg(j);
	bool ec = strcmp(alg, "ES256") == 0;
	if (!ec && strcmp(alg, "RS256") != 0)
		return -EBADMSG; /* "none", HS256 with a public key as the secret, ...: never */
	const char *kid = json_string_value(json_object_get(j->header, "kid"));
	const json_t *keys = json_object_get(jwks, "keys");
	size_t i, candidates = 0;
	json_t *k;
	json_array_foreach(keys, i, k) {
		const char *kkid = json_string_value(json_object_get(k, "kid"));
		const char *kty = json_string_value(json_object_get(k, "kty"));
		const char *use = json_string_value(json_object_get(k, "use"));
		const char *kalg = json_string_value(json_object_get(k, "alg"));
		if (!kty || strcmp(kty, ec ? "EC" : "RSA") || (use && strcmp(use, "sig")) ||
		    (kalg && strcmp(kalg, alg)) || (kid && (!kkid || strcmp(kid, kkid))))
			continue;
		candidates++;
		EVP_PKEY *key = jwk_key(k, ec);
		int r = key ? jwt_verify_key(j, key, ec) : -EBADMSG;
		EVP_PKEY_free(key);
		if (r == 0)
			return 0;
	}
	return candidates ? -EBADMSG : -ENOKEY;
}

/* hs256 - HMAC-SHA256 of the signing input */
static bool hs256(const char *in, size_t len, const unsigned char *key, size_t keylen, unsigned char out[32])
{
	unsigned int n = 0;
	return HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)in, len, out, &n) && n == 32;
}

int jwt_verify_hs256(const struct jwt *j, const unsigned char *key, size_t keylen)
{
	unsigned char mac[32];
	if (strcmp(jwt_alg(j), "HS256") != 0 || j->siglen != 32 || !hs256(j->input, j->input_len, key, keylen, mac))
		return -EBADMSG;
	return CRYPTO_memcmp(mac, j->sig, 32) == 0 ? 0 : -EBADMSG;
}

char *jwt_sign_hs256(const json_t *claims, const char *typ, const unsigned char *key, size_t keylen)
{
	json_t *h = json_pack("{s:s, s:s}", "alg", "HS256", "typ", typ);
	char *hj = h ? json_dumps(h, JSON_COMPACT) : NULL;
	char *cj = json_dumps(claims, JSON_COMPACT);
	char *he = hj ? b64_encode((unsigned char *)hj, strlen(hj), B64_URL) : NULL;
	char *ce = cj ? b64_encode((unsigned char *)cj, strlen(cj), B64_URL) : NULL;
	char *out = NULL, *se = NULL;
	unsigned char mac[32];
	size_t n;
	if (he && ce && (out = malloc(strlen(he) + strlen(ce) + 48))) {
		n = (size_t)sprintf(out, "%s.%s", he, ce);
		if (hs256(out, n, key, keylen, mac) && (se = b64_encode(mac, 32, B64_URL))) {
			sprintf(out + n, ".%s", se);
		} else {
			free(out);
			out = NULL;
		}
	}
	json_decref(h);
	free(hj);
	free(cj);
	free(he);
	free(ce);
	free(se);
	return out;
}
