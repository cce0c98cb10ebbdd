/*-------------------------------------------------------------------------
 *
 * lease_memory.h
 *	  Memory limits: leases kept in shared memory, freed by their holder's
 *	  transaction or session end, emptied by a crash.
 *
 * src/lease_memory.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_LEASE_MEMORY_H
#define TOKENBUCKET_LEASE_MEMORY_H

#include "datatype/timestamp.h"
#include "fmgr.h"

/* A lease of a memory limit asked for. */
typedef struct MemoryLeaseAsk
{
	Oid			relid;			/* the installation */
	Oid			stats_relid;	/* its tb_limits, which counters go under */
	text	   *name;			/* the limit (a name a template made) */
	int			template_len;	/* its template's name length (0: none) */
	int32		max_in_flight;	/* as its committed configuration says */
	int32		slots;
	int32		keep;			/* slots to leave free: its reserve's */
	bool		session;		/* hold => 'session' (else 'transaction') */
	double		ttl_usecs;		/* <= 0: none */
	Oid			holder;			/* the role that holds it */
	uint64		generation;		/* lease_memory_generation() before the
								 * configuration was read */
} MemoryLeaseAsk;

/* What lease_memory_take() did. */
typedef enum MemoryLeaseTaken
{
	MEMORY_LEASE_GRANTED,
	MEMORY_LEASE_FULL,			/* not enough slots free: nothing taken */
	MEMORY_LEASE_STALE			/* a limit was dropped since the generation:
								 * read the configuration again */
} MemoryLeaseTaken;

/* What lease_memory_release() did. */
typedef enum MemoryLeaseReleased
{
	MEMORY_RELEASE_NONE,		/* no such lease held: nothing freed */
	MEMORY_RELEASE_FREED,		/* freed (when the transaction commits) */
	MEMORY_RELEASE_DENIED		/* held by a role the caller may not act for */
} MemoryLeaseReleased;

/* Longest name of a memory limit (a shared entry's, SHARED_NAME_MAX_BYTES). */
#define MEMORY_LIMIT_NAME_MAX 128

/* Memory leases' ids are below zero; table leases' above. */
#define LEASE_IS_MEMORY(id) ((id) < 0)

extern void lease_memory_init(void);
extern void lease_memory_require(void);
extern int	lease_memory_name_max(void);
extern uint64 lease_memory_generation(void);
extern uint64 lease_memory_config_generation(void);
extern MemoryLeaseTaken lease_memory_take(const MemoryLeaseAsk *ask, TimestampTz now,
										  int64 *lease, TimestampTz *ready);
extern MemoryLeaseReleased lease_memory_release(Oid relid, int64 lease, Oid caller,
												bool owner, TimestampTz now,
												char **limit, int32 *slots,
												int *template_len);
extern void lease_memory_forget(Oid dbid, Oid relid, text *name);

/* the transaction's end, for xact.c alone */
extern const char *lease_memory_unpreparable(void);
extern void lease_memory_xact_end(bool commit);
extern void lease_memory_subxact_end(SubTransactionId mySubid,
									 SubTransactionId parentSubid, bool commit);
extern void lease_memory_exit(void);

#endif							/* TOKENBUCKET_LEASE_MEMORY_H */
