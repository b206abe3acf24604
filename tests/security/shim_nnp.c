/*
 * shim_nnp.c - an LD_PRELOAD shim for tests/security/supervision.test.mjs: in a `kode-gopher
 * worker` process (and no other), prctl(PR_SET_NO_NEW_PRIVS) fails as it would on a machine
 * that does not let the worker lock itself down. KG_SHIM_NNP selects how:
 *   fail   - the call returns -1 with EPERM (the worker reports it and exits)
 *   crash  - the process aborts inside the call (a worker that dies while locking down)
 *   stall  - the worker hangs before it dials the master (curl_global_init never returns),
 *            so it never says HELLO
 * Built by the test with `cc -shared -fPIC`; never part of kode-gopher.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
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

/* curl_global_init - the worker's first call before it dials the master; everyone else gets
 * libcurl's own */
int curl_global_init(long flags)
{
	const char *mode = getenv("KG_SHIM_NNP");
	if (shim_is_worker && mode && strcmp(mode, "stall") == 0)
		for (;;)
			pause();
	int (*real)(long) = (int (*)(long))dlsym(RTLD_NEXT, "curl_global_init");
	return real ? real(flags) : 2; /* CURLE_FAILED_INIT */
}
