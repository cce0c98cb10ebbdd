/*-------------------------------------------------------------------------
 *
 * raw_timestamptz.c
 *	  Test support only: a timestamptz from any int64, unchecked.
 *
 * tokenbucket 1.1 could store a pause past the last timestamptz PostgreSQL
 * prints (294276 AD), a value no SQL expression can produce.
 * test/t/003_repair.pl builds this into a temporary library to put such a
 * value in a 1.1 table, and checks that updating to 1.2 repairs it.
 *
 * test/t/raw_timestamptz.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/timestamp.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(raw_timestamptz);

/* raw_timestamptz(microseconds since 2000): that timestamptz, unchecked. */
Datum
raw_timestamptz(PG_FUNCTION_ARGS)
{
	PG_RETURN_TIMESTAMPTZ((TimestampTz) PG_GETARG_INT64(0));
}
