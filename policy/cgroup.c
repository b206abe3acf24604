/*
 * cgroup.c - memory, process and CPU limits of a local sandbox through cgroups.
 *
 * Called by the master (cgroup_plan at start-up and in `kode-gopher doctor`, cgroup_remove after
 * a jail died, cgroup_scope_argv to start a jail) and by the jail (cgroup_enter, before it forks
 * anything that runs user code). Decided per kind, so a hybrid host (v2 mounted with no
 * controllers, v1 for the rest) or a kernel without one controller still gets the others:
 *
 *   v2, as root: <v2>/kode-gopher/<sandbox>, with the controllers enabled in the root's and
 *     kode-gopher's cgroup.subtree_control; memory.max, memory.swap.max 0, pids.max, cpu.weight.
 *   v2, as a normal user: nothing under the root is ours, so the master starts the jail with
 *     `systemd-run --user --scope -p Delegate=yes`: systemd makes a transient scope for it and
 *     hands the scope's subtree to our uid. A scope with processes cannot enable controllers
 *     for its children (cgroup v2's "no internal processes" rule), so the jail moves itself into
 *     <scope>/sandbox first, then enables them in the scope and sets the leaf's limits.
 *   v1, as root: <controller mount>/kode-gopher/<sandbox> for memory, pids and cpu.
 *
 * A limit that cannot be set leaves the reason in why[], for the start-up line and doctor.
 */
#include "policy/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipc/fsutil.h"
#include "ipc/log.h"

/* why_set - a reason into one of a plan's why[] entries, formatted apart first: its arguments
 * are often other members of the same plan, which snprintf's restrict-qualified destination
 * makes GCC warn about (-Werror=restrict at -O1, make asan) though they never overlap */
__attribute__((format(printf, 2, 3))) static void why_set(char dst[CGROUP_WHY_MAX], const char *fmt, ...)
{
	char b[CGROUP_WHY_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(b, sizeof(b), fmt, ap);
	va_end(ap);
	memcpy(dst, b, sizeof(b));
}

const char *const cgroup_kind_name[CGROUP_NKINDS] = { "memory", "pids", "cpu" };

/* ---- parsing ---- */

/* unescape - mountinfo writes space, tab, newline and backslash as \ooo */
static void unescape(const char *in, size_t n, char *out, size_t cap)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 1 < cap; i++) {
		if (in[i] == '\\' && i + 3 < n && in[i + 1] >= '0' && in[i + 1] <= '3' &&
		    in[i + 2] >= '0' && in[i + 2] <= '7' && in[i + 3] >= '0' && in[i + 3] <= '7') {
			out[o++] = (char)((in[i + 1] - '0') * 64 + (in[i + 2] - '0') * 8 + (in[i + 3] - '0'));
			i += 3;
		} else {
			out[o++] = in[i];
		}
	}
	out[o] = '\0';
}

/* cgroup_list_has - see cgroup.h; also takes comma-separated mount options */
bool cgroup_list_has(const char *list, const char *word)
{
	size_t wl = strlen(word);
	for (const char *p = list; p && *p;) {
		while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t')
			p++;
		size_t n = strcspn(p, " ,\n\t");
		if (n == wl && n && strncmp(p, word, n) == 0)
			return true;
		p += n;
	}
	return false;
}

