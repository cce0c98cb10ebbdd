/*-------------------------------------------------------------------------
 *
 * tokenbucket.c
 *	  SQL entry points: acquire, try, and the DBA's create/alter/reset/drop.
 *
 * Each entry point reads the clock once, runs one or two statements through
 * SPI on plans prepared once per backend and kept, and leaves the
 * arithmetic to bucket.c.  The acquire path is a single
 *
 *		UPDATE tb_buckets SET deficit = tb_take(...) ...
 *		 WHERE name = $1 AND tb_take(...) IS NOT NULL RETURNING ...
 *
 * so the grant decision is made on the row version the UPDATE locks (READ
 * COMMITTED re-checks it on the newest version after waiting), a grant is
 * one new row version, and a denial matches no row and writes nothing.
 * Only a denial reads the row a second time, to tell "empty" from "no such
 * bucket" and to report when to retry.
 *
 * The functions are SECURITY DEFINER with search_path = pg_catalog,
 * pg_temp, and every name in the queries below is schema-qualified, so a
 * caller's own objects are never resolved with the owner's rights.
 *
 * src/tokenbucket.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <float.h>
#include <math.h>

#include "bucket.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "access/htup_details.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

PG_MODULE_MAGIC;

/* Longest name: well inside what a btree index entry may hold. */
#define BUCKET_NAME_MAX_BYTES 1024

/* The statements the entry points run; %1$s is the extension's schema. */
typedef enum PlanId
{
	PLAN_TAKE,
	PLAN_READ,
	PLAN_LOCK,
	PLAN_STORE,
	PLAN_RESET,
	PLAN_INSERT,
	PLAN_DELETE,
	NUM_PLANS
} PlanId;

#define BUCKET_COLUMNS "capacity, refill_rate, deficit, updated_at"

typedef struct PlanDef
{
	const char *sql;
	int			nargs;
	Oid			argtypes[5];
} PlanDef;

static const PlanDef plan_defs[NUM_PLANS] = {
	[PLAN_TAKE] = {
		"UPDATE %1$s.tb_buckets AS b"
		" SET deficit = %1$s.tb_take(b.capacity, b.refill_rate, b.deficit, b.updated_at, $2, $3),"
		" updated_at = GREATEST(b.updated_at, $3)"
		" WHERE b.name OPERATOR(pg_catalog.=) $1"
		" AND %1$s.tb_take(b.capacity, b.refill_rate, b.deficit, b.updated_at, $2, $3) IS NOT NULL"
		" RETURNING b.capacity, b.refill_rate, b.deficit, b.updated_at",
		3, {TEXTOID, FLOAT8OID, TIMESTAMPTZOID}
	},
	[PLAN_READ] = {
		"SELECT " BUCKET_COLUMNS " FROM %1$s.tb_buckets"
		" WHERE name OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID}
	},
	[PLAN_LOCK] = {
		"SELECT " BUCKET_COLUMNS " FROM %1$s.tb_buckets"
		" WHERE name OPERATOR(pg_catalog.=) $1 FOR UPDATE",
		1, {TEXTOID}
	},
	[PLAN_STORE] = {
		"UPDATE %1$s.tb_buckets"
		" SET capacity = $2, refill_rate = $3, deficit = $4, updated_at = $5"
		" WHERE name OPERATOR(pg_catalog.=) $1",
		5, {TEXTOID, FLOAT8OID, FLOAT8OID, FLOAT8OID, TIMESTAMPTZOID}
	},
	[PLAN_RESET] = {
		"UPDATE %1$s.tb_buckets"
		" SET deficit = 0, updated_at = GREATEST(updated_at, $2)"
		" WHERE name OPERATOR(pg_catalog.=) $1",
		2, {TEXTOID, TIMESTAMPTZOID}
	},
	[PLAN_INSERT] = {
		"INSERT INTO %1$s.tb_buckets (name, " BUCKET_COLUMNS ")"
		" VALUES ($1, $2, $3, 0, $4) ON CONFLICT (name) DO NOTHING",
		4, {TEXTOID, FLOAT8OID, FLOAT8OID, TIMESTAMPTZOID}
	},
	[PLAN_DELETE] = {
		"DELETE FROM %1$s.tb_buckets WHERE name OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID}
	},
};

