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
 * the queue sleeps on its latch until the moment its tokens will be there,
 * holding no lock on the bucket's row meanwhile.  A memory bucket sets the
 * latch of its head waiter when anything gives it tokens or changes its
 * settings; a table bucket's head looks again at least every second, in
 * case of a refund or a new rate.  Cancellation and
 * statement_timeout interrupt both waits with the usual errors, and the
 * queue lock, being transaction-level, goes with the transaction if the
 * waiter fails.
 *
 * Each attempt runs in a subtransaction: kept when granted, rolled back
 * when denied, which also releases the lock on tb_buckets the attempt
 * took, so a sleeping waiter never makes a DBA's ALTER TABLE, VACUUM FULL
 * or REINDEX (and every call queued behind those) wait for it.  Every lock
 * a waiter waits for (its queue, a row another transaction holds) is
 * waited for until the waiter's deadline at most, whatever the session's
 * lock_timeout or tokenbucket.row_lock_timeout: the timeout argument is
 * the promise, and a NULL timeout waits until statement_timeout.
 *
 * src/wait.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/xact.h"
#include "common.h"
#include "common/hashfn.h"
#include "held.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/proc.h"
#if PG_VERSION_NUM >= 170000
#include "storage/procarray.h"
#else
#include "storage/sinvaladt.h"
#endif
#include "router.h"
#include "wait.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

/*
 * field4 of our lock tags (pg_advisory_lock uses 1 and 2): "tb" for the
 * queue of a bucket, "tl" for the queue of a limit
 */
#define QUEUE_LOCK_FIELD4	0x7462
#define LIMIT_QUEUE_LOCK_FIELD4	0x746c

/* the head of a queue re-reads its buckets at least this often */
#define RECHECK_USECS		USECS_PER_SEC

/*
 * Under the test clock (clock.c) a wait still sleeps and times out on the
 * real clock, but the moment a bucket is ready on the test clock means
 * nothing in real time: a waiter looks again (seeing the test clock) every
 * TEST_CLOCK_RECHECK_USECS of real time, and whenever it is woken.
 */
#define TEST_CLOCK_RECHECK_USECS	10000

/* The moment of an attempt made at real time "now": tb_clock_now(). */
static inline TimestampTz
decision_time(TimestampTz now)
{
	return likely(!tb_test_clock) ? now : tb_test_clock_read();
}

/* The tag of the queue of waiters on "name" (field4: which kind). */
static void
queue_tag_of(LOCKTAG *tag, const char *name, int len, uint16 field4)
{
	uint64		hash = hash_bytes_extended((const unsigned char *) name, len, 0);

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (hash >> 32),
						 (uint32) hash, field4);
}

/* The tag of the queue of waiters on bucket "name". */
static void
queue_tag(LOCKTAG *tag, text *name)
{
	queue_tag_of(tag, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name),
				 QUEUE_LOCK_FIELD4);
}

/* A step of run_until(), and the lock_timeout it runs with. */
typedef struct TimedStep
{
	bool		(*step) (void *arg);
	void	   *arg;
	const char *timeout_ms;
} TimedStep;

