/*
 * artifacts.h - the files a call leaves for the client: /app/out after a run (artifacts in the
 * result), and /app/persist and /app/out as the session's MCP resources (POST /files).
 *
 * Called by agent/pipeline.c (artifacts_prepare before a run, artifacts_collect after it,
 * artifacts_digest so the worker can tell whether the files changed) and by agent/agent_main.c
 * for POST /files (artifacts_files). Everything under /app was shaped by the user's program:
 * every open walks the path one component at a time from a directory descriptor with
 * O_NOFOLLOW, only regular files with one name are read (no symlink, hard link, FIFO, device or
 * socket), reads are bounded whatever the file's size says, and the media type comes from the
 * content, not the name.
 */
#ifndef KG_ARTIFACTS_H
#define KG_ARTIFACTS_H

#include <jansson.h>
#include <stddef.h>

#include "policy/limits.h"

#define ARTIFACTS_DIR "out"

/* The media type of a /files read's answer: a header line of JSON, then the bytes. */
#define ARTIFACTS_PIECE_TYPE "application/x-kode-gopher-file"

/* artifacts_prepare - an empty out/ below appfd (the wipe before the call removed the old) */
int artifacts_prepare(int appfd);

/*
 * artifacts_collect - the files below appfd/out after a run, into the result o:
 *   "artifacts": [{name (relative to out/), path ("/app/out/..."), uri, size, media_type,
 *                  embedded, note? (why not)}]
 *   "artifacts_note": a sentence when a cap was hit (count or bytes), else absent
 * Files are taken in name order; up to ARTIFACTS_EMBED_BYTES in all are marked embedded. The
 * result carries no file bytes: the worker reads the embedded ones with artifacts_files
 * (POST /files), raw, so a MiB of PNG never passes through a JSON parser.
 */
void artifacts_collect(int appfd, json_t *o);

/* artifacts_digest - a hex digest of the names, sizes and times of everything under persist/
 * and out/: equal digests mean the resources did not change. buf: 65 bytes. */
void artifacts_digest(int appfd, char *buf);

/*
 * artifacts_stamps - for resources/subscribe: {path: stamp} for the paths of the array watch
 * (at most ARTIFACTS_WATCH_MAX, each below persist/ or out/; others are left out), a stamp
 * being the size, modification time and inode of a regular file with one name, null for
 * anything else or nothing. Taken before a call (before its wipe) and after it:
 * artifacts_watch_changed puts the paths whose stamps differ into o's "watch_changed".
 */
json_t *artifacts_stamps(int appfd, json_t *watch);
void artifacts_watch_changed(int appfd, json_t *before, json_t *o);

/*
 * artifacts_files - POST /files:
 *   {"op":"list", "cursor"?: "N"} -> {"files":[{path, size, media_type, mtime}], "next": "N"|null}
 *   {"op":"read", "path":"persist/x", "offset"?: N, "length"?: L} -> the header
 *        {path, size, media_type, offset, length, eof, text}, and in *bytes (malloc'd) the
 *        `length` bytes read from offset: at most L (default ARTIFACTS_READ_BYTES, at most
 *        ARTIFACTS_EMBED_BYTES). text: the whole file, read in this one piece, is UTF-8 text.
 * An error is {"error": sentence}, which the worker passes on; *bytes is then NULL.
 */
json_t *artifacts_files(int appfd, json_t *req, unsigned char **bytes, size_t *nbytes);

/* artifacts_sniff - the media type of content starting with p[0..n); name only refines a
 * text type (.csv, .json, .html, .md); never NULL */
const char *artifacts_sniff(const unsigned char *p, size_t n, const char *name);

#endif
