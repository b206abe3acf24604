/*
 * secret.h - wiping what may hold a token, key or password before its memory goes back to the
 * allocator. Shared by master, worker and agent.
 */
#ifndef KG_LIB_SECRET_H
#define KG_LIB_SECRET_H

/* secret_free - wipe a NUL-terminated string and free it; NULL is fine */
void secret_free(char *s);

#endif
