/*
 * tokenstore.c - sign-ins kept across restarts (`--token-store FILE`), encrypted at rest with
 * the operator's key (`--token-store-key-file KEY`).
 *
 * What is kept is what a restart would otherwise lose and a client cannot redo by itself:
 * master/auth.c's registered clients, refresh-token families (their SHA-256 hashes only, as in
 * memory), the key its access tokens are signed with, and the sign-outs that must outlive the
 * tokens issued before them; with --credentials user, master/usertoken.c's Google grants
 * (refresh tokens). Codes and sign-ins half done are not kept: they live for a minute.
 *
 * The file is one JSON document sealed with AES-256-GCM: an 8-byte magic (also the additional
 * data), a random 96-bit nonce per write, the ciphertext and the 16-byte tag. A file that does
 * not decrypt under the key (another key, a changed byte) stops the start-up with a sentence
 * and is left as it is: nothing is thrown away behind the operator's back. A file written for
 * another server (its public URL, provider or OAuth client changed: every token in it is
 * useless) is said in the log and replaced at the first change.
 *
 * Writes are made by one thread: an owner says tstore_changed() (under its own lock) and the
 * writer takes a fresh snapshot of both owners and replaces the file (a temporary file in the
 * same directory, fsync, rename, fsync of the directory), so many changes make one write and
 * a snapshot is never older than the change that asked for it. The token endpoint waits for
 * its change to be on disk before it answers (tstore_sync), so a refresh token a client holds
 * is one the file knows.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ipc/fsutil.h"
#include "ipc/log.h"
#include "lib/base64.h"
#include "master/tokenstore.h"

static const unsigned char MAGIC[8] = { 'K', 'G', 'T', 'S', 0, 1, 0, 0 }; /* format 1 */
#define NONCE_BYTES 12
#define TAG_BYTES 16
#define KEY_FILE_MAX 256

static struct {
	bool on;
	char path[PATH_MAX];
	char *bind;
	unsigned char key[TSTORE_KEY_BYTES];
	pthread_t writer;
	pthread_mutex_t mu;
	pthread_cond_t work, done;
	unsigned long want, written; /* generations asked for, and on disk (or given up) */
	bool stop, failing;
	struct tstore_owner auth, users; /* what is kept, and by whom (tstore_open) */
} S = { .mu = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER };

/* ---- the key and the seal ---- */

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int tstore_parse_key(const unsigned char *buf, size_t len, unsigned char key[TSTORE_KEY_BYTES])
{
	if (len == TSTORE_KEY_BYTES) { /* raw: `head -c 32 /dev/urandom` */
		memcpy(key, buf, TSTORE_KEY_BYTES);
		return 0;
	}
	size_t a = 0, b = len;
	while (a < b && (buf[a] == ' ' || buf[a] == '\t' || buf[a] == '\n' || buf[a] == '\r'))
		a++;
	while (b > a && (buf[b - 1] == ' ' || buf[b - 1] == '\t' || buf[b - 1] == '\n' || buf[b - 1] == '\r'))
		b--;
	size_t n = b - a;
	if (n == 2 * TSTORE_KEY_BYTES) { /* `openssl rand -hex 32` */
		for (size_t i = 0; i < TSTORE_KEY_BYTES; i++) {
			int hi = hexval(buf[a + 2 * i]), lo = hexval(buf[a + 2 * i + 1]);
			if (hi < 0 || lo < 0) {
				explicit_bzero(key, TSTORE_KEY_BYTES);
				return -EINVAL;
			}
			key[i] = (unsigned char)(hi << 4 | lo);
		}
		return 0;
	}
	if (n == 44) { /* `openssl rand -base64 32` */
		unsigned char tmp[B64_DECODED_MAX(44)];
		size_t got = 0;
		if (b64_decode((const char *)buf + a, n, B64_LAX, tmp, sizeof(tmp), &got) == 0 && got == TSTORE_KEY_BYTES) {
			memcpy(key, tmp, TSTORE_KEY_BYTES);
			explicit_bzero(tmp, sizeof(tmp));
			return 0;
		}
		explicit_bzero(tmp, sizeof(tmp));
	}
	return -EINVAL;
}

