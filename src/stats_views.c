/*-------------------------------------------------------------------------
 *
 * stats_views.c
 *	  The counters as SQL sees them: tb_stats_counters(),
 *	  tb_template_counters(), tb_limit_counters() and tb_stats_key(), which
 *	  the views tb_stats and tb_template_stats read, and the columns of a
 *	  bucket's and a limit's counters.
 *
 * Each copies the entries of its installation out of shared memory one
 * partition at a time: no lock is held longer than a partition's copy.
 * Names longer than an entry holds are listed under tb_stats_key()'s
 * key, for the views to join on.
 *
 * src/stats_views.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "stats_hash.h"
#include "stats_views.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/*
 * The SQL values of "counters" (STATS_COLUMNS of them): granted,
 * granted_tokens, denied, waited, wait_seconds, timeouts,
 * refunded_tokens, pauses, cancelled.
 */
void
stats_values(const BucketCounters *c, Datum *values)
{
	values[0] = Int64GetDatum(c->granted);
	values[1] = Float8GetDatum(c->granted_tokens);
	values[2] = Int64GetDatum(c->denied);
	values[3] = Int64GetDatum(c->waited);
	values[4] = Float8GetDatum((double) c->wait_usecs / USECS_PER_SEC);
	values[5] = Int64GetDatum(c->timeouts);
	values[6] = Float8GetDatum(c->refunded_tokens);
	values[7] = Int64GetDatum(c->pauses);
	values[8] = Int64GetDatum(c->cancelled);
}

/*
 * The SQL values of a limit's counters (LIMIT_COLUMNS of them): leases
 * granted, their slots, leases refused, waited, wait_seconds, timeouts, cancelled,
 * then slots released, ended and expired.
 */
#define LIMIT_COLUMNS 10
static void
limit_values(const LimitCounters *c, Datum *values)
{
	values[0] = Int64GetDatum(c->leases);
	values[1] = Int64GetDatum((int64) c->slots);
	values[2] = Int64GetDatum(c->refused);
	values[3] = Int64GetDatum(c->waited);
	values[4] = Float8GetDatum((double) c->wait_usecs / USECS_PER_SEC);
	values[5] = Int64GetDatum(c->timeouts);
	values[6] = Int64GetDatum(c->cancelled);
	values[7] = Int64GetDatum(c->released);
	values[8] = Int64GetDatum(c->ended);
	values[9] = Int64GetDatum(c->expired);
}

/* One row of list_counters(), copied out under its partition's lock. */
typedef struct ListedCounters
{
	SharedKey	key;
	TimestampTz since;
	StatsCounts counters;		/* a bucket's, or with "limits" a limit's */
} ListedCounters;

/*
 * A row (name, counters, since) into "store" per entry of installation
 * "relid" of the kinds in "kinds" (a bit per StatsKind), one partition at
 * a time: no lock is held longer than a partition's copy; then a row with
 * a NULL name whose "since" holds for buckets without an entry.  With
 * "limits", "relid" is a tb_limits and the columns a limit's.
 */
static void
list_counters(Oid relid, int kinds, bool limits, Tuplestorestate *store,
			  TupleDesc desc)
{
	ListedCounters *rows = NULL;
	int			maxrows = 0;
	int			columns = limits ? LIMIT_COLUMNS : STATS_COLUMNS;
	Datum		values[2 + Max(STATS_COLUMNS, LIMIT_COLUMNS)];
	bool		nulls[2 + Max(STATS_COLUMNS, LIMIT_COLUMNS)];

	for (int p = 0; p < STATS_PARTITIONS; p++)
	{
		LWLock	   *lock = &stats_shared->locks[p].lock;
		int			nrows = 0;
		int			wanted = 0;
		StatsEntry *entry;

		/* room first: nothing may fail under the lock */
		LWLockAcquire(lock, LW_SHARED);
		for (entry = stats_shared->partitions[p].head; entry; entry = entry->next)
			wanted++;
		LWLockRelease(lock);
		if (wanted > maxrows)
		{
			maxrows = wanted * 2;
			rows = rows ? repalloc(rows, sizeof(ListedCounters) * maxrows) :
				palloc(sizeof(ListedCounters) * maxrows);
		}
		LWLockAcquire(lock, LW_SHARED);
		for (entry = stats_shared->partitions[p].head; entry && nrows < maxrows; entry = entry->next)
		{
			if (entry->key.dbid != MyDatabaseId || entry->key.relid != relid ||
				(kinds & (1 << entry->kind)) == 0)
				continue;
			rows[nrows].key = entry->key;
			rows[nrows].since = entry->since;
			SpinLockAcquire(&entry->mutex);
			rows[nrows].counters = entry->counters;
			SpinLockRelease(&entry->mutex);
			nrows++;
		}
		LWLockRelease(lock);

		memset(nulls, 0, sizeof(nulls));
		for (int i = 0; i < nrows; i++)
		{
			values[0] = PointerGetDatum(shared_key_long_text(&rows[i].key));
			if (limits)
				limit_values(&rows[i].counters.limit, values + 1);
			else
				stats_values(&rows[i].counters.bucket, values + 1);
			values[1 + columns] = TimestampTzGetDatum(rows[i].since);
			tuplestore_putvalues(store, desc, values, nulls);
		}
	}
	memset(nulls, true, sizeof(nulls));
	nulls[1 + columns] = false;
	values[1 + columns] = TimestampTzGetDatum(stats_installation_since(relid));
	tuplestore_putvalues(store, desc, values, nulls);
}

