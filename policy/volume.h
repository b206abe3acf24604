/*
 * volume.h - a local sandbox's disk limit: a file system of its own, of a fixed size.
 *
 * As root, each sandbox's /app (with /app/persist), its state and its cache layers live on an
 * ext4 file system in a sparse image file, <dir>/disk.img, loop-mounted by the jail in a mount
 * namespace of its own (so nothing is left mounted on the host when the jail dies, and the loop
 * device goes with the last mount). The kernel enforces the size and the inode count; the
 * sandbox's df shows them. Kept sandboxes keep their image. Not available to a normal user:
 * mounting a disk file system needs root on the host.
 */
#ifndef KG_VOLUME_H
#define KG_VOLUME_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include "policy/limits.h"

#define VOLUME_IMAGE "disk.img"
#define VOLUME_MOUNT "vol"
/* the formatted empty image new sandboxes' images are copied from, in the sandbox root, by
 * size; the version changes with mke2fs's options (volume.c, mkfs_image) */
#define VOLUME_TEMPLATE ".disk-v1-%lld.img"
/* the marker of a kept sandbox in its directory (master/sandbox_local.c writes it before the
 * jail starts): only a kept sandbox's file system has to survive a crash of the host */
#define VOLUME_KEPT "kept"

/* volume_unavailable - NULL when the disk limit can be enforced here, else why not (a sentence
 * fragment: "it needs root ...") */
const char *volume_unavailable(void);

/*
 * volume_attach - in the jail, as root, in a mount namespace of its own (made here): make or
 * open dir/disk.img (bytes large when made), mount it at dir/vol, and bind its app, state and
 * cache directories over dir/app, dir/state and dir/cache, owned by uid:gid. A sandbox made
 * before it had an image (its caches are already on the host's disk) keeps going without one:
 * returns 1 then. 0 on success; -errno with err filled on failure.
 */
int volume_attach(const char *dir, long long bytes, uid_t uid, gid_t gid, char *err, size_t errlen);

/* volume_usage - bytes the image takes on the host's disk; -1 without an image */
long long volume_usage(const char *dir);

/*
 * volume_has_persist - does the image's /app/persist hold anything? Read from the image file by
 * debugfs (e2fsprogs), without mounting it, so it works on an image in use too (the answer is
 * then as of the last flush). 1 yes, 0 no, -errno when it cannot tell (no image: -ENOENT).
 */
int volume_has_persist(const char *dir);

#endif
