/*
 * fsutil.c - see fsutil.h.
 */
#include "ipc/fsutil.h"

#include <errno.h>
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
