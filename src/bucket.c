/*-------------------------------------------------------------------------
 *
 * bucket.c
 *	  The refill arithmetic, in one place, and its SQL-callable wrappers.
 *
 * Every decision the extension makes goes through bucket_deficit_at(): the
 * acquire UPDATE calls it through tb_take(), the tb_status view through
 * tb_tokens() and tb_full_at(), and the C entry points directly.  None of
 * these functions touch a table; tokenbucket.c does that.
 *
 * A period bucket (a quota) gains refill_rate tokens at each start of a
 * period of its calendar (period.c) instead: the same arithmetic with the
 * number of periods begun in place of the seconds elapsed.
 *
 * Time only ever moves a bucket forward: a moment earlier than updated_at
 * (a clock stepped back, or a caller that read the clock before waiting on
 * a row lock) sees the bucket as it was at updated_at, and updated_at never
 * moves backwards, so no interval of time is ever refilled twice.
 *
 * src/bucket.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "bucket.h"
#include "common/int.h"
#include "fmgr.h"
#include "utils/timestamp.h"

/*
 * Tokens the bucket is short of full at "at", after refilling since
 * updated_at.  This is the refill arithmetic; everything else uses it.
 */
double
bucket_deficit_at(const Bucket *bucket, TimestampTz at)
{
	double		elapsed;

	if (at <= bucket->updated_at)
		return bucket->deficit;

	if (unlikely(BUCKET_PERIODIC(bucket)))
	{
		int64		periods = period_count(bucket->period, bucket->updated_at, at);

		if (periods == 0)
			return bucket->deficit;
		return fmax(0.0, bucket->deficit - (double) periods * bucket->refill_rate);
	}
	elapsed = ((double) at - (double) bucket->updated_at) / USECS_PER_SEC;
	return fmax(0.0, bucket->deficit - elapsed * bucket->refill_rate);
}

/*
 * The deficit a new bucket with these settings starts with: none (full),
 * but a period bucket holds one period's tokens (refill_rate), not what
 * it may carry over besides.
 */
double
bucket_initial_deficit(const Bucket *settings)
{
	return BUCKET_PERIODIC(settings) ?
		fmax(0.0, settings->capacity - settings->refill_rate) : 0.0;
}

/* Tokens the bucket holds at "at". */
double
bucket_tokens_at(const Bucket *bucket, TimestampTz at)
{
	return bucket->capacity - bucket_deficit_at(bucket, at);
}

/*
 * Whether a bucket of "capacity" can account for taking "cost": zero, or
 * at least capacity x BUCKET_COST_RESOLUTION.  A smaller cost would not
 * change the deficit reliably, so it is never granted (the entry points
 * report why).
 */
bool
bucket_cost_resolvable(double capacity, double cost)
{
	return cost == 0 || cost >= capacity * BUCKET_COST_RESOLUTION;
}

/*
 * The timestamptz "usecs" microseconds after the epoch, saturating at
 * -infinity and infinity: never a value outside what timestamptz can print
 * and read back (pg_dump, restore and logical replication depend on it).
 */
TimestampTz
timestamp_saturate(double usecs)
{
	if (!(usecs < (double) END_TIMESTAMP))
		return isnan(usecs) ? DT_NOBEGIN : DT_NOEND;
	if (usecs < (double) MIN_TIMESTAMP)
		return DT_NOBEGIN;
	return (TimestampTz) usecs;
}

/*
 * Whether a bucket of "capacity" that is "after" tokens short of full once
 * a take is made still holds "reserve" x capacity tokens: the reserve rule.
 * after <= capacity: no take ever leaves the bucket in debt.  With a
 * reserve, after + reserve x capacity <= capacity, to within
 * BUCKET_RESERVE_SLACK of the capacity, so that a boundary typed in
 * decimals (capacity 10, reserve 0.2, cost 8 on a full bucket) is granted
 * and anything a resolvable cost above it (8.000001) is not.  It is written
 * as (after - capacity) + reserve x capacity, which no capacity up to
 * DBL_MAX overflows.  Without a reserve (0), exactly after <= capacity.
 */
static inline bool
leaves_reserve(double capacity, double after, double reserve)
{
	return after <= capacity &&
		(reserve == 0 ||
		 (after - capacity) + reserve * capacity <= capacity * BUCKET_RESERVE_SLACK);
}

