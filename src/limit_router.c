/*-------------------------------------------------------------------------
 *
 * limit_router.c
 *	  One place that finds where each limit keeps its leases and hands
 *	  every lease, release and change of limits to that store, and counts
 *	  what it did.
 *
 * A limit's row of tb_limits (limit_config.c) says which store keeps its
 * leases: the table store (lease_table.c) or the memory store
 * (lease_memory.c).  The router asks them in the order that costs least: a
 * memory limit whose configuration this backend keeps, current, is leased
 * in shared memory without a statement; any other name first tries the
 * table's UPDATE, which finds the limit itself, and only when that finds
 * no slot does the router read the limit: a memory limit's lease is then
 * taken in shared memory (and its configuration kept), a table limit
 * lacking slots has them made and is tried once more.  A release goes to
 * the store whose ids it is of.  Every decision is counted (stats.c) under
 * the installation's tb_limits once its store has answered; a store counts
 * the slots it finds freed itself.
 *
 * Changes to limits reach the stores through the trigger on tb_limits
 * (tb_limits_changed below), at commit.  A change that would have a name
 * whose leases are held take its next ones from the other store (where
 * those held would not count), or rename the limit they were taken
 * under, is refused there (check_leases_stay()).
 *
 * src/limit_router.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/sysattr.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common.h"
#include "limit_config.h"
#include "limit_router.h"
#include "limit_wake.h"
#include "miscadmin.h"
#include "spi_session.h"
#include "stats.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "wait.h"

/* Every store, in the order the router asks them when it asks all. */
static const LimitStoreRoutine *const stores[] = {&memory_limit_store, &table_limit_store};
#define NUM_STORES ((int) lengthof(stores))

/* tb_drop() is deleting a limit's row: its trigger leaves the check to it. */
static bool dropping = false;

/* The store a limit's configuration says keeps its leases. */
static const LimitStoreRoutine *
store_of(bool memory)
{
	return memory ? &memory_limit_store : &table_limit_store;
}

/* The store whose ids lease "lease" is of. */
static const LimitStoreRoutine *
store_of_lease(int64 lease)
{
	for (int i = 0; i < NUM_STORES; i++)
		if (limit_store_owns(stores[i], lease))
			return stores[i];
	elog(ERROR, "no store gives lease id " INT64_FORMAT, lease);
	pg_unreachable();
}

/*
 * Initialize every store at library load; each must have what is not
 * optional in limit_store.h.
 */
void
limit_router_init(void)
{
	for (int i = 0; i < NUM_STORES; i++)
	{
		Assert(stores[i]->take != NULL && stores[i]->owns != NULL &&
			   stores[i]->release != NULL && stores[i]->drop != NULL &&
			   stores[i]->held != NULL);
		limit_store_init(stores[i]);
	}
}

/*
 * An installation (or a database: "relid" InvalidOid) is being dropped:
 * every store forgets its leases when the dropping transaction commits
 * (the table's are rows of its tables, and go with them).
 */
void
limit_router_forget(Oid dbid, Oid relid)
{
	for (int i = 0; i < NUM_STORES; i++)
		limit_store_forget(stores[i], dbid, relid);
}

/* stats_count_limit() template_of: the length of request "arg"'s template's name. */
static int
template_len_of(void *arg)
{
	LeaseRequest *request = arg;

	return limit_config_template_len(request->relid, request->name);
}

/*
 * Count "delta" for the limit of "request" when the transaction ends (its
 * leases and slots freed only if it commits), under its tb_limits.
 */
static void
count(LeaseRequest *request, const LimitCounters *delta)
{
	if (!stats_enabled() || !OidIsValid(request->limits))
		return;
	stats_count_limit(request->limits, request->name, delta, request->template_len,
					  template_len_of, request, tb_clock_now());
}

/* Count a lease decided without waiting: granted (with its slots), or refused. */
static void
count_lease(LeaseRequest *request, bool granted)
{
	LimitCounters delta = {0};

	if (granted)
	{
		delta.leases = 1;
		delta.slots = request->slots;
	}
	else
		delta.refused = 1;
	count(request, &delta);
}

