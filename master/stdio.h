/*
 * stdio.h - the stdio transport of the master, and what serve.c shares with exec.c.
 */
#ifndef KG_STDIO_H
#define KG_STDIO_H

#include "master/master.h"

void serve_config_defaults(struct serve_config *cfg);
int serve_config_option(struct serve_config *cfg, const char *name, const char *val);
int serve_parse_int(const char *opt, const char *val, int min, int max, int *out);

/* client lines read but not yet taken by the worker; past it stdin is not read (backpressure) */
#define STDIO_MAX_HELD_BYTES (8u * 1024 * 1024)

/* the capacity asked for stdout when it is a pipe (Linux lets any user have 1 MiB): an answer
 * with an artifact's base64 goes in with a write or two, and the client reads it without
 * waiting for this process to be scheduled again every 64 KiB */
#define STDIO_PIPE_BYTES (1024 * 1024)

/* stdio_serve - relay stdin/stdout to one worker until stdin closes; returns the exit status */
int stdio_serve(const struct serve_config *cfg);

#endif
