/*-------------------------------------------------------------------------
 *
 * spi_session.c
 *	  The table work's SPI session: run as the extension's owner, plans
 *	  prepared once per backend and installation, and the check that the
 *	  installation is of this library's version.
 *
 * The functions run as their caller; spi_begin() switches to the
 * extension's owner around the table work only, so a call answered from
 * shared memory pays for none of it.  Every name in the statements is
 * schema-qualified, operators included, so no search_path can change what
 * they mean; settings are changed only where the plan cache needs them
 * (plans_search_path, run()).
 *
 * src/spi_session.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "catalog/namespace.h"
#include "common.h"
#include "miscadmin.h"
#include "spi_session.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
#include "utils/snapmgr.h"

/* The installation whose version this backend checked last. */
static Oid	checked_relid = InvalidOid;

/*
 * The search_path the kept plans are prepared and run under: the first
 * session's.  The plan cache plans a statement again whenever the path
 * differs from the one it was planned under, although no path changes
 * what these statements mean; so a session whose caller's path is this
 * one (a connection keeps its path) sets nothing, and only one whose
 * caller's path differs sets it to this one.  NULL before the first.
 */
static char *plans_search_path = NULL;

/* Whether the session's plans may scan tb_buckets whole (spi_allow_seqscan). */
static bool seqscan_allowed = false;

/*
 * Fail clearly when the extension's SQL objects are of another version
 * than this library (a new library installed, ALTER EXTENSION not yet run);
 * once per backend and installation.
 */
static void
check_version(Oid relid)
{
	char	   *version = NULL;
	int			rc;

	if (relid == checked_relid)
		return;
	checked_relid = InvalidOid;

	rc = SPI_execute("SELECT extversion FROM pg_catalog.pg_extension"
					 " WHERE extname OPERATOR(pg_catalog.=) 'tokenbucket'",
					 true, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 1)
		version = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (version == NULL || strcmp(version, TOKENBUCKET_VERSION) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension tokenbucket is version %s, its library is version %s",
						version ? version : "(none)", TOKENBUCKET_VERSION),
				 errhint("Run ALTER EXTENSION tokenbucket UPDATE in this database.")));
	checked_relid = relid;
}

/*
 * Whether this backend checked the version of installation "relid" (in an
 * SPI session on it): then a memory bucket's entry may be used without
 * SPI.
 */
bool
version_checked(Oid relid)
{
	return OidIsValid(relid) && relid == checked_relid;
}

/*
 * Start the table work of a call on installation "inst" (looked up
 * afresh): on the primary (unless only looking), as the extension's
 * owner, under the plans' search_path, and connected to SPI.  What
 * SECURITY DEFINER would do, but only around the table work.  An error
 * undoes it all with the (sub)transaction.
 */
