/*-------------------------------------------------------------------------
 *
 * lease.c
 *	  In-flight limits: slots leased, and freed the moment their holder is
 *	  gone.
 *
 * A limit (a row of tb_limits) allows at most max_in_flight slots held at
 * once.  Its slots are rows of tb_lease_slots, made as they are first
 * needed; a lease is the slots that carry its id, and the row says who
 * holds it: a session (its backend's pid and start time) for hold =>
 * 'session', a transaction (its id) for 'transaction'.  A slot is held
 * only while that holder exists: a backend with that pid and start time,
 * a transaction still in progress (holder_alive()).  So the slots of a
 * holder that is gone, however it went (a client killed, the backend
 * terminated or crashed, the transaction committed, rolled back or
 * failed), are free at once, with nothing to clean up and no TTL to
 * guess; and nothing a session does to its own state (DISCARD ALL or
 * pg_advisory_unlock_all, as poolers run between clients) ends its leases.
 *
 * Taking slots is one UPDATE over the free slots locked with FOR UPDATE
 * SKIP LOCKED: two callers never take the same slot, and a slot another
 * transaction is taking or releasing (its row locked) is never counted
 * free.  A lease of several slots that finds fewer free takes none (its
 * subtransaction is rolled back with the row locks).  No index covers a
 * column a lease writes, so leases and releases are HOT updates.
 *
 * Freeing wakes the head of the limit's queue of waiters (wait.c): at the
 * end of the transaction that released, or whose transaction lease ended
 * (once its locks are gone), and at the exit of a session holding leases.
 *
 * A limit whose row says memory => true keeps its leases in shared memory
 * instead (lease_memory.c); this file reads its configuration, committed,
 * and routes each call: a lease that finds no table slot looks the limit
 * up, and takes a memory lease if it is a memory limit; a lease id below
 * zero is a memory lease's.
 *
 * src/lease.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>
#include <math.h>

#include "access/transam.h"
#include "access/xact.h"
#include "bucket.h"
#include "catalog.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "common.h"
#include "lease.h"
#include "lease_memory.h"
#include "stats.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/xid8.h"
#include "wait.h"

/* Longest limit name, as for a bucket. */
#define LIMIT_NAME_MAX_BYTES 1024

/*
 * A limit this session has taken session leases of: its queue is woken
 * when the session ends.  One entry per limit, whatever the number of
 * leases, released or not (a wake-up too many costs a waiter one look).
 */
typedef struct HeldLease
{
	char	   *name;			/* the limit */
	int			len;
	SubTransactionId subid;		/* the subtransaction that made its first
								 * lease, until the transaction commits;
								 * then invalid */
} HeldLease;

/*
 * This session's limits, in TopMemoryContext; at most MAX_HELD_LIMITS (a
 * session leasing from more limits, as a gateway through a template's
 * names: those past it are not woken at its exit, and their waiters find
 * the slots free at their next look, within a second).
 */
#define MAX_HELD_LIMITS 1024
static List *held_leases = NIL;

/* Limits whose queue to wake when this transaction's locks are gone. */
static List *wake_at_end = NIL;

/*
 * Lease ids are a name's key times 2^37 plus a sequence's value modulo
 * 2^37 (see tb_lease_ids): under 2^53, which every client's numbers hold.
 */
#define LEASE_SEQUENCE_BITS 37
#define LEASE_KEY_BITS		16

/* The key of limit "name": a hash of it, in LEASE_KEY_BITS bits. */
static int32
name_key(text *name)
{
	return (int32) (hash_bytes((const unsigned char *) VARDATA_ANY(name),
							   VARSIZE_ANY_EXHDR(name)) & ((1U << LEASE_KEY_BITS) - 1));
}

/* The key of the name whose lease "lease" is. */
static int32
lease_key(int64 lease)
{
	return (int32) (((uint64) lease >> LEASE_SEQUENCE_BITS) & ((1U << LEASE_KEY_BITS) - 1));
}

/*
 * The index in the server's array of backend status entries of the
 * backend whose PGPROC is "proc" (the array is indexed so: see
 * pgstat_beinit()).
 */
#if PG_VERSION_NUM >= 170000
#define STATUS_INDEX(proc) ((int) GetNumberFromPGProc(proc))
#else
#define STATUS_INDEX(proc) ((int) (proc)->backendId - 1)
#endif

/*
 * Whether the backend of process "pid" that started at "started" still
 * runs: this one, or the one that has that pid now, if its entry in the
 * server's backend status says it started then (a pid alone could be a
 * later backend's).  The entry is read live, in shared memory, where this
 * backend's own is: what pg_stat_activity reads is a copy taken once per
 * transaction, which knows no backend started since (a holder that
 * connected after it would count as gone).
 */
static bool
backend_alive(int pid, TimestampTz started)
{
	PGPROC	   *proc;
	int			index;
	volatile PgBackendStatus *entry;
	int			entry_pid;
	TimestampTz entry_started;

	if (pid == MyProcPid)
		return started == MyStartTimestamp;
	proc = BackendPidGetProc(pid);
	if (proc == NULL)
		return false;			/* the common case of a dead holder: no look */
	if (MyBEEntry == NULL)
		elog(ERROR, "this backend has no backend status entry");
	/* a holder is a regular backend; anything else (it went meanwhile) is not */
	index = STATUS_INDEX(proc);
	if (index < 0 || index >= MaxBackends)
		return false;
	entry = MyBEEntry - STATUS_INDEX(MyProc) + index;
	for (;;)
	{
		int			before;
		int			after;

		pgstat_begin_read_activity(entry, before);
		entry_pid = entry->st_procpid;
		entry_started = entry->st_proc_start_timestamp;
		pgstat_end_read_activity(entry, after);
		if (pgstat_read_activity_complete(before, after))
			break;
		CHECK_FOR_INTERRUPTS();
	}
	return entry_pid == pid && entry_started == started;
}

/*
 * Whether transaction "xid" is still in progress (this one included); one
 * older than half the xid space is long over.
 */
static bool
transaction_alive(FullTransactionId xid)
{
	FullTransactionId next = ReadNextFullTransactionId();

	if (!FullTransactionIdPrecedes(xid, next) ||
		U64FromFullTransactionId(next) - U64FromFullTransactionId(xid) >= ((uint64) 1 << 31))
		return false;
	return TransactionIdIsInProgress(XidFromFullTransactionId(xid));
}

PG_FUNCTION_INFO_V1(tb_holder_alive);

/*
 * tb_holder_alive(pid, started, xid): whether the holder a slot names
 * exists: transaction "xid" in progress, or (xid NULL) the backend of
 * process "pid" that started at "started".
 */
Datum
tb_holder_alive(PG_FUNCTION_ARGS)
{
	if (!PG_ARGISNULL(2))
		PG_RETURN_BOOL(transaction_alive(PG_GETARG_FULLTRANSACTIONID(2)));
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		PG_RETURN_BOOL(false);
	PG_RETURN_BOOL(backend_alive(PG_GETARG_INT32(0), PG_GETARG_TIMESTAMPTZ(1)));
}

