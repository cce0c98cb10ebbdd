/*-------------------------------------------------------------------------
 *
 * period.c
 *	  The calendar of period buckets (quotas): when each period starts, in
 *	  a time zone, by PostgreSQL's own arithmetic.
 *
 * Period n starts at the local time anchor + n months (as timestamp +
 * interval adds them: the anchor's day of month, clamped to a shorter
 * month's last day), anchor + n days (local days: 23 or 25 hours across a
 * daylight-saving change), or anchor + n x a fixed duration; a local time
 * becomes a moment as "timestamp AT TIME ZONE zone" makes it (a time in a
 * gap included).  Counting from the anchor itself, not from the last
 * period, keeps the 31st the 31st after February.
 *
 * bucket_deficit_at() asks how many periods started between two moments
 * on every call; almost always none, both in the period this backend last
 * computed for the same calendar.  So the last period computed is kept
 * ([start, end) of it) and answers that without converting any time.
 * Calendars are interned (bucket.h): the same address is the same
 * calendar, so the check compares addresses first, and the content only
 * when they differ.  This backend's own (a table bucket's, an argument's)
 * are kept here, in a hash of their content (period_intern()); never
 * freed within a transaction, and dropped all at once, at the first
 * interning of a transaction, when more than PERIOD_INTERNED_MAX of them
 * have piled up: no Bucket outlives the transaction it was read in.
 *
 * src/period.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "bucket.h"
#include "common.h"
#include "common/int.h"
#include "fmgr.h"
#include "pgtime.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* An index beyond every period a timestamptz can hold (either way). */
#define PERIOD_INDEX_FAR	(INT64CONST(1) << 60)

/* The period this backend computed last. */
static struct
{
	bool		valid;
	const BucketPeriod *address;	/* an interned calendar with ... */
	BucketPeriod period;		/* ... this content */
	int64		n;
	TimestampTz start;
	TimestampTz end;
}			last;

/* This backend's calendars, beyond which they go at a transaction's start. */
#define PERIOD_INTERNED_MAX	1024

static HTAB *interned = NULL;
static bool interned_may_go = false;	/* a transaction ended since */

/* Whether "period" is the calendar of the period kept. */
static inline bool
last_is(const BucketPeriod *period)
{
	return last.address == period ||
		memcmp(&last.period, period, sizeof(BucketPeriod)) == 0;
}

/* floor(a / b) for b > 0. */
static inline int64
floor_div(int64 a, int64 b)
{
	int64		q = a / b;

	return (a % b != 0 && a < 0) ? q - 1 : q;
}

/*
 * floor((at - anchor) / length) for length > 0, or when at - anchor
 * overflows (a moment near one end of the range, an anchor near the
 * other), an estimate off by one at most: period_index() corrects it.
 */
static int64
estimate_index(int64 at, int64 anchor, int64 length)
{
	int64		diff;

	if (!pg_sub_s64_overflow(at, anchor, &diff))
		return floor_div(diff, length);
	return (int64) floor(((double) at - (double) anchor) / (double) length);
}

/* The time zone of a period (checked when its row was written). */
static pg_tz *
period_zone(const BucketPeriod *period)
{
	pg_tz	   *tz = pg_tzset(period->zone);

	if (tz == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("time zone \"%s\" not recognized", period->zone),
				 errdetail("PostgreSQL's time zone database has no zone of that name."),
				 errhint("Use a name from pg_timezone_names, such as 'Europe/Berlin' or 'UTC' (a period bucket's is its time_zone in tb_buckets).")));
	return tz;
}

/*
 * The moment local time "local" is in "tz", as timestamp AT TIME ZONE
 * computes it; false when out of range.
 */
static bool
local_to_utc(Timestamp local, pg_tz *tz, TimestampTz *result)
{
	struct pg_tm tm;
	fsec_t		fsec;
	int			offset;

	if (timestamp2tm(local, NULL, &tm, &fsec, NULL, NULL) != 0)
		return false;
	offset = DetermineTimeZoneOffset(&tm, tz);
	return tm2timestamp(&tm, fsec, &offset, result) == 0 &&
		IS_VALID_TIMESTAMP(*result);
}

/* The local time in "tz" at moment "at" (timestamptz AT TIME ZONE). */
static bool
utc_to_local(TimestampTz at, pg_tz *tz, struct pg_tm *tm, Timestamp *result)
{
	fsec_t		fsec;
	int			offset;

	return timestamp2tm(at, &offset, tm, &fsec, NULL, tz) == 0 &&
		tm2timestamp(tm, fsec, NULL, result) == 0;
}

