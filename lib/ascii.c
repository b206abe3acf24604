/*
 * ascii.c - see ascii.h
 */
#include "lib/ascii.h"

#include <string.h>

bool ascii_visible(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return false;
	return true;
}

bool ascii_visible_str(const char *s, size_t max)
{
	size_t n = s ? strlen(s) : 0;
	return n > 0 && n <= max && ascii_visible(s, n);
}
