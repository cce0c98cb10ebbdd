/*-------------------------------------------------------------------------
 *
 * memory_entries.c
 *	  The memory store's entries: a fixed-size shared hash of bucket
 *	  states, keyed by database, tb_buckets table and name, and what is
 *	  true of a bucket that has none.
 *
 * An absent entry stands for a bucket that was empty at "empty_at": the
 * moment this server came back from a crash, a failover, or a start
 * without the file a clean shutdown writes.  An entry is made from that
 * rule on first use, so no bucket, not even one first made from a
 * template after the crash, can grant what it granted before.  Only an
 * entry that the rule would make again exactly (full, not paused, nobody
 * waiting on it or holding changes to undo) is ever removed to make room.
 *
 * A clean shutdown writes every entry to a file (shmem.c's StateFile),
 * read back and removed at the next start, as pg_stat_statements does.  A
 * file that is corrupt, from another cluster, or left by a shutdown that
 * was not clean is ignored: the buckets start empty.
 *
 * src/memory_entries.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/pg_control.h"
#include "common.h"
#include "common/controldata_utils.h"
#include "funcapi.h"
#include "memory_entries.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

/* the state file a clean shutdown writes */
#define STATE_FILE		PGSTAT_STAT_PERMANENT_DIRECTORY "/tokenbucket.buckets"
#define STATE_MAGIC		0x74624D31	/* "tbM1" */
#define STATE_FORMAT	1

/* removed at once when the hash is full: 5% of it, as pg_stat_statements */
#define EVICT_FRACTION	0.05

/* GUC */
int			max_memory_buckets = 10000;

/* in every process */
MemoryShared *memory_shared = NULL;
HTAB	   *memory_hash = NULL;
static bool timeline_checked = false;
static bool state_file_seen = false;	/* the postmaster found a state file */

/*
 * The bucket an absent entry stands for, with the given settings: empty at
 * empty_at, or full when empty_at is -infinity.
 */
Bucket
memory_absent_state(const Bucket *settings, TimestampTz now)
{
	Bucket		bucket = *settings;

	bucket.paused_until = DT_NOBEGIN;
	if (memory_shared->empty_at == DT_NOBEGIN)
	{
		bucket.deficit = 0;
		bucket.updated_at = now;
	}
	else
	{
		bucket.deficit = bucket.capacity;
		bucket.updated_at = memory_shared->empty_at;
	}
	return bucket;
}

