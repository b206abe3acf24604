/*
 * rfc3339.h - RFC 3339 timestamps ("2026-11-30T16:55:09.25+01:00"), read and written: the
 * expiry times of exec credential plugins (master), Google's token answers (worker) and the
 * SandboxClaim's lease (worker).
 */
#ifndef KG_LIB_RFC3339_H
#define KG_LIB_RFC3339_H

#include <stddef.h>
#include <time.h>

/* rfc3339_parse - a whole RFC 3339 date-time (§5.6: "T" or "t", fractional seconds of any
 * length dropped, "Z", "z" or a numeric offset) as seconds since the epoch; nothing may follow.
 * 0, or -EINVAL (not such a time, or a field out of range) */
int rfc3339_parse(const char *s, time_t *out);

/* rfc3339_format - t in UTC as "2026-11-30T15:55:09Z" (cap of RFC3339_LEN + 1 suffices); ""
 * when it does not fit cap or its year is not 0000-9999 */
#define RFC3339_LEN 20
void rfc3339_format(time_t t, char *out, size_t cap);

#endif
