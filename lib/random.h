/*
 * random.h - unguessable identifiers (session ids, stream ids, OAuth state and codes, sandbox
 * names) from libcrypto's generator. Shared by every part of the master.
 */
#ifndef KG_LIB_RANDOM_H
#define KG_LIB_RANDOM_H

#include <stddef.h>

/* random_hex - nbytes (at most 64) random bytes as 2*nbytes lower-case hex digits and a NUL;
 * out holds 2*nbytes+1. Aborts when the generator fails: a guessable id is worse than none. */
void random_hex(char *out, size_t nbytes);

#endif
