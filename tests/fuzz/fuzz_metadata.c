/*
 * fuzz_metadata.c - libFuzzer target for the metadata-server emulator's request handling
 * (agent/metadata.c): metadata_answer on any request-target and header combination, and
 * metadata_view_from_json on any credentials object.
 *
 * Built by tests/fuzz/Makefile. Byte 0 picks the case: bit 0 sends Metadata-Flavor, bit 1 makes
 * its value "Google" (else the next bytes' junk), bit 2 adds X-Forwarded-For, bit 3 lets the view
 * mint ID tokens, bits 4-5 pick the method (GET, HEAD, POST, the empty string), bit 6 expires
 * the cached token; with bit 7 the rest is a credentials object for the view instead, answered
 * against a fixed set of paths. Besides "no crash, no leak": every answer has a known status or
 * says what to fetch, its body is a NUL-terminated string of its length, a refused request
 * never carries the token, and a fetch names a well-formed scope key.
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/metadata.h"

/* fuzz_check - the invariants of one answer */
static void fuzz_check(const struct metadata_request *rq, const struct metadata_response *r)
{
	if (r->need == METADATA_NEED_NONE) {
		static const int ok[] = { 200, 400, 403, 404, 405 };
		int known = 0;
		for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
			known |= r->status == ok[i];
		if (!known || !r->body || strlen(r->body) != r->len || !r->content_type)
			__builtin_trap();
		if ((r->status == 403) != (rq->forwarded || !rq->flavor || strcmp(rq->flavor, "Google")))
			__builtin_trap();
		if (r->status != 200 && strstr(r->body, "ya29.fuzz"))
			__builtin_trap();
	} else if (r->need == METADATA_NEED_ACCESS) {
		if (!r->need_scopes || !*r->need_scopes || strstr(r->need_scopes, ",,") ||
		    r->need_scopes[0] == ',' || r->need_scopes[strlen(r->need_scopes) - 1] == ',')
			__builtin_trap();
	} else if (r->need == METADATA_NEED_IDENTITY) {
		if (!r->need_audience || !*r->need_audience || strlen(r->need_audience) > METADATA_MAX_FIELD)
			__builtin_trap();
	} else {
		__builtin_trap();
	}
}

/* fuzz_view - the fixed view most cases run against */
static int fuzz_view(struct metadata_view *v, int id_tokens, int expired)
{
	json_t *c = json_pack("{s:s, s:s, s:s, s:[s,s], s:b, s:s, s:i}", "email",
			      "sa@p.iam.gserviceaccount.com", "project_id", "p", "universe_domain",
			      "googleapis.com", "scopes", "https://www.googleapis.com/auth/cloud-platform",
			      "x", "id_tokens", id_tokens, "access_token", "ya29.fuzz", "expires_in",
			      expired ? 10 : 3600);
	char err[256];
	int rc = metadata_view_from_json(c, 0, v, err, sizeof(err));
	json_decref(c);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t f = data[0];
	data++;
	size--;
	struct metadata_view v;
	struct metadata_response r;
	if (f & 0x80) {
		json_t *c = json_loadb((const char *)data, size, 0, NULL);
		char err[256];
		if (c && metadata_view_from_json(c, 0, &v, err, sizeof(err)) == 0) {
			static const char *const paths[] = {
				"/computeMetadata/v1/instance/service-accounts/?recursive=true",
				"/computeMetadata/v1/instance/service-accounts/default/token",
				"/computeMetadata/v1/instance/service-accounts/default/scopes",
				"/computeMetadata/v1/project/project-id",
				"/computeMetadata/v1/universe/universe_domain",
			};
			for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
				struct metadata_request rq = { .method = "GET", .target = paths[i],
							       .target_len = strlen(paths[i]),
							       .flavor = "Google" };
				if (metadata_answer(&v, &rq, 0, METADATA_MIN_LIFETIME, &r) == 0) {
					fuzz_check(&rq, &r);
					metadata_response_free(&r);
				}
			}
			metadata_view_free(&v);
		}
		json_decref(c);
		return 0;
	}
	if (fuzz_view(&v, f & 8, f & 64) != 0)
		__builtin_trap();
	/* the flavor's junk value: up to the first NUL of the input's tail */
	char junk[16] = "";
	static const char *const methods[] = { "GET", "HEAD", "POST", "" };
	struct metadata_request rq = {
		.method = methods[(f >> 4) & 3],
		.target = (const char *)data,
		.target_len = size,
		.flavor = !(f & 1) ? NULL : (f & 2) ? "Google" : junk,
		.forwarded = f & 4,
	};
	if (size)
		memcpy(junk, data, size < sizeof(junk) - 1 ? size : sizeof(junk) - 1);
	if (metadata_answer(&v, &rq, 0, METADATA_MIN_LIFETIME, &r) == 0) {
		fuzz_check(&rq, &r);
		metadata_response_free(&r);
	}
	metadata_view_free(&v);
	return 0;
}
