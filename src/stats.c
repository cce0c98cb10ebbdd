/*-------------------------------------------------------------------------
 *
 * stats.c
 *	  Counters of what each bucket did (grants, denials, waits, timeouts,
 *	  refunds, pauses), exact across every backend.
 *
 * The counters live in a fixed-size shared hash (the library preloaded),
 * keyed like the memory store's by database, tb_buckets table and name:
 * an entry per bucket used, and one per template that also gets the
 * counts of every bucket made from it.  A call finds its buckets' entries
 * (making them the first time, which is when it learns a bucket's
 * template) under the hash's LWLock held shared, exclusive only to add or
 * remove entries; what it did is kept in the backend until the
 * transaction ends, and then added under each entry's spinlock.  Grants,
 * refunds and pauses count only if the transaction commits (a rollback
 * gives them back); denials, waits and timeouts count either way: the
 * caller saw them.  No WAL, no row, no lock held across anything that
 * can sleep or fail.
 *
 * Each entry remembers when it was made ("since"), and each installation
 * when its counters were last reset, for its buckets without an entry.
 * Counters start from zero whenever the server starts, a restart after a
 * crash included.  When the hash is full, the entries used longest ago go,
 * 5% at a time: those of buckets made from templates first (their
 * template's entry keeps their counts), then those of named buckets;
 * templates' entries never.  A bucket whose entry went starts again from
 * zero, with a new "since".
 *
 * src/stats.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "common.h"
#include "shmem.h"
#include "stats.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* removed at once when the hash is full, as in memory_store.c */
#define EVICT_FRACTION	0.05

/* counts kept allocated between transactions */
#define PENDINGS_KEPT	64

/*
 * The counters of a bucket, of a template's buckets, or of what one call
 * did.  Tokens are float8 sums: exact for whole tokens up to 2^53.
 */
typedef struct StatsEntry
{
	SharedKey	key;			/* first: the hash's key; len 0: the
								 * installation's own entry */
	uint64		serial;			/* new for every entry made; 0 once removed */
	struct StatsEntry *template;	/* its template's entry, or NULL */
	uint64		template_serial;	/* of that entry */
	TimestampTz since;			/* when counting started */
	slock_t		mutex;			/* guards the fields below */
	TimestampTz used_at;		/* when a call last counted in it */
	StatsCounters counters;
} StatsEntry;

/* Shared state besides the hash. */
typedef struct StatsShared
{
	LWLock	   *lock;			/* shared to use entries, exclusive to add or remove */
	TimestampTz started_at;		/* the counters began: the server's (re)start */
	pg_atomic_uint64 serials;	/* entries made so far */
} StatsShared;

/* What a call did to a bucket, counted when its transaction ends. */
typedef struct Pending
{
	StatsEntry *entry;
	uint64		serial;
	StatsEntry *template;		/* NULL: none */
	uint64		template_serial;
	int			level;			/* transaction nest level */
	TimestampTz at;
	StatsCounters counters;
} Pending;

/* GUCs */
static bool track_stats = true;
static int	max_stats_buckets = 10000;

/* in every process */
static StatsShared *shared = NULL;
static HTAB *hash = NULL;

/*
 * The entries this backend counted in last, and the key they belong to:
 * a bucket called again and again needs no lookup.
 */
static SharedKey last_key;
static Pending last = {0};

/* installations (or databases) whose counters go at commit */
typedef struct Forget
{
	Oid			dbid;
	Oid			relid;			/* InvalidOid: every one of the database */
	int			level;
} Forget;
static List *forgets = NIL;

/* this backend's transaction */
static Pending *pendings = NULL;
static int	npendings = 0;
static int	maxpendings = 0;

/* Shared memory the counters need. */
static Size
stats_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(StatsShared)),
					shmem_hash_size(max_stats_buckets, sizeof(StatsEntry)));
}

/* Their lock. */
static int
stats_shmem_locks(void)
{
	return 1;
}

/*
 * SharedArea attach: find the counters, or (the postmaster, at its start
 * or its restart after a crash) start them from zero.
 */
