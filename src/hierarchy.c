/*-------------------------------------------------------------------------
 *
 * hierarchy.c
 *	  Buckets charged up their parents: the DBA's tb_parents, this
 *	  backend's copy of it, the chain of parents of a name, and the
 *	  requests of a call with every level of their chains added.
 *
 * A row of tb_parents gives a bucket (or, for a child ending in '*',
 * every name its prefix starts) a parent; a template's parent may take
 * fields of the name: {N} its N-th ':'-separated field after the prefix,
 * {*} all of it.  A name's own row wins over a template's, and a longer
 * prefix over a shorter one, as with the buckets' templates.  A call on a
 * bucket is a call on it and on every ancestor, with the same cost: the
 * entry points add them (hierarchy_expand()) before the router takes
 * every request all or nothing, as tb_acquire_all does.  What a settle or
 * refund gives back goes up a row of tb_parents only for a reservation
 * made since the row was written (its since; hierarchy_given_back()): a
 * reservation is a name and an amount, and the parent it was charged to
 * may have changed since.
 *
 * Each backend keeps a copy of tb_parents, read whole on first use and
 * again after a change: the trigger on tb_parents invalidates the
 * table's relcache entry, which PostgreSQL hands to every backend when
 * the change commits (to this one at once, and again if it rolls back),
 * whether or not the library is preloaded.  With tb_parents empty, a call
 * pays one test.
 *
 * src/hierarchy.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/trigger.h"
#include "hierarchy.h"
#include "lib/stringinfo.h"
#include "spi_session.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

/* A row of tb_parents. */
typedef struct ParentRule
{
	const char *child;			/* a bucket's name, or a template's prefix */
	int			child_len;
	text	   *parent;			/* the parent's name, or for a template its
								 * pattern */
	TimestampTz since;			/* when the row was written */
} ParentRule;

/* This backend's copy of an installation's tb_parents. */
static struct
{
	bool		valid;			/* as committed (and as this transaction
								 * changed it) */
	Oid			relid;			/* the installation's tb_buckets */
	Oid			table;			/* its tb_parents */
	int			nnamed;
	ParentRule *named;			/* buckets' rows, by name bytewise */
	int			ntemplates;
	ParentRule *templates;		/* templates' rows, longest prefix first */
	MemoryContext context;
	bool		registered;		/* the relcache callback is */
}			parents;

static KeptPlan parents_plan = {
	.sql = "SELECT child, parent, since FROM %1$s.tb_parents",
	.nargs = 0
};

/* Order requests by name, bytewise: one fixed order for every session. */
int
request_name_cmp(const void *a, const void *b)
{
	text	   *x = ((const Request *) a)->name;
	text	   *y = ((const Request *) b)->name;
	int			xlen = VARSIZE_ANY_EXHDR(x);
	int			ylen = VARSIZE_ANY_EXHDR(y);
	int			cmp = memcmp(VARDATA_ANY(x), VARDATA_ANY(y), Min(xlen, ylen));

	return cmp != 0 ? cmp : (xlen > ylen) - (xlen < ylen);
}

/* Order rules by child, bytewise. */
static int
rule_cmp(const void *a, const void *b)
{
	const ParentRule *x = a;
	const ParentRule *y = b;
	int			cmp = memcmp(x->child, y->child, Min(x->child_len, y->child_len));

	return cmp != 0 ? cmp : (x->child_len > y->child_len) - (x->child_len < y->child_len);
}

/* Order templates' rules longest prefix first. */
static int
template_cmp(const void *a, const void *b)
{
	return ((const ParentRule *) b)->child_len - ((const ParentRule *) a)->child_len;
}

/* Relcache callback: tb_parents changed (InvalidOid: every table may have). */
static void
parents_invalidate(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == parents.table)
		parents.valid = false;
}

/*
 * Read installation "relid"'s tb_parents into the copy, as committed now
 * (with this transaction's own changes), in an SPI session of its own.
 */
