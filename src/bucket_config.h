/*-------------------------------------------------------------------------
 *
 * bucket_config.h
 *	  A bucket's configuration in tb_buckets: its row, or the template that
 *	  makes it.
 *
 * src/bucket_config.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_BUCKET_CONFIG_H
#define TOKENBUCKET_BUCKET_CONFIG_H

#include "bucket.h"
#include "commands/trigger.h"
#include "spi_session.h"

extern void plan_read_bucket(Bucket *bucket);

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
								 * template makes (a memory quota's no
								 * fuller than the template's row says) */
	int			template_len;	/* the length of its template's name, 0: none */
	bool		mine;			/* written by this transaction, uncommitted */
} BucketConfig;

extern ConfigSource bucket_config_find(Oid relid, text *name, TimestampTz now,
									   bool latest, uint64 generation,
									   BucketConfig *config);
extern bool bucket_config_templates_kept(Oid relid, uint64 generation);
extern bool bucket_config_memory_template(Oid relid, text *name, TimestampTz now,
										  uint64 generation, BucketConfig *config);
extern bool bucket_config_insert(Oid relid, text *name, double capacity,
								 double refill_rate, bool memory, TimestampTz now);
extern bool bucket_config_insert_state(Oid relid, text *name,
									   const Bucket *state, bool memory);
extern void bucket_config_row_settings(HeapTuple row, TupleDesc desc,
									   Bucket *settings);
extern void bucket_config_no_fuller(Bucket *bucket, const Bucket *row,
									TimestampTz now);
extern bool bucket_config_set_memory(Oid relid, text *name, double capacity,
									 double refill_rate, TimestampTz now);
extern void bucket_config_set_period(Oid relid, text *name,
									 const BucketPeriod *period, TimestampTz now);
extern bool bucket_config_delete_memory(Oid relid, text *name);
extern HeapTuple bucket_config_check_row(TriggerData *trigdata);

/* tb_check_bucket() (tokenbucket.c): the check of a row's columns */
extern Datum tb_check_bucket(PG_FUNCTION_ARGS);

#endif							/* TOKENBUCKET_BUCKET_CONFIG_H */
