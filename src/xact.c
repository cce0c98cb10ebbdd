/*-------------------------------------------------------------------------
 *
 * xact.c
 *	  The one owner of every transaction's end: what each part of the
 *	  library does when a transaction or subtransaction commits, aborts or
 *	  is prepared, after its locks are released, and when its backend
 *	  exits, called in one order from one place.
 *
 * There is only ever one transaction callback, one subtransaction
 * callback, one resource-release callback and one backend-exit callback
 * for the whole library: these.  The first three are registered once,
 * when the library is loaded (_PG_init), preloaded or not.  The exit
 * callback is the server's per process, and a backend forked from a
 * postmaster that preloaded the library does not inherit it: it is
 * registered at load in a backend, or else at the first transaction event
 * of each backend (the one InitPostgres runs), so that it always runs
 * before the server aborts the backend's open transaction at exit.  No
 * other file registers a callback: each part exposes what to do at each
 * end, and this file calls them, in this order, for these reasons:
 *
 *	1. the memory store (memory_xact.c): at commit, settings changes are
 *	   applied, provisional entries become committed ones, and what the
 *	   transaction gave back reaches the entries; at abort, what it took is
 *	   given back.  First: the counters (4) of a key made in this
 *	   transaction go into its entry, which must be committed by then.
 *	2. memory limits (lease_memory_xact.c): releases freed, transaction
 *	   leases ended and dropped limits forgotten (commit); leases taken
 *	   freed and releases undone (abort).  What it frees is counted at once.
 *	3. limits' queues (limit_wake.c): which to wake, once the transaction's
 *	   locks are gone (the resource-release callback), or at exit.
 *	4. the note of the rows the transaction holds (held.c): forgotten at
 *	   its end, a subtransaction's at its abort; then the alerts (alerts.c):
 *	   the events a (sub)transaction learnt exist are kept if it commits
 *	   and forgotten if it aborts or is prepared (the row may be its own),
 *	   and a change of thresholds committed reaches every backend; and
 *	   the calendars of quotas this backend keeps (period.c) may be
 *	   dropped, none of the transaction's Buckets referring to them now.
 *	5. the counters (stats.c): last, so that everything above has counted
 *	   what it counts before the transaction's counts are flushed.
 *
 * Before a commit (not a PREPARE), the alerts queue the NOTIFY of the
 * events the transaction wrote: one queued earlier would make PostgreSQL
 * refuse to prepare it (alerts.c).
 *
 * A subtransaction ends in the same order, each part making what the level
 * did its parent's (commit) or undoing it (abort).
 *
 * PREPARE is decided here, once: each part says whether the transaction
 * holds shared-memory state that only its own backend can apply or give
 * back when it ends (tokens taken or given back, settings to apply,
 * leases, releases, limits or counters to forget), which a prepared
 * transaction, ended later by any backend, cannot carry; if any does,
 * PREPARE fails with one 0A000 whose detail names them all.  Otherwise the
 * parts end a prepared transaction as a committed one (its counts are
 * counted at PREPARE, as PostgreSQL's own statistics are): nothing of
 * theirs is left for COMMIT PREPARED or ROLLBACK PREPARED to do.
 *
 * What other sessions see of shared memory follows one rule (docs/guarantees.md,
 * "Guarantees"): a change that takes capacity (a grant, a lease, a longer
 * pause) takes effect at once and is given back if its (sub)transaction
 * aborts; one that gives capacity back (a refund, a settlement downward, a
 * reset, a lifted pause, a release, raised settings) reaches other
 * sessions only when its transaction commits, and never if it aborts,
 * while the transaction that made it sees it at once.
 *
 * At exit, however it comes (a client gone, pg_terminate_backend, FATAL),
 * memory limits free the session's leases and undo the releases of its
 * open transaction, then the queues of its limits are woken; the abort of
 * the open transaction that follows finds none of that left to do.
 *
 * Every part is a cheap no-op when it has nothing to do, and when the
 * library is not preloaded (no shared memory).
 *
 * src/xact.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "alerts.h"
#include "bucket.h"
#include "held.h"
#include "lease_memory_xact.h"
#include "lib/stringinfo.h"
#include "limit_wake.h"
#include "memory_xact.h"
#include "miscadmin.h"
#include "stats.h"
#include "storage/ipc.h"
#include "utils/resowner.h"
#include "xact.h"

/* this backend's exit callback is registered */
static bool exit_registered = false;