/* Remember to wake the queue of limit "name" when the transaction ends. */
static void
wake_later(const char *name, int len)
{
	MemoryContext old;
	ListCell   *cell;

	foreach(cell, wake_at_end)
	{
		const char *other = lfirst(cell);

		if (strlen(other) == (size_t) len && memcmp(other, name, len) == 0)
			return;
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	wake_at_end = lappend(wake_at_end, pnstrdup(name, len));
	MemoryContextSwitchTo(old);
}

/* Forget limit "held". */
static void
drop_held(HeldLease *held)
{
	pfree(held->name);
	pfree(held);
}

/*
 * The end of (sub)transaction "subid" (InvalidSubTransactionId: of the
 * whole transaction): the limits first leased from in it belong to
 * "parent" now (commit; invalid: kept for the session), or are forgotten,
 * their leases gone with the slots they took (abort).
 */
static void
end_of_xact(SubTransactionId subid, SubTransactionId parent, bool commit)
{
	ListCell   *cell;

	foreach(cell, held_leases)
	{
		HeldLease  *held = lfirst(cell);

		if (held->subid == InvalidSubTransactionId ||
			(subid != InvalidSubTransactionId && held->subid != subid))
			continue;
		if (commit)
			held->subid = parent;
		else
		{
			wake_later(held->name, held->len);
			drop_held(held);
			held_leases = foreach_delete_current(held_leases, cell);
		}
	}
}

/*
 * Transaction end (xact.c; a prepared transaction's as a commit): see
 * end_of_xact().
 */
void
lease_xact_end(bool commit)
{
	end_of_xact(InvalidSubTransactionId, InvalidSubTransactionId, commit);
}

/* Subtransaction end (xact.c): see end_of_xact(). */
void
lease_subxact_end(SubTransactionId mySubid, SubTransactionId parentSubid,
				  bool commit)
{
	end_of_xact(mySubid, parentSubid, commit);
}

/*
 * After a transaction's locks are released (xact.c; its transaction
 * leases, the row locks of what it released): wake the queues of what it
 * freed.
 */
void
lease_locks_released(void)
{
	List	   *names = wake_at_end;
	ListCell   *cell;

	if (names == NIL)
		return;
	wake_at_end = NIL;
	foreach(cell, names)
		wait_wake_limit(lfirst(cell), strlen(lfirst(cell)));
	list_free_deep(names);
}

/*
 * Session end (xact.c): wake the queues of the session's limits.  This
 * backend is still listed while this runs; a waiter woken looks again
 * within milliseconds until it is gone (wait_in_queue()).
 */
void
lease_exit(void)
{
	while (held_leases != NIL)
	{
		HeldLease  *held = linitial(held_leases);

		held_leases = list_delete_first(held_leases);
		wait_wake_limit(held->name, held->len);
		drop_held(held);
	}
}

/* Library load: memory limits' setting and shared memory, when preloading. */
void
lease_init(void)
{
	lease_memory_init();
}

/*
 * An installation (or a database: "relid" InvalidOid) is being dropped:
 * its memory leases go when the dropping transaction commits (its table
 * limits' leases are rows of its tables, and go with them).
 */
void
lease_forget_installation(Oid dbid, Oid relid)
{
	lease_memory_forget(dbid, relid, NULL);
}

/* How a lease is held. */
typedef enum LeaseHold
{
	HOLD_SESSION,
	HOLD_TRANSACTION
} LeaseHold;

/* The hold named "hold": 'session' or 'transaction'. */
static LeaseHold
parse_hold(text *hold)
{
	char	   *value = text_to_cstring(hold);

	if (strcmp(value, "session") == 0)
		return HOLD_SESSION;
	if (strcmp(value, "transaction") == 0)
		return HOLD_TRANSACTION;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("hold must be 'session' or 'transaction', not '%s'", value),
			 errdetail("A lease held for the session is freed when the session ends; one held for the transaction, when the transaction commits or rolls back."),
			 errhint("Either is freed earlier by tb_release() or by its ttl.")));
	pg_unreachable();
}

/* Microseconds of a ttl: finite and above zero. */
static double
ttl_usecs(Interval *ttl)
{
	double		usecs;

	if (!interval_usecs(ttl, &usecs))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must be a finite interval"),
				 errhint("Pass NULL for a lease freed only by its holder.")));
	if (usecs <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must be an interval above zero"),
				 errhint("Pass NULL for a lease freed only by its holder.")));
	return usecs;
}

/* Reject a limit name that is empty or too long. */
static void
check_limit_name(text *name)
{
	if (VARSIZE_ANY_EXHDR(name) == 0 || VARSIZE_ANY_EXHDR(name) > LIMIT_NAME_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("limit name must be 1 to %d bytes long, not %zu",
						LIMIT_NAME_MAX_BYTES, VARSIZE_ANY_EXHDR(name))));
}

/* Reject a max_in_flight below one. */
static void
check_max_in_flight(int32 max_in_flight)
{
	if (max_in_flight < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_in_flight must be 1 or more, not %d", max_in_flight)));
}

/* Fail: no limit "name", and no template makes it. */
static void
report_no_limit(text *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("limit \"%s\" does not exist", text_to_cstring(name)),
			 errhint("The DBA makes limits with tb_create_limit().")));
}

/*
 * The row that makes limit $1: its own, or its longest template's (none:
 * no row).
 */
#define LIMIT_ROW_OF_1 \
	"(SELECT r.max_in_flight, r.memory, r.template_len, r.template FROM" \
	" ((SELECT max_in_flight, memory, 0 AS template_len, NULL::text AS template" \
	"   FROM %1$s.tb_limits WHERE name OPERATOR(pg_catalog.=) $1)" \
	"  UNION ALL" \
	"  (SELECT max_in_flight, memory, pg_catalog.octet_length(name), name FROM %1$s.tb_limits" \
	"   WHERE name OPERATOR(pg_catalog.~~) '%%*'" \
	"   AND pg_catalog.starts_with($1, pg_catalog.left(name, -1))" \
	"   ORDER BY pg_catalog.octet_length(name) DESC LIMIT 1)" \
	"  LIMIT 1) AS r)"

/* The max_in_flight of table limit $1 (NULL: none, or a memory limit). */
#define LIMIT_OF_1 \
	"(SELECT m.max_in_flight FROM " LIMIT_ROW_OF_1 " AS m WHERE NOT m.memory)"

/*
 * A name's limit: its max_in_flight, whether it is a memory limit, the
 * length of its template's name (0: none), how many of its table slots up
 * to max_in_flight are made (a purge may leave some of a name's slots,
 * those leased while it ran), and for a memory template's name whether
 * that template alone makes every name after its prefix (no other limit
 * starts with it).  Read on the latest snapshot: a memory lease follows
 * only committed configuration.
 */
static KeptPlan limit_plan = {
	.sql = "SELECT l.max_in_flight, l.memory, l.template_len,"
	" (SELECT pg_catalog.count(*)::integer"
	"  FROM %1$s.tb_lease_slots AS s WHERE s.name OPERATOR(pg_catalog.=) $1"
	"  AND s.slot OPERATOR(pg_catalog.<=) l.max_in_flight AND NOT l.memory),"
	" l.memory AND l.template IS NOT NULL AND NOT EXISTS (SELECT FROM %1$s.tb_limits AS o"
	"  WHERE pg_catalog.starts_with(o.name, pg_catalog.left(l.template, -1))"
	"  AND o.name OPERATOR(pg_catalog.<>) l.template)"
	" FROM " LIMIT_ROW_OF_1 " AS l",
	.nargs = 1, .argtypes = {TEXTOID}
};

/* The slots 1 to $2 of $1 (whose key is $3) that are not made yet, free. */
static KeptPlan add_slots_plan = {
	.sql = "INSERT INTO %1$s.tb_lease_slots (name, slot, key)"
	" SELECT $1, g, $3 FROM pg_catalog.generate_series(1, $2) AS g"
	" ON CONFLICT DO NOTHING",
	.nargs = 3, .argtypes = {TEXTOID, INT4OID, INT4OID}
};

