/*-------------------------------------------------------------------------
 *
 * stats_hash.c
 *	  The counters in shared memory: a fixed-size hash of entries, adding
 *	  to an entry (made if need be), its room and its clock, and starting
 *	  entries from zero.
 *
 * A fixed-size hash partitioned as the lock table is: an entry per
 * template, per named bucket, and per key a table template made; the
 * installation's own entry says since when its buckets without an entry
 * count.  When the hash is full, the clock takes the entry of a key used
 * longest ago (a few partitions at a time, without waiting for a busy
 * one), or if those were all used lately, the first key's it meets: while
 * a key has an entry, no count lacks room.  Named buckets' entries go
 * only when there is no key's left, templates' never.  A count for an
 * entry that went is added to a new one: it is never dropped, only its
 * "since" is new.  No call takes an exclusive lock but to make an entry,
 * and no scan is ever made on a call's behalf but past templates' and
 * named buckets' entries to a key's.
 *
 * Names longer than an entry holds (128 bytes) are kept under their first
 * 120 bytes and a 64-bit hash of the whole name (shmem.c's long keys).
 *
 * src/stats_hash.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common.h"
#include "miscadmin.h"
#include "stats_hash.h"
#include "utils/timestamp.h"

/* the clock: partitions looked in per entry made, entries per partition */
#define CLOCK_PARTITIONS	4
#define CLOCK_ENTRIES		32

int			max_stats_buckets = 10000;	/* GUC (stats_state.c) */

/* in every process */
StatsShared *stats_shared = NULL;
HTAB	   *stats_entries = NULL;

/* What a bucket and a limit both count lies in the same place. */
StaticAssertDecl(offsetof(LimitCounters, slots) == offsetof(BucketCounters, granted_tokens) &&
				 offsetof(LimitCounters, refused) == offsetof(BucketCounters, denied) &&
				 offsetof(LimitCounters, waited) == offsetof(BucketCounters, waited) &&
				 offsetof(LimitCounters, wait_usecs) == offsetof(BucketCounters, wait_usecs) &&
				 offsetof(LimitCounters, timeouts) == offsetof(BucketCounters, timeouts) &&
				 offsetof(LimitCounters, cancelled) == offsetof(BucketCounters, cancelled) &&
				 offsetof(LimitCounters, released) == sizeof(BucketCounters) &&
				 sizeof(StatsCounts) == sizeof(LimitCounters),
				 "a limit's counters lie where a bucket's of the same meaning do");

/* Fail unless the counters exist: the library must be preloaded. */
void
stats_require(void)
{
	if (stats_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("token bucket counters need tokenbucket in shared_preload_libraries"),
				 errdetail("The counters live in shared memory, which is set aside when the server starts."),
				 errhint("Add shared_preload_libraries = 'tokenbucket' to postgresql.conf and restart the server.")));
}

/* The lock of the partition of "hashcode". */
static LWLock *
partition_lock(uint32 hashcode)
{
	return &stats_shared->locks[hashcode % STATS_PARTITIONS].lock;
}

/* Remove "entry" (the caller holds its partition's lock exclusively). */
void
stats_remove_entry(StatsEntry *entry)
{
	StatsPartition *partition = &stats_shared->partitions[entry->hashcode % STATS_PARTITIONS];

	if (partition->hand == entry)
		partition->hand = entry->next;
	if (entry->prev)
		entry->prev->next = entry->next;
	else
		partition->head = entry->next;
	if (entry->next)
		entry->next->prev = entry->prev;
	if (entry->kind == STATS_KEY)
		pg_atomic_fetch_sub_u32(&stats_shared->keys, 1);
	hash_search_with_hash_value(stats_entries, &entry->key, entry->hashcode, HASH_REMOVE, NULL);
}

/*
 * The clock in "partition" (its lock held exclusively): remove the first
 * entry of kind "victim" not counted in since the clock last passed it
 * among the next CLOCK_ENTRIES, giving the others a second chance; with
 * "force", the first of that kind at all (the partition's other entries,
 * templates' and named buckets', are as many as the DBA made).
 */
