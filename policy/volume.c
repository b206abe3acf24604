/*
 * volume.c - a local sandbox's disk limit (see volume.h).
 *
 * Called by the jail (policy/jail.c) as root, before it gives up root: the image is copied from
 * a template made once per sandbox root with mke2fs (or made with mke2fs when there is none to
 * copy) and attached to a loop device here, with ioctls rather than losetup, so that the only
 * outside program is e2fsprogs. The loop device is set to clear itself when its last user goes:
 * that is the mount, which lives in the jail's own mount namespace and dies with the jail.
 * Also called by `sandboxes list` (volume_usage, volume_has_persist) and by serve at start-up
 * (volume_unavailable).
 */
#include "policy/volume.h"

#include "ipc/fsutil.h"
#include "policy/limits.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


static const char *const volume_subdirs[] = { "app", "state", "cache" };

/* find_tool - an e2fsprogs program in the usual places, or NULL */
static const char *find_tool(const char *name)
{
	static char buf[2][64];
	static int i;
	static const char *const dirs[] = { "/usr/sbin", "/sbin", "/usr/bin", "/bin" };
	i = (i + 1) % 2;
	for (size_t d = 0; d < sizeof(dirs) / sizeof(dirs[0]); d++) {
		snprintf(buf[i], sizeof(buf[i]), "%s/%s", dirs[d], name);
		if (access(buf[i], X_OK) == 0)
			return buf[i];
	}
	return NULL;
}

/* volume_unavailable - see volume.h */
const char *volume_unavailable(void)
{
	if (getuid() != 0)
		return "it needs root (a file system image loop-mounted per sandbox), and kode-gopher "
		       "runs as a normal user";
	if (!find_tool("mke2fs"))
		return "mke2fs is missing (`apt-get install e2fsprogs`)";
	if (access("/dev/loop-control", R_OK | W_OK) != 0)
		return "/dev/loop-control is missing or unusable (no loop devices here: "
		       "`modprobe loop`, or a container without them)";
	return NULL;
}

