/*-------------------------------------------------------------------------
 *
 * quota.c
 *	  tb_create_quota(): a bucket whose budget comes back at each start of
 *	  a calendar period (a period bucket, bucket.h), in either store;
 *	  tb_ensure_quota(): the same quota, made or brought to its settings.
 *
 * A quota is an ordinary row of tb_buckets with a period: capacity is the
 * budget plus what may be carried over, refill_rate the budget each
 * period's start adds.  Every other function takes, gives, settles, waits
 * on and shows it as any bucket; only its making differs from tb_create's,
 * so it has its own entry point and its own INSERT (which the table's
 * triggers check, and which hands a memory quota to the memory store).
 * tb_ensure_quota makes it through tb_ensure's machinery
 * (router_ensure()), then compares and changes what differs.
 *
 * src/quota.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "bucket_config.h"
#include "common.h"
#include "pgtime.h"
#include "router.h"
#include "store.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"

/* Fail unless "value" is finite and above zero (or, "positive" false, 0 or more). */
static void
check_amount(const char *what, double value, bool positive)
{
	if (isnan(value) || isinf(value) || (positive ? value <= 0 : value < 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a finite number %s, not %g",
						what, positive ? "above zero" : "of zero or more", value),
				 errhint("A quota holds budget tokens each period, and at most carry_max more carried over from earlier ones.")));
}

/*
 * The default anchor of "period" at "now" in time zone "zone": the start of
 * the current local month (a period of months), day (of days) or hour (a
 * duration).
 */
static Timestamp
default_anchor(const Interval *period, const char *zone, TimestampTz now)
{
	pg_tz	   *tz = pg_tzset(zone);
	struct pg_tm tm;
	fsec_t		fsec;
	int			offset;
	Timestamp	anchor;

	if (tz == NULL || timestamp2tm(now, &offset, &tm, &fsec, NULL, tz) != 0)
		elog(ERROR, "the local time of now was not found");
	if (period->month != 0)
		tm.tm_mday = 1;
	if (period->month != 0 || period->day != 0)
		tm.tm_hour = 0;
	tm.tm_min = 0;
	tm.tm_sec = 0;
	if (tm2timestamp(&tm, 0, NULL, &anchor) != 0)
		elog(ERROR, "the anchor of a period was out of range");
	return anchor;
}

/*
 * The name, the new quota and its store from the arguments of
 * tb_create_quota and tb_ensure_quota (name, budget, period, time_zone,
 * starts, carry_max, memory), checked: holding "budget" tokens now and
 * gaining "budget" at each period's start, up to budget + carry_max; a
 * NULL starts: default_anchor().
 */
static text *
quota_from_args(FunctionCallInfo fcinfo, const char *function, Bucket *quota,
				bool *memory)
{
	const ArgsSpec args = {function, ARG_MAY_BE_NULL(4),
	{"name", "budget", "period", "time_zone", "starts", "carry_max", "memory"}};
	text	   *name;
	text	   *zone;
	char	   *zone_name;
	double		budget;
	double		carry_max;
	TimestampTz now = tb_clock_now();
	BucketPeriod period;

	check_not_null(fcinfo, &args);
	name = PG_GETARG_TEXT_PP(0);
	if (VARSIZE_ANY_EXHDR(name) == 0 || VARSIZE_ANY_EXHDR(name) > 1024)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("token bucket name must be 1 to %d bytes long, not %zu",
						1024, VARSIZE_ANY_EXHDR(name))));
	budget = PG_GETARG_FLOAT8(1);
	zone = PG_GETARG_TEXT_PP(3);
	zone_name = text_to_cstring(zone);
	carry_max = PG_GETARG_FLOAT8(5);
	*memory = PG_GETARG_BOOL(6);
	check_amount("budget", budget, true);
	check_amount("carry_max", carry_max, false);
	check_amount("budget + carry_max", budget + carry_max, true);
	period_set(&period, PG_GETARG_INTERVAL_P(2),
			   PG_ARGISNULL(4) ?
			   (pg_tzset(zone_name) ?
				default_anchor(PG_GETARG_INTERVAL_P(2), zone_name, now) : 0) :
			   PG_GETARG_TIMESTAMP(4),
			   VARDATA_ANY(zone), VARSIZE_ANY_EXHDR(zone),
			   ERRCODE_INVALID_PARAMETER_VALUE);
	memset(quota, 0, sizeof(Bucket));
	quota->period = period_intern(&period);
	quota->capacity = budget + carry_max;
	quota->refill_rate = budget;
	quota->deficit = bucket_initial_deficit(quota);
	quota->updated_at = now;
	quota->paused_until = DT_NOBEGIN;
	return name;
}