int tstore_seal(const unsigned char key[TSTORE_KEY_BYTES], const unsigned char *plain, size_t len,
		unsigned char **out, size_t *outlen)
{
	if (len > INT_MAX - 64)
		return -ENOMEM;
	size_t total = sizeof(MAGIC) + NONCE_BYTES + len + TAG_BYTES;
	unsigned char *o = malloc(total);
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int ok = o && c;
	unsigned char *nonce = o + sizeof(MAGIC), *ct = nonce + NONCE_BYTES;
	int n = 0, fin = 0;
	if (ok) {
		memcpy(o, MAGIC, sizeof(MAGIC));
		ok = RAND_bytes(nonce, NONCE_BYTES) == 1 &&
		     EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
		     EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, NONCE_BYTES, NULL) == 1 &&
		     EVP_EncryptInit_ex(c, NULL, NULL, key, nonce) == 1 &&
		     EVP_EncryptUpdate(c, NULL, &n, MAGIC, sizeof(MAGIC)) == 1 &&
		     EVP_EncryptUpdate(c, ct, &n, plain, (int)len) == 1 &&
		     EVP_EncryptFinal_ex(c, ct + n, &fin) == 1 && (size_t)(n + fin) == len &&
		     EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG_BYTES, ct + len) == 1;
	}
	EVP_CIPHER_CTX_free(c);
	if (!ok) {
		free(o);
		return o ? -EIO : -ENOMEM;
	}
	*out = o;
	*outlen = total;
	return 0;
}

int tstore_unseal(const unsigned char key[TSTORE_KEY_BYTES], const unsigned char *blob, size_t len,
		  unsigned char **plain, size_t *plainlen)
{
	if (len < sizeof(MAGIC) + NONCE_BYTES + TAG_BYTES || memcmp(blob, MAGIC, sizeof(MAGIC)) != 0 ||
	    len > (size_t)INT_MAX)
		return -EINVAL;
	const unsigned char *nonce = blob + sizeof(MAGIC), *ct = nonce + NONCE_BYTES;
	size_t ctlen = len - sizeof(MAGIC) - NONCE_BYTES - TAG_BYTES;
	unsigned char *p = malloc(ctlen + 1);
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int n = 0, fin = 0;
	int ok = p && c && EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
		 EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, NONCE_BYTES, NULL) == 1 &&
		 EVP_DecryptInit_ex(c, NULL, NULL, key, nonce) == 1 &&
		 EVP_DecryptUpdate(c, NULL, &n, MAGIC, sizeof(MAGIC)) == 1 &&
		 EVP_DecryptUpdate(c, p, &n, ct, (int)ctlen) == 1 &&
		 EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG_BYTES, (void *)(ct + ctlen)) == 1 &&
		 EVP_DecryptFinal_ex(c, p + n, &fin) == 1;
	EVP_CIPHER_CTX_free(c);
	if (!ok) {
		if (p) {
			explicit_bzero(p, ctlen + 1);
			free(p);
			return -EBADMSG;
		}
		return -ENOMEM;
	}
	p[ctlen] = '\0';
	*plain = p;
	*plainlen = ctlen;
	return 0;
}

/* ---- files ---- */

/* read_file - a regular file of at most max bytes (symlinks followed only when follow) into a
 * malloc'd buffer; 0, -ENOENT, or -errno with a sentence in err */
static int read_file(const char *path, bool follow, size_t max, unsigned char **out, size_t *len, struct stat *st,
		     const char *what, char *err, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
	if (fd < 0) {
		int e = errno;
		if (e != ENOENT)
			snprintf(err, cap, "%s %s cannot be read: %s", what, path,
				 e == ELOOP ? "it is a symbolic link" : strerror(e));
		else
			snprintf(err, cap, "%s %s does not exist", what, path);
		return -e;
	}
	char *b = NULL;
	int r = fstat(fd, st) == 0 ? fs_read_fd(fd, max, &b, len) : -errno;
	close(fd);
	if (r != 0) {
		snprintf(err, cap, "%s %s is not a regular file of at most %zu bytes that can be read (%s)", what, path,
			 max, strerror(-r));
		return r == -ENOENT ? -EIO : r;
	}
	*out = (unsigned char *)b;
	return 0;
}

/* write_store - replace the file with blob (mode 0600, synced: fs_replace_data_at); 0 or
 * -errno (err says what failed) */
