/*-------------------------------------------------------------------------
 *
 * memory_entries.h
 *	  The memory store's entries: a fixed-size, partitioned shared hash of
 *	  bucket states, for memory_store.c alone.
 *
 * src/memory_entries.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_MEMORY_ENTRIES_H
#define TOKENBUCKET_MEMORY_ENTRIES_H

#include "access/xlogdefs.h"
#include "pgstat.h"
#include "bucket.h"
#include "port/atomics.h"
#include "shmem.h"
#include "stats.h"
#include "storage/spin.h"
#include "utils/tuplestore.h"

#if PG_VERSION_NUM >= 170000
#define MY_PROC_NUMBER	MyProcNumber
#else
#define MY_PROC_NUMBER	(MyProc->pgprocno)
#endif

/* Partitions of the hash, each with its LWLock (a power of 2). */
#define MEMORY_PARTITIONS	128

/* the marker of use: memory buckets were used here (memory_state.c) */
#define MARKER_FILE		PGSTAT_STAT_PERMANENT_DIRECTORY "/tokenbucket.used"

/* Most memory templates with keys at once. */
#define MEMORY_TEMPLATES	1024

/* Most different calendars of memory quotas (memory_calendars.c). */
#define MEMORY_CALENDARS	1024

/*
 * The key of an entry: a bucket's name, and whether the entry is
 * provisional: made from configuration that its owner, a transaction in
 * progress, wrote and has not committed.  Only the owner uses it; it
 * becomes the bucket's committed entry if the owner commits, and is gone
 * if it aborts.
 */
typedef struct MemoryKey
{
	SharedKey	name;
	bool		provisional;
} MemoryKey;

/* A memory template that has keys: how many. */
typedef struct MemoryTemplate
{
	SharedKey	key;			/* its name, without the '*' */
	pg_atomic_uint32 nkeys;		/* entries made from it */
} MemoryTemplate;

/*
 * A memory bucket.  What a call on it reads or writes comes right after
 * the key, in the cache line the key ends in and the next, and the hash
 * gives each entry whole cache lines (entry_room() in memory_entries.c): a
 * call touches three lines of it, the key's first and those two (the
 * bucket and its open takes fill the last; a template key's grant writes
 * its first two counters too, in the line after).  A quota's calendar is
 * not in the entry but pointed at (Bucket.period,
 * memory_calendars.c): buckets that are no quota pay nothing for it, in
 * room or in lines.  On a random one of many buckets each is a cache miss.
 */
typedef struct MemoryEntry
{
	MemoryKey	key;			/* first: the hash's key */
	uint32		hashcode;		/* of the key: its partition */
	bool		used;			/* used since the clock last passed */
	slock_t		mutex;			/* guards waiter, pins, bucket, open_*,
								 * counters */
	int			waiter;			/* proc number of the head waiter, or -1 */
	int			pins;			/* open changes whose undo takes tokens */
	uint64		serial;			/* new for every entry made */
	MemoryTemplate *template;	/* what it was made from; NULL: named */
	Bucket		bucket;
	double		open_tokens;	/* tokens taken by takes not yet committed */
	float4		open_low;		/* lowest deficit less open_tokens at a
								 * change since the oldest of them, or 0
								 * (rounded down) */
	int32		open_takes;		/* those takes (0: none; -1: too many) */
	StatsCounts counters;		/* a template key's own (stats.c): .bucket,
								 * in the layout the state file keeps;
								 * granted first, added at commit */
	/* the rest, for changes and the clock */
	TransactionId owner;		/* a provisional entry's transaction */
	TimestampTz since;			/* when its counters started */
	struct MemoryEntry *prev;	/* its partition's list, for the clock */
	struct MemoryEntry *next;
} MemoryEntry;

/* A partition's entries, for the clock. */
typedef struct MemoryPartition
{
	MemoryEntry *head;
	MemoryEntry *hand;			/* the entry the clock looks at next */
} MemoryPartition;

