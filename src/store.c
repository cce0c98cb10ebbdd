/*-------------------------------------------------------------------------
 *
 * store.c
 *	  The bucket table, through SPI on plans prepared once per backend.
 *
 * A grant is a single
 *
 *		UPDATE tb_buckets SET deficit = tb_take(...) ...
 *		 WHERE name = $1 AND tb_take(...) IS NOT NULL RETURNING ...
 *
 * so the decision is made on the row version the UPDATE locks (READ
 * COMMITTED re-checks it on the newest version after waiting), a grant is
 * one new row version, and a denial matches no row and writes nothing.
 * tb_take() remembers the last bucket it decided on (bucket.c), so a
 * denial needs no second read to tell "empty" from "no such bucket" and to
 * report when to retry.  A name that matches no bucket but
 * starts with a template's prefix gets its bucket made from the template,
 * already taken from, in one INSERT; a look (tb_peek, a cost of 0, and
 * the first pass of an all-or-nothing take) decides on the bucket the
 * template would make without making it, so a denial writes nothing.
 *
 * Every name in the queries below is schema-qualified, operators included:
 * the entry points run as the extension's owner.
 *
 * src/store.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "tokenbucket.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/resowner.h"

/*
 * The statements; %1$s is the extension's schema.  PLAN_TAKE's CASE makes
 * sure tb_take() only ever decides on the named row, whatever order a plan
 * tests its conditions in: take_watch_denied() relies on it.
 */
typedef enum PlanId
{
	PLAN_TAKE,
	PLAN_READ,
	PLAN_LOCK,
	PLAN_WRITE,
	PLAN_RESET,
	PLAN_INSERT,
	PLAN_DELETE,
	PLAN_DELETE_MADE,
	PLAN_TEMPLATE,
	PLAN_ALTER_MADE,
	PLAN_PURGE,
	NUM_PLANS
} PlanId;

#define BUCKET_COLUMNS "capacity, refill_rate, deficit, updated_at, paused_until"
#define TAKE_ARGS "b.capacity, b.refill_rate, b.deficit, b.updated_at, b.paused_until, $2, $3"

/* Template-made buckets removed per statement by tb_purge. */
#define PURGE_BATCH 1000

typedef struct PlanDef
{
	const char *sql;
	int			nargs;
	Oid			argtypes[6];
} PlanDef;

