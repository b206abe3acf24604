/*
 * usertoken.c - `--credentials user`: each signed-in user's Google grant, kept here in the
 * master and nowhere else, and the access tokens minted from it for that user's sessions.
 *
 * A sign-in with the Cloud scopes of --scopes brings a refresh token (master/auth.c calls
 * utok_signed_in). A worker whose program asks the metadata emulator for a token sends
 * REQ_TOKEN; master/monitor.c has checked it (credentials mode, phase, scopes, rate) and asks
 * utok_request for the session's user, which the master assigned: the worker names no one. A
 * kept access token with enough life left is answered at once; otherwise one thread per user
 * refreshes at the provider's token endpoint (master/oidc.c) without any lock held, and every
 * request that waited for it is answered through the transport's deliver function. A refresh
 * refused with invalid_grant (the user revoked the app, the grant expired) drops the grant,
 * signs the user out of kode-gopher (auth_user_revoked: their MCP clients must sign in again)
 * and gives the program a sentence that says so.
 *
 * No refresh token leaves this file, and no token is logged. All of it is in memory (a restart
 * signs everyone out, docs/credentials.md), unless --token-store keeps the refresh tokens in
 * the operator's encrypted file (master/tokenstore.c: utok_store_dump and utok_store_load).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ipc/ipc.h"
#include "lib/secret.h"
#include "master/auth.h"
#include "master/tokenstore.h"
#include "master/usertoken.h"

struct ugrant {
	bool live;
	char user[AUTH_USER_MAX];
	char *refresh;            /* NULL: none (the provider gave none, or it was revoked) */
	char *access;
	time_t access_exp;
	char scope[1200];         /* granted, space-separated */
	unsigned long gen;        /* which sign-in: a refresh of an older one does not overwrite */
	bool refreshing, revoked;
	time_t last;
};

struct waiter {
	struct waiter *next;
	pid_t pid;
	char session[SESSION_ID_HEX + 1];
	uint32_t seq;
	char user[AUTH_USER_MAX];
	char scopes[IPC_TOKEN_SCOPES_MAX + 1];
};

static struct {
	bool on;
	utok_deliver_fn deliver;
	void (*revoked)(const char *user);
	pthread_mutex_t mu;
	pthread_cond_t idle;      /* refreshing reached 0 */
	struct ugrant g[UTOK_MAX_USERS];
	struct waiter *waiting;
	int nwaiting, refreshing;
	unsigned long gen;
} U = { .mu = PTHREAD_MUTEX_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER };

static const char SIGN_IN_AGAIN[] =
	"your Google sign-in on this kode-gopher server has expired or was revoked, so this program "
	"gets no Google credentials (--credentials user). Sign in to the server again: your MCP client "
	"asks you to on its next request (in Claude Code: /mcp, then kode-gopher, Authenticate); then "
	"run this again";

void utok_answer_clear(struct utok_answer *a)
{
	secret_free(a->token);
	memset(a, 0, sizeof(*a));
}

void utok_init(utok_deliver_fn deliver)
{
	U.on = true;
	U.deliver = deliver;
}

void utok_on_revoked(void (*fn)(const char *user))
{
	pthread_mutex_lock(&U.mu);
	U.revoked = fn;
	pthread_mutex_unlock(&U.mu);
}

bool utok_enabled(void)
{
	return U.on;
}

/* find - user's grant (under mu) */
static struct ugrant *find(const char *user)
{
	for (int i = 0; i < UTOK_MAX_USERS; i++)
		if (U.g[i].live && strcmp(U.g[i].user, user) == 0)
			return &U.g[i];
	return NULL;
}

/* grant_drop - forget a grant's tokens (under mu) */
static void grant_drop(struct ugrant *e)
{
	secret_free(e->refresh);
	secret_free(e->access);
	e->refresh = e->access = NULL;
	e->access_exp = 0;
}

