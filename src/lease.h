/*-------------------------------------------------------------------------
 *
 * lease.h
 *	  In-flight limits' entry points: what tb_lease_all (tokenbucket.c)
 *	  shares with them.
 *
 * src/lease.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_LEASE_H
#define TOKENBUCKET_LEASE_H

#include "datatype/timestamp.h"
#include "limit_store.h"

extern LeaseRequest lease_request(text *name, int32 slots, text *hold,
								  Interval *ttl, double reserve);

#endif							/* TOKENBUCKET_LEASE_H */
