/*
 * bench/clock.h: the clock of the benchmark's C clients (bench/gateway.c,
 * bench/alternate.c), which time their windows on it.
 */
#ifndef BENCH_CLOCK_H
#define BENCH_CLOCK_H

#include <time.h>

/* Seconds on the monotonic clock. */
static inline double
now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

#endif							/* BENCH_CLOCK_H */