/* Kept plans, and the schema they were prepared for. */
static SPIPlanPtr plans[NUM_PLANS];
static Oid	plans_schema = InvalidOid;

/* The outcome of one acquire, for tb_acquire and tb_try to report. */
typedef struct Decision
{
	bool		granted;
	Bucket		bucket;			/* state after the decision */
	TimestampTz now;			/* the moment it was made */
} Decision;

/*
 * The kept plan for "id", prepared on first use.  The schema is that of the
 * calling function, so that a DROP EXTENSION and CREATE EXTENSION in
 * another schema within one backend gets fresh plans.  Call inside SPI.
 */
static SPIPlanPtr
get_plan(PlanId id, FunctionCallInfo fcinfo)
{
	Oid			schema = get_func_namespace(fcinfo->flinfo->fn_oid);

	if (schema != plans_schema)
	{
		for (int i = 0; i < NUM_PLANS; i++)
		{
			if (plans[i] != NULL)
				SPI_freeplan(plans[i]);
			plans[i] = NULL;
		}
		plans_schema = schema;
	}

	if (plans[id] == NULL)
	{
		const PlanDef *def = &plan_defs[id];
		char	   *nspname = get_namespace_name(schema);
		char	   *sql;
		SPIPlanPtr	plan;

		if (nspname == NULL)
			elog(ERROR, "cache lookup failed for namespace %u", schema);
		sql = psprintf(def->sql, quote_identifier(nspname));
		plan = SPI_prepare(sql, def->nargs, (Oid *) def->argtypes);
		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s",
				 sql, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed");
		plans[id] = plan;
	}
	return plans[id];
}

/* Connect to SPI, or fail loudly. */
static void
connect_spi(void)
{
	int			rc = SPI_connect();

	if (rc != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed: %s", SPI_result_code_string(rc));
}

/* Disconnect from SPI, or fail loudly. */
static void
finish_spi(void)
{
	int			rc = SPI_finish();

	if (rc != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed: %s", SPI_result_code_string(rc));
}

/* Run a kept plan with the given arguments, none NULL; returns rows processed. */
static uint64
run_plan(PlanId id, FunctionCallInfo fcinfo, Datum *args)
{
	int			rc = SPI_execute_plan(get_plan(id, fcinfo), args, NULL, false, 0);

	if (rc < 0)
		elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
	return SPI_processed;
}

/* Copy the bucket state out of the first row SPI returned. */
static void
read_bucket(Bucket *bucket)
{
	HeapTuple	tuple = SPI_tuptable->vals[0];
	TupleDesc	desc = SPI_tuptable->tupdesc;
	bool		isnull;

	bucket->capacity = DatumGetFloat8(SPI_getbinval(tuple, desc, 1, &isnull));
	bucket->refill_rate = DatumGetFloat8(SPI_getbinval(tuple, desc, 2, &isnull));
	bucket->deficit = DatumGetFloat8(SPI_getbinval(tuple, desc, 3, &isnull));
	bucket->updated_at = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 4, &isnull));
}

/* The error for a bucket that does not exist. */
static void
report_missing(text *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("token bucket \"%s\" does not exist", text_to_cstring(name)),
			 errhint("Create it first with tb_create(name, capacity, refill).")));
}

/* Reject a number that is NaN, infinite, or (when positive) not above zero. */
static void
check_number(const char *what, double value, bool positive)
{
	if (isnan(value) || isinf(value) || (positive ? value <= 0 : value < 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a finite number %s, not %g",
						what, positive ? "above zero" : "of zero or more", value)));
}

/*
 * Tokens per second from "refill" tokens every "per".  Months count as 30
 * days, as in EXTRACT(EPOCH FROM interval).
 */
static double
refill_rate_from(double refill, Interval *per)
{
	double		seconds;
	double		rate;

	check_number("refill", refill, true);
#ifdef INTERVAL_NOT_FINITE
	if (INTERVAL_NOT_FINITE(per))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("per must be a finite interval")));
