/*-------------------------------------------------------------------------
 *
 * limit_wake.h
 *	  The limits whose queues of waiters to wake, at a transaction's end or
 *	  the session's.
 *
 * src/limit_wake.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_LIMIT_WAKE_H
#define TOKENBUCKET_LIMIT_WAKE_H

#include "fmgr.h"

extern void limit_wake_at_end(const char *name, int len);
extern void limit_wake_at_exit(text *name);

/* the transaction's end, for xact.c alone */
extern void limit_wake_xact_end(bool commit);
extern void limit_wake_subxact_end(SubTransactionId mySubid,
								   SubTransactionId parentSubid, bool commit);
extern void limit_wake_locks_released(void);
extern void limit_wake_exit(void);

#endif							/* TOKENBUCKET_LIMIT_WAKE_H */
