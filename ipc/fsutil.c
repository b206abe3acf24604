/*
 * fsutil.c - see fsutil.h.
 */
#include "ipc/fsutil.h"

#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_mkdir_p(const char *path, mode_t mode)
{
	char tmp[PATH_MAX];
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s", path) >= sizeof(tmp))
		return -ENAMETOOLONG;
	for (char *p = tmp + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
				return -errno;
			*p = '/';
		}
	if (mkdir(tmp, mode) != 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int fs_read_fd(int fd, size_t max, char **data, size_t *len)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if ((size_t)st.st_size > max)
		return -EFBIG;
	char *buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return -ENOMEM;
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	buf[got] = '\0';
	*data = buf;
	*len = got;
	return 0;
}

/* fs_locked_flags - see fsutil.h */
unsigned long fs_locked_flags(const char *path)
{
	struct statvfs sv;
	unsigned long f = 0;
	if (statvfs(path, &sv) != 0)
		return 0;
	if (sv.f_flag & ST_NOSUID)
		f |= MS_NOSUID;
	if (sv.f_flag & ST_NODEV)
		f |= MS_NODEV;
	if (sv.f_flag & ST_NOEXEC)
		f |= MS_NOEXEC;
	if (sv.f_flag & ST_NOATIME)
		f |= MS_NOATIME;
	if (sv.f_flag & ST_NODIRATIME)
		f |= MS_NODIRATIME;
	if (sv.f_flag & ST_RELATIME)
		f |= MS_RELATIME;
	return f;
}

/* rm_scan - unlink the non-directories in the open directory dfd; the first subdirectory goes
 * to *sub (true), or there is none left (false); *err gets the first failure */
static bool rm_scan(int dfd, char *sub, size_t subcap, int *err)
{
	int dup_fd = dup(dfd);
	DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
	if (!d) {
		if (dup_fd >= 0)
			close(dup_fd);
		*err = -errno;
		return false;
	}
	rewinddir(d);
	bool found = false;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		bool dir = e->d_type == DT_DIR;
		if (e->d_type == DT_UNKNOWN) {
			struct stat st;
			dir = fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
		}
		if (dir) {
			if (!found && strlen(e->d_name) < subcap) {
				strcpy(sub, e->d_name);
				found = true;
			}
			continue;
		}
		if (unlinkat(dfd, e->d_name, 0) != 0 && errno != ENOENT && *err == 0)
			*err = -errno;
	}
	closedir(d);
	return found;
}

/* rm_own - make the directory fd listable and writable for us, if it is not */
static void rm_own(int fd)
{
	struct stat st;
	if (fstat(fd, &st) == 0 && (st.st_mode & 0700) != 0700)
		fchmod(fd, (st.st_mode & 07777) | 0700);
}

/* rm_deep - remove parent/name with two descriptors whatever its depth: climbs back with ".."
 * and rescans, so it costs more per directory than rm_near; for what lies below RM_NEAR_LEVELS */
