-- test/load/setup.sql: the buckets and the grant log of the mixed load that
-- test/stress.sh runs, and test/t/001_crash_replica.pl crashes the server
-- under.  Run in a new database.
CREATE EXTENSION tokenbucket;

-- each grant: its bucket, its cost, the moment it was decided and the
-- tokens the bucket had left just after it
CREATE TABLE grants (bucket text NOT NULL, cost float8 NOT NULL, t timestamptz NOT NULL,
                     left_after float8 NOT NULL);
CREATE INDEX ON grants (bucket, t);

-- record(bucket, cost): called after a grant, in its transaction, so the
-- row it reads is the version the grant wrote and still holds locked
CREATE FUNCTION record(bucket text, cost float8) RETURNS void LANGUAGE sql
	AS 'INSERT INTO grants SELECT name, cost, updated_at, capacity - deficit
	    FROM tb_buckets WHERE name = bucket';

-- 16 buckets: hot.sql saturates 'hot'; cold.sql spreads costs of 1 to 3
-- over ten small ones; user.sql makes per-user buckets from 'user:*';
-- pair.sql takes 'rpm' and 'tpm' together; wait.sql waits for 'queue';
-- big.sql is always granted, so each transaction it commits is one grant
-- (its capacity, 1e9, keeps a cost of 1 above the 1/2^32 of it a bucket
-- can account for)
SELECT count(*) AS buckets FROM (
	SELECT tb_create('hot', 200, 200)
	UNION ALL SELECT tb_create('cold' || n, 5, 2) FROM generate_series(0, 9) AS n
	UNION ALL SELECT tb_create('user:*', 3, 1)
	UNION ALL SELECT tb_create('rpm', 5, 20)
	UNION ALL SELECT tb_create('tpm', 500, 1000)
	UNION ALL SELECT tb_create('queue', 2, 50)
	UNION ALL SELECT tb_create('big', 1e9, 1e9)
) AS made;
