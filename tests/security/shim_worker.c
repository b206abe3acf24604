/*
 * shim_worker.c - an LD_PRELOAD shim for tests/security/: it acts inside a `kode-gopher worker`
 * process (and no other).
 *
 * KG_SHIM_PROBE=PATH[:PATH...] and KG_SHIM_PROBE_PORT=N (worker_confinement.test.mjs): once
 * the worker has confined itself (its curl_global_init, which follows the Landlock step), try
 * to open each PATH and to connect to 127.0.0.1:N, as a compromised worker would, and print one
 * line each to stderr: "kg-probe: open PATH: RESULT", "kg-probe: connect PORT: RESULT".
 *
 * KG_SHIM_TARGETS=FILE (privsep.test.mjs): a worker started while FILE exists reads it at its
 * start (lines "pid N", "sock PATH", "dir PATH", "ipc PATH": another session's worker, its
 * agent's socket, its sandbox directory, its channel to the master) and, once confined (the
 * same point as the probe above), attacks them as a taken-over worker would, and tries to get
 * privilege back; one line each to stderr: "kg-attack: WHAT: RESULT" (RESULT "ok" or strerror).
 * KG_SHIM_MASTER=1 (privsep.test.mjs): the same attacks on the worker's own master (its parent),
 * for a serve whose workers share its uid.
 *
 * KG_SHIM_NNP (supervision.test.mjs): prctl(PR_SET_NO_NEW_PRIVS) fails as it would on a
 * machine that does not let the worker lock itself down:
 *   fail   - the call returns -1 with EPERM (the worker reports it and exits)
 *   crash  - the process aborts inside the call (a worker that dies while locking down)
 *   stall  - the worker hangs before it dials the master (curl_global_init never returns),
 *            so it never says HELLO
 * KG_SHIM_RELAY_PATH=PATH (tests/k8s/worker-boundary.test.mjs): the worker's first request to
 * its agent ("GET /health ...", sent to the master's relay on the Kubernetes backend) goes out
 * as "GET PATH" instead, as a compromised worker reaching for the API server would send it.
 *
 * Built by the test with `cc -shared -fPIC`; never part of kode-gopher.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

static int shim_is_worker;
static char shim_targets[4096]; /* KG_SHIM_TARGETS's text, read while the worker is root */

/* glibc passes argc and argv to constructors: the role is argv[1] before any title rewrite */
__attribute__((constructor)) static void shim_init(int argc, char **argv)
{
	shim_is_worker = argc > 1 && strcmp(argv[1], "worker") == 0;
	const char *t = getenv("KG_SHIM_TARGETS");
	int fd = shim_is_worker && t ? open(t, O_RDONLY | O_CLOEXEC) : -1;
	if (fd >= 0) {
		ssize_t n = read(fd, shim_targets, sizeof(shim_targets) - 1);
		shim_targets[n > 0 ? n : 0] = '\0';
		close(fd);
	}
}

/* target - the value of "key VALUE" in the targets, or NULL */
static const char *target(const char *key, char *out, size_t cap)
{
	size_t kl = strlen(key);
	for (const char *p = shim_targets; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, key, kl) == 0 && p[kl] == ' ') {
			const char *v = p + kl + 1, *e = strchr(v, '\n');
			snprintf(out, cap, "%.*s", (int)(e ? (size_t)(e - v) : strlen(v)), v);
			return out;
		}
	return NULL;
}

static void said(const char *what, int r, int e)
{
	fprintf(stderr, "kg-attack: %s: %s\n", what, r >= 0 ? "ok" : strerror(e));
}

/* connect_unix - connect to the unix socket at path; 0 or -1 with errno */
static int connect_unix(const char *path)
{
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	int r = s >= 0 ? connect(s, (struct sockaddr *)&a, sizeof(a)) : -1;
	int e = errno;
	if (s >= 0)
		close(s);
	errno = e;
	return r;
}

/* open_ro - open path read-only (a directory too); 0 or -1 with errno */
static int open_ro(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int e = errno;
	if (fd >= 0)
		close(fd);
	errno = e;
	return fd >= 0 ? 0 : -1;
}

/* attack_process - what a taken-over worker tries against another process (who: "the other
 * worker", "the master"): signal it, ptrace it, open its /proc files, read its memory, take a
 * descriptor from it */
static void attack_process(pid_t pid, const char *who)
{
	char p[1200], what[96];
	int r = kill(pid, 0);
	snprintf(what, sizeof(what), "signal %s", who);
	said(what, r, errno);
	r = (int)ptrace(PTRACE_SEIZE, pid, 0, 0);
	snprintf(what, sizeof(what), "ptrace %s", who);
	said(what, r, errno);
	if (r == 0)
		ptrace(PTRACE_DETACH, pid, 0, 0);
	static const char *const files[] = { "environ", "mem", "fd", "maps" };
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(p, sizeof(p), "/proc/%d/%s", (int)pid, files[i]);
		r = open_ro(p);
		snprintf(what, sizeof(what), "open %s's /proc/PID/%s", who, files[i]);
		said(what, r, errno);
	}
	char buf[16];
	struct iovec local = { buf, sizeof(buf) }, remote = { (void *)0x400000, sizeof(buf) };
	r = (int)process_vm_readv(pid, &local, 1, &remote, 1, 0);
	snprintf(what, sizeof(what), "read %s's memory", who);
	said(what, r, errno);
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	r = pfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pfd, 0, 0);
	snprintf(what, sizeof(what), "take a descriptor of %s", who);
	said(what, r, errno);
	r = pfd < 0 ? -1 : (int)syscall(SYS_pidfd_send_signal, pfd, 0, NULL, 0);
	snprintf(what, sizeof(what), "signal %s through a pidfd", who);
	said(what, r, errno);
	if (pfd >= 0)
		close(pfd);
}

