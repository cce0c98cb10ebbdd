/*-------------------------------------------------------------------------
 *
 * table_store.c
 *	  The table store: the state of table buckets, in their rows of
 *	  tb_buckets, through SPI on plans prepared once per backend.
 *
 * A grant is a single
 *
 *		UPDATE tb_buckets SET deficit = tb_take(...) ...
 *		 WHERE name = $1 AND tb_take(...) IS NOT NULL RETURNING ...
 *
 * so the decision is made on the row version the UPDATE locks (READ
 * COMMITTED re-checks it on the newest version after waiting), a grant is
 * one new row version, and a denial matches no row and writes nothing.
 * tb_take() remembers the last bucket it decided on (bucket.c), so a
 * denial needs no second read to tell "empty" from "no such bucket" and to
 * report when to retry.  A bucket made from a template is one INSERT of
 * the state after its first take.
 *
 * A denial that the row as committed decides needs none of that:
 * table_deny() reads the row through its primary key, without SPI, a row
 * lock or a write, and decides as the UPDATE would on the same row version
 * (what gives tokens back takes effect at commit, so a row that denies
 * cannot come to grant before the UPDATE would read it); a row that may
 * grant goes to the UPDATE.
 *
 * Rows of memory buckets and templates are configuration only: this store
 * never touches them (every statement says NOT memory).  Every name in
 * the statements is schema-qualified, operators included: they run as the
 * extension's owner.
 *
 * src/table_store.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/detoast.h"
#include "access/genam.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "bucket_config.h"
#include "catalog/pg_type.h"
#include "common.h"
#include "held.h"
#include "store.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#define BUCKET_COLUMNS "capacity, refill_rate, deficit, updated_at, paused_until," \
	" period, period_anchor, time_zone"
/* and the length of its template's name, for the counters */
#define TAKEN_COLUMNS BUCKET_COLUMNS ", pg_catalog.octet_length(template)"
#define TAKEN_TEMPLATE_LEN 9
#define PERIOD_ARGS "b.period, b.period_anchor, b.time_zone"
#define TAKE_ARGS "b.capacity, b.refill_rate, b.deficit, b.updated_at, b.paused_until, $2, $3"

/* Template-made buckets removed per statement by purge. */
#define PURGE_BATCH 1000

/*
 * The grant.  The CASE makes sure tb_take() only ever decides on the named
 * row, whatever order a plan tests its conditions in: take_watch_denied()
 * relies on it.
 */
static KeptPlan take_plan = {
	.sql = "UPDATE %1$s.tb_buckets AS b"
	" SET deficit = %1$s.tb_take(" TAKE_ARGS ", 0, " PERIOD_ARGS "),"
	" updated_at = GREATEST(b.updated_at, $3)"
	" WHERE b.name OPERATOR(pg_catalog.=) $1 AND NOT b.memory"
	" AND CASE WHEN b.name OPERATOR(pg_catalog.=) $1 AND NOT b.memory"
	" THEN %1$s.tb_take(" TAKE_ARGS ", 0, " PERIOD_ARGS ") END IS NOT NULL"
	" RETURNING " TAKEN_COLUMNS,
	.nargs = 3, .argtypes = {TEXTOID, FLOAT8OID, TIMESTAMPTZOID},
	.holds = HELD_BUCKET
};

/*
 * The grant with a reserve ($4): tb_take()'s form that leaves it.  A
 * statement of its own, so that a grant without one runs the statement it
 * always ran, planned as before.
 */
#define TAKE_RESERVE_ARGS TAKE_ARGS ", $4, " PERIOD_ARGS
static KeptPlan take_reserve_plan = {
	.sql = "UPDATE %1$s.tb_buckets AS b"
	" SET deficit = %1$s.tb_take(" TAKE_RESERVE_ARGS "),"
	" updated_at = GREATEST(b.updated_at, $3)"
	" WHERE b.name OPERATOR(pg_catalog.=) $1 AND NOT b.memory"
	" AND CASE WHEN b.name OPERATOR(pg_catalog.=) $1 AND NOT b.memory"
	" THEN %1$s.tb_take(" TAKE_RESERVE_ARGS ") END IS NOT NULL"
	" RETURNING " TAKEN_COLUMNS,
	.nargs = 4, .argtypes = {TEXTOID, FLOAT8OID, TIMESTAMPTZOID, FLOAT8OID},
	.holds = HELD_BUCKET
};

