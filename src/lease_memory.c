/*-------------------------------------------------------------------------
 *
 * lease_memory.c
 *	  The memory store of in-flight limits (memory_limit_store, behind
 *	  limit_store.h): a memory limit's leases kept in shared memory, freed
 *	  by their holder's transaction or session end, emptied by a crash.
 *
 * A limit whose row says memory => true keeps its leases here, not in
 * tb_lease_slots: a lease is a record of a fixed array, on the list of
 * its limit's entry, which counts the slots held.  An entry exists only
 * while it holds leases, so the names a template makes cost nothing once
 * their leases are gone, and nothing needs purging.
 *
 * A lease is freed:
 *	- by tb_release(), when the releasing transaction commits; until then
 *	  its slots are free for that transaction and held for every other,
 *	  as a table lease's row is until the UPDATE that released it commits;
 *	- with hold => 'transaction', when its transaction ends;
 *	- when the (sub)transaction that took it aborts, whatever its hold,
 *	  as a table lease's row goes with it;
 *	- when its session ends (xact.c's exit callback: however it ends, a client
 *	  gone, pg_terminate_backend, FATAL), all its holder's leases;
 *	- when its ttl has passed, or its holder's backend is no longer there,
 *	  counted free the moment a lease finds the limit full;
 *	- by a crash, which makes shared memory anew: all of them.  Nothing is
 *	  saved at a clean shutdown either: no holder outlives its server.
 *
 * One LWLock guards it all: a lease or a release holds it for a few dozen
 * instructions.  The configuration (max_in_flight) is not kept here: the
 * router reads it, committed, at each lease (limit_router.c, which keeps
 * it while no change of tb_limits has committed: generation()), and a
 * counter of drops, bumped whenever limits are forgotten, makes a lease
 * that read a configuration before a committed tb_drop read it again.
 *
 * Lease ids are below zero (table leases' above): minus a sequence's value
 * times 2^20 plus the record's index, above -2^53.
 *
 * Names made from templates hold at most their shares of the records, so
 * one session's made-up names leave room for others (lease_pool.c).
 *
 * src/lease_memory.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "common.h"
#include "lease_memory.h"
#include "lease_pool.h"
#include "limit_store.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "shmem.h"
#include "stats.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "wait.h"

/* Longest name of a memory limit: a shared entry's. */
#define MEMORY_LIMIT_NAME_MAX SHARED_NAME_MAX_BYTES

/* A lease id: -(seq * 2^INDEX_BITS + index), seq of SEQ_BITS bits. */
#define INDEX_BITS	20
#define SEQ_BITS	32
#define MAX_LEASES	((1 << INDEX_BITS) - 1)

/* A limit holding leases: the hash's entry. */
typedef struct LimitEntry
{
	SharedKey	key;			/* the installation and the name */
	int32		held;			/* slots of its leases, released ones not yet
								 * committed included */
	int			template_len;	/* the template it was first made from */
	Oid			stats_relid;	/* the tb_limits its counters are kept under */
	int			first;			/* its first lease, or -1 */
} LimitEntry;

/* A lease: a record of the array, on its limit's list or the free list. */
typedef struct MemoryLease
{
	int64		id;				/* 0: free */
	LimitEntry *limit;
	int32		slots;
	bool		session;		/* hold => 'session' */
	int			releaser;		/* the backend whose transaction released it,
								 * not ended yet (0: none): free for that
								 * transaction, held for every other */
	int			pid;			/* the holder's backend */
	TimestampTz started;		/* and its start */
	Oid			holder;			/* the role */
	TimestampTz since;
	TimestampTz expires;		/* DT_NOEND: no ttl */
	int			prev;
	int			next;
} MemoryLease;

typedef struct LeaseShared
{
	LWLock	   *lock;
	pg_atomic_uint64 generation;	/* forgets, counted */
	pg_atomic_uint64 config_generation;	/* committed changes of tb_limits,
										 * counted */
	uint64		seq;			/* ids made */
	int			free;			/* first free record, or -1 */
	MemoryLease leases[FLEXIBLE_ARRAY_MEMBER];
} LeaseShared;

static int	max_memory_leases = 10000;
static LeaseShared *lease_shared = NULL;
static HTAB *limit_hash = NULL;

/*
 * What this transaction did to memory leases: took them, or released
 * them, in subtransaction "subid" (in TopTransactionContext).
 */
typedef struct LocalLease
{
	int64		id;
	bool		session;
	bool		release;		/* a release (else a lease taken) */
	SubTransactionId subid;
} LocalLease;

static List *xact_leases = NIL;