/* Make the slots 1 to "max_in_flight" of "name" that are not made yet. */
static void
add_slots(Oid relid, text *name, int32 max_in_flight)
{
	Datum		args[3] = {PointerGetDatum(name), Int32GetDatum(max_in_flight),
	Int32GetDatum(name_key(name))};

	(void) plan_run(&add_slots_plan, relid, args, NULL);
}

/*
 * Lease $7 slots of $1 (whose key is $8) at $5, under a new id (returned):
 * the lowest free ones within its max_in_flight, none another transaction
 * has locked; none while a lease holds a slot above it (the limit was
 * lowered: it waits to be back under it).  One statement: the lookup of
 * the limit, the id and the update.  Each slot returns too whether the
 * lease it takes over had expired or ended with its holder (counted then:
 * a table limit learns it only now).
 */
static KeptPlan take_plan = {
	.sql = "WITH l AS MATERIALIZED (SELECT " LIMIT_OF_1 " AS max_in_flight),"
	" f AS MATERIALIZED ("
	"  SELECT f.slot, f.lease IS NOT NULL"
	"   AND coalesce(f.expires OPERATOR(pg_catalog.<=) $5, false) AS expired,"
	"   f.lease IS NOT NULL"
	"   AND NOT coalesce(f.expires OPERATOR(pg_catalog.<=) $5, false) AS ended"
	"  FROM %1$s.tb_lease_slots AS f, l"
	"  WHERE f.name OPERATOR(pg_catalog.=) $1"
	"  AND f.slot OPERATOR(pg_catalog.<=) l.max_in_flight"
	"  AND (f.lease IS NULL OR f.expires OPERATOR(pg_catalog.<=) $5"
	"   OR NOT %1$s.tb_holder_alive(f.pid, f.started, f.xid))"
	"  AND NOT EXISTS (SELECT FROM %1$s.tb_lease_slots AS a"
	"   WHERE a.name OPERATOR(pg_catalog.=) $1"
	"   AND a.slot OPERATOR(pg_catalog.>) l.max_in_flight"
	"   AND a.lease IS NOT NULL"
	"   AND (a.expires IS NULL OR a.expires OPERATOR(pg_catalog.>) $5)"
	"   AND %1$s.tb_holder_alive(a.pid, a.started, a.xid))"
	"  ORDER BY f.slot LIMIT $7 FOR UPDATE OF f SKIP LOCKED)"
	" UPDATE %1$s.tb_lease_slots AS s"
	" SET lease = (SELECT ($8::pg_catalog.int8 OPERATOR(pg_catalog.*) 137438953472)"
	"   OPERATOR(pg_catalog.+) (pg_catalog.nextval('%1$s.tb_lease_ids'::pg_catalog.regclass)"
	"   OPERATOR(pg_catalog.%%) 137438953472)),"
	"  hold = $2, holder = $3, pid = $4, started = $9, xid = $10, since = $5, expires = $6"
	" FROM f WHERE s.name OPERATOR(pg_catalog.=) $1 AND s.slot OPERATOR(pg_catalog.=) f.slot"
	" RETURNING s.lease, f.expired, f.ended",
	.nargs = 10, .argtypes = {TEXTOID, TEXTOID, OIDOID, INT4OID,
		TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID, INT4OID, TIMESTAMPTZOID, XID8OID}
};

/*
 * Up to $3 free slots of $1 within its max_in_flight $2 at $4, none
 * another transaction has locked, locked: the slots a lease with a reserve
 * leaves free (reserve_left()).
 */
static KeptPlan reserve_plan = {
	.sql = "SELECT f.slot FROM %1$s.tb_lease_slots AS f"
	" WHERE f.name OPERATOR(pg_catalog.=) $1"
	" AND f.slot OPERATOR(pg_catalog.<=) $2"
	" AND (f.lease IS NULL OR f.expires OPERATOR(pg_catalog.<=) $4"
	"  OR NOT %1$s.tb_holder_alive(f.pid, f.started, f.xid))"
	" ORDER BY f.slot LIMIT $3 FOR UPDATE OF f SKIP LOCKED",
	.nargs = 4, .argtypes = {TEXTOID, INT4OID, INT4OID, TIMESTAMPTZOID}
};

/* When the first lease of $1 with a ttl ends, after $2. */
static KeptPlan next_expiry_plan = {
	.sql = "SELECT pg_catalog.min(expires) FROM %1$s.tb_lease_slots"
	" WHERE name OPERATOR(pg_catalog.=) $1 AND lease IS NOT NULL"
	" AND expires OPERATOR(pg_catalog.>) $2",
	.nargs = 2, .argtypes = {TEXTOID, TIMESTAMPTZOID}
};

/* What a lease asks for, and what it got. */
typedef struct LeaseAsk
{
	Oid			relid;
	Oid			limits;			/* its tb_limits: the counters' */
	Oid			caller;			/* the role that holds it */
	text	   *name;
	int32		slots;
	LeaseHold	hold;
	double		ttl_usecs;		/* <= 0: none */
	double		reserve;		/* share of max_in_flight to leave (0: none) */
	TimestampTz now;			/* for lease_take_step() */
	int64		lease;			/* the id, once granted */
	bool		memory;			/* its limit is a memory limit */
	TimestampTz ready;			/* a memory limit full: its first ttl's end */
	int			template_len;	/* its template's name length, when known;
								 * else -1 */
} LeaseAsk;

/* Its template's name length, for the counters: 0 for none. */
static KeptPlan template_plan = {
	.sql = "SELECT r.template_len FROM " LIMIT_ROW_OF_1 " AS r",
	.nargs = 1, .argtypes = {TEXTOID}
};

/* stats_count() template_of: the length of the name of limit "arg"'s template. */
static int
limit_template_len(void *arg)
{
	LeaseAsk   *ask = arg;
	Datum		args[1] = {PointerGetDatum(ask->name)};
	bool		isnull;
	int			len = 0;

	if (plan_run(&template_plan, ask->relid, args, NULL) == 1)
	{
		len = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
										  1, &isnull));
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
	}
	return len;
}

/*
 * Count "delta" for the limit of "ask" when the transaction ends (its
 * grants and slots freed only if it commits), under its tb_limits.
 */
static void
count_limit(LeaseAsk *ask, const StatsCounters *delta)
{
	if (!stats_enabled() || !OidIsValid(ask->limits))
		return;
	stats_count(ask->limits, ask->name, delta, ask->template_len, limit_template_len,
				ask, NULL, GetCurrentTimestamp());
}

/* Count a lease decided without waiting: granted (with its slots), or refused. */
static void
count_lease(LeaseAsk *ask, bool granted)
{
	StatsCounters delta = {0};

	if (granted)
	{
		delta.granted = 1;
		delta.granted_tokens = ask->slots;
	}
	else
		delta.denied = 1;
	count_limit(ask, &delta);
}

/* A name's limit, as limit_plan reads it. */
typedef struct LimitFound
{
	int32		max_in_flight;
	bool		memory;
	int			template_len;
	int32		made;			/* table slots made, up to max_in_flight */
	bool		alone;			/* its memory template makes every name
								 * after its prefix */
} LimitFound;

/*
 * The limit of "ask", committed (and this transaction's own), into
 * *found; false if there is none.
 */
