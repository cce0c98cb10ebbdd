/*-------------------------------------------------------------------------
 *
 * memory_store.c
 *	  The memory store: buckets whose tokens live in shared memory.
 *
 * A memory bucket's settings are a row of tb_buckets (a named bucket, or
 * the template a per-key bucket was made from); its state is an entry of
 * a fixed-size shared hash, keyed by database, tb_buckets table and name.
 * A grant is a hash lookup under the LWLock held shared and bucket.c's
 * arithmetic under the entry's spinlock: no row, no WAL, no commit flush.
 * The LWLock is held exclusively only to add or remove entries.
 *
 * An absent entry stands for a bucket that was empty at "empty_at": the
 * moment this server came back from a crash, a failover, or a start
 * without the file a clean shutdown writes.  An entry is made from that
 * rule on first use, so no bucket, not even one first made from a
 * template after the crash, can grant what it granted before.  Only an
 * entry that the rule would make again exactly (full, not paused, nobody
 * waiting on it or holding changes to undo) is ever removed to make room.
 *
 * Transactions: every change a transaction makes to an entry's tokens or
 * pause is remembered with its subtransaction level and undone if that
 * level aborts, so ROLLBACK gives grants back as it does for a row.
 * Changes to the settings (a DBA's UPDATE of a memory bucket's row, and
 * tb_alter, tb_drop, tb_create, which make such UPDATEs) reach the entries
 * through a trigger on tb_buckets and are applied when the transaction
 * commits, never before and never if it rolls back.
 *
 * A clean shutdown writes every entry to a file (a temporary file, then a
 * rename), read back and removed at the next start, as pg_stat_statements
 * does.  A file that is corrupt, from another cluster, or left by a
 * shutdown that was not clean is ignored: the buckets start empty.
 *
 * src/memory_store.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>
#include <sys/stat.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_control.h"
#include "commands/trigger.h"
#include "common/controldata_utils.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/pg_crc32c.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tokenbucket.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

/* the state file a clean shutdown writes, and its temporary name */
#define STATE_FILE		PGSTAT_STAT_PERMANENT_DIRECTORY "/tokenbucket.buckets"
#define STATE_FILE_TMP	STATE_FILE ".tmp"
#define STATE_MAGIC		0x74624D31	/* "tbM1" */
#define STATE_FORMAT	1

/* undo records kept allocated between transactions */
#define UNDOS_KEPT		64

/* removed at once when the hash is full: 5% of it, as pg_stat_statements */
#define EVICT_FRACTION	0.05

#if PG_VERSION_NUM >= 170000
#define MY_PROC_NUMBER	MyProcNumber
#else
#define MY_PROC_NUMBER	(MyProc->pgprocno)
#endif

/* A memory bucket. */
typedef struct MemoryEntry
{
	SharedKey	key;			/* first: the hash's key */
	uint64		serial;			/* new for every entry made */
	uint16		template_len;	/* 0, or the length of its template's prefix */
	slock_t		mutex;			/* guards the fields below */
	int			waiter;			/* proc number of the head waiter, or -1 */
	int			pins;			/* open changes whose undo takes tokens */
	Bucket		bucket;
} MemoryEntry;

/* Shared state besides the hash. */
typedef struct MemoryShared
{
	LWLock	   *lock;			/* shared to use entries, exclusive to add or remove */
	TimestampTz empty_at;		/* absent buckets were empty then (-infinity: full) */
	TimeLineID	timeline;		/* the timeline empty_at belongs to */
	pg_atomic_uint64 changes;	/* settings changes applied so far */
	pg_atomic_uint64 serials;	/* entries made so far */
} MemoryShared;

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
typedef enum PendingKind
{
	PENDING_MADE,				/* a named bucket made: full */
	PENDING_ALTERED,			/* new settings, keeping tokens */
	PENDING_DROPPED,			/* gone */
	PENDING_TRUNCATED			/* every bucket of the installation gone */
} PendingKind;

typedef struct Pending
{
	PendingKind kind;
	SharedKey	key;
	bool		template;		/* the key is a template's prefix */
	int			level;
	double		capacity;
	double		refill_rate;
} Pending;

/* GUC */
static int	max_memory_buckets = 10000;