void utok_signed_in(const char *user, struct oidc_grant *g)
{
	if (!U.on) {
		oidc_grant_clear(g);
		return;
	}
	pthread_mutex_lock(&U.mu);
	time_t now = time(NULL);
	struct ugrant *e = find(user);
	if (!e) {
		struct ugrant *lru = NULL;
		for (int i = 0; i < UTOK_MAX_USERS && !e; i++) {
			if (!U.g[i].live)
				e = &U.g[i];
			else if (!U.g[i].refreshing && (!lru || U.g[i].last < lru->last))
				lru = &U.g[i];
		}
		if (!e && lru) {
			log_info("the Google grant of %s is forgotten to make room (%d users kept)", lru->user,
				 UTOK_MAX_USERS);
			grant_drop(lru);
			e = lru;
		}
		if (!e) { /* every entry is refreshing: keep nothing of this sign-in */
			pthread_mutex_unlock(&U.mu);
			oidc_grant_clear(g);
			return;
		}
		memset(e, 0, sizeof(*e));
		e->live = true;
		snprintf(e->user, sizeof(e->user), "%s", user);
	}
	if (g->refresh_token) { /* a sign-in without one (the provider gave none) keeps the last */
		secret_free(e->refresh);
		e->refresh = g->refresh_token;
		g->refresh_token = NULL;
	}
	secret_free(e->access);
	e->access = g->access_token;
	g->access_token = NULL;
	e->access_exp = e->access ? now + (g->expires_in > 0 ? g->expires_in : 3600) : 0;
	snprintf(e->scope, sizeof(e->scope), "%s", g->scope);
	e->gen = ++U.gen;
	e->revoked = false;
	e->last = now;
	bool none = !e->refresh;
	tstore_changed();
	pthread_mutex_unlock(&U.mu);
	if (none)
		log_warn("the provider gave no refresh token for %s: their programs get Google tokens "
			 "only until the one of this sign-in expires", user);
	oidc_grant_clear(g);
}

bool utok_scopes_ok(const char *scopes)
{
	size_t n = strlen(scopes), count = 0;
	if (n == 0 || n > IPC_TOKEN_SCOPES_MAX || scopes[0] == ',' || scopes[n - 1] == ',')
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)scopes[i];
		if (c <= ' ' || c > '~' || c == '"' || c == '\\')
			return false;
		if (c == ',' && (scopes[i + 1] == ',' || ++count >= 32))
			return false;
	}
	return true;
}

/* covered - does a grant of `granted` serve a token request for scope s? Exactly granted, or
 * granted cloud-platform and s is one of the Cloud APIs' own scopes, which cloud-platform
 * includes (what the Go client libraries ask for, e.g. storage's devstorage.full_control) */
static bool covered(const char *granted, const char *s, size_t n)
{
	static const char G[] = "https://www.googleapis.com/auth/";
	if (oidc_scope_has(granted, s, n))
		return true;
	if (!oidc_scope_has(granted, "https://www.googleapis.com/auth/cloud-platform", 46) ||
	    n <= sizeof(G) - 1 || strncmp(s, G, sizeof(G) - 1) != 0)
		return false;
	static const char *const cloud[] = { "cloud-platform", "devstorage.", "bigquery", "compute",
		"datastore", "pubsub", "logging.", "monitoring", "trace.", "spanner.", "sqlservice",
		"cloudkms", "bigtable.", "cloud-", "ndev.", "userinfo.email" };
	const char *rest = s + sizeof(G) - 1;
	for (size_t i = 0; i < sizeof(cloud) / sizeof(cloud[0]); i++)
		if (strncmp(rest, cloud[i], strlen(cloud[i])) == 0)
			return true;
	return false;
}

/* scopes_missing - the first requested scope the grant does not cover, into out ("" if none) */
static void scopes_missing(const char *granted, const char *scopes, char *out, size_t cap)
{
	out[0] = '\0';
	for (const char *p = scopes; *p;) {
		size_t l = strcspn(p, ",");
		if (!covered(granted, p, l)) {
			snprintf(out, cap, "%.*s", (int)l, p);
			return;
		}
		p += l + (p[l] == ',');
	}
}

/* answer_from - what the grant e says now for scopes (under mu): true when decided; false when
 * the provider must be asked first (only if may_refresh) */
static bool answer_from(struct ugrant *e, const char *scopes, time_t now, bool may_refresh,
			struct utok_answer *a)
{
	memset(a, 0, sizeof(*a));
	if (!e || e->revoked || (!e->refresh && (!e->access || e->access_exp - now <= 5))) {
		a->status = 403;
		snprintf(a->error, sizeof(a->error), "%s", SIGN_IN_AGAIN);
		return true;
	}
	char missing[300];
	scopes_missing(e->scope, scopes, missing, sizeof(missing));
	if (missing[0]) {
		a->status = 403;
		snprintf(a->error, sizeof(a->error), "the signed-in user's Google grant does not include "
			 "the scope %.250s that this program asked for (granted: %.400s). The server's operator "
			 "can add it to --scopes; then sign in again and allow it", missing,
			 e->scope[0] ? e->scope : "none");
		return true;
	}
	bool fresh_enough = e->access && e->access_exp - now > UTOK_MIN_LEFT_S;
	if (!fresh_enough && e->refresh && may_refresh)
		return false; /* ask the provider */
	if (!e->access) {
		a->status = 503;
		snprintf(a->error, sizeof(a->error), "the sign-in provider gave no access token; try again");
		return true;
	}
	a->ok = true;
	a->status = 200;
	a->token = strdup(e->access);
	a->expires_in = (long)(e->access_exp - now);
	if (!a->token) {
		a->ok = false;
		a->status = 503;
		snprintf(a->error, sizeof(a->error), "the server is out of memory; try again");
	}
	return true;
}

