/*-------------------------------------------------------------------------
 *
 * tokenbucket.c
 *	  SQL entry points: checking arguments, and reporting decisions.
 *
 * Each entry point checks its arguments, reads the clock once, adds the
 * parents of each bucket (hierarchy.c), and hands the buckets to the
 * router (router.c), which finds the store that holds each and counts
 * what it did; the waiting to wait.c; the rows of a report to report.c.
 * The functions run as their caller: the table work switches to the
 * extension's owner around itself (spi_session.c).
 *
 * src/tokenbucket.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <float.h>
#include <math.h>

#include "access/htup_details.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "bucket_config.h"
#include "common.h"
#include "held.h"
#include "hierarchy.h"
#include "lease.h"
#include "limit_router.h"
#include "shard_call.h"
#include "report.h"
#include "router.h"
#include "wait.h"
#include "xact.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

/*
 * 15 is the oldest release built and tested (make test-versions: 15, 17 and
 * 18); older ones lack shmem_request_hook and GetWALInsertionTimeLine().
 */
#if PG_VERSION_NUM < 150000
#error "tokenbucket needs PostgreSQL 15 or later"
#endif

PG_MODULE_MAGIC;

void		_PG_init(void);

static object_access_hook_type prev_object_access_hook = NULL;

/*
 * object_access_hook for a DROP: the hook before sees it first; then, if
 * it is an installation's table or a database, what the stores, the
 * counters and the memory leases keep of it goes when the dropping
 * transaction commits.
 */
static pg_noinline void
object_dropped(Oid classId, Oid objectId, int subId, void *arg)
{
	Oid			dbid;
	Oid			relid;

	if (prev_object_access_hook)
		prev_object_access_hook(OAT_DROP, classId, objectId, subId, arg);
	if (!installation_dropped(OAT_DROP, classId, objectId, subId, &dbid, &relid))
		return;
	router_forget_installation(dbid, relid);
	limit_router_forget(dbid, relid);
}

/*
 * object_access_hook.  The server calls it for every function a statement
 * runs, in every database: anything but a DROP goes straight on to the
 * hook before (both branches are tail calls, with nothing to keep).
 */
static void
object_accessed(ObjectAccessType access, Oid classId, Oid objectId, int subId,
				void *arg)
{
	if (access == OAT_DROP)
		object_dropped(classId, objectId, subId, arg);
	else if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
}

/*
 * Module load: counters, memory buckets and memory limits, when the
 * library is preloaded; the hook that forgets a dropped installation's.
 */
void
_PG_init(void)
{
	clock_init();
	router_init();
	limit_router_init();
	xact_init();
	held_init();
	shard_call_init();
	prev_object_access_hook = object_access_hook;
	object_access_hook = object_accessed;
	/* every setting is defined: any other tokenbucket.* is a typo */
	if (process_shared_preload_libraries_in_progress)
		MarkGUCPrefixReserved("tokenbucket");
}

/*
 * Most names one call may take from: far below what one allocation of
 * requests may hold, and enough for any request a client makes.
 */
#define MAX_NAMES_PER_CALL 1000000

/*
 * Reject a number that is NaN, infinite, or (when positive) not above zero,
 * with "sqlstate": 22023 for an argument, 23514 for a row of tb_buckets.
 */
static void
check_number_as(const char *what, double value, bool positive, int sqlstate)
{
	if (isnan(value) || isinf(value) || (positive ? value <= 0 : value < 0))
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("%s must be a finite number %s, not %g",
						what, positive ? "above zero" : "of zero or more", value)));
}

/* check_number_as() for an argument. */
static void
check_number(const char *what, double value, bool positive)
{
	check_number_as(what, value, positive, ERRCODE_INVALID_PARAMETER_VALUE);
}

/* Reject a bucket name that is empty or too long. */
static void
check_name(text *name, int sqlstate)
{
	if (VARSIZE_ANY_EXHDR(name) == 0 || VARSIZE_ANY_EXHDR(name) > BUCKET_NAME_MAX_BYTES)
		ereport(ERROR,
				(errcode(sqlstate),
				 errmsg("token bucket name must be 1 to %d bytes long, not %zu",
						BUCKET_NAME_MAX_BYTES, VARSIZE_ANY_EXHDR(name))));
}

