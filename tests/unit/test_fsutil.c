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
#include "tests/unit/testutil.h"

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

/* entries - how many names are in dir (besides . and ..) */
static int entries(const char *dir)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "ls -A %s | wc -l", dir);
	return shell_count(cmd);
}

/* slurp_at - a small file's text, "" if it cannot be read */
static const char *slurp_at(int dirfd, const char *name)
{
	static char buf[256];
	buf[0] = '\0';
	int fd = openat(dirfd, name, O_RDONLY);
	if (fd >= 0) {
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		buf[n > 0 ? n : 0] = '\0';
		close(fd);
	}
	return buf;
}

static int fill_fails(int fd, void *ctx)
{
	(void)ctx;
	return write(fd, "half", 4) == 4 ? -ENOSPC : -EIO;
}

/* fs_replace_at: whole new content or the old one, never a part; the mode asked for; nothing
 * left beside it, whether it worked or not; by path or under a directory descriptor */
static void test_replace(void **state)
{
	(void)state;
	char path[128];
	snprintf(path, sizeof(path), "%s/store", base);
	assert_int_equal(fs_replace_data_at(AT_FDCWD, path, "one", 3, 0600, FS_REPLACE_SYNC), 0);
	assert_string_equal(slurp_at(AT_FDCWD, path), "one");
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	/* a reader holding the old file keeps the old content; the name has the new one */
	int old = open(path, O_RDONLY);
	assert_true(old >= 0);
	assert_int_equal(fs_replace_data_at(AT_FDCWD, path, "second", 6, 0644, 0), 0);
	assert_string_equal(slurp_at(AT_FDCWD, path), "second");
	char was[8] = { 0 };
	assert_int_equal(read(old, was, sizeof(was) - 1), 3);
	assert_string_equal(was, "one");
	close(old);
	/* a failed fill leaves the old content and no temporary file */
	assert_int_equal(fs_replace_at(AT_FDCWD, path, 0600, FS_REPLACE_SYNC, fill_fails, NULL),
			 -ENOSPC);
	assert_string_equal(slurp_at(AT_FDCWD, path), "second");
	assert_int_equal(entries(base), 1);
	/* under a directory descriptor, a name without a slash */
	int dfd = open(base, O_RDONLY | O_DIRECTORY);
	assert_true(dfd >= 0);
	assert_int_equal(fs_replace_data_at(dfd, "other", "x", 1, 0600, FS_REPLACE_SYNC), 0);
	assert_string_equal(slurp_at(dfd, "other"), "x");
	/* a symlink at the name is replaced, not followed */
	assert_int_equal(symlinkat("store", dfd, "link"), 0);
	assert_int_equal(fs_replace_data_at(dfd, "link", "y", 1, 0600, 0), 0);
	assert_string_equal(slurp_at(dfd, "store"), "second");
	assert_int_equal(fstatat(dfd, "link", &st, AT_SYMLINK_NOFOLLOW), 0);
	assert_true(S_ISREG(st.st_mode));
	close(dfd);
	assert_int_equal(entries(base), 3);
	/* a directory that does not exist: an error, nothing made */
	char missing[160];
	snprintf(missing, sizeof(missing), "%s/none/store", base);
	assert_int_equal(fs_replace_data_at(AT_FDCWD, missing, "z", 1, 0600, 0), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_deeper_than_the_descriptor_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_odd_modes_and_many_entries, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symlinks_not_followed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replace, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
