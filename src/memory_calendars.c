/*-------------------------------------------------------------------------
 *
 * memory_calendars.c
 *	  The calendars of memory quotas, each kept once in shared memory, for
 *	  the entries that have it to point at.
 *
 * A memory bucket's entry holds a pointer to its calendar (Bucket.period)
 * rather than the calendar itself, so that the buckets that are no quota,
 * nearly all of them, keep the size they had without quotas.  The
 * calendars live in a fixed table of MEMORY_CALENDARS, looked up by
 * content; shared memory has the same address in every backend, so the
 * pointer is good in all of them, as the entries' list pointers are.
 *
 * A calendar is never freed: the table holds every different calendar a
 * memory bucket had since the server started, and a restart keeps only
 * those the saved buckets have.  It holds them in a canonical form
 * (calendar_canonical()): calendars whose periods start at the same
 * moments, whatever their anchors, take one.
 * Nothing ever changes a calendar once added, so readers look without a
 * lock: the count is published after the calendar it counts.  Adding one
 * takes the spinlock.  A full table is an error where a quota's entry is
 * made (tb_create_quota, a template key's first call).
 *
 * src/memory_calendars.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/int.h"
#include "memory_entries.h"
#include "pgtime.h"
#include "port/atomics.h"
#include "storage/spin.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"

typedef struct MemoryCalendars
{
	slock_t		mutex;			/* held to add one */
	pg_atomic_uint32 count;		/* calendars[0..count) are set */
	BucketPeriod calendars[MEMORY_CALENDARS];
} MemoryCalendars;

static MemoryCalendars *shared_calendars = NULL;

/* Shared memory the table needs. */
Size
memory_calendars_size(void)
{
	return MAXALIGN(sizeof(MemoryCalendars));
}

/* SharedArea attach: the table, made empty the first time. */
void
memory_calendars_attach(void)
{
	bool		found;

	shared_calendars = shmem_struct("tokenbucket calendars",
									sizeof(MemoryCalendars), &found);
	if (found)
		return;
	SpinLockInit(&shared_calendars->mutex);
	pg_atomic_init_u32(&shared_calendars->count, 0);
}

/* Most steps of months tried for a month that has the anchor's day. */
#define CANONICAL_MONTH_STEPS	400

/*
 * Into *canonical, a calendar whose periods start at exactly the moments
 * those of "period" do, its anchor moved by whole periods to the first
 * from 2000-01-01 on: months, to the first month from January 2000 of the
 * anchor's phase that has its day of month (the day and time kept: the
 * 31st stays the 31st, and February 29 goes to a leap year); days, the
 * local anchor into [2000-01-01 00:00, + days); a duration, whose periods
 * are moments, the anchor's moment into [2000-01-01 00:00 UTC, + duration),
 * in UTC.  Without it, quotas made at different times (a monthly one in
 * November and one in December, hourly ones each hour) would each take
 * one of the MEMORY_CALENDARS until a restart.  A bucket depends only on
 * the moments its periods start at and on how many start between two
 * moments, never on a period's index, so it answers exactly as before.
 * A calendar that cannot be moved so (a zone not found, out of range) is
 * kept as given.
 */
static void
calendar_canonical(const BucketPeriod *period, BucketPeriod *canonical)
{
	*canonical = *period;
	if (period->usecs != 0)
	{
		TimestampTz moment;

		if (pg_tzset(period->zone) == NULL)
			return;
		moment = period_start(period, 0);
		if (TIMESTAMP_NOT_FINITE(moment))
			return;
		moment %= period->usecs;
		canonical->anchor = moment < 0 ? moment + period->usecs : moment;
		memset(canonical->zone, 0, BUCKET_ZONE_BYTES);
		strcpy(canonical->zone, "UTC");
	}
	else if (period->days != 0)
	{
		int64		step;
		Timestamp	anchor;

		if (pg_mul_s64_overflow(period->days, USECS_PER_DAY, &step))
			return;
		anchor = period->anchor % step;
		canonical->anchor = anchor < 0 ? anchor + step : anchor;
	}
	else if (period->months > 0)
	{
		struct pg_tm tm;
		fsec_t		fsec;
		int64		months;

		if (timestamp2tm(period->anchor, NULL, &tm, &fsec, NULL, NULL) != 0)
			return;
		/* months from January 2000 of the first month of the anchor's phase */
		months = (((int64) tm.tm_year - 2000) * MONTHS_PER_YEAR + tm.tm_mon - 1) %
			period->months;
		if (months < 0)
			months += period->months;
		for (int i = 0; i < CANONICAL_MONTH_STEPS && months < (int64) 12 * 300000;
			 i++, months += period->months)
		{
			struct pg_tm moved = tm;
			Timestamp	anchor;

			moved.tm_year = 2000 + (int) (months / MONTHS_PER_YEAR);
			moved.tm_mon = (int) (months % MONTHS_PER_YEAR) + 1;
			if (moved.tm_mday > day_tab[isleap(moved.tm_year)][moved.tm_mon - 1])
				continue;
			if (tm2timestamp(&moved, fsec, NULL, &anchor) == 0)
				canonical->anchor = anchor;
			return;
		}
	}
}

/* The calendar in calendars[from..to) with the content of "period", or NULL. */
static const BucketPeriod *
find(const BucketPeriod *period, uint32 from, uint32 to)
{
	for (uint32 i = from; i < to; i++)
		if (memcmp(&shared_calendars->calendars[i], period, sizeof(BucketPeriod)) == 0)
			return &shared_calendars->calendars[i];
	return NULL;
}

/*
 * The shared copy of calendar "period" (a backend's, or one already
 * shared), in its canonical form, added if it is new; NULL for NULL, and
 * when the table is full.
 */
const BucketPeriod *
memory_calendar(const BucketPeriod *period)
{
	const BucketPeriod *calendars = shared_calendars->calendars;
	const BucketPeriod *found;
	BucketPeriod canonical;
	uint32		seen;
	uint32		count;

	if (period == NULL ||
		(period >= calendars && period < calendars + MEMORY_CALENDARS))
		return period;
	calendar_canonical(period, &canonical);
	period = &canonical;
	seen = pg_atomic_read_u32(&shared_calendars->count);
	pg_read_barrier();
	found = find(period, 0, seen);
	if (found != NULL)
		return found;

	SpinLockAcquire(&shared_calendars->mutex);
	count = pg_atomic_read_u32(&shared_calendars->count);
	found = find(period, seen, count);
	if (found == NULL && count < MEMORY_CALENDARS)
	{
		shared_calendars->calendars[count] = *period;
		pg_write_barrier();
		pg_atomic_write_u32(&shared_calendars->count, count + 1);
		found = &shared_calendars->calendars[count];
	}
	SpinLockRelease(&shared_calendars->mutex);
	return found;
}

/* How many calendars the table holds, for the error of a full one. */
int
memory_calendars_count(void)
{
	return (int) pg_atomic_read_u32(&shared_calendars->count);
}
