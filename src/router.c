/*-------------------------------------------------------------------------
 *
 * router.c
 *	  One place that finds where each bucket lives and hands every request
 *	  to that store, and counts what it did.
 *
 * A bucket's configuration (bucket_config.c) says which store holds its
 * state: the table store (table_store.c) or the memory store
 * (memory_store.c).  The router asks the stores in the order that costs
 * least: a memory bucket with an entry answers without SPI; a table
 * bucket's grant is one UPDATE; only a bucket neither store holds yet (a
 * named memory bucket without an entry, or a name a template makes) costs
 * a read of its configuration (for a memory template's new key, of its
 * own row alone: the template comes from the backend's copy,
 * bucket_config.c), after which the router gives it its place in its
 * store and asks again.  Requests for several buckets are all or nothing
 * across both stores (a subtransaction, rolled back if one denies).
 *
 * Changes to configuration reach the stores through the trigger on
 * tb_buckets (tb_buckets_changed below), at commit.  Every decision is
 * counted (stats.c) once its store has answered.
 *
 * src/router.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "alerts.h"
#include "bucket_config.h"
#include "commands/trigger.h"
#include "common.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "router.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

/* Every store, in the order the router asks them. */
static const StoreRoutine *const stores[] = {&memory_store, &table_store};
#define NUM_STORES ((int) lengthof(stores))

/*
 * An installation's tb_buckets table (DROP EXTENSION, DROP SCHEMA) or a
 * database ("relid" InvalidOid) is being dropped: every store and the
 * counters forget what they keep of it, when the dropping transaction
 * commits.
 */
void
router_forget_installation(Oid dbid, Oid relid)
{
	for (int i = 0; i < NUM_STORES; i++)
		stores[i]->forget(dbid, relid);
	stats_forget(dbid, relid);
}

/* The store a configuration says holds the bucket. */
static const StoreRoutine *
store_of(const BucketConfig *config)
{
	return config->memory ? &memory_store : &table_store;
}

/* Initialize every store, the counters and the alerts at library load. */
void
router_init(void)
{
	stats_init();
	alerts_init();
	for (int i = 0; i < NUM_STORES; i++)
		if (stores[i]->init != NULL)
			stores[i]->init();
}

/*
 * The error for a bucket that does not exist.  The hint speaks to whoever
 * called: making buckets is the DBA's (tb_create is not PUBLIC).
 */
static void
report_missing(text *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("token bucket \"%s\" does not exist", text_to_cstring(name)),
			 errhint("A bucket, or a template such as 'prefix*' for per-key buckets, "
					 "is made with tb_create() by the database's administrator.")));
}

/*
 * Fail when a request's cost could never be granted by its bucket: above
 * its capacity, above what it holds beyond the request's reserve when full,
 * or too small for its arithmetic to account for.  The message names no
 * setting of the bucket: the caller may not be allowed to read them
 * (tb_status shows them to whoever may).
 */
static void
check_cost(const Request *request)
{
	if (request->cost > request->bucket.capacity)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cost %g exceeds the capacity of token bucket \"%s\"",
						request->cost, text_to_cstring(request->name)),
				 errdetail("The bucket can never hold that many tokens, so this request could never be granted."),
				 errhint("Split the request, or have the bucket's capacity raised with tb_alter().")));
	if (!bucket_fits(request->bucket.capacity, request->cost, request->reserve))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cost %s with reserve %s exceeds what token bucket \"%s\" can grant",
						float8out_internal(request->cost),
						float8out_internal(request->reserve),
						text_to_cstring(request->name)),
				 errdetail("Even full, the bucket never holds that many tokens beyond the reserve's share of its capacity, so this request could never be granted."),
				 errhint("Split the request, ask with a smaller reserve, or have the bucket's capacity raised with tb_alter().")));
	if (!bucket_cost_resolvable(request->bucket.capacity, request->cost))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cost %g is too small for token bucket \"%s\"",
						request->cost, text_to_cstring(request->name)),
				 errdetail("A bucket accounts for costs down to 1/4294967296 of its capacity; a smaller cost would be lost to rounding."),
				 errhint("Count in larger units, or use a bucket of smaller capacity.")));
}

