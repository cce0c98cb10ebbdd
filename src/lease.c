/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  SQL entry points of in-flight limits: checking arguments, and
 *	  handing each lease, release and change of limits to the limit
 *	  router.
 *
 * A limit allows at most max_in_flight slots held at once; a lease holds
 * slots until it is released, its holder (a session, or a transaction) is
 * gone, or its ttl passes.  Each entry point checks its arguments and
 * hands the request to the router (limit_router.c), which reads the
 * limit's configuration and chooses the store that keeps its leases: the
 * table's (lease_table.c) or shared memory's (lease_memory.c).
 *
 * src/lease.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common.h"
#include "lease.h"
#include "limit_router.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/* Longest limit name, as for a bucket. */
#define LIMIT_NAME_MAX_BYTES 1024

/* The hold named "hold": 'session' or 'transaction'. */
static LeaseHold
parse_hold(text *hold)
{
	char	   *value = text_to_cstring(hold);

	if (strcmp(value, "session") == 0)
		return HOLD_SESSION;
	if (strcmp(value, "transaction") == 0)
		return HOLD_TRANSACTION;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("hold must be 'session' or 'transaction', not '%s'", value),
			 errdetail("A lease held for the session is freed when the session ends; one held for the transaction, when the transaction commits or rolls back."),
			 errhint("Either is freed earlier by tb_release() or by its ttl.")));
	pg_unreachable();
}

/* Microseconds of a ttl: finite and above zero. */
static double
ttl_usecs(Interval *ttl)
{
	double		usecs;

	if (!interval_usecs(ttl, &usecs))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must be a finite interval"),
				 errhint("Pass NULL for a lease freed only by its holder.")));
	if (usecs <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must be an interval above zero"),
				 errhint("Pass NULL for a lease freed only by its holder.")));
	return usecs;
}

/* Reject a limit name that is empty or too long. */
static void
check_limit_name(text *name)
{
	if (VARSIZE_ANY_EXHDR(name) == 0 || VARSIZE_ANY_EXHDR(name) > LIMIT_NAME_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("limit name must be 1 to %d bytes long, not %zu",
						LIMIT_NAME_MAX_BYTES, VARSIZE_ANY_EXHDR(name))));
}

/* Reject a max_in_flight below one. */
static void
check_max_in_flight(int32 max_in_flight)
{
	if (max_in_flight < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_in_flight must be 1 or more, not %d", max_in_flight)));
}

/*
 * The lease that "name", "slots", "hold" and "ttl" ask for, with "reserve"
 * (already checked), checked: a hold, a ttl, a limit's name (not a
 * template's) and slots that can be; for the router to fill in the rest.
 */
LeaseRequest
lease_request(text *name, int32 slots, text *hold, Interval *ttl, double reserve)
{
	LeaseRequest request = {0};

	request.name = name;
	request.slots = slots;
	request.hold = parse_hold(hold);
	request.ttl_usecs = ttl == NULL ? 0 : ttl_usecs(ttl);
	request.reserve = reserve;
	check_limit_name(request.name);
	if (is_template_name(request.name))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("limit name \"%s\" is a template, not a limit",
						text_to_cstring(request.name)),
				 errdetail("A name ending in * is a template: it makes a limit for each name that starts with its prefix."),
				 errhint("Lease from a name after the prefix, as in 'user:42' for 'user:*'.")));
	if (request.slots < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("slots must be 1 or more, not %d", request.slots)));
	return request;
}

/* The LeaseRequest of tb_lease's and tb_lease_wait's arguments, and "reserve". */
static LeaseRequest
request_from_args(FunctionCallInfo fcinfo, double reserve)
{
	return lease_request(PG_GETARG_TEXT_PP(0), PG_GETARG_INT32(1), PG_GETARG_TEXT_PP(2),
						 PG_ARGISNULL(3) ? NULL : PG_GETARG_INTERVAL_P(3), reserve);
}

PG_FUNCTION_INFO_V1(tb_lease);

/*
 * tb_lease(name, slots, hold, ttl, reserve): lease "slots" slots of limit
 * "name"; the lease id, or NULL (nothing taken) when they are not free (or
 * would not leave the reserve's share of slots free; NULL: no reserve).
 */
Datum
tb_lease(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_lease", ARG_MAY_BE_NULL(3) | ARG_MAY_BE_NULL(4),
	{"name", "slots", "hold", "ttl", "reserve"}};
	Installation inst = installation_of(fcinfo);
	LeaseRequest request;

	check_not_null(fcinfo, &args);
	request = request_from_args(fcinfo, reserve_arg(fcinfo, 4));
	if (!limit_lease(&inst, &request, false, 0, NULL, NULL))
		PG_RETURN_NULL();
	PG_RETURN_INT64(request.lease);
}

PG_FUNCTION_INFO_V1(tb_lease_wait);

/*
 * tb_lease_wait(name, slots, hold, ttl, timeout, reserve): tb_lease,
 * waiting in arrival order until the slots are free (with the reserve's
 * besides), or NULL once "timeout" passed (NULL: no limit but
 * statement_timeout).
 */
