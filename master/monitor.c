/*
 * monitor.c - the master answers its workers (OpenSSH's monitor.c): one dispatch table, used by
 * both transports (master/stdio.c, master/pool.c).
 *
 * A worker serves one untrusted client and runs its JSON-RPC parser, so it may be compromised.
 * Everything it sends is checked here against the contract in ipc/ipc.h before it is acted on:
 * the direction (only worker -> master types), the phase the master has the worker in, the
 * once-only flag; then each mon_answer_<x> re-checks its own inputs (a sandbox name it chose
 * itself, an answer to a request never sent, an operation that does not exist) and ends the worker on any of them, with a log line naming the message and phase.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lib/gcreds.h"
#include "lib/mono.h"
#include "lib/secret.h"
#include "master/master.h"
#include "master/monitor.h"
#include "master/sandbox.h"
#include "master/usertoken.h"
#include "policy/limits.h"

/* mon_end - see monitor.h */
void mon_end(struct worker *w, const char *fmt, ...)
{
	char why[300];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (w->ended)
		return;
	w->ended = true;
	log_error("worker pid %d (session %.8s…) %s; ending it", (int)w->pid, w->session, why);
	if (w->pid > 0)
		kill(w->pid, SIGKILL);
}

static bool mon_is(struct ipc_bytes b, const char *s)
{
	return b.len == strlen(s) && memcmp(b.ptr, s, b.len) == 0;
}

typedef int (*mon_answer_fn)(struct mon_peer *p, const struct ipc_msg *m);

/* mon_answer_hello - HELLO: the pid must be the one the master forked */
static int mon_answer_hello(struct mon_peer *p, const struct ipc_msg *m)
{
	if (m->u.hello.pid != (uint64_t)p->w->pid) {
		mon_end(p->w, "said HELLO with pid %llu", (unsigned long long)m->u.hello.pid);
		return -EPERM;
	}
	p->w->hello = true;
	p->ops->hello(p->ctx);
	return 0;
}

/* mon_answer_mcp - ANS_MCP: only for a client message this worker was sent */
static int mon_answer_mcp(struct mon_peer *p, const struct ipc_msg *m)
{
	if (p->ops->mcp_answer(p->ctx, m->seq, m->u.mcp_ans.msg) == MON_NEVER) {
		mon_end(p->w, "sent ANS_MCP for seq %u, a request it was never sent or answered already",
			m->seq);
		return -EPERM;
	}
	return 0;
}

/* mon_answer_note_mcp - NOTE_MCP: a server->client message, passed on as opaque bytes */
static int mon_answer_note_mcp(struct mon_peer *p, const struct ipc_msg *m)
{
	p->ops->mcp_note(p->ctx, (uint32_t)m->u.note_mcp.rel, m->u.note_mcp.msg);
	return 0;
}

/* mon_answer_accepted - NOTE_ACCEPTED: only for a client message this worker holds */
static int mon_answer_accepted(struct mon_peer *p, const struct ipc_msg *m)
{
	if (p->ops->accepted(p->ctx, m->seq, m->u.accepted.id) == MON_NEVER) {
		mon_end(p->w, "sent NOTE_ACCEPTED for seq %u, a request it was never sent", m->seq);
		return -EPERM;
	}
	return 0;
}

/* mon_answer_session - NOTE_SESSION: initialize succeeded */
static int mon_answer_session(struct mon_peer *p, const struct ipc_msg *m)
{
	p->ops->session(p->ctx, &m->u.session);
	return 0;
}

/* mon_answer_state - NOTE_STATE: "idle" or "busy", nothing else */
static int mon_answer_state(struct mon_peer *p, const struct ipc_msg *m)
{
	bool busy = mon_is(m->u.state.state, "busy");
	if (!busy && !mon_is(m->u.state.state, "idle")) {
		mon_end(p->w, "sent NOTE_STATE with a state that does not exist");
		return -EPERM;
	}
	p->ops->state(p->ctx, busy);
	return 0;
}

/* mon_answer_sandbox - REQ_SANDBOX: spawn or release this worker's own sandbox. The worker
 * names nothing: the master names local sandboxes and SandboxClaims, and on Kubernetes it makes
 * every API call itself (master/sandbox_kube.c), so a worker cannot reach another session's
 * claim, a claim it never made, or any other API path. */
