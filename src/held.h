/*-------------------------------------------------------------------------
 *
 * held.h
 *	  Which buckets and limits each backend's open transaction holds the
 *	  rows of, and the bound on waiting for one that another transaction
 *	  holds (held.c says how and why).
 *
 * src/held.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_HELD_H
#define TOKENBUCKET_HELD_H

#include "postgres.h"

#include "storage/lockdefs.h"

/* What a statement's first argument names, for held_note(). */
typedef enum HeldKind
{
	HELD_NOTHING = 0,
	HELD_BUCKET,
	HELD_LIMIT
} HeldKind;

/* The bound on waiting for a row another transaction holds, saved. */
typedef struct HeldBound
{
	int			saved_lock_timeout;
	const char *setting;		/* which setting bounds the wait */
	int			timeout_ms;		/* its value (0: none) */
} HeldBound;

extern void held_bound_begin(HeldBound *bound);
extern void held_bound_end(HeldBound *bound);
extern void held_report_locked(HeldBound *bound, HeldKind kind, Oid relid,
							   text *name, MemoryContext context);
extern void held_report_table(HeldBound *bound, Oid table, LOCKMODE mode,
							  MemoryContext context);
extern void held_lock_table(Oid table, LOCKMODE mode);
extern void held_note(HeldKind kind, Oid relid, text *name);

/* the bound a waiting function's own timeout sets (wait.c) */
extern void held_bound_by_timeout(bool on);

/* transaction ends (xact.c) */
extern void held_xact_end(void);
extern void held_subxact_end(bool commit);

extern void held_init(void);

#endif							/* TOKENBUCKET_HELD_H */
