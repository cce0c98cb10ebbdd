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
 * is on.  Waits still sleep and time out on the real clock (see wait.c).
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

PG_FUNCTION_INFO_V1(tb_test_clock_set);
PG_FUNCTION_INFO_V1(tb_test_clock_advance);

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

/* The SQL functions work only on a server started with the setting on. */
static void
check_test_clock(const char *function)
{
	if (!tb_test_clock || tb_test_clock_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s needs the test clock", function),
				 errdetail("The test clock is for tests only: it replaces the time of every decision the extension makes."),
				 errhint("Start a test server with tokenbucket.test_clock = on and the library in shared_preload_libraries.")));
}

/* tb_test_clock_set(at timestamptz) returns timestamptz: the clock is "at". */
Datum
tb_test_clock_set(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_test_clock_set", 0, {"at"}};
	TimestampTz at;

	check_not_null(fcinfo, &args);
	check_test_clock("tb_test_clock_set");
	at = PG_GETARG_TIMESTAMPTZ(0);
	if (TIMESTAMP_NOT_FINITE(at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the test clock must be set to a finite moment")));
	pg_atomic_write_u64(tb_test_clock_shared, (uint64) at);
	PG_RETURN_TIMESTAMPTZ(at);
}

/*
 * tb_test_clock_advance(by interval) returns timestamptz: the clock moves
 * on by "by" (microseconds of it; a negative one moves it back).
 */
Datum
tb_test_clock_advance(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_test_clock_advance", 0, {"by"}};
	double		usecs;
	uint64		was;
	TimestampTz at;

	check_not_null(fcinfo, &args);
	check_test_clock("tb_test_clock_advance");
	if (!interval_usecs(PG_GETARG_INTERVAL_P(0), &usecs) ||
		fabs(usecs) > (double) USECS_PER_DAY * 365 * 1000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the test clock moves by a finite interval of at most 1000 years")));
	was = pg_atomic_read_u64(tb_test_clock_shared);
	do
		at = (TimestampTz) was + (int64) usecs;
	while (!pg_atomic_compare_exchange_u64(tb_test_clock_shared, &was, (uint64) at));
	PG_RETURN_TIMESTAMPTZ(at);
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