/* subxact_run() step: the step, with lock_timeout set for it alone. */
static bool
timed_step(void *arg)
{
	TimedStep  *timed = arg;
	int			nestlevel = NewGUCNestLevel();
	bool		kept;

	(void) set_config_option("lock_timeout", timed->timeout_ms, PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	/* the deadline, not tokenbucket.row_lock_timeout (held.c) */
	held_bound_by_timeout(true);
	kept = timed->step(timed->arg);
	/* a timeout that fired as the last lock was granted must fire here */
	CHECK_FOR_INTERRUPTS();
	held_bound_by_timeout(false);
	AtEOXact_GUC(true, nestlevel);
	return kept;
}

/*
 * Run "step" in a subtransaction, with lock_timeout set to what is left
 * until "deadline" (no limit for DT_NOEND), whatever the session's own:
 * the subtransaction is kept when "step" returns true and rolled back when
 * it returns false (releasing every lock it took).  A lock wait that lasts
 * past the deadline rolls it back too, sets *timed_out and returns false;
 * any other error (cancel, statement_timeout) goes on up.
 */
static bool
run_until(TimestampTz deadline, bool (*step) (void *arg), void *arg,
		  bool *timed_out)
{
	char		timeout_ms[32] = "0";
	TimedStep	timed = {step, arg, timeout_ms};

	if (deadline != DT_NOEND)
		snprintf(timeout_ms, sizeof(timeout_ms), INT64_FORMAT,
				 Max(Min((deadline - GetCurrentTimestamp() + 999) / 1000,
						 (int64) INT_MAX), (int64) 1));
	return subxact_run(timed_step, &timed, ERRCODE_LOCK_NOT_AVAILABLE, timed_out);
}

/* run_until() step: wait for the queue lock "tag". */
static bool
queue_lock_step(void *tag)
{
	(void) LockAcquire((LOCKTAG *) tag, ExclusiveLock, false, false);
	return true;
}

/*
 * Join the queue on one bucket (setting *waited if it had to wait); false
 * if "deadline" passes first.  The
 * caller has made CurTransactionResourceOwner current: a lock taken in
 * run_until()'s subtransaction ends up owned by it too, so all the
 * queue locks are released under one owner.
 */
static bool
queue_join(LOCKTAG *tag, TimestampTz deadline, bool *waited)
{
	bool		timed_out = false;

	if (LockAcquire(tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL)
		return true;
	if (GetCurrentTimestamp() >= deadline)
		return false;
	*waited = true;
	return run_until(deadline, queue_lock_step, tag, &timed_out);
}

/*
 * Sleep on the latch until "until" or until it is set, answering
 * interrupts; no CPU is used.  Returns whether the latch woke it.
 */
static bool
sleep_until_woken(TimestampTz until)
{
	TimestampTz now = GetCurrentTimestamp();
	int			events;

	CHECK_FOR_INTERRUPTS();
	if (now >= until)
		return false;
	events = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					   (long) ((until - now + 999) / 1000), PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
	return (events & WL_LATCH_SET) != 0;
}

/* sleep_until_woken(), whatever woke it. */
static void
sleep_until(TimestampTz until)
{
	(void) sleep_until_woken(until);
}

/* One attempt at taking every request of a waiter, at "now". */
typedef struct Attempt
{
	Installation *inst;
	Request    *requests;
	int			nrequests;
	TimestampTz now;
} Attempt;

/*
 * run_until() step: the attempt, kept if granted and rolled back if
 * denied (see the top of this file).
 */
static bool
attempt_step(void *arg)
{
	Attempt    *attempt = arg;

	return router_attempt(attempt->inst, attempt->requests,
						  attempt->nrequests, attempt->now);
}

/*
 * Fail unless the transaction reads the newest row versions: a waiter in
 * REPEATABLE READ or SERIALIZABLE would decide on its snapshot, missing a
 * refund, a reset or a lease released while it sleeps, and wait on a
 * stale denial.
 */
static void
check_read_committed(void)
{
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("waiting needs READ COMMITTED"),
				 errdetail("In REPEATABLE READ or SERIALIZABLE a waiter would decide on its transaction's snapshot and never see tokens or slots given back while it waits."),
				 errhint("Call it in a READ COMMITTED transaction (the default), or call tb_try (or tb_lease) and retry.")));
}

/*
 * Queue on every bucket of the request (in the callers' sorted order, so
 * queues are joined in one order too), then take all the tokens as soon as
 * they are there.  False when "deadline" passes first.  *waited_usecs is
 * how long the call waited (in a queue, or asleep), or -1 when it did
 * not.
 */
bool
wait_and_take(Installation *inst, Request *requests, int nrequests,
			  TimestampTz deadline, int64 *waited_usecs)
{
	LOCKTAG    *tags = palloc(sizeof(LOCKTAG) * nrequests);
	ResourceOwner oldowner = CurrentResourceOwner;
	TimestampTz start = GetCurrentTimestamp();
	int			joined;
	bool		granted = false;
	bool		watched = false;
	bool		woken = false;
	bool		waited = false;

	/* on a standby, or on a snapshot, fail at once rather than queue */
	check_primary();
	check_read_committed();
	/* one queue lock per bucket: say so before the shared lock table fills */
	if (nrequests > max_locks_per_xact)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many token buckets to wait for at once: %d, at most %d",
						nrequests, max_locks_per_xact),
				 errdetail("A waiter holds a lock per bucket, and max_locks_per_transaction is %d.",
						   max_locks_per_xact),
				 errhint("Wait for fewer buckets at once, or raise max_locks_per_transaction.")));

	/* from here on, an error ends the wait as cancelled */
	router_count_wait_begin(inst, requests, nrequests);

	CurrentResourceOwner = CurTransactionResourceOwner;
	for (joined = 0; joined < nrequests; joined++)
	{
		queue_tag(&tags[joined], requests[joined].name);
		if (!queue_join(&tags[joined], deadline, &waited))
			break;
	}
	CurrentResourceOwner = oldowner;

	while (joined == nrequests)
	{
		TimestampTz now = GetCurrentTimestamp();
		TimestampTz at = decision_time(now);
		TimestampTz ready = at;
		Attempt		attempt = {inst, requests, nrequests, at};
		bool		timed_out = false;

		/* a row another transaction holds is waited for until the deadline */
		granted = run_until(deadline, attempt_step, &attempt, &timed_out);
		if (granted || timed_out || now >= deadline)
			break;

		/* once watched, a change meanwhile sets the latch: look again first */
		if (!watched)
		{
			watched = true;
			woken = router_watch(inst, requests, nrequests, true);
			continue;
		}
		for (int i = 0; i < nrequests; i++)
			ready = Max(ready, bucket_ready_at(&requests[i].bucket,
											   requests[i].cost,
											   requests[i].reserve, at));
		if (!woken)
			ready = Min(ready, at + RECHECK_USECS);
		if (unlikely(tb_test_clock))
			ready = now + TEST_CLOCK_RECHECK_USECS;
		/* at least a millisecond, so that nothing can make this spin */
		sleep_until(Max(Min(ready, deadline), now + 1000));
		waited = true;
	}
	if (watched)
		(void) router_watch(inst, requests, nrequests, false);

	CurrentResourceOwner = CurTransactionResourceOwner;
	while (joined-- > 0)
		LockRelease(&tags[joined], ExclusiveLock, false);
	CurrentResourceOwner = oldowner;
	pfree(tags);
	*waited_usecs = waited ? GetCurrentTimestamp() - start : -1;
	return granted;
}