#endif
	seconds = (double) per->time / USECS_PER_SEC +
		((double) per->month * DAYS_PER_MONTH + per->day) * SECS_PER_DAY;
	if (seconds <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("per must be an interval above zero"),
				 errdetail("The bucket gains refill tokens every per; per was %g seconds.",
						   seconds)));

	/* a rate below DBL_MIN has lost precision; one above DBL_MAX is infinite */
	rate = refill / seconds;
	if (!(rate >= DBL_MIN && rate <= DBL_MAX))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("refill rate out of range"),
				 errdetail("%g tokens every %g seconds is not a representable rate.",
						   refill, seconds)));
	return rate;
}

/* Microseconds from "from" to "to" (zero when "to" is earlier) as an interval. */
static Interval *
interval_between(TimestampTz from, TimestampTz to)
{
	Interval   *result = palloc0(sizeof(Interval));

	result->time = to > from ? to - from : 0;
	return result;
}

/*
 * Take "cost" tokens from bucket "name" if it holds them, and describe the
 * outcome.  A grant is one UPDATE; a denial is an UPDATE that matched
 * nothing and a plain read of the row.
 */
static void
acquire(FunctionCallInfo fcinfo, text *name, double cost, Decision *decision)
{
	Datum		args[3];

	check_number("cost", cost, false);
	decision->now = GetCurrentTimestamp();
	args[0] = PointerGetDatum(name);
	args[1] = Float8GetDatum(cost);
	args[2] = TimestampTzGetDatum(decision->now);

	connect_spi();
	decision->granted = run_plan(PLAN_TAKE, fcinfo, args) == 1;
	if (!decision->granted && run_plan(PLAN_READ, fcinfo, args) == 0)
		report_missing(name);
	read_bucket(&decision->bucket);
	finish_spi();

	if (!decision->granted && cost > decision->bucket.capacity)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cost %g exceeds the capacity of token bucket \"%s\"",
						cost, text_to_cstring(name)),
				 errdetail("The bucket holds at most %g tokens, so this request could never be granted.",
						   decision->bucket.capacity),
				 errhint("Raise the capacity with tb_alter(), or split the request.")));
}

PG_FUNCTION_INFO_V1(tb_acquire);

/* tb_acquire(name [, cost]): take cost tokens (default 1) if there. */
Datum
tb_acquire(PG_FUNCTION_ARGS)
{
	Decision	decision;
	double		cost = PG_NARGS() > 1 ? PG_GETARG_FLOAT8(1) : 1.0;

	acquire(fcinfo, PG_GETARG_TEXT_PP(0), cost, &decision);
	PG_RETURN_BOOL(decision.granted);
}

PG_FUNCTION_INFO_V1(tb_try);

/*
 * tb_try(name, cost): the acquire decision, with the tokens left, how long
 * until cost tokens are there (zero when granted) and until full.
 */
Datum
tb_try(PG_FUNCTION_ARGS)
{
	double		cost = PG_GETARG_FLOAT8(1);
	Decision	decision;
	const Bucket *bucket = &decision.bucket;
	TupleDesc	desc;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	acquire(fcinfo, PG_GETARG_TEXT_PP(0), cost, &decision);

	values[0] = BoolGetDatum(decision.granted);
	values[1] = Float8GetDatum(bucket_tokens_at(bucket, decision.now));
	values[2] = IntervalPGetDatum(interval_between(decision.now,
												   decision.granted ? decision.now :
												   bucket_ready_at(bucket, cost, decision.now)));
	values[3] = IntervalPGetDatum(interval_between(decision.now,
												   bucket_full_at(bucket)));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc),
													  values, nulls)));
}

PG_FUNCTION_INFO_V1(tb_create);

