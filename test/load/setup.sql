-- test/load/setup.sql: the buckets and the grant log of the mixed load that
-- test/stress.sh runs, and test/t/001_crash_replica.pl crashes the server
-- under.  Run in a new database.
CREATE EXTENSION tokenbucket;

-- each grant: its bucket, its cost, when it was decided, and the tokens
-- the bucket had left just after it.  A table bucket's grant is decided at
-- t exactly (t0 = t); a memory bucket's somewhere in [t0, t], read by the
-- client's statement on either side of the call (left_after unknown).
CREATE TABLE grants (bucket text NOT NULL, cost float8 NOT NULL, t0 timestamptz NOT NULL,
                     t timestamptz NOT NULL, left_after float8);
CREATE INDEX ON grants (bucket, t0);

-- record(bucket, cost): called after a grant, in its transaction, so the
-- row it reads is the version the grant wrote and still holds locked
CREATE FUNCTION record(bucket text, cost float8) RETURNS void LANGUAGE sql
	AS 'INSERT INTO grants SELECT name, cost, updated_at, updated_at, capacity - deficit
	    FROM tb_buckets WHERE name = bucket';

-- record_between(bucket, cost, t0): a memory bucket's grant, decided after
-- t0 (read before the call) and before now
CREATE FUNCTION record_between(bucket text, cost float8, t0 timestamptz) RETURNS void
	LANGUAGE sql AS 'INSERT INTO grants VALUES (bucket, cost, t0, clock_timestamp())';

-- 16 buckets: hot.sql saturates 'hot'; cold.sql spreads costs of 1 to 3
-- over ten small ones; user.sql makes per-user buckets from 'user:*';
-- pair.sql takes 'rpm' and 'tpm' together; wait.sql waits for 'queue';
-- big.sql is always granted, so each transaction it commits is one grant
-- (its capacity, 1e9, keeps a cost of 1 above the 1/2^32 of it a bucket
-- can account for); mhot.sql and muser.sql do what hot.sql and user.sql
-- do, on memory buckets
SELECT count(*) AS buckets FROM (
	SELECT tb_create('hot', 200, 200)
	UNION ALL SELECT tb_create('cold' || n, 5, 2) FROM generate_series(0, 9) AS n
	UNION ALL SELECT tb_create('user:*', 3, 1)
	UNION ALL SELECT tb_create('rpm', 5, 20)
	UNION ALL SELECT tb_create('tpm', 500, 1000)
	UNION ALL SELECT tb_create('queue', 2, 50)
	UNION ALL SELECT tb_create('big', 1e9, 1e9)
	UNION ALL SELECT tb_create('mhot', 200, 200, memory => true)
	UNION ALL SELECT tb_create('muser:*', 3, 1, memory => true)
) AS made;
