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
 * What a transaction gives back (a refund, a settlement downward, a reset,
 * a lifted pause) reaches the entry when it commits; until then only that
 * transaction sees it, on its own view of the entry.  What it takes (a
 * grant, a settlement upward, a sync, a pause) is taken at once.
 *
 * Rollback, what was given back, the commit of settings changes and
 * provisional entries, and waiters' marks are memory_xact.c's.
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
#include "memory_state.h"
#include "memory_xact.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "store.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

static void memory_check_make(int len);
static bool memory_change(Oid relid, text *name, BucketChange change,
						  const void *arg, TimestampTz now, Bucket *after);
static bool memory_lowers_to_level(MemoryEntry *entry, const Undo *undo,
								   const Bucket *before, const Bucket *after,
								   BucketChange change, const void *arg, TimestampTz now);

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

	if (!memory_key_text(key, relid, name, memory_has_provisionals()) || !memory_usable())
		return NULL;
	for (;;)
	{
		if (!key->provisional && memory_dropped_here(key))
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
 * "bucket", an entry's state, as this transaction sees it at "now": with
 * what it gave back ("given"), as the commit would give it now.
 */
static Bucket
memory_view(const Bucket *bucket, const Given *given, TimestampTz now)
{
	Bucket		view = *bucket;

	if (given->lifted && view.paused_until == given->lift_from)
		view.paused_until = given->lift_to;
	if (given->credit > 0)
		bucket_adjust(&view, given->credit, now);
	return view;
}

/*
 * take() in a transaction that gave back what it has not committed: the
 * decision on its view of the entry (memory_view()), the tokens taken
 * from what it gave back first (memory_settle()).  Holds "lock" and
 * releases it.
 */
static StoreResult
take_given(MemoryEntry *entry, LWLock *lock, Request *request, TimestampTz now,
		   bool count)
{
	Undo	   *undo = memory_undo_for(entry);
	Given		given;
	Bucket		view;
	bool		granted;

	memory_given(entry, &given);
	SpinLockAcquire(&entry->mutex);
	view = memory_view(&entry->bucket, &given, now);
	granted = bucket_take(&view, request->cost, request->reserve, now);
	if (granted)
		memory_settle(undo, entry, &given, &view, now);
	request->bucket = view;
	SpinLockRelease(&entry->mutex);
	request->template_len = memory_template_name_len(entry);
	if (granted && request->cost > 0 && count && request->template_len > 0 &&
		stats_enabled())
	{
		memory_count_grant(undo, request->cost);
		request->counted = true;
	}
	LWLockRelease(lock);
	return granted ? STORE_GRANTED : STORE_DENIED;
}

/*
 * take(): on the entry, under its spinlock, where a grant is counted
 * among the entry's open takes (memory_open_add()).  It is remembered for
 * a rollback afterwards, under the partition lock only (the record may be
 * allocated); were that to fail, the error would keep the tokens taken
 * (and the entry's count: its rollbacks would give back less), which
 * never grants too much.  With "count", a grant on a template's key
 * is counted for the key's own counters in the same record, at commit
 * (request->counted; its template's count is the caller's).
 */
static StoreResult
take(Oid relid, Request *request, TimestampTz now, bool count)
{
	MemoryKey	key;
	LWLock	   *lock;
	MemoryEntry *entry = lookup(relid, request->name, &key, &lock);
	bool		granted;
	double		opened = 0;
	int64		opens = 0;

	if (entry == NULL)
		return STORE_ABSENT;
	if (!entry->used)
		entry->used = true;
	if (memory_gives_pending())
		return take_given(entry, lock, request, now, count);
	SpinLockAcquire(&entry->mutex);
	memory_open_note(entry, now);
	granted = bucket_take(&entry->bucket, request->cost, request->reserve, now);
	if (granted && request->cost > 0)
		memory_open_add(entry, request->cost, &opened, &opens);
	request->bucket = entry->bucket;
	SpinLockRelease(&entry->mutex);
	request->template_len = memory_template_name_len(entry);
	if (granted && request->cost > 0)
	{
		Undo	   *undo = memory_undo_for(entry);

		undo->tokens += request->cost;
		undo->opened += opened;
		undo->opens += opens;
		if (count && request->template_len > 0 && stats_enabled())
		{
			memory_count_grant(undo, request->cost);
			request->counted = true;
		}
	}
	LWLockRelease(lock);
	return granted ? STORE_GRANTED : STORE_DENIED;
}

/* take(): see take() above; the caller counts what was taken. */
static StoreResult
memory_take(Oid relid, Request *request, TimestampTz now)
{
	return take(relid, request, now, false);
}

/* peek(): a copy of the entry's state, as this transaction sees it. */
static bool
memory_peek(Oid relid, Request *request)
{
	MemoryKey	key;
	LWLock	   *lock;
	MemoryEntry *entry = lookup(relid, request->name, &key, &lock);
	Given		given;

	if (entry == NULL)
		return false;
	memory_given(entry, &given);
	SpinLockAcquire(&entry->mutex);
	request->bucket = entry->bucket;
	SpinLockRelease(&entry->mutex);
	if (given.credit > 0 || given.lifted)
		request->bucket = memory_view(&request->bucket, &given, tb_clock_now());
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

/* untake()'s change: give "tokens" back. */
static void
give(Bucket *bucket, TimestampTz now, const void *tokens)
{
	bucket_adjust(bucket, *(const double *) tokens, now);
}

/*
 * Give back what take() granted "request" in this transaction, undoing
 * its record too (take_all() of buckets one of which denied), as a
 * rollback would (memory_give_back()).  When the
 * transaction gave back what it has not committed, the take may have used
 * it: then the tokens are given back as any give-back is, on the view.
 */
static void
untake(Oid relid, Request *request, TimestampTz now)
{
	MemoryKey	key;
	LWLock	   *lock;
	MemoryEntry *entry;
	Undo	   *undo;
	int			waiter;
	Bucket		after;

	if (memory_gives_pending())
	{
		(void) memory_change(relid, request->name, give, &request->cost, now, &after);
		return;
	}
	entry = lookup(relid, request->name, &key, &lock);
	if (entry == NULL)
		return;
	undo = memory_undo_find(entry);
	SpinLockAcquire(&entry->mutex);
	memory_give_back(entry, request->cost, now);
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
		return take(relid, &requests[0], now, true);
	for (int i = 0; i < nrequests; i++)
	{
		if (!memory_peek(relid, &requests[i]))
			return STORE_ABSENT;
		if (!bucket_holds(&requests[i].bucket, requests[i].cost, requests[i].reserve,
						  now))
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
		memory_add_provisional(&key, entry->serial);
	return made == ENTRY_MADE ? STORE_MADE :
		made == ENTRY_EXISTS ? STORE_EXISTS : STORE_STALE;
}

/*
 * generation(): how many settings changes have been applied, counted from
 * 1 (0: there is no memory store, and so no generation).
 */
static uint64
memory_generation(void)
{
	return memory_shared ? pg_atomic_read_u64(&memory_shared->changes) : 0;
}

/*
 * Whether "change" (with "arg"), which made "after" of "before" at "now"
 * on "entry" (under its spinlock), lowers the bucket to a level (tb_sync)
 * while other transactions' takes are open: had those takes never been
 * made, the bucket would be fuller by up to what they took, and such a
 * change would take that much more from it, so a rollback of theirs must
 * give back nothing (memory_open_void()), or it would give back what the
 * change took away.  A change that takes as much from the fuller bucket
 * (a settlement upward) leaves them as they are; one that gives back
 * (a refund, a reset) reaches them at commit as any change does
 * (memory_open_note()).  This transaction's own takes alone at this level
 * ("undo") are left too: their rollback undoes the change with them.
 */
static bool
memory_lowers_to_level(MemoryEntry *entry, const Undo *undo, const Bucket *before,
					   const Bucket *after, BucketChange change, const void *arg,
					   TimestampTz now)
{
	Bucket		fuller = *before;
	double		deficit;
	double		taken;
	double		taken_fuller;

	if (entry->open_takes == 0 || entry->key.provisional ||
		(entry->open_takes > 0 && entry->open_tokens <= undo->opened))
		return false;
	deficit = bucket_deficit_at(before, now);
	fuller.deficit = fmax(0.0, deficit - entry->open_tokens);
	fuller.updated_at = Max(before->updated_at, now);
	change(&fuller, now, arg);
	taken = bucket_deficit_at(after, now) - deficit;
	taken_fuller = bucket_deficit_at(&fuller, now) - fmax(0.0, deficit - entry->open_tokens);
	return taken_fuller > 0 && taken_fuller > taken + 1e-9 * fmax(1.0, fabs(taken));
}

/*
 * change(): on this transaction's view of the entry, under its spinlock;
 * what it takes is taken at once and remembered for a rollback, what it
 * gives back reaches the entry at commit (memory_settle()).
 */
static bool
memory_change(Oid relid, text *name, BucketChange change, const void *arg,
			  TimestampTz now, Bucket *after)
{
	MemoryKey	key;
	LWLock	   *lock;
	MemoryEntry *entry = lookup(relid, name, &key, &lock);
	Undo	   *undo;
	Given		given;
	Bucket		before;
	int			waiter = -1;

	if (entry == NULL)
		return false;
	undo = memory_undo_for(entry);
	memory_given(entry, &given);
	SpinLockAcquire(&entry->mutex);
	*after = memory_view(&entry->bucket, &given, now);
	before = *after;
	change(after, now, arg);
	if (isfinite(after->deficit))
	{
		if (memory_lowers_to_level(entry, undo, &before, after, change, arg, now))
			memory_open_void(entry);
		memory_settle(undo, entry, &given, after, now);
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
		memory_add_watch(&key);
	return true;
}

/*
 * configure(): a named bucket made gets its provisional entry, new (full,
 * a quota with a period's tokens, no fuller than its row "settings" says:
 * memory_new_state()), now (room set aside, or 53200); other changes are
 * applied at commit.
 */
static void
memory_configure(ConfigChange kind, Oid relid, const char *name, int len,
				 const Bucket *settings)
{
	double		capacity = settings ? settings->capacity : 0;
	double		refill_rate = settings ? settings->refill_rate : 0;

	if (memory_shared == NULL)
		return;					/* no memory buckets without preloading */
	if (kind == CONFIG_MADE)
	{
		text	   *t = cstring_to_text_with_len(name, len);
		Bucket		state = memory_new_state(settings, tb_clock_now());

		if (len <= SHARED_NAME_MAX_BYTES)
			(void) memory_make(relid, t, &state, 0, 0, true);
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
	/* too long to have an entry: nothing to change */
	if (len - (is_template_key(name, len) ? 1 : 0) > SHARED_NAME_MAX_BYTES)
		return;
	memory_add_pending(kind, MyDatabaseId, relid, name, len, capacity, refill_rate);
}

/*
 * forget(): every bucket of installation "relid" of database "dbid"
 * (InvalidOid: of every installation of it) goes when the transaction
 * commits.
 */
static void
memory_forget(Oid dbid, Oid relid)
{
	if (memory_shared != NULL)
		memory_add_pending(CONFIG_TRUNCATED, dbid, relid, "", 0, 0, 0);
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
					 VARSIZE_ANY_EXHDR(name), NULL);
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
	if (!isnan(capacity))
		request.bucket.capacity = capacity;
	if (!isnan(refill_rate))
		request.bucket.refill_rate = refill_rate;
	memory_configure(CONFIG_ALTERED, relid, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name),
					 &request.bucket);
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
memory_count(const SharedKey *name, const BucketCounters *delta, TimestampTz at)
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
		bucket_counters_add(&entry->counters.bucket, delta);
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
	TimestampTz now = tb_clock_now();
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
			memset(&entry->counters, 0, sizeof(StatsCounts));
			SpinLockRelease(&entry->mutex);
		}
		LWLockRelease(lock);
	}
}

/* init(): the GUCs and shared memory, when preloading (xact.c ends transactions). */
static void
memory_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	memory_state_init();
}

const StoreRoutine memory_store = {
	.kind = "memory",
	.init = memory_init,
	.take = memory_take,
	.deny = NULL,				/* take() is as cheap */
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
