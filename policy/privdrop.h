/*
 * privdrop.h - a worker's own unprivileged identity (OpenSSH's privsep child), policy/privdrop.c.
 *
 * On a root serve the master (master/identity.c) gives every worker a uid and gid of its own
 * from PRIVDROP_UID_BASE.. (never two live workers with the same one, across every serve on the
 * machine) and names it on the worker's command line; the worker switches to it first thing,
 * before it starts a thread. Its local sandbox's directory and agent socket carry that gid
 * (policy/jail.c), so the worker reaches its own agent and no other worker's.
 */
#ifndef KG_PRIVDROP_H
#define KG_PRIVDROP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Worker uids (= gids): above the sandboxes' range (policy/jail.h JAIL_HOST_UID_BASE) */
#define PRIVDROP_UID_BASE 2100000000u
#define PRIVDROP_UID_SPAN 100000u

/* privdrop_to - from root, become uid/gid for good: securebits locked (no root semantics, no
 * ambient raise, capabilities cleared on the uid change), bounding and ambient sets emptied,
 * no supplementary groups, real/effective/saved ids all uid/gid, every capability set empty,
 * no_new_privs. Checks the result (setuid(0) must fail). Call before any thread exists.
 * 0, or a negative errno with *what naming the step that failed. */
int privdrop_to(uid_t uid, gid_t gid, const char **what);

/* privdrop_can - may this process hand out identities (root with CAP_SETUID, CAP_SETGID,
 * CAP_SETPCAP and CAP_CHOWN)? If not, why (a sentence) */
bool privdrop_can(char *why, size_t cap);

#endif