static bool
clock_partition(StatsPartition *partition, StatsKind victim, bool force)
{
	StatsEntry *start = partition->hand ? partition->hand : partition->head;
	StatsEntry *entry = start;
	int			n = 0;

	if (start == NULL)
		return false;
	do
	{
		partition->hand = entry->next;
		if (entry->kind == victim)
		{
			if (force || !entry->used)
			{
				stats_remove_entry(entry);
				return true;
			}
			entry->used = false;	/* a second chance */
		}
		entry = entry->next ? entry->next : partition->head;
	} while (force ? entry != start : ++n < CLOCK_ENTRIES);
	return false;
}

/*
 * The clock: remove the entry of a key counted in longest ago (of a named
 * bucket, when no key has one and "named" allows) for room.  Without
 * "force", it looks in a few partitions, none it would wait for, and
 * false says they hold none not counted in lately; with it, in all, for
 * any such entry: false says there is none.  The caller holds no
 * partition lock.
 */
static bool
evict_one(bool named, bool force)
{
	bool		keys = pg_atomic_read_u32(&stats_shared->keys) > 0;
	int			partitions = force ? STATS_PARTITIONS :
		CLOCK_PARTITIONS * (keys ? 1 : STATS_PARTITIONS);
	uint32		first = force ? pg_atomic_read_u32(&stats_shared->clock) : 0;

	if (!keys && !named)
		return false;
	for (int i = 0; i < partitions; i++)
	{
		/* forced: each partition once, from where the clock is */
		uint32		p = (force ? first + i :
						 pg_atomic_fetch_add_u32(&stats_shared->clock, 1)) % STATS_PARTITIONS;
		LWLock	   *lock = &stats_shared->locks[p].lock;
		bool		evicted;

		if (stats_shared->partitions[p].head == NULL)
			continue;
		if (force)
			LWLockAcquire(lock, LW_EXCLUSIVE);
		else if (!LWLockConditionalAcquire(lock, LW_EXCLUSIVE))
			continue;
		evicted = clock_partition(&stats_shared->partitions[p], keys ? STATS_KEY : STATS_NAMED,
								  force);
		LWLockRelease(lock);
		if (evicted)
			return true;
	}
	return false;
}

/*
 * Add "delta" to the entry of "key" (whose hash is "hashcode"), made
 * (counting from "since") if it has none; false only when no entry can
 * make room for it (a key's entry for any, a named bucket's for all but
 * keys): every one is a template's, or a named bucket's for a key.
 */
bool
stats_add_hashed(const SharedKey *key, uint32 hashcode, StatsKind kind,
				 int template_len, const StatsCounts *delta, bool limit,
				 TimestampTz since)
{
	LWLock	   *lock = partition_lock(hashcode);
	StatsEntry *entry;
	bool		found;

	for (;;)
	{
		LWLockAcquire(lock, LW_SHARED);
		entry = hash_search_with_hash_value(stats_entries, key, hashcode, HASH_FIND, NULL);
		if (entry != NULL)
		{
			if (!entry->used)
				entry->used = true;
			SpinLockAcquire(&entry->mutex);
			stats_counts_add(&entry->counters, delta, limit);
			SpinLockRelease(&entry->mutex);
			LWLockRelease(lock);
			return true;
		}
		LWLockRelease(lock);

		LWLockAcquire(lock, LW_EXCLUSIVE);
		entry = hash_search_with_hash_value(stats_entries, key, hashcode,
											HASH_ENTER_NULL, &found);
		if (entry != NULL && !found)
		{
			StatsPartition *partition = &stats_shared->partitions[hashcode % STATS_PARTITIONS];

			entry->hashcode = hashcode;
			entry->kind = kind;
			entry->used = true;
			entry->template_len = template_len;
			entry->since = since;
			SpinLockInit(&entry->mutex);
			memset(&entry->counters, 0, sizeof(StatsCounts));
			entry->prev = NULL;
			entry->next = partition->head;
			if (partition->head)
				partition->head->prev = entry;
			partition->head = entry;
			if (kind == STATS_KEY)
				pg_atomic_fetch_add_u32(&stats_shared->keys, 1);
		}
		LWLockRelease(lock);
		if (entry != NULL)
			continue;			/* made (or found): count in it */

		/*
		 * full: a key's entry makes room, a named one's only for these; one
		 * counted in lately if need be.  Each turn removes an entry: another
		 * backend that took the room made progress.
		 */
		if (!evict_one(kind != STATS_KEY, false) && !evict_one(kind != STATS_KEY, true))
			return false;
	}
}

