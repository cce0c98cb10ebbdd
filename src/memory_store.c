/*-------------------------------------------------------------------------
 *
 * memory_store.c
 *	  The memory store: buckets whose tokens live in shared memory.
 *
 * A memory bucket's settings are a row of tb_buckets (a named bucket, or
 * the template a per-key bucket was made from); its state is an entry of
 * a fixed-size shared hash (memory_entries.c).  A grant is a hash lookup
 * under the LWLock held shared and bucket.c's arithmetic under the entry's
 * spinlock: no row, no WAL, no commit flush.  The LWLock is held
 * exclusively only to add or remove entries.
 *
 * Transactions: every change a transaction makes to an entry's tokens or
 * pause is remembered with its subtransaction level and undone if that
 * level aborts, so ROLLBACK gives grants back as it does for a row.
 * Changes to the settings (a DBA's UPDATE of a memory bucket's row, and
 * tb_alter, tb_drop, tb_create, which make such UPDATEs) reach the entries
 * through configure() from the trigger on tb_buckets and are applied when
 * the transaction commits, never before and never if it rolls back.
 *
 * src/memory_store.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "memory_entries.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "store.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/* undo records kept allocated between transactions */
#define UNDOS_KEPT		64

/*
 * Something to undo if the (sub)transaction that did it aborts: the tokens
 * it took are added back (a grant of 2 records 2, a refund of 2 records
 * -2), and a pause it set is lifted.
 */
typedef struct Undo
{
	SharedKey	key;
	uint64		serial;			/* of the entry changed */
	int			level;			/* transaction nest level */
	double		tokens;			/* tokens to add back (take when negative) */
	bool		pinned;			/* its entry is pinned until the end */
	bool		paused;			/* a pause to lift: */
	TimestampTz pause_from;		/* the pause before */
	TimestampTz pause_to;		/* the pause set */
} Undo;

/* A settings change to apply at commit. */
typedef struct Pending
{
	ConfigChange kind;
	SharedKey	key;
	bool		template;		/* the key is a template's prefix */
	int			level;
	double		capacity;
	double		refill_rate;
} Pending;

/* this backend's transaction */
static MemoryContext xact_context = NULL;
static Undo *undos = NULL;
static int	nundos = 0;
static int	maxundos = 0;
static List *pendings = NIL;

static void undo_range(int first, bool give_back);

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
 * Remember that "entry" changed by "tokens" (and maybe its pause) in this
 * transaction.  An undo that takes tokens back (of a refund, say) pins the
 * entry until the transaction ends: were it removed as full meanwhile, a
 * rollback would leave it full.  An undo that gives tokens back (of a
 * grant) needs no pin: a bucket removed as full gets nothing back from it,
 * so a grant's commit touches no shared memory.  The caller holds the
 * entry's spinlock, so nothing here may fail: the array has room.
 */
static void
remember(MemoryEntry *entry, double tokens, bool paused, TimestampTz pause_from)
{
	Undo	   *undo = &undos[nundos++];

	undo->key = entry->key;
	undo->serial = entry->serial;
	undo->level = GetCurrentTransactionNestLevel();
	undo->tokens = tokens;
	undo->paused = paused;
	undo->pause_from = pause_from;
	undo->pause_to = entry->bucket.paused_until;
	undo->pinned = tokens < 0;
	if (undo->pinned)
		entry->pins++;
}

/*
 * Make room for one more Undo (before taking a spinlock).  The array stays
 * from one transaction to the next, unless a big one grew it.
 */
static void
reserve_undo(void)
{
	if (nundos < maxundos)
		return;
	maxundos = Max(UNDOS_KEPT, maxundos * 2);
	if (undos == NULL)
		undos = MemoryContextAlloc(TopMemoryContext, sizeof(Undo) * maxundos);
	else
		undos = repalloc(undos, sizeof(Undo) * maxundos);
}

/* take(): on the entry, under its spinlock; remembered for a rollback. */
static StoreResult
memory_take(Oid relid, Request *request, TimestampTz now)
{
	SharedKey	key;
	MemoryEntry *entry;
	StoreResult result = STORE_ABSENT;

	if (!shared_key_text(&key, relid, request->name) || !memory_usable())
		return STORE_ABSENT;
	reserve_undo();
	LWLockAcquire(memory_shared->lock, LW_SHARED);
	entry = memory_find(&key);
	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		result = bucket_take(&entry->bucket, request->cost, now) ?
			STORE_GRANTED : STORE_DENIED;
		if (result == STORE_GRANTED && request->cost > 0)
			remember(entry, request->cost, false, 0);
		request->bucket = entry->bucket;
		request->template_len = memory_template_name_len(entry);
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(memory_shared->lock);
	return result;
}