/* cgroup_parse_mounts - see cgroup.h */
int cgroup_parse_mounts(const char *mi, char v2[CGROUP_PATH_MAX],
			char v1[CGROUP_NKINDS][CGROUP_PATH_MAX])
{
	v2[0] = '\0';
	for (int k = 0; k < CGROUP_NKINDS; k++)
		v1[k][0] = '\0';
	bool v2_canonical = false;
	for (const char *line = mi; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		/* fields: id parent maj:min root mountpoint options [optional...] - fstype source super */
		const char *f[6];
		size_t fl[6];
		const char *p = line, *stop = line + len;
		int n = 0;
		for (; n < 6 && p < stop; n++) {
			while (p < stop && *p == ' ')
				p++;
			f[n] = p;
			while (p < stop && *p != ' ')
				p++;
			fl[n] = (size_t)(p - f[n]);
		}
		const char *dash = NULL;
		for (const char *q = p; q + 1 < stop; q++)
			if (q[0] == ' ' && q[1] == '-' && (q + 2 == stop || q[2] == ' ')) {
				dash = q + 2;
				break;
			}
		if (len && (n < 6 || !dash))
			return -EINVAL;
		if (len) {
			char fstype[32] = "", super[512] = "", mnt[CGROUP_PATH_MAX];
			const char *q = dash;
			while (q < stop && *q == ' ')
				q++;
			size_t tl = strcspn(q, " \n");
			if (tl < sizeof(fstype))
				memcpy(fstype, q, tl), fstype[tl] = '\0';
			q += tl;
			while (q < stop && *q == ' ')
				q++;
			q += strcspn(q, " \n"); /* source */
			while (q < stop && *q == ' ')
				q++;
			size_t sl = strcspn(q, " \n");
			if (sl < sizeof(super))
				memcpy(super, q, sl), super[sl] = '\0';
			unescape(f[4], fl[4], mnt, sizeof(mnt));
			bool root_of_tree = fl[3] == 1 && f[3][0] == '/';
			if (strcmp(fstype, "cgroup2") == 0 && root_of_tree) {
				bool canonical = strcmp(mnt, "/sys/fs/cgroup") == 0;
				if (!v2[0] || (canonical && !v2_canonical)) {
					snprintf(v2, CGROUP_PATH_MAX, "%s", mnt);
					v2_canonical = canonical;
				}
			} else if (strcmp(fstype, "cgroup") == 0 && root_of_tree) {
				for (int k = 0; k < CGROUP_NKINDS; k++)
					if (!v1[k][0] && cgroup_list_has(super, cgroup_kind_name[k]))
						snprintf(v1[k], CGROUP_PATH_MAX, "%s", mnt);
			}
		}
		line = end ? end + 1 : NULL;
	}
	return 0;
}

/* cgroup_parse_self - see cgroup.h */
int cgroup_parse_self(const char *text, char out[CGROUP_PATH_MAX])
{
	for (const char *line = text; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		if (len > 3 && strncmp(line, "0::", 3) == 0) {
			if (len - 3 >= CGROUP_PATH_MAX || line[3] != '/')
				return -EINVAL;
			memcpy(out, line + 3, len - 3);
			out[len - 3] = '\0';
			return 0;
		}
		line = end ? end + 1 : NULL;
	}
	return -ENOENT;
}

/* cgroup_parse_oom_kills - see cgroup.h */
long long cgroup_parse_oom_kills(const char *text)
{
	for (const char *line = text; line && *line;) {
		if (strncmp(line, "oom_kill ", 9) == 0) {
			char *end;
			errno = 0;
			long long n = strtoll(line + 9, &end, 10);
			if (errno || end == line + 9 || n < 0 || (*end && *end != '\n'))
				return -1;
			return n;
		}
		line = strchr(line, '\n');
		line = line ? line + 1 : NULL;
	}
	return -1;
}

/* ---- files ---- */

