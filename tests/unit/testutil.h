/*
 * testutil.h - small helpers the cmocka unit tests share (header only: each test binary is built
 * from one .c file). Processes left behind are found by a marker in their command line: a
 * test's helpers run `sleep 7777.<digits><n>`, digits unique to the test process.
 */
#ifndef KG_TESTS_UNIT_TESTUTIL_H
#define KG_TESTS_UNIT_TESTUTIL_H

#include <stdio.h>
#include <unistd.h>

/* shell_count - the number a shell pipeline prints (e.g. "... | wc -l"), or -1 */
static inline int shell_count(const char *cmd)
{
	FILE *p = popen(cmd, "r");
	int n = -1;
	if (p) {
		if (fscanf(p, "%d", &n) != 1)
			n = -1;
		pclose(p);
	}
	return n;
}

/* marker_digits - this test process's marker digits (unique per run of the tests) */
static inline const char *marker_digits(char *buf, size_t cap)
{
	snprintf(buf, cap, "%06d", (int)(getpid() % 1000000));
	return buf;
}

/* count_marker - processes on the host whose command line holds "7777." and digits (the
 * pattern's brackets keep the search from finding itself) */
static inline int count_marker(const char *digits)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "grep -l -a -e '7777[.]%s' /proc/[0-9]*/cmdline 2>/dev/null | wc -l",
		 digits);
	return shell_count(cmd);
}

#endif