/*
 * base + n x length in *result; false when it overflows.  In two halves:
 * n x length alone may not fit when base + n x length does (an anchor
 * near one end of the range, a period near the other).
 */
static bool
add_periods(int64 base, int64 n, int64 length, int64 *result)
{
	int64		half = n / 2;
	int64		a;
	int64		b;

	return !pg_mul_s64_overflow(half, length, &a) &&
		!pg_mul_s64_overflow(n - half, length, &b) &&
		!pg_add_s64_overflow(base, a, result) &&
		!pg_add_s64_overflow(*result, b, result);
}

/* An index's start when it lies beyond what timestamptz holds. */
static inline TimestampTz
saturated(int64 n)
{
	return n < 0 ? DT_NOBEGIN : DT_NOEND;
}

/*
 * The moment period n starts (-infinity and infinity beyond the range of
 * timestamptz); period 0 starts at the anchor.
 */
TimestampTz
period_start(const BucketPeriod *period, int64 n)
{
	pg_tz	   *tz = period_zone(period);
	Timestamp	local = period->anchor;
	TimestampTz result;

	if (period->usecs != 0)
	{
		if (!local_to_utc(period->anchor, tz, &result) ||
			!add_periods(result, n, period->usecs, &result) ||
			!IS_VALID_TIMESTAMP(result))
			return saturated(n);
		return result;
	}
	if (period->days != 0)
	{
		if (!add_periods(local, n, (int64) period->days * USECS_PER_DAY, &local))
			return saturated(n);
	}
	else
	{
		struct pg_tm tm;
		fsec_t		fsec;
		int64		months;

		/* timestamp_pl_interval()'s months, from the anchor */
		if (timestamp2tm(local, NULL, &tm, &fsec, NULL, NULL) != 0 ||
			pg_mul_s64_overflow(n, period->months, &months) ||
			months > (int64) 12 * 300000 || months < (int64) -12 * 300000)
			return saturated(n);
		months += (int64) tm.tm_year * MONTHS_PER_YEAR + tm.tm_mon - 1;
		tm.tm_year = (int) floor_div(months, MONTHS_PER_YEAR);
		tm.tm_mon = (int) (months - (int64) tm.tm_year * MONTHS_PER_YEAR) + 1;
		if (tm.tm_mday > day_tab[isleap(tm.tm_year)][tm.tm_mon - 1])
			tm.tm_mday = day_tab[isleap(tm.tm_year)][tm.tm_mon - 1];
		if (tm2timestamp(&tm, fsec, NULL, &local) != 0)
			return saturated(n);
	}
	if (!local_to_utc(local, tz, &result))
		return saturated(n);
	return result;
}

/*
 * The index of the period "at" falls in: the last n whose start is not
 * after it.  Kept as this backend's last period (with its start and end).
 * "period" is interned (bucket.h): a calendar on the stack, whose address
 * the next could have, would pass for the last one.
 */
int64
period_index(const BucketPeriod *period, TimestampTz at)
{
	int64		n;
	int			steps = 0;

	if (last.valid && last.start <= at && at < last.end && last_is(period))
		return last.n;
	/* beyond the range of timestamptz (a bound of a search): as infinity */
	if (!IS_VALID_TIMESTAMP(at))
		return at < 0 ? -PERIOD_INDEX_FAR : PERIOD_INDEX_FAR;

	if (period->usecs != 0)
	{
		TimestampTz anchor = period_start(period, 0);

		if (TIMESTAMP_NOT_FINITE(anchor))
			return at < 0 ? -PERIOD_INDEX_FAR : PERIOD_INDEX_FAR;
		n = estimate_index(at, anchor, period->usecs);
	}
	else
	{
		struct pg_tm tm;
		struct pg_tm anchor_tm;
		fsec_t		fsec;
		Timestamp	local;

		if (!utc_to_local(at, period_zone(period), &tm, &local) ||
			timestamp2tm(period->anchor, NULL, &anchor_tm, &fsec, NULL, NULL) != 0)
			return at < 0 ? -PERIOD_INDEX_FAR : PERIOD_INDEX_FAR;
		if (period->days != 0)
			n = estimate_index(local, period->anchor, (int64) period->days * USECS_PER_DAY);
		else
			n = floor_div(((int64) tm.tm_year - anchor_tm.tm_year) * MONTHS_PER_YEAR +
						  tm.tm_mon - anchor_tm.tm_mon, period->months);
	}

	/* the estimate is off by a period at most (a clamped day, a DST hour) */
	while (period_start(period, n) > at)
		if (++steps > 4)
			elog(ERROR, "the period of a moment was not found");
		else
			n--;
	while (period_start(period, n + 1) <= at)
		if (++steps > 4)
			elog(ERROR, "the period of a moment was not found");
		else
			n++;

	last.valid = false;
	last.address = period;
	last.period = *period;
	last.n = n;
	last.start = period_start(period, n);
	last.end = period_start(period, n + 1);
	last.valid = true;
	return n;
}

