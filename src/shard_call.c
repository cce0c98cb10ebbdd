/*-------------------------------------------------------------------------
 *
 * shard_call.c
 *	  tokenbucket_shard's calls for tokenbucket_proxy: one of tokenbucket's
 *	  functions run in a subtransaction, its result or its error as data;
 *	  and on the proxy, the bound on such a call (tokenbucket.proxy_timeout).
 *
 * PL/Proxy drops its connection to a shard after any error the shard
 * raises.  So the proxy calls tokenbucket_shard's tb_routed_<f>, which
 * runs tokenbucket's tb_<f> (same schema, same arguments) and returns
 * (result, error): the result, or the error it raised as {SQLSTATE,
 * message, detail, hint}, which the proxy raises again.  This is that
 * wrapper for the functions whose result is one value (tb_acquire and
 * its like): what a PL/pgSQL EXCEPTION block does (a subtransaction,
 * rolled back on error; a cancel not caught), without running PL/pgSQL
 * on every routed call.
 *
 * On the proxy's side, the bound on a call (tokenbucket.proxy_timeout):
 * PL/Proxy waits for a shard's answer as long as the statement lasts.  It
 * checks its query_timeout only when the shard's socket stirs or once it
 * has sent a cancel, and a SET statement_timeout inside a function takes
 * effect from the next statement only; so a shard that accepts and never
 * answers, or a frozen shard backend, held a caller with no
 * statement_timeout for ever.  tokenbucket_proxy's functions arm a timer
 * of their own around the call instead: it cancels the statement as
 * statement_timeout would (PL/Proxy then cancels the call on the shard),
 * and once more a second later, for a PL/Proxy waiting for that cancel
 * without a query_timeout.
 *
 * src/shard_call.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "common.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "shard_call.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/syscache.h"
#include "utils/timeout.h"

#define ROUTED_PREFIX "tb_routed_"

/*
 * What a backend keeps of a tb_routed_<f> it called: PL/Proxy sends each
 * call as a new statement, so a FmgrInfo's fn_extra would last one call.
 */
typedef struct RoutedCall
{
	Oid			routed;			/* the tb_routed_<f> */
	FmgrInfo	target;			/* tokenbucket's tb_<f> */
	TupleDesc	result;			/* (result, error text[]) */
} RoutedCall;

/* the functions a shard's backend calls are few: a short list will do */
#define ROUTED_CALLS_KEPT 32

static RoutedCall routed_calls[ROUTED_CALLS_KEPT];
static int	nrouted_calls = 0;

/* what routed_calls[] point to: reset when the list starts again */
static MemoryContext routed_calls_context = NULL;

/*
 * A function was changed, made or dropped: look every one up again.  What
 * the list kept is freed when it starts again, not here: a call under way
 * may still be using it.
 */
static void
routed_calls_forget(Datum arg, int cacheid, uint32 hashvalue)
{
	nrouted_calls = 0;
}

/*
 * The function tb_routed_<f> "routed" runs: tb_<f> of its schema, with its
 * arguments.
 */
static Oid
routed_target(Oid routed)
{
	HeapTuple	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(routed));
	Form_pg_proc proc;
	const char *name;
	char	   *target;
	Oid			oid;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for function %u", routed);
	proc = (Form_pg_proc) GETSTRUCT(tuple);
	name = NameStr(proc->proname);
	if (strncmp(name, ROUTED_PREFIX, strlen(ROUTED_PREFIX)) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_FUNCTION_DEFINITION),
				 errmsg("function \"%s\" is not a routed call of tokenbucket", name),
				 errdetail("tb_routed_call runs tb_<f> for a function named tb_routed_<f>.")));
	target = psprintf("tb_%s", name + strlen(ROUTED_PREFIX));
	oid = LookupFuncName(list_make2(makeString(get_namespace_name(proc->pronamespace)),
									makeString(target)),
						 proc->pronargs, proc->proargtypes.values, false);
	ReleaseSysCache(tuple);
	return oid;
}

/*
 * What this backend keeps of the tb_routed_<f> called: made on its first
 * call (not inlined into a function that calls setjmp).
 */
