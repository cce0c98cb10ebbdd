/*-------------------------------------------------------------------------
 *
 * lease_memory_records.h
 *	  Memory limits' leases in shared memory, for the memory store's files
 *	  alone (lease_memory.c, lease_memory_xact.c): the records, the hash of
 *	  limits holding leases, and freeing a lease.
 *
 * src/lease_memory_records.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_LEASE_MEMORY_RECORDS_H
#define TOKENBUCKET_LEASE_MEMORY_RECORDS_H

#include "counters.h"
#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "shmem.h"
#include "storage/lwlock.h"
#include "utils/hsearch.h"

/* A lease id: -(seq * 2^INDEX_BITS + index), seq of SEQ_BITS bits. */
#define INDEX_BITS	20
#define SEQ_BITS	32
#define MAX_LEASES	((1 << INDEX_BITS) - 1)

/* A limit holding leases: the hash's entry. */
typedef struct LimitEntry
{
	SharedKey	key;			/* the installation and the name */
	int32		held;			/* slots of its leases, released ones not yet
								 * committed included */
	int			template_len;	/* the template it was first made from */
	Oid			stats_relid;	/* the tb_limits its counters are kept under */
	int			first;			/* its first lease, or -1 */
} LimitEntry;

/* A lease: a record of the array, on its limit's list or the free list. */
typedef struct MemoryLease
{
	int64		id;				/* 0: free */
	LimitEntry *limit;
	int32		slots;
	bool		session;		/* hold => 'session' */
	int			releaser;		/* the backend whose transaction released it,
								 * not ended yet (0: none): free for that
								 * transaction, held for every other */
	int			pid;			/* the holder's backend */
	TimestampTz started;		/* and its start */
	Oid			holder;			/* the role */
	TimestampTz since;
	TimestampTz expires;		/* DT_NOEND: no ttl */
	int			prev;
	int			next;
} MemoryLease;

typedef struct LeaseShared
{
	LWLock	   *lock;
	pg_atomic_uint64 generation;	/* forgets, counted */
	pg_atomic_uint64 config_generation;	/* committed changes of tb_limits,
										 * counted */
	uint64		seq;			/* ids made */
	int			free;			/* first free record, or -1 */
	MemoryLease leases[FLEXIBLE_ARRAY_MEMBER];
} LeaseShared;

/*
 * A limit some of whose leases were freed under the lock: its queue to
 * wake, and the slots to count as ended or expired, once it is released.
 */
typedef struct Freed
{
	SharedKey	key;
	Oid			stats_relid;
	int			template_len;
	LimitCounters counts;		/* ended and expired */
} Freed;

/* The limits whose leases a call freed. */
typedef struct WakeList
{
	Freed	   *limits;
	int			n;
	int			max;
} WakeList;

/* How a lease's freeing is counted. */
typedef enum FreedBy
{
	FREED_QUIETLY,				/* not here: a release (counted by its
								 * caller), a lease that never was (its
								 * transaction aborted), a limit dropped */
	FREED_BY_END				/* its holder's end, or its ttl if that
								 * passed first (at "now") */
} FreedBy;

extern int	max_memory_leases;
extern LeaseShared *lease_shared;
extern HTAB *limit_hash;

extern void lease_memory_register(void);
extern int	lease_index_of(int64 id);
extern bool lease_held(const MemoryLease *lease, TimestampTz now);
extern bool lease_held_here(const MemoryLease *lease, TimestampTz now);
extern void lease_wake_all(WakeList *wake);
extern void lease_free_record(int index, WakeList *wake, bool remove, FreedBy by,
							  TimestampTz now);
extern void lease_free_id(int64 id, WakeList *wake, FreedBy by, TimestampTz now);
extern void lease_sweep(LimitEntry *limit, TimestampTz now, WakeList *wake);
extern TimestampTz lease_first_expiry(const LimitEntry *limit);
extern int32 lease_released_here(const LimitEntry *limit);

#endif							/* TOKENBUCKET_LEASE_MEMORY_RECORDS_H */