static void
parents_load(Installation *inst, Oid relid)
{
	SpiSession	session;
	uint64		rows;
	MemoryContext old;
	int			ntemplates = 0;

	if (!parents.registered)
	{
		CacheRegisterRelcacheCallback(parents_invalidate, (Datum) 0);
		parents.registered = true;
	}
	if (parents.context == NULL)
		parents.context = AllocSetContextCreate(TopMemoryContext,
												"tokenbucket parents",
												ALLOCSET_SMALL_SIZES);
	MemoryContextReset(parents.context);
	parents.nnamed = parents.ntemplates = 0;
	parents.relid = InvalidOid;	/* until read whole */
	parents.table = get_relname_relid("tb_parents", get_rel_namespace(relid));
	/* valid before the read: a change committed meanwhile invalidates it */
	parents.valid = true;

	session = spi_begin(inst, false);
	rows = plan_run_latest(&parents_plan, relid, NULL, NULL);
	old = MemoryContextSwitchTo(parents.context);
	parents.named = palloc(sizeof(ParentRule) * Max(rows, 1));
	parents.templates = palloc(sizeof(ParentRule) * Max(rows, 1));
	for (uint64 i = 0; i < rows; i++)
	{
		HeapTuple	tuple = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		text	   *child = DatumGetTextPP(SPI_getbinval(tuple, desc, 1, &isnull));
		text	   *parent = DatumGetTextPP(SPI_getbinval(tuple, desc, 2, &isnull));
		bool		template = is_template_name(child);
		ParentRule *rule = template ? &parents.templates[ntemplates++] :
			&parents.named[parents.nnamed++];

		rule->child_len = VARSIZE_ANY_EXHDR(child) - (template ? 1 : 0);
		rule->child = pnstrdup(VARDATA_ANY(child), rule->child_len);
		rule->parent = (text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(parent));
		rule->since = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 3, &isnull));
	}
	MemoryContextSwitchTo(old);
	parents.ntemplates = ntemplates;
	if (rows > 0)
	{
		SPI_freetuptable(SPI_tuptable);
		SPI_tuptable = NULL;
	}
	spi_end(&session);
	qsort(parents.named, parents.nnamed, sizeof(ParentRule), rule_cmp);
	qsort(parents.templates, parents.ntemplates, sizeof(ParentRule), template_cmp);
	parents.relid = relid;
}

/*
 * The placeholder at "p" ('{') of a parent's pattern, "len" bytes left:
 * its length, with *field its number ({2}: 2; {0} and one too large to
 * be a field's: 0) or -1 for {*}; -1 when what follows is no placeholder
 * ('{' is then itself, as in a hash tag: '{acme}:team').
 */
static int
placeholder_at(const char *p, int len, int *field)
{
	int			i = 1;
	int			n = 0;

	if (len >= 3 && p[1] == '*' && p[2] == '}')
	{
		*field = -1;
		return 3;
	}
	while (i < len && p[i] >= '0' && p[i] <= '9')
	{
		n = n <= BUCKET_NAME_MAX_BYTES ? n * 10 + (p[i] - '0') : n;
		i++;
	}
	if (i == 1 || i >= len || p[i] != '}')
		return -1;
	*field = n <= BUCKET_NAME_MAX_BYTES ? n : 0;
	return i + 1;
}

/* Whether a parent's name has a placeholder: a template's pattern. */
static bool
has_placeholder(text *parent)
{
	const char *p = VARDATA_ANY(parent);
	int			len = VARSIZE_ANY_EXHDR(parent);
	int			field;

	for (int i = 0; i < len; i++)
		if (p[i] == '{' && placeholder_at(p + i, len - i, &field) > 0)
			return true;
	return false;
}