static const PlanDef plan_defs[NUM_PLANS] = {
	[PLAN_TAKE] = {
		"UPDATE %1$s.tb_buckets AS b"
		" SET deficit = %1$s.tb_take(" TAKE_ARGS "),"
		" updated_at = GREATEST(b.updated_at, $3)"
		" WHERE b.name OPERATOR(pg_catalog.=) $1"
		" AND CASE WHEN b.name OPERATOR(pg_catalog.=) $1"
		" THEN %1$s.tb_take(" TAKE_ARGS ") END IS NOT NULL"
		" RETURNING " BUCKET_COLUMNS,
		3, {TEXTOID, FLOAT8OID, TIMESTAMPTZOID}
	},
	[PLAN_READ] = {
		"SELECT " BUCKET_COLUMNS " FROM %1$s.tb_buckets"
		" WHERE name OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID}
	},
	[PLAN_LOCK] = {
		"SELECT " BUCKET_COLUMNS " FROM %1$s.tb_buckets"
		" WHERE name OPERATOR(pg_catalog.=) $1 FOR NO KEY UPDATE",
		1, {TEXTOID}
	},
	[PLAN_WRITE] = {
		"UPDATE %1$s.tb_buckets"
		" SET capacity = $2, refill_rate = $3, deficit = $4, updated_at = $5,"
		" paused_until = $6"
		" WHERE name OPERATOR(pg_catalog.=) $1",
		6, {TEXTOID, FLOAT8OID, FLOAT8OID, FLOAT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}
	},
	[PLAN_RESET] = {
		"UPDATE %1$s.tb_buckets"
		" SET deficit = 0, paused_until = '-infinity',"
		" updated_at = GREATEST(updated_at, $2)"
		" WHERE name OPERATOR(pg_catalog.=) $1",
		2, {TEXTOID, TIMESTAMPTZOID}
	},
	[PLAN_INSERT] = {
		"INSERT INTO %1$s.tb_buckets (name, capacity, refill_rate, deficit, updated_at, template)"
		" VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO NOTHING",
		6, {TEXTOID, FLOAT8OID, FLOAT8OID, FLOAT8OID, TIMESTAMPTZOID, TEXTOID}
	},
	[PLAN_DELETE] = {
		"DELETE FROM %1$s.tb_buckets WHERE name OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID}
	},
	[PLAN_DELETE_MADE] = {
		"DELETE FROM %1$s.tb_buckets WHERE template OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID}
	},
	/* the longest template prefix of $1; the partial index holds templates */
	[PLAN_TEMPLATE] = {
		"SELECT capacity, refill_rate, name FROM %1$s.tb_buckets"
		" WHERE name OPERATOR(pg_catalog.~~) '%%*'"
		" AND pg_catalog.starts_with($1, pg_catalog.left(name, -1))"
		" ORDER BY pg_catalog.octet_length(name) DESC LIMIT 1",
		1, {TEXTOID}
	},
	/* every bucket made from template $1 takes its settings, keeping its tokens */
	[PLAN_ALTER_MADE] = {
		"UPDATE %1$s.tb_buckets AS b"
		" SET deficit = %1$s.tb_resize(b.capacity, b.refill_rate, b.deficit, b.updated_at, $2, $4),"
		" capacity = $2, refill_rate = $3, updated_at = GREATEST(b.updated_at, $4)"
		" WHERE b.template OPERATOR(pg_catalog.=) $1",
		4, {TEXTOID, FLOAT8OID, FLOAT8OID, TIMESTAMPTZOID}
	},
	/* full, unpaused, template-made buckets last written before $1 */
	[PLAN_PURGE] = {
		"DELETE FROM %1$s.tb_buckets WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
		" SELECT ctid FROM %1$s.tb_buckets AS b"
		" WHERE b.template IS NOT NULL AND b.updated_at OPERATOR(pg_catalog.<) $1"
		" AND b.paused_until OPERATOR(pg_catalog.<=) $2"
		" AND %1$s.tb_take(b.capacity, b.refill_rate, b.deficit, b.updated_at,"
		" b.paused_until, b.capacity, $2) IS NOT NULL"
		" LIMIT $3 FOR UPDATE SKIP LOCKED))",
		3, {TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID}
	},
};

/* Kept plans, and the tb_buckets table they were prepared for. */
static SPIPlanPtr plans[NUM_PLANS];
static Oid	plans_table = InvalidOid;

/*
 * Fail clearly when the extension's SQL objects are of another version
 * than this library (a new library installed, ALTER EXTENSION not yet run).
 */
static void
check_version(void)
{
	char	   *version = NULL;
	int			rc;

	rc = SPI_execute("SELECT extversion FROM pg_catalog.pg_extension"
					 " WHERE extname OPERATOR(pg_catalog.=) 'tokenbucket'",
					 true, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 1)
		version = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (version == NULL || strcmp(version, TOKENBUCKET_VERSION) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension tokenbucket is version %s, its library is version %s",
						version ? version : "(none)", TOKENBUCKET_VERSION),
				 errhint("Run ALTER EXTENSION tokenbucket UPDATE in this database.")));
}

/* Whether "name" is a template's: it ends in '*'. */
bool
is_template_name(text *name)
{
	int			len = VARSIZE_ANY_EXHDR(name);

	return len > 0 && VARDATA_ANY(name)[len - 1] == '*';
}

/*
 * The error for a call whose extension objects are gone (DROP EXTENSION or
 * DROP SCHEMA in another session while this one held a reference).
 */
