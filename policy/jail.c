/*
 * jail.c - `kode-gopher jail`: build the local sandbox and exec the agent inside it.
 *
 * Started by the master (master/sandbox_local.c) as a fresh process for each local sandbox:
 *
 *   A  jail (host pid namespace): cgroups (memory, pids) where the host lets us write them; as
 *      root, switch to this sandbox's own unprivileged host uid; unshare user, mount, pid, ipc,
 *      uts (and net with --network none) namespaces; map uid 1000 inside to that one host uid.
 *      With --network on, also starts slirp4netns for B's network namespace (see "the network").
 *      Waits for B and exits with its status; killing A's process group kills the jail.
 *   B  pid 1 of the new pid namespace: builds the file system (tmpfs root, the host's /usr and a
 *      few /etc files read-only, per-session overlays on the base Go caches, /app, a private
 *      /tmp, /proc, a minimal /dev), pivots into it, drops every capability, and reaps orphans.
 *   C  the agent: rlimits, no capabilities, no_new_privs, the jail's seccomp filter, then exec.
 *
 * Sandbox directory layout (made by the master, owned by the sandbox uid when we are root):
 *   DIR/app  DIR/state  DIR/sock/agent.sock  DIR/cache/{gomod,gocache}/{upper,work}  DIR/root
 */
#include "policy/jail.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/magic.h>
#include <grp.h>
#include <limits.h>
#include <openssl/rand.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/fsutil.h"
#include "ipc/log.h"
#include "policy/caps.h"
#include "policy/cgroup.h"
#include "policy/limits.h"
#include "policy/netif.h"
#include "policy/seccomp.h"
#include "policy/volume.h"

#define JAIL_SLIRP_MTU "65520"
#define JAIL_SLIRP_DNS "10.0.2.3" /* slirp4netns's resolver, forwarding to the host's */

enum jail_net {
	JAIL_NET_ON,   /* a network namespace of its own, egress through slirp4netns */
	JAIL_NET_HOST, /* the host's network namespace, loopback and all */
	JAIL_NET_NONE, /* a network namespace of its own with only a loopback */
};

struct jail_opts {
	const char *dir, *name, *runtime;
	enum jail_net network;
	long long memory; /* bytes; 0: no limit */
	long long disk;   /* bytes of the sandbox's own file system (policy/volume.h); 0: none */
	long pids;
	char **agent_argv;
	int self_fd;      /* O_PATH descriptor of the running binary */
	gid_t worker_gid; /* the worker's own gid (policy/privdrop.h), 0: none */
};

static const char jail_usage[] =
	"usage: kode-gopher jail --dir DIR --name NAME --runtime-dir DIR [options] -- AGENT-ARGS...\n"
	"\n"
	"Internal: builds a local sandbox and runs `kode-gopher agent AGENT-ARGS` inside it. Started\n"
	"by `kode-gopher serve` for each sandbox.\n"
	"\n"
	"options:\n"
	"  --memory BYTES     memory limit through the memory cgroup (default 4 GiB)\n"
	"  --pids N           process limit through the pids cgroup and RLIMIT_NPROC (default 512)\n"
	"  --disk BYTES       size of the sandbox's own file system for app, state and cache, as\n"
	"                     root (default 0: none, they are on the host's disk)\n"
	"  --network MODE     on (default): a network of its own with egress through slirp4netns,\n"
	"                     none of the host's addresses; host: the host's; none: no network\n"
	"  --log-level LEVEL  debug, info, warn, error or off\n"
	"  --sock-gid N       the gid of the worker this sandbox serves: its way in to the agent's\n"
	"                     socket (DIR and DIR/sock carry it, and so does the socket)\n"
	"  --cgroup-probe     enter the sandbox's cgroups (--name, --memory, --pids), print what\n"
	"                     each limit got, and exit (kode-gopher doctor)\n";

/* die - the jail could not be built: say what failed, and exit 1 */
static void __attribute__((noreturn, format(printf, 1, 2))) die(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_error("cannot build the sandbox: %s", msg);
	_exit(1);
}

/* ---- cgroups ---- */

/* jail_cgroups - this sandbox's memory, pids and cpu groups (policy/cgroup.c), entered before
 * anything is forked; a kind the start-up report promised but this sandbox did not get is said
 * here (the master logged the planned ones, and why the others are missing, once) */
static void jail_cgroups(const struct jail_opts *o, struct cgroup_got *g)
{
	struct cgroup_plan plan;
	cgroup_plan(&plan, getuid() == 0, NULL);
	struct cgroup_limits l = { .memory = o->memory, .pids = o->pids };
	cgroup_enter(&plan, o->name, &l, g);
	for (int k = 0; k < CGROUP_NKINDS; k++) {
		if (plan.how[k] == CGROUP_NONE || g->how[k] != CGROUP_NONE)
			continue;
		char line[CGROUP_WHY_MAX + 256];
		cgroup_describe((enum cgroup_kind)k, CGROUP_NONE, g->why[k], plan.systemd, plan.root, &l,
				line, sizeof(line));
		log_warn("sandbox %s: %s", o->name, line);
	}
}

