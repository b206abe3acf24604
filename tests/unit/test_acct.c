/*
 * test_acct.c - the accounting log's lines (master/pool.c pool_acct_line, pool_acct_text): a
 * name a user or a client chose is escaped, never breaks a line, and never loses the line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "master/pool.h"

/* line_of - the line for a call event of user, parsed back (asserts it is one JSON line) */
static json_t *line_of(const char *user, char **text)
{
	json_t *o = json_pack("{s:s, s:o, s:s}", "event", "call", "user", pool_acct_text(user),
			      "session", "3f2a0c1d");
	assert_non_null(o);
	*text = pool_acct_line(o, 1764600000.123);
	assert_non_null(*text);
	assert_null(strchr(*text, '\n'));
	assert_null(strchr(*text, '\r'));
	for (const char *p = *text; *p; p++)
		assert_true((unsigned char)*p >= 0x20); /* every control character escaped */
	json_error_t e;
	json_t *j = json_loads(*text, 0, &e);
	assert_non_null(j);
	assert_string_equal(json_string_value(json_object_get(j, "event")), "call");
	assert_string_equal(json_string_value(json_object_get(j, "session")), "3f2a0c1d");
	assert_true(json_real_value(json_object_get(j, "ts")) > 1764600000.0);
	return j;
}

/* names that need escaping come back exactly */
static void test_escaped(void **st)
{
	(void)st;
	static const char *const names[] = {
		"alice@example.com", "a\"b", "back\\slash", "new\nline", "cr\rreturn", "tab\t",
		"\x01\x02\x1f\x7f", "}, \"user\": \"root", "\xc3\xbc\xc3\xaf", "\xe2\x80\xa8 line sep",
		"\xf0\x9f\x90\xb9", "",
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char *text;
		json_t *j = line_of(names[i], &text);
		assert_string_equal(json_string_value(json_object_get(j, "user")), names[i]);
		assert_int_equal(json_object_size(j), 4); /* nothing smuggled in as another key */
		json_decref(j);
		free(text);
	}
}

/* a name that is not UTF-8 still gets its line, ASCII kept and '?' for the rest */
static void test_not_utf8(void **st)
{
	(void)st;
	static const char *const bad[][2] = {
		{ "\xff\xfe bad", "?? bad" }, { "x\xc3", "x?" }, { "\xed\xa0\x80sur", "???sur" },
		{ "\xc0\xaf", "??" }, { "a\"\xff\n", "a\"?\n" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *text;
		json_t *j = line_of(bad[i][0], &text);
		assert_string_equal(json_string_value(json_object_get(j, "user")), bad[i][1]);
		json_decref(j);
		free(text);
	}
	assert_null(pool_acct_line(NULL, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_escaped),
		cmocka_unit_test(test_not_utf8),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
