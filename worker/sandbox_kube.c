/*
 * sandbox_kube.c - the Kubernetes backend: a session's sandbox is a pod from an agent-sandbox
 * warm pool, held through a SandboxClaim (extensions.agents.x-k8s.io/v1beta1).
 *
 * The first tool call creates the claim (or, with --claim, adopts an existing one), waits by
 * watching until it is Ready, reads status.sandbox, and performs the agent's claim handshake on
 * the pod IP or through the API server's pods/proxy. A renewal thread moves the claim's
 * spec.lifecycle.shutdownTime forward while the session lives (computed from the local clock),
 * so a worker that dies without cleaning up loses its pod within --claim-lease. Session end
 * deletes the claim; with --persistent the claim has no lifecycle and stays, and the agent is
 * released so a later --claim can claim it again. Used by worker/sandbox.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ipc/ipc.h"
#include "policy/limits.h"
#include "worker/agent_client.h"
#include "worker/kube.h"
#include "worker/sandbox_kube.h"
#include "worker/worker.h"

#define CLAIMS_API "/apis/extensions.agents.x-k8s.io/v1beta1"
#define SANDBOXES_API "/apis/agents.x-k8s.io/v1beta1"
#define POD_NAME_ANNOTATION "agents.x-k8s.io/pod-name"

struct kube_settings kube_settings = { .warm_pool = "go-runtime-pool", .access = "auto",
				       .port = 8888, .lease_s = 600, .ready_s = 120 };

static struct {
	pthread_mutex_t mu;        /* claim and ep, between the call and renewal threads */
	pthread_cond_t cv;
	char claim[254];           /* the claim this session holds; "" none */
	bool from_flag;            /* it is the one --claim named */
	int flag_attempts;
	char pod[254], ip[64], url[3000];
	struct agent_endpoint ep;
	bool connected;            /* the handshake succeeded */
	bool renewing, stopping;
	pthread_t renew;
} kb = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void kb_claim_path(struct kube_api *k, const char *name, char *out, size_t cap)
{
	snprintf(out, cap, CLAIMS_API "/namespaces/%s/sandboxclaims%s%s", kube_api_namespace(k),
		 name ? "/" : "", name ? name : "");
}

/* kb_label - a label value from free text: [A-Za-z0-9._-], at most 63, alphanumeric ends */
static void kb_label(const char *in, char *out, size_t cap)
{
	size_t n = 0;
	for (const char *p = in; *p && n + 1 < cap && n < 63; p++) {
		char c = *p;
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			  c == '.' || c == '-' || c == '_';
		out[n++] = ok ? c : '_';
	}
	while (n && !((out[n - 1] >= 'a' && out[n - 1] <= 'z') || (out[n - 1] >= 'A' && out[n - 1] <= 'Z') ||
		      (out[n - 1] >= '0' && out[n - 1] <= '9')))
		n--;
	size_t start = 0;
	while (start < n && !((out[start] >= 'a' && out[start] <= 'z') ||
			      (out[start] >= 'A' && out[start] <= 'Z') ||
			      (out[start] >= '0' && out[start] <= '9')))
		start++;
	memmove(out, out + start, n - start);
	out[n - start] = '\0';
	if (!out[0])
		snprintf(out, cap, "unknown");
}

/* kb_note - tell the master which claim this worker holds ("" none), so it can delete the
 * claim if the worker dies holding it */
static void kb_note(struct session *s, const char *name)
{
	struct ipc_buf b;
	if (ipc_pack_note_claim(&b, session_next_seq(s), name, kube_settings.persistent) == 0)
		session_send(s, &b);
}

/* kb_lifecycle - the claim's lifecycle: a lease, or none for a persistent sandbox */
static json_t *kb_lifecycle(void)
{
	if (kube_settings.persistent)
		return json_null();
	char t[40];
	kube_time_rfc3339(kube_settings.lease_s, t, sizeof(t));
	return json_pack("{s:s, s:s}", "shutdownTime", t, "shutdownPolicy", "Delete");
}