/* Field "field" (from 1) of the ':'-separated "rest"; false when it has fewer (or 0). */
static bool
field_of(const char *rest, int len, int field, const char **start, int *flen)
{
	const char *end = rest + len;
	const char *p = rest;
	const char *colon;

	if (field < 1)
		return false;
	for (int f = 1; f < field; f++)
	{
		p = memchr(p, ':', end - p);
		if (p == NULL)
			return false;
		p++;
	}
	colon = memchr(p, ':', end - p);
	*start = p;
	*flen = (colon != NULL ? colon : end) - p;
	return true;
}

/*
 * The parent template rule "rule" gives "name" (of "len" bytes, starting
 * with the rule's prefix): its pattern with each placeholder replaced.
 */
static text *
parent_from_template(const ParentRule *rule, const char *name, int len)
{
	const char *pattern = VARDATA_ANY(rule->parent);
	int			plen = VARSIZE_ANY_EXHDR(rule->parent);
	const char *rest = name + rule->child_len;
	int			rest_len = len - rule->child_len;
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoSpaces(&buf, VARHDRSZ);
	for (int i = 0; i < plen;)
	{
		int			field;
		int			n = pattern[i] == '{' ? placeholder_at(pattern + i, plen - i, &field) : -1;
		const char *start = rest;
		int			flen = rest_len;

		if (n < 0)
		{
			appendStringInfoChar(&buf, pattern[i++]);
			continue;
		}
		if (field >= 0 && !field_of(rest, rest_len, field, &start, &flen))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("token bucket \"%.*s\" has no field %d for its parent \"%s\"",
							len, name, field, text_to_cstring(rule->parent)),
					 errdetail("tb_parents gives the names after '%.*s' the parent \"%s\", whose {%d} is the name's field %d after that prefix, counted between ':'.",
							   rule->child_len, rule->child, text_to_cstring(rule->parent),
							   field, field),
					 errhint("Call it by a name with that many fields, or give it a parent of its own in tb_parents.")));
		appendBinaryStringInfo(&buf, start, flen);
		i += n;
	}
	SET_VARSIZE(buf.data, buf.len);
	return (text *) buf.data;
}

/*
 * The parent of bucket "name" by the copy of tb_parents, or NULL; in
 * *since when its row was written.
 */
static text *
parent_of(text *name, TimestampTz *since)
{
	ParentRule	key = {VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name), NULL, 0};
	ParentRule *rule = bsearch(&key, parents.named, parents.nnamed,
							   sizeof(ParentRule), rule_cmp);

	if (rule != NULL)
	{
		*since = rule->since;
		return rule->parent;
	}
	for (int i = 0; i < parents.ntemplates; i++)
	{
		rule = &parents.templates[i];
		if (key.child_len >= rule->child_len &&
			memcmp(key.child, rule->child, rule->child_len) == 0)
		{
			*since = rule->since;
			return parent_from_template(rule, key.child, key.child_len);
		}
	}
	return NULL;
}

/* Whether two names are the same. */
static bool
same_name(text *a, text *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/* "name > chain[0] > ... > chain[n - 1]", for an error's detail. */
static char *
chain_text(text *name, text **chain, int n)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, text_to_cstring(name));
	for (int i = 0; i < n; i++)
		appendStringInfo(&buf, " > %s", text_to_cstring(chain[i]));
	return buf.data;
}

/*
 * Put the ancestors of bucket "name" in chain[], its parent first, and
 * return how many; "below" levels are under "name" already (a template's
 * keys under its parent).  since[k] is when the row that gave chain[k]
 * was written.  Fails on a parent that is no bucket's name, a cycle, or
 * more than HIERARCHY_MAX_LEVELS levels.
 */
