/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  The shared-memory base of the memory store and the counters: keys of
 *	  shared hashes, areas set aside at server start, and the file a clean
 *	  shutdown keeps them in.
 *
 * Each user of shared memory registers an area from _PG_init while the
 * library is being preloaded; this file asks for every area's memory and
 * locks (shmem_request_hook), lets each make or attach its structs
 * (shmem_startup_hook) and, in the postmaster, set them up, and at a clean
 * shutdown of the postmaster lets each save what it wants kept, as
 * pg_stat_statements does with its file.
 *
 * src/shmem.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "common/hashfn.h"
#include "mb/pg_wchar.h"
#include "common.h"
#include "miscadmin.h"
#include "shmem.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/elog.h"

#define MAX_AREAS 8

static const SharedArea *areas[MAX_AREAS];
static int	nareas = 0;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* hash_search() support for SharedKey: only the used part of the name counts */
uint32
shared_key_hash(const void *key, Size keysize)
{
	const SharedKey *k = key;

	return hash_combine(hash_combine(k->dbid, k->relid),
						hash_bytes((const unsigned char *) k->name, k->len));
}

/* hash_search() support for SharedKey: 0 when the keys are equal. */
int
shared_key_match(const void *key1, const void *key2, Size keysize)
{
	const SharedKey *a = key1;
	const SharedKey *b = key2;

	return !(a->dbid == b->dbid && a->relid == b->relid && a->len == b->len &&
			 memcmp(a->name, b->name, a->len) == 0);
}

/* The key of "name" in installation "relid"; false if too long to be one. */
bool
shared_key_make(SharedKey *key, Oid relid, const char *name, int len)
{
	if (len > SHARED_NAME_MAX_BYTES)
		return false;
	key->dbid = MyDatabaseId;
	key->relid = relid;
	key->len = len;
	memcpy(key->name, name, len);
	return true;
}

/* shared_key_make() for a text name. */
bool
shared_key_text(SharedKey *key, Oid relid, text *name)
{
	return shared_key_make(key, relid, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
}

/*
 * hash_search() support for a long key: a key whose name may be longer than
 * it holds (see shared_key_long())
 */
uint32
shared_key_long_hash(const void *key, Size keysize)
{
	const SharedKey *k = key;

	return hash_combine(hash_combine(k->dbid, k->relid),
						hash_bytes((const unsigned char *) k->name,
								   Min(k->len, SHARED_NAME_MAX_BYTES)) ^ k->len);
}

/* hash_search() support for a long key: 0 when equal. */
int
shared_key_long_match(const void *key1, const void *key2, Size keysize)
{
	const SharedKey *a = key1;
	const SharedKey *b = key2;

	return !(a->dbid == b->dbid && a->relid == b->relid && a->len == b->len &&
			 memcmp(a->name, b->name, Min(a->len, SHARED_NAME_MAX_BYTES)) == 0);
}

/*
 * The long key of "name" ("len" bytes, up to 65535) of installation
 * "relid", zeroed past the name: a name longer than SHARED_NAME_MAX_BYTES
 * as its first LONG_NAME_PREFIX bytes and a 64-bit hash of the whole.
 */
void
shared_key_long(SharedKey *key, Oid relid, const char *name, int len)
{
	memset(key, 0, sizeof(SharedKey));
	key->dbid = MyDatabaseId;
	key->relid = relid;
	key->len = len;
	if (len <= SHARED_NAME_MAX_BYTES)
		memcpy(key->name, name, len);
	else
	{
		uint64		h = hash_bytes_extended((const unsigned char *) name, len, 0);

		memcpy(key->name, name, LONG_NAME_PREFIX);
		memcpy(key->name + LONG_NAME_PREFIX, &h, sizeof(h));
	}
}

/*
 * The text a view joins a key on: a name that fits, else its first bytes
 * (to a character's boundary), an ellipsis and its hash.
 */
text *
shared_key_long_text(const SharedKey *key)
{
	uint64		h;
	int			prefix;

	if (key->len <= SHARED_NAME_MAX_BYTES)
		return cstring_to_text_with_len(key->name, key->len);
	memcpy(&h, key->name + LONG_NAME_PREFIX, sizeof(h));
	prefix = pg_mbcliplen(key->name, LONG_NAME_PREFIX, LONG_NAME_PREFIX);
	/* 18 dropped INT64_MODIFIER: print it as the standard type */
	return cstring_to_text(psprintf("%.*s...#%016llx", prefix,
									key->name, (unsigned long long) h));
}

/* Ask for every area's memory and locks. */
static void
request_areas(void)
{
	for (int i = 0; i < nareas; i++)
	{
		RequestAddinShmemSpace(areas[i]->size());
		if (areas[i]->nlocks != NULL)
			RequestNamedLWLockTranche(areas[i]->name, areas[i]->nlocks());
	}
}

/* shmem_request_hook */
static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	request_areas();
}