/* read_small - a whole small file, NUL-terminated */
static int read_small(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t got = 0;
	while (got + 1 < cap) {
		ssize_t n = read(fd, buf + got, cap - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = '\0';
	return 0;
}

/* put - write a small string into dir/file */
static int put(const char *dir, const char *file, const char *s)
{
	char p[CGROUP_PATH_MAX + 64];
	if ((size_t)snprintf(p, sizeof(p), "%s/%s", dir, file) >= sizeof(p))
		return -ENAMETOOLONG;
	return fs_write_string(p, s);
}

/* cgroup_read_knob - see cgroup.h */
int cgroup_read_knob(const char *dir, const char *file, char *out, size_t cap)
{
	char p[CGROUP_PATH_MAX + 64];
	if ((size_t)snprintf(p, sizeof(p), "%s/%s", dir, file) >= sizeof(p))
		return -ENAMETOOLONG;
	int r = read_small(p, out, cap);
	if (r == 0)
		out[strcspn(out, "\n")] = '\0';
	return r;
}

/* controllers - does dir's cgroup.controllers list name? */
static bool controllers_have(const char *dir, const char *name)
{
	char buf[512];
	return cgroup_read_knob(dir, "cgroup.controllers", buf, sizeof(buf)) == 0 &&
	       cgroup_list_has(buf, name);
}

/* ---- the plan ---- */

/* find_systemd_run - the program, or "" */
static void find_systemd_run(char *out, size_t cap)
{
	static const char *const paths[] = { "/usr/bin/systemd-run", "/bin/systemd-run",
					     "/usr/local/bin/systemd-run" };
	out[0] = '\0';
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		if (access(paths[i], X_OK) == 0) {
			snprintf(out, cap, "%s", paths[i]);
			return;
		}
}

/* user_runtime_dir - $XDG_RUNTIME_DIR, or where systemd puts it */
static void user_runtime_dir(char *out, size_t cap)
{
	const char *x = getenv("XDG_RUNTIME_DIR");
	if (x && x[0] == '/')
		snprintf(out, cap, "%s", x);
	else
		snprintf(out, cap, "/run/user/%u", (unsigned)getuid());
}

/* plan_user - a normal user on a v2 host: what systemd's delegation to us offers */
static void plan_user(struct cgroup_plan *p)
{
	char why[CGROUP_WHY_MAX] = "", mgr[CGROUP_PATH_MAX + 96], rt[CGROUP_PATH_MAX], sock[CGROUP_PATH_MAX + 32];
	unsigned uid = (unsigned)getuid();
	find_systemd_run(p->systemd_run, sizeof(p->systemd_run));
	snprintf(mgr, sizeof(mgr), "%s/user.slice/user-%u.slice/user@%u.service", p->v2, uid, uid);
	user_runtime_dir(rt, sizeof(rt));
	snprintf(sock, sizeof(sock), "%s/systemd/private", rt);
	bool bus = access(sock, F_OK) == 0;
	snprintf(sock, sizeof(sock), "%s/bus", rt);
	bus = bus || access(sock, F_OK) == 0;
	struct stat st;
	if (!p->systemd_run[0])
		snprintf(why, sizeof(why), "cgroup v2 limits as a normal user come from a systemd user "
			 "scope, and systemd-run is not installed (or run serve as root)");
	else if (stat(mgr, &st) != 0 || !bus)
		snprintf(why, sizeof(why), "cgroup v2 limits as a normal user come from a systemd user "
			 "scope, and uid %u has no systemd user manager here (%s): a login session, or "
			 "`loginctl enable-linger`, starts one (or run serve as root)",
			 uid, stat(mgr, &st) != 0 ? "no user@.service cgroup" : "no user bus in $XDG_RUNTIME_DIR");
	for (int k = 0; k < CGROUP_NKINDS; k++) {
		if (!controllers_have(p->v2, cgroup_kind_name[k])) {
			why_set(p->why[k], "the cgroup v2 hierarchy at %s has no %s "
				 "controller (%s), and cgroup v1 limits need root", p->v2,
				 cgroup_kind_name[k], p->v1[k][0] ? "this host binds it to cgroup v1" :
				 "the kernel offers none");
		} else if (why[0]) {
			why_set(p->why[k], "%s", why);
		} else if (!controllers_have(mgr, cgroup_kind_name[k])) {
			why_set(p->why[k], "systemd does not delegate the %s controller to "
				 "user@%u.service (its Delegate= setting; Debian delegates memory, pids and "
				 "cpu)", cgroup_kind_name[k], uid);
		} else {
			p->how[k] = CGROUP_V2;
			p->systemd = true;
		}
	}
}

/* cgroup_plan - see cgroup.h */
void cgroup_plan(struct cgroup_plan *p, bool root, const char *v2_override)
{
	memset(p, 0, sizeof(*p));
	p->root = root;
	if (v2_override) {
		snprintf(p->v2, sizeof(p->v2), "%s", v2_override);
	} else {
		static char mi[256 * 1024];
		if (read_small("/proc/self/mountinfo", mi, sizeof(mi)) != 0 ||
		    cgroup_parse_mounts(mi, p->v2, p->v1) != 0) {
			for (int k = 0; k < CGROUP_NKINDS; k++)
				why_set(p->why[k], "/proc/self/mountinfo cannot be read");
			return;
		}
	}
	if (!root) {
		if (p->v2[0]) {
			plan_user(p);
			return;
		}
		bool any_v1 = p->v1[0][0] || p->v1[1][0] || p->v1[2][0];
		for (int k = 0; k < CGROUP_NKINDS; k++)
			why_set(p->why[k], "%s", any_v1 ?
				 "this host mounts cgroup v1, whose limits need root (on a cgroup v2 host a "
				 "systemd user scope would give them to a normal user)" :
				 "this host mounts no cgroup hierarchy");
		return;
	}
	bool v2_rw = p->v2[0] && access(p->v2, W_OK) == 0;
	for (int k = 0; k < CGROUP_NKINDS; k++) {
		const char *c = cgroup_kind_name[k];
		bool in_v2 = p->v2[0] && controllers_have(p->v2, c);
		if (in_v2 && v2_rw) {
			p->how[k] = CGROUP_V2;
		} else if (p->v1[k][0] && access(p->v1[k], W_OK) == 0) {
			p->how[k] = CGROUP_V1;
		} else if (in_v2) {
			why_set(p->why[k], "the cgroup v2 hierarchy at %s is read-only "
				 "here (a container that does not delegate it?)", p->v2);
		} else if (p->v1[k][0]) {
			why_set(p->why[k], "the cgroup v1 %s hierarchy at %s is read-only "
				 "here", c, p->v1[k]);
		} else if (p->v2[0]) {
			why_set(p->why[k], "the kernel offers no %s controller: neither "
				 "the cgroup v2 hierarchy at %s nor a cgroup v1 mount has it", c, p->v2);
		} else {
			why_set(p->why[k], "this host mounts no cgroup hierarchy with "
				 "the %s controller", c);
		}
	}
}

/* ---- entering ---- */

/* knob_set - one limit of kind k in dir; on failure the kind is not in force */
static void knob_set(struct cgroup_got *g, int k, const char *dir, const char *file, const char *v)
{
	if (g->how[k] == CGROUP_NONE)
		return;
	int r = put(dir, file, v);
	if (r != 0) {
		snprintf(g->why[k], CGROUP_WHY_MAX, "cannot write %s/%s: %s", dir, file, strerror(-r));
		g->how[k] = CGROUP_NONE;
	}
}

/* v2_knobs - the leaf's limits, for each kind still in force */
static void v2_knobs(struct cgroup_got *g, const char *leaf, const struct cgroup_limits *l, bool root)
{
	char v[32];
	snprintf(v, sizeof(v), "%lld", l->memory);
	knob_set(g, CGROUP_MEMORY, leaf, "memory.max", v);
	/* a limit that swap could stretch is no limit: none beyond it, where swap is accounted */
	if (g->how[CGROUP_MEMORY] == CGROUP_V2) {
		int r = put(leaf, "memory.swap.max", "0");
		if (r != 0 && r != -ENOENT)
			log_warn("cannot keep sandbox memory out of swap (%s/memory.swap.max): %s", leaf,
				 strerror(-r));
	}
	snprintf(v, sizeof(v), "%ld", l->pids);
	knob_set(g, CGROUP_PIDS, leaf, "pids.max", v);
	/* as root the master set the weight before the jail started (cgroup_cpu_weight) and
	 * changes it when a session takes a pre-started sandbox: not ours to write */
	if (!root) {
		snprintf(v, sizeof(v), "%d", CGROUP_CPU_WEIGHT);
		knob_set(g, CGROUP_CPU, leaf, "cpu.weight", v);
	}
}

/* v2_enable - "+controller" in dir's subtree_control for each kind planned */
static void v2_enable(struct cgroup_got *g, const char *dir)
{
	for (int k = 0; k < CGROUP_NKINDS; k++) {
		if (g->how[k] != CGROUP_V2)
			continue;
		char w[32];
		snprintf(w, sizeof(w), "+%s", cgroup_kind_name[k]);
		int r = put(dir, "cgroup.subtree_control", w);
		if (r != 0) {
			snprintf(g->why[k], CGROUP_WHY_MAX, "cannot enable the %s controller in %s: %s%s",
				 cgroup_kind_name[k], dir, strerror(-r),
				 r == -EBUSY ? " (that cgroup has processes of its own)" : "");
			g->how[k] = CGROUP_NONE;
		}
	}
}

/* v2_fail_all - every v2 kind out, for one reason */
static void v2_fail_all(struct cgroup_got *g, const char *fmt, const char *a, int err)
{
	for (int k = 0; k < CGROUP_NKINDS; k++)
		if (g->how[k] == CGROUP_V2) {
			char m[CGROUP_WHY_MAX - 80];
			snprintf(m, sizeof(m), fmt, a);
			snprintf(g->why[k], CGROUP_WHY_MAX, "%s%s%s", m, err ? ": " : "",
				 err ? strerror(err) : "");
			g->how[k] = CGROUP_NONE;
		}
}

/* move_self - the calling process into dir; a dir swept away since it was made (cgroup_sweep
 * of another master, between our mkdir and this) is made again */
static int move_self(const char *dir)
{
	char pid[24];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	int r = put(dir, "cgroup.procs", pid);
	for (int i = 0; r == -ENOENT && i < 3; i++)
		r = mkdir(dir, 0755) != 0 && errno != EEXIST ? -errno : put(dir, "cgroup.procs", pid);
	return r;
}

/* enter_v2_root - as root: <v2>/kode-gopher/<name> */
static void enter_v2_root(const struct cgroup_plan *p, const char *name,
			  const struct cgroup_limits *l, struct cgroup_got *g)
{
	char top[CGROUP_PATH_MAX];
	if ((size_t)snprintf(top, sizeof(top), "%s/" CGROUP_SUBTREE, p->v2) >= sizeof(top)) {
		v2_fail_all(g, "the path %s is too long", p->v2, 0);
		return;
	}
	if (mkdir(top, 0755) != 0 && errno != EEXIST) {
		v2_fail_all(g, "cannot create %s", top, errno);
		return;
	}
	v2_enable(g, p->v2);
	v2_enable(g, top);
	if ((size_t)snprintf(g->leaf, sizeof(g->leaf), "%s/%s", top, name) >= sizeof(g->leaf) ||
	    (mkdir(g->leaf, 0755) != 0 && errno != EEXIST)) {
		v2_fail_all(g, "cannot create the sandbox's cgroup under %s", top, errno);
		g->leaf[0] = '\0';
		return;
	}
	/* in first, limits after (nothing of the user's runs yet): a leaf swept between the mkdir
	 * and the move is made again by move_self */
	int r = move_self(g->leaf);
	if (r != 0)
		v2_fail_all(g, "cannot move the jail into %s", g->leaf, -r);
	v2_knobs(g, g->leaf, l, true);
}

/* enter_v2_scope - as a normal user, started by systemd-run in a scope delegated to us */
static void enter_v2_scope(const struct cgroup_plan *p, const struct cgroup_limits *l,
			   struct cgroup_got *g)
{
	char self[4096], own[CGROUP_PATH_MAX], scope[CGROUP_PATH_MAX];
	if (read_small("/proc/self/cgroup", self, sizeof(self)) != 0 ||
	    cgroup_parse_self(self, own) != 0) {
		v2_fail_all(g, "cannot tell the jail's own cgroup from %s", "/proc/self/cgroup", 0);
		return;
	}
	const char *base = strrchr(own, '/');
	base = base ? base + 1 : own;
	size_t bl = strlen(base);
	if (strncmp(base, CGROUP_SCOPE_PREFIX, strlen(CGROUP_SCOPE_PREFIX)) != 0 || bl < 6 ||
	    strcmp(base + bl - 6, ".scope") != 0) {
		v2_fail_all(g, "the jail is not in a " CGROUP_SCOPE_PREFIX "*.scope of its own but in "
			    "%s (was it started through systemd-run?)", own, 0);
		return;
	}
	if ((size_t)snprintf(scope, sizeof(scope), "%s%s", p->v2, own) >= sizeof(scope) ||
	    (size_t)snprintf(g->leaf, sizeof(g->leaf), "%s/" CGROUP_SCOPE_LEAF, scope) >= sizeof(g->leaf) ||
	    (mkdir(g->leaf, 0755) != 0 && errno != EEXIST)) {
		v2_fail_all(g, "cannot create a cgroup in the scope %s (is it delegated, Delegate=yes?)",
			    scope, errno);
		g->leaf[0] = '\0';
		return;
	}
	int r = move_self(g->leaf);
	if (r != 0) {
		v2_fail_all(g, "cannot move the jail into %s", g->leaf, -r);
		return;
	}
	v2_enable(g, scope);
	v2_knobs(g, g->leaf, l, false);
}

/* enter_v1 - as root on v1: <mount>/kode-gopher/<name> for controller k */
static void enter_v1(const struct cgroup_plan *p, int k, const char *name,
		     const struct cgroup_limits *l, struct cgroup_got *g)
{
	char dir[CGROUP_PATH_MAX], v[32];
	snprintf(dir, sizeof(dir), "%s/" CGROUP_SUBTREE, p->v1[k]);
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		snprintf(g->why[k], CGROUP_WHY_MAX, "cannot create %s: %s", dir, strerror(errno));
		g->how[k] = CGROUP_NONE;
		return;
	}
	if ((size_t)snprintf(dir, sizeof(dir), "%s/" CGROUP_SUBTREE "/%s", p->v1[k], name) >= sizeof(dir) ||
	    (mkdir(dir, 0755) != 0 && errno != EEXIST)) {
		snprintf(g->why[k], CGROUP_WHY_MAX, "cannot create the sandbox's cgroup in %s: %s",
			 p->v1[k], strerror(errno));
		g->how[k] = CGROUP_NONE;
		return;
	}
	int r = move_self(dir);
	if (r != 0) {
		snprintf(g->why[k], CGROUP_WHY_MAX, "cannot move the jail into %s: %s", dir, strerror(-r));
		g->how[k] = CGROUP_NONE;
		return;
	}
	if (k == CGROUP_MEMORY) {
		snprintf(v, sizeof(v), "%lld", l->memory);
		knob_set(g, k, dir, "memory.limit_in_bytes", v);
		if (g->how[k] != CGROUP_NONE)
			put(dir, "memory.memsw.limit_in_bytes", v); /* no swap beyond it, where accounted */
	} else if (k == CGROUP_PIDS) {
		snprintf(v, sizeof(v), "%ld", l->pids);
		knob_set(g, k, dir, "pids.max", v);
	} /* cpu.shares: the master's (cgroup_cpu_weight) */
	if (g->how[k] == CGROUP_NONE)
		return;
	snprintf(g->v1dir[k], sizeof(g->v1dir[k]), "%s", dir);
}

/* cgroup_enter - see cgroup.h */
void cgroup_enter(const struct cgroup_plan *p, const char *name, const struct cgroup_limits *l,
		  struct cgroup_got *g)
{
	memset(g, 0, sizeof(*g));
	bool v2 = false;
	for (int k = 0; k < CGROUP_NKINDS; k++) {
		g->how[k] = p->how[k];
		snprintf(g->why[k], CGROUP_WHY_MAX, "%s", p->why[k]);
		if (k == CGROUP_MEMORY && l->memory <= 0)
			g->how[k] = CGROUP_NONE;
		if (k == CGROUP_PIDS && l->pids <= 0)
			g->how[k] = CGROUP_NONE;
		v2 = v2 || g->how[k] == CGROUP_V2;
	}
	if (v2 && p->root)
		enter_v2_root(p, name, l, g);
	else if (v2)
		enter_v2_scope(p, l, g);
	for (int k = 0; k < CGROUP_NKINDS; k++)
		if (g->how[k] == CGROUP_V1)
			enter_v1(p, k, name, l, g);
}

/* cgroup_open_oom_events - see cgroup.h */
int cgroup_open_oom_events(const struct cgroup_got *g)
{
	char p[CGROUP_PATH_MAX + 32];
	if (g->how[CGROUP_MEMORY] == CGROUP_V2 && g->leaf[0])
		snprintf(p, sizeof(p), "%s/memory.events", g->leaf);
	else if (g->how[CGROUP_MEMORY] == CGROUP_V1 && g->v1dir[CGROUP_MEMORY][0])
		snprintf(p, sizeof(p), "%s/memory.oom_control", g->v1dir[CGROUP_MEMORY]);
	else
		return -1;
	return open(p, O_RDONLY); /* inherited by the agent, which makes it close-on-exec */
}

/* cgroup_cpu_weight - see cgroup.h. A group swept by another master's start (cgroup_sweep)
 * between this mkdir and the jail's move is made again by the jail, at the default weight. */
int cgroup_cpu_weight(const struct cgroup_plan *p, const char *name, bool prestart, bool create)
{
	char top[CGROUP_PATH_MAX], dir[CGROUP_PATH_MAX + 256], v[16];
	const char *mnt, *knob;
	if (!p->root || p->how[CGROUP_CPU] == CGROUP_NONE)
		return -EOPNOTSUPP;
	bool v2 = p->how[CGROUP_CPU] == CGROUP_V2;
	mnt = v2 ? p->v2 : p->v1[CGROUP_CPU];
	knob = v2 ? "cpu.weight" : "cpu.shares";
	snprintf(v, sizeof(v), "%d", v2 ? (prestart ? CGROUP_CPU_WEIGHT_PRESTART : CGROUP_CPU_WEIGHT)
				      : (prestart ? CGROUP_CPU_SHARES_PRESTART : CGROUP_CPU_SHARES));
	if ((size_t)snprintf(top, sizeof(top), "%s/" CGROUP_SUBTREE, mnt) >= sizeof(top) ||
	    (size_t)snprintf(dir, sizeof(dir), "%s/%s", top, name) >= sizeof(dir))
		return -ENAMETOOLONG;
	if (create) {
		if (mkdir(top, 0755) != 0 && errno != EEXIST)
			return -errno;
		/* v2: the leaf has cpu.weight only once cpu is enabled above it (the jail enables
		 * the other controllers it uses the same way) */
		int r;
		if (v2 && ((r = put(mnt, "cgroup.subtree_control", "+cpu")) != 0 ||
			   (r = put(top, "cgroup.subtree_control", "+cpu")) != 0))
			return r;
		if (mkdir(dir, 0755) != 0 && errno != EEXIST)
			return -errno;
	}
	return put(dir, knob, v);
}

/* procs_add - the pids of dir/cgroup.procs not in pids[0..n) yet; the new count */
static size_t procs_add(const char *dir, pid_t *pids, size_t n, size_t max)
{
	char path[CGROUP_PATH_MAX + 16];
	if ((size_t)snprintf(path, sizeof(path), "%s/cgroup.procs", dir) >= sizeof(path))
		return n;
	FILE *f = fopen(path, "re");
	long v;
	while (f && n < max && fscanf(f, "%ld", &v) == 1) {
		size_t i = 0;
		while (i < n && pids[i] != (pid_t)v)
			i++;
		if (i == n && v > 0)
			pids[n++] = (pid_t)v;
	}
	if (f)
		fclose(f);
	return n;
}

/* cgroup_procs - see cgroup.h */
size_t cgroup_procs(const struct cgroup_plan *p, const char *name, pid_t *pids, size_t max)
{
	char dir[CGROUP_PATH_MAX];
	size_t n = 0;
	bool v2 = false;
	for (int k = 0; k < CGROUP_NKINDS; k++) {
		if (p->how[k] == CGROUP_V1 &&
		    (size_t)snprintf(dir, sizeof(dir), "%s/" CGROUP_SUBTREE "/%s", p->v1[k], name) < sizeof(dir))
			n = procs_add(dir, pids, n, max);
		v2 = v2 || p->how[k] == CGROUP_V2;
	}
	if (v2 && p->root &&
	    (size_t)snprintf(dir, sizeof(dir), "%s/" CGROUP_SUBTREE "/%s", p->v2, name) < sizeof(dir))
		n = procs_add(dir, pids, n, max);
	return n;
}

/* cgroup_remove - see cgroup.h */
bool cgroup_remove(const struct cgroup_plan *p, const char *name)
{
	char dir[CGROUP_PATH_MAX];
	bool gone = true, v2 = false;
	for (int k = 0; k < CGROUP_NKINDS; k++) {
		if (p->how[k] == CGROUP_V1) {
			if ((size_t)snprintf(dir, sizeof(dir), "%s/" CGROUP_SUBTREE "/%s", p->v1[k], name) <
				    sizeof(dir) && rmdir(dir) != 0 && errno != ENOENT)
				gone = false;
		}
		v2 = v2 || p->how[k] == CGROUP_V2;
	}
	/* a delegated scope is systemd's to remove (--collect), with what we made in it */
	if (v2 && p->root) {
		if ((size_t)snprintf(dir, sizeof(dir), "%s/" CGROUP_SUBTREE "/%s", p->v2, name) < sizeof(dir) &&
		    rmdir(dir) != 0 && errno != ENOENT)
			gone = false;
	}
	return gone;
}

/* sweep_dir - rmdir every group right under dir (the kernel refuses those with processes) */
static void sweep_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' || e->d_type != DT_DIR)
			continue;
		char p[CGROUP_PATH_MAX + 300];
		if ((size_t)snprintf(p, sizeof(p), "%s/%s", dir, e->d_name) < sizeof(p) && rmdir(p) == 0)
			log_debug("removed the empty cgroup %s", p);
	}
	closedir(d);
}