/*
 * Fail if limit "limit" can never grant request->slots (with its reserve).
 */
static void
check_slots(LeaseRequest *request, const LimitConfig *limit)
{
	if (request->slots > limit->max_in_flight)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%d slots can never be leased from limit \"%s\"",
						request->slots, text_to_cstring(request->name)),
				 errdetail("A lease takes at most the limit's max_in_flight slots.")));
	if (request->slots > limit->max_in_flight -
		limit_reserve_slots(limit->max_in_flight, request->reserve))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%d slots with reserve %s can never be leased from limit \"%s\"",
						request->slots, float8out_internal(request->reserve),
						text_to_cstring(request->name)),
				 errdetail("A lease with a reserve leaves that share of the limit's max_in_flight slots free, rounded up to whole slots, and takes at most the rest."),
				 errhint("Lease fewer slots, ask with a smaller reserve, or have the limit raised with tb_alter_limit().")));
}

/*
 * The limit of "request", committed (and this transaction's own); fail if
 * there is none, or it can never grant request->slots (with its reserve).
 * A memory limit's is kept in the cache.
 */
static LimitConfig
find_limit(LeaseRequest *request)
{
	uint64		generation = limit_store_generation(&memory_limit_store);
	LimitConfig limit;

	if (!limit_config_find(request->relid, request->name, &limit))
		limit_report_missing(request->name);
	request->template_len = limit.template_len;
	check_slots(request, &limit);
	limit_cache_keep(request->relid, request->name, generation, &limit);
	return limit;
}

/*
 * Put what the store needs of limit "limit" in "request": read when the
 * store's drops() said "drops".
 */
static void
set_limit(LeaseRequest *request, const LimitConfig *limit, uint64 drops)
{
	request->max_in_flight = limit->max_in_flight;
	request->keep = limit_reserve_slots(limit->max_in_flight, request->reserve);
	request->template_len = limit->template_len;
	request->generation = drops;
}

/*
 * Take the lease of "request" at "now" in the store that keeps its
 * limit's leases (*store, refused: the one that refused); the limit looked
 * up (its errors) unless the table's UPDATE grants it first.  A name the
 * cache holds, even as read before the last change of tb_limits, was a
 * memory limit's: it is looked up first, so that a memory lease runs one
 * statement, not two.
 */
static bool
take_or_refuse(LeaseRequest *request, TimestampTz now,
			   const LimitStoreRoutine **store)
{
	bool		table_tried = false;

	*store = &table_limit_store;
	if (limit_cache_find(request->relid, request->name, LIMIT_CACHE_ANY) == NULL)
	{
		if (limit_store_take(&table_limit_store, request, now) == LEASE_GRANTED)
			return true;
		table_tried = true;
	}
	for (;;)
	{
		/* leases dropped from before the configuration is read */
		uint64		drops = limit_store_drops(&memory_limit_store);
		LimitConfig limit = find_limit(request);
		LeaseTaken	taken;

		*store = store_of(limit.memory);
		if (!limit.memory)
		{
			/* a table limit: its UPDATE, with its slots made if some lack */
			if (!table_tried &&
				limit_store_take(*store, request, now) == LEASE_GRANTED)
				return true;
			if (limit.made >= limit.max_in_flight)
				return false;
			limit_store_make(*store, request->relid, request->name, limit.max_in_flight);
			return limit_store_take(*store, request, now) == LEASE_GRANTED;
		}
		set_limit(request, &limit, drops);
		taken = limit_store_take(*store, request, now);
		if (taken != LEASE_STALE)
			return taken == LEASE_GRANTED;
	}
}

/* take_or_refuse() at the clock's time, counted. */
static bool
lease_step(void *arg)
{
	LeaseRequest *request = arg;
	const LimitStoreRoutine *store;
	bool		granted = take_or_refuse(request, tb_clock_now(), &store);

	count_lease(request, granted);
	return granted;
}

/*
 * wait_in_queue() attempt: take_or_refuse(); refused, *ready is when the
 * first ttl among the slots held ends.
 */
