/*-------------------------------------------------------------------------
 *
 * limit_router.h
 *	  One place that finds where each limit keeps its leases and hands
 *	  every lease, release and change of limits to that store, and counts
 *	  what it did.
 *
 * Each function serves installation "inst" (its entry point's), opens and
 * closes the SPI session it needs, and fails with the user's error when
 * the limit does not exist.
 *
 * src/limit_router.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_LIMIT_ROUTER_H
#define TOKENBUCKET_LIMIT_ROUTER_H

#include "common.h"
#include "limit_store.h"

extern void limit_router_init(void);
extern void limit_router_forget(Oid dbid, Oid relid);

extern bool limit_lease(Installation *inst, LeaseRequest *request, bool wait,
						TimestampTz deadline, bool (*and_then) (void *arg),
						void *and_then_arg);
extern bool limit_release(Installation *inst, int64 lease);
extern bool limit_create(Installation *inst, text *name, int32 max_in_flight,
						 bool memory);
extern void limit_alter(Installation *inst, text *name, int32 max_in_flight);
extern EnsureResult limit_ensure(Installation *inst, text *name,
								 int32 max_in_flight, bool memory);
extern bool limit_drop(Installation *inst, text *name);
extern uint64 limit_purge(Installation *inst, TimestampTz idle_since,
						  TimestampTz now);
extern void limit_list(Oid relid, Tuplestorestate *store, TupleDesc desc);

#endif							/* TOKENBUCKET_LIMIT_ROUTER_H */
