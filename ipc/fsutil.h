/*
 * fsutil.h - the few file-system helpers master, agent and jail share.
 */
#ifndef KG_FSUTIL_H
#define KG_FSUTIL_H

#include <stddef.h>
#include <sys/types.h>

/* fs_mkdir_p - create path and its parents (0755); mode applies to the last; 0 or -errno */
int fs_mkdir_p(const char *path, mode_t mode);

/* fs_read_fd - the rest of an open regular file, at most max bytes, NUL-terminated; does not
 * close fd. 0, -EINVAL (not a regular file), -EFBIG (over max), -ENOMEM or -errno */
int fs_read_fd(int fd, size_t max, char **data, size_t *len);

/* fs_write_all - write(2) until all n bytes are written; 0 or -errno */
int fs_write_all(int fd, const void *p, size_t n);

/*
 * fs_replace_at - replace the file name (under dirfd; AT_FDCWD: a path) whole, so a reader
 * sees the old content or the new, never a part: what fill(fd, ctx) writes (0 or -errno) goes
 * to a new file beside it (a temporary name, O_EXCL, mode), which is renamed over name. With
 * FS_REPLACE_SYNC the file is fsync'd before the rename and its directory after (it survives a
 * crash). On failure the temporary file is removed and name is untouched. 0 or -errno.
 */
#define FS_REPLACE_SYNC 1u
int fs_replace_at(int dirfd, const char *name, mode_t mode, unsigned flags,
		  int (*fill)(int fd, void *ctx), void *ctx);
/* fs_replace_data_at - fs_replace_at with len bytes of data as the new content */
int fs_replace_data_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode,
		       unsigned flags);

/* fs_write_string - s written to the existing file at path in one write(2), as a kernel knob
 * wants it (/proc, cgroup files); 0, -errno, or -EIO for a short write */
int fs_write_string(const char *path, const char *s);

/* fs_locked_flags - the mount flags of path's file system that a bind remount inside a user
 * namespace must keep (the kernel locks nosuid, nodev, noexec and the atime flags there) */
unsigned long fs_locked_flags(const char *path);

/*
 * fs_rm_tree_at - remove name under the directory parent, and everything below it, however deep
 * or odd: never follows a symlink, needs a bounded number of descriptors whatever the depth
 * (past the first levels it climbs back with ".." and checks where it lands), makes unreadable
 * or unwritable directories its own on the way.
 * For trees nothing else writes to any more (a dead sandbox's). 0, or -errno of the first thing
 * that could not be removed (-ESTALE: the tree moved under us).
 */
int fs_rm_tree_at(int parent, const char *name);

#endif