/* run_until() step of wait_in_queue(): one attempt. */
typedef struct QueuedAttempt
{
	WaitAttempt attempt;
	void	   *arg;
	TimestampTz now;
	TimestampTz ready;
} QueuedAttempt;

static bool
queued_attempt_step(void *arg)
{
	QueuedAttempt *queued = arg;

	return queued->attempt(queued->arg, queued->now, &queued->ready);
}

/*
 * Wait in the queue of limit "name" (in arrival order, as for a bucket)
 * until "attempt" succeeds or "deadline" passes (false).  Each attempt
 * runs in a subtransaction, kept when it succeeds and rolled back when it
 * does not; it sets *ready to when it could succeed without anyone else
 * acting (DT_NOEND: only once something is freed).  Between attempts the
 * head of the queue sleeps until then, or until wait_wake_limit() (or the
 * once-a-second look, for a holder that died without a word) wakes it.
 * *waited_usecs is how long it waited, or -1 when it did not.
 */
bool
wait_in_queue(const char *name, int len, TimestampTz deadline,
			  WaitAttempt attempt, void *arg, int64 *waited_usecs)
{
	LOCKTAG		tag;
	ResourceOwner oldowner = CurrentResourceOwner;
	TimestampTz start = GetCurrentTimestamp();
	bool		joined;
	bool		granted = false;
	bool		waited = false;
	int64		backoff = 0;	/* usecs to the next look after a wake */

	check_primary();
	check_read_committed();

	queue_tag_of(&tag, name, len, LIMIT_QUEUE_LOCK_FIELD4);
	CurrentResourceOwner = CurTransactionResourceOwner;
	joined = queue_join(&tag, deadline, &waited);
	CurrentResourceOwner = oldowner;

	while (joined)
	{
		TimestampTz now = GetCurrentTimestamp();
		QueuedAttempt queued = {attempt, arg, decision_time(now), DT_NOEND};
		bool		timed_out = false;

		granted = run_until(deadline, queued_attempt_step, &queued, &timed_out);
		if (granted || timed_out || now >= deadline)
			break;
		if (unlikely(tb_test_clock))
			queued.ready = now + TEST_CLOCK_RECHECK_USECS;
		queued.now = now;

		/*
		 * Woken and still refused: a holder that woke us on its way out may
		 * not be gone yet.  Look again after 1 ms, 2, 4... up to 128 ms,
		 * then once a second again.  At least a millisecond, so that
		 * nothing can make this spin.
		 */
		if (sleep_until_woken(Max(Min(Min(queued.ready, queued.now + (backoff ? backoff : RECHECK_USECS)),
									  deadline), queued.now + 1000)))
			backoff = 1000;
		else if (backoff != 0)
			backoff = backoff < 128000 ? backoff * 2 : 0;
		waited = true;
	}

	if (joined)
	{
		CurrentResourceOwner = CurTransactionResourceOwner;
		LockRelease(&tag, ExclusiveLock, false);
		CurrentResourceOwner = oldowner;
	}
	*waited_usecs = waited ? GetCurrentTimestamp() - start : -1;
	return granted;
}

/*
 * Wake the head of the queue of limit "name", if anyone waits: something
 * of it was freed.  The head is the backend holding the queue's lock.
 */
void
wait_wake_limit(const char *name, int len)
{
	LOCKTAG		tag;
	VirtualTransactionId *holders;

	queue_tag_of(&tag, name, len, LIMIT_QUEUE_LOCK_FIELD4);
	holders = GetLockConflicts(&tag, ExclusiveLock, NULL);
	for (; VirtualTransactionIdIsValid(*holders); holders++)
	{
#if PG_VERSION_NUM >= 170000
		PGPROC	   *proc = ProcNumberGetProc(holders->procNumber);
#else
		PGPROC	   *proc = BackendIdGetProc(holders->backendId);
#endif

		if (proc != NULL)
			SetLatch(&proc->procLatch);
	}
}
