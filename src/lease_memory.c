/*-------------------------------------------------------------------------
 *
 * lease_memory.c
 *	  The memory store of in-flight limits (memory_limit_store, behind
 *	  limit_store.h): a memory limit's leases taken, released, forgotten
 *	  and listed in shared memory, with no statement run.
 *
 * A lease takes a record of lease_memory_records.c's array for its limit
 * when its slots fit within the limit's max_in_flight (with its reserve's
 * left free); a limit found full first has the leases no longer held
 * freed (ttl passed, holder gone).  Names made from templates hold at most
 * their shares of the records, so one session's made-up names leave room
 * for others (lease_pool.c).  A release, and a lease's end, take effect as
 * lease_memory_xact.c says.
 *
 * The configuration (max_in_flight) is not kept here: the router reads
 * it, committed, at each lease (limit_router.c, which keeps it while no
 * change of tb_limits has committed: generation()), and a counter of
 * drops, bumped whenever limits are forgotten, makes a lease that read a
 * configuration before a committed tb_drop read it again.
 *
 * src/lease_memory.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "bucket.h"
#include "common.h"
#include "lease_memory_xact.h"
#include "lease_pool.h"
#include "limit_store.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

/* Longest name of a memory limit: a shared entry's. */
#define MEMORY_LIMIT_NAME_MAX SHARED_NAME_MAX_BYTES

/* Fail unless memory limits can be used here: preloaded, on a primary. */
static void
require(void)
{
	if (lease_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("memory limits need tokenbucket in shared_preload_libraries"),
				 errdetail("Their leases live in shared memory, which is set aside when the server starts."),
				 errhint("Add shared_preload_libraries = 'tokenbucket' to postgresql.conf and restart the server.")));
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot lease from memory limits on a standby"),
				 errdetail("A memory limit's leases live in the shared memory of the primary, and only there."),
				 errhint("Call the tb_* functions on the primary.")));
}

/*
 * check_make(): fail unless memory limit "name" can be made: the library
 * preloaded, the server a primary, and the name (or the names its
 * template makes) no longer than a shared key's.
 */
static void
memory_check_make(text *name)
{
	require();
	if (VARSIZE_ANY_EXHDR(name) > (Size) MEMORY_LIMIT_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("memory limit name must be 1 to %d bytes long, not %zu",
						MEMORY_LIMIT_NAME_MAX, VARSIZE_ANY_EXHDR(name)),
				 errdetail("A memory limit's name is kept in shared memory, in a fixed space.")));
}

/*
 * generation(): committed changes of limits' configuration (any
 * tb_limits), counted; 0 without the library preloaded, or when this
 * transaction changed one itself (its own uncommitted configuration is
 * read from the table).  A configuration read after this was read holds
 * while it is the same.
 */
static uint64
memory_generation(void)
{
	if (lease_shared == NULL || lease_config_changed_here())
		return 0;
	return pg_atomic_read_u64(&lease_shared->config_generation);
}

/*
 * drops(): limits forgotten so far; a lease passes what it read before its
 * configuration.
 */
static uint64
memory_drops(void)
{
	return lease_shared ? pg_atomic_read_u64(&lease_shared->generation) : 0;
}

/*
 * configure(): this transaction changed tb_limits (its trigger, in
 * limit_router.c): every backend reads the configuration again once it
 * commits, and this one reads it from the table until then.
 */
static void
memory_configure(void)
{
	if (lease_shared != NULL)
		lease_configured_here();
}

/*
 * Whether request->slots more fit in "limit", with "released" of its
 * slots free for this transaction: within max_in_flight, with
 * request->keep of it
 * left free afterwards (a reserve's).
 */
static bool
fits(const LimitEntry *limit, const LeaseRequest *request, int32 released)
{
	return (int64) limit->held - released + request->slots + request->keep <=
		request->max_in_flight;
}

/* Fail: no room for one more lease. */
static void
report_no_room(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_OUT_OF_MEMORY),
			 errmsg("no room for another memory lease"),
			 errdetail("All %d memory leases the server keeps are held.", max_memory_leases),
			 errhint("Raise tokenbucket.max_memory_leases and restart the server.")));
}

/*
 * take(): a lease of request->slots of memory limit request->name at
 * "now", as its configuration in the request says: granted (its id in
 * request->lease), refused (request->ready: when its first ttl passes), or
 * stale (a limit was dropped since request->generation).  Expired leases
 * and those of holders gone are freed when it is full.  An error (53200)
 * when the pool, or a share of it, is full.
 */