/*
 * Reject a name that cannot be a bucket's: empty, too long, or a
 * template's.  A template only makes buckets; spending from it, giving to
 * it or pausing it would do nothing any caller meant.
 */
static void
check_bucket_name(text *name)
{
	check_name(name, ERRCODE_INVALID_PARAMETER_VALUE);
	if (is_template_name(name))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("token bucket name \"%s\" is a template, not a bucket",
						text_to_cstring(name)),
				 errdetail("A name ending in * is a template: it makes a bucket for each name that starts with its prefix."),
				 errhint("Name a bucket after the prefix, as in 'user:42' for 'user:*', and never let a key from user input end in *.")));
}

PG_FUNCTION_INFO_V1(tb_check_bucket);

/*
 * tb_check_bucket(name, capacity, refill_rate, deficit, updated_at): the
 * CHECK constraint of tb_buckets.  One function call is far cheaper for
 * every UPDATE to parse and run than the equivalent SQL expressions, and
 * it says which column is wrong.  True, or an error (23514).
 */
Datum
tb_check_bucket(PG_FUNCTION_ARGS)
{
	check_name(PG_GETARG_TEXT_PP(0), ERRCODE_CHECK_VIOLATION);
	check_number_as("capacity", PG_GETARG_FLOAT8(1), true, ERRCODE_CHECK_VIOLATION);
	check_number_as("refill_rate", PG_GETARG_FLOAT8(2), true, ERRCODE_CHECK_VIOLATION);
	check_number_as("deficit", PG_GETARG_FLOAT8(3), false, ERRCODE_CHECK_VIOLATION);
	if (TIMESTAMP_NOT_FINITE(PG_GETARG_TIMESTAMPTZ(4)))
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("updated_at must be a finite timestamp")));
	PG_RETURN_BOOL(true);
}

/* Tokens per second from "refill" tokens every "per". */
static double
refill_rate_from(double refill, Interval *per)
{
	double		usecs;
	double		seconds;
	double		rate;

	check_number("refill", refill, true);
	if (!interval_usecs(per, &usecs))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("per must be a finite interval")));
	seconds = usecs / USECS_PER_SEC;
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

/*
 * "now" plus "usecs", saturating at -infinity and infinity: never a value
 * past the last timestamptz (which pg_dump could write but not restore).
 */
static TimestampTz
timestamp_after(TimestampTz now, double usecs)
{
	return timestamp_saturate((double) now + usecs);
}

/*
 * Requests from a names array and an optional costs array (NULL: 1 each),
 * each with "reserve", and their parents' (hierarchy_expand()), sorted by
 * name; each remembers its position in the arrays (a parent's after).
 */
static Request *
requests_from_arrays(Installation *inst, ArrayType *names, ArrayType *costs,
					 double reserve, int *nrequests)
{
	Datum	   *name_datums;
	bool	   *name_nulls;
	Datum	   *cost_datums = NULL;
	bool	   *cost_nulls = NULL;
	int			n;
	int			ncosts;
	Request    *requests;

	n = ArrayGetNItems(ARR_NDIM(names), ARR_DIMS(names));
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("names must not be empty")));
	if (n > MAX_NAMES_PER_CALL)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many token buckets in one call: %d, at most %d",
						n, MAX_NAMES_PER_CALL),
				 errhint("Split the request into several calls.")));
	deconstruct_array(names, TEXTOID, -1, false, TYPALIGN_INT,
					  &name_datums, &name_nulls, &n);
	if (costs != NULL)
	{
		deconstruct_array(costs, FLOAT8OID, sizeof(float8), FLOAT8PASSBYVAL,
						  TYPALIGN_DOUBLE, &cost_datums, &cost_nulls, &ncosts);
		if (ncosts != n)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("names and costs must have the same length, not %d and %d",
							n, ncosts)));
	}

	requests = palloc(sizeof(Request) * n);
	for (int i = 0; i < n; i++)
	{
		if (name_nulls[i] || (cost_nulls != NULL && cost_nulls[i]))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("names and costs must not contain NULL")));
		requests[i].name = DatumGetTextPP(name_datums[i]);
		requests[i].cost = cost_datums ? DatumGetFloat8(cost_datums[i]) : 1.0;
		requests[i].reserve = reserve;
		requests[i].position = i;
		requests[i].template_len = -1;
		requests[i].in_table = false;
		check_bucket_name(requests[i].name);
		check_number("cost", requests[i].cost, false);
	}

	qsort(requests, n, sizeof(Request), request_name_cmp);
	for (int i = 1; i < n; i++)
		if (request_name_cmp(&requests[i - 1], &requests[i]) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("token bucket \"%s\" is named twice",
							text_to_cstring(requests[i].name)),
					 errhint("Name each bucket once, with the sum of its costs.")));
	*nrequests = n;
	return hierarchy_expand(inst, requests, nrequests);
}

