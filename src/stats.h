/*-------------------------------------------------------------------------
 *
 * stats.h
 *	  Counters of what each bucket and template did, beside the stores:
 *	  the router counts every decision here.
 *
 * src/stats.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_STATS_H
#define TOKENBUCKET_STATS_H

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "shmem.h"

/* What calls did to a bucket; waits in microseconds. */
typedef struct BucketCounters
{
	int64		granted;		/* calls granted */
	double		granted_tokens; /* tokens they took, and tb_settle's extra */
	int64		denied;			/* calls denied at once */
	int64		waited;			/* calls that waited */
	int64		wait_usecs;		/* how long they waited, in all */
	int64		timeouts;		/* calls that waited in vain */
	double		refunded_tokens;	/* tokens given back */
	int64		pauses;			/* pauses set */
	int64		cancelled;		/* waits ended by an error: a cancel, a
								 * statement_timeout, the session's end */
} BucketCounters;

/*
 * What calls did to a limit; waits in microseconds.  What a limit counts
 * as a bucket does lies where a bucket's counters have it (StatsCounts).
 */
typedef struct LimitCounters
{
	int64		leases;			/* leases granted */
	double		slots;			/* the slots they took */
	int64		refused;		/* leases refused at once */
	int64		waited;			/* calls that waited */
	int64		wait_usecs;		/* how long they waited, in all */
	int64		timeouts;		/* calls that waited in vain */
	int64		unused[2];		/* where a bucket's refunds and pauses are */
	int64		cancelled;		/* waits ended by an error: a cancel, a
								 * statement_timeout, the session's end */
	int64		released;		/* slots freed by tb_release */
	int64		ended;			/* by their holder's session or transaction
								 * ending, or its backend gone */
	int64		expired;		/* by their ttl */
} LimitCounters;

/*
 * What an entry of the counters holds: a bucket's counters or a limit's,
 * as the installation's table its key names says (tb_buckets or
 * tb_limits).  One layout for both, which the state files keep: a file of
 * 1.6 and before holds a bucket's alone.
 */
typedef union StatsCounts
{
	BucketCounters bucket;
	LimitCounters limit;
} StatsCounts;

/* What a state file of 1.6 and before kept of StatsCounts. */
#define STATS_COUNTERS_SIZE_1_6 sizeof(BucketCounters)

/*
 * Where the counters of a bucket made from a template live when its store
 * keeps them with the bucket (a memory key's entry): called with what a
 * committed (or aborted) transaction counted for it.
 */
typedef void (*StatsSink) (const SharedKey *key, const BucketCounters *delta,
						   TimestampTz at);

extern void stats_init(void);
extern bool stats_enabled(void);
extern void stats_count(Oid relid, text *name, const BucketCounters *delta,
						int template_len, int (*template_of) (void *arg),
						void *arg, StatsSink sink, TimestampTz now);
extern void stats_count_template(Oid relid, text *name, int template_len,
								 const BucketCounters *delta, TimestampTz now);
extern void stats_count_limit(Oid limits, text *name, const LimitCounters *delta,
							  int template_len, int (*template_of) (void *arg),
							  void *arg, TimestampTz now);
extern void stats_count_limit_now(Oid limits, const char *name, int len,
								  int template_len, const LimitCounters *delta,
								  TimestampTz now);
extern void stats_forget(Oid dbid, Oid relid);
extern void stats_reset(Oid relid, text *name);
extern void bucket_counters_add(BucketCounters *sum, const BucketCounters *delta);
extern void stats_values(const BucketCounters *counters, Datum *values);

/* the transaction's end, for xact.c alone */
extern const char *stats_unpreparable(void);
extern void stats_xact_end(bool commit);
extern void stats_subxact_end(bool commit);

/* The columns stats_values() fills: granted ... pauses, then cancelled. */
#define STATS_COLUMNS 9

#endif							/* TOKENBUCKET_STATS_H */