/* Fail when a change leaves a deficit float8 cannot hold. */
static void
check_debt(text *name, const Bucket *bucket)
{
	if (!isfinite(bucket->deficit))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("debt of token bucket \"%s\" out of range", text_to_cstring(name)),
				 errdetail("Taking that many more tokens would put the bucket in a debt float8 cannot hold.")));
}

/* A store's answer to a take, as the caller's: a denial says why if need be. */
static bool
decided(const Request *request, StoreResult result)
{
	if (result == STORE_DENIED)
		check_cost(request);
	return result == STORE_GRANTED;
}

/*
 * If bucket "name" is a memory bucket, make sure it has an entry (made by
 * the absent rule from its row or its template) and return true; else
 * return false with its configuration in *config.  The configuration is
 * read as committed now, whatever the transaction's snapshot, and read
 * again if settings were committed between reading them and making the
 * entry: an entry never starts from settings older than the newest
 * committed, or from a template dropped since a snapshot was taken.  A
 * configuration this transaction wrote gives a provisional entry.
 */
static bool
ensure_memory(Oid relid, text *name, TimestampTz now, BucketConfig *config)
{
	for (;;)
	{
		/* read before the query takes its snapshot */
		uint64		seen = memory_store.generation();
		Bucket		state;

		CHECK_FOR_INTERRUPTS();

		if (bucket_config_find(relid, name, now, true, seen, config) == CONFIG_NONE ||
			!config->memory)
			return false;
		state = memory_store.absent(&config->bucket, now);
		if (memory_store.make(relid, name, &state, config->template_len, seen,
							  config->mine) != STORE_STALE)
			return true;
	}
}

/*
 * Give bucket "name" its place in the store that holds it, if it has none
 * yet: a memory bucket its entry, a bucket a table template makes its row,
 * full.  False when there is no such bucket.
 */
static bool
make_place(Oid relid, text *name, TimestampTz now)
{
	BucketConfig config;

	if (ensure_memory(relid, name, now, &config))
		return true;
	if (config.source == CONFIG_NONE)
		return false;
	if (config.source == CONFIG_TEMPLATE)
	{
		Bucket		state = table_store.absent(&config.bucket, now);

		(void) table_store.make(relid, name, &state, config.template_len, 0, false);
	}
	return true;
}

/*
 * Look at the request's bucket at "now" without locking or writing it: its
 * state, or the state it would start with in its store.  Fails if there is
 * no such bucket, or if the cost could never be granted.
 */
static void
peek_one(Oid relid, Request *request, TimestampTz now)
{
	BucketConfig config;

	if (!memory_store.peek(relid, request) && !table_store.peek(relid, request))
	{
		if (bucket_config_find(relid, request->name, now, false, 0, &config) == CONFIG_NONE)
			report_missing(request->name);
		if (config.source == CONFIG_ROW && !config.memory)
			request->bucket = config.bucket;	/* made since */
		else
			request->bucket = store_of(&config)->absent(&config.bucket, now);
	}
	check_cost(request);
}

/*
 * Names that the copy of the templates gives a memory template but that
 * have a table row of their own (a named table bucket under a memory
 * template's prefix), as found at a memory store generation, by a hash of
 * the name: their calls try the table's UPDATE first again, rather than
 * read their row before it on every call.  A slot lost to another name,
 * or a hash two names share, only costs that read.
 */
#define TABLE_NAMES_KEPT 64
static struct
{
	uint64		generation;
	uint32		hash;
}			table_names[TABLE_NAMES_KEPT];

/* The hash table_names keeps for "name". */
static uint32
table_name_hash(text *name)
{
	return hash_bytes((const unsigned char *) VARDATA_ANY(name),
					  VARSIZE_ANY_EXHDR(name));
}

/*
 * Whether "name" is a memory template's new key that may skip the table's
 * UPDATE: the copy of the templates says a memory template makes it, and
 * it was not found to have a table row at this generation.
 */
