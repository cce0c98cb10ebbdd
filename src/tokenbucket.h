/*-------------------------------------------------------------------------
 *
 * tokenbucket.h
 *	  What the entry points, the table access and the waiting share.
 *
 * src/tokenbucket.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_H
#define TOKENBUCKET_H

#include "bucket.h"
#include "fmgr.h"
#include "utils/resowner.h"

/* One bucket of a request, and what the decision found in it. */
typedef struct Request
{
	text	   *name;
	double		cost;
	int			position;		/* where the caller named it */
	Bucket		bucket;			/* state after the decision */
} Request;

/* store.c: the table, through SPI on kept plans (callers connect SPI) */
extern bool is_template_name(text *name);
extern void store_check_primary(void);
extern void store_connect(bool writes);
extern void store_finish(void);
extern bool store_take(FunctionCallInfo fcinfo, Request *request,
					   TimestampTz now);
extern void store_peek(FunctionCallInfo fcinfo, Request *request,
					   TimestampTz now);
extern bool store_take_all(FunctionCallInfo fcinfo, Request *requests,
						   int nrequests, TimestampTz now);
extern void store_lock(FunctionCallInfo fcinfo, text *name, Bucket *bucket);
extern void store_write(FunctionCallInfo fcinfo, text *name,
						const Bucket *bucket);
extern uint64 store_alter_made(FunctionCallInfo fcinfo, text *name,
							   const Bucket *bucket, TimestampTz now);
extern void store_require(FunctionCallInfo fcinfo, text *name);
extern void store_reset(FunctionCallInfo fcinfo, text *name, TimestampTz now);
extern bool store_insert(FunctionCallInfo fcinfo, text *name, double capacity,
						 double refill_rate, TimestampTz now);
extern bool store_delete(FunctionCallInfo fcinfo, text *name);
extern uint64 store_purge(FunctionCallInfo fcinfo, TimestampTz idle_since,
						  TimestampTz now);
extern ErrorData *subxact_abort(MemoryContext oldcontext, ResourceOwner oldowner);

/* wait.c: waiting in arrival order until a request can be granted */
extern bool wait_and_take(FunctionCallInfo fcinfo, Request *requests,
						  int nrequests, TimestampTz deadline);

#endif							/* TOKENBUCKET_H */