static bool
lease_attempt(void *arg, TimestampTz now, TimestampTz *ready)
{
	LeaseRequest *request = arg;
	const LimitStoreRoutine *store;

	if (take_or_refuse(request, now, &store))
		return true;
	*ready = limit_store_first_expiry(store, request, now);
	return false;
}

/* subxact_run() step of limit_lease(): the lease, then the rest. */
typedef struct LeaseAndThen
{
	LeaseRequest *request;
	bool		(*and_then) (void *arg);
	void	   *arg;
} LeaseAndThen;

static bool
lease_and_then_step(void *arg)
{
	LeaseAndThen *both = arg;

	return lease_step(both->request) && both->and_then(both->arg);
}

/*
 * A lease of "request" from a memory limit whose configuration is cached
 * and current: no statement at all.  False when it cannot be taken so (not
 * cached, changed since, or a limit dropped meanwhile: the caller takes
 * the way that reads the configuration); otherwise *granted says.
 */
static bool
lease_cached(Installation *inst, LeaseRequest *request, bool *granted)
{
	/* leases dropped from before the configuration is checked: see lease_memory.c */
	uint64		drops = limit_store_drops(&memory_limit_store);
	uint64		generation = limit_store_generation(&memory_limit_store);
	const LimitConfig *limit;
	LeaseTaken	taken;

	request->relid = installation_table(inst);
	limit = generation != 0 ?
		limit_cache_find(request->relid, request->name, generation) : NULL;
	if (limit == NULL)
		return false;
	request->limits = installation_limits(inst);
	request->holder = GetUserId();
	set_limit(request, limit, drops);
	check_slots(request, limit);
	taken = limit_store_take(&memory_limit_store, request, tb_clock_now());
	if (taken == LEASE_STALE)
		return false;
	*granted = taken == LEASE_GRANTED;
	count_lease(request, *granted);
	return true;
}

/*
 * Lease what "request" asks for (waiting until "deadline" with "wait";
 * with "and_then", all or nothing with what it takes, which runs after the
 * lease is granted, in the same subtransaction).  Returns whether the
 * lease was granted, its id in request->lease.
 */
bool
limit_lease(Installation *inst, LeaseRequest *request, bool wait,
			TimestampTz deadline, bool (*and_then) (void *arg), void *and_then_arg)
{
	SpiSession	session;
	bool		granted;
	int64		waited_usecs;

	if (!wait && and_then == NULL && lease_cached(inst, request, &granted))
		return granted;

	session = spi_begin(inst, true);
	request->relid = installation_table(inst);
	request->limits = installation_limits(inst);
	request->holder = session.userid;
	request->template_len = -1;
	if (wait)
	{
		/* cancelled until it says how it ended (an error ends it so) */
		LimitCounters delta = {.cancelled = 1};

		count(request, &delta);
		granted = wait_in_queue(VARDATA_ANY(request->name), VARSIZE_ANY_EXHDR(request->name),
								deadline, lease_attempt, request, &waited_usecs);
		delta.cancelled = -1;
		delta.leases = granted ? 1 : 0;
		delta.slots = granted ? request->slots : 0;
		delta.timeouts = granted ? 0 : 1;
		delta.waited = waited_usecs >= 0 ? 1 : 0;
		delta.wait_usecs = Max(waited_usecs, 0);
		count(request, &delta);
	}
	else if (and_then != NULL)
	{
		LeaseAndThen both = {request, and_then, and_then_arg};

		granted = subxact_run(lease_and_then_step, &both, 0, NULL);
	}
	else
		granted = lease_step(request);
	spi_end(&session);
	return granted;
}

/*
 * Free lease "lease" (tb_release()), in the store whose id it is, if the
 * caller may (an id another role holds is answered as one that holds
 * nothing); false when it held none.  A store with "spi" runs in an SPI
 * session; the memory store frees with no statement run.
 */
