/*
 * channel.c - the master's end of one worker's channel: an nng pair1 socket on an ipc:// path
 * in the master's private runtime directory (ipc/chan.c does the framing). Only the pid the
 * master forked may connect. Used by supervision (master/spawn.c), which opens and closes it,
 * and by everything that answers a worker (master/monitor.c, the sandbox backends, the
 * transports), which sends on it.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "master/master.h"
#include "policy/limits.h"

/* channel_pipe_check - nng calls this before admitting a connection: only our child may talk */
static void channel_pipe_check(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	struct worker *w = arg;
	uint64_t pid = 0;
	(void)ev;
	/* posix_spawn returns once the child has exec'd, and the child may dial before the
	 * master has stored its pid: refused, its HELLO would be lost with the pipe */
	for (int ms = 0; __atomic_load_n(&w->spawning, __ATOMIC_SEQ_CST) && ms < CHANNEL_SPAWN_WAIT_MS;
	     ms += CHANNEL_SPAWN_POLL_MS)
		usleep(CHANNEL_SPAWN_POLL_MS * 1000);
	if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_PID, &pid) != 0 ||
	    pid != (uint64_t)__atomic_load_n(&w->pid, __ATOMIC_SEQ_CST)) {
		log_warn("refusing an ipc connection from pid %d (expected worker %d)", (int)pid, (int)w->pid);
		nng_pipe_close(p);
	}
}

/* channel_pipe_up - the worker's pipe is connected, or gone: sends may wait only while it lives */
static void channel_pipe_up(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	(void)p;
	struct worker *w = arg;
	__atomic_store_n(&w->connected, ev == NNG_PIPE_EV_ADD_POST, __ATOMIC_SEQ_CST);
}

/* channel_listen - see master.h */
int channel_listen(struct worker *w)
{
	char url[300];
	snprintf(url, sizeof(url), "ipc://%s", w->ipc_path);
	int r = chan_listen(&w->sock, url);
	if (r)
		return r;
	nng_pipe_notify(w->sock, NNG_PIPE_EV_ADD_PRE, channel_pipe_check, w);
	nng_pipe_notify(w->sock, NNG_PIPE_EV_ADD_POST, channel_pipe_up, w);
	nng_pipe_notify(w->sock, NNG_PIPE_EV_REM_POST, channel_pipe_up, w);
	w->recv_fd = chan_recv_fd(w->sock);
	/* the socket file must not be reachable by anyone else even if the dir were: it is the
	 * worker's own identity's (spawn_worker gives it), or root's */
	chmod(w->ipc_path, 0600);
	return 0;
}

/* channel_send - see master.h */
int channel_send(struct worker *w, struct ipc_buf *b)
{
	if (!channel_live(w)) {
		ipc_buf_free(b);
		return -ESRCH;
	}
	return channel_send_checked(w, b);
}

/* channel_send_checked - see master.h */
int channel_send_checked(struct worker *w, struct ipc_buf *b)
{
	return chan_send_unless_gone(w->sock, b, &w->connected);
}

/* channel_close - see master.h */
void channel_close(struct worker *w)
{
	nng_close(w->sock);
	w->recv_fd = -1;
	unlink(w->ipc_path);
}