PG_FUNCTION_INFO_V1(tb_stats_counters);

/*
 * tb_stats_counters(): the counters of every named bucket and table
 * template's key of this installation that has an entry (name, granted,
 * granted_tokens, denied, waited, wait_seconds, timeouts,
 * refunded_tokens, pauses, cancelled, since), and a row with a NULL name
 * whose "since" holds for buckets without one.  Per-key: for whoever may
 * read tb_stats.
 */
Datum
tb_stats_counters(PG_FUNCTION_ARGS)
{
	Installation inst = installation_of(fcinfo);
	static const char *const views[] = {"tb_stats", NULL};
	TupleDesc	desc;
	Tuplestorestate *store = materialize_begin(fcinfo, &desc);

	check_may_read(&inst, "tb_stats_counters()", views);
	stats_require();
	list_counters(installation_table(&inst), (1 << STATS_NAMED) | (1 << STATS_KEY),
				  false, store, desc);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(tb_template_counters);

/*
 * tb_template_counters(): tb_stats_counters() of the templates: each
 * template's counters, the sums over every bucket made from it.  For
 * whoever may read tb_template_stats or tb_stats.
 */
Datum
tb_template_counters(PG_FUNCTION_ARGS)
{
	Installation inst = installation_of(fcinfo);
	static const char *const views[] = {"tb_template_stats", "tb_stats", NULL};
	TupleDesc	desc;
	Tuplestorestate *store = materialize_begin(fcinfo, &desc);

	check_may_read(&inst, "tb_template_counters()", views);
	stats_require();
	list_counters(installation_table(&inst), 1 << STATS_TEMPLATE, false, store, desc);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(tb_limit_counters);

/*
 * tb_limit_counters(): the counters of every limit, limit template and
 * name a limit template made of this installation that has an entry
 * (name, granted, slots, refused, waited, wait_seconds, timeouts,
 * cancelled, released, ended, expired, since), and a row with a NULL name
 * whose "since" holds for limits without one.  For whoever may read
 * tb_stats.
 */
Datum
tb_limit_counters(PG_FUNCTION_ARGS)
{
	Installation inst = installation_of(fcinfo);
	static const char *const views[] = {"tb_stats", NULL};
	TupleDesc	desc;
	Tuplestorestate *store = materialize_begin(fcinfo, &desc);
	Oid			limits;

	check_may_read(&inst, "tb_limit_counters()", views);
	stats_require();
	limits = installation_limits(&inst);
	if (!OidIsValid(limits))
		report_dropped();
	list_counters(limits, (1 << STATS_NAMED) | (1 << STATS_KEY) | (1 << STATS_TEMPLATE),
				  true, store, desc);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(tb_stats_key);

/*
 * tb_stats_key(name): the name the counters of bucket "name" are listed
 * under: the name itself, or for one over 128 bytes its first bytes, an
 * ellipsis and a hash of it all.
 */
Datum
tb_stats_key(PG_FUNCTION_ARGS)
{
	text	   *name = PG_GETARG_TEXT_PP(0);
	SharedKey	key;

	shared_key_long(&key, InvalidOid, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
	PG_RETURN_TEXT_P(shared_key_long_text(&key));
}