static void
report_dropped(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("extension tokenbucket is not installed in this database"),
			 errdetail("Its schema or its table tb_buckets was dropped while this session was using it."),
			 errhint("Run CREATE EXTENSION tokenbucket, then call the function again.")));
}

/*
 * The kept plan for "id", prepared on first use.  The table is the one in
 * the calling function's schema: after DROP EXTENSION and CREATE EXTENSION
 * (in any schema, at any version) within one backend, the plans and the
 * version check start afresh.
 */
static SPIPlanPtr
get_plan(PlanId id, FunctionCallInfo fcinfo)
{
	Oid			schema = get_func_namespace(fcinfo->flinfo->fn_oid);
	Oid			table = OidIsValid(schema) ? get_relname_relid("tb_buckets", schema) : InvalidOid;

	if (!OidIsValid(table))
		report_dropped();
	if (table != plans_table)
	{
		for (int i = 0; i < NUM_PLANS; i++)
		{
			if (plans[i] != NULL)
				SPI_freeplan(plans[i]);
			plans[i] = NULL;
		}
		plans_table = InvalidOid;
		check_version();
		plans_table = table;
	}

	if (plans[id] == NULL)
	{
		const PlanDef *def = &plan_defs[id];
		char	   *nspname = get_namespace_name(schema);
		char	   *sql;
		SPIPlanPtr	plan;

		if (nspname == NULL)
			report_dropped();
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

/*
 * Run a kept plan; "nulls" is NULL or SPI's ' '/'n' string.  Returns the
 * rows processed; any rows are in SPI_tuptable, for the caller to free
 * (read_bucket() does).  With none, SPI_tuptable is freed here, so that a
 * call naming many buckets keeps no memory per bucket.
 */
static uint64
run_plan(PlanId id, FunctionCallInfo fcinfo, Datum *args, const char *nulls)
{
	int			rc = SPI_execute_plan(get_plan(id, fcinfo), args, nulls, false, 0);

	if (rc < 0)
		elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0 && SPI_tuptable != NULL)
	{
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
	}
	return SPI_processed;
}

/* Copy the bucket state out of the first row SPI returned, and free it. */
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
	bucket->paused_until = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 5, &isnull));
	SPI_freetuptable(SPI_tuptable);
	SPI_tuptable = NULL;
}

/*
 * The error for a bucket that does not exist.  The hint speaks to whoever
 * called: making buckets is the DBA's (tb_create is not PUBLIC).
 */
static void
report_missing(text *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("token bucket \"%s\" does not exist", text_to_cstring(name)),
			 errhint("A bucket, or a template such as 'prefix*' for per-key buckets, "
					 "is made with tb_create() by the database's administrator.")));
}

/*
 * The template with the longest prefix of "name": "bucket" becomes the full
 * bucket it would make at "now", and "template" its name (copied into the
 * current memory context).  False when no template matches.  Templates are
 * never made from templates.
 */
static bool
find_template(FunctionCallInfo fcinfo, text *name, TimestampTz now,
			  Bucket *bucket, text **template)
{
	Datum		args[1] = {PointerGetDatum(name)};
	HeapTuple	tuple;
	TupleDesc	desc;
	bool		isnull;

	if (VARSIZE_ANY_EXHDR(name) == 0 || is_template_name(name) ||
		run_plan(PLAN_TEMPLATE, fcinfo, args, NULL) == 0)
		return false;

	tuple = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	bucket->capacity = DatumGetFloat8(SPI_getbinval(tuple, desc, 1, &isnull));
	bucket->refill_rate = DatumGetFloat8(SPI_getbinval(tuple, desc, 2, &isnull));
	bucket->deficit = 0;
	bucket->updated_at = now;
	bucket->paused_until = DT_NOBEGIN;
	*template = DatumGetTextPCopy(SPI_getbinval(tuple, desc, 3, &isnull));
	SPI_freetuptable(SPI_tuptable);
	SPI_tuptable = NULL;
	return true;
}

