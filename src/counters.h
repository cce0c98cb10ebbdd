/*-------------------------------------------------------------------------
 *
 * counters.h
 *	  What the counters count: a bucket's BucketCounters, a limit's
 *	  LimitCounters, and the StatsCounts an entry holds either in.
 *
 * src/counters.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_COUNTERS_H
#define TOKENBUCKET_COUNTERS_H

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

/* Add "delta" to "sum". */
static inline void
bucket_counters_add(BucketCounters *sum, const BucketCounters *delta)
{
	sum->granted += delta->granted;
	sum->granted_tokens += delta->granted_tokens;
	sum->denied += delta->denied;
	sum->waited += delta->waited;
	sum->wait_usecs += delta->wait_usecs;
	sum->timeouts += delta->timeouts;
	sum->refunded_tokens += delta->refunded_tokens;
	sum->pauses += delta->pauses;
	sum->cancelled += delta->cancelled;
}

/* Add "delta" to "sum". */
static inline void
limit_counters_add(LimitCounters *sum, const LimitCounters *delta)
{
	sum->leases += delta->leases;
	sum->slots += delta->slots;
	sum->refused += delta->refused;
	sum->waited += delta->waited;
	sum->wait_usecs += delta->wait_usecs;
	sum->timeouts += delta->timeouts;
	sum->cancelled += delta->cancelled;
	sum->released += delta->released;
	sum->ended += delta->ended;
	sum->expired += delta->expired;
}

/* Add "delta" to "sum": a limit's counters with "limit", else a bucket's. */
static inline void
stats_counts_add(StatsCounts *sum, const StatsCounts *delta, bool limit)
{
	if (limit)
		limit_counters_add(&sum->limit, &delta->limit);
	else
		bucket_counters_add(&sum->bucket, &delta->bucket);
}

#endif							/* TOKENBUCKET_COUNTERS_H */
