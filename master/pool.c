/*
 * pool.c - workers and sessions of the shared server (Postfix's master_avail.c and
 * master_spawn.c, Dovecot's process_min_avail and process_limit, in one place).
 *
 * The main thread runs pool_loop: it keeps --workers-min-idle workers started ahead (each with
 * its sandbox warming), reads every worker's channel, answers sandbox and quota requests, ends
 * idle sessions, reaps, and throttles workers that die at start-up. HTTP connection threads
 * (master/http.c) take an idle worker for a new session and wait on `struct pending` for answers.
 */
#include "master/monitor.h"
#include "master/pool.h"
#include "master/sandbox.h"
#include "master/tokenstore.h"
#include "master/usertoken.h"
#include "policy/limits.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct pool pool;

static void pool_token_deliver(pid_t pid, const char *session, uint32_t seq, const struct utok_answer *a);

/* pool_wake - make the main loop look again (new slot to poll, a session to end) */
void pool_wake(void)
{
	ssize_t w = write(pool.wake[1], "w", 1);
	(void)w;
}

/* pool_acct_text - see pool.h */
json_t *pool_acct_text(const char *s)
{
	json_t *j = json_string(s ? s : "");
	if (j)
		return j;
	char *b = strdup(s);
	if (!b)
		return json_string("?");
	for (char *p = b; *p; p++)
		if ((unsigned char)*p >= 0x80)
			*p = '?';
	j = json_string(b);
	free(b);
	return j;
}

/* pool_acct_line - see pool.h */
char *pool_acct_line(json_t *o, double ts)
{
	if (!o)
		return NULL;
	json_t *line = json_pack("{s:f}", "ts", ts);
	json_object_update(line, o);
	json_decref(o);
	char *text = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(13));
	json_decref(line);
	return text;
}

/* acct_write - one accounting line: ts, then o's members (stolen) */
static void acct_write(json_t *o)
{
	if (!pool.acct || !o) {
		json_decref(o);
		return;
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	char *text = pool_acct_line(o, (double)ts.tv_sec + (double)(ts.tv_nsec / 1000000) / 1000);
	if (text) {
		fprintf(pool.acct, "%s\n", text);
		fflush(pool.acct);
	}
	free(text);
}

/* acct_session - a session's id as the accounting log and logs write it: a prefix to correlate
 * with, never the whole id, which is the bearer secret of the session */
static const char *acct_session(const struct slot *s, char *buf, size_t cap)
{
	snprintf(buf, cap, "%.*s", ACCT_SESSION_ID_CHARS, s->w.session);
	return buf;
}

/* acct_open - append to PATH, created 0600; an existing file others could read is made 0600
 * (session ids are secrets and user names personal data), or refused if that cannot be done */
static FILE *acct_open(const char *path)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) {
		log_error("cannot open the accounting log %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	if (S_ISREG(st.st_mode) && (st.st_mode & 077)) {
		if (fchmod(fd, 0600) != 0) {
			log_error("the accounting log %s has mode %03o and cannot be made 0600 (%s): "
				  "give it to this user or remove it", path, (unsigned)(st.st_mode & 0777),
				  strerror(errno));
			close(fd);
			return NULL;
		}
		log_warn("the accounting log %s had mode %03o; it is now 0600", path,
			 (unsigned)(st.st_mode & 0777));
	}
	FILE *f = fdopen(fd, "a");
	if (!f)
		close(fd);
	return f;
}

/* json_safe - a name for a JSON string: drop what would need escaping */
static const char *json_safe(const char *s, char *buf, size_t cap)
{
	size_t n = 0;
	for (; *s && n + 1 < cap; s++)
		if ((unsigned char)*s >= 0x20 && *s != '"' && *s != '\\')
			buf[n++] = *s;
	buf[n] = '\0';
	return buf;
}

int pool_init(const struct serve_config *cfg)
{
	pool.cfg = cfg;
	pthread_mutex_init(&pool.mu, NULL);
	pthread_mutex_init(&pool.reap_mu, NULL);
	pthread_cond_init(&pool.idle_cv, NULL);
	pool.nslots = cfg->max_workers;
	pool.slots = calloc((size_t)pool.nslots, sizeof(*pool.slots));
	if (!pool.slots || pipe2(pool.wake, O_CLOEXEC | O_NONBLOCK) != 0)
		return -ENOMEM;
	int r = spawn_runtime_dir(pool.rundir, sizeof(pool.rundir));
	if (r)
		return r;
	if (cfg->credentials && strcmp(cfg->credentials, "user") == 0)
		utok_init(pool_token_deliver);
	if (cfg->accounting_log && strcmp(cfg->accounting_log, "off") != 0) {
		pool.acct = strcmp(cfg->accounting_log, "-") == 0 ? stderr : acct_open(cfg->accounting_log);
		if (!pool.acct)
			return -EACCES;
	}
	return 0;
}

struct slot_start {
	struct slot *s;
	unsigned n;
};

/* slot_spawn_job - start a slot's worker (the spawner thread, without mu: the slot is
 * SLOT_SPAWNING, which nothing else touches), then hand it to the main loop */
