/*-------------------------------------------------------------------------
 *
 * table_store.c
 *	  The table store: tb_buckets, through SPI on plans prepared once per
 *	  backend.  It also finds the settings of memory buckets
 *	  (memory_store.c), which are rows too, and sends each call to the
 *	  store that holds the bucket's tokens.
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
 * src/table_store.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "tokenbucket.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/resowner.h"
#include "utils/syscache.h"

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
	Oid			argtypes[7];
} PlanDef;

static const PlanDef plan_defs[NUM_PLANS] = {
	[PLAN_TAKE] = {
		"UPDATE %1$s.tb_buckets AS b"
		" SET deficit = %1$s.tb_take(" TAKE_ARGS "),"
		" updated_at = GREATEST(b.updated_at, $3)"
		" WHERE b.name OPERATOR(pg_catalog.=) $1 AND NOT b.memory"
		" AND CASE WHEN b.name OPERATOR(pg_catalog.=) $1 AND NOT b.memory"
		" THEN %1$s.tb_take(" TAKE_ARGS ") END IS NOT NULL"
		" RETURNING " BUCKET_COLUMNS,
		3, {TEXTOID, FLOAT8OID, TIMESTAMPTZOID}
	},
	[PLAN_READ] = {
		"SELECT " BUCKET_COLUMNS ", memory, template FROM %1$s.tb_buckets"
		" WHERE name OPERATOR(pg_catalog.=) $1",
		1, {TEXTOID}
	},
	[PLAN_LOCK] = {
		"SELECT " BUCKET_COLUMNS ", memory FROM %1$s.tb_buckets"
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
	[PLAN_INSERT] = {
		"INSERT INTO %1$s.tb_buckets (name, capacity, refill_rate, deficit, updated_at, template, memory)"
		" VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (name) DO NOTHING",
		7, {TEXTOID, FLOAT8OID, FLOAT8OID, FLOAT8OID, TIMESTAMPTZOID, TEXTOID, BOOLOID}
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
		"SELECT capacity, refill_rate, name, memory FROM %1$s.tb_buckets"
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

/* The tb_buckets table in the schema of the function called. */
static Oid
lookup_table(FunctionCallInfo fcinfo)
{
	Oid			schema = get_func_namespace(fcinfo->flinfo->fn_oid);
	Oid			table = OidIsValid(schema) ? get_relname_relid("tb_buckets", schema) : InvalidOid;

	if (!OidIsValid(table))
		report_dropped();
	return table;
}

/*
 * The tb_buckets table of the function called, remembered per function
 * (its schema may change, its table does not), so that a call answered
 * from shared memory looks nothing up in the catalogs.
 */
#define TABLE_CACHE_SIZE 8
static struct
{
	Oid			function;
	Oid			table;
	Oid			owner;			/* the table's: the extension's owner */
}			table_cache[TABLE_CACHE_SIZE];
static int	table_cache_next = 0;

/* store_relid(), and the table's owner in *owner. */
static Oid
store_relid_owner(FunctionCallInfo fcinfo, Oid *owner)
{
	Oid			function = fcinfo->flinfo->fn_oid;
	int			slot;
	HeapTuple	tuple;

	for (slot = 0; slot < TABLE_CACHE_SIZE; slot++)
		if (table_cache[slot].function == function)
		{
			*owner = table_cache[slot].owner;
			return table_cache[slot].table;
		}
	slot = table_cache_next;
	table_cache_next = (table_cache_next + 1) % TABLE_CACHE_SIZE;
	table_cache[slot].function = InvalidOid;
	table_cache[slot].table = lookup_table(fcinfo);
	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(table_cache[slot].table));
	if (!HeapTupleIsValid(tuple))
		report_dropped();
	table_cache[slot].owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	table_cache[slot].function = function;
	*owner = table_cache[slot].owner;
	return table_cache[slot].table;
}

Oid
store_relid(FunctionCallInfo fcinfo)
{
	Oid			owner;

	return store_relid_owner(fcinfo, &owner);
}

/*
 * The table whose kept plans this backend holds, if it is the called
 * function's: then its version was checked, and a memory bucket's entry
 * can be used without SPI.  InvalidOid otherwise.
 */
