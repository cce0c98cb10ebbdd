/*-------------------------------------------------------------------------
 *
 * memory_xact.c
 *	  What a transaction did to the memory store: what a rollback gives
 *	  back, what it gave back that others see once it commits, its
 *	  provisional entries, the settings changes it will apply, the waits
 *	  it is in.
 *
 * Rollback: what a (sub)transaction did to an entry's tokens and pause is
 * kept per entry and nest level, not per call, and undone if that level
 * aborts, so ROLLBACK gives grants back as it does for a row, and ten
 * million grants on one bucket keep one record (given back no more than had
 * they never been made: memory_give_back()).  The same record holds a
 * template key's grants, counted in its entry at commit.
 *
 * Giving back: what a transaction gives back to a committed entry (a
 * refund, a settlement downward, a reset, a pause shortened or lifted)
 * reaches the entry when it commits, never if it aborts: until then other
 * sessions see the entry as it was, and the transaction sees the entry
 * with what it gave back (its view, memory_given()).  A change made on
 * that view takes from the entry at once only what takes the view below
 * the entry; the rest of the difference is kept in the same record, as
 * its level's part (memory_settle()).  So a refund rolled back never lent
 * its tokens to another session meanwhile, and BEGIN; acquire 10; refund
 * 10; acquire 10 still grants in the one session.  A provisional entry,
 * which no other session sees, takes every change at once.
 *
 * Configuration: a change of settings is kept until the transaction
 * commits, and then applied to the entries in order, with every partition
 * locked; a provisional entry (made from this transaction's own
 * configuration) becomes its bucket's entry then, or is removed if the
 * transaction (or the savepoint that made it) aborts.
 *
 * Waits: an entry this backend asked to be woken by loses the mark however
 * the wait ends, the backend's exit included (its transaction aborts).
 *
 * src/memory_xact.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "common.h"
#include "memory_xact.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* undo records kept allocated between transactions */
#define UNDOS_KEPT		64

/* A settings change to apply at commit, in order. */
typedef struct Pending
{
	ConfigChange kind;
	SharedKey	key;			/* a template's without its '*' */
	bool		template;
	int			level;
	uint64		seq;			/* its place in the transaction's changes */
	double		capacity;
	double		refill_rate;
} Pending;

/* A provisional entry this transaction owns. */
typedef struct Provisional
{
	MemoryKey	key;
	uint64		serial;
	int			level;
	uint64		seq;			/* changes made before it: pendings[< seq] */
} Provisional;

/* An entry this backend asked to be woken by (watch()). */
typedef struct Watched
{
	MemoryKey	key;
	int			level;
} Watched;

/* this backend's transaction, in xact_context (reset when it ends) */
static MemoryContext xact_context = NULL;
static HTAB *undos = NULL;		/* kept from one transaction to the next,
								 * emptied, unless a big one grew it */
static MemoryContext undo_context = NULL;
static Undo *last_undo = NULL;	/* the record used last: the same bucket
								 * again needs no lookup; kept (at level
								 * 1, emptied) for the next transaction,
								 * which often takes from it again */
static uint64 undo_xact = 1;	/* this backend's transactions, counted */
static List **undo_levels = NULL;	/* Undo * per nest level (the array in
									 * undo_context, kept; the lists in
									 * xact_context) */
static int	max_undo_level = 0;	/* the array's length */
static int	undo_top = 0;		/* levels with a record: 0 .. undo_top - 1 */
static List *pendings = NIL;
static List *provisionals = NIL;
static List *watched = NIL;
static uint64 next_seq = 1;
static bool gave_back = false;	/* the transaction has given something
								 * back (its lookups apply it: see
								 * memory_given()) */

/* The transaction's memory, made on first use. */
static MemoryContext
xact_memory(void)
{
	if (xact_context == NULL)
		xact_context = AllocSetContextCreate(TopMemoryContext, "tokenbucket transaction",
											 ALLOCSET_SMALL_SIZES);
	return xact_context;
}