static bool
limit_lookup(LeaseAsk *ask, LimitFound *found)
{
	Datum		args[1] = {PointerGetDatum(ask->name)};
	HeapTuple	row;
	TupleDesc	desc;
	bool		isnull;

	if (plan_run_latest(&limit_plan, ask->relid, args, NULL) == 0)
		return false;
	row = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	found->max_in_flight = DatumGetInt32(SPI_getbinval(row, desc, 1, &isnull));
	found->memory = DatumGetBool(SPI_getbinval(row, desc, 2, &isnull));
	found->template_len = DatumGetInt32(SPI_getbinval(row, desc, 3, &isnull));
	found->made = DatumGetInt32(SPI_getbinval(row, desc, 4, &isnull));
	if (isnull)
		found->made = 0;
	found->alone = DatumGetBool(SPI_getbinval(row, desc, 5, &isnull)) && !isnull;
	SPI_freetuptable(SPI_tuptable);
	SPI_tuptable = NULL;
	ask->template_len = found->template_len;
	return true;
}

/*
 * The slots a lease with "reserve" must leave free of a limit of
 * "max_in_flight": reserve x max_in_flight, rounded up to a whole slot
 * (to within BUCKET_RESERVE_SLACK, as for a bucket, so that 0.2 of 10 is
 * 2, not 3).
 */
static int32
reserve_slots(int32 max_in_flight, double reserve)
{
	double		keep = ceil(reserve * max_in_flight -
							max_in_flight * BUCKET_RESERVE_SLACK);

	return keep > 0 ? (int32) keep : 0;
}

/*
 * Memory limits' configuration as this backend read it, by name: while
 * no change of tb_limits has committed since (the configuration
 * generation is the same), a lease from one runs no statement at all.
 */
#define CACHED_LIMITS 64
typedef struct CachedLimit
{
	uint64		generation;		/* lease_memory_config_generation() before
								 * it was read; 0: empty */
	Oid			relid;
	int			len;
	char		name[MEMORY_LIMIT_NAME_MAX];
	LimitFound	limit;
} CachedLimit;

static CachedLimit cached_limits[CACHED_LIMITS];

/* The cache's place for limit "name". */
static CachedLimit *
cached_slot(text *name)
{
	return &cached_limits[hash_bytes((const unsigned char *) VARDATA_ANY(name),
									 VARSIZE_ANY_EXHDR(name)) % CACHED_LIMITS];
}

/* A generation for the lookups below: whatever was read, current or not. */
#define ANY_GENERATION PG_UINT64_MAX

/* Whether "cached" was read at "generation" (an empty one never was). */
static bool
cached_at(const CachedLimit *cached, uint64 generation)
{
	return cached->generation != 0 &&
		(generation == ANY_GENERATION || cached->generation == generation);
}

/* The memory limit "name" of "relid" as read at "generation", or NULL. */
static CachedLimit *
cached_limit(Oid relid, text *name, uint64 generation)
{
	CachedLimit *cached = cached_slot(name);

	if (!cached_at(cached, generation) || cached->relid != relid ||
		cached->len != (int) VARSIZE_ANY_EXHDR(name) ||
		memcmp(cached->name, VARDATA_ANY(name), cached->len) != 0)
		return NULL;
	return cached;
}

/*
 * Memory templates that alone make every name after their prefix, as this
 * backend read them (the names a template makes are too many to keep one
 * by one): a name after one of these prefixes is that template's.
 */
#define CACHED_TEMPLATES 8
static CachedLimit cached_templates[CACHED_TEMPLATES];	/* name: the prefix */
static int	next_cached_template = 0;

/* The memory template whose prefix "name" starts with, read at "generation", or NULL. */
static CachedLimit *
cached_template(Oid relid, text *name, uint64 generation)
{
	int			len = VARSIZE_ANY_EXHDR(name);

	for (int i = 0; i < CACHED_TEMPLATES; i++)
	{
		CachedLimit *cached = &cached_templates[i];

		if (cached_at(cached, generation) && cached->relid == relid &&
			len >= cached->len && memcmp(cached->name, VARDATA_ANY(name), cached->len) == 0)
			return cached;
	}
	return NULL;
}

/* What the cache holds for limit "name" of "relid", read at "generation", or NULL. */
static CachedLimit *
cached_entry(Oid relid, text *name, uint64 generation)
{
	CachedLimit *cached = cached_limit(relid, name, generation);

	return cached ? cached : cached_template(relid, name, generation);
}

/*
 * Keep memory limit "limit" of "name", read at "generation"; a template
 * that alone makes the names after its prefix, under its prefix.  A table
 * limit is not kept, and what was kept for its name is forgotten: what
 * the cache holds, current or not, is also the hint that a name is a
 * memory limit's (lease_take_or_refuse()).
 */
static void
cache_limit(Oid relid, text *name, uint64 generation, const LimitFound *limit)
{
	CachedLimit *cached = cached_slot(name);
	int			len = VARSIZE_ANY_EXHDR(name);

	if (!limit->memory)
	{
		while ((cached = cached_entry(relid, name, ANY_GENERATION)) != NULL)
			cached->generation = 0;
		return;
	}
	if (generation == 0 || len > MEMORY_LIMIT_NAME_MAX)
		return;
	if (limit->alone && limit->template_len > 0)
	{
		cached = &cached_templates[next_cached_template];
		next_cached_template = (next_cached_template + 1) % CACHED_TEMPLATES;
		len = limit->template_len - 1;
	}
	cached->generation = generation;
	cached->relid = relid;
	cached->len = len;
	memcpy(cached->name, VARDATA_ANY(name), len);
	cached->limit = *limit;
}

/*
 * Fail if limit "found" can never grant ask->slots (with its reserve).
 */
static void
check_slots(LeaseAsk *ask, const LimitFound *found)
{
	if (ask->slots > found->max_in_flight)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%d slots can never be leased from limit \"%s\"",
						ask->slots, text_to_cstring(ask->name)),
				 errdetail("A lease takes at most the limit's max_in_flight slots.")));
	if (ask->slots > found->max_in_flight - reserve_slots(found->max_in_flight, ask->reserve))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%d slots with reserve %s can never be leased from limit \"%s\"",
						ask->slots, float8out_internal(ask->reserve),
						text_to_cstring(ask->name)),
				 errdetail("A lease with a reserve leaves that share of the limit's max_in_flight slots free, rounded up to whole slots, and takes at most the rest."),
				 errhint("Lease fewer slots, ask with a smaller reserve, or have the limit raised with tb_alter_limit().")));
}

/*
 * The limit of "ask"; fail if there is none, or it can never grant
 * ask->slots (with its reserve).  A memory limit's is kept in the cache.
 */
static LimitFound
find_limit(LeaseAsk *ask)
{
	uint64		generation = lease_memory_config_generation();
	LimitFound	found;

	if (!limit_lookup(ask, &found))
		report_no_limit(ask->name);
	check_slots(ask, &found);
	cache_limit(ask->relid, ask->name, generation, &found);
	return found;
}

/* reserve_left()'s look, in a subtransaction rolled back after it. */
typedef struct ReserveLook
{
	LeaseAsk   *ask;
	int32		max_in_flight;
	int32		keep;
	TimestampTz now;
	uint64		free;			/* what it found */
} ReserveLook;

static bool
reserve_look_step(void *arg)
{
	ReserveLook *look = arg;
	Datum		args[4] = {PointerGetDatum(look->ask->name),
		Int32GetDatum(look->max_in_flight), Int32GetDatum(look->keep),
	TimestampTzGetDatum(look->now)};

	look->free = plan_run(&reserve_plan, look->ask->relid, args, NULL);
	return false;				/* let go of the slots it locked */
}

/*
 * Whether the table limit of "ask", its slots just taken by this
 * transaction, still has the slots its reserve keeps free at "now": free,
 * and locked by no other transaction (one taking or releasing a slot
 * counts as holding it).  They are locked to be counted (two leases
 * deciding at once never count the same free slot) and let go at once (a
 * subtransaction rolled back), so nobody else ever sees them held.
 */