static bool
skips_table(Oid relid, text *name, TimestampTz now, uint64 generation)
{
	BucketConfig config;
	uint32		hash;

	if (!bucket_config_memory_template(relid, name, now, generation, &config))
		return false;
	hash = table_name_hash(name);
	return table_names[hash % TABLE_NAMES_KEPT].generation != generation ||
		table_names[hash % TABLE_NAMES_KEPT].hash != hash;
}

/* Remember that "name" has a table row, as found at "generation". */
static void
remember_table_name(text *name, uint64 generation)
{
	uint32		hash = table_name_hash(name);

	table_names[hash % TABLE_NAMES_KEPT].generation = generation;
	table_names[hash % TABLE_NAMES_KEPT].hash = hash;
}

/*
 * Take the request's cost from its bucket at "now" if it grants it.  Either
 * way request->bucket is left with the bucket's state after the decision.
 * A cost of 0 only looks: it changes nothing, so it writes nothing.
 */
static bool
take_one(Oid relid, Request *request, TimestampTz now)
{
	StoreResult result;

	request->in_table = false;
	result = memory_store.take(relid, request, now);

	if (result != STORE_ABSENT)
		return decided(request, result);
	if (request->cost == 0)
	{
		peek_one(relid, request, now);
		return bucket_holds(&request->bucket, 0, request->reserve, now);
	}

	/*
	 * More rounds only when the bucket was made or changed meanwhile.  A
	 * name a memory template makes (a new per-user key, by the copy of the
	 * templates) skips the table's UPDATE in the first: a row of its own,
	 * which alone could make it a table bucket, is read before its entry
	 * is made, and takes it to the table in the next round.
	 */
	for (int attempt = 0; attempt < 3; attempt++)
	{
		BucketConfig config;
		bool		granted;
		uint64		generation = memory_store.generation();
		bool		skipped = attempt == 0 &&
			skips_table(relid, request->name, now, generation);

		if (!skipped)
		{
			result = table_store.take(relid, request, now);
			if (result != STORE_ABSENT)
				return decided(request, result);
		}

		/* neither store holds it yet */
		if (ensure_memory(relid, request->name, now, &config))
		{
			result = memory_store.take(relid, request, now);
			if (result != STORE_ABSENT)
				return decided(request, result);
			continue;
		}
		if (config.source == CONFIG_NONE)
			break;
		if (config.source == CONFIG_ROW)
		{
			/* a table bucket, made since the UPDATE looked, or skipped */
			if (skipped)
				remember_table_name(request->name, generation);
			continue;
		}

		/*
		 * A table template's bucket: made, already taken from if it grants,
		 * in one INSERT.  A new quota holds its budget, not its capacity: a
		 * cost within the capacity may be refused, as a memory key's is.
		 */
		request->bucket = table_store.absent(&config.bucket, now);
		check_cost(request);
		granted = bucket_take(&request->bucket, request->cost, request->reserve, now);
		if (table_store.make(relid, request->name, &request->bucket,
							 config.template_len, 0, false) == STORE_MADE)
			return granted;
	}
	report_missing(request->name);
	pg_unreachable();
}

/* The buckets of an all-or-nothing take, for take_each(). */
typedef struct TakeAll
{
	Oid			relid;
	Request    *requests;
	int			nrequests;
	TimestampTz now;
} TakeAll;

/* subxact_run() step: take every request, stopping at the first denial. */
static bool
take_each(void *arg)
{
	TakeAll    *all = arg;

	for (int i = 0; i < all->nrequests; i++)
		if (!take_one(all->relid, &all->requests[i], all->now))
			return false;
	return true;
}

/*
 * Take every request's cost, or none.  First a look at every bucket,
 * locking and writing nothing: if one would deny, that is the answer, and
 * nothing was written (not even a bucket made from a template).  Then the
 * takes, in the callers' order (sorted by name, so that every session
 * locks rows in the same order and {a,b} against {b,a} cannot deadlock),
 * in a subtransaction rolled back if a bucket denies after all (another
 * session took its tokens since the look; what memory buckets granted is
 * given back with it); the states are then looked at afresh for the
 * report.
 */
