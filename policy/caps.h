/*
 * caps.h - give up every capability (policy/caps.c).
 *
 * Called by the local jail (policy/jail.c) for its init and the agent, and by the agent's
 * runproc (agent/runproc.c) for a user program in a user namespace of its own, between fork and
 * exec: async-signal-safe.
 */
#ifndef KG_CAPS_H
#define KG_CAPS_H

/* caps_drop_all - empty the bounding and ambient sets and the effective, permitted and
 * inheritable ones, so none comes back after an exec, even as root; 0 or a negative errno */
int caps_drop_all(void);

#endif