static pg_noinline RoutedCall *
routed_call_of(FunctionCallInfo fcinfo)
{
	Oid			routed = fcinfo->flinfo->fn_oid;
	RoutedCall *call;
	MemoryContext old;
	TupleDesc	desc;
	Oid			target;

	for (int i = 0; i < nrouted_calls; i++)
		if (routed_calls[i].routed == routed)
			return &routed_calls[i];
	if (routed_calls_context == NULL)
	{
		CacheRegisterSyscacheCallback(PROCOID, routed_calls_forget, (Datum) 0);
		routed_calls_context = AllocSetContextCreate(TopMemoryContext,
													 "tokenbucket routed calls",
													 ALLOCSET_SMALL_SIZES);
	}
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE ||
		desc->natts != 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_FUNCTION_DEFINITION),
				 errmsg("a routed call of tokenbucket must return (result, error text[])")));
	target = routed_target(routed);
	if (nrouted_calls == ROUTED_CALLS_KEPT)
		nrouted_calls = 0;		/* more than a shard calls: start again */
	/* the list starts again: nothing it kept is used any more */
	if (nrouted_calls == 0)
		MemoryContextReset(routed_calls_context);
	call = &routed_calls[nrouted_calls];
	old = MemoryContextSwitchTo(routed_calls_context);
	fmgr_info_cxt(target, &call->target, routed_calls_context);
	call->result = BlessTupleDesc(CreateTupleDescCopy(desc));
	MemoryContextSwitchTo(old);
	call->routed = routed;
	nrouted_calls++;
	return call;
}

/*
 * Fail unless the current user may execute function "oid", as a call in a
 * statement would; and tell the object access hook, as the executor does.
 */
static void
check_execute(Oid oid)
{
	AclResult	result;

#if PG_VERSION_NUM >= 160000
	result = object_aclcheck(ProcedureRelationId, oid, GetUserId(), ACL_EXECUTE);
#else
	result = pg_proc_aclcheck(oid, GetUserId(), ACL_EXECUTE);
#endif
	if (result != ACLCHECK_OK)
		aclcheck_error(result, OBJECT_FUNCTION, get_func_name(oid));
	InvokeFunctionExecuteHook(oid);
}

/* An error as tokenbucket_proxy raises it again: {SQLSTATE, message, detail, hint}. */
static Datum
error_as_data(const ErrorData *edata)
{
	Datum		elems[4];
	bool		nulls[4] = {false, false, true, true};
	int			dims[1] = {4};
	int			lbs[1] = {1};

	elems[0] = CStringGetTextDatum(unpack_sql_state(edata->sqlerrcode));
	elems[1] = CStringGetTextDatum(edata->message ? edata->message : "");
	if (edata->detail != NULL && edata->detail[0] != '\0')
	{
		elems[2] = CStringGetTextDatum(edata->detail);
		nulls[2] = false;
	}
	if (edata->hint != NULL && edata->hint[0] != '\0')
	{
		elems[3] = CStringGetTextDatum(edata->hint);
		nulls[3] = false;
	}
	return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs, TEXTOID,
											  -1, false, TYPALIGN_INT));
}

/*
 * tb_routed_<f>(args of tb_<f>) returns (result, error text[]), a named
 * row type (tokenbucket_shard's tb_routed_result_<type>): tb_<f>'s
 * result, or its error as data (a cancel, or a failed assertion, raised
 * as it came, as PL/pgSQL's WHEN OTHERS leaves them).
 */
PG_FUNCTION_INFO_V1(tb_routed_call);
Datum
tb_routed_call(PG_FUNCTION_ARGS)
{
	RoutedCall *call = routed_call_of(fcinfo);
	MemoryContext caller = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	LOCAL_FCINFO(target, FUNC_MAX_ARGS);
	Datum		values[2] = {0, 0};
	bool		nulls[2] = {true, true};

	InitFunctionCallInfoData(*target, &call->target, PG_NARGS(), PG_GET_COLLATION(),
							 NULL, NULL);
	for (int i = 0; i < PG_NARGS(); i++)
	{
		/* a strict function is not called with a NULL: its result is NULL */
		if (fcinfo->args[i].isnull && call->target.fn_strict)
			PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(call->result, values, nulls)));
		target->args[i] = fcinfo->args[i];
	}

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(caller);
	PG_TRY();
	{
		/* what the executor checks before it calls a function */
		check_execute(call->target.fn_oid);
		values[0] = FunctionCallInvoke(target);
		nulls[0] = target->isnull;
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(caller);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata = subxact_abort(caller, owner);

		if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED ||
			edata->sqlerrcode == ERRCODE_ASSERT_FAILURE)
			ReThrowError(edata);
		values[0] = (Datum) 0;
		nulls[0] = true;
		values[1] = error_as_data(edata);
		nulls[1] = false;
		FreeErrorData(edata);
	}
	PG_END_TRY();
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(call->result, values, nulls)));
}

