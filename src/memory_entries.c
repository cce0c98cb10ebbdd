/*-------------------------------------------------------------------------
 *
 * memory_entries.c
 *	  The memory store's entries: a fixed-size, partitioned shared hash of
 *	  bucket states, keyed by database, tb_buckets table and name, their
 *	  room, and what is true of a bucket that has none.
 *
 * The hash is split into MEMORY_PARTITIONS partitions, each with its own
 * LWLock, as PostgreSQL's lock table is: a call on one bucket holds its
 * partition's lock shared (the state under the entry's spinlock), and
 * making or removing an entry holds only that partition's lock
 * exclusively.  Changes of configuration that touch many entries at
 * commit (a template altered or dropped, a TRUNCATE, DROP EXTENSION) take
 * every partition's lock.
 *
 * Room.  Named memory buckets are never removed to make room: an entry is
 * set aside for one when it is made (tb_create), and it stays until it is
 * dropped.  Keys made from templates share the rest: one template's keys
 * take at most tokenbucket.max_template_keys entries, and all templates'
 * together never the last tenth of tokenbucket.max_memory_buckets, which
 * is kept for named buckets.  When a template's share (or the hash) is
 * full, a new key reuses an idle key's entry: the clock sweeps a few
 * partitions at a time (without waiting for a busy one), giving every
 * entry used since it last passed a second chance, and takes the first
 * template key that is full, not paused and not held by an open
 * transaction.  A call that finds none in its sweep is refused (53200);
 * the clock goes on from there at the next.  So a flood of new keys costs
 * each of its calls a bounded sweep, and other calls nothing but the
 * partition locks it takes one at a time.
 *
 * An absent entry stands for a bucket that was empty at "empty_at": the
 * moment this server came back from a crash, a failover, or a start
 * without the file a clean shutdown writes.  An entry is made from that
 * rule on first use, so no bucket, not even one first made from a
 * template after the crash, can grant what it granted before.  A quota's
 * entry also starts no fuller than its row (or its template's) says,
 * which a restore from a dump writes empty: the server it came from may
 * have granted its current period already.  Only an entry that is full is
 * ever removed to make room.
 *
 * Open takes.  While takes not yet committed are open on an entry, it
 * keeps what they took and the lowest deficit less that seen since the
 * oldest of them, so that a rollback gives back no more than the bucket
 * would hold had its take never been made (memory_give_back()).
 *
 * What a clean shutdown saves, and the start reads back, is
 * memory_state.c's; what the views show of the entries, memory_list.c's.
 *
 * src/memory_entries.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <float.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "bucket_config.h"
#include "catalog/pg_control.h"
#include "common.h"
#include "common/controldata_utils.h"
#include "common/hashfn.h"
#include "memory_entries.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

/* the clock: partitions looked in per call, entries per partition */
#define CLOCK_PARTITIONS	8
#define CLOCK_ENTRIES		32

/* GUCs */
int			max_memory_buckets = 10000;
int			max_template_keys = 0;	/* 0: a quarter of max_memory_buckets */

/* in every process */
MemoryShared *memory_shared = NULL;
static HTAB *memory_hash = NULL;
static HTAB *template_hash = NULL;
static bool timeline_checked = false;
bool		memory_loading = false;	/* the postmaster reads the state file */

/* hash_search() support for MemoryKey */
static uint32
memory_key_hash(const void *key, Size keysize)
{
	const MemoryKey *k = key;

	return shared_key_hash(&k->name, sizeof(SharedKey)) ^ (k->provisional ? 0x9e3779b9 : 0);
}

/* hash_search() support for MemoryKey: 0 when the keys are equal. */
static int
memory_key_match(const void *key1, const void *key2, Size keysize)
{
	const MemoryKey *a = key1;
	const MemoryKey *b = key2;

	return a->provisional != b->provisional ||
		shared_key_match(&a->name, &b->name, sizeof(SharedKey));
}

/* The key of "name" in installation "relid" (it fits: checked before). */
void
memory_key(MemoryKey *key, Oid relid, const char *name, int len, bool provisional)
{
	memset(key, 0, sizeof(MemoryKey));
	(void) shared_key_make(&key->name, relid, name, len);
	key->provisional = provisional;
}

/*
 * Copy "src", an entry's key, to "dst" (zeroed past the name, as
 * memory_key() makes keys), reading only the name's bytes: the rest of a
 * short name's key lies on a cache line of the entry that a call on it
 * otherwise never touches.
 */
