/*-------------------------------------------------------------------------
 *
 * common.c
 *	  What every layer above the arithmetic needs: the installation a call
 *	  serves, bucket names, subtransactions, set-returning results and the
 *	  right to read them, intervals and the deadline of a wait.
 *
 * An installation is one CREATE EXTENSION tokenbucket: a database, a
 * schema, and the tb_buckets table in it.  Shared memory and the kept
 * plans are keyed by that table's OID, so that DROP EXTENSION and CREATE
 * EXTENSION (in any schema) start afresh.
 *
 * src/common.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "bucket.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "common.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

/*
 * The error for a call whose extension objects are gone (DROP EXTENSION or
 * DROP SCHEMA in another session while this one held a reference).
 */
void
report_dropped(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("extension tokenbucket is not installed in this database"),
			 errdetail("Its schema or its table tb_buckets was dropped while this session was using it."),
			 errhint("Run CREATE EXTENSION tokenbucket, then call the function again.")));
}

/*
 * The tb_buckets table of each function called, and its owner (the
 * extension's), remembered per function (its schema may change, its table
 * does not), so that a call answered from shared memory looks nothing up
 * in the catalogs.
 */
#define TABLE_CACHE_SIZE 8
static struct
{
	Oid			function;
	Oid			table;
	Oid			owner;
	Oid			limits;			/* its tb_limits (InvalidOid before 1.6) */
}			table_cache[TABLE_CACHE_SIZE];
static int	table_cache_next = 0;

/* The cache slot of SQL function "function", filled on first use. */
static int
installation_slot(Oid function)
{
	Oid			schema;
	int			slot;
	HeapTuple	tuple;

	for (slot = 0; slot < TABLE_CACHE_SIZE; slot++)
		if (table_cache[slot].function == function)
			return slot;
	slot = table_cache_next;
	table_cache_next = (table_cache_next + 1) % TABLE_CACHE_SIZE;
	table_cache[slot].function = InvalidOid;
	schema = get_func_namespace(function);
	table_cache[slot].table = OidIsValid(schema) ?
		get_relname_relid("tb_buckets", schema) : InvalidOid;
	if (!OidIsValid(table_cache[slot].table))
		report_dropped();
	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(table_cache[slot].table));
	if (!HeapTupleIsValid(tuple))
		report_dropped();
	table_cache[slot].owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	table_cache[slot].limits = get_relname_relid("tb_limits", schema);
	table_cache[slot].function = function;
	return slot;
}

/* Fill "inst" from cache slot "slot". */
static void
installation_fill(Installation *inst, int slot)
{
	inst->table = table_cache[slot].table;
	inst->owner = table_cache[slot].owner;
	inst->limits = table_cache[slot].limits;
	inst->resolved = true;
}

/*
 * The installation of the SQL function called, to pass down: looked up
 * at its first use (installation_resolve()).
 */
Installation
installation_of(FunctionCallInfo fcinfo)
{
	Installation inst = {.function = fcinfo->flinfo->fn_oid};

	return inst;
}

/* Look the installation up: the tb_buckets in the schema of its function. */
void
installation_resolve(Installation *inst)
{
	installation_fill(inst, installation_slot(inst->function));
}

/*
 * The installation's tb_buckets, looked up afresh: fails when its
 * function or its table was dropped since the cache was filled (DROP
 * SCHEMA under an open cursor, say).
 */
Oid
installation_recheck(Installation *inst)
{
	int			slot = installation_slot(inst->function);
	Oid			schema = get_func_namespace(inst->function);
	Oid			table = OidIsValid(schema) ?
		get_relname_relid("tb_buckets", schema) : InvalidOid;

	if (table != table_cache[slot].table)
	{
		table_cache[slot].function = InvalidOid;
		if (!OidIsValid(table))
			report_dropped();
		slot = installation_slot(inst->function);
	}
	installation_fill(inst, slot);
	return inst->table;
}

/* Whether a name of "len" bytes is a template's: it ends in '*'. */
bool
is_template_key(const char *name, int len)
{
	return len > 0 && name[len - 1] == '*';
}

