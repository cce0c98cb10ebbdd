/*-------------------------------------------------------------------------
 *
 * report.h
 *	  The rows tb_try, tb_peek and tb_try_all answer with.
 *
 * src/report.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_REPORT_H
#define TOKENBUCKET_REPORT_H

#include "fmgr.h"
#include "store.h"

/* Columns of report_values(): tb_try's and tb_peek's first, tb_try_all's after name. */
#define REPORT_COLUMNS 6

extern void report_values(const Request *request, bool granted, TimestampTz now,
						  Datum *values);
extern Datum report_datum(FunctionCallInfo fcinfo, const Request *requests,
						  int nrequests, bool granted, TimestampTz now);

#endif							/* TOKENBUCKET_REPORT_H */
