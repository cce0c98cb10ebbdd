/*-------------------------------------------------------------------------
 *
 * stats_hash.h
 *	  The counters in shared memory, for the counters' files alone
 *	  (stats.c, stats_state.c, stats_views.c): the partitioned hash of
 *	  their entries, adding to an entry, and its room.
 *
 * src/stats_hash.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_STATS_HASH_H
#define TOKENBUCKET_STATS_HASH_H

#include "counters.h"
#include "port/atomics.h"
#include "shmem.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/hsearch.h"

/* partitions of the hash, each with its LWLock (a power of 2) */
#define STATS_PARTITIONS	16

/* What an entry counts for. */
typedef enum StatsKind
{
	STATS_INSTALLATION,			/* since when buckets without an entry count */
	STATS_TEMPLATE,
	STATS_NAMED,				/* a bucket with its own row */
	STATS_KEY					/* a bucket a table template made */
} StatsKind;

typedef struct StatsEntry
{
	SharedKey	key;			/* first: the hash's key */
	uint32		hashcode;
	uint8		kind;			/* StatsKind */
	bool		used;			/* counted in since the clock passed */
	uint16		template_len;	/* a key's template's name's length */
	struct StatsEntry *prev;	/* its partition's list, for the clock */
	struct StatsEntry *next;
	TimestampTz since;			/* when counting started */
	slock_t		mutex;			/* guards the counters */
	StatsCounts counters;		/* a bucket's or a limit's: its key says */
} StatsEntry;

typedef struct StatsPartition
{
	StatsEntry *head;
	StatsEntry *hand;			/* the entry the clock looks at next */
} StatsPartition;

typedef struct StatsShared
{
	LWLockPadded *locks;		/* STATS_PARTITIONS */
	TimestampTz started_at;		/* the counters began: the server's start */
	pg_atomic_uint32 keys;		/* entries of kind STATS_KEY */
	pg_atomic_uint32 clock;		/* the partition the clock looks in next */
	StatsPartition partitions[STATS_PARTITIONS];
} StatsShared;

extern int	max_stats_buckets;
extern StatsShared *stats_shared;
extern HTAB *stats_entries;

extern void stats_require(void);
extern uint32 stats_hashcode(const SharedKey *key);
extern bool stats_add_hashed(const SharedKey *key, uint32 hashcode, StatsKind kind,
							 int template_len, const StatsCounts *delta, bool limit,
							 TimestampTz since);
extern bool stats_add(const SharedKey *key, StatsKind kind, int template_len,
					  const StatsCounts *delta, bool limit, TimestampTz since);
extern bool stats_restore(const SharedKey *key, StatsKind kind, int template_len,
						  const StatsCounts *counts, TimestampTz since);
extern void stats_template_key(SharedKey *key, Oid relid, const char *name,
							   int template_len);
extern TimestampTz stats_installation_since(Oid relid);
extern int	stats_known_template(const SharedKey *key);
extern void stats_remove_entry(StatsEntry *entry);
extern void stats_remove_installation(Oid dbid, Oid relid);
extern void stats_reset_entries(Oid relid, const SharedKey *key, bool template,
								TimestampTz now);
extern Size stats_shmem_size(void);
extern int	stats_shmem_locks(void);
extern void stats_attach(LWLockPadded *locks);

#endif							/* TOKENBUCKET_STATS_HASH_H */
