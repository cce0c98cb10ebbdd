/*-------------------------------------------------------------------------
 *
 * hierarchy.h
 *	  Buckets charged up their parents: the chains tb_parents declares,
 *	  added to a call's requests before the router takes them all or
 *	  nothing, and the level a call's answer reports.
 *
 * src/hierarchy.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_HIERARCHY_H
#define TOKENBUCKET_HIERARCHY_H

#include "common.h"
#include "store.h"

/* Most levels of a chain, the bucket called included. */
#define HIERARCHY_MAX_LEVELS 8

extern int	request_name_cmp(const void *a, const void *b);
extern Request *hierarchy_expand(Installation *inst, Request *requests,
								 int *nrequests);
extern Request *hierarchy_given_back(Installation *inst, Request *request,
									 int *nrequests, TimestampTz reserved_at);
extern TimestampTz hierarchy_reserved_at(FunctionCallInfo fcinfo, int argno);
extern int	hierarchy_reported(const Request *requests, int nrequests,
							   bool granted, TimestampTz now);

#endif							/* TOKENBUCKET_HIERARCHY_H */
