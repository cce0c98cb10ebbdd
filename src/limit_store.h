/*-------------------------------------------------------------------------
 *
 * limit_store.h
 *	  The interface every store of in-flight limits' leases implements: the
 *	  table's (rows of tb_lease_slots, lease_table.c) and shared memory's
 *	  (lease_memory.c).
 *
 * A limit (a row of tb_limits, limit_config.c) allows at most
 * max_in_flight slots held at once; a lease holds some of them until it is
 * released, its holder (a session, or a transaction) is gone, or its ttl
 * passes.  A limit's row says which store keeps its leases.  The limit
 * router (limit_router.c) reads it, chooses the store, and calls it
 * through the LimitStoreRoutine below, by the inline wrappers at the end,
 * never through a store's own functions; the stores never call each
 * other.  What each operation must do is written above it: that is the
 * contract a new kind of store fills in.  Beside the bucket stores
 * (store.h), not among them: a lease takes slots, not tokens.
 *
 * Every operation works on this database's limits of installation "relid"
 * (its tb_buckets) only.  Those of a store with "spi" run inside the SPI
 * session the router opened; the others need none.  A store counts the
 * slots it finds freed (stats_count_limit()); the router counts the
 * decisions.
 *
 * src/limit_store.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_LIMIT_STORE_H
#define TOKENBUCKET_LIMIT_STORE_H

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "nodes/pg_list.h"
#include "utils/tuplestore.h"

/* How a lease is held. */
typedef enum LeaseHold
{
	HOLD_SESSION,				/* until its session ends */
	HOLD_TRANSACTION			/* until its transaction ends */
} LeaseHold;

/*
 * One lease asked for, from its entry point through the router to the
 * store that takes it.
 */
typedef struct LeaseRequest
{
	/* what is asked: tb_lease's arguments, checked (lease.c) */
	text	   *name;			/* the limit */
	int32		slots;
	LeaseHold	hold;
	double		ttl_usecs;		/* <= 0: none */
	double		reserve;		/* share of max_in_flight to leave free (0:
								 * none) */

	/* for whom (the router) */
	Oid			relid;			/* the installation: its tb_buckets */
	Oid			limits;			/* its tb_limits, which the counters go under */
	Oid			holder;			/* the role that holds it */

	/*
	 * Its limit, as its committed configuration says, once the router read
	 * it (a store that reads the limit in its own statement need not wait
	 * for that: the table's).
	 */
	int32		max_in_flight;
	int32		keep;			/* slots its reserve leaves free */
	int			template_len;	/* its template's name's length (0: none);
								 * -1: not known yet */
	uint64		generation;		/* the store's drops() before the
								 * configuration was read */

	/* what the store answered */
	int64		lease;			/* granted: its id */
	TimestampTz ready;			/* refused: when it could be granted without
								 * anyone else acting (DT_NOEND: once
								 * something is freed) */
} LeaseRequest;

/* What take() did. */
typedef enum LeaseTaken
{
	LEASE_GRANTED,				/* request->lease is its id */
	LEASE_REFUSED,				/* not enough slots free here: nothing taken */
	LEASE_STALE					/* a limit was dropped since
								 * request->generation: read the
								 * configuration again */
} LeaseTaken;

/* What release() did. */
typedef enum LeaseReleased
{
	LEASE_NOT_HELD,				/* no such lease held: nothing freed */
	LEASE_FREED,				/* freed (when the transaction commits, or at
								 * once in its snapshot) */
	LEASE_NOT_YOURS				/* held by a role the caller may not act for:
								 * nothing freed */
} LeaseReleased;

/* A lease release() freed. */
typedef struct ReleasedLease
{
	text	   *name;			/* its limit */
	int32		slots;
	int			template_len;	/* its limit's template's name's length (0:
								 * none), or -1: not known here */
} ReleasedLease;

/* A name holding leases in a store (held()), and how many slots. */
typedef struct HeldName
{
	text	   *name;
	int64		slots;
} HeldName;

