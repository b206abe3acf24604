/*
 * limits.h - the named limits of supervision and the worker contract, each with its unit
 * (Dovecot names its settings; so do we). Read by master/spawn.c, master/pool.c,
 * master/stdio.c and worker/main.c. Other components' limits move here as they are touched.
 */
#ifndef KG_POLICY_LIMITS_H
#define KG_POLICY_LIMITS_H

/* A worker that has not said HELLO this long after it was started is killed. */
#define WORKER_HELLO_TIMEOUT_MS 10000

/* A worker that dies before serving any request of a session is a start-up failure: the next
 * start waits FIRST, then twice as long after each further failure, at most MAX; the first
 * request a worker serves resets it (Postfix's throttle). */
#define WORKER_START_BACKOFF_FIRST_MS 500
#define WORKER_START_BACKOFF_MAX_MS 60000

/* How long a worker told REQ_SHUTDOWN may take to leave before it is killed: the Kubernetes
 * backend deletes its SandboxClaim on the way out. */
#define WORKER_LEAVE_LOCAL_MS 800
#define WORKER_LEAVE_KUBE_MS 6000

/* What a session's end leaves to do (reap and remove its sandbox, close its channel) is done by
 * a background thread of the master at this nice value (serving runs at 0); a shutdown drains
 * it with up to this many threads (master/later.c). */
#define LATER_NICE 10
#define LATER_DRAIN_THREADS 8

/* Workers started ahead of need (the shared server's warm pool) run their start-up at this nice
 * value, as root, and get 0 back when a session takes them. */
#define WORKER_PRESTART_NICE 10

/* --credentials user: REQ_TOKEN requests one worker may make, a burst and then per minute
 * (the worker caches tokens; the master's answer is refused above this, not the worker ended). */
#define WORKER_TOKEN_BURST 20
#define WORKER_TOKEN_PER_MINUTE 30

#endif
