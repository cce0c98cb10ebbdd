/*-------------------------------------------------------------------------
 *
 * spi_session.h
 *	  The table work's SPI session, as the extension's owner, and plans
 *	  prepared once.
 *
 * src/spi_session.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_SPI_SESSION_H
#define TOKENBUCKET_SPI_SESSION_H

#include "common.h"
#include "executor/spi.h"
#include "held.h"

/* What spi_begin() changed, for spi_end() to restore. */
typedef struct SpiSession
{
	Oid			userid;
	int			sec_context;
	int			nestlevel;
} SpiSession;

extern SpiSession spi_begin(Installation *inst, bool writes);
extern void spi_allow_seqscan(void);
extern void spi_end(SpiSession *session);

/*
 * A statement on the extension's tables, prepared once per backend and
 * installation: %1$s in "sql" is the installation's schema, quoted.  A
 * statement that locks the row of the bucket or limit its $1 names says
 * so in "holds": the rows it processes are held until the transaction
 * ends (held.c).
 */
typedef struct KeptPlan
{
	const char *sql;
	int			nargs;
	Oid			argtypes[10];
	HeldKind	holds;			/* the row of the bucket or limit $1 names, locked */
	SPIPlanPtr	plan;			/* NULL until prepared */
	Oid			relid;			/* the installation it was prepared for */
} KeptPlan;

extern uint64 plan_run(KeptPlan *plan, Oid relid, Datum *args, const char *nulls);
extern uint64 plan_run_latest(KeptPlan *plan, Oid relid, Datum *args,
							  const char *nulls);
extern uint64 plan_run_before(KeptPlan *plan, Oid relid, Datum *args,
							  const char *nulls);
extern bool version_checked(Oid relid);

#endif							/* TOKENBUCKET_SPI_SESSION_H */