static bool
reserve_left(LeaseAsk *ask, TimestampTz now)
{
	ReserveLook look = {.ask = ask, .now = now};
	LimitFound	limit;

	if (!limit_lookup(ask, &limit))
		return false;			/* dropped meanwhile */
	look.max_in_flight = limit.max_in_flight;
	look.keep = reserve_slots(look.max_in_flight, ask->reserve);
	if (look.keep == 0)
		return true;
	(void) subxact_run(reserve_look_step, &look, 0, NULL);
	return look.free >= (uint64) look.keep;
}

/*
 * A lease of memory limit "limit" for "ask" at "now"; false when it is
 * full (ask->ready: when its first ttl ends), or when the limit was
 * dropped meanwhile ("stale": look it up again).
 */
static bool
lease_memory(LeaseAsk *ask, const LimitFound *limit, uint64 generation,
			 TimestampTz now, bool *stale)
{
	MemoryLeaseAsk memory = {
		.relid = ask->relid,
		.stats_relid = ask->limits,
		.name = ask->name,
		.template_len = limit->template_len,
		.max_in_flight = limit->max_in_flight,
		.slots = ask->slots,
		.keep = reserve_slots(limit->max_in_flight, ask->reserve),
		.session = ask->hold == HOLD_SESSION,
		.ttl_usecs = ask->ttl_usecs,
		.holder = ask->caller,
		.generation = generation,
	};
	MemoryLeaseTaken taken = lease_memory_take(&memory, now, &ask->lease, &ask->ready);

	*stale = taken == MEMORY_LEASE_STALE;
	return taken == MEMORY_LEASE_GRANTED;
}

/* Remember that this session leased from limit "name" (HeldLease). */
static void
remember_limit(text *name)
{
	const char *data = VARDATA_ANY(name);
	int			len = VARSIZE_ANY_EXHDR(name);
	MemoryContext old;
	HeldLease  *held;
	ListCell   *cell;

	foreach(cell, held_leases)
	{
		held = lfirst(cell);
		if (held->len == len && memcmp(held->name, data, len) == 0)
			return;
	}
	if (list_length(held_leases) >= MAX_HELD_LIMITS)
		return;
	old = MemoryContextSwitchTo(TopMemoryContext);
	held = palloc(sizeof(HeldLease));
	held->name = pnstrdup(data, len);
	held->len = len;
	held->subid = GetCurrentSubTransactionId();
	held_leases = lappend(held_leases, held);
	MemoryContextSwitchTo(old);
}

/*
 * Take the slots of "ask" at "now", all or (returning false) not all:
 * the caller rolls back a partial take (lease_take_whole()).  The slots name their holder:
 * this session, or this transaction.
 */
static bool
lease_take(LeaseAsk *ask, TimestampTz now)
{
	Datum		args[10];
	char		nulls[11] = "          ";
	bool		isnull;
	StatsCounters freed = {0};

	args[0] = PointerGetDatum(ask->name);
	args[1] = CStringGetTextDatum(ask->hold == HOLD_SESSION ? "session" : "transaction");
	args[2] = ObjectIdGetDatum(ask->caller);
	args[3] = Int32GetDatum(MyProcPid);
	args[4] = TimestampTzGetDatum(now);
	if (ask->ttl_usecs > 0)
		args[5] = TimestampTzGetDatum(timestamp_saturate((double) now + ask->ttl_usecs));
	else
	{
		args[5] = (Datum) 0;
		nulls[5] = 'n';
	}
	args[6] = Int32GetDatum(ask->slots);
	args[7] = Int32GetDatum(name_key(ask->name));
	args[8] = TimestampTzGetDatum(MyStartTimestamp);
	if (ask->hold == HOLD_TRANSACTION)
		args[9] = FullTransactionIdGetDatum(GetTopFullTransactionId());
	else
	{
		args[9] = (Datum) 0;
		nulls[9] = 'n';
	}

	if (plan_run(&take_plan, ask->relid, args, nulls) != (uint64) ask->slots)
	{
		if (SPI_tuptable != NULL)
			SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
		return false;
	}
	ask->lease = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											 SPI_tuptable->tupdesc, 1, &isnull));
	/* the slots taken over from leases that had ended or expired */
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	row = SPI_tuptable->vals[i];

		freed.expired += DatumGetBool(SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &isnull));
		freed.ended += DatumGetBool(SPI_getbinval(row, SPI_tuptable->tupdesc, 3, &isnull));
	}
	SPI_freetuptable(SPI_tuptable);
	SPI_tuptable = NULL;
	if (ask->reserve > 0 && !reserve_left(ask, now))
		return false;			/* the caller rolls the take back */
	if (freed.expired > 0 || freed.ended > 0)
		count_limit(ask, &freed);

	if (ask->hold == HOLD_SESSION)
		remember_limit(ask->name);
	else
		wake_later(VARDATA_ANY(ask->name), VARSIZE_ANY_EXHDR(ask->name));
	return true;
}

/* subxact_run() step: lease_take() at ask->now. */
static bool
lease_take_step(void *arg)
{
	LeaseAsk   *ask = arg;

	return lease_take(ask, ask->now);
}

/*
 * lease_take(), all or nothing: a lease of several slots, or with a
 * reserve, runs in a subtransaction of its own, so that finding fewer free
 * (or the reserve short) leaves none taken (nor its rows locked).
 */
static bool
lease_take_whole(LeaseAsk *ask, TimestampTz now)
{
	if (ask->slots == 1 && ask->reserve == 0)
		return lease_take(ask, now);
	ask->now = now;
	return subxact_run(lease_take_step, ask, 0, NULL);
}

/*
 * lease_take_whole(); refused, the limit looked up (its errors): a memory
 * limit's lease taken in shared memory, or a table limit lacking slots
 * made and tried once more.  A name the cache holds, even as read before
 * the last change of tb_limits, was a memory limit's: it is looked up
 * first, so that a memory lease runs one statement, not two.
 */
static bool
lease_take_or_refuse(LeaseAsk *ask, TimestampTz now)
{
	bool		table_tried = false;

	ask->memory = false;
	if (cached_entry(ask->relid, ask->name, ANY_GENERATION) == NULL)
	{
		if (lease_take_whole(ask, now))
			return true;
		table_tried = true;
	}
	for (;;)
	{
		uint64		generation = lease_memory_generation();
		LimitFound	limit = find_limit(ask);
		bool		stale;

		ask->memory = limit.memory;
		if (!limit.memory)
		{
			if (!table_tried && lease_take_whole(ask, now))
				return true;
			if (limit.made >= limit.max_in_flight)
				return false;
			add_slots(ask->relid, ask->name, limit.max_in_flight);
			return lease_take_whole(ask, now);
		}
		if (lease_memory(ask, &limit, generation, now, &stale))
			return true;
		if (!stale)
			return false;
	}
}

/* lease_take_or_refuse() at the clock's time, counted. */
static bool
lease_step(void *arg)
{
	LeaseAsk   *ask = arg;
	bool		granted = lease_take_or_refuse(ask, GetCurrentTimestamp());

	count_lease(ask, granted);
	return granted;
}

/*
 * wait_in_queue() attempt: lease_take_or_refuse(); refused, *ready is
 * when the first ttl among the slots held ends.
 */
