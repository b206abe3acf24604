/*
 * proc.c - see proc.h.
 */
#include "lib/proc.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* proc_status_text - see proc.h */
const char *proc_status_text(int status, char *buf, size_t cap)
{
	if (WIFEXITED(status))
		snprintf(buf, cap, "exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, cap, "killed by signal %d (SIG%s)%s", WTERMSIG(status),
			 sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?",
			 WCOREDUMP(status) ? ", core dumped" : "");
	else
		snprintf(buf, cap, "status 0x%x", status);
	return buf;
}

/* proc_child_setup - see proc.h */
void proc_child_setup(pid_t parent, bool stdout_to_stderr)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	int devnull = open("/dev/null", O_RDWR);
	if (devnull >= 0) {
		dup2(devnull, STDIN_FILENO);
		dup2(stdout_to_stderr ? STDERR_FILENO : devnull, STDOUT_FILENO);
		if (devnull > 2)
			close(devnull);
	}
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	closefrom(3);
}
