/*-------------------------------------------------------------------------
 *
 * clock.c
 *	  The one clock every decision reads (tb_clock_now()), and the clock
 *	  the tests control: tokenbucket.test_clock.
 *
 * With tokenbucket.test_clock off (the default, and what a production
 * server runs) tb_clock_now() is GetCurrentTimestamp() behind one
 * predictable branch.  With it on (set at server start, the library
 * preloaded), "now" is a moment kept in shared memory that only
 * tb_test_clock_set() and tb_test_clock_advance() move: a test makes a
 * schedule cross a refill or a period start when it says so, and nothing
 * else moves time.  The moment starts at the server's start.  The SQL
 * functions are revoked from PUBLIC, and raise 55000 unless the setting
 * is on (test_clock.c).  Waits still sleep and time out on the real
 * clock (see wait.c).
 *
 * src/clock.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "common.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "shmem.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

bool		tb_test_clock = false;
static pg_atomic_uint64 *tb_test_clock_shared = NULL;

/* SharedArea size: one moment. */
static Size
clock_shmem_size(void)
{
	return sizeof(pg_atomic_uint64);
}

/* SharedArea attach: the moment, made at the server's start. */
static void
clock_attach(LWLockPadded *locks)
{
	bool		found;

	tb_test_clock_shared = shmem_struct("tokenbucket test clock",
										clock_shmem_size(), &found);
	if (!found)
		pg_atomic_init_u64(tb_test_clock_shared, (uint64) GetCurrentTimestamp());
}

static const SharedArea clock_area = {
	.name = "tokenbucket test clock",
	.size = clock_shmem_size,
	.attach = clock_attach,
};

/*
 * The test clock's moment, read when the setting is on (out of line, so
 * that tb_clock_now() stays one branch and a call).  Without the library
 * preloaded there is no shared moment: the real clock.
 */
TimestampTz
tb_test_clock_read(void)
{
	if (tb_test_clock_shared == NULL)
		return GetCurrentTimestamp();
	return (TimestampTz) pg_atomic_read_u64(tb_test_clock_shared);
}

/* Whether the test clock can be moved: the setting on, the library preloaded. */
bool
tb_test_clock_usable(void)
{
	return tb_test_clock && tb_test_clock_shared != NULL;
}

/* Set the test clock to "at" (tb_test_clock_usable() first). */
void
tb_test_clock_write(TimestampTz at)
{
	pg_atomic_write_u64(tb_test_clock_shared, (uint64) at);
}

/* Move the test clock on by "usecs" (back when negative); the new moment. */
TimestampTz
tb_test_clock_add(int64 usecs)
{
	uint64		was = pg_atomic_read_u64(tb_test_clock_shared);
	TimestampTz at;

	do
		at = (TimestampTz) was + usecs;
	while (!pg_atomic_compare_exchange_u64(tb_test_clock_shared, &was, (uint64) at));
	return at;
}

/* The setting, and its shared moment when preloading (from _PG_init). */
void
clock_init(void)
{
	/* a setting of the server's start: PostgreSQL 17 refuses it later */
	if (!process_shared_preload_libraries_in_progress)
		return;
	DefineCustomBoolVariable("tokenbucket.test_clock",
							 "For tests only: every decision reads a clock that tb_test_clock_set() moves.",
							 "Never on in production: time stands still unless a superuser moves it.",
							 &tb_test_clock,
							 false,
							 PGC_POSTMASTER, 0,
							 NULL, NULL, NULL);
	shmem_register(&clock_area);
}