static int
chain_of(text *name, int below, text **chain, TimestampTz *since)
{
	int			n = 0;

	for (text *parent = parent_of(name, &since[0]); parent != NULL;
		 parent = parent_of(parent, &since[n]))
	{
		int			len = VARSIZE_ANY_EXHDR(parent);

		if (len == 0 || len > BUCKET_NAME_MAX_BYTES || is_template_name(parent))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("parent \"%s\" of token bucket \"%s\" is not a bucket's name",
							text_to_cstring(parent),
							text_to_cstring(n > 0 ? chain[n - 1] : name)),
					 errdetail("A bucket's name is 1 to %d bytes long and does not end in *.",
							   BUCKET_NAME_MAX_BYTES),
					 errhint("Change the parent tb_parents gives it, or call it by another name.")));
		chain[n] = parent;
		if (same_name(parent, name))
			goto cycle;
		for (int i = 0; i < n; i++)
			if (same_name(parent, chain[i]))
				goto cycle;
		if (below + n + 2 > HIERARCHY_MAX_LEVELS)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("token bucket \"%s\" has more than %d levels of parents",
							text_to_cstring(name), HIERARCHY_MAX_LEVELS - 1 - below),
					 errdetail("Its chain of parents begins %s.", chain_text(name, chain, n + 1)),
					 errhint("A chain has at most %d levels, the bucket called included; make the hierarchy shallower in tb_parents.",
							 HIERARCHY_MAX_LEVELS)));
		n++;
	}
	return n;

cycle:
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_RECURSION),
			 errmsg("the parents of token bucket \"%s\" form a cycle", text_to_cstring(name)),
			 errdetail("Its chain of parents is %s.", chain_text(name, chain, n + 1)),
			 errhint("Change the parent of one of them in tb_parents (tb_set_parent()).")));
	pg_unreachable();
}

/* Make the copy of tb_parents that of installation "relid", if it is not. */
static inline void
parents_current(Installation *inst, Oid relid)
{
	if (!parents.valid || parents.relid != relid)
		parents_load(inst, relid);
}

/*
 * The requests with every ancestor of each (tb_parents) added, at the same
 * cost and reserve, sorted by name, and a bucket that several chains (or
 * the caller and a chain) name once, at the sum of their costs.  Each
 * added one's position comes after the caller's names, in the order of
 * their chains.  The requests themselves when none has a parent.
 */
Request *
hierarchy_expand(Installation *inst, Request *requests, int *nrequests)
{
	Oid			relid = installation_table(inst);
	int			n = *nrequests;
	Request    *all = NULL;
	int			nall = 0;
	int			size = 0;
	int			merged = 0;

	/* no parents: one test */
	if (likely(parents.valid && parents.relid == relid) &&
		parents.nnamed + parents.ntemplates == 0)
		return requests;
	parents_current(inst, relid);

	for (int i = 0; i < n; i++)
	{
		text	   *chain[HIERARCHY_MAX_LEVELS];
		TimestampTz since[HIERARCHY_MAX_LEVELS];
		int			levels = chain_of(requests[i].name, 0, chain, since);

		if (levels == 0)
			continue;
		if (all == NULL)
		{
			size = n + levels * (n - i);
			all = palloc(sizeof(Request) * size);
			memcpy(all, requests, sizeof(Request) * n);
			nall = n;
		}
		if (nall + levels > size)
		{
			size = Max(size * 2, nall + levels);
			all = repalloc(all, sizeof(Request) * size);
		}
		for (int k = 0; k < levels; k++)
		{
			Request    *added = &all[nall];

			*added = requests[i];
			added->name = chain[k];
			added->position = nall++;
			added->template_len = -1;
			added->in_table = false;
			added->counted = false;
		}
	}
	if (all == NULL)
		return requests;

	qsort(all, nall, sizeof(Request), request_name_cmp);
	for (int i = 0; i < nall; i++)
	{
		if (merged > 0 && request_name_cmp(&all[merged - 1], &all[i]) == 0)
		{
			all[merged - 1].cost += all[i].cost;
			all[merged - 1].position = Min(all[merged - 1].position, all[i].position);
			continue;
		}
		all[merged++] = all[i];
	}
	*nrequests = merged;
	return all;
}

