/*
 * sandbox_kube.c - the Kubernetes backend, run by the master for its workers: a session's
 * sandbox is a pod from an agent-sandbox warm pool, held through a SandboxClaim
 * (extensions.agents.x-k8s.io/v1beta1). See sandbox_kube.h; reached through
 * sandbox_kube_backend (master/sandbox.h).
 *
 * On a worker's REQ_SANDBOX "spawn" a thread of its own creates the claim (generateName
 * "kg-<first 8 hex digits of the session id>-", the name the API server gives back checked to
 * be of that shape) or, with --claim, adopts the operator's, watches it until it is Ready (GET,
 * then a watch from that resourceVersion, listing again after 410), reads status.sandbox and
 * answers ANS_SANDBOX with the relay's socket and the claim's name. A renewal thread moves the
 * claim's spec.lifecycle.shutdownTime forward every third of --claim-lease while the worker
 * lives, so a master that dies loses its pods within a lease. A second "spawn" means the
 * sandbox died or could not be used: --claim's claim once more, else a new claim and the old
 * one deleted. "release" (session end) and the worker's death delete the claim unless
 * --persistent keeps it.
 *
 * The relay: the worker's only way to its agent. The master listens on <runtime dir>/kube-
 * <pid>.sock (0600), accepts only the worker's own pid (SO_PEERCRED), reads one HTTP/1.1
 * request, and forwards it if it is one of the agent's endpoints (docs/agent-api.md) with the
 * headers the agent reads, to the current claim's pod: http://<pod IP>:<port> from inside the
 * cluster, or the API server's pods/<pod>:<port>/proxy with the server's own credential from
 * outside (the sandbox secret then travels in X-Kode-Gopher-Secret, since the API server keeps
 * Authorization). The answer streams back chunked (the agent's /execute stream is NDJSON), so a
 * pod that dies mid-answer shows as a truncated transfer. A request for anything else (a raw
 * API path) ends the worker before any answer. One thread per relayed request.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "ipc/chan.h"
#include "ipc/ipc.h"
#include "lib/http_client.h"
#include "master/kube_api.h"
#include "master/kubecfg.h"
#include "master/master.h"
#include "master/monitor.h"
#include "master/sandbox.h"
#include "master/sandbox_kube.h"
#include "policy/limits.h"

#define CLAIMS_API "/apis/extensions.agents.x-k8s.io/v1beta1"
#define SANDBOXES_API "/apis/agents.x-k8s.io/v1beta1"
#define POD_NAME_ANNOTATION "agents.x-k8s.io/pod-name"

/* One worker's Kubernetes state, shared by its spawn, renewal and relay threads. */
struct kb_peer {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int refs;                  /* the worker's, and one per thread */
	bool gone;                 /* the worker is gone: send nothing, delete what it held */
	nng_socket sock;           /* its channel, while !gone */
	pid_t pid;
	const struct serve_config *cfg;
	char prefix[16];           /* "kg-<8 hex>-": the names of this session's claims */
	char user[256];
	/* the claim */
	char claim[254];           /* "" none */
	bool from_flag;            /* it is the one --claim named */
	int flag_attempts;
	bool busy;                 /* a spawn is under way */
	bool ready;                /* the claim is Ready and the relay points at its pod */
	bool proxy;                /* through the API server's pods/proxy */
	char target[3000];         /* http://IP:PORT, or the proxy's API path */
	/* renewal */
	bool renewing;
	/* the relay */
	int lfd;                   /* listening socket, -1 none */
	int wake[2];               /* tells the accept thread to stop */
	char sock_path[108];       /* sizeof(sun_path) */
};

static void kb_put(struct kb_peer *p)
{
	pthread_mutex_lock(&p->mu);
	bool last = --p->refs == 0;
	pthread_mutex_unlock(&p->mu);
	if (!last)
		return;
	if (p->lfd >= 0)
		close(p->lfd);
	if (p->wake[0] >= 0)
		close(p->wake[0]), close(p->wake[1]);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p);
}

/* Every thread of this file, counted so that the master does not exit (and tear OpenSSL down)
 * under one that is still in a request: sandbox_kube_shutdown waits for them. */
static pthread_mutex_t kb_thr_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t kb_thr_cv = PTHREAD_COND_INITIALIZER;
static int kb_threads;

struct kb_start {
	void *(*fn)(void *);
	void *arg;
};

static void *kb_trampoline(void *arg)
{
	struct kb_start st = *(struct kb_start *)arg;
	free(arg);
	st.fn(st.arg);
	pthread_mutex_lock(&kb_thr_mu);
	kb_threads--;
	pthread_cond_broadcast(&kb_thr_cv);
	pthread_mutex_unlock(&kb_thr_mu);
	return NULL;
}

