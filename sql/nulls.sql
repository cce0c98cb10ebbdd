--
-- nulls: every argument of every function of the extension, read from the
-- catalog (so that a new function cannot be forgotten), given NULL in turn
-- with the others valid.  A NULL where a value is needed fails with 22004
-- naming the argument; the exceptions are the arguments whose NULL has a
-- documented meaning (each checked for it below) and the pure helpers of
-- the arithmetic, which are STRICT: NULL in, NULL out.  Each call runs in
-- a subtransaction rolled back after it, so none changes what the next
-- one sees.
--
CREATE EXTENSION tokenbucket;
SELECT tb_create('b', 10, 1, '1000 hours'), tb_create('c', 10, 1, '1000 hours'),
       tb_create_limit('l', 5), tb_create_quota('q', 10, '1 day');
SELECT tb_lease('l') AS lease \gset
INSERT INTO tb_prices (model, currency, input_per_million, output_per_million)
VALUES ('m', 'EUR', 1, 2);

-- a valid value for each argument, by its name; a function's own first
CREATE TEMP TABLE samples (function text, argument text, value text);
INSERT INTO samples VALUES
	(NULL, 'name', '''b'''), (NULL, 'cost', '1'), (NULL, 'reserve', '0.1'),
	(NULL, 'names', '''{b,c}'''), (NULL, 'costs', '''{1,2}'''), (NULL, 'timeout', '''1 s'''),
	(NULL, 'tokens', '1'), (NULL, 'reserved', '2'), (NULL, 'used', '1'),
	(NULL, 'reserved_at', 'now()'),
	(NULL, 'remaining', '5'), (NULL, 'duration', '''1 minute'''), (NULL, 'until', '''infinity'''),
	(NULL, 'idle', '''1 hour'''), (NULL, 'capacity', '10'), (NULL, 'refill', '1'),
	(NULL, 'per', '''1 minute'''), (NULL, 'memory', 'false'), (NULL, 'max_in_flight', '3'),
	(NULL, 'slots', '1'), (NULL, 'hold', '''session'''), (NULL, 'ttl', '''1 minute'''),
	(NULL, 'buckets', '''{b}'''), (NULL, 'lease', :'lease'),
	-- a call's price and tokens
	(NULL, 'model', '''m'''), (NULL, 'input_tokens', '1000'), (NULL, 'output_tokens', '100'),
	(NULL, 'cached_input_tokens', '10'),
	-- a template's parent
	(NULL, 'child', '''x:*'''), (NULL, 'parent', '''team:{1}'''),
	-- the pure helpers' columns of a bucket
	(NULL, 'refill_rate', '1'), (NULL, 'deficit', '0'), (NULL, 'updated_at', 'now()'),
	(NULL, 'at', 'now()'), (NULL, 'paused_until', '''-infinity'''), (NULL, 'new_capacity', '5'),
	-- a holder: this backend, or this transaction
	(NULL, 'pid', 'pg_backend_pid()'),
	(NULL, 'started', '(SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid())'),
	(NULL, 'xid', 'pg_current_xact_id()'),
	-- a quota's settings, and a period's
	(NULL, 'budget', '10'), (NULL, 'period', '''1 day'''), (NULL, 'time_zone', '''UTC'''),
	(NULL, 'starts', '''2025-01-01'''), (NULL, 'carry_max', '0'),
	(NULL, 'period_anchor', '''2025-01-01'''), (NULL, 'n', '1'),
	-- a quota's alerts
	('tb_set_alerts', 'bucket', '''q'''), (NULL, 'thresholds', '''{0.5}'''),
	-- names that do not exist yet, and limits
	('tb_create', 'name', '''new'''), ('tb_ensure', 'name', '''new'''),
	('tb_create_quota', 'name', '''new'''), ('tb_ensure_quota', 'name', '''new'''),
	('tb_create_limit', 'name', '''new'''), ('tb_ensure_limit', 'name', '''new'''),
	('tb_alter_limit', 'name', '''l'''), ('tb_lease', 'name', '''l'''),
	('tb_lease_wait', 'name', '''l'''), ('tb_lease_all', 'name', '''l'''),
	('tb_lease_all', 'costs', '''{1}''');

