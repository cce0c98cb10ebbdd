/*-------------------------------------------------------------------------
 *
 * router.h
 *	  One place that finds where each bucket lives and hands every request
 *	  to that store, and counts what it did.
 *
 * Each function serves installation "inst" (its entry point's), opens and
 * closes the SPI session it needs, and fails with the user's error when
 * the bucket does not exist.
 *
 * src/router.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_ROUTER_H
#define TOKENBUCKET_ROUTER_H

#include "bucket_config.h"
#include "common.h"
#include "stats.h"
#include "store.h"

extern void router_init(void);
extern void router_forget_installation(Oid dbid, Oid relid);

extern bool router_take(Installation *inst, Request *requests,
						int nrequests, TimestampTz now);
extern bool router_attempt(Installation *inst, Request *requests,
						   int nrequests, TimestampTz now);
extern void router_count_wait_begin(Installation *inst,
									const Request *requests, int nrequests);
extern void router_count_wait(Installation *inst, const Request *requests,
							  int nrequests, bool granted, int64 waited_usecs);
extern void router_reset_counters(Installation *inst, text *name);
extern bool router_watch(Installation *inst, Request *requests,
						 int nrequests, bool on);
extern void router_peek(Installation *inst, Request *request,
						TimestampTz now);
extern Bucket router_update(Installation *inst, text *name,
							BucketChange change, const void *arg,
							const BucketCounters *delta, TimestampTz now);
extern void router_require(Installation *inst, text *name);
extern void router_alter(Installation *inst, text *name, double capacity,
						 double refill_rate);
extern bool router_create(Installation *inst, text *name, double capacity,
						  double refill_rate, bool memory);
extern bool router_ensure(Installation *inst, text *name, const Bucket *made,
						  bool memory, BucketConfig *found);
extern bool router_drop(Installation *inst, text *name);
extern uint64 router_purge(Installation *inst, TimestampTz idle_since,
						   TimestampTz now);

#endif							/* TOKENBUCKET_ROUTER_H */