static bool
lease_attempt(void *arg, TimestampTz now, TimestampTz *ready)
{
	LeaseAsk   *ask = arg;
	Datum		args[2] = {PointerGetDatum(ask->name), TimestampTzGetDatum(now)};
	bool		isnull;
	Datum		expiry;

	if (lease_take_or_refuse(ask, now))
		return true;
	*ready = DT_NOEND;
	if (ask->memory)
		*ready = ask->ready;
	else if (plan_run(&next_expiry_plan, ask->relid, args, NULL) == 1)
	{
		expiry = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		if (!isnull)
			*ready = DatumGetTimestampTz(expiry);
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
	}
	return false;
}

/* subxact_run() step of lease_with(): the lease, then the rest. */
typedef struct LeaseAndThen
{
	LeaseAsk   *ask;
	bool		(*and_then) (void *arg);
	void	   *arg;
} LeaseAndThen;

static bool
lease_and_then_step(void *arg)
{
	LeaseAndThen *both = arg;

	return lease_step(both->ask) && both->and_then(both->arg);
}

/*
 * A lease of "ask" from a memory limit whose configuration is cached and
 * current: no statement at all.  False when it cannot be taken so (not
 * cached, changed since, or a limit dropped meanwhile: the caller takes
 * the way that reads the configuration); otherwise *granted says.
 */
static bool
lease_fast(FunctionCallInfo fcinfo, LeaseAsk *ask, bool *granted)
{
	/* leases dropped from before the configuration is checked: see lease_memory.c */
	uint64		generation = lease_memory_generation();
	const CachedLimit *cached;
	const LimitFound *limit;
	bool		stale;

	uint64		config = lease_memory_config_generation();

	ask->relid = installation_table(fcinfo);
	cached = config != 0 ? cached_entry(ask->relid, ask->name, config) : NULL;
	if (cached == NULL)
		return false;
	limit = &cached->limit;
	ask->limits = installation_limits(fcinfo);
	ask->caller = GetUserId();
	ask->template_len = limit->template_len;
	ask->memory = true;
	check_slots(ask, limit);
	*granted = lease_memory(ask, limit, generation, GetCurrentTimestamp(), &stale);
	if (stale)
		return false;
	count_lease(ask, *granted);
	return true;
}

/*
 * Lease what "request" asks for (waiting until "deadline" with "wait";
 * with request->and_then, all or nothing with what it takes, which runs
 * after the lease is granted, in the same subtransaction).  Returns
 * whether the lease was granted, its id in *lease.
 */
bool
lease_with(FunctionCallInfo fcinfo, const LeaseRequest *request, bool wait,
		   TimestampTz deadline, int64 *lease)
{
	LeaseAsk	ask = {0};
	SpiSession	session;
	bool		granted;
	int64		waited_usecs;

	ask.name = request->name;
	ask.slots = request->slots;
	ask.hold = parse_hold(request->hold);
	ask.ttl_usecs = request->ttl == NULL ? 0 : ttl_usecs(request->ttl);
	ask.reserve = request->reserve;
	check_limit_name(ask.name);
	if (is_template_name(ask.name))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("limit name \"%s\" is a template, not a limit",
						text_to_cstring(ask.name)),
				 errdetail("A name ending in * is a template: it makes a limit for each name that starts with its prefix."),
				 errhint("Lease from a name after the prefix, as in 'user:42' for 'user:*'.")));
	if (ask.slots < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("slots must be 1 or more, not %d", ask.slots)));

	if (!wait && request->and_then == NULL && lease_fast(fcinfo, &ask, &granted))
	{
		*lease = ask.lease;
		return granted;
	}

	session = spi_begin(fcinfo, true);
	ask.relid = installation_table(fcinfo);
	ask.limits = installation_limits(fcinfo);
	ask.caller = session.userid;
	ask.template_len = -1;
	if (wait)
	{
		/* cancelled until it says how it ended (an error ends it so) */
		StatsCounters delta = {.cancelled = 1};

		count_limit(&ask, &delta);
		granted = wait_in_queue(VARDATA_ANY(ask.name), VARSIZE_ANY_EXHDR(ask.name),
								deadline, lease_attempt, &ask, &waited_usecs);
		delta.cancelled = -1;
		delta.granted = granted ? 1 : 0;
		delta.granted_tokens = granted ? ask.slots : 0;
		delta.timeouts = granted ? 0 : 1;
		delta.waited = waited_usecs >= 0 ? 1 : 0;
		delta.wait_usecs = Max(waited_usecs, 0);
		count_limit(&ask, &delta);
	}
	else if (request->and_then != NULL)
	{
		LeaseAndThen both = {&ask, request->and_then, request->and_then_arg};

		granted = subxact_run(lease_and_then_step, &both, 0, NULL);
	}
	else
		granted = lease_step(&ask);
	spi_end(&session);
	*lease = ask.lease;
	return granted;
}

/* The LeaseRequest of tb_lease's and tb_lease_wait's arguments. */
static LeaseRequest
request_from_args(FunctionCallInfo fcinfo)
{
	LeaseRequest request = {
		.name = PG_GETARG_TEXT_PP(0),
		.slots = PG_GETARG_INT32(1),
		.hold = PG_GETARG_TEXT_PP(2),
		.ttl = PG_ARGISNULL(3) ? NULL : PG_GETARG_INTERVAL_P(3)
	};

	return request;
}

PG_FUNCTION_INFO_V1(tb_lease);

/*
 * tb_lease(name, slots, hold, ttl, reserve): lease "slots" slots of limit
 * "name"; the lease id, or NULL (nothing taken) when they are not free (or
 * would not leave the reserve's share of slots free; NULL: no reserve).
 */
Datum
tb_lease(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_lease", ARG_MAY_BE_NULL(3) | ARG_MAY_BE_NULL(4),
	{"name", "slots", "hold", "ttl", "reserve"}};
	int64		id;

	LeaseRequest request;

	check_not_null(fcinfo, &args);
	request = request_from_args(fcinfo);
	request.reserve = reserve_arg(fcinfo, 4);
	if (!lease_with(fcinfo, &request, false, 0, &id))
		PG_RETURN_NULL();
	PG_RETURN_INT64(id);
}

PG_FUNCTION_INFO_V1(tb_lease_wait);

/*
 * tb_lease_wait(name, slots, hold, ttl, timeout, reserve): tb_lease,
 * waiting in arrival order until the slots are free (with the reserve's
 * besides), or NULL once "timeout" passed (NULL: no limit but
 * statement_timeout).
 */
Datum
tb_lease_wait(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_lease_wait",
		ARG_MAY_BE_NULL(3) | ARG_MAY_BE_NULL(4) | ARG_MAY_BE_NULL(5),
	{"name", "slots", "hold", "ttl", "timeout", "reserve"}};
	TimestampTz deadline;
	LeaseRequest request;
	int64		id;

	check_not_null(fcinfo, &args);
	deadline = deadline_after(PG_ARGISNULL(4) ? NULL : PG_GETARG_INTERVAL_P(4),
							  GetCurrentTimestamp());
	request = request_from_args(fcinfo);
	request.reserve = reserve_arg(fcinfo, 5);
	if (!lease_with(fcinfo, &request, true, deadline, &id))
		PG_RETURN_NULL();
	PG_RETURN_INT64(id);
}

/*
 * Free the slots of lease $1 (of key $5), held (its ttl not passed at $4,
 * its holder there), if the caller, $3, may: the DBA ($2), the holder's
 * role, or a member of it ("since" stays: when the slot was last leased,
 * for tb_purge).  Returns the limit's name per slot.
 */