/*
 * Requests from the names and costs arguments of an *_all function, and
 * its reserve argument "reserve_argno" (-1: none).
 */
static Request *
requests_from_args(FunctionCallInfo fcinfo, Installation *inst, int reserve_argno,
				   int *nrequests)
{
	return requests_from_arrays(inst, PG_GETARG_ARRAYTYPE_P(0),
								PG_ARGISNULL(1) ? NULL : PG_GETARG_ARRAYTYPE_P(1),
								reserve_arg(fcinfo, reserve_argno), nrequests);
}

/*
 * A single request from (name, cost) arguments, and the reserve argument
 * "reserve_argno" (-1: none; past the arguments of the form called: none).
 */
static Request
request_from(FunctionCallInfo fcinfo, text *name, double cost, int reserve_argno)
{
	Request		request = {.name = name, .cost = cost, .template_len = -1};

	check_bucket_name(name);
	check_number("cost", cost, false);
	request.reserve = reserve_arg(fcinfo, reserve_argno);
	return request;
}

PG_FUNCTION_INFO_V1(tb_acquire);

/*
 * tb_acquire(name [, cost [, reserve]]): take cost tokens (default 1) if
 * there, and with a reserve, if that share of the capacity is left after.
 */
Datum
tb_acquire(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_acquire", ARG_MAY_BE_NULL(2), {"name", "cost", "reserve"}};
	Installation inst = installation_of(fcinfo);
	Request		request;
	Request    *requests;
	int			n = 1;

	check_not_null(fcinfo, &args);
	request = request_from(fcinfo, PG_GETARG_TEXT_PP(0),
						   PG_NARGS() > 1 ? PG_GETARG_FLOAT8(1) : 1.0, 2);
	requests = hierarchy_expand(&inst, &request, &n);
	PG_RETURN_BOOL(router_take(&inst, requests, n, tb_clock_now()));
}

PG_FUNCTION_INFO_V1(tb_try);

/*
 * tb_try(name, cost [, reserve]): the acquire decision, with the tokens
 * left, how long until cost tokens are there (with the reserve besides;
 * zero when granted) and until full.
 */
Datum
tb_try(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_try", ARG_MAY_BE_NULL(2), {"name", "cost", "reserve"}};
	Installation inst = installation_of(fcinfo);
	Request		request;
	Request    *requests;
	int			n = 1;
	TimestampTz now;
	bool		granted;

	check_not_null(fcinfo, &args);
	request = request_from(fcinfo, PG_GETARG_TEXT_PP(0), PG_GETARG_FLOAT8(1), 2);
	requests = hierarchy_expand(&inst, &request, &n);
	now = tb_clock_now();
	granted = router_take(&inst, requests, n, now);
	PG_RETURN_DATUM(report_datum(fcinfo, requests, n, granted, now));
}

PG_FUNCTION_INFO_V1(tb_peek);

/*
 * tb_peek(name, cost [, reserve]): tb_try's answer without taking anything: the
 * decision cost tokens would get now, and the tokens and waits tb_try
 * would report after it (taken on a copy of the bucket).  It locks and
 * writes nothing (a template-made bucket is not made), so it also works
 * on a standby.
 */
