/*-------------------------------------------------------------------------
 *
 * lease_memory.h
 *	  Memory limits: leases kept in shared memory, freed by their holder's
 *	  transaction or session end, emptied by a crash.  The store itself is
 *	  memory_limit_store (limit_store.h); what is here is its part in a
 *	  transaction's end.
 *
 * src/lease_memory.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_LEASE_MEMORY_H
#define TOKENBUCKET_LEASE_MEMORY_H

#include "access/xact.h"

/* the transaction's end, for xact.c alone */
extern const char *lease_memory_unpreparable(void);
extern void lease_memory_xact_end(bool commit);
extern void lease_memory_subxact_end(SubTransactionId mySubid,
									 SubTransactionId parentSubid, bool commit);
extern void lease_memory_exit(void);

#endif							/* TOKENBUCKET_LEASE_MEMORY_H */