/* on_shmem_exit in the postmaster: let each area keep what a clean shutdown may. */
static void
shmem_shutdown(int code, Datum arg)
{
	/* never after a crash */
	if (code != 0)
		return;
	for (int i = 0; i < nareas; i++)
		if (areas[i]->shutdown)
			areas[i]->shutdown();
}

/* shmem_startup_hook: make or attach every area. */
static void
shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	for (int i = 0; i < nareas; i++)
		areas[i]->attach(areas[i]->nlocks == NULL ? NULL :
						 GetNamedLWLockTranche(areas[i]->name));
	LWLockRelease(AddinShmemInitLock);

	/* in the postmaster, at its start or its restart after a crash */
	if (IsUnderPostmaster || nareas == 0)
		return;
	for (int i = 0; i < nareas; i++)
		if (areas[i]->startup)
			areas[i]->startup();
	on_shmem_exit(shmem_shutdown, (Datum) 0);
}

/* A struct of an area (from its attach()); *found: it was made before. */
void *
shmem_struct(const char *name, Size size, bool *found)
{
	return ShmemInitStruct(name, size, found);
}

/*
 * A fixed-size hash of an area (from its attach()), with "partitions"
 * partitions (0: none; else a power of 2, each guarded by a lock of the
 * caller's, as PostgreSQL's lock table is).
 */
HTAB *
shmem_hash(const char *name, long max_entries, Size keysize, Size entrysize,
		   HashValueFunc hash, HashCompareFunc match, int partitions)
{
	HASHCTL		info;
	int			flags = HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_FIXED_SIZE;

	info.keysize = keysize;
	info.entrysize = entrysize;
	info.hash = hash;
	info.match = match;
	if (partitions > 0)
	{
		info.num_partitions = partitions;
		flags |= HASH_PARTITION;
	}
	return ShmemInitHash(name, max_entries, max_entries, &info, flags);
}

/* What shmem_hash() takes. */
Size
shmem_hash_size(long max_entries, Size entrysize)
{
	return hash_estimate_size(max_entries, entrysize);
}

/*
 * Register "area" (from _PG_init, while preloading): its memory is set
 * aside at server start and attach() called in every process.
 */
void
shmem_register(const SharedArea *area)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	Assert(nareas < MAX_AREAS);
	if (nareas == 0)
	{
		prev_shmem_request_hook = shmem_request_hook;
		shmem_request_hook = shmem_request;
		prev_shmem_startup_hook = shmem_startup_hook;
		shmem_startup_hook = shmem_startup;
	}
	areas[nareas++] = area;
}

/*
 * Begin saving to "path" (its temporary name first): only after a shutdown
 * checkpoint is there state worth keeping.  False when there is none, or
 * the file cannot be made (after a LOG line).
 */
bool
state_save_begin(StateFile *sf, const char *path, uint32 magic, uint32 format)
{
	ControlFileData *control;
	bool		crc_ok;
	uint32		header[2] = {magic, format};

	control = get_controlfile(DataDir, &crc_ok);
	if (!crc_ok || control->state != DB_SHUTDOWNED)
		return false;
	sf->path = path;
	sf->failed = false;
	sf->file = AllocateFile(psprintf("%s.tmp", path), PG_BINARY_W);
	if (sf->file == NULL)
	{
		sf->failed = true;
		return state_save_end(sf);
	}
	INIT_CRC32C(sf->crc);
	state_save(sf, header, sizeof(header));
	state_save(sf, &control->system_identifier, sizeof(uint64));
	return !sf->failed;
}