void
memory_key_copy(MemoryKey *dst, const MemoryKey *src)
{
	memset(dst, 0, sizeof(MemoryKey));
	dst->name.dbid = src->name.dbid;
	dst->name.relid = src->name.relid;
	dst->name.len = src->name.len;
	memcpy(dst->name.name, src->name.name, Min(src->name.len, SHARED_NAME_MAX_BYTES));
	dst->provisional = src->provisional;
}

/* memory_key() for a text name; false if too long to be a memory bucket's. */
bool
memory_key_text(MemoryKey *key, Oid relid, text *name, bool provisional)
{
	if (VARSIZE_ANY_EXHDR(name) > SHARED_NAME_MAX_BYTES)
		return false;
	memory_key(key, relid, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name), provisional);
	return true;
}

/* The hash code of "key", which also picks its partition. */
uint32
memory_hashcode(const MemoryKey *key)
{
	return get_hash_value(memory_hash, key);
}

/* The lock of the partition of "hashcode". */
LWLock *
memory_partition_lock(uint32 hashcode)
{
	return &memory_shared->locks[hashcode % MEMORY_PARTITIONS].lock;
}

/* The lock of the template records. */
static LWLock *
templates_lock(void)
{
	return &memory_shared->locks[MEMORY_PARTITIONS].lock;
}

/* The most keys one template may have. */
static uint32
template_cap(void)
{
	return max_template_keys > 0 ? max_template_keys : Max(1, max_memory_buckets / 4);
}

/* The most keys all templates together may have: all but the named room. */
static uint32
all_templates_cap(void)
{
	return Max(1, max_memory_buckets - (max_memory_buckets + 9) / 10);
}

/* Add one to "counter" if it is below "cap"; false if it is not. */
static bool
reserve(pg_atomic_uint32 *counter, uint32 cap)
{
	uint32		value = pg_atomic_read_u32(counter);

	while (value < cap)
		if (pg_atomic_compare_exchange_u32(counter, &value, value + 1))
			return true;
	return false;
}

/*
 * The bucket a new entry starts with at "now", made from "settings" (its
 * row's, or its template's, state included): full, a quota with a
 * period's tokens (bucket_initial_deficit()), no fuller than its row says.
 */
Bucket
memory_new_state(const Bucket *settings, TimestampTz now)
{
	Bucket		bucket = *settings;

	bucket.deficit = bucket_initial_deficit(settings);
	bucket.updated_at = now;
	bucket.paused_until = DT_NOBEGIN;
	bucket_config_no_fuller(&bucket, settings, now);
	return bucket;
}

/*
 * The bucket an absent entry stands for, with the given settings (its
 * row's, or its template's, state included): empty at empty_at, or new
 * (memory_new_state()) when empty_at is -infinity; and no fuller than its
 * row says.  A quota empty at empty_at gets its tokens back at the next
 * start of a period: a restart never gives it a period's tokens twice.
 */
Bucket
memory_absent_state(const Bucket *settings, TimestampTz now)
{
	Bucket		bucket = *settings;

	if (memory_shared->empty_at == DT_NOBEGIN)
		return memory_new_state(settings, now);
	bucket.paused_until = DT_NOBEGIN;
	bucket.deficit = bucket.capacity;
	bucket.updated_at = memory_shared->empty_at;
	bucket_config_no_fuller(&bucket, settings, now);
	return bucket;
}

/* Take every partition's lock (and the templates'), in order. */
void
memory_lock_all(LWLockMode mode)
{
	for (int i = 0; i <= MEMORY_PARTITIONS; i++)
		LWLockAcquire(&memory_shared->locks[i].lock, mode);
}

/* Release what memory_lock_all() took. */
void
memory_unlock_all(void)
{
	for (int i = MEMORY_PARTITIONS; i >= 0; i--)
		LWLockRelease(&memory_shared->locks[i].lock);
}

/*
 * The record of the template "name" (its prefix, "len" bytes, no '*') of
 * installation "relid" of database "dbid", made if it has none; NULL when
 * there is no room for another.  The caller holds no template lock.  (The
 * database is the key's, not this process's: the postmaster, which has
 * none, makes the keys a clean shutdown saved.)
 */