-- where NULL has a documented meaning, what the call then does (a pattern
-- of its outcome); argument NULL: every argument of the function
CREATE TEMP TABLE documented (function text, argument text, meaning text, outcome text);
INSERT INTO documented VALUES
	('tb_acquire', 'reserve', 'no reserve', '^result: \{true\}$'),
	('tb_try', 'reserve', 'no reserve', '^result: \{"\(t,9,'),
	('tb_peek', 'reserve', 'no reserve', '^result: \{"\(t,9,'),
	('tb_acquire_all', 'costs', '1 each', '^result: \{true\}$'),
	('tb_acquire_all', 'reserve', 'no reserve', '^result: \{true\}$'),
	('tb_try_all', 'costs', '1 each', '^result: \{"\(b,t,9,.*"\(c,t,9,'),
	('tb_try_all', 'reserve', 'no reserve', '^result: \{"\(b,t,9,.*"\(c,t,8,'),
	('tb_acquire_wait', 'timeout', 'no limit but statement_timeout', '^result: \{true\}$'),
	('tb_acquire_all_wait', 'costs', '1 each', '^result: \{true\}$'),
	('tb_acquire_all_wait', 'timeout', 'no limit but statement_timeout', '^result: \{true\}$'),
	('tb_alter', 'capacity', 'keep the capacity', '^result: \{""\}$'),
	('tb_alter', 'refill', 'keep the rate (per alone: 22023)', '^error 22023: per needs refill$'),
	('tb_alter', 'per', 'per second', '^result: \{""\}$'),
	('tb_stats_reset', 'name', 'every counter', '^result: \{""\}$'),
	('tb_lease', 'ttl', 'no ttl', '^result: \{-?[0-9]+\}$'),
	('tb_lease', 'reserve', 'no reserve', '^result: \{-?[0-9]+\}$'),
	('tb_lease_wait', 'ttl', 'no ttl', '^result: \{-?[0-9]+\}$'),
	('tb_lease_wait', 'timeout', 'no limit but statement_timeout', '^result: \{-?[0-9]+\}$'),
	('tb_lease_wait', 'reserve', 'no reserve', '^result: \{-?[0-9]+\}$'),
	('tb_lease_all', 'costs', '1 each', '^result: \{-?[0-9]+\}$'),
	('tb_lease_all', 'ttl', 'no ttl', '^result: \{-?[0-9]+\}$'),
	('tb_lease_all', 'reserve', 'no reserve', '^result: \{-?[0-9]+\}$'),
	('tb_holder_alive', 'xid', 'a session''s holder: this backend', '^result: \{true\}$'),
	('tb_holder_alive', 'pid', 'a transaction''s holder: this one', '^result: \{true\}$'),
	('tb_holder_alive', 'started', 'a transaction''s holder: this one', '^result: \{true\}$'),
	('tb_set_parent', 'parent', 'no parent', '^result: \{""\}$'),
	('tb_refund', 'reserved_at', 'not known: the bucket alone', '^result: \{10\}$'),
	('tb_settle', 'reserved_at', 'not known: the bucket alone', '^result: \{10\}$'),
	('tb_create_quota', 'starts', 'the current day, month or hour', '^result: \{""\}$'),
	('tb_ensure_quota', 'starts', 'its own anchor, or the default', '^result: \{created\}$'),
	('tb_set_alerts', 'thresholds', 'none', '^result: \{""\}$'),
	-- the pure helpers: STRICT, NULL in, NULL out; their 1.9 forms are
	-- not, but give NULL as well, except for a NULL period: a continuous
	-- bucket's answer
	('tb_take', 'period', 'continuous', '^result: \{[^N]'),
	('tb_tokens', 'period', 'continuous', '^result: \{[^N]'),
	('tb_full_at', 'period', 'continuous', '^result: \{[^N]'),
	('tb_ready_at', 'period', 'continuous', '^result: \{[^N]'),
	('tb_resize', 'period', 'continuous', '^result: \{[^N]'),
	('tb_period_start', NULL, 'pure: NULL', '^result: \{NULL\}$'),
	('tb_take', NULL, 'pure: NULL', '^result: \{NULL\}$'),
	('tb_tokens', NULL, 'pure: NULL', '^result: \{NULL\}$'),
	('tb_full_at', NULL, 'pure: NULL', '^result: \{NULL\}$'),
	('tb_ready_at', NULL, 'pure: NULL', '^result: \{NULL\}$'),
	('tb_resize', NULL, 'pure: NULL', '^result: \{NULL\}$'),
	('tb_check_bucket', NULL, 'pure: NULL', '^result: \{NULL\}$'),
	('tb_check_parent', NULL, 'pure: NULL', '^result: \{NULL\}$'),
	('tb_stats_key', NULL, 'pure: NULL', '^result: \{NULL\}$');