/* in every process */
static MemoryShared *shared = NULL;
static HTAB *hash = NULL;
static bool timeline_checked = false;
static bool state_file_seen = false;	/* the postmaster found a state file */

/* this backend's transaction */
static MemoryContext xact_context = NULL;
static Undo *undos = NULL;
static int	nundos = 0;
static int	maxundos = 0;
static List *pendings = NIL;

static void undo_range(int first, bool give_back);

#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* hash_search() support for SharedKey: only the used part of the name counts */
uint32
shared_key_hash(const void *key, Size keysize)
{
	const SharedKey *k = key;

	return hash_combine(hash_combine(k->dbid, k->relid),
						hash_bytes((const unsigned char *) k->name, k->len));
}

/* hash_search() support for SharedKey: 0 when the keys are equal. */
int
shared_key_match(const void *key1, const void *key2, Size keysize)
{
	const SharedKey *a = key1;
	const SharedKey *b = key2;

	return !(a->dbid == b->dbid && a->relid == b->relid && a->len == b->len &&
			 memcmp(a->name, b->name, a->len) == 0);
}

/* The key of "name" in installation "relid"; false if too long to be one. */
bool
shared_key_make(SharedKey *key, Oid relid, const char *name, int len)
{
	if (len > SHARED_NAME_MAX_BYTES)
		return false;
	key->dbid = MyDatabaseId;
	key->relid = relid;
	key->len = len;
	memcpy(key->name, name, len);
	return true;
}

/* shared_key_make() for a text name. */
bool
shared_key_text(SharedKey *key, Oid relid, text *name)
{
	return shared_key_make(key, relid, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
}

/* Shared memory the store needs. */
static Size
memory_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(MemoryShared)),
					hash_estimate_size(max_memory_buckets, sizeof(MemoryEntry)));
}

#if PG_VERSION_NUM >= 150000
/* shmem_request_hook: ask for the store's memory and lock. */
static void
memory_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(memory_shmem_size());
	RequestNamedLWLockTranche("tokenbucket", 1);
}
#endif

/*
 * The bucket an absent entry stands for, with the given settings: empty at
 * empty_at, or full when empty_at is -infinity.
 */
static Bucket
absent_bucket(const Bucket *settings, TimestampTz now)
{
	Bucket		bucket = *settings;

	bucket.paused_until = DT_NOBEGIN;
	if (shared->empty_at == DT_NOBEGIN)
	{
		bucket.deficit = 0;
		bucket.updated_at = now;
	}
	else
	{
		bucket.deficit = bucket.capacity;
		bucket.updated_at = shared->empty_at;
	}
	return bucket;
}

/* Remove every entry (the caller holds the lock exclusively). */
static void
remove_all(void)
{
	HASH_SEQ_STATUS status;
	MemoryEntry *entry;

	hash_seq_init(&status, hash);
	while ((entry = hash_seq_search(&status)) != NULL)
		hash_search(hash, &entry->key, HASH_REMOVE, NULL);
}

/* Write the entries to the state file; on failure, LOG and leave none. */
static void
save_state(void)
{
	FILE	   *file;
	ControlFileData *control;
	bool		crc_ok;
	pg_crc32c	crc;
	HASH_SEQ_STATUS status;
	MemoryEntry *entry;
	uint32		header[2] = {STATE_MAGIC, STATE_FORMAT};
	int64		count = hash_get_num_entries(hash);

	/* only a shutdown checkpoint makes the state worth keeping */
	control = get_controlfile(DataDir, &crc_ok);
	if (!crc_ok || control->state != DB_SHUTDOWNED)
		return;

	file = AllocateFile(STATE_FILE_TMP, PG_BINARY_W);
	if (file == NULL)
		goto error;

	INIT_CRC32C(crc);
#define WRITE(ptr, size) \
	do { \
		if (fwrite((ptr), (size), 1, file) != 1) goto error; \
		COMP_CRC32C(crc, (ptr), (size)); \
	} while (0)
	WRITE(header, sizeof(header));
	WRITE(&control->system_identifier, sizeof(uint64));
	WRITE(&shared->empty_at, sizeof(TimestampTz));
	WRITE(&shared->timeline, sizeof(TimeLineID));
	WRITE(&count, sizeof(count));
	hash_seq_init(&status, hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		WRITE(&entry->key, offsetof(SharedKey, name) + entry->key.len);
		WRITE(&entry->template_len, sizeof(uint16));
		WRITE(&entry->bucket, sizeof(Bucket));
	}
#undef WRITE
	FIN_CRC32C(crc);
	if (fwrite(&crc, sizeof(crc), 1, file) != 1 || FreeFile(file) != 0)
	{
		file = NULL;
		goto error;
	}
	(void) durable_rename(STATE_FILE_TMP, STATE_FILE, LOG);
	return;

error:
	ereport(LOG,
			(errcode_for_file_access(),
			 errmsg("could not write file \"%s\": %m", STATE_FILE_TMP)));
	if (file)
		FreeFile(file);
	unlink(STATE_FILE_TMP);
}

