/*
 * artifacts.c - /app/out back to the client after a run, and /app/persist and /app/out as
 * resources (see artifacts.h for who calls what).
 *
 * The files were written by the user's program, which is gone by the time anything here runs
 * (its namespace died with it), but their shape is its choice: names, links, sizes, types. So
 * a path is opened one component at a time from the app directory's descriptor with O_NOFOLLOW
 * (what openat2's RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS does, on every kernel), the last open
 * adds O_NONBLOCK and O_NOCTTY so a FIFO or a terminal cannot block or take us over, fstat of the
 * open descriptor must say a regular file with one link (a second name is a hard link the
 * program made to something it wants read out), and no read trusts st_size.
 */
#include "agent/artifacts.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/diag.h"

#define AR_PERSIST "persist"
#define AR_URI_PREFIX "sandbox:///app/"
#define AR_PATH_MAX 1024

struct ar_entry {
	char *path;          /* relative to the app directory: "out/x.png" */
	mode_t mode;
	off_t size;
	nlink_t nlink;
	struct timespec mtime;
};

struct ar_list {
	struct ar_entry *v;
	size_t n, cap;
	size_t seen;         /* entries looked at, bounded by ARTIFACTS_WALK_MAX */
	bool cut;            /* the walk stopped at the bound */
};

static void ar_list_free(struct ar_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].path);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static int ar_cmp(const void *a, const void *b)
{
	return strcmp(((const struct ar_entry *)a)->path, ((const struct ar_entry *)b)->path);
}

/* ar_walk - every entry below dfd (prefix names it), directories recursed, none followed */
static void ar_walk(int dfd, const char *prefix, int depth, struct ar_list *l)
{
	int dup = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
	DIR *d = dup >= 0 ? fdopendir(dup) : NULL;
	if (!d) {
		if (dup >= 0)
			close(dup);
		return;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (++l->seen > ARTIFACTS_WALK_MAX) {
			l->cut = true;
			break;
		}
		struct stat st;
		if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			continue;
		char path[AR_PATH_MAX];
		if (snprintf(path, sizeof(path), "%s/%s", prefix, de->d_name) >= (int)sizeof(path))
			continue;
		if (S_ISDIR(st.st_mode)) {
			if (depth >= ARTIFACTS_MAX_DEPTH)
				continue;
			int sub = openat(dfd, de->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0) {
				ar_walk(sub, path, depth + 1, l);
				close(sub);
			}
			continue;
		}
		if (l->n == l->cap) {
			size_t nc = l->cap ? 2 * l->cap : 64;
			struct ar_entry *g = realloc(l->v, nc * sizeof(*g));
			if (!g)
				break;
			l->v = g;
			l->cap = nc;
		}
		char *p = strdup(path);
		if (!p)
			break;
		l->v[l->n++] = (struct ar_entry){ .path = p, .mode = st.st_mode, .size = st.st_size,
						  .nlink = st.st_nlink, .mtime = st.st_mtim };
	}
	closedir(d);
}