/*
 * Whether a full bucket of "capacity" grants "cost" with "reserve": false
 * for a request no bucket of that capacity could ever grant.
 */
bool
bucket_fits(double capacity, double cost, double reserve)
{
	return leaves_reserve(capacity, cost, reserve);
}

/*
 * Whether the bucket grants "cost" tokens at "at" and still holds
 * "reserve" (a share of its capacity, 0 for none) afterwards: it is not
 * paused, holds them, and can account for them (leaves_reserve()).  This
 * is the grant decision; bucket_take() and bucket_ready_at() both use it,
 * so a client told to come back at a moment is granted at that moment.
 * It never turns from true to false as "at" grows, which bucket_ready_at()
 * relies on.
 */
bool
bucket_holds(const Bucket *bucket, double cost, double reserve, TimestampTz at)
{
	return at >= bucket->paused_until &&
		bucket_cost_resolvable(bucket->capacity, cost) &&
		leaves_reserve(bucket->capacity, bucket_deficit_at(bucket, at) + cost,
					   reserve);
}

/*
 * Take "cost" tokens at "at" if the bucket holds them and its "reserve"
 * besides.  Returns false and leaves the bucket untouched otherwise.
 */
bool
bucket_take(Bucket *bucket, double cost, double reserve, TimestampTz at)
{
	if (!bucket_holds(bucket, cost, reserve, at))
		return false;

	bucket->deficit = bucket_deficit_at(bucket, at) + cost;
	bucket->updated_at = Max(bucket->updated_at, at);
	return true;
}

/*
 * bucket_ready_at() of a period bucket, refused at "lo" and granted at
 * "hi": tokens come only at a period's start, so the answer is the start
 * of the period that brings enough, the k-th after updated_at's for k =
 * the tokens missing / refill_rate, confirmed by bucket_holds() (or the
 * next, should rounding have missed it).
 */
static TimestampTz
period_ready_at(const Bucket *bucket, double cost, double reserve,
				TimestampTz lo, TimestampTz hi)
{
	double		missing = bucket->deficit + cost + reserve * bucket->capacity -
		bucket->capacity;
	double		periods = fmax(1.0, ceil(missing / bucket->refill_rate));
	int64		n;

	if (!(periods < 1e12))
		return hi >= END_TIMESTAMP ? DT_NOEND : hi;
	n = period_index(bucket->period, bucket->updated_at) + (int64) periods;
	n = Max(n, period_index(bucket->period, lo) + 1);
	for (int i = 0; i < 4; i++, n++)
	{
		TimestampTz start = period_start(bucket->period, n);

		if (start >= hi)
			break;
		if (bucket_holds(bucket, cost, reserve, start))
			return start;
	}
	return hi >= END_TIMESTAMP ? DT_NOEND : hi;
}

/*
 * The first microsecond, not before "at", at which the bucket holds "cost"
 * tokens and its "reserve" besides: exactly the first one bucket_holds()
 * accepts, at any capacity and rate.  The estimate from the refill rate is usually that microsecond
 * already; when rounding makes it miss (huge capacities, tiny rates), a
 * bisection finds it.  Waits are capped at BUCKET_MAX_WAIT_USECS, and a
 * moment past the last timestamptz is infinity.
 */
TimestampTz
bucket_ready_at(const Bucket *bucket, double cost, double reserve,
				TimestampTz at)
{
	TimestampTz lo = Max(Max(at, bucket->updated_at), bucket->paused_until);
	TimestampTz hi;
	TimestampTz guess;
	double		wait;

	if (bucket_holds(bucket, cost, reserve, at))
		return at;
	if (lo >= END_TIMESTAMP)
		return DT_NOEND;
	if (bucket_holds(bucket, cost, reserve, lo))
		return lo;
	if (pg_add_s64_overflow(lo, BUCKET_MAX_WAIT_USECS, &hi) || hi >= END_TIMESTAMP)
		hi = END_TIMESTAMP;
	if (!bucket_holds(bucket, cost, reserve, hi))
		return hi >= END_TIMESTAMP ? DT_NOEND : hi;

	if (BUCKET_PERIODIC(bucket))
		return period_ready_at(bucket, cost, reserve, lo, hi);

	/* now lo is refused and hi granted; start from the estimate */
	wait = ceil((bucket->deficit + cost + reserve * bucket->capacity -
				 bucket->capacity) /
				bucket->refill_rate * USECS_PER_SEC);
	if (wait > 0 && wait < (double) BUCKET_MAX_WAIT_USECS &&
		!pg_add_s64_overflow(bucket->updated_at, (int64) wait, &guess) &&
		guess > lo && guess < hi)
	{
		if (bucket_holds(bucket, cost, reserve, guess))
		{
			if (!bucket_holds(bucket, cost, reserve, guess - 1))
				return guess;
			hi = guess;
		}
		else if (bucket_holds(bucket, cost, reserve, guess + 1))
			return guess + 1;
		else
			lo = guess;
	}
	while (hi - lo > 1)
	{
		TimestampTz mid = lo + (hi - lo) / 2;

		if (bucket_holds(bucket, cost, reserve, mid))
			hi = mid;
		else
			lo = mid;
	}
	return hi >= END_TIMESTAMP ? DT_NOEND : hi;
}

