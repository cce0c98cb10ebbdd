/*-------------------------------------------------------------------------
 *
 * held.c
 *	  Which buckets and limits each backend's open transaction holds the
 *	  rows of, and the bound on waiting for one that another transaction
 *	  holds.
 *
 * A call on a table bucket locks its row until its transaction ends: in
 * autocommit, for microseconds; in a transaction a client forgot to end (a
 * driver that opens one by default), until someone notices, while every
 * other caller of that bucket waits.  So a statement on a row of
 * tb_buckets or tb_limits waits for another transaction at most
 * tokenbucket.row_lock_timeout (or the session's lock_timeout if that is
 * shorter), and then fails with 55P03 naming the holder: its process,
 * application, state and how long it has been idle.  The bound is
 * PostgreSQL's own lock timeout, set for the statement alone: it bounds
 * each wait for one holder, so a queue of short transactions on a busy
 * bucket never trips it, only one transaction that holds the row that
 * long.  A waiting function bounds the wait by its own timeout instead,
 * and answers false by it as always (wait.c).
 *
 * To name the holder, each backend notes in a slot of shared memory of its
 * own the names whose rows its open transaction holds (the first
 * HELD_NAMES of them), each with when it was taken and at what
 * subtransaction level, so that a rolled-back savepoint forgets its own.
 * Only the backend writes its slot, under the slot's spinlock; readers (a
 * caller that waited too long, the tb_held view) take the same spinlock.
 * A row held otherwise (a statement on the table itself, a prepared
 * transaction) has no note: the error says so.  A lock on a whole table
 * of tokenbucket's (a deploy's TRUNCATE tb_parents, a LOCK TABLE
 * tb_buckets) is waited for within the same bound, and its error names
 * the table and the holders the lock manager shows (held_report_table).  Without the library
 * preloaded there are no slots: the bound holds all the same.
 *
 * src/held.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common.h"
#include "funcapi.h"
#include "held.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "shmem.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/spin.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

/* names one transaction's note keeps; it counts those past them */
#define HELD_NAMES 8

/* holders one error names */
#define HELD_NAMED 3

/* One name a transaction holds the row of. */
typedef struct HeldRow
{
	HeldKind	kind;
	Oid			relid;			/* the installation's tb_buckets */
	int			level;			/* the subtransaction level that took it */
	TimestampTz since;
	int			len;			/* of the whole name */
	char		name[SHARED_NAME_MAX_BYTES];	/* its first bytes */
} HeldRow;

/* A backend's note of what its open transaction holds. */
typedef struct HeldSlot
{
	slock_t		mutex;
	int			pid;
	int			count;			/* names held; only HELD_NAMES kept */
	HeldRow	names[HELD_NAMES];
} HeldSlot;

/* the slots, one per backend status entry (NULL: not preloaded) */
static HeldSlot *slots = NULL;

/* this backend's slot's index (-1: none), once looked up */
static int	my_index = -1;
static bool my_index_known = false;

/* this transaction noted something: its end has a slot to clear */
static bool noted = false;

/* tokenbucket.row_lock_timeout, in milliseconds (0: no bound of its own) */
static int	row_lock_timeout = 1000;

/* the subtransaction level at which a wait's timeout bounds, or 0 */
static int	timeout_level = 0;

/* SharedArea size: a slot per backend. */
static Size
held_shmem_size(void)
{
	return mul_size(MaxBackends, sizeof(HeldSlot));
}

/* SharedArea attach: the slots, every one empty when made. */
static void
held_attach(LWLockPadded *locks)
{
	bool		found;

	slots = shmem_struct("tokenbucket held", held_shmem_size(), &found);
	if (found)
		return;
	for (int i = 0; i < MaxBackends; i++)
	{
		SpinLockInit(&slots[i].mutex);
		slots[i].pid = 0;
		slots[i].count = 0;
	}
}

