/*-------------------------------------------------------------------------
 *
 * stats_views.h
 *	  A bucket's counters as SQL values, for the views' functions.
 *
 * src/stats_views.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_STATS_VIEWS_H
#define TOKENBUCKET_STATS_VIEWS_H

#include "counters.h"

/* The columns stats_values() fills: granted ... pauses, then cancelled. */
#define STATS_COLUMNS 9

extern void stats_values(const BucketCounters *counters, Datum *values);

#endif							/* TOKENBUCKET_STATS_VIEWS_H */