/* kb_create - a new claim on the warm pool; its generated name lands in kb.claim */
static int kb_create(struct session *s, struct kube_api *k, char *err, size_t errlen)
{
	char path[600], sess[64], user[64], prefix[40];
	kb_claim_path(k, NULL, path, sizeof(path));
	char sid8[9]; /* a prefix: whoever may list claims must not learn the session's bearer secret */
	snprintf(sid8, sizeof(sid8), "%.8s", s->id);
	kb_label(sid8, sess, sizeof(sess));
	kb_label(s->user[0] ? s->user : "local", user, sizeof(user));
	snprintf(prefix, sizeof(prefix), "kg-%.8s-", s->id);
	for (char *p = prefix; *p; p++)
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
	json_t *spec = json_pack("{s:{s:s}}", "warmPoolRef", "name", kube_settings.warm_pool);
	json_t *life = kb_lifecycle();
	if (!json_is_null(life))
		json_object_set(spec, "lifecycle", life);
	json_decref(life);
	json_t *body = json_pack(
		"{s:s, s:s, s:{s:s, s:{s:s, s:s, s:s}, s:{s:s}}, s:o}", "apiVersion",
		"extensions.agents.x-k8s.io/v1beta1", "kind", "SandboxClaim", "metadata",
		"generateName", prefix, "labels", "app.kubernetes.io/managed-by", "kode-gopher",
		"kode-gopher.dev/session", sess, "kode-gopher.dev/user", user, "annotations",
		"kode-gopher.dev/user", s->user[0] ? s->user : "local", "spec", spec);
	json_t *out = NULL;
	int r = kube_api_call(k, "POST", path, NULL, body, KB_CALL_MS, &out, err, errlen);
	json_decref(body);
	const char *name = json_string_value(json_object_get(json_object_get(out, "metadata"), "name"));
	if (r == 0 && !name) {
		snprintf(err, errlen, "the API server created a SandboxClaim but did not say its name");
		r = -EIO;
	}
	if (r == 0) {
		pthread_mutex_lock(&kb.mu);
		snprintf(kb.claim, sizeof(kb.claim), "%s", name);
		kb.from_flag = false;
		pthread_mutex_unlock(&kb.mu);
		kb_note(s, name);
		log_info("created SandboxClaim %s/%s on warm pool %s", kube_api_namespace(k), name,
			 kube_settings.warm_pool);
	} else if (r == -ENOENT) {
		snprintf(err, errlen, "the cluster has no SandboxClaim API (extensions.agents.x-k8s.io/"
			 "v1beta1) in namespace %s: is agent-sandbox with its extensions installed?",
			 kube_api_namespace(k));
	}
	json_decref(out);
	return r;
}

/* kb_patch_lifecycle - take the lease (or, persistent, clear it) on an adopted claim */
static int kb_patch_lifecycle(struct kube_api *k, const char *name, char *err, size_t errlen)
{
	char path[600];
	kb_claim_path(k, name, path, sizeof(path));
	json_t *body = json_pack("{s:{s:o}}", "spec", "lifecycle", kb_lifecycle());
	int r = kube_api_call(k, "PATCH", path, "application/merge-patch+json", body, KB_CALL_MS,
			      NULL, err, errlen);
	json_decref(body);
	return r;
}

/* sandbox_kube_claim_ready - the claim's Ready condition: 1 True, 0 not (yet), and why in why */
int sandbox_kube_claim_ready(json_t *claim, char *why, size_t cap)
{
	json_t *st = json_object_get(claim, "status"), *c;
	size_t i;
	snprintf(why, cap, "it has no Ready condition yet");
	json_array_foreach(json_object_get(st, "conditions"), i, c) {
		const char *type = json_string_value(json_object_get(c, "type"));
		if (!type || strcmp(type, "Ready") != 0)
			continue;
		const char *status = json_string_value(json_object_get(c, "status"));
		const char *reason = json_string_value(json_object_get(c, "reason"));
		const char *msg = json_string_value(json_object_get(c, "message"));
		snprintf(why, cap, "condition Ready is %s (reason %s%s%s)", status ? status : "?",
			 reason ? reason : "none given", msg && *msg ? ": " : "", msg ? msg : "");
		if (!status || strcmp(status, "True") != 0)
			return 0;
		json_t *sb = json_object_get(st, "sandbox");
		if (!json_string_value(json_object_get(sb, "name"))) {
			snprintf(why, cap, "it is Ready but names no sandbox yet");
			return 0;
		}
		return 1;
	}
	return 0;
}