/* on_shmem_exit in the postmaster: keep the state of a clean shutdown. */
static void
memory_shmem_shutdown(int code, Datum arg)
{
	/* never after a crash: the buckets must then start empty */
	if (code != 0 || shared == NULL || hash == NULL)
		return;
	save_state();
}

/*
 * Read the state file a clean shutdown wrote, if any, and remove it.  True
 * when the entries and empty_at now hold what was saved; false (after a
 * LOG line when there was a file) when the buckets must start empty.
 */
static bool
load_state(const ControlFileData *control)
{
	FILE	   *file;
	pg_crc32c	crc;
	pg_crc32c	stored;
	uint32		header[2];
	uint64		sysid;
	int64		count;
	TimestampTz empty_at;
	TimeLineID	timeline;
	const char *problem = "it is truncated or unreadable";

	file = AllocateFile(STATE_FILE, PG_BINARY_R);
	if (file == NULL)
	{
		if (errno != ENOENT)
			ereport(LOG,
					(errcode_for_file_access(),
					 errmsg("could not read file \"%s\": %m", STATE_FILE)));
		return false;
	}
	state_file_seen = true;

	INIT_CRC32C(crc);
#define READ(ptr, size) \
	do { \
		if (fread((ptr), (size), 1, file) != 1) goto bad; \
		COMP_CRC32C(crc, (ptr), (size)); \
	} while (0)
	READ(header, sizeof(header));
	if (header[0] != STATE_MAGIC || header[1] != STATE_FORMAT)
	{
		problem = "it is not a tokenbucket state file of this version";
		goto bad;
	}
	READ(&sysid, sizeof(sysid));
	if (sysid != control->system_identifier)
	{
		problem = "it was written by another database cluster";
		goto bad;
	}
	if (control->state != DB_SHUTDOWNED)
	{
		problem = "the server did not shut down cleanly since it was written";
		goto bad;
	}
	READ(&empty_at, sizeof(empty_at));
	READ(&timeline, sizeof(timeline));
	READ(&count, sizeof(count));
	if (count < 0 || count > max_memory_buckets)
	{
		problem = "it holds more buckets than tokenbucket.max_memory_buckets";
		goto bad;
	}
	for (int64 i = 0; i < count; i++)
	{
		SharedKey	key;
		uint16		template_len;
		Bucket		bucket;
		MemoryEntry *entry;

		READ(&key, offsetof(SharedKey, name));
		if (key.len > SHARED_NAME_MAX_BYTES)
			goto bad;
		READ(key.name, key.len);
		READ(&template_len, sizeof(template_len));
		READ(&bucket, sizeof(bucket));
		entry = hash_search(hash, &key, HASH_ENTER, NULL);
		entry->serial = pg_atomic_fetch_add_u64(&shared->serials, 1);
		entry->template_len = template_len;
		SpinLockInit(&entry->mutex);
		entry->waiter = -1;
		entry->pins = 0;
		entry->bucket = bucket;
	}
#undef READ
	FIN_CRC32C(crc);
	if (fread(&stored, sizeof(stored), 1, file) != 1 || !EQ_CRC32C(crc, stored) ||
		fgetc(file) != EOF)
		goto bad;
	FreeFile(file);
	unlink(STATE_FILE);
	shared->empty_at = empty_at;
	shared->timeline = timeline;
	return true;

bad:
	ereport(LOG,
			(errmsg("ignoring file \"%s\": %s", STATE_FILE, problem),
			 errdetail("Every memory token bucket starts empty.")));
	FreeFile(file);
	unlink(STATE_FILE);
	remove_all();
	return false;
}