static int write_store(const unsigned char *blob, size_t len, char *err, size_t cap)
{
	int e = fs_replace_data_at(AT_FDCWD, S.path, blob, len, 0600, FS_REPLACE_SYNC);
	if (e)
		snprintf(err, cap, "cannot write %s: %s", S.path, strerror(-e));
	return e;
}

/* save - a snapshot of both owners, sealed and written; 0 or -1 (err says why) */
static int save(char *err, size_t cap)
{
	json_t *doc = json_pack("{s:i, s:s, s:o, s:o}", "version", 1, "bind", S.bind, "auth", S.auth.dump(),
				"users", S.users.dump());
	char *plain = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	if (!plain) {
		snprintf(err, cap, "out of memory");
		return -1;
	}
	size_t n = strlen(plain);
	unsigned char *blob = NULL;
	size_t blen = 0;
	int r = tstore_seal(S.key, (unsigned char *)plain, n, &blob, &blen);
	explicit_bzero(plain, n);
	free(plain);
	if (r != 0) {
		snprintf(err, cap, "cannot encrypt the store (%s)", strerror(-r));
		return -1;
	}
	r = write_store(blob, blen, err, cap);
	free(blob);
	return r ? -1 : 0;
}

static void *writer(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&S.mu);
	for (;;) {
		while (S.want == S.written && !S.stop)
			pthread_cond_wait(&S.work, &S.mu);
		if (S.want == S.written && S.stop)
			break;
		unsigned long g = S.want;
		pthread_mutex_unlock(&S.mu);
		char err[PATH_MAX + 200];
		int r = save(err, sizeof(err));
		pthread_mutex_lock(&S.mu);
		if (r != 0 && !S.failing)
			log_error("token store: %s; sign-ins since are kept in memory only until a write works "
				  "(a restart would sign their users out)", err);
		else if (r == 0 && S.failing)
			log_info("token store: %s written again", S.path);
		S.failing = r != 0;
		S.written = g;
		pthread_cond_broadcast(&S.done);
		if (r != 0 && !S.stop) { /* try again after a pause, not in a loop */
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 5;
			pthread_cond_timedwait(&S.work, &S.mu, &ts);
			if (S.want == S.written)
				S.want++; /* the failed snapshot is still to be written */
		}
	}
	pthread_mutex_unlock(&S.mu);
	return NULL;
}

/* ---- start, change, stop ---- */

/* load - the store's JSON into the owners; the number of entries or -1 (err) */
static int load(const struct serve_config *cfg, const char *text, size_t len, char *err, size_t cap, bool *foreign)
{
	json_error_t je;
	json_t *doc = json_loadb(text, len, 0, &je);
	const char *bind = NULL;
	json_t *a = NULL, *u = NULL;
	int version = 0;
	if (!doc || json_unpack(doc, "{s:i, s:s, s:o, s:o}", "version", &version, "bind", &bind, "auth", &a, "users", &u) != 0 ||
	    version != 1) {
		snprintf(err, cap, "%s decrypts but is not a token store this version of kode-gopher reads", S.path);
		json_decref(doc);
		return -1;
	}
	if (strcmp(bind, S.bind) != 0) {
		*foreign = true;
		json_decref(doc);
		return 0;
	}
	int na = S.auth.load(a, err, cap);
	/* without --credentials user no Google grant is needed: the next write leaves them out */
	bool user = cfg->credentials && strcmp(cfg->credentials, "user") == 0;
	int nu = na < 0 ? -1 : user ? S.users.load(u, err, cap) : 0;
	json_decref(doc);
	return na < 0 || nu < 0 ? -1 : na + nu;
}

