/*-------------------------------------------------------------------------
 *
 * limit_config.c
 *	  A limit's configuration, in tb_limits through SPI: its row, or its
 *	  longest template's; the rows tb_create_limit, tb_alter_limit,
 *	  tb_ensure_limit and tb_drop write; and this backend's cache of
 *	  memory limits' configuration.
 *
 * A limit's row (name, max_in_flight, memory) is its configuration, and a
 * template's that of every name after its prefix that has no row of its
 * own.  A lease reads it committed, as of now (and as this transaction
 * changed it), whatever the transaction's snapshot.  A memory limit's is
 * kept in the cache until the memory store's generation moves (a change
 * of tb_limits committed), so that a lease from one runs no statement at
 * all.  The statements run in the SPI session of spi_session.c.
 *
 * src/limit_config.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "bucket.h"
#include "catalog/pg_type.h"
#include "common.h"
#include "common/hashfn.h"
#include "limit_config.h"
#include "shmem.h"
#include "utils/builtins.h"

/* Fail: no limit "name", and no template makes it. */
void
limit_report_missing(text *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("limit \"%s\" does not exist", text_to_cstring(name)),
			 errhint("The DBA makes limits with tb_create_limit().")));
}

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

/* Its template's name length, for the counters: 0 for none. */
static KeptPlan template_plan = {
	.sql = "SELECT r.template_len FROM " LIMIT_ROW_OF_1 " AS r",
	.nargs = 1, .argtypes = {TEXTOID}
};

/*
 * The limit of "name" of installation "relid", committed (and this
 * transaction's own), into *config; false if there is none.
 */
bool
limit_config_find(Oid relid, text *name, LimitConfig *config)
{
	Datum		args[1] = {PointerGetDatum(name)};
	HeapTuple	row;
	TupleDesc	desc;
	bool		isnull;

	if (plan_run_latest(&limit_plan, relid, args, NULL) == 0)
		return false;
	row = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	config->max_in_flight = DatumGetInt32(SPI_getbinval(row, desc, 1, &isnull));
	config->memory = DatumGetBool(SPI_getbinval(row, desc, 2, &isnull));
	config->template_len = DatumGetInt32(SPI_getbinval(row, desc, 3, &isnull));
	config->made = DatumGetInt32(SPI_getbinval(row, desc, 4, &isnull));
	if (isnull)
		config->made = 0;
	config->alone = DatumGetBool(SPI_getbinval(row, desc, 5, &isnull)) && !isnull;
	SPI_freetuptable(SPI_tuptable);
	SPI_tuptable = NULL;
	return true;
}

/*
 * The length of the name of the template of limit "name" of "relid" (0:
 * none), for the counters.
 */
int
limit_config_template_len(Oid relid, text *name)
{
	Datum		args[1] = {PointerGetDatum(name)};
	bool		isnull;
	int			len = 0;

	if (plan_run(&template_plan, relid, args, NULL) == 1)
	{
		len = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
										  1, &isnull));
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
	}
	return len;
}

/*
 * The slots a lease with "reserve" must leave free of a limit of
 * "max_in_flight": reserve x max_in_flight, rounded up to a whole slot
 * (to within BUCKET_RESERVE_SLACK, as for a bucket, so that 0.2 of 10 is
 * 2, not 3).
 */
int32
limit_reserve_slots(int32 max_in_flight, double reserve)
{
	double		keep = ceil(reserve * max_in_flight -
							max_in_flight * BUCKET_RESERVE_SLACK);

	return keep > 0 ? (int32) keep : 0;
}

/* A new limit; nothing when the name is taken. */
static KeptPlan create_limit_plan = {
	.sql = "INSERT INTO %1$s.tb_limits (name, max_in_flight, memory) VALUES ($1, $2, $3)"
	" ON CONFLICT (name) DO NOTHING",
	.nargs = 3, .argtypes = {TEXTOID, INT4OID, BOOLOID},
	.holds = HELD_LIMIT
};

/* A new limit, its row; false when the name is taken. */
bool
limit_config_insert(Oid relid, text *name, int32 max_in_flight, bool memory)
{
	Datum		args[3] = {PointerGetDatum(name), Int32GetDatum(max_in_flight),
	BoolGetDatum(memory)};

	return plan_run(&create_limit_plan, relid, args, NULL) > 0;
}

/* New settings for a limit. */
static KeptPlan alter_limit_plan = {
	.sql = "UPDATE %1$s.tb_limits SET max_in_flight = $2"
	" WHERE name OPERATOR(pg_catalog.=) $1",
	.nargs = 2, .argtypes = {TEXTOID, INT4OID},
	.holds = HELD_LIMIT
};

/* A new max_in_flight for limit "name"; false when it has no row. */
bool
limit_config_set(Oid relid, text *name, int32 max_in_flight)
{
	Datum		args[2] = {PointerGetDatum(name), Int32GetDatum(max_in_flight)};

	return plan_run(&alter_limit_plan, relid, args, NULL) > 0;
}

/* A limit's own row, as committed (or as this transaction wrote it). */
static KeptPlan limit_row_plan = {
	.sql = "SELECT max_in_flight, memory FROM %1$s.tb_limits WHERE name OPERATOR(pg_catalog.=) $1",
	.nargs = 1, .argtypes = {TEXTOID}
};