/*
 * shmem_startup_hook: attach to the store, and in the postmaster set it
 * up: the state a clean shutdown saved, or every bucket empty now.
 */
static void
memory_shmem_startup(void)
{
	bool		found;
	HASHCTL		info;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("tokenbucket", sizeof(MemoryShared), &found);
	if (!found)
	{
		shared->lock = &(GetNamedLWLockTranche("tokenbucket"))->lock;
		shared->empty_at = DT_NOBEGIN;
		shared->timeline = 0;
		pg_atomic_init_u64(&shared->changes, 0);
		pg_atomic_init_u64(&shared->serials, 1);
	}
	info.keysize = sizeof(SharedKey);
	info.entrysize = sizeof(MemoryEntry);
	info.hash = shared_key_hash;
	info.match = shared_key_match;
	hash = ShmemInitHash("tokenbucket buckets", max_memory_buckets,
						 max_memory_buckets, &info,
						 HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_FIXED_SIZE);
	LWLockRelease(AddinShmemInitLock);

	if (found || IsUnderPostmaster)
		return;

	on_shmem_exit(memory_shmem_shutdown, (Datum) 0);
	{
		bool		crc_ok;
		ControlFileData *control = get_controlfile(DataDir, &crc_ok);

		/*
		 * Without a file, a clean shutdown means the library was not
		 * preloaded before (no memory bucket could be used): they are full.
		 * Otherwise (a crash, a file not to be trusted) they start empty.
		 */
		if (!load_state(control))
		{
			shared->empty_at = control->state == DB_SHUTDOWNED && !state_file_seen ?
				DT_NOBEGIN : GetCurrentTimestamp();
			shared->timeline = control->checkPointCopy.ThisTimeLineID;
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
	if (shared == NULL)
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

		LWLockAcquire(shared->lock, LW_SHARED);
		same = shared->timeline == timeline;
		LWLockRelease(shared->lock);
		if (!same)
		{
			LWLockAcquire(shared->lock, LW_EXCLUSIVE);
			if (shared->timeline != timeline)
			{
				remove_all();
				shared->empty_at = GetCurrentTimestamp();
				shared->timeline = timeline;
			}
			LWLockRelease(shared->lock);
		}
		timeline_checked = true;
	}
}

/*
 * Whether this backend may look for entries: the library preloaded and
 * this server a primary (on a standby there are none, and the caller goes
 * on to the table, which says 25006 for a memory bucket).
 */
static bool
usable(void)
{
	if (shared == NULL || RecoveryInProgress())
		return false;
	memory_require();
	return true;
}

/*
 * Fail unless a memory bucket (or a memory template's prefix) of "len"
 * bytes can be made here: memory_require(), and a name that fits an entry.
 */
void
memory_check_name(int len)
{
	memory_require();
	if (len > SHARED_NAME_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("memory token bucket name must be at most %d bytes long, not %d",
						SHARED_NAME_MAX_BYTES, len),
				 errdetail("Memory buckets keep their names in shared memory, in a fixed space each.")));
}

/* Whether the library was preloaded (memory buckets can exist). */
bool
memory_enabled(void)
{
	return shared != NULL;
}

