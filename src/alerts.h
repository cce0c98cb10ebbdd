/*-------------------------------------------------------------------------
 *
 * alerts.h
 *	  Alerts at a share of a quota's budget: after a charge, the event of
 *	  each threshold the quota has reached in its period, written once
 *	  (tb_alert_events) in the charge's own transaction, and sent (NOTIFY
 *	  tb_alerts) as it commits.
 *
 * src/alerts.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TOKENBUCKET_ALERTS_H
#define TOKENBUCKET_ALERTS_H

#include "common.h"
#include "store.h"

extern void alerts_init(void);
extern void alerts_after_grant(Installation *inst, const Request *requests,
							   int nrequests, TimestampTz now);
extern void alerts_after_charge(Installation *inst, text *name,
								int template_len, const Bucket *after,
								TimestampTz now);

/* xact.c: the ends of transactions */
extern const char *alerts_unpreparable(void);
extern void alerts_pre_commit(void);
extern void alerts_xact_end(bool commit);
extern void alerts_subxact_end(SubTransactionId mySubid,
							   SubTransactionId parentSubid, bool commit);

#endif							/* TOKENBUCKET_ALERTS_H */