/* Limits to forget when this transaction commits (tb_drop, DROP EXTENSION). */
typedef struct Forget
{
	Oid			dbid;
	Oid			relid;			/* InvalidOid: every installation of dbid */
	char	   *name;			/* NULL: every limit */
	int			len;
	bool		template;
	SubTransactionId subid;		/* the subtransaction that asked */
} Forget;

static List *forgets = NIL;

static bool leased_here = false;	/* this session took or released a
									 * memory lease */
static bool config_changed_here = false;	/* this transaction wrote
											 * tb_limits */

/* The record of lease "id", or -1 when it cannot be one. */
static int
index_of(int64 id)
{
	int			index;

	if (id >= 0 || lease_shared == NULL)
		return -1;
	index = (int) ((uint64) -id & MAX_LEASES);
	return index < max_memory_leases ? index : -1;
}

/* SharedArea size: the struct with its records, and the hash. */
static Size
lease_shmem_size(void)
{
	return add_size(add_size(offsetof(LeaseShared, leases),
							 mul_size(max_memory_leases, sizeof(MemoryLease))),
					add_size(shmem_hash_size(max_memory_leases, sizeof(LimitEntry)),
							 lease_pool_size(max_memory_leases)));
}

/* SharedArea locks: one. */
static int
lease_shmem_locks(void)
{
	return 1;
}

/* SharedArea attach: the struct and the hash, every record free. */
static void
lease_attach(LWLockPadded *locks)
{
	bool		found;

	lease_shared = shmem_struct("tokenbucket leases",
								add_size(offsetof(LeaseShared, leases),
										 mul_size(max_memory_leases, sizeof(MemoryLease))),
								&found);
	limit_hash = shmem_hash("tokenbucket limits", max_memory_leases, sizeof(SharedKey),
							sizeof(LimitEntry), shared_key_hash, shared_key_match, 0);
	lease_pool_attach(max_memory_leases);
	if (found)
		return;
	lease_shared->lock = &locks[0].lock;
	pg_atomic_init_u64(&lease_shared->generation, 0);
	pg_atomic_init_u64(&lease_shared->config_generation, 1);
	lease_shared->seq = 0;
	for (int i = 0; i < max_memory_leases; i++)
	{
		lease_shared->leases[i].id = 0;
		lease_shared->leases[i].next = i + 1 < max_memory_leases ? i + 1 : -1;
	}
	lease_shared->free = 0;
}

static const SharedArea lease_area = {
	.name = "tokenbucket leases",
	.size = lease_shmem_size,
	.nlocks = lease_shmem_locks,
	.attach = lease_attach,
};

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
	if (lease_shared == NULL || config_changed_here)
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
		config_changed_here = true;
}

/*
 * Whether the holder of "lease" is gone: its backend is not there (a pid
 * alone could be a later backend's, which frees its own at exit).
 */
static bool
holder_gone(const MemoryLease *lease)
{
	if (lease->pid == MyProcPid)
		return lease->started != MyStartTimestamp;
	return BackendPidGetProc(lease->pid) == NULL;
}

/* Whether "lease" holds its slots at "now" (for anyone but its releaser). */
static bool
lease_held(const MemoryLease *lease, TimestampTz now)
{
	return lease->id != 0 && lease->expires > now && !holder_gone(lease);
}

/* Whether "lease" holds its slots at "now" as this backend sees it. */
static bool
lease_held_here(const MemoryLease *lease, TimestampTz now)
{
	return lease_held(lease, now) && lease->releaser != MyProcPid;
}

/*
 * A limit some of whose leases were freed under the lock: its queue to
 * wake, and the slots to count as ended or expired, once it is released.
 */
typedef struct Freed
{
	SharedKey	key;
	Oid			stats_relid;
	int			template_len;
	LimitCounters counts;		/* ended and expired */
} Freed;

/* The limits whose leases a call freed. */
typedef struct WakeList
{
	Freed	   *limits;
	int			n;
	int			max;
} WakeList;

/*
 * Add "limit" to "wake" (this database's only: its queues, its counters),
 * with "ended" and "expired" slots.
 */
