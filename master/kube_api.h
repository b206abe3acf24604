/*
 * kube_api.h - the master's Kubernetes API client (lib/http_client.c + jansson), with the server's own
 * credential from master/kubecfg.c. Only the master talks to the API server: workers ask it for
 * their sandbox (REQ_SANDBOX), and master/sandbox_kube.c makes these calls for that worker's
 * own claim. Everything here is safe to call from any thread.
 *
 * Errors are negative errno values with a sentence in err that names the API server's own
 * message (its Status object) when there is one:
 *   -ENOENT       404: no such object
 *   -EEXIST       409 AlreadyExists (create)
 *   -EAGAIN       409 Conflict (a stale resourceVersion): kube_api_call already tried a
 *                 PATCH, PUT or DELETE three more times
 *   -ESTALE       410 Gone (a watch's resourceVersion is too old): list again
 *   -EACCES       401 or 403, after one refresh of the credential (an exec plugin run again)
 *   -EINVAL       400 or 422: the API server rejected the object
 *   -EHOSTUNREACH the API server could not be reached (connection, TLS, DNS)
 *   -ETIMEDOUT    no answer in time
 *   -ECANCELED    cut short (kube_api_stop, kube_api_cancel_on)
 *   -EIO          anything else (5xx, an answer that is not JSON)
 */
#ifndef KG_MASTER_KUBE_API_H
#define KG_MASTER_KUBE_API_H

#include <jansson.h>
#include <stdbool.h>

/*
 * kube_api_call - one request; path starts with "/apis/..." or "/api/...". body (borrowed)
 * is sent as JSON with content type ctype (NULL: application/json). On 2xx returns 0 and *out
 * (when out is non-NULL) gets the parsed answer.
 */
int kube_api_call(const char *method, const char *path, const char *ctype, json_t *body,
		  long timeout_ms, json_t **out, char *err, size_t errlen);

/* Called for each watch event (type "ADDED", "MODIFIED", "DELETED", "BOOKMARK"; object
 * borrowed): return nonzero to end the watch with that value, 0 to go on. */
typedef int (*kube_watch_fn)(void *ctx, const char *type, json_t *object);

/*
 * kube_api_watch - GET path (a collection, may carry a query) with watch=1 from
 * resourceVersion rv for up to timeout_s seconds. Returns fn's nonzero value, 0 when the
 * API server ended the watch, -ESTALE when rv is too old, or an error above. rv_out (cap
 * bytes) is updated to the last resourceVersion seen, so the caller can watch on.
 */
int kube_api_watch(const char *path, const char *rv, int timeout_s, kube_watch_fn fn, void *ctx,
		   char *rv_out, size_t cap, char *err, size_t errlen);

/*
 * kube_watch_lines - what kube_api_watch does with the bytes of a 200 watch answer, apart from
 * the transfer: each complete line at the front of buf (*len bytes) is one event (parsed, its
 * resourceVersion copied to rv_out, handed to fn unless a BOOKMARK) and is removed; the
 * unfinished rest moves to the front. Returns 0, fn's nonzero value, -ESTALE for an ERROR
 * event with code 410, or -EIO for a line that is not a watch event. For tests/fuzz/.
 */
int kube_watch_lines(char *buf, size_t *len, kube_watch_fn fn, void *ctx, char *rv_out,
		     size_t rv_cap);

/* kube_api_stop - every transfer under way or to come ends at once (-ECANCELED): the master
 * is exiting */
void kube_api_stop(void);
/* kube_api_cancel_on - this thread's transfers end (-ECANCELED) as soon as *flag is true (read
 * atomically); NULL: never */
void kube_api_cancel_on(const bool *flag);

/* kube_time_rfc3339 - now + offset_s as "2026-11-30T15:55:09Z" */
void kube_time_rfc3339(long offset_s, char *out, size_t cap);

#endif