/* ar_list_top - entries below appfd/<top> (a real directory), sorted by path */
static void ar_list_top(int appfd, const char *top, struct ar_list *l)
{
	int fd = openat(appfd, top, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	size_t from = l->n;
	ar_walk(fd, top, 1, l);
	close(fd);
	if (l->n > from) /* an empty directory leaves l->v NULL, which qsort may not take */
		qsort(l->v + from, l->n - from, sizeof(*l->v), ar_cmp);
}

/* ar_path_ok - a relative path below persist/ or out/ with no empty, "." or ".." segment */
static bool ar_path_ok(const char *p, size_t len)
{
	if (len == 0 || len >= AR_PATH_MAX || strlen(p) != len)
		return false;
	if (strncmp(p, AR_PERSIST "/", 8) != 0 && strncmp(p, ARTIFACTS_DIR "/", 4) != 0)
		return false;
	for (const char *seg = p;;) {
		const char *slash = strchr(seg, '/');
		size_t n = slash ? (size_t)(slash - seg) : strlen(seg);
		if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return false;
		if (!slash)
			return true;
		seg = slash + 1;
	}
}

/* ar_open - the regular file at relpath below appfd, never through a link; -errno, or
 * -EPERM for something that is not a regular file with exactly one name */
static int ar_open(int appfd, const char *relpath, struct stat *st)
{
	char buf[AR_PATH_MAX];
	snprintf(buf, sizeof(buf), "%s", relpath);
	int dfd = fcntl(appfd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return -errno;
	char *comp = buf;
	for (char *slash; (slash = strchr(comp, '/'));) {
		*slash = '\0';
		int sub = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int e = errno;
		close(dfd);
		if (sub < 0)
			return -e;
		dfd = sub;
		comp = slash + 1;
	}
	struct stat lst;
	if (fstatat(dfd, comp, &lst, AT_SYMLINK_NOFOLLOW) != 0) {
		int e = errno;
		close(dfd);
		return -e;
	}
	if (!S_ISREG(lst.st_mode)) {
		close(dfd);
		return -EPERM;
	}
	int fd = openat(dfd, comp, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	int e = errno;
	close(dfd);
	if (fd < 0)
		return -e;
	if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || st->st_nlink != 1 ||
	    st->st_ino != lst.st_ino || st->st_dev != lst.st_dev) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* ar_read - up to max bytes from offset; a file that grows meanwhile is cut at max */
static int ar_read(int fd, off_t off, size_t max, unsigned char **out, size_t *n)
{
	unsigned char *b = malloc(max ? max : 1);
	if (!b)
		return -ENOMEM;
	size_t got = 0;
	while (got < max) {
		ssize_t r = pread(fd, b + got, max - got, off + (off_t)got);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r < 0) {
			int e = errno;
			free(b);
			return -e;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	*out = b;
	*n = got;
	return 0;
}

/* ar_utf8 - whole valid UTF-8 without NUL or other control bytes than tab, CR, LF, FF */
static bool ar_utf8(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned char c = s[i];
		if (c < 0x80) {
			if (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f')
				return false;
			if (c == 0x7f)
				return false;
			i++;
			continue;
		}
		size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
			    : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
		if (!need || i + need > n)
			return false;
		for (size_t k = 1; k < need; k++)
			if ((s[i + k] & 0xC0) != 0x80)
				return false;
		if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F) ||
		    (c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] > 0x8F))
			return false;
		i += need;
	}
	return true;
}

/* ar_utf8_prefix - like ar_utf8, but a character cut at the end of a sample is fine */
static bool ar_utf8_prefix(const unsigned char *s, size_t n)
{
	size_t cut = n;
	for (size_t back = 0; back < 3 && cut > 0 && (s[cut - 1] & 0xC0) == 0x80; back++)
		cut--;
	if (cut > 0 && s[cut - 1] >= 0xC0)
		cut--;
	else if (cut == n)
		return ar_utf8(s, n);
	/* the cut sequence must at least start like one */
	return ar_utf8(s, cut);
}

static bool ar_has_suffix(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && strcasecmp(s + a - b, suf) == 0;
}

/* artifacts_sniff - see artifacts.h */
const char *artifacts_sniff(const unsigned char *p, size_t n, const char *name)
{
	if (n >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0)
		return "image/png";
	if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF)
		return "image/jpeg";
	if (n >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0))
		return "image/gif";
	if (n >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0)
		return "image/webp";
	if (n >= 5 && memcmp(p, "%PDF-", 5) == 0)
		return "application/pdf";
	if (n >= 4 && memcmp(p, "PK\x03\x04", 4) == 0)
		return "application/zip";
	if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b)
		return "application/gzip";
	if (!ar_utf8_prefix(p, n))
		return "application/octet-stream";
	/* text: SVG is an image whatever its name; the name only picks among text types */
	size_t i = 0;
	if (n >= 3 && p[0] == 0xEF && p[1] == 0xBB && p[2] == 0xBF)
		i = 3;
	while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n'))
		i++;
	if (i < n && p[i] == '<' && memmem(p + i, n - i, "<svg", 4))
		return "image/svg+xml";
	if (name && ar_has_suffix(name, ".csv"))
		return "text/csv";
	if (name && ar_has_suffix(name, ".json") && i < n && (p[i] == '{' || p[i] == '['))
		return "application/json";
	if (name && (ar_has_suffix(name, ".html") || ar_has_suffix(name, ".htm")))
		return "text/html";
	if (name && ar_has_suffix(name, ".md"))
		return "text/markdown";
	return "text/plain";
}

static bool ar_is_text(const char *mt)
{
	return strncmp(mt, "text/", 5) == 0 || strcmp(mt, "application/json") == 0 ||
	       strcmp(mt, "image/svg+xml") == 0;
}

