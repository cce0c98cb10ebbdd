/*-------------------------------------------------------------------------
 *
 * catalog.h
 *	  tb_buckets through SPI: the session the table work runs in, plans
 *	  prepared once, and the configuration of a name (its row, or the
 *	  template that makes it).
 *
 * src/catalog.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_CATALOG_H
#define TOKENBUCKET_CATALOG_H

#include "bucket.h"
#include "executor/spi.h"
#include "fmgr.h"

/* What spi_begin() changed, for spi_end() to restore. */
typedef struct SpiSession
{
	Oid			userid;
	int			sec_context;
	int			nestlevel;
} SpiSession;

extern SpiSession spi_begin(FunctionCallInfo fcinfo, bool writes);
extern void spi_allow_seqscan(void);
extern void spi_end(SpiSession *session);

/*
 * A statement on tb_buckets, prepared once per backend and installation:
 * %1$s in "sql" is the installation's schema, quoted.
 */
typedef struct KeptPlan
{
	const char *sql;
	int			nargs;
	Oid			argtypes[10];
	SPIPlanPtr	plan;			/* NULL until prepared */
	Oid			relid;			/* the installation it was prepared for */
} KeptPlan;

extern uint64 plan_run(KeptPlan *plan, Oid relid, Datum *args, const char *nulls);
extern uint64 plan_run_latest(KeptPlan *plan, Oid relid, Datum *args,
							  const char *nulls);
extern void plan_read_bucket(Bucket *bucket);
extern bool catalog_checked(Oid relid);

/* Where a name's configuration comes from. */
typedef enum ConfigSource
{
	CONFIG_NONE,				/* no such bucket */
	CONFIG_ROW,					/* its own row */
	CONFIG_TEMPLATE				/* the template it is (or would be) made from */
} ConfigSource;

/* A name's configuration. */
typedef struct BucketConfig
{
	ConfigSource source;
	bool		memory;			/* its tokens live in the memory store */
	Bucket		bucket;			/* its row's state, or the full bucket its
								 * template makes */
	int			template_len;	/* the length of its template's name, 0: none */
	bool		mine;			/* written by this transaction, uncommitted */
} BucketConfig;

extern ConfigSource catalog_find(Oid relid, text *name, TimestampTz now,
								 bool latest, uint64 generation,
								 BucketConfig *config);
extern bool catalog_memory_template(Oid relid, text *name, TimestampTz now,
									uint64 generation, BucketConfig *config);
extern bool catalog_insert(Oid relid, text *name, double capacity,
						   double refill_rate, bool memory, TimestampTz now);
extern bool catalog_set_memory_settings(Oid relid, text *name, double capacity,
										double refill_rate, TimestampTz now);
extern bool catalog_delete_memory(Oid relid, text *name);

#endif							/* TOKENBUCKET_CATALOG_H */