Oid
store_checked_relid(FunctionCallInfo fcinfo)
{
	Oid			table = store_relid(fcinfo);

	return table == plans_table ? table : InvalidOid;
}

/*
 * Make sure the kept plans are for the table in the calling function's
 * schema, and return it: after DROP EXTENSION and CREATE EXTENSION (in any
 * schema, at any version) within one backend, the plans and the version
 * check start afresh.
 */
static Oid
check_table(FunctionCallInfo fcinfo)
{
	Oid			table = lookup_table(fcinfo);

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
	return table;
}

/* The kept plan for "id", prepared on first use. */
static SPIPlanPtr
get_plan(PlanId id, FunctionCallInfo fcinfo)
{
	(void) check_table(fcinfo);
	if (plans[id] == NULL)
	{
		const PlanDef *def = &plan_defs[id];
		char	   *nspname = get_namespace_name(get_func_namespace(fcinfo->flinfo->fn_oid));
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

/*
 * Copy the bucket state out of the first row SPI returned, and free it;
 * *memory (unless NULL) is the row's memory column, when it has one.
 */
static void
read_bucket(Bucket *bucket, bool *memory)
{
	HeapTuple	tuple = SPI_tuptable->vals[0];
	TupleDesc	desc = SPI_tuptable->tupdesc;
	bool		isnull;

	bucket->capacity = DatumGetFloat8(SPI_getbinval(tuple, desc, 1, &isnull));
	bucket->refill_rate = DatumGetFloat8(SPI_getbinval(tuple, desc, 2, &isnull));
	bucket->deficit = DatumGetFloat8(SPI_getbinval(tuple, desc, 3, &isnull));
	bucket->updated_at = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 4, &isnull));
	bucket->paused_until = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 5, &isnull));
	if (memory != NULL)
		*memory = DatumGetBool(SPI_getbinval(tuple, desc, 6, &isnull));
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
 * bucket it would make at "now", "template" its name (copied into the
 * current memory context) and *memory its kind.  False when no template
 * matches.  Templates are never made from templates.
 */
static bool
find_template(FunctionCallInfo fcinfo, text *name, TimestampTz now,
			  Bucket *bucket, text **template, bool *memory)
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
	*memory = DatumGetBool(SPI_getbinval(tuple, desc, 4, &isnull));
	SPI_freetuptable(SPI_tuptable);
	SPI_tuptable = NULL;
	return true;
}

/* Where a bucket's settings come from. */
typedef enum Settings
{
	SETTINGS_NONE,				/* no such bucket */
	SETTINGS_ROW,				/* its own row */
	SETTINGS_TEMPLATE			/* the template it is (or would be) made from */
} Settings;

/*
 * Find the settings of bucket "name": its row (with the row's state), or
 * the template that would make it (as a full bucket).  *memory says which
 * store holds its tokens; *template is the template's name.
 */
static Settings
find_settings(FunctionCallInfo fcinfo, text *name, TimestampTz now,
			  Bucket *bucket, text **template, bool *memory)
{
	Datum		args[1] = {PointerGetDatum(name)};

	if (run_plan(PLAN_READ, fcinfo, args, NULL) == 1)
	{
		read_bucket(bucket, memory);
		return SETTINGS_ROW;
	}
	if (find_template(fcinfo, name, now, bucket, template, memory))
		return SETTINGS_TEMPLATE;
	return SETTINGS_NONE;
}

/*
 * If bucket "name" is a memory bucket, make sure it has an entry (made
 * from its row or its template) and return true.  Settings committed
 * between reading them and making the entry are read again, so that an
 * entry never starts with settings older than the newest committed.
 */
static bool
ensure_memory(FunctionCallInfo fcinfo, Oid relid, text *name, TimestampTz now)
{
	for (int attempt = 0;; attempt++)
	{
		/* read before the query takes its snapshot */
		uint64		seen = memory_changes();
		Bucket		settings;
		text	   *template = NULL;
		bool		memory = false;
		Settings	found = find_settings(fcinfo, name, now, &settings, &template, &memory);

		if (found == SETTINGS_NONE || !memory)
			return false;
		/* a transaction snapshot never sees newer settings: take them as read */
		if (attempt >= 2)
			seen = memory_changes();
		if (memory_make(relid, name, &settings,
						found == SETTINGS_TEMPLATE ? VARSIZE_ANY_EXHDR(template) - 1 : 0,
						seen))
			return true;
	}
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
	Datum		args[7];

	args[0] = PointerGetDatum(name);
	args[1] = Float8GetDatum(bucket->capacity);
	args[2] = Float8GetDatum(bucket->refill_rate);
	args[3] = Float8GetDatum(bucket->deficit);
	args[4] = TimestampTzGetDatum(bucket->updated_at);
	args[5] = PointerGetDatum(template);
	args[6] = BoolGetDatum(false);
	return run_plan(PLAN_INSERT, fcinfo, args, NULL) == 1;
}

