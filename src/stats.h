/*-------------------------------------------------------------------------
 *
 * stats.h
 *	  Counters of what each bucket and template did, beside the stores:
 *	  the router counts every decision here.
 *
 * src/stats.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_STATS_H
#define TOKENBUCKET_STATS_H

#include "counters.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "shmem.h"

/*
 * Where the counters of a bucket made from a template live when its store
 * keeps them with the bucket (a memory key's entry): called with what a
 * committed (or aborted) transaction counted for it.
 */
typedef void (*StatsSink) (const SharedKey *key, const BucketCounters *delta,
						   TimestampTz at);

extern void stats_init(void);
extern bool stats_enabled(void);
extern void stats_count(Oid relid, text *name, const BucketCounters *delta,
						int template_len, int (*template_of) (void *arg),
						void *arg, StatsSink sink, TimestampTz now);
extern void stats_count_template(Oid relid, text *name, int template_len,
								 const BucketCounters *delta, TimestampTz now);
extern void stats_count_limit(Oid limits, text *name, const LimitCounters *delta,
							  int template_len, int (*template_of) (void *arg),
							  void *arg, TimestampTz now);
extern void stats_count_limit_now(Oid limits, const char *name, int len,
								  int template_len, const LimitCounters *delta,
								  TimestampTz now);
extern void stats_forget(Oid dbid, Oid relid);
extern void stats_reset(Oid relid, text *name);

/* the transaction's end, for xact.c alone */
extern const char *stats_unpreparable(void);
extern void stats_xact_end(bool commit);
extern void stats_subxact_end(bool commit);

#endif							/* TOKENBUCKET_STATS_H */