static MemoryTemplate *
template_get(Oid dbid, Oid relid, const char *name, int len)
{
	SharedKey	key;
	MemoryTemplate *template;
	bool		found;

	memset(&key, 0, sizeof(key));
	(void) shared_key_make(&key, relid, name, len);
	key.dbid = dbid;
	LWLockAcquire(templates_lock(), LW_SHARED);
	template = hash_search(template_hash, &key, HASH_FIND, NULL);
	LWLockRelease(templates_lock());
	if (template != NULL)
		return template;
	LWLockAcquire(templates_lock(), LW_EXCLUSIVE);
	template = hash_search(template_hash, &key, HASH_ENTER_NULL, &found);
	if (template != NULL && !found)
	{
		pg_atomic_init_u32(&template->nkeys, 0);
		memory_shared->prefix_lengths[len / 64] |= UINT64CONST(1) << (len % 64);
	}
	LWLockRelease(templates_lock());
	return template;
}

/*
 * Whether "key" has an entry, or a template with keys has a prefix of it:
 * whether a memory bucket of that name may exist.
 */
bool
memory_covered(const MemoryKey *key)
{
	uint32		hashcode = memory_hashcode(key);
	LWLock	   *lock = memory_partition_lock(hashcode);
	bool		covered;

	LWLockAcquire(lock, LW_SHARED);
	covered = memory_find(key, hashcode) != NULL;
	LWLockRelease(lock);
	LWLockAcquire(templates_lock(), LW_SHARED);
	for (int len = 0; len <= key->name.len && !covered; len++)
		if (memory_shared->prefix_lengths[len / 64] & (UINT64CONST(1) << (len % 64)))
		{
			SharedKey	prefix;

			memset(&prefix, 0, sizeof(prefix));
			(void) shared_key_make(&prefix, key->name.relid, key->name.name, len);
			covered = hash_search(template_hash, &prefix, HASH_FIND, NULL) != NULL;
		}
	LWLockRelease(templates_lock());
	return covered;
}

/*
 * Forget the template records of installation "relid" of database "dbid"
 * (InvalidOid: of every installation of it) whose prefix is "name" ("len"
 * bytes; -1: every one).  The caller holds every lock (memory_lock_all()),
 * and has removed their keys.
 */
static void
templates_forget(Oid dbid, Oid relid, const char *name, int len)
{
	HASH_SEQ_STATUS status;
	MemoryTemplate *template;

	hash_seq_init(&status, template_hash);
	while ((template = hash_seq_search(&status)) != NULL)
		if (template->key.dbid == dbid &&
			(relid == InvalidOid || template->key.relid == relid) &&
			(len < 0 || (template->key.len == len &&
						 memcmp(template->key.name, name, len) == 0)))
			hash_search(template_hash, &template->key, HASH_REMOVE, NULL);
}

/* The entry of "key" (the caller holds its partition's lock), or NULL. */
MemoryEntry *
memory_find(const MemoryKey *key, uint32 hashcode)
{
	return hash_search_with_hash_value(memory_hash, key, hashcode, HASH_FIND, NULL);
}

/* The length of the name of the entry's template (with its '*'), 0: none. */
int
memory_template_name_len(const MemoryEntry *entry)
{
	return entry->template ? entry->template->key.len + 1 : 0;
}

/*
 * Remove "entry" (the caller holds its partition's lock exclusively) and
 * give its room back.
 */
void
memory_remove_entry(MemoryEntry *entry)
{
	MemoryPartition *partition = &memory_shared->partitions[entry->hashcode % MEMORY_PARTITIONS];

	if (partition->hand == entry)
		partition->hand = entry->next;
	if (entry->prev)
		entry->prev->next = entry->next;
	else
		partition->head = entry->next;
	if (entry->next)
		entry->next->prev = entry->prev;
	if (entry->template != NULL)
	{
		pg_atomic_fetch_sub_u32(&entry->template->nkeys, 1);
		pg_atomic_fetch_sub_u32(&memory_shared->template_keys, 1);
	}
	hash_search_with_hash_value(memory_hash, &entry->key, entry->hashcode,
								HASH_REMOVE, NULL);
}

/* Put a new entry at the head of its partition's list. */
static void
link_entry(MemoryEntry *entry)
{
	MemoryPartition *partition = &memory_shared->partitions[entry->hashcode % MEMORY_PARTITIONS];

	entry->prev = NULL;
	entry->next = partition->head;
	if (partition->head)
		partition->head->prev = entry;
	partition->head = entry;
}