SpiSession
spi_begin(Installation *inst, bool writes)
{
	SpiSession	session;
	Oid			relid;
	int			rc;

	if (writes)
		check_primary();
	relid = installation_recheck(inst);
	GetUserIdAndSecContext(&session.userid, &session.sec_context);
	SetUserIdAndSecContext(installation_owner(inst),
						   session.sec_context | SECURITY_LOCAL_USERID_CHANGE);
	session.nestlevel = 0;
	if (plans_search_path == NULL)
		plans_search_path = MemoryContextStrdup(TopMemoryContext,
												namespace_search_path);
	else if (strcmp(namespace_search_path, plans_search_path) != 0)
	{
		session.nestlevel = NewGUCNestLevel();
		(void) set_config_option("search_path", plans_search_path, PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	}
	seqscan_allowed = false;
	rc = SPI_connect();
	if (rc != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed: %s", SPI_result_code_string(rc));
	check_version(relid);
	return session;
}

/*
 * Let what the rest of the session plans scan tb_buckets whole (what
 * tb_purge does), until spi_end().
 */
void
spi_allow_seqscan(void)
{
	seqscan_allowed = true;
}

/* End what spi_begin() began, or fail loudly. */
void
spi_end(SpiSession *session)
{
	int			rc = SPI_finish();

	if (rc != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed: %s", SPI_result_code_string(rc));
	seqscan_allowed = false;
	if (session->nestlevel > 0)
		AtEOXact_GUC(true, session->nestlevel);
	SetUserIdAndSecContext(session->userid, session->sec_context);
}

/*
 * Whether a kept plan runs without being planned (again): its query and
 * its generic plan are valid, as far as the invalidations taken in so far
 * say.
 */
static bool
plan_ready(CachedPlanSource *source)
{
	return source->is_valid && source->gplan != NULL && source->gplan->is_valid;
}

/*
 * The lock a statement takes on the tables it names: a plain SELECT reads
 * (ACCESS SHARE), one FOR UPDATE or SHARE locks rows (ROW SHARE), any
 * other writes (ROW EXCLUSIVE).
 */
static LOCKMODE
statement_lock_mode(const char *sql)
{
	if (strncmp(sql, "SELECT ", 7) != 0)
		return RowExclusiveLock;
	return strstr(sql, " FOR UPDATE") || strstr(sql, " FOR SHARE") ||
		strstr(sql, " FOR NO KEY") ? RowShareLock : AccessShareLock;
}

/*
 * In a PG_CATCH block of "plan" on installation "relid", which "bound"
 * bounded: a lock timeout becomes 55P03 naming the table another
 * transaction locked whole (each table of the installation the statement
 * names, "%1$s.tb_..."), or else the bucket or limit whose row $1 names
 * ("args" NULL: none); any other error is left to re-throw.
 */
static void
report_locked(KeptPlan *plan, Oid relid, Datum *args, HeldBound *bound,
			  MemoryContext context)
{
	Oid			nsp = get_rel_namespace(relid);
	const char *p = plan->sql;

	while (OidIsValid(nsp) && (p = strstr(p, "%1$s.")) != NULL)
	{
		char		name[NAMEDATALEN];
		int			len = 0;
		Oid			table;

		p += 5;
		while (len < NAMEDATALEN - 1 && (islower((unsigned char) p[len]) || p[len] == '_'))
		{
			name[len] = p[len];
			len++;
		}
		name[len] = '\0';
		table = get_relname_relid(name, nsp);
		if (OidIsValid(table))
			held_report_table(bound, table, statement_lock_mode(plan->sql), context);
	}
	if (args != NULL && plan->holds != HELD_NOTHING)
		held_report_locked(bound, plan->holds, relid, DatumGetTextPP(args[0]), context);
}

/*
 * Prepare "plan" for installation "relid" and keep it, waiting for a lock
 * on a whole table another transaction holds at most the bound (a new
 * session's first call plans, and planning locks the tables).
 */
static void
prepare(KeptPlan *plan, Oid relid)
{
	MemoryContext context = CurrentMemoryContext;
	char	   *nspname = get_namespace_name(get_rel_namespace(relid));
	char	   *sql;
	SPIPlanPtr	prepared;
	HeldBound	bound;

	if (nspname == NULL)
		report_dropped();
	if (plan->plan != NULL)
		SPI_freeplan(plan->plan);
	plan->plan = NULL;
	sql = psprintf(plan->sql, quote_identifier(nspname));

	/*
	 * One generic plan, planned once: every statement here is an index
	 * lookup whatever its parameters, and a custom plan per call (which
	 * the plan cache picks when the generic one's estimate looks worse, as
	 * for a LIMIT $n) would plan on every call.
	 */
	held_bound_begin(&bound);
	PG_TRY();
	{
		prepared = SPI_prepare_cursor(sql, plan->nargs, plan->argtypes,
									  CURSOR_OPT_GENERIC_PLAN);
	}
	PG_CATCH();
	{
		held_bound_end(&bound);
		report_locked(plan, relid, NULL, &bound, context);
		PG_RE_THROW();
	}
	PG_END_TRY();
	held_bound_end(&bound);
	if (prepared == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s",
			 sql, SPI_result_code_string(SPI_result));
	if (SPI_keepplan(prepared) != 0)
		elog(ERROR, "SPI_keepplan failed");
	plan->plan = prepared;
	plan->relid = relid;
}

/*
 * plan_run(), or a read-only statement on the snapshot "snapshot" gives
 * (taken as it starts).
 */
static uint64
run(KeptPlan *plan, Oid relid, Datum *args, const char *nulls,
	Snapshot (*snapshot) (void))
{
	MemoryContext context = CurrentMemoryContext;
	HeldBound	bound;
	volatile int rc = 0;
	CachedPlanSource *source;
	bool		ready;
	int			generation;
	volatile int nestlevel = 0;

	check_version(relid);
	if (plan->plan == NULL || plan->relid != relid)
		prepare(plan, relid);

	/*
	 * A plan is made with sequential scans off (on where the session
	 * allows them), so that it stays an index lookup as the table grows:
	 * only an execution that plans needs the setting.  One planned again
	 * under the caller's settings all the same (an invalidation taken in
	 * on the way) is prepared anew on its next use.
	 */
	source = linitial(SPI_plan_get_plan_sources(plan->plan));
	ready = plan_ready(source);
	generation = source->generation;
	if (!ready)
	{
		nestlevel = NewGUCNestLevel();
		(void) set_config_option("enable_seqscan", seqscan_allowed ? "on" : "off",
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
								 true, 0, false);
	}
	/* waits for another transaction are bounded; one too long, reported */
	held_bound_begin(&bound);
	PG_TRY();
	{
		if (snapshot != NULL)
			rc = SPI_execute_snapshot(plan->plan, args, nulls, snapshot(),
									  InvalidSnapshot, true, false, 0);
		else
			rc = SPI_execute_plan(plan->plan, args, nulls, false, 0);
	}
	PG_CATCH();
	{
		held_bound_end(&bound);
		report_locked(plan, relid, args, &bound, context);
		PG_RE_THROW();
	}
	PG_END_TRY();
	held_bound_end(&bound);
	if (rc > 0 && SPI_processed > 0 && plan->holds != HELD_NOTHING)
		held_note(plan->holds, relid, DatumGetTextPP(args[0]));
	if (rc < 0)
		elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
	if (!ready)
		AtEOXact_GUC(true, nestlevel);
	else if (source->generation != generation)
	{
		SPI_freeplan(plan->plan);
		plan->plan = NULL;
	}
	if (SPI_processed == 0 && SPI_tuptable != NULL)
	{
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
	}
	return SPI_processed;
}

/*
 * Run a kept plan on installation "relid", preparing it on first use (and
 * checking the installation's version first); "nulls" is NULL or SPI's
 * ' '/'n' string.  Returns the rows processed; any rows are in
 * SPI_tuptable, for the caller to free.  With none, SPI_tuptable is freed
 * here, so that a call naming many buckets keeps no memory per bucket.
 */
uint64
plan_run(KeptPlan *plan, Oid relid, Datum *args, const char *nulls)
{
	return run(plan, relid, args, nulls, NULL);
}

/*
 * plan_run() of a read-only statement on the newest committed state (and
 * this transaction's own changes), whatever the transaction's snapshot.
 */
uint64
plan_run_latest(KeptPlan *plan, Oid relid, Datum *args, const char *nulls)
{
	return run(plan, relid, args, nulls, GetLatestSnapshot);
}

/*
 * The snapshot of the statement running, as it started: without its own
 * changes, which carry its command id.  (The active one always exists
 * while a statement runs.)
 */
static Snapshot
statement_snapshot(void)
{
	if (!ActiveSnapshotSet())
		elog(ERROR, "no statement's snapshot to read tb_limits as it was");
	return GetActiveSnapshot();
}

/*
 * plan_run() of a read-only statement as the statement running saw the
 * tables before its own changes (in its AFTER trigger, or a function it
 * calls): what it changed is compared with it.
 */
uint64
plan_run_before(KeptPlan *plan, Oid relid, Datum *args, const char *nulls)
{
	return run(plan, relid, args, nulls, statement_snapshot);
}
