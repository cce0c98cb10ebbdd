/*-------------------------------------------------------------------------
 *
 * bucket_config.c
 *	  A bucket's configuration, in tb_buckets through SPI: its row, or the
 *	  template that makes it; the rows that tb_create, tb_alter and
 *	  tb_drop write for memory buckets; a quota's new calendar
 *	  (tb_ensure_quota); the check of a row written.
 *
 * Every bucket and template has its configuration in a row of tb_buckets
 * (name, capacity, refill_rate, memory), except the buckets made from a
 * memory template, whose template's row is their configuration.  A table
 * bucket's row also holds its tokens (the table store's business); a
 * memory bucket's state lives in shared memory.  The statements run in
 * the SPI session of spi_session.c.
 *
 * src/bucket_config.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "bucket_config.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common.h"
#include "shmem.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/*
 * Columns "first" to "first" + 2 of an SPI row (period, period_anchor,
 * time_zone) as a period.
 */
static void
read_period(HeapTuple tuple, TupleDesc desc, int first, BucketPeriod *period)
{
	Datum		values[3];
	bool		isnull[3];

	for (int i = 0; i < 3; i++)
		values[i] = SPI_getbinval(tuple, desc, first + i, &isnull[i]);
	period_from_datums(period, values, isnull);
}

/* The same, interned (NULL: none), for a Bucket. */
static const BucketPeriod *
read_interned_period(HeapTuple tuple, TupleDesc desc, int first)
{
	BucketPeriod period;

	read_period(tuple, desc, first, &period);
	return period_intern(&period);
}

/*
 * Copy the bucket state out of the first row SPI returned (its first eight
 * columns: BUCKET_COLUMNS, the period's last), and free the rows.
 */
void
plan_read_bucket(Bucket *bucket)
{
	HeapTuple	tuple = SPI_tuptable->vals[0];
	TupleDesc	desc = SPI_tuptable->tupdesc;
	bool		isnull;

	bucket->capacity = DatumGetFloat8(SPI_getbinval(tuple, desc, 1, &isnull));
	bucket->refill_rate = DatumGetFloat8(SPI_getbinval(tuple, desc, 2, &isnull));
	bucket->deficit = DatumGetFloat8(SPI_getbinval(tuple, desc, 3, &isnull));
	bucket->updated_at = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 4, &isnull));
	bucket->paused_until = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 5, &isnull));
	bucket->period = read_interned_period(tuple, desc, 6);
	SPI_freetuptable(SPI_tuptable);
	SPI_tuptable = NULL;
}

/* plan_run() of a read, on the newest committed state with "latest". */
static uint64
run(KeptPlan *plan, Oid relid, Datum *args, bool latest)
{
	return latest ? plan_run_latest(plan, relid, args, NULL) :
		plan_run(plan, relid, args, NULL);
}

/* A name's row: its state, kind and template */
static KeptPlan read_plan = {
	.sql = "SELECT capacity, refill_rate, deficit, updated_at, paused_until,"
	" period, period_anchor, time_zone, memory,"
	" pg_catalog.octet_length(template), xmin FROM %1$s.tb_buckets"
	" WHERE name OPERATOR(pg_catalog.=) $1",
	.nargs = 1, .argtypes = {TEXTOID}
};

/* The longest template prefix of $1; the partial index holds templates. */
static KeptPlan template_plan = {
	.sql = "SELECT capacity, refill_rate, pg_catalog.octet_length(name), memory, xmin,"
	" period, period_anchor, time_zone, deficit, updated_at FROM %1$s.tb_buckets"
	" WHERE name OPERATOR(pg_catalog.~~) '%%*'"
	" AND pg_catalog.starts_with($1, pg_catalog.left(name, -1))"
	" ORDER BY pg_catalog.octet_length(name) DESC LIMIT 1",
	.nargs = 1, .argtypes = {TEXTOID}
};