struct kb_watch {
	json_t *last;    /* the latest claim seen (owned) */
	bool deleted;
};

static int kb_on_event(void *ctx, const char *type, json_t *obj)
{
	struct kb_watch *w = ctx;
	json_decref(w->last);
	w->last = json_incref(obj);
	if (strcmp(type, "DELETED") == 0) {
		w->deleted = true;
		return 2;
	}
	char why[8];
	return sandbox_kube_claim_ready(obj, why, sizeof(why)) ? 1 : 0;
}

/* kb_wait_ready - watch the claim until it is Ready; *claim = its Ready state (owned) */
static int kb_wait_ready(struct kube_api *k, const char *name, json_t **claim, char *err,
			 size_t errlen)
{
	char path[700], list[900], rv[64] = "", why[600];
	kb_claim_path(k, name, path, sizeof(path));
	snprintf(list, sizeof(list), CLAIMS_API "/namespaces/%s/sandboxclaims?fieldSelector="
		 "metadata.name%%3D%s", kube_api_namespace(k), name);
	time_t deadline = time(NULL) + kube_settings.ready_s;
	struct kb_watch w = { 0 };
	int r;
	for (;;) {
		if (!rv[0]) {
			/* (re)start from the claim as it is now */
			json_decref(w.last);
			w.last = NULL;
			r = kube_api_call(k, "GET", path, NULL, NULL, KB_CALL_MS, &w.last, err, errlen);
			if (r == -ENOENT) {
				snprintf(err, errlen, "there is no SandboxClaim named %s in namespace %s",
					 name, kube_api_namespace(k));
				break;
			}
			if (r != 0)
				break;
			if (sandbox_kube_claim_ready(w.last, why, sizeof(why))) {
				r = 1;
				break;
			}
			const char *v = json_string_value(json_object_get(
				json_object_get(w.last, "metadata"), "resourceVersion"));
			snprintf(rv, sizeof(rv), "%s", v ? v : "");
		}
		long left = (long)(deadline - time(NULL));
		if (left <= 0) {
			r = -ETIMEDOUT;
			break;
		}
		log_debug("watching SandboxClaim %s from resourceVersion %s (%ld s left)", name, rv,
			  left);
		r = kube_api_watch(k, list, rv, (int)left, kb_on_event, &w, rv, sizeof(rv), err,
				   errlen);
		if (r == 1 || r == 2)
			break;
		if (r == -ESTALE) {
			rv[0] = '\0'; /* 410 Gone: list again */
			continue;
		}
		if (r < 0)
			break;
	}
	if (r == 2) {
		snprintf(err, errlen, "SandboxClaim %s was deleted while kode-gopher waited for it",
			 name);
		r = -ENOENT;
	} else if (r == -ETIMEDOUT) {
		sandbox_kube_claim_ready(w.last, why, sizeof(why));
		snprintf(err, errlen, "SandboxClaim %s/%s was not Ready after %d s: %s. Check that "
			 "the warm pool %s exists and has ready sandboxes (kubectl get "
			 "sandboxwarmpool,sandbox -n %s)", kube_api_namespace(k), name,
			 kube_settings.ready_s, why, kube_settings.warm_pool, kube_api_namespace(k));
	}
	if (r == 1) {
		*claim = w.last;
		return 0;
	}
	json_decref(w.last);
	return r;
}

