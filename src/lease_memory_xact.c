/*-------------------------------------------------------------------------
 *
 * lease_memory_xact.c
 *	  What a transaction did to memory limits' leases: the leases it took
 *	  and released, the limits it forgets and whether it changed tb_limits;
 *	  applied or undone at its end, and at its session's exit.
 *
 * A lease is freed:
 *	- by tb_release(), when the releasing transaction commits; until then
 *	  its slots are free for that transaction and held for every other,
 *	  as a table lease's row is until the UPDATE that released it commits;
 *	- with hold => 'transaction', when its transaction ends;
 *	- when the (sub)transaction that took it aborts, whatever its hold,
 *	  as a table lease's row goes with it;
 *	- when its session ends (xact.c's exit callback: however it ends, a client
 *	  gone, pg_terminate_backend, FATAL), all its holder's leases;
 *	- when its ttl has passed, or its holder's backend is no longer there,
 *	  counted free the moment a lease finds the limit full (lease_memory.c).
 *
 * A dropped limit's leases are forgotten when the dropping transaction
 * commits, and a counter of drops bumped, so that a lease that read its
 * configuration before that reads it again.  xact.c calls the ends below.
 *
 * src/lease_memory_xact.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common.h"
#include "lease_memory_xact.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

static List *xact_leases = NIL;

/* Limits to forget when this transaction commits (tb_drop, DROP EXTENSION). */
typedef struct Forget
{
	Oid			dbid;
	Oid			relid;			/* InvalidOid: every installation of dbid */
	char	   *name;			/* NULL: every limit */
	int			len;
	bool		template;
	SubTransactionId subid;		/* the subtransaction that asked */
} Forget;

static List *forgets = NIL;

static bool leased_here = false;	/* this session took or released a
									 * memory lease */
static bool config_changed_here = false;	/* this transaction wrote
											 * tb_limits */

/* Whether "forget" takes limit entry "limit". */
static bool
forget_takes(const Forget *forget, const LimitEntry *limit)
{
	const SharedKey *k = &limit->key;

	if (k->dbid != forget->dbid ||
		(OidIsValid(forget->relid) && k->relid != forget->relid))
		return false;
	if (forget->name == NULL)
		return true;
	if (forget->template)
		return limit->template_len == forget->len + 1 && k->len >= forget->len &&
			memcmp(k->name, forget->name, forget->len) == 0;
	return k->len == forget->len && memcmp(k->name, forget->name, forget->len) == 0;
}

/* Whether this transaction forgets limit entry "limit" when it commits. */
bool
lease_forgotten_here(const LimitEntry *limit)
{
	ListCell   *cell;

	foreach(cell, forgets)
		if (forget_takes(lfirst(cell), limit))
			return true;
	return false;
}

/* Apply the forgets of the committed transaction (under the exclusive lock). */
static void
apply_forgets(WakeList *wake)
{
	HASH_SEQ_STATUS status;
	LimitEntry *limit;
	List	   *gone = NIL;
	ListCell   *cell;

	hash_seq_init(&status, limit_hash);
	while ((limit = hash_seq_search(&status)) != NULL)
		if (lease_forgotten_here(limit))
			gone = lappend(gone, limit);
	/* the hash changes only once the walk is over */
	foreach(cell, gone)
	{
		limit = lfirst(cell);
		while (limit->first >= 0)
			lease_free_record(limit->first, wake, false, FREED_QUIETLY, 0);
		(void) hash_search(limit_hash, &limit->key, HASH_REMOVE, NULL);
	}
	list_free(gone);
	pg_atomic_fetch_add_u64(&lease_shared->generation, 1);
}

/*
 * The end of (sub)transaction "subid" (invalid: of the whole one), with
 * "parent" taking what a committed subtransaction did.
 */
static void
end_of_xact(SubTransactionId subid, SubTransactionId parent, bool commit)
{
	WakeList	wake = {0};
	ListCell   *cell;
	bool		top = subid == InvalidSubTransactionId;
	TimestampTz now;

	if (lease_shared == NULL || (xact_leases == NIL && (forgets == NIL || !commit)))
		return;
	now = tb_clock_now();
	if (commit && !top)
	{
		foreach(cell, xact_leases)
		{
			LocalLease *local = lfirst(cell);

			if (local->subid == subid)
				local->subid = parent;
		}
		return;
	}
	LWLockAcquire(lease_shared->lock, LW_EXCLUSIVE);
	foreach(cell, xact_leases)
	{
		LocalLease *local = lfirst(cell);
		int			index = lease_index_of(local->id);

		if (local->id == 0 || (!top && local->subid != subid))
			continue;
		if (local->release)
		{
			if (commit)
				lease_free_id(local->id, &wake, FREED_QUIETLY, now);
			else if (index >= 0 && lease_shared->leases[index].id == local->id)
				lease_shared->leases[index].releaser = 0;
		}
		else if (!commit)
			lease_free_id(local->id, &wake, FREED_QUIETLY, now);
		else if (!local->session)
			lease_free_id(local->id, &wake, FREED_BY_END, now);
		if (!top)
			xact_leases = foreach_delete_current(xact_leases, cell);
	}
	if (top && commit && forgets != NIL)
		apply_forgets(&wake);
	LWLockRelease(lease_shared->lock);
	lease_wake_all(&wake);
}