-- outcome(call): "result: " and its rows as text, or "error SQLSTATE:
-- message"; the outer block always ends in an error, so whatever the call
-- did is rolled back
CREATE FUNCTION pg_temp.outcome(call text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	result text;
BEGIN
	BEGIN
		EXECUTE format('SELECT coalesce(array_agg(t::text)::text, ''{}'') FROM %s AS t', call)
		INTO result;
		RAISE SQLSTATE 'TBUND' USING MESSAGE = result;
	EXCEPTION WHEN OTHERS THEN
		IF SQLSTATE = 'TBUND' THEN
			RETURN 'result: ' || SQLERRM;
		END IF;
		RETURN 'error ' || SQLSTATE || ': ' || SQLERRM;
	END;
END $$;

-- every input argument of every function of the extension
CREATE TEMP TABLE arguments AS
SELECT p.oid AS fn, p.proname::text AS function, a.n, a.argument, a.type
FROM pg_proc p
JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'tokenbucket'
CROSS JOIN LATERAL (
	SELECT row_number() OVER (ORDER BY i.i) AS n, i.argument, i.type
	FROM unnest(p.proargnames, coalesce(p.proallargtypes, p.proargtypes::oid[]),
	            coalesce(p.proargmodes, array_fill('i'::"char", ARRAY[p.pronargs])))
	     WITH ORDINALITY AS i(argument, type, mode, i)
	WHERE i.mode IN ('i', 'b')) AS a;

-- each argument NULL in turn, the others from samples
CREATE TEMP TABLE calls AS
SELECT x.fn, x.function, x.argument,
       format('%s(%s)', x.function, string_agg(
           CASE WHEN o.n = x.n THEN 'NULL' ELSE '(' || coalesce(s.value, 'no sample') || ')' END
           || '::' || format_type(o.type, NULL), ', ' ORDER BY o.n)) AS call
FROM arguments x
JOIN arguments o ON o.fn = x.fn
LEFT JOIN LATERAL (
	SELECT s.value FROM samples s
	WHERE s.argument = o.argument AND (s.function = o.function OR s.function IS NULL)
	ORDER BY s.function IS NULL LIMIT 1) AS s ON true
GROUP BY x.fn, x.function, x.argument, x.n;

CREATE TEMP TABLE results AS
SELECT replace(replace(c.fn::regprocedure::text, 'double precision', 'float8'),
               'timestamp with time zone', 'timestamptz') AS signature, c.argument, c.call,
       coalesce(d.meaning, '22004') AS expected, pg_temp.outcome(c.call) AS outcome,
       coalesce(d.outcome, format('^error 22004: argument "%s" of %s must not be NULL$',
                                  c.argument, c.function)) AS pattern
FROM calls c
LEFT JOIN LATERAL (
	SELECT d.meaning, d.outcome FROM documented d
	WHERE d.function = c.function AND (d.argument = c.argument OR d.argument IS NULL)
	ORDER BY d.argument IS NULL LIMIT 1) AS d ON true;

-- every function with arguments is there
SELECT count(DISTINCT signature) >= 40 AS functions, count(*) >= 100 AS arguments FROM results;

-- what a NULL does, argument by argument
SELECT signature, argument, expected, outcome ~ pattern AS ok
FROM results ORDER BY signature, argument;

-- and where it does not do what it should, what it did
SELECT signature, argument, outcome FROM results WHERE NOT outcome ~ pattern
ORDER BY signature, argument;

DROP EXTENSION tokenbucket;