/* peek(): a copy of the entry's state. */
static bool
memory_peek(Oid relid, Request *request)
{
	SharedKey	key;
	MemoryEntry *entry;

	if (!shared_key_text(&key, relid, request->name) || !memory_usable())
		return false;
	LWLockAcquire(memory_shared->lock, LW_SHARED);
	entry = memory_find(&key);
	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		request->bucket = entry->bucket;
		request->template_len = memory_template_name_len(entry);
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(memory_shared->lock);
	return entry != NULL;
}

/* absent(): the absent rule (see the top of this file). */
static Bucket
memory_absent(const Bucket *settings, TimestampTz now)
{
	memory_require();
	return memory_absent_state(settings, now);
}

/*
 * take_all(): the requests are looked at first and taken only if all
 * grant; one that another session emptied in between makes the ones
 * already taken give their tokens back.
 */
static StoreResult
memory_take_all(Oid relid, Request *requests, int nrequests, TimestampTz now)
{
	int			first = nundos;
	bool		granted = true;

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
	for (int i = 0; i < nrequests && granted; i++)
		granted = memory_take(relid, &requests[i], now) == STORE_GRANTED;
	if (granted)
		return STORE_GRANTED;
	/* denied, or removed meanwhile: give back, and look again */
	undo_range(first, true);
	for (int i = 0; i < nrequests; i++)
		if (!memory_peek(relid, &requests[i]))
			return STORE_ABSENT;
	return STORE_DENIED;
}

/* This transaction's pending change of "kind" to bucket "key", if any. */
static Pending *
find_pending(ConfigChange kind, const SharedKey *key)
{
	ListCell   *lc;

	foreach(lc, pendings)
	{
		Pending    *pending = lfirst(lc);

		if (pending->kind == kind && !pending->template &&
			shared_key_match(&pending->key, key, 0) == 0)
			return pending;
	}
	return NULL;
}

/*
 * make(): the entry of "name", in "state" (the absent rule's, from the
 * router), unless it exists; a named bucket this transaction made starts
 * full instead.  STORE_STALE, making nothing, when settings changed since
 * the caller read them ("generation", from memory_generation()).
 */
static StoreMade
memory_make(Oid relid, text *name, const Bucket *state, int template_len,
			uint64 generation)
{
	SharedKey	key;
	MemoryEntry *entry;
	bool		found;
	TimestampTz now = GetCurrentTimestamp();

	memory_check_make(VARSIZE_ANY_EXHDR(name));
	(void) shared_key_text(&key, relid, name);

	LWLockAcquire(memory_shared->lock, LW_EXCLUSIVE);
	if (pg_atomic_read_u64(&memory_shared->changes) != generation)
	{
		LWLockRelease(memory_shared->lock);
		return STORE_STALE;
	}
	if (memory_find(&key) == NULL && hash_get_num_entries(memory_hash) >= max_memory_buckets)
	{
		memory_evict(now);
		if (hash_get_num_entries(memory_hash) >= max_memory_buckets)
		{
			LWLockRelease(memory_shared->lock);
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("no room for memory token bucket \"%s\"", text_to_cstring(name)),
					 errdetail("All %d memory buckets are in use, and none is full and idle.",
							   max_memory_buckets),
					 errhint("Raise tokenbucket.max_memory_buckets in postgresql.conf and restart the server, or drop memory buckets no longer needed.")));
		}
	}
	entry = hash_search(memory_hash, &key, HASH_ENTER, &found);
	if (!found)
	{
		entry->serial = pg_atomic_fetch_add_u64(&memory_shared->serials, 1);
		entry->template_len = template_len > 0 ? template_len - 1 : 0;
		SpinLockInit(&entry->mutex);
		entry->waiter = -1;
		entry->pins = 0;
		entry->bucket = *state;
		if (find_pending(CONFIG_MADE, &key) != NULL)
		{
			entry->bucket.deficit = 0;
			entry->bucket.updated_at = now;
		}
	}
	LWLockRelease(memory_shared->lock);
	return found ? STORE_EXISTS : STORE_MADE;
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
	SharedKey	key;
	MemoryEntry *entry;
	int			waiter = -1;

	if (!shared_key_text(&key, relid, name) || !memory_usable())
		return false;
	reserve_undo();
	LWLockAcquire(memory_shared->lock, LW_SHARED);
	entry = memory_find(&key);
	if (entry != NULL)
	{
		Bucket		before;

		SpinLockAcquire(&entry->mutex);
		before = entry->bucket;
		*after = before;
		change(after, now, arg);
		if (isfinite(after->deficit))
		{
			entry->bucket = *after;
			remember(entry, bucket_tokens_at(&before, now) - bucket_tokens_at(after, now),
					 before.paused_until != after->paused_until, before.paused_until);
			waiter = entry->waiter;
		}
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(memory_shared->lock);
	memory_wake(waiter);
	return entry != NULL;
}

