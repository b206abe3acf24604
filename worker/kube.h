/*
 * kube.h - the worker's Kubernetes API client (libcurl + jansson).
 *
 * The worker never reads a kubeconfig and never runs a credential plugin (it cannot exec):
 * it asks the master (IPC REQ_KUBE) for the API server's address, CA, namespace and current
 * credentials, and asks again when they expire or the API server answers 401. Everything here
 * is safe to call from any thread; there is one API connection per worker (one session).
 *
 * Errors are negative errno values with a sentence in err that names the API server's own
 * message (its Status object) when there is one:
 *   -ENOENT       404: no such object
 *   -EEXIST       409 AlreadyExists (create)
 *   -EAGAIN       409 Conflict (a stale resourceVersion): kube_api_call already tried a
 *                 PATCH, PUT or DELETE three more times
 *   -ESTALE       410 Gone (a watch's resourceVersion is too old): list again
 *   -EACCES       401 or 403, after one refresh of the credentials
 *   -EINVAL       400 or 422: the API server rejected the object
 *   -EHOSTUNREACH the API server could not be reached (connection, TLS, DNS)
 *   -ETIMEDOUT    no answer in time
 *   -EIO          anything else (5xx, an answer that is not JSON)
 */
#ifndef KG_WORKER_KUBE_H
#define KG_WORKER_KUBE_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>

struct session;
struct ipc_msg;
struct kube_api;

/* kube_api_get - the worker's API connection, its credentials fetched from the master on
 * first use; NULL with err set if the master has none to give */
struct kube_api *kube_api_get(struct session *s, char *err, size_t errlen);

/* kube_api_cached - the connection with whatever credentials it has, never asking the master
 * (for the way out, when nobody reads the master's answers any more); NULL if none */
struct kube_api *kube_api_cached(void);

/* kube_answer - main thread: the master's ANS_KUBE */
void kube_answer(struct session *s, const struct ipc_msg *m);
/* kube_pending_seq - the seq of the outstanding REQ_KUBE, 0 if none (for the dispatcher) */
unsigned kube_pending_seq(void);

const char *kube_api_server(struct kube_api *k);
const char *kube_api_namespace(struct kube_api *k);
bool kube_api_in_cluster(struct kube_api *k);

/* kube_api_curl - put the API server's TLS settings and credentials on a handle; hdr gets the
 * Authorization header when the credential is a bearer token */
int kube_api_curl(struct kube_api *k, CURL *h, struct curl_slist **hdr, char *err, size_t errlen);

/*
 * kube_api_call - one request; path starts with "/apis/..." or "/api/...". body (borrowed)
 * is sent as JSON with content type ctype (NULL: application/json). On 2xx returns 0 and *out
 * (when out is non-NULL) gets the parsed answer.
 */
int kube_api_call(struct kube_api *k, const char *method, const char *path, const char *ctype,
		  json_t *body, long timeout_ms, json_t **out, char *err, size_t errlen);

/* Called for each watch event (type "ADDED", "MODIFIED", "DELETED", "BOOKMARK"; object
 * borrowed): return nonzero to end the watch with that value, 0 to go on. */
typedef int (*kube_watch_fn)(void *ctx, const char *type, json_t *object);

/*
 * kube_api_watch - GET path (a collection, may carry a query) with watch=1 from
 * resourceVersion rv for up to timeout_s seconds. Returns fn's nonzero value, 0 when the
 * API server ended the watch, -ESTALE when rv is too old, or an error above. rv_out (cap
 * bytes) is updated to the last resourceVersion seen, so the caller can watch on.
 */
int kube_api_watch(struct kube_api *k, const char *path, const char *rv, int timeout_s,
		   kube_watch_fn fn, void *ctx, char *rv_out, size_t cap, char *err,
		   size_t errlen);

/*
 * kube_watch_lines - what kube_api_watch does with the bytes of a 200 watch answer, apart from
 * the transfer: each complete line at the front of buf (*len bytes) is one event (parsed, its
 * resourceVersion copied to rv_out, handed to fn unless a BOOKMARK) and is removed; the
 * unfinished rest moves to the front. Returns 0, fn's nonzero value, -ESTALE for an ERROR
 * event with code 410, or -EIO for a line that is not a watch event. For tests/fuzz/.
 */
int kube_watch_lines(char *buf, size_t *len, kube_watch_fn fn, void *ctx, char *rv_out,
		     size_t rv_cap);

/* kube_now_rfc3339 - now + offset_s as "2026-11-30T15:55:09Z" */
void kube_time_rfc3339(long offset_s, char *out, size_t cap);

#endif