/* run_tool - run argv with fd as descriptor 3, output to out (or nowhere); its exit status */
static int run_tool(char *const argv[], int fd, int out)
{
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		if (null < 0)
			_exit(127);
		if (fd >= 0 && dup2(fd, 3) != 3)
			_exit(127);
		dup2(null, STDIN_FILENO);
		dup2(out >= 0 ? out : null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		char *envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL };
		execve(argv[0], argv, envp);
		_exit(127);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* loop_attach - a loop device backed by img that clears itself when unused; its open fd */
static int loop_attach(int img, char *dev, size_t devlen)
{
	int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		return -errno;
	int r = -EBUSY;
	bool fresh = false; /* the last device was busy: ask the kernel for a new one */
	for (int i = 0; i < VOLUME_LOOP_TRIES; i++) {
		/* LOOP_CTL_ADD of -1 makes a device at the lowest index not in use, one that no
		 * release or probe can still hold; GET_FREE would name the busy one again */
		int n = ioctl(ctl, fresh ? LOOP_CTL_ADD : LOOP_CTL_GET_FREE, fresh ? -1 : 0);
		if (n < 0 && fresh) {
			fresh = false;
			n = ioctl(ctl, LOOP_CTL_GET_FREE);
		}
		if (n < 0) {
			r = -errno;
			break;
		}
		snprintf(dev, devlen, "/dev/loop%d", n);
		int fd = open(dev, O_RDWR | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT) {
			/* no udev (a container): the kernel made the device, we make its node */
			mknod(dev, S_IFBLK | 0600, makedev(7, (unsigned)n));
			fd = open(dev, O_RDWR | O_CLOEXEC);
		}
		if (fd < 0) {
			r = -errno;
			break;
		}
		struct loop_config cfg = { .fd = (unsigned)img, .info = { .lo_flags = LO_FLAGS_AUTOCLEAR } };
		if (ioctl(fd, LOOP_CONFIGURE, &cfg) == 0) {
			close(ctl);
			return fd;
		}
		r = -errno;
		close(fd);
		if (r != -EBUSY)
			break;
		/* Busy: another sandbox's start took it between GET_FREE and CONFIGURE, or a release
		 * still holds it (its autoclear, a udev probe after the unmount): the next try takes
		 * a new device at once; only a run of busy ones pauses, a little longer each time */
		fresh = true;
		if (i < 2)
			continue;
		long ms = i < 8 ? 1L << (i - 2) : VOLUME_LOOP_PAUSE_MAX_MS;
		struct timespec ts = { .tv_sec = 0, .tv_nsec = ms * 1000000L };
		nanosleep(&ts, NULL);
	}
	close(ctl);
	return r;
}

/* mkfs_image - mke2fs on the image open at fd (already sized); its root directory owned by
 * uid:gid */
static int mkfs_image(int fd, uid_t uid, gid_t gid)
{
	const char *mke2fs = find_tool("mke2fs");
	char ext[160];
	snprintf(ext, sizeof(ext), "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=%u:%u",
		 (unsigned)uid, (unsigned)gid);
	char *argv[] = { (char *)mke2fs, "-q", "-F", "-t", "ext4", "-m", "0", "-L", "kg-sandbox",
			 "-E", ext, "/proc/self/fd/3", NULL };
	return mke2fs ? run_tool(argv, fd, -1) : -ENOENT;
}

/* image_ours - is fd a file only root can have written: a regular file of root's, one link, no
 * access for anyone else, of the given size? (What the kernel is handed to mount must not come
 * from a user: a crafted file system image is an attack on the kernel.) */
static bool image_ours(int fd, long long bytes)
{
	struct stat st;
	return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0 && st.st_nlink == 1 &&
	       (st.st_mode & 077) == 0 && (bytes < 0 || st.st_size == bytes);
}

/* template_fill - fs_replace_at's content for a template: an empty file system of *bytes */
static int template_fill(int fd, void *ctx)
{
	long long bytes = *(const long long *)ctx;
	if (ftruncate(fd, bytes) != 0)
		return -errno;
	int r = mkfs_image(fd, 0, 0);
	return r == 0 ? 0 : r < 0 ? r : -EIO;
}

/*
 * template_open - the empty formatted image of this size, made once per sandbox root (dir's
 * parent) and copied for each new sandbox: mke2fs is a fork, an exec and a few MiB of writes
 * for every sandbox otherwise, the largest part of a jail's start. Made under a temporary name
 * and renamed, so a jail never copies half of one; one that is not root's own alone is not
 * used (the caller falls back to mke2fs). Every sandbox of a root then has the same file
 * system UUID (statfs's f_fsid is derived from it) and directory hash seed (readable by no
 * sandbox: its users see files, never the device), both random per root. Returns an fd open
 * for reading, or -errno.
 */
static int template_open(const char *dir, long long bytes)
{
	char root[4096], tpl[4200];
	snprintf(root, sizeof(root), "%s", dir);
	char *slash = strrchr(root, '/');
	if (!slash)
		snprintf(root, sizeof(root), ".");
	else if (slash == root)
		root[1] = '\0';
	else
		*slash = '\0';
	snprintf(tpl, sizeof(tpl), "%s/" VOLUME_TEMPLATE, root, bytes);
	int fd = open(tpl, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd >= 0) {
		if (image_ours(fd, bytes))
			return fd;
		close(fd);
		return -EPERM;
	}
	if (errno != ENOENT)
		return -errno;
	int r = fs_replace_at(AT_FDCWD, tpl, 0600, FS_REPLACE_SYNC, template_fill, &bytes);
	if (r != 0)
		return r;
	fd = open(tpl, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (!image_ours(fd, bytes)) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* copy_extents - the data of src (a sparse image) into dst, which has its size already and
 * reads as zeros: only the extents that hold data are copied, in the kernel where it can */
static int copy_extents(int src, int dst, off_t size)
{
	char buf[65536];
	for (off_t pos = 0; pos < size;) {
		off_t data = lseek(src, pos, SEEK_DATA);
		if (data < 0)
			return errno == ENXIO ? 0 : -errno;
		off_t hole = lseek(src, data, SEEK_HOLE);
		if (hole < 0)
			return -errno;
		loff_t in = data, out = data;
		while (in < hole) {
			ssize_t n = copy_file_range(src, &in, dst, &out, (size_t)(hole - in), 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
				      errno == EOPNOTSUPP)) {
				/* another file system, or a kernel without it: by hand */
				size_t want = (size_t)(hole - in) < sizeof(buf) ? (size_t)(hole - in) : sizeof(buf);
				n = pread(src, buf, want, in);
				if (n > 0 && pwrite(dst, buf, (size_t)n, out) != n)
					return -EIO;
				if (n > 0) {
					in += n;
					out += n;
				}
			}
			if (n < 0)
				return -errno;
			if (n == 0)
				return -EIO;
		}
		pos = hole;
	}
	return 0;
}

/* bind_sub - bind vol's directory sub (made if missing, owned by uid:gid) over dir/sub */
static int bind_sub(int vol, const char *dir, const char *sub, uid_t uid, gid_t gid)
{
	if (mkdirat(vol, sub, 0700) == 0) {
		if (fchownat(vol, sub, uid, gid, AT_SYMLINK_NOFOLLOW) != 0)
			return -errno;
	} else if (errno != EEXIST) {
		return -errno;
	}
	int src = openat(vol, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (src < 0)
		return -errno;
	char from[64], to[4096];
	snprintf(from, sizeof(from), "/proc/self/fd/%d", src);
	snprintf(to, sizeof(to), "%s/%s", dir, sub);
	int r = mkdir(to, 0700) == 0 || errno == EEXIST ? 0 : -errno;
	if (r == 0 && mount(from, to, NULL, MS_BIND, NULL) != 0)
		r = -errno;
	close(src);
	return r;
}

/* volume_attach - see volume.h */
int volume_attach(const char *dir, long long bytes, uid_t uid, gid_t gid, char *err, size_t errlen)
{
	char img[4096], vol[4096], cache[4096];
	snprintf(img, sizeof(img), "%s/" VOLUME_IMAGE, dir);
	snprintf(vol, sizeof(vol), "%s/" VOLUME_MOUNT, dir);
	snprintf(cache, sizeof(cache), "%s/cache/gomod", dir);
	int fd = open(img, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	bool fresh = false;
	if (fd < 0 && errno == ENOENT) {
		struct stat st;
		if (stat(cache, &st) == 0)
			return 1; /* made before disk limits: its files are on the host's disk */
		fd = open(img, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		fresh = true;
	}
	if (fd < 0) {
		snprintf(err, errlen, "open %s: %s", img, strerror(errno));
		return -errno;
	}
	struct stat st;
	int r = 0;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 || st.st_nlink != 1) {
		snprintf(err, errlen, "%s is not the sandbox's own image (a regular file of root's, "
			 "with one link)", img);
		r = -EPERM;
		goto out;
	}
	bool copied = false;
	if (fresh) {
		if (ftruncate(fd, bytes) != 0) {
			r = -errno;
			snprintf(err, errlen, "size %s: %s", img, strerror(errno));
			goto out;
		}
		int tpl = template_open(dir, bytes);
		if (tpl >= 0) {
			copied = copy_extents(tpl, fd, bytes) == 0;
			close(tpl);
			/* a copy cut short leaves a mix: start again from zeros */
			if (!copied && (ftruncate(fd, 0) != 0 || ftruncate(fd, bytes) != 0)) {
				r = -errno;
				snprintf(err, errlen, "size %s: %s", img, strerror(errno));
				goto out;
			}
		}
		int rc = copied ? 0 : mkfs_image(fd, uid, gid);
		if (rc != 0) {
			snprintf(err, errlen, "mke2fs on %s failed (%s %d)", img, rc < 0 ? "error" : "status",
				 rc < 0 ? -rc : rc);
			r = -EIO;
			goto out;
		}
	}
	if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
		r = -errno;
		snprintf(err, errlen, "a mount namespace for the sandbox's disk: %s", strerror(errno));
		goto out;
	}
	char dev[64];
	int loop = loop_attach(fd, dev, sizeof(dev));
	if (loop < 0) {
		r = loop;
		snprintf(err, errlen, "a loop device for %s: %s", img, strerror(-loop));
		goto out;
	}
	/* A sandbox that is not kept is removed when its session ends, or by the next start's
	 * sweep after a crash, so its file system need not survive a crash of the host: it goes
	 * without the cache flushes that the loop device turns into an fsync of the whole image
	 * (the unmount at every release waited for one, a good part of a release's time). */
	char kept[4200];
	snprintf(kept, sizeof(kept), "%s/" VOLUME_KEPT, dir);
	const char *mopts = access(kept, F_OK) == 0 ? "noinit_itable,discard,errors=remount-ro"
						     : "noinit_itable,discard,errors=remount-ro,nobarrier";
	if ((mkdir(vol, 0700) != 0 && errno != EEXIST) ||
	    mount(dev, vol, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, mopts) != 0) {
		r = -errno;
		snprintf(err, errlen, "mount %s: %s", img, strerror(errno));
		close(loop);
		goto out;
	}
	close(loop); /* the mount holds it now; it clears itself when the mount goes */
	int vfd = open(vol, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (vfd < 0) {
		r = -errno;
		snprintf(err, errlen, "open %s: %s", vol, strerror(errno));
		goto out;
	}
	/* the template's root directory is root's; mke2fs's root_owner would have made it the
	 * sandbox's */
	if (copied && fchown(vfd, uid, gid) != 0) {
		r = -errno;
		snprintf(err, errlen, "chown %s: %s", vol, strerror(errno));
		close(vfd);
		goto out;
	}
	for (size_t i = 0; r == 0 && i < sizeof(volume_subdirs) / sizeof(volume_subdirs[0]); i++)
		if ((r = bind_sub(vfd, dir, volume_subdirs[i], uid, gid)) != 0)
			snprintf(err, errlen, "put %s/%s on the sandbox's disk: %s", dir, volume_subdirs[i],
				 strerror(-r));
	if (r == 0) {
		/* /app/persist too, as the master makes it for a sandbox without an image */
		char persist[4200];
		snprintf(persist, sizeof(persist), "%s/app/persist", dir);
		if (mkdir(persist, 0700) == 0) {
			if (chown(persist, uid, gid) != 0)
				r = -errno;
		} else if (errno != EEXIST) {
			r = -errno;
		}
		if (r)
			snprintf(err, errlen, "make %s: %s", persist, strerror(-r));
	}
	close(vfd);
out:
	close(fd);
	if (r != 0 && fresh)
		unlink(img);
	return r;
}

/* volume_usage - see volume.h */
long long volume_usage(const char *dir)
{
	char img[4096];
	struct stat st;
	snprintf(img, sizeof(img), "%s/" VOLUME_IMAGE, dir);
	if (lstat(img, &st) != 0 || !S_ISREG(st.st_mode))
		return -1;
	return (long long)st.st_blocks * 512;
}

/* volume_has_persist - see volume.h */
int volume_has_persist(const char *dir)
{
	char img[4096];
	snprintf(img, sizeof(img), "%s/" VOLUME_IMAGE, dir);
	int fd = open(img, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	const char *debugfs = find_tool("debugfs");
	int p[2];
	if (!debugfs || pipe2(p, O_CLOEXEC) != 0) {
		close(fd);
		return debugfs ? -errno : -ENOENT;
	}
	/* -c: catastrophic mode, no bitmaps read (faster, and fine for a listing) */
	char *argv[] = { (char *)debugfs, "-c", "-R", "ls -p /app/persist", "/proc/self/fd/3", NULL };
	pid_t pid = fork();
	if (pid < 0) {
		close(fd);
		close(p[0]);
		close(p[1]);
		return -errno;
	}
	if (pid == 0) {
		close(p[0]);
		_exit(run_tool(argv, fd, p[1]) == 0 ? 0 : 1);
	}
	close(p[1]);
	close(fd);
	/* one line per entry, "/inode/mode/uid/gid/name/size/": anything but . and .. counts */
	char buf[VOLUME_LIST_MAX_BYTES + 1];
	size_t len = 0;
	ssize_t n;
	while (len < VOLUME_LIST_MAX_BYTES && (n = read(p[0], buf + len, VOLUME_LIST_MAX_BYTES - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		len += (size_t)n;
	}
	close(p[0]);
	kill(pid, SIGKILL);
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	buf[len] = '\0';
	int found = 0, lines = 0;
	for (char *line = buf, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (line[0] != '/')
			continue;
		lines++;
		char *f = line;
		for (int i = 0; i < 4 && f; i++)
			f = strchr(f + 1, '/');
		if (!f)
			continue;
		char *name = f + 1, *end = strchr(name, '/');
		if (end)
			*end = '\0';
		if (strcmp(name, ".") && strcmp(name, ".."))
			found = 1;
	}
	return found ? 1 : lines > 0 ? 0 : -EIO;
}