/* stats_add_hashed() for a key whose hash the caller has not kept. */
bool
stats_add(const SharedKey *key, StatsKind kind, int template_len,
		  const StatsCounts *delta, bool limit, TimestampTz since)
{
	return stats_add_hashed(key, stats_hashcode(key), kind, template_len,
							delta, limit, since);
}

/*
 * At startup, in the postmaster: an entry for "key" holding "counts" (a
 * bucket's or a limit's, as a state file kept them), counting from
 * "since"; false when there is no room for it.
 */
bool
stats_restore(const SharedKey *key, StatsKind kind, int template_len,
			  const StatsCounts *counts, TimestampTz since)
{
	StatsCounts none = {0};
	uint32		hashcode = stats_hashcode(key);
	StatsEntry *entry;

	if (!stats_add_hashed(key, hashcode, kind, template_len, &none, false, since))
		return false;
	entry = hash_search_with_hash_value(stats_entries, key, hashcode, HASH_FIND, NULL);
	entry->counters = *counts;
	return true;
}

/* The hash of "key" in the counters' hash, for stats_add_hashed(). */
uint32
stats_hashcode(const SharedKey *key)
{
	return get_hash_value(stats_entries, key);
}

/*
 * The long key of the template of bucket "name" of installation "relid":
 * its first "template_len" - 1 bytes and '*'.
 */
void
stats_template_key(SharedKey *key, Oid relid, const char *name,
				   int template_len)
{
	char	   *t;

	if (template_len <= SHARED_NAME_MAX_BYTES)
	{
		/* the key itself holds it: what shared_key_long() makes, in place */
		shared_key_long(key, relid, name, template_len - 1);
		key->len = template_len;
		key->name[template_len - 1] = '*';
		return;
	}
	t = palloc(template_len);
	memcpy(t, name, template_len - 1);
	t[template_len - 1] = '*';
	shared_key_long(key, relid, t, template_len);
	pfree(t);
}

/* The installation's own entry: when its counters were last reset. */
TimestampTz
stats_installation_since(Oid relid)
{
	SharedKey	key;
	uint32		hashcode;
	StatsEntry *entry;
	TimestampTz since;

	shared_key_long(&key, relid, "", 0);
	hashcode = stats_hashcode(&key);
	LWLockAcquire(partition_lock(hashcode), LW_SHARED);
	entry = hash_search_with_hash_value(stats_entries, &key, hashcode, HASH_FIND, NULL);
	since = entry ? Max(entry->since, stats_shared->started_at) : stats_shared->started_at;
	LWLockRelease(partition_lock(hashcode));
	return since;
}

/*
 * The length of the name of the template of the bucket of "key" as its
 * entry here knows it (0: none), or -1 when it has no entry.
 */
int
stats_known_template(const SharedKey *key)
{
	uint32		hashcode = stats_hashcode(key);
	StatsEntry *entry;
	int			template_len = -1;

	LWLockAcquire(partition_lock(hashcode), LW_SHARED);
	entry = hash_search_with_hash_value(stats_entries, key, hashcode, HASH_FIND, NULL);
	if (entry != NULL)
		template_len = entry->kind == STATS_KEY ? entry->template_len : 0;
	LWLockRelease(partition_lock(hashcode));
	return template_len;
}