/*
 * How many periods start in (from, to]: what a period bucket refills
 * between two moments.  The common case, both in the period kept, costs a
 * comparison.
 */
int64
period_count(const BucketPeriod *period, TimestampTz from, TimestampTz to)
{
	int64		n;

	if (to <= from)
		return 0;
	if (last.valid && last.start <= from && to < last.end && last_is(period))
		return 0;
	n = period_index(period, from);
	return period_index(period, to) - n;
}

/* An interval as text, for an error message. */
static char *
interval_text(const Interval *interval)
{
	return DatumGetCString(DirectFunctionCall1(interval_out,
											   IntervalPGetDatum(interval)));
}

/*
 * Fill *period from a period's settings, with the checks that cost no
 * lookup: "interval" whole months, whole days, or a duration of at least a
 * second; a finite anchor; a zone name that fits.  A bad one is an error
 * of "errcode".  Whether PostgreSQL knows the zone is period_set()'s to
 * check, or the first computation's.
 */
static void
period_copy(BucketPeriod *period, const Interval *interval, Timestamp anchor,
			const char *zone, int len, int sqlstate)
{
	int			units = (interval->month != 0) + (interval->day != 0) +
		(interval->time != 0);

	memset(period, 0, sizeof(BucketPeriod));
	if (units > 1)
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("period \"%s\" mixes units", interval_text(interval)),
				 errdetail("A period is counted in one unit: each starts at the anchor plus a whole number of periods."),
				 errhint("Give whole months ('1 month', '3 months'), whole days ('1 day', '7 days'), or a duration ('1 hour', '90 minutes').")));
	if (units == 0 || interval->month < 0 || interval->day < 0 || interval->time < 0)
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("period must be above zero, not \"%s\"", interval_text(interval)),
				 errhint("Give whole months ('1 month'), whole days ('1 day'), or a duration ('1 hour').")));
	if (interval->time != 0 && interval->time < USECS_PER_SEC)
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("period must be at least one second, not \"%s\"",
						interval_text(interval)),
				 errhint("Give whole months ('1 month'), whole days ('1 day'), or a duration ('1 hour').")));
	if (TIMESTAMP_NOT_FINITE(anchor))
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("period_anchor must be a finite timestamp"),
				 errhint("Give the local time at which a period starts, such as '2025-01-01 00:00'.")));
	if (len <= 0 || len >= BUCKET_ZONE_BYTES || memchr(zone, '\0', len) != NULL)
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("time zone \"%.*s\" not recognized", len, zone),
				 errdetail("A period bucket's time zone is a name of 1 to %d bytes.",
						   BUCKET_ZONE_BYTES - 1),
				 errhint("Use a name from pg_timezone_names, such as 'Europe/Berlin' or 'UTC'.")));
	memcpy(period->zone, zone, len);
	period->months = interval->month;
	period->days = interval->day;
	period->usecs = interval->time;
	period->anchor = anchor;
}

/*
 * period_copy(), and the zone PostgreSQL's (pg_timezone_names), and the
 * anchor within range: the check of a row's or tb_create_quota()'s period.
 */
void
period_set(BucketPeriod *period, const Interval *interval, Timestamp anchor,
		   const char *zone, int len, int sqlstate)
{
	period_copy(period, interval, anchor, zone, len, sqlstate);
	if (pg_tzset(period->zone) == NULL)
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("time zone \"%s\" not recognized", period->zone),
				 errhint("Use a name from pg_timezone_names, such as 'Europe/Berlin' or 'UTC'.")));
	if (TIMESTAMP_NOT_FINITE(period_start(period, 0)) ||
		TIMESTAMP_NOT_FINITE(period_start(period, 1)))
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("period_anchor is out of range")));
}

/*
 * The period of a helper's arguments from "first" on (period interval,
 * anchor timestamp, zone text), into *period: all zero (a continuous
 * bucket) when the period is NULL; false when only the anchor or zone is.
 */