/* the sandbox's memory.events (or v1 memory.oom_control), passed to the agent; -1: none */
static int jail_oom_fd = -1;

/* jail_cgroup_probe - `jail --cgroup-probe`: enter, then print what each group holds (doctor):
 * "KIND v2|v1 KNOB=VALUE DIR" or "KIND none WHY" */
static int jail_cgroup_probe(const struct jail_opts *o)
{
	struct cgroup_got g;
	jail_cgroups(o, &g);
	static const char *const knob[2][CGROUP_NKINDS] = {
		{ "memory.max", "pids.max", "cpu.weight" },
		{ "memory.limit_in_bytes", "pids.max", "cpu.shares" } };
	for (int k = 0; k < CGROUP_NKINDS; k++) {
		if (g.how[k] == CGROUP_NONE) {
			printf("%s none %s\n", cgroup_kind_name[k], g.why[k]);
			continue;
		}
		bool v1 = g.how[k] == CGROUP_V1;
		const char *dir = v1 ? g.v1dir[k] : g.leaf;
		char v[64] = "?";
		cgroup_read_knob(dir, knob[v1][k], v, sizeof(v));
		printf("%s %s %s=%s %s\n", cgroup_kind_name[k], v1 ? "v1" : "v2", knob[v1][k], v, dir);
	}
	fflush(stdout);
	return 0;
}

/* ---- identity ---- */

/* chown_tree - hand a fresh sandbox's writable directories to its uid (root only) */
static void chown_tree(const char *path, uid_t uid, gid_t gid)
{
	struct stat st;
	if (lstat(path, &st) != 0)
		return;
	lchown(path, uid, gid);
	if (!S_ISDIR(st.st_mode))
		return;
	DIR *d = opendir(path);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char p[PATH_MAX];
		if ((size_t)snprintf(p, sizeof(p), "%s/%s", path, e->d_name) < sizeof(p))
			chown_tree(p, uid, gid);
	}
	closedir(d);
}

/* jail_host_uid - as root: the sandbox's own uid (kept across reattach); else our own */
static uid_t jail_host_uid(const struct jail_opts *o)
{
	if (getuid() != 0)
		return getuid();
	char app[PATH_MAX];
	struct stat st;
	snprintf(app, sizeof(app), "%s/app", o->dir);
	if (stat(app, &st) == 0 && st.st_uid >= JAIL_HOST_UID_BASE &&
	    st.st_uid < JAIL_HOST_UID_BASE + JAIL_HOST_UID_SPAN)
		return st.st_uid;
	uint32_t r = 0;
	if (RAND_bytes((unsigned char *)&r, sizeof(r)) != 1)
		die("no randomness for a sandbox uid");
	uid_t uid = JAIL_HOST_UID_BASE + r % JAIL_HOST_UID_SPAN;
	char cache[PATH_MAX];
	snprintf(cache, sizeof(cache), "%s/cache", o->dir);
	mkdir(cache, 0700);
	chown_tree(o->dir, uid, uid); /* a fresh or re-owned sandbox: everything in it is its own */
	return uid;
}

/* jail_worker_way_in - the worker's gid on DIR (traverse only) and on DIR/sock (traverse, and
 * setgid so the agent's socket, made 0660 by the agent, is created with that group): the
 * worker reaches its agent without a capability, and no other worker reaches it. Set at every
 * start, since a kept sandbox is reattached by another worker. */
static void jail_worker_way_in(const struct jail_opts *o, uid_t uid)
{
	char sock[PATH_MAX];
	snprintf(sock, sizeof(sock), "%s/sock", o->dir);
	if (lchown(o->dir, uid, o->worker_gid) != 0 || chmod(o->dir, 0710) != 0 ||
	    lchown(sock, uid, o->worker_gid) != 0 || chmod(sock, 02710) != 0)
		die("give the worker's gid %u its way to the agent's socket in %s: %s",
		    (unsigned)o->worker_gid, o->dir, strerror(errno));
}

/* ---- the file system ---- */

static char jail_root[PATH_MAX];

/* at - a path under the new root */
static const char *at(const char *sub)
{
	static char buf[4][PATH_MAX];
	static int i;
	i = (i + 1) % 4;
	if ((size_t)snprintf(buf[i], sizeof(buf[i]), "%s%s", jail_root, sub) >= sizeof(buf[i]))
		die("path too long under %s", jail_root);
	return buf[i];
}

/* mkdirs - mkdir -p, or die */
static void mkdirs(const char *path, mode_t mode)
{
	int r = fs_mkdir_p(path, mode);
	if (r)
		die("mkdir %s: %s", path, strerror(-r));
}

