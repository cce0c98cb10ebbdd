/*-------------------------------------------------------------------------
 *
 * store.h
 *	  The interface every store of bucket state implements: the table
 *	  store (rows of tb_buckets, table_store.c) and the memory store
 *	  (entries in shared memory, memory_store.c).
 *
 * A store holds the state (tokens, pause) of the buckets whose
 * configuration says they live there.  The router (router.c) finds a
 * name's configuration and calls the store that holds it, through the
 * StoreRoutine below and never through a store's own functions; the
 * stores never call each other.  What each operation must do is written
 * above it: that is the contract a new kind of store fills in.
 *
 * Every operation gets the installation ("relid": its tb_buckets table)
 * and works on this database's buckets of it only.  A store that does not
 * hold a bucket says so (STORE_ABSENT, false) and changes nothing, so the
 * router can ask the stores in turn.  The table store's operations run
 * inside the SPI session the router opened; the memory store's need none.
 *
 * src/store.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_STORE_H
#define TOKENBUCKET_STORE_H

#include "bucket.h"
#include "fmgr.h"
#include "stats.h"
#include "utils/tuplestore.h"

/* One bucket of a request, and what the decision found in it. */
typedef struct Request
{
	text	   *name;
	double		cost;
	double		reserve;		/* share of capacity to leave (0: none) */
	int			position;		/* where the caller named it */
	Bucket		bucket;			/* state after the decision */
	int			template_len;	/* the length of its template's name (0:
								 * none), when the store that answered
								 * knows it; else -1 */
	bool		in_table;		/* the table store answered: template_len
								 * is its row's, and the key's counters
								 * are the counters' own */
	bool		counted;		/* take_all() counts its grant for the
								 * key's own counters */
} Request;

/* A change to a bucket's state at "now" (refund, pause, reset...). */
typedef void (*BucketChange) (Bucket *bucket, TimestampTz now, const void *arg);

/* What a store did with a request. */
typedef enum StoreResult
{
	STORE_ABSENT,				/* it does not hold the bucket: nothing done */
	STORE_DENIED,
	STORE_GRANTED
} StoreResult;

/* What make() did. */
typedef enum StoreMade
{
	STORE_MADE,					/* the bucket is there now, in the state given */
	STORE_EXISTS,				/* it was there already, in its own state */
	STORE_STALE					/* the configuration given is out of date */
} StoreMade;

/* A committed change of configuration, for configure(). */
typedef enum ConfigChange
{
	CONFIG_MADE,				/* a named bucket made: full */
	CONFIG_ALTERED,				/* new settings, keeping tokens */
	CONFIG_DROPPED,				/* gone */
	CONFIG_TAKEN,				/* the name is a table bucket's now */
	CONFIG_SHADOWED,			/* a template made: keys of shorter templates
								 * its prefix covers are its from now on */
	CONFIG_TRUNCATED			/* every bucket of the installation gone */
} ConfigChange;

