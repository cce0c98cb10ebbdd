/*-------------------------------------------------------------------------
 *
 * lease_pool.c
 *	  The shares of the memory-lease pool that names made from templates
 *	  may hold: per template, per session and all together.
 *
 * The server keeps at most tokenbucket.max_memory_leases (N) memory
 * leases, one record each, whatever their database
 * (lease_memory_records.c).  A memory limit template makes a limit of
 * every name after its prefix, so a caller may make up as many names as
 * it likes: one session leasing 'user:' || n for n = 1, 2, ... would hold
 * every record, and every other memory limit would be refused until it
 * ended.  So leases of names made from templates are bounded, as memory
 * buckets' keys are (memory_entries.c):
 *	- all templates' names together hold at most N less its last tenth,
 *	  which is kept for named limits (whose leases only their
 *	  max_in_flight bounds, as the DBA set it);
 *	- one template's names hold at most a quarter of N;
 *	- one session holds at most half of that (an eighth of N) of leases of
 *	  names made from templates, so no session holds a template's share.
 * A lease beyond one of them is refused (53200), saying which is full.
 * A lease counts until its record is freed: an expired one too, as it
 * counts against the pool.
 *
 * The counts are kept under the leases' lock, in two fixed hashes, one
 * entry per template (its installation and prefix) and per session (its
 * backend's pid and start) while it counts leases.  Neither runs out of
 * entries: each entry counts at least one of fewer than N leases.
 *
 * src/lease_pool.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "lease_pool.h"
#include "miscadmin.h"

/* A session: its backend's pid and start (a later backend's pid is another). */
typedef struct PoolSession
{
	TimestampTz started;
	int32		pid;
	int32		zero;			/* the key is compared as bytes */
} PoolSession;

/* The leases of the names a template made. */
typedef struct TemplateCount
{
	SharedKey	key;			/* the template's prefix */
	int32		leases;
} TemplateCount;

/* The leases a session holds of names made from templates. */
typedef struct SessionCount
{
	PoolSession key;
	int32		leases;
} SessionCount;

static int	pool_max = 0;		/* tokenbucket.max_memory_leases */
static int32 *template_leases = NULL;	/* all templates' names' */
static HTAB *template_counts = NULL;
static HTAB *session_counts = NULL;

/* The most leases all templates' names may hold: all but the last tenth. */
static int32
all_templates_cap(void)
{
	return Max(1, pool_max - (pool_max + 9) / 10);
}

/* The most leases one template's names may hold: a quarter. */
static int32
template_cap(void)
{
	return Max(1, pool_max / 4);
}

/* The most leases of names made from templates one session may hold. */
static int32
session_cap(void)
{
	return Max(1, template_cap() / 2);
}

/* SharedArea size of the counts, for a pool of "max_leases". */
Size
lease_pool_size(int max_leases)
{
	return add_size(MAXALIGN(sizeof(int32)),
					add_size(shmem_hash_size(max_leases, sizeof(TemplateCount)),
							 shmem_hash_size(max_leases, sizeof(SessionCount))));
}

/* SharedArea attach, in every process: the counts, zero when made. */
void
lease_pool_attach(int max_leases)
{
	bool		found;

	pool_max = max_leases;
	template_leases = shmem_struct("tokenbucket lease pool", sizeof(int32), &found);
	if (!found)
		*template_leases = 0;
	template_counts = shmem_hash("tokenbucket lease templates", max_leases,
								 sizeof(SharedKey), sizeof(TemplateCount),
								 shared_key_hash, shared_key_match, 0);
	session_counts = shmem_hash("tokenbucket lease sessions", max_leases,
								sizeof(PoolSession), sizeof(SessionCount),
								tag_hash, memcmp, 0);
}

/*
 * The keys a lease of name "key", made from a template whose name is
 * "template_len" bytes long, held by session "pid" at "started", counts under.
 */
static void
pool_keys(SharedKey *template, PoolSession *session, const SharedKey *key,
		  int template_len, int pid, TimestampTz started)
{
	*template = *key;
	template->len = template_len - 1;	/* the prefix, without its '*' */
	memset(session, 0, sizeof(PoolSession));
	session->pid = pid;
	session->started = started;
}

