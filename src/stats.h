/*-------------------------------------------------------------------------
 *
 * stats.h
 *	  Counters of what each bucket did, in shared memory, beside the
 *	  stores: the router counts every decision here.
 *
 * src/stats.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_STATS_H
#define TOKENBUCKET_STATS_H

#include "datatype/timestamp.h"
#include "fmgr.h"

/* What calls did to a bucket; waits in microseconds. */
typedef struct StatsCounters
{
	int64		granted;		/* calls granted */
	double		granted_tokens; /* tokens they took, and tb_settle's extra */
	int64		denied;			/* calls denied at once */
	int64		waited;			/* calls that waited */
	int64		wait_usecs;		/* how long they waited, in all */
	int64		timeouts;		/* calls that waited in vain */
	double		refunded_tokens;	/* tokens given back */
	int64		pauses;			/* pauses set */
} StatsCounters;

extern void stats_init(void);
extern void stats_forget(Oid dbid, Oid relid);
extern bool stats_enabled(void);
extern void stats_count(Oid relid, text *name, const StatsCounters *delta,
						int (*template_of) (void *arg), void *arg,
						TimestampTz now);

#endif							/* TOKENBUCKET_STATS_H */
