/*-------------------------------------------------------------------------
 *
 * test_clock.c
 *	  The SQL functions that move the clock the tests control:
 *	  tb_test_clock_set() and tb_test_clock_advance().
 *
 * Entry points over clock.c, which keeps the moment and which every
 * decision reads: they work only on a server started with
 * tokenbucket.test_clock on (55000 otherwise), and are revoked from
 * PUBLIC by the install script.
 *
 * src/test_clock.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "common.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(tb_test_clock_set);
PG_FUNCTION_INFO_V1(tb_test_clock_advance);

/* The SQL functions work only on a server started with the setting on. */
static void
check_test_clock(const char *function)
{
	if (!tb_test_clock_usable())
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
	tb_test_clock_write(at);
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

	check_not_null(fcinfo, &args);
	check_test_clock("tb_test_clock_advance");
	if (!interval_usecs(PG_GETARG_INTERVAL_P(0), &usecs) ||
		fabs(usecs) > (double) USECS_PER_DAY * 365 * 1000)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the test clock moves by a finite interval of at most 1000 years")));
	PG_RETURN_TIMESTAMPTZ(tb_test_clock_add((int64) usecs));
}
