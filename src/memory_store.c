/*-------------------------------------------------------------------------
 *
 * memory_store.c
 *	  The memory store: buckets whose tokens live in shared memory.
 *
 * A memory bucket's settings are a row of tb_buckets (a named bucket, or
 * the template a per-key bucket was made from); its state is an entry of
 * a fixed-size shared hash (memory_entries.c).  A grant is a hash lookup
 * under its partition's LWLock held shared and bucket.c's arithmetic under
 * the entry's spinlock: no row, no WAL, no commit flush.
 *
 * Shared memory follows committed configuration only.  A change of
 * settings (a DBA's UPDATE of a memory bucket's row; tb_alter, tb_drop and
 * tb_create make such changes) reaches the entries through configure(),
 * from the trigger on tb_buckets, and is applied when the transaction
 * commits, in the order it was made, and never if it aborts.  A bucket
 * whose configuration this transaction wrote and has not committed gets a
 * provisional entry: this transaction's alone (other sessions see the
 * committed state, and a session about to make the committed entry waits
 * for this transaction to end, as for a row lock), made the bucket's entry
 * at commit and gone at abort.  A named memory bucket's provisional entry
 * is made as soon as its row is (so tb_create fails at once when there is
 * no room, and the room is set aside from then on).
 *
 * Rollback: what a (sub)transaction did to an entry's tokens and pause is
 * kept per entry and nest level, not per call, and undone if that level
 * aborts, so ROLLBACK gives grants back as it does for a row, and ten
 * million grants on one bucket keep one record.
 *
 * src/memory_store.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "common.h"
#include "memory_entries.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "store.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/*
 * What to undo if the (sub)transaction level that did it aborts, per
 * entry: the tokens it took are added back (grants of 2 and 3 record 5, a
 * refund of 2 records -2), and a pause it set is lifted.  Records that
 * ever took tokens back (a refund's) pin their entry until the transaction
 * ends: were it removed as full meanwhile, a rollback would leave it full.
 */
typedef struct UndoId
{
	uint64		serial;			/* of the entry */
	int			level;			/* transaction nest level */
} UndoId;

typedef struct Undo
{
	UndoId		id;				/* first: the hash's key */
	MemoryKey	key;
	uint32		hashcode;
	double		tokens;			/* tokens to add back (take when negative) */
	int			pins;			/* pins it holds on the entry */
	bool		paused;			/* a pause to lift: */
	TimestampTz pause_from;		/* the pause before the first change */
	TimestampTz pause_to;		/* the pause set by the last */
} Undo;

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

static void memory_check_make(int len);

/* this backend's transaction, in xact_context (reset when it ends) */
static MemoryContext xact_context = NULL;
static HTAB *undos = NULL;
static Undo *last_undo = NULL;	/* the record used last: the same bucket
								 * again needs no lookup */
static List **undo_levels = NULL;	/* Undo * per nest level */
static int	max_undo_level = 0;
static List *pendings = NIL;
static List *provisionals = NIL;
static List *watched = NIL;
static uint64 next_seq = 1;

/* The transaction's memory, made on first use. */
static MemoryContext
xact_memory(void)
{
	if (xact_context == NULL)
		xact_context = AllocSetContextCreate(TopMemoryContext, "tokenbucket transaction",
											 ALLOCSET_SMALL_SIZES);
	return xact_context;
}

/*
 * The undo record of "entry" at the current nest level, made if need be;
 * called under the entry's partition lock but not its spinlock (it may
 * allocate, or fail).
 */