/* Shared state besides the hashes. */
typedef struct MemoryShared
{
	LWLockPadded *locks;		/* MEMORY_PARTITIONS, then the templates' */
	TimestampTz empty_at;		/* absent buckets were empty then (-infinity: full) */
	TimeLineID	timeline;		/* the timeline empty_at belongs to */
	bool		unusable;		/* the marker file could not be written */
	pg_atomic_uint64 changes;	/* settings changes applied so far, plus 1 */
	pg_atomic_uint64 serials;	/* entries made so far */
	pg_atomic_uint32 template_keys; /* entries made from templates */
	pg_atomic_uint32 clock;		/* the partition the clock looks in next */
	uint64		prefix_lengths[3];	/* lengths of templates with records
									 * (bits 0 to 128; under the templates' lock) */
	MemoryPartition partitions[MEMORY_PARTITIONS];
} MemoryShared;

/* What make_entry() did. */
typedef enum EntryMade
{
	ENTRY_MADE,
	ENTRY_EXISTS,
	ENTRY_STALE,				/* configuration changed since "generation" */
	ENTRY_NO_ROOM				/* (with "report" false) */
} EntryMade;

extern int	max_memory_buckets;
extern int	max_template_keys;
extern MemoryShared *memory_shared;
extern bool memory_loading;

extern Size memory_shmem_size(void);
extern int	memory_shmem_locks(void);
extern void memory_attach(LWLockPadded *locks);
extern void memory_remove_every(void);
extern void memory_require(void);
extern bool memory_usable(void);
extern Bucket memory_new_state(const Bucket *settings, TimestampTz now);
extern Bucket memory_absent_state(const Bucket *settings, TimestampTz now);
extern void memory_key(MemoryKey *key, Oid relid, const char *name, int len,
					   bool provisional);
extern void memory_key_copy(MemoryKey *dst, const MemoryKey *src);
extern bool memory_key_text(MemoryKey *key, Oid relid, text *name,
							bool provisional);
extern uint32 memory_hashcode(const MemoryKey *key);
extern LWLock *memory_partition_lock(uint32 hashcode);
extern MemoryEntry *memory_find(const MemoryKey *key, uint32 hashcode);
extern EntryMade memory_make_entry(const MemoryKey *key, int template_len,
								   const Bucket *state, TransactionId owner,
								   uint64 generation, bool report,
								   MemoryEntry **made);
extern void memory_remove_entry(MemoryEntry *entry);
extern bool memory_rekey(MemoryEntry *entry, const MemoryKey *key);
extern int	memory_template_name_len(const MemoryEntry *entry);
extern void memory_wake(int waiter);
extern void memory_open_note(MemoryEntry *entry, TimestampTz now);
extern void memory_open_add(MemoryEntry *entry, double tokens, double *opened,
							int64 *opens);
extern void memory_reconfigure(MemoryEntry *entry, double capacity,
							   double refill_rate, TimestampTz now);
extern void memory_open_end(MemoryEntry *entry, double tokens, int64 takes);
extern void memory_open_void(MemoryEntry *entry);
extern void memory_give_back(MemoryEntry *entry, double tokens, TimestampTz now);
extern bool memory_evictable(MemoryEntry *entry, TimestampTz now, bool exactly);
extern bool memory_covered(const MemoryKey *key);
extern void memory_remove_all(Oid dbid, Oid relid, const char *name, int len);
extern void memory_lock_all(LWLockMode mode);
extern void memory_unlock_all(void);
extern int	memory_templates_of(Oid relid, SharedKey *names, int64 *keys);

/* memory_calendars.c */
extern Size memory_calendars_size(void);
extern void memory_calendars_attach(void);
extern const BucketPeriod *memory_calendar(const BucketPeriod *period);
extern int	memory_calendars_count(void);

/* memory_list.c */
extern void memory_list(Oid relid, Tuplestorestate *store, TupleDesc desc);

#endif							/* TOKENBUCKET_MEMORY_ENTRIES_H */
