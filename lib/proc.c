/*
 * proc.c - see proc.h.
 */
#include "lib/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
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

/* proc_child_enter - see proc.h */
void proc_child_enter(void)
{
	const char *v = getenv(PROC_PARENT_ENV);
	if (!v)
		return;
	long parent = strtol(v, NULL, 10);
	unsetenv(PROC_PARENT_ENV);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != (pid_t)parent)
		_exit(1); /* the parent died before we could tie ourselves to it */
}

/* proc_spawn - see proc.h. posix_spawn has vfork's semantics: unlike fork it neither copies the
 * parent's page tables nor leaves its threads copy-on-write faults to take afterwards, which
 * cost the shared server's main loop, the thread that routes every session's messages, 2-24 ms
 * per start on a loaded host. What a forked child did before exec is in the
 * attributes, except the parent-death signal, which the child sets itself (proc_child_enter),
 * and the nice value, which it inherits from this thread (changed around the call). */
pid_t proc_spawn(const char *path, char *const argv[], const struct proc_how *how)
{
	extern char **environ;
	size_t n = 0;
	while (environ[n])
		n++;
	char **envp = malloc((n + 2) * sizeof(*envp));
	char parent[48];
	if (!envp)
		return -ENOMEM;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], PROC_PARENT_ENV "=", strlen(PROC_PARENT_ENV) + 1) != 0)
			envp[k++] = environ[i];
	snprintf(parent, sizeof(parent), PROC_PARENT_ENV "=%d", (int)getpid());
	envp[k++] = parent;
	envp[k] = NULL;

	posix_spawnattr_t a;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_init(&a);
	posix_spawn_file_actions_init(&fa);
	sigset_t none, def;
	sigemptyset(&none);
	sigemptyset(&def);
	sigaddset(&def, SIGPIPE); /* ignored here; an ignored signal would stay ignored past exec */
	posix_spawnattr_setsigmask(&a, &none);
	posix_spawnattr_setsigdefault(&a, &def);
	posix_spawnattr_setflags(&a, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
				     (how->setsid ? POSIX_SPAWN_SETSID : 0));
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
	if (how->stdout_to_stderr)
		posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
	else
		posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);

	id_t self = (id_t)gettid();
	errno = 0;
	int was = getpriority(PRIO_PROCESS, self);
	bool renice = errno == 0 && was != how->nice && setpriority(PRIO_PROCESS, self, how->nice) == 0;
	pid_t pid;
	int r = posix_spawn(&pid, path, &fa, &a, argv, envp);
	if (renice)
		(void)!setpriority(PRIO_PROCESS, self, was); /* back: allowed whenever the lowering was */
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&a);
	free(envp);
	return r ? -r : pid;
}