static const SharedArea held_area = {
	.name = "tokenbucket held",
	.size = held_shmem_size,
	.nlocks = NULL,				/* each slot has its spinlock */
	.attach = held_attach,
};

/* This backend's slot, or NULL (not preloaded, or not a regular backend). */
static HeldSlot *
my_slot(void)
{
	if (slots == NULL)
		return NULL;
	if (!my_index_known)
	{
		my_index = backend_index(MyProcPid);
		my_index_known = true;
	}
	return my_index < 0 ? NULL : &slots[my_index];
}

/* Whether "entry" is the name "name" of "kind" in installation "relid". */
static bool
held_matches(const HeldRow *entry, HeldKind kind, Oid relid, text *name)
{
	int			len = VARSIZE_ANY_EXHDR(name);

	return entry->kind == kind && entry->relid == relid && entry->len == len &&
		memcmp(entry->name, VARDATA_ANY(name),
			   Min(len, SHARED_NAME_MAX_BYTES)) == 0;
}

/*
 * Note that this transaction holds the row of "name" (of "kind", in
 * installation "relid") until it ends: a statement locked it.
 */
void
held_note(HeldKind kind, Oid relid, text *name)
{
	HeldSlot   *slot = my_slot();
	int			level = GetCurrentTransactionNestLevel();
	int			len = VARSIZE_ANY_EXHDR(name);
	int			kept;

	if (slot == NULL)
		return;
	SpinLockAcquire(&slot->mutex);
	slot->pid = MyProcPid;
	kept = Min(slot->count, HELD_NAMES);
	for (int i = 0; i < kept; i++)
		if (held_matches(&slot->names[i], kind, relid, name))
		{
			SpinLockRelease(&slot->mutex);
			return;
		}
	if (kept < HELD_NAMES)
	{
		HeldRow   *entry = &slot->names[kept];

		entry->kind = kind;
		entry->relid = relid;
		entry->level = level;
		entry->since = GetCurrentStatementStartTimestamp();
		entry->len = len;
		memcpy(entry->name, VARDATA_ANY(name), Min(len, SHARED_NAME_MAX_BYTES));
	}
	if (slot->count < INT_MAX)
		slot->count++;
	SpinLockRelease(&slot->mutex);
	noted = true;
}

/* Transaction end: it holds nothing any more. */
void
held_xact_end(void)
{
	HeldSlot   *slot;

	timeout_level = 0;
	if (!noted)
		return;
	noted = false;
	slot = my_slot();
	SpinLockAcquire(&slot->mutex);
	slot->count = 0;
	SpinLockRelease(&slot->mutex);
}

/*
 * Subtransaction end: what it took is its parent's (commit) or no longer
 * held (abort: its row locks went with it).  One past HELD_NAMES is
 * forgotten at the top level only: which level took it is not kept.
 */
void
held_subxact_end(bool commit)
{
	int			level = GetCurrentTransactionNestLevel();
	HeldSlot   *slot;
	int			kept;
	int			left = 0;

	if (timeout_level >= level)
		timeout_level = 0;
	if (!noted)
		return;
	slot = my_slot();
	SpinLockAcquire(&slot->mutex);
	kept = Min(slot->count, HELD_NAMES);
	for (int i = 0; i < kept; i++)
	{
		HeldRow   *entry = &slot->names[i];

		if (entry->level < level)
			slot->names[left++] = *entry;
		else if (commit)
		{
			entry->level = level - 1;
			slot->names[left++] = *entry;
		}
	}
	slot->count -= kept - left;
	SpinLockRelease(&slot->mutex);
}

/*
 * A waiting function's attempt (on) or its end (off): until then, at this
 * subtransaction level, the lock_timeout it set for its deadline bounds
 * every wait, not tokenbucket.row_lock_timeout.
 */
void
held_bound_by_timeout(bool on)
{
	timeout_level = on ? GetCurrentTransactionNestLevel() : 0;
}