/* Whether "name" is a template's. */
bool
is_template_name(text *name)
{
	return is_template_key(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
}

/*
 * Fail on a standby: every entry point but the looks changes buckets, so
 * it says at once where to go instead of failing deep in an UPDATE (or
 * queueing a waiter that could never win).
 */
void
check_primary(void)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot take tokens or change token buckets on a standby"),
				 errdetail("This server is in recovery; every change to a bucket is a write."),
				 errhint("Call the tb_* functions on the primary. tb_peek and tb_status can be read here.")));
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
 * Run "step" in an internal subtransaction: kept when it returns true,
 * rolled back when it returns false (with every lock it took, and what
 * memory buckets granted in it).  An error of SQLSTATE "catch_sqlstate"
 * (0: none) rolls it back too, sets *caught and returns false; any other
 * goes on up once the subtransaction is gone.
 */
bool
subxact_run(bool (*step) (void *arg), void *arg, int catch_sqlstate,
			bool *caught)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile bool kept = false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);
	PG_TRY();
	{
		kept = step(arg);
		if (kept)
			ReleaseCurrentSubTransaction();
		else
			RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata = subxact_abort(oldcontext, oldowner);

		if (catch_sqlstate == 0 || edata->sqlerrcode != catch_sqlstate)
			ReThrowError(edata);
		FreeErrorData(edata);
		*caught = true;
		kept = false;
	}
	PG_END_TRY();
	return kept;
}

/*
 * Set up a set-returning function's result as a tuplestore of its row
 * type, in the query's memory; *desc is that type.
 */
Tuplestorestate *
materialize_begin(FunctionCallInfo fcinfo, TupleDesc *desc)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext oldcontext;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) ||
		(rsinfo->allowedModes & SFRM_Materialize) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	if (get_call_result_type(fcinfo, NULL, desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	oldcontext = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	*desc = CreateTupleDescCopy(*desc);
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult = tuplestore_begin_heap(true, false, work_mem);
	rsinfo->setDesc = *desc;
	MemoryContextSwitchTo(oldcontext);
	return rsinfo->setResult;
}

/*
 * Fail unless the caller may read one of "views" (NULL-terminated) of the
 * extension's schema: "function" shows what they show, to whoever may read
 * them (the views call it as their reader).
 */
void
check_may_read(Installation *inst, const char *function,
			   const char *const *views)
{
	Oid			namespace = get_rel_namespace(installation_table(inst));

	for (int i = 0; views[i] != NULL; i++)
	{
		Oid			view = get_relname_relid(views[i], namespace);

		if (OidIsValid(view) &&
			pg_class_aclcheck(view, GetUserId(), ACL_SELECT) == ACLCHECK_OK)
			return;
	}
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for view %s", views[0]),
			 errdetail("%s shows what %s shows, to those who may read it.",
					   function, views[0])));
}

/*
 * The index in the server's array of backend status entries of the
 * backend whose PGPROC is "proc" (the array is indexed so: see
 * pgstat_beinit()).
 */
#if PG_VERSION_NUM >= 170000
#define STATUS_INDEX(proc) ((int) GetNumberFromPGProc(proc))
#else
#define STATUS_INDEX(proc) ((int) (proc)->backendId - 1)
#endif

/*
 * The index of the status entry of the regular backend of process "pid"
 * (this one included), or -1 if there is none (it went, or it is not a
 * regular backend).
 */
int
backend_index(int pid)
{
	PGPROC	   *proc = pid == MyProcPid ? MyProc : BackendPidGetProc(pid);
	int			index;

	if (proc == NULL)
		return -1;
	index = STATUS_INDEX(proc);
	return index >= 0 && index < MaxBackends ? index : -1;
}

/*
 * Read the live status entry at "index" (backend_index()) into *look, as
 * the server's readers do: again until no write overlapped the read.
 * False if the entry is free.
 */