static int rm_deep(int parent, const char *name)
{
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		if (errno != ENOTDIR && errno != ELOOP && errno != EACCES)
			return -errno;
		if (errno == EACCES) {
			/* a directory of mode 000 (or not ours): make it ours first */
			struct stat st;
			if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
			    fchmodat(parent, name, 0700, 0) == 0)
				return rm_deep(parent, name);
			return -EACCES;
		}
		return unlinkat(parent, name, 0) == 0 || errno == ENOENT ? 0 : -errno;
	}
	struct stat top;
	if (fstat(fd, &top) != 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	size_t depth = 0;
	int err = 0;
	char sub[NAME_MAX + 1];
	dev_t left_dev = 0;
	ino_t left_ino = 0; /* the empty directory we just climbed out of */
	for (;;) {
		rm_own(fd);
		int scan_err = 0;
		if (rm_scan(fd, sub, sizeof(sub), &scan_err)) {
			int next = openat(fd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (next < 0 && errno == EACCES && fchmodat(fd, sub, 0700, 0) == 0)
				next = openat(fd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (next < 0) {
				err = -errno;
				break;
			}
			struct stat st;
			if (fstat(next, &st) == 0 && left_ino != 0 && st.st_ino == left_ino &&
			    st.st_dev == left_dev) {
				/* emptied on the way down: it goes now (no failed rmdir on the way) */
				close(next);
				left_ino = 0;
				if (unlinkat(fd, sub, AT_REMOVEDIR) != 0 && errno != ENOENT) {
					err = -errno;
					break;
				}
				continue;
			}
			close(fd);
			fd = next;
			depth++;
			left_ino = 0;
			continue;
		}
		if (scan_err != 0) {
			/* something here will not go: stop rather than loop on it */
			err = scan_err;
			break;
		}
		/* fd is empty now: climb; the parent's next scan removes it */
		if (depth == 0)
			break;
		struct stat here;
		if (fstat(fd, &here) != 0) {
			err = -errno;
			break;
		}
		int up = openat(fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (up < 0) {
			err = -errno;
			break;
		}
		close(fd);
		fd = up;
		depth--;
		left_dev = here.st_dev;
		left_ino = here.st_ino;
		if (depth == 0) {
			struct stat st;
			if (fstat(fd, &st) != 0 || st.st_dev != top.st_dev || st.st_ino != top.st_ino) {
				err = -ESTALE;
				break;
			}
		}
	}
	close(fd);
	if (err != 0)
		return err;
	return unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -errno;
}

/* The first levels of a tree go depth-first with a descriptor each, in one pass like rm -rf
 * (a sandbox's cache layers hold hundreds of directories); below them rm_deep takes over, so a
 * hostile tree costs at most RM_NEAR_LEVELS + 3 descriptors. */
#define RM_NEAR_LEVELS 16

/* rm_near - empty the open directory fd (at level) and remove it as parent/name */
static int rm_near(int parent, const char *name, int fd, int level)
{
	rm_own(fd);
	int dup_fd = dup(fd);
	DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
	if (!d) {
		if (dup_fd >= 0)
			close(dup_fd);
		close(fd);
		return -errno;
	}
	int err = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN) {
			if (unlinkat(fd, e->d_name, 0) != 0 && errno != ENOENT && err == 0)
				err = -errno;
			continue;
		}
		int r;
		if (level + 1 >= RM_NEAR_LEVELS) {
			r = rm_deep(fd, e->d_name);
		} else {
			int sub = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0 && errno == EACCES && fchmodat(fd, e->d_name, 0700, 0) == 0)
				sub = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0)
				r = rm_near(fd, e->d_name, sub, level + 1);
			else if (errno == ENOTDIR || errno == ELOOP) /* DT_UNKNOWN: not a directory */
				r = unlinkat(fd, e->d_name, 0) == 0 || errno == ENOENT ? 0 : -errno;
			else
				r = errno == ENOENT ? 0 : -errno;
		}
		if (r != 0 && err == 0)
			err = r;
	}
	closedir(d);
	close(fd);
	if (err != 0)
		return err;
	return unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -errno;
}

/* fs_rm_tree_at - see fsutil.h */
int fs_rm_tree_at(int parent, const char *name)
{
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return rm_deep(parent, name); /* not a directory, absent, or mode 000 */
	return rm_near(parent, name, fd, 0);
}

/* fs_replace_at - see fsutil.h */
int fs_replace_at(int dirfd, const char *name, mode_t mode, unsigned flags,
		  int (*fill)(int fd, void *ctx), void *ctx)
{
	static unsigned seq;
	const char *slash = strrchr(name, '/');
	size_t dlen = slash ? (size_t)(slash - name) + 1 : 0; /* the directory part, with its '/' */
	char tmp[PATH_MAX];
	int fd = -1;
	for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
		/* pid and a counter: unique among our threads; O_EXCL refuses anything already there
		 * (a crashed run's leftover is removed once, then we try again) */
		int n = snprintf(tmp, sizeof(tmp), "%.*s.%s.kgtmp.%d.%u", (int)dlen, name,
				 name + dlen, (int)getpid(), __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
		if (n < 0 || (size_t)n >= sizeof(tmp))
			return -ENAMETOOLONG;
		fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
		if (fd < 0 && errno != EEXIST)
			return -errno;
		if (fd < 0)
			unlinkat(dirfd, tmp, 0);
	}
	if (fd < 0)
		return -EEXIST;
	int rc = fill(fd, ctx);
	if (rc == 0 && (flags & FS_REPLACE_SYNC) && fsync(fd) != 0)
		rc = -errno;
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && renameat(dirfd, tmp, dirfd, name) != 0)
		rc = -errno;
	if (rc != 0) {
		unlinkat(dirfd, tmp, 0);
		return rc;
	}
	if (flags & FS_REPLACE_SYNC) {
		char dir[PATH_MAX];
		snprintf(dir, sizeof(dir), "%.*s", dlen ? (int)dlen : 1, dlen ? name : ".");
		int dfd = openat(dirfd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			fsync(dfd); /* the rename itself: best effort, the new content is in place */
			close(dfd);
		}
	}
	return 0;
}

struct replace_data {
	const void *data;
	size_t len;
};

/* replace_fill - fs_replace_data_at's content */
static int replace_fill(int fd, void *ctx)
{
	const struct replace_data *d = ctx;
	return fs_write_all(fd, d->data, d->len);
}

/* fs_replace_data_at - see fsutil.h */
int fs_replace_data_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode,
		       unsigned flags)
{
	struct replace_data d = { data, len };
	return fs_replace_at(dirfd, name, mode, flags, replace_fill, &d);
}

/* fs_write_all - see fsutil.h */
int fs_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* fs_write_string - see fsutil.h */
int fs_write_string(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, s, strlen(s));
	int e = errno;
	close(fd);
	return n == (ssize_t)strlen(s) ? 0 : -(n < 0 ? e : EIO);
}