/* kb_pod_name - the sandbox's pod: its pod-name annotation, else the sandbox's own name */
static int kb_pod_name(struct kube_api *k, const char *sandbox, char *out, size_t cap, char *err,
		       size_t errlen)
{
	char path[700];
	snprintf(path, sizeof(path), SANDBOXES_API "/namespaces/%s/sandboxes/%s",
		 kube_api_namespace(k), sandbox);
	json_t *sb = NULL;
	int r = kube_api_call(k, "GET", path, NULL, NULL, KB_CALL_MS, &sb, err, errlen);
	if (r == 0) {
		const char *p = json_string_value(json_object_get(
			json_object_get(json_object_get(sb, "metadata"), "annotations"),
			POD_NAME_ANNOTATION));
		snprintf(out, cap, "%s", p && *p ? p : sandbox);
	}
	json_decref(sb);
	return r;
}

/* kb_use_proxy - reach the agent through the API server? */
static bool kb_use_proxy(struct kube_api *k)
{
	if (strcmp(kube_settings.access, "proxy") == 0)
		return true;
	if (strcmp(kube_settings.access, "pod-ip") == 0)
		return false;
	return !kube_api_in_cluster(k);
}

/* kb_connect - the agent of a Ready claim: address it, wait for it, claim it */
static int kb_connect(struct kube_api *k, json_t *claim, char *err, size_t errlen)
{
	json_t *sb = json_object_get(json_object_get(claim, "status"), "sandbox");
	const char *sandbox = json_string_value(json_object_get(sb, "name"));
	const char *ip = json_string_value(json_array_get(json_object_get(sb, "podIPs"), 0));
	bool proxy = kb_use_proxy(k);
	char pod[254] = "";
	int r = 0;
	if (proxy && (r = kb_pod_name(k, sandbox, pod, sizeof(pod), err, errlen)) != 0)
		return r;
	pthread_mutex_lock(&kb.mu);
	memset(&kb.ep, 0, sizeof(kb.ep));
	kb.connected = false;
	if (proxy) {
		snprintf(kb.pod, sizeof(kb.pod), "%s", pod);
		snprintf(kb.url, sizeof(kb.url), "%s/api/v1/namespaces/%s/pods/%s:%d/proxy",
			 kube_api_server(k), kube_api_namespace(k), pod, kube_settings.port);
		kb.ep.proxy = k;
	} else if (ip && *ip) {
		snprintf(kb.ip, sizeof(kb.ip), "%s", ip);
		snprintf(kb.url, sizeof(kb.url), strchr(ip, ':') ? "http://[%s]:%d" : "http://%s:%d",
			 ip, kube_settings.port);
	} else {
		r = -EHOSTUNREACH;
		snprintf(err, errlen, "SandboxClaim %s is Ready but its sandbox %s has no pod IP "
			 "(status.sandbox.podIPs); try --agent-access proxy", kb.claim,
			 sandbox ? sandbox : "");
	}
	kb.ep.base_url = kb.url;
	pthread_mutex_unlock(&kb.mu);
	if (r != 0)
		return r;
	/* Ready says the pod is; the agent may still be binding its port */
	for (int waited = 0;; waited += 100) {
		r = agent_client_health(&kb.ep, 3000, err, errlen);
		if (r == 0 || !agent_client_gone(r) || waited >= KB_AGENT_WAIT_MS)
			break;
		usleep(100000);
	}
	if (r != 0)
		return r;
	r = agent_client_claim(&kb.ep, err, errlen);
	if (r == -EALREADY)
		snprintf(err, errlen, "the sandbox of SandboxClaim %s is still held by an earlier "
			 "session (its agent refused a new claim). If that session is gone, delete "
			 "the pod so the claim gets a fresh one (kubectl delete pod %s -n %s), or "
			 "start without --claim", kb.claim, proxy ? pod : sandbox,
			 kube_api_namespace(k));
	if (r == 0) {
		pthread_mutex_lock(&kb.mu);
		kb.connected = true;
		pthread_mutex_unlock(&kb.mu);
		log_info("SandboxClaim %s: agent of sandbox %s claimed at %s", kb.claim, sandbox,
			 proxy ? "the API server's pod proxy" : kb.url);
	}
	return r;
}