PG_FUNCTION_INFO_V1(tb_create_quota);

/*
 * tb_create_quota(name, budget, period, time_zone, starts, carry_max,
 * memory): a new period bucket (a template when "name" ends in '*') that
 * holds "budget" tokens now and gains "budget" at each period's start, up
 * to budget + carry_max.
 */
Datum
tb_create_quota(PG_FUNCTION_ARGS)
{
	Installation inst = installation_of(fcinfo);
	text	   *name;
	bool		memory;
	Bucket		quota;
	SpiSession	session;
	bool		created;

	name = quota_from_args(fcinfo, "tb_create_quota", &quota, &memory);
	session = spi_begin(&inst, true);
	if (memory)
		memory_store.check_make(VARSIZE_ANY_EXHDR(name) -
								(is_template_name(name) ? 1 : 0));
	created = bucket_config_insert_state(installation_table(&inst), name, &quota,
										 memory);
	spi_end(&session);
	if (!created)
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("token bucket \"%s\" already exists", text_to_cstring(name)),
				 errhint("Change its budget with tb_alter(), or remove it with tb_drop().")));
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(tb_ensure_quota);

/*
 * tb_ensure_quota(name, budget, period, time_zone, starts, carry_max,
 * memory): tb_create_quota's quota, made when missing ('created'), given
 * these settings when it has others ('changed'), or left as it is
 * ('unchanged'): a set-up that a deploy can run again.  A NULL starts
 * keeps the quota's own anchor when its period is the same.  A new budget
 * or carry keeps the tokens held, capped, as tb_alter does; a new
 * calendar counts from now on, the tokens kept (a memory quota's is
 * refused, as an UPDATE of it is).  A continuous bucket of that name is
 * refused: whether a bucket refills by a calendar is chosen when it is
 * made, as where its tokens live is (0A000, as tb_ensure refuses that).
 */
Datum
tb_ensure_quota(PG_FUNCTION_ARGS)
{
	Installation inst = installation_of(fcinfo);
	text	   *name;
	bool		memory;
	Bucket		quota;
	BucketConfig found;
	BucketPeriod calendar;
	const BucketPeriod *had;
	bool		new_calendar;
	bool		new_budget;

	name = quota_from_args(fcinfo, "tb_ensure_quota", &quota, &memory);
	if (router_ensure(&inst, name, &quota, memory, &found))
		PG_RETURN_TEXT_P(ensure_result_text(ENSURE_CREATED));
	had = found.bucket.period;
	if (had == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("token bucket \"%s\" is not a quota", text_to_cstring(name)),
				 errdetail("It refills continuously; whether a bucket refills by a calendar is chosen when it is made."),
				 errhint("Drop it with tb_drop() and ensure it again, or ensure it with tb_ensure().")));
	calendar = *quota.period;
	if (PG_ARGISNULL(4) && calendar.months == had->months &&
		calendar.days == had->days && calendar.usecs == had->usecs)
		calendar.anchor = had->anchor;
	new_calendar = memcmp(&calendar, had, sizeof(BucketPeriod)) != 0;
	new_budget = found.bucket.capacity != quota.capacity ||
		found.bucket.refill_rate != quota.refill_rate;
	if (new_calendar)
	{
		SpiSession	session = spi_begin(&inst, true);

		bucket_config_set_period(installation_table(&inst), name, &calendar,
								 tb_clock_now());
		spi_end(&session);
	}
	if (new_budget)
		router_alter(&inst, name, quota.capacity, quota.refill_rate);
	PG_RETURN_TEXT_P(ensure_result_text(new_calendar || new_budget ?
										ENSURE_CHANGED : ENSURE_UNCHANGED));
}