/*
 * watch(): register this backend as the head waiter of the entry of
 * "name" (or stop being it): changes to the bucket then set its latch.
 */
static bool
memory_watch(Oid relid, text *name, bool on)
{
	SharedKey	key;
	MemoryEntry *entry;

	if (memory_shared == NULL || RecoveryInProgress() || !shared_key_text(&key, relid, name))
		return false;
	LWLockAcquire(memory_shared->lock, LW_SHARED);
	entry = memory_find(&key);
	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		if (on)
			entry->waiter = MY_PROC_NUMBER;
		else if (entry->waiter == MY_PROC_NUMBER)
			entry->waiter = -1;
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(memory_shared->lock);
	return entry != NULL;
}

/*
 * Undo records first..nundos-1, newest first (give_back: apply them; else
 * only unpin), and forget them.
 */
static void
undo_range(int first, bool give_back)
{
	TimestampTz now;
	bool		pinned = false;

	for (int i = first; i < nundos; i++)
		pinned |= undos[i].pinned;
	if (nundos <= first || (!give_back && !pinned))
	{
		nundos = Min(nundos, first);
		return;
	}
	now = GetCurrentTimestamp();
	LWLockAcquire(memory_shared->lock, LW_SHARED);
	for (int i = nundos - 1; i >= first; i--)
	{
		Undo	   *undo = &undos[i];
		MemoryEntry *entry;
		int			waiter = -1;

		if (!give_back && !undo->pinned)
			continue;
		entry = memory_find(&undo->key);
		if (entry == NULL || entry->serial != undo->serial)
			continue;			/* dropped (or removed as full) since */
		SpinLockAcquire(&entry->mutex);
		if (undo->pinned)
			entry->pins--;
		if (give_back)
		{
			if (undo->tokens != 0)
				bucket_adjust(&entry->bucket, undo->tokens, now);
			if (undo->paused && entry->bucket.paused_until == undo->pause_to)
				entry->bucket.paused_until = undo->pause_from;
			waiter = entry->waiter;
		}
		SpinLockRelease(&entry->mutex);
		memory_wake(waiter);
	}
	LWLockRelease(memory_shared->lock);
	nundos = first;
}

/*
 * Apply one settings change at commit (the caller holds the lock
 * exclusively): to the named entry, or with "template", to every entry
 * made from it.
 */
static void
apply_pending(const Pending *pending, TimestampTz now)
{
	HASH_SEQ_STATUS status;
	MemoryEntry *entry;

	if (!pending->template && pending->kind != CONFIG_TRUNCATED)
	{
		entry = memory_find(&pending->key);
		if (pending->kind == CONFIG_MADE)
		{
			/* made full now, less what this transaction took from it */
			double		taken = 0;
			bool		found;

			for (int i = 0; i < nundos; i++)
				if (shared_key_match(&undos[i].key, &pending->key, 0) == 0 &&
					entry != NULL && undos[i].serial == entry->serial)
					taken += undos[i].tokens;
			if (entry == NULL && hash_get_num_entries(memory_hash) >= max_memory_buckets)
				memory_evict(now);
			if (entry == NULL && hash_get_num_entries(memory_hash) >= max_memory_buckets)
				return;			/* absent: empty at empty_at, which is safe */
			entry = hash_search(memory_hash, &pending->key, HASH_ENTER, &found);
			if (!found)
			{
				entry->serial = pg_atomic_fetch_add_u64(&memory_shared->serials, 1);
				SpinLockInit(&entry->mutex);
				entry->waiter = -1;
				entry->pins = 0;
			}
			entry->template_len = 0;
			entry->bucket.capacity = pending->capacity;
			entry->bucket.refill_rate = pending->refill_rate;
			entry->bucket.deficit = 0;
			entry->bucket.updated_at = now;
			entry->bucket.paused_until = DT_NOBEGIN;
			bucket_adjust(&entry->bucket, -taken, now);
			return;
		}
		if (entry == NULL)
			return;
		memory_wake(entry->waiter);
		if (pending->kind == CONFIG_DROPPED)
			hash_search(memory_hash, &pending->key, HASH_REMOVE, NULL);
		else
			bucket_reconfigure(&entry->bucket, pending->capacity,
							   pending->refill_rate, now);
		return;
	}

	hash_seq_init(&status, memory_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid != pending->key.dbid ||
			entry->key.relid != pending->key.relid)
			continue;
		if (pending->kind != CONFIG_TRUNCATED &&
			(entry->template_len != pending->key.len ||
			 memcmp(entry->key.name, pending->key.name, pending->key.len) != 0))
			continue;
		memory_wake(entry->waiter);
		if (pending->kind == CONFIG_ALTERED)
			bucket_reconfigure(&entry->bucket, pending->capacity,
							   pending->refill_rate, now);
		else
			hash_search(memory_hash, &entry->key, HASH_REMOVE, NULL);
	}
}