/* shim_attack - what a taken-over worker tries against another session, and to regain root */
static void shim_attack(void)
{
	char v[1024], p[1200];
	int r;
	if (target("pid", v, sizeof(v)))
		attack_process((pid_t)atoi(v), "the other worker");
	if (getenv("KG_SHIM_MASTER"))
		attack_process(getppid(), "the master");
	if (target("sock", v, sizeof(v))) {
		r = connect_unix(v);
		said("connect to the other session's agent socket", r, errno);
	}
	if (target("ipc", v, sizeof(v))) {
		r = connect_unix(v);
		said("connect to the other worker's channel to the master", r, errno);
	}
	if (target("dir", v, sizeof(v))) {
		static const char *const subs[] = { "", "/app", "/state", "/sock", "/lock" };
		for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
			snprintf(p, sizeof(p), "%s%s", v, subs[i]);
			r = open_ro(p);
			char what[64];
			snprintf(what, sizeof(what), "open the other sandbox's DIR%s", subs[i]);
			said(what, r, errno);
		}
	}
	/* privilege back */
	r = setuid(0);
	said("setuid 0", r, errno);
	r = setgid(0);
	said("setgid 0", r, errno);
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	memset(d, 0xff, sizeof(d));
	r = (int)syscall(SYS_capset, &h, d);
	said("capset every capability", r, errno);
	r = (int)syscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SYS_ADMIN, 0, 0);
	said("raise an ambient capability", r, errno);
	r = (int)syscall(SYS_prctl, PR_SET_SECUREBITS, 0, 0, 0, 0);
	said("clear the securebits", r, errno);
	r = (int)syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 0, 0, 0, 0);
	said("clear no_new_privs", r, errno);
	/* the controls: the probe can do what is its own */
	r = kill(getpid(), 0);
	said("control: signal itself", r, errno);
	r = open_ro("/proc/self/status");
	said("control: open its own /proc/self/status", r, errno);
	fprintf(stderr, "kg-attack: done\n");
}

int prctl(int option, ...)
{
	va_list ap;
	va_start(ap, option);
	unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long);
	unsigned long a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
	va_end(ap);
	const char *mode = getenv("KG_SHIM_NNP");
	if (shim_is_worker && option == PR_SET_NO_NEW_PRIVS && mode && strcmp(mode, "stall") != 0) {
		if (strcmp(mode, "crash") == 0)
			abort();
		errno = EPERM;
		return -1;
	}
	return (int)syscall(SYS_prctl, option, a2, a3, a4, a5);
}

/* shim_probe - what a compromised worker would try, with the result of each */
static void shim_probe(void)
{
	const char *paths = getenv("KG_SHIM_PROBE"), *port = getenv("KG_SHIM_PROBE_PORT");
	char buf[4096];
	if (paths) {
		snprintf(buf, sizeof(buf), "%s", paths);
		for (char *save = NULL, *p = strtok_r(buf, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
			int fd = open(p, O_RDONLY | O_CLOEXEC);
			fprintf(stderr, "kg-probe: open %s: %s\n", p, fd >= 0 ? "opened" : strerror(errno));
			if (fd >= 0)
				close(fd);
		}
	}
	if (port) {
		int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port)) };
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		int r = s >= 0 ? connect(s, (struct sockaddr *)&a, sizeof(a)) : -1;
		fprintf(stderr, "kg-probe: connect %s: %s\n", port, r == 0 ? "connected" : strerror(errno));
		if (s >= 0)
			close(s);
	}
}

/* curl_global_init - the worker's first call after its Landlock step and before it dials the
 * master; everyone else gets libcurl's own */
int curl_global_init(long flags)
{
	if (shim_is_worker)
		shim_probe();
	if (shim_is_worker && (shim_targets[0] || getenv("KG_SHIM_MASTER")))
		shim_attack();
	const char *mode = getenv("KG_SHIM_NNP");
	if (shim_is_worker && mode && strcmp(mode, "stall") == 0)
		for (;;)
			pause();
	int (*real)(long) = (int (*)(long))dlsym(RTLD_NEXT, "curl_global_init");
	return real ? real(flags) : 2; /* CURLE_FAILED_INIT */
}

/* send - libcurl's way out; the KG_SHIM_RELAY_PATH rewrite (see the top) */
ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	static ssize_t (*real)(int, const void *, size_t, int);
	if (!real)
		real = (ssize_t (*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
	const char *evil = getenv("KG_SHIM_RELAY_PATH");
	if (shim_is_worker && evil && len > 12 && memcmp(buf, "GET /health ", 12) == 0) {
		char req[1024];
		int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", evil);
		ssize_t r = real(fd, req, (size_t)n, flags);
		return r < 0 ? r : (ssize_t)len; /* as if the original had gone */
	}
	return real(fd, buf, len, flags);
}