bool
limit_release(Installation *inst, int64 lease)
{
	const LimitStoreRoutine *store = store_of_lease(lease);
	Oid			caller = GetUserId();
	SpiSession	session = {0};
	ReleasedLease released;
	bool		freed;

	if (store->spi)
		session = spi_begin(inst, true);
	freed = limit_store_release(store, installation_table(inst), lease, caller,
								has_privs_of_role(caller, installation_owner(inst)),
								tb_clock_now(), &released) == LEASE_FREED;
	if (freed)
	{
		LeaseRequest counted = {.relid = installation_table(inst),
			.limits = installation_limits(inst),
		.name = released.name, .template_len = released.template_len};

		count(&counted, &(LimitCounters) {.released = released.slots});
	}
	if (store->spi)
		spi_end(&session);
	return freed;
}

/*
 * Make limit "name" of installation "relid" in the SPI session begun: its
 * row, and what "store" keeps of a named limit (a table limit's slots, so
 * that the first lease need not make them); false when the name is taken.
 */
static bool
create_in(const LimitStoreRoutine *store, Oid relid, text *name,
		  int32 max_in_flight, bool memory)
{
	if (!limit_config_insert(relid, name, max_in_flight, memory))
		return false;
	if (!is_template_name(name))
		limit_store_make(store, relid, name, max_in_flight);
	return true;
}

/*
 * Make limit "name" of "max_in_flight" slots, its leases kept in the
 * store "memory" chooses; false when the name is taken.
 */
bool
limit_create(Installation *inst, text *name, int32 max_in_flight, bool memory)
{
	const LimitStoreRoutine *store = store_of(memory);
	SpiSession	session;
	bool		created;

	limit_store_check_make(store, name);
	session = spi_begin(inst, true);
	created = create_in(store, installation_table(inst), name, max_in_flight, memory);
	spi_end(&session);
	return created;
}

/*
 * A new max_in_flight for limit "name".  Leases held are kept; after a
 * lowering, new ones wait until those above the new maximum are freed.
 * Its waiters are woken at the end of the transaction: a raise may let
 * them in.
 */
void
limit_alter(Installation *inst, text *name, int32 max_in_flight)
{
	SpiSession	session = spi_begin(inst, true);

	if (!limit_config_set(installation_table(inst), name, max_in_flight))
		limit_report_missing(name);
	spi_end(&session);
	limit_wake_at_end(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
}

/*
 * Make limit "name" as limit_create() does when it has no row; otherwise
 * give its row this max_in_flight when it has another, keeping its leases
 * and waking its waiters as limit_alter() does, or leave it.  Where its
 * leases live cannot change so: refused.  A row another transaction is
 * inserting is waited for (the INSERT's conflict), then read as committed.
 */
EnsureResult
limit_ensure(Installation *inst, text *name, int32 max_in_flight, bool memory)
{
	const LimitStoreRoutine *store = store_of(memory);
	SpiSession	session;
	Oid			relid;
	EnsureResult result = ENSURE_CREATED;

	limit_store_check_make(store, name);
	session = spi_begin(inst, true);
	relid = installation_table(inst);
	for (int attempt = 0; !create_in(store, relid, name, max_in_flight, memory); attempt++)
	{
		int32		old_max;
		bool		old_memory;

		/* taken, and then dropped before it could be read: make it again */
		if (!limit_config_row(relid, name, &old_max, &old_memory))
		{
			if (attempt == 2)
				limit_report_missing(name);
			continue;
		}
		if (old_memory != memory)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("limit \"%s\" keeps its leases in %s, not in %s", text_to_cstring(name),
							old_memory ? "shared memory" : "the table",
							old_memory ? "the table" : "shared memory"),
					 errdetail("Where a limit's leases live is chosen when it is made; tb_ensure_limit changes its max_in_flight in place, not its kind."),
					 errhint("Drop it with tb_drop() and ensure it again, or ensure it with memory => %s.",
							 old_memory ? "true" : "false")));
		result = ENSURE_UNCHANGED;
		if (old_max != max_in_flight)
		{
			result = ENSURE_CHANGED;
			(void) limit_config_set(relid, name, max_in_flight);
		}
		break;
	}
	spi_end(&session);
	if (result == ENSURE_CHANGED)
		limit_wake_at_end(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
	return result;
}

/* Where "store" keeps leases, for messages. */
static const char *
where_of(const LimitStoreRoutine *store)
{
	return store == &memory_limit_store ? "shared memory" : "the table";
}

