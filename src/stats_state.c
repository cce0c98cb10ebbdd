/*-------------------------------------------------------------------------
 *
 * stats_state.c
 *	  The counters across server starts: their shared memory set aside,
 *	  every counter saved by a clean shutdown and read back at the next
 *	  start.
 *
 * A clean shutdown saves every counter to a file read back at the next
 * start (shmem.c's StateFile): counters start again from zero only after
 * a crash, or by tb_stats_reset().
 *
 * src/stats_state.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "pgstat.h"
#include "stats_hash.h"
#include "stats_state.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

/* the counters a clean shutdown keeps */
#define STATE_FILE		PGSTAT_STAT_PERMANENT_DIRECTORY "/tokenbucket.counters"
#define STATE_MAGIC		0x74624331	/* "tbC1" */
#define STATE_FORMAT	2		/* 1: no counters of limits */

/* SharedArea shutdown: keep every counter in the state file. */
static void
stats_save(void)
{
	StateFile	sf;
	int64		count = hash_get_num_entries(stats_entries);

	if (!state_save_begin(&sf, STATE_FILE, STATE_MAGIC, STATE_FORMAT))
		return;
	state_save(&sf, &stats_shared->started_at, sizeof(TimestampTz));
	state_save(&sf, &count, sizeof(count));
	for (int p = 0; p < STATS_PARTITIONS; p++)
		for (StatsEntry *entry = stats_shared->partitions[p].head; entry; entry = entry->next)
		{
			state_save(&sf, &entry->key, offsetof(SharedKey, name) +
					   Min(entry->key.len, SHARED_NAME_MAX_BYTES));
			state_save(&sf, &entry->kind, sizeof(entry->kind));
			state_save(&sf, &entry->template_len, sizeof(entry->template_len));
			state_save(&sf, &entry->since, sizeof(entry->since));
			state_save(&sf, &entry->counters, sizeof(StatsCounts));
		}
	(void) state_save_end(&sf);
}

/*
 * SharedArea startup, in the postmaster: the counters a clean shutdown
 * kept, or zero from now.
 */
static void
stats_startup(void)
{
	StateFile	sf;
	bool		existed;
	int64		count;
	TimestampTz started_at;

	stats_shared->started_at = GetCurrentTimestamp();
	if (!state_load_begin(&sf, STATE_FILE, STATE_MAGIC, STATE_FORMAT,
						  "The counters start from zero.", &existed))
		return;
	if (state_load(&sf, &started_at, sizeof(started_at)) &&
		state_load(&sf, &count, sizeof(count)))
	{
		for (int64 i = 0; i < count; i++)
		{
			SharedKey	key;
			uint8		kind;
			uint16		template_len;
			TimestampTz since;
			StatsCounts counters = {0};

			memset(&key, 0, sizeof(key));
			if (!state_load(&sf, &key, offsetof(SharedKey, name)) ||
				!state_load(&sf, key.name, Min(key.len, SHARED_NAME_MAX_BYTES)) ||
				!state_load(&sf, &kind, sizeof(kind)) ||
				!state_load(&sf, &template_len, sizeof(template_len)) ||
				!state_load(&sf, &since, sizeof(since)) ||
				!state_load(&sf, &counters, sf.format >= 2 ?
							sizeof(counters) : STATS_COUNTERS_SIZE_1_6))
				break;
			if (kind > STATS_KEY || !stats_restore(&key, kind, template_len, &counters, since))
			{
				sf.failed = true;
				break;
			}
		}
	}
	if (!state_load_end(&sf))
	{
		/* what was read is not to be trusted either */
		for (int p = 0; p < STATS_PARTITIONS; p++)
			while (stats_shared->partitions[p].head != NULL)
				stats_remove_entry(stats_shared->partitions[p].head);
		return;
	}
	stats_shared->started_at = started_at;
}

static const SharedArea stats_area = {
	.name = "tokenbucket stats",
	.size = stats_shmem_size,
	.nlocks = stats_shmem_locks,
	.attach = stats_attach,
	.startup = stats_startup,
	.shutdown = stats_save,
};

/* The GUC, and the counters' shared memory (the library being preloaded). */
void
stats_state_init(void)
{
	DefineCustomIntVariable("tokenbucket.max_stats_buckets",
							"Most templates, named buckets and table templates' keys the server keeps counters for.",
							"Each takes shared memory from the start; when they are all in use, "
							"the keys' counters used longest ago go (their templates keep the counts).",
							&max_stats_buckets,
							10000, 100, 100000000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	shmem_register(&stats_area);
}
