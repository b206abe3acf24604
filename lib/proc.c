/*
 * proc.c - see proc.h.
 */
#include "lib/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/mono.h"

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

/* pidfd - a descriptor that becomes readable when pid ends; -1 with errno */
static int pidfd(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* ms_left - milliseconds from now to end (mono_ms), at least 0 */
static int ms_left(int64_t end)
{
	int64_t ms = end - mono_ms();
	return ms < 0 ? 0 : ms > 1 << 30 ? 1 << 30 : (int)ms;
}

/* proc_wait_exit - see proc.h */
int proc_wait_exit(pid_t pid, int timeout_ms, int *status)
{
	int st = 0;
	pid_t got = waitpid(pid, &st, WNOHANG);
	if (got == 0 && timeout_ms > 0) {
		int fd = pidfd(pid);
		int64_t end = mono_ms() + timeout_ms;
		if (fd >= 0) {
			struct pollfd p = { .fd = fd, .events = POLLIN };
			while (poll(&p, 1, ms_left(end)) < 0 && errno == EINTR)
				;
			close(fd);
		} else {
			/* no pidfds (Linux < 5.3): look again every millisecond */
			while (ms_left(end) > 0 && (got = waitpid(pid, &st, WNOHANG)) == 0)
				usleep(1000);
		}
		if (got == 0)
			got = waitpid(pid, &st, WNOHANG);
	}
	if (got < 0 && errno != ECHILD)
		return -errno;
	if (got > 0 && status)
		*status = st;
	return got != 0;
}

/* proc_wait_gone - see proc.h */
size_t proc_wait_gone(const pid_t *pids, size_t n, int timeout_ms)
{
	struct pollfd p[64];
	size_t left = 0, unwatched = 0;
	for (size_t i = 0; i < n; i++) {
		int fd = left < sizeof(p) / sizeof(p[0]) ? pidfd(pids[i]) : -1;
		if (fd >= 0)
			p[left++] = (struct pollfd){ .fd = fd, .events = POLLIN };
		else if (errno != ESRCH)
			unwatched++; /* (counted as running: the caller's own check decides) */
	}
	int64_t end = mono_ms() + timeout_ms;
	size_t running = left;
	while (running && ms_left(end) > 0) {
		int r = poll(p, (nfds_t)left, ms_left(end));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		running = 0;
		for (size_t i = 0; i < left; i++) {
			if (p[i].fd >= 0 && p[i].revents) {
				close(p[i].fd);
				p[i].fd = -1; /* poll skips it from now on */
			}
			running += p[i].fd >= 0;
		}
	}
	for (size_t i = 0; i < left; i++)
		if (p[i].fd >= 0)
			close(p[i].fd);
	return running + unwatched;
}
