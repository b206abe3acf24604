/*
 * test_creds.c - unit tests for the worker's credential sources (worker/creds.c): the RS256 JWT
 * assertion of the JWT-bearer grant (checked against the public key with libcrypto), what an
 * error from a token endpoint may carry into a sentence, scrubbing, the mode flag, the adc
 * mode's request field, and the answers to token requests a session cannot serve.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <unistd.h>

#include "lib/base64.h"
#include "worker/creds.h"

/* pem_of - a private key as PKCS#8 PEM (malloc'd) */
static char *pem_of(EVP_PKEY *k)
{
	BIO *b = BIO_new(BIO_s_mem());
	assert_int_equal(PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL), 1);
	char *data;
	long n = BIO_get_mem_data(b, &data);
	char *out = strndup(data, (size_t)n);
	BIO_free(b);
	return out;
}

static void test_jwt_sign_verifies(void **st)
{
	(void)st;
	EVP_PKEY *k = EVP_RSA_gen(2048);
	assert_non_null(k);
	char *pem = pem_of(k);
	json_t *claims = json_pack("{s:s, s:s, s:s, s:i, s:i}", "iss", "sa@p.iam.gserviceaccount.com",
				   "scope", "https://www.googleapis.com/auth/cloud-platform", "aud",
				   "https://oauth2.googleapis.com/token", "iat", 1700000000, "exp",
				   1700003600);
	char *jwt = NULL, err[256];
	assert_int_equal(creds_jwt_sign(pem, "key-1", claims, &jwt, err, sizeof(err)), 0);

	/* three base64url parts, no padding */
	char *d1 = strchr(jwt, '.'), *d2 = d1 ? strchr(d1 + 1, '.') : NULL;
	assert_non_null(d2);
	assert_null(strchr(jwt, '='));
	size_t hl, sl;
	unsigned char *hdr = b64_decode_alloc(jwt, (size_t)(d1 - jwt), B64_URL, &hl);
	assert_non_null(hdr);
	json_t *h = json_loadb((char *)hdr, hl, 0, NULL);
	assert_string_equal(json_string_value(json_object_get(h, "alg")), "RS256");
	assert_string_equal(json_string_value(json_object_get(h, "typ")), "JWT");
	assert_string_equal(json_string_value(json_object_get(h, "kid")), "key-1");
	json_t *payload = creds_jwt_payload(jwt);
	assert_true(json_equal(payload, claims));

	/* the signature is RS256 over header.claims, by the public half of the key */
	unsigned char *sig = b64_decode_alloc(d2 + 1, strlen(d2 + 1), B64_URL, &sl);
	assert_non_null(sig);
	assert_int_equal(sl, 256);
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	assert_int_equal(EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, k), 1);
	assert_int_equal(EVP_DigestVerify(md, sig, sl, (unsigned char *)jwt, (size_t)(d2 - jwt)), 1);
	EVP_MD_CTX_free(md);
	/* and not over anything else */
	md = EVP_MD_CTX_new();
	EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, k);
	assert_int_not_equal(EVP_DigestVerify(md, sig, sl, (unsigned char *)jwt, (size_t)(d2 - jwt) - 1), 1);
	EVP_MD_CTX_free(md);

	free(sig);
	free(hdr);
	json_decref(h);
	json_decref(payload);
	json_decref(claims);
	free(jwt);
	free(pem);
	EVP_PKEY_free(k);
}

static void test_jwt_sign_bad_keys(void **st)
{
	(void)st;
	json_t *claims = json_pack("{s:s}", "iss", "x");
	char *jwt = NULL, err[256];
	assert_int_equal(creds_jwt_sign("not a key", NULL, claims, &jwt, err, sizeof(err)), -EINVAL);
	assert_null(jwt);
	assert_non_null(strstr(err, "RSA private key"));
	EVP_PKEY *ec = EVP_EC_gen("P-256");
	char *pem = pem_of(ec);
	assert_int_equal(creds_jwt_sign(pem, NULL, claims, &jwt, err, sizeof(err)), -EINVAL);
	/* the sentence never quotes the key */
	assert_null(strstr(err, "BEGIN"));
	free(pem);
	EVP_PKEY_free(ec);
	json_decref(claims);
	assert_null(creds_jwt_payload("no-dots"));
	assert_null(creds_jwt_payload("a.!!!.c"));
}

