/*-------------------------------------------------------------------------
 *
 * alerts.c
 *	  Alerts at a share of a quota's budget: the DBA's thresholds
 *	  (tb_alerts, tb_set_alerts), and the event a charge that reaches one
 *	  writes into tb_alert_events, once per quota, period and threshold,
 *	  in the charge's own transaction, and sends with NOTIFY tb_alerts as
 *	  that transaction commits.
 *
 * A threshold is a level: t is reached when a quota holds (1 - t) x its
 * budget (refill_rate, what each period's start adds) or less, however it
 * got there.  So after every charge the router hands the quota's state
 * here (alerts_after_grant, alerts_after_charge), and each threshold
 * reached whose event this backend does not know to exist is written:
 * INSERT ... ON CONFLICT DO NOTHING on the key (bucket, period_start,
 * threshold), which makes it exactly once under any concurrency (a
 * conflicting insert in progress is waited for, and taken over if it rolls
 * back), and a rolled-back charge leaves nothing, NOTIFY included.  Not
 * the crossing charge alone: a memory quota's charge takes effect at once,
 * so the charge that crossed may roll back after others have charged
 * below the level; the next charge there writes the event.  A charge
 * waiting for another transaction's event is bounded as a wait for a
 * bucket's row is (held.c), and that transaction noted as holding it.
 *
 * The NOTIFY is queued only as the transaction commits (alerts_pre_commit),
 * not with the event: PostgreSQL refuses to PREPARE a transaction that
 * queued one, and a charge cannot know whether its transaction will be
 * prepared.  A prepared transaction's events are sent by no NOTIFY: they
 * are in tb_alert_events once COMMIT PREPARED commits them, where a
 * consumer that reads every id above the last it handled (at each
 * notification and every so often, as tokenbucket.alerts does) finds them.
 *
 * Two per-backend caches keep a quota without alerts at today's cost:
 *   - the thresholds of the installation, read again when the shared
 *     generation moves (tb_alerts' statement trigger, at commit) or, without
 *     the library preloaded, once per transaction;
 *   - the events known to exist (a conflict found, or written by this
 *     transaction), by the subtransaction that learnt them: forgotten when
 *     it aborts, since the row may have been its own.
 *
 * src/alerts.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "alerts.h"
#include "bucket_config.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/trigger.h"
#include "common.h"
#include "common/hashfn.h"
#include "port/atomics.h"
#include "shmem.h"
#include "spi_session.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

/* A threshold is reached within this share of the budget (float8's rounding). */
#define ALERT_SLACK BUCKET_RESERVE_SLACK

/* Events known to exist, kept by a hash of their key: a slot lost costs an INSERT. */
#define KNOWN_SLOTS 256

/* The shared generation of tb_alerts: moves when a change commits. */
typedef struct AlertsShared
{
	pg_atomic_uint64 generation;
} AlertsShared;

static AlertsShared *alerts_shared = NULL;

/* A quota's thresholds, or a template's for its keys ("bucket" ends in '*'). */
typedef struct AlertRule
{
	char	   *bucket;
	int			len;
	int			nthresholds;
	double	   *thresholds;		/* ascending */
} AlertRule;

/* This backend's copy of tb_alerts, sorted by bucket, bytewise. */
static struct
{
	bool		valid;
	Oid			relid;			/* the installation's tb_buckets */
	uint64		generation;		/* alerts_shared's when it was read */
	int			nrules;
	bool		templates;		/* a rule is a template's */
	AlertRule  *rules;
	MemoryContext context;
}			rules_cache;

/* An event known to exist. */
typedef struct KnownEvent
{
	char	   *name;			/* NULL: an empty slot */
	int			len;
	Oid			relid;
	TimestampTz period_start;
	double		threshold;
	SubTransactionId subid;		/* the level that learnt it; 0: committed */
} KnownEvent;

static KnownEvent known[KNOWN_SLOTS];
static int	known_uncommitted = 0;	/* slots with a subid */

/* this transaction wrote tb_alerts */
static bool changed_here = false;

/* An event this transaction wrote, to send as it commits. */
typedef struct PendingNotify
{
	char	   *payload;		/* the event as JSON */
	SubTransactionId subid;		/* the level that wrote it */
} PendingNotify;

/* the events to send, in TopTransactionContext (NIL: none) */
static List *pending = NIL;

/* the thresholds, each bucket's in order */
static KeptPlan rules_plan = {
	.sql = "SELECT a.bucket, pg_catalog.array_agg(a.threshold ORDER BY a.threshold)"
	" FROM %1$s.tb_alerts AS a GROUP BY a.bucket",
	.nargs = 0
};

