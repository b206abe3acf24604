/*
 * test_cgroup.c - unit tests for policy/cgroup.c: the parsers and the plan's wording on
 * mountinfo texts of the hosts kode-gopher meets (v2 only, hybrid, v1 only, a container), and
 * the v2 code against the kernel's own cgroup2 hierarchy, mounted in a private mount namespace
 * (as root only; this machine binds memory, pids and cpu to v1, so the hierarchy has none of
 * them here, and the tests then check the refusal is reported; on a v2 host they check the
 * knobs the kernel holds). The whole v2 path, limits hit, is tested by `make check-cgroup2`.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "policy/cgroup.h"

/* ---- parsing ---- */

static const char mi_v2[] =
	"22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
	"25 21 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
	"rw,nsdelegate,memory_recursiveprot\n"
	"26 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n";

static const char mi_hybrid[] =
	"31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
	"32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
	"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
	"39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
	"40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n"
	"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

static void test_mounts_v2_only(void **state)
{
	(void)state;
	char v2[CGROUP_PATH_MAX], v1[CGROUP_NKINDS][CGROUP_PATH_MAX];
	assert_int_equal(cgroup_parse_mounts(mi_v2, v2, v1), 0);
	assert_string_equal(v2, "/sys/fs/cgroup");
	for (int k = 0; k < CGROUP_NKINDS; k++)
		assert_string_equal(v1[k], "");
}

static void test_mounts_hybrid(void **state)
{
	(void)state;
	char v2[CGROUP_PATH_MAX], v1[CGROUP_NKINDS][CGROUP_PATH_MAX];
	assert_int_equal(cgroup_parse_mounts(mi_hybrid, v2, v1), 0);
	assert_string_equal(v2, "/sys/fs/cgroup/unified");
	assert_string_equal(v1[CGROUP_MEMORY], "/sys/fs/cgroup/memory");
	assert_string_equal(v1[CGROUP_PIDS], "/sys/fs/cgroup/pids");
	/* cpu shares a hierarchy with cpuacct; cpuacct alone is not cpu */
	assert_string_equal(v1[CGROUP_CPU], "/sys/fs/cgroup/cpu,cpuacct");
}

static void test_mounts_edge_cases(void **state)
{
	(void)state;
	char v2[CGROUP_PATH_MAX], v1[CGROUP_NKINDS][CGROUP_PATH_MAX];
	/* a bind of a sub-tree (a container's view) is not the hierarchy's root; an escaped space
	 * in a mount point; the canonical /sys/fs/cgroup wins over an earlier extra mount */
	const char mi[] =
		"50 1 0:40 /sub /mnt/sub rw - cgroup2 cgroup2 rw\n"
		"51 1 0:40 / /mnt/my\\040cg rw - cgroup2 cgroup2 rw\n"
		"52 1 0:40 / /sys/fs/cgroup rw shared:3 master:1 - cgroup2 cgroup2 rw\n"
		"53 1 0:41 / /cg/cpuacct rw - cgroup cgroup rw,cpuacct\n";
	assert_int_equal(cgroup_parse_mounts(mi, v2, v1), 0);
	assert_string_equal(v2, "/sys/fs/cgroup");
	assert_string_equal(v1[CGROUP_CPU], "");
	const char mi2[] =
		"50 1 0:40 /sub /mnt/sub rw - cgroup2 cgroup2 rw\n"
		"51 1 0:40 / /mnt/my\\040cg rw - cgroup2 cgroup2 rw\n";
	assert_int_equal(cgroup_parse_mounts(mi2, v2, v1), 0);
	assert_string_equal(v2, "/mnt/my cg");
	/* not mountinfo: refused, not half-read */
	assert_int_equal(cgroup_parse_mounts("garbage without fields\n", v2, v1), -EINVAL);
	assert_int_equal(cgroup_parse_mounts("1 2 3:4 / /x rw no separator here\n", v2, v1), -EINVAL);
	assert_int_equal(cgroup_parse_mounts("", v2, v1), 0);
	assert_string_equal(v2, "");
}

static void test_list_has(void **state)
{
	(void)state;
	assert_true(cgroup_list_has("cpuset cpu io memory hugetlb pids rdma misc\n", "cpu"));
	assert_true(cgroup_list_has("cpuset cpu io memory hugetlb pids rdma misc\n", "misc"));
	assert_false(cgroup_list_has("cpuset io memory\n", "cpu"));
	assert_false(cgroup_list_has("rw,cpuacct", "cpu"));
	assert_true(cgroup_list_has("rw,cpu,cpuacct", "cpu"));
	assert_false(cgroup_list_has("", "memory"));
	assert_false(cgroup_list_has("memoryx", "memory"));
}