/*
 * Add "delta" to the leases that the entry of "key" in "hash" counts (at
 * "offset" in it): made by the first, gone with the last.
 */
static void
count_in(HTAB *hash, const void *key, Size offset, int32 delta)
{
	bool		found;
	char	   *entry = hash_search(hash, key, delta > 0 ? HASH_ENTER_NULL : HASH_FIND, &found);
	int32	   *leases;

	if (entry == NULL && delta > 0)
		elog(ERROR, "no entry left to count a memory lease in");
	if (entry == NULL)
		return;
	leases = (int32 *) (entry + offset);
	*leases = (found ? *leases : 0) + delta;
	if (*leases <= 0)
		(void) hash_search(hash, key, HASH_REMOVE, NULL);
}

/*
 * Count one more lease of name "key", made from a template whose name is
 * "template_len" bytes long (0: a named limit, not counted), for this
 * session: POOL_ROOM, or the share it would overfill (nothing counted).
 */
PoolShare
lease_pool_take(const SharedKey *key, int template_len)
{
	SharedKey	template;
	PoolSession session;
	SessionCount *mine;
	TemplateCount *its;

	if (template_len <= 0)
		return POOL_ROOM;
	pool_keys(&template, &session, key, template_len, MyProcPid, MyStartTimestamp);
	mine = hash_search(session_counts, &session, HASH_FIND, NULL);
	if (mine != NULL && mine->leases >= session_cap())
		return POOL_SESSION_FULL;
	its = hash_search(template_counts, &template, HASH_FIND, NULL);
	if (its != NULL && its->leases >= template_cap())
		return POOL_TEMPLATE_FULL;
	if (*template_leases >= all_templates_cap())
		return POOL_TEMPLATES_FULL;
	count_in(template_counts, &template, offsetof(TemplateCount, leases), 1);
	count_in(session_counts, &session, offsetof(SessionCount, leases), 1);
	(*template_leases)++;
	return POOL_ROOM;
}

/*
 * Count a lease of name "key" (template_len as lease_pool_take() had it)
 * that session "pid" at "started" held as freed.
 */
void
lease_pool_freed(const SharedKey *key, int template_len, int pid, TimestampTz started)
{
	SharedKey	template;
	PoolSession session;

	if (template_len <= 0)
		return;
	pool_keys(&template, &session, key, template_len, pid, started);
	count_in(template_counts, &template, offsetof(TemplateCount, leases), -1);
	count_in(session_counts, &session, offsetof(SessionCount, leases), -1);
	(*template_leases)--;
}

/* Fail, unless "full" is POOL_ROOM: a lease of name "key" would overfill that share. */
void
lease_pool_refuse(PoolShare full, const SharedKey *key, int template_len)
{
	switch (full)
	{
		case POOL_ROOM:
			return;
		case POOL_SESSION_FULL:
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("no room for another lease of memory limit \"%.*s\"", key->len, key->name),
					 errdetail("This session holds %d leases of names made from memory limit templates, the most one session may: half a template's share of tokenbucket.max_memory_leases.",
							   session_cap()),
					 errhint("Release leases this session holds, or raise tokenbucket.max_memory_leases and restart the server.")));
			break;
		case POOL_TEMPLATE_FULL:
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("no room for another lease of memory limit \"%.*s\"", key->len, key->name),
					 errdetail("Names made from memory limit template \"%.*s*\" hold %d leases, its whole share: a quarter of tokenbucket.max_memory_leases.",
							   template_len - 1, key->name, template_cap()),
					 errhint("Wait for leases of its names to be released, or raise tokenbucket.max_memory_leases and restart the server.")));
			break;
		case POOL_TEMPLATES_FULL:
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("no room for another lease of memory limit \"%.*s\"", key->len, key->name),
					 errdetail("Names made from memory limit templates hold %d leases, all they may: the last tenth of tokenbucket.max_memory_leases is kept for named limits.",
							   all_templates_cap()),
					 errhint("Wait for leases of names made from templates to be released, or raise tokenbucket.max_memory_leases and restart the server.")));
			break;
	}
}