/*
 * Fail when a request's cost could never be granted by its bucket: above
 * its capacity, or too small for its arithmetic to account for.  The
 * message names no setting of the bucket: the caller may not be allowed to
 * read them (tb_status shows them to whoever may).
 */
void
store_check_cost(const Request *request)
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

/*
 * Start the table work of the function called: on the primary (unless only
 * looking), as the extension's owner, with search_path = pg_catalog,
 * pg_temp and sequential scans off (kept plans stay index lookups), and
 * connected to SPI.  What SECURITY DEFINER and SET would do, but only
 * around the table work, so that a call answered from shared memory pays
 * for none of it.  An error undoes it all with the (sub)transaction.
 */
StoreSession
store_connect(FunctionCallInfo fcinfo, bool writes)
{
	StoreSession session;
	Oid			owner;
	int			rc;

	if (writes)
		store_check_primary();
	(void) store_relid_owner(fcinfo, &owner);
	GetUserIdAndSecContext(&session.userid, &session.sec_context);
	SetUserIdAndSecContext(owner, session.sec_context | SECURITY_LOCAL_USERID_CHANGE);
	session.nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_seqscan", "off", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	rc = SPI_connect();
	if (rc != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed: %s", SPI_result_code_string(rc));
	return session;
}

/*
 * Let the rest of the session's table work scan tb_buckets whole (what
 * tb_purge does), until store_finish().
 */
void
store_allow_seqscan(void)
{
	(void) set_config_option("enable_seqscan", "on", PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
}

/* End what store_connect() began, or fail loudly. */
void
store_finish(StoreSession *session)
{
	int			rc = SPI_finish();

	if (rc != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed: %s", SPI_result_code_string(rc));
	AtEOXact_GUC(true, session->nestlevel);
	SetUserIdAndSecContext(session->userid, session->sec_context);
}

/*
 * Look at the request's bucket at "now" without locking or writing it: its
 * state, or the state of the bucket its template would make (a memory
 * bucket without an entry: the state its entry would start with).  Fails
 * if there is no such bucket, or if the cost could never be granted.
 */
void
store_peek(FunctionCallInfo fcinfo, Request *request, TimestampTz now)
{
	Oid			relid = check_table(fcinfo);
	text	   *template;
	bool		memory = false;
	Settings	found;

	if (!memory_peek(relid, request))
	{
		found = find_settings(fcinfo, request->name, now, &request->bucket,
							  &template, &memory);
		if (found == SETTINGS_NONE)
			report_missing(request->name);
		if (memory)
			memory_absent(request, &request->bucket, now);
	}
	store_check_cost(request);
}

/*
 * Take the request's cost from its bucket at "now" if it grants it.  Either
 * way request->bucket is left with the bucket's state after the decision.
 * A cost of 0 only looks: it changes nothing, so it writes nothing.
 */
bool
store_take(FunctionCallInfo fcinfo, Request *request, TimestampTz now)
{
	Oid			relid = check_table(fcinfo);
	Datum		args[3];
	bool		granted;

	if (memory_take(relid, request, now, &granted))
	{
		if (!granted)
			store_check_cost(request);
		return granted;
	}
	if (request->cost == 0)
	{
		store_peek(fcinfo, request, now);
		return bucket_holds(&request->bucket, 0, now);
	}

	args[0] = PointerGetDatum(request->name);
	args[1] = Float8GetDatum(request->cost);
	args[2] = TimestampTzGetDatum(now);

	/* more rounds only when the bucket was made meanwhile */
	for (int attempt = 0; attempt < 3; attempt++)
	{
		text	   *template;
		bool		memory;

		take_watch_begin();
		if (run_plan(PLAN_TAKE, fcinfo, args, NULL) == 1)
		{
			read_bucket(&request->bucket, NULL);
			return true;
		}
		/* denied: tb_take() saw the row, so it exists; no second read */
		if (take_watch_denied(&request->bucket))
		{
			store_check_cost(request);
			return false;
		}
		/* no table bucket: a memory bucket, or one to make from a template */
		if (ensure_memory(fcinfo, relid, request->name, now))
		{
			if (memory_take(relid, request, now, &granted))
			{
				if (!granted)
					store_check_cost(request);
				return granted;
			}
			continue;
		}
		if (!find_template(fcinfo, request->name, now, &request->bucket, &template, &memory))
		{
			/* a table bucket made since the UPDATE looked? */
			if (run_plan(PLAN_READ, fcinfo, (Datum *) args, NULL) == 0)
				break;
			SPI_freetuptable(SPI_tuptable);
			SPI_tuptable = NULL;
			continue;
		}
		if (memory)
			continue;			/* a memory template made since */
		store_check_cost(request);
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
 * session took its tokens since the look; what memory buckets granted is
 * given back with it); the states are then looked at afresh for the
 * report.
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
 * The length of the prefix of the template bucket "name" was (or would be)
 * made from, without its *; 0 when it has none.  For stats_count(), which
 * asks once per bucket, outside any store session.
 */
int
store_template_len(FunctionCallInfo fcinfo, text *name)
{
	StoreSession session;
	Datum		args[1] = {PointerGetDatum(name)};
	Bucket		bucket;
	text	   *template = NULL;
	bool		memory;
	int			len = memory_template_len(store_relid(fcinfo), name);

	if (len >= 0)
		return len;
	session = store_connect(fcinfo, false);
	if (run_plan(PLAN_READ, fcinfo, args, NULL) == 1)
	{
		bool		isnull;
		Datum		datum = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
										  7, &isnull);

		if (!isnull)
			template = DatumGetTextPCopy(datum);
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
	}
	else
		(void) find_template(fcinfo, name, GetCurrentTimestamp(), &bucket,
							 &template, &memory);
	store_finish(&session);
	return template ? VARSIZE_ANY_EXHDR(template) - 1 : 0;
}

/*
 * Lock the row of bucket "name" for an update and read its state; false
 * when it has none.  *memory is its kind.
 */
static bool
lock_row(FunctionCallInfo fcinfo, text *name, Bucket *bucket, bool *memory)
{
	Datum		args[1] = {PointerGetDatum(name)};

	if (run_plan(PLAN_LOCK, fcinfo, args, NULL) == 0)
		return false;
	read_bucket(bucket, memory);
	return true;
}

/* Write the state of a bucket locked with lock_row(). */
static void
write_row(FunctionCallInfo fcinfo, text *name, const Bucket *bucket)
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
 * Make table bucket "name" from its template if it has no row yet; false
 * when no template makes it.
 */
static bool
create_from_template(FunctionCallInfo fcinfo, text *name, TimestampTz now)
{
	Bucket		bucket;
	text	   *template;
	bool		memory;

	if (!find_template(fcinfo, name, now, &bucket, &template, &memory) || memory)
		return false;
	(void) insert_made(fcinfo, name, &bucket, template);
	return true;
}

/* Fail when a change leaves a deficit float8 cannot hold. */
static void
check_debt(text *name, const Bucket *bucket)
{
	if (!isfinite(bucket->deficit))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("debt of token bucket \"%s\" out of range", text_to_cstring(name)),
				 errdetail("Taking that many more tokens would put the bucket in a debt float8 cannot hold.")));
}

/*
 * Let "change" alter the state of bucket "name" at "now", in whichever
 * store holds it (a table bucket's row locked, a template's bucket made
 * first), and return the state after.  Every change that is not a grant
 * or a new setting goes through here.
 */
Bucket
store_update(FunctionCallInfo fcinfo, text *name, BucketChange change,
			 const void *arg, TimestampTz now)
{
	Oid			relid = check_table(fcinfo);
	Bucket		bucket;
	bool		memory = false;

	for (int attempt = 0; attempt < 3; attempt++)
	{
		if (memory_change(relid, name, change, arg, now, &bucket))
		{
			check_debt(name, &bucket);
			return bucket;
		}
		if (lock_row(fcinfo, name, &bucket, &memory) && !memory)
		{
			change(&bucket, now, arg);
			check_debt(name, &bucket);
			write_row(fcinfo, name, &bucket);
			return bucket;
		}
		if (!ensure_memory(fcinfo, relid, name, now) &&
			!create_from_template(fcinfo, name, now))
			break;
	}
	report_missing(name);
	pg_unreachable();
}

/*
 * Give bucket "name" new settings at "now" (NaN keeps one), keeping the
 * tokens it holds, capped at the new capacity.  A template passes them on
 * to every bucket made from it.  A memory bucket's entry takes them when
 * the transaction commits.
 */
void
store_alter(FunctionCallInfo fcinfo, text *name, double capacity,
			double refill_rate, TimestampTz now)
{
	Oid			relid = check_table(fcinfo);

	for (int attempt = 0; attempt < 3; attempt++)
	{
		Bucket		bucket;
		bool		memory;

		if (lock_row(fcinfo, name, &bucket, &memory))
		{
			Datum		args[4];

			bucket_reconfigure(&bucket,
							   isnan(capacity) ? bucket.capacity : capacity,
							   isnan(refill_rate) ? bucket.refill_rate : refill_rate,
							   now);
			if (is_template_name(name))
			{
				bucket.deficit = 0; /* a template is always full */
				args[0] = PointerGetDatum(name);
				args[1] = Float8GetDatum(bucket.capacity);
				args[2] = Float8GetDatum(bucket.refill_rate);
				args[3] = TimestampTzGetDatum(now);
				(void) run_plan(PLAN_ALTER_MADE, fcinfo, args, NULL);
			}
			/* a memory bucket's row: its trigger tells the entries */
			write_row(fcinfo, name, &bucket);
			return;
		}
		/* a bucket made from a memory template has no row */
		if (memory_alter(relid, name, capacity, refill_rate))
			return;
		if (!ensure_memory(fcinfo, relid, name, now) &&
			!create_from_template(fcinfo, name, now))
			break;
	}
	report_missing(name);
}

/* Fail unless bucket "name" exists, or its template would make it. */
void
store_require(FunctionCallInfo fcinfo, text *name)
{
	Request		request = {.name = name, .cost = 0};

	store_peek(fcinfo, &request, GetCurrentTimestamp());
}

/*
 * Insert a new full bucket; false when the name is taken.  A memory
 * bucket's entry is made when the transaction commits.
 */
bool
store_insert(FunctionCallInfo fcinfo, text *name, double capacity,
			 double refill_rate, bool memory, TimestampTz now)
{
	Datum		args[7];

	if (memory)
		memory_check_name(VARSIZE_ANY_EXHDR(name) - (is_template_name(name) ? 1 : 0));
	args[0] = PointerGetDatum(name);
	args[1] = Float8GetDatum(capacity);
	args[2] = Float8GetDatum(refill_rate);
	args[3] = Float8GetDatum(0);
	args[4] = TimestampTzGetDatum(now);
	args[5] = (Datum) 0;
	args[6] = BoolGetDatum(memory);
	return run_plan(PLAN_INSERT, fcinfo, args, "     n ") == 1;
}

/*
 * Delete bucket "name"; false when there was none.  A template takes the
 * buckets made from it along: they would never be made again.  A memory
 * bucket's entry goes when the transaction commits.
 */
bool
store_delete(FunctionCallInfo fcinfo, text *name)
{
	Oid			relid = check_table(fcinfo);
	Datum		args[1] = {PointerGetDatum(name)};
	bool		deleted = run_plan(PLAN_DELETE, fcinfo, args, NULL) > 0;

	if (deleted && is_template_name(name))
		(void) run_plan(PLAN_DELETE_MADE, fcinfo, args, NULL);
	if (!deleted)
		deleted = memory_drop(relid, name);
	return deleted;
}

/*
 * Delete template-made buckets that are full, unpaused and unwritten since
 * "idle_since", a batch at a time, skipping rows other sessions hold; and
 * remove such memory buckets' entries.
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
	return total + memory_purge(check_table(fcinfo), idle_since, now);
}