/*
 * Fail: "held" holds leases in "store", and the change of tb_limits just
 * made would have the next ones taken from "to" (NULL: that change
 * renames the limit "maker" it holds them under).
 */
static void
report_leases_held(const HeldName *held, const LimitStoreRoutine *store,
				   const LimitStoreRoutine *to, text *maker)
{
	char	   *name = text_to_cstring(held->name);
	long long	slots = (long long) held->slots;

	if (to != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot move limit \"%s\" to %s while it holds leases in %s",
						name, where_of(to), where_of(store)),
				 errdetail_plural("It holds %lld slot in %s; after this change its leases would be taken from %s, where that slot does not count against its max_in_flight.",
								  "It holds %lld slots in %s; after this change its leases would be taken from %s, where those slots do not count against its max_in_flight.",
								  held->slots, slots, where_of(store), where_of(to)),
				 errhint("Release its leases first, or drop its limit with tb_drop(), which drops its leases, and make it again.")));
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("cannot rename the limit of \"%s\" while it holds leases in %s",
					name, where_of(store)),
			 errdetail_plural("It holds %lld slot in %s, taken under limit \"%s\"; a lease keeps the name it was taken for, so after this change that slot would no longer count against that limit.",
							  "It holds %lld slots in %s, taken under limit \"%s\"; a lease keeps the name it was taken for, so after this change those slots would no longer count against that limit.",
							  held->slots, slots, where_of(store), text_to_cstring(maker)),
			 errhint("Release its leases first, or drop its limit with tb_drop(), which drops its leases, and make it again.")));
}

/*
 * Fail if the change of installation "relid"'s tb_limits just made (by
 * the statement running: its trigger, or tb_drop()) would have a name
 * whose leases are held in one store take its next ones from the other,
 * where they would not count: the row that makes it (its own, or its
 * longest template) was of one kind before and is of the other now; or,
 * with "renames" (an UPDATE that set names), is another row now.  Each
 * name is looked up as a lease reads it, and as the statement saw it
 * before its own changes.  Names held in the other store already, or
 * made by no row now, move nowhere.  In the SPI session begun; only a
 * change of tb_limits pays for it.
 */
static void
check_leases_stay(Oid relid, bool renames)
{
	TimestampTz now = tb_clock_now();
	List	   *held[NUM_STORES];
	Datum	   *names;
	ArrayType  *name_array;
	LimitMaker *before;
	LimitMaker *after;
	int			n = 0;

	for (int i = 0; i < NUM_STORES; i++)
	{
		held[i] = limit_store_held(stores[i], relid, now);
		n += list_length(held[i]);
	}
	if (n == 0)
		return;
	names = palloc(sizeof(Datum) * n);
	n = 0;
	for (int i = 0; i < NUM_STORES; i++)
	{
		ListCell   *cell;

		foreach(cell, held[i])
			names[n++] = PointerGetDatum(((HeldName *) lfirst(cell))->name);
	}
	before = palloc0(sizeof(LimitMaker) * n);
	after = palloc0(sizeof(LimitMaker) * n);
	name_array = construct_array(names, n, TEXTOID, -1, false, TYPALIGN_INT);
	limit_config_makers(relid, name_array, true, before);
	/* the statement's own rows, seen from here on */
	CommandCounterIncrement();
	limit_config_makers(relid, name_array, false, after);

	n = 0;
	for (int i = 0; i < NUM_STORES; i++)
	{
		ListCell   *cell;

		foreach(cell, held[i])
		{
			const LimitMaker *b = &before[n];
			const LimitMaker *a = &after[n++];

			if (renames && b->found &&
				!(a->found && VARSIZE_ANY_EXHDR(a->row) == VARSIZE_ANY_EXHDR(b->row) &&
				  memcmp(VARDATA_ANY(a->row), VARDATA_ANY(b->row), VARSIZE_ANY_EXHDR(a->row)) == 0))
				report_leases_held(lfirst(cell), stores[i], NULL, b->row);
			if (a->found && store_of(a->memory) != stores[i] &&
				!(b->found && b->memory == a->memory))
				report_leases_held(lfirst(cell), stores[i], store_of(a->memory), NULL);
		}
	}
}

