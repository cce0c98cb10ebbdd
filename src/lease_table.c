/*-------------------------------------------------------------------------
 *
 * lease_table.c
 *	  The table store of in-flight limits: a table limit's leases, in its
 *	  slots' rows of tb_lease_slots, freed the moment their holder is gone.
 *
 * A limit (a row of tb_limits) allows at most max_in_flight slots held at
 * once.  Its slots are rows of tb_lease_slots, made as they are first
 * needed; a lease is the slots that carry its id, and the row says who
 * holds it: a session (its backend's pid and start time) for hold =>
 * 'session', a transaction (its id) for 'transaction'.  A slot is held
 * only while that holder exists: a backend with that pid and start time,
 * a transaction still in progress (tb_holder_alive()).  So the slots of a
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
 * column a lease writes, so leases and releases are HOT updates.  Every
 * name in the statements is schema-qualified, operators included: they
 * run as the extension's owner.
 *
 * What a lease or a release frees is woken at the end of its transaction,
 * a session's leases at its exit (limit_wake.c).
 *
 * src/lease_table.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "bucket.h"
#include "catalog/pg_type.h"
#include "common.h"
#include "common/hashfn.h"
#include "limit_config.h"
#include "limit_store.h"
#include "limit_wake.h"
#include "miscadmin.h"
#include "stats.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/xid8.h"

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
 * Whether the backend of process "pid" that started at "started" still
 * runs: this one, or the one that has that pid now, if its live status
 * entry says it started then (a pid alone could be a later backend's, and
 * pg_stat_activity's copy knows no holder that connected after it).
 */
