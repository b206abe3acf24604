/*
 * proc.h - what every process that starts children needs around fork and wait: the child's
 * clean start (master/spawn.c's workers, master/sandbox_local.c's jails) and a wait status said
 * in words for logs and error sentences.
 */
#ifndef KG_LIB_PROC_H
#define KG_LIB_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* proc_status_text - "exited with status 1" / "killed by signal 9 (SIGKILL)" into buf */
const char *proc_status_text(int status, char *buf, size_t cap);

/* proc_child_setup - in a forked child before exec (async-signal-safe calls only): die with
 * the parent, stdin from /dev/null, stdout to /dev/null (the MCP stream is never a child's) or
 * to stderr, default signal state, no inherited descriptors. Returns only if all went well. */
void proc_child_setup(pid_t parent, bool stdout_to_stderr);

#endif
