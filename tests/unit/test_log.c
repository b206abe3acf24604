/*
 * test_log.c - unit tests for ipc/log.c: a call site that repeats is rate-limited, the count of
 * what was suppressed is said, and another call site is not silenced by the first.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ipc/log.h"

/* capture - run fn with stderr going to a file; the file's text (free it) */
static char *capture(void (*fn)(void))
{
	char path[] = "/tmp/kg-test-log-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	int saved = dup(2);
	dup2(fd, 2);
	fn();
	dup2(saved, 2);
	close(saved);
	off_t n = lseek(fd, 0, SEEK_END);
	char *text = calloc(1, (size_t)n + 1);
	assert_int_equal(pread(fd, text, (size_t)n, 0), n);
	close(fd);
	return text;
}

static int count(const char *text, const char *needle)
{
	int n = 0;
	for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

static void flood(void)
{
	for (int i = 0; i < 5000; i++)
		log_warn("accept failed: Too many open files (%d)", i);
	log_warn("another site says this once");
}

static void test_flood_is_bounded(void **state)
{
	(void)state;
	log_init("test", LOG_LVL_INFO);
	char *text = capture(flood);
	int lines = count(text, "accept failed");
	assert_true(lines >= 1);
	assert_true(lines <= 20);
	assert_int_equal(count(text, "another site says this once"), 1);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_flood_is_bounded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