/* A new row in a state of its own (a quota's), with its period. */
static KeptPlan insert_state_plan = {
	.sql = "INSERT INTO %1$s.tb_buckets (name, capacity, refill_rate, deficit, updated_at, memory,"
	" period, period_anchor, time_zone)"
	" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (name) DO NOTHING",
	.nargs = 9, .argtypes = {TEXTOID, FLOAT8OID, FLOAT8OID, FLOAT8OID, TIMESTAMPTZOID, BOOLOID,
	INTERVALOID, TIMESTAMPOID, TEXTOID},
	.holds = HELD_BUCKET
};

/* A new row, full (the columns' defaults describe a full bucket). */
static KeptPlan insert_plan = {
	.sql = "INSERT INTO %1$s.tb_buckets (name, capacity, refill_rate, deficit, updated_at, memory)"
	" VALUES ($1, $2, $3, 0, $4, $5) ON CONFLICT (name) DO NOTHING",
	.nargs = 5, .argtypes = {TEXTOID, FLOAT8OID, FLOAT8OID, TIMESTAMPTZOID, BOOLOID},
	.holds = HELD_BUCKET
};

/*
 * New settings for a memory bucket's or template's row (NULL keeps one);
 * a row that says empty (a restored quota's: bucket_config_no_fuller())
 * says so still, from the same moment.
 */
static KeptPlan memory_settings_plan = {
	.sql = "UPDATE %1$s.tb_buckets"
	" SET capacity = coalesce($2, capacity), refill_rate = coalesce($3, refill_rate),"
	" deficit = CASE WHEN deficit OPERATOR(pg_catalog.>=) capacity"
	" THEN coalesce($2, capacity) ELSE deficit END,"
	" updated_at = CASE WHEN deficit OPERATOR(pg_catalog.>=) capacity THEN updated_at"
	" ELSE GREATEST(updated_at, $4) END"
	" WHERE name OPERATOR(pg_catalog.=) $1 AND memory",
	.nargs = 4, .argtypes = {TEXTOID, FLOAT8OID, FLOAT8OID, TIMESTAMPTZOID},
	.holds = HELD_BUCKET
};

/*
 * A quota's new calendar ($2, $3, $4) from $5 on: its deficit brought to
 * $5 by the calendar it had, so that its tokens are kept; of a row, or of
 * the buckets made from template $1.
 */
#define PERIOD_SET_SQL(row) "UPDATE %1$s.tb_buckets AS b" \
	" SET deficit = %1$s.tb_resize(b.capacity, b.refill_rate, b.deficit, b.updated_at," \
	" b.capacity, $5, b.period, b.period_anchor, b.time_zone)," \
	" updated_at = GREATEST(b.updated_at, $5), period = $2, period_anchor = $3, time_zone = $4" \
	" WHERE b." row " OPERATOR(pg_catalog.=) $1"
static KeptPlan period_plan = {
	.sql = PERIOD_SET_SQL("name"),
	.nargs = 5, .argtypes = {TEXTOID, INTERVALOID, TIMESTAMPOID, TEXTOID, TIMESTAMPTZOID},
	.holds = HELD_BUCKET
};
static KeptPlan period_made_plan = {
	.sql = PERIOD_SET_SQL("template"),
	.nargs = 5, .argtypes = {TEXTOID, INTERVALOID, TIMESTAMPOID, TEXTOID, TIMESTAMPTZOID}
};

/* A memory bucket's or template's row gone. */
static KeptPlan memory_delete_plan = {
	.sql = "DELETE FROM %1$s.tb_buckets WHERE name OPERATOR(pg_catalog.=) $1 AND memory",
	.nargs = 1, .argtypes = {TEXTOID},
	.holds = HELD_BUCKET
};

/*
 * Lower "bucket" at "now" to what the row "row" (its own, or its
 * template's, with the row's state) says a memory quota holds at most
 * then.  A memory quota's row says nothing (it holds a period's tokens
 * or more), unless it says empty (deficit at least capacity): a row
 * restored from a dump is written so (bucket_config_check_row()), empty
 * at the restore until its next period's start.  A continuous bucket's
 * row says nothing.
 */