bool
period_from_args(FunctionCallInfo fcinfo, int first, BucketPeriod *period)
{
	text	   *zone;

	if (PG_ARGISNULL(first))
	{
		memset(period, 0, sizeof(BucketPeriod));
		return true;
	}
	if (PG_ARGISNULL(first + 1) || PG_ARGISNULL(first + 2))
		return false;
	zone = PG_GETARG_TEXT_PP(first + 2);
	period_copy(period, PG_GETARG_INTERVAL_P(first), PG_GETARG_TIMESTAMP(first + 1),
				VARDATA_ANY(zone), VARSIZE_ANY_EXHDR(zone),
				ERRCODE_INVALID_PARAMETER_VALUE);
	return true;
}

PG_FUNCTION_INFO_V1(tb_period_start);

/*
 * tb_period_start(period, period_anchor, time_zone, at [, n]): the start
 * of the period "at" falls in, or of the n-th period after it (-1: the
 * one before).  tb_status's period_start and period_end.
 */
Datum
tb_period_start(PG_FUNCTION_ARGS)
{
	BucketPeriod period;
	const BucketPeriod *interned_period;
	int64		n;

	for (int i = 0; i < PG_NARGS(); i++)
		if (PG_ARGISNULL(i))
			PG_RETURN_NULL();
	(void) period_from_args(fcinfo, 0, &period);
	interned_period = period_intern(&period);
	n = period_index(interned_period, PG_GETARG_TIMESTAMPTZ(3));
	if (PG_NARGS() > 4)
		n += PG_GETARG_INT32(4);
	PG_RETURN_TIMESTAMPTZ(period_start(interned_period, n));
}

/*
 * A period from a row's columns period, period_anchor and time_zone
 * (NULL period: a continuous bucket).
 */
void
period_from_datums(BucketPeriod *period, const Datum *values, const bool *isnull)
{
	text	   *zone;

	if (isnull[0] || isnull[1] || isnull[2])
	{
		memset(period, 0, sizeof(BucketPeriod));
		return;
	}
	zone = DatumGetTextPP(values[2]);
	period_copy(period, DatumGetIntervalP(values[0]), DatumGetTimestamp(values[1]),
				VARDATA_ANY(zone), VARSIZE_ANY_EXHDR(zone), ERRCODE_CHECK_VIOLATION);
}

/*
 * A period as the values of the columns period, period_anchor and
 * time_zone, for SPI ("nulls": 'n' for each NULL, a continuous bucket's:
 * "period" NULL or all zero).
 */
void
period_to_datums(const BucketPeriod *period, Datum *values, char *nulls)
{
	Interval   *interval;

	if (period == NULL ||
		(period->months == 0 && period->days == 0 && period->usecs == 0))
	{
		memset(nulls, 'n', 3);
		memset(values, 0, 3 * sizeof(Datum));
		return;
	}
	interval = palloc0(sizeof(Interval));
	interval->month = period->months;
	interval->day = period->days;
	interval->time = period->usecs;
	values[0] = IntervalPGetDatum(interval);
	values[1] = TimestampGetDatum(period->anchor);
	values[2] = PointerGetDatum(cstring_to_text(period->zone));
	memset(nulls, ' ', 3);
}

/*
 * A transaction's end (xact.c): this backend's calendars may go at the
 * next interning, since no Bucket of the transaction refers to them now.
 */
void
period_xact_end(void)
{
	interned_may_go = true;
}

/*
 * This backend's copy of calendar "period", which a Bucket refers to (NULL
 * for a continuous bucket's, all zero): the same address for the same
 * content until the transaction ends.  The first interning of a
 * transaction drops them all when there are more than PERIOD_INTERNED_MAX
 * (and forgets the period kept, whose address may come back).  A memory
 * bucket's calendar is memory_calendar()'s, in shared memory.
 */
const BucketPeriod *
period_intern(const BucketPeriod *period)
{
	bool		found;

	if (period->months == 0 && period->days == 0 && period->usecs == 0)
		return NULL;
	if (interned != NULL && interned_may_go &&
		hash_get_num_entries(interned) > PERIOD_INTERNED_MAX)
	{
		hash_destroy(interned);
		interned = NULL;
		last.valid = false;
	}
	interned_may_go = false;
	if (interned == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(BucketPeriod);
		ctl.entrysize = sizeof(BucketPeriod);
		ctl.hcxt = TopMemoryContext;
		interned = hash_create("tokenbucket calendars", 16, &ctl,
							   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	return hash_search(interned, period, HASH_ENTER, &found);
}