/* ar_uri - sandbox:///app/<path>, every byte but unreserved ones and / percent-encoded */
static json_t *ar_uri(const char *path)
{
	char buf[sizeof(AR_URI_PREFIX) + 3 * AR_PATH_MAX];
	size_t o = strlen(AR_URI_PREFIX);
	memcpy(buf, AR_URI_PREFIX, o);
	for (const unsigned char *p = (const unsigned char *)path; *p && o + 4 < sizeof(buf); p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    *p == '-' || *p == '_' || *p == '.' || *p == '~' || *p == '/')
			buf[o++] = (char)*p;
		else
			o += (size_t)snprintf(buf + o, 4, "%%%02X", *p);
	}
	buf[o] = '\0';
	return json_string(buf);
}

/* ar_kind_note - why a non-regular entry is not returned */
static const char *ar_kind_note(const struct ar_entry *e)
{
	if (S_ISLNK(e->mode))
		return "a symbolic link: links are never followed, write the file itself";
	if (S_ISFIFO(e->mode))
		return "a FIFO, not a file";
	if (S_ISSOCK(e->mode))
		return "a socket, not a file";
	if (S_ISCHR(e->mode) || S_ISBLK(e->mode))
		return "a device node, not a file";
	if (S_ISREG(e->mode) && e->nlink != 1)
		return "a file with more than one name (a hard link): write a copy instead";
	if (!S_ISREG(e->mode))
		return "not a regular file";
	return NULL;
}