static Undo *
undo_for(MemoryEntry *entry)
{
	UndoId		id = {entry->serial, GetCurrentTransactionNestLevel()};
	Undo	   *undo;
	bool		found;

	if (last_undo != NULL && last_undo->id.serial == id.serial &&
		last_undo->id.level == id.level)
		return last_undo;
	if (undos == NULL)
	{
		HASHCTL		info;

		info.keysize = sizeof(UndoId);
		info.entrysize = sizeof(Undo);
		info.hcxt = xact_memory();
		undos = hash_create("tokenbucket undo", 64, &info,
							HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	undo = hash_search(undos, &id, HASH_ENTER, &found);
	if (!found)
	{
		MemoryContext old = MemoryContextSwitchTo(xact_memory());

		undo->key = entry->key;
		undo->hashcode = entry->hashcode;
		undo->tokens = 0;
		undo->pins = 0;
		undo->paused = false;
		if (id.level >= max_undo_level)
		{
			int			n = Max(8, id.level * 2);

			if (undo_levels == NULL)
				undo_levels = palloc0(sizeof(List *) * n);
			else
			{
				undo_levels = repalloc(undo_levels, sizeof(List *) * n);
				memset(undo_levels + max_undo_level, 0,
					   sizeof(List *) * (n - max_undo_level));
			}
			max_undo_level = n;
		}
		undo_levels[id.level] = lappend(undo_levels[id.level], undo);
		MemoryContextSwitchTo(old);
	}
	last_undo = undo;
	return undo;
}

/*
 * Remember that "entry" changed by "tokens" (and maybe its pause, from
 * "pause_from") in "undo".  The caller holds the entry's spinlock.
 */
static void
remember(Undo *undo, MemoryEntry *entry, double tokens, bool paused,
		 TimestampTz pause_from)
{
	undo->tokens += tokens;
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
 * Apply "undo" to its entry (give_back: its tokens and pause; else only
 * release its pins).  The entry may have gone meanwhile (dropped, or
 * removed as full): then there is nothing to do.
 */
static void
apply_undo(const Undo *undo, bool give_back, TimestampTz now)
{
	LWLock	   *lock = memory_partition_lock(undo->hashcode);
	MemoryEntry *entry;
	int			waiter = -1;

	if (!give_back && undo->pins == 0)
		return;
	LWLockAcquire(lock, LW_SHARED);
	entry = memory_find(&undo->key, undo->hashcode);
	if (entry != NULL && entry->serial == undo->id.serial)
	{
		SpinLockAcquire(&entry->mutex);
		entry->pins -= undo->pins;
		if (give_back)
		{
			if (undo->tokens != 0)
				bucket_adjust(&entry->bucket, undo->tokens, now);
			if (undo->paused && entry->bucket.paused_until == undo->pause_to)
				entry->bucket.paused_until = undo->pause_from;
			waiter = entry->waiter;
		}
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
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;

	if (undos == NULL || level >= max_undo_level)
		return;
	last_undo = NULL;
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
dropped_here(const MemoryKey *key)
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

/*
 * Find the entry this backend uses for "name", and take its partition's
 * lock (shared): this transaction's provisional entry, or the committed
 * one (unless this transaction dropped it).  NULL, holding no lock, when
 * there is none.
 */
static MemoryEntry *
lookup(Oid relid, text *name, MemoryKey *key, LWLock **lock)
{
	MemoryEntry *entry;
	uint32		hashcode;

	if (!memory_key_text(key, relid, name, provisionals != NIL) || !memory_usable())
		return NULL;
	for (;;)
	{
		if (!key->provisional && pendings != NIL && dropped_here(key))
			return NULL;
		hashcode = memory_hashcode(key);
		*lock = memory_partition_lock(hashcode);
		LWLockAcquire(*lock, LW_SHARED);
		entry = memory_find(key, hashcode);
		if (entry != NULL && key->provisional &&
			!TransactionIdIsCurrentTransactionId(entry->owner))
			entry = NULL;		/* another transaction's */
		if (entry != NULL)
			return entry;
		LWLockRelease(*lock);
		if (!key->provisional)
			return NULL;
		key->provisional = false;
	}
}

/*
 * take(): on the entry, under its spinlock.  A grant is remembered for a
 * rollback afterwards, under the partition lock only (the record may be
 * allocated); were that to fail, the error would keep the tokens taken,
 * which never grants too much.
 */
static StoreResult
memory_take(Oid relid, Request *request, TimestampTz now)
{
	MemoryKey	key;
	LWLock	   *lock;
	MemoryEntry *entry = lookup(relid, request->name, &key, &lock);
	bool		granted;

	if (entry == NULL)
		return STORE_ABSENT;
	if (!entry->used)
		entry->used = true;
	SpinLockAcquire(&entry->mutex);
	granted = bucket_take(&entry->bucket, request->cost, now);
	request->bucket = entry->bucket;
	SpinLockRelease(&entry->mutex);
	request->template_len = memory_template_name_len(entry);
	if (granted && request->cost > 0)
		undo_for(entry)->tokens += request->cost;
	LWLockRelease(lock);
	return granted ? STORE_GRANTED : STORE_DENIED;
}

/* peek(): a copy of the entry's state. */
static bool
memory_peek(Oid relid, Request *request)
{
	MemoryKey	key;
	LWLock	   *lock;
	MemoryEntry *entry = lookup(relid, request->name, &key, &lock);

	if (entry == NULL)
		return false;
	SpinLockAcquire(&entry->mutex);
	request->bucket = entry->bucket;
	SpinLockRelease(&entry->mutex);
	request->template_len = memory_template_name_len(entry);
	LWLockRelease(lock);
	return true;
}

/* absent(): the absent rule (memory_entries.c). */
static Bucket
memory_absent(const Bucket *settings, TimestampTz now)
{
	memory_require();
	return memory_absent_state(settings, now);
}

/*
 * Give back what take() granted "request" in this transaction, undoing
 * its record too (take_all() of buckets one of which denied).
 */
static void
untake(Oid relid, Request *request, TimestampTz now)
{
	MemoryKey	key;
	LWLock	   *lock;
	MemoryEntry *entry = lookup(relid, request->name, &key, &lock);
	UndoId		id;
	Undo	   *undo;
	int			waiter;

	if (entry == NULL)
		return;
	id.serial = entry->serial;
	id.level = GetCurrentTransactionNestLevel();
	undo = undos ? hash_search(undos, &id, HASH_FIND, NULL) : NULL;
	SpinLockAcquire(&entry->mutex);
	bucket_adjust(&entry->bucket, request->cost, now);
	if (undo != NULL)
		undo->tokens -= request->cost;
	waiter = entry->waiter;
	SpinLockRelease(&entry->mutex);
	LWLockRelease(lock);
	memory_wake(waiter);
}

/*
 * take_all(): the requests are looked at first and taken only if all
 * grant; one that another session emptied in between makes the ones
 * already taken give their tokens back.
 */
static StoreResult
memory_take_all(Oid relid, Request *requests, int nrequests, TimestampTz now)
{
	bool		granted = true;
	int			taken;

	if (memory_shared == NULL)
		return STORE_ABSENT;
	if (nrequests == 1)
		return memory_take(relid, &requests[0], now);
	for (int i = 0; i < nrequests; i++)
	{
		if (!memory_peek(relid, &requests[i]))
			return STORE_ABSENT;
		if (!bucket_holds(&requests[i].bucket, requests[i].cost, now))
			granted = false;
	}
	if (!granted)
		return STORE_DENIED;
	for (taken = 0; taken < nrequests && granted; taken++)
		granted = memory_take(relid, &requests[taken], now) == STORE_GRANTED;
	if (granted)
		return STORE_GRANTED;
	/* denied, or removed meanwhile: give back, and look again */
	for (int i = 0; i < taken - 1; i++)
		untake(relid, &requests[i], now);
	for (int i = 0; i < nrequests; i++)
		if (!memory_peek(relid, &requests[i]))
			return STORE_ABSENT;
	return STORE_DENIED;
}

/*
 * make(): the entry of "name" in "state" (the absent rule's, from the
 * router), unless it exists.  A provisional one when its configuration is
 * this transaction's own; a committed one waits for a transaction that
 * holds a provisional one, and is STORE_STALE when settings changed since
 * the caller read them ("generation"), or after such a wait.
 */
static StoreMade
memory_make(Oid relid, text *name, const Bucket *state, int template_len,
			uint64 generation, bool provisional)
{
	MemoryKey	key;
	MemoryEntry *entry;
	EntryMade	made;

	memory_check_make(VARSIZE_ANY_EXHDR(name));
	(void) memory_key_text(&key, relid, name, true);
	if (!provisional)
	{
		uint32		hashcode = memory_hashcode(&key);
		LWLock	   *lock = memory_partition_lock(hashcode);
		TransactionId owner = InvalidTransactionId;

		LWLockAcquire(lock, LW_SHARED);
		entry = memory_find(&key, hashcode);
		if (entry != NULL)
			owner = entry->owner;
		LWLockRelease(lock);
		if (TransactionIdIsValid(owner) && !TransactionIdIsCurrentTransactionId(owner))
		{
			/* its configuration is being changed: wait, then read it again */
			XactLockTableWait(owner, NULL, NULL, XLTW_None);
			return STORE_STALE;
		}
		key.provisional = false;
	}
	made = memory_make_entry(&key, template_len, state,
							 provisional ? GetTopTransactionId() : InvalidTransactionId,
							 provisional ? PG_UINT64_MAX : generation, true, &entry);
	if (made == ENTRY_MADE && provisional)
	{
		MemoryContext old = MemoryContextSwitchTo(xact_memory());
		Provisional *p = palloc(sizeof(Provisional));

		p->key = key;
		p->serial = entry->serial;
		p->level = GetCurrentTransactionNestLevel();
		p->seq = next_seq++;
		provisionals = lappend(provisionals, p);
		MemoryContextSwitchTo(old);
	}
	return made == ENTRY_MADE ? STORE_MADE :
		made == ENTRY_EXISTS ? STORE_EXISTS : STORE_STALE;
}

/* generation(): how many settings changes have been applied. */
static uint64
memory_generation(void)
{
	return memory_shared ? pg_atomic_read_u64(&memory_shared->changes) : 0;
}

/* change(): on the entry, under its spinlock; remembered for a rollback. */
static bool
memory_change(Oid relid, text *name, BucketChange change, const void *arg,
			  TimestampTz now, Bucket *after)
{
	MemoryKey	key;
	LWLock	   *lock;
	MemoryEntry *entry = lookup(relid, name, &key, &lock);
	Undo	   *undo;
	Bucket		before;
	int			waiter = -1;

	if (entry == NULL)
		return false;
	undo = undo_for(entry);
	SpinLockAcquire(&entry->mutex);
	before = entry->bucket;
	*after = before;
	change(after, now, arg);
	if (isfinite(after->deficit))
	{
		entry->bucket = *after;
		remember(undo, entry, bucket_tokens_at(&before, now) - bucket_tokens_at(after, now),
				 before.paused_until != after->paused_until, before.paused_until);
		waiter = entry->waiter;
	}
	SpinLockRelease(&entry->mutex);
	LWLockRelease(lock);
	memory_wake(waiter);
	return true;
}

/*
 * watch(): register this backend as the head waiter of the entry of
 * "name" (or stop being it): changes to the bucket then set its latch.
 * However the wait ends, the mark goes with it (see the callbacks).
 */
static bool
memory_watch(Oid relid, text *name, bool on)
{
	MemoryKey	key;
	LWLock	   *lock;
	MemoryEntry *entry;

	if (memory_shared == NULL || RecoveryInProgress())
		return false;
	entry = lookup(relid, name, &key, &lock);
	if (entry == NULL)
		return false;
	SpinLockAcquire(&entry->mutex);
	if (on)
		entry->waiter = MY_PROC_NUMBER;
	else if (entry->waiter == MY_PROC_NUMBER)
		entry->waiter = -1;
	SpinLockRelease(&entry->mutex);
	LWLockRelease(lock);
	if (on)
	{
		MemoryContext old = MemoryContextSwitchTo(xact_memory());
		Watched    *w = palloc(sizeof(Watched));

		w->key = key;
		w->level = GetCurrentTransactionNestLevel();
		watched = lappend(watched, w);
		MemoryContextSwitchTo(old);
	}
	return true;
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
						bucket_reconfigure(&entry->bucket, pending->capacity,
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
				bucket_reconfigure(&entry->bucket, pending->capacity,
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
			bucket_reconfigure(&entry->bucket, pending->capacity, pending->refill_rate, now);
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
	TimestampTz now = GetCurrentTimestamp();
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
		/* a committed entry made meanwhile was made under our wait: none */
		if (!memory_rekey(entry, &committed))
			memory_remove_entry(entry);
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
	undos = NULL;
	last_undo = NULL;
	undo_levels = NULL;
	max_undo_level = 0;
	pendings = NIL;
	provisionals = NIL;
	watched = NIL;
	next_seq = 1;
	if (xact_context != NULL)
		MemoryContextReset(xact_context);
}

/* Undo (or only release the pins of) every record of the transaction. */
static void
undo_all(bool give_back)
{
	TimestampTz now = GetCurrentTimestamp();

	for (int level = max_undo_level - 1; level >= 0; level--)
	{
		ListCell   *lc;

		foreach(lc, undo_levels[level])
			apply_undo(lfirst(lc), give_back, now);
	}
}

/* XactCallback: configuration and pins at commit, undo at abort. */
static void
memory_xact_callback(XactEvent event, void *arg)
{
	if (memory_shared == NULL)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (undos != NULL || pendings != NIL || provisionals != NIL)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that used memory token buckets"),
						 errdetail("A prepared transaction could not give back what it took from shared memory if it were rolled back later.")));
			return;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (pendings != NIL || provisionals != NIL)
				commit_configuration();
			if (undos != NULL)
				undo_all(false);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			if (undos != NULL)
				undo_all(true);
			remove_provisionals_from(0);
			break;
		default:
			return;
	}
	unwatch_from(0);
	reset_transaction();
}

/*
 * SubXactCallback: what an aborted subtransaction did is undone (its
 * grants given back, its provisional entries and settings changes
 * forgotten, its waits' marks cleared); what a committed one did becomes
 * its parent's.
 */
static void
memory_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	ListCell   *lc;

	if (memory_shared == NULL ||
		(event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB))
		return;
	undo_level_end(level, event == SUBXACT_EVENT_ABORT_SUB);
	if (event == SUBXACT_EVENT_COMMIT_SUB)
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

/*
 * configure(): a named bucket made gets its provisional entry, full, now
 * (room set aside, or 53200); other changes are applied at commit.
 */
static void
memory_configure(ConfigChange kind, Oid relid, const char *name, int len,
				 double capacity, double refill_rate)
{
	MemoryContext oldcontext;
	Pending    *pending;

	if (memory_shared == NULL)
		return;					/* no memory buckets without preloading */
	if (kind == CONFIG_MADE)
	{
		Bucket		full = {.capacity = capacity, .refill_rate = refill_rate,
		.deficit = 0, .updated_at = GetCurrentTimestamp(), .paused_until = DT_NOBEGIN};
		text	   *t = cstring_to_text_with_len(name, len);

		if (len <= SHARED_NAME_MAX_BYTES)
			(void) memory_make(relid, t, &full, 0, 0, true);
		return;
	}
	if (kind == CONFIG_TAKEN)
	{
		MemoryKey	key;

		/* only a name a memory bucket may have (a bulk load stays cheap) */
		if (len > SHARED_NAME_MAX_BYTES)
			return;
		memory_key(&key, relid, name, len, false);
		if (!memory_covered(&key))
			return;
		kind = CONFIG_DROPPED;
	}
	oldcontext = MemoryContextSwitchTo(xact_memory());
	pending = palloc0(sizeof(Pending));
	pending->kind = kind;
	pending->template = is_template_key(name, len);
	if (pending->template)
		len--;
	if (!shared_key_make(&pending->key, relid, name, len))
	{
		/* too long to have an entry: nothing to change */
		MemoryContextSwitchTo(oldcontext);
		return;
	}
	pending->level = GetCurrentTransactionNestLevel();
	pending->seq = next_seq++;
	pending->capacity = capacity;
	pending->refill_rate = refill_rate;
	pendings = lappend(pendings, pending);
	MemoryContextSwitchTo(oldcontext);
}

/*
 * forget(): every bucket of installation "relid" of database "dbid"
 * (InvalidOid: of every installation of it) goes when the transaction
 * commits.
 */
static void
memory_forget(Oid dbid, Oid relid)
{
	MemoryContext oldcontext;
	Pending    *pending;

	if (memory_shared == NULL)
		return;
	oldcontext = MemoryContextSwitchTo(xact_memory());
	pending = palloc0(sizeof(Pending));
	pending->kind = CONFIG_TRUNCATED;
	pending->key.dbid = dbid;
	pending->key.relid = relid;
	pending->level = GetCurrentTransactionNestLevel();
	pending->seq = next_seq++;
	pendings = lappend(pendings, pending);
	MemoryContextSwitchTo(oldcontext);
}

/*
 * drop(): the entry of bucket "name" (made from a memory template: it has
 * no row) when the transaction commits.
 */
static bool
memory_drop(Oid relid, text *name)
{
	Request		request = {.name = name};

	if (!memory_peek(relid, &request))
		return false;
	memory_configure(CONFIG_DROPPED, relid, VARDATA_ANY(name),
					 VARSIZE_ANY_EXHDR(name), 0, 0);
	return true;
}

/*
 * alter(): new settings for the entry of bucket "name" (made from a memory
 * template) when the transaction commits.
 */
static bool
memory_alter(Oid relid, text *name, double capacity, double refill_rate,
			 TimestampTz now)
{
	Request		request = {.name = name};

	if (!memory_peek(relid, &request))
		return false;
	memory_configure(CONFIG_ALTERED, relid, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name),
					 isnan(capacity) ? request.bucket.capacity : capacity,
					 isnan(refill_rate) ? request.bucket.refill_rate : refill_rate);
	return true;
}

/*
 * purge(): remove this installation's template-made entries that are full,
 * not paused, idle since "idle_since", and that the absent rule would make
 * again exactly; one partition at a time.
 */
static uint64
memory_purge(Oid relid, TimestampTz idle_since, TimestampTz now)
{
	uint64		purged = 0;

	if (memory_shared == NULL || RecoveryInProgress())
		return 0;
	memory_require();
	for (int p = 0; p < MEMORY_PARTITIONS; p++)
	{
		LWLock	   *lock = &memory_shared->locks[p].lock;
		MemoryEntry *entry;

		LWLockAcquire(lock, LW_EXCLUSIVE);
		entry = memory_shared->partitions[p].head;
		while (entry != NULL)
		{
			MemoryEntry *next = entry->next;

			if (entry->key.name.dbid == MyDatabaseId && entry->key.name.relid == relid &&
				entry->template != NULL && entry->bucket.updated_at < idle_since &&
				memory_evictable(entry, now, true))
			{
				memory_remove_entry(entry);
				purged++;
			}
			entry = next;
		}
		LWLockRelease(lock);
	}
	return purged;
}

/*
 * check_make(): fail unless a memory bucket (or a memory template) of
 * "len" bytes can be made here: memory_require(), and a name that fits an
 * entry (a template's without its '*').
 */
static void
memory_check_make(int len)
{
	memory_require();
	if (len > SHARED_NAME_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("memory token bucket name must be at most %d bytes long, not %d",
						SHARED_NAME_MAX_BYTES, len),
				 errdetail("Memory buckets keep their names in shared memory, in a fixed space each.")));
}

/*
 * count(): add what a transaction counted for a template's key to its
 * committed entry (gone: its counts go with it; its template has them).
 */
static void
memory_count(const SharedKey *name, const StatsCounters *delta, TimestampTz at)
{
	MemoryKey	key;
	uint32		hashcode;
	LWLock	   *lock;
	MemoryEntry *entry;

	if (memory_shared == NULL)
		return;
	memset(&key, 0, sizeof(key));
	key.name = *name;
	hashcode = memory_hashcode(&key);
	lock = memory_partition_lock(hashcode);
	LWLockAcquire(lock, LW_SHARED);
	entry = memory_find(&key, hashcode);
	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		stats_counters_add(&entry->counters, delta);
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(lock);
}

/*
 * reset_counters(): the counters of the keys of installation "relid"
 * (with "name": that key's, or a template's keys') start from zero now.
 */
static void
memory_reset_counters(Oid relid, text *name)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		template = name != NULL && is_template_name(name);
	int			len = name ? VARSIZE_ANY_EXHDR(name) - (template ? 1 : 0) : 0;

	if (memory_shared == NULL || RecoveryInProgress() ||
		len > SHARED_NAME_MAX_BYTES)
		return;
	for (int p = 0; p < MEMORY_PARTITIONS; p++)
	{
		LWLock	   *lock = &memory_shared->locks[p].lock;

		LWLockAcquire(lock, LW_SHARED);
		for (MemoryEntry *entry = memory_shared->partitions[p].head; entry; entry = entry->next)
		{
			const SharedKey *k = &entry->key.name;

			if (k->dbid != MyDatabaseId || k->relid != relid || entry->template == NULL ||
				(name != NULL &&
				 (template ?
				  entry->template->key.len != len ||
				  memcmp(entry->template->key.name, VARDATA_ANY(name), len) != 0 :
				  k->len != len || memcmp(k->name, VARDATA_ANY(name), len) != 0)))
				continue;
			SpinLockAcquire(&entry->mutex);
			entry->since = now;
			memset(&entry->counters, 0, sizeof(StatsCounters));
			SpinLockRelease(&entry->mutex);
		}
		LWLockRelease(lock);
	}
}

/* init(): the GUCs, shared memory and callbacks, when preloading. */
static void
memory_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	memory_entries_init();
	RegisterXactCallback(memory_xact_callback, NULL);
	RegisterSubXactCallback(memory_subxact_callback, NULL);
}

const StoreRoutine memory_store = {
	.kind = "memory",
	.init = memory_init,
	.take = memory_take,
	.take_all = memory_take_all,
	.peek = memory_peek,
	.absent = memory_absent,
	.change = memory_change,
	.alter = memory_alter,
	.make = memory_make,
	.drop = memory_drop,
	.purge = memory_purge,
	.list = memory_list,
	.watch = memory_watch,
	.configure = memory_configure,
	.forget = memory_forget,
	.count = memory_count,
	.reset_counters = memory_reset_counters,
	.check_make = memory_check_make,
	.generation = memory_generation,
};