struct refresh_job {
	char user[AUTH_USER_MAX];
	char *refresh;
	unsigned long gen;
};

/* refresh_thread - one refresh at the provider for a user, then every waiter of that user */
static void *refresh_thread(void *arg)
{
	struct refresh_job *j = arg;
	struct oidc_grant g;
	char why[300];
	int r = oidc_refresh(j->refresh, &g, why, sizeof(why));
	secret_free(j->refresh);
	time_t now = time(NULL);
	pthread_mutex_lock(&U.mu);
	struct ugrant *e = find(j->user);
	bool revoked = false;
	if (e && e->gen == j->gen) {
		if (r == 0) {
			secret_free(e->access);
			e->access = g.access_token;
			g.access_token = NULL;
			e->access_exp = now + (g.expires_in > 0 ? g.expires_in : 3600);
			if (g.refresh_token) { /* rotated */
				secret_free(e->refresh);
				e->refresh = g.refresh_token;
				g.refresh_token = NULL;
				tstore_changed();
			}
			if (g.scope[0])
				snprintf(e->scope, sizeof(e->scope), "%s", g.scope);
		} else if (r == -EACCES) {
			grant_drop(e);
			e->revoked = revoked = true;
			tstore_changed();
		}
	}
	if (e)
		e->refreshing = false;
	/* take this user's waiters */
	struct waiter *mine = NULL, **pp = &U.waiting;
	while (*pp) {
		struct waiter *w = *pp;
		if (strcmp(w->user, j->user) == 0) {
			*pp = w->next;
			w->next = mine;
			mine = w;
			U.nwaiting--;
		} else {
			pp = &w->next;
		}
	}
	/* decide each answer under mu, deliver without it */
	struct { struct waiter *w; struct utok_answer a; } *out = NULL;
	int n = 0;
	for (struct waiter *w = mine; w; w = w->next)
		n++;
	out = calloc((size_t)n + 1, sizeof(*out));
	int k = 0;
	for (struct waiter *w = mine; w && out; w = w->next, k++) {
		out[k].w = w;
		if (r == -EIO) {
			out[k].a.status = 503;
			snprintf(out[k].a.error, sizeof(out[k].a.error), "%s", why);
		} else {
			/* just refreshed: what it gave, even if short-lived */
			answer_from(e && e->live ? e : NULL, w->scopes, now, false, &out[k].a);
		}
	}
	utok_deliver_fn deliver = U.deliver;
	void (*on_revoked)(const char *user) = U.revoked;
	U.refreshing--;
	if (U.refreshing == 0)
		pthread_cond_broadcast(&U.idle);
	pthread_mutex_unlock(&U.mu);
	oidc_grant_clear(&g);
	if (revoked) {
		log_warn("the Google grant of %s was revoked or has expired; they are signed out", j->user);
		if (on_revoked)
			on_revoked(j->user);
	} else if (r == 0) {
		log_info("refreshed the Google token of %s", j->user);
	}
	for (int i = 0; i < k; i++) {
		if (deliver)
			deliver(out[i].w->pid, out[i].w->session, out[i].w->seq, &out[i].a);
		utok_answer_clear(&out[i].a);
	}
	free(out);
	while (mine) {
		struct waiter *w = mine;
		mine = w->next;
		free(w);
	}
	free(j);
	return NULL;
}

/* busy - a refusal that says to try again (under or without mu) */
static bool busy(struct utok_answer *a, const char *why)
{
	memset(a, 0, sizeof(*a));
	a->status = 503;
	snprintf(a->error, sizeof(a->error), "%s", why);
	return true;
}