/*
 * an event unless it is there, and the payload of its NOTIFY; a wait for
 * another transaction's event of the key is bounded and reported as one
 * for the quota's row
 */
static KeptPlan event_plan = {
	.sql = "INSERT INTO %1$s.tb_alert_events AS e"
	" (bucket, threshold, period_start, period_end, budget, remaining)"
	" VALUES ($1, $2, $3, $4, $5, $6)"
	" ON CONFLICT (bucket, period_start, threshold) DO NOTHING"
	" RETURNING CAST(pg_catalog.json_build_object("
	"'id', e.id, 'bucket', e.bucket, 'threshold', e.threshold,"
	" 'period_start', e.period_start, 'period_end', e.period_end,"
	" 'remaining', e.remaining) AS pg_catalog.text)",
	.nargs = 6,
	.argtypes = {TEXTOID, FLOAT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, FLOAT8OID, FLOAT8OID},
	.holds = HELD_BUCKET
};

/* tb_set_alerts(): a bucket's thresholds replaced */
static KeptPlan delete_plan = {
	.sql = "DELETE FROM %1$s.tb_alerts AS a WHERE a.bucket OPERATOR(pg_catalog.=) $1",
	.nargs = 1, .argtypes = {TEXTOID}
};
static KeptPlan insert_plan = {
	.sql = "INSERT INTO %1$s.tb_alerts (bucket, threshold)"
	" SELECT DISTINCT $1, t.t FROM pg_catalog.unnest($2) AS t(t)",
	.nargs = 2, .argtypes = {TEXTOID, FLOAT8ARRAYOID}
};

/* SharedArea size. */
static Size
alerts_shmem_size(void)
{
	return sizeof(AlertsShared);
}

/* SharedArea attach: the generation, from 1. */
static void
alerts_attach(LWLockPadded *locks)
{
	bool		found;

	alerts_shared = shmem_struct("tokenbucket alerts", sizeof(AlertsShared), &found);
	if (!found)
		pg_atomic_init_u64(&alerts_shared->generation, 1);
}

static const SharedArea alerts_area = {
	.name = "tokenbucket alerts",
	.size = alerts_shmem_size,
	.nlocks = NULL,
	.attach = alerts_attach,
};

/* Library load: the shared generation, when preloading. */
void
alerts_init(void)
{
	shmem_register(&alerts_area);
}

/* What a charge's alerts need: its installation, and an SPI session once opened. */
typedef struct AlertCall
{
	Installation *inst;
	Oid			relid;
	bool		in_session;
	SpiSession	session;
} AlertCall;

/* Open the call's SPI session, if it has none yet. */
static void
call_session(AlertCall *call)
{
	if (!call->in_session)
		call->session = spi_begin(call->inst, true);
	call->in_session = true;
}

/* qsort() and bsearch() order of rules: bytewise, shorter first. */
static int
rule_cmp(const void *a, const void *b)
{
	const AlertRule *x = a;
	const AlertRule *y = b;
	int			c = memcmp(x->bucket, y->bucket, Min(x->len, y->len));

	return c != 0 ? c : x->len - y->len;
}

/* Read tb_alerts into the cache, as committed now, at "generation". */
static void
rules_load(AlertCall *call, uint64 generation)
{
	MemoryContext old;

	if (rules_cache.context == NULL)
		rules_cache.context = AllocSetContextCreate(TopMemoryContext, "tokenbucket alerts",
													ALLOCSET_SMALL_SIZES);
	rules_cache.valid = false;
	MemoryContextReset(rules_cache.context);
	call_session(call);
	spi_allow_seqscan();		/* it reads the whole table */
	(void) plan_run_latest(&rules_plan, call->relid, NULL, NULL);
	old = MemoryContextSwitchTo(rules_cache.context);
	rules_cache.nrules = SPI_processed;
	rules_cache.templates = false;
	rules_cache.rules = palloc0(sizeof(AlertRule) * Max(SPI_processed, 1));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		AlertRule  *rule = &rules_cache.rules[i];
		bool		isnull;
		text	   *bucket = DatumGetTextPP(SPI_getbinval(SPI_tuptable->vals[i],
														  SPI_tuptable->tupdesc, 1, &isnull));
		ArrayType  *array = DatumGetArrayTypeP(SPI_getbinval(SPI_tuptable->vals[i],
															 SPI_tuptable->tupdesc, 2, &isnull));
		Datum	   *values;
		int			n;

		rule->len = VARSIZE_ANY_EXHDR(bucket);
		rule->bucket = pnstrdup(VARDATA_ANY(bucket), rule->len);
		rules_cache.templates |= rule->len > 0 && rule->bucket[rule->len - 1] == '*';
		deconstruct_array(array, FLOAT8OID, sizeof(float8), FLOAT8PASSBYVAL,
						  TYPALIGN_DOUBLE, &values, NULL, &n);
		rule->nthresholds = n;
		rule->thresholds = palloc(sizeof(double) * Max(n, 1));
		for (int j = 0; j < n; j++)
			rule->thresholds[j] = DatumGetFloat8(values[j]);
	}
	qsort(rules_cache.rules, rules_cache.nrules, sizeof(AlertRule), rule_cmp);
	MemoryContextSwitchTo(old);
	if (SPI_tuptable != NULL)
		SPI_freetuptable(SPI_tuptable);
	rules_cache.relid = call->relid;
	rules_cache.generation = generation;
	rules_cache.valid = true;
}