void
bucket_config_no_fuller(Bucket *bucket, const Bucket *row, TimestampTz now)
{
	double		most;

	if (!BUCKET_PERIODIC(row) || row->deficit < row->capacity)
		return;
	most = fmax(0.0, bucket_tokens_at(row, now));
	if (bucket_tokens_at(bucket, now) > most)
		bucket_lower_to(bucket, most, now);
}

/*
 * A name's configuration from its template (of "len" bytes, its '*'
 * included; "row" its settings and state, its period not interned): the
 * new bucket it makes at "now" (full; a quota: with a period's tokens,
 * bucket_initial_deficit(); a memory quota no fuller than the template's
 * row says).
 */
static void
template_config(BucketConfig *config, const Bucket *row, int len, bool memory,
				bool mine, TimestampTz now)
{
	Bucket		settings = *row;

	settings.period = period_intern(row->period);
	config->source = CONFIG_TEMPLATE;
	config->memory = memory;
	config->bucket = settings;
	config->bucket.deficit = bucket_initial_deficit(&settings);
	config->bucket.updated_at = now;
	config->bucket.paused_until = DT_NOBEGIN;
	if (memory)
		bucket_config_no_fuller(&config->bucket, &settings, now);
	config->template_len = len;
	config->mine = mine;
}

/* Every template, for the copy below; the partial index holds them. */
static KeptPlan templates_plan = {
	.sql = "SELECT name, capacity, refill_rate, memory, period, period_anchor, time_zone,"
	" deficit, updated_at FROM %1$s.tb_buckets"
	" WHERE name OPERATOR(pg_catalog.~~) '%%*'",
	.nargs = 0
};

/*
 * Every template of an installation as committed at a configuration
 * generation (the memory store's count of settings changes applied, which
 * the commit of a template's INSERT, and of any change to a memory
 * template, moves), copied by this backend: while the generation stands,
 * the memory template that makes a new name is found here without a
 * statement, and a flood of new per-user keys costs one statement a key
 * (the read of the name's own row) where it cost three.  A table template
 * dropped, changed or renamed in place moves no generation, so the copy
 * answers only where it finds a memory template, which no such change of a
 * shorter template can overrule; a longer one is new, and moved the
 * generation (if its names can be a memory bucket's at all).
 */
#define TEMPLATES_COPIED_MAX 256

typedef struct CopiedTemplate
{
	char	   *prefix;			/* the template's name without its '*' */
	int			len;
	Bucket		row;			/* its settings and state; row.period is
								 * &period */
	bool		memory;
	BucketPeriod period;
} CopiedTemplate;

static struct
{
	uint64		generation;		/* read at; 0: no copy */
	Oid			relid;
	int			count;			/* -1: too many templates to copy */
	int			memory_count;	/* how many are memory templates */
	CopiedTemplate *templates;
	MemoryContext context;
}			template_copy;

/*
 * Whether this backend's copy of the templates of "relid" is the one
 * committed at "generation" (read before the copy is made, so that a
 * change committed after the copy's snapshot moves it), making the copy if
 * need be.  Only a transaction that has written nothing uses the copy:
 * then the latest snapshot is the committed state, and no change of its
 * own, which could still roll back, is in the copy.
 */
