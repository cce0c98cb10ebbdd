/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  The shared-memory base of the memory store and the counters: keys of
 *	  shared hashes, areas set aside at server start, and the file a clean
 *	  shutdown keeps them in.
 *
 * src/shmem.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_SHMEM_H
#define TOKENBUCKET_SHMEM_H

#include <stdio.h>

#include "port/pg_crc32c.h"
#include "storage/lwlock.h"
#include "utils/hsearch.h"

/* Longest name a shared entry holds, in a fixed space. */
#define SHARED_NAME_MAX_BYTES 128

/* The key of a shared entry: which installation, and a name. */
typedef struct SharedKey
{
	Oid			dbid;
	Oid			relid;			/* that installation's tb_buckets */
	uint16		len;
	char		name[SHARED_NAME_MAX_BYTES];	/* not terminated */
} SharedKey;

extern bool shared_key_make(SharedKey *key, Oid relid, const char *name, int len);
extern bool shared_key_text(SharedKey *key, Oid relid, text *name);
extern uint32 shared_key_hash(const void *key, Size keysize);
extern int	shared_key_match(const void *key1, const void *key2, Size keysize);

/*
 * A long key: a name of any length, one longer than SHARED_NAME_MAX_BYTES
 * kept as its first LONG_NAME_PREFIX bytes and a 64-bit hash of it all
 * ("len" is the whole name's).
 */
#define LONG_NAME_PREFIX (SHARED_NAME_MAX_BYTES - 8)

extern void shared_key_long(SharedKey *key, Oid relid, const char *name, int len);
extern uint32 shared_key_long_hash(const void *key, Size keysize);
extern int	shared_key_long_match(const void *key1, const void *key2, Size keysize);
extern text *shared_key_long_text(const SharedKey *key);

/*
 * A part of shared memory set aside when the server starts (the library
 * preloaded), and a tranche of LWLocks named after it.
 */
typedef struct SharedArea
{
	const char *name;
	Size		(*size) (void);	/* bytes it needs */
	int			(*nlocks) (void);	/* LWLocks of its tranche (NULL: none) */

	/*
	 * Called in every process, under AddinShmemInitLock, to make or find
	 * its structs (shmem_struct(), shmem_hash()).
	 */
	void		(*attach) (LWLockPadded *locks);
	/* called in the postmaster once the areas are made, or NULL */
	void		(*startup) (void);
	/* called in the postmaster at a clean shutdown, or NULL */
	void		(*shutdown) (void);
} SharedArea;

extern void *shmem_struct(const char *name, Size size, bool *found);
extern HTAB *shmem_hash(const char *name, long max_entries, Size keysize,
						Size entrysize, HashValueFunc hash, HashCompareFunc match,
						int partitions);
extern Size shmem_hash_size(long max_entries, Size entrysize);
extern void shmem_register(const SharedArea *area);

/*
 * A file that keeps shared state across a clean shutdown: written to a
 * temporary name and renamed, checked with a CRC, and read back (then
 * removed) at the next start only if it is this cluster's and the server
 * shut down cleanly after writing it.
 */
typedef struct StateFile
{
	const char *path;
	FILE	   *file;
	pg_crc32c	crc;
	bool		failed;
	uint32		format;			/* of a file read: 1 to the format asked for */
	const char *consequence;	/* the errdetail of a LOG about it */
} StateFile;

extern bool state_save_begin(StateFile *sf, const char *path, uint32 magic,
							 uint32 format);
extern void state_save(StateFile *sf, const void *data, Size size);
extern bool state_save_end(StateFile *sf);
extern bool state_load_begin(StateFile *sf, const char *path, uint32 magic,
							 uint32 format, const char *consequence,
							 bool *existed);
extern bool state_load(StateFile *sf, void *data, Size size);
extern void state_load_reject(StateFile *sf, const char *problem);
extern bool state_load_end(StateFile *sf);

#endif							/* TOKENBUCKET_SHMEM_H */
