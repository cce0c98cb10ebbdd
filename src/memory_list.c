/*-------------------------------------------------------------------------
 *
 * memory_list.c
 *	  The memory store's entries as SQL sees them: the rows of tb_status
 *	  (the store's list()), tb_memory_buckets(), tb_memory_empty_at(),
 *	  tb_memory_counters() and tb_memory_templates().
 *
 * Each copies what it shows out of shared memory one partition at a time
 * (the templates' under their lock): no lock is held longer than a
 * partition's copy, and nothing that may fail runs under one.  Empty on a
 * standby, and without the library preloaded, where memory buckets have
 * no state.
 *
 * src/memory_list.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "common.h"
#include "memory_entries.h"
#include "miscadmin.h"
#include "stats_views.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/* A committed entry, copied out under its partition's lock. */
typedef struct ListedEntry
{
	SharedKey	name;
	int			template_len;
	Bucket		bucket;
	TimestampTz since;
	BucketCounters counters;
} ListedEntry;

/*
 * Copy the committed entries of installation "relid" in partition "p"
 * (with "keys_only", only those made from templates) into *rows, grown
 * first as need be: nothing may fail under the lock, which is held only
 * for the copy.  Returns how many.
 */
static int
copy_partition(int p, Oid relid, bool keys_only, ListedEntry **rows, int *maxrows)
{
	LWLock	   *lock = &memory_shared->locks[p].lock;
	int			nrows = 0;
	int			wanted = 0;
	MemoryEntry *entry;

	LWLockAcquire(lock, LW_SHARED);
	for (entry = memory_shared->partitions[p].head; entry; entry = entry->next)
		wanted++;
	LWLockRelease(lock);
	if (wanted > *maxrows)
	{
		*maxrows = wanted * 2;
		*rows = *rows ? repalloc(*rows, sizeof(ListedEntry) * *maxrows) :
			palloc(sizeof(ListedEntry) * *maxrows);
	}
	LWLockAcquire(lock, LW_SHARED);
	for (entry = memory_shared->partitions[p].head; entry && nrows < *maxrows; entry = entry->next)
	{
		ListedEntry *row = &(*rows)[nrows];

		if (entry->key.name.dbid != MyDatabaseId || entry->key.name.relid != relid ||
			entry->key.provisional || (keys_only && entry->template == NULL))
			continue;
		row->name = entry->key.name;
		row->template_len = memory_template_name_len(entry);
		SpinLockAcquire(&entry->mutex);
		row->bucket = entry->bucket;
		row->since = entry->since;
		row->counters = entry->counters.bucket;
		SpinLockRelease(&entry->mutex);
		nrows++;
	}
	LWLockRelease(lock);
	return nrows;
}

/*
 * A row (name, capacity, refill_rate, deficit, updated_at, paused_until,
 * template) per committed entry of the installation into "store", one
 * partition at a time: no lock is held longer than a partition's copy.
 */
void
memory_list(Oid relid, Tuplestorestate *store, TupleDesc desc)
{
	ListedEntry *rows = NULL;
	int			maxrows = 0;

	if (memory_shared == NULL || RecoveryInProgress())
		return;
	memory_require();
	for (int p = 0; p < MEMORY_PARTITIONS; p++)
	{
		int			nrows = copy_partition(p, relid, false, &rows, &maxrows);

		for (int i = 0; i < nrows; i++)
		{
			Datum		values[7];
			bool		nulls[7] = {0};
			ListedEntry *row = &rows[i];

			values[0] = PointerGetDatum(cstring_to_text_with_len(row->name.name, row->name.len));
			values[1] = Float8GetDatum(row->bucket.capacity);
			values[2] = Float8GetDatum(row->bucket.refill_rate);
			values[3] = Float8GetDatum(row->bucket.deficit);
			values[4] = TimestampTzGetDatum(row->bucket.updated_at);
			values[5] = TimestampTzGetDatum(row->bucket.paused_until);
			if (row->template_len > 0)
			{
				char	   *template = palloc(row->template_len);

				memcpy(template, row->name.name, row->template_len - 1);
				template[row->template_len - 1] = '*';
				values[6] = PointerGetDatum(cstring_to_text_with_len(template, row->template_len));
			}
			else
				nulls[6] = true;
			tuplestore_putvalues(store, desc, values, nulls);
		}
	}
}

PG_FUNCTION_INFO_V1(tb_memory_buckets);

