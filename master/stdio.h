/*
 * stdio.h - the stdio transport of the master, and what serve.c shares with exec.c.
 */
#ifndef KG_STDIO_H
#define KG_STDIO_H

#include "master/master.h"
#include "policy/limits.h"

void serve_config_defaults(struct serve_config *cfg);
int serve_config_option(struct serve_config *cfg, const char *name, const char *val);
int serve_parse_int(const char *opt, const char *val, int min, int max, int *out);

/* stdio_serve - relay stdin/stdout to one worker until stdin closes; returns the exit status */
int stdio_serve(const struct serve_config *cfg);

#endif
