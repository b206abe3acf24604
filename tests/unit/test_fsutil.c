/*
 * test_fsutil.c - unit tests for ipc/fsutil.c's fs_rm_tree_at (the one remover of sandbox trees,
 * used by the master, `sandboxes rm` and the agent's wipe): trees deeper than any descriptor
 * limit, directories of mode 000 / 0500 / 0100, many entries, and symlinks that must not be
 * followed out of the tree.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ipc/fsutil.h"

static char base[64];

static int setup(void **state)
{
	(void)state;
	strcpy(base, "/tmp/kg-test-fsutil-XXXXXX");
	return mkdtemp(base) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "chmod -R u+rwx %s 2>/dev/null; rm -rf %s", base, base);
	return system(cmd) == 0 ? 0 : -1;
}

/* deep - a chain of n directories named d under dirfd/name, a file at the bottom */
static void deep(int dirfd, const char *name, int n)
{
	assert_int_equal(mkdirat(dirfd, name, 0755), 0);
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY);
	assert_true(fd >= 0);
	for (int i = 0; i < n; i++) {
		assert_int_equal(mkdirat(fd, "d", 0755), 0);
		int next = openat(fd, "d", O_RDONLY | O_DIRECTORY);
		assert_true(next >= 0);
		close(fd);
		fd = next;
	}
	int f = openat(fd, "bottom", O_CREAT | O_WRONLY, 0400);
	assert_true(f >= 0);
	assert_int_equal(write(f, "x", 1), 1);
	close(f);
	fchmod(fd, 0500);
	close(fd);
}

static void test_deeper_than_the_descriptor_limit(void **state)
{
	(void)state;
	int top = open(base, O_RDONLY | O_DIRECTORY);
	assert_true(top >= 0);
	deep(top, "tree", 6000);
	/* the old remover held a descriptor per level: it cannot get past 64 levels here */
	struct rlimit old, tight = { 64, 64 };
	getrlimit(RLIMIT_NOFILE, &old);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &tight), 0);
	int rc = fs_rm_tree_at(top, "tree");
	setrlimit(RLIMIT_NOFILE, &old);
	assert_int_equal(rc, 0);
	assert_int_equal(faccessat(top, "tree", F_OK, AT_SYMLINK_NOFOLLOW), -1);
	close(top);
}

static void test_odd_modes_and_many_entries(void **state)
{
	(void)state;
	int top = open(base, O_RDONLY | O_DIRECTORY);
	char p[256];
	snprintf(p, sizeof(p), "%s/odd", base);
	assert_int_equal(mkdir(p, 0755), 0);
	static const mode_t modes[] = { 0, 0500, 0100, 0300 };
	for (size_t i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), "%s/odd/m%zu", base, i);
		assert_int_equal(mkdir(p, 0755), 0);
		snprintf(p, sizeof(p), "%s/odd/m%zu/sub", base, i);
		assert_int_equal(mkdir(p, 0755), 0);
		snprintf(p, sizeof(p), "%s/odd/m%zu/sub/f", base, i);
		close(open(p, O_CREAT | O_WRONLY, 0));
		chmod(p, 0);
		snprintf(p, sizeof(p), "%s/odd/m%zu/sub", base, i);
		chmod(p, modes[i]);
		snprintf(p, sizeof(p), "%s/odd/m%zu", base, i);
		chmod(p, modes[i]);
	}
	snprintf(p, sizeof(p), "%s/odd/many", base);
	assert_int_equal(mkdir(p, 0755), 0);
	for (int i = 0; i < 5000; i++) {
		snprintf(p, sizeof(p), "%s/odd/many/%04d", base, i);
		close(open(p, O_CREAT | O_WRONLY, 0644));
	}
	snprintf(p, sizeof(p), "%s/odd", base);
	chmod(p, 0);
	assert_int_equal(fs_rm_tree_at(top, "odd"), 0);
	assert_int_equal(faccessat(top, "odd", F_OK, AT_SYMLINK_NOFOLLOW), -1);
	close(top);
}

static void test_symlinks_not_followed(void **state)
{
	(void)state;
	int top = open(base, O_RDONLY | O_DIRECTORY);
	char p[256], q[256];
	snprintf(p, sizeof(p), "%s/outside", base);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/outside/keep", base);
	close(open(p, O_CREAT | O_WRONLY, 0644));
	snprintf(p, sizeof(p), "%s/tree", base);
	assert_int_equal(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/outside", base);
	snprintf(q, sizeof(q), "%s/tree/link", base);
	assert_int_equal(symlink(p, q), 0);
	snprintf(q, sizeof(q), "%s/tree/dangling", base);
	assert_int_equal(symlink("/nonexistent/kg", q), 0);
	assert_int_equal(fs_rm_tree_at(top, "tree"), 0);
	snprintf(p, sizeof(p), "%s/outside/keep", base);
	assert_int_equal(access(p, F_OK), 0);
	/* the top itself a symlink: the link goes, not what it names */
	snprintf(p, sizeof(p), "%s/outside", base);
	snprintf(q, sizeof(q), "%s/toplink", base);
	assert_int_equal(symlink(p, q), 0);
	assert_int_equal(fs_rm_tree_at(top, "toplink"), 0);
	snprintf(p, sizeof(p), "%s/outside/keep", base);
	assert_int_equal(access(p, F_OK), 0);
	/* a name that is not there is already removed */
	assert_int_equal(fs_rm_tree_at(top, "absent"), 0);
	close(top);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_deeper_than_the_descriptor_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_odd_modes_and_many_entries, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symlinks_not_followed, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