static void
stats_attach(LWLockPadded *locks)
{
	bool		found;

	shared = shmem_struct("tokenbucket stats", sizeof(StatsShared), &found);
	hash = shmem_hash("tokenbucket counters", max_stats_buckets, sizeof(SharedKey),
					  sizeof(StatsEntry), shared_key_hash, shared_key_match, 0);
	if (found)
		return;
	shared->lock = &locks[0].lock;
	shared->started_at = GetCurrentTimestamp();
	pg_atomic_init_u64(&shared->serials, 1);
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

/* Whether "key" names a template ("prefix*"). */
static bool
key_is_template(const SharedKey *key)
{
	return key->len > 0 && key->name[key->len - 1] == '*';
}

/* Remove "entry" (the caller holds the lock exclusively). */
static void
remove_entry(StatsEntry *entry)
{
	/* a backend still counting in it sees it is gone (see count_pendings()) */
	entry->serial = 0;
	hash_search(hash, &entry->key, HASH_REMOVE, NULL);
}

/* qsort() order: the entry used longest ago first. */
static int
used_at_cmp(const void *a, const void *b)
{
	TimestampTz x = (*(StatsEntry *const *) a)->used_at;
	TimestampTz y = (*(StatsEntry *const *) b)->used_at;

	return (x > y) - (x < y);
}

/*
 * Make room: remove the EVICT_FRACTION of entries used longest ago, of
 * template-made buckets if there are any, else of named buckets.  The
 * caller holds the lock exclusively, which no spinlock holder can be
 * without, so used_at is read as is.
 */
static void
evict(void)
{
	StatsEntry **victims = palloc(sizeof(StatsEntry *) * hash_get_num_entries(hash));
	long		goal = Max(1, (long) (max_stats_buckets * EVICT_FRACTION));

	for (int pass = 0; pass < 2; pass++)
	{
		HASH_SEQ_STATUS status;
		StatsEntry *entry;
		int			n = 0;

		hash_seq_init(&status, hash);
		while ((entry = hash_seq_search(&status)) != NULL)
			if (entry->key.len > 0 && !key_is_template(&entry->key) &&
				(pass == 1 || entry->template != NULL))
				victims[n++] = entry;
		if (n == 0)
			continue;
		qsort(victims, n, sizeof(StatsEntry *), used_at_cmp);
		for (int i = 0; i < Min(n, goal); i++)
			remove_entry(victims[i]);
		break;
	}
	pfree(victims);
}

/*
 * The entry of "key", made now if there is none (the caller holds the lock
 * exclusively); NULL when the hash is full of entries that must stay.
 */
static StatsEntry *
enter(const SharedKey *key, TimestampTz now)
{
	StatsEntry *entry;
	bool		found;

	entry = hash_search(hash, key, HASH_FIND, NULL);
	if (entry != NULL)
		return entry;
	if (hash_get_num_entries(hash) >= max_stats_buckets)
		evict();
	if (hash_get_num_entries(hash) >= max_stats_buckets)
		return NULL;
	entry = hash_search(hash, key, HASH_ENTER, &found);
	entry->serial = pg_atomic_fetch_add_u64(&shared->serials, 1);
	entry->template = NULL;
	entry->template_serial = 0;
	entry->since = now;
	SpinLockInit(&entry->mutex);
	entry->used_at = now;
	memset(&entry->counters, 0, sizeof(StatsCounters));
	return entry;
}

/*
 * Make the entry of bucket "key" and, when "template_len" > 0, that of the
 * template ("prefix*") it was made from.  False when there is no room.
 */
static bool
make_entries(const SharedKey *key, int template_len, TimestampTz now)
{
	SharedKey	template_key;
	StatsEntry *template = NULL;
	StatsEntry *entry;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (template_len > 0 &&
		shared_key_make(&template_key, key->relid, key->name, template_len + 1))
	{
		template_key.name[template_len] = '*';
		template = enter(&template_key, now);
	}
	entry = enter(key, now);
	if (entry != NULL && entry->template == NULL && template != NULL)
	{
		entry->template = template;
		entry->template_serial = template->serial;
	}
	LWLockRelease(shared->lock);
	return entry != NULL;
}

/*
 * Make room for one more Pending.  The array stays from one transaction to
 * the next, unless a big one grew it.
 */
static void
reserve_pending(void)
{
	if (npendings < maxpendings)
		return;
	maxpendings = Max(PENDINGS_KEPT, maxpendings * 2);
	if (pendings == NULL)
		pendings = MemoryContextAlloc(TopMemoryContext, sizeof(Pending) * maxpendings);
	else
		pendings = repalloc(pendings, sizeof(Pending) * maxpendings);
}

/* Add "delta" to "sum". */
static void
counters_add(StatsCounters *sum, const StatsCounters *delta)
{
	sum->granted += delta->granted;
	sum->granted_tokens += delta->granted_tokens;
	sum->denied += delta->denied;
	sum->waited += delta->waited;
	sum->wait_usecs += delta->wait_usecs;
	sum->timeouts += delta->timeouts;
	sum->refunded_tokens += delta->refunded_tokens;
	sum->pauses += delta->pauses;
}

/* Forget the counts a rollback gives back: grants, refunds, pauses. */
static void
counters_roll_back(StatsCounters *counters)
{
	counters->granted = 0;
	counters->granted_tokens = 0;
	counters->refunded_tokens = 0;
	counters->pauses = 0;
}

/*
 * Count "delta" for bucket "name" when the transaction ends.  The first
 * count of a bucket learns its template from "template_of" (the caller's
 * way to look it up; 0 when it has none), and makes its entry.  Nothing
 * is counted for a name too long for an entry, or when there is no room.
 */
void
stats_count(Oid relid, text *name, const StatsCounters *delta,
			int (*template_of) (void *arg), void *arg, TimestampTz now)
{
	SharedKey	key;
	StatsEntry *entry;
	Pending    *pending;
	int			level = GetCurrentTransactionNestLevel();

	if (!stats_enabled() || !shared_key_text(&key, relid, name))
		return;
	reserve_pending();
	pending = &pendings[npendings];

	/*
	 * The entry counted in last, if it is this bucket's and still there.
	 * Its serial is read without the lock: a removal or a reset that
	 * changes it while we read is one that happened just after this call,
	 * whose counts it then drops, as it drops those of any open transaction.
	 */
	entry = NULL;
	if (last.entry != NULL && shared_key_match(&last_key, &key, 0) == 0 &&
		((volatile StatsEntry *) last.entry)->serial == last.serial)
	{
		entry = last.entry;
		*pending = last;
	}
	for (int attempt = 0; attempt < 2 && entry == NULL; attempt++)
	{
		LWLockAcquire(shared->lock, LW_SHARED);
		entry = hash_search(hash, &key, HASH_FIND, NULL);
		if (entry != NULL)
		{
			pending->entry = entry;
			pending->serial = entry->serial;
			pending->template = entry->template;
			pending->template_serial = entry->template_serial;
			last = *pending;
			last_key = key;
		}
		LWLockRelease(shared->lock);
		if (entry == NULL && (attempt > 0 || !make_entries(&key, template_of(arg), now)))
			break;
	}
	if (entry == NULL)
		return;

	/* the same bucket again at the same level: one count */
	if (npendings > 0 && pendings[npendings - 1].entry == pending->entry &&
		pendings[npendings - 1].serial == pending->serial &&
		pendings[npendings - 1].level == level)
		pending = &pendings[npendings - 1];
	else
	{
		pending->level = level;
		memset(&pending->counters, 0, sizeof(StatsCounters));
		npendings++;
	}
	pending->at = now;
	counters_add(&pending->counters, delta);
}

/* Add what an entry of Pending names to it, if it is still there. */
static void
count_in(StatsEntry *entry, uint64 serial, const Pending *pending)
{
	if (entry == NULL || entry->serial != serial)
		return;					/* removed since: reset, or made room */
	SpinLockAcquire(&entry->mutex);
	counters_add(&entry->counters, &pending->counters);
	entry->used_at = Max(entry->used_at, pending->at);
	SpinLockRelease(&entry->mutex);
}

/*
 * Add every pending count to its entries (and its template's), and forget
 * them.  Removal takes the lock exclusively, so under it held shared an
 * entry whose serial is unchanged is still the one counted in.
 */
static void
count_pendings(void)
{
	if (npendings == 0)
		return;
	LWLockAcquire(shared->lock, LW_SHARED);
	for (int i = 0; i < npendings; i++)
	{
		count_in(pendings[i].entry, pendings[i].serial, &pendings[i]);
		count_in(pendings[i].template, pendings[i].template_serial, &pendings[i]);
	}
	LWLockRelease(shared->lock);
	npendings = 0;
	if (maxpendings > PENDINGS_KEPT)
	{
		pfree(pendings);
		pendings = NULL;
		maxpendings = 0;
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

/* Remove the entries of what the committed transaction dropped. */
static void
apply_forgets(void)
{
	HASH_SEQ_STATUS status;
	StatsEntry *entry;
	ListCell   *lc;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	foreach(lc, forgets)
	{
		Forget	   *forget = lfirst(lc);

		hash_seq_init(&status, hash);
		while ((entry = hash_seq_search(&status)) != NULL)
			if (entry->key.dbid == forget->dbid &&
				(forget->relid == InvalidOid || entry->key.relid == forget->relid))
				remove_entry(entry);
	}
	LWLockRelease(shared->lock);
	last.entry = NULL;
}

/*
 * XactCallback: at commit (or PREPARE, which is where a prepared
 * transaction's calls are counted), everything; at abort, what a rollback
 * does not give back.
 */
static void
stats_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			for (int i = 0; i < npendings; i++)
				counters_roll_back(&pendings[i].counters);
			count_pendings();
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			count_pendings();
			if (forgets != NIL)
				apply_forgets();
			break;
		default:
			return;
	}
	forgets = NIL;
}

/*
 * SubXactCallback: an aborted subtransaction's grants, refunds and pauses
 * are given back; what is left, and all a committed one counted, becomes
 * its parent's.
 */
static void
stats_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB)
		return;
	{
		ListCell   *lc;

		foreach(lc, forgets)
		{
			Forget	   *forget = lfirst(lc);

			if (forget->level < level)
				continue;
			if (event == SUBXACT_EVENT_ABORT_SUB)
				forgets = foreach_delete_current(forgets, lc);
			else
				forget->level = level - 1;
		}
	}
	for (int i = npendings - 1; i >= 0 && pendings[i].level >= level; i--)
	{
		if (event == SUBXACT_EVENT_ABORT_SUB)
			counters_roll_back(&pendings[i].counters);
		pendings[i].level = level - 1;
	}
}