/* artifacts_prepare - see artifacts.h */
int artifacts_prepare(int appfd)
{
	if (mkdirat(appfd, ARTIFACTS_DIR, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* artifacts_collect - see artifacts.h */
void artifacts_collect(int appfd, json_t *o)
{
	struct ar_list l = { 0 };
	ar_list_top(appfd, ARTIFACTS_DIR, &l);
	json_t *arr = json_array();
	size_t budget = ARTIFACTS_EMBED_BYTES, over_bytes = 0;
	for (size_t i = 0; arr && i < l.n && i < ARTIFACTS_MAX_COUNT; i++) {
		struct ar_entry *e = &l.v[i];
		char app_path[AR_PATH_MAX + 8];
		snprintf(app_path, sizeof(app_path), "/app/%s", e->path);
		json_t *a = json_pack("{s:o, s:s, s:o, s:I, s:n, s:b}", "name",
				      diag_json_string(e->path + strlen(ARTIFACTS_DIR) + 1,
						       strlen(e->path) - strlen(ARTIFACTS_DIR) - 1),
				      "path", "", "uri", ar_uri(e->path), "size",
				      (json_int_t)(S_ISREG(e->mode) ? e->size : 0), "media_type",
				      "embedded", 0);
		if (!a)
			break;
		json_object_set_new(a, "path", diag_json_string(app_path, strlen(app_path)));
		json_array_append_new(arr, a);
		const char *why = ar_kind_note(e);
		if (why) {
			json_object_set_new(a, "note", json_string(why));
			continue;
		}
		struct stat st;
		int fd = ar_open(appfd, e->path, &st);
		if (fd < 0) {
			json_object_set_new(a, "note", json_string(fd == -EPERM
				? "not a regular file with one name any more" : "could not be opened"));
			continue;
		}
		json_object_set_new(a, "size", json_integer((json_int_t)st.st_size));
		/* the head for the media type; the bytes themselves go to the worker raw, through
		 * POST /files, when it asks for what is marked embedded here */
		unsigned char *data = NULL;
		size_t n = 0;
		int rc = ar_read(fd, 0, ARTIFACTS_SNIFF_BYTES, &data, &n);
		close(fd);
		if (rc < 0) {
			json_object_set_new(a, "note", json_string("could not be read"));
			continue;
		}
		json_object_set_new(a, "media_type", json_string(artifacts_sniff(data, n, e->path)));
		free(data);
		if ((size_t)st.st_size <= budget) {
			json_object_set_new(a, "embedded", json_true());
			budget -= (size_t)st.st_size;
		} else {
			char note[300];
			snprintf(note, sizeof(note), "not embedded: a result embeds at most %u MiB of "
				 "artifacts in all (artifact bytes cap); read it with resources/read, "
				 "%u KiB at a time", ARTIFACTS_EMBED_BYTES >> 20, ARTIFACTS_READ_BYTES >> 10);
			json_object_set_new(a, "note", json_string(note));
			over_bytes++;
		}
	}
	char note[400] = "";
	if (l.n > ARTIFACTS_MAX_COUNT)
		snprintf(note, sizeof(note), "%s%zu more entries in /app/out were not listed: a result "
			 "lists at most %d artifacts (artifact count cap); read the rest with "
			 "resources/read", l.cut ? "at least " : "", l.n - ARTIFACTS_MAX_COUNT,
			 ARTIFACTS_MAX_COUNT);
	else if (l.cut)
		snprintf(note, sizeof(note), "/app/out holds more than %d entries (directories "
			 "included): the files past them were not listed", ARTIFACTS_WALK_MAX);
	if (over_bytes) {
		size_t nl = strlen(note);
		snprintf(note + nl, sizeof(note) - nl, "%s%zu artifact%s not embedded: the result's "
			 "artifact bytes cap is %u MiB", nl ? "; " : "", over_bytes,
			 over_bytes == 1 ? " was" : "s were", ARTIFACTS_EMBED_BYTES >> 20);
	}
	if (note[0])
		json_object_set_new(o, "artifacts_note", json_string(note));
	json_object_set_new(o, "artifacts", arr ? arr : json_array());
	ar_list_free(&l);
}

/* artifacts_digest - see artifacts.h */
void artifacts_digest(int appfd, char *buf)
{
	struct ar_list l = { 0 };
	ar_list_top(appfd, AR_PERSIST, &l);
	ar_list_top(appfd, ARTIFACTS_DIR, &l);
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[32];
	unsigned int mdlen = 0;
	if (ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1) {
		for (size_t i = 0; i < l.n; i++) {
			long long v[4] = { (long long)l.v[i].size, (long long)l.v[i].mode,
					   (long long)l.v[i].mtime.tv_sec, l.v[i].mtime.tv_nsec };
			EVP_DigestUpdate(ctx, l.v[i].path, strlen(l.v[i].path) + 1);
			EVP_DigestUpdate(ctx, v, sizeof(v));
		}
		EVP_DigestFinal_ex(ctx, md, &mdlen);
	}
	EVP_MD_CTX_free(ctx);
	for (unsigned i = 0; i < 32; i++)
		snprintf(buf + 2 * i, 3, "%02x", i < mdlen ? md[i] : 0);
	ar_list_free(&l);
}

/* artifacts_stamps - see artifacts.h */
json_t *artifacts_stamps(int appfd, json_t *watch)
{
	json_t *o = json_object();
	size_t i;
	json_t *p;
	json_array_foreach(watch, i, p) {
		const char *path = json_string_value(p);
		if (!o || i >= ARTIFACTS_WATCH_MAX)
			break;
		if (!path || !ar_path_ok(path, json_string_length(p)))
			continue;
		struct stat st;
		int fd = ar_open(appfd, path, &st);
		char stamp[96];
		if (fd >= 0) {
			close(fd);
			snprintf(stamp, sizeof(stamp), "%lld:%lld.%09ld:%llu", (long long)st.st_size,
				 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
				 (unsigned long long)st.st_ino);
		}
		json_object_set_new(o, path, fd >= 0 ? json_string(stamp) : json_null());
	}
	return o;
}

/* artifacts_watch_changed - see artifacts.h */
void artifacts_watch_changed(int appfd, json_t *before, json_t *o)
{
	if (!json_object_size(before))
		return;
	json_t *keys = json_array();
	const char *path;
	json_t *v;
	json_object_foreach(before, path, v)
		json_array_append_new(keys, json_string(path));
	json_t *after = artifacts_stamps(appfd, keys);
	json_t *changed = json_array();
	json_object_foreach(before, path, v)
		if (!json_equal(v, json_object_get(after, path)))
			json_array_append_new(changed, json_string(path));
	json_object_set_new(o, "watch_changed", changed);
	json_decref(after);
	json_decref(keys);
}

static json_t *ar_error(const char *fmt, const char *arg)
{
	char msg[600];
	snprintf(msg, sizeof(msg), fmt, arg);
	json_t *o = json_object();
	json_object_set_new(o, "error", diag_json_string(msg, strlen(msg)));
	return o;
}

/* ar_files_list - one page of persist/ and out/ */
static json_t *ar_files_list(int appfd, json_t *req)
{
	json_t *jc = json_object_get(req, "cursor");
	size_t from = 0;
	if (jc && !json_is_null(jc)) {
		const char *c = json_string_value(jc);
		char *end;
		unsigned long v = c ? strtoul(c, &end, 10) : 0;
		if (!c || !*c || *end || v > ARTIFACTS_WALK_MAX * 2)
			return ar_error("%s", "the cursor is not one this server handed out");
		from = v;
	}
	struct ar_list l = { 0 };
	ar_list_top(appfd, AR_PERSIST, &l);
	ar_list_top(appfd, ARTIFACTS_DIR, &l);
	json_t *files = json_array();
	size_t i = from;
	for (; files && i < l.n && json_array_size(files) < ARTIFACTS_PAGE; i++) {
		struct ar_entry *e = &l.v[i];
		if (ar_kind_note(e))
			continue;
		const char *mt = "application/octet-stream";
		struct stat st;
		int fd = ar_open(appfd, e->path, &st);
		unsigned char *data = NULL;
		size_t n = 0;
		if (fd >= 0 && ar_read(fd, 0, ARTIFACTS_SNIFF_BYTES, &data, &n) == 0)
			mt = artifacts_sniff(data, n, e->path);
		free(data);
		if (fd < 0)
			continue;
		close(fd);
		json_t *f = json_pack("{s:o, s:o, s:I, s:s, s:I}", "path",
				      diag_json_string(e->path, strlen(e->path)), "uri", ar_uri(e->path),
				      "size", (json_int_t)st.st_size, "media_type", mt, "mtime",
				      (json_int_t)st.st_mtim.tv_sec);
		if (f)
			json_array_append_new(files, f);
	}
	char next[32];
	snprintf(next, sizeof(next), "%zu", i);
	json_t *o = json_pack("{s:o, s:o}", "files", files ? files : json_array(), "next",
			      i < l.n ? json_string(next) : json_null());
	ar_list_free(&l);
	return o;
}

/* ar_files_read - one bounded read of one file: the header, and the bytes in *bytes */
static json_t *ar_files_read(int appfd, json_t *req, unsigned char **bytes, size_t *nbytes)
{
	json_t *jp = json_object_get(req, "path"), *jo = json_object_get(req, "offset");
	json_t *jl = json_object_get(req, "length");
	const char *path = json_string_value(jp);
	if (!path || !ar_path_ok(path, json_string_length(jp)))
		return ar_error("%s", "path must name a file below persist/ or out/ (no empty, . "
			       "or .. segment)");
	json_int_t off = 0, want = ARTIFACTS_READ_BYTES;
	if (jo && !json_is_null(jo)) {
		if (!json_is_integer(jo) || json_integer_value(jo) < 0)
			return ar_error("%s", "offset must be a byte offset, 0 or more");
		off = json_integer_value(jo);
	}
	if (jl && !json_is_null(jl)) {
		if (!json_is_integer(jl) || json_integer_value(jl) < 1 ||
		    json_integer_value(jl) > ARTIFACTS_EMBED_BYTES)
		{
			char m[80];
			snprintf(m, sizeof(m), "length must be 1 to %u bytes", ARTIFACTS_EMBED_BYTES);
			return ar_error("%s", m);
		}
		want = json_integer_value(jl);
	}
	struct stat st;
	int fd = ar_open(appfd, path, &st);
	if (fd == -ENOENT || fd == -ENOTDIR)
		return ar_error("/app/%s does not exist (files in /app/out last until the next "
				"execute_go_code call; /app/persist lasts for the session)", path);
	if (fd == -ELOOP || fd == -EPERM)
		return ar_error("/app/%s is not a regular file with one name (links are never "
				"followed)", path);
	if (fd < 0)
		return ar_error("/app/%s could not be opened", path);
	unsigned char *head = NULL, *data = NULL;
	size_t hn = 0, n = 0;
	int rc = ar_read(fd, 0, ARTIFACTS_SNIFF_BYTES, &head, &hn);
	if (rc == 0)
		rc = ar_read(fd, (off_t)off, (size_t)want, &data, &n);
	close(fd);
	if (rc < 0) {
		free(head);
		return ar_error("/app/%s could not be read", path);
	}
	const char *mt = artifacts_sniff(head, hn, path);
	free(head);
	bool eof = (json_int_t)n + off >= (json_int_t)st.st_size;
	bool text = off == 0 && eof && ar_is_text(mt) && ar_utf8(data, n);
	json_t *o = json_pack("{s:s, s:I, s:s, s:I, s:I, s:b, s:b}", "path", path, "size",
			      (json_int_t)st.st_size, "media_type", mt, "offset", off, "length",
			      (json_int_t)n, "eof", eof, "text", text);
	if (!o) {
		free(data);
		return NULL;
	}
	*bytes = data;
	*nbytes = n;
	return o;
}

/* artifacts_files - see artifacts.h */
json_t *artifacts_files(int appfd, json_t *req, unsigned char **bytes, size_t *nbytes)
{
	*bytes = NULL;
	*nbytes = 0;
	const char *op = json_string_value(json_object_get(req, "op"));
	if (op && strcmp(op, "list") == 0)
		return ar_files_list(appfd, req);
	if (op && strcmp(op, "read") == 0)
		return ar_files_read(appfd, req, bytes, nbytes);
	return ar_error("%s", "op must be \"list\" or \"read\"");
}
