/*
 * later.c - work the shared server's main loop must not wait for, done by a thread of its own.
 *
 * The main loop routes every session's messages, so whatever a session's end leaves to do that
 * can take long (reaping a jail, removing its cgroups and directory, closing a channel whose
 * nng threads are busy) is queued here and done by one long-lived thread at a lower CPU
 * priority than serving (nice applies per thread on Linux). later_drain, for a shutdown, adds
 * threads at the normal priority and waits until nothing is left.
 *
 * Starting children has threads of their own, the spawners: one for the shared server's workers
 * (kg-workers), one for their sandboxes (kg-sandboxes), so that a slow sandbox start does not
 * hold up the next worker; long-lived, because a child's parent-death signal (lib/proc.c) is
 * tied to the thread that started it; each runs its starts in the order they were asked for.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "ipc/log.h"
#include "master/master.h"
#include "policy/limits.h"

struct job {
	void (*fn)(void *);
	void *arg;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t work, idle;
	struct job *q;
	size_t n, cap;
	int busy;      /* jobs running */
	bool started;  /* the long-lived thread exists */
	bool draining; /* helpers may exit when the queue is empty */
} lt = { .mu = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER,
	 .idle = PTHREAD_COND_INITIALIZER };

/* run_one - take one job and run it without the lock (under lt.mu) */
static void run_one(void)
{
	struct job j = lt.q[--lt.n];
	lt.busy++;
	pthread_mutex_unlock(&lt.mu);
	j.fn(j.arg);
	pthread_mutex_lock(&lt.mu);
	lt.busy--;
	if (lt.n == 0 && lt.busy == 0)
		pthread_cond_broadcast(&lt.idle);
}

/* later_thread - run queued jobs; the first thread lives on, drain helpers do not */
static void *later_thread(void *arg)
{
	bool helper = arg != NULL;
	/* serving comes first. Drain helpers (a shutdown: nothing left to serve) keep the normal
	 * priority, or a loaded host would stall the exit. */
	if (!helper && setpriority(PRIO_PROCESS, (id_t)gettid(), LATER_NICE) != 0)
		log_debug("background thread: cannot lower its priority: %s", strerror(errno));
	pthread_mutex_lock(&lt.mu);
	for (;;) {
		while (lt.n == 0 && !(helper && lt.draining))
			pthread_cond_wait(&lt.work, &lt.mu);
		if (lt.n == 0)
			break;
		run_one();
	}
	pthread_mutex_unlock(&lt.mu);
	return NULL;
}

/* thread_detached - fn(arg) on a detached thread of its own; false if none could be made */
static bool thread_detached(void *(*fn)(void *), void *arg)
{
	pthread_t t;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	bool ok = pthread_create(&t, &a, fn, arg) == 0;
	pthread_attr_destroy(&a);
	return ok;
}

/* thread_start - one more background thread; false if none could be made */
static bool thread_start(bool helper)
{
	return thread_detached(later_thread, helper ? (void *)1 : NULL);
}

/* later_run - see master.h */
bool later_run(void (*fn)(void *), void *arg)
{
	pthread_mutex_lock(&lt.mu);
	if (lt.n == lt.cap) {
		size_t cap = lt.cap ? lt.cap * 2 : 16;
		struct job *q = realloc(lt.q, cap * sizeof(*q));
		if (q) {
			lt.q = q;
			lt.cap = cap;
		}
	}
	if (!lt.started)
		lt.started = thread_start(false);
	bool queued = lt.started && lt.n < lt.cap;
	if (queued) {
		lt.q[lt.n++] = (struct job){ fn, arg };
		pthread_cond_signal(&lt.work);
	}
	pthread_mutex_unlock(&lt.mu);
	return queued;
}

/* later_drain - see master.h */
void later_drain(void)
{
	pthread_mutex_lock(&lt.mu);
	/* a big batch (a shutdown): in parallel, each job mostly waits on the kernel */
	lt.draining = true;
	for (size_t k = 1; k < lt.n / 2 && k < LATER_DRAIN_THREADS; k++)
		if (!thread_start(true))
			break;
	pthread_cond_broadcast(&lt.work);
	while (lt.n > 0) /* this thread helps too */
		run_one();
	while (lt.busy > 0)
		pthread_cond_wait(&lt.idle, &lt.mu);
	lt.draining = false;
	pthread_mutex_unlock(&lt.mu);
}

/* ---- the spawners ---- */

struct spawn_job {
	struct spawn_job *next;
	void (*fn)(void *);
	void *arg;
};

static struct spawner {
	const char *name;
	pthread_mutex_t mu;
	pthread_cond_t work, idle;
	struct spawn_job *head, *tail;
	bool started, busy;
} spawners[] = {
	[LATER_WORKERS] = { .name = "kg-workers", .mu = PTHREAD_MUTEX_INITIALIZER,
			    .work = PTHREAD_COND_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER },
	[LATER_SANDBOXES] = { .name = "kg-sandboxes", .mu = PTHREAD_MUTEX_INITIALIZER,
			      .work = PTHREAD_COND_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER },
};

static void *spawner_thread(void *arg)
{
	struct spawner *sp = arg;
	pthread_setname_np(pthread_self(), sp->name); /* for ps, perf and tests */
	/* below the main loop (POOL_LOOP_NICE as root), level with the jails it starts */
	if (setpriority(PRIO_PROCESS, (id_t)gettid(), SPAWNER_NICE) != 0)
		log_debug("%s thread: cannot set its priority: %s", sp->name, strerror(errno));
	pthread_mutex_lock(&sp->mu);
	for (;;) {
		while (!sp->head)
			pthread_cond_wait(&sp->work, &sp->mu);
		struct spawn_job *j = sp->head;
		sp->head = j->next;
		if (!sp->head)
			sp->tail = NULL;
		sp->busy = true;
		pthread_mutex_unlock(&sp->mu);
		j->fn(j->arg);
		free(j);
		pthread_mutex_lock(&sp->mu);
		sp->busy = false;
		if (!sp->head)
			pthread_cond_broadcast(&sp->idle);
	}
	return NULL;
}

/* later_spawn - see master.h */
bool later_spawn(enum later_spawner which, void (*fn)(void *), void *arg)
{
	struct spawner *sp = &spawners[which];
	struct spawn_job *j = malloc(sizeof(*j));
	if (!j)
		return false;
	*j = (struct spawn_job){ NULL, fn, arg };
	pthread_mutex_lock(&sp->mu);
	if (!sp->started)
		sp->started = thread_detached(spawner_thread, sp);
	bool queued = sp->started;
	if (queued) {
		if (sp->tail)
			sp->tail->next = j;
		else
			sp->head = j;
		sp->tail = j;
		pthread_cond_signal(&sp->work);
	}
	pthread_mutex_unlock(&sp->mu);
	if (!queued)
		free(j);
	return queued;
}

/* later_spawn_drain - see master.h */
void later_spawn_drain(void)
{
	for (size_t i = 0; i < sizeof(spawners) / sizeof(spawners[0]); i++) {
		struct spawner *sp = &spawners[i];
		pthread_mutex_lock(&sp->mu);
		while (sp->head || sp->busy)
			pthread_cond_wait(&sp->idle, &sp->mu);
		pthread_mutex_unlock(&sp->mu);
	}
}