static KeptPlan release_plan = {
	.sql = "UPDATE %1$s.tb_lease_slots"
	" SET lease = NULL, hold = NULL, holder = NULL, pid = NULL, started = NULL,"
	" xid = NULL, expires = NULL"
	" WHERE key OPERATOR(pg_catalog.=) $5 AND lease OPERATOR(pg_catalog.=) $1"
	" AND (expires IS NULL OR expires OPERATOR(pg_catalog.>) $4)"
	" AND %1$s.tb_holder_alive(pid, started, xid)"
	" AND CASE WHEN $2 OR holder OPERATOR(pg_catalog.=) $3 THEN true"
	"  ELSE EXISTS (SELECT FROM pg_catalog.pg_roles AS r"
	"   WHERE r.oid OPERATOR(pg_catalog.=) holder)"
	"  AND pg_catalog.pg_has_role($3, holder, 'USAGE') END"
	" RETURNING name",
	.nargs = 5, .argtypes = {INT8OID, BOOLOID, OIDOID, TIMESTAMPTZOID, INT4OID}
};

/*
 * tb_release() of a memory lease: freed when the transaction commits, in
 * shared memory, with no statement run.
 */
static bool
release_memory(FunctionCallInfo fcinfo, int64 id)
{
	Oid			caller = GetUserId();
	char	   *name = NULL;
	int32		slots = 0;
	int			template_len = 0;

	switch (lease_memory_release(installation_table(fcinfo), id, caller,
								 has_privs_of_role(caller, installation_owner(fcinfo)),
								 GetCurrentTimestamp(), &name, &slots, &template_len))
	{
		case MEMORY_RELEASE_FREED:
			count_limit(&(LeaseAsk) {.relid = installation_table(fcinfo),
						.limits = installation_limits(fcinfo),
						.name = cstring_to_text(name), .template_len = template_len},
						&(StatsCounters) {.released = slots});
			return true;
		case MEMORY_RELEASE_DENIED:
			/* answered as an id that holds nothing: see tb_release() */
		case MEMORY_RELEASE_NONE:
			break;
	}
	return false;
}

PG_FUNCTION_INFO_V1(tb_release);

/*
 * tb_release(lease): free the lease's slots; false when it held none (it
 * was released, its ttl passed, or its holder is gone).  Its holder's
 * role (or a member of it) may, and the extension's owner; to anyone else
 * a lease held is answered as one that holds nothing (false, no error),
 * so that neither its limit nor whether it is held shows.
 */
Datum
tb_release(PG_FUNCTION_ARGS)
{
	static const ArgsSpec spec = {"tb_release", 0, {"lease"}};
	int64		id = PG_GETARG_INT64(0);
	bool		freed = false;
	Datum		args[5];
	SpiSession	session;
	Oid			relid;
	bool		isnull;

	check_not_null(fcinfo, &spec);
	if (LEASE_IS_MEMORY(id))
		PG_RETURN_BOOL(release_memory(fcinfo, id));
	session = spi_begin(fcinfo, true);
	relid = installation_table(fcinfo);
	args[0] = Int64GetDatum(id);
	args[1] = BoolGetDatum(has_privs_of_role(session.userid, installation_owner(fcinfo)));
	args[2] = ObjectIdGetDatum(session.userid);
	args[3] = TimestampTzGetDatum(GetCurrentTimestamp());
	args[4] = Int32GetDatum(lease_key(id));
	if (plan_run(&release_plan, relid, args, NULL) > 0)
	{
		text	   *name = DatumGetTextPP(SPI_getbinval(SPI_tuptable->vals[0],
														SPI_tuptable->tupdesc, 1, &isnull));
		int32		slots = (int32) SPI_processed;

		name = (text *) pg_detoast_datum_copy((struct varlena *) name);
		wake_later(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
		freed = true;
		count_limit(&(LeaseAsk) {.relid = relid, .limits = installation_limits(fcinfo),
					.name = name, .template_len = -1},
					&(StatsCounters) {.released = slots});
	}
	spi_end(&session);
	PG_RETURN_BOOL(freed);
}

/* A new limit; nothing when the name is taken. */
static KeptPlan create_limit_plan = {
	.sql = "INSERT INTO %1$s.tb_limits (name, max_in_flight, memory) VALUES ($1, $2, $3)"
	" ON CONFLICT (name) DO NOTHING",
	.nargs = 3, .argtypes = {TEXTOID, INT4OID, BOOLOID}
};

/*
 * The limit of tb_create_limit's or tb_ensure_limit's arguments (name,
 * max_in_flight, memory), made in the SPI session begun; false when the
 * name is taken.  1.6 declared tb_create_limit without "memory".
 */
static bool
create_limit(FunctionCallInfo fcinfo)
{
	text	   *name = PG_GETARG_TEXT_PP(0);
	int32		max_in_flight = PG_GETARG_INT32(1);
	bool		memory = PG_NARGS() > 2 && PG_GETARG_BOOL(2);
	Datum		args[3] = {PointerGetDatum(name), Int32GetDatum(max_in_flight),
	BoolGetDatum(memory)};
	Oid			relid = installation_table(fcinfo);

	check_limit_name(name);
	check_max_in_flight(max_in_flight);
	if (memory)
	{
		lease_memory_require();
		if (VARSIZE_ANY_EXHDR(name) > (Size) lease_memory_name_max())
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("memory limit name must be 1 to %d bytes long, not %zu",
							lease_memory_name_max(), VARSIZE_ANY_EXHDR(name)),
					 errdetail("A memory limit's name is kept in shared memory, in a fixed space.")));
	}
	if (plan_run(&create_limit_plan, relid, args, NULL) == 0)
		return false;
	/* a named table limit's slots now, so that the first lease need not make them */
	if (!is_template_name(name) && !memory)
		add_slots(relid, name, max_in_flight);
	return true;
}

PG_FUNCTION_INFO_V1(tb_create_limit);

/*
 * tb_create_limit(name, max_in_flight, memory): a limit of at most
 * max_in_flight slots held at once; a name ending in * is a template.
 * With memory, its leases are kept in shared memory (1.6 declared it
 * without "memory").
 */
Datum
tb_create_limit(PG_FUNCTION_ARGS)
{
	static const ArgsSpec spec = {"tb_create_limit", 0, {"name", "max_in_flight", "memory"}};
	SpiSession	session;

	check_not_null(fcinfo, &spec);
	session = spi_begin(fcinfo, true);
	if (!create_limit(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_UNIQUE_VIOLATION),
				 errmsg("limit \"%s\" already exists", text_to_cstring(PG_GETARG_TEXT_PP(0))),
				 errhint("Change it with tb_alter_limit(), or remove it with tb_drop().")));
	spi_end(&session);
	PG_RETURN_VOID();
}

/* New settings for a limit. */
static KeptPlan alter_limit_plan = {
	.sql = "UPDATE %1$s.tb_limits SET max_in_flight = $2"
	" WHERE name OPERATOR(pg_catalog.=) $1",
	.nargs = 2, .argtypes = {TEXTOID, INT4OID}
};

PG_FUNCTION_INFO_V1(tb_alter_limit);

/*
 * tb_alter_limit(name, max_in_flight): a new max_in_flight.  Leases held
 * are kept; after a lowering, new ones wait until those above the new
 * maximum are freed.  Waiters are woken: a raise may let them in.
 */
