/*
 * privdrop.c - become an unprivileged identity for good; see policy/privdrop.h.
 *
 * Called by the worker (worker/main.c) right after it parsed its command line, while it is
 * still single-threaded: glibc applies setresuid to every thread, but the bounding set, the
 * ambient set and the securebits are per thread, so a thread started earlier would keep them.
 */
#include "policy/privdrop.h"

#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "policy/caps.h"

/* every lock set; root has no special meaning, ambient capabilities cannot be raised, and a
 * change away from uid 0 clears the capability sets (NO_SETUID_FIXUP and KEEP_CAPS stay off,
 * locked off) */
#define PRIVDROP_SECBITS                                                                         \
	(SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP_LOCKED |                  \
	 SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED)

/* caps_now - the effective, permitted and inheritable sets, OR'ed (0: none at all) */
static unsigned long long caps_now(void)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof(d));
	if (syscall(SYS_capget, &h, d) != 0)
		return ~0ull;
	unsigned long long any = 0;
	for (int i = 0; i < 2; i++)
		any |= (unsigned long long)(d[i].effective | d[i].permitted | d[i].inheritable) << (32 * i);
	return any;
}

/* privdrop_to - see privdrop.h */
int privdrop_to(uid_t uid, gid_t gid, const char **what)
{
	int e;
#define STEP(cond, name)                                                                         \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			e = errno ? errno : EPERM;                                               \
			*what = name;                                                            \
			return -e;                                                               \
		}                                                                                \
	} while (0)
	errno = 0;
	STEP(uid != 0 && gid != 0, "the identity must not be root's");
	STEP(prctl(PR_SET_SECUREBITS, PRIVDROP_SECBITS, 0, 0, 0) == 0, "locking the securebits");
	/* the bounding set while CAP_SETPCAP is still there to empty it */
	for (int cap = 0; cap <= 63; cap++)
		prctl(PR_CAPBSET_DROP, cap, 0, 0, 0); /* EINVAL past the kernel's last one */
	STEP(prctl(PR_CAPBSET_READ, CAP_SETUID, 0, 0, 0) == 0, "emptying the bounding set");
	STEP(setgroups(0, NULL) == 0, "dropping the supplementary groups");
	STEP(setresgid(gid, gid, gid) == 0, "setresgid");
	STEP(setresuid(uid, uid, uid) == 0, "setresuid");
	STEP(caps_drop_all() == 0, "clearing the capability sets"); /* inheritable, ambient */
	STEP(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "no_new_privs");
	/* check, as OpenSSH's permanently_set_uid does: there is no way back */
	uid_t r, ef, s;
	gid_t gr, ge, gs;
	errno = 0;
	STEP(getresuid(&r, &ef, &s) == 0 && r == uid && ef == uid && s == uid, "checking the uids");
	STEP(getresgid(&gr, &ge, &gs) == 0 && gr == gid && ge == gid && gs == gid, "checking the gids");
	errno = 0;
	STEP(setuid(0) != 0 && setgid(0) != 0, "checking that uid 0 cannot be regained");
	errno = 0;
	STEP(caps_now() == 0, "checking that no capability is left");
	STEP(prctl(PR_GET_SECUREBITS, 0, 0, 0, 0) == PRIVDROP_SECBITS, "checking the securebits");
#undef STEP
	return 0;
}

/* privdrop_can - see privdrop.h */
bool privdrop_can(char *why, size_t cap)
{
	if (geteuid() != 0) {
		snprintf(why, cap, "serve runs as uid %u, not root", (unsigned)geteuid());
		return false;
	}
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof(d));
	static const int need[] = { CAP_SETUID, CAP_SETGID, CAP_SETPCAP, CAP_CHOWN };
	if (syscall(SYS_capget, &h, d) != 0)
		goto missing;
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
		if (!(d[need[i] / 32].effective & (1u << (need[i] % 32))))
			goto missing;
	return true;
missing:
	snprintf(why, cap, "serve runs as root without CAP_SETUID, CAP_SETGID, CAP_SETPCAP and "
		 "CAP_CHOWN");
	return false;
}