static bool
take_all(Oid relid, Request *requests, int nrequests, TimestampTz now)
{
	TakeAll		all = {relid, requests, nrequests, now};
	bool		granted = true;

	if (nrequests == 1)
		return take_one(relid, &requests[0], now);
	for (int i = 0; i < nrequests; i++)
	{
		peek_one(relid, &requests[i], now);
		if (!bucket_holds(&requests[i].bucket, requests[i].cost,
						  requests[i].reserve, now))
			granted = false;
	}
	if (!granted)
		return false;
	granted = subxact_run(take_each, &all, 0, NULL);
	if (!granted)
		for (int i = 0; i < nrequests; i++)
			peek_one(relid, &requests[i], now);
	return granted;
}

/* What the counters need to learn a table bucket's template. */
typedef struct TemplateLookup
{
	Installation *inst;
	Oid			relid;
	text	   *name;
	int			template_len;	/* what it found */
} TemplateLookup;

/* subxact_run() step: look the template up, and let go of every lock. */
static bool
template_step(void *arg)
{
	TemplateLookup *lookup = arg;
	BucketConfig config;
	SpiSession	session = spi_begin(lookup->inst, false);

	(void) bucket_config_find(lookup->relid, lookup->name, tb_clock_now(),
							  false, 0, &config);
	spi_end(&session);
	lookup->template_len = config.source == CONFIG_NONE ? 0 : config.template_len;
	return false;
}

/*
 * stats_count()'s way to learn the length of the name of a table bucket's
 * template (0: none), the first time a transaction counts for it: in a
 * subtransaction rolled back at once, so that no lock on tb_buckets is
 * held after it (a waiter counts before it sleeps, holding nothing).
 */
static int
template_of(void *arg)
{
	TemplateLookup *lookup = arg;

	(void) subxact_run(template_step, lookup, 0, NULL);
	return lookup->template_len;
}

/*
 * Count "delta" for the bucket of "request" when the transaction ends
 * (stats.c).  Its template_len is what the store that answered said of it
 * (a key the memory store made from a memory template keeps its own
 * counters in its entry; a table bucket's row names its template), or -1:
 * stats.c looks the template up when it needs to.
 */
static void
count(Installation *inst, const Request *request, const BucketCounters *delta,
	  TimestampTz now)
{
	TemplateLookup lookup = {inst, installation_table(inst), request->name, 0};

	stats_count(lookup.relid, request->name, delta, request->template_len,
				template_of, &lookup,
				request->template_len > 0 && !request->in_table ?
				memory_store.count : NULL, now);
}

/*
 * Count a decision made at "now" without waiting: a grant for every bucket,
 * or a denial for each that held the request back (for all, if another
 * session's grant did and none is short now).
 */
static void
count_decision(Installation *inst, const Request *requests, int nrequests,
			   bool granted, TimestampTz now)
{
	bool		any_short = false;

	if (!stats_enabled())
		return;
	for (int i = 0; i < nrequests && !granted; i++)
		any_short |= !bucket_holds(&requests[i].bucket, requests[i].cost,
								   requests[i].reserve, now);
	for (int i = 0; i < nrequests; i++)
	{
		BucketCounters delta = {0};

		if (granted)
		{
			delta.granted = 1;
			delta.granted_tokens = requests[i].cost;
		}
		else if (any_short && bucket_holds(&requests[i].bucket, requests[i].cost,
											requests[i].reserve, now))
			continue;
		else
			delta.denied = 1;
		if (requests[i].counted)	/* for the key's own counters already */
			stats_count_template(installation_table(inst), requests[i].name,
								 requests[i].template_len, &delta, now);
		else
			count(inst, &requests[i], &delta, now);
	}
}

/*
 * Take every request now, or none, and count the decision.  When every
 * bucket named is a memory bucket with an entry, no SPI at all.
 */