/* Wake the head waiter "waiter" (a proc number, or -1). */
static void
wake(int waiter)
{
	if (waiter >= 0)
		SetLatch(&GetPGProcByNumber(waiter)->procLatch);
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

/* The entry of "key" (the caller holds the lock), or NULL. */
static MemoryEntry *
find(const SharedKey *key)
{
	return hash_search(hash, key, HASH_FIND, NULL);
}

/*
 * Take the request's cost from its entry at "now" if it grants it, leaving
 * the state after the decision in request->bucket.  False, doing nothing,
 * when the bucket has no entry.  Costs the bucket could never grant are
 * denied here; the caller says why (check_cost()).
 */
bool
memory_take(Oid relid, Request *request, TimestampTz now, bool *granted)
{
	SharedKey	key;
	MemoryEntry *entry;

	if (!shared_key_text(&key, relid, request->name) || !usable())
		return false;
	reserve_undo();
	LWLockAcquire(shared->lock, LW_SHARED);
	entry = find(&key);
	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		*granted = bucket_take(&entry->bucket, request->cost, now);
		if (*granted && request->cost > 0)
			remember(entry, request->cost, false, 0);
		request->bucket = entry->bucket;
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(shared->lock);
	return entry != NULL;
}

/*
 * Copy the state of the request's entry into request->bucket; false when
 * it has none.
 */
bool
memory_peek(Oid relid, Request *request)
{
	SharedKey	key;
	MemoryEntry *entry;

	if (!shared_key_text(&key, relid, request->name) || !usable())
		return false;
	LWLockAcquire(shared->lock, LW_SHARED);
	entry = find(&key);
	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		request->bucket = entry->bucket;
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(shared->lock);
	return entry != NULL;
}

/*
 * The length of the template prefix the entry of "name" was made from (0:
 * a named bucket), or -1 when it has none.
 */
int
memory_template_len(Oid relid, text *name)
{
	SharedKey	key;
	MemoryEntry *entry;
	int			len = -1;

	if (!shared_key_text(&key, relid, name) || !usable())
		return -1;
	LWLockAcquire(shared->lock, LW_SHARED);
	entry = find(&key);
	if (entry != NULL)
		len = entry->template_len;
	LWLockRelease(shared->lock);
	return len;
}

/*
 * The state the request's bucket would have if it were made now from
 * "settings" (its row, or its template's).
 */
void
memory_absent(Request *request, const Bucket *settings, TimestampTz now)
{
	memory_require();
	request->bucket = absent_bucket(settings, now);
}

/*
 * Take every request, or none, if every bucket has an entry: true then,
 * with the decision in *granted and each state in its request.  False,
 * having changed nothing, if one has no entry.  The requests are looked
 * at first and taken only if all grant; one that another session emptied
 * in between makes the ones already taken give their tokens back.
 */
bool
memory_take_all(Oid relid, Request *requests, int nrequests, TimestampTz now,
				bool *granted)
{
	int			first = nundos;

	if (shared == NULL)
		return false;
	if (nrequests == 1)
		return memory_take(relid, &requests[0], now, granted);
	*granted = true;
	for (int i = 0; i < nrequests; i++)
	{
		if (!memory_peek(relid, &requests[i]))
			return false;
		if (!bucket_holds(&requests[i].bucket, requests[i].cost, now))
			*granted = false;
	}
	if (!*granted)
		return true;
	for (int i = 0; i < nrequests && *granted; i++)
	{
		if (!memory_take(relid, &requests[i], now, granted))
			*granted = false;	/* removed meanwhile: look again */
	}
	if (!*granted)
	{
		undo_range(first, true);
		for (int i = 0; i < nrequests; i++)
			(void) memory_peek(relid, &requests[i]);
	}
	return true;
}

/*
 * Whether an entry may be removed to make room at "now": full, not paused,
 * nobody waiting on it or holding changes to undo.  With "exactly", also
 * one the absent rule would make again as it is (after a crash, a bucket
 * made anew is empty at first: stricter, never looser).  The caller holds
 * the lock exclusively, which no spinlock holder can be without.
 */
static bool
evictable(MemoryEntry *entry, TimestampTz now, bool exactly)
{
	Bucket		absent = absent_bucket(&entry->bucket, now);

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
static void
evict(TimestampTz now)
{
	long		goal = Max(1, (long) (max_memory_buckets * EVICT_FRACTION));
	long		evicted = 0;

	for (int pass = 0; pass < 2 && evicted == 0; pass++)
	{
		HASH_SEQ_STATUS status;
		MemoryEntry *entry;

		hash_seq_init(&status, hash);
		while ((entry = hash_seq_search(&status)) != NULL)
		{
			if (!evictable(entry, now, pass == 0))
				continue;
			hash_search(hash, &entry->key, HASH_REMOVE, NULL);
			if (++evicted >= goal)
			{
				hash_seq_term(&status);
				break;
			}
		}
	}
}

/* This transaction's pending change of "kind" to bucket "key", if any. */
static Pending *
find_pending(PendingKind kind, const SharedKey *key)
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
 * Make the entry of "name" from "settings" by the absent rule, unless it
 * exists (a bucket this transaction made starts full instead); "template_len" is its template's prefix length (0: named).
 * False, making nothing, when settings changed since the caller read them
 * ("changes_seen", from memory_changes()): the caller reads them again.
 */
bool
memory_make(Oid relid, text *name, const Bucket *settings, int template_len,
			uint64 changes_seen)
{
	SharedKey	key;
	MemoryEntry *entry;
	bool		found;
	TimestampTz now = GetCurrentTimestamp();

	memory_check_name(VARSIZE_ANY_EXHDR(name));
	(void) shared_key_text(&key, relid, name);

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	if (pg_atomic_read_u64(&shared->changes) != changes_seen)
	{
		LWLockRelease(shared->lock);
		return false;
	}
	if (find(&key) == NULL && hash_get_num_entries(hash) >= max_memory_buckets)
	{
		evict(now);
		if (hash_get_num_entries(hash) >= max_memory_buckets)
		{
			LWLockRelease(shared->lock);
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("no room for memory token bucket \"%s\"", text_to_cstring(name)),
					 errdetail("All %d memory buckets are in use, and none is full and idle.",
							   max_memory_buckets),
					 errhint("Raise tokenbucket.max_memory_buckets in postgresql.conf and restart the server, or drop memory buckets no longer needed.")));
		}
	}
	entry = hash_search(hash, &key, HASH_ENTER, &found);
	if (!found)
	{
		entry->serial = pg_atomic_fetch_add_u64(&shared->serials, 1);
		entry->template_len = template_len;
		SpinLockInit(&entry->mutex);
		entry->waiter = -1;
		entry->pins = 0;
		entry->bucket = absent_bucket(settings, now);
		if (find_pending(PENDING_MADE, &key) != NULL)
		{
			entry->bucket.deficit = 0;
			entry->bucket.updated_at = now;
		}
	}
	LWLockRelease(shared->lock);
	return true;
}

