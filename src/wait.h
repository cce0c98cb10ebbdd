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

#include "common.h"
#include "store.h"

extern bool wait_and_take(Installation *inst, Request *requests,
						  int nrequests, TimestampTz deadline,
						  int64 *waited_usecs);

/*
 * One attempt of a waiter at "now": true when it got what it waits for;
 * otherwise *ready is when it could (DT_NOEND: once something is freed).
 */
typedef bool (*WaitAttempt) (void *arg, TimestampTz now, TimestampTz *ready);

extern bool wait_in_queue(const char *name, int len, TimestampTz deadline,
						  WaitAttempt attempt, void *arg, int64 *waited_usecs);
extern void wait_wake_limit(const char *name, int len);

#endif							/* TOKENBUCKET_WAIT_H */
