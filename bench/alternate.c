/*
 * bench/alternate.c: statements compared in turns on the same connections.
 *
 * Runs of one statement after another (pgbench's) are at the mercy of the
 * machine: on a shared VM its speed moves by a tenth and more for seconds
 * at a time, so that a ratio of two runs moves as much from one round to
 * the next.  Here the statements take turns of SLICE_MS milliseconds, all
 * connections running the one whose turn it is, so that each statement
 * runs alone (as in its own run) and every slow or fast spell of the
 * machine, which lasts seconds, falls on all of them alike.
 *
 * Two threads (as pgbench -j 2), each driving half the connections
 * without blocking.  Each statement is prepared on every connection; one
 * with a $1 takes FORMAT (a printf format with one %d) of a random integer
 * in 1..RANGE for it (1..N for a statement given as "N|SQL").  Requests
 * are counted from WARMUP_S seconds after the start (the connections'
 * backends first map the shared memory they touch) for SECONDS; a request
 * counts for the statement it ran.  Prints, for each statement in order,
 * "INDEX,requests_per_s": its requests over the time its turns took in
 * the counted window.
 *
 *   alternate SECONDS WARMUP_S CONNECTIONS RANGE FORMAT CONNINFO SQL...
 */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "clock.h"

#define SLICE_MS 200
#define THREADS 2
#define MAX_STATEMENTS 8

static double seconds;
static double warmup;
static int	range;
static const char *format;
static const char *conninfo;
static int	nstatements;
static char **statements;
static int	ranges[MAX_STATEMENTS];
static int	parameters[MAX_STATEMENTS];	/* 1 if it has a $1 (SELECT 1 has not) */
static double start;

typedef struct Worker
{
	pthread_t	thread;
	int			nconns;
	unsigned int seed;
	long		counted[MAX_STATEMENTS];	/* requests answered in the window */
	char	   *error;
} Worker;

/* The statement whose turn it is at "t". */
static int
turn_at(double t)
{
	return (long) ((t - start) * 1000 / SLICE_MS) % nstatements;
}

/* Seconds of the counted window in statement "i"'s turns. */
static double
turn_seconds(int i)
{
	double		total = 0;
	double		from = start + warmup;
	double		to = from + seconds;

	for (long s = 0;; s++)
	{
		double		a = start + s * SLICE_MS / 1000.0;
		double		b = a + SLICE_MS / 1000.0;

		if (a >= to)
			break;
		if (s % nstatements != i)
			continue;
		if (a < from)
			a = from;
		if (b > to)
			b = to;
		if (b > a)
			total += b - a;
	}
	return total;
}

/* Send statement "i" with a random parameter on "conn". */
static int
send_request(Worker *w, PGconn *conn, int i)
{
	char		value[64];
	char		name[16];
	const char *params[1] = {value};

	if (parameters[i])
		snprintf(value, sizeof(value), format, 1 + rand_r(&w->seed) % ranges[i]);
	snprintf(name, sizeof(name), "s%d", i);
	return PQsendQueryPrepared(conn, name, parameters[i], params, NULL, NULL, 0);
}

/* Note the first error of a thread (its run stops). */
static void
fail(Worker *w, PGconn *conn)
{
	if (w->error == NULL)
		w->error = strdup(PQerrorMessage(conn));
}