typedef struct LimitStoreRoutine
{
	const char *kind;			/* "table", "memory" */
	bool		spi;			/* its operations run in an SPI session */

	/* ---- lifecycle ---- */

	/* Optional: at library load (_PG_init): GUCs, shared memory. */
	void		(*init) (void);

	/*
	 * Optional: forget every lease of installation "relid" of database
	 * "dbid" (InvalidOid: of every installation of it), when the
	 * transaction commits: the extension, its table or the database is
	 * being dropped.  (Leases kept in the installation's tables go with
	 * them.)
	 */
	void		(*forget) (Oid dbid, Oid relid);

	/* ---- configuration ---- */

	/*
	 * Optional: fail unless a limit named "name" can keep its leases here
	 * (the library preloaded, the server a primary, the name short
	 * enough).
	 */
	void		(*check_make) (text *name);

	/*
	 * Optional: give limit "name" of "max_in_flight" slots what it needs
	 * here before its leases, where it has not got it yet: the table makes
	 * its slots.
	 */
	void		(*make) (Oid relid, text *name, int32 max_in_flight);

	/*
	 * Optional: this transaction changed tb_limits: until it ends, read
	 * the configuration afresh (generation() says 0), and once it commits,
	 * make every backend read it again.
	 */
	void		(*configure) (void);

	/*
	 * Optional: a number that changes whenever a change of tb_limits
	 * commits: a configuration read when it said the same number still
	 * holds.  0: none (read it again).
	 */
	uint64		(*generation) (void);

	/*
	 * Optional: a number that changes whenever drop() or forget() takes
	 * effect: what take() compares request->generation with.
	 */
	uint64		(*drops) (void);

	/* ---- decisions ---- */

	/*
	 * Take request->slots of limit request->name at "now" for
	 * request->holder, held as request->hold asks (freed at the end of its
	 * session or transaction, or when request->ttl_usecs have passed), all
	 * or none, leaving free within max_in_flight the slots the request's
	 * reserve keeps.  Taken back if the (sub)transaction aborts.  Slots of
	 * leases expired, or whose holder is gone, are free.  Granted,
	 * request->lease is its id; refused, request->ready when it could be
	 * granted, if the store knows it without looking further (else
	 * DT_NOEND: see first_expiry()).  A store that does not keep the
	 * limit's leases (or has not made its place: make()) refuses.
	 */
	LeaseTaken	(*take) (LeaseRequest *request, TimestampTz now);

	/*
	 * Optional: when the first ttl among the leases of limit "name" held at
	 * "now" ends (DT_NOEND: none), for a waiter that take() refused;
	 * without it, take() says so in request->ready.
	 */
	TimestampTz (*first_expiry) (Oid relid, text *name, TimestampTz now);

	/* Whether "lease" is an id this store gives (no two stores share one). */
	bool		(*owns) (int64 lease);

	/*
	 * Free lease "lease", held now, for role "caller" if it may: "owner"
	 * (the extension's owner, or a member of its role), the lease's holder
	 * or a member of it.  Freed for others when the transaction commits,
	 * never if it aborts; its limit's queue of waiters is woken then.
	 * *released says what was freed.
	 */
	LeaseReleased (*release) (Oid relid, int64 lease, Oid caller, bool owner,
							  TimestampTz now, ReleasedLease *released);

	/* ---- dropping, purging, listing ---- */

	/*
	 * Limit "name" (a template: with the names it made) is gone from
	 * tb_limits; "its" says whether it was this store's kind.  Forget what
	 * is kept here of it when the transaction commits (of a template's
	 * names, those no limit makes now).
	 */
	void		(*drop) (Oid relid, text *name, bool its);

	/*
	 * Optional: forget what is kept of names templates made that hold no
	 * lease and were not leased since "idle_since" (the next lease makes it
	 * again, free).  Returns how many names.
	 */
	uint64		(*purge) (Oid relid, TimestampTz idle_since, TimestampTz now);

	/*
	 * Optional: a row (name, lease, slots, hold, holder, pid, since,
	 * expires) into "store" for each lease held here, for a store whose
	 * leases tb_leases cannot read in a table.
	 */
	void		(*list) (Oid relid, Tuplestorestate *store, TupleDesc desc);

	/*
	 * Every name of installation "relid" whose leases are held here at
	 * "now", by anyone, with the slots they hold: a List of HeldName.
	 * Leases this transaction released, or dropped with their limit, are
	 * not held: they go when its change of tb_limits commits.  The router
	 * checks that no change of tb_limits would have these names leased
	 * from another store, where their slots would not count.
	 */
	List	   *(*held) (Oid relid, TimestampTz now);
} LimitStoreRoutine;

extern const LimitStoreRoutine table_limit_store;
extern const LimitStoreRoutine memory_limit_store;

/*
 * The wrappers the router calls the stores through: an optional operation
 * a store lacks does nothing, or answers as above.
 */

static inline void
limit_store_init(const LimitStoreRoutine *store)
{
	if (store->init)
		store->init();
}

static inline void
limit_store_forget(const LimitStoreRoutine *store, Oid dbid, Oid relid)
{
	if (store->forget)
		store->forget(dbid, relid);
}

static inline void
limit_store_check_make(const LimitStoreRoutine *store, text *name)
{
	if (store->check_make)
		store->check_make(name);
}

static inline void
limit_store_make(const LimitStoreRoutine *store, Oid relid, text *name,
				 int32 max_in_flight)
{
	if (store->make)
		store->make(relid, name, max_in_flight);
}

static inline void
limit_store_configure(const LimitStoreRoutine *store)
{
	if (store->configure)
		store->configure();
}

static inline uint64
limit_store_generation(const LimitStoreRoutine *store)
{
	return store->generation ? store->generation() : 0;
}

static inline uint64
limit_store_drops(const LimitStoreRoutine *store)
{
	return store->drops ? store->drops() : 0;
}

static inline LeaseTaken
limit_store_take(const LimitStoreRoutine *store, LeaseRequest *request,
				 TimestampTz now)
{
	return store->take(request, now);
}

static inline TimestampTz
limit_store_first_expiry(const LimitStoreRoutine *store,
						 const LeaseRequest *request, TimestampTz now)
{
	return store->first_expiry ?
		store->first_expiry(request->relid, request->name, now) : request->ready;
}

static inline bool
limit_store_owns(const LimitStoreRoutine *store, int64 lease)
{
	return store->owns(lease);
}

static inline LeaseReleased
limit_store_release(const LimitStoreRoutine *store, Oid relid, int64 lease,
					Oid caller, bool owner, TimestampTz now,
					ReleasedLease *released)
{
	return store->release(relid, lease, caller, owner, now, released);
}

static inline void
limit_store_drop(const LimitStoreRoutine *store, Oid relid, text *name, bool its)
{
	store->drop(relid, name, its);
}

static inline uint64
limit_store_purge(const LimitStoreRoutine *store, Oid relid,
				  TimestampTz idle_since, TimestampTz now)
{
	return store->purge ? store->purge(relid, idle_since, now) : 0;
}

static inline void
limit_store_list(const LimitStoreRoutine *store, Oid relid,
				 Tuplestorestate *tuples, TupleDesc desc)
{
	if (store->list)
		store->list(relid, tuples, desc);
}

static inline List *
limit_store_held(const LimitStoreRoutine *store, Oid relid, TimestampTz now)
{
	return store->held(relid, now);
}

#endif							/* TOKENBUCKET_LIMIT_STORE_H */
