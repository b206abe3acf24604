/*
 * landlock.h - the worker's file system and network view, restricted with Landlock (the
 * kernel's unprivileged access-control LSM). Called once by worker/main.c, first thing, before
 * any thread exists: Landlock binds the calling thread and what it starts later.
 */
#ifndef KG_LANDLOCK_H
#define KG_LANDLOCK_H

#include <stdbool.h>

struct landlock_worker {
	const char *extra_read[4]; /* more it may read (its ADC file, $SSL_CERT_FILE); NULL ends */
	bool restrict_tcp;        /* no TCP bind, and TCP connect only to ports[] */
	const int *ports;
	int nports;
};

/* landlock_worker_apply - restrict this process to what a worker needs: read the shared
 * libraries, CA certificates and resolver files, /dev/null and /dev/urandom, its own /proc
 * entries and extra_read; nothing else of the file system; with restrict_tcp no TCP except
 * ports[]; no abstract unix sockets or signals outside itself (where the kernel has them).
 * Returns the Landlock ABI version enforced (>0), or -EOPNOTSUPP where the kernel lacks
 * Landlock (the caller warns once), or another negative errno. */
int landlock_worker_apply(const struct landlock_worker *w);

#endif
