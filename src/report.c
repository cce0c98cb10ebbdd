/*-------------------------------------------------------------------------
 *
 * report.c
 *	  The rows tb_try, tb_peek and tb_try_all answer with: a decision, the
 *	  tokens left, and the waits until a bucket grants and until it is
 *	  full; for a call up a chain of parents, the level that refused.
 *
 * src/report.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "funcapi.h"
#include "hierarchy.h"
#include "report.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/*
 * Microseconds from "from" to "to": zero when "to" is earlier, at most
 * BUCKET_MAX_WAIT_USECS (a pause until infinity included).
 */
static int64
usecs_between(TimestampTz from, TimestampTz to)
{
	if (to <= from)
		return 0;
	if (to == DT_NOEND || (double) to - (double) from >= (double) BUCKET_MAX_WAIT_USECS)
		return BUCKET_MAX_WAIT_USECS;
	return to - from;
}

/* usecs_between() as an interval. */
static Interval *
interval_between(TimestampTz from, TimestampTz to)
{
	Interval   *result = palloc0(sizeof(Interval));

	result->time = usecs_between(from, to);
	return result;
}

/*
 * Fill a (granted, remaining, retry_after, reset_after,
 * retry_after_seconds, reset_after_seconds) row for a request: the waits
 * as intervals for SQL, and as seconds for clients, whose drivers map
 * intervals each their own way.
 */
void
report_values(const Request *request, bool granted, TimestampTz now,
			  Datum *values)
{
	const Bucket *bucket = &request->bucket;
	TimestampTz ready = granted ? now :
		bucket_ready_at(bucket, request->cost, request->reserve, now);
	TimestampTz full = bucket_full_at(bucket);

	values[0] = BoolGetDatum(granted);
	values[1] = Float8GetDatum(bucket_tokens_at(bucket, now));
	values[2] = IntervalPGetDatum(interval_between(now, ready));
	values[3] = IntervalPGetDatum(interval_between(now, full));
	values[4] = Float8GetDatum((double) usecs_between(now, ready) / USECS_PER_SEC);
	values[5] = Float8GetDatum((double) usecs_between(now, full) / USECS_PER_SEC);
}

/*
 * tb_try's and tb_peek's row for a call on a bucket and its parents, as a
 * composite Datum: report_values() of the level hierarchy_reported()
 * picks (the one that refused, whose wait is the whole chain's, or the
 * tightest), and denied_by, that level's name when refused, else NULL.
 */
Datum
report_datum(FunctionCallInfo fcinfo, const Request *requests, int nrequests,
			 bool granted, TimestampTz now)
{
	TupleDesc	desc;
	Datum		values[REPORT_COLUMNS + 1];
	bool		nulls[REPORT_COLUMNS + 1] = {0};
	int			level = nrequests == 1 ? 0 :
		hierarchy_reported(requests, nrequests, granted, now);

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	report_values(&requests[level], granted, now, values);
	values[REPORT_COLUMNS] = PointerGetDatum(requests[level].name);
	nulls[REPORT_COLUMNS] = granted;
	return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls));
}