/* kb_spawn - start fn(arg) detached and counted */
static int kb_spawn(void *(*fn)(void *), void *arg)
{
	struct kb_start *st = malloc(sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->fn = fn;
	st->arg = arg;
	pthread_t t;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_mutex_lock(&kb_thr_mu);
	kb_threads++;
	pthread_mutex_unlock(&kb_thr_mu);
	int r = pthread_create(&t, &a, kb_trampoline, st);
	pthread_attr_destroy(&a);
	if (r != 0) {
		free(st);
		pthread_mutex_lock(&kb_thr_mu);
		kb_threads--;
		pthread_mutex_unlock(&kb_thr_mu);
		return -r;
	}
	return 0;
}

/* kb_thread - start fn(arg) for peer p, holding a reference to p for it */
static int kb_thread(struct kb_peer *p, void *(*fn)(void *), void *arg)
{
	pthread_mutex_lock(&p->mu);
	p->refs++;
	pthread_mutex_unlock(&p->mu);
	int r = kb_spawn(fn, arg);
	if (r != 0)
		kb_put(p);
	return r;
}

/* kb_peer_of - w's state, made on first use */
static struct kb_peer *kb_peer_of(struct worker *w)
{
	if (w->kube)
		return w->kube;
	struct kb_peer *p = calloc(1, sizeof(*p));
	if (!p)
		abort();
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->refs = 1;
	p->sock = w->sock;
	p->pid = w->pid;
	p->cfg = w->cfg;
	p->lfd = -1;
	p->wake[0] = p->wake[1] = -1;
	snprintf(p->prefix, sizeof(p->prefix), "kg-%.8s-", w->session);
	for (char *c = p->prefix; *c; c++)
		if (*c >= 'A' && *c <= 'Z')
			*c = (char)(*c - 'A' + 'a');
	w->kube = p;
	return p;
}

/* kb_end_worker - the worker broke the rules of its relay: one line saying why, then SIGKILL */
static void kb_end_worker(struct kb_peer *p, const char *why)
{
	pthread_mutex_lock(&p->mu);
	if (!p->gone && p->pid > 0) {
		log_error("worker pid %d (claims %s…) %s; ending it", (int)p->pid, p->prefix, why);
		kill(p->pid, SIGKILL);
	}
	pthread_mutex_unlock(&p->mu);
}

/* kb_answer - ANS_SANDBOX to the worker, unless it is gone */
static void kb_answer(struct kb_peer *p, uint32_t seq, bool ok, const char *err, const char *name)
{
	struct ipc_buf b;
	pthread_mutex_lock(&p->mu);
	if (!p->gone && ipc_pack_ans_sandbox(&b, seq, ok, err, ok ? p->sock_path : "",
					      name ? name : "", "") == 0)
		chan_send_flags(p->sock, &b, NNG_FLAG_NONBLOCK);
	pthread_mutex_unlock(&p->mu);
}

static void kb_claim_path(const char *name, char *out, size_t cap)
{
	snprintf(out, cap, CLAIMS_API "/namespaces/%s/sandboxclaims%s%s", kubecfg_namespace(),
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

/* kb_lifecycle - the claim's lifecycle: a lease, or none for a persistent sandbox */
static json_t *kb_lifecycle(const struct serve_config *cfg)
{
	if (cfg->persistent)
		return json_null();
	char t[40];
	kube_time_rfc3339(cfg->claim_lease_s, t, sizeof(t));
	return json_pack("{s:s, s:s}", "shutdownTime", t, "shutdownPolicy", "Delete");
}

/* kb_name_ok - is name one the API server may have generated from this session's prefix? */
static bool kb_name_ok(const struct kb_peer *p, const char *name)
{
	size_t pl = strlen(p->prefix), n = strlen(name);
	return n > pl && n <= 253 && strncmp(name, p->prefix, pl) == 0 &&
	       strspn(name + pl, "abcdefghijklmnopqrstuvwxyz0123456789") == n - pl;
}

/* kb_create - a new claim on the warm pool, named by the API server from the session's prefix */
static int kb_create(struct kb_peer *p, char *name, size_t cap, char *err, size_t errlen)
{
	const struct serve_config *cfg = p->cfg;
	char path[600], sess[64], user[64], sid8[9];
	kb_claim_path(NULL, path, sizeof(path));
	/* a prefix: whoever may list claims must not learn the session's bearer secret */
	snprintf(sid8, sizeof(sid8), "%.8s", p->prefix + 3);
	kb_label(sid8, sess, sizeof(sess));
	kb_label(p->user, user, sizeof(user));
	json_t *spec = json_pack("{s:{s:s}}", "warmPoolRef", "name", cfg->warm_pool);
	json_t *life = kb_lifecycle(cfg);
	if (!json_is_null(life))
		json_object_set(spec, "lifecycle", life);
	json_decref(life);
	json_t *body = json_pack(
		"{s:s, s:s, s:{s:s, s:{s:s, s:s, s:s}, s:{s:s}}, s:o}", "apiVersion",
		"extensions.agents.x-k8s.io/v1beta1", "kind", "SandboxClaim", "metadata",
		"generateName", p->prefix, "labels", "app.kubernetes.io/managed-by", "kode-gopher",
		"kode-gopher.dev/session", sess, "kode-gopher.dev/user", user, "annotations",
		"kode-gopher.dev/user", p->user, "spec", spec);
	json_t *out = NULL;
	int r = kube_api_call("POST", path, NULL, body, KB_CALL_MS, &out, err, errlen);
	json_decref(body);
	const char *got = json_string_value(json_object_get(json_object_get(out, "metadata"), "name"));
	if (r == 0 && (!got || !kb_name_ok(p, got))) {
		snprintf(err, errlen, "the API server created a SandboxClaim but did not give it a "
			 "name of the form %s…", p->prefix);
		r = -EIO;
	}
	if (r == 0) {
		snprintf(name, cap, "%s", got);
		log_info("created SandboxClaim %s/%s on warm pool %s", kubecfg_namespace(), got,
			 cfg->warm_pool);
	} else if (r == -ENOENT) {
		snprintf(err, errlen, "the cluster has no SandboxClaim API (extensions.agents.x-k8s.io/"
			 "v1beta1) in namespace %s: is agent-sandbox with its extensions installed?",
			 kubecfg_namespace());
	}
	json_decref(out);
	return r;
}

/* kb_patch_lifecycle - take the lease (or, persistent, clear it) */
static int kb_patch_lifecycle(const struct serve_config *cfg, const char *name, char *err,
			      size_t errlen)
{
	char path[600];
	kb_claim_path(name, path, sizeof(path));
	json_t *body = json_pack("{s:{s:o}}", "spec", "lifecycle", kb_lifecycle(cfg));
	int r = kube_api_call("PATCH", path, "application/merge-patch+json", body, KB_CALL_MS, NULL,
			      err, errlen);
	json_decref(body);
	return r;
}

struct kb_watch {
	json_t *last;    /* the latest claim seen (owned) */
};

static int kb_on_event(void *ctx, const char *type, json_t *obj)
{
	struct kb_watch *w = ctx;
	json_decref(w->last);
	w->last = json_incref(obj);
	if (strcmp(type, "DELETED") == 0)
		return 2;
	char why[8];
	return sandbox_kube_claim_ready(obj, why, sizeof(why)) ? 1 : 0;
}

/* kb_wait_ready - watch the claim until it is Ready; *claim = its Ready state (owned) */
static int kb_wait_ready(const struct serve_config *cfg, const char *name, json_t **claim,
			 char *err, size_t errlen)
{
	char path[700], list[900], rv[64] = "", why[600];
	const char *ns = kubecfg_namespace();
	kb_claim_path(name, path, sizeof(path));
	snprintf(list, sizeof(list), CLAIMS_API "/namespaces/%s/sandboxclaims?fieldSelector="
		 "metadata.name%%3D%s", ns, name);
	time_t deadline = time(NULL) + cfg->claim_ready_timeout_s;
	struct kb_watch w = { 0 };
	int r;
	for (;;) {
		if (!rv[0]) {
			/* (re)start from the claim as it is now */
			json_decref(w.last);
			w.last = NULL;
			r = kube_api_call("GET", path, NULL, NULL, KB_CALL_MS, &w.last, err, errlen);
			if (r == -ENOENT) {
				snprintf(err, errlen, "there is no SandboxClaim named %s in namespace %s",
					 name, ns);
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
		r = kube_api_watch(list, rv, (int)left, kb_on_event, &w, rv, sizeof(rv), err, errlen);
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
			 "sandboxwarmpool,sandbox -n %s)", ns, name, cfg->claim_ready_timeout_s, why,
			 cfg->warm_pool, ns);
	}
	if (r == 1) {
		*claim = w.last;
		return 0;
	}
	json_decref(w.last);
	return r;
}

/* kb_pod_name - the sandbox's pod: its pod-name annotation, else the sandbox's own name */
static int kb_pod_name(const char *sandbox, char *out, size_t cap, char *err, size_t errlen)
{
	char path[700];
	snprintf(path, sizeof(path), SANDBOXES_API "/namespaces/%s/sandboxes/%s",
		 kubecfg_namespace(), sandbox);
	json_t *sb = NULL;
	int r = kube_api_call("GET", path, NULL, NULL, KB_CALL_MS, &sb, err, errlen);
	if (r == 0) {
		const char *p = json_string_value(json_object_get(
			json_object_get(json_object_get(sb, "metadata"), "annotations"),
			POD_NAME_ANNOTATION));
		snprintf(out, cap, "%s", p && *p ? p : sandbox);
	}
	json_decref(sb);
	return r;
}

/* kb_dns_name - a pod or sandbox name that may go into a URL path as it is */
static bool kb_dns_name(const char *s)
{
	size_t n = strlen(s);
	return n > 0 && n <= 253 && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-.") == n &&
	       s[0] != '.' && s[0] != '-';
}

/* kb_target - where the relay sends a Ready claim's agent traffic */
static int kb_target(struct kb_peer *p, const char *name, json_t *claim, char *err, size_t errlen)
{
	const struct serve_config *cfg = p->cfg;
	json_t *sb = json_object_get(json_object_get(claim, "status"), "sandbox");
	const char *sandbox = json_string_value(json_object_get(sb, "name"));
	const char *ip = json_string_value(json_array_get(json_object_get(sb, "podIPs"), 0));
	bool proxy = strcmp(cfg->agent_access, "proxy") == 0 ||
		     (strcmp(cfg->agent_access, "pod-ip") != 0 && !kubecfg_in_cluster());
	char pod[254] = "", target[sizeof(p->target)];
	if (!sandbox || !kb_dns_name(sandbox)) {
		snprintf(err, errlen, "SandboxClaim %s is Ready but names no usable sandbox", name);
		return -EPROTO;
	}
	if (proxy) {
		int r = kb_pod_name(sandbox, pod, sizeof(pod), err, errlen);
		if (r != 0)
			return r;
		if (!kb_dns_name(pod)) {
			snprintf(err, errlen, "the sandbox %s names a pod kode-gopher will not address",
				 sandbox);
			return -EPROTO;
		}
		snprintf(target, sizeof(target), "/api/v1/namespaces/%s/pods/%s:%d/proxy",
			 kubecfg_namespace(), pod, cfg->agent_port);
	} else if (ip && *ip && strlen(ip) < 64 && strspn(ip, "0123456789abcdefABCDEF.:") == strlen(ip)) {
		snprintf(target, sizeof(target), strchr(ip, ':') ? "http://[%s]:%d" : "http://%s:%d",
			 ip, cfg->agent_port);
	} else {
		snprintf(err, errlen, "SandboxClaim %s is Ready but its sandbox %s has no pod IP "
			 "(status.sandbox.podIPs); try --agent-access proxy", name, sandbox);
		return -EHOSTUNREACH;
	}
	pthread_mutex_lock(&p->mu);
	snprintf(p->target, sizeof(p->target), "%s", target);
	p->proxy = proxy;
	p->ready = true;
	pthread_mutex_unlock(&p->mu);
	log_info("SandboxClaim %s: the agent of sandbox %s is reached at %s", name, sandbox,
		 proxy ? "the API server's pod proxy" : target);
	return 0;
}

/* kb_delete - delete a claim (its sandbox and pod go with it); why: NULL for a release */
static void kb_delete(const char *name, const char *why)
{
	char path[600], err[512];
	kb_claim_path(name, path, sizeof(path));
	json_t *opts = json_pack("{s:s, s:s, s:s}", "apiVersion", "v1", "kind", "DeleteOptions",
				 "propagationPolicy", "Background");
	int r = kube_api_call("DELETE", path, NULL, opts, KB_DELETE_MS, NULL, err, sizeof(err));
	json_decref(opts);
	if (r == -ENOENT)
		log_debug("SandboxClaim %s/%s was already gone", kubecfg_namespace(), name);
	else if (r == 0)
		log_info("deleted SandboxClaim %s/%s%s%s", kubecfg_namespace(), name, why ? ", " : "",
			 why ? why : "");
	else
		log_warn("could not delete SandboxClaim %s/%s (its lease ends it): %s",
			 kubecfg_namespace(), name, err);
}

struct kb_orphan {
	char name[254];
	const char *why;
};

static void *kb_delete_main(void *arg)
{
	struct kb_orphan *o = arg;
	kb_delete(o->name, o->why);
	free(o);
	return NULL;
}

/* kb_delete_later - delete a claim on a thread of its own (the caller may hold pool.mu) */
static void kb_delete_later(const char *name, const char *why)
{
	struct kb_orphan *o = calloc(1, sizeof(*o));
	if (!o)
		abort();
	snprintf(o->name, sizeof(o->name), "%s", name);
	o->why = why;
	if (kb_spawn(kb_delete_main, o) != 0) {
		log_warn("cannot delete SandboxClaim %s; its lease ends it", o->name);
		free(o);
	}
}

/* sandbox_kube_shutdown - see sandbox_kube.h: deletions finish (their own timeout is 15 s);
 * what is still waiting on the API server after that is cut short */
void sandbox_kube_shutdown(void)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += KB_DELETE_MS / 1000 + 1;
	pthread_mutex_lock(&kb_thr_mu);
	for (int stopped = 0; kb_threads > 0;) {
		if (pthread_cond_timedwait(&kb_thr_cv, &kb_thr_mu, &until) != ETIMEDOUT)
			continue;
		if (stopped)
			break;
		/* a watch of a claim nobody waits for any more, say: end its transfer */
		kube_api_stop();
		stopped = 1;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 2;
	}
	pthread_mutex_unlock(&kb_thr_mu);
}

/* kb_renew_main - move the lease forward every third of it while the worker lives */
static void *kb_renew_main(void *arg)
{
	struct kb_peer *p = arg;
	const struct serve_config *cfg = p->cfg;
	int every = cfg->claim_lease_s / 3 > 0 ? cfg->claim_lease_s / 3 : 1;
	pthread_mutex_lock(&p->mu);
	while (!p->gone) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += every;
		while (!p->gone && pthread_cond_timedwait(&p->cv, &p->mu, &until) != ETIMEDOUT)
			;
		if (p->gone || !p->claim[0] || p->busy)
			continue;
		char name[254], err[512];
		snprintf(name, sizeof(name), "%s", p->claim);
		pthread_mutex_unlock(&p->mu);
		int r = kb_patch_lifecycle(cfg, name, err, sizeof(err));
		if (r == 0)
			log_debug("renewed the lease of SandboxClaim %s for %d s", name, cfg->claim_lease_s);
		else
			log_warn("could not renew the lease of SandboxClaim %s: %s", name, err);
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	kb_put(p);
	return NULL;
}

/* kb_set_claim - the claim the worker holds now ("" none) */
static void kb_set_claim(struct kb_peer *p, const char *name, bool from_flag)
{
	pthread_mutex_lock(&p->mu);
	snprintf(p->claim, sizeof(p->claim), "%s", name);
	p->from_flag = from_flag;
	p->ready = false;
	pthread_mutex_unlock(&p->mu);
}

/* kb_acquire - a claim (named by --claim on the first tries, else new), Ready, its pod the
 * relay's target */
static int kb_acquire(struct kb_peer *p, bool fresh, char *err, size_t errlen)
{
	const struct serve_config *cfg = p->cfg;
	char name[254];
	int r;
	if (!fresh && cfg->claim && p->flag_attempts < 2) {
		/* --claim NAME: reattach, and after a death try it once more */
		p->flag_attempts++;
		snprintf(name, sizeof(name), "%s", cfg->claim);
		kb_set_claim(p, name, true);
		r = kb_patch_lifecycle(cfg, name, err, errlen);
		if (r == -ENOENT)
			snprintf(err, errlen, "there is no SandboxClaim named %s in namespace %s "
				 "(kubectl get sandboxclaims -n %s)", name, kubecfg_namespace(),
				 kubecfg_namespace());
		if (r == 0)
			log_info("reattaching to SandboxClaim %s/%s%s", kubecfg_namespace(), name,
				 cfg->persistent ? " (persistent: no lease)" : "");
	} else {
		r = kb_create(p, name, sizeof(name), err, errlen);
		if (r == 0)
			kb_set_claim(p, name, false);
	}
	if (r != 0)
		return r;
	json_t *claim = NULL;
	r = kb_wait_ready(cfg, name, &claim, err, errlen);
	if (r == 0)
		r = kb_target(p, name, claim, err, errlen);
	json_decref(claim);
	if (r == 0 && !cfg->persistent) {
		pthread_mutex_lock(&p->mu);
		bool start = !p->renewing && !p->gone;
		p->renewing |= start;
		pthread_mutex_unlock(&p->mu);
		if (start && kb_thread(p, kb_renew_main, p) != 0)
			log_warn("cannot start renewing SandboxClaim %s; it ends with its lease", name);
	}
	return r;
}

/* kb_replace - the claim's sandbox died or could not be used: --claim's claim once more, else
 * a new claim, the old one deleted */
static int kb_replace(struct kb_peer *p, char *err, size_t errlen)
{
	char old[254], err1[512] = "";
	pthread_mutex_lock(&p->mu);
	snprintf(old, sizeof(old), "%s", p->claim);
	bool flag = p->from_flag;
	pthread_mutex_unlock(&p->mu);
	if (flag && p->flag_attempts < 2) {
		log_warn("the sandbox of SandboxClaim %s died or could not be used; trying that claim "
			 "again", old);
		if (kb_acquire(p, false, err1, sizeof(err1)) == 0)
			return 0;
		log_warn("SandboxClaim %s again: %s; carrying on in a new sandbox", old, err1);
	}
	/* a new claim; the old one goes unless the operator keeps sandboxes */
	if (old[0] && !p->cfg->persistent)
		kb_delete(old, NULL);
	kb_set_claim(p, "", false);
	return kb_acquire(p, true, err, errlen);
}

struct kb_job {
	struct kb_peer *p;
	uint32_t seq;
};

/* kb_spawn_main - one REQ_SANDBOX "spawn", on a thread of its own */
static void *kb_spawn_main(void *arg)
{
	struct kb_job *j = arg;
	struct kb_peer *p = j->p;
	char err[1024] = "";
	kube_api_cancel_on(&p->gone); /* a worker that dies stops its claim being waited for */
	pthread_mutex_lock(&p->mu);
	bool had = p->claim[0] != '\0';
	pthread_mutex_unlock(&p->mu);
	int r = had ? kb_replace(p, err, sizeof(err)) : kb_acquire(p, false, err, sizeof(err));
	pthread_mutex_lock(&p->mu);
	p->busy = false;
	bool gone = p->gone;
	char name[254];
	snprintf(name, sizeof(name), "%s", p->claim);
	pthread_mutex_unlock(&p->mu);
	kube_api_cancel_on(NULL);
	if (gone && name[0] && !p->cfg->persistent) {
		/* the worker died while its claim was made: nobody will release it */
		kb_delete(name, "left behind by a worker that died");
	} else {
		kb_answer(p, j->seq, r == 0, r == 0 ? "" : err, name);
	}
	free(j);
	kb_put(p);
	return NULL;
}

/* ---- the relay ---- */

/* The agent's endpoints (docs/agent-api.md), the only paths the relay forwards. */
static const struct {
	const char *method, *path;
} kb_endpoints[] = {
	{ "GET", "/health" }, { "POST", "/claim" }, { "POST", "/release" },
	{ "POST", "/execute" }, { "POST", "/token" }, { "POST", "/doc" }, { "POST", "/files" },
};

struct kb_conn {
	struct kb_peer *p;
	int fd;
	bool head_sent, broken;
	long status;
	char ctype[128];
};

/* kb_write_all - the whole buffer to the worker; false when it went away */
static bool kb_write_all(struct kb_conn *c, const void *buf, size_t len)
{
	const char *s = buf;
	while (len && !c->broken) {
		ssize_t n = send(c->fd, s, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			c->broken = true;
			break;
		}
		s += n, len -= (size_t)n;
	}
	return !c->broken;
}

/* kb_reply - a whole answer of the relay's own */
static void kb_reply(struct kb_conn *c, int status, const char *reason, const char *message)
{
	json_t *j = json_pack("{s:s, s:s, s:s, s:s}", "kind", "Status", "status", "Failure",
			      "message", message, "error", message);
	char *body = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	char head[256];
	int n = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n", status, reason,
			 body ? strlen(body) : 0);
	kb_write_all(c, head, (size_t)n);
	if (body)
		kb_write_all(c, body, strlen(body));
	free(body);
}

/* kb_head - the upstream answer's status line and type, once, before its first byte (the
 * type as lib/http_client.c gives it: a plain media type, so no header can be smuggled in) */
static bool kb_head(struct kb_conn *c, const struct http_response *r)
{
	if (c->head_sent)
		return true;
	c->head_sent = true;
	c->status = r->status;
	snprintf(c->ctype, sizeof(c->ctype), "%s", r->content_type);
	char head[300];
	int n = snprintf(head, sizeof(head), "HTTP/1.1 %ld Relayed\r\n%s%s%sTransfer-Encoding: "
			 "chunked\r\nConnection: close\r\n\r\n", c->status,
			 c->ctype[0] ? "Content-Type: " : "", c->ctype, c->ctype[0] ? "\r\n" : "");
	return kb_write_all(c, head, (size_t)n);
}

/* kb_up_data - a piece of the agent's answer, sent on to the worker as a chunk */
static int kb_up_data(void *ud, const struct http_response *r, const char *b, size_t len)
{
	struct kb_conn *c = ud;
	char chunk[32];
	int cl = snprintf(chunk, sizeof(chunk), "%zx\r\n", len);
	if (!len)
		return 0;
	if (!kb_head(c, r) || !kb_write_all(c, chunk, (size_t)cl) || !kb_write_all(c, b, len) ||
	    !kb_write_all(c, "\r\n", 2))
		return -EPIPE;
	return 0;
}

/* kb_up_abort - the worker hung up: stop the upstream request */
static bool kb_up_abort(void *ud)
{
	struct kb_conn *c = ud;
	struct pollfd pf = { .fd = c->fd, .events = POLLRDHUP };
	return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* kb_read_request - the request's head (and what came with it) into buf; its length, or -1 */
static ssize_t kb_read_request(int fd, char *buf, size_t cap, size_t *got)
{
	*got = 0;
	while (*got < cap) {
		ssize_t n = recv(fd, buf + *got, cap - *got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		*got += (size_t)n;
		char *end = memmem(buf, *got, "\r\n\r\n", 4);
		if (end)
			return (ssize_t)(end - buf) + 4;
	}
	return -1;
}

/* kb_header - the value of header name in the head (NUL-terminated lines), or NULL */
static const char *kb_header(char *const *lines, int n, const char *name)
{
	size_t nl = strlen(name);
	for (int i = 0; i < n; i++)
		if (strncasecmp(lines[i], name, nl) == 0 && lines[i][nl] == ':') {
			const char *v = lines[i] + nl + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			return v;
		}
	return NULL;
}

/* kb_relay_one - one request of the worker, forwarded to its own claim's agent */
static void kb_relay_one(struct kb_conn *c)
{
	struct kb_peer *p = c->p;
	char *head = malloc(KB_RELAY_MAX_HEAD_BYTES + 1), *body = NULL;
	if (!head)
		return;
	size_t got;
	ssize_t hl = kb_read_request(c->fd, head, KB_RELAY_MAX_HEAD_BYTES, &got);
	if (hl < 0) {
		kb_reply(c, 400, "Bad Request", "the relay takes one HTTP/1.1 request of at most 16 KiB of headers");
		goto out;
	}
	head[hl - 2] = '\0';
	/* the lines of the head */
	char *lines[64];
	int nlines = 0;
	for (char *s = head, *e; *s && nlines < 64; s = e + 2) {
		e = strstr(s, "\r\n");
		if (!e)
			break;
		*e = '\0';
		lines[nlines++] = s;
	}
	char method[8] = "", path[64] = "", version[16] = "";
	bool known = false;
	if (nlines == 0 || sscanf(lines[0], "%7s %63s %15s", method, path, version) != 3 ||
	    strncmp(version, "HTTP/1.", 7) != 0) {
		kb_reply(c, 400, "Bad Request", "the relay takes one HTTP/1.1 request");
		goto out;
	}
	for (size_t i = 0; i < sizeof(kb_endpoints) / sizeof(kb_endpoints[0]); i++)
		if (strcmp(method, kb_endpoints[i].method) == 0 && strcmp(path, kb_endpoints[i].path) == 0)
			known = true;
	if (!known) {
		char why[200];
		snprintf(why, sizeof(why), "asked its agent relay for %.7s %.60s, which is not one of "
			 "the agent's endpoints (phase SESSION)", method, lines[0] + strlen(method) + 1);
		for (char *q = why; *q; q++)
			if ((unsigned char)*q < 0x20 || *q == 0x7f)
				*q = '?';
		/* ended before any answer: what it asked gets it nothing, not even a refusal */
		kb_end_worker(p, why);
		goto out;
	}
	const char *auth = kb_header(lines + 1, nlines - 1, "Authorization");
	const char *ctype = kb_header(lines + 1, nlines - 1, "Content-Type");
	const char *clen = kb_header(lines + 1, nlines - 1, "Content-Length");
	const char *te = kb_header(lines + 1, nlines - 1, "Transfer-Encoding");
	const char *expect = kb_header(lines + 1, nlines - 1, "Expect");
	char secret[65] = "";
	if (auth && (strncmp(auth, "Bearer ", 7) != 0 || strlen(auth + 7) != 64 ||
		     strspn(auth + 7, "0123456789abcdef") != 64)) {
		kb_reply(c, 400, "Bad Request", "the relay passes on only a sandbox secret (64 hex digits)");
		goto out;
	}
	if (auth)
		memcpy(secret, auth + 7, 65);
	char *end = NULL;
	unsigned long long blen = clen ? strtoull(clen, &end, 10) : 0;
	if (te || (clen && (*end || !*clen)) || blen > KB_RELAY_MAX_BODY_BYTES ||
	    (ctype && strcmp(ctype, "application/json") != 0)) {
		kb_reply(c, 400, "Bad Request", "the relay takes a JSON body with a Content-Length of at most 8 MiB");
		goto out;
	}
	if (expect && strcasecmp(expect, "100-continue") == 0 &&
	    !kb_write_all(c, "HTTP/1.1 100 Continue\r\n\r\n", 25))
		goto out;
	body = malloc(blen + 1);
	if (!body)
		goto out;
	size_t have = got - (size_t)hl < blen ? got - (size_t)hl : blen;
	memcpy(body, head + hl, have);
	while (have < blen) {
		ssize_t n = recv(c->fd, body + have, blen - have, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			goto out;
		have += (size_t)n;
	}

	/* where to: the claim's pod as it is now */
	char target[sizeof(p->target)], url[4096], hbuf[128] = "", err[512] = "";
	pthread_mutex_lock(&p->mu);
	bool ready = p->ready && !p->gone, proxy = p->proxy;
	snprintf(target, sizeof(target), "%s", p->target);
	pthread_mutex_unlock(&p->mu);
	if (!ready) {
		kb_reply(c, 503, "Service Unavailable", "this session holds no Ready SandboxClaim");
		goto out;
	}
	/* the relay reads no 100-continue; the worker's secret goes on as the agent's bearer, or
	 * through the API server's proxy in a header of its own (the proxy's Authorization is the
	 * master's credential) */
	if (secret[0])
		snprintf(hbuf, sizeof(hbuf), proxy ? "X-Kode-Gopher-Secret: %s" : "Authorization: Bearer %s",
			 secret);
	OPENSSL_cleanse(secret, sizeof(secret));
	const char *hdr[4] = { "Expect:", NULL, NULL, NULL };
	int nh = 1;
	if (ctype)
		hdr[nh++] = "Content-Type: application/json";
	if (hbuf[0])
		hdr[nh++] = hbuf;
	bool post = strcmp(method, "POST") == 0;
	struct http_request q = {
		.url = url, .method = method, .body = post ? body : NULL, .body_len = post ? blen : 0,
		.headers = hdr, .no_proxy = true, .protocols = proxy ? "https" : "http",
		.connect_timeout_ms = KB_RELAY_CONNECT_MS, .stall_s = KB_RELAY_STALL_S,
		.keepalive_idle_s = KB_RELAY_KEEPALIVE_S, .keepalive_intvl_s = KB_RELAY_KEEPALIVE_S,
		.on_data = kb_up_data, .abort = kb_up_abort, .ctx = c,
	};
	struct kubecfg_cred kc;
	int r = 0, e = -EIO;
	char upath[sizeof(target) + 64];
	snprintf(upath, sizeof(upath), "%s%s", target, path);
	if (proxy)
		r = kubecfg_request(&q, &kc, false, url, sizeof(url), upath, err, sizeof(err));
	else
		snprintf(url, sizeof(url), "%s", upath);
	struct http_response a = { 0 };
	if (r == 0) {
		e = http_perform(&q, &a);
		if (proxy)
			kubecfg_cred_free(&kc);
	}
	OPENSSL_cleanse(hbuf, sizeof(hbuf));
	if (r == 0 && e == 0) {
		if (kb_head(c, &a))
			kb_write_all(c, "0\r\n\r\n", 5);
	} else if (!c->head_sent && !c->broken) {
		/* nothing of an answer yet: the pod is not there (as the proxy's own 502 says) */
		char msg[800];
		snprintf(msg, sizeof(msg), "the relay could not reach the sandbox's agent: %s",
			 r ? err : a.detail[0] ? a.detail : a.err);
		kb_reply(c, 502, "Bad Gateway", msg);
	}
	/* else: a truncated chunked answer tells the worker the pod went away mid-answer */
	http_response_free(&a);
out:
	if (body) {
		OPENSSL_cleanse(body, blen < 256 ? blen : 256); /* a /claim body carries the secret */
		free(body);
	}
	OPENSSL_cleanse(head, KB_RELAY_MAX_HEAD_BYTES);
	free(head);
}

static void *kb_conn_main(void *arg)
{
	struct kb_conn *c = arg;
	struct timeval tv = { .tv_sec = KB_RELAY_READ_TIMEOUT_S };
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	kb_relay_one(c);
	close(c->fd);
	struct kb_peer *p = c->p;
	free(c);
	kb_put(p);
	return NULL;
}

/* kb_accept_main - the relay's listener: connections of the worker's own pid only */
static void *kb_accept_main(void *arg)
{
	struct kb_peer *p = arg;
	for (;;) {
		struct pollfd pf[2] = { { .fd = p->lfd, .events = POLLIN }, { .fd = p->wake[0], .events = POLLIN } };
		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			break;
		if (pf[1].revents)
			break;
		if (!(pf[0].revents & POLLIN))
			continue;
		int fd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		struct ucred cr;
		socklen_t cl = sizeof(cr);
		pthread_mutex_lock(&p->mu);
		bool mine = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 && cr.pid == p->pid &&
			    !p->gone;
		pthread_mutex_unlock(&p->mu);
		if (!mine) {
			log_warn("the agent relay of worker pid %d refused a connection from pid %d",
				 (int)p->pid, (int)cr.pid);
			close(fd);
			continue;
		}
		struct kb_conn *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->p = p;
		c->fd = fd;
		if (kb_thread(p, kb_conn_main, c) != 0) {
			close(fd);
			free(c);
		}
	}
	kb_put(p);
	return NULL;
}

/* kb_relay_start - listen for the worker, next to its channel in the runtime directory */
static int kb_relay_start(struct kb_peer *p, const char *ipc_path, uid_t uid, char *err,
			  size_t errlen)
{
	if (p->lfd >= 0)
		return 0;
	char dir[512];
	snprintf(dir, sizeof(dir), "%s", ipc_path);
	char *slash = strrchr(dir, '/');
	if (!slash) {
		snprintf(err, errlen, "the worker's runtime directory is unknown");
		return -EINVAL;
	}
	*slash = '\0';
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if ((size_t)snprintf(p->sock_path, sizeof(p->sock_path), "%s/kube-%d.sock", dir, (int)p->pid) >=
	    sizeof(a.sun_path)) {
		snprintf(err, errlen, "the runtime directory's path is too long for a socket");
		return -ENAMETOOLONG;
	}
	memcpy(a.sun_path, p->sock_path, sizeof(a.sun_path));
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	unlink(p->sock_path);
	mode_t old = umask(077);
	int r = fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 16) != 0 ? -errno : 0;
	umask(old);
	if (r == 0 && pipe2(p->wake, O_CLOEXEC) != 0)
		r = -errno;
	if (r != 0) {
		snprintf(err, errlen, "cannot open the agent relay %s: %s", p->sock_path, strerror(-r));
		if (fd >= 0)
			close(fd);
		return r;
	}
	chmod(p->sock_path, 0600);
	/* a worker of its own identity (master/identity.c) reaches it as its owner; no one else */
	if (uid && chown(p->sock_path, uid, uid) != 0) {
		r = -errno;
		snprintf(err, errlen, "cannot give the worker its agent relay %s: %s", p->sock_path,
			 strerror(-r));
		close(fd);
		unlink(p->sock_path);
		return r;
	}
	p->lfd = fd;
	if (kb_thread(p, kb_accept_main, p) != 0) {
		snprintf(err, errlen, "cannot start the agent relay");
		return -EAGAIN;
	}
	return 0;
}

/* ---- the monitor's entry points ---- */

/* sandbox_kube_answer - see sandbox_kube.h */
void sandbox_kube_answer(struct worker *w, uint32_t seq, bool spawn, const char *user)
{
	struct kb_peer *p = kb_peer_of(w);
	char err[600] = "";
	if (!spawn) {
		sandbox_kube_released(w);
		kb_answer(p, seq, true, "", "");
		return;
	}
	pthread_mutex_lock(&p->mu);
	bool busy = p->busy;
	p->busy = true;
	snprintf(p->user, sizeof(p->user), "%s", user && *user ? user : "local");
	pthread_mutex_unlock(&p->mu);
	if (busy) {
		kb_answer(p, seq, false, "a sandbox is still being claimed for this session", "");
		return;
	}
	if (kb_relay_start(p, w->ipc_path, w->uid, err, sizeof(err)) != 0) {
		pthread_mutex_lock(&p->mu);
		p->busy = false;
		pthread_mutex_unlock(&p->mu);
		kb_answer(p, seq, false, err, "");
		return;
	}
	struct kb_job *j = calloc(1, sizeof(*j));
	if (!j)
		abort();
	j->p = p;
	j->seq = seq;
	if (kb_thread(p, kb_spawn_main, j) != 0) {
		free(j);
		pthread_mutex_lock(&p->mu);
		p->busy = false;
		pthread_mutex_unlock(&p->mu);
		kb_answer(p, seq, false, "the server cannot start a thread to claim a sandbox", "");
	}
}

/* sandbox_kube_released - see sandbox_kube.h */
void sandbox_kube_released(struct worker *w)
{
	struct kb_peer *p = w->kube;
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	char name[254];
	snprintf(name, sizeof(name), "%s", p->busy ? "" : p->claim);
	if (!p->busy) {
		p->claim[0] = '\0';
		p->ready = false;
	}
	pthread_mutex_unlock(&p->mu);
	if (!name[0])
		return;
	if (p->cfg->persistent)
		log_info("keeping SandboxClaim %s/%s (persistent): reattach with --claim %s",
			 kubecfg_namespace(), name, name);
	else
		kb_delete_later(name, NULL);
}

/* sandbox_kube_worker_gone - see sandbox_kube.h */
void sandbox_kube_worker_gone(struct worker *w)
{
	struct kb_peer *p = w->kube;
	if (!p)
		return;
	w->kube = NULL;
	pthread_mutex_lock(&p->mu);
	p->gone = true;
	p->ready = false;
	char name[254];
	snprintf(name, sizeof(name), "%s", p->busy ? "" : p->claim); /* busy: its thread deletes */
	p->claim[0] = '\0';
	pthread_cond_broadcast(&p->cv);
	if (p->wake[1] >= 0 && write(p->wake[1], "x", 1) < 0)
		log_debug("cannot wake the agent relay: %s", strerror(errno));
	if (p->sock_path[0])
		unlink(p->sock_path);
	pthread_mutex_unlock(&p->mu);
	if (name[0] && !p->cfg->persistent)
		kb_delete_later(name, "left behind by a worker that died");
	kb_put(p);
}

/* sandbox_kube_gone - the worker is gone (master/sandbox.h): deletions run on threads anyway */
static void sandbox_kube_gone(struct worker *w, bool wait)
{
	(void)wait;
	sandbox_kube_worker_gone(w);
}

const struct sandbox_backend sandbox_kube_backend = {
	.name = "kubernetes",
	.answer = sandbox_kube_answer,
	.released = sandbox_kube_released,
	.release = sandbox_kube_gone,
};

/* sandbox_kube_relay_test - see sandbox_kube.h */
int sandbox_kube_relay_test(struct worker *w, const char *base_url, char *sock, size_t cap)
{
	struct kb_peer *p = kb_peer_of(w);
	char err[300];
	int r = kb_relay_start(p, w->ipc_path, w->uid, err, sizeof(err));
	if (r != 0)
		return r;
	pthread_mutex_lock(&p->mu);
	snprintf(p->target, sizeof(p->target), "%s", base_url);
	p->proxy = false;
	p->ready = true;
	pthread_mutex_unlock(&p->mu);
	snprintf(sock, cap, "%s", p->sock_path);
	return 0;
}