bool
router_take(Installation *inst, Request *requests, int nrequests,
			TimestampTz now)
{
	Oid			relid = installation_table(inst);
	StoreResult result = STORE_ABSENT;
	uint64		generation;
	bool		granted;

	for (int i = 0; i < nrequests; i++)
		requests[i].counted = false;
	/* the installation's version checked first, by a statement */
	if (version_checked(relid))
	{
		result = memory_store.take_all(relid, requests, nrequests, now);
		/*
		 * a table bucket's row that denies says so without SPI (not in a
		 * read-only transaction, where the UPDATE fails; not for what the
		 * copy of the templates, as kept, says is a memory template's new
		 * key, which has no row to read)
		 */
		generation = memory_store.generation();
		if (result == STORE_ABSENT && nrequests == 1 && requests[0].cost > 0 &&
			!XactReadOnly &&
			!(bucket_config_templates_kept(relid, generation) &&
			  skips_table(relid, requests[0].name, now, generation)))
		{
			check_primary();
			result = table_store.deny(relid, &requests[0], now);
		}
	}
	if (result != STORE_ABSENT)
	{
		granted = result == STORE_GRANTED;
		for (int i = 0; i < nrequests && !granted; i++)
			check_cost(&requests[i]);
		if (granted)
			alerts_after_grant(inst, requests, nrequests, now);
	}
	else
		granted = router_attempt(inst, requests, nrequests, now);
	count_decision(inst, requests, nrequests, granted, now);
	return granted;
}

/*
 * Take every request now, or none, in whichever stores hold them, without
 * counting (one attempt of a waiter: wait.c counts the wait), and write a
 * grant's alerts (alerts.c): every grant passes here or above.
 */
bool
router_attempt(Installation *inst, Request *requests, int nrequests,
			   TimestampTz now)
{
	SpiSession	session = spi_begin(inst, true);
	bool		granted = take_all(installation_table(inst), requests,
								   nrequests, now);

	spi_end(&session);
	if (granted)
		alerts_after_grant(inst, requests, nrequests, now);
	return granted;
}

/*
 * A wait begins: it counts as cancelled for every bucket of the request
 * until router_count_wait() says how it ended, so that a wait ended by an
 * error (a cancel, statement_timeout, the session's end) is counted, even
 * one that ends the backend: its transaction's abort adds what it counted.
 */
void
router_count_wait_begin(Installation *inst, const Request *requests,
						int nrequests)
{
	TimestampTz now;

	if (!stats_enabled())
		return;
	now = tb_clock_now();
	for (int i = 0; i < nrequests; i++)
	{
		BucketCounters delta = {.cancelled = 1};
		Request		probe = {.name = requests[i].name, .template_len = -1};

		(void) memory_store.peek(installation_table(inst), &probe);
		count(inst, &probe, &delta, now);
	}
}

/*
 * Count the outcome of a wait for every bucket of the request: a grant or a
 * timeout, and how long it waited ("waited_usecs" -1: it did not).
 */
void
router_count_wait(Installation *inst, const Request *requests,
				  int nrequests, bool granted, int64 waited_usecs)
{
	TimestampTz now;

	if (!stats_enabled())
		return;
	now = tb_clock_now();
	for (int i = 0; i < nrequests; i++)
	{
		BucketCounters delta = {.cancelled = -1};

		delta.granted = granted ? 1 : 0;
		delta.granted_tokens = granted ? requests[i].cost : 0;
		delta.timeouts = granted ? 0 : 1;
		delta.waited = waited_usecs >= 0 ? 1 : 0;
		delta.wait_usecs = Max(waited_usecs, 0);
		count(inst, &requests[i], &delta, now);
	}
}

/*
 * Start the counters of bucket and limit "name" from zero (of a template:
 * its own and those of every bucket or limit made from it), or with NULL,
 * those of every bucket and limit of the installation: in the counters,
 * and in every store that keeps its keys' counters.
 */
void
router_reset_counters(Installation *inst, text *name)
{
	Oid			relid = installation_table(inst);
	Oid			limits = installation_limits(inst);

	stats_reset(relid, name);
	/* a limit's of that name too, kept apart from its buckets' */
	if (OidIsValid(limits))
		stats_reset(limits, name);
	for (int i = 0; i < NUM_STORES; i++)
		if (stores[i]->reset_counters != NULL)
			stores[i]->reset_counters(relid, name);
}