static bool
template_copy_current(Oid relid, uint64 generation)
{
	uint64		rows;
	MemoryContext old;

	if (generation == 0 || TransactionIdIsValid(GetTopTransactionIdIfAny()))
		return false;
	if (template_copy.generation == generation && template_copy.relid == relid)
		return template_copy.count >= 0;

	template_copy.generation = 0;
	if (template_copy.context == NULL)
		template_copy.context = AllocSetContextCreate(TopMemoryContext,
													  "tokenbucket templates",
													  ALLOCSET_SMALL_SIZES);
	MemoryContextReset(template_copy.context);
	template_copy.templates = NULL;
	template_copy.count = -1;
	template_copy.memory_count = 0;
	rows = plan_run_latest(&templates_plan, relid, NULL, NULL);
	if (rows <= TEMPLATES_COPIED_MAX)
	{
		TupleDesc	desc = rows > 0 ? SPI_tuptable->tupdesc : NULL;

		old = MemoryContextSwitchTo(template_copy.context);
		template_copy.templates = palloc0(sizeof(CopiedTemplate) * Max(rows, 1));
		for (uint64 i = 0; i < rows; i++)
		{
			HeapTuple	tuple = SPI_tuptable->vals[i];
			CopiedTemplate *t = &template_copy.templates[i];
			bool		isnull;
			text	   *name = DatumGetTextPP(SPI_getbinval(tuple, desc, 1, &isnull));

			t->len = VARSIZE_ANY_EXHDR(name) - 1;
			t->prefix = pnstrdup(VARDATA_ANY(name), t->len);
			t->row.capacity = DatumGetFloat8(SPI_getbinval(tuple, desc, 2, &isnull));
			t->row.refill_rate = DatumGetFloat8(SPI_getbinval(tuple, desc, 3, &isnull));
			t->memory = DatumGetBool(SPI_getbinval(tuple, desc, 4, &isnull));
			read_period(tuple, desc, 5, &t->period);
			t->row.period = &t->period;
			t->row.paused_until = DT_NOBEGIN;
			t->row.deficit = DatumGetFloat8(SPI_getbinval(tuple, desc, 8, &isnull));
			t->row.updated_at = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 9, &isnull));
			template_copy.memory_count += t->memory ? 1 : 0;
		}
		MemoryContextSwitchTo(old);
		template_copy.count = (int) rows;
	}
	if (rows > 0)
	{
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
	}
	template_copy.relid = relid;
	template_copy.generation = generation;
	return template_copy.count >= 0;
}

/*
 * Whether this backend keeps the copy of the templates of "relid" at
 * "generation": then bucket_config_memory_template() answers from it
 * without a statement, outside an SPI session too.
 */
bool
bucket_config_templates_kept(Oid relid, uint64 generation)
{
	return generation != 0 && template_copy.generation == generation &&
		template_copy.relid == relid;
}

/*
 * If the copy of the templates kept at configuration "generation" says
 * that a memory template makes "name" (when it has no row of its own),
 * put that template's configuration in *config and return true; false
 * when the copy cannot say so (no copy at that generation, a table
 * template, or none).  In an SPI session.
 */
bool
bucket_config_memory_template(Oid relid, text *name, TimestampTz now,
							  uint64 generation, BucketConfig *config)
{
	const CopiedTemplate *best = NULL;
	int			len = VARSIZE_ANY_EXHDR(name);

	/*
	 * a name longer than a memory bucket's may be a longer table
	 * template's, whose making the memory store ignored: no generation
	 * moved for it
	 */
	if (len == 0 || len > SHARED_NAME_MAX_BYTES || is_template_name(name) ||
		!template_copy_current(relid, generation) ||
		template_copy.memory_count == 0)
		return false;
	for (int i = 0; i < template_copy.count; i++)
	{
		const CopiedTemplate *t = &template_copy.templates[i];

		if (t->len <= len && (best == NULL || t->len > best->len) &&
			memcmp(t->prefix, VARDATA_ANY(name), t->len) == 0)
			best = t;
	}
	if (best == NULL || !best->memory)
		return false;
	template_config(config, &best->row, best->len + 1, true, false, now);
	return true;
}

/*
 * The configuration of bucket "name": its row (with the row's state), or
 * the template that would make it (the full bucket it would make at
 * "now").  Templates are never made from templates.  With "latest", as
 * committed now (and as this transaction changed it), whatever the
 * transaction's snapshot: what a memory bucket's entry is made from; then
 * a nonzero "generation" (the memory store's, read before) lets a memory
 * template come from this backend's copy of the templates.
 */