/* The cache, read again unless it holds the installation's thresholds as they are. */
static void
rules_current(AlertCall *call)
{
	uint64		generation = alerts_shared ?
		pg_atomic_read_u64(&alerts_shared->generation) : 0;

	if (!rules_cache.valid || rules_cache.relid != call->relid ||
		rules_cache.generation != generation)
		rules_load(call, generation);
}

/* The rule of bucket "name" ("len" bytes), or NULL. */
static const AlertRule *
rule_find(const char *name, int len)
{
	AlertRule	key = {.bucket = (char *) name, .len = len};

	return bsearch(&key, rules_cache.rules, rules_cache.nrules, sizeof(AlertRule),
				   rule_cmp);
}

/*
 * The rule of the quota "name": its own, or the one of the template that
 * makes it ("template_len": the length of its name, 0: none, -1: not
 * known, then looked up).
 */
static const AlertRule *
rule_of(AlertCall *call, text *name, int template_len, TimestampTz now)
{
	const AlertRule *rule = rule_find(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
	char	   *template;

	if (rule != NULL || !rules_cache.templates || template_len == 0)
		return rule;
	if (template_len < 0)
	{
		BucketConfig config;

		call_session(call);
		if (bucket_config_find(call->relid, name, now, true, memory_store.generation(),
							   &config) == CONFIG_NONE)
			return NULL;
		template_len = config.template_len;
		if (template_len <= 0)
			return NULL;
	}
	template = palloc(template_len);
	memcpy(template, VARDATA_ANY(name), template_len - 1);
	template[template_len - 1] = '*';
	rule = rule_find(template, template_len);
	pfree(template);
	return rule;
}

/* The slot of an event's key. */
static KnownEvent *
known_slot(Oid relid, const char *name, int len, TimestampTz period_start,
		   double threshold)
{
	uint32		hash = hash_bytes((const unsigned char *) name, len);

	hash = hash_combine(hash, hash_bytes((const unsigned char *) &period_start,
										 sizeof(period_start)));
	hash = hash_combine(hash, hash_bytes((const unsigned char *) &threshold,
										 sizeof(threshold)));
	return &known[hash_combine(hash, relid) % KNOWN_SLOTS];
}

/* Whether the event of this key is known to exist. */
static bool
known_has(Oid relid, const char *name, int len, TimestampTz period_start,
		  double threshold)
{
	KnownEvent *slot = known_slot(relid, name, len, period_start, threshold);

	return slot->name != NULL && slot->relid == relid && slot->len == len &&
		slot->period_start == period_start && slot->threshold == threshold &&
		memcmp(slot->name, name, len) == 0;
}

/* Empty a slot. */
static void
known_clear(KnownEvent *slot)
{
	if (slot->subid != 0)
		known_uncommitted--;
	if (slot->name != NULL)
		pfree(slot->name);
	slot->name = NULL;
	slot->subid = 0;
}

/* The event of this key exists, as far as this subtransaction knows. */
static void
known_add(Oid relid, const char *name, int len, TimestampTz period_start,
		  double threshold)
{
	KnownEvent *slot = known_slot(relid, name, len, period_start, threshold);

	known_clear(slot);
	slot->name = MemoryContextAlloc(TopMemoryContext, Max(len, 1));
	memcpy(slot->name, name, len);
	slot->len = len;
	slot->relid = relid;
	slot->period_start = period_start;
	slot->threshold = threshold;
	slot->subid = GetCurrentSubTransactionId();
	known_uncommitted++;
}

/*
 * Write the event of "threshold" for quota "name" in the period
 * [start, end), unless it is there (then it is known from now on); one
 * written is sent as the transaction commits.
 */
static void
write_event(AlertCall *call, text *name, double threshold, TimestampTz start,
			TimestampTz end, double budget, double remaining)
{
	Datum		args[6];

	args[0] = PointerGetDatum(name);
	args[1] = Float8GetDatum(threshold);
	args[2] = TimestampTzGetDatum(start);
	args[3] = TimestampTzGetDatum(end);
	args[4] = Float8GetDatum(budget);
	args[5] = Float8GetDatum(remaining);
	call_session(call);
	if (plan_run(&event_plan, call->relid, args, NULL) > 0)
	{
		MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
		PendingNotify *notify = palloc(sizeof(PendingNotify));

		notify->payload = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		notify->subid = GetCurrentSubTransactionId();
		pending = lappend(pending, notify);
		MemoryContextSwitchTo(old);
		SPI_freetuptable(SPI_tuptable);
	}
	known_add(call->relid, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name), start,
			  threshold);
}