/*
 * The request for bucket "name" with every ancestor a give-back of a
 * reservation made at "reserved_at" reaches added (sorted by name, in
 * *nrequests): up each row of tb_parents written at or before it,
 * stopping at the first written after (the reservation may have been
 * charged to another parent then, or to none).  DT_NOBEGIN, a moment not
 * known, passes only rows whose since is -infinity.  The request itself
 * when none.
 */
Request *
hierarchy_given_back(Installation *inst, Request *request, int *nrequests,
					 TimestampTz reserved_at)
{
	Oid			relid = installation_table(inst);
	text	   *chain[HIERARCHY_MAX_LEVELS];
	TimestampTz since[HIERARCHY_MAX_LEVELS];
	int			levels;
	int			n = 0;
	Request    *all;

	*nrequests = 1;
	if (likely(parents.valid && parents.relid == relid) &&
		parents.nnamed + parents.ntemplates == 0)
		return request;
	parents_current(inst, relid);
	levels = chain_of(request->name, 0, chain, since);
	while (n < levels && since[n] <= reserved_at)
		n++;
	if (n == 0)
		return request;
	all = palloc(sizeof(Request) * (n + 1));
	all[0] = *request;
	for (int k = 0; k < n; k++)
	{
		all[k + 1] = *request;
		all[k + 1].name = chain[k];
		all[k + 1].position = k + 1;
		all[k + 1].template_len = -1;
		all[k + 1].in_table = false;
		all[k + 1].counted = false;
	}
	qsort(all, n + 1, sizeof(Request), request_name_cmp);
	*nrequests = n + 1;
	return all;
}

/*
 * The moment argument "argno" (reserved_at) says a reservation was made:
 * DT_NOBEGIN when the call has none or NULL (not known).  A moment after
 * now is refused: a reservation said to be newer than it is could be
 * given back up a parent it was never charged to.
 */
TimestampTz
hierarchy_reserved_at(FunctionCallInfo fcinfo, int argno)
{
	TimestampTz at;

	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return DT_NOBEGIN;
	at = PG_GETARG_TIMESTAMPTZ(argno);
	if (at > tb_clock_now())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("reserved_at %s is after now", timestamptz_to_str(at)),
				 errdetail("reserved_at is when the reservation was made; the tokens go back only to the parents the bucket had then."),
				 errhint("Pass now() of the transaction that reserved, as the server gave it.")));
	return at;
}

/*
 * Which request a call's single answer reports: the bucket that refused
 * it (of several, the one whose wait is longest: its retry_after is the
 * whole chain's), or when granted the one with the fewest tokens left;
 * of equals, the one called before its parents.
 */
int
hierarchy_reported(const Request *requests, int nrequests, bool granted,
				   TimestampTz now)
{
	int			best = 0;
	bool		best_short = false;
	double		best_key = 0;

	for (int i = 0; i < nrequests; i++)
	{
		const Request *r = &requests[i];
		bool		is_short = !granted &&
			!bucket_holds(&r->bucket, r->cost, r->reserve, now);
		double		key = granted ? -bucket_tokens_at(&r->bucket, now) :
			(double) bucket_ready_at(&r->bucket, r->cost, r->reserve, now);

		if (i == 0 || is_short > best_short ||
			(is_short == best_short &&
			 (key > best_key || (key == best_key && r->position < requests[best].position))))
		{
			best = i;
			best_short = is_short;
			best_key = key;
		}
	}
	return best;
}

PG_FUNCTION_INFO_V1(tb_check_parent);

/*
 * tb_check_parent(child, parent): the CHECK constraint of tb_parents.  Each
 * name 1 to BUCKET_NAME_MAX_BYTES bytes, the parent a bucket's (not a
 * template's), and placeholders ({N}, N a field's number from 1, and {*})
 * only in a template's parent.  True, or an error (23514).
 */
