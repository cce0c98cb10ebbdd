/*-------------------------------------------------------------------------
 *
 * xact.h
 *	  The one owner of every transaction's end: the library's only
 *	  transaction, subtransaction, resource-release and backend-exit
 *	  callbacks, which call each part in one documented order, and the one
 *	  place that refuses PREPARE (xact.c says how and why).
 *
 * src/xact.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_XACT_H
#define TOKENBUCKET_XACT_H

extern void xact_init(void);

#endif							/* TOKENBUCKET_XACT_H */