/*
 * Bound the waits of the statement about to run, saving the session's
 * lock_timeout in *bound: PostgreSQL's lock timeout, read when a wait
 * begins, set directly rather than through guc.c, which would cost every
 * call a GUC nest level; held_bound_end() puts it back however the
 * statement ends.
 */
void
held_bound_begin(HeldBound *bound)
{
	bound->saved_lock_timeout = LockTimeout;
	bound->timeout_ms = LockTimeout;
	bound->setting = "lock_timeout";
	/* a waiting function's own timeout bounds its waits: leave it */
	if (timeout_level != 0 && timeout_level == GetCurrentTransactionNestLevel())
		return;
	if (row_lock_timeout > 0 &&
			 (LockTimeout == 0 || row_lock_timeout < LockTimeout))
	{
		LockTimeout = row_lock_timeout;
		bound->timeout_ms = row_lock_timeout;
		bound->setting = "tokenbucket.row_lock_timeout";
	}
}

/* Put the session's lock_timeout back. */
void
held_bound_end(HeldBound *bound)
{
	LockTimeout = bound->saved_lock_timeout;
}

/* How a holder's state reads in an error's detail. */
static const char *
state_text(int state)
{
	switch ((BackendState) state)
	{
		case STATE_IDLEINTRANSACTION:
			return "idle in transaction";
		case STATE_IDLEINTRANSACTION_ABORTED:
			return "idle in transaction (aborted)";
		case STATE_RUNNING:
			return "active";
		case STATE_FASTPATH:
			return "in a fast-path function call";
		case STATE_IDLE:
			return "idle";
		default:
			return "in an unknown state";
	}
}

/* Seconds from "from" to "to", for an error's detail. */
static double
seconds_between(TimestampTz from, TimestampTz to)
{
	return (double) Max(to - from, 0) / USECS_PER_SEC;
}

/*
 * Append to "detail" who holds "name" (of "kind", installation "relid")
 * by the slots: at most HELD_NAMED holders, each read from its live status
 * entry.  Returns how many were named.
 */
static int
describe_holders(StringInfo detail, HeldKind kind, Oid relid, text *name)
{
	TimestampTz now = GetCurrentTimestamp();
	int			named = 0;

	for (int i = 0; slots != NULL && i < MaxBackends && named < HELD_NAMED; i++)
	{
		HeldSlot   *slot = &slots[i];
		bool		holds = false;
		TimestampTz since = 0;
		int			pid;
		BackendLook look;

		if (i == my_index)
			continue;
		SpinLockAcquire(&slot->mutex);
		pid = slot->pid;
		for (int j = 0; j < Min(slot->count, HELD_NAMES); j++)
			if (held_matches(&slot->names[j], kind, relid, name))
			{
				holds = true;
				since = slot->names[j].since;
			}
		SpinLockRelease(&slot->mutex);
		if (!holds || !backend_look(i, &look) || look.pid != pid)
			continue;
		appendStringInfo(detail, "%sProcess %d (application \"%s\", %s for %.1f s) has held it since %.1f s ago",
						 named == 0 ? "" : "; ", pid, look.appname,
						 state_text(look.state),
						 seconds_between(look.state_start, now),
						 seconds_between(since, now));
		named++;
	}
	return named;
}

/*
 * In a PG_CATCH block of a statement on the row of "name" (of "kind",
 * installation "relid") that "bound" bounded: if the error is a lock
 * timeout, replace it with one that names the holder; otherwise return,
 * for the caller to re-throw.  "context" is the caller's memory context
 * from before the statement.
 */
