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
 * In shared memory (stats_hash.c), an entry per template, per named
 * bucket, and per key a table template made.  Every count of a key is
 * added to its template's entry as well, so templates' counters are exact
 * whatever happens to keys' entries.  Keys made from a memory template
 * keep their own counters in their memory entry (a StatsSink the router
 * hands over): made and dropped with it, no entry here; a grant's count
 * for them the memory store keeps itself, with what a rollback would give
 * back, and only their template's is pending here
 * (stats_count_template).  A count that finds no room at all is reported
 * by a WARNING, once a transaction.
 *
 * stats_state.c saves the counters across a clean restart; stats_views.c
 * shows them to SQL.
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
#include "stats_hash.h"
#include "stats_state.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

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
	bool		limit;			/* its counters are a limit's (else a
								 * bucket's) */
	StatsCounts counters;
} Pending;

/* installations (or databases) whose counters go at commit */
typedef struct Forget
{
	Oid			dbid;
	Oid			relid;			/* InvalidOid: every one of the database */
	int			level;
} Forget;

/* GUC */
static bool track_stats = true;

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

/*
 * Forget the counts a rollback gives back: a bucket's grants, refunds and
 * pauses; a limit's leases, and its slots released, or taken over from a
 * lease that ended or expired (the rows go back to naming it).
 */
static void
counts_roll_back(StatsCounts *counts, bool limit)
{
	if (limit)
	{
		counts->limit.leases = 0;
		counts->limit.slots = 0;
		counts->limit.released = 0;
		counts->limit.ended = 0;
		counts->limit.expired = 0;
	}
	else
	{
		counts->bucket.granted = 0;
		counts->bucket.granted_tokens = 0;
		counts->bucket.refunded_tokens = 0;
		counts->bucket.pauses = 0;
	}
}

/* Whether calls are counted now: the library preloaded, and tracking on. */
bool
stats_enabled(void)
{
	return stats_shared != NULL && track_stats;
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
		template_len = stats_known_template(&pending->id.key);
	pending->template_len = template_len >= 0 ? template_len : template_of(arg);
	if (pending->template_len > 0)
	{
		stats_template_key(&pending->template, relid, VARDATA_ANY(name), pending->template_len);
		pending->template_hashcode = stats_hashcode(&pending->template);
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
		pending->limit = false;
		memset(&pending->counters, 0, sizeof(StatsCounts));
	}
	set_last(pending);
	return pending;
}

/*
 * The pending count of bucket (or with "limit", limit) "name" of
 * installation "relid", for what the transaction counts for it.
 * "template_len" is the length of its template's name (with the '*'; 0:
 * none), or -1 when the caller does not know it: then "template_of" says
 * it (the caller's way to look it up), once per name and transaction,
 * unless the name's entry knows.  With "sink", the bucket's own counts go
 * there, and only its template's here.
 */
static Pending *
pending_for(Oid relid, text *name, bool limit, int template_len,
			int (*template_of) (void *arg), void *arg, StatsSink sink,
			TimestampTz now)
{
	PendingId	id;
	Pending    *pending;
	PendingFound how;

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
		pending->limit = limit;
		pending->sink = sink;
		made_add(pending);
	}
	else if (sink != NULL)
		pending->sink = sink;	/* a store that keeps its keys' counters
								 * knows it now */
	pending->at = now;
	return pending;
}

/*
 * Count "delta" for bucket "name" of installation "relid" when the
 * transaction ends: see pending_for().
 */
void
stats_count(Oid relid, text *name, const BucketCounters *delta, int template_len,
			int (*template_of) (void *arg), void *arg, StatsSink sink,
			TimestampTz now)
{
	Pending    *pending;

	if (!stats_enabled())
		return;
	pending = pending_for(relid, name, false, template_len, template_of, arg,
						  sink, now);
	bucket_counters_add(&pending->counters.bucket, delta);
}

/*
 * Count "delta" for limit "name" of the installation whose tb_limits is
 * "limits" when the transaction ends (its leases, and the slots freed,
 * only if it commits): see pending_for().
 */