/*
 * tb_memory_buckets(): the state of every memory bucket of this database
 * that has an entry (name, settings, deficit, updated_at, paused_until,
 * template).  Empty on a standby or without the library preloaded.
 */
Datum
tb_memory_buckets(PG_FUNCTION_ARGS)
{
	Installation inst = installation_of(fcinfo);
	static const char *const views[] = {"tb_status", "tb_stats", "tb_quotas", NULL};
	TupleDesc	desc;
	Tuplestorestate *store = materialize_begin(fcinfo, &desc);

	/* the views built on it call it as their reader */
	check_may_read(&inst, "tb_memory_buckets()", views);
	memory_list(installation_table(&inst), store, desc);
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(tb_memory_empty_at);

/*
 * tb_memory_empty_at(): the moment a memory bucket without an entry was
 * empty (-infinity: it is full); NULL on a standby or without the library
 * preloaded, where memory buckets have no state.
 */
Datum
tb_memory_empty_at(PG_FUNCTION_ARGS)
{
	if (memory_shared == NULL || RecoveryInProgress())
		PG_RETURN_NULL();
	memory_require();
	PG_RETURN_TIMESTAMPTZ(memory_shared->empty_at);
}

PG_FUNCTION_INFO_V1(tb_memory_counters);

/*
 * tb_memory_counters(): the counters of every key made from a memory
 * template of this installation that has an entry (name, granted,
 * granted_tokens, denied, waited, wait_seconds, timeouts,
 * refunded_tokens, pauses, cancelled, since), one partition at a time.
 * Per-key: for whoever may read tb_stats.
 */
Datum
tb_memory_counters(PG_FUNCTION_ARGS)
{
	Installation inst = installation_of(fcinfo);
	static const char *const views[] = {"tb_stats", NULL};
	TupleDesc	desc;
	Tuplestorestate *store = materialize_begin(fcinfo, &desc);
	Oid			relid = installation_table(&inst);
	ListedEntry *rows = NULL;
	int			maxrows = 0;

	check_may_read(&inst, "tb_memory_counters()", views);
	if (memory_shared == NULL || RecoveryInProgress())
		return (Datum) 0;
	memory_require();
	for (int p = 0; p < MEMORY_PARTITIONS; p++)
	{
		int			nrows = copy_partition(p, relid, true, &rows, &maxrows);
		Datum		values[2 + STATS_COLUMNS];
		bool		nulls[2 + STATS_COLUMNS] = {0};

		for (int i = 0; i < nrows; i++)
		{
			values[0] = PointerGetDatum(cstring_to_text_with_len(rows[i].name.name,
																 rows[i].name.len));
			stats_values(&rows[i].counters, values + 1);
			values[1 + STATS_COLUMNS] = TimestampTzGetDatum(rows[i].since);
			tuplestore_putvalues(store, desc, values, nulls);
		}
	}
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(tb_memory_templates);

/*
 * tb_memory_templates(): every memory template of this installation that
 * has keys, and how many (template, keys): one look at each template,
 * whatever the number of keys.  For whoever may read tb_template_stats,
 * tb_stats or tb_status.
 */
Datum
tb_memory_templates(PG_FUNCTION_ARGS)
{
	Installation inst = installation_of(fcinfo);
	static const char *const views[] = {"tb_template_stats", "tb_stats", "tb_status", NULL};
	TupleDesc	desc;
	Tuplestorestate *store = materialize_begin(fcinfo, &desc);
	Oid			relid = installation_table(&inst);
	SharedKey  *names;
	int64	   *keys;
	int			n;

	check_may_read(&inst, "tb_memory_templates()", views);
	if (memory_shared == NULL || RecoveryInProgress())
		return (Datum) 0;
	memory_require();
	names = palloc(sizeof(SharedKey) * MEMORY_TEMPLATES);
	keys = palloc(sizeof(int64) * MEMORY_TEMPLATES);
	n = memory_templates_of(relid, names, keys);
	for (int i = 0; i < n; i++)
	{
		Datum		values[2];
		bool		nulls[2] = {0};
		char	   *name = palloc(names[i].len + 1);

		memcpy(name, names[i].name, names[i].len);
		name[names[i].len] = '*';
		values[0] = PointerGetDatum(cstring_to_text_with_len(name, names[i].len + 1));
		values[1] = Int64GetDatum(keys[i]);
		tuplestore_putvalues(store, desc, values, nulls);
	}
	return (Datum) 0;
}
