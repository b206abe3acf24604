/*
 * fuzz_http_headers.c - the HTTP transport's parsers of header values a client controls
 * (master/http.c): Origin, Accept and Content-Type. They must not read out of bounds or hang,
 * and what they accept must be what they say.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "master/master.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 4096)
		return 0;
	char *v = malloc(size + 1);
	if (!v)
		return 0;
	memcpy(v, data, size);
	v[size] = '\0';
	char scheme[8], host[64];
	long port;
	if (http_origin_parse(v, scheme, sizeof(scheme), host, sizeof(host), &port)) {
		if (port < 1 || port > 65535 || !strchr(v, ':') || strchr(host, '@') || strchr(host, '/'))
			abort();
	}
	http_media_admits(v, "application/json");
	http_media_admits(v, "text/event-stream");
	http_content_type_json(v);
	free(v);
	return 0;
}