static bool
backend_alive(int pid, TimestampTz started)
{
	BackendLook look;
	int			index;

	if (pid == MyProcPid)
		return started == MyStartTimestamp;
	index = backend_index(pid);
	/* the common case of a dead holder: no look */
	if (index < 0)
		return false;
	return backend_look(index, &look) && look.pid == pid &&
		look.proc_start == started;
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

/* The slots 1 to $2 of $1 (whose key is $3) that are not made yet, free. */
static KeptPlan add_slots_plan = {
	.sql = "INSERT INTO %1$s.tb_lease_slots (name, slot, key)"
	" SELECT $1, g, $3 FROM pg_catalog.generate_series(1, $2) AS g"
	" ON CONFLICT DO NOTHING",
	.nargs = 3, .argtypes = {TEXTOID, INT4OID, INT4OID}
};

/*
 * make(): the slots 1 to "max_in_flight" of "name" that are not made yet,
 * free.
 */
static void
table_make(Oid relid, text *name, int32 max_in_flight)
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

/* stats_count_limit() template_of: the length of request "arg"'s template's name. */
static int
template_len_of(void *arg)
{
	LeaseRequest *request = arg;

	return limit_config_template_len(request->relid, request->name);
}

/*
 * Count the slots a lease took over from leases that had ended or expired
 * (a table limit learns it only then), when the transaction ends.
 */
static void
count_freed(LeaseRequest *request, const LimitCounters *freed)
{
	if (!stats_enabled() || !OidIsValid(request->limits))
		return;
	stats_count_limit(request->limits, request->name, freed, request->template_len,
					  template_len_of, request, tb_clock_now());
}

/* reserve_left()'s look, in a subtransaction rolled back after it. */
typedef struct ReserveLook
{
	LeaseRequest *request;
	int32		max_in_flight;
	int32		keep;
	TimestampTz now;
	uint64		free;			/* what it found */
} ReserveLook;

static bool
reserve_look_step(void *arg)
{
	ReserveLook *look = arg;
	Datum		args[4] = {PointerGetDatum(look->request->name),
		Int32GetDatum(look->max_in_flight), Int32GetDatum(look->keep),
	TimestampTzGetDatum(look->now)};

	look->free = plan_run(&reserve_plan, look->request->relid, args, NULL);
	return false;				/* let go of the slots it locked */
}

/*
 * Whether the table limit of "request", its slots just taken by this
 * transaction, still has the slots its reserve keeps free at "now": free,
 * and locked by no other transaction (one taking or releasing a slot
 * counts as holding it).  They are locked to be counted (two leases
 * deciding at once never count the same free slot) and let go at once (a
 * subtransaction rolled back), so nobody else ever sees them held.  The
 * limit is read again here (the take may have come before the router read
 * it), its template's length kept for the counters.
 */
static bool
reserve_left(LeaseRequest *request, TimestampTz now)
{
	ReserveLook look = {.request = request, .now = now};
	LimitConfig limit;

	if (!limit_config_find(request->relid, request->name, &limit))
		return false;			/* dropped meanwhile */
	request->template_len = limit.template_len;
	look.max_in_flight = limit.max_in_flight;
	look.keep = limit_reserve_slots(look.max_in_flight, request->reserve);
	if (look.keep == 0)
		return true;
	(void) subxact_run(reserve_look_step, &look, 0, NULL);
	return look.free >= (uint64) look.keep;
}

/*
 * Take the slots of "request" at "now", all or (returning false) not all:
 * the caller rolls back a partial take (table_take()).  The slots name
 * their holder: this session, or this transaction.
 */
static bool
take_slots(LeaseRequest *request, TimestampTz now)
{
	Datum		args[10];
	char		nulls[11] = "          ";
	bool		isnull;
	LimitCounters freed = {0};

	args[0] = PointerGetDatum(request->name);
	args[1] = CStringGetTextDatum(request->hold == HOLD_SESSION ? "session" : "transaction");
	args[2] = ObjectIdGetDatum(request->holder);
	args[3] = Int32GetDatum(MyProcPid);
	args[4] = TimestampTzGetDatum(now);
	if (request->ttl_usecs > 0)
		args[5] = TimestampTzGetDatum(timestamp_saturate((double) now + request->ttl_usecs));
	else
	{
		args[5] = (Datum) 0;
		nulls[5] = 'n';
	}
	args[6] = Int32GetDatum(request->slots);
	args[7] = Int32GetDatum(name_key(request->name));
	args[8] = TimestampTzGetDatum(MyStartTimestamp);
	if (request->hold == HOLD_TRANSACTION)
		args[9] = FullTransactionIdGetDatum(GetTopFullTransactionId());
	else
	{
		args[9] = (Datum) 0;
		nulls[9] = 'n';
	}

	if (plan_run(&take_plan, request->relid, args, nulls) != (uint64) request->slots)
	{
		if (SPI_tuptable != NULL)
			SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
		return false;
	}
	request->lease = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
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
	if (request->reserve > 0 && !reserve_left(request, now))
		return false;			/* the caller rolls the take back */
	if (freed.expired > 0 || freed.ended > 0)
		count_freed(request, &freed);

	if (request->hold == HOLD_SESSION)
		limit_wake_at_exit(request->name);
	else
		limit_wake_at_end(VARDATA_ANY(request->name), VARSIZE_ANY_EXHDR(request->name));
	return true;
}

/* take_slots() in a subtransaction of its own. */
typedef struct TakeStep
{
	LeaseRequest *request;
	TimestampTz now;
} TakeStep;

static bool
take_step(void *arg)
{
	TakeStep   *step = arg;

	return take_slots(step->request, step->now);
}

/*
 * take(): take_slots(), all or nothing: a lease of several slots, or with
 * a reserve, runs in a subtransaction of its own, so that finding fewer
 * free (or the reserve short) leaves none taken (nor its rows locked).
 * Refused also when the limit is not a table limit, or lacks the slots
 * (make()): the router looks it up.
 */
static LeaseTaken
table_take(LeaseRequest *request, TimestampTz now)
{
	TakeStep	step = {request, now};

	if (request->slots == 1 && request->reserve == 0)
		return take_slots(request, now) ? LEASE_GRANTED : LEASE_REFUSED;
	return subxact_run(take_step, &step, 0, NULL) ? LEASE_GRANTED : LEASE_REFUSED;
}

/*
 * first_expiry(): when the first ttl among the leases of "name" held at
 * "now" ends.
 */
static TimestampTz
table_first_expiry(Oid relid, text *name, TimestampTz now)
{
	Datum		args[2] = {PointerGetDatum(name), TimestampTzGetDatum(now)};
	TimestampTz ready = DT_NOEND;
	bool		isnull;
	Datum		expiry;

	if (plan_run(&next_expiry_plan, relid, args, NULL) == 1)
	{
		expiry = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		if (!isnull)
			ready = DatumGetTimestampTz(expiry);
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
	}
	return ready;
}

/* owns(): a table lease's id is zero or above. */
static bool
table_owns(int64 lease)
{
	return lease >= 0;
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
 * release(): the slots of "lease" freed, its limit's queue woken at the
 * end of the transaction.  Another role's lease is not found, as one that
 * holds nothing.
 */
static LeaseReleased
table_release(Oid relid, int64 lease, Oid caller, bool owner, TimestampTz now,
			  ReleasedLease *released)
{
	Datum		args[5];
	bool		isnull;
	text	   *name;

	args[0] = Int64GetDatum(lease);
	args[1] = BoolGetDatum(owner);
	args[2] = ObjectIdGetDatum(caller);
	args[3] = TimestampTzGetDatum(now);
	args[4] = Int32GetDatum(lease_key(lease));
	if (plan_run(&release_plan, relid, args, NULL) == 0)
		return LEASE_NOT_HELD;
	name = DatumGetTextPP(SPI_getbinval(SPI_tuptable->vals[0],
										SPI_tuptable->tupdesc, 1, &isnull));
	released->slots = (int32) SPI_processed;
	released->name = (text *) pg_detoast_datum_copy((struct varlena *) name);
	released->template_len = -1;
	limit_wake_at_end(VARDATA_ANY(released->name), VARSIZE_ANY_EXHDR(released->name));
	SPI_freetuptable(SPI_tuptable);
	SPI_tuptable = NULL;
	return LEASE_FREED;
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

/* purge(): the slots of the idle names templates made. */
static uint64
table_purge(Oid relid, TimestampTz idle_since, TimestampTz now)
{
	Datum		args[2] = {TimestampTzGetDatum(now), TimestampTzGetDatum(idle_since)};
	uint64		names = 0;

	spi_allow_seqscan();		/* it reads every slot */
	if (plan_run(&purge_plan, relid, args, NULL) == 1)
	{
		bool		isnull;

		names = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
	}
	return names;
}

/*
 * The slots of $1 (a template: of the names it made) that no table limit
 * makes now gone: none makes the name, or a memory limit does (a template
 * of the other kind that covers it), whose leases these slots would not
 * count in.
 */
static KeptPlan drop_slots_plan = {
	.sql = "DELETE FROM %1$s.tb_lease_slots AS s"
	" WHERE CASE WHEN $1 OPERATOR(pg_catalog.~~) '%%*'"
	"  THEN pg_catalog.starts_with(s.name, pg_catalog.left($1, -1))"
	"  ELSE s.name OPERATOR(pg_catalog.=) $1 END"
	" AND NOT coalesce((SELECT NOT m.memory FROM " LIMIT_ROW_OF("s.name") " AS m), false)",
	.nargs = 1, .argtypes = {TEXTOID}
};

/*
 * drop(): the slots of "name" (a template: of the names it made) that no
 * table limit makes now, whatever the limit's kind: slots no limit makes
 * any more (a row deleted by hand leaves them) go with any drop of the
 * name.
 */
static void
table_drop(Oid relid, text *name, bool its)
{
	Datum		args[1] = {PointerGetDatum(name)};

	if (is_template_name(name))
		spi_allow_seqscan();	/* every name the template made */
	(void) plan_run(&drop_slots_plan, relid, args, NULL);
}

/* The names holding leases at $1 (their holders there, ttls not passed), and their slots. */
static KeptPlan held_plan = {
	.sql = "SELECT name, pg_catalog.count(*) FROM %1$s.tb_lease_slots"
	" WHERE lease IS NOT NULL"
	" AND (expires IS NULL OR expires OPERATOR(pg_catalog.>) $1)"
	" AND %1$s.tb_holder_alive(pid, started, xid)"
	" GROUP BY name",
	.nargs = 1, .argtypes = {TIMESTAMPTZOID}
};

/*
 * held(): the names whose slots are held at "now", read on the newest
 * committed state (and this transaction's own: what it released or
 * dropped is free).
 */
static List *
table_held(Oid relid, TimestampTz now)
{
	Datum		args[1] = {TimestampTzGetDatum(now)};
	List	   *held = NIL;
	uint64		rows;

	spi_allow_seqscan();		/* it reads every slot */
	rows = plan_run_latest(&held_plan, relid, args, NULL);
	for (uint64 i = 0; i < rows; i++)
	{
		HeapTuple	row = SPI_tuptable->vals[i];
		HeldName   *name = palloc(sizeof(HeldName));
		bool		isnull;

		name->name = DatumGetTextPCopy(SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &isnull));
		name->slots = DatumGetInt64(SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &isnull));
		held = lappend(held, name);
	}
	if (rows > 0)
	{
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
	}
	return held;
}

const LimitStoreRoutine table_limit_store = {
	.kind = "table",
	.spi = true,
	.make = table_make,
	.take = table_take,
	.first_expiry = table_first_expiry,
	.owns = table_owns,
	.release = table_release,
	.drop = table_drop,
	.purge = table_purge,
	.held = table_held,
};