/*
 * Insert bucket "name", made from "template", in the state "bucket".  False
 * when the name exists already: a concurrent first call made it (ON
 * CONFLICT DO NOTHING waits for that call's insert and keeps it).
 */
static bool
insert_made(FunctionCallInfo fcinfo, text *name, const Bucket *bucket,
			text *template)
{
	Datum		args[6];

	args[0] = PointerGetDatum(name);
	args[1] = Float8GetDatum(bucket->capacity);
	args[2] = Float8GetDatum(bucket->refill_rate);
	args[3] = Float8GetDatum(bucket->deficit);
	args[4] = TimestampTzGetDatum(bucket->updated_at);
	args[5] = PointerGetDatum(template);
	return run_plan(PLAN_INSERT, fcinfo, args, NULL) == 1;
}

/*
 * Make bucket "name", full, from the template with the longest prefix of
 * it.  False when no template matches.
 */
static bool
create_from_template(FunctionCallInfo fcinfo, text *name, TimestampTz now)
{
	Bucket		bucket;
	text	   *template;

	if (!find_template(fcinfo, name, now, &bucket, &template))
		return false;
	(void) insert_made(fcinfo, name, &bucket, template);
	return true;
}

/*
 * Run plan "id" on bucket args[0].  When it finds no row, make the bucket
 * from its template and run it once more; fail if there is still none.
 */
static void
run_on_bucket(PlanId id, FunctionCallInfo fcinfo, Datum *args, TimestampTz now)
{
	text	   *name = DatumGetTextPP(args[0]);

	if (run_plan(id, fcinfo, args, NULL) == 0 &&
		(!create_from_template(fcinfo, name, now) ||
		 run_plan(id, fcinfo, args, NULL) == 0))
		report_missing(name);
}

/*
 * Fail when a request's cost could never be granted by its bucket: above
 * its capacity, or too small for its arithmetic to account for.  The
 * message names no setting of the bucket: the caller may not be allowed to
 * read them (tb_status shows them to whoever may).
 */
static void
check_cost(const Request *request)
{
	if (request->cost > request->bucket.capacity)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cost %g exceeds the capacity of token bucket \"%s\"",
						request->cost, text_to_cstring(request->name)),
				 errdetail("The bucket can never hold that many tokens, so this request could never be granted."),
				 errhint("Split the request, or have the bucket's capacity raised with tb_alter().")));
	if (!bucket_cost_resolvable(request->bucket.capacity, request->cost))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cost %g is too small for token bucket \"%s\"",
						request->cost, text_to_cstring(request->name)),
				 errdetail("A bucket accounts for costs down to 1/4294967296 of its capacity; a smaller cost would be lost to rounding."),
				 errhint("Count in larger units, or use a bucket of smaller capacity.")));
}

/*
 * In a PG_CATCH block: roll back the internal subtransaction begun in
 * "oldcontext" under "oldowner" (it must not outlive the error), restore
 * both, and return the error for the caller to handle or re-throw.
 */
ErrorData *
subxact_abort(MemoryContext oldcontext, ResourceOwner oldowner)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(oldcontext);
	edata = CopyErrorData();
	FlushErrorState();
	RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(oldcontext);
	CurrentResourceOwner = oldowner;
	return edata;
}

/*
 * Fail on a standby: every entry point but the looks changes buckets, so
 * it says at once where to go instead of failing deep in an UPDATE (or
 * queueing a waiter that could never win).
 */
void
store_check_primary(void)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot take tokens or change token buckets on a standby"),
				 errdetail("This server is in recovery; every change to a bucket is a write."),
				 errhint("Call the tb_* functions on the primary. tb_peek and tb_status can be read here.")));
}