/* How many settings changes have been applied (see memory_make()). */
uint64
memory_changes(void)
{
	return shared ? pg_atomic_read_u64(&shared->changes) : 0;
}

/*
 * Let "change" alter the state of the entry of "name" at "now", remembering
 * how to undo it; *after is the new state.  False when there is no entry.
 * A change that would leave a deficit float8 cannot hold is not made (the
 * caller reports it, seeing it in *after).
 */
bool
memory_change(Oid relid, text *name, BucketChange change, const void *arg,
			  TimestampTz now, Bucket *after)
{
	SharedKey	key;
	MemoryEntry *entry;
	int			waiter = -1;

	if (!shared_key_text(&key, relid, name) || !usable())
		return false;
	reserve_undo();
	LWLockAcquire(shared->lock, LW_SHARED);
	entry = find(&key);
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
	LWLockRelease(shared->lock);
	wake(waiter);
	return entry != NULL;
}

/*
 * Register this backend as the head waiter of the entry of "name" (or
 * stop being it): changes to the bucket then set its latch.  False when
 * there is no entry.
 */
bool
memory_watch(Oid relid, text *name, bool on)
{
	SharedKey	key;
	MemoryEntry *entry;

	if (shared == NULL || RecoveryInProgress() || !shared_key_text(&key, relid, name))
		return false;
	LWLockAcquire(shared->lock, LW_SHARED);
	entry = find(&key);
	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		if (on)
			entry->waiter = MY_PROC_NUMBER;
		else if (entry->waiter == MY_PROC_NUMBER)
			entry->waiter = -1;
		SpinLockRelease(&entry->mutex);
	}
	LWLockRelease(shared->lock);
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
	LWLockAcquire(shared->lock, LW_SHARED);
	for (int i = nundos - 1; i >= first; i--)
	{
		Undo	   *undo = &undos[i];
		MemoryEntry *entry;
		int			waiter = -1;

		if (!give_back && !undo->pinned)
			continue;
		entry = find(&undo->key);
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
		wake(waiter);
	}
	LWLockRelease(shared->lock);
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

	if (!pending->template && pending->kind != PENDING_TRUNCATED)
	{
		entry = find(&pending->key);
		if (pending->kind == PENDING_MADE)
		{
			/* made full now, less what this transaction took from it */
			double		taken = 0;
			bool		found;

			for (int i = 0; i < nundos; i++)
				if (shared_key_match(&undos[i].key, &pending->key, 0) == 0 &&
					entry != NULL && undos[i].serial == entry->serial)
					taken += undos[i].tokens;
			if (entry == NULL && hash_get_num_entries(hash) >= max_memory_buckets)
				evict(now);
			if (entry == NULL && hash_get_num_entries(hash) >= max_memory_buckets)
				return;			/* absent: empty at empty_at, which is safe */
			entry = hash_search(hash, &pending->key, HASH_ENTER, &found);
			if (!found)
			{
				entry->serial = pg_atomic_fetch_add_u64(&shared->serials, 1);
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
		wake(entry->waiter);
		if (pending->kind == PENDING_DROPPED)
			hash_search(hash, &pending->key, HASH_REMOVE, NULL);
		else
			bucket_reconfigure(&entry->bucket, pending->capacity,
							   pending->refill_rate, now);
		return;
	}

	hash_seq_init(&status, hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid != pending->key.dbid ||
			entry->key.relid != pending->key.relid)
			continue;
		if (pending->kind != PENDING_TRUNCATED &&
			(entry->template_len != pending->key.len ||
			 memcmp(entry->key.name, pending->key.name, pending->key.len) != 0))
			continue;
		wake(entry->waiter);
		if (pending->kind == PENDING_ALTERED)
			bucket_reconfigure(&entry->bucket, pending->capacity,
							   pending->refill_rate, now);
		else
			hash_search(hash, &entry->key, HASH_REMOVE, NULL);
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

				LWLockAcquire(shared->lock, LW_EXCLUSIVE);
				foreach(lc, pendings)
					apply_pending(lfirst(lc), now);
				pg_atomic_fetch_add_u64(&shared->changes, 1);
				LWLockRelease(shared->lock);
			}
			undo_range(0, false);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			if (shared != NULL)
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

/* Remember a settings change to apply at commit. */
static void
add_pending(PendingKind kind, Oid relid, const char *name, int len,
			double capacity, double refill_rate)
{
	MemoryContext oldcontext;
	Pending    *pending;

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
 * Drop the entry of bucket "name" (made from a memory template: it has no
 * row) when the transaction commits.  False when it has none.
 */
bool
memory_drop(Oid relid, text *name)
{
	Request		request = {.name = name};
	SharedKey	key;

	if (!memory_peek(relid, &request))
		return false;
	/* dropped already in this transaction */
	(void) shared_key_text(&key, relid, name);
	if (find_pending(PENDING_DROPPED, &key) != NULL)
		return false;
	add_pending(PENDING_DROPPED, relid, VARDATA_ANY(name),
				VARSIZE_ANY_EXHDR(name), 0, 0);
	return true;
}

/*
 * Give the entry of bucket "name" (made from a memory template) new
 * settings when the transaction commits.  False when it has none.
 */
bool
memory_alter(Oid relid, text *name, double capacity, double refill_rate)
{
	Request		request = {.name = name};

	if (!memory_peek(relid, &request))
		return false;
	add_pending(PENDING_ALTERED, relid, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name),
				isnan(capacity) ? request.bucket.capacity : capacity,
				isnan(refill_rate) ? request.bucket.refill_rate : refill_rate);
	return true;
}

/*
 * Remove this installation's template-made entries that are full, not
 * paused, idle since "idle_since", and that the absent rule would make
 * again exactly.  Returns how many.
 */
uint64
memory_purge(Oid relid, TimestampTz idle_since, TimestampTz now)
{
	HASH_SEQ_STATUS status;
	MemoryEntry *entry;
	uint64		purged = 0;

	if (shared == NULL || RecoveryInProgress())
		return 0;
	memory_require();
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&status, hash);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dbid == MyDatabaseId && entry->key.relid == relid &&
			entry->template_len > 0 && entry->bucket.updated_at < idle_since &&
			evictable(entry, now, true))
		{
			hash_search(hash, &entry->key, HASH_REMOVE, NULL);
			purged++;
		}
	}
	LWLockRelease(shared->lock);
	return purged;
}

