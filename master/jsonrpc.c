/*
 * jsonrpc.c - the JSON-RPC answers the master writes itself rather than relaying a worker's:
 * errors of the transports (master/http.c, master/stdio.c) and of sign-in (master/auth.c).
 * Built with jansson like every other JSON the master sends, so an id or a sentence with
 * quotes, backslashes or control characters stays one valid JSON value.
 */
#include <jansson.h>

#include "master/master.h"

/* jsonrpc_error - see master.h */
char *jsonrpc_error(const char *id, int code, const char *msg, const char *reason)
{
	json_t *jid = id ? json_loads(id, JSON_DECODE_ANY, NULL) : NULL;
	json_t *err = json_pack("{s:i, s:s}", "code", code, "message", msg);
	if (err && reason)
		json_object_set_new(err, "data", json_pack("{s:s}", "reason", reason));
	json_t *e = err ? json_pack("{s:s, s:o, s:o}", "jsonrpc", "2.0", "id", jid ? jid : json_null(),
				    "error", err)
			: NULL;
	if (!err)
		json_decref(jid);
	char *out = e ? json_dumps(e, JSON_COMPACT) : NULL;
	json_decref(e);
	return out;
}
