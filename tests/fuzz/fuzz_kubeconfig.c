/*
 * fuzz_kubeconfig.c - libFuzzer target for the master's YAML reader (master/kubecfg.c):
 * yaml_to_json on any bytes, as kubecfg_load feeds it every kubeconfig file it reads.
 *
 * Built by tests/fuzz/Makefile. The input is passed as it is, without a terminating NUL, so
 * ASan sees any read past its length. Besides "no crash, no leak": a refusal always comes with
 * a message, and an accepted value keeps kubecfg.h's promise: objects, arrays, strings and
 * null only (no numbers or booleans: every scalar is a string), nested at most 65 deep.
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "master/kubecfg.h"

/* fuzz_shape - what yaml_to_json may build, at most 64 levels below the top value */
static void fuzz_shape(json_t *v, int depth)
{
	const char *key;
	json_t *e;
	size_t i;
	if (depth > 64)
		__builtin_trap();
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		json_object_foreach(v, key, e)
			fuzz_shape(e, depth + 1);
		break;
	case JSON_ARRAY:
		json_array_foreach(v, i, e)
			fuzz_shape(e, depth + 1);
		break;
	case JSON_STRING:
	case JSON_NULL:
		break;
	default:
		__builtin_trap();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	memset(err, 0, sizeof(err));
	json_t *v = yaml_to_json((const char *)data, size, err, sizeof(err));
	if (!v) {
		if (!err[0] || !memchr(err, '\0', sizeof(err)))
			__builtin_trap();
		return 0;
	}
	fuzz_shape(v, 0);
	json_decref(v);
	return 0;
}