/*
 * When the bucket is (or was) full: the first moment a request for its
 * whole capacity would be granted, were it not paused.
 */
TimestampTz
bucket_full_at(const Bucket *bucket)
{
	Bucket		unpaused = *bucket;

	unpaused.paused_until = DT_NOBEGIN;
	return bucket_ready_at(&unpaused, bucket->capacity, 0, bucket->updated_at);
}

/*
 * Give the bucket new settings at "at", keeping the tokens it holds then,
 * capped at the new capacity.
 */
void
bucket_reconfigure(Bucket *bucket, double capacity, double refill_rate,
				   TimestampTz at)
{
	double		tokens = fmin(bucket_tokens_at(bucket, at), capacity);

	bucket->deficit = fmax(0.0, capacity - tokens);
	bucket->updated_at = Max(bucket->updated_at, at);
	bucket->capacity = capacity;
	bucket->refill_rate = refill_rate;
}

/*
 * Add "tokens" at "at" (take them when negative), capped at capacity but
 * not floored: taking more than the bucket holds leaves it in debt.
 */
void
bucket_adjust(Bucket *bucket, double tokens, TimestampTz at)
{
	bucket->deficit = fmax(0.0, bucket_deficit_at(bucket, at) - tokens);
	bucket->updated_at = Max(bucket->updated_at, at);
}

/* Lower what the bucket holds at "at" to "tokens"; never raise it. */
void
bucket_lower_to(Bucket *bucket, double tokens, TimestampTz at)
{
	bucket->deficit = fmax(bucket_deficit_at(bucket, at),
						   bucket->capacity - tokens);
	bucket->updated_at = Max(bucket->updated_at, at);
}

/*
 * Build a Bucket (not paused) from the first four arguments of a helper,
 * and with "nargs" arguments, its period from the last three (a form of
 * 1.9 that is not STRICT: NULL in the others gives false).  Else false.
 */
static bool
bucket_from_args(FunctionCallInfo fcinfo, int nargs, Bucket *bucket)
{
	BucketPeriod period;

	bucket->period = NULL;
	if (PG_NARGS() == nargs)
	{
		for (int i = 0; i < nargs - 3; i++)
			if (PG_ARGISNULL(i))
				return false;
		if (!period_from_args(fcinfo, nargs - 3, &period))
			return false;
		bucket->period = period_intern(&period);
	}
	bucket->capacity = PG_GETARG_FLOAT8(0);
	bucket->refill_rate = PG_GETARG_FLOAT8(1);
	bucket->deficit = PG_GETARG_FLOAT8(2);
	bucket->updated_at = PG_GETARG_TIMESTAMPTZ(3);
	bucket->paused_until = DT_NOBEGIN;
	return true;
}

/*
 * The bucket tb_take() last decided on, for store.c: after an acquire
 * UPDATE that matched no row, a denial seen here (on the newest row version
 * the UPDATE checked) tells "denied, and this is the state" from "no such
 * bucket" without reading the row again.  A grant seen here means the row
 * qualified and then vanished (deleted while the UPDATE waited for it).
 */
static Bucket take_seen;
static bool take_seen_denied = false;

/* Forget what tb_take() last saw. */
void
take_watch_begin(void)
{
	take_seen_denied = false;
}

/* Whether tb_take()'s last decision since take_watch_begin() was a denial. */
bool
take_watch_denied(Bucket *bucket)
{
	if (take_seen_denied)
		*bucket = take_seen;
	return take_seen_denied;
}