static void
wake_add(WakeList *wake, const LimitEntry *limit, int32 ended, int32 expired)
{
	Freed	   *freed = NULL;

	if (limit->key.dbid != MyDatabaseId)
		return;
	for (int i = 0; i < wake->n && freed == NULL; i++)
		if (shared_key_match(&wake->limits[i].key, &limit->key, sizeof(SharedKey)) == 0)
			freed = &wake->limits[i];
	if (freed == NULL)
	{
		if (wake->n == wake->max)
		{
			wake->max = Max(8, wake->max * 2);
			wake->limits = wake->limits ?
				repalloc(wake->limits, sizeof(Freed) * wake->max) :
				palloc(sizeof(Freed) * wake->max);
		}
		freed = &wake->limits[wake->n++];
		memset(freed, 0, sizeof(Freed));
		freed->key = limit->key;
		freed->stats_relid = limit->stats_relid;
		freed->template_len = limit->template_len;
	}
	freed->counts.ended += ended;
	freed->counts.expired += expired;
}

/*
 * With the lock released: count what was freed, and wake the queue of
 * every limit in "wake".
 */
static void
wake_all(WakeList *wake)
{
	TimestampTz now = GetCurrentTimestamp();

	for (int i = 0; i < wake->n; i++)
	{
		Freed	   *freed = &wake->limits[i];

		if (freed->counts.ended > 0 || freed->counts.expired > 0)
			stats_count_limit_now(freed->stats_relid, freed->key.name, freed->key.len,
								  freed->template_len, &freed->counts, now);
		wait_wake_limit(freed->key.name, freed->key.len);
	}
	if (wake->limits)
		pfree(wake->limits);
}

/* How a lease's freeing is counted. */
typedef enum FreedBy
{
	FREED_QUIETLY,				/* not here: a release (counted by its
								 * caller), a lease that never was (its
								 * transaction aborted), a limit dropped */
	FREED_BY_END				/* its holder's end, or its ttl if that
								 * passed first (at "now") */
} FreedBy;

/*
 * Free record "index" (under the exclusive lock): off its limit's list,
 * its slots back, counted into "wake" as "by" says; with "remove", the
 * entry gone with its last lease.
 */
static void
free_record(int index, WakeList *wake, bool remove, FreedBy by, TimestampTz now)
{
	MemoryLease *lease = &lease_shared->leases[index];
	LimitEntry *limit = lease->limit;
	bool		expired = lease->expires <= now;

	if (lease->prev >= 0)
		lease_shared->leases[lease->prev].next = lease->next;
	else
		limit->first = lease->next;
	if (lease->next >= 0)
		lease_shared->leases[lease->next].prev = lease->prev;
	limit->held -= lease->slots;
	lease_pool_freed(&limit->key, limit->template_len, lease->pid, lease->started);
	wake_add(wake, limit,
			 by == FREED_BY_END && !expired ? lease->slots : 0,
			 by == FREED_BY_END && expired ? lease->slots : 0);
	if (remove && limit->first < 0)
		(void) hash_search(limit_hash, &limit->key, HASH_REMOVE, NULL);
	lease->id = 0;
	lease->limit = NULL;
	lease->next = lease_shared->free;
	lease_shared->free = index;
}

/* Free lease "id" if it is still there (under the exclusive lock). */
static void
free_id(int64 id, WakeList *wake, FreedBy by, TimestampTz now)
{
	int			index = index_of(id);

	if (index >= 0 && lease_shared->leases[index].id == id)
		free_record(index, wake, true, by, now);
}

/*
 * Free the leases of "limit" no longer held: ttl passed, holder gone
 * (under the exclusive lock).  The entry stays, maybe empty.
 */
static void
sweep(LimitEntry *limit, TimestampTz now, WakeList *wake)
{
	int			index = limit->first;

	while (index >= 0)
	{
		MemoryLease *lease = &lease_shared->leases[index];
		int			next = lease->next;

		if (lease->releaser == 0 && !lease_held(lease, now))
			free_record(index, wake, false, FREED_BY_END, now);
		index = next;
	}
}

/* When the first ttl among the leases of "limit" passes (DT_NOEND: none). */
static TimestampTz
first_expiry(const LimitEntry *limit)
{
	TimestampTz first = DT_NOEND;

	for (int index = limit->first; index >= 0; index = lease_shared->leases[index].next)
		first = Min(first, lease_shared->leases[index].expires);
	return first;
}

