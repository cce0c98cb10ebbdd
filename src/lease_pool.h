/*-------------------------------------------------------------------------
 *
 * lease_pool.h
 *	  The shares of the memory-lease pool that names made from templates
 *	  may hold: per template, per session and all together.
 *
 * src/lease_pool.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_LEASE_POOL_H
#define TOKENBUCKET_LEASE_POOL_H

#include "datatype/timestamp.h"
#include "shmem.h"

/* Which share a lease of a name made from a template would overfill. */
typedef enum PoolShare
{
	POOL_ROOM,					/* none: counted */
	POOL_SESSION_FULL,			/* this session's */
	POOL_TEMPLATE_FULL,			/* its template's */
	POOL_TEMPLATES_FULL			/* all templates' */
} PoolShare;

extern Size lease_pool_size(int max_leases);
extern void lease_pool_attach(int max_leases);

/* under the leases' lock (lease_memory.c, lease_memory_records.c) */
extern PoolShare lease_pool_take(const SharedKey *key, int template_len);
extern void lease_pool_freed(const SharedKey *key, int template_len, int pid,
							 TimestampTz started);

/* once it is released */
extern void lease_pool_refuse(PoolShare full, const SharedKey *key, int template_len);

#endif							/* TOKENBUCKET_LEASE_POOL_H */