static KeptPlan peek_plan = {
	.sql = "SELECT " BUCKET_COLUMNS " FROM %1$s.tb_buckets"
	" WHERE name OPERATOR(pg_catalog.=) $1 AND NOT memory",
	.nargs = 1, .argtypes = {TEXTOID}
};

static KeptPlan lock_plan = {
	.sql = "SELECT " BUCKET_COLUMNS " FROM %1$s.tb_buckets"
	" WHERE name OPERATOR(pg_catalog.=) $1 AND NOT memory FOR NO KEY UPDATE",
	.nargs = 1, .argtypes = {TEXTOID},
	.holds = HELD_BUCKET
};

static KeptPlan write_plan = {
	.sql = "UPDATE %1$s.tb_buckets"
	" SET capacity = $2, refill_rate = $3, deficit = $4, updated_at = $5,"
	" paused_until = $6"
	" WHERE name OPERATOR(pg_catalog.=) $1",
	.nargs = 6, .argtypes = {TEXTOID, FLOAT8OID, FLOAT8OID, FLOAT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID},
	.holds = HELD_BUCKET
};

/* a bucket made from a template, in its state after its first take */
static KeptPlan insert_made_plan = {
	.sql = "INSERT INTO %1$s.tb_buckets (name, capacity, refill_rate, deficit, updated_at, template,"
	" period, period_anchor, time_zone)"
	" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (name) DO NOTHING",
	.nargs = 9, .argtypes = {TEXTOID, FLOAT8OID, FLOAT8OID, FLOAT8OID, TIMESTAMPTZOID, TEXTOID,
	INTERVALOID, TIMESTAMPOID, TEXTOID},
	.holds = HELD_BUCKET
};

static KeptPlan delete_plan = {
	.sql = "DELETE FROM %1$s.tb_buckets WHERE name OPERATOR(pg_catalog.=) $1 AND NOT memory",
	.nargs = 1, .argtypes = {TEXTOID},
	.holds = HELD_BUCKET
};

static KeptPlan delete_made_plan = {
	.sql = "DELETE FROM %1$s.tb_buckets WHERE template OPERATOR(pg_catalog.=) $1",
	.nargs = 1, .argtypes = {TEXTOID}
};

/* every bucket made from template $1 takes its settings, keeping its tokens */
static KeptPlan alter_made_plan = {
	.sql = "UPDATE %1$s.tb_buckets AS b"
	" SET deficit = %1$s.tb_resize(b.capacity, b.refill_rate, b.deficit, b.updated_at, $2, $4,"
	" " PERIOD_ARGS "),"
	" capacity = $2, refill_rate = $3, updated_at = GREATEST(b.updated_at, $4)"
	" WHERE b.template OPERATOR(pg_catalog.=) $1",
	.nargs = 4, .argtypes = {TEXTOID, FLOAT8OID, FLOAT8OID, TIMESTAMPTZOID}
};

/* full, unpaused, template-made buckets last written before $1 */
static KeptPlan purge_plan = {
	.sql = "DELETE FROM %1$s.tb_buckets WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
	" SELECT ctid FROM %1$s.tb_buckets AS b"
	" WHERE b.template IS NOT NULL AND b.updated_at OPERATOR(pg_catalog.<) $1"
	" AND b.paused_until OPERATOR(pg_catalog.<=) $2"
	" AND %1$s.tb_take(b.capacity, b.refill_rate, b.deficit, b.updated_at,"
	" b.paused_until, b.capacity, $2, 0, " PERIOD_ARGS ") IS NOT NULL"
	" LIMIT $3 FOR UPDATE SKIP LOCKED))",
	.nargs = 3, .argtypes = {TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID}
};

/*
 * The share of this backend's recent takes that were denied (a moving
 * average over about DENIED_SHARE_SPAN takes).  deny() reads the row only
 * while it is at least READ_FIRST_SHARE: a read decides a denial for a
 * fraction of what the UPDATE costs, but adds itself to every grant, so it
 * pays where a fair share of the calls deny (a read costs about a quarter
 * of a denying UPDATE).  Either way the answer is the same.
 */
#define DENIED_SHARE_SPAN 8
#define READ_FIRST_SHARE 0.25
static double denied_share = 1;

/*
 * take(): the acquire UPDATE (with a reserve, its own); a denial is told
 * from absence by tb_take().
 */
