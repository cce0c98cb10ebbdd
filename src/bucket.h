/*-------------------------------------------------------------------------
 *
 * bucket.h
 *	  Token bucket state and the arithmetic every entry point shares.
 *
 * A bucket is stored as the tokens it was short of full ("deficit") at the
 * moment "updated_at".  Refill pays the deficit back at refill_rate tokens
 * per second, so a full bucket is simply deficit = 0, whatever updated_at
 * says.  That makes the column defaults describe a full bucket, keeps
 * fractional tokens exact, and means a denied request never has to write.
 * A deficit above capacity is debt: the bucket holds fewer than no tokens
 * until refill has paid it back.
 *
 * A period bucket (a quota) refills otherwise: refill_rate tokens at once
 * at the start of each period of its calendar (BucketPeriod, period.c),
 * and nothing in between.
 *
 * src/bucket.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_BUCKET_H
#define TOKENBUCKET_BUCKET_H

#include "datatype/timestamp.h"
#include "fmgr.h"

/* Longest wait we report: 1000 years keeps every sum inside timestamptz. */
#define BUCKET_MAX_WAIT_USECS	((int64) 1000 * 365 * USECS_PER_DAY)

/*
 * The smallest cost a bucket accounts for, as a fraction of its capacity
 * (2^-32).  A float8 deficit no larger than the capacity is kept to within
 * capacity x 2^-53, so a cost of at least capacity x 2^-32 is added to it
 * to within one part in two million; a cost far smaller could be lost to
 * rounding altogether and granted without limit.
 */
#define BUCKET_COST_RESOLUTION	(1.0 / 4294967296.0)

/*
 * How far past the capacity, as a fraction of it (2^-48), a take with a
 * reserve may reach and still be granted: float8 rounding only.  A reserve
 * and a cost typed as decimals (0.2 and 8 of a capacity of 10) are binary
 * fractions that miss their sum by a few units of the capacity's last
 * place (2^-52 of it); so the boundary is granted as written, and the
 * slack is a 65536th of the smallest cost a bucket accounts for.  A limit's
 * reserve of slots uses it too (limit_config.c).
 */
#define BUCKET_RESERVE_SLACK	(1.0 / 281474976710656.0)

/* Bytes of a period's time zone name, its NUL included (IANA's longest: 32). */
#define BUCKET_ZONE_BYTES	40

/*
 * A period bucket's calendar: exactly one of months, days and usecs is
 * above zero (all zero: a continuous bucket).  Period n starts at the
 * local time anchor + n x (months, or days), or at anchor + n x usecs, in
 * time zone "zone" (NUL-padded, so that two specs compare bytewise).
 */
typedef struct BucketPeriod
{
	int32		months;
	int32		days;
	int64		usecs;
	Timestamp	anchor;			/* a local moment a period starts at */
	char		zone[BUCKET_ZONE_BYTES];
} BucketPeriod;

typedef struct Bucket
{
	double		capacity;		/* most tokens the bucket holds */
	double		refill_rate;	/* tokens added per second (a period
								 * bucket's: at each period's start) */
	double		deficit;		/* tokens short of full at updated_at */
	TimestampTz updated_at;		/* when deficit was last written */
	TimestampTz paused_until;	/* no grants before this (DT_NOBEGIN: none) */
	const BucketPeriod *period; /* its calendar, interned; NULL: refills
								 * continuously */
} Bucket;

/*
 * Whether the bucket refills by periods rather than continuously.  A
 * calendar is kept once and shared by the buckets that have it (interned):
 * a memory bucket's in shared memory (memory_calendar()), any other's in
 * this backend (period_intern()).  Its address stands for its content as
 * long as anyone can see it, so period.c compares addresses first.
 */
#define BUCKET_PERIODIC(bucket) ((bucket)->period != NULL)

extern double bucket_deficit_at(const Bucket *bucket, TimestampTz at);
extern double bucket_initial_deficit(const Bucket *settings);
extern double bucket_tokens_at(const Bucket *bucket, TimestampTz at);
extern bool bucket_cost_resolvable(double capacity, double cost);
extern TimestampTz timestamp_saturate(double usecs);
extern bool bucket_fits(double capacity, double cost, double reserve);
extern bool bucket_holds(const Bucket *bucket, double cost, double reserve,
						 TimestampTz at);
extern bool bucket_take(Bucket *bucket, double cost, double reserve,
						TimestampTz at);
extern TimestampTz bucket_ready_at(const Bucket *bucket, double cost,
								   double reserve, TimestampTz at);
extern TimestampTz bucket_full_at(const Bucket *bucket);
extern void bucket_reconfigure(Bucket *bucket, double capacity,
							   double refill_rate, TimestampTz at);
extern void bucket_adjust(Bucket *bucket, double tokens, TimestampTz at);
extern void bucket_lower_to(Bucket *bucket, double tokens, TimestampTz at);
extern void take_watch_begin(void);
extern bool take_watch_denied(Bucket *bucket);

/* period.c: the calendar of period buckets */
extern int64 period_count(const BucketPeriod *period, TimestampTz from,
						  TimestampTz to);
extern TimestampTz period_start(const BucketPeriod *period, int64 n);
extern int64 period_index(const BucketPeriod *period, TimestampTz at);
extern void period_set(BucketPeriod *period, const Interval *interval,
					   Timestamp anchor, const char *zone, int len,
					   int sqlstate);
extern bool period_from_args(FunctionCallInfo fcinfo, int first,
							 BucketPeriod *period);
extern void period_from_datums(BucketPeriod *period, const Datum *values,
							   const bool *isnull);
extern void period_to_datums(const BucketPeriod *period, Datum *values,
							 char *nulls);
extern const BucketPeriod *period_intern(const BucketPeriod *period);
extern void period_xact_end(void);

#endif							/* TOKENBUCKET_BUCKET_H */