/*
 * Be (or stop being) the waiter a change to each bucket of the request
 * wakes.  True when every bucket's store wakes its waiter.
 */
bool
router_watch(Installation *inst, Request *requests, int nrequests, bool on)
{
	Oid			relid = installation_table(inst);
	bool		all = true;

	for (int i = 0; i < nrequests; i++)
	{
		bool		watched = false;

		for (int s = 0; s < NUM_STORES && !watched; s++)
			watched = stores[s]->watch != NULL &&
				stores[s]->watch(relid, requests[i].name, on);
		all &= watched;
	}
	return all;
}

/* Look at a request's bucket now, changing nothing (peek_one()). */
void
router_peek(Installation *inst, Request *request, TimestampTz now)
{
	SpiSession	session = spi_begin(inst, false);

	peek_one(installation_table(inst), request, now);
	spi_end(&session);
}

/*
 * Let "change" alter the state of bucket "name" at "now", in whichever
 * store holds it (a template's bucket made first), count "delta" for it
 * (unless NULL), and return the state after.  Every change that is not a
 * grant or a new setting goes through here.
 */
Bucket
router_update(Installation *inst, text *name, BucketChange change,
			  const void *arg, const BucketCounters *delta, TimestampTz now)
{
	SpiSession	session = spi_begin(inst, true);
	Oid			relid = installation_table(inst);
	Bucket		after;
	int			attempt;

	for (attempt = 0; attempt < 3; attempt++)
	{
		if (memory_store.change(relid, name, change, arg, now, &after) ||
			table_store.change(relid, name, change, arg, now, &after))
			break;
		if (!make_place(relid, name, now))
			report_missing(name);
	}
	if (attempt == 3)
		report_missing(name);
	check_debt(name, &after);
	spi_end(&session);
	if (delta != NULL && stats_enabled())
	{
		Request		probe = {.name = name, .template_len = -1};

		(void) memory_store.peek(relid, &probe);
		count(inst, &probe, delta, now);
	}
	if (delta != NULL && delta->granted_tokens > 0)	/* tb_settle's charge */
		alerts_after_charge(inst, name, -1, &after, now);
	return after;
}

/* Fail unless bucket "name" exists, or its template would make it. */
void
router_require(Installation *inst, text *name)
{
	Request		request = {.name = name, .cost = 0, .template_len = -1};
	SpiSession	session = spi_begin(inst, true);

	peek_one(installation_table(inst), &request, tb_clock_now());
	spi_end(&session);
}

/*
 * Give bucket "name" new settings now (NaN keeps one), keeping the tokens
 * it holds, capped at the new capacity.  A template passes them on to
 * every bucket made from it.  A memory bucket's entry takes them when the
 * transaction commits.
 */
void
router_alter(Installation *inst, text *name, double capacity,
			 double refill_rate)
{
	SpiSession	session = spi_begin(inst, true);
	Oid			relid = installation_table(inst);
	TimestampTz now = tb_clock_now();

	for (int attempt = 0;; attempt++)
	{
		/* a table bucket's or template's row, a memory one's, or an entry */
		if (table_store.alter(relid, name, capacity, refill_rate, now) ||
			bucket_config_set_memory(relid, name, capacity, refill_rate, now) ||
			memory_store.alter(relid, name, capacity, refill_rate, now))
			break;
		if (attempt == 2 || !make_place(relid, name, now))
			report_missing(name);
	}
	spi_end(&session);
}

/*
 * Make a new full bucket (or template) "name" in the store "memory"
 * chooses; false when the name is taken.  A memory bucket's entry is made
 * when the transaction commits.
 */
bool
router_create(Installation *inst, text *name, double capacity,
			  double refill_rate, bool memory)
{
	SpiSession	session = spi_begin(inst, true);
	bool		created;

	if (memory)
		memory_store.check_make(VARSIZE_ANY_EXHDR(name) -
								(is_template_name(name) ? 1 : 0));
	created = bucket_config_insert(installation_table(inst), name, capacity,
								   refill_rate, memory, tb_clock_now());
	spi_end(&session);
	return created;
}