Datum
tb_peek(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_peek", ARG_MAY_BE_NULL(2), {"name", "cost", "reserve"}};
	Installation inst = installation_of(fcinfo);
	Request		request;
	Request    *requests;
	int			n = 1;
	TimestampTz now;
	bool		granted = true;

	check_not_null(fcinfo, &args);
	request = request_from(fcinfo, PG_GETARG_TEXT_PP(0), PG_GETARG_FLOAT8(1), 2);
	requests = hierarchy_expand(&inst, &request, &n);
	now = tb_clock_now();
	for (int i = 0; i < n; i++)
	{
		router_peek(&inst, &requests[i], now);
		granted &= bucket_take(&requests[i].bucket, requests[i].cost,
							   requests[i].reserve, now);
	}
	PG_RETURN_DATUM(report_datum(fcinfo, requests, n, granted, now));
}

PG_FUNCTION_INFO_V1(tb_acquire_wait);

/*
 * tb_acquire_wait(name, cost, timeout): wait in the server, in arrival
 * order, until cost tokens can be taken (true) or timeout passes (false).
 */
Datum
tb_acquire_wait(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_acquire_wait", ARG_MAY_BE_NULL(2),
	{"name", "cost", "timeout"}};
	Installation inst = installation_of(fcinfo);
	Request		request;
	Request    *requests;
	int			n = 1;
	TimestampTz deadline;
	int64		waited_usecs;
	bool		granted;

	check_not_null(fcinfo, &args);
	request = request_from(fcinfo, PG_GETARG_TEXT_PP(0), PG_GETARG_FLOAT8(1), -1);
	requests = hierarchy_expand(&inst, &request, &n);
	deadline = deadline_after(PG_ARGISNULL(2) ? NULL : PG_GETARG_INTERVAL_P(2),
							  GetCurrentTimestamp());
	granted = wait_and_take(&inst, requests, n, deadline, &waited_usecs);
	router_count_wait(&inst, requests, n, granted, waited_usecs);
	PG_RETURN_BOOL(granted);
}

PG_FUNCTION_INFO_V1(tb_acquire_all);

/*
 * tb_acquire_all(names, costs [, reserve]): take from every bucket, or
 * from none; with a reserve, every bucket must keep that share.
 */
Datum
tb_acquire_all(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_acquire_all", ARG_MAY_BE_NULL(1) | ARG_MAY_BE_NULL(2),
	{"names", "costs", "reserve"}};
	Installation inst = installation_of(fcinfo);
	Request    *requests;
	int			n;

	check_not_null(fcinfo, &args);
	requests = requests_from_args(fcinfo, &inst, 2, &n);
	PG_RETURN_BOOL(router_take(&inst, requests, n, tb_clock_now()));
}

PG_FUNCTION_INFO_V1(tb_acquire_all_wait);

/* tb_acquire_all_wait(names, costs, timeout): tb_acquire_all, waiting. */
Datum
tb_acquire_all_wait(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_acquire_all_wait", ARG_MAY_BE_NULL(1) | ARG_MAY_BE_NULL(2),
	{"names", "costs", "timeout"}};
	Installation inst = installation_of(fcinfo);
	Request    *requests;
	int			n;
	TimestampTz deadline;
	int64		waited_usecs;
	bool		granted;

	check_not_null(fcinfo, &args);
	requests = requests_from_args(fcinfo, &inst, -1, &n);
	deadline = deadline_after(PG_ARGISNULL(2) ? NULL : PG_GETARG_INTERVAL_P(2),
							  GetCurrentTimestamp());
	granted = wait_and_take(&inst, requests, n, deadline, &waited_usecs);
	router_count_wait(&inst, requests, n, granted, waited_usecs);
	PG_RETURN_BOOL(granted);
}

/* limit_lease() and_then of tb_lease_all: the buckets' tokens. */
typedef struct BucketsToTake
{
	Installation *inst;
	Request    *requests;
	int			nrequests;
} BucketsToTake;

static bool
take_buckets(void *arg)
{
	BucketsToTake *buckets = arg;

	return router_take(buckets->inst, buckets->requests, buckets->nrequests,
					   tb_clock_now());
}

PG_FUNCTION_INFO_V1(tb_lease_all);

/*
 * tb_lease_all(name, buckets, costs, slots, hold, ttl, reserve): a lease of
 * limit "name" and costs[i] tokens (1 each when NULL) from every bucket,
 * all or nothing: the lease id, or NULL with nothing taken.  A reserve
 * (NULL: none) holds for the limit's slots and every bucket alike.  An AI worker's "one
 * of 10 in flight, 1 of 500 requests a minute and 2,000 of 300,000 tokens
 * a minute" in one call.
 */
