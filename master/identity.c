/*
 * identity.c - the identities of workers: on a root serve each worker runs as a uid and gid of
 * its own (policy/privdrop.h), so a worker taken over by its client cannot signal, trace or
 * read another worker, nor reach another session's sandbox (whose directory and agent socket
 * carry the gid of their worker, policy/jail.c). Called by master/spawn.c when a worker starts
 * and when it is gone, and by master/pool.c for a sandbox released after its worker.
 *
 * A uid is held by a flocked file <lockdir>/<uid> for as long as the worker or a sandbox of it
 * lives (a reference each: the worker, and each release of its sandboxes still under way), so
 * no two live workers share one, even of two serve processes on one machine. The file is
 * unlinked before it is closed, and a taker checks the file it locked is still the one at that
 * name (the usual lock-file dance), so nothing piles up and no one locks a ghost.
 */
#include <errno.h>
#include <fcntl.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipc/fsutil.h"
#include "master/master.h"
#include "policy/privdrop.h"

/* The directory of root serves whose workers have identities: their runtime directories (each
 * 0711, master/spawn.c) and worker-ids/ (0700) with the locks. /run when there is one (not swept
 * by tmp cleaners), else /tmp; not /tmp/kode-gopher-0, which stays 0700 for serves without. */
static const char *const id_bases[] = { "/run/kode-gopher", "/tmp/kode-gopher-ids-0" };
static const char *id_base;
static char id_lockdir[64];
static bool id_on;

/* id_private - path is a directory of root's that no one else may write to; made mode */
static bool id_private(const char *path, mode_t mode)
{
	struct stat st;
	if (fs_mkdir_p(path, mode) != 0 || lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) ||
	    st.st_uid != 0 || (st.st_mode & 022) != 0)
		return false;
	return (st.st_mode & 0777) == mode || chmod(path, mode) == 0;
}

/* identity_init - see master.h */
bool identity_init(void)
{
	char why[160];
	if (!privdrop_can(why, sizeof(why))) {
		/* a worker of the same uid could otherwise ptrace this process or read its memory
		 * and environment through /proc (what the kernel lets the owner do), even with its
		 * filter off: not dumpable, those files are root's and ptrace needs CAP_SYS_PTRACE.
		 * Workers exec, which makes each of them dumpable again. */
		bool shut = prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0;
		log_info("%s: every worker runs as this same user, without an identity of its own; "
			 "workers are kept apart from each other and from this user's files by their "
			 "seccomp filter and Landlock only (docs/architecture.md)%s", why,
			 shut ? "; this process is not dumpable, so they cannot ptrace it or read its "
				"/proc files" : "");
		if (!shut)
			log_warn("cannot make this process non-dumpable (%s): a worker could ptrace it "
				 "or read its memory if its seccomp filter and Landlock were off",
				 strerror(errno));
		return id_on = false;
	}
	for (size_t i = 0; !id_base && i < sizeof(id_bases) / sizeof(id_bases[0]); i++) {
		snprintf(id_lockdir, sizeof(id_lockdir), "%s/worker-ids", id_bases[i]);
		if (id_private(id_bases[i], 0711) && id_private(id_lockdir, 0700))
			id_base = id_bases[i];
	}
	if (!id_base) {
		log_error("cannot make a private directory for the workers' identities (%s); workers "
			  "will not start", id_bases[0]);
		return id_on = true; /* identity_take fails: never a worker with root's powers */
	}
	log_info("workers run as identities of their own (uid = gid in %u..%u, one per worker), "
		 "with no capabilities", PRIVDROP_UID_BASE, PRIVDROP_UID_BASE + PRIVDROP_UID_SPAN - 1);
	return id_on = true;
}

/* identity_on - see master.h */
bool identity_on(void)
{
	return id_on;
}

/* identity_base - see master.h */
const char *identity_base(void)
{
	return id_base;
}

/* id_try - lock the file of uid; its descriptor, or -1 when someone holds it */
static int id_try(uid_t uid)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%u", id_lockdir, (unsigned)uid);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -1;
	struct stat a, b;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0 || fstat(fd, &a) != 0 || stat(path, &b) != 0 ||
	    a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
		close(fd); /* held, or released (unlinked) between our open and our lock */
		return -1;
	}
	return fd;
}

/* the uids this master holds: the lock's descriptor and how many hold it (the worker, and each
 * release of its sandboxes not finished yet, which runs on another thread) */
static struct id_held {
	uid_t uid;
	int fd;
	int refs;
} *id_tab;
static size_t id_n, id_cap;
static pthread_mutex_t id_mu = PTHREAD_MUTEX_INITIALIZER;

/* identity_take - see master.h */
int identity_take(struct worker *w)
{
	w->uid = 0;
	w->id_held = false;
	if (!id_on)
		return 0;
	if (!id_base)
		return -EPERM;
	uint32_t r = 0;
	if (RAND_bytes((unsigned char *)&r, sizeof(r)) != 1)
		return -EIO;
	pthread_mutex_lock(&id_mu);
	if (id_n == id_cap) {
		size_t cap = id_cap ? id_cap * 2 : 16;
		struct id_held *t = realloc(id_tab, cap * sizeof(*t));
		if (!t) {
			pthread_mutex_unlock(&id_mu);
			return -ENOMEM;
		}
		id_tab = t;
		id_cap = cap;
	}
	/* from a random start, so two serves rarely probe the same files */
	for (uint32_t i = 0; i < PRIVDROP_UID_SPAN; i++) {
		uid_t uid = PRIVDROP_UID_BASE + (r + i) % PRIVDROP_UID_SPAN;
		int fd = id_try(uid);
		if (fd >= 0) {
			id_tab[id_n++] = (struct id_held){ uid, fd, 1 };
			pthread_mutex_unlock(&id_mu);
			w->uid = uid;
			w->id_held = true;
			return 0;
		}
	}
	pthread_mutex_unlock(&id_mu);
	log_error("every worker identity (uid %u..%u) is in use", PRIVDROP_UID_BASE,
		  PRIVDROP_UID_BASE + PRIVDROP_UID_SPAN - 1);
	return -EAGAIN;
}

/* identity_ref - see master.h */
void identity_ref(uid_t uid)
{
	pthread_mutex_lock(&id_mu);
	for (size_t i = 0; i < id_n; i++)
		if (id_tab[i].uid == uid)
			id_tab[i].refs++;
	pthread_mutex_unlock(&id_mu);
}

/* identity_unref - see master.h */
void identity_unref(uid_t uid)
{
	pthread_mutex_lock(&id_mu);
	for (size_t i = 0; i < id_n; i++) {
		if (id_tab[i].uid != uid || --id_tab[i].refs > 0)
			continue;
		char path[128];
		snprintf(path, sizeof(path), "%s/%u", id_lockdir, (unsigned)uid);
		unlink(path);
		close(id_tab[i].fd);
		id_tab[i] = id_tab[--id_n];
		break;
	}
	pthread_mutex_unlock(&id_mu);
}

/* identity_release - see master.h */
void identity_release(struct worker *w)
{
	if (!w->id_held)
		return;
	w->id_held = false;
	identity_unref(w->uid);
}