/* Connect to SPI (on the primary, unless only looking), or fail loudly. */
void
store_connect(bool writes)
{
	int			rc;

	if (writes)
		store_check_primary();
	rc = SPI_connect();
	if (rc != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed: %s", SPI_result_code_string(rc));
}

/* Disconnect from SPI, or fail loudly. */
void
store_finish(void)
{
	int			rc = SPI_finish();

	if (rc != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed: %s", SPI_result_code_string(rc));
}

/*
 * Look at the request's bucket at "now" without locking or writing it: its
 * state, or the state of the full bucket its template would make.  Fails
 * if there is neither, or if the cost could never be granted.
 */
void
store_peek(FunctionCallInfo fcinfo, Request *request, TimestampTz now)
{
	Datum		args[1] = {PointerGetDatum(request->name)};
	text	   *template;

	if (run_plan(PLAN_READ, fcinfo, args, NULL) == 1)
		read_bucket(&request->bucket);
	else if (!find_template(fcinfo, request->name, now, &request->bucket, &template))
		report_missing(request->name);
	check_cost(request);
}

/*
 * Take the request's cost from its bucket at "now" if it grants it.  Either
 * way request->bucket is left with the bucket's state after the decision.
 * A cost of 0 only looks: it changes nothing, so it writes nothing.
 */
bool
store_take(FunctionCallInfo fcinfo, Request *request, TimestampTz now)
{
	Datum		args[3];

	if (request->cost == 0)
	{
		store_peek(fcinfo, request, now);
		return bucket_holds(&request->bucket, 0, now);
	}

	args[0] = PointerGetDatum(request->name);
	args[1] = Float8GetDatum(request->cost);
	args[2] = TimestampTzGetDatum(now);

	/* a second round only when a concurrent first call made the bucket */
	for (int attempt = 0; attempt < 2; attempt++)
	{
		text	   *template;

		take_watch_begin();
		if (run_plan(PLAN_TAKE, fcinfo, args, NULL) == 1)
		{
			read_bucket(&request->bucket);
			return true;
		}
		/* denied: tb_take() saw the row, so it exists; no second read */
		if (take_watch_denied(&request->bucket))
		{
			check_cost(request);
			return false;
		}
		/* no row: make it from a template, already taken from */
		if (!find_template(fcinfo, request->name, now, &request->bucket, &template))
			break;
		check_cost(request);
		if (!bucket_take(&request->bucket, request->cost, now))
			elog(ERROR, "a new bucket did not grant a cost within its capacity");
		if (insert_made(fcinfo, request->name, &request->bucket, template))
			return true;
	}
	report_missing(request->name);
	pg_unreachable();
}

/*
 * Take every request's cost, or none.  First a look at every bucket,
 * locking and writing nothing: if one would deny, that is the answer, and
 * nothing was written (not even a bucket made from a template).  Then the
 * takes, in the callers' order (sorted by name, so that every session
 * locks rows in the same order and {a,b} against {b,a} cannot deadlock),
 * in a subtransaction rolled back if a bucket denies after all (another
 * session took its tokens since the look); the states are then looked at
 * afresh for the report.
 */
bool
store_take_all(FunctionCallInfo fcinfo, Request *requests, int nrequests,
			   TimestampTz now)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile bool granted = true;

	if (nrequests == 1)
		return store_take(fcinfo, &requests[0], now);

	for (int i = 0; i < nrequests; i++)
	{
		store_peek(fcinfo, &requests[i], now);
		if (!bucket_holds(&requests[i].bucket, requests[i].cost, now))
			granted = false;
	}
	if (!granted)
		return false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);
	PG_TRY();
	{
		for (int i = 0; i < nrequests && granted; i++)
			granted = store_take(fcinfo, &requests[i], now);
	}
	PG_CATCH();
	{
		ReThrowError(subxact_abort(oldcontext, oldowner));
	}
	PG_END_TRY();

	if (granted)
		ReleaseCurrentSubTransaction();
	else
		RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(oldcontext);
	CurrentResourceOwner = oldowner;

	if (!granted)
		for (int i = 0; i < nrequests; i++)
			store_peek(fcinfo, &requests[i], now);
	return granted;
}

/*
 * Lock bucket "name" for an update (making it from a template if missing)
 * and read its state.
 */