Datum
tb_lease_all(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_lease_all",
		ARG_MAY_BE_NULL(2) | ARG_MAY_BE_NULL(5) | ARG_MAY_BE_NULL(6),
	{"name", "buckets", "costs", "slots", "hold", "ttl", "reserve"}};
	Installation inst = installation_of(fcinfo);
	BucketsToTake buckets = {.inst = &inst};
	LeaseRequest request;
	double		reserve;

	check_not_null(fcinfo, &args);
	reserve = reserve_arg(fcinfo, 6);
	buckets.requests = requests_from_arrays(&inst, PG_GETARG_ARRAYTYPE_P(1),
											PG_ARGISNULL(2) ? NULL : PG_GETARG_ARRAYTYPE_P(2),
											reserve, &buckets.nrequests);
	request = lease_request(PG_GETARG_TEXT_PP(0), PG_GETARG_INT32(3), PG_GETARG_TEXT_PP(4),
							PG_ARGISNULL(5) ? NULL : PG_GETARG_INTERVAL_P(5), reserve);
	if (!limit_lease(&inst, &request, false, 0, take_buckets, &buckets))
		PG_RETURN_NULL();
	PG_RETURN_INT64(request.lease);
}

/* Order requests back into the caller's order. */
static int
request_position_cmp(const void *a, const void *b)
{
	return ((const Request *) a)->position - ((const Request *) b)->position;
}

PG_FUNCTION_INFO_V1(tb_try_all);

/*
 * tb_try_all(names, costs [, reserve]): tb_acquire_all with a row per bucket, in the
 * order named (then their parents): the shared decision, the tokens left,
 * how long until that bucket holds its cost (the ones holding the request
 * back wait longest), and until it is full.
 */
