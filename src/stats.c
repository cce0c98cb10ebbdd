/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Counters of what each bucket and template did (grants, denials,
 *	  waits, timeouts, cancelled waits, refunds, pauses), exact across
 *	  every backend, at a cost that does not grow with the number of keys.
 *
 * As PostgreSQL's own cumulative statistics do, a backend keeps what its
 * transaction counted, per bucket and nest level, and adds it to shared
 * memory when the transaction ends: grants, refunds and pauses only if it
 * commits (a rollback, of a savepoint too, gives them back); denials,
 * waits, timeouts and cancelled waits either way.  A call on the hot path
 * touches only backend memory.
 *
 * In shared memory, a fixed-size hash partitioned as the lock table is:
 * an entry per template, per named bucket, and per key a table template
 * made; the installation's own entry says since when its buckets without
 * an entry count.  Every count of a key is added to its template's entry
 * as well, so templates' counters are exact whatever happens to keys'
 * entries.  Keys made from a memory template keep their own counters in
 * their memory entry (a StatsSink the router hands over): made and
 * dropped with it, no entry here; a grant's count for them the memory
 * store keeps itself, with what a rollback would give back, and only
 * their template's is pending here (stats_count_template).  When the hash is full, the clock takes
 * the entry of a key used longest ago (a few partitions at a time,
 * without waiting for a busy one), or if those were all used lately, the
 * first key's it meets: while a key has an entry, no count lacks room.
 * Named buckets' entries go only when there is no key's left, templates'
 * never.  A count for an entry that went is added to a new one: it is
 * never dropped, only its "since" is new (with no room at all, a WARNING
 * says so).  No call takes an exclusive lock but to make an entry, and no
 * scan is ever made on a call's behalf but past templates' and named
 * buckets' entries to a key's.
 *
 * Names longer than an entry holds (128 bytes) are kept under their first
 * 120 bytes and a 64-bit hash of the whole name (shmem.c's long keys);
 * tb_stats_key() gives the views that key, to join on.
 *
 * A clean shutdown saves every counter to a file read back at the next
 * start (shmem.c's StateFile): counters start again from zero only after
 * a crash, or by tb_stats_reset().
 *
 * src/stats.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "shmem.h"
#include "stats.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* partitions of the hash, each with its LWLock (a power of 2) */
#define STATS_PARTITIONS	16

/* the clock: partitions looked in per entry made, entries per partition */
#define CLOCK_PARTITIONS	4
#define CLOCK_ENTRIES		32

/* the counters a clean shutdown keeps */
#define STATE_FILE		PGSTAT_STAT_PERMANENT_DIRECTORY "/tokenbucket.counters"
#define STATE_MAGIC		0x74624331	/* "tbC1" */
#define STATE_FORMAT	2		/* 1: no counters of limits */

/* What an entry counts for. */
typedef enum StatsKind
{
	STATS_INSTALLATION,			/* since when buckets without an entry count */
	STATS_TEMPLATE,
	STATS_NAMED,				/* a bucket with its own row */
	STATS_KEY					/* a bucket a table template made */
} StatsKind;

typedef struct StatsEntry
{
	SharedKey	key;			/* first: the hash's key */
	uint32		hashcode;
	uint8		kind;			/* StatsKind */
	bool		used;			/* counted in since the clock passed */
	uint16		template_len;	/* a key's template's name's length */
	struct StatsEntry *prev;	/* its partition's list, for the clock */
	struct StatsEntry *next;
	TimestampTz since;			/* when counting started */
	slock_t		mutex;			/* guards the counters */
	StatsCounters counters;
} StatsEntry;

typedef struct StatsPartition
{
	StatsEntry *head;
	StatsEntry *hand;			/* the entry the clock looks at next */
} StatsPartition;

typedef struct StatsShared
{
	LWLockPadded *locks;		/* STATS_PARTITIONS */
	TimestampTz started_at;		/* the counters began: the server's start */
	pg_atomic_uint32 keys;		/* entries of kind STATS_KEY */
	pg_atomic_uint32 clock;		/* the partition the clock looks in next */
	StatsPartition partitions[STATS_PARTITIONS];
} StatsShared;

/* What a transaction counted for a bucket at a nest level. */
typedef struct PendingId
{
	SharedKey	key;			/* zeroed past the name: hashed whole */
	int			level;
} PendingId;

typedef struct Pending
{
	PendingId	id;				/* first: the hash's key */
	bool		is_template;	/* a template's own count (a key's store
								 * counted the key's) */
	int			template_len;	/* its template's name's length, 0: none */
	SharedKey	template;		/* and its key */
	bool		hashed;			/* hashcode is known */
	uint32		hashcode;		/* the shared hash's, of id.key (at the first
								 * flush into the hash, kept after) */
	uint32		template_hashcode;	/* and of template: a kept pending's
									 * flush hashes nothing */
	StatsSink	sink;			/* where its own counts go; NULL: here */
	uint64		xact;			/* the transaction it counts in (xact_seq) */
	TimestampTz at;
	StatsCounters counters;
} Pending;

/* installations (or databases) whose counters go at commit */
typedef struct Forget
{
	Oid			dbid;
	Oid			relid;			/* InvalidOid: every one of the database */
	int			level;
} Forget;

/* GUCs */
static bool track_stats = true;
static int	max_stats_buckets = 10000;

/* in every process */
static StatsShared *shared = NULL;
static HTAB *hash = NULL;

/* counts kept allocated between transactions */
#define PENDINGS_KEPT	64

/*
 * this backend's transaction: its counts, in a hash kept from one
 * transaction to the next, emptied, unless a big one grew it
 */
static MemoryContext pending_context = NULL;
static HTAB *pendings = NULL;
static Pending *last = NULL;	/* the pending counted in last: kept (at
								 * level 1, counts zeroed) for the next
								 * transaction, which often counts the same
								 * bucket again */
static uint64 xact_seq = 1;		/* this backend's transactions, counted */
static Pending **made = NULL;	/* the pendings in the hash: walking them */
static int	nmade = 0;			/* costs what the transaction counted, */
static int	maxmade = 0;		/* where a walk of the hash costs its buckets */
static int	deepest = 0;		/* no count is kept at a deeper level */
static List *forgets = NIL;

/*
 * hash_search() support for PendingId: the name's used bytes and the
 * level (a blob hash would read all SHARED_NAME_MAX_BYTES of the name, on
 * every call counted)
 */
static uint32
pending_id_hash(const void *key, Size keysize)
{
	const PendingId *id = key;

	return hash_combine(shared_key_long_hash(&id->key, sizeof(SharedKey)), id->level);
}

/* hash_search() support for PendingId: 0 when equal. */
static int
pending_id_match(const void *key1, const void *key2, Size keysize)
{
	const PendingId *a = key1;
	const PendingId *b = key2;

	return a->level != b->level ||
		shared_key_long_match(&a->key, &b->key, sizeof(SharedKey));
}

/* Note that "pending" is in the hash, for flush() and reset_transaction(). */
static void
made_add(Pending *pending)
{
	if (nmade == maxmade)
	{
		maxmade = Max(16, maxmade * 2);
		made = made == NULL ?
			MemoryContextAlloc(pending_context, sizeof(Pending *) * maxmade) :
			repalloc(made, sizeof(Pending *) * maxmade);
	}
	made[nmade++] = pending;
}

/*
 * Make "pending" the one counted in last.  The one before, if kept from an
 * earlier transaction and not counted in this one, leaves the hash: only
 * the last one is ever kept.
 */
static void
set_last(Pending *pending)
{
	if (last != NULL && last != pending && last->xact != xact_seq)
		(void) hash_search(pendings, &last->id, HASH_REMOVE, NULL);
	last = pending;
}

/* Note again every pending in the hash (after a subtransaction moved them). */
static void
made_rebuild(void)
{
	HASH_SEQ_STATUS status;
	Pending    *pending;

	nmade = 0;
	hash_seq_init(&status, pendings);
	while ((pending = hash_seq_search(&status)) != NULL)
		made_add(pending);
}

/* Add "delta" to "sum". */
void
stats_counters_add(StatsCounters *sum, const StatsCounters *delta)
{
	sum->granted += delta->granted;
	sum->granted_tokens += delta->granted_tokens;
	sum->denied += delta->denied;
	sum->waited += delta->waited;
	sum->wait_usecs += delta->wait_usecs;
	sum->timeouts += delta->timeouts;
	sum->refunded_tokens += delta->refunded_tokens;
	sum->pauses += delta->pauses;
	sum->cancelled += delta->cancelled;
	sum->released += delta->released;
	sum->ended += delta->ended;
	sum->expired += delta->expired;
}

/*
 * Forget the counts a rollback gives back: grants, refunds, pauses; a
 * limit's slots released, or taken over from a lease that ended or
 * expired (the rows go back to naming it).
 */
static void
counters_roll_back(StatsCounters *counters)
{
	counters->granted = 0;
	counters->granted_tokens = 0;
	counters->refunded_tokens = 0;
	counters->pauses = 0;
	counters->released = 0;
	counters->ended = 0;
	counters->expired = 0;
}

/*
 * The SQL values of "counters" (STATS_COLUMNS of them): granted,
 * granted_tokens, denied, waited, wait_seconds, timeouts,
 * refunded_tokens, pauses, cancelled.
 */
void
stats_values(const StatsCounters *c, Datum *values)
{
	values[0] = Int64GetDatum(c->granted);
	values[1] = Float8GetDatum(c->granted_tokens);
	values[2] = Int64GetDatum(c->denied);
	values[3] = Int64GetDatum(c->waited);
	values[4] = Float8GetDatum((double) c->wait_usecs / USECS_PER_SEC);
	values[5] = Int64GetDatum(c->timeouts);
	values[6] = Float8GetDatum(c->refunded_tokens);
	values[7] = Int64GetDatum(c->pauses);
	values[8] = Int64GetDatum(c->cancelled);
}

/*
 * The SQL values of a limit's counters (LIMIT_COLUMNS of them): leases
 * granted, slots, refused, waited, wait_seconds, timeouts, cancelled,
 * then slots released, ended and expired.
 */
#define LIMIT_COLUMNS 10
static void
limit_values(const StatsCounters *c, Datum *values)
{
	values[0] = Int64GetDatum(c->granted);
	values[1] = Int64GetDatum((int64) c->granted_tokens);
	values[2] = Int64GetDatum(c->denied);
	values[3] = Int64GetDatum(c->waited);
	values[4] = Float8GetDatum((double) c->wait_usecs / USECS_PER_SEC);
	values[5] = Int64GetDatum(c->timeouts);
	values[6] = Int64GetDatum(c->cancelled);
	values[7] = Int64GetDatum(c->released);
	values[8] = Int64GetDatum(c->ended);
	values[9] = Int64GetDatum(c->expired);
}

/* Whether calls are counted now: the library preloaded, and tracking on. */
bool
stats_enabled(void)
{
	return shared != NULL && track_stats;
}

/* Fail unless the counters exist: the library must be preloaded. */
static void
stats_require(void)
{
	if (shared == NULL)
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
	return &shared->locks[hashcode % STATS_PARTITIONS].lock;
}

/* Remove "entry" (the caller holds its partition's lock exclusively). */
static void
remove_entry(StatsEntry *entry)
{
	StatsPartition *partition = &shared->partitions[entry->hashcode % STATS_PARTITIONS];

	if (partition->hand == entry)
		partition->hand = entry->next;
	if (entry->prev)
		entry->prev->next = entry->next;
	else
		partition->head = entry->next;
	if (entry->next)
		entry->next->prev = entry->prev;
	if (entry->kind == STATS_KEY)
		pg_atomic_fetch_sub_u32(&shared->keys, 1);
	hash_search_with_hash_value(hash, &entry->key, entry->hashcode, HASH_REMOVE, NULL);
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
				remove_entry(entry);
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
	bool		keys = pg_atomic_read_u32(&shared->keys) > 0;
	int			partitions = force ? STATS_PARTITIONS :
		CLOCK_PARTITIONS * (keys ? 1 : STATS_PARTITIONS);
	uint32		first = force ? pg_atomic_read_u32(&shared->clock) : 0;

	if (!keys && !named)
		return false;
	for (int i = 0; i < partitions; i++)
	{
		/* forced: each partition once, from where the clock is */
		uint32		p = (force ? first + i :
						 pg_atomic_fetch_add_u32(&shared->clock, 1)) % STATS_PARTITIONS;
		LWLock	   *lock = &shared->locks[p].lock;
		bool		evicted;

		if (shared->partitions[p].head == NULL)
			continue;
		if (force)
			LWLockAcquire(lock, LW_EXCLUSIVE);
		else if (!LWLockConditionalAcquire(lock, LW_EXCLUSIVE))
			continue;
		evicted = clock_partition(&shared->partitions[p], keys ? STATS_KEY : STATS_NAMED,
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
static bool
count_in_hashed(const SharedKey *key, uint32 hashcode, StatsKind kind, int template_len,
				const StatsCounters *delta, TimestampTz since)
{
	LWLock	   *lock = partition_lock(hashcode);
	StatsEntry *entry;
	bool		found;

	for (;;)
	{
		LWLockAcquire(lock, LW_SHARED);
		entry = hash_search_with_hash_value(hash, key, hashcode, HASH_FIND, NULL);
		if (entry != NULL)
		{
			if (!entry->used)
				entry->used = true;
			SpinLockAcquire(&entry->mutex);
			stats_counters_add(&entry->counters, delta);
			SpinLockRelease(&entry->mutex);
			LWLockRelease(lock);
			return true;
		}
		LWLockRelease(lock);

		LWLockAcquire(lock, LW_EXCLUSIVE);
		entry = hash_search_with_hash_value(hash, key, hashcode, HASH_ENTER_NULL, &found);
		if (entry != NULL && !found)
		{
			StatsPartition *partition = &shared->partitions[hashcode % STATS_PARTITIONS];

			entry->hashcode = hashcode;
			entry->kind = kind;
			entry->used = true;
			entry->template_len = template_len;
			entry->since = since;
			SpinLockInit(&entry->mutex);
			memset(&entry->counters, 0, sizeof(StatsCounters));
			entry->prev = NULL;
			entry->next = partition->head;
			if (partition->head)
				partition->head->prev = entry;
			partition->head = entry;
			if (kind == STATS_KEY)
				pg_atomic_fetch_add_u32(&shared->keys, 1);
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

/* count_in_hashed() for a key whose hash the caller has not kept. */
static bool
count_in(const SharedKey *key, StatsKind kind, int template_len,
		 const StatsCounters *delta, TimestampTz since)
{
	return count_in_hashed(key, get_hash_value(hash, key), kind, template_len,
						   delta, since);
}

/*
 * The long key of the template of bucket "name" of installation "relid":
 * its first "template_len" - 1 bytes and '*'.
 */
static void
template_key(SharedKey *key, Oid relid, const char *name, int template_len)
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
static TimestampTz
installation_since(Oid relid)
{
	SharedKey	key;
	uint32		hashcode;
	StatsEntry *entry;
	TimestampTz since;

	shared_key_long(&key, relid, "", 0);
	hashcode = get_hash_value(hash, &key);
	LWLockAcquire(partition_lock(hashcode), LW_SHARED);
	entry = hash_search_with_hash_value(hash, &key, hashcode, HASH_FIND, NULL);
	since = entry ? Max(entry->since, shared->started_at) : shared->started_at;
	LWLockRelease(partition_lock(hashcode));
	return since;
}

/*
 * The length of the name of the template of the bucket of "key" as its
 * entry here knows it (0: none), or -1 when it has no entry.
 */
static int
known_template(const SharedKey *key)
{
	uint32		hashcode = get_hash_value(hash, key);
	StatsEntry *entry;
	int			template_len = -1;

	LWLockAcquire(partition_lock(hashcode), LW_SHARED);
	entry = hash_search_with_hash_value(hash, key, hashcode, HASH_FIND, NULL);
	if (entry != NULL)
		template_len = entry->kind == STATS_KEY ? entry->template_len : 0;
	LWLockRelease(partition_lock(hashcode));
	return template_len;
}

/*
 * Set the template "pending" counts for too: "template_len" when the store
 * knows it (0: none), else as the counters know it, else as template_of()
 * finds it.
 */
static void
pending_template(Pending *pending, Oid relid, text *name, int template_len,
				 int (*template_of) (void *arg), void *arg)
{
	if (template_len < 0)
		template_len = known_template(&pending->id.key);
	pending->template_len = template_len >= 0 ? template_len : template_of(arg);
	if (pending->template_len > 0)
	{
		template_key(&pending->template, relid, VARDATA_ANY(name), pending->template_len);
		pending->template_hashcode = get_hash_value(hash, &pending->template);
	}
}

/* Where pending_of() found a pending count. */
typedef enum PendingFound
{
	PENDING_NEW,				/* made now */
	PENDING_KEPT,				/* kept from an earlier transaction */
	PENDING_CURRENT				/* counted in already by this transaction */
} PendingFound;

/*
 * The pending count of "id" at the current nest level (its counters
 * zeroed unless this transaction counted in it already), made if need be:
 * the one counted in last needs no lookup.  The caller sets what a new or kept one counts for, then
 * made_add()s it (so that an error on the way leaves it out of flush()).
 */
static Pending *
pending_of(PendingId *id, PendingFound *how)
{
	Pending    *pending;
	bool		found;

	id->level = GetCurrentTransactionNestLevel();
	/* the bucket counted in last, again: nothing to look up */
	if (last != NULL && memcmp(&last->id, id, sizeof(*id)) == 0)
	{
		*how = last->xact == xact_seq ? PENDING_CURRENT : PENDING_KEPT;
		last->xact = xact_seq;
		return last;
	}
	if (pendings == NULL)
	{
		HASHCTL		info;

		if (pending_context == NULL)
			pending_context = AllocSetContextCreate(TopMemoryContext, "tokenbucket counts",
													ALLOCSET_SMALL_SIZES);
		info.keysize = sizeof(PendingId);
		info.entrysize = sizeof(Pending);
		info.hash = pending_id_hash;
		info.match = pending_id_match;
		info.hcxt = pending_context;
		pendings = hash_create("tokenbucket counts", PENDINGS_KEPT, &info,
							   HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	}
	pending = hash_search(pendings, id, HASH_ENTER, &found);
	*how = found ? PENDING_CURRENT : PENDING_NEW;
	if (!found)
	{
		deepest = Max(deepest, id->level);
		pending->hashed = false;
		pending->xact = xact_seq;
		pending->is_template = false;
		pending->template_len = 0;
		pending->sink = NULL;
		memset(&pending->counters, 0, sizeof(StatsCounters));
	}
	set_last(pending);
	return pending;
}

/*
 * Count "delta" for bucket "name" of installation "relid" when the
 * transaction ends.  "template_len" is the length of its template's name
 * (with the '*'; 0: none), or -1 when the caller does not know it: then
 * "template_of" says it (the caller's way to look it up), once per
 * bucket and transaction, unless the bucket's entry knows.  With "sink",
 * the bucket's own counts go there, and only its template's here.
 */
void
stats_count(Oid relid, text *name, const StatsCounters *delta, int template_len,
			int (*template_of) (void *arg), void *arg, StatsSink sink,
			TimestampTz now)
{
	PendingId	id;
	Pending    *pending;
	PendingFound how;

	if (!stats_enabled())
		return;
	memset(&id, 0, sizeof(id));
	shared_key_long(&id.key, relid, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
	pending = pending_of(&id, &how);
	/*
	 * kept from an earlier transaction: its template may have changed
	 * since (a store that knows says so; else it is looked up again)
	 */
	if (how == PENDING_NEW ||
		(how == PENDING_KEPT &&
		 (template_len < 0 || template_len != pending->template_len)))
		pending_template(pending, relid, name, template_len, template_of, arg);
	if (how != PENDING_CURRENT)
	{
		pending->is_template = false;
		pending->sink = sink;
		made_add(pending);
	}
	else if (sink != NULL)
		pending->sink = sink;	/* a store that keeps its keys' counters
								 * knows it now */
	pending->at = now;
	stats_counters_add(&pending->counters, delta);
}

/*
 * Count "delta" when the transaction ends for the template of bucket
 * "name" (its name "template_len" bytes long, '*' included) only: the
 * bucket's store counted it in the bucket's own counters.  A gateway's
 * calls on many keys of one template count in one pending count, found
 * without a lookup.
 */
void
stats_count_template(Oid relid, text *name, int template_len,
					 const StatsCounters *delta, TimestampTz now)
{
	PendingId	id;
	Pending    *pending;
	PendingFound how;

	if (!stats_enabled())
		return;
	memset(&id, 0, sizeof(id));
	template_key(&id.key, relid, VARDATA_ANY(name), template_len);
	pending = pending_of(&id, &how);
	if (how != PENDING_CURRENT)
	{
		pending->is_template = true;
		pending->template_len = 0;
		pending->sink = NULL;
		made_add(pending);
	}
	pending->at = now;
	stats_counters_add(&pending->counters, delta);
}

/*
 * Say, unless "kept", that counts found no room (once a transaction: a
 * flood of them says it once).
 */
static void
report_lost(bool kept)
{
	static uint64 reported = 0;

	if (kept || reported == xact_seq)
		return;
	reported = xact_seq;
	ereport(WARNING,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("no room in the counters: counts of buckets or limits are lost"),
			 errdetail("Templates and named buckets and limits take all %d entries of tokenbucket.max_stats_buckets, and only keys' entries make room for others.",
					   max_stats_buckets),
			 errhint("Raise tokenbucket.max_stats_buckets and restart the server.")));
}

/*
 * Add "delta" for bucket or limit "name" ("len" bytes) of installation
 * "relid" to shared memory now, and to its template's counters
 * ("template_len": the length of its name, 0: none): for what happens
 * outside any transaction, or whatever becomes of it (a memory lease
 * freed by its backend's exit).
 */
void
stats_count_now(Oid relid, const char *name, int len, int template_len,
				const StatsCounters *delta, TimestampTz now)
{
	SharedKey	key;
	bool		kept = true;

	if (!stats_enabled())
		return;
	if (template_len > 0)
	{
		template_key(&key, relid, name, template_len);
		kept = count_in(&key, STATS_TEMPLATE, 0, delta, now);
	}
	shared_key_long(&key, relid, name, len);
	kept &= count_in(&key, template_len > 0 ? STATS_KEY : STATS_NAMED, template_len,
					 delta, now);
	report_lost(kept);
}

/*
 * Add what a pending count holds to its entries: its template's, and its
 * own (here, or its sink).  False when some found no room.
 */
static bool
flush_one(Pending *pending)
{
	const SharedKey *key = &pending->id.key;
	bool		kept = true;

	if (pending->template_len > 0)
		kept = count_in_hashed(&pending->template, pending->template_hashcode,
							   STATS_TEMPLATE, 0, &pending->counters, pending->at);
	if (pending->sink != NULL)
		pending->sink(key, &pending->counters, pending->at);
	else
	{
		if (!pending->hashed)
		{
			pending->hashcode = get_hash_value(hash, key);
			pending->hashed = true;
		}
		kept &= count_in_hashed(key, pending->hashcode,
								pending->is_template ? STATS_TEMPLATE :
								pending->template_len > 0 ? STATS_KEY : STATS_NAMED,
								pending->template_len, &pending->counters, pending->at);
	}
	return kept;
}

/* Add every pending count to shared memory ("abort": only what stays). */
static void
flush(bool abort)
{
	bool		kept = true;

	for (int i = 0; i < nmade; i++)
	{
		if (abort)
			counters_roll_back(&made[i]->counters);
		kept &= flush_one(made[i]);
	}
	report_lost(kept);
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

		LWLockAcquire(&shared->locks[p].lock, LW_EXCLUSIVE);
		entry = shared->partitions[p].head;
		while (entry != NULL)
		{
			StatsEntry *next = entry->next;

			visit(entry, arg);
			entry = next;
		}
		LWLockRelease(&shared->locks[p].lock);
	}
}

/* visit_entries(): remove "entry" if it is of the Forget "arg" names. */
static void
forget_entry(StatsEntry *entry, void *arg)
{
	Forget	   *forget = arg;

	if (entry->key.dbid == forget->dbid &&
		(forget->relid == InvalidOid || entry->key.relid == forget->relid))
		remove_entry(entry);
}

/* Remove the entries of what the committed transaction dropped. */
static void
apply_forgets(void)
{
	ListCell   *lc;

	foreach(lc, forgets)
		visit_entries(forget_entry, lfirst(lc));
}

/* Forget the transaction's counts (at its end). */
static void
reset_transaction(void)
{
	if (pendings != NULL && hash_get_num_entries(pendings) > PENDINGS_KEPT)
	{
		hash_destroy(pendings);
		pendings = NULL;
		last = NULL;
	}
	else
	{
		bool		stale = last != NULL && last->xact != xact_seq;
		bool		keep = last != NULL && !stale && last->id.level == 1;

		if (stale)
			set_last(NULL);
		for (int i = 0; i < nmade; i++)
			if (!keep || made[i] != last)
				(void) hash_search(pendings, &made[i]->id, HASH_REMOVE, NULL);
		if (keep)
			memset(&last->counters, 0, sizeof(StatsCounters));
		else
			last = NULL;
	}
	nmade = 0;
	xact_seq++;
	deepest = 0;
	forgets = NIL;
}

/*
 * What this transaction holds that a prepared one could not carry (see
 * xact.c), or NULL: the counters of what it drops go when it commits.
 */
const char *
stats_unpreparable(void)
{
	return forgets != NIL ? "counters of a dropped installation" : NULL;
}

/*
 * The transaction's end (xact.c): at commit (or PREPARE, which is where a
 * prepared transaction's calls are counted), everything; at abort, what a
 * rollback does not give back.
 */
void
stats_xact_end(bool commit)
{
	if (shared == NULL)
		return;
	flush(!commit);
	if (commit && forgets != NIL)
		apply_forgets();
	reset_transaction();
}

/*
 * A subtransaction's end (xact.c): an aborted one's grants, refunds and
 * pauses are given back; what is left, and all a committed one counted,
 * becomes its parent's.
 */
void
stats_subxact_end(bool commit)
{
	int			level = GetCurrentTransactionNestLevel();
	bool		abort = !commit;
	ListCell   *lc;

	if (shared == NULL)
		return;
	foreach(lc, forgets)
	{
		Forget	   *forget = lfirst(lc);

		if (forget->level < level)
			continue;
		if (abort)
			forgets = foreach_delete_current(forgets, lc);
		else
			forget->level = level - 1;
	}
	/* no count at this level: nothing to look at (a subtransaction each) */
	if (pendings != NULL && level <= deepest)
	{
		HASH_SEQ_STATUS status;
		Pending    *pending;
		List	   *moved = NIL;

		/* no kept pending for a parent to merge into, and none pointed at */
		set_last(NULL);
		/* the level's counts, out of the hash first (it is being changed) */
		hash_seq_init(&status, pendings);
		while ((pending = hash_seq_search(&status)) != NULL)
			if (pending->id.level >= level)
				moved = lappend(moved, pending);
		foreach(lc, moved)
		{
			Pending		copy = *(Pending *) lfirst(lc);
			Pending    *parent;
			bool		found;

			(void) hash_search(pendings, &copy.id, HASH_REMOVE, NULL);
			if (abort)
				counters_roll_back(&copy.counters);
			copy.id.level = level - 1;
			parent = hash_search(pendings, &copy.id, HASH_ENTER, &found);
			if (found)
			{
				stats_counters_add(&parent->counters, &copy.counters);
				parent->at = Max(parent->at, copy.at);
			}
			else
				*parent = copy;
		}
		list_free(moved);
		made_rebuild();
		deepest = level - 1;
	}
}

/*
 * Forget the counters of installation "relid" of database "dbid"
 * (InvalidOid: of every installation of it) when the transaction commits:
 * its table, or the database, is being dropped.
 */
void
stats_forget(Oid dbid, Oid relid)
{
	MemoryContext old;
	Forget	   *forget;

	if (shared == NULL)
		return;
	old = MemoryContextSwitchTo(TopTransactionContext);
	forget = palloc(sizeof(Forget));
	forget->dbid = dbid;
	forget->relid = relid;
	forget->level = GetCurrentTransactionNestLevel();
	forgets = lappend(forgets, forget);
	MemoryContextSwitchTo(old);
}

/* What stats_reset() of one bucket (or a template's keys) starts from zero. */
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
		memset(&entry->counters, 0, sizeof(StatsCounters));
	}
}

/*
 * Start the counters of bucket "name" from zero now (of a template: its
 * own and those of the keys made from it that have entries here), or
 * with NULL, those of every bucket of installation "relid".  Counts of
 * transactions still open are added after the reset.
 */
void
stats_reset(Oid relid, text *name)
{
	TimestampTz now = GetCurrentTimestamp();
	SharedKey	key;

	stats_require();
	if (name != NULL)
	{
		ResetOf		reset = {.relid = relid, .key = &key,
		.template = is_template_name(name), .now = now};

		shared_key_long(&key, relid, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
		visit_entries(reset_entry, &reset);
	}
	else
	{
		Forget		installation = {.dbid = MyDatabaseId, .relid = relid};
		StatsCounters none = {0};

		visit_entries(forget_entry, &installation);
		/* the installation's own entry says since when it counts */
		shared_key_long(&key, relid, "", 0);
		(void) count_in(&key, STATS_INSTALLATION, 0, &none, now);
	}
}

/* Shared memory the counters need. */
static Size
stats_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(StatsShared)),
					shmem_hash_size(max_stats_buckets, sizeof(StatsEntry)));
}

/* Their locks: a partition's each. */
static int
stats_shmem_locks(void)
{
	return STATS_PARTITIONS;
}

/* SharedArea attach: the struct and the hash, made the first time. */
static void
stats_attach(LWLockPadded *locks)
{
	bool		found;

	shared = shmem_struct("tokenbucket stats", sizeof(StatsShared), &found);
	hash = shmem_hash("tokenbucket counters", max_stats_buckets, sizeof(SharedKey),
					  sizeof(StatsEntry), shared_key_long_hash, shared_key_long_match,
					  STATS_PARTITIONS);
	if (found)
		return;
	memset(shared, 0, sizeof(StatsShared));
	shared->locks = locks;
	pg_atomic_init_u32(&shared->keys, 0);
	pg_atomic_init_u32(&shared->clock, 0);
}

/* SharedArea shutdown: keep every counter in the state file. */
static void
stats_save(void)
{
	StateFile	sf;
	int64		count = hash_get_num_entries(hash);

	if (!state_save_begin(&sf, STATE_FILE, STATE_MAGIC, STATE_FORMAT))
		return;
	state_save(&sf, &shared->started_at, sizeof(TimestampTz));
	state_save(&sf, &count, sizeof(count));
	for (int p = 0; p < STATS_PARTITIONS; p++)
		for (StatsEntry *entry = shared->partitions[p].head; entry; entry = entry->next)
		{
			state_save(&sf, &entry->key, offsetof(SharedKey, name) +
					   Min(entry->key.len, SHARED_NAME_MAX_BYTES));
			state_save(&sf, &entry->kind, sizeof(entry->kind));
			state_save(&sf, &entry->template_len, sizeof(entry->template_len));
			state_save(&sf, &entry->since, sizeof(entry->since));
			state_save(&sf, &entry->counters, sizeof(StatsCounters));
		}
	(void) state_save_end(&sf);
}

/*
 * SharedArea startup, in the postmaster: the counters a clean shutdown
 * kept, or zero from now.
 */
static void
stats_startup(void)
{
	StateFile	sf;
	bool		existed;
	int64		count;
	TimestampTz started_at;

	shared->started_at = GetCurrentTimestamp();
	if (!state_load_begin(&sf, STATE_FILE, STATE_MAGIC, STATE_FORMAT,
						  "The counters start from zero.", &existed))
		return;
	if (state_load(&sf, &started_at, sizeof(started_at)) &&
		state_load(&sf, &count, sizeof(count)))
	{
		for (int64 i = 0; i < count; i++)
		{
			SharedKey	key;
			uint8		kind;
			uint16		template_len;
			TimestampTz since;
			StatsCounters counters = {0};

			memset(&key, 0, sizeof(key));
			if (!state_load(&sf, &key, offsetof(SharedKey, name)) ||
				!state_load(&sf, key.name, Min(key.len, SHARED_NAME_MAX_BYTES)) ||
				!state_load(&sf, &kind, sizeof(kind)) ||
				!state_load(&sf, &template_len, sizeof(template_len)) ||
				!state_load(&sf, &since, sizeof(since)) ||
				!state_load(&sf, &counters, sf.format >= 2 ?
							sizeof(counters) : STATS_COUNTERS_SIZE_1_6))
				break;
			if (kind > STATS_KEY || !count_in(&key, kind, template_len, &counters, since))
			{
				sf.failed = true;
				break;
			}
		}
	}
	if (!state_load_end(&sf))
	{
		/* what was read is not to be trusted either */
		for (int p = 0; p < STATS_PARTITIONS; p++)
			while (shared->partitions[p].head != NULL)
				remove_entry(shared->partitions[p].head);
		return;
	}
	shared->started_at = started_at;
}

static const SharedArea stats_area = {
	.name = "tokenbucket stats",
	.size = stats_shmem_size,
	.nlocks = stats_shmem_locks,
	.attach = stats_attach,
	.startup = stats_startup,
	.shutdown = stats_save,
};

/* Initialize at load time: the GUCs, and shared memory when preloading. */
void
stats_init(void)
{
	DefineCustomBoolVariable("tokenbucket.track_stats",
							 "Counts what each token bucket grants, denies and waits for.",
							 "The counts are shown by tb_stats; they need the library preloaded.",
							 &track_stats,
							 true,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);
	if (!process_shared_preload_libraries_in_progress)
		return;

	DefineCustomIntVariable("tokenbucket.max_stats_buckets",
							"Most templates, named buckets and table templates' keys the server keeps counters for.",
							"Each takes shared memory from the start; when they are all in use, "
							"the keys' counters used longest ago go (their templates keep the counts).",
							&max_stats_buckets,
							10000, 100, 100000000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	shmem_register(&stats_area);
}

/* One row of list_counters(), copied out under its partition's lock. */
typedef struct ListedCounters
{
	SharedKey	key;
	TimestampTz since;
	StatsCounters counters;
} ListedCounters;

/*
 * A row (name, counters, since) into "store" per entry of installation
 * "relid" of the kinds in "kinds" (a bit per StatsKind), one partition at
 * a time: no lock is held longer than a partition's copy; then a row with
 * a NULL name whose "since" holds for buckets without an entry.  With
 * "limits", "relid" is a tb_limits and the columns a limit's.
 */
static void
list_counters(Oid relid, int kinds, bool limits, Tuplestorestate *store,
			  TupleDesc desc)
{
	ListedCounters *rows = NULL;
	int			maxrows = 0;
	int			columns = limits ? LIMIT_COLUMNS : STATS_COLUMNS;
	Datum		values[2 + Max(STATS_COLUMNS, LIMIT_COLUMNS)];
	bool		nulls[2 + Max(STATS_COLUMNS, LIMIT_COLUMNS)];

	for (int p = 0; p < STATS_PARTITIONS; p++)
	{
		LWLock	   *lock = &shared->locks[p].lock;
		int			nrows = 0;
		int			wanted = 0;
		StatsEntry *entry;

		/* room first: nothing may fail under the lock */
		LWLockAcquire(lock, LW_SHARED);
		for (entry = shared->partitions[p].head; entry; entry = entry->next)
			wanted++;
		LWLockRelease(lock);
		if (wanted > maxrows)
		{
			maxrows = wanted * 2;
			rows = rows ? repalloc(rows, sizeof(ListedCounters) * maxrows) :
				palloc(sizeof(ListedCounters) * maxrows);
		}
		LWLockAcquire(lock, LW_SHARED);
		for (entry = shared->partitions[p].head; entry && nrows < maxrows; entry = entry->next)
		{
			if (entry->key.dbid != MyDatabaseId || entry->key.relid != relid ||
				(kinds & (1 << entry->kind)) == 0)
				continue;
			rows[nrows].key = entry->key;
			rows[nrows].since = entry->since;
			SpinLockAcquire(&entry->mutex);
			rows[nrows].counters = entry->counters;
			SpinLockRelease(&entry->mutex);
			nrows++;
		}
		LWLockRelease(lock);

		memset(nulls, 0, sizeof(nulls));
		for (int i = 0; i < nrows; i++)
		{
			values[0] = PointerGetDatum(shared_key_long_text(&rows[i].key));
			if (limits)
				limit_values(&rows[i].counters, values + 1);
			else
				stats_values(&rows[i].counters, values + 1);
			values[1 + columns] = TimestampTzGetDatum(rows[i].since);
			tuplestore_putvalues(store, desc, values, nulls);
		}
	}
	memset(nulls, true, sizeof(nulls));
	nulls[1 + columns] = false;
	values[1 + columns] = TimestampTzGetDatum(installation_since(relid));
	tuplestore_putvalues(store, desc, values, nulls);
}

PG_FUNCTION_INFO_V1(tb_stats_counters);

/*
 * tb_stats_counters(): the counters of every named bucket and table
 * template's key of this installation that has an entry (name, granted,
 * granted_tokens, denied, waited, wait_seconds, timeouts,
 * refunded_tokens, pauses, cancelled, since), and a row with a NULL name
 * whose "since" holds for buckets without one.  Per-key: for whoever may
 * read tb_stats.
 */
Datum
tb_stats_counters(PG_FUNCTION_ARGS)
{
	Installation inst = installation_of(fcinfo);
	static const char *const views[] = {"tb_stats", NULL};
	TupleDesc	desc;
	Tuplestorestate *store = materialize_begin(fcinfo, &desc);

	check_may_read(&inst, "tb_stats_counters()", views);
	stats_require();
	list_counters(installation_table(&inst), (1 << STATS_NAMED) | (1 << STATS_KEY),
				  false, store, desc);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(tb_template_counters);

/*
 * tb_template_counters(): tb_stats_counters() of the templates: each
 * template's counters, the sums over every bucket made from it.  For
 * whoever may read tb_template_stats or tb_stats.
 */
Datum
tb_template_counters(PG_FUNCTION_ARGS)
{
	Installation inst = installation_of(fcinfo);
	static const char *const views[] = {"tb_template_stats", "tb_stats", NULL};
	TupleDesc	desc;
	Tuplestorestate *store = materialize_begin(fcinfo, &desc);

	check_may_read(&inst, "tb_template_counters()", views);
	stats_require();
	list_counters(installation_table(&inst), 1 << STATS_TEMPLATE, false, store, desc);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(tb_limit_counters);

/*
 * tb_limit_counters(): the counters of every limit, limit template and
 * name a limit template made of this installation that has an entry
 * (name, granted, slots, refused, waited, wait_seconds, timeouts,
 * cancelled, released, ended, expired, since), and a row with a NULL name
 * whose "since" holds for limits without one.  For whoever may read
 * tb_stats.
 */
Datum
tb_limit_counters(PG_FUNCTION_ARGS)
{
	Installation inst = installation_of(fcinfo);
	static const char *const views[] = {"tb_stats", NULL};
	TupleDesc	desc;
	Tuplestorestate *store = materialize_begin(fcinfo, &desc);
	Oid			limits;

	check_may_read(&inst, "tb_limit_counters()", views);
	stats_require();
	limits = installation_limits(&inst);
	if (!OidIsValid(limits))
		report_dropped();
	list_counters(limits, (1 << STATS_NAMED) | (1 << STATS_KEY) | (1 << STATS_TEMPLATE),
				  true, store, desc);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(tb_stats_key);

/*
 * tb_stats_key(name): the name the counters of bucket "name" are listed
 * under: the name itself, or for one over 128 bytes its first bytes, an
 * ellipsis and a hash of it all.
 */
Datum
tb_stats_key(PG_FUNCTION_ARGS)
{
	text	   *name = PG_GETARG_TEXT_PP(0);
	SharedKey	key;

	shared_key_long(&key, InvalidOid, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
	PG_RETURN_TEXT_P(shared_key_long_text(&key));
}