static void slot_spawn_job(void *arg)
{
	struct slot_start *j = arg;
	struct slot *s = j->s;
	pthread_mutex_lock(&pool.reap_mu);
	int r = spawn_worker(&s->w, pool.cfg, pool.rundir, j->n, "-");
	pthread_mutex_lock(&pool.mu);
	pthread_mutex_unlock(&pool.reap_mu);
	free(j);
	if (r != 0) {
		log_error("cannot start a worker; trying again later");
		spawn_start_failed(&pool.throttle);
		s->state = SLOT_FREE;
	} else {
		s->w.mu = &pool.mu; /* its sandbox starts on the spawner (master/sandbox_local.c) */
		s->opened = mono_s();
		s->state = SLOT_STARTING;
	}
	pthread_mutex_unlock(&pool.mu);
	pool_wake(); /* a channel to poll, a child perhaps to reap */
}

/* slot_spawn - start a worker ahead of need, on the spawner thread (under mu): posix_spawn
 * returns only once the child has exec'd, which took 2-100 ms of the main loop under load */
static void slot_spawn(int i)
{
	struct slot *s = &pool.slots[i];
	memset(s, 0, sizeof(*s));
	s->state = SLOT_SPAWNING;
	s->w.recv_fd = -1;
	struct slot_start *j = malloc(sizeof(*j));
	if (!j) {
		spawn_start_failed(&pool.throttle);
		s->state = SLOT_FREE;
		return;
	}
	*j = (struct slot_start){ s, ++pool.nspawned };
	if (later_spawn(LATER_WORKERS, slot_spawn_job, j))
		return;
	/* no spawner: here, without the lock (HTTP threads keep serving meanwhile) */
	pthread_mutex_unlock(&pool.mu);
	slot_spawn_job(j);
	pthread_mutex_lock(&pool.mu);
}

/* pool_avail - keep min-idle workers ready, within max-workers, unless throttled */
static void pool_avail(void)
{
	int ready = 0, used = 0, free_i = -1;
	for (int i = 0; i < pool.nslots; i++) {
		enum slot_state st = pool.slots[i].state;
		ready += st == SLOT_SPAWNING || st == SLOT_STARTING || st == SLOT_IDLE;
		used += st != SLOT_FREE;
		if (st == SLOT_FREE && free_i < 0 && !pool.slots[i].senders)
			free_i = i; /* (one with senders is reused once they are done) */
	}
	/* with --workers-min-idle 0 a worker starts only when a session waits for one */
	int want = pool.cfg->workers_min_idle > pool.waiting ? pool.cfg->workers_min_idle : pool.waiting;
	/* after a start-up failure one worker at a time probes whether starting works again */
	if (pool.throttle.backoff_s > 0 && ready > 0)
		return;
	if (ready < want && used < pool.nslots && free_i >= 0 && spawn_may_start(&pool.throttle))
		slot_spawn(free_i);
}

/* pool_take_idle - an idle worker for a new session, waiting up to wait_s (under mu) */
int pool_take_idle(double wait_s)
{
	double until = mono_s() + wait_s;
	for (;;) {
		if (pool.throttle.stopped[0])
			return -1; /* no worker will come: pool_unavailable says why */
		for (int i = 0; i < pool.nslots; i++)
			if (pool.slots[i].state == SLOT_IDLE) {
				pool.slots[i].state = SLOT_OPENING;
				pool_wake(); /* start a replacement */
				return i;
			}
		double left = until - mono_s();
		if (left <= 0 || pool.stopping)
			return -1;
		pool.waiting++;
		pool_wake();
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (long)((left < 0.2 ? left : 0.2) * 1e9);
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&pool.idle_cv, &pool.mu, &ts);
		pool.waiting--;
	}
}

/* pool_unavailable - why no session can be opened at all (a configuration error), or NULL */
const char *pool_unavailable(void)
{
	return pool.throttle.stopped[0] ? pool.throttle.stopped : NULL;
}

/* pool_find_session - the slot serving session sid */
int pool_find_session(const char *sid)
{
	for (int i = 0; i < pool.nslots; i++)
		if (pool.slots[i].state == SLOT_SESSION && strcmp(pool.slots[i].w.session, sid) == 0)
			return i;
	return -1;
}

/* slot_send_shutdown - REQ_SHUTDOWN with the slot's end_reason (under mu) */
static void slot_send_shutdown(struct slot *s)
{
	struct ipc_buf b;
	if (s->w.hello && ipc_pack_req_shutdown(&b, 0, s->end_reason) == 0)
		channel_send(&s->w, &b);
}

