/*
 * monitor.h - the master's side of the contract in ipc/ipc.h (OpenSSH's monitor.c).
 *
 * Both transports (master/stdio.c, master/pool.c) hand every message a worker sends to
 * mon_dispatch. It checks the message against the contract table (direction, the worker's
 * phase, once-only) and runs its answer, mon_answer_<x>; each answer re-checks its inputs as if
 * the worker were hostile. What only a transport knows (its pending requests, where client
 * messages go, the per-user quota) it supplies through struct mon_ops.
 */
#ifndef KG_MONITOR_H
#define KG_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/ipc.h"

struct worker;

/* What a transport knows about a seq the worker answers */
enum mon_pending {
	MON_PENDING,  /* sent and waiting: the answer is taken */
	MON_GAVE_UP,  /* sent, but whoever waited has gone: the answer is dropped */
	MON_NEVER     /* never sent to this worker, or answered already: the worker is ended */
};

struct mon_ops {
	void (*hello)(void *ctx);                                          /* the worker is up */
	enum mon_pending (*mcp_answer)(void *ctx, uint32_t seq, struct ipc_bytes msg);
	void (*mcp_note)(void *ctx, uint32_t rel, struct ipc_bytes msg);
	enum mon_pending (*accepted)(void *ctx, uint32_t seq, struct ipc_bytes id);
	void (*session)(void *ctx, const struct ipc_session *sess);        /* initialize done */
	void (*state)(void *ctx, bool busy);
	bool (*quota)(void *ctx, char *err, size_t errlen);                /* may it claim? */
	void (*call)(void *ctx, const struct ipc_call *c);                 /* a finished call */
	const char *(*user)(void *ctx); /* the session's user, NULL: none (stdio, no session yet) */
};

struct mon_peer {
	struct worker *w;
	unsigned phase;            /* one IPC_PH_ bit: the master's view of this worker */
	const struct mon_ops *ops;
	void *ctx;
};

/* mon_dispatch - one message from a worker: 0 when answered (or dropped), -EPERM when the
 * worker broke the contract and was ended; its later messages are dropped */
int mon_dispatch(struct mon_peer *p, const struct ipc_msg *m);
/* mon_end - end a worker that broke the contract: one log line saying why, then SIGKILL */
void mon_end(struct worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* mon_send_token - ANS_TOKEN with a (master/usertoken.c's answer) to w for its request seq */
struct utok_answer;
void mon_send_token(struct worker *w, uint32_t seq, const struct utok_answer *a);

#endif