static LeaseTaken
memory_take(LeaseRequest *request, TimestampTz now)
{
	SharedKey	key;
	LimitEntry *limit;
	LocalLease *local;
	MemoryLease *record;
	bool		found;
	int			index;
	int64		id;
	int32		released = 0;
	int			template_len;
	PoolShare	full = POOL_ROOM;
	WakeList	wake = {0};

	require();
	if (!shared_key_text(&key, request->relid, request->name))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("memory limit name must be 1 to %d bytes long, not %zu",
						SHARED_NAME_MAX_BYTES, VARSIZE_ANY_EXHDR(request->name)),
				 errdetail("A memory limit's name is kept in shared memory, in a fixed space.")));
	local = lease_local_add(request->hold == HOLD_SESSION, false);

	LWLockAcquire(lease_shared->lock, LW_EXCLUSIVE);
	if (pg_atomic_read_u64(&lease_shared->generation) != request->generation)
	{
		LWLockRelease(lease_shared->lock);
		lease_local_undo();
		return LEASE_STALE;
	}
	limit = hash_search(limit_hash, &key, HASH_ENTER_NULL, &found);
	if (limit == NULL)
	{
		LWLockRelease(lease_shared->lock);
		report_no_room();
	}
	if (!found)
	{
		limit->held = 0;
		limit->template_len = request->template_len;
		limit->stats_relid = request->limits;
		limit->first = -1;
	}
	template_len = limit->template_len;
	if (!fits(limit, request, 0))
	{
		lease_sweep(limit, now, &wake);
		released = lease_released_here(limit);
	}
	index = lease_shared->free;
	if (!fits(limit, request, released) || index < 0 ||
		(full = lease_pool_take(&key, template_len)) != POOL_ROOM)
	{
		request->ready = lease_first_expiry(limit);
		if (limit->first < 0)
			(void) hash_search(limit_hash, &key, HASH_REMOVE, NULL);
		LWLockRelease(lease_shared->lock);
		lease_local_undo();
		lease_wake_all(&wake);
		if (index < 0)
			report_no_room();
		lease_pool_refuse(full, &key, template_len);
		return LEASE_REFUSED;
	}
	record = &lease_shared->leases[index];
	lease_shared->free = record->next;
	lease_shared->seq = (lease_shared->seq + 1) & ((UINT64CONST(1) << SEQ_BITS) - 1);
	id = -(int64) (((lease_shared->seq + 1) << INDEX_BITS) | (uint64) index);
	record->id = id;
	record->limit = limit;
	record->slots = request->slots;
	record->session = request->hold == HOLD_SESSION;
	record->releaser = 0;
	record->pid = MyProcPid;
	record->started = MyStartTimestamp;
	record->holder = request->holder;
	record->since = now;
	record->expires = request->ttl_usecs > 0 ?
		timestamp_saturate((double) now + request->ttl_usecs) : DT_NOEND;
	record->prev = -1;
	record->next = limit->first;
	if (limit->first >= 0)
		lease_shared->leases[limit->first].prev = index;
	limit->first = index;
	limit->held += request->slots;
	LWLockRelease(lease_shared->lock);
	lease_wake_all(&wake);

	local->id = id;
	request->lease = id;
	return LEASE_GRANTED;
}

/*
 * release(): memory lease "id" of installation "relid" freed for role
 * "caller" ("owner": who may release any) when the transaction commits,
 * with no statement run.  *released says what, when it is held.
 */
static LeaseReleased
memory_release(Oid relid, int64 id, Oid caller, bool owner, TimestampTz now,
			   ReleasedLease *released)
{
	int			index = lease_index_of(id);
	MemoryLease *record;
	Oid			holder = InvalidOid;
	bool		held = false;
	LocalLease *local;

	if (index < 0)
		return LEASE_NOT_HELD;
	record = &lease_shared->leases[index];
	LWLockAcquire(lease_shared->lock, LW_SHARED);
	if (record->id == id && record->releaser == 0 && lease_held(record, now) &&
		record->limit->key.dbid == MyDatabaseId && record->limit->key.relid == relid &&
		!lease_forgotten_here(record->limit))
	{
		held = true;
		holder = record->holder;
		released->slots = record->slots;
		released->template_len = record->limit->template_len;
		released->name = cstring_to_text_with_len(record->limit->key.name,
												  record->limit->key.len);
	}
	LWLockRelease(lease_shared->lock);
	if (!held)
		return LEASE_NOT_HELD;
	if (!owner && holder != caller && !has_privs_of_role(caller, holder))
		return LEASE_NOT_YOURS;

	local = lease_local_add(false, true);
	LWLockAcquire(lease_shared->lock, LW_EXCLUSIVE);
	held = record->id == id && record->releaser == 0;
	if (held)
		record->releaser = MyProcPid;
	LWLockRelease(lease_shared->lock);
	if (!held)
	{
		lease_local_undo();
		return LEASE_NOT_HELD;
	}
	local->id = id;
	return LEASE_FREED;
}

/* A lease copied out for listing. */
typedef struct ListedLease
{
	SharedKey	name;
	MemoryLease lease;
} ListedLease;

/*
 * list(): every memory lease of installation "relid" held now (name,
 * lease, slots, hold, holder, pid, since, expires), copied under the
 * lock.  None without the library preloaded.
 */
