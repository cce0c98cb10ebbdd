/*-------------------------------------------------------------------------
 *
 * memory_xact.h
 *	  What a transaction did to the memory store: what a rollback gives
 *	  back, what it gave back that others see once it commits, its
 *	  provisional entries, the settings changes it will apply, the waits
 *	  it is in.  For memory_store.c, and for xact.c its transaction's end.
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
 * What this transaction gave back to a committed entry and has not
 * committed: tokens, and a pause shortened or lifted (from its end
 * "lift_from", if the entry still ends it there, to "lift_to").  Other
 * sessions see the entry without it; this transaction sees it with it
 * (memory_store.c's view), and the entry gets it at commit.
 */
typedef struct Given
{
	double		credit;			/* tokens */
	bool		lifted;			/* a pause to shorten: */
	TimestampTz lift_from;
	TimestampTz lift_to;
} Given;

/*
 * What to undo if the (sub)transaction level that did it aborts, per
 * entry: the tokens it took are added back (grants of 2 and 3 record 5),
 * and a pause it set is lifted.  What it gave back is kept beside, for
 * the commit ("given"), and forgotten at an abort.  Records that ever took
 * tokens back (a refund's on a provisional entry, which takes effect at
 * once) pin their entry until the transaction ends: were it removed as
 * full meanwhile, a rollback would leave it full.
 */
typedef struct UndoId
{
	uint64		serial;			/* of the entry */
	int64		level;			/* transaction nest level (64 bits: no
								 * padding, whose bytes a lookup would
								 * compare) */
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
	double		opened;			/* tokens and takes it counted among the */
	int64		opens;			/* entry's open ones (memory_open_add()) */
	uint64		xact;			/* the transaction it is of (see last_undo) */
	Given		given;			/* credit: this level's part of what was given
								 * back (below zero: it used an outer
								 * level's); the pause: as this level left
								 * it, when lift_set */
	bool		lift_set;
} Undo;

extern const char *memory_xact_unpreparable(void);
extern void memory_xact_end(bool commit);
extern void memory_subxact_end(bool commit);
extern Undo *memory_undo_for(MemoryEntry *entry);
extern Undo *memory_undo_find(const MemoryEntry *entry);
extern void memory_remember(Undo *undo, MemoryEntry *entry, double tokens,
							bool paused, TimestampTz pause_from);
extern void memory_count_grant(Undo *undo, double cost);
extern bool memory_gives_pending(void);
extern void memory_given(const MemoryEntry *entry, Given *given);
extern void memory_settle(Undo *undo, MemoryEntry *entry, const Given *given,
						  const Bucket *after, TimestampTz now);
extern bool memory_has_provisionals(void);
extern void memory_add_provisional(const MemoryKey *key, uint64 serial);
extern bool memory_dropped_here(const MemoryKey *key);
extern void memory_add_pending(ConfigChange kind, Oid dbid, Oid relid,
							   const char *name, int len, double capacity,
							   double refill_rate);
extern void memory_add_watch(const MemoryKey *key);

#endif							/* TOKENBUCKET_MEMORY_XACT_H */
