/*-------------------------------------------------------------------------
 *
 * common.h
 *	  What every layer above the arithmetic needs: the installation a call
 *	  serves, bucket names, subtransactions, set-returning results and the
 *	  right to read them.
 *
 * src/common.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_COMMON_H
#define TOKENBUCKET_COMMON_H

#include "catalog/objectaccess.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

/* 16 moved the varlena macros (VARDATA_ANY and the rest) out of postgres.h */
#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif

/*
 * The installation a call serves: its tb_buckets, their owner (the
 * extension's) and its tb_limits, named by the SQL function called.  An
 * entry point takes it from its fcinfo (installation_of()) and passes it
 * down: nothing below the entry points sees fcinfo.  It is looked up once,
 * at its first use (installation_table() and the others), so that what
 * fails before it is needed (an argument, a standby, an isolation level)
 * fails first.
 */
typedef struct Installation
{
	Oid			function;		/* the SQL function called */
	bool		resolved;		/* the fields below are looked up */
	Oid			table;			/* its tb_buckets */
	Oid			owner;			/* their owner: the extension's */
	Oid			limits;			/* its tb_limits (InvalidOid before 1.6) */
} Installation;

extern Installation installation_of(FunctionCallInfo fcinfo);
extern void installation_resolve(Installation *inst);
extern Oid	installation_recheck(Installation *inst);
extern void report_dropped(void);

/* The installation's tb_buckets. */
static inline Oid
installation_table(Installation *inst)
{
	if (!inst->resolved)
		installation_resolve(inst);
	return inst->table;
}

/* The owner of its tb_buckets: the extension's owner. */
static inline Oid
installation_owner(Installation *inst)
{
	if (!inst->resolved)
		installation_resolve(inst);
	return inst->owner;
}

/*
 * Its tb_limits: the installation whose limits' counters are kept apart
 * from its buckets' (a limit and a bucket may share a name).
 */
static inline Oid
installation_limits(Installation *inst)
{
	if (!inst->resolved)
		installation_resolve(inst);
	return inst->limits;
}

/* A DROP that takes an installation or a database with it (object_access_hook). */
extern bool installation_dropped(ObjectAccessType access, Oid classId, Oid objectId,
								 int subId, Oid *dbid, Oid *relid);

/*
 * The clock (clock.c): "now" for every decision.  The test clock is read
 * only on a server started with tokenbucket.test_clock on; otherwise this
 * is GetCurrentTimestamp() behind one branch.  Waits sleep and time out on
 * the real clock.
 */
extern PGDLLIMPORT bool tb_test_clock;
extern TimestampTz tb_test_clock_read(void);
extern bool tb_test_clock_usable(void);
extern void tb_test_clock_write(TimestampTz at);
extern TimestampTz tb_test_clock_add(int64 usecs);
extern void clock_init(void);

static inline TimestampTz
tb_clock_now(void)
{
	if (likely(!tb_test_clock))
		return GetCurrentTimestamp();
	return tb_test_clock_read();
}

/* Names */

/* Longest name: well inside what a btree index entry may hold. */
#define BUCKET_NAME_MAX_BYTES 1024

extern bool is_template_name(text *name);
extern bool is_template_key(const char *name, int len);

/* Intervals: microseconds in one; the end of a wait's timeout. */
extern bool interval_usecs(Interval *span, double *usecs);
extern TimestampTz deadline_after(Interval *timeout, TimestampTz now);

/* A reserve argument: a share of capacity or slots to leave (0: none). */
extern double reserve_arg(FunctionCallInfo fcinfo, int argno);

/* What tb_ensure (router_ensure()) or tb_ensure_limit (limit_ensure()) did. */
typedef enum EnsureResult
{
	ENSURE_CREATED,
	ENSURE_CHANGED,
	ENSURE_UNCHANGED
} EnsureResult;

extern text *ensure_result_text(EnsureResult result);

/*
 * A SQL function's name and its arguments' names, and which of them may be
 * NULL (bit i: argument i), for check_not_null().
 */
typedef struct ArgsSpec
{
	const char *function;
	uint32		may_be_null;
	const char *names[8];
} ArgsSpec;

#define ARG_MAY_BE_NULL(i) (1U << (i))

extern void report_null_argument(const ArgsSpec *spec, int argno);

/*
 * Fail with 22004 on the first argument of the call that is NULL and may
 * not be.  The functions are not STRICT, where a NULL would give NULL and
 * do nothing, silently; this costs a test per argument.
 */
static inline void
check_not_null(FunctionCallInfo fcinfo, const ArgsSpec *spec)
{
	for (int i = 0; i < PG_NARGS(); i++)
		if (unlikely(PG_ARGISNULL(i)) && (spec->may_be_null & ARG_MAY_BE_NULL(i)) == 0)
			report_null_argument(spec, i);
}

/*
 * What the server's live status entry of a backend says of it: read in
 * shared memory, not from pg_stat_activity's copy taken once per
 * transaction (which knows no backend started since).
 */
typedef struct BackendLook
{
	int			pid;
	TimestampTz proc_start;
	int			state;			/* a BackendState */
	TimestampTz state_start;
	char		appname[NAMEDATALEN];
} BackendLook;

extern bool backend_look(int index, BackendLook *look);
extern int	backend_index(int pid);

/* The server must be a primary for anything that changes a bucket. */
extern void check_primary(void);

/* Subtransactions */
extern ErrorData *subxact_abort(MemoryContext oldcontext, ResourceOwner oldowner);
extern bool subxact_run(bool (*step) (void *arg), void *arg, int catch_sqlstate,
						bool *caught);

/* Set-returning functions and who may call them */
extern Tuplestorestate *materialize_begin(FunctionCallInfo fcinfo,
										  TupleDesc *desc);
extern void check_may_read(Installation *inst, const char *function,
						   const char *const *views);

#endif							/* TOKENBUCKET_COMMON_H */