/* pool_end_session - ask the worker to leave; it is killed if it lingers (under mu) */
void pool_end_session(int i, const char *reason)
{
	struct slot *s = &pool.slots[i];
	if (s->state == SLOT_FREE || s->state == SLOT_SPAWNING || s->state == SLOT_ENDING)
		return;
	char sid[ACCT_SESSION_ID_CHARS + 1];
	if (s->state == SLOT_SESSION)
		log_info("session %.8s… of %s ends: %s", s->w.session, s->user, reason);
	if (s->state == SLOT_SESSION || s->state == SLOT_OPENING)
		acct_write(json_pack("{s:s, s:o, s:s, s:i, s:i, s:f, s:s}", "event", "session_end",
				     "user", pool_acct_text(s->user), "session", acct_session(s, sid, sizeof(sid)),
				     "worker_pid", (int)s->w.pid, "calls", (int)s->calls, "duration_s",
				     (double)(long)((mono_s() - s->opened) * 10) / 10, "reason", reason));
	snprintf(s->end_reason, sizeof(s->end_reason), "%s", reason);
	if (s->senders)
		s->shutdown_due = true; /* after their messages: pool_sender_done */
	else
		slot_send_shutdown(s);
	/* the session has ended: its sandbox no longer counts against its user */
	s->quota_held = false;
	s->state = SLOT_ENDING;
	/* a Kubernetes worker deletes its SandboxClaim on the way out: give it time for that */
	s->kill_at = mono_s() + (pool.cfg->kubernetes ? WORKER_LEAVE_KUBE_MS : WORKER_LEAVE_LOCAL_MS) / 1000.0;
	pool_wake();
}

/* pool_sender_done - a thread's pool_send to slot i has ended (under mu) */
static void pool_sender_done(int i)
{
	struct slot *s = &pool.slots[i];
	if (--s->senders > 0)
		return;
	if (s->shutdown_due) {
		s->shutdown_due = false;
		slot_send_shutdown(s); /* a dead worker's pid is 0: nothing is sent */
	}
	if (s->state == SLOT_FREE)
		pool_wake(); /* it may be reused now (pool_avail) */
}

/* pool_send - see pool.h */
struct pending *pool_send(int i, struct ipc_buf *first, const char *msg, size_t len)
{
	static uint32_t seq;
	struct slot *s = &pool.slots[i];
	struct pending *p = channel_live(&s->w) ? calloc(1, sizeof(*p)) : NULL;
	if (!p) {
		if (first)
			ipc_buf_free(first);
		return NULL;
	}
	p->slot = i;
	p->seq = ++seq;
	p->ev_next = 1; /* 0 is the priming event of its SSE stream */
	pthread_cond_init(&p->cv, NULL);
	p->next = pool.pending;
	pool.pending = p;
	if (!s->seq_first)
		s->seq_first = p->seq;
	s->seq_last = p->seq;
	p->bytes = len;
	s->inflight_bytes += len;
	s->inflight++;
	s->last_active = mono_s();
	/* packing copies the whole message and the send may wait for a full queue: not under the
	 * pool-wide lock, which the main loop and every other session need. The slot is not
	 * reused meanwhile (senders), and p stays ours: sweeps free only SSE streams. */
	s->senders++;
	uint32_t my_seq = p->seq;
	pthread_mutex_unlock(&pool.mu);
	struct ipc_buf b;
	int r = first ? channel_send_checked(&s->w, first) : 0;
	if (r == 0 && (r = ipc_pack_req_mcp(&b, my_seq, msg, len, false)) == 0)
		r = channel_send_checked(&s->w, &b);
	pthread_mutex_lock(&pool.mu);
	pool_sender_done(i);
	if (r != 0) {
		pool_pending_free(p);
		return NULL;
	}
	return p;
}