static const SharedArea stats_area = {
	.name = "tokenbucket stats",
	.size = stats_shmem_size,
	.nlocks = stats_shmem_locks,
	.attach = stats_attach,
	.startup = NULL,
	.shutdown = NULL,
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
							"Most token buckets and templates the server keeps counters for.",
							"Each takes shared memory from the start; when they are all in use, "
							"the counters used longest ago are dropped.",
							&max_stats_buckets,
							10000, 100, 100000000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	shmem_register(&stats_area);
	RegisterXactCallback(stats_xact_callback, NULL);
	RegisterSubXactCallback(stats_subxact_callback, NULL);
}

/* The installation's entry (len 0): when its counters were last reset. */
static TimestampTz
installation_since(Oid relid)
{
	SharedKey	key;
	StatsEntry *entry;

	(void) shared_key_make(&key, relid, "", 0);
	entry = hash_search(hash, &key, HASH_FIND, NULL);
	return entry ? Max(entry->since, shared->started_at) : shared->started_at;
}

PG_FUNCTION_INFO_V1(tb_stats_counters);

/*
 * tb_stats_counters(): the counters of every bucket and template of this
 * installation that has an entry (name, granted, granted_tokens, denied,
 * waited, wait_seconds, timeouts, refunded_tokens, pauses, since), and a
 * row with a NULL name whose "since" holds for buckets without one.
 */
