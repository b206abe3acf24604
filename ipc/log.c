/*
 * log.c - timestamped, levelled log lines on stderr for master, worker and agent.
 */
#include "ipc/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *log_role = "kode-gopher";
static enum log_level log_level = LOG_LVL_INFO;
static const char *const log_names[] = { "debug", "info", "warn", "error", "off" };

/* log_init - name this process's role and set its threshold */
void log_init(const char *role, enum log_level level)
{
	log_role = role;
	log_level = level;
}

/* log_parse_level - "debug" ... "off" to an enum; -1 on anything else */
int log_parse_level(const char *name, enum log_level *out)
{
	for (size_t i = 0; i < sizeof(log_names) / sizeof(log_names[0]); i++)
		if (strcmp(name, log_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	return -1;
}

enum log_level log_get_level(void)
{
	return log_level;
}

/* log_msg - format one line and write it with a single write(2) so lines never interleave */
void log_msg(enum log_level lvl, const char *func, const char *fmt, ...)
{
	if (lvl < log_level || lvl >= LOG_LVL_OFF)
		return;
	char line[2048];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s[%d] %s: ",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
			 ts.tv_nsec / 1000000, log_names[lvl], log_role, (int)getpid(), func);
	if (n < 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}