int tstore_open(const struct serve_config *cfg, const char *bind, const struct tstore_owner *auth,
		const struct tstore_owner *users, char *err, size_t cap)
{
	if (!cfg->token_store)
		return 0;
	S.auth = *auth;
	S.users = *users;
	snprintf(S.path, sizeof(S.path), "%s", cfg->token_store);
	S.bind = strdup(bind);
	unsigned char *kb = NULL, *blob = NULL;
	size_t kl = 0, bl = 0;
	struct stat st;
	char why[PATH_MAX + 200];
	if (read_file(cfg->token_store_key_file, true, KEY_FILE_MAX, &kb, &kl, &st, "--token-store-key-file",
		      why, sizeof(why)) != 0) {
		snprintf(err, cap, "%s", why);
		return -1;
	}
	int kr = tstore_parse_key(kb, kl, S.key);
	explicit_bzero(kb, kl);
	free(kb);
	if (st.st_mode & 007) {
		snprintf(err, cap, "--token-store-key-file %s can be read by every user of this machine (mode "
			 "%04o): make it readable by this server's user only (chmod 600; in Kubernetes, the "
			 "Secret volume's defaultMode: 0400)", cfg->token_store_key_file, (unsigned)(st.st_mode & 07777));
		return -1;
	}
	if (kr != 0) {
		snprintf(err, cap, "--token-store-key-file %s does not hold a key: it wants 32 random bytes, as "
			 "64 hex digits (openssl rand -hex 32 > FILE), base64 (openssl rand -base64 32) or raw",
			 cfg->token_store_key_file);
		return -1;
	}
	int r = read_file(S.path, false, TSTORE_MAX_BYTES, &blob, &bl, &st, "--token-store", why, sizeof(why));
	int kept = 0;
	bool foreign = false;
	if (r == 0) {
		unsigned char *plain = NULL;
		size_t pl = 0;
		r = tstore_unseal(S.key, blob, bl, &plain, &pl);
		free(blob);
		if (r == -EINVAL) {
			snprintf(err, cap, "--token-store %s is not a kode-gopher token store; name another file "
				 "(it is left as it is)", S.path);
			return -1;
		}
		if (r != 0) {
			snprintf(err, cap, "--token-store %s does not decrypt with the key in %s: it was written "
				 "with another key, or changed since. It is left as it is: start with the key it "
				 "was written with, or move it away to start with nobody signed in", S.path,
				 cfg->token_store_key_file);
			return -1;
		}
		kept = load(cfg, (const char *)plain, pl, why, sizeof(why), &foreign);
		explicit_bzero(plain, pl);
		free(plain);
		if (kept < 0) {
			snprintf(err, cap, "--token-store: %s (it is left as it is; move it away to start with "
				 "nobody signed in)", why);
			return -1;
		}
	} else if (r != -ENOENT) {
		snprintf(err, cap, "%s", why);
		return -1;
	}
	if (save(why, sizeof(why)) != 0) {
		snprintf(err, cap, "--token-store: %s", why);
		return -1;
	}
	if (pthread_create(&S.writer, NULL, writer, NULL) != 0) {
		snprintf(err, cap, "--token-store: cannot start its writer thread");
		return -1;
	}
	S.on = true;
	if (foreign)
		log_warn("token store %s was written for another server (its public URL, provider or OAuth "
			 "client differ), so none of its sign-ins is valid here: nobody is signed in, and the "
			 "file is replaced", S.path);
	else if (r == -ENOENT)
		log_info("token store %s: new; sign-ins are kept there, encrypted, across restarts", S.path);
	else
		log_info("token store %s: %d entries read (clients, sign-ins, sign-outs, users' grants); "
			 "signed-in users stay signed in", S.path, kept);
	return 0;
}

bool tstore_enabled(void)
{
	return S.on;
}

unsigned long tstore_changed(void)
{
	if (!S.on)
		return 0;
	pthread_mutex_lock(&S.mu);
	unsigned long g = ++S.want;
	pthread_cond_signal(&S.work);
	pthread_mutex_unlock(&S.mu);
	return g;
}

void tstore_sync(unsigned long gen)
{
	if (!S.on || !gen)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += TSTORE_SYNC_WAIT_MS / 1000;
	ts.tv_nsec += (long)(TSTORE_SYNC_WAIT_MS % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&S.mu);
	while (S.written < gen && !S.failing)
		if (pthread_cond_timedwait(&S.done, &S.mu, &ts) != 0)
			break;
	pthread_mutex_unlock(&S.mu);
}

void tstore_close(void)
{
	if (!S.on)
		return;
	pthread_mutex_lock(&S.mu);
	S.stop = true;
	pthread_cond_signal(&S.work);
	pthread_mutex_unlock(&S.mu);
	pthread_join(S.writer, NULL);
	S.on = false;
	explicit_bzero(S.key, sizeof(S.key));
	free(S.bind);
	S.bind = NULL;
}