void
stats_count_limit(Oid limits, text *name, const LimitCounters *delta,
				  int template_len, int (*template_of) (void *arg), void *arg,
				  TimestampTz now)
{
	Pending    *pending;

	if (!stats_enabled())
		return;
	pending = pending_for(limits, name, true, template_len, template_of, arg,
						  NULL, now);
	limit_counters_add(&pending->counters.limit, delta);
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
					 const BucketCounters *delta, TimestampTz now)
{
	PendingId	id;
	Pending    *pending;
	PendingFound how;

	if (!stats_enabled())
		return;
	memset(&id, 0, sizeof(id));
	stats_template_key(&id.key, relid, VARDATA_ANY(name), template_len);
	pending = pending_of(&id, &how);
	if (how != PENDING_CURRENT)
	{
		pending->is_template = true;
		pending->template_len = 0;
		pending->sink = NULL;
		pending->limit = false;
		made_add(pending);
	}
	pending->at = now;
	bucket_counters_add(&pending->counters.bucket, delta);
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
 * Add "delta" for limit "name" ("len" bytes) of the installation whose
 * tb_limits is "limits" to shared memory now, and to its template's
 * counters ("template_len": the length of its name, 0: none): for what
 * happens outside any transaction, or whatever becomes of it (a memory
 * lease freed by its backend's exit).
 */
void
stats_count_limit_now(Oid limits, const char *name, int len, int template_len,
					  const LimitCounters *delta, TimestampTz now)
{
	SharedKey	key;
	StatsCounts counts = {.limit = *delta};
	bool		kept = true;

	if (!stats_enabled())
		return;
	if (template_len > 0)
	{
		stats_template_key(&key, limits, name, template_len);
		kept = stats_add(&key, STATS_TEMPLATE, 0, &counts, true, now);
	}
	shared_key_long(&key, limits, name, len);
	kept &= stats_add(&key, template_len > 0 ? STATS_KEY : STATS_NAMED, template_len,
					  &counts, true, now);
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
		kept = stats_add_hashed(&pending->template, pending->template_hashcode,
								STATS_TEMPLATE, 0, &pending->counters, pending->limit,
								pending->at);
	if (pending->sink != NULL)
		pending->sink(key, &pending->counters.bucket, pending->at);
	else
	{
		if (!pending->hashed)
		{
			pending->hashcode = stats_hashcode(key);
			pending->hashed = true;
		}
		kept &= stats_add_hashed(key, pending->hashcode,
								 pending->is_template ? STATS_TEMPLATE :
								 pending->template_len > 0 ? STATS_KEY : STATS_NAMED,
								 pending->template_len, &pending->counters,
								 pending->limit, pending->at);
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
			counts_roll_back(&made[i]->counters, made[i]->limit);
		kept &= flush_one(made[i]);
	}
	report_lost(kept);
}

/* Remove the entries of what the committed transaction dropped. */
static void
apply_forgets(void)
{
	ListCell   *lc;

	foreach(lc, forgets)
	{
		Forget	   *forget = lfirst(lc);

		stats_remove_installation(forget->dbid, forget->relid);
	}
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
			memset(&last->counters, 0, sizeof(StatsCounts));
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
	if (stats_shared == NULL)
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

	if (stats_shared == NULL)
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
				counts_roll_back(&copy.counters, copy.limit);
			copy.id.level = level - 1;
			parent = hash_search(pendings, &copy.id, HASH_ENTER, &found);
			if (found)
			{
				stats_counts_add(&parent->counters, &copy.counters, copy.limit);
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

	if (stats_shared == NULL)
		return;
	old = MemoryContextSwitchTo(TopTransactionContext);
	forget = palloc(sizeof(Forget));
	forget->dbid = dbid;
	forget->relid = relid;
	forget->level = GetCurrentTransactionNestLevel();
	forgets = lappend(forgets, forget);
	MemoryContextSwitchTo(old);
}

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
	if (process_shared_preload_libraries_in_progress)
		stats_state_init();
}

/*
 * Start the counters of bucket "name" from zero now (of a template: its
 * own and those of the keys made from it that have entries), or with
 * NULL, those of every bucket of installation "relid".  Counts of
 * transactions still open are added after the reset.
 */
void
stats_reset(Oid relid, text *name)
{
	TimestampTz now = tb_clock_now();
	SharedKey	key;

	stats_require();
	if (name != NULL)
	{
		shared_key_long(&key, relid, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
		stats_reset_entries(relid, &key, is_template_name(name), now);
	}
	else
	{
		StatsCounts none = {0};

		stats_remove_installation(MyDatabaseId, relid);
		/* the installation's own entry says since when it counts */
		shared_key_long(&key, relid, "", 0);
		(void) stats_add(&key, STATS_INSTALLATION, 0, &none, false, now);
	}
}