typedef struct StoreRoutine
{
	const char *kind;			/* "table", "memory" */

	/* At library load (_PG_init): GUCs, shared memory, callbacks. */
	void		(*init) (void);

	/*
	 * Take request->cost from the bucket at "now" if it holds that many and
	 * request->reserve besides (bucket_take()), leaving its state after the
	 * decision in request->bucket.  A cost the bucket could never grant is
	 * denied (the router says why).
	 */
	StoreResult (*take) (Oid relid, Request *request, TimestampTz now);

	/*
	 * Optional: take()'s answer when it is a denial that can be decided
	 * without changing or locking anything: STORE_DENIED (the state in
	 * request->bucket) when take() would deny request->cost (above 0)
	 * now; else STORE_ABSENT, having changed nothing.
	 */
	StoreResult (*deny) (Oid relid, Request *request, TimestampTz now);

	/*
	 * take() for every request, or for none: STORE_GRANTED only if every
	 * bucket granted; STORE_ABSENT (nothing taken) if one is not here.
	 * Each request->bucket holds its state afterwards.  A store that keeps
	 * its keys' counters may count a grant for them itself, when the
	 * transaction commits (request->counted, which the caller sets false
	 * before): the caller then counts it only for the key's template.
	 */
	StoreResult (*take_all) (Oid relid, Request *requests, int nrequests,
							 TimestampTz now);

	/* Copy the bucket's state into request->bucket, changing nothing. */
	bool		(*peek) (Oid relid, Request *request);

	/*
	 * The state a bucket with these settings (capacity, refill_rate, and
	 * the state of its row, or of its template's) has here before
	 * anything is stored for it.  Fails if this store cannot hold buckets
	 * in this server.
	 */
	Bucket		(*absent) (const Bucket *settings, TimestampTz now);

	/*
	 * Let "change" alter the bucket's state at "now" and store it, unless
	 * it leaves a deficit float8 cannot hold; *after is the state it made
	 * either way (the router reports the debt).  Undone if the transaction
	 * rolls back.
	 */
	bool		(*change) (Oid relid, text *name, BucketChange change,
						   const void *arg, TimestampTz now, Bucket *after);

	/*
	 * New settings (NaN keeps one) for the bucket, keeping the tokens it
	 * holds, capped at the new capacity; for a template, for every bucket
	 * made from it.  In effect when the transaction commits.
	 */
	bool		(*alter) (Oid relid, text *name, double capacity,
						  double refill_rate, TimestampTz now);

	/*
	 * Give bucket "name" a place here in state "state": made from its
	 * template (the first "template_len" - 1 bytes of its name, then '*')
	 * or, with 0, named.  "generation" is what generation() said before the
	 * caller read the configuration the state comes from (STORE_STALE:
	 * read it again).  "provisional": that configuration is this
	 * transaction's own, not committed yet; the place must then be this
	 * transaction's alone until it commits, and gone if it aborts.
	 */
	StoreMade	(*make) (Oid relid, text *name, const Bucket *state,
						 int template_len, uint64 generation, bool provisional);

	/*
	 * Forget the bucket (a template: with every bucket made from it), when
	 * the transaction commits; false when it had nothing of it.
	 */
	bool		(*drop) (Oid relid, text *name);

	/*
	 * Forget the template-made buckets that are full, not paused, unchanged
	 * since "idle_since", and would be made again exactly as they are.
	 */
	uint64		(*purge) (Oid relid, TimestampTz idle_since, TimestampTz now);

	/*
	 * Optional: a row (name, capacity, refill_rate, deficit, updated_at,
	 * paused_until, template) into "store" for each bucket it holds.
	 */
	void		(*list) (Oid relid, Tuplestorestate *store, TupleDesc desc);

	/*
	 * Optional: be (or stop being) the one backend woken when the bucket
	 * gets tokens or new settings; false when it cannot (the waiter then
	 * looks again every second).
	 */
	bool		(*watch) (Oid relid, text *name, bool on);

	/*
	 * A change to the configuration of a bucket it holds (its row's, or a
	 * template's: "name" ends in '*'), to apply when the transaction
	 * commits, and never if it aborts.  "settings": the row's settings
	 * and state (bucket_config_row_settings(); NULL when it is gone).
	 */
	void		(*configure) (ConfigChange change, Oid relid, const char *name,
							  int len, const Bucket *settings);

	/*
	 * Forget every bucket of installation "relid" of database "dbid"
	 * (InvalidOid: of every installation of it), when the transaction
	 * commits: the extension, its table or the database is being dropped.
	 */
	void		(*forget) (Oid dbid, Oid relid);

	/*
	 * Optional: the counters of a key made from a template are kept with
	 * it here: add what a transaction counted for it (the key gone: drop
	 * it), and start them from zero (NULL: every key of the installation;
	 * a template's name: every key made from it).
	 */
	StatsSink	count;
	void		(*reset_counters) (Oid relid, text *name);

	/* Fail unless a bucket (or template) named "len" bytes can be made here. */
	void		(*check_make) (int len);

	/*
	 * A number that changes whenever configure() takes effect; 0 where
	 * there is none.
	 */
	uint64		(*generation) (void);
} StoreRoutine;

extern const StoreRoutine table_store;
extern const StoreRoutine memory_store;

#endif							/* TOKENBUCKET_STORE_H */