static int mon_answer_sandbox(struct mon_peer *p, const struct ipc_msg *m)
{
	const struct ipc_sandbox_req *r = &m->u.sandbox_req;
	struct worker *w = p->w;
	bool spawn = mon_is(r->op, "spawn");
	if ((!spawn && !mon_is(r->op, "release")) || r->name.len != 0) {
		/* a worker that picks a name reaches for another's sandbox */
		mon_end(w, "sent REQ_SANDBOX with an operation or a name it may not ask for (phase %s)",
			ipc_phase_name(p->phase));
		return -EPERM;
	}
	if (w->sandbox_start) {
		/* it waits for the answer to the first one: an honest worker never asks twice */
		mon_end(w, "sent REQ_SANDBOX while the sandbox it asked for is still starting "
			"(phase %s): one request at a time", ipc_phase_name(p->phase));
		return -EPERM;
	}
	char err[300];
	snprintf(err, sizeof(err), "%s", p->phase == IPC_PH_ENDING ? "the session is ending"
					       : "a claim waits for the session's first tool call");
	bool refuse = spawn && p->phase != IPC_PH_SESSION && (w->cfg->kubernetes || p->phase == IPC_PH_ENDING);
	/* the per-user limit is checked here too, not only when the worker asks (REQ_QUOTA) */
	if (!refuse && spawn && w->cfg->kubernetes && !p->ops->quota(p->ctx, err, sizeof(err)))
		refuse = true;
	if (refuse) {
		struct ipc_buf b;
		if (ipc_pack_ans_sandbox(&b, m->seq, false, err, "", "", "") == 0)
			channel_send(w, &b);
		return 0;
	}
	const char *user = p->ops->user ? p->ops->user(p->ctx) : NULL;
	sandbox_backend(w->cfg)->answer(w, m->seq, spawn, user ? user : "local");
	return 0;
}

/* mon_answer_quota - REQ_QUOTA: may this session claim a sandbox? */
static int mon_answer_quota(struct mon_peer *p, const struct ipc_msg *m)
{
	char err[200] = "the session is ending";
	bool ok = p->phase == IPC_PH_SESSION && p->ops->quota(p->ctx, err, sizeof(err));
	struct ipc_buf b;
	if (ipc_pack_ans_quota(&b, m->seq, ok, ok ? "" : err) == 0)
		channel_send(p->w, &b);
	return 0;
}

/* mon_answer_call - NOTE_CALL: one finished tool call, for metrics and accounting */
static int mon_answer_call(struct mon_peer *p, const struct ipc_msg *m)
{
	p->ops->call(p->ctx, &m->u.call);
	return 0;
}

/* mon_send_token - see monitor.h */
void mon_send_token(struct worker *w, uint32_t seq, const struct utok_answer *a)
{
	struct ipc_buf b;
	if (ipc_pack_ans_token(&b, seq, a->ok, a->ok ? "" : a->error, a->status, a->ok ? a->token : "",
			       a->ok && a->expires_in > 0 ? (uint64_t)a->expires_in : 0) == 0)
		channel_send(w, &b);
}

/* mon_token_rate - a token bucket per worker: WORKER_TOKEN_BURST at once, then
 * WORKER_TOKEN_PER_MINUTE; an honest worker caches what it gets and asks far less */
static bool mon_token_rate(struct worker *w)
{
	double now = mono_s();
	if (w->tok_at == 0)
		w->tok_allow = WORKER_TOKEN_BURST;
	else
		w->tok_allow += (now - w->tok_at) * WORKER_TOKEN_PER_MINUTE / 60.0;
	if (w->tok_allow > WORKER_TOKEN_BURST)
		w->tok_allow = WORKER_TOKEN_BURST;
	w->tok_at = now;
	if (w->tok_allow < 1)
		return false;
	w->tok_allow -= 1;
	return true;
}

/* mon_answer_token - REQ_TOKEN: an access token of this session's signed-in user, never anyone
 * else's (the worker names no user) and never a refresh token; only in --credentials user */