/*
 * tb_drop()'s part for limits: remove limit "name" (a template: and what
 * it made), with its leases (a memory limit's: when the transaction
 * commits), in every store; false when there was none.
 */
bool
limit_drop(Installation *inst, text *name)
{
	SpiSession	session = spi_begin(inst, true);
	Oid			relid = installation_table(inst);
	bool		memory = false;
	volatile bool dropped = false;

	/* its leases are still held as its row goes: checked once they went */
	dropping = true;
	PG_TRY();
	{
		dropped = limit_config_delete(relid, name, &memory);
	}
	PG_FINALLY();
	{
		dropping = false;
	}
	PG_END_TRY();
	if (dropped)
	{
		for (int i = 0; i < NUM_STORES; i++)
			limit_store_drop(stores[i], relid, name, stores[i] == store_of(memory));
		check_leases_stay(relid, false);
	}
	spi_end(&session);
	return dropped;
}

/*
 * tb_purge()'s part for limits: forget what the stores keep of names
 * templates made that hold no lease and were not leased since
 * "idle_since" (the next lease makes it again, free).  Returns how many
 * names.
 */
uint64
limit_purge(Installation *inst, TimestampTz idle_since, TimestampTz now)
{
	SpiSession	session = spi_begin(inst, true);
	uint64		names = 0;

	for (int i = 0; i < NUM_STORES; i++)
		names += limit_store_purge(stores[i], installation_table(inst), idle_since, now);
	spi_end(&session);
	return names;
}

/*
 * A row per lease of installation "relid" held now, of the stores whose
 * leases tb_leases cannot read in a table (tb_memory_leases()).
 */
void
limit_list(Oid relid, Tuplestorestate *store, TupleDesc desc)
{
	for (int i = 0; i < NUM_STORES; i++)
		limit_store_list(stores[i], relid, store, desc);
}

PG_FUNCTION_INFO_V1(tb_limits_changed);

/*
 * tb_limits_changed(): the statement trigger of tb_limits.  A change of
 * limits makes every backend read their configuration again once the
 * transaction commits (and this one read it from the table until then):
 * every store is told (configure()).
 * An UPDATE that sets "memory" is refused: a limit's kind is chosen when
 * it is made (leases held would stay in the other store, and the new one
 * start empty beside them), as a bucket's is.  So is any other change
 * that would move a name holding leases to the other store, or rename
 * the limit it holds them under (check_leases_stay()).
 */
Datum
tb_limits_changed(PG_FUNCTION_ARGS)
{
	Installation inst = installation_of(fcinfo);
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	int			memory;
	int			name;

	/* only ever the extension's own AFTER trigger on its own table */
	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event) ||
		RelationGetRelid(trigdata->tg_relation) != installation_limits(&inst))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("tb_limits_changed() is only the trigger of tokenbucket's table tb_limits"),
				 errdetail("It tells every session that limits changed, and fires for nothing else.")));
	memory = SPI_fnumber(RelationGetDescr(trigdata->tg_relation), "memory");
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) && memory > 0 &&
		bms_is_member(memory - FirstLowInvalidHeapAttributeNumber, trigdata->tg_updatedcols))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot change the kind of a limit"),
				 errdetail("Whether a limit keeps its leases in memory is chosen when it is made."),
				 errhint("Drop the limit with tb_drop() and make it again with tb_create_limit().")));
	/* a TRUNCATE leaves no row to make a name of another kind */
	if (!dropping && !TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
	{
		SpiSession	session = spi_begin(&inst, true);

		name = SPI_fnumber(RelationGetDescr(trigdata->tg_relation), "name");
		check_leases_stay(installation_table(&inst),
						  TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) && name > 0 &&
						  bms_is_member(name - FirstLowInvalidHeapAttributeNumber,
										trigdata->tg_updatedcols));
		spi_end(&session);
	}
	for (int i = 0; i < NUM_STORES; i++)
		limit_store_configure(stores[i]);
	return PointerGetDatum(NULL);
}