/* Set up a new entry's fields, in "state". */
static void
init_entry(MemoryEntry *entry, uint32 hashcode, MemoryTemplate *template,
		   const Bucket *state, TransactionId owner)
{
	entry->hashcode = hashcode;
	entry->serial = pg_atomic_fetch_add_u64(&memory_shared->serials, 1);
	entry->template = template;
	entry->owner = owner;
	entry->used = true;
	entry->since = tb_clock_now();
	SpinLockInit(&entry->mutex);
	entry->waiter = -1;
	entry->pins = 0;
	entry->bucket = *state;
	entry->open_takes = 0;
	memset(&entry->counters, 0, sizeof(StatsCounts));
	link_entry(entry);
}

/*
 * Whether an entry may be removed at "now" with nothing any caller could
 * tell: full, not paused, nobody holding changes to undo, committed.  With
 * "exactly", also one the absent rule would make again as it is (after a
 * crash, a bucket made anew is empty at first: stricter, never looser).
 * The caller holds the entry's partition's lock exclusively, which no
 * spinlock holder can be without.
 */
bool
memory_evictable(MemoryEntry *entry, TimestampTz now, bool exactly)
{
	Bucket		absent = memory_absent_state(&entry->bucket, now);

	return entry->pins == 0 && !entry->key.provisional &&
		entry->bucket.paused_until <= now &&
		bucket_deficit_at(&entry->bucket, now) == 0 &&
		(!exactly || bucket_deficit_at(&absent, now) == 0);
}

/*
 * The clock: remove one idle key of "template" (NULL: of any template)
 * for room.  False when the few partitions it looks in this time hold
 * none (or are busy).  The caller holds no partition lock.
 */
static bool
evict_one(MemoryTemplate *template, TimestampTz now)
{
	for (int i = 0; i < CLOCK_PARTITIONS; i++)
	{
		uint32		p = pg_atomic_fetch_add_u32(&memory_shared->clock, 1) % MEMORY_PARTITIONS;
		LWLock	   *lock = &memory_shared->locks[p].lock;
		MemoryPartition *partition = &memory_shared->partitions[p];
		bool		evicted = false;

		if (partition->head == NULL || !LWLockConditionalAcquire(lock, LW_EXCLUSIVE))
			continue;
		for (int n = 0; n < CLOCK_ENTRIES && partition->head != NULL && !evicted; n++)
		{
			MemoryEntry *entry = partition->hand ? partition->hand : partition->head;

			partition->hand = entry->next;
			if (entry->template == NULL || (template && entry->template != template))
				continue;		/* named buckets are never taken */
			if (entry->used)
			{
				entry->used = false;	/* a second chance */
				continue;
			}
			if (memory_evictable(entry, now, false))
			{
				memory_remove_entry(entry);
				evicted = true;
			}
		}
		LWLockRelease(lock);
		if (evicted)
			return true;
	}
	return false;
}

/*
 * The error for a new bucket there is no room for ("template": the one it
 * is made from, or NULL: a named bucket).
 */
static void
report_no_room(const MemoryKey *key, MemoryTemplate *template)
{
	char	   *name = pnstrdup(key->name.name, key->name.len);

	if (template == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("no room for memory token bucket \"%s\"", name),
				 errdetail("All %d memory buckets are in use, and no key made from a template is full and idle.",
						   max_memory_buckets),
				 errhint("Raise tokenbucket.max_memory_buckets in postgresql.conf and restart the server, or drop memory buckets no longer needed.")));
	ereport(ERROR,
			(errcode(ERRCODE_OUT_OF_MEMORY),
			 errmsg("no room for memory token bucket \"%s\"", name),
			 errdetail("Its template \"%.*s*\" has %u keys, or all templates together %u, and none of them is full and idle.",
					   template->key.len, template->key.name,
					   pg_atomic_read_u32(&template->nkeys),
					   pg_atomic_read_u32(&memory_shared->template_keys)),
			 errhint("Raise tokenbucket.max_template_keys (at most %u keys per template now) or tokenbucket.max_memory_buckets, or wait for keys to refill.",
					 template_cap())));
}

/*
 * One try of memory_make_entry(): ENTRY_NO_ROOM when there is no room
 * (*from: the template whose key must go; NULL: any template's).
 */
