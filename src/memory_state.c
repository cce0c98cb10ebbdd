/*-------------------------------------------------------------------------
 *
 * memory_state.c
 *	  The memory store across server starts: its shared memory set aside,
 *	  the state a clean shutdown saved read back, and saved again.
 *
 * A clean shutdown writes every entry to a file (shmem.c's StateFile),
 * read back and removed at the next start, as pg_stat_statements does.
 * A file that is corrupt, from another cluster, or left by a shutdown that
 * was not clean is ignored: the buckets start empty.  So does a start
 * without a file when a marker file says memory buckets were used here
 * before (a save that failed, a file removed): only the first start with
 * the library, when no bucket can have granted anything, starts them full.
 *
 * src/memory_state.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "catalog/pg_control.h"
#include "common.h"
#include "common/controldata_utils.h"
#include "memory_entries.h"
#include "memory_state.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

/* the state file a clean shutdown writes */
#define STATE_FILE		PGSTAT_STAT_PERMANENT_DIRECTORY "/tokenbucket.buckets"
#define STATE_MAGIC		0x74624D31	/* "tbM1" */
#define STATE_FORMAT	5		/* 1: template lengths without the '*';
								 * 1 and 2: no counters; 3: counters
								 * without those of limits; up to 4:
								 * buckets without a period (5: the
								 * calendar's content, zero for none,
								 * after the rest of the Bucket) */

/* SharedArea shutdown: write the committed entries to the state file. */
static void
save_state(void)
{
	StateFile	sf;
	int64		count = 0;

	if (memory_shared->unusable ||
		!state_save_begin(&sf, STATE_FILE, STATE_MAGIC, STATE_FORMAT))
		return;
	for (int p = 0; p < MEMORY_PARTITIONS; p++)
		for (MemoryEntry *entry = memory_shared->partitions[p].head; entry; entry = entry->next)
			count += !entry->key.provisional;
	state_save(&sf, &memory_shared->empty_at, sizeof(TimestampTz));
	state_save(&sf, &memory_shared->timeline, sizeof(TimeLineID));
	state_save(&sf, &count, sizeof(count));
	for (int p = 0; p < MEMORY_PARTITIONS; p++)
		for (MemoryEntry *entry = memory_shared->partitions[p].head; entry; entry = entry->next)
		{
			uint16		template_len = memory_template_name_len(entry);
			BucketPeriod period = {0};

			if (entry->key.provisional)
				continue;
			state_save(&sf, &entry->key.name, offsetof(SharedKey, name) + entry->key.name.len);
			state_save(&sf, &template_len, sizeof(uint16));
			if (entry->bucket.period != NULL)
				period = *entry->bucket.period;
			state_save(&sf, &entry->bucket, offsetof(Bucket, period));
			state_save(&sf, &period, sizeof(BucketPeriod));
			state_save(&sf, &entry->since, sizeof(TimestampTz));
			state_save(&sf, &entry->counters, sizeof(StatsCounts));
		}
	(void) state_save_end(&sf);
}

/*
 * Read the state file a clean shutdown wrote, if any, and remove it.  True
 * when the entries and empty_at now hold what was saved; false (after a
 * LOG line when there was a file) when the buckets must start empty.
 * *existed: there was a file.
 */
