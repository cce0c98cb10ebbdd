/*-------------------------------------------------------------------------
 *
 * lease_memory_xact.h
 *	  What a transaction did to memory limits' leases, and its end.
 *
 * src/lease_memory_xact.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_LEASE_MEMORY_XACT_H
#define TOKENBUCKET_LEASE_MEMORY_XACT_H

#include "access/xact.h"
#include "fmgr.h"
#include "lease_memory_records.h"

/*
 * What this transaction did to memory leases: took them, or released
 * them, in subtransaction "subid" (in TopTransactionContext).
 */
typedef struct LocalLease
{
	int64		id;
	bool		session;
	bool		release;		/* a release (else a lease taken) */
	SubTransactionId subid;
} LocalLease;

extern LocalLease *lease_local_add(bool session, bool release);
extern void lease_local_undo(void);
extern bool lease_forgotten_here(const LimitEntry *limit);
extern void lease_forget_later(Oid dbid, Oid relid, text *name);
extern void lease_configured_here(void);
extern bool lease_config_changed_here(void);

/* the transaction's end, for xact.c alone */
extern const char *lease_memory_unpreparable(void);
extern void lease_memory_xact_end(bool commit);
extern void lease_memory_subxact_end(SubTransactionId mySubid,
									 SubTransactionId parentSubid, bool commit);
extern void lease_memory_exit(void);

#endif							/* TOKENBUCKET_LEASE_MEMORY_XACT_H */