ConfigSource
bucket_config_find(Oid relid, text *name, TimestampTz now, bool latest,
				   uint64 generation, BucketConfig *config)
{
	Datum		args[1] = {PointerGetDatum(name)};
	HeapTuple	tuple;
	TupleDesc	desc;
	bool		isnull;
	Datum		template_len;
	BucketPeriod period;
	Bucket		row;

	if (run(&read_plan, relid, args, latest) == 1)
	{
		tuple = SPI_tuptable->vals[0];
		desc = SPI_tuptable->tupdesc;
		config->memory = DatumGetBool(SPI_getbinval(tuple, desc, 9, &isnull));
		template_len = SPI_getbinval(tuple, desc, 10, &isnull);
		config->template_len = isnull ? 0 : DatumGetInt32(template_len);
		config->mine = TransactionIdIsCurrentTransactionId(
			DatumGetTransactionId(SPI_getbinval(tuple, desc, 11, &isnull)));
		plan_read_bucket(&config->bucket);
		return config->source = CONFIG_ROW;
	}
	if (latest && bucket_config_memory_template(relid, name, now, generation, config))
		return config->source;
	if (VARSIZE_ANY_EXHDR(name) == 0 || is_template_name(name) ||
		run(&template_plan, relid, args, latest) == 0)
		return config->source = CONFIG_NONE;

	tuple = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	read_period(tuple, desc, 6, &period);
	row.capacity = DatumGetFloat8(SPI_getbinval(tuple, desc, 1, &isnull));
	row.refill_rate = DatumGetFloat8(SPI_getbinval(tuple, desc, 2, &isnull));
	row.deficit = DatumGetFloat8(SPI_getbinval(tuple, desc, 9, &isnull));
	row.updated_at = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 10, &isnull));
	row.paused_until = DT_NOBEGIN;
	row.period = &period;
	template_config(config, &row,
					DatumGetInt32(SPI_getbinval(tuple, desc, 3, &isnull)),
					DatumGetBool(SPI_getbinval(tuple, desc, 4, &isnull)),
					TransactionIdIsCurrentTransactionId(
						DatumGetTransactionId(SPI_getbinval(tuple, desc, 5, &isnull))),
					now);
	SPI_freetuptable(SPI_tuptable);
	SPI_tuptable = NULL;
	return config->source;
}

/* A new bucket or template row, full; false when the name is taken. */
bool
bucket_config_insert(Oid relid, text *name, double capacity, double refill_rate,
					 bool memory, TimestampTz now)
{
	Datum		args[5];

	args[0] = PointerGetDatum(name);
	args[1] = Float8GetDatum(capacity);
	args[2] = Float8GetDatum(refill_rate);
	args[3] = TimestampTzGetDatum(now);
	args[4] = BoolGetDatum(memory);
	return plan_run(&insert_plan, relid, args, NULL) == 1;
}

/*
 * A new bucket or template row in state "state" (a quota's, with its
 * period); false when the name is taken.
 */
bool
bucket_config_insert_state(Oid relid, text *name, const Bucket *state,
						   bool memory)
{
	Datum		args[9];
	char		nulls[10] = "         ";

	args[0] = PointerGetDatum(name);
	args[1] = Float8GetDatum(state->capacity);
	args[2] = Float8GetDatum(state->refill_rate);
	args[3] = Float8GetDatum(state->deficit);
	args[4] = TimestampTzGetDatum(state->updated_at);
	args[5] = BoolGetDatum(memory);
	period_to_datums(state->period, args + 6, nulls + 6);
	return plan_run(&insert_state_plan, relid, args, nulls) == 1;
}

/*
 * New settings (NaN keeps one) for the row of memory bucket or template
 * "name"; false when it has none.  The trigger on tb_buckets hands them
 * to the memory store when the transaction commits.
 */
bool
bucket_config_set_memory(Oid relid, text *name, double capacity,
						 double refill_rate, TimestampTz now)
{
	Datum		args[4];
	char		nulls[5] = "    ";

	args[0] = PointerGetDatum(name);
	args[1] = Float8GetDatum(capacity);
	args[2] = Float8GetDatum(refill_rate);
	args[3] = TimestampTzGetDatum(now);
	if (isnan(capacity))
		nulls[1] = 'n';
	if (isnan(refill_rate))
		nulls[2] = 'n';
	return plan_run(&memory_settings_plan, relid, args, nulls) == 1;
}