static void test_oauth_error(void **st)
{
	(void)st;
	char err[512];
	const char *body = "{\"error\":\"invalid_grant\",\"error_description\":\"Token has been "
			   "expired or revoked.\",\"access_token\":\"ya29.SECRET\",\"debug\":\"1//SECRET\"}";
	creds_oauth_error("the refresh token", 400, body, strlen(body), err, sizeof(err));
	assert_string_equal(err, "the token endpoint refused the refresh token (HTTP 400): "
				 "invalid_grant (Token has been expired or revoked.)");
	creds_oauth_error("the key", 502, "<html>1//SECRET</html>", 22, err, sizeof(err));
	assert_string_equal(err, "the token endpoint refused the key (HTTP 502)");
	const char *ctl = "{\"error\":\"bad\\n\\u0007x\"}";
	creds_oauth_error("it", 400, ctl, strlen(ctl), err, sizeof(err));
	assert_null(strchr(err, '\n'));
	assert_null(strchr(err, '\a'));
	/* a description is bounded */
	char big[3000];
	int n = snprintf(big, sizeof(big), "{\"error\":\"e\",\"error_description\":\"");
	memset(big + n, 'x', 2000);
	strcpy(big + n + 2000, "\"}");
	creds_oauth_error("it", 400, big, strlen(big), err, sizeof(err));
	assert_true(strlen(err) < 300);
}

static void test_scrub(void **st)
{
	(void)st;
	char msg[128] = "got 1//refresh and again 1//refresh, and ya29.tok";
	const char *secrets[] = { "1//refresh", "ya29.tok", "", "ab", NULL };
	creds_scrub(msg, sizeof(msg), secrets);
	assert_string_equal(msg, "got [redacted] and again [redacted], and [redacted]");
	/* a secret short enough to be an ordinary word is left alone */
	char m2[32] = "ab ab";
	creds_scrub(m2, sizeof(m2), secrets);
	assert_string_equal(m2, "ab ab");
	/* growth past the buffer is cut, still NUL-terminated */
	char m3[16] = "abcd abcd abcd";
	const char *s3[] = { "abcd", NULL };
	creds_scrub(m3, sizeof(m3), s3);
	assert_true(strlen(m3) < sizeof(m3));
	assert_null(strstr(m3, "abcd"));
}

