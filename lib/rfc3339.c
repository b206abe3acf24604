/*
 * rfc3339.c - see rfc3339.h. By hand, not strptime: strptime takes what it can and leaves the
 * rest (the offset, the fraction, trailing garbage) to each caller.
 */
#include "lib/rfc3339.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>

/* r3_digits - n decimal digits at *p into *v, advancing *p; false if they are not there */
static bool r3_digits(const char **p, int n, int *v)
{
	*v = 0;
	for (int i = 0; i < n; i++, (*p)++) {
		if (**p < '0' || **p > '9')
			return false;
		*v = *v * 10 + (**p - '0');
	}
	return true;
}

/* r3_sep - the character c at *p, advancing *p */
static bool r3_sep(const char **p, char c)
{
	if (**p != c)
		return false;
	(*p)++;
	return true;
}

/* r3_mdays - days in month mon (1-12) of year */
static int r3_mdays(int year, int mon)
{
	static const int days[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
	return mon == 2 && leap ? 29 : days[mon - 1];
}

/* rfc3339_parse - see rfc3339.h */
int rfc3339_parse(const char *s, time_t *out)
{
	if (!s)
		return -EINVAL;
	const char *p = s;
	int Y, M, D, h, m, sec;
	if (!r3_digits(&p, 4, &Y) || !r3_sep(&p, '-') || !r3_digits(&p, 2, &M) ||
	    !r3_sep(&p, '-') || !r3_digits(&p, 2, &D) || (*p != 'T' && *p != 't'))
		return -EINVAL;
	p++;
	if (!r3_digits(&p, 2, &h) || !r3_sep(&p, ':') || !r3_digits(&p, 2, &m) ||
	    !r3_sep(&p, ':') || !r3_digits(&p, 2, &sec))
		return -EINVAL;
	/* sec 60: a leap second, which time_t cannot name; counted as the next second */
	if (M < 1 || M > 12 || D < 1 || D > r3_mdays(Y, M) || h > 23 || m > 59 || sec > 60)
		return -EINVAL;
	if (*p == '.') {
		if (*++p < '0' || *p > '9')
			return -EINVAL;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	long off = 0;
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int sign = *p++ == '-' ? -1 : 1, oh, om;
		if (!r3_digits(&p, 2, &oh) || !r3_sep(&p, ':') || !r3_digits(&p, 2, &om) ||
		    oh > 23 || om > 59)
			return -EINVAL;
		off = sign * (oh * 3600L + om * 60L);
	} else {
		return -EINVAL;
	}
	if (*p)
		return -EINVAL;
	struct tm tm = { .tm_year = Y - 1900, .tm_mon = M - 1, .tm_mday = D,
			 .tm_hour = h, .tm_min = m, .tm_sec = sec };
	*out = timegm(&tm) - off;
	return 0;
}

/* rfc3339_format - see rfc3339.h */
void rfc3339_format(time_t t, char *out, size_t cap)
{
	struct tm tm;
	if (!cap)
		return;
	out[0] = '\0';
	/* four digits of year, as rfc3339_parse reads them (strftime's %Y does not pad) */
	if (!gmtime_r(&t, &tm) || tm.tm_year < -1900 || tm.tm_year > 9999 - 1900)
		return;
	int n = snprintf(out, cap, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900,
			 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
	if (n < 0 || (size_t)n >= cap)
		out[0] = '\0';
}
