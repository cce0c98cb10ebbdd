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
#include "utils/tuplestore.h"

/* 16 moved the varlena macros (VARDATA_ANY and the rest) out of postgres.h */
#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif

/* The installation of a function called: its tb_buckets, and their owner. */
extern Oid	installation_table(FunctionCallInfo fcinfo);
extern Oid	installation_owner(FunctionCallInfo fcinfo);
extern Oid	installation_limits(FunctionCallInfo fcinfo);
extern Oid	installation_recheck(FunctionCallInfo fcinfo);
extern void report_dropped(void);

/* A DROP that takes an installation or a database with it (object_access_hook). */
extern bool installation_dropped(ObjectAccessType access, Oid classId, Oid objectId,
								 int subId, Oid *dbid, Oid *relid);

/* Names */
extern bool is_template_name(text *name);
extern bool is_template_key(const char *name, int len);

/* Intervals: microseconds in one; the end of a wait's timeout. */
extern bool interval_usecs(Interval *span, double *usecs);
extern TimestampTz deadline_after(Interval *timeout, TimestampTz now);

/* A reserve argument: a share of capacity or slots to leave (0: none). */
extern double reserve_arg(FunctionCallInfo fcinfo, int argno);

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

/* The server must be a primary for anything that changes a bucket. */
extern void check_primary(void);

/* Subtransactions */
extern ErrorData *subxact_abort(MemoryContext oldcontext, ResourceOwner oldowner);
extern bool subxact_run(bool (*step) (void *arg), void *arg, int catch_sqlstate,
						bool *caught);

/* Set-returning functions and who may call them */
extern Tuplestorestate *materialize_begin(FunctionCallInfo fcinfo,
										  TupleDesc *desc);
extern void check_may_read(FunctionCallInfo fcinfo, const char *function,
						   const char *const *views);

#endif							/* TOKENBUCKET_COMMON_H */