/* The alerts of one quota in state "after", charged at "now". */
static void
check_quota(AlertCall *call, text *name, int template_len, const Bucket *after,
			TimestampTz now)
{
	const AlertRule *rule;
	TimestampTz at = Max(now, after->updated_at);
	double		budget = after->refill_rate;
	double		remaining;
	double		spent;
	int64		n;
	TimestampTz start;
	TimestampTz end;

	rules_current(call);
	if (rules_cache.nrules == 0)
		return;
	rule = rule_of(call, name, template_len, now);
	if (rule == NULL)
		return;
	remaining = bucket_tokens_at(after, at);
	spent = budget - remaining + budget * ALERT_SLACK;
	/* below the lowest, or nowhere to write (the next charge will) */
	if (spent < rule->thresholds[0] * budget || XactReadOnly)
		return;
	n = period_index(after->period, at);
	start = period_start(after->period, n);
	end = period_start(after->period, n + 1);
	for (int i = 0; i < rule->nthresholds && spent >= rule->thresholds[i] * budget; i++)
		if (!known_has(call->relid, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name), start,
					   rule->thresholds[i]))
			write_event(call, name, rule->thresholds[i], start, end, budget, remaining);
}

/*
 * After a grant: the alerts of each quota the request charged (a cost
 * above 0), from the state the store left in request->bucket.  A bucket
 * that is no quota costs a test.
 */
void
alerts_after_grant(Installation *inst, const Request *requests, int nrequests,
				   TimestampTz now)
{
	AlertCall	call = {.inst = inst, .in_session = false};

	for (int i = 0; i < nrequests; i++)
		if (BUCKET_PERIODIC(&requests[i].bucket) && requests[i].cost > 0)
		{
			if (call.relid == InvalidOid)
				call.relid = installation_table(inst);
			check_quota(&call, requests[i].name, requests[i].template_len,
						&requests[i].bucket, now);
		}
	if (call.in_session)
		spi_end(&call.session);
}

/* After any other charge (tb_settle's): alerts_after_grant() of one quota. */
void
alerts_after_charge(Installation *inst, text *name, int template_len,
					const Bucket *after, TimestampTz now)
{
	Request		request = {.name = name, .cost = 1, .template_len = template_len,
	.bucket = *after};

	alerts_after_grant(inst, &request, 1, now);
}

/* Fail unless each threshold is a share above 0 and at most 1. */
static void
check_thresholds(ArrayType *thresholds)
{
	Datum	   *values;
	bool	   *nulls;
	int			n;

	deconstruct_array(thresholds, FLOAT8OID, sizeof(float8), FLOAT8PASSBYVAL,
					  TYPALIGN_DOUBLE, &values, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		double		t = nulls[i] ? 0 : DatumGetFloat8(values[i]);

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("an alert threshold must not be NULL")));
		if (!(t > 0 && t <= 1))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("alert threshold must be above 0 and at most 1, not %g", t),
					 errhint("A threshold is the share of a period's budget used up: 0.8 for 80%%.")));
	}
}

/* Fail unless "name" is a quota or a quota template, named in tb_buckets. */
static void
check_quota_name(Oid relid, text *name)
{
	BucketConfig config;
	char	   *cname = text_to_cstring(name);

	if (bucket_config_find(relid, name, tb_clock_now(), true, 0, &config) == CONFIG_NONE)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("token bucket \"%s\" does not exist", cname),
				 errhint("Make the quota with tb_create_quota() first.")));
	if (config.source == CONFIG_TEMPLATE || config.template_len > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("token bucket \"%s\" is made from a template", cname),
				 errdetail("Every key of a template has the template's thresholds."),
				 errhint("Set the alerts of the template.")));
	if (!BUCKET_PERIODIC(&config.bucket))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("token bucket \"%s\" is not a quota", cname),
				 errdetail("A threshold is a share of a period's budget; this bucket refills continuously."),
				 errhint("Make a quota with tb_create_quota() to have alerts.")));
}