/* One thread: connect and prepare, then keep every connection busy. */
static void *
work(void *arg)
{
	Worker	   *w = arg;
	PGconn	  **conns = calloc(w->nconns, sizeof(PGconn *));
	int		   *running = calloc(w->nconns, sizeof(int));
	struct pollfd *fds = calloc(w->nconns, sizeof(struct pollfd));
	double		end = start + warmup + seconds;
	int			busy = 0;

	for (int c = 0; c < w->nconns; c++)
	{
		conns[c] = PQconnectdb(conninfo);
		if (PQstatus(conns[c]) != CONNECTION_OK)
		{
			fail(w, conns[c]);
			return NULL;
		}
		for (int i = 0; i < nstatements; i++)
		{
			char		name[16];
			PGresult   *res;

			snprintf(name, sizeof(name), "s%d", i);
			res = PQprepare(conns[c], name, statements[i], parameters[i], NULL);
			if (PQresultStatus(res) != PGRES_COMMAND_OK)
			{
				fail(w, conns[c]);
				return NULL;
			}
			PQclear(res);
		}
		PQsetnonblocking(conns[c], 1);
		running[c] = -1;
	}

	for (;;)
	{
		double		t = now_seconds();

		/* idle connections take the statement whose turn it is */
		for (int c = 0; c < w->nconns && t < end; c++)
			if (running[c] < 0)
			{
				running[c] = turn_at(t);
				if (!send_request(w, conns[c], running[c]))
				{
					fail(w, conns[c]);
					goto done;
				}
				busy++;
			}
		if (busy == 0)
			break;
		for (int c = 0; c < w->nconns; c++)
		{
			fds[c].fd = PQsocket(conns[c]);
			fds[c].events = running[c] >= 0 ? POLLIN : 0;
			if (running[c] >= 0 && PQflush(conns[c]) > 0)
				fds[c].events |= POLLOUT;
		}
		if (poll(fds, w->nconns, 1000) < 0)
			break;
		t = now_seconds();
		for (int c = 0; c < w->nconns; c++)
		{
			PGresult   *res;

			if (running[c] < 0 || !(fds[c].revents & (POLLIN | POLLERR | POLLHUP)))
				continue;
			if (!PQconsumeInput(conns[c]))
			{
				fail(w, conns[c]);
				goto done;
			}
			if (PQisBusy(conns[c]))
				continue;
			while ((res = PQgetResult(conns[c])) != NULL)
			{
				if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
					fail(w, conns[c]);
				PQclear(res);
			}
			if (w->error)
				goto done;
			if (t >= start + warmup && t < end)
				w->counted[running[c]]++;
			running[c] = -1;
			busy--;
		}
	}
done:
	for (int c = 0; c < w->nconns; c++)
		if (conns[c])
			PQfinish(conns[c]);
	return NULL;
}

int
main(int argc, char **argv)
{
	int			connections;
	Worker		workers[THREADS];

	if (argc < 8 || argc - 7 > MAX_STATEMENTS)
	{
		fprintf(stderr, "usage: alternate SECONDS WARMUP_S CONNECTIONS RANGE FORMAT CONNINFO SQL... (at most %d)\n",
				MAX_STATEMENTS);
		return 2;
	}
	seconds = atof(argv[1]);
	warmup = atof(argv[2]);
	connections = atoi(argv[3]);
	range = atoi(argv[4]);
	format = argv[5];
	conninfo = argv[6];
	statements = argv + 7;
	nstatements = argc - 7;
	for (int i = 0; i < nstatements; i++)
	{
		char	   *bar = strchr(statements[i], '|');

		/* "N|SQL": a statement whose parameter takes values 1..N */
		ranges[i] = range;
		if (bar != NULL && bar > statements[i] &&
			strspn(statements[i], "0123456789") == (size_t) (bar - statements[i]))
		{
			ranges[i] = atoi(statements[i]);
			statements[i] = bar + 1;
		}
		parameters[i] = strstr(statements[i], "$1") != NULL;
	}
	memset(workers, 0, sizeof(workers));
	start = now_seconds();
	for (int i = 0; i < THREADS; i++)
	{
		workers[i].nconns = connections / THREADS + (i < connections % THREADS);
		workers[i].seed = 12345 + i;
		pthread_create(&workers[i].thread, NULL, work, &workers[i]);
	}
	for (int i = 0; i < THREADS; i++)
	{
		pthread_join(workers[i].thread, NULL);
		if (workers[i].error)
		{
			fprintf(stderr, "alternate: %s", workers[i].error);
			return 1;
		}
	}
	for (int i = 0; i < nstatements; i++)
	{
		long		counted = 0;

		for (int k = 0; k < THREADS; k++)
			counted += workers[k].counted[i];
		printf("%d,%.0f\n", i, counted / turn_seconds(i));
	}
	return 0;
}