static StoreResult
table_take(Oid relid, Request *request, TimestampTz now)
{
	Datum		args[4];

	args[0] = PointerGetDatum(request->name);
	args[1] = Float8GetDatum(request->cost);
	args[2] = TimestampTzGetDatum(now);
	args[3] = Float8GetDatum(request->reserve);
	take_watch_begin();
	if (plan_run(request->reserve > 0 ? &take_reserve_plan : &take_plan,
				 relid, args, NULL) == 1)
	{
		bool		isnull;
		Datum		template_len = SPI_getbinval(SPI_tuptable->vals[0],
												 SPI_tuptable->tupdesc,
												 TAKEN_TEMPLATE_LEN, &isnull);

		request->template_len = isnull ? 0 : DatumGetInt32(template_len);
		request->in_table = true;
		plan_read_bucket(&request->bucket);
		denied_share -= denied_share / DENIED_SHARE_SPAN;
		return STORE_GRANTED;
	}
	/* denied: tb_take() saw the row, so it exists; no second read */
	if (take_watch_denied(&request->bucket))
	{
		denied_share += (1 - denied_share) / DENIED_SHARE_SPAN;
		return STORE_DENIED;
	}
	return STORE_ABSENT;
}

/*
 * The columns of tb_buckets a denial reads, by number: kept, and found by
 * name again whenever the number kept is not the column's.
 */
enum
{
	COL_MEMORY, COL_CAPACITY, COL_REFILL_RATE, COL_DEFICIT, COL_UPDATED_AT,
	COL_PAUSED_UNTIL, COL_TEMPLATE, COL_PERIOD, COL_PERIOD_ANCHOR, COL_TIME_ZONE,
	ROW_COLUMNS
};
static const char *const row_column_names[ROW_COLUMNS] = {
	"memory", "capacity", "refill_rate", "deficit", "updated_at",
	"paused_until", "template", "period", "period_anchor", "time_zone"
};
static int	row_columns[ROW_COLUMNS];

/* The number of column "column" in "desc" (0 or less: none). */
static int
row_column(TupleDesc desc, int column)
{
	int			attnum = row_columns[column];

	if (attnum <= 0 || attnum > desc->natts ||
		TupleDescAttr(desc, attnum - 1)->attisdropped ||
		strcmp(NameStr(TupleDescAttr(desc, attnum - 1)->attname),
			   row_column_names[column]) != 0)
		attnum = row_columns[column] = SPI_fnumber(desc, row_column_names[column]);
	return attnum;
}

/* The primary key of tb_buckets "rel" (InvalidOid: none). */
static Oid
primary_key(Relation rel)
{
#if PG_VERSION_NUM >= 180000
	return RelationGetPrimaryKeyIndex(rel, false);
#else
	return RelationGetPrimaryKeyIndex(rel);
#endif
}

/*
 * Read the row of table bucket request->name through the primary key
 * "pkey" of tb_buckets "rel", on the snapshot the acquire UPDATE would take (this
 * transaction's changes so far included): false when there is none, or
 * it is a memory bucket's.
 */
static bool
read_row(Relation rel, Oid pkey, Request *request)
{
	Relation	index = index_open(pkey, AccessShareLock);
	Snapshot	snapshot;
	IndexScanDesc scan;
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	ScanKeyData key;
	Datum		values[ROW_COLUMNS];
	bool		isnull[ROW_COLUMNS];
	bool		found;

	CommandCounterIncrement();
	snapshot = RegisterSnapshot(GetTransactionSnapshot());
	ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   index->rd_indcollation[0], F_TEXTEQ,
						   PointerGetDatum(request->name));
#if PG_VERSION_NUM >= 180000
	scan = index_beginscan(rel, index, snapshot, NULL, 1, 0);
#else
	scan = index_beginscan(rel, index, snapshot, 1, 0);