/*
 * Give the row of quota "name" (a template: and the buckets made from it)
 * calendar "period" from "now" on, keeping the tokens each holds.  The
 * table's trigger refuses a memory quota's (0A000).
 */
void
bucket_config_set_period(Oid relid, text *name, const BucketPeriod *period,
						 TimestampTz now)
{
	Datum		args[5];
	char		nulls[6] = "     ";

	args[0] = PointerGetDatum(name);
	period_to_datums(period, args + 1, nulls + 1);
	args[4] = TimestampTzGetDatum(now);
	(void) plan_run(&period_plan, relid, args, nulls);
	if (is_template_name(name))
		(void) plan_run(&period_made_plan, relid, args, nulls);
}

/* Delete the row of memory bucket or template "name"; false when none. */
bool
bucket_config_delete_memory(Oid relid, text *name)
{
	Datum		args[1] = {PointerGetDatum(name)};

	return plan_run(&memory_delete_plan, relid, args, NULL) > 0;
}

static void check_period(TriggerData *trigdata, HeapTuple row, double capacity,
						 double refill_rate);
static HeapTuple restored_row(TriggerData *trigdata, HeapTuple row, Datum capacity);

/*
 * The check of a row written into tb_buckets, for its triggers (the row,
 * for a BEFORE trigger to return): tb_check_bucket() of its columns,
 * which its CHECK constraint ran on every row version before 1.9.
 * A grant's UPDATE does not fire it (its C code checks what it writes).
 * A NULL in one of them is left to the column's NOT NULL constraint,
 * which PostgreSQL checks after a BEFORE trigger.  A memory quota's row
 * restored is returned empty (restored_row()).
 */
HeapTuple
bucket_config_check_row(TriggerData *trigdata)
{
	static const char *const columns[] = {"name", "capacity", "refill_rate",
	"deficit", "updated_at"};
	HeapTuple	row = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ?
		trigdata->tg_newtuple : trigdata->tg_trigtuple;
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);
	Datum		values[lengthof(columns)];

	for (int i = 0; i < (int) lengthof(columns); i++)
	{
		int			attnum = SPI_fnumber(desc, columns[i]);
		bool		isnull = true;

		if (attnum > 0)
			values[i] = heap_getattr(row, attnum, desc, &isnull);
		if (isnull)
			return row;
	}
	(void) DirectFunctionCall5(tb_check_bucket, values[0], values[1], values[2],
							   values[3], values[4]);
	check_period(trigdata, row, DatumGetFloat8(values[1]), DatumGetFloat8(values[2]));
	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) &&
		DatumGetTimestampTz(values[4]) < GetCurrentTransactionStartTimestamp())
		row = restored_row(trigdata, row, values[1]);
	return row;
}

/*
 * A row inserted with an updated_at older than its transaction came from
 * elsewhere (a dump restored, or rows copied): a memory quota's is written
 * empty now, so that it and its template's keys start their current
 * period spent (bucket_config_no_fuller()).  The server it came from may
 * have granted that period's budget already, and its memory state is in
 * no dump.  tb_create_quota, and an INSERT that leaves updated_at to its
 * default, write a later one.  Other rows are kept as they are.
 */
static HeapTuple
restored_row(TriggerData *trigdata, HeapTuple row, Datum capacity)
{
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);
	int			columns[2] = {SPI_fnumber(desc, "deficit"), SPI_fnumber(desc, "updated_at")};
	Datum		values[2] = {capacity, TimestampTzGetDatum(tb_clock_now())};
	bool		isnull[2] = {false, false};
	int			memory = SPI_fnumber(desc, "memory");
	int			period = SPI_fnumber(desc, "period");
	bool		continuous = true;
	bool		null;

	if (memory <= 0 || period <= 0 ||
		!DatumGetBool(heap_getattr(row, memory, desc, &null)))
		return row;
	(void) heap_getattr(row, period, desc, &continuous);
	if (continuous)
		return row;
	return heap_modify_tuple_by_cols(row, desc, 2, columns, values, isnull);
}