Datum
tb_try_all(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_try_all", ARG_MAY_BE_NULL(1) | ARG_MAY_BE_NULL(2),
	{"names", "costs", "reserve"}};
	Installation inst = installation_of(fcinfo);
	TupleDesc	desc;
	Tuplestorestate *store;
	Request    *requests;
	int			n;
	bool		granted;
	TimestampTz now = tb_clock_now();

	check_not_null(fcinfo, &args);
	store = materialize_begin(fcinfo, &desc);
	requests = requests_from_args(fcinfo, &inst, 2, &n);
	granted = router_take(&inst, requests, n, now);
	qsort(requests, n, sizeof(Request), request_position_cmp);

	for (int i = 0; i < n; i++)
	{
		Datum		values[1 + REPORT_COLUMNS];
		bool		nulls[1 + REPORT_COLUMNS] = {0};

		values[0] = PointerGetDatum(requests[i].name);
		report_values(&requests[i], granted, now, values + 1);
		tuplestore_putvalues(store, desc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * Let "change" alter a bucket's state now (router_update()), count "delta"
 * for it (unless NULL), and return the tokens it holds afterwards.  Every
 * change that is not a grant or a new setting goes through here.
 */
static double
update_bucket(Installation *inst, text *name, BucketChange change,
			  const void *arg, const BucketCounters *delta)
{
	TimestampTz now = tb_clock_now();
	Bucket		bucket;

	check_bucket_name(name);
	bucket = router_update(inst, name, change, arg, delta, now);
	return bucket_tokens_at(&bucket, now);
}

/* update_bucket() change: give "tokens" back (take them when negative). */
static void
change_adjust(Bucket *bucket, TimestampTz now, const void *tokens)
{
	bucket_adjust(bucket, *(const double *) tokens, now);
}

/*
 * update_bucket() taking -"tokens" from bucket "name" and every parent, or
 * giving "tokens" back to it and the parents a reservation made at
 * "reserved_at" was charged to, by name as grants lock: "name"'s tokens.
 */
static double
adjust_chain(Installation *inst, text *name, const double *tokens,
			 const BucketCounters *delta, TimestampTz reserved_at)
{
	Request		request = {.name = name};
	Request    *chain;
	int			n = 1;
	double		own = 0;

	check_bucket_name(name);
	chain = *tokens > 0 ? hierarchy_given_back(inst, &request, &n, reserved_at) :
		hierarchy_expand(inst, &request, &n);
	for (int i = 0; i < n; i++)
	{
		double		left = update_bucket(inst, chain[i].name, change_adjust, tokens, delta);

		if (chain[i].position == 0)
			own = left;
	}
	return own;
}

/* update_bucket() change: lower the level to "tokens", never raise it. */
static void
change_lower(Bucket *bucket, TimestampTz now, const void *tokens)
{
	bucket_lower_to(bucket, *(const double *) tokens, now);
}

/* update_bucket() change: full, and not paused. */
static void
change_reset(Bucket *bucket, TimestampTz now, const void *unused)
{
	bucket->deficit = 0;
	bucket->paused_until = DT_NOBEGIN;
	bucket->updated_at = Max(bucket->updated_at, now);
}

/* update_bucket() change: no grants before "until" (a longer pause stays). */
static void
change_pause(Bucket *bucket, TimestampTz now, const void *until)
{
	bucket->paused_until = Max(bucket->paused_until, *(const TimestampTz *) until);
}

PG_FUNCTION_INFO_V1(tb_refund);

/*
 * tb_refund(name, tokens [, reserved_at]): give unused tokens back, capped
 * at capacity, to the bucket and the parents the reservation was charged to.
 */
Datum
tb_refund(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_refund", ARG_MAY_BE_NULL(2), {"name", "tokens", "reserved_at"}};
	Installation inst = installation_of(fcinfo);
	double		tokens = PG_GETARG_FLOAT8(1);
	BucketCounters delta = {.refunded_tokens = tokens};

	check_not_null(fcinfo, &args);
	check_number("tokens", tokens, false);
	PG_RETURN_FLOAT8(adjust_chain(&inst, PG_GETARG_TEXT_PP(0), &tokens, &delta,
								  hierarchy_reserved_at(fcinfo, 2)));
}

PG_FUNCTION_INFO_V1(tb_settle);

/*
 * tb_settle(name, reserved, used [, reserved_at]): refund reserved - used as
 * tb_refund() does, or take used - reserved more, into debt if need be, on
 * the bucket and every parent it has now.  Returns the bucket's new level.
 */
Datum
tb_settle(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_settle", ARG_MAY_BE_NULL(3), {"name", "reserved", "used", "reserved_at"}};
	Installation inst = installation_of(fcinfo);
	double		reserved = PG_GETARG_FLOAT8(1);
	double		used = PG_GETARG_FLOAT8(2);
	double		tokens;

	BucketCounters delta = {0};

	check_not_null(fcinfo, &args);
	check_number("reserved", reserved, false);
	check_number("used", used, false);
	tokens = reserved - used;
	/* what is given back is refunded; what is taken more, granted */
	if (tokens > 0)
		delta.refunded_tokens = tokens;
	else
		delta.granted_tokens = -tokens;
	PG_RETURN_FLOAT8(adjust_chain(&inst, PG_GETARG_TEXT_PP(0), &tokens, &delta,
								  hierarchy_reserved_at(fcinfo, 3)));
}

PG_FUNCTION_INFO_V1(tb_sync);

/* tb_sync(name, remaining): lower the level to what the provider reports. */
Datum
tb_sync(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_sync", 0, {"name", "remaining"}};
	Installation inst = installation_of(fcinfo);
	double		remaining = PG_GETARG_FLOAT8(1);

	check_not_null(fcinfo, &args);
	check_number("remaining", remaining, false);
	PG_RETURN_FLOAT8(update_bucket(&inst, PG_GETARG_TEXT_PP(0), change_lower,
								   &remaining, NULL));
}

/*
 * Pause bucket "name" until "until": no grants before then.  A pause that
 * has already ended changes nothing (and writes nothing).
 */
static void
pause_until(Installation *inst, text *name, TimestampTz until)
{
	TimestampTz now = tb_clock_now();

	if (until > now)
	{
		BucketCounters delta = {.pauses = 1};

		(void) update_bucket(inst, name, change_pause, &until, &delta);
		return;
	}
	check_bucket_name(name);
	router_require(inst, name);
}

PG_FUNCTION_INFO_V1(tb_pause_until);

/* tb_pause_until(name, until timestamptz); tb_pause(name, timestamptz) in 1.1 */
Datum
tb_pause_until(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_pause_until", 0, {"name", "until"}};
	Installation inst = installation_of(fcinfo);

	check_not_null(fcinfo, &args);
	pause_until(&inst, PG_GETARG_TEXT_PP(0), PG_GETARG_TIMESTAMPTZ(1));
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(tb_pause_for);

/* tb_pause(name, duration interval) */
Datum
tb_pause_for(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_pause", 0, {"name", "duration"}};
	Installation inst = installation_of(fcinfo);
	double		usecs;

	check_not_null(fcinfo, &args);
	if (!interval_usecs(PG_GETARG_INTERVAL_P(1), &usecs))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("duration must be a finite interval")));
	pause_until(&inst, PG_GETARG_TEXT_PP(0),
				timestamp_after(tb_clock_now(), usecs));
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(tb_purge);

/*
 * tb_purge(idle): delete template-made buckets that are full and unwritten
 * for "idle"; a full bucket decides as a new one would, so nothing a later
 * call sees changes.  The same for the slots of names limit templates made
 * that hold no lease and were not leased for "idle".  Returns how many
 * buckets and names.
 */
Datum
tb_purge(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_purge", 0, {"idle"}};
	Installation inst = installation_of(fcinfo);
	TimestampTz now = tb_clock_now();
	double		usecs;

	check_not_null(fcinfo, &args);
	if (!interval_usecs(PG_GETARG_INTERVAL_P(0), &usecs) || usecs < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idle must be a finite interval of zero or more")));
	PG_RETURN_INT64((int64) (router_purge(&inst, timestamp_after(now, -usecs), now) +
							 limit_purge(&inst, timestamp_after(now, -usecs), now)));
}

/*
 * The name, capacity and refill rate of tb_create's and tb_ensure's
 * arguments (name, capacity, refill, per), checked.
 */
static text *
settings_from_args(FunctionCallInfo fcinfo, double *capacity, double *rate)
{
	text	   *name = PG_GETARG_TEXT_PP(0);

	*capacity = PG_GETARG_FLOAT8(1);
	check_name(name, ERRCODE_INVALID_PARAMETER_VALUE);
	check_number("capacity", *capacity, true);
	*rate = refill_rate_from(PG_GETARG_FLOAT8(2), PG_GETARG_INTERVAL_P(3));
	return name;
}

PG_FUNCTION_INFO_V1(tb_create);

/*
 * tb_create(name, capacity, refill, per, memory): a new bucket, full; with
 * memory, its tokens are kept in shared memory.
 */
Datum
tb_create(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_create", 0, {"name", "capacity", "refill", "per", "memory"}};
	Installation inst = installation_of(fcinfo);
	text	   *name;
	double		capacity;
	double		rate;

	check_not_null(fcinfo, &args);
	name = settings_from_args(fcinfo, &capacity, &rate);
	if (!router_create(&inst, name, capacity, rate,
					   PG_NARGS() > 4 && PG_GETARG_BOOL(4)))
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("token bucket \"%s\" already exists", text_to_cstring(name)),
				 errhint("Change its settings with tb_alter(), or remove it with tb_drop().")));
	PG_RETURN_VOID();
}

/*
 * Refuse to give quota "name" a rate: a quota's refill_rate is the budget
 * each period's start adds, which tb_ensure's refill and per, and
 * tb_alter's per, would silently turn into a few millionths of a token.
 */
static void
refuse_rate_for_quota(text *name, bool quota, const char *function)
{
	if (quota)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("token bucket \"%s\" is a quota", text_to_cstring(name)),
				 errdetail("A quota gets its budget back at each period's start; %s gives a rate per second.",
						   function),
				 errhint("Use tb_ensure_quota(), or tb_alter() with refill alone, which is the budget a period.")));
}