/* tokenbucket.proxy_timeout, in milliseconds: 0, none */
static int	proxy_timeout_ms = 5000;

/* the bound's two timers (its cancel, and the one a second later) */
static TimeoutId bound_timers[2];
static bool bound_timers_made = false;
static volatile sig_atomic_t bound_fired = false;

/* The setting, on the proxy (defined wherever the library is loaded). */
void
shard_call_init(void)
{
	DefineCustomIntVariable("tokenbucket.proxy_timeout",
							"Longest a call through tokenbucket_proxy waits for its shard.",
							"Then the call is cancelled there and fails with 08006; a wait's own timeout is added to it. 0: no bound but statement_timeout.",
							&proxy_timeout_ms,
							5000, 0, INT_MAX / 2,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
}

/* A bound timer fired: cancel the statement, as statement_timeout does. */
static void
bound_passed(void)
{
	bound_fired = true;
	InterruptPending = true;
	QueryCancelPending = true;
}

PG_FUNCTION_INFO_V1(tb_proxy_bound);

/*
 * tb_proxy_bound(kind, timeout): bound the routed call about to be made
 * by tokenbucket.proxy_timeout from now; for a wait (kind 'wait'), from
 * its timeout, and not at all without one (NULL: no limit but
 * statement_timeout).  tb_proxy_unbound() ends it.
 */
Datum
tb_proxy_bound(PG_FUNCTION_ARGS)
{
	double		wait_usecs = 0;
	int			bound_ms;

	if (!bound_timers_made)
	{
		bound_timers[0] = RegisterTimeout(USER_TIMEOUT, bound_passed);
		bound_timers[1] = RegisterTimeout(USER_TIMEOUT, bound_passed);
		bound_timers_made = true;
	}
	bound_fired = false;
	disable_timeouts((DisableTimeoutParams[]) {{bound_timers[0], false},
					 {bound_timers[1], false}}, 2);
	if (!PG_ARGISNULL(0) && strcmp(text_to_cstring(PG_GETARG_TEXT_PP(0)), "wait") == 0)
	{
		if (PG_ARGISNULL(1))
			PG_RETURN_VOID();
		/* a timeout the shard will refuse: bound from now */
		if (!interval_usecs(PG_GETARG_INTERVAL_P(1), &wait_usecs) || !(wait_usecs > 0))
			wait_usecs = 0;
	}
	if (proxy_timeout_ms <= 0)
		PG_RETURN_VOID();
	bound_ms = (int) Min((double) proxy_timeout_ms + wait_usecs / 1000.0, INT_MAX - 1000.0);
	enable_timeouts((EnableTimeoutParams[]) {
		{.id = bound_timers[0], .type = TMPARAM_AFTER, .delay_ms = bound_ms},
		{.id = bound_timers[1], .type = TMPARAM_AFTER, .delay_ms = bound_ms + 1000}}, 2);
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(tb_proxy_unbound);

/*
 * tb_proxy_unbound(): end the bound of tb_proxy_bound(); whether it passed
 * (a cancel of its own still pending is dropped: the call is over).
 */
Datum
tb_proxy_unbound(PG_FUNCTION_ARGS)
{
	bool		fired = bound_fired;

	if (bound_timers_made)
		disable_timeouts((DisableTimeoutParams[]) {{bound_timers[0], false},
						 {bound_timers[1], false}}, 2);
	if (fired)
		QueryCancelPending = false;
	bound_fired = false;
	PG_RETURN_BOOL(fired);
}
