/*
 * sig.c - signals for the master's event loop (nginx style: handlers only set flags).
 *
 * SIGCHLD, SIGTERM/SIGINT and SIGHUP set a bit and write one byte to a self-pipe that the loop
 * polls; the loop then reaps children, shuts down, or (serve --http) reloads its TLS
 * certificate on SIGHUP, where stdio serve ends as on SIGTERM. SIGPIPE is ignored: a closed stdout shows up
 * as EPIPE from write(2), which the loop handles.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "master/master.h"

static int sig_pipe[2] = { -1, -1 };
static unsigned sig_pending; /* touched only with __atomic builtins */

/* sig_handler - remember and wake the loop; nothing else is safe here */
static void sig_handler(int signo)
{
	int saved = errno;
	__atomic_fetch_or(&sig_pending, signo == SIGCHLD ? SIG_CHLD : signo == SIGHUP ? SIG_HUP : SIG_TERM,
			  __ATOMIC_SEQ_CST);
	ssize_t w = write(sig_pipe[1], "x", 1);
	(void)w;
	errno = saved;
}

/* sig_init - install the handlers and the self-pipe */
int sig_init(void)
{
	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
		return -errno;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = sig_handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

int sig_fd(void)
{
	return sig_pipe[0];
}

/* sig_take - drain the pipe and return what happened since the last call */
unsigned sig_take(void)
{
	char buf[64];
	while (read(sig_pipe[0], buf, sizeof(buf)) > 0)
		;
	return __atomic_exchange_n(&sig_pending, 0u, __ATOMIC_SEQ_CST);
}