PG_FUNCTION_INFO_V1(tb_ensure);

/*
 * tb_ensure(name, capacity, refill, per, memory): tb_create's bucket, made
 * when missing ('created'), given these settings when it has others
 * ('changed', keeping its tokens as tb_alter does), or left as it is
 * ('unchanged'): a set-up that a deploy can run again.
 */
Datum
tb_ensure(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_ensure", 0, {"name", "capacity", "refill", "per", "memory"}};
	Installation inst = installation_of(fcinfo);
	text	   *name;
	Bucket		made = {.paused_until = DT_NOBEGIN};
	BucketConfig found;

	check_not_null(fcinfo, &args);
	name = settings_from_args(fcinfo, &made.capacity, &made.refill_rate);
	made.updated_at = tb_clock_now();
	if (router_ensure(&inst, name, &made, PG_GETARG_BOOL(4), &found))
		PG_RETURN_TEXT_P(ensure_result_text(ENSURE_CREATED));
	refuse_rate_for_quota(name, found.bucket.period != NULL, "tb_ensure");
	if (found.bucket.capacity == made.capacity &&
		found.bucket.refill_rate == made.refill_rate)
		PG_RETURN_TEXT_P(ensure_result_text(ENSURE_UNCHANGED));
	router_alter(&inst, name, made.capacity, made.refill_rate);
	PG_RETURN_TEXT_P(ensure_result_text(ENSURE_CHANGED));
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
	static const ArgsSpec args = {"tb_alter",
		ARG_MAY_BE_NULL(1) | ARG_MAY_BE_NULL(2) | ARG_MAY_BE_NULL(3),
	{"name", "capacity", "refill", "per"}};
	Installation inst = installation_of(fcinfo);
	text	   *name;
	double		capacity = NAN;		/* NaN: keep */
	double		refill_rate = NAN;

	check_not_null(fcinfo, &args);
	name = PG_GETARG_TEXT_PP(0);

	if (!PG_ARGISNULL(1))
	{
		capacity = PG_GETARG_FLOAT8(1);
		check_number("capacity", capacity, true);
	}
	if (!PG_ARGISNULL(3) && PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("per needs refill"),
				 errdetail("The refill rate is refill tokens every per; per alone does not give it."),
				 errhint("Pass both, as in tb_alter('name', refill => 60, per => '1 minute').")));
	if (!PG_ARGISNULL(3))
	{
		SpiSession	session = spi_begin(&inst, false);
		BucketConfig config;
		bool		quota;

		quota = bucket_config_find(installation_table(&inst), name, tb_clock_now(),
								   true, 0, &config) != CONFIG_NONE &&
			config.bucket.period != NULL;
		spi_end(&session);
		refuse_rate_for_quota(name, quota, "per");
	}
	if (!PG_ARGISNULL(2))
	{
		Interval	one_second = {.time = USECS_PER_SEC};

		refill_rate = refill_rate_from(PG_GETARG_FLOAT8(2),
									   PG_ARGISNULL(3) ? &one_second : PG_GETARG_INTERVAL_P(3));
	}

	check_name(name, ERRCODE_INVALID_PARAMETER_VALUE);
	if (PG_ARGISNULL(1) && PG_ARGISNULL(2))
		router_require(&inst, name);	/* nothing to change: does it exist? */
	else
		router_alter(&inst, name, capacity, refill_rate);
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(tb_reset);

