/*
 * session.c - the session's own state changes and its way to the master: the lowest layer of
 * the worker, which every other file of it may call (worker/main.c, mcp.c, call.c,
 * monitor_wrap.c) and which calls none of them (only worker/proctitle.c for its title).
 */
#include <stdio.h>
#include <string.h>

#include "worker/worker.h"

static const char *const state_names[WS_COUNT] = { "new", "idle", "busy", "closing" };

/* session_send - send a message to the master; thread-safe (nng sockets are) */
int session_send(struct session *s, struct ipc_buf *b)
{
	int r = chan_send(s->sock, b);
	if (r != 0)
		log_warn("cannot reach the master: %s", strerror(-r));
	return r;
}

uint32_t session_next_seq(struct session *s)
{
	return __atomic_add_fetch(&s->out_seq, 1, __ATOMIC_SEQ_CST);
}

/* session_title - "kode-gopher: worker alice@example.com s=3f2a0c1d busy" (call under mu) */
void session_title(struct session *s)
{
	const char *st = s->state == WS_BEFORE_INIT ? "idle" : state_names[s->state];
	if (s->user[0])
		proctitle_set("kode-gopher: worker %s s=%.8s %s", s->user, s->id, st);
	else
		proctitle_set("kode-gopher: worker s=%.8s %s", s->id, st);
}

/* session_set_state - state change, process title and a note to the master (call under mu) */
void session_set_state(struct session *s, enum worker_state st)
{
	if (s->state == st)
		return;
	s->state = st;
	session_title(s);
	if (st == WS_READY || st == WS_BUSY) {
		struct ipc_buf b;
		if (ipc_pack_note_state(&b, session_next_seq(s), st == WS_BUSY ? "busy" : "idle") == 0)
			session_send(s, &b);
	}
}