/* touch - an empty file to bind a file onto */
static void touch(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		die("create %s: %s", path, strerror(errno));
	close(fd);
}

/* bind - bind src onto dst (which exists), read-only unless rw */
static void bind(const char *src, const char *dst, bool rw)
{
	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) != 0)
		die("bind %s: %s", src, strerror(errno));
	unsigned long f = MS_BIND | MS_REMOUNT | MS_NOSUID | fs_locked_flags(src);
	if (!rw)
		f |= MS_RDONLY;
	if (mount(NULL, dst, NULL, f, NULL) != 0 && !rw)
		die("make %s read-only: %s", dst, strerror(errno));
}

/* bind_file_ro - one host file, if it exists, read-only at the same place in the jail */
static void bind_file_ro(const char *path)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return;
	if (S_ISDIR(st.st_mode))
		mkdirs(at(path), 0755);
	else
		touch(at(path));
	bind(path, at(path), false);
}

/* nlink_counts_subdirs - the file system under fd keeps a directory's link count at 2 plus its
 * subdirectories (ext4, xfs, tmpfs: not btrfs, whose directories have 1, nor overlayfs) */
static bool nlink_counts_subdirs(int fd)
{
	struct statfs sf;
	if (fstatfs(fd, &sf) != 0)
		return false;
	return sf.f_type == EXT4_SUPER_MAGIC || sf.f_type == XFS_SUPER_MAGIC ||
	       sf.f_type == TMPFS_MAGIC;
}

/* skeleton - mirror the base cache's directories (not module contents) into the upper layer.
 * Overlayfs checks permissions against the merged directory, whose owner comes from the upper
 * layer when the directory exists there: without this, the sandbox's uid could not add a new
 * module or cache entry under the base's root-owned directories. Module version directories
 * (name@version) are complete and stay read-only; download @v directories take new versions.
 * A directory whose link count says it has no subdirectories is not read (leaves): the build
 * cache's 256 directories of entries were most of the walk (issue 17). */