void
held_report_locked(HeldBound *bound, HeldKind kind, Oid relid, text *name,
				   MemoryContext context)
{
	StringInfoData detail;
	char	   *quoted;

	if (geterrcode() != ERRCODE_LOCK_NOT_AVAILABLE)
		return;
	MemoryContextSwitchTo(context);
	FlushErrorState();
	quoted = text_to_cstring(name);
	initStringInfo(&detail);
	if (describe_holders(&detail, kind, relid, name) == 0)
		appendStringInfoString(&detail,
							   "No call of tokenbucket's holds it in an open transaction: a statement on the table itself, a prepared transaction or a lock on the whole table does, which pg_locks shows");
	appendStringInfo(&detail, "; this call waited %d ms for it (%s).",
					 bound->timeout_ms, bound->setting);
	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("%s \"%s\" is held by another transaction",
					kind == HELD_LIMIT ? "limit" : "bucket", quoted),
			 errdetail("%s", detail.data),
			 errhint("Commit or roll back right after a call that takes tokens (autocommit does), unless the grant must be part of a larger transaction; to wait longer for such transactions, raise tokenbucket.row_lock_timeout.")));
}

/*
 * Append to "detail" who holds a lock on table "table" that conflicts
 * with "mode": at most HELD_NAMED holders, from the lock manager, each
 * read from its live status entry.  Returns how many were named.
 */
static int
describe_table_holders(StringInfo detail, Oid table, LOCKMODE mode)
{
	TimestampTz now = GetCurrentTimestamp();
	LOCKTAG		tag;
	LOCKMASK	conflicts;
	LockData   *data = GetLockStatusData();
	int			named = 0;

	SET_LOCKTAG_RELATION(tag, MyDatabaseId, table);
	conflicts = GetLockTagsMethodTable(&tag)->conflictTab[mode];
	for (int i = 0; i < data->nelements && named < HELD_NAMED; i++)
	{
		LockInstanceData *lock = &data->locks[i];
		LOCKMASK	held = lock->holdMask & conflicts;
		LOCKMODE	strongest = MaxLockMode;
		BackendLook look;
		int			index;

		if (held == 0 || lock->pid == MyProcPid ||
			lock->locktag.locktag_type != LOCKTAG_RELATION ||
			lock->locktag.locktag_field1 != MyDatabaseId ||
			lock->locktag.locktag_field2 != table)
			continue;
		while (!(held & LOCKBIT_ON(strongest)))
			strongest--;
		appendStringInfoString(detail, named == 0 ? "" : "; ");
		index = lock->pid == 0 ? -1 : backend_index(lock->pid);
		if (index >= 0 && backend_look(index, &look) && look.pid == lock->pid)
			appendStringInfo(detail, "Process %d (application \"%s\", %s for %.1f s) holds %s on it",
							 lock->pid, look.appname, state_text(look.state),
							 seconds_between(look.state_start, now),
							 GetLockmodeName(DEFAULT_LOCKMETHOD, strongest));
		else if (lock->pid == 0)
			appendStringInfo(detail, "A prepared transaction holds %s on it",
							 GetLockmodeName(DEFAULT_LOCKMETHOD, strongest));
		else
			appendStringInfo(detail, "Process %d holds %s on it", lock->pid,
							 GetLockmodeName(DEFAULT_LOCKMETHOD, strongest));
		named++;
	}
	return named;
}

/*
 * In a PG_CATCH block of a statement that "bound" bounded and that locks
 * table "table" in "mode": if the error is a lock timeout and another
 * transaction holds a lock on the whole table that conflicts, replace it
 * with one that names the table and the holders; otherwise return, for
 * the caller to go on.  "context" as for held_report_locked().
 */
void
held_report_table(HeldBound *bound, Oid table, LOCKMODE mode, MemoryContext context)
{
	StringInfoData detail;
	char	   *relname;

	if (geterrcode() != ERRCODE_LOCK_NOT_AVAILABLE)
		return;
	MemoryContextSwitchTo(context);
	initStringInfo(&detail);
	if (describe_table_holders(&detail, table, mode) == 0)
		return;
	FlushErrorState();
	relname = get_rel_name(table);
	appendStringInfo(&detail, "; this call waited %d ms for it (%s).",
					 bound->timeout_ms, bound->setting);
	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("table \"%s\" is locked by another transaction",
					relname ? relname : "(dropped)"),
			 errdetail("%s", detail.data),
			 errhint("Commit or roll back the transaction that locked the whole table (a TRUNCATE, LOCK TABLE or ALTER TABLE) soon: each call waits for it at most tokenbucket.row_lock_timeout.")));
}