static bool
load_state(bool *existed)
{
	StateFile	sf;
	int64		count;
	TimestampTz empty_at;
	TimeLineID	timeline;

	if (!state_load_begin(&sf, STATE_FILE, STATE_MAGIC, STATE_FORMAT,
						  "Every memory token bucket starts empty.", existed))
		return false;
	if (state_load(&sf, &empty_at, sizeof(empty_at)) &&
		state_load(&sf, &timeline, sizeof(timeline)) &&
		state_load(&sf, &count, sizeof(count)))
	{
		if (count < 0 || count > max_memory_buckets)
		{
			state_load_reject(&sf, "it holds more buckets than tokenbucket.max_memory_buckets");
			return false;
		}
		for (int64 i = 0; i < count; i++)
		{
			MemoryKey	key;
			uint16		template_len;
			Bucket		bucket = {0};
			BucketPeriod period = {0};
			TimestampTz since = tb_clock_now();
			StatsCounts counters = {0};
			MemoryEntry *entry;

			memset(&key, 0, sizeof(key));
			if (!state_load(&sf, &key.name, offsetof(SharedKey, name)) ||
				key.name.len > SHARED_NAME_MAX_BYTES ||
				!state_load(&sf, key.name.name, key.name.len) ||
				!state_load(&sf, &template_len, sizeof(template_len)) ||
				!state_load(&sf, &bucket, offsetof(Bucket, period)) ||
				(sf.format >= 5 && !state_load(&sf, &period, sizeof(period))) ||
				(sf.format >= 3 &&
				 (!state_load(&sf, &since, sizeof(since)) ||
				  !state_load(&sf, &counters, sf.format >= 4 ?
							  sizeof(counters) : STATS_COUNTERS_SIZE_1_6))))
				break;
			/* format 1 counted a template's length without its '*' */
			if (sf.format == 1 && template_len > 0)
				template_len++;
			/* a calendar is interned again (memory_make_entry()) */
			if (period.months != 0 || period.days != 0 || period.usecs != 0)
				bucket.period = &period;
			if (template_len > key.name.len + 1 ||
				period.zone[BUCKET_ZONE_BYTES - 1] != '\0' ||
				memory_make_entry(&key, template_len, &bucket, InvalidTransactionId,
								  PG_UINT64_MAX, false, &entry) != ENTRY_MADE)
			{
				sf.failed = true;
				break;
			}
			entry->since = since;
			entry->counters = counters;
		}
	}
	if (!state_load_end(&sf))
	{
		memory_remove_every();
		return false;
	}
	memory_shared->empty_at = empty_at;
	memory_shared->timeline = timeline;
	return true;
}

/*
 * Make sure the marker file exists: from now on, a start without a state
 * file is not the first with the library, and starts the buckets empty.
 * False (after a LOG line) when it cannot be made.
 */
static bool
mark_used(void)
{
	int			fd;

	if (access(MARKER_FILE, F_OK) == 0)
		return true;
	fd = OpenTransientFile(MARKER_FILE, O_CREAT | O_WRONLY | PG_BINARY);
	if (fd < 0 || pg_fsync(fd) != 0 || CloseTransientFile(fd) != 0)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", MARKER_FILE),
				 errdetail("Memory token buckets cannot be used until the server is restarted with that file writable.")));
		return false;
	}
	fsync_fname(PGSTAT_STAT_PERMANENT_DIRECTORY, true);
	return true;
}

/* SharedArea startup, in the postmaster: the saved state, or the absent rule. */
static void
memory_startup(void)
{
	bool		crc_ok;
	ControlFileData *control = get_controlfile(DataDir, &crc_ok);
	bool		used_before = access(MARKER_FILE, F_OK) == 0;
	bool		existed;

	memory_shared->empty_at = DT_NOBEGIN;
	memory_shared->timeline = 0;
	memory_shared->unusable = false;
	memory_loading = true;
	if (!load_state(&existed))
	{
		/*
		 * Only the first start with the library (no marker, no file) starts
		 * the buckets full: nothing can have been granted before.  Any
		 * other start without a file to trust (a crash, a save that
		 * failed, a file removed) starts them empty.
		 */
		if (used_before && !existed)
			ereport(LOG,
					(errmsg("file \"%s\" not found: memory token buckets start empty",
							STATE_FILE),
					 errdetail("Memory buckets were used here before, and the last shutdown did not save their state (a crash, or a save that failed).")));
		memory_shared->empty_at = used_before || existed ? tb_clock_now() : DT_NOBEGIN;
		memory_shared->timeline = control->checkPointCopy.ThisTimeLineID;
	}
	memory_loading = false;
	memory_shared->unusable = !mark_used();
}

static const SharedArea memory_area = {
	.name = "tokenbucket",
	.size = memory_shmem_size,
	.nlocks = memory_shmem_locks,
	.attach = memory_attach,
	.startup = memory_startup,
	.shutdown = save_state,
};


/* The GUCs, and the store's shared memory (the library being preloaded). */
void
memory_state_init(void)
{
	DefineCustomIntVariable("tokenbucket.max_memory_buckets",
							"Most memory token buckets the server keeps at once.",
							"Each takes shared memory from the start; "
							"a tenth is kept for named buckets, which keys made from templates never take.",
							&max_memory_buckets,
							10000, 100, 100000000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("tokenbucket.max_template_keys",
							"Most keys one memory template may have at once.",
							"0 means a quarter of tokenbucket.max_memory_buckets. "
							"A template at its limit reuses its idle keys, or refuses new ones.",
							&max_template_keys,
							0, 0, 100000000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	shmem_register(&memory_area);
}