/* Whether "undo" was kept from an earlier transaction, and is not in use. */
static bool
undo_kept(const Undo *undo)
{
	return undo != NULL && undo->xact != undo_xact;
}

/* Undo records of the transaction (a kept one is none of them). */
static long
undo_count(void)
{
	return (undos ? hash_get_num_entries(undos) : 0) - (undo_kept(last_undo) ? 1 : 0);
}

/*
 * Make "undo" the record used last.  The one before, if kept from an
 * earlier transaction and not used in this one, leaves the hash: only the
 * last one is ever kept.
 */
static void
set_last_undo(Undo *undo)
{
	if (last_undo != undo && undo_kept(last_undo))
		(void) hash_search(undos, &last_undo->id, HASH_REMOVE, NULL);
	last_undo = undo;
}

/* Make "undo" hold nothing to undo or count. */
static void
undo_clear(Undo *undo)
{
	undo->tokens = 0;
	undo->pins = 0;
	undo->paused = false;
	undo->granted = 0;
	undo->granted_tokens = 0;
	undo->opened = 0;
	undo->opens = 0;
	memset(&undo->given, 0, sizeof(Given));
	undo->lift_set = false;
}

/* Put "undo" on its level's list: a record of this transaction. */
static void
undo_register(Undo *undo)
{
	int			level = undo->id.level;
	MemoryContext old;

	if (level >= max_undo_level)
	{
		int			n = Max(8, level * 2);

		if (undo_levels == NULL)
			undo_levels = MemoryContextAllocZero(undo_context, sizeof(List *) * n);
		else
		{
			undo_levels = repalloc(undo_levels, sizeof(List *) * n);
			memset(undo_levels + max_undo_level, 0,
				   sizeof(List *) * (n - max_undo_level));
		}
		max_undo_level = n;
	}
	undo_top = Max(undo_top, level + 1);
	old = MemoryContextSwitchTo(xact_memory());
	undo_levels[level] = lappend(undo_levels[level], undo);
	undo->xact = undo_xact;
	MemoryContextSwitchTo(old);
}

/*
 * The undo record of "entry" at the current nest level, made if need be;
 * called under the entry's partition lock but not its spinlock (it may
 * allocate, or fail).
 */