static EntryMade
try_make(const MemoryKey *key, uint32 hashcode, MemoryTemplate *template,
		 const Bucket *state, TransactionId owner, uint64 generation,
		 MemoryEntry **made, MemoryTemplate **from)
{
	LWLock	   *lock = memory_partition_lock(hashcode);
	MemoryEntry *entry;
	bool		found;

	LWLockAcquire(lock, LW_SHARED);
	found = memory_find(key, hashcode) != NULL;
	LWLockRelease(lock);
	if (found)
		return ENTRY_EXISTS;

	/* a key needs room in its template's share, and in all templates' */
	/* (what a clean shutdown saved comes back whatever the limits now) */
	*from = template;
	if (template != NULL && !reserve(&template->nkeys, memory_loading ? PG_UINT32_MAX : template_cap()))
		return ENTRY_NO_ROOM;
	*from = NULL;
	if (template != NULL &&
		!reserve(&memory_shared->template_keys, memory_loading ? PG_UINT32_MAX : all_templates_cap()))
	{
		pg_atomic_fetch_sub_u32(&template->nkeys, 1);
		return ENTRY_NO_ROOM;
	}

	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = NULL;
	found = false;
	if (generation == PG_UINT64_MAX ||
		pg_atomic_read_u64(&memory_shared->changes) == generation)
		entry = hash_search_with_hash_value(memory_hash, key, hashcode,
											HASH_ENTER_NULL, &found);
	if (entry != NULL && !found)
		init_entry(entry, hashcode, template, state, owner);
	LWLockRelease(lock);
	if (entry != NULL && !found)
	{
		*made = entry;
		return ENTRY_MADE;
	}

	/* not made: give the room back */
	if (template != NULL)
	{
		pg_atomic_fetch_sub_u32(&template->nkeys, 1);
		pg_atomic_fetch_sub_u32(&memory_shared->template_keys, 1);
	}
	if (found)
		return ENTRY_EXISTS;
	return entry == NULL && generation != PG_UINT64_MAX &&
		pg_atomic_read_u64(&memory_shared->changes) != generation ?
		ENTRY_STALE : ENTRY_NO_ROOM;
}

/*
 * Make the entry of "key" in "state": from its template (its first
 * "template_len" - 1 bytes, then '*') or, with 0, named; a provisional one
 * owned by "owner".  Unless "generation" is PG_UINT64_MAX, nothing is made
 * if settings changes were applied since it was read (ENTRY_STALE).  When
 * there is no room even after the clock's sweep, or none for a quota's
 * calendar, fail (with "report") or return ENTRY_NO_ROOM.  *made is the
 * new entry (the caller may change it only under its partition's lock).
 */
EntryMade
memory_make_entry(const MemoryKey *key, int template_len, const Bucket *state,
				  TransactionId owner, uint64 generation, bool report,
				  MemoryEntry **made)
{
	uint32		hashcode = memory_hashcode(key);
	MemoryTemplate *template = NULL;
	MemoryTemplate *from = NULL;
	TimestampTz now = tb_clock_now();
	Bucket		shared_state;

	*made = NULL;
	if (state->period != NULL)
	{
		/* the entry points at the shared copy of the calendar, never ours */
		shared_state = *state;
		shared_state.period = memory_calendar(state->period);
		if (shared_state.period == NULL)
		{
			if (!report)
				return ENTRY_NO_ROOM;
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("no room for the calendar of memory token bucket \"%.*s\"",
							key->name.len, key->name.name),
					 errdetail("All %d calendars of memory quotas are taken: each different calendar a memory bucket had since the server started takes one (calendars whose periods start at the same moments are one).",
							   memory_calendars_count()),
					 errhint("Start memory quotas of the same period at the same time of day (tb_create_quota's \"starts\"; its default does), or make this one a table quota; a restart frees the calendars no memory bucket has.")));
		}
		state = &shared_state;
	}
	if (template_len > 0)
	{
		template = template_get(key->name.dbid, key->name.relid, key->name.name,
								template_len - 1);
		if (template == NULL)
		{
			if (!report)
				return ENTRY_NO_ROOM;
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("no room for memory token bucket \"%.*s\"",
							key->name.len, key->name.name),
					 errdetail("%d memory templates have keys already.", MEMORY_TEMPLATES),
					 errhint("Drop memory templates no longer needed.")));
		}
	}
	for (int attempt = 0; attempt < 4; attempt++)
	{
		EntryMade	result = try_make(key, hashcode, template, state, owner,
									  generation, made, &from);

		if (result != ENTRY_NO_ROOM)
			return result;
		/* reuse an idle key's entry, and try again */
		if (!evict_one(from, now))
			break;
	}
	if (report)
		report_no_room(key, template);
	return ENTRY_NO_ROOM;
}