/* cgroup_sweep - see cgroup.h */
void cgroup_sweep(const struct cgroup_plan *p)
{
	char dir[CGROUP_PATH_MAX + 32];
	bool v2 = false;
	for (int k = 0; k < CGROUP_NKINDS; k++) {
		v2 = v2 || p->how[k] == CGROUP_V2;
		if (p->how[k] == CGROUP_V1 &&
		    (size_t)snprintf(dir, sizeof(dir), "%s/" CGROUP_SUBTREE, p->v1[k]) < sizeof(dir))
			sweep_dir(dir);
	}
	if (v2 && p->root && (size_t)snprintf(dir, sizeof(dir), "%s/" CGROUP_SUBTREE, p->v2) < sizeof(dir))
		sweep_dir(dir);
}

/* ---- saying it ---- */

/* cgroup_describe - see cgroup.h */
void cgroup_describe(enum cgroup_kind k, enum cgroup_how how, const char *why, bool systemd,
		     bool root, const struct cgroup_limits *l, char *out, size_t cap)
{
	const char *via = how == CGROUP_V1 ? "cgroup v1" :
			  systemd ? "cgroup v2, in a systemd user scope of its own" : "cgroup v2";
	switch (k) {
	case CGROUP_MEMORY:
		if (how != CGROUP_NONE)
			snprintf(out, cap, "memory: %lld MiB per sandbox, builds included, through %s "
				 "(%s)", l->memory >> 20, via, how == CGROUP_V2 ?
				 "memory.max, and no swap beyond it" : "memory.limit_in_bytes");
		else
			snprintf(out, cap, "memory: no cgroup limit: %s; RLIMIT_DATA of %lld MiB per "
				 "process stands in (each process alone, not the sandbox's total)", why,
				 l->memory >> 20);
		break;
	case CGROUP_PIDS:
		if (how != CGROUP_NONE)
			snprintf(out, cap, "processes: %ld processes and threads per sandbox through %s "
				 "(pids.max)", l->pids, via);
		else if (root)
			snprintf(out, cap, "processes: no cgroup limit: %s; RLIMIT_NPROC of %ld stands in "
				 "(each sandbox has a uid of its own)", why, l->pids);
		else
			snprintf(out, cap, "processes: no limit: %s (RLIMIT_NPROC would count every "
				 "process of your own uid, so it is not set)", why);
		break;
	default:
		if (how == CGROUP_V2 && root)
			snprintf(out, cap, "CPU: weight %d per sandbox through %s (cpu.weight): busy "
				 "sandboxes share the CPU evenly; one started ahead of need has %d until a "
				 "session takes it", CGROUP_CPU_WEIGHT, via, CGROUP_CPU_WEIGHT_PRESTART);
		else if (how == CGROUP_V2)
			snprintf(out, cap, "CPU: weight %d per sandbox through %s (cpu.weight): busy "
				 "sandboxes share the CPU evenly", CGROUP_CPU_WEIGHT, via);
		else if (how == CGROUP_V1)
			snprintf(out, cap, "CPU: cpu.shares %d per sandbox through cgroup v1: busy "
				 "sandboxes share the CPU evenly; one started ahead of need has %d until a "
				 "session takes it", CGROUP_CPU_SHARES, CGROUP_CPU_SHARES_PRESTART);
		else
			snprintf(out, cap, "CPU: no weight: %s; one busy sandbox can slow the others", why);
		break;
	}
}

