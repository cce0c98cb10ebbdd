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
#include "utils/tuplestore.h"

/* One bucket of a request, and what the decision found in it. */
typedef struct Request
{
	text	   *name;
	double		cost;
	int			position;		/* where the caller named it */
	Bucket		bucket;			/* state after the decision */
} Request;

/*
 * Longest name a shared memory entry holds, in a fixed space: a memory
 * bucket's, or that of a bucket with counters (stats.c).
 */
#define SHARED_NAME_MAX_BYTES 128

/* The key of an entry in shared memory: which installation, and a name. */
typedef struct SharedKey
{
	Oid			dbid;
	Oid			relid;			/* that installation's tb_buckets */
	uint16		len;
	char		name[SHARED_NAME_MAX_BYTES];	/* not terminated */
} SharedKey;

/* What store_connect() changed, for store_finish() to restore. */
typedef struct StoreSession
{
	Oid			userid;
	int			sec_context;
	int			nestlevel;
} StoreSession;

/* A change to a bucket's state at "now", for store_update(). */
typedef void (*BucketChange) (Bucket *bucket, TimestampTz now, const void *arg);

/* table_store.c: tb_buckets through SPI on kept plans (callers connect
 * SPI), and the routing of each call to the store holding its bucket */
extern bool is_template_name(text *name);
extern Oid	store_relid(FunctionCallInfo fcinfo);
extern Oid	store_checked_relid(FunctionCallInfo fcinfo);
extern void store_check_primary(void);
extern void store_check_cost(const Request *request);
extern StoreSession store_connect(FunctionCallInfo fcinfo, bool writes);
extern void store_allow_seqscan(void);
extern void store_finish(StoreSession *session);
extern bool store_take(FunctionCallInfo fcinfo, Request *request,
					   TimestampTz now);
extern void store_peek(FunctionCallInfo fcinfo, Request *request,
					   TimestampTz now);
extern bool store_take_all(FunctionCallInfo fcinfo, Request *requests,
						   int nrequests, TimestampTz now);
extern Bucket store_update(FunctionCallInfo fcinfo, text *name,
						   BucketChange change, const void *arg,
						   TimestampTz now);
extern void store_alter(FunctionCallInfo fcinfo, text *name, double capacity,
						double refill_rate, TimestampTz now);
extern void store_require(FunctionCallInfo fcinfo, text *name);
extern int	store_template_len(FunctionCallInfo fcinfo, text *name);
extern bool store_insert(FunctionCallInfo fcinfo, text *name, double capacity,
						 double refill_rate, bool memory, TimestampTz now);
extern bool store_delete(FunctionCallInfo fcinfo, text *name);
extern uint64 store_purge(FunctionCallInfo fcinfo, TimestampTz idle_since,
						  TimestampTz now);
extern ErrorData *subxact_abort(MemoryContext oldcontext, ResourceOwner oldowner);

/* memory_store.c: buckets whose tokens live in shared memory */
extern bool shared_key_make(SharedKey *key, Oid relid, const char *name, int len);
extern bool shared_key_text(SharedKey *key, Oid relid, text *name);
extern uint32 shared_key_hash(const void *key, Size keysize);
extern int	shared_key_match(const void *key1, const void *key2, Size keysize);
extern void memory_init(void);
extern bool memory_enabled(void);
extern void memory_require(void);
extern void memory_check_name(int len);
extern bool memory_take(Oid relid, Request *request, TimestampTz now,
						bool *granted);
extern bool memory_peek(Oid relid, Request *request);
extern int	memory_template_len(Oid relid, text *name);
extern void memory_absent(Request *request, const Bucket *settings,
						  TimestampTz now);
extern bool memory_take_all(Oid relid, Request *requests, int nrequests,
							TimestampTz now, bool *granted);
extern uint64 memory_changes(void);
extern bool memory_make(Oid relid, text *name, const Bucket *settings,
						int template_len, uint64 changes_seen);
extern bool memory_change(Oid relid, text *name, BucketChange change,
						  const void *arg, TimestampTz now, Bucket *after);
extern bool memory_watch(Oid relid, text *name, bool on);
extern bool memory_drop(Oid relid, text *name);
extern bool memory_alter(Oid relid, text *name, double capacity,
						 double refill_rate);
extern uint64 memory_purge(Oid relid, TimestampTz idle_since, TimestampTz now);

/* What calls did to a bucket (stats.c); waits in microseconds. */
typedef struct StatsCounters
{
	int64		granted;		/* calls granted */
	double		granted_tokens; /* tokens they took, and tb_settle's extra */
	int64		denied;			/* calls denied at once */
	int64		waited;			/* calls that waited */
	int64		wait_usecs;		/* how long they waited, in all */
	int64		timeouts;		/* calls that waited in vain */
	double		refunded_tokens;	/* tokens given back */
	int64		pauses;			/* pauses set */
} StatsCounters;

/* stats.c: counters of what each bucket did, in shared memory */
extern void stats_init(void);
extern bool stats_enabled(void);
extern void stats_count(Oid relid, text *name, const StatsCounters *delta,
						int (*template_of) (void *arg), void *arg,
						TimestampTz now);

/* tokenbucket.c */
extern Tuplestorestate *materialize_begin(FunctionCallInfo fcinfo,
										  TupleDesc *desc);
extern void check_may_read(FunctionCallInfo fcinfo, const char *function,
						   const char *const *views);

/* wait.c: waiting in arrival order until a request can be granted */
extern bool wait_and_take(FunctionCallInfo fcinfo, Request *requests,
						  int nrequests, TimestampTz deadline,
						  int64 *waited_usecs);

#endif							/* TOKENBUCKET_H */
