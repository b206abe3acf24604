/*
 * mono.h - the one monotonic clock every process reads for deadlines, timeouts and durations
 * (CLOCK_MONOTONIC: never jumps with the wall clock). Shared by master, worker and agent.
 */
#ifndef KG_LIB_MONO_H
#define KG_LIB_MONO_H

#include <stdint.h>
#include <time.h>

/* mono_s - now, in seconds */
double mono_s(void);

/* mono_ms - now, in milliseconds */
int64_t mono_ms(void);

/* mono_since_ms - milliseconds from *start (read with clock_gettime(CLOCK_MONOTONIC)) to now */
long mono_since_ms(const struct timespec *start);

/* mono_after - now + ms, as the absolute time pthread_cond_timedwait wants of a condition
 * variable set to CLOCK_MONOTONIC */
struct timespec mono_after(long ms);

#endif