/* cgroup_log_plan - see cgroup.h */
void cgroup_log_plan(const struct cgroup_plan *p, const struct cgroup_limits *l)
{
	for (int k = 0; k < CGROUP_NKINDS; k++) {
		char line[CGROUP_WHY_MAX + 256];
		cgroup_describe((enum cgroup_kind)k, p->how[k], p->why[k], p->systemd, p->root, l, line,
				sizeof(line));
		if (p->how[k] == CGROUP_NONE)
			log_warn("sandbox limits: %s", line);
		else
			log_info("sandbox limits: %s", line);
	}
}

/* cgroup_scope_argv - see cgroup.h */
int cgroup_scope_argv(const struct cgroup_plan *p, const char *name, char *unit, size_t unitcap,
		      char **argv)
{
	snprintf(unit, unitcap, CGROUP_SCOPE_PREFIX "%s-%d.scope", name, (int)getpid());
	int n = 0;
	argv[n++] = (char *)p->systemd_run;
	argv[n++] = "--user";
	argv[n++] = "--scope";
	argv[n++] = "--quiet";
	argv[n++] = "--collect";
	argv[n++] = "--property=Delegate=yes";
	argv[n++] = "--unit";
	argv[n++] = unit;
	argv[n++] = "--";
	return n;
}
