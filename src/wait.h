/*-------------------------------------------------------------------------
 *
 * wait.h
 *	  Waiting in the server, in arrival order, until tokens can be taken.
 *
 * src/wait.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_WAIT_H
#define TOKENBUCKET_WAIT_H

#include "store.h"

extern bool wait_and_take(FunctionCallInfo fcinfo, Request *requests,
						  int nrequests, TimestampTz deadline,
						  int64 *waited_usecs);

#endif							/* TOKENBUCKET_WAIT_H */