/* XactCallback: undo on abort, apply settings changes on commit. */
static void
memory_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (nundos > 0 || pendings != NIL)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that used memory token buckets"),
						 errdetail("A prepared transaction could not give back what it took from shared memory if it were rolled back later.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (pendings != NIL)
			{
				TimestampTz now = GetCurrentTimestamp();

				LWLockAcquire(memory_shared->lock, LW_EXCLUSIVE);
				foreach(lc, pendings)
					apply_pending(lfirst(lc), now);
				pg_atomic_fetch_add_u64(&memory_shared->changes, 1);
				LWLockRelease(memory_shared->lock);
			}
			undo_range(0, false);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			if (memory_shared != NULL)
				undo_range(0, true);
			break;
		default:
			return;
	}
	pendings = NIL;
	nundos = 0;
	if (xact_context != NULL)
		MemoryContextReset(xact_context);
	if (maxundos > UNDOS_KEPT)
	{
		pfree(undos);
		undos = NULL;
		maxundos = 0;
	}
}

/*
 * SubXactCallback: what an aborted subtransaction did is undone (its
 * grants given back, its settings changes forgotten); what a committed one
 * did becomes its parent's.
 */
static void
memory_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	int			first = nundos;
	ListCell   *lc;

	if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB)
		return;
	while (first > 0 && undos[first - 1].level >= level)
		first--;
	if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (int i = first; i < nundos; i++)
			undos[i].level = level - 1;
		foreach(lc, pendings)
			if (((Pending *) lfirst(lc))->level >= level)
				((Pending *) lfirst(lc))->level = level - 1;
		return;
	}
	undo_range(first, true);
	foreach(lc, pendings)
		if (((Pending *) lfirst(lc))->level >= level)
			pendings = foreach_delete_current(pendings, lc);
}

/*
 * configure(): remember a settings change to apply at commit (see
 * memory_xact_callback()).
 */
static void
memory_configure(ConfigChange kind, Oid relid, const char *name, int len,
				 double capacity, double refill_rate)
{
	MemoryContext oldcontext;
	Pending    *pending;

	if (memory_shared == NULL)
		return;					/* no memory buckets without preloading */
	if (xact_context == NULL)
		xact_context = AllocSetContextCreate(TopMemoryContext, "tokenbucket changes",
											 ALLOCSET_SMALL_SIZES);
	oldcontext = MemoryContextSwitchTo(xact_context);
	pending = palloc0(sizeof(Pending));
	pending->kind = kind;
	pending->template = len > 0 && name[len - 1] == '*';
	if (pending->template)
		len--;
	if (!shared_key_make(&pending->key, relid, name, len))
	{
		/* too long to have an entry: nothing to change */
		MemoryContextSwitchTo(oldcontext);
		return;
	}
	pending->level = GetCurrentTransactionNestLevel();
	pending->capacity = capacity;
	pending->refill_rate = refill_rate;
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
	SharedKey	key;

	if (!memory_peek(relid, &request))
		return false;
	/* dropped already in this transaction */
	(void) shared_key_text(&key, relid, name);
	if (find_pending(CONFIG_DROPPED, &key) != NULL)
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
 * again exactly.
 */
static uint64
memory_purge(Oid relid, TimestampTz idle_since, TimestampTz now)
{
	HASH_SEQ_STATUS status;
	MemoryEntry *entry;
	uint64		purged = 0;

	if (memory_shared == NULL || RecoveryInProgress())
		return 0;
	memory_require();
	LWLockAcquire(memory_shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&status, memory_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid == MyDatabaseId && entry->key.relid == relid &&
			entry->template_len > 0 && entry->bucket.updated_at < idle_since &&
			memory_evictable(entry, now, true))
		{
			hash_search(memory_hash, &entry->key, HASH_REMOVE, NULL);
			purged++;
		}
	}
	LWLockRelease(memory_shared->lock);
	return purged;
}

/* init(): the GUC, shared memory and callbacks, when preloading. */
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
	.check_make = memory_check_make,
	.generation = memory_generation,
};
