/*
 * proctitle.c - the worker's process title, so `ps` and `top` say whose session it is.
 *
 * Linux shows /proc/PID/cmdline, which is the argv area: we move the environment out of the way
 * and write the title over argv (the technique of BSD's setproctitle). PR_SET_NAME sets the short
 * comm name as well.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "worker/worker.h"

extern char **environ;
static char *area;     /* the original argv[0], reused for the title */
static size_t area_len;

/* proctitle_init - find the contiguous argv+environ area and free it for the title */
void proctitle_init(int argc, char **argv)
{
	if (argc <= 0 || !argv[0])
		return;
	char *start = argv[0], *end = argv[0] + strlen(argv[0]) + 1;
	for (int i = 1; i < argc; i++)
		if (argv[i] == end)
			end = argv[i] + strlen(argv[i]) + 1;
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 1, sizeof(char *));
	if (!env)
		return;
	for (size_t i = 0; i < n; i++) {
		if (environ[i] == end)
			end = environ[i] + strlen(environ[i]) + 1;
		env[i] = strdup(environ[i]);
	}
	environ = env;
	/* whoever still holds argv keeps valid strings */
	for (int i = 0; i < argc; i++)
		argv[i] = strdup(argv[i]);
	area = start;
	area_len = (size_t)(end - start);
}

/* proctitle_set - printf a new title into the argv area */
void proctitle_set(const char *fmt, ...)
{
	if (!area || area_len < 2)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(area, area_len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	size_t used = (size_t)n < area_len ? (size_t)n : area_len - 1;
	memset(area + used, 0, area_len - used);
	prctl(PR_SET_NAME, "kg-worker", 0, 0, 0);
}