PG_FUNCTION_INFO_V1(tb_take);

/*
 * tb_take(capacity, refill_rate, deficit, updated_at, [paused_until,] cost,
 * at [, reserve]): the deficit after taking "cost" tokens at "at", or NULL
 * when the bucket does not grant them (with "reserve": unless it still
 * holds that share of its capacity afterwards).  The acquire UPDATE uses
 * it both to filter and to set the row.  Version 1.0 declared it without
 * paused_until, 1.7 added the form with reserve (a statement of its own,
 * so that a take without one runs the statement it always did), 1.9 the
 * form with reserve and the bucket's period (period, period_anchor,
 * time_zone: NULL for a continuous bucket), which the table store uses.
 */
Datum
tb_take(PG_FUNCTION_ARGS)
{
	Bucket		bucket;
	int			cost_arg = PG_NARGS() >= 7 ? 5 : 4;
	double		reserve = PG_NARGS() >= 8 ? PG_GETARG_FLOAT8(7) : 0;

	if (!bucket_from_args(fcinfo, 11, &bucket))
		PG_RETURN_NULL();
	if (PG_NARGS() >= 7)
		bucket.paused_until = PG_GETARG_TIMESTAMPTZ(4);
	take_seen = bucket;
	take_seen_denied = !bucket_take(&bucket, PG_GETARG_FLOAT8(cost_arg), reserve,
									PG_GETARG_TIMESTAMPTZ(cost_arg + 1));
	if (take_seen_denied)
		PG_RETURN_NULL();
	PG_RETURN_FLOAT8(bucket.deficit);
}

PG_FUNCTION_INFO_V1(tb_tokens);

/*
 * tb_tokens(capacity, refill_rate, deficit, updated_at, at [, period,
 * period_anchor, time_zone]): tokens held at "at".
 */
Datum
tb_tokens(PG_FUNCTION_ARGS)
{
	Bucket		bucket;

	if (!bucket_from_args(fcinfo, 8, &bucket))
		PG_RETURN_NULL();

	PG_RETURN_FLOAT8(bucket_tokens_at(&bucket, PG_GETARG_TIMESTAMPTZ(4)));
}

PG_FUNCTION_INFO_V1(tb_ready_at);

/*
 * tb_ready_at(capacity, refill_rate, deficit, updated_at, paused_until,
 * cost, at [, period, period_anchor, time_zone]): the first moment, not
 * before "at", at which the bucket grants "cost" (bucket_ready_at(): what
 * retry_after counts down to).
 */
Datum
tb_ready_at(PG_FUNCTION_ARGS)
{
	Bucket		bucket;

	if (!bucket_from_args(fcinfo, 10, &bucket))
		PG_RETURN_NULL();

	bucket.paused_until = PG_GETARG_TIMESTAMPTZ(4);
	PG_RETURN_TIMESTAMPTZ(bucket_ready_at(&bucket, PG_GETARG_FLOAT8(5), 0,
										  PG_GETARG_TIMESTAMPTZ(6)));
}

PG_FUNCTION_INFO_V1(tb_resize);

/*
 * tb_resize(capacity, refill_rate, deficit, updated_at, new_capacity, at
 * [, period, period_anchor, time_zone]): the deficit of the bucket given a
 * new capacity at "at", keeping the tokens it holds then, capped
 * (bucket_reconfigure()).  tb_alter of a template applies it to every
 * bucket made from the template.
 */
Datum
tb_resize(PG_FUNCTION_ARGS)
{
	Bucket		bucket;

	if (!bucket_from_args(fcinfo, 9, &bucket))
		PG_RETURN_NULL();

	bucket_reconfigure(&bucket, PG_GETARG_FLOAT8(4), bucket.refill_rate,
					   PG_GETARG_TIMESTAMPTZ(5));
	PG_RETURN_FLOAT8(bucket.deficit);
}

PG_FUNCTION_INFO_V1(tb_full_at);

/*
 * tb_full_at(capacity, refill_rate, deficit, updated_at [, period,
 * period_anchor, time_zone]): when it is full.
 */
Datum
tb_full_at(PG_FUNCTION_ARGS)
{
	Bucket		bucket;

	if (!bucket_from_args(fcinfo, 7, &bucket))
		PG_RETURN_NULL();

	PG_RETURN_TIMESTAMPTZ(bucket_full_at(&bucket));
}
