/*-------------------------------------------------------------------------
 *
 * lease_memory_records.c
 *	  Memory limits' leases in shared memory: a fixed array of records, a
 *	  hash of the limits holding leases, whether a lease is held, and
 *	  freeing one (its slots back, its limit's queue woken, what it freed
 *	  counted).
 *
 * A limit whose row says memory => true keeps its leases here, not in
 * tb_lease_slots: a lease is a record of a fixed array, on the list of
 * its limit's entry, which counts the slots held.  An entry exists only
 * while it holds leases, so the names a template makes cost nothing once
 * their leases are gone, and nothing needs purging.  One LWLock guards it
 * all: a lease or a release holds it for a few dozen instructions.
 *
 * A lease is held while its ttl has not passed and its holder's backend
 * is there; what is found freed otherwise (a ttl passed, a holder gone,
 * its session's exit) is counted at once, and its limit's queue woken,
 * once the lock is released.  A crash makes shared memory anew: all
 * leases go.  Nothing is saved at a clean shutdown either: no holder
 * outlives its server.
 *
 * Lease ids are below zero (table leases' above): minus a sequence's value
 * times 2^20 plus the record's index, above -2^53.
 *
 * src/lease_memory_records.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common.h"
#include "lease_memory_records.h"
#include "lease_pool.h"
#include "miscadmin.h"
#include "stats.h"
#include "storage/procarray.h"
#include "utils/timestamp.h"
#include "wait.h"

int			max_memory_leases = 10000;	/* GUC (lease_memory.c) */
LeaseShared *lease_shared = NULL;
HTAB	   *limit_hash = NULL;

/* The record of lease "id", or -1 when it cannot be one. */
int
lease_index_of(int64 id)
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
bool
lease_held(const MemoryLease *lease, TimestampTz now)
{
	return lease->id != 0 && lease->expires > now && !holder_gone(lease);
}

/* Whether "lease" holds its slots at "now" as this backend sees it. */
bool
lease_held_here(const MemoryLease *lease, TimestampTz now)
{
	return lease_held(lease, now) && lease->releaser != MyProcPid;
}

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
void
lease_wake_all(WakeList *wake)
{
	TimestampTz now = tb_clock_now();

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

/*
 * Free record "index" (under the exclusive lock): off its limit's list,
 * its slots back, counted into "wake" as "by" says; with "remove", the
 * entry gone with its last lease.
 */
void
lease_free_record(int index, WakeList *wake, bool remove, FreedBy by, TimestampTz now)
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
void
lease_free_id(int64 id, WakeList *wake, FreedBy by, TimestampTz now)
{
	int			index = lease_index_of(id);

	if (index >= 0 && lease_shared->leases[index].id == id)
		lease_free_record(index, wake, true, by, now);
}

/*
 * Free the leases of "limit" no longer held: ttl passed, holder gone
 * (under the exclusive lock).  The entry stays, maybe empty.
 */
void
lease_sweep(LimitEntry *limit, TimestampTz now, WakeList *wake)
{
	int			index = limit->first;

	while (index >= 0)
	{
		MemoryLease *lease = &lease_shared->leases[index];
		int			next = lease->next;

		if (lease->releaser == 0 && !lease_held(lease, now))
			lease_free_record(index, wake, false, FREED_BY_END, now);
		index = next;
	}
}

/* When the first ttl among the leases of "limit" passes (DT_NOEND: none). */
TimestampTz
lease_first_expiry(const LimitEntry *limit)
{
	TimestampTz first = DT_NOEND;

	for (int index = limit->first; index >= 0; index = lease_shared->leases[index].next)
		first = Min(first, lease_shared->leases[index].expires);
	return first;
}

/* The slots of the leases of "limit" this backend's transaction released. */
int32
lease_released_here(const LimitEntry *limit)
{
	int32		slots = 0;

	for (int index = limit->first; index >= 0; index = lease_shared->leases[index].next)
		if (lease_shared->leases[index].releaser == MyProcPid)
			slots += lease_shared->leases[index].slots;
	return slots;
}

/* Set the shared memory of memory limits aside (the library being preloaded). */
void
lease_memory_register(void)
{
	shmem_register(&lease_area);
}
