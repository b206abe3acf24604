/*
 * caps.c - give up every capability; see policy/caps.h. Plain syscalls only (async-signal-safe).
 */
#include "policy/caps.h"

#include <errno.h>
#include <linux/capability.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* caps_drop_all - see caps.h */
int caps_drop_all(void)
{
	for (int cap = 0; cap <= 63; cap++)
		prctl(PR_CAPBSET_DROP, cap, 0, 0, 0); /* EINVAL past the kernel's last one */
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof(d));
	return syscall(SYS_capset, &h, d) == 0 ? 0 : -errno;
}