/*
 * Lock table "table" in "mode", as opening it would, waiting for another
 * transaction's lock on it at most the bound (held_bound_begin()), then
 * 55P03 naming the holder.  At once when it is free.
 */
void
held_lock_table(Oid table, LOCKMODE mode)
{
	MemoryContext context = CurrentMemoryContext;
	HeldBound	bound;

	if (ConditionalLockRelationOid(table, mode))
		return;
	held_bound_begin(&bound);
	PG_TRY();
	{
		LockRelationOid(table, mode);
	}
	PG_CATCH();
	{
		held_bound_end(&bound);
		held_report_table(&bound, table, mode, context);
		PG_RE_THROW();
	}
	PG_END_TRY();
	held_bound_end(&bound);
}

PG_FUNCTION_INFO_V1(tb_held_rows);

/*
 * tb_held_rows(): each bucket and limit whose row an open transaction
 * holds by a call of tokenbucket's, by whom (kind, name, pid, since): what
 * the tb_held view shows, to whoever may read it.  A name longer than a
 * slot keeps is shown by its first bytes and "...".
 */
Datum
tb_held_rows(PG_FUNCTION_ARGS)
{
	Installation inst = installation_of(fcinfo);
	static const char *const views[] = {"tb_held", NULL};
	TupleDesc	desc;
	Tuplestorestate *store = materialize_begin(fcinfo, &desc);
	Oid			relid;

	check_may_read(&inst, "tb_held_rows()", views);
	relid = installation_table(&inst);
	for (int i = 0; slots != NULL && i < MaxBackends; i++)
	{
		HeldSlot   *slot = &slots[i];
		HeldRow	names[HELD_NAMES];
		int			kept;
		int			pid;

		SpinLockAcquire(&slot->mutex);
		pid = slot->pid;
		kept = Min(slot->count, HELD_NAMES);
		memcpy(names, slot->names, kept * sizeof(HeldRow));
		SpinLockRelease(&slot->mutex);
		for (int j = 0; j < kept; j++)
		{
			Datum		values[4];
			bool		nulls[4] = {false, false, false, false};
			int			len = names[j].len;

			if (names[j].relid != relid)
				continue;
			values[0] = CStringGetTextDatum(names[j].kind == HELD_LIMIT ? "limit" : "bucket");
			if (len <= SHARED_NAME_MAX_BYTES)
				values[1] = PointerGetDatum(cstring_to_text_with_len(names[j].name, len));
			else
				values[1] = CStringGetTextDatum(psprintf("%.*s...",
														 pg_mbcliplen(names[j].name, SHARED_NAME_MAX_BYTES,
																	  SHARED_NAME_MAX_BYTES),
														 names[j].name));
			values[2] = Int32GetDatum(pid);
			values[3] = TimestampTzGetDatum(names[j].since);
			tuplestore_putvalues(store, desc, values, nulls);
		}
	}
	return (Datum) 0;
}

/* Library load: the setting, and the slots when preloaded. */
void
held_init(void)
{
	DefineCustomIntVariable("tokenbucket.row_lock_timeout",
							"Longest wait for a bucket's or limit's row that another transaction holds.",
							"A call that waits longer fails with 55P03 naming the holder. "
							"0 leaves the wait to lock_timeout. "
							"Waiting functions wait until their own timeout instead.",
							&row_lock_timeout,
							1000, 0, INT_MAX,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);
	shmem_register(&held_area);
}
