/*-------------------------------------------------------------------------
 *
 * limit_config.h
 *	  A limit's configuration in tb_limits: its row, or its template's; the
 *	  rows tb_create_limit, tb_alter_limit, tb_ensure_limit and tb_drop
 *	  write; this backend's cache of memory limits' configuration.
 *
 * src/limit_config.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_LIMIT_CONFIG_H
#define TOKENBUCKET_LIMIT_CONFIG_H

#include "spi_session.h"
#include "utils/array.h"

/*
 * The row that makes the limit named by SQL expression "name" (a column
 * of an outer query, or a parameter), in a statement of a kept plan: its
 * own, or its longest template's (none: no row).
 */
#define LIMIT_ROW_OF(name) \
	"(SELECT r.max_in_flight, r.memory, r.template_len, r.template FROM" \
	" ((SELECT max_in_flight, memory, 0 AS template_len, NULL::text AS template" \
	"   FROM %1$s.tb_limits WHERE name OPERATOR(pg_catalog.=) " name ")" \
	"  UNION ALL" \
	"  (SELECT max_in_flight, memory, pg_catalog.octet_length(name), name FROM %1$s.tb_limits" \
	"   WHERE name OPERATOR(pg_catalog.~~) '%%*'" \
	"   AND pg_catalog.starts_with(" name ", pg_catalog.left(name, -1))" \
	"   ORDER BY pg_catalog.octet_length(name) DESC LIMIT 1)" \
	"  LIMIT 1) AS r)"

/* The row that makes limit $1. */
#define LIMIT_ROW_OF_1 LIMIT_ROW_OF("$1")

/* The max_in_flight of table limit $1 (NULL: none, or a memory limit). */
#define LIMIT_OF_1 \
	"(SELECT m.max_in_flight FROM " LIMIT_ROW_OF_1 " AS m WHERE NOT m.memory)"

/* A name's limit. */
typedef struct LimitConfig
{
	int32		max_in_flight;
	bool		memory;			/* its leases are kept in shared memory */
	int			template_len;	/* its template's name's length (0: none) */
	int32		made;			/* table slots made, up to max_in_flight */
	bool		alone;			/* its memory template makes every name
								 * after its prefix */
} LimitConfig;

extern bool limit_config_find(Oid relid, text *name, LimitConfig *config);
extern int	limit_config_template_len(Oid relid, text *name);
extern bool limit_config_insert(Oid relid, text *name, int32 max_in_flight,
								bool memory);
extern bool limit_config_set(Oid relid, text *name, int32 max_in_flight);
extern bool limit_config_row(Oid relid, text *name, int32 *max_in_flight,
							 bool *memory);
extern bool limit_config_delete(Oid relid, text *name, bool *memory);

/* The row that makes a name (limit_config_makers()). */
typedef struct LimitMaker
{
	bool		found;			/* false: no row makes it */
	bool		memory;			/* the row's kind */
	text	   *row;			/* the row's name: the name's own, or its
								 * template's */
} LimitMaker;

extern void limit_config_makers(Oid relid, ArrayType *names, bool before,
								LimitMaker *makers);
extern void limit_report_missing(text *name);
extern int32 limit_reserve_slots(int32 max_in_flight, double reserve);

/* A generation for limit_cache_find(): whatever was read, current or not. */
#define LIMIT_CACHE_ANY PG_UINT64_MAX

extern const LimitConfig *limit_cache_find(Oid relid, text *name,
										   uint64 generation);
extern void limit_cache_keep(Oid relid, text *name, uint64 generation,
							 const LimitConfig *config);

#endif							/* TOKENBUCKET_LIMIT_CONFIG_H */
