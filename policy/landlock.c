/*
 * landlock.c - Landlock for the worker, with the raw syscalls (see landlock.h).
 *
 * A worker is root's child on a root serve and holds CAP_DAC_OVERRIDE (it reaches its local
 * sandbox's agent socket, in a 0700 directory of the sandbox's uid, through it), so file
 * permissions do not keep it from the operator's kubeconfig, an ADC file or /etc/shadow.
 * Landlock does, whatever the uid and capabilities: everything the worker opens after start-up
 * is listed here. Connecting to a pathname unix socket (the master's channel, the agent) is not
 * a Landlock file access, so those need no rule.
 *
 * The constants and structs are this file's own copies of <linux/landlock.h> (ABI 1 to 6):
 * Debian 12's kernel headers stop at ABI 2, and the running kernel decides what is enforced.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ipc/log.h"
#include "policy/landlock.h"

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

#define LL_CREATE_RULESET_VERSION (1u << 0)
#define LL_RULE_PATH_BENEATH 1
#define LL_RULE_NET_PORT 2

#define LL_FS_EXECUTE (1ull << 0)
#define LL_FS_WRITE_FILE (1ull << 1)
#define LL_FS_READ_FILE (1ull << 2)
#define LL_FS_READ_DIR (1ull << 3)
#define LL_FS_ABI1 ((1ull << 13) - 1) /* EXECUTE .. MAKE_SYM */
#define LL_FS_REFER (1ull << 13)      /* ABI 2 */
#define LL_FS_TRUNCATE (1ull << 14)   /* ABI 3 */
#define LL_FS_IOCTL_DEV (1ull << 15)  /* ABI 5 */
#define LL_NET_BIND_TCP (1ull << 0)   /* ABI 4 */
#define LL_NET_CONNECT_TCP (1ull << 1)
#define LL_SCOPE_ABSTRACT_UNIX (1ull << 0) /* ABI 6 */
#define LL_SCOPE_SIGNAL (1ull << 1)

struct ll_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net; /* ABI 4 */
	uint64_t scoped;             /* ABI 6 */
};

struct ll_path_beneath {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));

struct ll_net_port {
	uint64_t allowed_access;
	uint64_t port;
};

/* What a worker reads after start-up: libraries (and the resolver's NSS modules, loaded late),
 * CA certificates and OpenSSL's configuration, the resolver's files. Not /etc as a whole: it
 * holds /etc/shadow. */
static const char *const ll_read[] = {
	"/usr", "/lib", "/lib64", "/etc/ld.so.cache", "/etc/ssl", "/etc/ca-certificates",
	"/etc/pki", "/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/gai.conf",
	"/etc/host.conf", "/etc/services", "/etc/protocols", "/etc/localtime",
	"/sys/devices/system/cpu",
};
/* ... and read and writes: its own /proc entries (thread names), the null and random devices */
static const char *const ll_rw[] = { "/proc/self", "/dev/null", "/dev/urandom", "/dev/random" };

/* ll_allow - a rule for path (absent paths are skipped): access limited to what a file takes
 * when it is not a directory */
static int ll_allow(int ruleset, const char *path, uint64_t access)
{
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct stat st;
	if (fstat(fd, &st) != 0) {
		close(fd);
		return 0;
	}
	if (!S_ISDIR(st.st_mode))
		access &= LL_FS_EXECUTE | LL_FS_WRITE_FILE | LL_FS_READ_FILE | LL_FS_TRUNCATE |
			  LL_FS_IOCTL_DEV;
	struct ll_path_beneath pb = { .allowed_access = access, .parent_fd = fd };
	int r = (int)syscall(SYS_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &pb, 0);
	int e = errno;
	close(fd);
	if (r != 0) {
		log_warn("landlock: cannot allow %s: %s", path, strerror(e));
		return -e;
	}
	return 0;
}

int landlock_worker_apply(const struct landlock_worker *w)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
	if (abi < 1)
		return errno == ENOSYS || errno == EOPNOTSUPP ? -EOPNOTSUPP : -errno;
	struct ll_ruleset_attr attr = { .handled_access_fs = LL_FS_ABI1 };
	size_t size = sizeof(uint64_t);
	if (abi >= 2)
		attr.handled_access_fs |= LL_FS_REFER;
	if (abi >= 3)
		attr.handled_access_fs |= LL_FS_TRUNCATE;
	if (abi >= 5)
		attr.handled_access_fs |= LL_FS_IOCTL_DEV;
	if (abi >= 4 && w->restrict_tcp) {
		attr.handled_access_net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP;
		size = 2 * sizeof(uint64_t);
	}
	if (abi >= 6) {
		attr.scoped = LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL;
		size = sizeof(attr);
	}
	int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
	if (rs < 0)
		return -errno;
	int r = 0;
	uint64_t rd = LL_FS_READ_FILE | LL_FS_READ_DIR;
	uint64_t rw = rd | LL_FS_WRITE_FILE | (abi >= 3 ? LL_FS_TRUNCATE : 0);
	for (size_t i = 0; r == 0 && i < sizeof(ll_read) / sizeof(ll_read[0]); i++)
		r = ll_allow(rs, ll_read[i], rd);
	for (size_t i = 0; r == 0 && i < sizeof(ll_rw) / sizeof(ll_rw[0]); i++)
		r = ll_allow(rs, ll_rw[i], rw);
	for (size_t i = 0; r == 0 && i < 4 && w->extra_read[i]; i++)
		r = ll_allow(rs, w->extra_read[i], rd);
	for (int i = 0; r == 0 && attr.handled_access_net && i < w->nports; i++) {
		struct ll_net_port np = { .allowed_access = LL_NET_CONNECT_TCP, .port = (uint64_t)w->ports[i] };
		if (syscall(SYS_landlock_add_rule, rs, LL_RULE_NET_PORT, &np, 0) != 0)
			r = -errno;
	}
	/* restrict_self needs CAP_SYS_ADMIN (a root serve's worker has it) or no_new_privs, which
	 * the seccomp lockdown sets anyway a moment later */
	if (r == 0 && syscall(SYS_landlock_restrict_self, rs, 0) != 0) {
		r = -errno;
		if (r == -EPERM && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0)
			r = syscall(SYS_landlock_restrict_self, rs, 0) == 0 ? 0 : -errno;
	}
	close(rs);
	return r == 0 ? (int)abi : r;
}