static void test_parse_self(void **state)
{
	(void)state;
	char out[CGROUP_PATH_MAX];
	assert_int_equal(cgroup_parse_self("0::/user.slice/user-1000.slice/user@1000.service/app.slice/"
					   "kode-gopher-kg-1-2.scope\n", out), 0);
	assert_string_equal(out, "/user.slice/user-1000.slice/user@1000.service/app.slice/"
			    "kode-gopher-kg-1-2.scope");
	assert_int_equal(cgroup_parse_self("9:name=systemd:/\n4:memory:/x\n0::/\n", out), 0);
	assert_string_equal(out, "/");
	assert_int_equal(cgroup_parse_self("4:memory:/x\n1:cpu:/\n", out), -ENOENT);
	assert_int_equal(cgroup_parse_self("0::relative\n", out), -EINVAL);
}

static void test_oom_kills(void **state)
{
	(void)state;
	assert_int_equal(cgroup_parse_oom_kills("low 0\nhigh 0\nmax 31\noom 2\noom_kill 2\n"
						"oom_group_kill 0\n"), 2);
	assert_int_equal(cgroup_parse_oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 17\n"), 17);
	assert_int_equal(cgroup_parse_oom_kills("oom_kill_disable 0\nunder_oom 0\n"), -1);
	assert_int_equal(cgroup_parse_oom_kills("oom_kill x\n"), -1);
	assert_int_equal(cgroup_parse_oom_kills("oom_kill -1\n"), -1);
	assert_int_equal(cgroup_parse_oom_kills("oom_kill 3junk\n"), -1);
	assert_int_equal(cgroup_parse_oom_kills(""), -1);
}

/* ---- what is said ---- */

static void test_describe(void **state)
{
	(void)state;
	struct cgroup_limits l = { .memory = 256ll << 20, .pids = 100 };
	char line[2048];
	cgroup_describe(CGROUP_MEMORY, CGROUP_V2, "", false, true, &l, line, sizeof(line));
	assert_string_equal(line, "memory: 256 MiB per sandbox, builds included, through cgroup v2 "
			    "(memory.max, and no swap beyond it)");
	cgroup_describe(CGROUP_MEMORY, CGROUP_V2, "", true, false, &l, line, sizeof(line));
	assert_non_null(strstr(line, "through cgroup v2, in a systemd user scope of its own"));
	cgroup_describe(CGROUP_MEMORY, CGROUP_NONE, "no reason at all", false, false, &l, line, sizeof(line));
	assert_string_equal(line, "memory: no cgroup limit: no reason at all; RLIMIT_DATA of 256 MiB "
			    "per process stands in (each process alone, not the sandbox's total)");
	cgroup_describe(CGROUP_PIDS, CGROUP_V1, "", false, true, &l, line, sizeof(line));
	assert_string_equal(line, "processes: 100 processes and threads per sandbox through cgroup v1 "
			    "(pids.max)");
	/* without cgroups a normal user has no process limit at all, and is told so */
	cgroup_describe(CGROUP_PIDS, CGROUP_NONE, "why", false, false, &l, line, sizeof(line));
	assert_non_null(strstr(line, "processes: no limit: why"));
	cgroup_describe(CGROUP_PIDS, CGROUP_NONE, "why", false, true, &l, line, sizeof(line));
	assert_non_null(strstr(line, "RLIMIT_NPROC of 100 stands in"));
	cgroup_describe(CGROUP_CPU, CGROUP_V2, "", false, true, &l, line, sizeof(line));
	assert_non_null(strstr(line, "CPU: weight 100 per sandbox through cgroup v2 (cpu.weight)"));
	cgroup_describe(CGROUP_CPU, CGROUP_NONE, "why", false, true, &l, line, sizeof(line));
	assert_string_equal(line, "CPU: no weight: why; one busy sandbox can slow the others");
}

static void test_scope_argv(void **state)
{
	(void)state;
	struct cgroup_plan p;
	memset(&p, 0, sizeof(p));
	strcpy(p.systemd_run, "/usr/bin/systemd-run");
	char unit[128], *argv[16];
	int n = cgroup_scope_argv(&p, "kg-abc", unit, sizeof(unit), argv);
	char want[64];
	snprintf(want, sizeof(want), "kode-gopher-kg-abc-%d.scope", (int)getpid());
	assert_string_equal(unit, want);
	assert_string_equal(argv[0], "/usr/bin/systemd-run");
	assert_string_equal(argv[n - 1], "--");
	bool user = false, scope = false, delegate = false;
	for (int i = 0; i < n; i++) {
		user = user || strcmp(argv[i], "--user") == 0;
		scope = scope || strcmp(argv[i], "--scope") == 0;
		delegate = delegate || strcmp(argv[i], "--property=Delegate=yes") == 0;
	}
	assert_true(user && scope && delegate);
}

/* ---- the kernel's own cgroup2 hierarchy ---- */

static char mnt[64];

/* in_private_cgroup2 - fork; the child gets a private mount namespace with the cgroup2
 * hierarchy at mnt and runs fn, whose return is its exit status; -1: cannot here (skip) */
static int in_private_cgroup2(int (*fn)(void))
{
	if (geteuid() != 0)
		return -1;
	strcpy(mnt, "/tmp/kg-test-cgroup-XXXXXX");
	if (!mkdtemp(mnt))
		return -1;
	int pfd[2];
	assert_int_equal(pipe(pfd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pfd[0]);
		char ok = 0;
		if (unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
		    mount("cgroup2", mnt, "cgroup2", 0, NULL) == 0)
			ok = 1;
		if (write(pfd[1], &ok, 1) != 1 || !ok)
			_exit(0);
		_exit(fn());
	}
	close(pfd[1]);
	char ok = 0;
	ssize_t n = read(pfd[0], &ok, 1);
	close(pfd[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	rmdir(mnt);
	if (n != 1 || !ok)
		return -1;
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c); return 1; } } while (0)

/* self_in - our unified-hierarchy path */
static int self_in(char out[CGROUP_PATH_MAX])
{
	char buf[4096];
	int fd = open("/proc/self/cgroup", O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return cgroup_parse_self(buf, out);
}

/* plan_child - the plan read from the kernel: a kind is v2 exactly when the root offers it */
static int plan_child(void)
{
	struct cgroup_plan p;
	cgroup_plan(&p, true, mnt);
	char ctl[512] = "";
	CHECK(cgroup_read_knob(mnt, "cgroup.controllers", ctl, sizeof(ctl)) == 0);
	for (int k = 0; k < CGROUP_NKINDS; k++) {
		bool offered = cgroup_list_has(ctl, cgroup_kind_name[k]);
		CHECK(offered == (p.how[k] == CGROUP_V2));
		if (!offered)
			CHECK(strstr(p.why[k], "the kernel offers no") && strstr(p.why[k], cgroup_kind_name[k]));
	}
	return 0;
}

static void test_kernel_plan(void **state)
{
	(void)state;
	int r = in_private_cgroup2(plan_child);
	if (r < 0)
		skip();
	assert_int_equal(r, 0);
}

/* enter_child_check - after cgroup_enter with pids and cpu planned: each either holds its
 * value in the kernel's knob, or is out with the kernel's refusal as the reason */
static int enter_child_check(const struct cgroup_got *g, const char *where, const char *weight)
{
	char v[64];
	if (g->how[CGROUP_CPU] == CGROUP_V2) {
		CHECK(cgroup_read_knob(g->leaf, "cpu.weight", v, sizeof(v)) == 0 && strcmp(v, weight) == 0);
	} else {
		CHECK(strstr(g->why[CGROUP_CPU], "cannot enable the cpu controller in "));
		CHECK(strstr(g->why[CGROUP_CPU], where));
	}
	if (g->how[CGROUP_PIDS] == CGROUP_V2)
		CHECK(cgroup_read_knob(g->leaf, "pids.max", v, sizeof(v)) == 0 && strcmp(v, "1000") == 0);
	else
		CHECK(strstr(g->why[CGROUP_PIDS], "cannot enable the pids controller in "));
	CHECK(g->how[CGROUP_MEMORY] == CGROUP_NONE); /* not asked for */
	return 0;
}

/* enter_root_child - as root: <mnt>/kode-gopher/<name>, and the process moved in */
static int enter_root_child(void)
{
	struct cgroup_plan p;
	memset(&p, 0, sizeof(p));
	p.root = true;
	snprintf(p.v2, sizeof(p.v2), "%s", mnt);
	p.how[CGROUP_PIDS] = p.how[CGROUP_CPU] = CGROUP_V2;
	char name[48];
	snprintf(name, sizeof(name), "kg-unit-%d", (int)getpid());
	struct cgroup_limits l = { .memory = 0, .pids = 1000 };
	struct cgroup_got g;
	/* the master makes the group at the pre-start's weight before the jail starts; the jail
	 * enters it and leaves the weight alone; a session taking it raises it */
	int made = cgroup_cpu_weight(&p, name, true, true);
	cgroup_enter(&p, name, &l, &g);
	char want[CGROUP_PATH_MAX], self[CGROUP_PATH_MAX];
	snprintf(want, sizeof(want), "%s/kode-gopher/%s", mnt, name);
	CHECK(strcmp(g.leaf, want) == 0);
	snprintf(want, sizeof(want), "/kode-gopher/%s", name);
	CHECK(self_in(self) == 0 && strcmp(self, want) == 0);
	CHECK((made == 0) == (g.how[CGROUP_CPU] == CGROUP_V2));
	int r = enter_child_check(&g, mnt, "6");
	if (made == 0) {
		char v[16];
		CHECK(cgroup_cpu_weight(&p, name, false, false) == 0);
		CHECK(cgroup_read_knob(g.leaf, "cpu.weight", v, sizeof(v)) == 0 && strcmp(v, "100") == 0);
	}
	/* the master removes the leaf once nothing is in it; not before */
	CHECK(!cgroup_remove(&p, name));
	char pid[24];
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	int fd = open(strcat(strcpy(want, mnt), "/cgroup.procs"), O_WRONLY);
	CHECK(fd >= 0 && write(fd, pid, strlen(pid)) > 0);
	close(fd);
	CHECK(cgroup_remove(&p, name));
	CHECK(access(g.leaf, F_OK) != 0);
	return r;
}

static void test_kernel_enter_root(void **state)
{
	(void)state;
	int r = in_private_cgroup2(enter_root_child);
	if (r < 0)
		skip();
	assert_int_equal(r, 0);
}

/* enter_scope_child - a normal user's way: the jail is alone in a kode-gopher-*.scope (here one
 * we made, as systemd-run would); it must leave the scope for a leaf before the scope can enable
 * controllers (no internal processes), and the leaf gets the limits */
static int enter_scope_child(void)
{
	char parent[CGROUP_PATH_MAX], scope[CGROUP_PATH_MAX + 64], pid[24], want[CGROUP_PATH_MAX + 96];
	snprintf(parent, sizeof(parent), "%s/kg-unit-%d", mnt, (int)getpid());
	snprintf(scope, sizeof(scope), "%s/" CGROUP_SCOPE_PREFIX "kg-x-%d.scope", parent, (int)getpid());
	CHECK(mkdir(parent, 0755) == 0);
	CHECK(mkdir(scope, 0755) == 0);
	/* what systemd's delegation would have enabled above the scope (best effort: not here) */
	int fd = open(strcat(strcpy(want, mnt), "/cgroup.subtree_control"), O_WRONLY);
	if (fd >= 0) {
		(void)!write(fd, "+cpu +pids", 10);
		close(fd);
	}
	fd = open(strcat(strcpy(want, parent), "/cgroup.subtree_control"), O_WRONLY);
	if (fd >= 0) {
		(void)!write(fd, "+cpu +pids", 10);
		close(fd);
	}
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	fd = open(strcat(strcpy(want, scope), "/cgroup.procs"), O_WRONLY);
	CHECK(fd >= 0 && write(fd, pid, strlen(pid)) > 0);
	close(fd);

	struct cgroup_plan p;
	memset(&p, 0, sizeof(p));
	snprintf(p.v2, sizeof(p.v2), "%s", mnt);
	p.systemd = true;
	p.how[CGROUP_PIDS] = p.how[CGROUP_CPU] = CGROUP_V2;
	struct cgroup_limits l = { .memory = 0, .pids = 1000 };
	struct cgroup_got g;
	cgroup_enter(&p, "ignored", &l, &g);
	snprintf(want, sizeof(want), "%s/" CGROUP_SCOPE_LEAF, scope);
	CHECK(strcmp(g.leaf, want) == 0);
	char self[CGROUP_PATH_MAX];
	snprintf(want, sizeof(want), "%s/" CGROUP_SCOPE_LEAF, scope + strlen(mnt));
	CHECK(self_in(self) == 0 && strcmp(self, want) == 0);
	int r = enter_child_check(&g, scope, "100");
	CHECK(cgroup_cpu_weight(&p, "ignored", true, true) == -EOPNOTSUPP); /* the jail's own, here */

	/* out again, and clean up what systemd would remove */
	fd = open(strcat(strcpy(want, mnt), "/cgroup.procs"), O_WRONLY);
	CHECK(fd >= 0 && write(fd, pid, strlen(pid)) > 0);
	close(fd);
	CHECK(rmdir(g.leaf) == 0 && rmdir(scope) == 0 && rmdir(parent) == 0);
	return r;
}

static void test_kernel_enter_scope(void **state)
{
	(void)state;
	int r = in_private_cgroup2(enter_scope_child);
	if (r < 0)
		skip();
	assert_int_equal(r, 0);
}

/* sweep_child - a start-up sweep removes the empty groups a dead master left, not one in use */
static int sweep_child(void)
{
	char top[CGROUP_PATH_MAX], empty[CGROUP_PATH_MAX + 64], busy[CGROUP_PATH_MAX + 64], pid[24];
	char p[CGROUP_PATH_MAX + 96];
	snprintf(top, sizeof(top), "%s/kode-gopher", mnt);
	snprintf(empty, sizeof(empty), "%s/kg-unit-empty-%d", top, (int)getpid());
	snprintf(busy, sizeof(busy), "%s/kg-unit-busy-%d", top, (int)getpid());
	CHECK((mkdir(top, 0755) == 0 || errno == EEXIST) && mkdir(empty, 0755) == 0 && mkdir(busy, 0755) == 0);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	int fd = open(strcat(strcpy(p, busy), "/cgroup.procs"), O_WRONLY);
	CHECK(fd >= 0 && write(fd, pid, strlen(pid)) > 0);
	close(fd);
	struct cgroup_plan pl;
	memset(&pl, 0, sizeof(pl));
	pl.root = true;
	snprintf(pl.v2, sizeof(pl.v2), "%s", mnt);
	pl.how[CGROUP_CPU] = CGROUP_V2;
	cgroup_sweep(&pl);
	CHECK(access(empty, F_OK) != 0);
	CHECK(access(busy, F_OK) == 0);
	fd = open(strcat(strcpy(p, mnt), "/cgroup.procs"), O_WRONLY);
	CHECK(fd >= 0 && write(fd, pid, strlen(pid)) > 0);
	close(fd);
	CHECK(rmdir(busy) == 0);
	return 0;
}

static void test_kernel_sweep(void **state)
{
	(void)state;
	int r = in_private_cgroup2(sweep_child);
	if (r < 0)
		skip();
	assert_int_equal(r, 0);
}

/* scope_refused_child - a jail that is not in a scope of its own says so and sets nothing */
static int scope_refused_child(void)
{
	struct cgroup_plan p;
	memset(&p, 0, sizeof(p));
	snprintf(p.v2, sizeof(p.v2), "%s", mnt);
	p.systemd = true;
	p.how[CGROUP_CPU] = CGROUP_V2;
	struct cgroup_limits l = { 0 };
	struct cgroup_got g;
	char before[CGROUP_PATH_MAX], after[CGROUP_PATH_MAX];
	CHECK(self_in(before) == 0);
	cgroup_enter(&p, "x", &l, &g);
	CHECK(g.how[CGROUP_CPU] == CGROUP_NONE);
	CHECK(strstr(g.why[CGROUP_CPU], "is not in a kode-gopher-*.scope of its own"));
	CHECK(self_in(after) == 0 && strcmp(before, after) == 0);
	return 0;
}

static void test_kernel_scope_refused(void **state)
{
	(void)state;
	int r = in_private_cgroup2(scope_refused_child);
	if (r < 0)
		skip();
	assert_int_equal(r, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mounts_v2_only),
		cmocka_unit_test(test_mounts_hybrid),
		cmocka_unit_test(test_mounts_edge_cases),
		cmocka_unit_test(test_list_has),
		cmocka_unit_test(test_parse_self),
		cmocka_unit_test(test_oom_kills),
		cmocka_unit_test(test_describe),
		cmocka_unit_test(test_scope_argv),
		cmocka_unit_test(test_kernel_plan),
		cmocka_unit_test(test_kernel_enter_root),
		cmocka_unit_test(test_kernel_enter_scope),
		cmocka_unit_test(test_kernel_scope_refused),
		cmocka_unit_test(test_kernel_sweep),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