/*
 * The settings of limit "name"'s own row (not its template's), read on the
 * latest snapshot; false when it has none.
 */
bool
limit_config_row(Oid relid, text *name, int32 *max_in_flight, bool *memory)
{
	Datum		args[1] = {PointerGetDatum(name)};
	bool		isnull;

	if (plan_run_latest(&limit_row_plan, relid, args, NULL) == 0)
		return false;
	*max_in_flight = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
												 1, &isnull));
	*memory = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	SPI_freetuptable(SPI_tuptable);
	SPI_tuptable = NULL;
	return true;
}

/* A limit's row gone: whether it was a memory limit. */
static KeptPlan drop_limit_plan = {
	.sql = "DELETE FROM %1$s.tb_limits WHERE name OPERATOR(pg_catalog.=) $1 RETURNING memory",
	.nargs = 1, .argtypes = {TEXTOID},
	.holds = HELD_LIMIT
};

/*
 * Delete the row of limit "name"; false when it had none, else *memory
 * says whether it was a memory limit.
 */
bool
limit_config_delete(Oid relid, text *name, bool *memory)
{
	Datum		args[1] = {PointerGetDatum(name)};
	bool		isnull;

	if (plan_run(&drop_limit_plan, relid, args, NULL) == 0)
		return false;
	*memory = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	SPI_freetuptable(SPI_tuptable);
	SPI_tuptable = NULL;
	return true;
}

/*
 * The row that makes each name of $1, in its order: the row's name (its
 * template's, or its own) and kind; NULL, NULL where none does.
 */
static KeptPlan makers_plan = {
	.sql = "SELECT coalesce(m.template, n.name), m.memory"
	" FROM pg_catalog.unnest($1) WITH ORDINALITY AS n(name, i)"
	" LEFT JOIN LATERAL " LIMIT_ROW_OF("n.name") " AS m ON true"
	" ORDER BY n.i",
	.nargs = 1, .argtypes = {TEXTARRAYOID}
};

/*
 * The row that makes each of "names" (a text[]), into makers[i] for its
 * i-th: as the statement running saw tb_limits before its own changes
 * ("before": what a trigger compares with), or as a lease reads it now
 * (committed, and this transaction's own: what follows).
 */
void
limit_config_makers(Oid relid, ArrayType *names, bool before, LimitMaker *makers)
{
	Datum		args[1] = {PointerGetDatum(names)};
	uint64		rows;

	rows = before ? plan_run_before(&makers_plan, relid, args, NULL) :
		plan_run_latest(&makers_plan, relid, args, NULL);
	for (uint64 i = 0; i < rows; i++)
	{
		HeapTuple	row = SPI_tuptable->vals[i];
		bool		isnull;
		Datum		memory = SPI_getbinval(row, SPI_tuptable->tupdesc, 2, &isnull);

		makers[i].found = !isnull;
		makers[i].memory = !isnull && DatumGetBool(memory);
		makers[i].row = DatumGetTextPCopy(SPI_getbinval(row, SPI_tuptable->tupdesc, 1, &isnull));
	}
	if (rows > 0)
	{
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
	}
}

/*
 * Memory limits' configuration as this backend read it, by name: while
 * no change of tb_limits has committed since (the configuration
 * generation is the same), a lease from one runs no statement at all.
 */
#define CACHED_LIMITS 64
typedef struct CachedLimit
{
	uint64		generation;		/* the memory store's generation() before it
								 * was read; 0: empty */
	Oid			relid;
	int			len;
	char		name[SHARED_NAME_MAX_BYTES];	/* a memory limit's */
	LimitConfig limit;
} CachedLimit;

static CachedLimit cached_limits[CACHED_LIMITS];

/* The cache's place for limit "name". */
static CachedLimit *
cached_slot(text *name)
{
	return &cached_limits[hash_bytes((const unsigned char *) VARDATA_ANY(name),
									 VARSIZE_ANY_EXHDR(name)) % CACHED_LIMITS];
}

/* Whether "cached" was read at "generation" (an empty one never was). */
static bool
cached_at(const CachedLimit *cached, uint64 generation)
{
	return cached->generation != 0 &&
		(generation == LIMIT_CACHE_ANY || cached->generation == generation);
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
 * The configuration of memory limit "name" of "relid" as read at
 * "generation" (LIMIT_CACHE_ANY: at any), or NULL when the cache holds
 * none.
 */
const LimitConfig *
limit_cache_find(Oid relid, text *name, uint64 generation)
{
	CachedLimit *cached = cached_entry(relid, name, generation);

	return cached ? &cached->limit : NULL;
}

/*
 * Keep memory limit "limit" of "name", read at "generation"; a template
 * that alone makes the names after its prefix, under its prefix.  A table
 * limit is not kept, and what was kept for its name is forgotten: what
 * the cache holds, current or not, is also the hint that a name is a
 * memory limit's (limit_router.c).
 */
void
limit_cache_keep(Oid relid, text *name, uint64 generation, const LimitConfig *limit)
{
	CachedLimit *cached = cached_slot(name);
	int			len = VARSIZE_ANY_EXHDR(name);

	if (!limit->memory)
	{
		while ((cached = cached_entry(relid, name, LIMIT_CACHE_ANY)) != NULL)
			cached->generation = 0;
		return;
	}
	if (generation == 0 || len > SHARED_NAME_MAX_BYTES)
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