/*
 * The columns period, period_anchor and time_zone of a row of tb_buckets
 * "desc" into values and isnull (all NULL where a column is missing).
 */
static void
row_period(HeapTuple row, TupleDesc desc, Datum *values, bool *isnull)
{
	static const char *const columns[] = {"period", "period_anchor", "time_zone"};

	for (int i = 0; i < 3; i++)
	{
		int			attnum = SPI_fnumber(desc, columns[i]);

		isnull[i] = true;
		values[i] = attnum > 0 ? heap_getattr(row, attnum, desc, &isnull[i]) : (Datum) 0;
	}
}

/*
 * The check of a row's period (23514): none at all, or a period, an
 * anchor and a zone (period_set()'s checks) and a refill of at most the
 * capacity: a quota's tokens at each period's start.  A memory bucket's
 * period is chosen when it is made, as its kind is (0A000): its entry
 * keeps the calendar it was made with.
 */
static void
check_period(TriggerData *trigdata, HeapTuple row, double capacity,
			 double refill_rate)
{
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);
	Datum		values[3];
	bool		isnull[3];
	BucketPeriod period;

	row_period(row, desc, values, isnull);
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		Datum		old[3];
		bool		old_null[3];
		BucketPeriod before;
		int			memory = SPI_fnumber(desc, "memory");
		bool		null;

		row_period(trigdata->tg_trigtuple, desc, old, old_null);
		period_from_datums(&before, old, old_null);
		period_from_datums(&period, values, isnull);
		if (memory > 0 && memcmp(&before, &period, sizeof(BucketPeriod)) != 0 &&
			DatumGetBool(heap_getattr(trigdata->tg_trigtuple, memory, desc, &null)))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot change the period of memory bucket \"%s\"",
							TextDatumGetCString(heap_getattr(row, SPI_fnumber(desc, "name"),
															 desc, &null))),
					 errdetail("A memory bucket's calendar (period, period_anchor, time_zone) is chosen when it is made."),
					 errhint("Drop the bucket with tb_drop() and make it again with tb_create_quota().")));
	}
	if (isnull[0] && isnull[1] && isnull[2])
		return;
	if (isnull[0] || isnull[1] || isnull[2])
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("period, period_anchor and time_zone must be all set or all NULL"),
				 errdetail("A period bucket needs all three; a continuous bucket has none.")));
	period_set(&period, DatumGetIntervalP(values[0]), DatumGetTimestamp(values[1]),
			   VARDATA_ANY(DatumGetTextPP(values[2])),
			   VARSIZE_ANY_EXHDR(DatumGetTextPP(values[2])), ERRCODE_CHECK_VIOLATION);
	if (refill_rate > capacity)
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("refill_rate of a period bucket must not exceed its capacity"),
				 errdetail("A period bucket gains refill_rate tokens at each period's start, at most up to its capacity."),
				 errhint("Give it a capacity of its budget, plus what it may carry over.")));
}

/*
 * The settings of a row of tb_buckets "desc", and its state (a memory
 * bucket's: what bucket_config_no_fuller() reads).
 */
void
bucket_config_row_settings(HeapTuple row, TupleDesc desc, Bucket *settings)
{
	Datum		values[3];
	bool		isnull[3];
	bool		null;
	BucketPeriod period;

	memset(settings, 0, sizeof(Bucket));
	settings->capacity = DatumGetFloat8(heap_getattr(row, SPI_fnumber(desc, "capacity"),
													 desc, &null));
	settings->refill_rate = DatumGetFloat8(heap_getattr(row, SPI_fnumber(desc, "refill_rate"),
														desc, &null));
	row_period(row, desc, values, isnull);
	period_from_datums(&period, values, isnull);
	settings->period = period_intern(&period);
	settings->deficit = DatumGetFloat8(heap_getattr(row, SPI_fnumber(desc, "deficit"),
													desc, &null));
	settings->updated_at = DatumGetTimestampTz(heap_getattr(row, SPI_fnumber(desc, "updated_at"),
															desc, &null));
	settings->paused_until = DT_NOBEGIN;
}