static int mon_answer_token(struct mon_peer *p, const struct ipc_msg *m)
{
	struct worker *w = p->w;
	if (!w->cfg->credentials || strcmp(w->cfg->credentials, "user") != 0 || !utok_enabled()) {
		mon_end(w, "asked for a user's Google token, but this server's --credentials is not user");
		return -EPERM;
	}
	char scopes[IPC_TOKEN_SCOPES_MAX + 1];
	ipc_bytes_str(m->u.token_req.scopes, scopes, sizeof(scopes));
	if (m->u.token_req.scopes.len != strlen(scopes) || !utok_scopes_ok(scopes)) {
		mon_end(w, "sent REQ_TOKEN with scopes no honest worker sends");
		return -EPERM;
	}
	const char *user = p->ops->user ? p->ops->user(p->ctx) : NULL;
	struct utok_answer a = { .status = 503 };
	if (p->phase != IPC_PH_SESSION)
		snprintf(a.error, sizeof(a.error), "the session is ending");
	else if (!user || !strchr(user, '@'))
		a.status = 403, snprintf(a.error, sizeof(a.error), "this session has no signed-in Google user");
	else if (!mon_token_rate(w))
		snprintf(a.error, sizeof(a.error), "this session asked for Google tokens too often (at most "
			 "%d a minute); try again in a few seconds", WORKER_TOKEN_PER_MINUTE);
	else if (!utok_request(w->pid, w->session, m->seq, user, scopes, &a))
		return 0; /* answered when the provider has */
	mon_send_token(w, m->seq, &a);
	utok_answer_clear(&a);
	return 0;
}

/* mon_answer_adc - REQ_ADC: the ADC file's text, for a credentials mode that uses one (adc,
 * metadata, server, service-account); read anew each time, so a long session follows
 * `gcloud auth application-default login` */
static int mon_answer_adc(struct mon_peer *p, const struct ipc_msg *m)
{
	const char *mode = p->w->cfg->credentials ? p->w->cfg->credentials : "none";
	if (strcmp(mode, "none") == 0 || strcmp(mode, "user") == 0) {
		mon_end(p->w, "asked for the Application Default Credentials in --credentials %s, "
			"which uses none", mode);
		return -EPERM;
	}
	char err[300] = "";
	size_t len = 0;
	bool absent = false;
	char *text = gcreds_adc_read(&len, &absent, err, sizeof(err));
	struct ipc_buf b;
	if (ipc_pack_ans_adc(&b, m->seq, text != NULL, absent, text ? "" : err, text ? text : "",
			     text ? len : 0) == 0)
		channel_send(p->w, &b);
	secret_free(text);
	return 0;
}

/* The dispatch table: every message a worker may send, and who answers it. Which phases permit
 * it and its flags are the contract's (ipc/ipc.h), checked before the answer runs. */
static const mon_answer_fn mon_table[IPC_TYPE_MAX] = {
	[IPC_HELLO] = mon_answer_hello,
	[IPC_ANS_MCP] = mon_answer_mcp,
	[IPC_NOTE_MCP] = mon_answer_note_mcp,
	[IPC_NOTE_ACCEPTED] = mon_answer_accepted,
	[IPC_NOTE_SESSION] = mon_answer_session,
	[IPC_NOTE_STATE] = mon_answer_state,
	[IPC_REQ_SANDBOX] = mon_answer_sandbox,
	[IPC_REQ_QUOTA] = mon_answer_quota,
	[IPC_NOTE_CALL] = mon_answer_call,
	[IPC_REQ_TOKEN] = mon_answer_token,
	[IPC_REQ_ADC] = mon_answer_adc,
};

/* mon_dispatch - see monitor.h */
int mon_dispatch(struct mon_peer *p, const struct ipc_msg *m)
{
	struct worker *w = p->w;
	if (w->ended)
		return -EPERM; /* killed already: what it still had queued does not count */
	const struct ipc_contract *c = ipc_contract_of(m->type);
	if (!c || c->dir != IPC_W2M || !mon_table[m->type]) {
		mon_end(w, "sent %s, which only the master sends", ipc_type_name(m->type));
		return -EPERM;
	}
	if (!(c->phases & p->phase)) {
		mon_end(w, "sent %s, which the contract does not permit in phase %s", c->name,
			ipc_phase_name(p->phase));
		return -EPERM;
	}
	uint64_t bit = 1ull << m->type;
	if ((c->flags & IPC_ONCE) && (w->seen & bit)) {
		mon_end(w, "sent %s a second time; it is allowed once", c->name);
		return -EPERM;
	}
	w->seen |= bit;
	return mon_table[m->type](p, m);
}