/* Initialize at load time: the GUC, and the hooks when preloading. */
void
memory_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;

	DefineCustomIntVariable("tokenbucket.max_memory_buckets",
							"Most memory token buckets the server keeps at once.",
							"Each takes shared memory from the start; "
							"full idle buckets are reused when they are all in use.",
							&max_memory_buckets,
							10000, 100, 100000000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
#if PG_VERSION_NUM >= 150000
	MarkGUCPrefixReserved("tokenbucket");
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = memory_shmem_request;
#else
	EmitWarningsOnPlaceholders("tokenbucket");
	RequestAddinShmemSpace(memory_shmem_size());
	RequestNamedLWLockTranche("tokenbucket", 1);
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = memory_shmem_startup;
	RegisterXactCallback(memory_xact_callback, NULL);
	RegisterSubXactCallback(memory_subxact_callback, NULL);
}

PG_FUNCTION_INFO_V1(tb_buckets_changed);

/*
 * Trigger on tb_buckets, for rows of memory buckets: remembers what an
 * INSERT, UPDATE, DELETE or TRUNCATE did, for memory_xact_callback() to
 * apply to the entries at commit.
 */
Datum
tb_buckets_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	Oid			relid;
	HeapTuple	old_row = NULL;
	HeapTuple	new_row = NULL;
	bool		isnull;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "tb_buckets_changed: not called as a trigger");
	relid = RelationGetRelid(trigdata->tg_relation);
	desc = RelationGetDescr(trigdata->tg_relation);

	if (TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
	{
		if (shared != NULL)
			add_pending(PENDING_TRUNCATED, relid, "", 0, 0, 0);
		return PointerGetDatum(NULL);
	}
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ||
		TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		old_row = trigdata->tg_trigtuple;
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		new_row = trigdata->tg_newtuple;
	else if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		new_row = trigdata->tg_trigtuple;

#define COLUMN(row, name) heap_getattr((row), SPI_fnumber(desc, (name)), desc, &isnull)
	if (old_row && new_row &&
		DatumGetBool(COLUMN(old_row, "memory")) != DatumGetBool(COLUMN(new_row, "memory")))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot change the kind of token bucket \"%s\"",
						TextDatumGetCString(COLUMN(old_row, "name"))),
				 errdetail("Whether a bucket keeps its tokens in memory is chosen when it is made."),
				 errhint("Drop the bucket with tb_drop() and make it again with tb_create().")));
	if (shared == NULL)
		return PointerGetDatum(NULL);

	if (old_row)
	{
		text	   *old_name = DatumGetTextPP(COLUMN(old_row, "name"));
		text	   *new_name = new_row ? DatumGetTextPP(COLUMN(new_row, "name")) : NULL;
		bool		renamed = new_name == NULL ||
			VARSIZE_ANY_EXHDR(old_name) != VARSIZE_ANY_EXHDR(new_name) ||
			memcmp(VARDATA_ANY(old_name), VARDATA_ANY(new_name),
				   VARSIZE_ANY_EXHDR(old_name)) != 0;

		if (renamed)
			add_pending(PENDING_DROPPED, relid, VARDATA_ANY(old_name),
						VARSIZE_ANY_EXHDR(old_name), 0, 0);
		else
		{
			add_pending(PENDING_ALTERED, relid, VARDATA_ANY(old_name),
						VARSIZE_ANY_EXHDR(old_name),
						DatumGetFloat8(COLUMN(new_row, "capacity")),
						DatumGetFloat8(COLUMN(new_row, "refill_rate")));
			return PointerGetDatum(NULL);
		}
	}
	if (new_row)
	{
		text	   *name = DatumGetTextPP(COLUMN(new_row, "name"));

		if (!is_template_name(name))
			add_pending(PENDING_MADE, relid, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name),
						DatumGetFloat8(COLUMN(new_row, "capacity")),
						DatumGetFloat8(COLUMN(new_row, "refill_rate")));
	}
#undef COLUMN
	return PointerGetDatum(NULL);
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
	Oid			relid = store_relid(fcinfo);
	HASH_SEQ_STATUS status;
	MemoryEntry *entry;

	/* the views built on it call it as their reader */
	check_may_read(fcinfo, "tb_memory_buckets()", views);

	if (shared == NULL || RecoveryInProgress())
		return (Datum) 0;
	memory_require();
	LWLockAcquire(shared->lock, LW_SHARED);
	hash_seq_init(&status, hash);
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
	LWLockRelease(shared->lock);
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

	if (shared == NULL || RecoveryInProgress())
		PG_RETURN_NULL();
	memory_require();
	LWLockAcquire(shared->lock, LW_SHARED);
	empty_at = shared->empty_at;
	LWLockRelease(shared->lock);
	PG_RETURN_TIMESTAMPTZ(empty_at);
}
