/*-------------------------------------------------------------------------
 *
 * memory_entries.h
 *	  The memory store's entries: a fixed-size shared hash of bucket
 *	  states, for memory_store.c alone.
 *
 * src/memory_entries.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_MEMORY_ENTRIES_H
#define TOKENBUCKET_MEMORY_ENTRIES_H

#include "access/xlogdefs.h"
#include "bucket.h"
#include "port/atomics.h"
#include "shmem.h"
#include "storage/spin.h"
#include "utils/tuplestore.h"

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

extern int	max_memory_buckets;
extern MemoryShared *memory_shared;
extern HTAB *memory_hash;

extern void memory_entries_init(void);
extern void memory_require(void);
extern bool memory_usable(void);
extern Bucket memory_absent_state(const Bucket *settings, TimestampTz now);
extern MemoryEntry *memory_find(const SharedKey *key);
extern int	memory_template_name_len(const MemoryEntry *entry);
extern void memory_wake(int waiter);
extern bool memory_evictable(MemoryEntry *entry, TimestampTz now, bool exactly);
extern void memory_evict(TimestampTz now);
extern void memory_list(Oid relid, Tuplestorestate *store, TupleDesc desc);

#endif							/* TOKENBUCKET_MEMORY_ENTRIES_H */