Datum
tb_alter_limit(PG_FUNCTION_ARGS)
{
	static const ArgsSpec spec = {"tb_alter_limit", 0, {"name", "max_in_flight"}};
	text	   *name;
	int32		max_in_flight = PG_GETARG_INT32(1);
	Datum		args[2];
	SpiSession	session;

	check_not_null(fcinfo, &spec);
	name = PG_GETARG_TEXT_PP(0);
	args[0] = PointerGetDatum(name);
	args[1] = Int32GetDatum(max_in_flight);
	check_limit_name(name);
	check_max_in_flight(max_in_flight);
	session = spi_begin(fcinfo, true);
	if (plan_run(&alter_limit_plan, installation_table(fcinfo), args, NULL) == 0)
		report_no_limit(name);
	spi_end(&session);
	wake_later(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
	PG_RETURN_VOID();
}

/* A limit's settings, as committed (or as this transaction wrote them). */
static KeptPlan limit_settings_plan = {
	.sql = "SELECT max_in_flight, memory FROM %1$s.tb_limits WHERE name OPERATOR(pg_catalog.=) $1",
	.nargs = 1, .argtypes = {TEXTOID}
};

PG_FUNCTION_INFO_V1(tb_ensure_limit);

/*
 * tb_ensure_limit(name, max_in_flight, memory): tb_create_limit's limit,
 * made when missing ('created'), given this max_in_flight when it has
 * another ('changed': as tb_alter_limit, leases held are kept), or left
 * as it is ('unchanged').  A limit of the other kind is refused: where
 * its leases live is chosen when it is made.  A second session ensuring
 * a limit another has just made waits for that transaction, then finds
 * it (or, after a rollback, makes it).
 */
Datum
tb_ensure_limit(PG_FUNCTION_ARGS)
{
	static const ArgsSpec spec = {"tb_ensure_limit", 0, {"name", "max_in_flight", "memory"}};
	const char *did = "created";
	SpiSession	session;

	check_not_null(fcinfo, &spec);
	session = spi_begin(fcinfo, true);
	for (int attempt = 0; !create_limit(fcinfo); attempt++)
	{
		text	   *name = PG_GETARG_TEXT_PP(0);
		int32		max_in_flight = PG_GETARG_INT32(1);
		Datum		args[2] = {PointerGetDatum(name), Int32GetDatum(max_in_flight)};
		bool		isnull;
		int32		old_max;
		bool		old_memory;

		/* taken, and then dropped before it could be read: make it again */
		if (plan_run_latest(&limit_settings_plan, installation_table(fcinfo), args, NULL) == 0)
		{
			if (attempt == 2)
				report_no_limit(name);
			continue;
		}
		old_max = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		old_memory = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
		if (old_memory != PG_GETARG_BOOL(2))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("limit \"%s\" keeps its leases in %s, not in %s", text_to_cstring(name),
							old_memory ? "shared memory" : "the table",
							old_memory ? "the table" : "shared memory"),
					 errdetail("Where a limit's leases live is chosen when it is made; tb_ensure_limit changes its max_in_flight in place, not its kind."),
					 errhint("Drop it with tb_drop() and ensure it again, or ensure it with memory => %s.",
							 old_memory ? "true" : "false")));
		did = "unchanged";
		if (old_max != max_in_flight)
		{
			did = "changed";
			(void) plan_run(&alter_limit_plan, installation_table(fcinfo), args, NULL);
			wake_later(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
		}
		break;
	}
	spi_end(&session);
	PG_RETURN_TEXT_P(cstring_to_text(did));
}

/*
 * The slots of the names templates made (no limit row of their own) that
 * hold no lease, and were last leased before $2 (none since: since is
 * NULL), all of a name's or none; a slot leased meanwhile is kept (the
 * next lease makes the rest again).  How many names went.
 */
static KeptPlan purge_plan = {
	.sql = "WITH idle AS ("
	"  SELECT k.name FROM %1$s.tb_lease_slots AS k"
	"  WHERE NOT EXISTS (SELECT FROM %1$s.tb_limits AS l"
	"   WHERE l.name OPERATOR(pg_catalog.=) k.name)"
	"  GROUP BY k.name"
	"  HAVING pg_catalog.bool_and(k.lease IS NULL"
	"   OR coalesce(k.expires OPERATOR(pg_catalog.<=) $1, false)"
	"   OR NOT %1$s.tb_holder_alive(k.pid, k.started, k.xid))"
	"  AND coalesce(pg_catalog.max(k.since), '-infinity') OPERATOR(pg_catalog.<) $2),"
	" gone AS (DELETE FROM %1$s.tb_lease_slots AS s USING idle"
	"  WHERE s.name OPERATOR(pg_catalog.=) idle.name"
	"  AND (s.lease IS NULL OR s.expires OPERATOR(pg_catalog.<=) $1"
	"   OR NOT %1$s.tb_holder_alive(s.pid, s.started, s.xid))"
	"  RETURNING s.name)"
	" SELECT pg_catalog.count(DISTINCT name) FROM gone",
	.nargs = 2, .argtypes = {TIMESTAMPTZOID, TIMESTAMPTZOID}
};

/*
 * tb_purge()'s part for limits: forget the slots of names templates made
 * that hold no lease and were not leased since "idle_since" (the next
 * lease makes them again, free).  Returns how many names.
 */
uint64
lease_purge(FunctionCallInfo fcinfo, TimestampTz idle_since, TimestampTz now)
{
	Datum		args[2] = {TimestampTzGetDatum(now), TimestampTzGetDatum(idle_since)};
	SpiSession	session = spi_begin(fcinfo, true);
	uint64		names = 0;

	spi_allow_seqscan();		/* it reads every slot */
	if (plan_run(&purge_plan, installation_table(fcinfo), args, NULL) == 1)
	{
		bool		isnull;

		names = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
	}
	spi_end(&session);
	return names;
}

/* A limit's row gone: whether it was a memory limit. */
static KeptPlan drop_limit_plan = {
	.sql = "DELETE FROM %1$s.tb_limits WHERE name OPERATOR(pg_catalog.=) $1 RETURNING memory",
	.nargs = 1, .argtypes = {TEXTOID}
};

/*
 * The slots of $1 (a template: of the names it made that no limit makes
 * now) gone.
 */
static KeptPlan drop_slots_plan = {
	.sql = "DELETE FROM %1$s.tb_lease_slots AS s"
	" WHERE CASE WHEN $1 OPERATOR(pg_catalog.~~) '%%*'"
	"  THEN pg_catalog.starts_with(s.name, pg_catalog.left($1, -1))"
	"  ELSE s.name OPERATOR(pg_catalog.=) $1 END"
	" AND NOT EXISTS (SELECT FROM %1$s.tb_limits AS l"
	"  WHERE l.name OPERATOR(pg_catalog.=) s.name"
	"  OR (l.name OPERATOR(pg_catalog.~~) '%%*'"
	"   AND pg_catalog.starts_with(s.name, pg_catalog.left(l.name, -1))))",
	.nargs = 1, .argtypes = {TEXTOID}
};

/*
 * tb_drop()'s part for limits: remove limit "name" (a template: and what
 * it made), with its leases (a memory limit's: when the transaction
 * commits); false when there was none.
 */
bool
lease_drop_limit(FunctionCallInfo fcinfo, text *name)
{
	Datum		args[1] = {PointerGetDatum(name)};
	SpiSession	session = spi_begin(fcinfo, true);
	Oid			relid = installation_table(fcinfo);
	bool		dropped;

	dropped = plan_run(&drop_limit_plan, relid, args, NULL) > 0;
	if (dropped)
	{
		bool		isnull;

		/* its memory leases, when the drop commits */
		if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
			lease_memory_forget(MyDatabaseId, relid, name);
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
		if (is_template_name(name))
			spi_allow_seqscan();	/* every name the template made */
		(void) plan_run(&drop_slots_plan, relid, args, NULL);
	}
	spi_end(&session);
	return dropped;
}