/* tb_create(name, capacity, refill, per): a new bucket, full. */
Datum
tb_create(PG_FUNCTION_ARGS)
{
	text	   *name = PG_GETARG_TEXT_PP(0);
	double		capacity = PG_GETARG_FLOAT8(1);
	double		rate;
	Datum		args[4];

	if (VARSIZE_ANY_EXHDR(name) == 0 || VARSIZE_ANY_EXHDR(name) > BUCKET_NAME_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("token bucket name must be 1 to %d bytes long, not %zu",
						BUCKET_NAME_MAX_BYTES, VARSIZE_ANY_EXHDR(name))));
	check_number("capacity", capacity, true);
	rate = refill_rate_from(PG_GETARG_FLOAT8(2), PG_GETARG_INTERVAL_P(3));

	args[0] = PointerGetDatum(name);
	args[1] = Float8GetDatum(capacity);
	args[2] = Float8GetDatum(rate);
	args[3] = TimestampTzGetDatum(GetCurrentTimestamp());

	connect_spi();
	if (run_plan(PLAN_INSERT, fcinfo, args) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("token bucket \"%s\" already exists", text_to_cstring(name)),
				 errhint("Change its settings with tb_alter(), or remove it with tb_drop().")));
	finish_spi();
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(tb_alter);

/*
 * tb_alter(name, capacity, refill, per): change the settings given (NULL
 * keeps one), keeping the tokens the bucket holds, capped at the capacity.
 * refill without per means per second; per without refill is an error.
 */
Datum
tb_alter(PG_FUNCTION_ARGS)
{
	text	   *name;
	Bucket		bucket;
	double		capacity;
	double		rate = 0;
	TimestampTz now;
	Datum		args[5];

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	name = PG_GETARG_TEXT_PP(0);

	if (!PG_ARGISNULL(1))
		check_number("capacity", PG_GETARG_FLOAT8(1), true);
	if (!PG_ARGISNULL(3) && PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("per needs refill"),
				 errdetail("The refill rate is refill tokens every per; per alone does not give it."),
				 errhint("Pass both, as in tb_alter('name', refill => 60, per => '1 minute').")));
	if (!PG_ARGISNULL(2))
	{
		Interval	one_second = {.time = USECS_PER_SEC};

		rate = refill_rate_from(PG_GETARG_FLOAT8(2),
								PG_ARGISNULL(3) ? &one_second : PG_GETARG_INTERVAL_P(3));
	}

	now = GetCurrentTimestamp();
	args[0] = PointerGetDatum(name);

	connect_spi();
	if (PG_ARGISNULL(1) && PG_ARGISNULL(2))
	{
		/* nothing to change: only say whether the bucket exists */
		if (run_plan(PLAN_READ, fcinfo, args) == 0)
			report_missing(name);
		finish_spi();
		PG_RETURN_VOID();
	}
	if (run_plan(PLAN_LOCK, fcinfo, args) == 0)
		report_missing(name);
	read_bucket(&bucket);

	capacity = PG_ARGISNULL(1) ? bucket.capacity : PG_GETARG_FLOAT8(1);
	if (PG_ARGISNULL(2))
		rate = bucket.refill_rate;
	bucket_reconfigure(&bucket, capacity, rate, now);

	args[1] = Float8GetDatum(bucket.capacity);
	args[2] = Float8GetDatum(bucket.refill_rate);
	args[3] = Float8GetDatum(bucket.deficit);
	args[4] = TimestampTzGetDatum(bucket.updated_at);
	run_plan(PLAN_STORE, fcinfo, args);
	finish_spi();
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(tb_reset);

/* tb_reset(name): fill the bucket. */
Datum
tb_reset(PG_FUNCTION_ARGS)
{
	text	   *name = PG_GETARG_TEXT_PP(0);
	Datum		args[2];

	args[0] = PointerGetDatum(name);
	args[1] = TimestampTzGetDatum(GetCurrentTimestamp());

	connect_spi();
	if (run_plan(PLAN_RESET, fcinfo, args) == 0)
		report_missing(name);
	finish_spi();
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(tb_drop);

/* tb_drop(name): remove the bucket; false when there was none. */
Datum
tb_drop(PG_FUNCTION_ARGS)
{
	Datum		args[1];
	bool		dropped;

	args[0] = PointerGetDatum(PG_GETARG_TEXT_PP(0));

	connect_spi();
	dropped = run_plan(PLAN_DELETE, fcinfo, args) > 0;
	finish_spi();
	PG_RETURN_BOOL(dropped);
}