PG_FUNCTION_INFO_V1(tb_set_alerts);

/*
 * tb_set_alerts(bucket, thresholds): the alert thresholds of a quota or
 * quota template, replacing its others (empty or NULL: none).
 */
Datum
tb_set_alerts(PG_FUNCTION_ARGS)
{
	static const ArgsSpec args = {"tb_set_alerts", ARG_MAY_BE_NULL(1),
	{"bucket", "thresholds"}};
	Installation inst = installation_of(fcinfo);
	text	   *name;
	SpiSession	session;
	Datum		values[2];

	check_not_null(fcinfo, &args);
	name = PG_GETARG_TEXT_PP(0);
	if (!PG_ARGISNULL(1))
		check_thresholds(PG_GETARG_ARRAYTYPE_P(1));
	session = spi_begin(&inst, true);
	check_quota_name(installation_table(&inst), name);
	values[0] = PointerGetDatum(name);
	(void) plan_run(&delete_plan, installation_table(&inst), values, NULL);
	if (!PG_ARGISNULL(1))
	{
		values[1] = PG_GETARG_DATUM(1);
		(void) plan_run(&insert_plan, installation_table(&inst), values, NULL);
	}
	spi_end(&session);
	PG_RETURN_VOID();
}

PG_FUNCTION_INFO_V1(tb_alerts_changed);

/*
 * tb_alerts_changed(): the statement trigger of tb_alerts.  Every backend
 * reads the thresholds again once the transaction commits; this one reads
 * them from the table until it ends.
 */
Datum
tb_alerts_changed(PG_FUNCTION_ARGS)
{
	Installation inst = installation_of(fcinfo);
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event) ||
		RelationGetNamespace(trigdata->tg_relation) !=
		get_rel_namespace(installation_table(&inst)) ||
		strcmp(RelationGetRelationName(trigdata->tg_relation), "tb_alerts") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("tb_alerts_changed() is only the trigger of tokenbucket's table tb_alerts"),
				 errdetail("It tells every session that the thresholds changed, and fires for nothing else.")));
	changed_here = true;
	rules_cache.valid = false;
	return PointerGetDatum(NULL);
}

/* xact.c: a transaction that wrote tb_alerts cannot be prepared. */
const char *
alerts_unpreparable(void)
{
	return changed_here ? "alert thresholds" : NULL;
}

/*
 * xact.c: a transaction about to commit (not to be prepared) sends the
 * events it wrote.
 */
void
alerts_pre_commit(void)
{
	ListCell   *cell;

	foreach(cell, pending)
		Async_Notify("tb_alerts", ((PendingNotify *) lfirst(cell))->payload);
	pending = NIL;
}

/*
 * xact.c: the transaction's end.  Committed: the events it learnt are
 * committed ones, and a change of thresholds reaches every backend.
 * Aborted (or prepared, which may yet roll back): they are forgotten.
 * Whatever is still to send goes with TopTransactionContext.
 */
void
alerts_xact_end(bool commit)
{
	pending = NIL;
	for (int i = 0; i < KNOWN_SLOTS && known_uncommitted > 0; i++)
		if (known[i].subid != 0)
		{
			if (commit)
			{
				known[i].subid = 0;
				known_uncommitted--;
			}
			else
				known_clear(&known[i]);
		}
	if (changed_here && commit && alerts_shared != NULL)
		pg_atomic_fetch_add_u64(&alerts_shared->generation, 1);
	/* without a shared generation, read once per transaction */
	if (changed_here || alerts_shared == NULL)
		rules_cache.valid = false;
	changed_here = false;
}

/*
 * xact.c: a subtransaction's end: what it learnt becomes its parent's
 * (commit) or is forgotten (abort), with thresholds it changed.
 */
void
alerts_subxact_end(SubTransactionId mySubid, SubTransactionId parentSubid,
				   bool commit)
{
	ListCell   *cell;

	foreach(cell, pending)
	{
		PendingNotify *notify = lfirst(cell);

		if (notify->subid < mySubid)
			continue;
		if (commit)
			notify->subid = parentSubid;
		else
			pending = foreach_delete_current(pending, cell);
	}
	for (int i = 0; i < KNOWN_SLOTS && known_uncommitted > 0; i++)
		if (known[i].subid >= mySubid)
		{
			if (commit)
				known[i].subid = parentSubid;
			else
				known_clear(&known[i]);
		}
	if (!commit && changed_here)
		rules_cache.valid = false;
}
