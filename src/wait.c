/*-------------------------------------------------------------------------
 *
 * wait.c
 *	  Waiting in the server, in arrival order, until tokens can be taken.
 *
 * Waiters on a bucket queue on a heavyweight lock of their own (an
 * advisory lock tag keyed by a hash of the bucket's name, with a field
 * users' pg_advisory_lock never sets).  The lock manager grants it in
 * arrival order, so only the oldest waiter tries to take tokens: a waiter
 * that needs many is not starved by later ones that need few.  The head of
 * the queue sleeps on its latch until the moment its tokens will be there
 * (re-checking at least every second, in case of a refund or a new rate),
 * holding no lock on the bucket's row meanwhile.  Cancellation and
 * statement_timeout interrupt both waits with the usual errors, and the
 * queue lock, being transaction-level, goes with the transaction if the
 * waiter fails.
 *
 * src/wait.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "tokenbucket.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

/* field4 of our lock tags: "tb"; pg_advisory_lock uses 1 and 2 */
#define QUEUE_LOCK_FIELD4	0x7462

/* the head of a queue re-reads its buckets at least this often */
#define RECHECK_USECS		USECS_PER_SEC

/* The tag of the queue of waiters on bucket "name". */
static void
queue_tag(LOCKTAG *tag, text *name)
{
	uint64		hash = hash_bytes_extended((const unsigned char *) VARDATA_ANY(name),
										   VARSIZE_ANY_EXHDR(name), 0);

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (hash >> 32),
						 (uint32) hash, QUEUE_LOCK_FIELD4);
}

/*
 * Wait in the queue until "deadline", with lock_timeout set to what is
 * left; the timeout's error is caught in a subtransaction and becomes
 * false.  Any other error (cancel, statement_timeout) goes on up.
 */
static bool
queue_join_until(LOCKTAG *tag, TimestampTz deadline)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	TimestampTz now = GetCurrentTimestamp();
	bool		joined = true;
	char		timeout_ms[32];

	if (now >= deadline)
		return false;
	snprintf(timeout_ms, sizeof(timeout_ms), INT64_FORMAT,
			 Min((deadline - now + 999) / 1000, (int64) INT_MAX));

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcontext);
	PG_TRY();
	{
		int			nestlevel = NewGUCNestLevel();

		(void) set_config_option("lock_timeout", timeout_ms, PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
		(void) LockAcquire(tag, ExclusiveLock, false, false);
		/* a timeout that fired as the lock was granted must fire here */
		CHECK_FOR_INTERRUPTS();
		AtEOXact_GUC(true, nestlevel);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata = subxact_abort(oldcontext, oldowner);

		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		FreeErrorData(edata);
		joined = false;
	}
	PG_END_TRY();
	return joined;
}

/*
 * Join the queue on one bucket; false if "deadline" passes first.  The
 * caller has made CurTransactionResourceOwner current: a lock taken in
 * queue_join_until()'s subtransaction ends up owned by it too, so all the
 * queue locks are released under one owner.
 */
static bool
queue_join(LOCKTAG *tag, TimestampTz deadline)
{
	if (LockAcquire(tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL)
		return true;
	if (deadline == DT_NOEND)
	{
		(void) LockAcquire(tag, ExclusiveLock, false, false);
		return true;
	}
	return queue_join_until(tag, deadline);
}

/* Sleep on the latch until "until", answering interrupts; no CPU is used. */
static void
sleep_until(TimestampTz until)
{
	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();

		CHECK_FOR_INTERRUPTS();
		if (now >= until)
			return;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 (long) ((until - now + 999) / 1000), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/*
 * Queue on every bucket of the request (in the callers' sorted order, so
 * queues are joined in one order too), then take all the tokens as soon as
 * they are there.  False when "deadline" passes first.
 */
bool
wait_and_take(FunctionCallInfo fcinfo, Request *requests, int nrequests,
			  TimestampTz deadline)
{
	LOCKTAG    *tags = palloc(sizeof(LOCKTAG) * nrequests);
	ResourceOwner oldowner = CurrentResourceOwner;
	int			joined;
	bool		granted = false;

	/* on a standby, fail at once rather than queue */
	store_check_primary();

	CurrentResourceOwner = CurTransactionResourceOwner;
	for (joined = 0; joined < nrequests; joined++)
	{
		queue_tag(&tags[joined], requests[joined].name);
		if (!queue_join(&tags[joined], deadline))
			break;
	}
	CurrentResourceOwner = oldowner;

	while (joined == nrequests)
	{
		TimestampTz now = GetCurrentTimestamp();
		TimestampTz ready = now;

		store_connect();
		granted = store_take_all(fcinfo, requests, nrequests, now);
		store_finish();
		if (granted || now >= deadline)
			break;

		for (int i = 0; i < nrequests; i++)
			ready = Max(ready, bucket_ready_at(&requests[i].bucket,
											   requests[i].cost, now));
		/* at least a millisecond, so that nothing can make this spin */
		sleep_until(Max(Min(Min(ready, deadline), now + RECHECK_USECS), now + 1000));
	}

	CurrentResourceOwner = CurTransactionResourceOwner;
	while (joined-- > 0)
		LockRelease(&tags[joined], ExclusiveLock, false);
	CurrentResourceOwner = oldowner;
	pfree(tags);
	return granted;
}