/*
 * Call "visit" for every entry, each partition under its exclusive lock
 * ("visit" may remove the entry).
 */
static void
visit_entries(void (*visit) (StatsEntry *entry, void *arg), void *arg)
{
	for (int p = 0; p < STATS_PARTITIONS; p++)
	{
		StatsEntry *entry;

		LWLockAcquire(&stats_shared->locks[p].lock, LW_EXCLUSIVE);
		entry = stats_shared->partitions[p].head;
		while (entry != NULL)
		{
			StatsEntry *next = entry->next;

			visit(entry, arg);
			entry = next;
		}
		LWLockRelease(&stats_shared->locks[p].lock);
	}
}

/* An installation (or a database) whose entries go. */
typedef struct Gone
{
	Oid			dbid;
	Oid			relid;			/* InvalidOid: every one of the database */
} Gone;

/* visit_entries(): remove "entry" if it is of the Gone "arg" names. */
static void
forget_entry(StatsEntry *entry, void *arg)
{
	Gone	   *gone = arg;

	if (entry->key.dbid == gone->dbid &&
		(gone->relid == InvalidOid || entry->key.relid == gone->relid))
		stats_remove_entry(entry);
}

/*
 * Remove the entries of installation "relid" of database "dbid"
 * (InvalidOid: of every installation of it).
 */
void
stats_remove_installation(Oid dbid, Oid relid)
{
	Gone		gone = {.dbid = dbid, .relid = relid};

	visit_entries(forget_entry, &gone);
}

/* What stats_reset_entries() starts from zero: one entry, or a template's keys too. */
typedef struct ResetOf
{
	Oid			relid;
	const SharedKey *key;
	bool		template;		/* a template: its keys' entries too */
	TimestampTz now;
} ResetOf;

/* visit_entries(): start "entry" from zero if the ResetOf "arg" names it. */
static void
reset_entry(StatsEntry *entry, void *arg)
{
	ResetOf    *reset = arg;
	const SharedKey *key = reset->key;

	if (entry->key.dbid != MyDatabaseId || entry->key.relid != reset->relid)
		return;
	if (shared_key_long_match(&entry->key, key, 0) == 0 ||
		(reset->template && entry->kind == STATS_KEY &&
		 entry->template_len == key->len &&
		 memcmp(entry->key.name, key->name, Min(key->len - 1, LONG_NAME_PREFIX)) == 0))
	{
		entry->since = reset->now;
		memset(&entry->counters, 0, sizeof(StatsCounts));
	}
}

/*
 * Start from zero now the entry of "key" of installation "relid" (with
 * "template", a template's name: its own and those of the keys made from
 * it that have entries).
 */
void
stats_reset_entries(Oid relid, const SharedKey *key, bool template, TimestampTz now)
{
	ResetOf		reset = {.relid = relid, .key = key, .template = template, .now = now};

	visit_entries(reset_entry, &reset);
}

/* Shared memory the counters need. */
Size
stats_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(StatsShared)),
					shmem_hash_size(max_stats_buckets, sizeof(StatsEntry)));
}

/* Their locks: a partition's each. */
int
stats_shmem_locks(void)
{
	return STATS_PARTITIONS;
}

/* SharedArea attach: the struct and the hash, made the first time. */
void
stats_attach(LWLockPadded *locks)
{
	bool		found;

	stats_shared = shmem_struct("tokenbucket stats", sizeof(StatsShared), &found);
	stats_entries = shmem_hash("tokenbucket counters", max_stats_buckets,
							   sizeof(SharedKey), sizeof(StatsEntry),
							   shared_key_long_hash, shared_key_long_match,
							   STATS_PARTITIONS);
	if (found)
		return;
	memset(stats_shared, 0, sizeof(StatsShared));
	stats_shared->locks = locks;
	pg_atomic_init_u32(&stats_shared->keys, 0);
	pg_atomic_init_u32(&stats_shared->clock, 0);
}