static void
memory_list(Oid relid, Tuplestorestate *store, TupleDesc desc)
{
	TimestampTz now = tb_clock_now();
	ListedLease *rows;
	int			n = 0;
	int			maxrows = 0;

	if (lease_shared == NULL)
		return;
	/* room first, for the leases held now: nothing may fail under the lock */
	LWLockAcquire(lease_shared->lock, LW_SHARED);
	for (int i = 0; i < max_memory_leases; i++)
		maxrows += lease_shared->leases[i].id != 0;
	LWLockRelease(lease_shared->lock);
	rows = palloc(sizeof(ListedLease) * Max(maxrows * 2, 1));
	maxrows = Max(maxrows * 2, 1);
	LWLockAcquire(lease_shared->lock, LW_SHARED);
	for (int i = 0; i < max_memory_leases && n < maxrows; i++)
	{
		MemoryLease *lease = &lease_shared->leases[i];

		if (lease->id == 0 || lease->limit->key.dbid != MyDatabaseId ||
			lease->limit->key.relid != relid || !lease_held_here(lease, now) ||
			lease_forgotten_here(lease->limit))
			continue;
		rows[n].name = lease->limit->key;
		rows[n].lease = *lease;
		n++;
	}
	LWLockRelease(lease_shared->lock);

	for (int i = 0; i < n; i++)
	{
		Datum		values[8];
		bool		nulls[8] = {0};
		const MemoryLease *lease = &rows[i].lease;

		values[0] = PointerGetDatum(cstring_to_text_with_len(rows[i].name.name, rows[i].name.len));
		values[1] = Int64GetDatum(lease->id);
		values[2] = Int32GetDatum(lease->slots);
		values[3] = CStringGetTextDatum(lease->session ? "session" : "transaction");
		values[4] = ObjectIdGetDatum(lease->holder);
		values[5] = Int32GetDatum(lease->pid);
		values[6] = TimestampTzGetDatum(lease->since);
		values[7] = TimestampTzGetDatum(lease->expires);
		nulls[7] = lease->expires == DT_NOEND;
		tuplestore_putvalues(store, desc, values, nulls);
	}
	pfree(rows);
}

/*
 * held(): the memory limits of installation "relid" holding leases at
 * "now", with their slots, copied under the lock; not those this
 * transaction forgets (dropped) nor its own releases.  None without the
 * library preloaded.
 */
static List *
memory_held(Oid relid, TimestampTz now)
{
	HASH_SEQ_STATUS status;
	LimitEntry *limit;
	SharedKey  *keys;
	int64	   *slots;
	int			n = 0;
	int			room;
	List	   *held = NIL;

	if (lease_shared == NULL)
		return NIL;
	/* room first, for the limits holding leases now: nothing may fail under the lock */
	LWLockAcquire(lease_shared->lock, LW_SHARED);
	room = (int) hash_get_num_entries(limit_hash) * 2 + 1;
	LWLockRelease(lease_shared->lock);
	keys = palloc(sizeof(SharedKey) * room);
	slots = palloc(sizeof(int64) * room);
	LWLockAcquire(lease_shared->lock, LW_SHARED);
	hash_seq_init(&status, limit_hash);
	while ((limit = hash_seq_search(&status)) != NULL)
	{
		if (n == room)
		{
			hash_seq_term(&status);
			break;
		}
		if (limit->key.dbid != MyDatabaseId || limit->key.relid != relid ||
			lease_forgotten_here(limit))
			continue;
		slots[n] = 0;
		for (int i = limit->first; i >= 0; i = lease_shared->leases[i].next)
			if (lease_held_here(&lease_shared->leases[i], now))
				slots[n] += lease_shared->leases[i].slots;
		if (slots[n] > 0)
			keys[n++] = limit->key;
	}
	LWLockRelease(lease_shared->lock);

	for (int i = 0; i < n; i++)
	{
		HeldName   *name = palloc(sizeof(HeldName));

		name->name = cstring_to_text_with_len(keys[i].name, keys[i].len);
		name->slots = slots[i];
		held = lappend(held, name);
	}
	pfree(keys);
	pfree(slots);
	return held;
}

/* init(): the setting and the shared memory, when preloading. */
static void
memory_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	DefineCustomIntVariable("tokenbucket.max_memory_leases",
							"Most leases of memory limits held at once.",
							"Each takes shared memory from the start; templates' names hold shares of them.",
							&max_memory_leases,
							10000, 16, MAX_LEASES,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	lease_memory_register();
}

/* forget(): an installation's or a database's memory leases, at commit. */
static void
memory_forget(Oid dbid, Oid relid)
{
	lease_forget_later(dbid, relid, NULL);
}

/*
 * drop(): the leases of memory limit "name" (a template: of the names it
 * made), when the transaction commits; nothing of another kind's.
 */
static void
memory_drop(Oid relid, text *name, bool its)
{
	if (its)
		lease_forget_later(MyDatabaseId, relid, name);
}

/* owns(): a memory lease's id is below zero. */
static bool
memory_owns(int64 lease)
{
	return lease < 0;
}

const LimitStoreRoutine memory_limit_store = {
	.kind = "memory",
	.spi = false,
	.init = memory_init,
	.forget = memory_forget,
	.check_make = memory_check_make,
	.configure = memory_configure,
	.generation = memory_generation,
	.drops = memory_drops,
	.take = memory_take,
	.owns = memory_owns,
	.release = memory_release,
	.drop = memory_drop,
	.list = memory_list,
	.held = memory_held,
};
