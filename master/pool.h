/*
 * pool.h - the shared server's workers and sessions (serve --http).
 *
 * master/pool.c owns the slot table (one worker each, pre-started, one session each, never
 * reused), the per-user sandbox quota, idle timeouts, metrics and the accounting log; its main
 * loop reads every worker's channel. master/http.c's connection threads hand client messages to
 * a session's worker and wait for the answer as a `struct pending`. Everything here is guarded
 * by pool.mu, except a client message's packing and sending: pool_send lets pool.mu go for it,
 * holding a reference on the slot instead (`senders`), so that a thread preempted while it
 * sends holds up only its own session, never the main loop or the others.
 */
#ifndef KG_POOL_H
#define KG_POOL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "master/master.h"
#include "policy/limits.h"

#define SSE_STREAM_ID_HEX 16

enum slot_state { SLOT_FREE,
		  SLOT_SPAWNING, /* the spawner thread is starting its worker: it alone touches w */
		  SLOT_STARTING, SLOT_IDLE, SLOT_OPENING, SLOT_SESSION, SLOT_ENDING,
		  SLOT_CLOSING /* dead; its channel is being closed in the background */ };

struct slot {
	struct worker w;
	enum slot_state state;
	bool initialized;      /* NOTE_SESSION seen: initialize succeeded */
	bool busy;             /* NOTE_STATE */
	bool quota_held;       /* counts against its user's sandboxes */
	bool served;           /* answered something: not a start-up failure */
	uint32_t seq_first, seq_last; /* the client messages it was sent (pool_send's seqs) */
	char user[256];        /* "local", or the signed-in email (AUTH_USER_MAX) */
	char peer[48];         /* the client address that opened it (--max-sessions-per-peer) */
	char end_reason[96];   /* why pool_end_session ended it */
	double last_active, kill_at, opened;
	int inflight;          /* HTTP requests waiting on it */
	int senders;           /* threads in pool_send, sending to w without pool.mu: while there
				* are any the slot is not reused (w stays), and REQ_SHUTDOWN waits
				* for the last of them (a REQ_MCP after it is a contract breach) */
	bool shutdown_due;     /* pool_end_session came while senders > 0: the last one sends it */
	size_t inflight_bytes; /* and the size of their bodies */
	unsigned calls;
};

struct event {
	struct event *next;
	uint64_t no;           /* its number in the SSE stream (the id's <n>) */
	size_t len;
	char data[];
};

/* One client message waiting for its worker's answer. */
struct pending {
	struct pending *next;
	int slot;
	uint32_t seq;
	size_t bytes;          /* the message's size, counted in its slot's inflight_bytes */
	pthread_cond_t cv;
	bool done, accepted, gone;
	bool ended;            /* gone because the session was ended on purpose, not a crash */
	char *answer;          /* the JSON-RPC answer; NULL/0: none (a notification) */
	size_t alen;
	char *id;              /* JSON of the request id, from NOTE_ACCEPTED */
	struct event *q, *qtail; /* notifications that belong to this request, the last
				  * SSE_REPLAY_* of them (SSE) */
	size_t q_bytes;
	unsigned q_count;
	char gone_why[160];
	/* its SSE stream: "" until the answer goes out as one */
	char stream[SSE_STREAM_ID_HEX + 1];
	uint64_t ev_next;      /* the number the next event gets; 0 is the priming event */
	uint64_t answer_no;    /* the answer's number, once done */
	unsigned reader;       /* the connection reading it now (a new one supersedes) */
	bool attached;         /* a connection reads it */
	double detached_at;    /* when the last reader went */
};

struct pool {
	const struct serve_config *cfg;
	pthread_mutex_t mu;
	pthread_cond_t idle_cv; /* a worker became idle */
	struct slot *slots;
	int nslots;
	struct pending *pending;
	char rundir[512];
	unsigned nspawned;
	struct spawn_throttle throttle; /* start-up failures; a configuration error stops it */
	int waiting;              /* new sessions waiting in pool_take_idle for a worker */
	int wake[2];
	bool stopping;
	/* held by the spawner from a worker's start until its pid is on its slot, so that the main
	 * loop's wait4(-1) cannot reap a worker nobody knows yet: the loop only tries it, and
	 * reaps on a later turn (reap_again) if the spawner holds it */
	pthread_mutex_t reap_mu;
	bool reap_again;
	void (*on_hup)(void);      /* SIGHUP (master/http.c: reload the TLS certificate) */
	/* metrics */
	unsigned long crashes, sessions_total, calls_total, start_failures;
	struct { char tool[24], kind[24]; unsigned long n; } calls[POOL_CALL_LABELS];
	int ncalls;
	unsigned long build_hist[12], run_hist[12];
	double build_sum, run_sum;
	unsigned long build_n, run_n;
	FILE *acct;
};

extern struct pool pool;

int pool_init(const struct serve_config *cfg);
/* pool_loop - the main thread's loop until a signal stops it */
void pool_loop(void);
void pool_shutdown(void);
void pool_wake(void);

/* Under pool.mu: */
int pool_take_idle(double wait_s);       /* an idle worker's slot index, or -1 */
const char *pool_unavailable(void);      /* why no worker will ever be idle, or NULL */
int pool_find_session(const char *sid);  /* the slot of an open session, or -1 */
void pool_end_session(int i, const char *reason);
/* pool_send - hand a client message to slot i's worker, after `first` if not NULL (NOTE_ASSIGN;
 * it is freed). Called under mu, it registers the pending first (so the answer, or the worker's
 * death, finds it), then lets mu go while it packs and sends: the slot may have changed when it
 * returns (compare its pid). NULL if the worker is gone. */
struct pending *pool_send(int i, struct ipc_buf *first, const char *msg, size_t len);
void pool_pending_free(struct pending *p);
/* pool_pending_sweep - free the SSE streams nobody reads any more whose call ended (gone, or
 * done and unread for SSE_RESUME_WINDOW_S) */
void pool_pending_sweep(void);
/* pool_find_stream - the pending of slot i whose SSE stream is `stream`, or NULL */
struct pending *pool_find_stream(int i, const char *stream);
void pool_metrics(char **out, size_t *len);
double pool_idle_limit(const struct slot *s); /* seconds it may sit idle */
/* the /metrics label for a reported tool or result kind: one of a fixed set, else "other" */
const char *pool_label_tool(struct ipc_bytes v);
const char *pool_label_kind(struct ipc_bytes v);

/* The accounting log (--accounting-log): one JSON object a line, built by jansson, so quotes,
 * backslashes and control characters in a name are escaped and a line never breaks in two.
 * pool_acct_text - a name as a JSON string; one that is not UTF-8 (jansson refuses it, and the
 * whole line would be lost) keeps its ASCII and has '?' for every other byte.
 * pool_acct_line - {"ts": ts} and o's members (o stolen), compact (malloc'd; NULL: none) */
json_t *pool_acct_text(const char *s);
char *pool_acct_line(json_t *o, double ts);

#endif