static void test_parse_mode(void **st)
{
	(void)st;
	struct creds_config c = { 0 };
	char err[256];
	static const struct { const char *arg; enum creds_mode m; } ok[] = {
		{ "adc", CREDS_ADC }, { "metadata", CREDS_METADATA }, { "server", CREDS_SERVER },
		{ "user", CREDS_USER }, { "none", CREDS_NONE },
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		assert_int_equal(gcreds_parse_mode(ok[i].arg, &c.mode, &c.service_account, err,
						   sizeof(err)), 0);
		assert_int_equal(c.mode, ok[i].m);
		assert_string_equal(gcreds_mode_name(c.mode), ok[i].arg);
	}
	assert_int_equal(gcreds_parse_mode("service-account:run@p.iam.gserviceaccount.com", &c.mode,
					   &c.service_account, err, sizeof(err)), 0);
	assert_int_equal(c.mode, CREDS_SERVICE_ACCOUNT);
	assert_string_equal(c.service_account, "run@p.iam.gserviceaccount.com");
	static const char *const bad[] = { "", "ADC", "service-account:", "service-account:nobody",
					   "service-account:a@b/c", "service-account:a @b",
					   "service-account:@b", "token" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(gcreds_parse_mode(bad[i], &c.mode, &c.service_account, err,
						   sizeof(err)), -EINVAL);
}

static void test_adc_mode_field(void **st)
{
	(void)st;
	char dir[] = "/tmp/kg-creds-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[256];
	snprintf(path, sizeof(path), "%s/adc.json", dir);
	const char *text = "{\"type\":\"authorized_user\",\"refresh_token\":\"1//r\"}";
	FILE *f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
	char *old = getenv("GOOGLE_APPLICATION_CREDENTIALS") ? strdup(getenv("GOOGLE_APPLICATION_CREDENTIALS")) : NULL;
	setenv("GOOGLE_APPLICATION_CREDENTIALS", path, 1);
	struct creds_config cfg = { .mode = CREDS_ADC };
	struct creds *c = creds_new(&cfg);
	json_t *o = creds_for_call(c);
	assert_string_equal(json_string_value(json_object_get(o, "mode")), "adc");
	assert_string_equal(json_string_value(json_object_get(o, "adc")), text);
	creds_wipe(o);
	assert_int_not_equal(strcmp(json_string_value(json_object_get(o, "adc")), text), 0);
	json_decref(o);
	/* an adc session serves no tokens through the emulator */
	json_t *ev = json_pack("{s:s, s:i, s:s, s:[s]}", "event", "token_request", "id", 7, "kind",
			       "access", "scopes", "s");
	json_t *ans = creds_answer(c, ev);
	assert_int_equal(json_integer_value(json_object_get(ans, "id")), 7);
	assert_int_equal(json_integer_value(json_object_get(ans, "status")), 404);
	assert_non_null(json_object_get(ans, "error"));
	json_decref(ans);
	json_object_del(ev, "id");
	assert_null(creds_answer(c, ev));
	json_decref(ev);
	/* no file: the call carries no credentials */
	unlink(path);
	setenv("GOOGLE_APPLICATION_CREDENTIALS", "", 1);
	setenv("HOME", dir, 1);
	assert_null(creds_for_call(c));
	creds_free(c);
	rmdir(dir);
	if (old) {
		setenv("GOOGLE_APPLICATION_CREDENTIALS", old, 1);
		free(old);
	} else {
		unsetenv("GOOGLE_APPLICATION_CREDENTIALS");
	}
}

/* a stand-in for mm_token: the master's answers, without a master */
static int user_calls;
static const char *user_refusal; /* non-NULL: the master refuses with this */
static int fake_user_source(void *arg, const char *scopes, char **token, long *expires_in, int *status,
			    char *err, size_t errlen)
{
	assert_string_equal((const char *)arg, "session");
	user_calls++;
	if (user_refusal) {
		snprintf(err, errlen, "%s", user_refusal);
		*status = 403;
		return -EACCES;
	}
	*token = strdup(strcmp(scopes, "https://www.googleapis.com/auth/cloud-platform") == 0 ? "ya29.user" : "ya29.other");
	*expires_in = 3000;
	*status = 200;
	return 0;
}

static void test_user_mode(void **st)
{
	(void)st;
	struct creds_config cfg = { .mode = CREDS_USER, .project = "proj" };
	struct creds *c = creds_new(&cfg);
	assert_int_equal(creds_mode(c), CREDS_USER);
	json_t *ev = json_pack("{s:s, s:i, s:s, s:[s]}", "event", "token_request", "id", 1, "kind",
			       "access", "scopes", "https://www.googleapis.com/auth/cloud-platform");
	json_t *ans = creds_answer(c, ev);
	assert_int_equal(json_integer_value(json_object_get(ans, "status")), 403);
	assert_non_null(strstr(json_string_value(json_object_get(ans, "error")), "signed-in"));
	json_decref(ans);
	/* once the session has its user, tokens come from the master (and are cached) */
	assert_int_equal(creds_set_user(c, "bob@example.com", fake_user_source, "session"), 0);
	json_t *o = creds_for_call(c);
	assert_string_equal(json_string_value(json_object_get(o, "mode")), "metadata");
	assert_string_equal(json_string_value(json_object_get(o, "access_token")), "ya29.user");
	assert_string_equal(json_string_value(json_object_get(o, "email")), "bob@example.com");
	assert_string_equal(json_string_value(json_object_get(o, "project_id")), "proj");
	assert_false(json_is_true(json_object_get(o, "id_tokens")));
	assert_true(json_integer_value(json_object_get(o, "expires_in")) <= 3000);
	json_decref(o);
	json_object_set_new(ev, "id", json_integer(2));
	ans = creds_answer(c, ev);
	assert_string_equal(json_string_value(json_object_get(ans, "access_token")), "ya29.user");
	json_decref(ans);
	assert_int_equal(user_calls, 1);
	json_t *idev = json_pack("{s:s, s:i, s:s, s:s}", "event", "token_request", "id", 3, "kind",
				 "identity", "audience", "https://x");
	ans = creds_answer(c, idev);
	assert_int_equal(json_integer_value(json_object_get(ans, "status")), 404);
	json_decref(ans);
	/* malformed requests are refused, not guessed at, and never reach the master */
	json_t *bad = json_pack("{s:s, s:i, s:s, s:[s]}", "event", "token_request", "id", 4, "kind",
				"access", "scopes", "a,b");
	ans = creds_answer(c, bad);
	assert_non_null(json_object_get(ans, "error"));
	json_decref(ans);
	assert_int_equal(user_calls, 1);
	/* the master's refusal (a revoked grant) reaches the program as its sentence */
	user_refusal = "your Google sign-in has expired or was revoked; sign in again";
	json_t *other = json_pack("{s:s, s:i, s:s, s:[s]}", "event", "token_request", "id", 5, "kind",
				  "access", "scopes", "https://www.googleapis.com/auth/devstorage.read_only");
	ans = creds_answer(c, other);
	assert_int_equal(json_integer_value(json_object_get(ans, "status")), 403);
	assert_non_null(strstr(json_string_value(json_object_get(ans, "error")), "sign in again"));
	json_decref(ans);
	json_decref(other);
	user_refusal = NULL;
	json_decref(bad);
	json_decref(idev);
	json_decref(ev);
	assert_int_equal(creds_set_user(c, "bad email\n", NULL, NULL), -EINVAL);
	creds_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_jwt_sign_verifies),
		cmocka_unit_test(test_jwt_sign_bad_keys),
		cmocka_unit_test(test_oauth_error),
		cmocka_unit_test(test_scrub),
		cmocka_unit_test(test_parse_mode),
		cmocka_unit_test(test_adc_mode_field),
		cmocka_unit_test(test_user_mode),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