/* The slots of the leases of "limit" this backend's transaction released. */
static int32
released_here(const LimitEntry *limit)
{
	int32		slots = 0;

	for (int index = limit->first; index >= 0; index = lease_shared->leases[index].next)
		if (lease_shared->leases[index].releaser == MyProcPid)
			slots += lease_shared->leases[index].slots;
	return slots;
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

/* Whether "forget" takes limit entry "limit". */
static bool
forget_takes(const Forget *forget, const LimitEntry *limit)
{
	const SharedKey *k = &limit->key;

	if (k->dbid != forget->dbid ||
		(OidIsValid(forget->relid) && k->relid != forget->relid))
		return false;
	if (forget->name == NULL)
		return true;
	if (forget->template)
		return limit->template_len == forget->len + 1 && k->len >= forget->len &&
			memcmp(k->name, forget->name, forget->len) == 0;
	return k->len == forget->len && memcmp(k->name, forget->name, forget->len) == 0;
}

/* Whether this transaction forgets limit entry "limit" when it commits. */
static bool
forgotten_here(const LimitEntry *limit)
{
	ListCell   *cell;

	foreach(cell, forgets)
		if (forget_takes(lfirst(cell), limit))
			return true;
	return false;
}

/* Apply the forgets of the committed transaction (under the exclusive lock). */
static void
apply_forgets(WakeList *wake)
{
	HASH_SEQ_STATUS status;
	LimitEntry *limit;
	List	   *gone = NIL;
	ListCell   *cell;

	hash_seq_init(&status, limit_hash);
	while ((limit = hash_seq_search(&status)) != NULL)
		if (forgotten_here(limit))
			gone = lappend(gone, limit);
	/* the hash changes only once the walk is over */
	foreach(cell, gone)
	{
		limit = lfirst(cell);
		while (limit->first >= 0)
			free_record(limit->first, wake, false, FREED_QUIETLY, 0);
		(void) hash_search(limit_hash, &limit->key, HASH_REMOVE, NULL);
	}
	list_free(gone);
	pg_atomic_fetch_add_u64(&lease_shared->generation, 1);
}

/*
 * The end of (sub)transaction "subid" (invalid: of the whole one), with
 * "parent" taking what a committed subtransaction did.
 */
static void
end_of_xact(SubTransactionId subid, SubTransactionId parent, bool commit)
{
	WakeList	wake = {0};
	ListCell   *cell;
	bool		top = subid == InvalidSubTransactionId;
	TimestampTz now;

	if (lease_shared == NULL || (xact_leases == NIL && (forgets == NIL || !commit)))
		return;
	now = GetCurrentTimestamp();
	if (commit && !top)
	{
		foreach(cell, xact_leases)
		{
			LocalLease *local = lfirst(cell);

			if (local->subid == subid)
				local->subid = parent;
		}
		return;
	}
	LWLockAcquire(lease_shared->lock, LW_EXCLUSIVE);
	foreach(cell, xact_leases)
	{
		LocalLease *local = lfirst(cell);
		int			index = index_of(local->id);

		if (local->id == 0 || (!top && local->subid != subid))
			continue;
		if (local->release)
		{
			if (commit)
				free_id(local->id, &wake, FREED_QUIETLY, now);
			else if (index >= 0 && lease_shared->leases[index].id == local->id)
				lease_shared->leases[index].releaser = 0;
		}
		else if (!commit)
			free_id(local->id, &wake, FREED_QUIETLY, now);
		else if (!local->session)
			free_id(local->id, &wake, FREED_BY_END, now);
		if (!top)
			xact_leases = foreach_delete_current(xact_leases, cell);
	}
	if (top && commit && forgets != NIL)
		apply_forgets(&wake);
	LWLockRelease(lease_shared->lock);
	wake_all(&wake);
}

/*
 * What this transaction holds that a prepared one could not carry (see
 * xact.c), or NULL: its leases and releases are its backend's, and the
 * limits it changed or dropped must reach every session when it commits.
 */
const char *
lease_memory_unpreparable(void)
{
	if (xact_leases != NIL)
		return "memory limits' leases";
	if (forgets != NIL || config_changed_here)
		return "limits' settings";
	return NULL;
}

/* The transaction's end (xact.c): see end_of_xact(). */
void
lease_memory_xact_end(bool commit)
{
	if (commit && config_changed_here)
	{
		/*
		 * committed: every backend's read of the configuration is old,
		 * before the leases of limits dropped are forgotten (a lease that
		 * read the configuration before then finds them stale)
		 */
		pg_atomic_fetch_add_u64(&lease_shared->config_generation, 1);
	}
	end_of_xact(InvalidSubTransactionId, InvalidSubTransactionId, commit);
	xact_leases = NIL;
	forgets = NIL;
	config_changed_here = false;
}

/*
 * A subtransaction's end (xact.c): see end_of_xact(); a forget goes with
 * its subtransaction.
 */
void
lease_memory_subxact_end(SubTransactionId mySubid, SubTransactionId parentSubid,
						 bool commit)
{
	ListCell   *cell;

	end_of_xact(mySubid, parentSubid, commit);
	foreach(cell, forgets)
	{
		Forget	   *forget = lfirst(cell);

		if (forget->subid != mySubid)
			continue;
		if (commit)
			forget->subid = parentSubid;
		else
			forgets = foreach_delete_current(forgets, cell);
	}
}

/*
 * Session end, however it comes (xact.c: before the server aborts an open
 * transaction): every lease this backend holds is freed, and every release
 * its transaction made is undone (the lease is its holder's again); the
 * abort that follows finds nothing of them left to do.
 */
void
lease_memory_exit(void)
{
	WakeList	wake = {0};
	TimestampTz now;

	if (lease_shared == NULL || !leased_here)
		return;
	now = GetCurrentTimestamp();
	LWLockAcquire(lease_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < max_memory_leases; i++)
	{
		MemoryLease *lease = &lease_shared->leases[i];

		if (lease->id == 0)
			continue;
		if (lease->releaser == MyProcPid)
			lease->releaser = 0;
		if (lease->pid == MyProcPid && lease->started == MyStartTimestamp)
			free_record(i, &wake, true, FREED_BY_END, now);
	}
	LWLockRelease(lease_shared->lock);
	xact_leases = NIL;
	wake_all(&wake);
}

/* A record of what this transaction does, on its list (id 0 until done). */
static LocalLease *
local_add(bool session, bool release)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	LocalLease *local = palloc(sizeof(LocalLease));

	local->id = 0;
	local->session = session;
	local->release = release;
	local->subid = GetCurrentSubTransactionId();
	xact_leases = lappend(xact_leases, local);
	MemoryContextSwitchTo(old);
	return local;
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
	leased_here = true;
	local = local_add(request->hold == HOLD_SESSION, false);

	LWLockAcquire(lease_shared->lock, LW_EXCLUSIVE);
	if (pg_atomic_read_u64(&lease_shared->generation) != request->generation)
	{
		LWLockRelease(lease_shared->lock);
		xact_leases = list_delete_last(xact_leases);
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
		sweep(limit, now, &wake);
		released = released_here(limit);
	}
	index = lease_shared->free;
	if (!fits(limit, request, released) || index < 0 ||
		(full = lease_pool_take(&key, template_len)) != POOL_ROOM)
	{
		request->ready = first_expiry(limit);
		if (limit->first < 0)
			(void) hash_search(limit_hash, &key, HASH_REMOVE, NULL);
		LWLockRelease(lease_shared->lock);
		xact_leases = list_delete_last(xact_leases);
		wake_all(&wake);
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
	wake_all(&wake);

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
	int			index = index_of(id);
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
		!forgotten_here(record->limit))
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

	leased_here = true;
	local = local_add(false, true);
	LWLockAcquire(lease_shared->lock, LW_EXCLUSIVE);
	held = record->id == id && record->releaser == 0;
	if (held)
		record->releaser = MyProcPid;
	LWLockRelease(lease_shared->lock);
	if (!held)
	{
		xact_leases = list_delete_last(xact_leases);
		return LEASE_NOT_HELD;
	}
	local->id = id;
	return LEASE_FREED;
}