Datum
tb_stats_counters(PG_FUNCTION_ARGS)
{
	static const char *const views[] = {"tb_stats", "tb_template_stats", NULL};
	TupleDesc	desc;
	Tuplestorestate *store = materialize_begin(fcinfo, &desc);
	Oid			relid = installation_table(fcinfo);
	HASH_SEQ_STATUS status;
	StatsEntry *entry;
	Datum		values[10];
	bool		nulls[10] = {0};

	check_may_read(fcinfo, "tb_stats_counters()", views);
	stats_require();

	LWLockAcquire(shared->lock, LW_SHARED);
	hash_seq_init(&status, hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		StatsCounters c;

		if (entry->key.dbid != MyDatabaseId || entry->key.relid != relid ||
			entry->key.len == 0)
			continue;
		SpinLockAcquire(&entry->mutex);
		c = entry->counters;
		SpinLockRelease(&entry->mutex);
		values[0] = PointerGetDatum(cstring_to_text_with_len(entry->key.name, entry->key.len));
		values[1] = Int64GetDatum(c.granted);
		values[2] = Float8GetDatum(c.granted_tokens);
		values[3] = Int64GetDatum(c.denied);
		values[4] = Int64GetDatum(c.waited);
		values[5] = Float8GetDatum((double) c.wait_usecs / USECS_PER_SEC);
		values[6] = Int64GetDatum(c.timeouts);
		values[7] = Float8GetDatum(c.refunded_tokens);
		values[8] = Int64GetDatum(c.pauses);
		values[9] = TimestampTzGetDatum(entry->since);
		tuplestore_putvalues(store, desc, values, nulls);
	}
	memset(nulls, true, sizeof(nulls));
	nulls[9] = false;
	values[9] = TimestampTzGetDatum(installation_since(relid));
	tuplestore_putvalues(store, desc, values, nulls);
	LWLockRelease(shared->lock);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(tb_stats_reset);

/*
 * Start the counters of "entry" from zero now (the caller holds the lock
 * exclusively).  A new serial makes the counts of transactions still open
 * go nowhere: they were made before the reset.
 */
static void
reset_entry(StatsEntry *entry, TimestampTz now)
{
	entry->serial = pg_atomic_fetch_add_u64(&shared->serials, 1);
	entry->since = now;
	memset(&entry->counters, 0, sizeof(StatsCounters));
}

/*
 * tb_stats_reset(name DEFAULT NULL): start the counters of bucket "name"
 * from zero (of a template: its own and those of every bucket made from
 * it), or with NULL, those of every bucket of this installation.
 */
Datum
tb_stats_reset(PG_FUNCTION_ARGS)
{
	Oid			relid = installation_table(fcinfo);
	TimestampTz now = GetCurrentTimestamp();
	SharedKey	key;
	HASH_SEQ_STATUS status;
	StatsEntry *entry;

	stats_require();
	if (PG_ARGISNULL(0))
	{
		/* every entry goes; the installation's own says since when */
		LWLockAcquire(shared->lock, LW_EXCLUSIVE);
		hash_seq_init(&status, hash);
		while ((entry = hash_seq_search(&status)) != NULL)
			if (entry->key.dbid == MyDatabaseId && entry->key.relid == relid)
				remove_entry(entry);
		(void) shared_key_make(&key, relid, "", 0);
		entry = enter(&key, now);
		LWLockRelease(shared->lock);
		PG_RETURN_VOID();
	}

	if (!shared_key_text(&key, relid, PG_GETARG_TEXT_PP(0)))
		PG_RETURN_VOID();		/* too long to have counters */
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	entry = hash_search(hash, &key, HASH_FIND, NULL);
	if (entry != NULL)
	{
		StatsEntry *target = entry;

		reset_entry(target, now);
		if (key_is_template(&key))
		{
			hash_seq_init(&status, hash);
			while ((entry = hash_seq_search(&status)) != NULL)
				if (entry->template == target)
				{
					reset_entry(entry, now);
					entry->template_serial = target->serial;
				}
		}
	}
	LWLockRelease(shared->lock);
	PG_RETURN_VOID();
}