/*
 * Give "entry" a new key (a provisional entry becoming its bucket's
 * committed one), keeping everything else; false when that key has an
 * entry already.  The caller holds every lock (memory_lock_all()).
 */
bool
memory_rekey(MemoryEntry *entry, const MemoryKey *key)
{
	uint32		hashcode = memory_hashcode(key);
	MemoryEntry copy = *entry;
	MemoryEntry *moved;
	bool		found;

	if (memory_find(key, hashcode) != NULL)
		return false;
	/* out of the hash and its list; its room stays taken */
	if (entry->template != NULL)
	{
		pg_atomic_fetch_add_u32(&entry->template->nkeys, 1);
		pg_atomic_fetch_add_u32(&memory_shared->template_keys, 1);
	}
	memory_remove_entry(entry);
	moved = hash_search_with_hash_value(memory_hash, key, hashcode, HASH_ENTER, &found);
	moved->hashcode = hashcode;
	moved->serial = copy.serial;
	moved->template = copy.template;
	moved->owner = InvalidTransactionId;
	moved->used = true;
	moved->since = copy.since;
	SpinLockInit(&moved->mutex);
	moved->waiter = copy.waiter;
	moved->pins = copy.pins;
	moved->bucket = copy.bucket;
	moved->open_tokens = copy.open_tokens;
	moved->open_low = copy.open_low;
	moved->open_takes = copy.open_takes;
	moved->counters = copy.counters;
	link_entry(moved);
	return true;
}

/*
 * Remove every entry of database "dbid" (with "relid" valid: of that
 * installation; with "name" too: made from the template of that prefix,
 * "len" bytes) and the template records that go with them.  Provisional
 * entries stay: their owner's commit or abort deals with them.  The
 * caller holds every lock.
 */
void
memory_remove_all(Oid dbid, Oid relid, const char *name, int len)
{
	for (int p = 0; p < MEMORY_PARTITIONS; p++)
	{
		MemoryEntry *entry = memory_shared->partitions[p].head;

		while (entry != NULL)
		{
			MemoryEntry *next = entry->next;

			if (entry->key.name.dbid == dbid && !entry->key.provisional &&
				(relid == InvalidOid || entry->key.name.relid == relid) &&
				(name == NULL || (entry->template != NULL &&
								  entry->template->key.len == len &&
								  memcmp(entry->template->key.name, name, len) == 0)))
			{
				memory_wake(entry->waiter);
				memory_remove_entry(entry);
			}
			entry = next;
		}
	}
	templates_forget(dbid, relid, name, name ? len : -1);
}

/* Remove everything (the caller holds every lock). */
void
memory_remove_every(void)
{
	HASH_SEQ_STATUS status;
	MemoryTemplate *template;

	for (int p = 0; p < MEMORY_PARTITIONS; p++)
		while (memory_shared->partitions[p].head != NULL)
			memory_remove_entry(memory_shared->partitions[p].head);
	hash_seq_init(&status, template_hash);
	while ((template = hash_seq_search(&status)) != NULL)
		hash_search(template_hash, &template->key, HASH_REMOVE, NULL);
}

/*
 * The room the hash gives an entry: the struct, and enough more that each
 * element (the hash's header and the entry) fills whole cache lines.  The
 * hash's elements are laid out in arrays that start on a cache line
 * (ShmemAlloc's alignment), so each entry then starts 16 bytes into one,
 * and its fields fall in the lines MemoryEntry says; were they not, only
 * the speed would change.
 */
static Size
entry_room(void)
{
	Size		header = MAXALIGN(sizeof(HASHELEMENT));

	return TYPEALIGN(PG_CACHE_LINE_SIZE, header + sizeof(MemoryEntry)) - header;
}

/* Shared memory the store needs. */
Size
memory_shmem_size(void)
{
	return add_size(add_size(add_size(MAXALIGN(sizeof(MemoryShared)),
									  shmem_hash_size(max_memory_buckets, entry_room())),
							 shmem_hash_size(MEMORY_TEMPLATES, sizeof(MemoryTemplate))),
					memory_calendars_size());
}