/*
 * When the transaction commits, forget the memory leases of installation
 * "relid" of database "dbid" (InvalidOid: all of them): of limit "name",
 * of the names template "name" made, or (NULL) of every limit.  Their
 * holders' tb_release() then frees nothing.
 */
static void
forget_later(Oid dbid, Oid relid, text *name)
{
	MemoryContext old;
	Forget	   *forget;

	if (lease_shared == NULL)
		return;
	old = MemoryContextSwitchTo(TopTransactionContext);
	forget = palloc0(sizeof(Forget));
	forget->dbid = dbid;
	forget->relid = relid;
	forget->subid = GetCurrentSubTransactionId();
	if (name != NULL)
	{
		forget->template = is_template_name(name);
		forget->len = VARSIZE_ANY_EXHDR(name) - (forget->template ? 1 : 0);
		forget->name = pnstrdup(VARDATA_ANY(name), forget->len);
	}
	forgets = lappend(forgets, forget);
	MemoryContextSwitchTo(old);
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
	TimestampTz now = GetCurrentTimestamp();
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
			forgotten_here(lease->limit))
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
	shmem_register(&lease_area);
}

/* forget(): an installation's or a database's memory leases, at commit. */
static void
memory_forget(Oid dbid, Oid relid)
{
	forget_later(dbid, relid, NULL);
}

/*
 * drop(): the leases of memory limit "name" (a template: of the names it
 * made), when the transaction commits; nothing of another kind's.
 */
static void
memory_drop(Oid relid, text *name, bool its)
{
	if (its)
		forget_later(MyDatabaseId, relid, name);
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
};
