/*
 * shim_worker.c - an LD_PRELOAD shim for tests/security/: it acts inside a `kode-gopher worker`
 * process (and no other).
 *
 * KG_SHIM_PROBE=PATH[:PATH...] and KG_SHIM_PROBE_PORT=N (worker_confinement.test.mjs): once
 * the worker has confined itself (its curl_global_init, which follows the Landlock step), try
 * to open each PATH and to connect to 127.0.0.1:N, as a compromised worker would, and print one
 * line each to stderr: "kg-probe: open PATH: RESULT", "kg-probe: connect PORT: RESULT".
 *
 * KG_SHIM_NNP (supervision.test.mjs): prctl(PR_SET_NO_NEW_PRIVS) fails as it would on a
 * machine that does not let the worker lock itself down:
 *   fail   - the call returns -1 with EPERM (the worker reports it and exits)
 *   crash  - the process aborts inside the call (a worker that dies while locking down)
 *   stall  - the worker hangs before it dials the master (curl_global_init never returns),
 *            so it never says HELLO
 * Built by the test with `cc -shared -fPIC`; never part of kode-gopher.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static int shim_is_worker;

/* glibc passes argc and argv to constructors: the role is argv[1] before any title rewrite */
__attribute__((constructor)) static void shim_init(int argc, char **argv)
{
	shim_is_worker = argc > 1 && strcmp(argv[1], "worker") == 0;
}

int prctl(int option, ...)
{
	va_list ap;
	va_start(ap, option);
	unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long);
	unsigned long a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
	va_end(ap);
	const char *mode = getenv("KG_SHIM_NNP");
	if (shim_is_worker && option == PR_SET_NO_NEW_PRIVS && mode) {
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
	const char *mode = getenv("KG_SHIM_NNP");
	if (shim_is_worker && mode && strcmp(mode, "stall") == 0)
		for (;;)
			pause();
	int (*real)(long) = (int (*)(long))dlsym(RTLD_NEXT, "curl_global_init");
	return real ? real(flags) : 2; /* CURLE_FAILED_INIT */
}
