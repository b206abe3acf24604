/*
 * test_volume.c - unit tests for policy/volume.c's loop devices, as root only: a device the
 * kernel names free (LOOP_CTL_GET_FREE) that someone else still holds must not fail a sandbox's
 * start (seen under session churn: a release's autoclear or a udev probe still held it, and every
 * retry asked GET_FREE for the same number again).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "policy/volume.h"

/* attach_in_child - volume_attach in a child (it makes a mount namespace of its own, which goes
 * with the child); its result, or 100 + errno when the attach failed */
static int attach_in_child(const char *dir)
{
	pid_t pid = fork();
	if (pid == 0) {
		char err[600] = "";
		int r = volume_attach(dir, 64ll << 20, 0, 0, err, sizeof(err));
		if (r < 0)
			fprintf(stderr, "volume_attach: %s\n", err);
		_exit(r < 0 ? 100 + (-r & 0x7f) : r);
	}
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_held_free_device(void **st)
{
	(void)st;
	if (geteuid() != 0 || volume_unavailable()) {
		skip();
		return;
	}
	char root[] = "/tmp/kg-test-volume-XXXXXX";
	assert_non_null(mkdtemp(root));
	char dir[128];
	snprintf(dir, sizeof(dir), "%s/sb", root);
	assert_int_equal(mkdir(dir, 0700), 0);
	/* hold the device GET_FREE names, as a release's last opener does: exclusively */
	int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	assert_true(ctl >= 0);
	int n = ioctl(ctl, LOOP_CTL_GET_FREE);
	assert_true(n >= 0);
	char dev[32];
	snprintf(dev, sizeof(dev), "/dev/loop%d", n);
	int held = open(dev, O_RDWR | O_EXCL | O_CLOEXEC);
	assert_true(held >= 0);
	/* the kernel still names it free: the case the start met */
	assert_int_equal(ioctl(ctl, LOOP_CTL_GET_FREE), n);
	int r = attach_in_child(dir);
	assert_int_equal(r, 0); /* the start took another device (on the old code: 100 + EBUSY) */
	assert_int_equal(ioctl(ctl, LOOP_CTL_GET_FREE), n); /* and left the held one alone */
	close(held);
	close(ctl);
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_held_free_device),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
