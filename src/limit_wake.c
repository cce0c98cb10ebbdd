/*-------------------------------------------------------------------------
 *
 * limit_wake.c
 *	  The limits whose queues of waiters to wake: those this transaction
 *	  freed slots of or changed, once its locks are gone, and those this
 *	  session holds session leases of, when it ends.
 *
 * Freeing wakes the head of the limit's queue of waiters (wait.c): at the
 * end of the transaction that released, or whose transaction lease ended
 * (once its locks are gone: a table lease's row is locked until then), and
 * at the exit of a session holding leases.  The memory store wakes the
 * queues of what it frees itself (lease_memory.c); a change of a limit of
 * either kind wakes its queue from here.  xact.c calls the ends below.
 *
 * src/limit_wake.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common.h"
#include "limit_wake.h"
#include "nodes/pg_list.h"
#include "utils/memutils.h"
#include "wait.h"

/*
 * A limit this session has taken session leases of: its queue is woken
 * when the session ends.  One entry per limit, whatever the number of
 * leases, released or not (a wake-up too many costs a waiter one look).
 */
typedef struct HeldLease
{
	char	   *name;			/* the limit */
	int			len;
	SubTransactionId subid;		/* the subtransaction that made its first
								 * lease, until the transaction commits;
								 * then invalid */
} HeldLease;

/*
 * This session's limits, in TopMemoryContext; at most MAX_HELD_LIMITS (a
 * session leasing from more limits, as a gateway through a template's
 * names: those past it are not woken at its exit, and their waiters find
 * the slots free at their next look, within a second).
 */
#define MAX_HELD_LIMITS 1024
static List *held_leases = NIL;

/* Limits whose queue to wake when this transaction's locks are gone. */
static List *wake_at_end = NIL;

/*
 * Remember to wake the queue of limit "name" ("len" bytes) once the
 * transaction's locks are gone: it frees slots then (a transaction lease
 * ended, a release committed), or changes a limit.
 */
void
limit_wake_at_end(const char *name, int len)
{
	MemoryContext old;
	ListCell   *cell;

	foreach(cell, wake_at_end)
	{
		const char *other = lfirst(cell);

		if (strlen(other) == (size_t) len && memcmp(other, name, len) == 0)
			return;
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	wake_at_end = lappend(wake_at_end, pnstrdup(name, len));
	MemoryContextSwitchTo(old);
}

/* Forget limit "held". */
static void
drop_held(HeldLease *held)
{
	pfree(held->name);
	pfree(held);
}

/*
 * The end of (sub)transaction "subid" (InvalidSubTransactionId: of the
 * whole transaction): the limits first leased from in it belong to
 * "parent" now (commit; invalid: kept for the session), or are forgotten,
 * their leases gone with the slots they took (abort).
 */
static void
end_of_xact(SubTransactionId subid, SubTransactionId parent, bool commit)
{
	ListCell   *cell;

	foreach(cell, held_leases)
	{
		HeldLease  *held = lfirst(cell);

		if (held->subid == InvalidSubTransactionId ||
			(subid != InvalidSubTransactionId && held->subid != subid))
			continue;
		if (commit)
			held->subid = parent;
		else
		{
			limit_wake_at_end(held->name, held->len);
			drop_held(held);
			held_leases = foreach_delete_current(held_leases, cell);
		}
	}
}

/*
 * Transaction end (xact.c; a prepared transaction's as a commit): see
 * end_of_xact().
 */
void
limit_wake_xact_end(bool commit)
{
	end_of_xact(InvalidSubTransactionId, InvalidSubTransactionId, commit);
}

/* Subtransaction end (xact.c): see end_of_xact(). */
void
limit_wake_subxact_end(SubTransactionId mySubid, SubTransactionId parentSubid,
					  bool commit)
{
	end_of_xact(mySubid, parentSubid, commit);
}

/*
 * After a transaction's locks are released (xact.c; its transaction
 * leases, the row locks of what it released): wake the queues of what it
 * freed.
 */
void
limit_wake_locks_released(void)
{
	List	   *names = wake_at_end;
	ListCell   *cell;

	if (names == NIL)
		return;
	wake_at_end = NIL;
	foreach(cell, names)
		wait_wake_limit(lfirst(cell), strlen(lfirst(cell)));
	list_free_deep(names);
}

/*
 * Session end (xact.c): wake the queues of the session's limits.  This
 * backend is still listed while this runs; a waiter woken looks again
 * within milliseconds until it is gone (wait_in_queue()).
 */
void
limit_wake_exit(void)
{
	while (held_leases != NIL)
	{
		HeldLease  *held = linitial(held_leases);

		held_leases = list_delete_first(held_leases);
		wait_wake_limit(held->name, held->len);
		drop_held(held);
	}
}

/*
 * Remember that this session took a session lease of limit "name"
 * (HeldLease): its queue is woken when the session ends.
 */
void
limit_wake_at_exit(text *name)
{
	const char *data = VARDATA_ANY(name);
	int			len = VARSIZE_ANY_EXHDR(name);
	MemoryContext old;
	HeldLease  *held;
	ListCell   *cell;

	foreach(cell, held_leases)
	{
		held = lfirst(cell);
		if (held->len == len && memcmp(held->name, data, len) == 0)
			return;
	}
	if (list_length(held_leases) >= MAX_HELD_LIMITS)
		return;
	old = MemoryContextSwitchTo(TopMemoryContext);
	held = palloc(sizeof(HeldLease));
	held->name = pnstrdup(data, len);
	held->len = len;
	held->subid = GetCurrentSubTransactionId();
	held_leases = lappend(held_leases, held);
	MemoryContextSwitchTo(old);
}