/* Its locks: a partition's each, and the templates'. */
int
memory_shmem_locks(void)
{
	return MEMORY_PARTITIONS + 1;
}

/* SharedArea attach: the struct and the hashes, made the first time. */
void
memory_attach(LWLockPadded *locks)
{
	bool		found;

	memory_shared = shmem_struct("tokenbucket", sizeof(MemoryShared), &found);
	memory_hash = shmem_hash("tokenbucket buckets", max_memory_buckets,
							 sizeof(MemoryKey), entry_room(),
							 memory_key_hash, memory_key_match, MEMORY_PARTITIONS);
	template_hash = shmem_hash("tokenbucket templates", MEMORY_TEMPLATES,
							   sizeof(SharedKey), sizeof(MemoryTemplate),
							   shared_key_hash, shared_key_match, 0);
	memory_calendars_attach();
	if (found)
		return;
	memset(memory_shared, 0, sizeof(MemoryShared));
	memory_shared->locks = locks;
	pg_atomic_init_u64(&memory_shared->changes, 1);
	pg_atomic_init_u64(&memory_shared->serials, 1);
	pg_atomic_init_u32(&memory_shared->template_keys, 0);
	pg_atomic_init_u32(&memory_shared->clock, 0);
}

/* The timeline this primary writes on. */
static TimeLineID
current_timeline(void)
{
	return GetWALInsertionTimeLine();
}

/*
 * Fail unless memory buckets can be used here: the library preloaded, its
 * marker file written, and this server a primary.  The first time a
 * backend gets past this, it makes sure the store belongs to the timeline
 * the server writes on: after a promotion it does not, and every bucket
 * then starts empty.
 */
void
memory_require(void)
{
	if (memory_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("memory token buckets need tokenbucket in shared_preload_libraries"),
				 errdetail("Their tokens live in shared memory, which is set aside when the server starts."),
				 errhint("Add shared_preload_libraries = 'tokenbucket' to postgresql.conf and restart the server.")));
	if (memory_shared->unusable)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("memory token buckets cannot be used: file \"%s\" could not be written",
						MARKER_FILE),
				 errdetail("Without it, a later start could not tell that memory buckets granted tokens here."),
				 errhint("Make the directory %s writable by the server and restart it; the server log says why it failed.",
						 PGSTAT_STAT_PERMANENT_DIRECTORY)));
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot use memory token buckets on a standby"),
				 errdetail("A memory bucket's tokens live in the shared memory of the primary, and only there."),
				 errhint("Call the tb_* functions on the primary.")));
	if (!timeline_checked)
	{
		TimeLineID	timeline = current_timeline();

		if (memory_shared->timeline != timeline)
		{
			memory_lock_all(LW_EXCLUSIVE);
			if (memory_shared->timeline != timeline)
			{
				memory_remove_every();
				memory_shared->empty_at = tb_clock_now();
				memory_shared->timeline = timeline;
			}
			memory_unlock_all();
		}
		timeline_checked = true;
	}
}

/*
 * Whether this backend may look for entries: the library preloaded and
 * this server a primary (on a standby there are none, and the caller goes
 * on to the table, which says 25006 for a memory bucket).
 */
bool
memory_usable(void)
{
	if (memory_shared == NULL || RecoveryInProgress())
		return false;
	memory_require();
	return true;
}

/* Wake the head waiter "waiter" (a proc number, or -1). */
void
memory_wake(int waiter)
{
	if (waiter >= 0)
		SetLatch(&GetPGProcByNumber(waiter)->procLatch);
}

/*
 * Before a change of "entry"'s tokens at "now" (under its spinlock): while
 * takes are open, the lowest deficit, less what they took, is kept, or 0
 * when that is lower (all a rollback needs).  Between changes a deficit
 * only falls (refill), so its lowest over any time is one of those seen
 * just before a change, or the present one.  It is kept as a float4
 * rounded down (so that the entry keeps its cache lines), which only gives
 * back less, by a part in ten million of it at most.
 */
