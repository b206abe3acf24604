/*
 * ascii.h - the visible-ASCII alphabet (0x21-0x7e: no space, no control byte, nothing above
 * 0x7e) that tokens, ids, scopes, emails and secrets are checked against before they are used
 * or passed on. Shared by the worker's credentials, the agent's metadata server and its claim.
 */
#ifndef KG_LIB_ASCII_H
#define KG_LIB_ASCII_H

#include <stdbool.h>
#include <stddef.h>

/* ascii_visible - are all n bytes of s visible ASCII? (true for n == 0) */
bool ascii_visible(const char *s, size_t n);

/* ascii_visible_str - is s a NUL-terminated string of 1..max visible ASCII bytes? (false for
 * NULL) */
bool ascii_visible_str(const char *s, size_t max);

#endif