Datum
tb_lease_wait(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_lease_wait",
		ARG_MAY_BE_NULL(3) | ARG_MAY_BE_NULL(4) | ARG_MAY_BE_NULL(5),
	{"name", "slots", "hold", "ttl", "timeout", "reserve"}};
	Installation inst = installation_of(fcinfo);
	TimestampTz deadline;
	LeaseRequest request;

	check_not_null(fcinfo, &args);
	deadline = deadline_after(PG_ARGISNULL(4) ? NULL : PG_GETARG_INTERVAL_P(4),
							  GetCurrentTimestamp());
	request = request_from_args(fcinfo, reserve_arg(fcinfo, 5));
	if (!limit_lease(&inst, &request, true, deadline, NULL, NULL))
		PG_RETURN_NULL();
	PG_RETURN_INT64(request.lease);
}

PG_FUNCTION_INFO_V1(tb_release);

/*
 * tb_release(lease): free the lease's slots; false when it held none (it
 * was released, its ttl passed, or its holder is gone).  Its holder's
 * role (or a member of it) may, and the extension's owner; to anyone else
 * a lease held is answered as one that holds nothing (false, no error),
 * so that neither its limit nor whether it is held shows.
 */
Datum
tb_release(PG_FUNCTION_ARGS)
{
	static const ArgsSpec spec = {"tb_release", 0, {"lease"}};
	Installation inst = installation_of(fcinfo);

	check_not_null(fcinfo, &spec);
	PG_RETURN_BOOL(limit_release(&inst, PG_GETARG_INT64(0)));
}

PG_FUNCTION_INFO_V1(tb_create_limit);

/*
 * tb_create_limit(name, max_in_flight, memory): a limit of at most
 * max_in_flight slots held at once; a name ending in * is a template.
 * With memory, its leases are kept in shared memory (1.6 declared it
 * without "memory").
 */
Datum
tb_create_limit(PG_FUNCTION_ARGS)
{
	static const ArgsSpec spec = {"tb_create_limit", 0, {"name", "max_in_flight", "memory"}};
	Installation inst = installation_of(fcinfo);
	text	   *name;
	int32		max_in_flight;
	bool		memory;

	check_not_null(fcinfo, &spec);
	name = PG_GETARG_TEXT_PP(0);
	max_in_flight = PG_GETARG_INT32(1);
	memory = PG_NARGS() > 2 && PG_GETARG_BOOL(2);
	check_limit_name(name);
	check_max_in_flight(max_in_flight);
	if (!limit_create(&inst, name, max_in_flight, memory))
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("limit \"%s\" already exists", text_to_cstring(name)),
				 errhint("Change it with tb_alter_limit(), or remove it with tb_drop().")));
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(tb_alter_limit);

/*
 * tb_alter_limit(name, max_in_flight): a new max_in_flight.  Leases held
 * are kept; after a lowering, new ones wait until those above the new
 * maximum are freed.  Waiters are woken: a raise may let them in.
 */
Datum
tb_alter_limit(PG_FUNCTION_ARGS)
{
	static const ArgsSpec spec = {"tb_alter_limit", 0, {"name", "max_in_flight"}};
	Installation inst = installation_of(fcinfo);
	text	   *name;
	int32		max_in_flight;

	check_not_null(fcinfo, &spec);
	name = PG_GETARG_TEXT_PP(0);
	max_in_flight = PG_GETARG_INT32(1);
	check_limit_name(name);
	check_max_in_flight(max_in_flight);
	limit_alter(&inst, name, max_in_flight);
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(tb_ensure_limit);

/*
 * tb_ensure_limit(name, max_in_flight, memory): tb_create_limit's limit,
 * made when missing ('created'), given this max_in_flight when it has
 * another ('changed': as tb_alter_limit, leases held are kept), or left
 * as it is ('unchanged').  A limit of the other kind is refused: where
 * its leases live is chosen when it is made.  A second session ensuring
 * a limit another has just made waits for that transaction, then finds
 * it (or, after a rollback, makes it).
 */
Datum
tb_ensure_limit(PG_FUNCTION_ARGS)
{
	static const ArgsSpec spec = {"tb_ensure_limit", 0, {"name", "max_in_flight", "memory"}};
	Installation inst = installation_of(fcinfo);
	text	   *name;
	int32		max_in_flight;

	check_not_null(fcinfo, &spec);
	name = PG_GETARG_TEXT_PP(0);
	max_in_flight = PG_GETARG_INT32(1);
	check_limit_name(name);
	check_max_in_flight(max_in_flight);
	PG_RETURN_TEXT_P(ensure_result_text(limit_ensure(&inst, name, max_in_flight,
													 PG_GETARG_BOOL(2))));
}

PG_FUNCTION_INFO_V1(tb_memory_leases);

/*
 * tb_memory_leases(): every memory lease of this installation held now
 * (name, lease, slots, hold, holder, pid, since, expires), copied under
 * the lock.  Empty without the library preloaded.
 */
Datum
tb_memory_leases(PG_FUNCTION_ARGS)
{
	Installation inst = installation_of(fcinfo);
	static const char *const views[] = {"tb_leases", "tb_status", "tb_stats", "tb_quotas", NULL};
	TupleDesc	desc;
	Tuplestorestate *store = materialize_begin(fcinfo, &desc);

	check_may_read(&inst, "tb_memory_leases()", views);
	limit_list(installation_table(&inst), store, desc);
	return (Datum) 0;
}