#endif
	index_rescan(scan, &key, 1, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	for (int i = 0; found && i < ROW_COLUMNS; i++)
	{
		int			attnum = row_column(RelationGetDescr(rel), i);

		isnull[i] = true;
		values[i] = attnum > 0 ? slot_getattr(slot, attnum, &isnull[i]) : (Datum) 0;
		found = i >= COL_TEMPLATE || !isnull[i];
	}
	found = found && !DatumGetBool(values[COL_MEMORY]);
	if (found)
	{
		BucketPeriod period;

		request->bucket.capacity = DatumGetFloat8(values[COL_CAPACITY]);
		request->bucket.refill_rate = DatumGetFloat8(values[COL_REFILL_RATE]);
		request->bucket.deficit = DatumGetFloat8(values[COL_DEFICIT]);
		request->bucket.updated_at = DatumGetTimestampTz(values[COL_UPDATED_AT]);
		request->bucket.paused_until = DatumGetTimestampTz(values[COL_PAUSED_UNTIL]);
		period_from_datums(&period, values + COL_PERIOD, isnull + COL_PERIOD);
		request->bucket.period = period_intern(&period);
		request->template_len = isnull[COL_TEMPLATE] ? 0 :
			toast_raw_datum_size(values[COL_TEMPLATE]) - VARHDRSZ;
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snapshot);
	index_close(index, NoLock);
	return found;
}

/*
 * deny(): STORE_DENIED when the row of table bucket request->name, as the
 * acquire UPDATE would read it now, does not grant the request (its state
 * in request->bucket); else STORE_ABSENT, for take() to decide.  The
 * UPDATE's scan would find that row version too, see tb_take() refuse it,
 * and leave it unlocked; a concurrent refund, alter or resume that could
 * make it grant is not committed yet, and a concurrent grant only takes.
 */
static StoreResult
table_deny(Oid relid, Request *request, TimestampTz now)
{
	Relation	rel;
	Request		read = *request;
	Oid			pkey;
	bool		denied;

	if (denied_share < READ_FIRST_SHARE)
		return STORE_ABSENT;	/* grants lately: the UPDATE at once */
	held_lock_table(relid, AccessShareLock);	/* bounded, as every statement's wait */
	rel = try_table_open(relid, AccessShareLock);
	if (rel == NULL)
		return STORE_ABSENT;	/* dropped: take() says so */
	pkey = primary_key(rel);
	denied = OidIsValid(pkey) && read_row(rel, pkey, &read) &&
		!bucket_holds(&read.bucket, read.cost, read.reserve, now);
	table_close(rel, NoLock);
	if (!denied)
		return STORE_ABSENT;
	*request = read;
	request->in_table = true;
	denied_share += (1 - denied_share) / DENIED_SHARE_SPAN;
	return STORE_DENIED;
}

/* peek(): the row's state, unlocked. */
static bool
table_peek(Oid relid, Request *request)
{
	Datum		args[1] = {PointerGetDatum(request->name)};

	if (plan_run(&peek_plan, relid, args, NULL) == 0)
		return false;
	plan_read_bucket(&request->bucket);
	return true;
}

/* absent(): a bucket with no row yet starts full (a quota: bucket.c says). */
static Bucket
table_absent(const Bucket *settings, TimestampTz now)
{
	Bucket		bucket = *settings;

	bucket.deficit = bucket_initial_deficit(settings);
	bucket.updated_at = now;
	bucket.paused_until = DT_NOBEGIN;
	return bucket;
}

/* Lock the row of table bucket "name" and read its state; false when none. */
static bool
lock_row(Oid relid, text *name, Bucket *bucket)
{
	Datum		args[1] = {PointerGetDatum(name)};

	if (plan_run(&lock_plan, relid, args, NULL) == 0)
		return false;
	plan_read_bucket(bucket);
	return true;
}

/* Write the state of a bucket locked with lock_row(). */
static void
write_row(Oid relid, text *name, const Bucket *bucket)
{
	Datum		args[6];

	args[0] = PointerGetDatum(name);
	args[1] = Float8GetDatum(bucket->capacity);
	args[2] = Float8GetDatum(bucket->refill_rate);
	args[3] = Float8GetDatum(bucket->deficit);
	args[4] = TimestampTzGetDatum(bucket->updated_at);
	args[5] = TimestampTzGetDatum(bucket->paused_until);
	(void) plan_run(&write_plan, relid, args, NULL);
}

/* change(): on the locked row. */
static bool
table_change(Oid relid, text *name, BucketChange change, const void *arg,
			 TimestampTz now, Bucket *after)
{
	if (!lock_row(relid, name, after))
		return false;
	change(after, now, arg);
	if (isfinite(after->deficit))
		write_row(relid, name, after);
	return true;
}