/*
 * Make bucket (or template) "name" in state "made" (tb_create's full
 * bucket, or tb_create_quota's quota) when it has no row: true.
 * Otherwise false, with its row's configuration in *found, for the caller
 * to compare and change; where its tokens live cannot change so: refused.
 * A row another transaction is inserting is waited for (the INSERT's
 * conflict), then read as committed.
 */
bool
router_ensure(Installation *inst, text *name, const Bucket *made, bool memory,
			  BucketConfig *found)
{
	SpiSession	session = spi_begin(inst, true);
	Oid			relid = installation_table(inst);
	bool		created = true;

	if (memory)
		memory_store.check_make(VARSIZE_ANY_EXHDR(name) -
								(is_template_name(name) ? 1 : 0));
	for (int attempt = 0;
		 !bucket_config_insert_state(relid, name, made, memory);
		 attempt++)
	{
		/* taken, and dropped before it could be read: make it again */
		if (bucket_config_find(relid, name, made->updated_at, true, 0, found) != CONFIG_ROW)
		{
			if (attempt == 2)
				report_missing(name);
			continue;
		}
		if (found->memory != memory)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("token bucket \"%s\" keeps its tokens in %s, not in %s",
							text_to_cstring(name),
							found->memory ? "shared memory" : "the table",
							found->memory ? "the table" : "shared memory"),
					 errdetail("Where a bucket's tokens live is chosen when it is made; tb_ensure and tb_ensure_quota change its settings in place, not its kind."),
					 errhint("Drop it with tb_drop() and ensure it again, or ensure it with memory => %s.",
							 found->memory ? "true" : "false")));
		created = false;
		break;
	}
	spi_end(&session);
	return created;
}

/*
 * Drop bucket "name" (a template: with every bucket made from it); false
 * when there was none.  A memory bucket's entries go when the transaction
 * commits.
 */
bool
router_drop(Installation *inst, text *name)
{
	SpiSession	session = spi_begin(inst, true);
	Oid			relid = installation_table(inst);
	bool		dropped;

	/* a table row; a memory bucket's or template's row; an entry alone */
	dropped = table_store.drop(relid, name) ||
		bucket_config_delete_memory(relid, name) ||
		memory_store.drop(relid, name);
	spi_end(&session);
	return dropped;
}

/*
 * Forget template-made buckets that are full, unpaused and unchanged since
 * "idle_since", in every store.  Returns how many.
 */
uint64
router_purge(Installation *inst, TimestampTz idle_since, TimestampTz now)
{
	SpiSession	session = spi_begin(inst, true);
	Oid			relid = installation_table(inst);
	uint64		purged = 0;

	spi_allow_seqscan();		/* it reads the whole table */
	for (int i = 0; i < NUM_STORES; i++)
		purged += stores[i]->purge(relid, idle_since, now);
	spi_end(&session);
	return purged;
}

/* Column "name" of a row of tb_buckets, which is never NULL. */
static Datum
column(HeapTuple row, TupleDesc desc, const char *name)
{
	int			attnum = SPI_fnumber(desc, name);
	bool		isnull = true;
	Datum		value = 0;

	if (attnum > 0)
		value = heap_getattr(row, attnum, desc, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NOT_NULL_VIOLATION),
				 errmsg("column \"%s\" of tb_buckets is NULL", name)));
	return value;
}

PG_FUNCTION_INFO_V1(tb_buckets_changed);

/*
 * Trigger on tb_buckets, for rows of memory buckets, of templates and of
 * named table buckets (not of buckets made from table templates): hands
 * what an INSERT, UPDATE, DELETE or TRUNCATE did to the memory store, to
 * apply when the transaction commits; the settings an UPDATE writes it
 * checks first (bucket_config_check_row()).  With the argument 'check',
 * the trigger before every INSERT: that check alone.
 */