/* Remove every entry (the caller holds the lock exclusively). */
static void
remove_all(void)
{
	HASH_SEQ_STATUS status;
	MemoryEntry *entry;

	hash_seq_init(&status, memory_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
		hash_search(memory_hash, &entry->key, HASH_REMOVE, NULL);
}

/* SharedArea shutdown: write the entries to the state file. */
static void
save_state(void)
{
	StateFile	sf;
	HASH_SEQ_STATUS status;
	MemoryEntry *entry;
	int64		count = hash_get_num_entries(memory_hash);

	if (!state_save_begin(&sf, STATE_FILE, STATE_MAGIC, STATE_FORMAT))
		return;
	state_save(&sf, &memory_shared->empty_at, sizeof(TimestampTz));
	state_save(&sf, &memory_shared->timeline, sizeof(TimeLineID));
	state_save(&sf, &count, sizeof(count));
	hash_seq_init(&status, memory_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		state_save(&sf, &entry->key, offsetof(SharedKey, name) + entry->key.len);
		state_save(&sf, &entry->template_len, sizeof(uint16));
		state_save(&sf, &entry->bucket, sizeof(Bucket));
	}
	(void) state_save_end(&sf);
}

/*
 * Read the state file a clean shutdown wrote, if any, and remove it.  True
 * when the entries and empty_at now hold what was saved; false (after a
 * LOG line when there was a file) when the buckets must start empty.
 */
static bool
load_state(void)
{
	StateFile	sf;
	int64		count;
	TimestampTz empty_at;
	TimeLineID	timeline;

	if (!state_load_begin(&sf, STATE_FILE, STATE_MAGIC, STATE_FORMAT,
						  "Every memory token bucket starts empty.", &state_file_seen))
		return false;
	if (state_load(&sf, &empty_at, sizeof(empty_at)) &&
		state_load(&sf, &timeline, sizeof(timeline)) &&
		state_load(&sf, &count, sizeof(count)))
	{
		if (count < 0 || count > max_memory_buckets)
		{
			state_load_reject(&sf, "it holds more buckets than tokenbucket.max_memory_buckets");
			return false;
		}
		for (int64 i = 0; i < count; i++)
		{
			SharedKey	key;
			uint16		template_len;
			Bucket		bucket;
			MemoryEntry *entry;

			if (!state_load(&sf, &key, offsetof(SharedKey, name)) ||
				key.len > SHARED_NAME_MAX_BYTES ||
				!state_load(&sf, key.name, key.len) ||
				!state_load(&sf, &template_len, sizeof(template_len)) ||
				!state_load(&sf, &bucket, sizeof(bucket)))
			{
				sf.failed = true;
				break;
			}
			entry = hash_search(memory_hash, &key, HASH_ENTER, NULL);
			entry->serial = pg_atomic_fetch_add_u64(&memory_shared->serials, 1);
			entry->template_len = template_len;
			SpinLockInit(&entry->mutex);
			entry->waiter = -1;
			entry->pins = 0;
			entry->bucket = bucket;
		}
	}
	if (!state_load_end(&sf))
	{
		remove_all();
		return false;
	}
	memory_shared->empty_at = empty_at;
	memory_shared->timeline = timeline;
	return true;
}

/*
 * SharedArea attach: remember where the store is, and in the postmaster
 * set it up: the state a clean shutdown saved, or every bucket empty now.
 */
static void
memory_attach(void *state, HTAB *area_hash, LWLockPadded *locks, bool first)
{
	memory_shared = state;
	memory_hash = area_hash;
	if (!first)
		return;
	memory_shared->lock = &locks[0].lock;
	memory_shared->empty_at = DT_NOBEGIN;
	memory_shared->timeline = 0;
	pg_atomic_init_u64(&memory_shared->changes, 0);
	pg_atomic_init_u64(&memory_shared->serials, 1);
	{
		bool		crc_ok;
		ControlFileData *control = get_controlfile(DataDir, &crc_ok);

		/*
		 * Without a file, a clean shutdown means the library was not
		 * preloaded before (no memory bucket could be used): they are full.
		 * Otherwise (a crash, a file not to be trusted) they start empty.
		 */
		if (!load_state())
		{
			memory_shared->empty_at = control->state == DB_SHUTDOWNED && !state_file_seen ?
				DT_NOBEGIN : GetCurrentTimestamp();
			memory_shared->timeline = control->checkPointCopy.ThisTimeLineID;
		}
	}
}

/* The timeline this primary writes on. */
static TimeLineID
current_timeline(void)
{
#if PG_VERSION_NUM >= 150000
	return GetWALInsertionTimeLine();
#else
	return ThisTimeLineID;
#endif
}

/*
 * Fail unless memory buckets can be used here: the library preloaded, and
 * this server a primary.  The first time a backend gets past this, it
 * makes sure the store belongs to the timeline the server writes on: after
 * a promotion it does not, and every bucket then starts empty.
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
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot use memory token buckets on a standby"),
				 errdetail("A memory bucket's tokens live in the shared memory of the primary, and only there."),
				 errhint("Call the tb_* functions on the primary.")));
	if (!timeline_checked)
	{
		TimeLineID	timeline = current_timeline();
		bool		same;

		LWLockAcquire(memory_shared->lock, LW_SHARED);
		same = memory_shared->timeline == timeline;
		LWLockRelease(memory_shared->lock);
		if (!same)
		{
			LWLockAcquire(memory_shared->lock, LW_EXCLUSIVE);
			if (memory_shared->timeline != timeline)
			{
				remove_all();
				memory_shared->empty_at = GetCurrentTimestamp();
				memory_shared->timeline = timeline;
			}
			LWLockRelease(memory_shared->lock);
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

/* The length of the name of the entry's template (with its '*'), 0: none. */
int
memory_template_name_len(const MemoryEntry *entry)
{
	return entry->template_len > 0 ? entry->template_len + 1 : 0;
}

/* The entry of "key" (the caller holds the lock), or NULL. */
MemoryEntry *
memory_find(const SharedKey *key)
{
	return hash_search(memory_hash, key, HASH_FIND, NULL);
}

/*
 * Whether an entry may be removed to make room at "now": full, not paused,
 * nobody waiting on it or holding changes to undo.  With "exactly", also
 * one the absent rule would make again as it is (after a crash, a bucket
 * made anew is empty at first: stricter, never looser).  The caller holds
 * the lock exclusively, which no spinlock holder can be without.
 */
bool
memory_evictable(MemoryEntry *entry, TimestampTz now, bool exactly)
{
	Bucket		absent = memory_absent_state(&entry->bucket, now);

	return entry->waiter < 0 && entry->pins == 0 &&
		entry->bucket.paused_until <= now &&
		bucket_deficit_at(&entry->bucket, now) == 0 &&
		(!exactly || bucket_deficit_at(&absent, now) == 0);
}

/*
 * Remove full idle entries for room: up to EVICT_FRACTION of the hash,
 * those the absent rule would make again exactly first.  The caller holds
 * the lock exclusively.
 */
void
memory_evict(TimestampTz now)
{
	long		goal = Max(1, (long) (max_memory_buckets * EVICT_FRACTION));
	long		evicted = 0;

	for (int pass = 0; pass < 2 && evicted == 0; pass++)
	{
		HASH_SEQ_STATUS status;
		MemoryEntry *entry;

		hash_seq_init(&status, memory_hash);
		while ((entry = hash_seq_search(&status)) != NULL)
		{
			if (!memory_evictable(entry, now, pass == 0))
				continue;
			hash_search(memory_hash, &entry->key, HASH_REMOVE, NULL);
			if (++evicted >= goal)
			{
				hash_seq_term(&status);
				break;
			}
		}
	}
}

static const SharedArea memory_area = {
	.name = "tokenbucket",
	.state_size = sizeof(MemoryShared),
	.max_entries = &max_memory_buckets,
	.entry_size = sizeof(MemoryEntry),
	.nlocks = 1,
	.attach = memory_attach,
	.shutdown = save_state,
};

/* The GUC, and the store's shared memory (the library being preloaded). */
void
memory_entries_init(void)
{
	DefineCustomIntVariable("tokenbucket.max_memory_buckets",
							"Most memory token buckets the server keeps at once.",
							"Each takes shared memory from the start; "
							"full idle buckets are reused when they are all in use.",
							&max_memory_buckets,
							10000, 100, 100000000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	shmem_register(&memory_area);
}

/* list(): a row per entry of the installation. */
void
memory_list(Oid relid, Tuplestorestate *store, TupleDesc desc)
{
	HASH_SEQ_STATUS status;
	MemoryEntry *entry;

	if (memory_shared == NULL || RecoveryInProgress())
		return;
	memory_require();
	LWLockAcquire(memory_shared->lock, LW_SHARED);
	hash_seq_init(&status, memory_hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		Datum		values[7];
		bool		nulls[7] = {0};
		Bucket		bucket;

		if (entry->key.dbid != MyDatabaseId || entry->key.relid != relid)
			continue;
		SpinLockAcquire(&entry->mutex);
		bucket = entry->bucket;
		SpinLockRelease(&entry->mutex);
		values[0] = PointerGetDatum(cstring_to_text_with_len(entry->key.name, entry->key.len));
		values[1] = Float8GetDatum(bucket.capacity);
		values[2] = Float8GetDatum(bucket.refill_rate);
		values[3] = Float8GetDatum(bucket.deficit);
		values[4] = TimestampTzGetDatum(bucket.updated_at);
		values[5] = TimestampTzGetDatum(bucket.paused_until);
		if (entry->template_len > 0)
		{
			char	   *template = palloc(entry->template_len + 1);

			memcpy(template, entry->key.name, entry->template_len);
			template[entry->template_len] = '*';
			values[6] = PointerGetDatum(cstring_to_text_with_len(template, entry->template_len + 1));
		}
		else
			nulls[6] = true;
		tuplestore_putvalues(store, desc, values, nulls);
	}
	LWLockRelease(memory_shared->lock);
}

PG_FUNCTION_INFO_V1(tb_memory_buckets);

/*
 * tb_memory_buckets(): the state of every memory bucket of this database
 * that has an entry (name, settings, deficit, updated_at, paused_until,
 * template).  Empty on a standby or without the library preloaded.
 */
Datum
tb_memory_buckets(PG_FUNCTION_ARGS)
{
	static const char *const views[] = {"tb_status", "tb_stats", "tb_template_stats", NULL};
	TupleDesc	desc;
	Tuplestorestate *store = materialize_begin(fcinfo, &desc);

	/* the views built on it call it as their reader */
	check_may_read(fcinfo, "tb_memory_buckets()", views);
	memory_list(installation_table(fcinfo), store, desc);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(tb_memory_empty_at);

/*
 * tb_memory_empty_at(): the moment a memory bucket without an entry was
 * empty (-infinity: it is full); NULL on a standby or without the library
 * preloaded, where memory buckets have no state.
 */
Datum
tb_memory_empty_at(PG_FUNCTION_ARGS)
{
	TimestampTz empty_at;

	if (memory_shared == NULL || RecoveryInProgress())
		PG_RETURN_NULL();
	memory_require();
	LWLockAcquire(memory_shared->lock, LW_SHARED);
	empty_at = memory_shared->empty_at;
	LWLockRelease(memory_shared->lock);
	PG_RETURN_TIMESTAMPTZ(empty_at);
}