Undo *
memory_undo_for(MemoryEntry *entry)
{
	UndoId		id = {entry->serial, GetCurrentTransactionNestLevel()};
	Undo	   *undo;
	bool		found;

	if (last_undo != NULL && last_undo->id.serial == id.serial &&
		last_undo->id.level == id.level)
	{
		if (undo_kept(last_undo))
			undo_register(last_undo);
		return last_undo;
	}
	if (undos == NULL)
	{
		HASHCTL		info;

		if (undo_context == NULL)
			undo_context = AllocSetContextCreate(TopMemoryContext, "tokenbucket undo",
												 ALLOCSET_SMALL_SIZES);
		info.keysize = sizeof(UndoId);
		info.entrysize = sizeof(Undo);
		info.hcxt = undo_context;
		undos = hash_create("tokenbucket undo", UNDOS_KEPT, &info,
							HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	if (undo_kept(last_undo) && hash_get_num_entries(undos) == 1)
	{
		/*
		 * the transaction's first record: the one kept from an earlier
		 * transaction, alone in the hash, becomes it (one hash operation,
		 * where removing it and entering a new one take two)
		 */
		undo = last_undo;
		found = !hash_update_hash_key(undos, undo, &id);
		Assert(!found);
	}
	else
		undo = hash_search(undos, &id, HASH_ENTER, &found);
	if (!found)
	{
		memory_key_copy(&undo->key, &entry->key);
		undo->hashcode = entry->hashcode;
		undo_clear(undo);
		undo_register(undo);
	}
	set_last_undo(undo);
	return undo;
}

/*
 * Remember that "entry" changed by "tokens" (and maybe its pause, from
 * "pause_from") in "undo".  The caller holds the entry's spinlock.
 */
void
memory_remember(Undo *undo, MemoryEntry *entry, double tokens, bool paused,
		 TimestampTz pause_from)
{
	undo->tokens += tokens;
	if (tokens > 0)
		memory_open_add(entry, tokens, &undo->opened, &undo->opens);
	if (tokens < 0 && undo->pins == 0)
	{
		undo->pins = 1;
		entry->pins++;
	}
	if (paused)
	{
		if (!undo->paused)
			undo->pause_from = pause_from;
		undo->paused = true;
		undo->pause_to = entry->bucket.paused_until;
	}
}

/*
 * Count a grant of "cost" tokens on a template's key (which keeps its own
 * counters) in "undo": added to the entry's counters when the transaction
 * commits, in the visit that releases its pins, and forgotten if the
 * (sub)transaction aborts.  The key needs no count pending in stats.c,
 * nor a second visit at commit.
 */
void
memory_count_grant(Undo *undo, double cost)
{
	undo->granted++;
	undo->granted_tokens += cost;
}

/* Whether this transaction gave back anything it has not committed. */
bool
memory_gives_pending(void)
{
	return gave_back;
}

/*
 * What this transaction gave back to "entry" and has not committed, as
 * its records at every nest level say: their credits added up, the
 * pause as the innermost that changed it left it.
 */
void
memory_given(const MemoryEntry *entry, Given *given)
{
	int			top = Min(GetCurrentTransactionNestLevel(), undo_top - 1);

	memset(given, 0, sizeof(Given));
	if (!gave_back || undos == NULL || entry->key.provisional)
		return;
	for (int level = 1; level <= top; level++)
	{
		UndoId		id = {entry->serial, level};
		Undo	   *undo = hash_search(undos, &id, HASH_FIND, NULL);

		if (undo == NULL || undo_kept(undo))
			continue;
		given->credit += undo->given.credit;
		if (undo->lift_set)
		{
			given->lifted = undo->given.lifted;
			given->lift_from = undo->given.lift_from;
			given->lift_to = undo->given.lift_to;
		}
	}
}

/*
 * Store "after", what a call made at "now" of this transaction's view of
 * "entry" (the entry with "given"), in "undo" (the entry's record at this
 * level): what takes the view below the entry (tokens, a longer pause) is
 * taken from the entry at once, and given back by an abort; what leaves
 * the view above it waits for the commit, as this level's part of what
 * was given back.  A provisional entry, no other session's, takes it all
 * at once.  The caller holds the entry's spinlock.
 */
void
memory_settle(Undo *undo, MemoryEntry *entry, const Given *given,
			  const Bucket *after, TimestampTz now)
{
	Bucket	   *shared = &entry->bucket;
	double		tokens = bucket_tokens_at(shared, now);
	double		left = bucket_tokens_at(after, now);
	TimestampTz pause_from = shared->paused_until;
	Given		now_given = {0};

	memory_open_note(entry, now);
	if (entry->key.provisional ||
		(!given->lifted && given->credit <= 0 && left <= tokens &&
		 after->paused_until >= pause_from))
	{
		/* all of it at once: the state as the call left it, exactly */
		/* (but its calendar stays the entry's shared copy) */
		const BucketPeriod *period = shared->period;

		*shared = *after;
		shared->period = period;
		memory_remember(undo, entry, tokens - left, pause_from != after->paused_until,
						pause_from);
		return;
	}
	if (left < tokens)
		bucket_adjust(shared, left - tokens, now);
	else
		now_given.credit = left - tokens;
	if (after->paused_until > pause_from)
		shared->paused_until = after->paused_until;
	else if (after->paused_until < pause_from)
	{
		now_given.lifted = true;
		now_given.lift_from = pause_from;
		now_given.lift_to = after->paused_until;
	}
	memory_remember(undo, entry, Max(tokens - left, 0), shared->paused_until != pause_from,
					pause_from);
	undo->given.credit += now_given.credit - given->credit;
	if (now_given.lifted != given->lifted ||
		(now_given.lifted && (now_given.lift_from != given->lift_from ||
							  now_given.lift_to != given->lift_to)))
	{
		undo->lift_set = true;
		undo->given.lifted = now_given.lifted;
		undo->given.lift_from = now_given.lift_from;
		undo->given.lift_to = now_given.lift_to;
	}
	if (now_given.credit > 0 || now_given.lifted)
		gave_back = true;
}

/* Whether "undo" gives something back at commit. */
static bool
gives(const Undo *undo)
{
	return undo->given.credit > 0 || (undo->lift_set && undo->given.lifted);
}

/*
 * Apply "undo" to its entry (give_back, at an abort: its tokens and
 * pause; else, at commit: what it gave back, release its pins, count its
 * grants).  The entry may have gone meanwhile (dropped, or removed as
 * full): then there is nothing to do.
 */
static void
apply_undo(const Undo *undo, bool give_back, TimestampTz now)
{
	LWLock	   *lock = memory_partition_lock(undo->hashcode);
	MemoryEntry *entry;
	int			waiter = -1;

	if (!give_back && undo->pins == 0 && undo->granted == 0 && undo->opens == 0 &&
		!gives(undo))
		return;
	LWLockAcquire(lock, LW_SHARED);
	entry = memory_find(&undo->key, undo->hashcode);
	if (entry != NULL && entry->serial == undo->id.serial)
	{
		SpinLockAcquire(&entry->mutex);
		entry->pins -= undo->pins;
		memory_open_note(entry, now);
		if (give_back)
		{
			memory_give_back(entry, undo->tokens, now);
			if (undo->paused && entry->bucket.paused_until == undo->pause_to)
				entry->bucket.paused_until = undo->pause_from;
			waiter = entry->waiter;
		}
		else
		{
			if (undo->granted > 0)
			{
				entry->counters.bucket.granted += undo->granted;
				entry->counters.bucket.granted_tokens += undo->granted_tokens;
			}
			if (gives(undo))
			{
				if (undo->given.credit > 0)
					bucket_adjust(&entry->bucket, undo->given.credit, now);
				if (undo->lift_set && undo->given.lifted &&
					entry->bucket.paused_until == undo->given.lift_from)
					entry->bucket.paused_until = undo->given.lift_to;
				waiter = entry->waiter;
			}
		}
		memory_open_end(entry, undo->opened, undo->opens);
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(lock);
	memory_wake(waiter);
}

/*
 * A subtransaction of nest level "level" ended: undo what it did (abort),
 * or make it its parent's, merging records of one entry (commit).
 */
static void
undo_level_end(int level, bool abort)
{
	TimestampTz now = tb_clock_now();
	ListCell   *lc;

	if (undos == NULL || level >= undo_top)
		return;
	set_last_undo(NULL);
	foreach(lc, undo_levels[level])
	{
		Undo	   *undo = lfirst(lc);
		Undo		copy = *undo;
		UndoId		parent_id = {copy.id.serial, level - 1};
		Undo	   *parent;
		bool		found;

		if (abort)
			apply_undo(undo, true, now);
		(void) hash_search(undos, &copy.id, HASH_REMOVE, NULL);
		if (abort)
			continue;
		parent = hash_search(undos, &parent_id, HASH_ENTER, &found);
		if (!found)
		{
			MemoryContext old = MemoryContextSwitchTo(xact_memory());

			*parent = copy;
			parent->id = parent_id;
			undo_levels[level - 1] = lappend(undo_levels[level - 1], parent);
			MemoryContextSwitchTo(old);
			continue;
		}
		parent->tokens += copy.tokens;
		parent->pins += copy.pins;
		parent->granted += copy.granted;
		parent->granted_tokens += copy.granted_tokens;
		parent->opened += copy.opened;
		parent->opens += copy.opens;
		parent->given.credit += copy.given.credit;
		if (copy.lift_set)
		{
			parent->lift_set = true;
			parent->given.lifted = copy.given.lifted;
			parent->given.lift_from = copy.given.lift_from;
			parent->given.lift_to = copy.given.lift_to;
		}
		if (copy.paused)
		{
			if (!parent->paused)
				parent->pause_from = copy.pause_from;
			parent->paused = true;
			parent->pause_to = copy.pause_to;
		}
	}
	undo_levels[level] = NIL;
}

/* Whether this transaction's pending changes make "key" a bucket that is gone. */
static bool
dropped(const MemoryKey *key)
{
	ListCell   *lc;

	foreach(lc, pendings)
	{
		Pending    *pending = lfirst(lc);

		if (pending->kind == CONFIG_ALTERED)
			continue;
		if (pending->key.dbid != key->name.dbid || pending->key.relid != key->name.relid)
			continue;
		if (pending->kind == CONFIG_TRUNCATED)
			return true;
		if (pending->template ?
			(key->name.len >= pending->key.len &&
			 memcmp(key->name.name, pending->key.name, pending->key.len) == 0) :
			shared_key_match(&pending->key, &key->name, sizeof(SharedKey)) == 0)
			return true;
	}
	return false;
}

/* Stop being the waiter of the entries watched from nest level "level" on. */
static void
unwatch_from(int level)
{
	ListCell   *lc;

	foreach(lc, watched)
	{
		Watched    *w = lfirst(lc);
		uint32		hashcode;
		LWLock	   *lock;
		MemoryEntry *entry;

		if (w->level < level)
			continue;
		hashcode = memory_hashcode(&w->key);
		lock = memory_partition_lock(hashcode);
		LWLockAcquire(lock, LW_SHARED);
		entry = memory_find(&w->key, hashcode);
		if (entry != NULL)
		{
			SpinLockAcquire(&entry->mutex);
			if (entry->waiter == MY_PROC_NUMBER)
				entry->waiter = -1;
			SpinLockRelease(&entry->mutex);
		}
		LWLockRelease(lock);
		watched = foreach_delete_current(watched, lc);
	}
}

/*
 * Whether "entry" is made from a template shorter than the prefix of
 * "pending" (a new template's) that its name starts with.
 */
static bool
shadowed(const MemoryEntry *entry, const Pending *pending)
{
	return entry->template != NULL &&
		entry->key.name.dbid == pending->key.dbid &&
		entry->key.name.relid == pending->key.relid &&
		entry->template->key.len < pending->key.len &&
		entry->key.name.len >= pending->key.len &&
		memcmp(entry->key.name.name, pending->key.name, pending->key.len) == 0;
}

/*
 * A template was made: the keys its prefix covers that shorter templates
 * made (committed ones, and this transaction's made before it) go, to be
 * made from it.  The caller holds every lock.
 */
static void
shadow(const Pending *pending, TimestampTz now)
{
	ListCell   *lc;

	for (int p = 0; p < MEMORY_PARTITIONS; p++)
	{
		MemoryEntry *entry = memory_shared->partitions[p].head;

		while (entry != NULL)
		{
			MemoryEntry *next = entry->next;

			if (!entry->key.provisional && shadowed(entry, pending))
			{
				memory_wake(entry->waiter);
				memory_remove_entry(entry);
			}
			entry = next;
		}
	}
	foreach(lc, provisionals)
	{
		Provisional *p = lfirst(lc);
		MemoryEntry *entry = memory_find(&p->key, memory_hashcode(&p->key));

		if (p->seq < pending->seq && entry != NULL && entry->serial == p->serial &&
			shadowed(entry, pending))
		{
			memory_remove_entry(entry);
			provisionals = foreach_delete_current(provisionals, lc);
		}
	}
}

/*
 * Apply one settings change at commit (the caller holds every lock): to
 * the committed entries it names (a template's: every entry made from
 * it), and to this transaction's provisional entries made before it.
 */
static void
apply_pending(const Pending *pending, TimestampTz now)
{
	MemoryKey	key;
	uint32		hashcode;
	MemoryEntry *entry;
	ListCell   *lc;

	if (pending->kind == CONFIG_SHADOWED)
	{
		shadow(pending, now);
		return;
	}
	if (pending->kind == CONFIG_TRUNCATED || pending->template)
	{
		if (pending->kind == CONFIG_ALTERED)
		{
			for (int p = 0; p < MEMORY_PARTITIONS; p++)
				for (entry = memory_shared->partitions[p].head; entry; entry = entry->next)
					if (entry->template != NULL &&
						entry->key.name.dbid == pending->key.dbid &&
						entry->key.name.relid == pending->key.relid &&
						entry->template->key.len == pending->key.len &&
						memcmp(entry->template->key.name, pending->key.name, pending->key.len) == 0)
					{
						memory_wake(entry->waiter);
						memory_reconfigure(entry, pending->capacity,
										   pending->refill_rate, now);
					}
		}
		else
			memory_remove_all(pending->key.dbid, pending->key.relid,
							  pending->kind == CONFIG_TRUNCATED ? NULL : pending->key.name,
							  pending->key.len);
	}
	else
	{
		memset(&key, 0, sizeof(key));
		key.name = pending->key;
		hashcode = memory_hashcode(&key);
		entry = memory_find(&key, hashcode);
		if (entry != NULL)
		{
			memory_wake(entry->waiter);
			if (pending->kind == CONFIG_DROPPED)
				memory_remove_entry(entry);
			else
				memory_reconfigure(entry, pending->capacity,
								   pending->refill_rate, now);
		}
	}

	/* this transaction's provisional entries made before the change */
	foreach(lc, provisionals)
	{
		Provisional *p = lfirst(lc);
		bool		matches;

		if (p->seq > pending->seq)
			continue;
		entry = memory_find(&p->key, memory_hashcode(&p->key));
		if (entry == NULL || entry->serial != p->serial)
			continue;
		matches = pending->kind == CONFIG_TRUNCATED ||
			(pending->template ?
			 (entry->template != NULL && entry->template->key.len == pending->key.len &&
			  memcmp(entry->template->key.name, pending->key.name, pending->key.len) == 0) :
			 shared_key_match(&pending->key, &p->key.name, sizeof(SharedKey)) == 0);
		if (!matches || p->key.name.relid != pending->key.relid)
			continue;
		if (pending->kind == CONFIG_ALTERED)
			memory_reconfigure(entry, pending->capacity, pending->refill_rate, now);
		else
		{
			memory_remove_entry(entry);
			provisionals = foreach_delete_current(provisionals, lc);
		}
	}
}

/*
 * At commit: apply the settings changes in order, then make this
 * transaction's provisional entries their buckets' committed ones.
 */
static void
commit_configuration(void)
{
	TimestampTz now = tb_clock_now();
	ListCell   *lc;

	memory_lock_all(LW_EXCLUSIVE);
	foreach(lc, pendings)
		apply_pending(lfirst(lc), now);
	foreach(lc, provisionals)
	{
		Provisional *p = lfirst(lc);
		MemoryEntry *entry = memory_find(&p->key, memory_hashcode(&p->key));
		MemoryKey	committed = p->key;

		if (entry == NULL || entry->serial != p->serial)
			continue;
		committed.provisional = false;
		if (!memory_rekey(entry, &committed))
		{
			MemoryEntry *key_entry = memory_find(&committed, memory_hashcode(&committed));

			/*
			 * A named bucket takes its name from a key a template made
			 * (tb_create('user:1', ..., memory => true) under 'user:*');
			 * any other committed entry of the name was made under our
			 * wait, and ours goes.
			 */
			if (entry->template == NULL && key_entry != NULL && key_entry->template != NULL)
			{
				memory_wake(key_entry->waiter);
				memory_remove_entry(key_entry);
				if (memory_rekey(entry, &committed))
					continue;
			}
			memory_remove_entry(entry);
		}
	}
	pg_atomic_fetch_add_u64(&memory_shared->changes, 1);
	memory_unlock_all();
}

/* Remove this transaction's provisional entries of nest level "level" on. */
static void
remove_provisionals_from(int level)
{
	ListCell   *lc;

	foreach(lc, provisionals)
	{
		Provisional *p = lfirst(lc);
		uint32		hashcode;
		LWLock	   *lock;
		MemoryEntry *entry;

		if (p->level < level)
			continue;
		hashcode = memory_hashcode(&p->key);
		lock = memory_partition_lock(hashcode);
		LWLockAcquire(lock, LW_EXCLUSIVE);
		entry = memory_find(&p->key, hashcode);
		if (entry != NULL && entry->serial == p->serial)
		{
			memory_wake(entry->waiter);
			memory_remove_entry(entry);
		}
		LWLockRelease(lock);
		provisionals = foreach_delete_current(provisionals, lc);
	}
}

/* Forget the transaction's state (at its end). */
static void
reset_transaction(void)
{
	if (undo_count() > UNDOS_KEPT)
	{
		hash_destroy(undos);
		undos = NULL;
		last_undo = NULL;
	}
	else if (undos != NULL)
	{
		bool		keep = last_undo != NULL && !undo_kept(last_undo) &&
			last_undo->id.level == 1;

		/*
		 * every record is on its level's list: walking them costs what the
		 * transaction made, where a walk of the hash costs its buckets
		 */
		set_last_undo(keep ? last_undo : NULL);
		for (int level = 0; level < undo_top; level++)
		{
			ListCell   *lc;

			foreach(lc, undo_levels[level])
			{
				Undo	   *undo = lfirst(lc);

				if (undo != last_undo)
					(void) hash_search(undos, &undo->id, HASH_REMOVE, NULL);
			}
		}
		if (keep)
			undo_clear(last_undo);
	}
	undo_xact++;
	if (undo_top > 0)
		memset(undo_levels, 0, sizeof(List *) * undo_top);
	undo_top = 0;
	gave_back = false;
	pendings = NIL;
	provisionals = NIL;
	watched = NIL;
	next_seq = 1;
	if (xact_context != NULL)
		MemoryContextReset(xact_context);
}

/*
 * Undo every record of the transaction (give_back), or commit them: what
 * they gave back, their pins, their counts.
 */
static void
undo_all(bool give_back)
{
	/* only giving back refills to the moment */
	TimestampTz now = give_back || gave_back ? tb_clock_now() : 0;

	for (int level = undo_top - 1; level >= 0; level--)
	{
		ListCell   *lc;

		foreach(lc, undo_levels[level])
			apply_undo(lfirst(lc), give_back, now);
	}
}

/*
 * What this transaction holds that a prepared one could not carry (see
 * xact.c), or NULL.
 */
const char *
memory_xact_unpreparable(void)
{
	if (memory_shared == NULL)
		return NULL;
	if (undo_count() > 0 || provisionals != NIL)
		return "memory token buckets";
	if (pendings != NIL)
		return "token buckets' settings";
	return NULL;
}

/*
 * The transaction's end (xact.c): at commit, configuration, what it gave
 * back, pins and counts; at abort, what it took given back.
 */
void
memory_xact_end(bool commit)
{
	if (memory_shared == NULL)
		return;
	if (commit)
	{
		if (pendings != NIL || provisionals != NIL)
			commit_configuration();
		if (undo_count() > 0)
			undo_all(false);
	}
	else
	{
		if (undo_count() > 0)
			undo_all(true);
		remove_provisionals_from(0);
	}
	unwatch_from(0);
	reset_transaction();
}

/*
 * A subtransaction's end (xact.c): what an aborted one did is undone (its
 * grants given back, what it gave back forgotten, its provisional entries
 * and settings changes forgotten, its waits' marks cleared); what a
 * committed one did becomes its parent's.
 */
void
memory_subxact_end(bool commit)
{
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	if (memory_shared == NULL)
		return;
	undo_level_end(level, !commit);
	if (commit)
	{
		foreach(lc, pendings)
			if (((Pending *) lfirst(lc))->level >= level)
				((Pending *) lfirst(lc))->level = level - 1;
		foreach(lc, provisionals)
			if (((Provisional *) lfirst(lc))->level >= level)
				((Provisional *) lfirst(lc))->level = level - 1;
		foreach(lc, watched)
			if (((Watched *) lfirst(lc))->level >= level)
				((Watched *) lfirst(lc))->level = level - 1;
		return;
	}
	remove_provisionals_from(level);
	unwatch_from(level);
	foreach(lc, pendings)
		if (((Pending *) lfirst(lc))->level >= level)
			pendings = foreach_delete_current(pendings, lc);
}

/* Whether this transaction has provisional entries (its lookups try them first). */
bool
memory_has_provisionals(void)
{
	return provisionals != NIL;
}

/*
 * Whether this transaction's pending changes make "key" a bucket that is
 * gone (its lookups then find no entry).
 */
bool
memory_dropped_here(const MemoryKey *key)
{
	return pendings != NIL && dropped(key);
}

/* This level's undo record of "entry", or NULL. */
Undo *
memory_undo_find(const MemoryEntry *entry)
{
	UndoId		id = {entry->serial, GetCurrentTransactionNestLevel()};
	Undo	   *undo = undos ? hash_search(undos, &id, HASH_FIND, NULL) : NULL;

	return undo_kept(undo) ? NULL : undo;
}

/* Remember the provisional entry of "key" this transaction made. */
void
memory_add_provisional(const MemoryKey *key, uint64 serial)
{
	MemoryContext old = MemoryContextSwitchTo(xact_memory());
	Provisional *p = palloc(sizeof(Provisional));

	p->key = *key;
	p->serial = serial;
	p->level = GetCurrentTransactionNestLevel();
	p->seq = next_seq++;
	provisionals = lappend(provisionals, p);
	MemoryContextSwitchTo(old);
}

/*
 * A settings change to apply at commit: to bucket "name" ("len" bytes; a
 * template's ends in '*') of installation "relid" of database "dbid", or
 * with CONFIG_TRUNCATED to every bucket of it (InvalidOid: of every
 * installation of the database).
 */
void
memory_add_pending(ConfigChange kind, Oid dbid, Oid relid, const char *name,
				   int len, double capacity, double refill_rate)
{
	MemoryContext oldcontext = MemoryContextSwitchTo(xact_memory());
	Pending    *pending = palloc0(sizeof(Pending));

	pending->kind = kind;
	pending->template = is_template_key(name, len);
	if (pending->template)
		len--;
	(void) shared_key_make(&pending->key, relid, name, len);
	pending->key.dbid = dbid;
	pending->level = GetCurrentTransactionNestLevel();
	pending->seq = next_seq++;
	pending->capacity = capacity;
	pending->refill_rate = refill_rate;
	pendings = lappend(pendings, pending);
	MemoryContextSwitchTo(oldcontext);
}

/* Remember that this backend asked "key" to wake it. */
void
memory_add_watch(const MemoryKey *key)
{
	MemoryContext old = MemoryContextSwitchTo(xact_memory());
	Watched    *w = palloc(sizeof(Watched));

	w->key = *key;
	w->level = GetCurrentTransactionNestLevel();
	watched = lappend(watched, w);
	MemoryContextSwitchTo(old);
}