bool
backend_look(int index, BackendLook *look)
{
	volatile PgBackendStatus *entry;

	if (MyBEEntry == NULL)
		elog(ERROR, "this backend has no backend status entry");
	entry = MyBEEntry - STATUS_INDEX(MyProc) + index;
	for (;;)
	{
		int			before;
		int			after;

		pgstat_begin_read_activity(entry, before);
		look->pid = entry->st_procpid;
		look->proc_start = entry->st_proc_start_timestamp;
		look->state = (int) entry->st_state;
		look->state_start = entry->st_state_start_timestamp;
		snprintf(look->appname, NAMEDATALEN, "%s", (const char *) entry->st_appname);
		pgstat_end_read_activity(entry, after);
		if (pgstat_read_activity_complete(before, after))
			break;
		CHECK_FOR_INTERRUPTS();
	}
	return look->pid != 0;
}

/* Microseconds in an interval, months as 30 days; false if not finite. */
bool
interval_usecs(Interval *span, double *usecs)
{
#ifdef INTERVAL_NOT_FINITE
	if (INTERVAL_NOT_FINITE(span))
		return false;
#endif
	*usecs = (double) span->time +
		((double) span->month * DAYS_PER_MONTH + span->day) * USECS_PER_DAY;
	return true;
}

/*
 * The latest moment a wait may last until: NULL is no limit but
 * statement_timeout; a negative or infinite timeout is an error.
 */
TimestampTz
deadline_after(Interval *timeout, TimestampTz now)
{
	double		usecs;

	if (timeout == NULL)
		return DT_NOEND;
	if (!interval_usecs(timeout, &usecs) || usecs < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must be a finite interval of zero or more"),
				 errhint("Pass NULL to wait without a limit but statement_timeout.")));
	return timestamp_saturate((double) now + usecs);
}

/*
 * Whether an object access drops an installation (its tb_buckets table,
 * or its tb_limits, which its limits' counters are kept under: DROP
 * EXTENSION, DROP SCHEMA) or a database, and which: *dbid, and *relid
 * (InvalidOid: every installation of the database).
 */
bool
installation_dropped(ObjectAccessType access, Oid classId, Oid objectId, int subId,
					 Oid *dbid, Oid *relid)
{
	char	   *name;

	if (access != OAT_DROP)
		return false;
	if (classId == DatabaseRelationId)
	{
		*dbid = objectId;
		*relid = InvalidOid;
		return true;
	}
	if (classId != RelationRelationId || subId != 0)
		return false;
	name = get_rel_name(objectId);
	if (name == NULL ||
		(strcmp(name, "tb_buckets") != 0 && strcmp(name, "tb_limits") != 0))
		return false;
	*dbid = MyDatabaseId;
	*relid = objectId;
	return true;
}

/*
 * The reserve argument "argno" of the SQL function called: the share of
 * a bucket's capacity (or of a limit's slots) a call must leave for
 * others, from 0 (none) up to but not including 1.  0 when the function
 * has no such argument (argno -1: its SQL forms have none) or it is NULL
 * (no reserve).
 */
double
reserve_arg(FunctionCallInfo fcinfo, int argno)
{
	double		reserve;

	if (argno < 0 || PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return 0;
	reserve = PG_GETARG_FLOAT8(argno);
	if (!(reserve >= 0 && reserve < 1))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("reserve must be a finite number of 0 or more and below 1, not %s",
						float8out_internal(reserve)),
				 errdetail("A reserve is the share of a bucket's capacity, or of a limit's slots, that must be left after the call: 0.2 keeps the last 20%% for calls without it."),
				 errhint("Pass a share such as 0.2, or 0 for none (as without reserve).")));
	return reserve;
}

/* What an ensure did, as tb_ensure and tb_ensure_limit return it. */
text *
ensure_result_text(EnsureResult result)
{
	static const char *const did[] = {
		[ENSURE_CREATED] = "created",
		[ENSURE_CHANGED] = "changed",
		[ENSURE_UNCHANGED] = "unchanged"
	};

	return cstring_to_text(did[result]);
}

/*
 * The error for NULL argument "argno" of the SQL function "spec" names:
 * 22004, naming the argument.
 */
void
report_null_argument(const ArgsSpec *spec, int argno)
{
	ereport(ERROR,
			(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
			 errmsg("argument \"%s\" of %s must not be NULL",
					spec->names[argno], spec->function)));
}
