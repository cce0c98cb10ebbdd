-- bench/setup.sql: the buckets every scenario uses, for tokenbucket and for
-- the alternatives.  Run with -v nbuckets=N; grants never run dry (huge
-- capacity and rate), except on 'empty', which never refills in a run.
\set ON_ERROR_STOP 1
CREATE EXTENSION IF NOT EXISTS tokenbucket;

INSERT INTO tb_buckets (name, capacity, refill_rate)
SELECT 'k' || i, 1e9, 1e9 FROM generate_series(1, :nbuckets) AS i;
INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES
	('hot', 1e9, 1e9), ('rpm', 1e9, 1e9), ('tpm', 1e9, 1e9);
INSERT INTO tb_buckets (name, capacity, refill_rate, deficit) VALUES ('empty', 1, 1e-9, 1);

-- The same as memory buckets: per-key ones from a template (no rows), named
-- ones for the rest.  Each key is used once here, so that the runs measure
-- the buckets in use, not their first call (which reads the template).
SELECT tb_create('m:*', 1e9, 1e9, memory => true), tb_create('mhot', 1e9, 1e9, memory => true),
       tb_create('mrpm', 1e9, 1e9, memory => true), tb_create('mtpm', 1e9, 1e9, memory => true),
       tb_create('mempty', 1, 1e-9, memory => true);
SELECT tb_acquire('mempty');
SELECT pg_catalog.format('SELECT count(tb_acquire(''m:'' || i)) FROM generate_series(%s, %s) AS i',
                         lo, least(lo + 9999, :nbuckets))
FROM generate_series(1, :nbuckets, 10000) AS lo \gexec

-- Alternatives A and B keep their own table, as their authors would: the
-- level and when it was last refilled, a primary key, nothing else.
CREATE TABLE plain_buckets (
	name text PRIMARY KEY,
	capacity float8 NOT NULL,
	rate float8 NOT NULL,
	tokens float8 NOT NULL,
	ts timestamptz NOT NULL
);
INSERT INTO plain_buckets
SELECT name, capacity, refill_rate, capacity - deficit, clock_timestamp() FROM tb_buckets;

-- A: the usual PL/pgSQL: lock the row, refill, decide, write when granted.
CREATE FUNCTION plpgsql_acquire(p_name text, p_cost float8 DEFAULT 1)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
	b plain_buckets;
	now_ts timestamptz := clock_timestamp();
	level float8;
BEGIN
	SELECT * INTO b FROM plain_buckets WHERE name = p_name FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'bucket % does not exist', p_name;
	END IF;
	level := least(b.capacity,
	               b.tokens + greatest(0, extract(epoch FROM now_ts - b.ts)::float8) * b.rate);
	IF level < p_cost THEN
		RETURN false;
	END IF;
	UPDATE plain_buckets SET tokens = level - p_cost, ts = greatest(b.ts, now_ts)
	WHERE name = p_name;
	RETURN true;
END $$;

-- A for two buckets: lock both in name order, all or nothing.
CREATE FUNCTION plpgsql_acquire_all(p_names text[], p_costs float8[])
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
	b record;
	now_ts timestamptz := clock_timestamp();
BEGIN
	FOR b IN
		SELECT p.*, c.cost,
		       least(p.capacity, p.tokens + greatest(0, extract(epoch FROM now_ts - p.ts)::float8) * p.rate) AS level
		FROM plain_buckets p JOIN unnest(p_names, p_costs) AS c(name, cost) USING (name)
		ORDER BY p.name FOR UPDATE OF p
	LOOP
		IF b.level < b.cost THEN
			RETURN false;
		END IF;
	END LOOP;
	UPDATE plain_buckets p
	SET tokens = least(p.capacity, p.tokens + greatest(0, extract(epoch FROM now_ts - p.ts)::float8) * p.rate) - c.cost,
	    ts = greatest(p.ts, now_ts)
	FROM unnest(p_names, p_costs) AS c(name, cost) WHERE p.name = c.name;
	RETURN true;
END $$;

VACUUM ANALYZE;