/* Write "size" bytes of "data"; a failure is reported by state_save_end(). */
void
state_save(StateFile *sf, const void *data, Size size)
{
	if (sf->failed)
		return;
	if (fwrite(data, size, 1, sf->file) != 1)
		sf->failed = true;
	else
		COMP_CRC32C(sf->crc, data, size);
}

/*
 * Finish the file (its CRC) and put it in place; on any failure LOG why,
 * leave no file, and return false.
 */
bool
state_save_end(StateFile *sf)
{
	char	   *tmp = psprintf("%s.tmp", sf->path);

	if (!sf->failed)
	{
		FIN_CRC32C(sf->crc);
		state_save(sf, &sf->crc, sizeof(sf->crc));
	}
	if (sf->file != NULL && FreeFile(sf->file) != 0)
		sf->failed = true;
	sf->file = NULL;
	if (!sf->failed && durable_rename(tmp, sf->path, LOG) == 0)
		return true;
	if (sf->failed)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", tmp)));
	unlink(tmp);
	return false;
}

/*
 * Open "path" for reading back, and check its header (a format from 1 to
 * "format" is read; sf->format says which): false, having LOGged
 * why (unless there was no file: *existed false), when it is not to be
 * read.  The caller reads with state_load() and ends with state_load_end()
 * or state_load_reject(), which remove the file.
 */
bool
state_load_begin(StateFile *sf, const char *path, uint32 magic, uint32 format,
				 const char *consequence, bool *existed)
{
	ControlFileData *control;
	bool		crc_ok;
	uint32		header[2];
	uint64		sysid;

	sf->path = path;
	sf->failed = false;
	sf->consequence = consequence;
	*existed = false;
	sf->file = AllocateFile(path, PG_BINARY_R);
	if (sf->file == NULL)
	{
		if (errno != ENOENT)
			ereport(LOG,
					(errcode_for_file_access(),
					 errmsg("could not read file \"%s\": %m", path),
					 errdetail("%s", consequence)));
		return false;
	}
	*existed = true;
	INIT_CRC32C(sf->crc);
	control = get_controlfile(DataDir, &crc_ok);
	if (!state_load(sf, header, sizeof(header)) || !state_load(sf, &sysid, sizeof(sysid)))
		state_load_reject(sf, "it is truncated or unreadable");
	else if (header[0] != magic || header[1] == 0 || header[1] > format)
		state_load_reject(sf, "it is not a tokenbucket state file of this version");
	else if (sysid != control->system_identifier)
		state_load_reject(sf, "it was written by another database cluster");
	else if (!crc_ok || control->state != DB_SHUTDOWNED)
		state_load_reject(sf, "the server did not shut down cleanly since it was written");
	else
	{
		sf->format = header[1];
		return true;
	}
	return false;
}

/* Read "size" bytes into "data"; false (and the file is bad) if short. */
bool
state_load(StateFile *sf, void *data, Size size)
{
	if (sf->failed || fread(data, size, 1, sf->file) != 1)
	{
		sf->failed = true;
		return false;
	}
	COMP_CRC32C(sf->crc, data, size);
	return true;
}

/* Give up on the file, LOGging why, and remove it. */
void
state_load_reject(StateFile *sf, const char *problem)
{
	ereport(LOG,
			(errmsg("ignoring file \"%s\": %s", sf->path, problem),
			 errdetail("%s", sf->consequence)));
	if (sf->file != NULL)
		FreeFile(sf->file);
	sf->file = NULL;
	unlink(sf->path);
}

/*
 * Check that everything read was the file, whole and unchanged (its CRC),
 * and remove it.  False, having LOGged why, when it was not.
 */
bool
state_load_end(StateFile *sf)
{
	pg_crc32c	stored;
	pg_crc32c	crc = sf->crc;

	FIN_CRC32C(crc);
	if (sf->failed || fread(&stored, sizeof(stored), 1, sf->file) != 1 ||
		!EQ_CRC32C(crc, stored) || fgetc(sf->file) != EOF)
	{
		state_load_reject(sf, "it is truncated or unreadable");
		return false;
	}
	FreeFile(sf->file);
	sf->file = NULL;
	unlink(sf->path);
	return true;
}