/* tb_reset(name): fill the bucket and lift any pause. */
Datum
tb_reset(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_reset", 0, {"name"}};
	Installation inst = installation_of(fcinfo);

	check_not_null(fcinfo, &args);
	(void) update_bucket(&inst, PG_GETARG_TEXT_PP(0), change_reset, NULL, NULL);
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(tb_stats_reset);

/*
 * tb_stats_reset(name DEFAULT NULL): start the counters of bucket "name"
 * from zero (of a template: its own and those of every bucket made from
 * it), or with NULL, those of every bucket of this installation.
 */
Datum
tb_stats_reset(PG_FUNCTION_ARGS)
{
	Installation inst = installation_of(fcinfo);
	router_reset_counters(&inst, PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0));
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(tb_drop);

/*
 * tb_drop(name): remove the bucket, and the limit, of that name; false
 * when there was neither.
 */
Datum
tb_drop(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_drop", 0, {"name"}};
	Installation inst = installation_of(fcinfo);
	bool		bucket;
	bool		limit;

	check_not_null(fcinfo, &args);
	bucket = router_drop(&inst, PG_GETARG_TEXT_PP(0));
	limit = limit_drop(&inst, PG_GETARG_TEXT_PP(0));
	PG_RETURN_BOOL(bucket || limit);
}
