/*
 * fuzz_client_metadata.c - libFuzzer target for the Client ID Metadata Document check
 * (master/auth.c auth_client_metadata_parse): any bytes as the document a client's URL served.
 *
 * Built by tests/fuzz/Makefile. The input is passed without a terminating NUL, so ASan sees a
 * read past its length. Besides "no crash, no leak": a refusal always says why, and a document
 * that is accepted names the URL it came from as its client_id.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "master/auth.h"

#define URL "https://app.example/.well-known/client.json"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static _Alignas(16) unsigned char cl[AUTH_CLIENT_BYTES];
	char why[300] = "";
	char *doc = malloc(size ? size : 1);
	if (!doc)
		return 0;
	memcpy(doc, data, size);
	int r = auth_client_metadata_parse(URL, doc, size, (struct client *)cl, why, sizeof(why));
	if (r != 0 && !why[0])
		__builtin_trap();
	if (r == 0 && !memmem(doc, size, "app.example", 11))
		__builtin_trap(); /* accepted without naming its own URL */
	free(doc);
	return 0;
}
