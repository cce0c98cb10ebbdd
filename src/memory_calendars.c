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
 * A calendar is never freed: the table holds every different calendar
 * (period, period_anchor and time_zone) a memory bucket had since the
 * server started, and a restart keeps only those the saved buckets have.
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

#include "memory_entries.h"
#include "port/atomics.h"
#include "storage/spin.h"

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
 * shared), added if it is new; NULL for NULL, and when the table is full.
 */
const BucketPeriod *
memory_calendar(const BucketPeriod *period)
{
	const BucketPeriod *calendars = shared_calendars->calendars;
	const BucketPeriod *found;
	uint32		seen;
	uint32		count;

	if (period == NULL ||
		(period >= calendars && period < calendars + MEMORY_CALENDARS))
		return period;
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
