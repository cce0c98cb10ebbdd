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

#include "fmgr.h"

extern bool lease_drop_limit(FunctionCallInfo fcinfo, text *name);

#endif							/* TOKENBUCKET_LEASE_H */
