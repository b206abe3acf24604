/*
 * test_splice.c - unit tests for worker/splice.c: base64 spliced into a dumped answer in place
 * of placeholders, and only there (the answer also holds what the user's code printed, which
 * may imitate a placeholder).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "lib/base64.h"
#include "worker/splice.h"

/* apply - dump o, splice sp in, parse the result back (it must be JSON) */
static json_t *apply(json_t *o, struct splices *sp, int want_rc)
{
	char *text = json_dumps(o, JSON_COMPACT);
	char *out = NULL;
	size_t len = 0;
	assert_int_equal(splices_apply(sp, text, strlen(text), &out, &len), want_rc);
	assert_int_equal(strlen(out), len);
	json_error_t e;
	json_t *j = json_loads(out, 0, &e);
	if (!j)
		fail_msg("not JSON after splicing (%s): %.300s", e.text, out);
	free(text);
	free(out);
	return j;
}

/* decoded - the base64 string s decodes to p[0..n) */
static void decoded(json_t *s, const unsigned char *p, size_t n)
{
	const char *b = json_string_value(s);
	assert_non_null(b);
	size_t got = 0;
	unsigned char *d = b64_decode_alloc(b, strlen(b), B64_LAX, &got);
	assert_non_null(d);
	assert_int_equal(got, n);
	assert_memory_equal(d, p, n);
	free(d);
}

/* test_splice_bytes - images and blobs of every size class, binary bytes included */
static void test_splice_bytes(void **state)
{
	(void)state;
	size_t big = 3 * 1024 * 1024 + 1;
	unsigned char *p = malloc(big);
	for (size_t i = 0; i < big; i++)
		p[i] = (unsigned char)(i * 131 + (i >> 8));
	struct splices *sp = NULL;
	json_t *a = splices_add_base64(&sp, p, big);
	json_t *b = splices_add_base64(&sp, (const unsigned char *)"\"\\\n\0x", 5);
	json_t *c = splices_add_base64(&sp, p, 0);
	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(c);
	assert_int_equal(splices_bytes(sp), (big + 2) / 3 * 4 + 8 + 0);
	json_t *o = json_pack("{s:[{s:s, s:o}, {s:s, s:o}, {s:o}], s:s}", "content", "type", "image",
			      "data", a, "type", "resource", "blob", b, "blob", c, "after", "tail");
	json_t *j = apply(o, sp, 0);
	json_t *content = json_object_get(j, "content");
	decoded(json_object_get(json_array_get(content, 0), "data"), p, big);
	decoded(json_object_get(json_array_get(content, 1), "blob"), (const unsigned char *)"\"\\\n\0x", 5);
	assert_string_equal(json_string_value(json_object_get(json_array_get(content, 2), "blob")), "");
	assert_string_equal(json_string_value(json_object_get(j, "after")), "tail");
	json_decref(j);
	json_decref(o);
	splices_free(sp);
	free(p);
}

/* test_splice_lookalikes - what the user's code printed is never replaced: a placeholder of
 * another nonce, the right nonce's prefix with another index, one cut short, one with a
 * backslash before its closing quote; all come back as they were */
static void test_splice_lookalikes(void **state)
{
	(void)state;
	struct splices *sp = NULL;
	json_t *ph = splices_add_base64(&sp, (const unsigned char *)"hi", 2);
	const char *real = json_string_value(ph);
	char ends[128], other_idx[128], cut[128], nested[256];
	/* a string that ends with the placeholder after a quote: in the dump its closing quote
	 * follows the digits, as a real one's does */
	snprintf(ends, sizeof(ends), "x\"%s", real);
	snprintf(other_idx, sizeof(other_idx), "%.*s7", (int)(strlen(real) - 1), real);
	snprintf(cut, sizeof(cut), "%.*s", (int)(strlen(real) - 3), real);
	snprintf(nested, sizeof(nested), "say \"%s\" twice: \"%s\\", real, real);
	const char *fake = "kg-splice-00000000000000000000000000000000-0";
	json_t *o = json_pack("{s:o, s:s, s:s, s:s, s:s, s:[s, s], s:s}", "data", ph, "stdout", fake,
			      "stderr", other_idx, "cut", cut, "nested", nested, "list",
			      "kg-splice-", "\"kg-splice-", "ends", ends);
	json_t *j = apply(o, sp, 0);
	assert_string_equal(json_string_value(json_object_get(j, "data")), "aGk=");
	assert_string_equal(json_string_value(json_object_get(j, "stdout")), fake);
	assert_string_equal(json_string_value(json_object_get(j, "stderr")), other_idx);
	assert_string_equal(json_string_value(json_object_get(j, "cut")), cut);
	assert_string_equal(json_string_value(json_object_get(j, "nested")), nested);
	assert_string_equal(json_string_value(json_array_get(json_object_get(j, "list"), 1)),
			    "\"kg-splice-");
	assert_string_equal(json_string_value(json_object_get(j, "ends")), ends);
	json_decref(j);
	json_decref(o);
	splices_free(sp);
}

/* test_splice_once - a placeholder missing from the answer, or in it twice, is reported */
static void test_splice_once(void **state)
{
	(void)state;
	struct splices *sp = NULL;
	json_t *a = splices_add_base64(&sp, (const unsigned char *)"a", 1);
	json_t *b = splices_add_base64(&sp, (const unsigned char *)"b", 1);
	json_t *o = json_pack("{s:O}", "only", a);
	json_t *j = apply(o, sp, -ENOENT); /* b is not in it */
	assert_string_equal(json_string_value(json_object_get(j, "only")), "YQ==");
	json_decref(j);
	json_decref(o);
	o = json_pack("{s:O, s:O, s:O}", "x", a, "y", a, "z", b);
	j = apply(o, sp, -ENOENT); /* a twice: both replaced, still reported */
	assert_string_equal(json_string_value(json_object_get(j, "y")), "YQ==");
	json_decref(j);
	json_decref(o);
	json_decref(a);
	json_decref(b);
	splices_free(sp);
}

/* test_splice_chain - a batch: the sets of two jobs, each its own nonce, spliced together */
static void test_splice_chain(void **state)
{
	(void)state;
	struct splices *s1 = NULL, *s2 = NULL;
	json_t *a = splices_add_base64(&s1, (const unsigned char *)"one", 3);
	json_t *b = splices_add_base64(&s2, (const unsigned char *)"two", 3);
	assert_int_not_equal(strncmp(json_string_value(a), json_string_value(b), 42), 0);
	splices_chain(&s1, s2);
	assert_int_equal(splices_bytes(s1), 8);
	json_t *o = json_pack("[{s:o}, {s:o}]", "d", a, "d", b);
	json_t *j = apply(o, s1, 0);
	assert_string_equal(json_string_value(json_object_get(json_array_get(j, 0), "d")), "b25l");
	assert_string_equal(json_string_value(json_object_get(json_array_get(j, 1), "d")), "dHdv");
	json_decref(j);
	json_decref(o);
	splices_free(s1);
	splices_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_splice_bytes),
		cmocka_unit_test(test_splice_lookalikes),
		cmocka_unit_test(test_splice_once),
		cmocka_unit_test(test_splice_chain),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