Datum
tb_check_parent(PG_FUNCTION_ARGS)
{
	text	   *child = PG_GETARG_TEXT_PP(0);
	text	   *parent = PG_GETARG_TEXT_PP(1);
	const char *p = VARDATA_ANY(parent);
	int			len = VARSIZE_ANY_EXHDR(parent);
	bool		template = is_template_name(child);

	if (VARSIZE_ANY_EXHDR(child) == 0 || VARSIZE_ANY_EXHDR(child) > BUCKET_NAME_MAX_BYTES ||
		len == 0 || len > BUCKET_NAME_MAX_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("child and parent must be 1 to %d bytes long, not %zu and %d",
						BUCKET_NAME_MAX_BYTES, VARSIZE_ANY_EXHDR(child), len)));
	if (is_template_name(parent))
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("parent \"%s\" is a template, not a bucket", text_to_cstring(parent)),
				 errdetail("A parent is the bucket charged along with its children."),
				 errhint("Give the template's keys a parent each with a placeholder, as in tb_set_parent('user:*', 'team:{1}').")));
	for (int i = 0; i < len; i++)
	{
		int			field;

		if (p[i] != '{' || placeholder_at(p + i, len - i, &field) < 0)
			continue;
		if (field == 0)
			ereport(ERROR,
					(errcode(ERRCODE_CHECK_VIOLATION),
					 errmsg("parent \"%s\" has a placeholder of no field",
							text_to_cstring(parent)),
					 errdetail("{N} is the key's N-th field after the template's prefix, N from 1 to %d; {*} is all of it.",
							   BUCKET_NAME_MAX_BYTES),
					 errhint("Number the fields from 1, as in {1}.")));
		if (!template)
			ereport(ERROR,
					(errcode(ERRCODE_CHECK_VIOLATION),
					 errmsg("parent \"%s\" of \"%s\" has a placeholder, but \"%s\" is not a template",
							text_to_cstring(parent), text_to_cstring(child),
							text_to_cstring(child)),
					 errdetail("Placeholders take fields of the keys a template makes; a bucket's own parent is one name."),
					 errhint("Name the parent, or give the parent to a template such as '%s*'.",
							 text_to_cstring(child))));
	}
	PG_RETURN_BOOL(true);
}

PG_FUNCTION_INFO_V1(tb_parents_changed);

/*
 * tb_parents_changed(): the statement trigger of tb_parents.  Every
 * backend reads tb_parents again once the change commits (the relcache
 * invalidation); an INSERT or UPDATE is refused if a chain that is known
 * now (a bucket's own row's, or a template's whose parent has no
 * placeholder) has a cycle or too many levels.  Writers take turns here,
 * so two transactions cannot each add half a cycle.
 */
Datum
tb_parents_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	Installation inst = installation_of(fcinfo);
	Oid			relid;
	text	   *chain[HIERARCHY_MAX_LEVELS];
	TimestampTz since[HIERARCHY_MAX_LEVELS];

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event) ||
		RelationGetRelid(trigdata->tg_relation) !=
		get_relname_relid("tb_parents", get_rel_namespace(installation_table(&inst))))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("tb_parents_changed() is only the trigger of tokenbucket's table tb_parents"),
				 errdetail("It tells every session that parents changed, and fires for nothing else.")));
	CacheInvalidateRelcache(trigdata->tg_relation);
	parents.valid = false;
	if (!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) &&
		!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		return PointerGetDatum(NULL);

	LockRelationOid(RelationGetRelid(trigdata->tg_relation), ShareUpdateExclusiveLock);
	CommandCounterIncrement();
	relid = installation_table(&inst);
	parents_load(&inst, relid);
	for (int i = 0; i < parents.nnamed; i++)
		(void) chain_of(cstring_to_text_with_len(parents.named[i].child,
												 parents.named[i].child_len),
						0, chain, since);
	for (int i = 0; i < parents.ntemplates; i++)
		if (!has_placeholder(parents.templates[i].parent))
			(void) chain_of(parents.templates[i].parent, 1, chain, since);
	return PointerGetDatum(NULL);
}