/*
 * Refuse PREPARE if a part holds what a prepared transaction cannot carry:
 * one error naming every such part's state.
 */
static void
refuse_prepare(void)
{
	const char *held[] = {
		memory_xact_unpreparable(),
		lease_memory_unpreparable(),
		stats_unpreparable(),
		alerts_unpreparable(),
	};
	StringInfoData what;
	int			left = 0;		/* to name after the one being named */

	initStringInfo(&what);
	for (int i = 0; i < (int) lengthof(held); i++)
		left += held[i] != NULL;
	for (int i = 0; i < (int) lengthof(held); i++)
		if (held[i] != NULL)
		{
			left--;
			appendStringInfo(&what, "%s%s",
							 what.len == 0 ? "" : left == 0 ? " and " : ", ", held[i]);
		}
	if (what.len == 0)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("cannot PREPARE a transaction that used tokenbucket's shared memory"),
			 errdetail("Its changes to %s are kept in its own session, to apply or undo when it ends, which a prepared transaction outlives.",
					   what.data),
			 errhint("Use memory buckets and memory limits, and change the settings of buckets or limits, in transactions that are not prepared.")));
}

/* Backend exit: see the header. */
static void
exit_callback(int code, Datum arg)
{
	lease_memory_exit();
	limit_wake_exit();
}

/* Register exit_callback, once per backend (never while exiting). */
static void
register_exit(void)
{
	if (exit_registered || proc_exit_inprogress)
		return;
	before_shmem_exit(exit_callback, (Datum) 0);
	exit_registered = true;
}

/* XactCallback: every part, in the header's order. */
static void
xact_callback(XactEvent event, void *arg)
{
	bool		commit;

	if (!exit_registered)
		register_exit();
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			refuse_prepare();
			return;
		case XACT_EVENT_PRE_COMMIT:
			alerts_pre_commit();
			return;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:	/* nothing refused is left: see the header */
			commit = true;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			commit = false;
			break;
		default:
			return;
	}
	memory_xact_end(commit);
	lease_memory_xact_end(commit);
	limit_wake_xact_end(commit);
	held_xact_end();
	alerts_xact_end(commit && event != XACT_EVENT_PREPARE);
	period_xact_end();
	stats_xact_end(commit);
}

/* SubXactCallback: every part, in the header's order. */
static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	bool		commit = event == SUBXACT_EVENT_COMMIT_SUB;

	if (!commit && event != SUBXACT_EVENT_ABORT_SUB)
		return;
	memory_subxact_end(commit);
	lease_memory_subxact_end(mySubid, parentSubid, commit);
	limit_wake_subxact_end(mySubid, parentSubid, commit);
	held_subxact_end(commit);
	alerts_subxact_end(mySubid, parentSubid, commit);
	stats_subxact_end(commit);
}

/* ResourceReleaseCallback: once a transaction's locks are gone. */
static void
release_callback(ResourceReleasePhase phase, bool isCommit, bool isTopLevel,
				 void *arg)
{
	if (phase == RESOURCE_RELEASE_AFTER_LOCKS && isTopLevel)
		limit_wake_locks_released();
}

/* Library load: the callbacks, once (the exit callback: see the header). */
void
xact_init(void)
{
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
	RegisterResourceReleaseCallback(release_callback, NULL);
	if (IsUnderPostmaster)
		register_exit();
}
