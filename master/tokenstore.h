/*
 * tokenstore.h - `serve --http --auth google --token-store FILE --token-store-key-file KEY`:
 * the sign-ins (registered clients, refresh-token families, the token key, sign-outs) and, with
 * --credentials user, the users' Google grants, kept across restarts in one file encrypted
 * with the operator's key (AES-256-GCM). Without --token-store everything stays in memory and
 * a restart signs everyone out. docs/shared-server.md#keeping-sign-ins-across-restarts.
 */
#ifndef KG_TOKENSTORE_H
#define KG_TOKENSTORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "master/master.h"
#include "policy/limits.h"

#define TSTORE_KEY_BYTES 32

/* tstore_parse_key - a key file's contents: 32 bytes as they are, 64 hex digits or the base64
 * of 32 bytes (white space around is ignored); 0 or -EINVAL */
int tstore_parse_key(const unsigned char *buf, size_t len, unsigned char key[TSTORE_KEY_BYTES]);

/* tstore_seal - plain encrypted and authenticated under key: magic, nonce, ciphertext, tag
 * (malloc'd into *out); 0 or -ENOMEM/-EIO */
int tstore_seal(const unsigned char key[TSTORE_KEY_BYTES], const unsigned char *plain, size_t len,
		unsigned char **out, size_t *outlen);
/* tstore_unseal - the reverse: 0 and the plain text (malloc'd, NUL-terminated; the caller
 * wipes it), -EINVAL when blob is not a store file, -EBADMSG when it does not decrypt under key
 * (another key, or the file was changed) */
int tstore_unseal(const unsigned char key[TSTORE_KEY_BYTES], const unsigned char *blob, size_t len,
		  unsigned char **plain, size_t *plainlen);

/* What an owner keeps: a JSON snapshot taken under its own lock, and its load at start-up
 * (before any request). The owners hand these in (tstore_open), so this file, below them,
 * never calls up into them (tests/layers/check.sh). */
struct tstore_owner {
	json_t *(*dump)(void);
	int (*load)(const json_t *v, char *err, size_t cap);
};

/* tstore_open - at start-up, after the provider is known: read the key, load the store (if the
 * file exists) into its owners (auth: master/auth.c's sign-ins; users: master/usertoken.c's
 * Google grants), write it once (so a directory that cannot be written is said now) and start
 * the writer; bind names the server the sign-ins belong to (its resource, the provider, the
 * OAuth client). 0, or -1 with a sentence in err */
int tstore_open(const struct serve_config *cfg, const char *bind, const struct tstore_owner *auth,
		const struct tstore_owner *users, char *err, size_t cap);
bool tstore_enabled(void);
/* tstore_changed - something to keep has changed (callable under auth.c's or usertoken.c's
 * lock); returns its generation, for tstore_sync */
unsigned long tstore_changed(void);
/* tstore_sync - wait until generation gen is on disk (or TSTORE_SYNC_WAIT_MS have passed, or a
 * write failed); call with no lock held. A refresh token is handed out only once it is kept. */
void tstore_sync(unsigned long gen);
/* tstore_close - write what is pending, stop the writer, wipe the key */
void tstore_close(void);

/* the owners' halves of struct tstore_owner: master/auth.c and master/usertoken.c */
json_t *auth_store_dump(void);
int auth_store_load(const json_t *v, char *err, size_t cap);
json_t *utok_store_dump(void);
int utok_store_load(const json_t *v, char *err, size_t cap);

#endif