void
store_lock(FunctionCallInfo fcinfo, text *name, Bucket *bucket)
{
	Datum		args[1] = {PointerGetDatum(name)};

	run_on_bucket(PLAN_LOCK, fcinfo, args, GetCurrentTimestamp());
	read_bucket(bucket);
}

/* Write the state of a bucket locked with store_lock(). */
void
store_write(FunctionCallInfo fcinfo, text *name, const Bucket *bucket)
{
	Datum		args[6];

	args[0] = PointerGetDatum(name);
	args[1] = Float8GetDatum(bucket->capacity);
	args[2] = Float8GetDatum(bucket->refill_rate);
	args[3] = Float8GetDatum(bucket->deficit);
	args[4] = TimestampTzGetDatum(bucket->updated_at);
	args[5] = TimestampTzGetDatum(bucket->paused_until);
	run_plan(PLAN_WRITE, fcinfo, args, NULL);
}

/*
 * Give every bucket made from template "name" the template's new settings
 * (in "bucket"), each keeping the tokens it holds at "now", capped at the
 * new capacity.  Returns how many.
 */
uint64
store_alter_made(FunctionCallInfo fcinfo, text *name, const Bucket *bucket,
				 TimestampTz now)
{
	Datum		args[4];

	args[0] = PointerGetDatum(name);
	args[1] = Float8GetDatum(bucket->capacity);
	args[2] = Float8GetDatum(bucket->refill_rate);
	args[3] = TimestampTzGetDatum(now);
	return run_plan(PLAN_ALTER_MADE, fcinfo, args, NULL);
}

/* Fail unless bucket "name" exists, or its template would make it. */
void
store_require(FunctionCallInfo fcinfo, text *name)
{
	Request		request = {.name = name, .cost = 0};

	store_peek(fcinfo, &request, GetCurrentTimestamp());
}

/* Fill bucket "name" and lift any pause. */
void
store_reset(FunctionCallInfo fcinfo, text *name, TimestampTz now)
{
	Datum		args[2] = {PointerGetDatum(name), TimestampTzGetDatum(now)};

	run_on_bucket(PLAN_RESET, fcinfo, args, now);
}

/* Insert a new full bucket; false when the name is taken. */
bool
store_insert(FunctionCallInfo fcinfo, text *name, double capacity,
			 double refill_rate, TimestampTz now)
{
	Datum		args[6];

	args[0] = PointerGetDatum(name);
	args[1] = Float8GetDatum(capacity);
	args[2] = Float8GetDatum(refill_rate);
	args[3] = Float8GetDatum(0);
	args[4] = TimestampTzGetDatum(now);
	args[5] = (Datum) 0;
	return run_plan(PLAN_INSERT, fcinfo, args, "     n") == 1;
}

/*
 * Delete bucket "name"; false when there was none.  A template takes the
 * buckets made from it along: they would never be made again.
 */
bool
store_delete(FunctionCallInfo fcinfo, text *name)
{
	Datum		args[1] = {PointerGetDatum(name)};
	bool		deleted = run_plan(PLAN_DELETE, fcinfo, args, NULL) > 0;

	if (deleted && is_template_name(name))
		(void) run_plan(PLAN_DELETE_MADE, fcinfo, args, NULL);
	return deleted;
}

/*
 * Delete template-made buckets that are full, unpaused and unwritten since
 * "idle_since", a batch at a time, skipping rows other sessions hold.
 */
uint64
store_purge(FunctionCallInfo fcinfo, TimestampTz idle_since, TimestampTz now)
{
	Datum		args[3];
	uint64		batch;
	uint64		total = 0;

	args[0] = TimestampTzGetDatum(idle_since);
	args[1] = TimestampTzGetDatum(now);
	args[2] = Int64GetDatum(PURGE_BATCH);
	do
	{
		batch = run_plan(PLAN_PURGE, fcinfo, args, NULL);
		total += batch;
	} while (batch == PURGE_BATCH);
	return total;
}