bool utok_request(pid_t pid, const char *session, uint32_t seq, const char *user, const char *scopes,
		  struct utok_answer *now)
{
	pthread_mutex_lock(&U.mu);
	time_t t = time(NULL);
	struct ugrant *e = find(user);
	if (e)
		e->last = t;
	if (answer_from(e, scopes, t, true, now)) {
		pthread_mutex_unlock(&U.mu);
		return true;
	}
	int of_this = 0;
	for (struct waiter *w = U.waiting; w; w = w->next)
		of_this += w->pid == pid;
	if (of_this > 0 || U.nwaiting >= UTOK_MAX_WAITING) {
		pthread_mutex_unlock(&U.mu);
		return busy(now, of_this ? "a token request of this session is already waiting; try again"
			    : "too many token requests are waiting for the sign-in provider; try again in a moment");
	}
	struct waiter *w = calloc(1, sizeof(*w));
	if (!w) {
		pthread_mutex_unlock(&U.mu);
		return busy(now, "the server is out of memory; try again");
	}
	w->pid = pid;
	w->seq = seq;
	snprintf(w->session, sizeof(w->session), "%s", session);
	snprintf(w->user, sizeof(w->user), "%s", user);
	snprintf(w->scopes, sizeof(w->scopes), "%s", scopes);
	if (!e->refreshing) {
		struct refresh_job *j = U.refreshing < UTOK_MAX_REFRESHING ? calloc(1, sizeof(*j)) : NULL;
		char *rt = j ? strdup(e->refresh) : NULL;
		pthread_t th;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (j && rt) {
			snprintf(j->user, sizeof(j->user), "%s", user);
			j->refresh = rt;
			j->gen = e->gen;
		}
		if (!j || !rt || pthread_create(&th, &at, refresh_thread, j) != 0) {
			pthread_attr_destroy(&at);
			secret_free(rt);
			free(j);
			free(w);
			pthread_mutex_unlock(&U.mu);
			return busy(now, "too many Google token refreshes are under way; try again in a moment");
		}
		pthread_attr_destroy(&at);
		e->refreshing = true;
		U.refreshing++;
	}
	w->next = U.waiting;
	U.waiting = w;
	U.nwaiting++;
	pthread_mutex_unlock(&U.mu);
	return false;
}

void utok_shutdown(void)
{
	pthread_mutex_lock(&U.mu);
	U.deliver = NULL;
	while (U.refreshing > 0)
		pthread_cond_wait(&U.idle, &U.mu);
	for (int i = 0; i < UTOK_MAX_USERS; i++) {
		grant_drop(&U.g[i]);
		U.g[i].live = false;
	}
	pthread_mutex_unlock(&U.mu);
}

json_t *utok_store_dump(void)
{
	json_t *users = json_array();
	pthread_mutex_lock(&U.mu);
	for (int i = 0; i < UTOK_MAX_USERS; i++) {
		const struct ugrant *e = &U.g[i];
		if (e->live && e->refresh && !e->revoked)
			json_array_append_new(users, json_pack("{s:s, s:s, s:s, s:I}", "user", e->user, "refresh",
							       e->refresh, "scope", e->scope, "last", (json_int_t)e->last));
	}
	pthread_mutex_unlock(&U.mu);
	return users;
}

int utok_store_load(const json_t *v, char *err, size_t cap)
{
	size_t i;
	json_t *e;
	if (!json_is_array(v) || json_array_size(v) > UTOK_MAX_USERS) {
		snprintf(err, cap, "its users' Google grants are malformed");
		return -1;
	}
	int n = 0;
	pthread_mutex_lock(&U.mu);
	json_array_foreach(v, i, e) {
		const char *user = NULL, *refresh = NULL, *scope = NULL;
		json_int_t last = 0;
		struct ugrant *g = &U.g[i];
		if (json_unpack(e, "{s:s, s:s, s:s, s:I}", "user", &user, "refresh", &refresh, "scope", &scope, "last",
				&last) != 0 ||
		    strlen(user) >= sizeof(g->user) || strlen(scope) >= sizeof(g->scope) || !*refresh ||
		    !(g->refresh = strdup(refresh))) {
			for (int k = 0; k < UTOK_MAX_USERS; k++) {
				grant_drop(&U.g[k]);
				U.g[k].live = false;
			}
			pthread_mutex_unlock(&U.mu);
			snprintf(err, cap, "a user's Google grant in it is malformed");
			return -1;
		}
		g->live = true;
		snprintf(g->user, sizeof(g->user), "%s", user);
		snprintf(g->scope, sizeof(g->scope), "%s", scope);
		g->last = (time_t)last;
		g->gen = ++U.gen;
		n++;
	}
	pthread_mutex_unlock(&U.mu);
	return n;
}
