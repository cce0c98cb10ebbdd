/*
 * bench/gateway.c: the gateway's request, the way the third article's
 * gateway makes it: find the caller by API key, then decide on its
 * per-user limit.  One client process, THREADS threads, each with its own
 * connections, each request for a random one of USERS keys:
 *
 *   lookup       SELECT k.user_id FROM api_keys k WHERE k.key = $1
 *                (the request without a limit: the ceiling)
 *   tokenbucket  SELECT k.user_id, tb_acquire('user:' || k.user_id)
 *                FROM api_keys k WHERE k.key = $1  (one round trip)
 *   redis        the lookup, then EVALSHA of bench/token_bucket.lua on
 *                "user:<id>" (two round trips, as with any Redis limiter)
 *
 * Requests are counted from WARMUP seconds after the start (new
 * connections prepare their statements and fill their caches, and their
 * backends map the pages of shared memory they touch, first) to the end;
 * prints "MODE,THREADS,USERS,requests_per_s,granted_share".
 *
 *   gateway MODE SECONDS THREADS USERS CONNINFO [REDIS_PORT SCRIPT_SHA]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include "clock.h"

#define WARMUP 5.0

static const char *mode;
static double seconds;
static int users;
static const char *conninfo;
static int redis_port;
static const char *script_sha;
static double start;

typedef struct Worker
{
	pthread_t	thread;
	unsigned int seed;
	long		counted;		/* requests answered inside the window */
	long		granted;
	const char *error;
} Worker;

/* One thread: connect, prepare, then requests until the end of the window. */
static void *
work(void *arg)
{
	Worker	   *w = arg;
	PGconn	   *pg = PQconnectdb(conninfo);
	redisContext *redis = NULL;
	const char *sql;
	PGresult   *res;

	if (PQstatus(pg) != CONNECTION_OK)
	{
		w->error = strdup(PQerrorMessage(pg));
		return NULL;
	}
	if (strcmp(mode, "tokenbucket") == 0)
		sql = "SELECT k.user_id, tb_acquire('user:' || k.user_id) FROM api_keys k WHERE k.key = $1";
	else
		sql = "SELECT k.user_id FROM api_keys k WHERE k.key = $1";
	res = PQprepare(pg, "request", sql, 1, NULL);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		w->error = strdup(PQerrorMessage(pg));
		return NULL;
	}
	PQclear(res);
	if (strcmp(mode, "redis") == 0)
	{
		redis = redisConnect("127.0.0.1", redis_port);
		if (redis == NULL || redis->err)
		{
			w->error = "cannot connect to Redis";
			return NULL;
		}
	}

	for (;;)
	{
		char		key[32];
		const char *params[1] = {key};
		double		t = now_seconds();
		int			granted;

		if (t >= start + WARMUP + seconds)
			break;
		snprintf(key, sizeof(key), "key%d", 1 + rand_r(&w->seed) % users);
		res = PQexecPrepared(pg, "request", 1, params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		{
			w->error = strdup(PQerrorMessage(pg));
			PQclear(res);
			break;
		}
		if (redis != NULL)
		{
			redisReply *reply = redisCommand(redis, "EVALSHA %s 1 user:%s 1e9 1e9 1",
											 script_sha, PQgetvalue(res, 0, 0));

			if (reply == NULL || reply->type != REDIS_REPLY_INTEGER)
			{
				w->error = "EVALSHA failed";
				break;
			}
			granted = reply->integer == 1;
			freeReplyObject(reply);
		}
		else if (PQnfields(res) == 2)
			granted = PQgetvalue(res, 0, 1)[0] == 't';
		else
			granted = 1;
		PQclear(res);
		if (t >= start + WARMUP)
		{
			w->counted++;
			w->granted += granted;
		}
	}
	if (redis != NULL)
		redisFree(redis);
	PQfinish(pg);
	return NULL;
}

int
main(int argc, char **argv)
{
	int			threads;
	Worker	   *workers;
	long		counted = 0;
	long		granted = 0;

	if (argc < 6 || (strcmp(argv[1], "redis") == 0 && argc < 8))
	{
		fprintf(stderr, "usage: gateway lookup|tokenbucket|redis SECONDS THREADS USERS CONNINFO [REDIS_PORT SCRIPT_SHA]\n");
		return 2;
	}
	mode = argv[1];
	seconds = atof(argv[2]);
	threads = atoi(argv[3]);
	users = atoi(argv[4]);
	conninfo = argv[5];
	if (argc >= 8)
	{
		redis_port = atoi(argv[6]);
		script_sha = argv[7];
	}
	workers = calloc(threads, sizeof(Worker));
	start = now_seconds();
	for (int i = 0; i < threads; i++)
	{
		workers[i].seed = 12345 + i;
		pthread_create(&workers[i].thread, NULL, work, &workers[i]);
	}
	for (int i = 0; i < threads; i++)
	{
		pthread_join(workers[i].thread, NULL);
		if (workers[i].error)
		{
			fprintf(stderr, "gateway: %s\n", workers[i].error);
			return 1;
		}
		counted += workers[i].counted;
		granted += workers[i].granted;
	}
	printf("%s,%d,%d,%.0f,%.3f\n", mode, threads, users, counted / seconds,
		   counted ? (double) granted / counted : 0.0);
	return 0;
}