/* kb_delete - delete a claim (its sandbox and pod go with it) */
static void kb_delete(struct kube_api *k, const char *name)
{
	char path[600], err[512];
	kb_claim_path(k, name, path, sizeof(path));
	json_t *opts = json_pack("{s:s, s:s, s:s}", "apiVersion", "v1", "kind", "DeleteOptions",
				 "propagationPolicy", "Background");
	int r = kube_api_call(k, "DELETE", path, NULL, opts, 5000, NULL, err, sizeof(err));
	json_decref(opts);
	if (r == 0 || r == -ENOENT)
		log_info("deleted SandboxClaim %s/%s", kube_api_namespace(k), name);
	else
		log_warn("could not delete SandboxClaim %s (its lease ends it): %s", name, err);
}

/* kb_renew_main - move the lease forward every third of it while the session lives */
static void *kb_renew_main(void *arg)
{
	struct session *s = arg;
	int every = kube_settings.lease_s / 3 > 0 ? kube_settings.lease_s / 3 : 1;
	pthread_mutex_lock(&kb.mu);
	while (!kb.stopping) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += every;
		while (!kb.stopping && pthread_cond_timedwait(&kb.cv, &kb.mu, &until) != ETIMEDOUT)
			;
		if (kb.stopping || !kb.claim[0])
			continue;
		char name[254], err[512];
		snprintf(name, sizeof(name), "%s", kb.claim);
		pthread_mutex_unlock(&kb.mu);
		struct kube_api *k = kube_api_get(s, err, sizeof(err));
		int r = k ? kb_patch_lifecycle(k, name, err, sizeof(err)) : -EIO;
		if (r == 0)
			log_debug("renewed the lease of SandboxClaim %s for %d s", name,
				  kube_settings.lease_s);
		else
			log_warn("could not renew the lease of SandboxClaim %s: %s", name, err);
		pthread_mutex_lock(&kb.mu);
	}
	pthread_mutex_unlock(&kb.mu);
	return NULL;
}

static void kb_start_renewal(struct session *s)
{
	pthread_mutex_lock(&kb.mu);
	bool start = !kb.renewing && !kube_settings.persistent;
	if (start)
		kb.renewing = pthread_create(&kb.renew, NULL, kb_renew_main, s) == 0;
	pthread_mutex_unlock(&kb.mu);
}

/* kb_acquire - a claim (named by --claim on the first try, else new), Ready and connected */
static int kb_acquire(struct session *s, bool fresh, char *err, size_t errlen)
{
	struct kube_api *k = kube_api_get(s, err, errlen);
	if (!k)
		return -EACCES;
	int r;
	char name[254];
	if (!fresh && kube_settings.claim && kb.flag_attempts < 2) {
		/* --claim NAME: reattach, and after a death try it once more */
		kb.flag_attempts++;
		snprintf(name, sizeof(name), "%s", kube_settings.claim);
		pthread_mutex_lock(&kb.mu);
		snprintf(kb.claim, sizeof(kb.claim), "%s", name);
		kb.from_flag = true;
		pthread_mutex_unlock(&kb.mu);
		r = kb_patch_lifecycle(k, name, err, errlen);
		if (r == -ENOENT)
			snprintf(err, errlen, "there is no SandboxClaim named %s in namespace %s "
				 "(kubectl get sandboxclaims -n %s)", name, kube_api_namespace(k),
				 kube_api_namespace(k));
		if (r == 0)
			kb_note(s, name);
		if (r == 0)
			log_info("reattaching to SandboxClaim %s/%s%s", kube_api_namespace(k), name,
				 kube_settings.persistent ? " (persistent: no lease)" : "");
	} else {
		r = kb_create(s, k, err, errlen);
		snprintf(name, sizeof(name), "%s", kb.claim);
	}
	if (r != 0)
		return r;
	json_t *claim = NULL;
	r = kb_wait_ready(k, name, &claim, err, errlen);
	if (r == 0)
		r = kb_connect(k, claim, err, errlen);
	json_decref(claim);
	if (r == 0)
		kb_start_renewal(s);
	return r;
}