void
memory_open_note(MemoryEntry *entry, TimestampTz now)
{
	double		low;
	float4		rounded;

	if (entry->open_takes == 0)
		return;
	low = fmin(entry->open_low,
			   bucket_deficit_at(&entry->bucket, now) - entry->open_tokens);
	if (low >= 0)
		return;
	rounded = low < -FLT_MAX ? -get_float4_infinity() : (float4) low;
	entry->open_low = (double) rounded > low ? nextafterf(rounded, -FLT_MAX) : rounded;
}

/*
 * A take of "tokens" (above zero) that a rollback would give back was
 * made on "entry" (under its spinlock, noted before), and is counted in
 * "opened" and "opens" (its undo record's) and the entry's open takes: the
 * first open one starts the lowest deficit anew.  A count that would
 * overflow stays -1 for the entry's life: then the lowest is never started
 * anew, which gives back less, never more.  A provisional entry's counts
 * nothing: only its own transaction changes it, whose deeper levels end
 * first, so a rollback there capped at the capacity is exact already.
 */
void
memory_open_add(MemoryEntry *entry, double tokens, double *opened, int64 *opens)
{
	*opened += tokens;
	(*opens)++;
	if (entry->key.provisional)
		return;
	if (entry->open_takes == 0)
	{
		entry->open_tokens = 0;
		entry->open_low = 0;
	}
	entry->open_takes = entry->open_takes >= 0 && entry->open_takes < PG_INT32_MAX ?
		entry->open_takes + 1 : -1;
	entry->open_tokens += tokens;
}

/*
 * Takes counted by memory_open_add(), "takes" of them, "tokens" in all,
 * ended (committed, or rolled back): under the entry's spinlock.
 */
void
memory_open_end(MemoryEntry *entry, double tokens, int64 takes)
{
	if (entry->open_takes <= 0 || takes == 0)
		return;
	if (takes >= entry->open_takes)
		entry->open_takes = 0;
	else
	{
		entry->open_takes -= (int32) takes;
		entry->open_tokens -= tokens;
	}
}

/*
 * Every take open on "entry" now gives back nothing if rolled back (under
 * its spinlock): a change lowered the bucket to a level, where it would
 * have lowered it as far had those takes never been made
 * (memory_lowers_to_level()).  Takes made later count as before.
 */
void
memory_open_void(MemoryEntry *entry)
{
	if (entry->open_takes != 0)
		entry->open_low = -get_float4_infinity();
}

/* Give "entry" new settings at "now" (every lock held; see memory_open_note()). */
void
memory_reconfigure(MemoryEntry *entry, double capacity, double refill_rate,
				   TimestampTz now)
{
	memory_open_note(entry, now);
	bucket_reconfigure(&entry->bucket, capacity, refill_rate, now);
}

/*
 * Give back "tokens" (taken at once when below zero) that an open take
 * took from "entry", at "now", as if it had never been made, and no more
 * (under its spinlock).  Had the take never been made, the deficit would
 * be lower by the tokens until the bucket, without them, was full, and
 * from then on lower by the deficit's lowest since: so by no more than
 * "tokens" plus the lowest of (deficit less the tokens this take's
 * record held then) at each change since it and now.  Every open take
 * counts in open_tokens, so open_low is never above that: a rollback
 * with nothing refilled meanwhile gives all back, one after a refill that
 * others spent gives that much less, and several open at once may give
 * back a little less than they could.
 */
void
memory_give_back(MemoryEntry *entry, double tokens, TimestampTz now)
{
	memory_open_note(entry, now);
	if (tokens > 0 && entry->open_takes != 0)
		tokens = fmax(0.0, tokens + entry->open_low);
	if (tokens != 0)
		bucket_adjust(&entry->bucket, tokens, now);
}

/*
 * Copy the name (without its '*') and the number of keys of every memory
 * template of installation "relid" into "names" and "keys", room for
 * MEMORY_TEMPLATES each; how many.
 */
int
memory_templates_of(Oid relid, SharedKey *names, int64 *keys)
{
	HASH_SEQ_STATUS status;
	MemoryTemplate *template;
	int			n = 0;

	LWLockAcquire(templates_lock(), LW_SHARED);
	hash_seq_init(&status, template_hash);
	while ((template = hash_seq_search(&status)) != NULL)
	{
		if (template->key.dbid != MyDatabaseId || template->key.relid != relid ||
			n >= MEMORY_TEMPLATES)
			continue;
		names[n] = template->key;
		keys[n++] = pg_atomic_read_u32(&template->nkeys);
	}
	LWLockRelease(templates_lock());
	return n;
}