/*
 * What this transaction holds that a prepared one could not carry (see
 * xact.c), or NULL: its leases and releases are its backend's, and the
 * limits it changed or dropped must reach every session when it commits.
 */
const char *
lease_memory_unpreparable(void)
{
	if (xact_leases != NIL)
		return "memory limits' leases";
	if (forgets != NIL || config_changed_here)
		return "limits' settings";
	return NULL;
}

/* The transaction's end (xact.c): see end_of_xact(). */
void
lease_memory_xact_end(bool commit)
{
	if (commit && config_changed_here)
	{
		/*
		 * committed: every backend's read of the configuration is old,
		 * before the leases of limits dropped are forgotten (a lease that
		 * read the configuration before then finds them stale)
		 */
		pg_atomic_fetch_add_u64(&lease_shared->config_generation, 1);
	}
	end_of_xact(InvalidSubTransactionId, InvalidSubTransactionId, commit);
	xact_leases = NIL;
	forgets = NIL;
	config_changed_here = false;
}

/*
 * A subtransaction's end (xact.c): see end_of_xact(); a forget goes with
 * its subtransaction.
 */
void
lease_memory_subxact_end(SubTransactionId mySubid, SubTransactionId parentSubid,
						 bool commit)
{
	ListCell   *cell;

	end_of_xact(mySubid, parentSubid, commit);
	foreach(cell, forgets)
	{
		Forget	   *forget = lfirst(cell);

		if (forget->subid != mySubid)
			continue;
		if (commit)
			forget->subid = parentSubid;
		else
			forgets = foreach_delete_current(forgets, cell);
	}
}

/*
 * Session end, however it comes (xact.c: before the server aborts an open
 * transaction): every lease this backend holds is freed, and every release
 * its transaction made is undone (the lease is its holder's again); the
 * abort that follows finds nothing of them left to do.
 */
void
lease_memory_exit(void)
{
	WakeList	wake = {0};
	TimestampTz now;

	if (lease_shared == NULL || !leased_here)
		return;
	now = tb_clock_now();
	LWLockAcquire(lease_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < max_memory_leases; i++)
	{
		MemoryLease *lease = &lease_shared->leases[i];

		if (lease->id == 0)
			continue;
		if (lease->releaser == MyProcPid)
			lease->releaser = 0;
		if (lease->pid == MyProcPid && lease->started == MyStartTimestamp)
			lease_free_record(i, &wake, true, FREED_BY_END, now);
	}
	LWLockRelease(lease_shared->lock);
	xact_leases = NIL;
	lease_wake_all(&wake);
}

/*
 * A record of what this transaction does, on its list (id 0 until done):
 * the last one until lease_local_undo().
 */
LocalLease *
lease_local_add(bool session, bool release)
{
	MemoryContext old;
	LocalLease *local;

	leased_here = true;
	old = MemoryContextSwitchTo(TopTransactionContext);
	local = palloc(sizeof(LocalLease));

	local->id = 0;
	local->session = session;
	local->release = release;
	local->subid = GetCurrentSubTransactionId();
	xact_leases = lappend(xact_leases, local);
	MemoryContextSwitchTo(old);
	return local;
}

/*
 * When the transaction commits, forget the memory leases of installation
 * "relid" of database "dbid" (InvalidOid: all of them): of limit "name",
 * of the names template "name" made, or (NULL) of every limit.  Their
 * holders' tb_release() then frees nothing.
 */
void
lease_forget_later(Oid dbid, Oid relid, text *name)
{
	MemoryContext old;
	Forget	   *forget;

	if (lease_shared == NULL)
		return;
	old = MemoryContextSwitchTo(TopTransactionContext);
	forget = palloc0(sizeof(Forget));
	forget->dbid = dbid;
	forget->relid = relid;
	forget->subid = GetCurrentSubTransactionId();
	if (name != NULL)
	{
		forget->template = is_template_name(name);
		forget->len = VARSIZE_ANY_EXHDR(name) - (forget->template ? 1 : 0);
		forget->name = pnstrdup(VARDATA_ANY(name), forget->len);
	}
	forgets = lappend(forgets, forget);
	MemoryContextSwitchTo(old);
}

/* What lease_local_add() added last is not to be done after all. */
void
lease_local_undo(void)
{
	xact_leases = list_delete_last(xact_leases);
}

/*
 * This transaction wrote tb_limits (configure()): it reads the
 * configuration from the table until it ends, and makes every backend read
 * it again once it commits.
 */
void
lease_configured_here(void)
{
	config_changed_here = true;
}

/* Whether this transaction wrote tb_limits. */
bool
lease_config_changed_here(void)
{
	return config_changed_here;
}
