/*
 * log.c - timestamped, levelled log lines on stderr for master, worker and agent.
 *
 * Rate-limited per call site (its format string): what hostile input can make a component
 * repeat (an accept loop out of descriptors, a bad request after another) is logged
 * LOG_BURST_LINES times per LOG_WINDOW_S, then counted, and the count is logged when the site
 * speaks again in a later window; and no process writes more than LOG_PROCESS_LINES_PER_S
 * lines a second in all.
 */
#include "ipc/log.h"
#include "policy/limits.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
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


struct log_site {
	const char *fmt;     /* the key: one call site's format string */
	int64_t window;      /* start of its current window, monotonic seconds */
	unsigned lines;      /* written in that window */
	unsigned long suppressed; /* not written since the last line that was */
};

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct log_site log_sites[LOG_SITES];
static int64_t log_second;
static unsigned log_second_lines;
static unsigned long log_second_dropped;

/* log_admit - may this site write a line now? *held gets what it had suppressed till now */
static bool log_admit(const char *fmt, unsigned long *held)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	int64_t sec = now.tv_sec;
	*held = 0;
	pthread_mutex_lock(&log_lock);
	if (sec != log_second) {
		log_second = sec;
		log_second_lines = 0;
	}
	struct log_site *st = &log_sites[((uintptr_t)fmt >> 3) % LOG_SITES];
	if (st->fmt != fmt) {
		/* another site had the slot: it starts over (a rare collision only costs a burst) */
		*st = (struct log_site){ .fmt = fmt, .window = sec };
	}
	if (sec - st->window >= LOG_WINDOW_S) {
		st->window = sec;
		st->lines = 0;
	}
	bool ok = st->lines < LOG_BURST_LINES && log_second_lines < LOG_PROCESS_LINES_PER_S;
	if (ok) {
		st->lines++;
		log_second_lines++;
		*held = st->suppressed + log_second_dropped;
		st->suppressed = 0;
		log_second_dropped = 0;
	} else {
		st->suppressed++;
		if (log_second_lines >= LOG_PROCESS_LINES_PER_S)
			log_second_dropped++;
	}
	pthread_mutex_unlock(&log_lock);
	return ok;
}

/* log_msg - format one line and write it with a single write(2) so lines never interleave */
void log_msg(enum log_level lvl, const char *func, const char *fmt, ...)
{
	if (lvl < log_level || lvl >= LOG_LVL_OFF)
		return;
	unsigned long held;
	if (!log_admit(fmt, &held))
		return;
	char line[LOG_LINE_MAX_BYTES];
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
	if (held > 0) {
		int k = snprintf(line + len, sizeof(line) - len - 1,
				 " (%lu more lines suppressed before this one: too many, too fast)", held);
		if (k > 0)
			len += (size_t)k;
		if (len > sizeof(line) - 2)
			len = sizeof(line) - 2;
	}
	line[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}
