/*
 * jail.h - the local sandbox: `kode-gopher jail`, which builds the jail and execs the agent in it.
 *
 * The master starts `kode-gopher jail [options] -- <agent argv>` for each local sandbox (a fresh,
 * single-threaded process, so namespace and mount set-up can use all of libc). See policy/jail.c.
 */
#ifndef KG_JAIL_H
#define KG_JAIL_H

/* Paths inside the jail, as the agent sees them. */
/* The runtime directory (base caches, lockfile) is at the same path as on the host, with this
 * session's overlays on its gomodcache and gocache: the go command's module index in the build
 * cache is keyed on the module cache's path, so another path would cost seconds per sandbox. */
#define JAIL_STATE      "/kg/state"
#define JAIL_SOCK_DIR   "/kg/sock"
#define JAIL_APP        "/app"
#define JAIL_UID        1000 /* the sandbox user inside; mapped to one unprivileged host uid */

/* Host uids for sandboxes when the master runs as root: each sandbox gets its own. */
#define JAIL_HOST_UID_BASE 2000000000u
#define JAIL_HOST_UID_SPAN 100000u

int jail_main(int argc, char **argv);

#endif