/* pool_pending_free - the HTTP thread is done with p (under mu) */
void pool_pending_free(struct pending *p)
{
	for (struct pending **pp = &pool.pending; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	struct slot *s = &pool.slots[p->slot];
	if (s->inflight > 0)
		s->inflight--;
	s->inflight_bytes -= p->bytes <= s->inflight_bytes ? p->bytes : s->inflight_bytes;
	s->last_active = mono_s();
	while (p->q) {
		struct event *e = p->q;
		p->q = e->next;
		free(e);
	}
	free(p->answer);
	free(p->id);
	pthread_cond_destroy(&p->cv);
	free(p);
}

/* pool_pending_sweep - see pool.h */
void pool_pending_sweep(void)
{
	double now = mono_s();
	for (struct pending **pp = &pool.pending; *pp;) {
		struct pending *p = *pp;
		if (p->stream[0] && !p->attached &&
		    (p->gone || (p->done && now - p->detached_at > SSE_RESUME_WINDOW_S))) {
			pool_pending_free(p); /* unlinks p: *pp is the next one now */
			continue;
		}
		pp = &p->next;
	}
}

/* pool_find_stream - see pool.h */
struct pending *pool_find_stream(int i, const char *stream)
{
	for (struct pending *p = pool.pending; p; p = p->next)
		if (p->slot == i && p->stream[0] && strcmp(p->stream, stream) == 0)
			return p;
	return NULL;
}

static struct pending *pending_find(int slot, uint32_t seq)
{
	for (struct pending *p = pool.pending; p; p = p->next)
		if (p->slot == slot && p->seq == seq)
			return p;
	return NULL;
}

/* pool_quota - may slot i's session claim a sandbox (the per-user limit)? */
static bool pool_quota(int i, char *err, size_t errlen)
{
	struct slot *s = &pool.slots[i];
	int held = 0;
	for (int k = 0; k < pool.nslots; k++)
		if (k != i && pool.slots[k].quota_held && strcmp(pool.slots[k].user, s->user) == 0)
			held++;
	bool ok = s->quota_held || held < pool.cfg->max_sandboxes_per_user;
	if (ok) {
		s->quota_held = true;
	} else {
		log_info("user %s: sandbox refused (%d open, limit %d)", s->user, held,
			 pool.cfg->max_sandboxes_per_user);
		/* the limit and the way out, within the worker's quota_error[200] */
		int to = pool.cfg->session_timeout_s;
		snprintf(err, errlen, "too many open sandboxes for this user: the limit is %d; end "
			 "one of your sessions (close its client, or DELETE /mcp) or wait for an idle one "
			 "to end after %d%s", pool.cfg->max_sandboxes_per_user,
			 to % 60 ? to : to / 60, to % 60 ? "s" : "m");
	}
	return ok;
}

/* hist_add - one observation into the latency histogram (seconds) */
static const double hist_bounds[12] = { 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1e300 };
static void hist_add(unsigned long *h, double *sum, unsigned long *n, double v)
{
	for (int k = 0; k < 12; k++)
		if (v <= hist_bounds[k]) {
			h[k]++;
			break;
		}
	*sum += v;
	(*n)++;
}

/* The only label values /metrics shows: the worker reports a call's tool and result kind, and
 * the kind comes from the user's program, so anything else counts as "other" (a forged kind
 * must neither make a label nor crowd out the real ones). */
static const char *const metric_tools[] = { "execute_go_code", "lookup_package_docs", NULL };
static const char *const metric_kinds[] = { "ok", "error", "panic", "unencodable", "exit", "timeout",
					    "killed", "build_error", "normalize_error", "internal_error",
					    "invalid_arguments", "sandbox_limit", "tool_error", "cancelled",
					    NULL };

/* metric_label - v if it is one of the fixed values, else "other" */
static const char *metric_label(struct ipc_bytes v, const char *const *fixed)
{
	for (; *fixed; fixed++)
		if (v.len == strlen(*fixed) && memcmp(v.ptr, *fixed, v.len) == 0)
			return *fixed;
	return "other";
}

const char *pool_label_tool(struct ipc_bytes v)
{
	return metric_label(v, metric_tools);
}

const char *pool_label_kind(struct ipc_bytes v)
{
	return metric_label(v, metric_kinds);
}

/* note_call - a finished tool call: metrics and an accounting line */
static void note_call(int i, const struct ipc_call *c)
{
	struct slot *s = &pool.slots[i];
	const char *tool = pool_label_tool(c->tool), *kind = pool_label_kind(c->kind);
	s->calls++;
	pool.calls_total++;
	int k;
	for (k = 0; k < pool.ncalls; k++)
		if (strcmp(pool.calls[k].tool, tool) == 0 && strcmp(pool.calls[k].kind, kind) == 0)
			break;
	if (k == pool.ncalls && pool.ncalls < POOL_CALL_LABELS) {
		snprintf(pool.calls[k].tool, sizeof(pool.calls[k].tool), "%s", tool);
		snprintf(pool.calls[k].kind, sizeof(pool.calls[k].kind), "%s", kind);
		pool.ncalls++;
	}
	if (k < pool.ncalls)
		pool.calls[k].n++;
	if (strcmp(tool, "execute_go_code") == 0) {
		hist_add(pool.build_hist, &pool.build_sum, &pool.build_n, (double)c->build_ms / 1000);
		hist_add(pool.run_hist, &pool.run_sum, &pool.run_n, (double)c->run_ms / 1000);
	}
	char sid[ACCT_SESSION_ID_CHARS + 1];
	acct_write(json_pack("{s:s, s:o, s:s, s:i, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
			     "event", "call", "user", pool_acct_text(s->user), "session", acct_session(s, sid, sizeof(sid)),
			     "worker_pid", (int)s->w.pid, "tool", tool, "kind", kind,
			     "cpu_user_ms", (json_int_t)c->cpu_user_ms, "cpu_sys_ms", (json_int_t)c->cpu_sys_ms,
			     "max_rss_kb", (json_int_t)c->max_rss_kb, "build_ms", (json_int_t)c->build_ms,
			     "run_ms", (json_int_t)c->run_ms, "bytes_in", (json_int_t)c->bytes_in,
			     "bytes_out", (json_int_t)c->bytes_out));
}

/* ---- what the monitor (master/monitor.c) asks of this transport; ctx is the slot ---- */

static int pool_slot_of(void *ctx)
{
	return (int)((struct slot *)ctx - pool.slots);
}

/* pool_sent - was seq a client message this slot's worker was sent? */
static bool pool_sent(const struct slot *s, uint32_t seq)
{
	return s->seq_first && seq >= s->seq_first && seq <= s->seq_last;
}

static void pool_on_hello(void *ctx)
{
	struct slot *s = ctx;
	if (s->state == SLOT_STARTING) {
		s->state = SLOT_IDLE;
		pthread_cond_broadcast(&pool.idle_cv);
	}
}

static enum mon_pending pool_on_answer(void *ctx, uint32_t seq, struct ipc_bytes msg)
{
	struct slot *s = ctx;
	struct pending *p = pending_find(pool_slot_of(ctx), seq);
	if (!p)
		return pool_sent(s, seq) ? MON_GAVE_UP : MON_NEVER; /* its HTTP request gave up */
	if (p->done)
		return MON_NEVER;
	s->served = true;
	spawn_served(&pool.throttle);
	if (msg.len && (p->answer = malloc(msg.len))) {
		memcpy(p->answer, msg.ptr, msg.len);
		p->alen = msg.len;
	}
	p->answer_no = p->ev_next++;
	p->done = true;
	pthread_cond_broadcast(&p->cv);
	return MON_PENDING;
}

static void pool_on_note(void *ctx, uint32_t rel, struct ipc_bytes msg)
{
	struct pending *p = pending_find(pool_slot_of(ctx), rel);
	if (!p)
		return; /* nobody to stream it to: MCP lets notifications go */
	struct event *e = malloc(sizeof(*e) + msg.len);
	if (!e)
		return;
	e->next = NULL;
	e->no = p->ev_next++;
	e->len = msg.len;
	memcpy(e->data, msg.ptr, e->len);
	if (p->qtail)
		p->qtail->next = e;
	else
		p->q = e;
	p->qtail = e;
	p->q_bytes += e->len;
	p->q_count++;
	/* a resumption replays what is kept: the newest notifications, within bounds */
	while (p->q != e && (p->q_count > SSE_REPLAY_EVENTS || p->q_bytes > SSE_REPLAY_BYTES)) {
		struct event *old = p->q;
		p->q = old->next;
		p->q_bytes -= old->len;
		p->q_count--;
		free(old);
	}
	pthread_cond_broadcast(&p->cv);
}

static enum mon_pending pool_on_accepted(void *ctx, uint32_t seq, struct ipc_bytes id)
{
	struct pending *p = pending_find(pool_slot_of(ctx), seq);
	if (!p)
		return pool_sent(ctx, seq) ? MON_GAVE_UP : MON_NEVER;
	if (!p->id) {
		p->id = strndup(id.ptr, id.len);
		p->accepted = true;
		pthread_cond_broadcast(&p->cv);
	}
	return MON_PENDING;
}

static void pool_on_session(void *ctx, const struct ipc_session *sess)
{
	(void)sess;
	((struct slot *)ctx)->initialized = true;
}

static void pool_on_state(void *ctx, bool busy)
{
	((struct slot *)ctx)->busy = busy;
}

static bool pool_on_quota(void *ctx, char *err, size_t errlen)
{
	return pool_quota(pool_slot_of(ctx), err, errlen);
}

static void pool_on_call(void *ctx, const struct ipc_call *c)
{
	note_call(pool_slot_of(ctx), c);
}

/* pool_on_user - the session's user as the master knows it (signed in, or "local") */
static const char *pool_on_user(void *ctx)
{
	const struct slot *s = ctx;
	return s->state == SLOT_SESSION || s->state == SLOT_ENDING ? s->user : NULL;
}

static const struct mon_ops pool_mon_ops = {
	.hello = pool_on_hello, .mcp_answer = pool_on_answer, .mcp_note = pool_on_note,
	.accepted = pool_on_accepted, .session = pool_on_session, .state = pool_on_state,
	.quota = pool_on_quota, .call = pool_on_call, .user = pool_on_user,
};

/* pool_token_deliver - a user token answer decided later (master/usertoken.c's thread): to
 * the same worker of the same session only, if it is still there */
static void pool_token_deliver(pid_t pid, const char *session, uint32_t seq, const struct utok_answer *a)
{
	pthread_mutex_lock(&pool.mu);
	for (int i = 0; i < pool.nslots; i++) {
		struct slot *s = &pool.slots[i];
		if ((s->state == SLOT_SESSION || s->state == SLOT_ENDING) && s->w.pid == pid && pid > 0 &&
		    !s->w.ended && strcmp(s->w.session, session) == 0) {
			mon_send_token(&s->w, seq, a);
			break;
		}
	}
	pthread_mutex_unlock(&pool.mu);
}

/* pool_phase - the contract's phase of a slot's worker. A slot being opened counts as in
 * session: its NOTE_ASSIGN is on the way, and what the worker says next belongs to the session. */
static unsigned pool_phase(const struct slot *s)
{
	switch (s->state) {
	case SLOT_STARTING: return IPC_PH_STARTING;
	case SLOT_IDLE: return IPC_PH_IDLE;
	case SLOT_OPENING: case SLOT_SESSION: return IPC_PH_SESSION;
	default: return IPC_PH_ENDING;
	}
}

/* from_worker - one message from slot i's worker, through the monitor (under mu) */
static int from_worker(int i, struct ipc_msg *m)
{
	struct slot *s = &pool.slots[i];
	struct mon_peer peer = { &s->w, pool_phase(s), &pool_mon_ops, s };
	return mon_dispatch(&peer, m);
}

/* slot_close_job - close a dead worker's channel without the lock, then free its slot */
static void slot_close_job(void *arg)
{
	struct slot *s = arg;
	channel_close(&s->w);
	pthread_mutex_lock(&pool.mu);
	s->state = SLOT_FREE;
	pthread_mutex_unlock(&pool.mu);
	pool_wake();
}

/* slot_died - reap bookkeeping for slot i (under mu) */
static void slot_died(int i, int status, const struct rusage *ru)
{
	struct slot *s = &pool.slots[i];
	char how[96];
	proc_status_text(status, how, sizeof(how));
	bool crash = !(WIFEXITED(status) && WEXITSTATUS(status) == 0) && s->state != SLOT_ENDING;
	/* before serving its session's first request (STARTING, IDLE, OPENING alike) it is a
	 * start-up failure, reported by spawn_ended once per throttle interval */
	bool startup = spawn_ended(&pool.throttle, &s->w, status, s->served, s->state == SLOT_ENDING);
	pool.start_failures += startup;
	if (crash)
		pool.crashes++;
	if (crash && !startup)
		log_error("worker pid %d (session %.8s…, user %s) %s", (int)s->w.pid, s->w.session,
			  s->user[0] ? s->user : "-", how);
	else
		log_debug("worker pid %d %s", (int)s->w.pid, how);
	if (s->state == SLOT_SESSION || s->state == SLOT_OPENING) {
		char sid[ACCT_SESSION_ID_CHARS + 1], why[128];
		snprintf(why, sizeof(why), "worker %s", how);
		acct_write(json_pack("{s:s, s:o, s:s, s:i, s:i, s:f, s:s, s:I, s:I, s:I}", "event",
				     "session_end", "user", pool_acct_text(s->user), "session", acct_session(s, sid, sizeof(sid)),
				     "worker_pid", (int)s->w.pid, "calls", (int)s->calls, "duration_s",
				     (double)(long)((mono_s() - s->opened) * 10) / 10, "reason", why,
				     "worker_cpu_user_ms",
				     (json_int_t)(ru->ru_utime.tv_sec * 1000 + ru->ru_utime.tv_usec / 1000),
				     "worker_cpu_sys_ms",
				     (json_int_t)(ru->ru_stime.tv_sec * 1000 + ru->ru_stime.tv_usec / 1000),
				     "worker_max_rss_kb", (json_int_t)ru->ru_maxrss));
	}
	for (struct pending *p = pool.pending; p; p = p->next)
		if (p->slot == i && !p->done) {
			p->gone = true;
			p->ended = s->state == SLOT_ENDING;
			if (p->ended)
				snprintf(p->gone_why, sizeof(p->gone_why), "%s", s->end_reason);
			else
				snprintf(p->gone_why, sizeof(p->gone_why), "worker %s", how);
			pthread_cond_broadcast(&p->cv);
		}
	pool_pending_sweep(); /* before the slot serves another session */
	s->w.pid = 0;
	spawn_forget(&s->w, false);
	s->quota_held = false;
	/* closing its channel waits for nng's threads: in the background, and the slot stays
	 * taken until then (nng's callbacks point at s->w) */
	s->state = SLOT_CLOSING;
	s->w.recv_fd = -1; /* not polled any more */
	if (!later_run(slot_close_job, s)) {
		channel_close(&s->w); /* could not queue it: here, then */
		s->state = SLOT_FREE;
	}
}

/* pool_reap - every child that ended */
static void pool_reap(void)
{
	int status;
	struct rusage ru;
	pid_t pid;
	const struct sandbox_backend *sb = sandbox_backend(pool.cfg);
	if (pthread_mutex_trylock(&pool.reap_mu) != 0) {
		pool.reap_again = true; /* a worker is being started: after it (slot_spawn_job) */
		return;
	}
	pool.reap_again = false;
	while ((pid = wait4(-1, &status, WNOHANG, &ru)) > 0) {
		bool found = false;
		for (int i = 0; i < pool.nslots && !found; i++) {
			struct slot *s = &pool.slots[i];
			if (s->state == SLOT_FREE || s->state == SLOT_SPAWNING)
				continue;
			if (s->w.pid == pid) {
				slot_died(i, status, &ru);
				found = true;
			} else if (sb->reaped && sb->reaped(&s->w, pid, status)) {
				found = true;
			}
		}
	}
	pthread_mutex_unlock(&pool.reap_mu);
}

/* pool_idle_limit - how long slot s's session may sit idle: less while it never made a call,
 * so sessions opened and abandoned give their workers back first */
double pool_idle_limit(const struct slot *s)
{
	int t = pool.cfg->session_timeout_s;
	if (!s->calls && pool.cfg->unused_session_timeout_s < t)
		t = pool.cfg->unused_session_timeout_s;
	return t;
}

/* pool_timers - idle sessions end; lingering workers are killed */
static void pool_timers(void)
{
	double now = mono_s();
	pool_pending_sweep();
	for (int i = 0; i < pool.nslots; i++) {
		struct slot *s = &pool.slots[i];
		if (s->state == SLOT_SESSION && s->inflight == 0 && !s->busy &&
		    now - s->last_active > pool_idle_limit(s))
			pool_end_session(i, s->calls ? "idle timeout" : "idle timeout (no tool call yet)");
		else if (s->state == SLOT_ENDING && now > s->kill_at && s->w.pid > 0)
			kill(s->w.pid, SIGKILL);
		else if (s->state == SLOT_STARTING && spawn_hello_overdue(&s->w, now))
			mon_end(&s->w, "said no HELLO within %d ms of its start", WORKER_HELLO_TIMEOUT_MS);
	}
}

void pool_loop(void)
{
	struct pollfd *p = calloc((size_t)pool.nslots + 2, sizeof(*p));
	int *idx = calloc((size_t)pool.nslots + 2, sizeof(int));
	if (!p || !idx)
		return;
	if (geteuid() == 0 && setpriority(PRIO_PROCESS, (id_t)gettid(), POOL_LOOP_NICE) != 0)
		log_debug("the main loop: cannot raise its priority: %s", strerror(errno));
	for (;;) {
		pthread_mutex_lock(&pool.mu);
		pool_avail();
		int n = 0;
		p[n++] = (struct pollfd){ .fd = sig_fd(), .events = POLLIN };
		p[n++] = (struct pollfd){ .fd = pool.wake[0], .events = POLLIN };
		for (int i = 0; i < pool.nslots; i++)
			if (pool.slots[i].state > SLOT_SPAWNING && pool.slots[i].w.recv_fd >= 0) {
				idx[n] = i;
				p[n++] = (struct pollfd){ .fd = pool.slots[i].w.recv_fd, .events = POLLIN };
			}
		pthread_mutex_unlock(&pool.mu);
		if (poll(p, (nfds_t)n, POOL_TICK_MS) < 0 && errno != EINTR)
			break;
		char buf[64];
		while (read(pool.wake[0], buf, sizeof(buf)) > 0)
			;
		unsigned sig = sig_take();
		pthread_mutex_lock(&pool.mu);
		for (int k = 2; k < n; k++) {
			if (!(p[k].revents & POLLIN))
				continue;
			struct slot *s = &pool.slots[idx[k]];
			for (int guard = 0; guard < 256 && s->state != SLOT_FREE && s->w.pid > 0; guard++) {
				struct ipc_msg m;
				int rc = chan_recv(s->w.sock, &m, NNG_FLAG_NONBLOCK, NULL);
				if (rc == -EAGAIN || rc == -ESHUTDOWN)
					break;
				if (rc == -EPROTO) {
					mon_end(&s->w, "sent an undecodable message");
					break;
				}
				if (rc == 0) {
					int dr = from_worker(idx[k], &m);
					ipc_msg_free(&m);
					if (dr != 0)
						break;
				}
			}
		}
		if ((sig & SIG_CHLD) || pool.reap_again)
			pool_reap();
		pool_timers();
		pthread_mutex_unlock(&pool.mu);
		if ((sig & SIG_HUP) && pool.on_hup)
			pool.on_hup();
		if (sig & SIG_TERM)
			break;
	}
	free(p);
	free(idx);
}

/* pool_shutdown - end every session and worker; a restart ends open sessions */
void pool_shutdown(void)
{
	tstore_close(); /* what is pending is written before the grants are wiped */
	if (utok_enabled())
		utok_shutdown();
	later_spawn_drain(); /* workers being started are on their slots first */
	pthread_mutex_lock(&pool.mu);
	pool.stopping = true;
	/* tell every worker first, then collect them: they leave in parallel */
	for (int i = 0; i < pool.nslots; i++) {
		struct slot *s = &pool.slots[i];
		if (s->state == SLOT_SESSION)
			pool_end_session(i, "server shutting down");
		for (struct pending *q = pool.pending; q; q = q->next)
			if (q->slot == i && !q->done) {
				q->gone = true;
				q->ended = true;
				snprintf(q->gone_why, sizeof(q->gone_why), "the server is shutting down");
				pthread_cond_broadcast(&q->cv);
			}
	}
	/* Kubernetes workers delete their claims as they leave: wait for them (in parallel) */
	for (int waited = 0; pool.cfg->kubernetes && waited < 6000; waited += 20) {
		bool left = false;
		for (int i = 0; i < pool.nslots; i++)
			if (pool.slots[i].state == SLOT_ENDING && pool.slots[i].w.pid > 0 &&
			    waitpid(pool.slots[i].w.pid, NULL, WNOHANG) == 0)
				left = true;
		if (!left)
			break;
		pthread_mutex_unlock(&pool.mu);
		usleep(POOL_END_POLL_MS * 1000);
		pthread_mutex_lock(&pool.mu);
	}
	/* every sandbox's processes go at once; their directories go after, in parallel */
	for (int i = 0; i < pool.nslots; i++)
		if (pool.slots[i].state != SLOT_FREE && pool.slots[i].w.sandbox_pid > 0)
			kill(-pool.slots[i].w.sandbox_pid, SIGKILL);
	for (int i = 0; i < pool.nslots; i++) {
		struct slot *s = &pool.slots[i];
		if (s->state == SLOT_FREE || s->state == SLOT_CLOSING)
			continue; /* a closing one is later_drain's */
		spawn_stop(&s->w, 300, false); /* its sandbox's removal runs in the background */
		s->state = SLOT_FREE;
	}
	pthread_mutex_unlock(&pool.mu);
	later_spawn_drain(); /* sandbox starts whose workers went undo themselves, into later's queue */
	later_drain();
	spawn_runtime_dir_remove(pool.rundir);
	if (pool.acct && pool.acct != stderr)
		fclose(pool.acct);
}

/* pool_metrics - Prometheus text exposition (under mu) */
void pool_metrics(char **out, size_t *len)
{
	FILE *f = open_memstream(out, len);
	if (!f)
		return;
	int open = 0, idle = 0, busy = 0, starting = 0;
	for (int i = 0; i < pool.nslots; i++) {
		struct slot *s = &pool.slots[i];
		open += s->state == SLOT_SESSION;
		idle += s->state == SLOT_IDLE;
		starting += s->state == SLOT_SPAWNING || s->state == SLOT_STARTING;
		busy += s->state == SLOT_SESSION && s->busy;
	}
	fprintf(f, "# HELP kode_gopher_sessions_open MCP sessions open now.\n"
		   "# TYPE kode_gopher_sessions_open gauge\nkode_gopher_sessions_open %d\n", open);
	fprintf(f, "# HELP kode_gopher_workers Worker processes by state.\n# TYPE kode_gopher_workers gauge\n"
		   "kode_gopher_workers{state=\"idle\"} %d\nkode_gopher_workers{state=\"starting\"} %d\n"
		   "kode_gopher_workers{state=\"busy\"} %d\nkode_gopher_workers{state=\"session_idle\"} %d\n",
		idle, starting, busy, open - busy);
	fprintf(f, "# HELP kode_gopher_sandboxes Sandboxes claimed, per user.\n# TYPE kode_gopher_sandboxes gauge\n");
	for (int i = 0; i < pool.nslots; i++) {
		struct slot *s = &pool.slots[i];
		if (!s->quota_held)
			continue;
		bool first = true;
		for (int k = 0; k < i; k++)
			first &= !(pool.slots[k].quota_held && strcmp(pool.slots[k].user, s->user) == 0);
		if (!first)
			continue;
		int n = 0;
		for (int k = i; k < pool.nslots; k++)
			n += pool.slots[k].quota_held && strcmp(pool.slots[k].user, s->user) == 0;
		char u[64];
		fprintf(f, "kode_gopher_sandboxes{user=\"%s\"} %d\n", json_safe(s->user, u, sizeof(u)), n);
	}
	fprintf(f, "# HELP kode_gopher_tool_calls_total Tool calls by tool and result kind.\n"
		   "# TYPE kode_gopher_tool_calls_total counter\n");
	for (int k = 0; k < pool.ncalls; k++)
		fprintf(f, "kode_gopher_tool_calls_total{tool=\"%s\",kind=\"%s\"} %lu\n", pool.calls[k].tool,
			pool.calls[k].kind, pool.calls[k].n);
	static const char *const names[2] = { "build", "run" };
	for (int h = 0; h < 2; h++) {
		unsigned long *hist = h ? pool.run_hist : pool.build_hist, cum = 0;
		fprintf(f, "# HELP kode_gopher_%s_seconds execute_go_code %s latency.\n"
			   "# TYPE kode_gopher_%s_seconds histogram\n", names[h], names[h], names[h]);
		for (int k = 0; k < 12; k++) {
			cum += hist[k];
			if (k < 11)
				fprintf(f, "kode_gopher_%s_seconds_bucket{le=\"%g\"} %lu\n", names[h], hist_bounds[k], cum);
			else
				fprintf(f, "kode_gopher_%s_seconds_bucket{le=\"+Inf\"} %lu\n", names[h], cum);
		}
		fprintf(f, "kode_gopher_%s_seconds_sum %.3f\nkode_gopher_%s_seconds_count %lu\n", names[h],
			h ? pool.run_sum : pool.build_sum, names[h], h ? pool.run_n : pool.build_n);
	}
	fprintf(f, "# HELP kode_gopher_worker_crashes_total Workers that died unasked.\n"
		   "# TYPE kode_gopher_worker_crashes_total counter\nkode_gopher_worker_crashes_total %lu\n",
		pool.crashes);
	fprintf(f, "# HELP kode_gopher_workers_started_total Worker processes started.\n"
		   "# TYPE kode_gopher_workers_started_total counter\nkode_gopher_workers_started_total %u\n"
		   "# HELP kode_gopher_worker_start_failures_total Workers that died before serving any "
		   "request of a session.\n# TYPE kode_gopher_worker_start_failures_total counter\n"
		   "kode_gopher_worker_start_failures_total %lu\n"
		   "# HELP kode_gopher_workers_stopped 1 when a configuration error stopped starting "
		   "workers.\n# TYPE kode_gopher_workers_stopped gauge\nkode_gopher_workers_stopped %d\n",
		pool.nspawned, pool.start_failures, pool.throttle.stopped[0] ? 1 : 0);
	fclose(f);
}