static int kb_renew_claim(struct session *s, const char *what, struct agent_endpoint **ep,
			  char *err, size_t errlen);

int sandbox_kube_get(struct session *s, struct agent_endpoint **ep, char *err, size_t errlen)
{
	if (kb.connected) {
		*ep = &kb.ep;
		return 0;
	}
	/* an earlier call made a claim but could not use it (not Ready, agent unreachable): that
	 * one goes, as a dead sandbox's would */
	if (kb.claim[0])
		return kb_renew_claim(s, "could not be used", ep, err, errlen);
	int r = kb_acquire(s, false, err, errlen);
	if (r == 0)
		*ep = &kb.ep;
	return r;
}

bool sandbox_kube_have(void)
{
	return kb.connected;
}

int sandbox_kube_replace(struct session *s, struct agent_endpoint **ep, char *err, size_t errlen)
{
	return kb_renew_claim(s, "died", ep, err, errlen);
}

/* kb_renew_claim - the current claim's sandbox died (or could not be used): --claim's claim
 * once more, else a new claim, the old one deleted */
static int kb_renew_claim(struct session *s, const char *what, struct agent_endpoint **ep,
			  char *err, size_t errlen)
{
	char err1[512] = "";
	struct kube_api *k = kube_api_get(s, err, errlen);
	if (!k)
		return -EACCES;
	pthread_mutex_lock(&kb.mu);
	kb.connected = false;
	char old[254];
	snprintf(old, sizeof(old), "%s", kb.claim);
	bool flag = kb.from_flag;
	pthread_mutex_unlock(&kb.mu);
	if (flag && kb.flag_attempts < 2) {
		log_warn("the sandbox of SandboxClaim %s %s; trying that claim again", old, what);
		int r = kb_acquire(s, false, err1, sizeof(err1));
		if (r == 0) {
			*ep = &kb.ep;
			return 0;
		}
		log_warn("SandboxClaim %s again: %s; carrying on in a new sandbox", old, err1);
	}
	/* a new claim; the old one goes unless the user asked to keep it */
	if (old[0] && !kube_settings.persistent)
		kb_delete(k, old);
	pthread_mutex_lock(&kb.mu);
	kb.claim[0] = '\0';
	pthread_mutex_unlock(&kb.mu);
	kb_note(s, "");
	int r = kb_acquire(s, true, err, errlen);
	if (r == 0)
		*ep = &kb.ep;
	return r;
}

bool sandbox_kube_lost(int rc)
{
	/* a pod recreated under the same claim has a fresh agent that refuses our secret */
	return agent_client_gone(rc) || rc == -EACCES;
}

const char *sandbox_kube_name(void)
{
	return kb.claim;
}

void sandbox_kube_release(struct session *s)
{
	pthread_mutex_lock(&kb.mu);
	kb.stopping = true;
	pthread_cond_broadcast(&kb.cv);
	bool renewing = kb.renewing;
	char name[254];
	snprintf(name, sizeof(name), "%s", kb.claim);
	bool connected = kb.connected;
	pthread_mutex_unlock(&kb.mu);
	if (renewing)
		pthread_join(kb.renew, NULL);
	if (!name[0])
		return;
	char err[512];
	struct kube_api *k = kube_api_cached();
	if (!k)
		return;
	if (kube_settings.persistent) {
		/* kept: let a later --claim claim its agent again */
		if (connected && agent_client_release(&kb.ep, err, sizeof(err)) != 0)
			log_warn("SandboxClaim %s is kept, but its agent could not be released (%s); "
				 "reattaching will need a fresh pod", name, err);
		log_info("keeping SandboxClaim %s/%s (persistent): reattach with --claim %s",
			 kube_api_namespace(k), name, name);
		return;
	}
	kb_delete(k, name);
	kb_note(s, "");
}
