/*-------------------------------------------------------------------------
 *
 * router.h
 *	  One place that finds where each bucket lives and hands every request
 *	  to that store, and counts what it did.
 *
 * Each function serves the installation of the SQL function called
 * ("fcinfo"), opens and closes the SPI session it needs, and fails with
 * the user's error when the bucket does not exist.
 *
 * src/router.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_ROUTER_H
#define TOKENBUCKET_ROUTER_H

#include "stats.h"
#include "store.h"

extern void router_init(void);
extern void router_forget_installation(Oid dbid, Oid relid);

extern bool router_take(FunctionCallInfo fcinfo, Request *requests,
						int nrequests, TimestampTz now);
extern bool router_attempt(FunctionCallInfo fcinfo, Request *requests,
						   int nrequests, TimestampTz now);
extern void router_count_wait_begin(FunctionCallInfo fcinfo,
								   const Request *requests, int nrequests);
extern void router_count_wait(FunctionCallInfo fcinfo, const Request *requests,
							  int nrequests, bool granted, int64 waited_usecs);
extern void router_reset_counters(FunctionCallInfo fcinfo, text *name);
extern bool router_watch(FunctionCallInfo fcinfo, Request *requests,
						 int nrequests, bool on);
extern void router_peek(FunctionCallInfo fcinfo, Request *request,
						TimestampTz now);
extern Bucket router_update(FunctionCallInfo fcinfo, text *name,
							BucketChange change, const void *arg,
							const StatsCounters *delta, TimestampTz now);
extern void router_require(FunctionCallInfo fcinfo, text *name);
extern void router_alter(FunctionCallInfo fcinfo, text *name, double capacity,
						 double refill_rate);
extern bool router_create(FunctionCallInfo fcinfo, text *name, double capacity,
						  double refill_rate, bool memory);

/* What router_ensure() did. */
typedef enum EnsureResult
{
	ENSURE_CREATED,
	ENSURE_CHANGED,
	ENSURE_UNCHANGED
} EnsureResult;

extern EnsureResult router_ensure(FunctionCallInfo fcinfo, text *name, double capacity,
								  double refill_rate, bool memory);
extern bool router_drop(FunctionCallInfo fcinfo, text *name);
extern uint64 router_purge(FunctionCallInfo fcinfo, TimestampTz idle_since,
						   TimestampTz now);

#endif							/* TOKENBUCKET_ROUTER_H */
