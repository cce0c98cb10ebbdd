/*-------------------------------------------------------------------------
 *
 * lease.h
 *	  In-flight limits: slots leased, and freed the moment their holder is
 *	  gone.
 *
 * src/lease.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_LEASE_H
#define TOKENBUCKET_LEASE_H

#include "common.h"
#include "datatype/timestamp.h"
#include "fmgr.h"

/* A lease asked for: tb_lease's arguments, and what goes with it. */
typedef struct LeaseRequest
{
	text	   *name;
	int32		slots;
	text	   *hold;			/* 'session' or 'transaction' */
	Interval   *ttl;			/* NULL: none */
	double		reserve;		/* share of max_in_flight to leave free (0:
								 * none) */

	/*
	 * Optional: more to take with the lease, all or nothing: true when it
	 * took it all.  Runs once the lease is granted, in its subtransaction.
	 */
	bool		(*and_then) (void *arg);
	void	   *and_then_arg;
} LeaseRequest;

extern void lease_init(void);
extern void lease_forget_installation(Oid dbid, Oid relid);
extern bool lease_with(Installation *inst, const LeaseRequest *request,
					   bool wait, TimestampTz deadline, int64 *lease);
extern bool lease_drop_limit(Installation *inst, text *name);
extern uint64 lease_purge(Installation *inst, TimestampTz idle_since,
						  TimestampTz now);

/* the transaction's end, for xact.c alone */
extern void lease_xact_end(bool commit);
extern void lease_subxact_end(SubTransactionId mySubid,
							  SubTransactionId parentSubid, bool commit);
extern void lease_locks_released(void);
extern void lease_exit(void);

#endif							/* TOKENBUCKET_LEASE_H */