static void skeleton(int lower, int upper, int depth, bool counted)
{
	DIR *d = fdopendir(dup(lower));
	if (!d || depth > 32) {
		if (d)
			closedir(d);
		return;
	}
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' || e->d_type != DT_DIR)
			continue;
		bool at_v = strcmp(e->d_name, "@v") == 0;
		if (strchr(e->d_name, '@') && !at_v)
			continue;
		if (mkdirat(upper, e->d_name, 0755) != 0 && errno != EEXIST)
			continue;
		if (at_v)
			continue;
		struct stat st;
		if (counted && fstatat(lower, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISDIR(st.st_mode) && st.st_nlink == 2)
			continue;
		int l = openat(lower, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int u = openat(upper, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (l >= 0 && u >= 0)
			skeleton(l, u, depth + 1, counted);
		if (l >= 0)
			close(l);
		if (u >= 0)
			close(u);
	}
	closedir(d);
}

/* overlay_layers - a per-session writable layer over a read-only base cache: its upper and
 * work directories, and the base's directories mirrored into the upper one (skeleton) */
static void overlay_layers(const char *base, const char *dir, const char *which)
{
	char upper[PATH_MAX], work[PATH_MAX];
	snprintf(upper, sizeof(upper), "%s/cache/%s/upper", dir, which);
	snprintf(work, sizeof(work), "%s/cache/%s/work", dir, which);
	mkdirs(upper, 0755);
	mkdirs(work, 0755);
	int l = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int u = open(upper, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (l >= 0 && u >= 0)
		skeleton(l, u, 0, nlink_counts_subdirs(l));
	if (l >= 0)
		close(l);
	if (u >= 0)
		close(u);
}

/* overlay_mount - the layers (overlay_layers) mounted on target */
static void overlay_mount(const char *base, const char *dir, const char *which, const char *target)
{
	char opts[3 * PATH_MAX + 64];
	snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s/cache/%s/upper,workdir=%s/cache/%s/work,"
		 "userxattr", base, dir, which, dir, which);
	if (mount("overlay", at(target), "overlay", MS_NOSUID | MS_NODEV, opts) != 0)
		die("overlay on %s: %s (the kernel needs overlayfs in user namespaces, Linux 5.11+)",
		    base, strerror(errno));
}

/* overlays - the module cache's and the build cache's overlays. The two skeletons (hundreds of
 * mkdirat each) are made at once, the build cache's by a child (issue 17, exec) */
static void overlays(const struct jail_opts *o)
{
	char mod[PATH_MAX], gc[PATH_MAX];
	snprintf(mod, sizeof(mod), "%s/gomodcache", o->runtime);
	snprintf(gc, sizeof(gc), "%s/gocache", o->runtime);
	pid_t child = fork();
	if (child == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		overlay_layers(gc, o->dir, "gocache");
		_exit(0);
	}
	overlay_layers(mod, o->dir, "gomod");
	overlay_mount(mod, o->dir, "gomod", mod);
	int st = 0;
	if (child < 0)
		overlay_layers(gc, o->dir, "gocache"); /* no fork: here, after the other */
	else
		while (waitpid(child, &st, 0) < 0 && errno == EINTR)
			;
	if (child > 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
		die("the build cache's layer could not be made (its maker %s)",
		    WIFSIGNALED(st) ? "was killed" : "failed");
	overlay_mount(gc, o->dir, "gocache", gc);
}

/* jail_fs - the sandbox's whole file system; ends with us inside it */
static void jail_fs(const struct jail_opts *o)
{
	char p[PATH_MAX];
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		die("make mounts private: %s", strerror(errno));
	snprintf(jail_root, sizeof(jail_root), "%s/root", o->dir);
	mkdirs(jail_root, 0755);
	if (mount("tmpfs", jail_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m") != 0)
		die("tmpfs root: %s", strerror(errno));

	/* the host's programs and libraries, read-only; /bin and friends as the host has them */
	mkdirs(at("/usr"), 0755);
	bind("/usr", at("/usr"), false);
	static const char *const top[] = { "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32" };
	for (size_t i = 0; i < sizeof(top) / sizeof(top[0]); i++) {
		char link[PATH_MAX];
		ssize_t l = readlink(top[i], link, sizeof(link) - 1);
		struct stat st;
		if (l > 0) {
			link[l] = '\0';
			if (symlink(link, at(top[i])) != 0)
				die("symlink %s: %s", top[i], strerror(errno));
		} else if (stat(top[i], &st) == 0 && S_ISDIR(st.st_mode)) {
			mkdirs(at(top[i]), 0755);
			bind(top[i], at(top[i]), false);
		}
	}
	/* only the /etc a Go program needs: name resolution, TLS roots, time zones */
	mkdirs(at("/etc"), 0755);
	static const char *const etc[] = { "/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf",
					   "/etc/host.conf", "/etc/gai.conf", "/etc/services",
					   "/etc/protocols", "/etc/localtime", "/etc/ssl",
					   "/etc/ca-certificates", "/etc/pki" };
	for (size_t i = 0; i < sizeof(etc) / sizeof(etc[0]); i++) {
		/* a network of its own asks slirp4netns's resolver, which asks the host's */
		if (o->network == JAIL_NET_ON && strcmp(etc[i], "/etc/resolv.conf") == 0)
			continue;
		bind_file_ro(etc[i]);
	}
	if (o->network == JAIL_NET_ON) {
		FILE *rf = fopen(at("/etc/resolv.conf"), "w");
		if (!rf)
			die("write the sandbox's resolv.conf: %s", strerror(errno));
		fputs("nameserver " JAIL_SLIRP_DNS "\n", rf);
		fclose(rf);
	}
	FILE *f = fopen(at("/etc/passwd"), "w");
	if (f) {
		fprintf(f, "sandbox:x:%d:%d:kode-gopher sandbox:/app:/bin/sh\n", JAIL_UID, JAIL_UID);
		fclose(f);
	}
	if ((f = fopen(at("/etc/group"), "w"))) {
		fprintf(f, "sandbox:x:%d:\n", JAIL_UID);
		fclose(f);
	}
	if ((f = fopen(at("/etc/hostname"), "w"))) {
		fputs("kode-gopher-sandbox\n", f);
		fclose(f);
	}

	/* /tmp before the caches: a --runtime-dir under /tmp is then bound inside it, not hidden */
	mkdirs(at("/tmp"), 01777);
	if (mount("tmpfs", at("/tmp"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=" JAIL_TMP_SIZE) != 0)
		die("tmpfs /tmp: %s", strerror(errno));

	/* the Go caches: the base read-only, this session's writes in an overlay */
	mkdirs(at(o->runtime), 0755);
	bind(o->runtime, at(o->runtime), false);
	overlays(o);
	/* the agent keeps the go command from trimming the base's entries (agent/gobuild.c) */

	/* the session's own directories */
	static const struct { const char *sub, *target; } rw[] = {
		{ "app", JAIL_APP }, { "state", JAIL_STATE }, { "sock", JAIL_SOCK_DIR } };
	for (size_t i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s/%s", o->dir, rw[i].sub);
		mkdirs(at(rw[i].target), 0755);
		bind(p, at(rw[i].target), true);
	}
	/* each run's result file on a tmpfs of its own (results are at most 16 MiB): a program that
	 * fills the sandbox's disk still has its result (the error that says so) read back */
	mkdirs(at(JAIL_STATE "/run"), 0700);
	snprintf(p, sizeof(p), "mode=0700,size=40m,uid=%d,gid=%d", JAIL_UID, JAIL_UID);
	if (mount("tmpfs", at(JAIL_STATE "/run"), "tmpfs", MS_NOSUID | MS_NODEV, p) != 0)
		die("tmpfs %s/run: %s", JAIL_STATE, strerror(errno));

	mkdirs(at("/dev"), 0755);
	if (mount("tmpfs", at("/dev"), "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k") != 0)
		die("tmpfs /dev: %s", strerror(errno));
	static const char *const devs[] = { "/dev/null", "/dev/zero", "/dev/full", "/dev/random",
					    "/dev/urandom", "/dev/tty" };
	for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]); i++) {
		struct stat st;
		if (stat(devs[i], &st) != 0)
			continue;
		touch(at(devs[i]));
		if (mount(devs[i], at(devs[i]), NULL, MS_BIND, NULL) != 0)
			die("bind %s: %s", devs[i], strerror(errno));
	}
	symlink("/proc/self/fd", at("/dev/fd"));
	symlink("/proc/self/fd/0", at("/dev/stdin"));
	symlink("/proc/self/fd/1", at("/dev/stdout"));
	symlink("/proc/self/fd/2", at("/dev/stderr"));
	mkdirs(at("/proc"), 0555);
	if (mount("proc", at("/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
		die("mount /proc: %s", strerror(errno));

	mkdirs(at("/.old"), 0700);
	if (syscall(SYS_pivot_root, jail_root, at("/.old")) != 0)
		die("pivot_root: %s", strerror(errno));
	if (chdir("/") != 0 || umount2("/.old", MNT_DETACH) != 0)
		die("leave the host's file system: %s", strerror(errno));
	rmdir("/.old");
	if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0)
		die("make / read-only: %s", strerror(errno));
}

/* ---- privileges ---- */

/* drop_caps - no capabilities, now or after any exec */
static void drop_caps(void)
{
	int r = caps_drop_all();
	if (r != 0)
		die("drop capabilities: %s", strerror(-r));
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		die("no_new_privs: %s", strerror(errno));
}

#if defined(__SANITIZE_ADDRESS__)
#define JAIL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define JAIL_SANITIZED 1
#endif
#endif
#ifndef JAIL_SANITIZED
#define JAIL_SANITIZED 0
#endif

/* jail_limits - rlimits for the agent and everything it starts */
static void jail_limits(const struct jail_opts *o, bool memcg, bool own_uid)
{
	struct rlimit core = { 0, 0 }, nofile = { JAIL_NOFILE, JAIL_NOFILE },
		      fsize = { JAIL_FSIZE_BYTES, JAIL_FSIZE_BYTES };
	setrlimit(RLIMIT_CORE, &core);
	setrlimit(RLIMIT_NOFILE, &nofile);
	setrlimit(RLIMIT_FSIZE, &fsize);
	/* RLIMIT_NPROC counts every process of the uid: only safe when the uid is the sandbox's own */
	if (own_uid && o->pids > 0) {
		struct rlimit np = { (rlim_t)o->pids, (rlim_t)o->pids };
		setrlimit(RLIMIT_NPROC, &np);
	}
	if (!memcg && o->memory > 0) {
#if JAIL_SANITIZED
		/* AddressSanitizer maps terabytes of shadow memory, which RLIMIT_DATA counts: an
		 * ASan build (make asan) cannot start under it, so it goes without */
		log_warn("no memory limit without cgroups in a sanitizer build");
#else
		struct rlimit data = { (rlim_t)o->memory, (rlim_t)o->memory };
		setrlimit(RLIMIT_DATA, &data);
#endif
	}
}

/* ---- the network ---- */

/*
 * --network on: B makes a network namespace of its own, and slirp4netns (a user-space TCP/IP
 * stack, what rootless container engines use) gives it a tap device whose traffic leaves from
 * the host's namespace as ordinary sockets. --disable-host-loopback keeps the host's
 * 127.0.0.0/8 out of reach (the server's port, other sessions' metadata emulators), and B adds
 * an unreachable route for each of the host's other addresses, which slirp4netns would
 * otherwise connect to. Programs have no capability over the namespace, so the routes stay.
 *
 * slirp4netns runs as the sandbox's uid in the host's user namespace, the owner of the jail's
 * one, which is what lets it join B's namespaces: so it is forked (as slirp_helper) before A
 * unshares, and told B's pid once B has its network namespace.
 */

struct jail_net_sync {
	int pid[2];     /* A -> helper: B's pid */
	int ready[2];   /* slirp4netns -> A: configured */
	int exit_fd[2]; /* A holds the write end; slirp4netns ends when it closes */
	int made[2];    /* B -> A: B has its network namespace */
	int go[2];      /* A -> B: the network is configured */
};

static uint32_t jail_host_addrs[NETIF_MAX_HOST_ADDRS];
static int jail_nhost_addrs;

/* jail_slirp_path - the slirp4netns binary, or NULL */
static const char *jail_slirp_path(void)
{
	static const char *const paths[] = { "/usr/bin/slirp4netns", "/usr/local/bin/slirp4netns",
					     "/bin/slirp4netns" };
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		if (access(paths[i], X_OK) == 0)
			return paths[i];
	return NULL;
}

/* slirp_helper - before A unshares: wait for B's pid, then become slirp4netns for it */
static void __attribute__((noreturn)) slirp_helper(const char *slirp, struct jail_net_sync *ns)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	close(ns->pid[1]);
	close(ns->ready[0]);
	close(ns->exit_fd[1]);
	int pid = 0;
	ssize_t got;
	do
		got = read(ns->pid[0], &pid, sizeof(pid));
	while (got < 0 && errno == EINTR);
	if (got != (ssize_t)sizeof(pid) || pid <= 0)
		_exit(1);
	char ready[32], exitfd[32], userns[64], netns[64];
	snprintf(ready, sizeof(ready), "--ready-fd=%d", ns->ready[1]);
	snprintf(exitfd, sizeof(exitfd), "--exit-fd=%d", ns->exit_fd[0]);
	snprintf(userns, sizeof(userns), "--userns-path=/proc/%d/ns/user", pid);
	snprintf(netns, sizeof(netns), "/proc/%d/ns/net", pid);
	fcntl(ns->ready[1], F_SETFD, 0);
	fcntl(ns->exit_fd[0], F_SETFD, 0);
	/* it reports its progress on both ("sent tapfd=5 for tap0"), and stdout may be MCP's; a
	 * failure shows as the jail's own error */
	int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (devnull >= 0 && log_get_level() > LOG_LVL_DEBUG) {
		dup2(devnull, STDOUT_FILENO);
		dup2(devnull, STDERR_FILENO);
	} else if (devnull >= 0) {
		dup2(STDERR_FILENO, STDOUT_FILENO);
	}
	char *argv[] = { "slirp4netns", "--configure", "--mtu=" JAIL_SLIRP_MTU,
			 "--disable-host-loopback", ready, exitfd, userns, "--netns-type=path", netns,
			 "tap0", NULL };
	execv(slirp, argv);
	log_error("cannot run %s: %s", slirp, strerror(errno));
	_exit(127);
}

/* jail_net_prepare - A, still in the host's namespaces: the host's addresses, the helper */
static pid_t jail_net_prepare(struct jail_net_sync *ns)
{
	const char *slirp = jail_slirp_path();
	if (!slirp)
		die("--sandbox-network on needs slirp4netns, which gives each sandbox a network of its "
		    "own (`apt-get install slirp4netns`); or use --sandbox-network none (no network) "
		    "or host (the host's network, loopback included: for one user on their own machine)");
	jail_nhost_addrs = netif_host_addrs(jail_host_addrs, NETIF_MAX_HOST_ADDRS);
	if (jail_nhost_addrs < 0)
		die("list the host's addresses: %s", strerror(-jail_nhost_addrs));
	if (pipe2(ns->pid, O_CLOEXEC) || pipe2(ns->ready, O_CLOEXEC) || pipe2(ns->exit_fd, O_CLOEXEC) ||
	    pipe2(ns->made, O_CLOEXEC) || pipe2(ns->go, O_CLOEXEC))
		die("pipes for the sandbox's network: %s", strerror(errno));
	pid_t helper = fork();
	if (helper < 0)
		die("fork slirp4netns: %s", strerror(errno));
	if (helper == 0)
		slirp_helper(slirp, ns);
	close(ns->pid[0]);
	close(ns->ready[1]);
	close(ns->exit_fd[0]);
	return helper;
}

/* jail_net_attach - A, B forked: wait for B's namespace, hand it to slirp4netns, wait until the
 * network is up, let B go on. False when any of it failed (B is then told nothing and ends). */
static bool jail_net_attach(struct jail_net_sync *ns, pid_t init)
{
	close(ns->made[1]);
	close(ns->go[0]);
	char c;
	ssize_t got;
	do
		got = read(ns->made[0], &c, 1);
	while (got < 0 && errno == EINTR);
	if (got != 1)
		return false;
	int pid = (int)init;
	if (write(ns->pid[1], &pid, sizeof(pid)) != (ssize_t)sizeof(pid))
		return false;
	do
		got = read(ns->ready[0], &c, 1);
	while (got < 0 && errno == EINTR);
	if (got != 1) {
		log_error("cannot build the sandbox: slirp4netns ended before the sandbox's network "
			  "was up (it needs /dev/net/tun readable and writable by the sandbox's uid, "
			  "mode 0666 as Debian sets it; --log-level debug shows its own error)");
		return false;
	}
	return write(ns->go[1], "g", 1) == 1;
}

/* jail_net_enter - B, first thing: a network namespace of its own, for A's slirp4netns to
 * configure (jail_net_ready waits for it) */
static void jail_net_enter(const struct jail_opts *o, struct jail_net_sync *ns)
{
	if (o->network != JAIL_NET_ON)
		return;
	close(ns->made[0]);
	close(ns->go[1]);
	if (unshare(CLONE_NEWNET) != 0)
		die("a network namespace for the sandbox: %s", strerror(errno));
	if (write(ns->made[1], "m", 1) != 1)
		die("tell the jail the network namespace is made: %s", strerror(errno));
}

/* jail_net_ready - B, once its file system is built (slirp4netns sets the namespace up
 * meanwhile, 10-35 ms): wait until it has, then loopback up and the host's addresses
 * unreachable */
static void jail_net_ready(const struct jail_opts *o, struct jail_net_sync *ns)
{
	if (o->network != JAIL_NET_ON)
		return;
	char c;
	ssize_t got;
	do
		got = read(ns->go[0], &c, 1);
	while (got < 0 && errno == EINTR);
	if (got != 1)
		die("the sandbox's network could not be set up");
	close(ns->made[1]);
	close(ns->go[0]);
	for (int i = 0; i < jail_nhost_addrs; i++) {
		int r = netif_unreachable(jail_host_addrs[i], 32);
		if (r < 0)
			die("keep the host's address %u.%u.%u.%u out of the sandbox's reach: %s",
			    ((unsigned char *)&jail_host_addrs[i])[0], ((unsigned char *)&jail_host_addrs[i])[1],
			    ((unsigned char *)&jail_host_addrs[i])[2], ((unsigned char *)&jail_host_addrs[i])[3],
			    strerror(-r));
	}
	/* link-local, where a cloud VM's own metadata server (169.254.169.254) answers with the
	 * server's identity: the sandbox's credentials come from its own emulator only */
	const unsigned char link_local[4] = { 169, 254, 0, 0 };
	uint32_t ll;
	memcpy(&ll, link_local, sizeof(ll));
	int r = netif_unreachable(ll, 16);
	if (r < 0)
		die("keep 169.254.0.0/16 out of the sandbox's reach: %s", strerror(-r));
}

/* ---- the three processes ---- */

/* jail_init - B: pid 1 of the sandbox; build the file system, start the agent, reap */
static int jail_init(const struct jail_opts *o, bool memcg, bool own_uid,
		     struct jail_net_sync *ns)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	jail_net_enter(o, ns);
	jail_fs(o);
	jail_net_ready(o, ns);
	sethostname("kode-gopher-sandbox", 19);
	/* a new network namespace starts with its loopback down; we still hold CAP_NET_ADMIN over
	 * it, and programs and the metadata-server emulator want 127.0.0.0/8 */
	int lo = o->network == JAIL_NET_HOST ? 0 : netif_up("lo");
	if (lo < 0)
		log_warn("the sandbox's loopback interface stays down: %s", strerror(-lo));
	pid_t agent = fork();
	if (agent < 0)
		die("fork the agent: %s", strerror(errno));
	if (agent == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		jail_limits(o, memcg, own_uid);
		drop_caps();
		if (seccomp_jail_apply() != 0)
			die("install the sandbox's seccomp filter");
		const char *proxy = getenv("GOPROXY");
		char proxyenv[1024];
		snprintf(proxyenv, sizeof(proxyenv), "GOPROXY=%s", proxy ? proxy : "");
		/* the memory group's OOM counter, for the agent to tell an OOM kill by name */
		char oomenv[48];
		snprintf(oomenv, sizeof(oomenv), CGROUP_OOM_FD_ENV "=%d", jail_oom_fd);
		char *envp[8] = { "PATH=/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin", "HOME=/app",
				  "LANG=C.UTF-8", "USER=sandbox", "TMPDIR=/tmp" };
		int ne = 5;
		if (proxy)
			envp[ne++] = proxyenv;
		if (jail_oom_fd >= 0)
			envp[ne++] = oomenv;
		envp[ne] = NULL;
		/* our own binary through the descriptor opened before the jail existed: it is not
		 * in the jail's file system, and may even be gone from the host's after an upgrade */
		syscall(SYS_execveat, o->self_fd, "", o->agent_argv, envp, AT_EMPTY_PATH);
		die("exec the agent: %s", strerror(errno));
	}
	drop_caps();
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); /* out of reach of the sandbox's own uid */
	int status = 0;
	for (;;) {
		pid_t p = wait(&status);
		if (p == agent)
			break;
		if (p < 0 && errno == ECHILD)
			break;
	}
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

int jail_main(int argc, char **argv)
{
	struct jail_opts o = { .memory = JAIL_DEFAULT_MEMORY_BYTES, .pids = JAIL_DEFAULT_PIDS,
				.network = JAIL_NET_ON };
	enum log_level lvl = LOG_LVL_INFO;
	bool probe = false;
	static const struct option opts[] = {
		{ "dir", required_argument, 0, 'd' },     { "name", required_argument, 0, 'n' },
		{ "runtime-dir", required_argument, 0, 'r' }, { "memory", required_argument, 0, 'm' },
		{ "pids", required_argument, 0, 'p' },    { "network", required_argument, 0, 'N' },
		{ "log-level", required_argument, 0, 'l' }, { "help", no_argument, 0, 'h' },
		{ "disk", required_argument, 0, 'D' },
		{ "sock-gid", required_argument, 0, 'g' },
		{ "cgroup-probe", no_argument, 0, 'P' },
		{ 0, 0, 0, 0 }
	};
	int c;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': o.dir = optarg; break;
		case 'n': o.name = optarg; break;
		case 'r': o.runtime = optarg; break;
		case 'm': o.memory = atoll(optarg); break;
		case 'p': o.pids = atol(optarg); break;
		case 'D': o.disk = atoll(optarg); break;
		case 'N':
			if (strcmp(optarg, "on") == 0)
				o.network = JAIL_NET_ON;
			else if (strcmp(optarg, "host") == 0)
				o.network = JAIL_NET_HOST;
			else if (strcmp(optarg, "none") == 0)
				o.network = JAIL_NET_NONE;
			else {
				fputs(jail_usage, stderr);
				return 2;
			}
			break;
		case 'l': log_parse_level(optarg, &lvl); break;
		case 'g': o.worker_gid = (gid_t)strtoul(optarg, NULL, 10); break;
		case 'h': fputs(jail_usage, stdout); return 0;
		case 'P': probe = true; break;
		default: fputs(jail_usage, stderr); return 2;
		}
	}
	if (probe ? !o.name : (!o.dir || !o.name || !o.runtime || optind >= argc)) {
		fputs(jail_usage, stderr);
		return 2;
	}
	o.agent_argv = argv + optind;
	log_init("jail", lvl);
	if ((o.self_fd = open("/proc/self/exe", O_PATH | O_CLOEXEC)) < 0)
		die("open our own binary: %s", strerror(errno));

	bool root = getuid() == 0;
	struct cgroup_got cg;
	if (probe)
		return jail_cgroup_probe(&o);
	jail_cgroups(&o, &cg);
	bool memcg = cg.how[CGROUP_MEMORY] != CGROUP_NONE;
	jail_oom_fd = cgroup_open_oom_events(&cg);
	uid_t uid = jail_host_uid(&o);
	gid_t gid = root ? (gid_t)uid : getgid();
	pid_t parent = getppid();
	if (root && o.disk > 0) {
		char err[512];
		int r = volume_attach(o.dir, o.disk, uid, gid, err, sizeof(err));
		if (r < 0)
			die("its disk of %lld MiB: %s", o.disk >> 20, err);
		if (r > 0)
			log_warn("sandbox %s was made before disk limits and has none: its files stay on "
				 "the host's disk (a new sandbox gets one)", o.name);
	}
	if (root && o.worker_gid)
		jail_worker_way_in(&o, uid);
	if (root) {
		if (setgroups(0, NULL) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0)
			die("switch to the sandbox's uid %u: %s", (unsigned)uid, strerror(errno));
		/* a change of credentials clears the parent-death signal and makes us undumpable,
		 * which would leave /proc/self/uid_map owned by root: restore both */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
		if (getppid() != parent)
			_exit(1);
	}
	struct jail_net_sync ns;
	pid_t slirp = o.network == JAIL_NET_ON ? jail_net_prepare(&ns) : 0;
	int flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
	if (o.network == JAIL_NET_NONE)
		flags |= CLONE_NEWNET;
	if (unshare(flags) != 0)
		die("create namespaces: %s (user namespaces must be enabled: sysctl "
		    "user.max_user_namespaces, kernel.unprivileged_userns_clone)", strerror(errno));
	char map[64];
	snprintf(map, sizeof(map), "%d %u 1\n", JAIL_UID, (unsigned)uid);
	if (fs_write_string("/proc/self/setgroups", "deny") != 0 || fs_write_string("/proc/self/uid_map", map) != 0)
		die("map the sandbox uid: %s", strerror(errno));
	snprintf(map, sizeof(map), "%d %u 1\n", JAIL_UID, (unsigned)gid);
	if (fs_write_string("/proc/self/gid_map", map) != 0)
		die("map the sandbox gid: %s", strerror(errno));
	pid_t init = fork();
	if (init < 0)
		die("fork: %s", strerror(errno));
	if (init == 0)
		_exit(jail_init(&o, memcg, root, &ns));
	if (slirp > 0 && !jail_net_attach(&ns, init))
		kill(init, SIGKILL);
	int status;
	while (waitpid(init, &status, 0) < 0 && errno == EINTR)
		;
	if (slirp > 0) {
		kill(slirp, SIGKILL);
		while (waitpid(slirp, NULL, 0) < 0 && errno == EINTR)
			;
	}
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}
