/*-------------------------------------------------------------------------
 *
 * memory_xact.h
 *	  What a transaction did to the memory store: what a rollback gives
 *	  back, its provisional entries, the settings changes it will apply,
 *	  the waits it is in.  For memory_store.c alone.
 *
 * src/memory_xact.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_MEMORY_XACT_H
#define TOKENBUCKET_MEMORY_XACT_H

#include "memory_entries.h"
#include "store.h"

/*
 * What to undo if the (sub)transaction level that did it aborts, per
 * entry: the tokens it took are added back (grants of 2 and 3 record 5, a
 * refund of 2 records -2), and a pause it set is lifted.  Records that
 * ever took tokens back (a refund's) pin their entry until the transaction
 * ends: were it removed as full meanwhile, a rollback would leave it full.
 */
typedef struct UndoId
{
	uint64		serial;			/* of the entry */
	int			level;			/* transaction nest level */
} UndoId;

typedef struct Undo
{
	UndoId		id;				/* first: the hash's key */
	MemoryKey	key;
	uint32		hashcode;
	double		tokens;			/* tokens to add back (take when negative) */
	int			pins;			/* pins it holds on the entry */
	bool		paused;			/* a pause to lift: */
	TimestampTz pause_from;		/* the pause before the first change */
	TimestampTz pause_to;		/* the pause set by the last */
	int64		granted;		/* grants to count in the entry's own */
	double		granted_tokens; /* counters at commit (memory_count_grant) */
	uint64		xact;			/* the transaction it is of (see last_undo) */
} Undo;

extern void memory_xact_init(void);
extern Undo *memory_undo_for(MemoryEntry *entry);
extern Undo *memory_undo_find(const MemoryEntry *entry);
extern void memory_remember(Undo *undo, MemoryEntry *entry, double tokens,
							bool paused, TimestampTz pause_from);
extern void memory_count_grant(Undo *undo, double cost);
extern bool memory_has_provisionals(void);
extern void memory_add_provisional(const MemoryKey *key, uint64 serial);
extern bool memory_dropped_here(const MemoryKey *key);
extern void memory_add_pending(ConfigChange kind, Oid dbid, Oid relid,
							   const char *name, int len, double capacity,
							   double refill_rate);
extern void memory_add_watch(const MemoryKey *key);

#endif							/* TOKENBUCKET_MEMORY_XACT_H */
