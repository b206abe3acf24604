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

#endif