Datum
tb_buckets_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Installation inst = installation_of(fcinfo);
	TupleDesc	desc;
	Oid			relid;
	HeapTuple	old_row = NULL;
	HeapTuple	new_row = NULL;
	Bucket		settings;
	bool		own;
	bool		check;

	/* only ever the extension's own triggers on its own table */
	own = CALLED_AS_TRIGGER(fcinfo) &&
		RelationGetRelid(trigdata->tg_relation) == installation_table(&inst);
	check = own && trigdata->tg_trigger->tgnargs == 1 &&
		strcmp(trigdata->tg_trigger->tgargs[0], "check") == 0;
	if (check && TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) &&
		!TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		return PointerGetDatum(bucket_config_check_row(trigdata));
	/* the others: AFTER triggers, of rows or of a TRUNCATE */
	if (!own || check || !TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event) !=
		TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("tb_buckets_changed() is only the trigger of tokenbucket's table tb_buckets"),
				 errdetail("It hands changes of memory buckets' rows to shared memory, and fires for nothing else.")));
	relid = RelationGetRelid(trigdata->tg_relation);
	desc = RelationGetDescr(trigdata->tg_relation);

	if (TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event))
	{
		for (int i = 0; i < NUM_STORES; i++)
			stores[i]->configure(CONFIG_TRUNCATED, relid, "", 0, NULL);
		return PointerGetDatum(NULL);
	}
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ||
		TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		old_row = trigdata->tg_trigtuple;
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		new_row = trigdata->tg_newtuple;
	else if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		new_row = trigdata->tg_trigtuple;

#define COLUMN(row, name) column((row), desc, (name))
	/* the settings an UPDATE wrote, checked as a new row is */
	if (old_row && new_row)
		(void) bucket_config_check_row(trigdata);
	if (old_row && new_row &&
		DatumGetBool(COLUMN(old_row, "memory")) != DatumGetBool(COLUMN(new_row, "memory")))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot change the kind of token bucket \"%s\"",
						TextDatumGetCString(COLUMN(old_row, "name"))),
				 errdetail("Whether a bucket keeps its tokens in memory is chosen when it is made."),
				 errhint("Drop the bucket with tb_drop() and make it again with tb_create().")));
	/* a table bucket's row changed: nothing for shared memory */
	if (old_row && new_row && !DatumGetBool(COLUMN(old_row, "memory")))
		return PointerGetDatum(NULL);

	if (old_row)
	{
		text	   *old_name = DatumGetTextPP(COLUMN(old_row, "name"));
		text	   *new_name = new_row ? DatumGetTextPP(COLUMN(new_row, "name")) : NULL;
		bool		renamed = new_name == NULL ||
			VARSIZE_ANY_EXHDR(old_name) != VARSIZE_ANY_EXHDR(new_name) ||
			memcmp(VARDATA_ANY(old_name), VARDATA_ANY(new_name),
				   VARSIZE_ANY_EXHDR(old_name)) != 0;

		if (renamed)
			memory_store.configure(CONFIG_DROPPED, relid, VARDATA_ANY(old_name),
								   VARSIZE_ANY_EXHDR(old_name), NULL);
		else
		{
			bucket_config_row_settings(new_row, desc, &settings);
			memory_store.configure(CONFIG_ALTERED, relid, VARDATA_ANY(old_name),
								   VARSIZE_ANY_EXHDR(old_name), &settings);
			return PointerGetDatum(NULL);
		}
	}
	if (new_row)
	{
		text	   *name = DatumGetTextPP(COLUMN(new_row, "name"));
		ConfigChange change = CONFIG_MADE;

		/*
		 * A template (of either kind) takes the keys its prefix covers from
		 * any shorter template; a table bucket's name is no memory
		 * bucket's any more.
		 */
		if (is_template_name(name))
			change = CONFIG_SHADOWED;
		else if (!DatumGetBool(COLUMN(new_row, "memory")))
			change = CONFIG_TAKEN;
		bucket_config_row_settings(new_row, desc, &settings);
		memory_store.configure(change, relid, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name),
							   &settings);
	}
#undef COLUMN
	return PointerGetDatum(NULL);
}