/* alter(): on the locked row; a template's buckets in one UPDATE. */
static bool
table_alter(Oid relid, text *name, double capacity, double refill_rate,
			TimestampTz now)
{
	Bucket		bucket;

	if (!lock_row(relid, name, &bucket))
		return false;
	bucket_reconfigure(&bucket,
					   isnan(capacity) ? bucket.capacity : capacity,
					   isnan(refill_rate) ? bucket.refill_rate : refill_rate,
					   now);
	if (is_template_name(name))
	{
		Datum		args[4];

		bucket.deficit = 0;		/* a template is always full */
		args[0] = PointerGetDatum(name);
		args[1] = Float8GetDatum(bucket.capacity);
		args[2] = Float8GetDatum(bucket.refill_rate);
		args[3] = TimestampTzGetDatum(now);
		(void) plan_run(&alter_made_plan, relid, args, NULL);
	}
	write_row(relid, name, &bucket);
	return true;
}

/*
 * make(): insert the row.  STORE_EXISTS when the name exists already: a
 * concurrent first call made it (ON CONFLICT DO NOTHING waits for that
 * call's insert and keeps it).
 */
static StoreMade
table_make(Oid relid, text *name, const Bucket *state, int template_len,
		   uint64 generation, bool provisional)
{
	Datum		args[9];
	char		nulls[10] = "         ";

	period_to_datums(state->period, args + 6, nulls + 6);
	args[0] = PointerGetDatum(name);
	args[1] = Float8GetDatum(state->capacity);
	args[2] = Float8GetDatum(state->refill_rate);
	args[3] = Float8GetDatum(state->deficit);
	args[4] = TimestampTzGetDatum(state->updated_at);
	args[5] = (Datum) 0;
	if (template_len > 0)
	{
		text	   *template = (text *) palloc(VARHDRSZ + template_len);

		SET_VARSIZE(template, VARHDRSZ + template_len);
		memcpy(VARDATA(template), VARDATA_ANY(name), template_len - 1);
		VARDATA(template)[template_len - 1] = '*';
		args[5] = PointerGetDatum(template);
	}
	else
		nulls[5] = 'n';
	return plan_run(&insert_made_plan, relid, args, nulls) == 1 ?
		STORE_MADE : STORE_EXISTS;
}

/*
 * drop(): delete the row; a template takes the buckets made from it along:
 * they would never be made again.
 */
static bool
table_drop(Oid relid, text *name)
{
	Datum		args[1] = {PointerGetDatum(name)};
	bool		deleted = plan_run(&delete_plan, relid, args, NULL) > 0;

	if (deleted && is_template_name(name))
		(void) plan_run(&delete_made_plan, relid, args, NULL);
	return deleted;
}

/* purge(): a batch at a time, skipping rows other sessions hold. */
static uint64
table_purge(Oid relid, TimestampTz idle_since, TimestampTz now)
{
	Datum		args[3];
	uint64		batch;
	uint64		total = 0;

	args[0] = TimestampTzGetDatum(idle_since);
	args[1] = TimestampTzGetDatum(now);
	args[2] = Int64GetDatum(PURGE_BATCH);
	do
	{
		batch = plan_run(&purge_plan, relid, args, NULL);
		total += batch;
	} while (batch == PURGE_BATCH);
	return total;
}

/* configure(): a table bucket's row is its configuration; nothing to do. */
static void
table_configure(ConfigChange change, Oid relid, const char *name, int len,
				const Bucket *settings)
{
}

/* forget(): the rows go with their table. */
static void
table_forget(Oid dbid, Oid relid)
{
}

/* check_make(): any name a row may have will do. */
static void
table_check_make(int len)
{
}

/* generation(): the table is read on the caller's snapshot; none needed. */
static uint64
table_generation(void)
{
	return 0;
}

const StoreRoutine table_store = {
	.kind = "table",
	.init = NULL,
	.take = table_take,
	.deny = table_deny,
	.take_all = NULL,			/* the router takes one by one */
	.peek = table_peek,
	.absent = table_absent,
	.change = table_change,
	.alter = table_alter,
	.make = table_make,
	.drop = table_drop,
	.purge = table_purge,
	.list = NULL,				/* tb_status reads the rows */
	.watch = NULL,				/* a waiter looks again every second */
	.configure = table_configure,
	.forget = table_forget,
	.count = NULL,				/* its keys' counters are stats.c's */
	.reset_counters = NULL,
	.check_make = table_check_make,
	.generation = table_generation,
};
