/* tokenbucket--1.8--1.9.sql: tb_held, the rows open transactions hold
 * (a wait for one is bounded by tokenbucket.row_lock_timeout); tb_prices,
 * tb_price and tb_cost, for budgets in money; tb_buckets checked by
 * triggers a grant does not fire, in place of its CHECK constraint. */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION tokenbucket UPDATE TO '1.9'" to load this file. \quit

--
-- What open transactions hold: a call on a table bucket or a limit's row
-- locks it until its transaction ends, and another transaction's caller
-- waits for it at most tokenbucket.row_lock_timeout (55P03 naming the
-- holder).  tb_held shows the DBA each such row, held by a call of
-- tokenbucket's in a transaction still open, with who holds it and how
-- many sessions wait for that transaction.  Its function shows the rows to
-- whoever may read the view.
--
CREATE FUNCTION @extschema@.tb_held_rows(OUT kind text, OUT name text, OUT pid integer,
	OUT since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tb_held_rows'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.tb_held_rows() IS
	'each bucket and limit whose row an open transaction holds by a call of tokenbucket''s: what tb_held shows, to whoever may read it';

CREATE VIEW @extschema@.tb_held AS
SELECT h.kind,
	h.name,
	h.pid,
	a.usename AS role,
	a.application_name,
	a.client_addr,
	a.state,
	h.since AS held_since,
	a.xact_start,
	CASE WHEN a.state OPERATOR(pg_catalog.~~) 'idle in transaction%'
		THEN pg_catalog.now() OPERATOR(pg_catalog.-) a.state_change END AS idle_for,
	(SELECT pg_catalog.count(*)::integer FROM pg_catalog.pg_stat_activity AS w
	 WHERE h.pid OPERATOR(pg_catalog.=) ANY (pg_catalog.pg_blocking_pids(w.pid))) AS waiting
FROM @extschema@.tb_held_rows() AS h
LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid OPERATOR(pg_catalog.=) h.pid;

COMMENT ON VIEW @extschema@.tb_held IS
	'each bucket and limit whose row an open transaction holds by a call of tokenbucket''s: its holder''s pid, role, application, state, since when, how long idle in transaction, and how many sessions wait for it';

--
-- Money.  A budget in money is a bucket whose tokens are a currency's
-- units (capacity 500 for 500 EUR): a call reserves its estimated cost
-- with tb_acquire and settles with the cost of the usage the provider
-- reports with tb_settle.  tb_cost gives that cost, from the price of the
-- model in force at the call's moment, in exact numeric.  The prices are
-- the DBA's, like tb_buckets, and dumped.  A row is in force from
-- valid_from until the model's next row (the default, -infinity: from
-- always); a price change is a new row, so the costs of past calls stay
-- what they were.
--
CREATE TABLE @extschema@.tb_prices (
	model text NOT NULL
		CONSTRAINT tb_prices_model_check
		CHECK (pg_catalog.octet_length(model) OPERATOR(pg_catalog.>=) 1
			AND pg_catalog.octet_length(model) OPERATOR(pg_catalog.<=) 1024),
	currency text NOT NULL
		CONSTRAINT tb_prices_currency_check
		CHECK (currency OPERATOR(pg_catalog.~) '^[A-Z]{3}$'),
	-- numeric has NaN (above every number) and Infinity: "< 'Infinity'"
	-- keeps both out
	input_per_million numeric NOT NULL
		CONSTRAINT tb_prices_input_per_million_check
		CHECK (input_per_million OPERATOR(pg_catalog.>=) 0
			AND input_per_million OPERATOR(pg_catalog.<) 'Infinity'),
	output_per_million numeric NOT NULL
		CONSTRAINT tb_prices_output_per_million_check
		CHECK (output_per_million OPERATOR(pg_catalog.>=) 0
			AND output_per_million OPERATOR(pg_catalog.<) 'Infinity'),
	cached_input_per_million numeric
		CONSTRAINT tb_prices_cached_input_per_million_check
		CHECK (cached_input_per_million OPERATOR(pg_catalog.>=) 0
			AND cached_input_per_million OPERATOR(pg_catalog.<) 'Infinity'),
	valid_from timestamptz NOT NULL DEFAULT '-infinity',
	PRIMARY KEY (model, valid_from)
);

COMMENT ON TABLE @extschema@.tb_prices IS
	'prices of models per million tokens, each in force from valid_from until the model''s next row: what tb_cost charges';
COMMENT ON COLUMN @extschema@.tb_prices.model IS 'the model''s name, as callers pass it to tb_cost';
COMMENT ON COLUMN @extschema@.tb_prices.currency IS 'ISO 4217 code of the prices (EUR, USD)';
COMMENT ON COLUMN @extschema@.tb_prices.input_per_million IS
	'price of a million input tokens not read from the provider''s cache';
COMMENT ON COLUMN @extschema@.tb_prices.output_per_million IS 'price of a million output tokens';
COMMENT ON COLUMN @extschema@.tb_prices.cached_input_per_million IS
	'price of a million input tokens read from the provider''s cache (NULL: input_per_million)';
COMMENT ON COLUMN @extschema@.tb_prices.valid_from IS
	'from when this row is in force (-infinity: always, until the model''s next row)';

-- pg_dump keeps the prices the DBA wrote
SELECT pg_catalog.pg_extension_config_dump('@extschema@.tb_prices', '');

-- Only the owner writes prices; anyone may read them: tb_cost tells a
-- price to whoever calls it anyway, and a caller may check a model's
-- currency against its budget's.  Revoking SELECT from a role keeps
-- tb_cost and tb_price from it too.
GRANT SELECT ON @extschema@.tb_prices TO PUBLIC;

--
-- The price row of a model in force at a moment, and what a call costs by
-- it, for whoever may read tb_prices (PUBLIC).  Every name is qualified:
-- the caller's search_path changes nothing.  Not STRICT: a NULL is 22004
-- naming the argument, as everywhere else.
--
CREATE FUNCTION @extschema@.tb_price(model text, at timestamptz DEFAULT pg_catalog.now(),
	OUT currency text, OUT input_per_million numeric, OUT output_per_million numeric,
	OUT cached_input_per_million numeric, OUT valid_from timestamptz)
RETURNS record
LANGUAGE plpgsql STABLE CALLED ON NULL INPUT PARALLEL SAFE
AS $$
DECLARE
	first_from timestamptz;
BEGIN
	IF tb_price.model IS NULL OR tb_price.at IS NULL THEN
		RAISE EXCEPTION 'argument "%" of tb_price must not be NULL',
			CASE WHEN tb_price.model IS NULL THEN 'model' ELSE 'at' END
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT p.currency, p.input_per_million, p.output_per_million,
		coalesce(p.cached_input_per_million, p.input_per_million), p.valid_from
	INTO tb_price.currency, tb_price.input_per_million, tb_price.output_per_million,
		tb_price.cached_input_per_million, tb_price.valid_from
	FROM @extschema@.tb_prices AS p
	WHERE p.model OPERATOR(pg_catalog.=) tb_price.model
		AND p.valid_from OPERATOR(pg_catalog.<=) tb_price.at
	ORDER BY p.valid_from DESC
	LIMIT 1;
	IF NOT FOUND THEN
		SELECT pg_catalog.min(p.valid_from) INTO first_from
		FROM @extschema@.tb_prices AS p
		WHERE p.model OPERATOR(pg_catalog.=) tb_price.model;
		RAISE EXCEPTION 'no price for model "%" at %', tb_price.model, tb_price.at
			USING ERRCODE = 'undefined_object',
			DETAIL = CASE WHEN first_from IS NULL
				THEN 'tb_prices has no row for this model.'
				ELSE pg_catalog.format('Its first price is in force from %s.', first_from) END,
			HINT = 'The database''s administrator adds prices to tb_prices (model, currency, input_per_million, output_per_million, cached_input_per_million, valid_from).';
	END IF;
END $$;

COMMENT ON FUNCTION @extschema@.tb_price(text, timestamptz) IS
	'the prices of a model in force at a moment (now by default), with their currency and since when; a NULL cached price is given as the input price';

--
-- What a call costs: input_tokens counts every input token, those read
-- from the provider's cache included (OpenAI's prompt_tokens, Gemini's
-- promptTokenCount); cached_input_tokens is how many of them were, charged
-- at the cached price.  Exact: numeric, multiplied, never divided or
-- rounded (trailing zeros trimmed).
--
CREATE FUNCTION @extschema@.tb_cost(model text, input_tokens bigint,
	output_tokens bigint DEFAULT 0, cached_input_tokens bigint DEFAULT 0,
	at timestamptz DEFAULT pg_catalog.now())
RETURNS numeric
LANGUAGE plpgsql STABLE CALLED ON NULL INPUT PARALLEL SAFE
AS $$
DECLARE
	price record;
BEGIN
	IF tb_cost.model IS NULL OR tb_cost.input_tokens IS NULL OR tb_cost.output_tokens IS NULL
		OR tb_cost.cached_input_tokens IS NULL OR tb_cost.at IS NULL THEN
		RAISE EXCEPTION 'argument "%" of tb_cost must not be NULL',
			CASE WHEN tb_cost.model IS NULL THEN 'model'
				WHEN tb_cost.input_tokens IS NULL THEN 'input_tokens'
				WHEN tb_cost.output_tokens IS NULL THEN 'output_tokens'
				WHEN tb_cost.cached_input_tokens IS NULL THEN 'cached_input_tokens'
				ELSE 'at' END
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF tb_cost.input_tokens OPERATOR(pg_catalog.<) 0 OR tb_cost.output_tokens OPERATOR(pg_catalog.<) 0
		OR tb_cost.cached_input_tokens OPERATOR(pg_catalog.<) 0 THEN
		RAISE EXCEPTION '%',
			CASE WHEN tb_cost.input_tokens OPERATOR(pg_catalog.<) 0
				THEN pg_catalog.format('input_tokens must be 0 or more, not %s', tb_cost.input_tokens)
				WHEN tb_cost.output_tokens OPERATOR(pg_catalog.<) 0
				THEN pg_catalog.format('output_tokens must be 0 or more, not %s', tb_cost.output_tokens)
				ELSE pg_catalog.format('cached_input_tokens must be 0 or more, not %s',
					tb_cost.cached_input_tokens) END
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF tb_cost.cached_input_tokens OPERATOR(pg_catalog.>) tb_cost.input_tokens THEN
		RAISE EXCEPTION 'cached_input_tokens % exceeds input_tokens %',
			tb_cost.cached_input_tokens, tb_cost.input_tokens
			USING ERRCODE = 'invalid_parameter_value',
			DETAIL = 'input_tokens counts every input token, those read from the cache included.',
			HINT = 'A provider that reports cache reads apart from its input tokens (Anthropic''s cache_read_input_tokens) needs them added to input_tokens.';
	END IF;
	-- tb_price's lookup, here rather than through it: a second function
	-- call would cost as much as the lookup
	SELECT p.input_per_million, p.output_per_million,
		coalesce(p.cached_input_per_million, p.input_per_million) AS cached_input_per_million
	INTO price
	FROM @extschema@.tb_prices AS p
	WHERE p.model OPERATOR(pg_catalog.=) tb_cost.model
		AND p.valid_from OPERATOR(pg_catalog.<=) tb_cost.at
	ORDER BY p.valid_from DESC
	LIMIT 1;
	IF NOT FOUND THEN
		-- its error, which says what there is
		PERFORM @extschema@.tb_price(tb_cost.model, tb_cost.at);
	END IF;
	-- OPERATOR() has no precedence of its own: every product in parentheses
	RETURN pg_catalog.trim_scale(
		((((tb_cost.input_tokens OPERATOR(pg_catalog.-) tb_cost.cached_input_tokens)
			OPERATOR(pg_catalog.*) price.input_per_million)
		 OPERATOR(pg_catalog.+) (tb_cost.cached_input_tokens
			OPERATOR(pg_catalog.*) price.cached_input_per_million))
		 OPERATOR(pg_catalog.+) (tb_cost.output_tokens
			OPERATOR(pg_catalog.*) price.output_per_million))
		OPERATOR(pg_catalog.*) 0.000001);
END $$;

COMMENT ON FUNCTION @extschema@.tb_cost(text, bigint, bigint, bigint, timestamptz) IS
	'what a call costs, exactly, in its model''s currency, by the price in force at a moment (now by default): input_tokens includes cached_input_tokens';

-- 1.9: tb_buckets' rows are checked by its triggers rather than by its
-- CHECK constraint, which PostgreSQL parses anew for every statement that
-- writes a row: a sixth of a grant's instructions, for a check the
-- grant's C code has made.  tb_buckets_changed() checks the row as
-- tb_check_bucket() did (the same errors, 23514): before every INSERT
-- (tb_buckets_check), and after every UPDATE that sets a setting (name,
-- capacity, refill_rate, memory), which a grant does not, so its trigger
-- now fires for every row (its C code hands only memory buckets' changes
-- to shared memory, as its WHEN did).  An AFTER trigger there: any BEFORE
-- UPDATE trigger would lock each row before every UPDATE of it, grants
-- included.
--
ALTER TABLE @extschema@.tb_buckets DROP CONSTRAINT tb_buckets_check;
CREATE TRIGGER tb_buckets_check
	BEFORE INSERT ON @extschema@.tb_buckets
	FOR EACH ROW EXECUTE FUNCTION @extschema@.tb_buckets_changed('check');
CREATE OR REPLACE TRIGGER tb_buckets_memory_update
	AFTER UPDATE OF name, capacity, refill_rate, memory ON @extschema@.tb_buckets
	FOR EACH ROW EXECUTE FUNCTION @extschema@.tb_buckets_changed();
COMMENT ON FUNCTION @extschema@.tb_check_bucket(text, float8, float8, float8, timestamptz) IS
	'the check of a row of tb_buckets (its triggers): true, or an error naming the bad column';
COMMENT ON FUNCTION @extschema@.tb_buckets_changed() IS
	'trigger: checks the rows written and hands changes to memory buckets'' rows to shared memory at commit';

--
-- 1.9: a hierarchy of buckets.  The DBA gives a bucket a parent, or every
-- key of a template one (its placeholders {1}, {2}, ... take the key's
-- ':'-separated fields after the prefix, {*} all of it), and a call on a
-- bucket charges it and every ancestor, all or nothing, without the
-- caller naming them.  A bucket's own row wins over a template's, a
-- longer prefix over a shorter one.  The DBA's, like tb_buckets, and
-- dumped; each session keeps a copy, read again when a change commits
-- (tb_parents_changed), which also refuses a cycle or a chain of more
-- than 8 levels wherever one is known when it is written (a template's
-- keys are checked when called).
--
CREATE FUNCTION @extschema@.tb_check_parent(child text, parent text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'tb_check_parent'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.tb_check_parent(text, text) IS
	'the CHECK constraint of tb_parents: true, or an error saying what is wrong with a name or a placeholder';

CREATE TABLE @extschema@.tb_parents (
	child text PRIMARY KEY,
	parent text NOT NULL,
	CONSTRAINT tb_parents_check CHECK (@extschema@.tb_check_parent(child, parent))
);

COMMENT ON TABLE @extschema@.tb_parents IS
	'the parent of each bucket, or of each key of a template, charged with it';
COMMENT ON COLUMN @extschema@.tb_parents.child IS
	'a bucket''s name, or a template''s (ending in *) for each key it makes';
COMMENT ON COLUMN @extschema@.tb_parents.parent IS
	'the parent bucket''s name; for a template, {N} is the key''s N-th field after the prefix, {*} all of it';

SELECT pg_catalog.pg_extension_config_dump('@extschema@.tb_parents', '');

CREATE FUNCTION @extschema@.tb_parents_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'tb_parents_changed'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_parents_changed() IS
	'the trigger of tb_parents: refuses cycles and chains too deep, and tells every session, once the change commits, to read parents again';

CREATE TRIGGER tb_parents_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.tb_parents
	FOR EACH STATEMENT
	EXECUTE FUNCTION @extschema@.tb_parents_changed();

REVOKE ALL ON FUNCTION @extschema@.tb_parents_changed() FROM PUBLIC;

-- tb_parents' row of a child written or, with a NULL parent, deleted; as
-- its caller, who must be allowed to write tb_parents (the owner)
CREATE FUNCTION @extschema@.tb_set_parent(child text, parent text)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE
AS $$
BEGIN
	IF tb_set_parent.child IS NULL THEN
		RAISE EXCEPTION 'argument "child" of tb_set_parent must not be NULL'
			USING ERRCODE = 'null_value_not_allowed',
			HINT = 'A NULL parent removes a child''s parent; the child is always named.';
	END IF;
	IF tb_set_parent.parent IS NULL THEN
		DELETE FROM @extschema@.tb_parents AS p
		WHERE p.child OPERATOR(pg_catalog.=) tb_set_parent.child;
	ELSE
		INSERT INTO @extschema@.tb_parents AS p (child, parent)
		VALUES (tb_set_parent.child, tb_set_parent.parent)
		ON CONFLICT ON CONSTRAINT tb_parents_pkey DO UPDATE SET parent = EXCLUDED.parent;
	END IF;
END $$;

COMMENT ON FUNCTION @extschema@.tb_set_parent(text, text) IS
	'give a bucket, or each key of a template, a parent charged with it (NULL: none)';

REVOKE ALL ON FUNCTION @extschema@.tb_set_parent(text, text) FROM PUBLIC;

--
-- 1.9: tb_try and tb_peek end with denied_by, the bucket or parent that
-- refused.  Replacing a function drops the grants made on it, so they are
-- saved first, as the statements that give them again.
--
WITH replaced (f) AS (VALUES
	('@extschema@.tb_try(text, float8)'::pg_catalog.regprocedure),
	('@extschema@.tb_try(text, float8, float8)'),
	('@extschema@.tb_peek(text, float8)'),
	('@extschema@.tb_peek(text, float8, float8)')),
grants (step, stmt) AS (
	SELECT 1, pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f.f)
	FROM replaced AS f JOIN pg_catalog.pg_proc AS p ON p.oid OPERATOR(pg_catalog.=) f.f
	WHERE p.proacl IS NOT NULL
	UNION ALL
	SELECT 2, pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', f.f,
		CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			ELSE pg_catalog.quote_ident(r.rolname) END)
	FROM replaced AS f JOIN pg_catalog.pg_proc AS p ON p.oid OPERATOR(pg_catalog.=) f.f
	CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) AS a
	LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
	WHERE a.grantee OPERATOR(pg_catalog.<>) p.proowner)
SELECT pg_catalog.set_config('tokenbucket_upgrade.grants',
	coalesce(pg_catalog.string_agg(stmt, E'\n' ORDER BY step), ''), false)
FROM grants;

DROP FUNCTION @extschema@.tb_try(text, float8);
DROP FUNCTION @extschema@.tb_try(text, float8, float8);
DROP FUNCTION @extschema@.tb_peek(text, float8);
DROP FUNCTION @extschema@.tb_peek(text, float8, float8);

CREATE FUNCTION @extschema@.tb_try(name text, cost float8 DEFAULT 1,
	OUT granted boolean, OUT remaining float8,
	OUT retry_after interval, OUT reset_after interval,
	OUT retry_after_seconds float8, OUT reset_after_seconds float8,
	OUT denied_by text)
RETURNS record
AS 'MODULE_PATHNAME', 'tb_try'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_try(text, float8) IS
	'tb_acquire with the tokens left, the wait until cost tokens are there, the wait until full (as intervals and in seconds), and the bucket or parent that refused';

CREATE FUNCTION @extschema@.tb_peek(name text, cost float8 DEFAULT 1,
	OUT granted boolean, OUT remaining float8,
	OUT retry_after interval, OUT reset_after interval,
	OUT retry_after_seconds float8, OUT reset_after_seconds float8,
	OUT denied_by text)
RETURNS record
AS 'MODULE_PATHNAME', 'tb_peek'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.tb_peek(text, float8) IS
	'what tb_try would answer now, without taking, locking or writing anything';

CREATE FUNCTION @extschema@.tb_try(name text, cost float8, reserve float8,
	OUT granted boolean, OUT remaining float8,
	OUT retry_after interval, OUT reset_after interval,
	OUT retry_after_seconds float8, OUT reset_after_seconds float8,
	OUT denied_by text)
RETURNS record
AS 'MODULE_PATHNAME', 'tb_try'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_try(text, float8, float8) IS
	'tb_acquire with a reserve, with the tokens left, the wait until cost tokens and the reserve are there, the wait until full, and the bucket or parent that refused';

CREATE FUNCTION @extschema@.tb_peek(name text, cost float8, reserve float8,
	OUT granted boolean, OUT remaining float8,
	OUT retry_after interval, OUT reset_after interval,
	OUT retry_after_seconds float8, OUT reset_after_seconds float8,
	OUT denied_by text)
RETURNS record
AS 'MODULE_PATHNAME', 'tb_peek'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL RESTRICTED;

COMMENT ON FUNCTION @extschema@.tb_peek(text, float8, float8) IS
	'what tb_try with a reserve would answer now, without taking, locking or writing anything';

-- the grants saved above, given again to the replaced functions
DO $$
DECLARE
	stmt text;
BEGIN
	FOREACH stmt IN ARRAY pg_catalog.string_to_array(
		pg_catalog.current_setting('tokenbucket_upgrade.grants'), E'\n')
	LOOP
		EXECUTE stmt;
	END LOOP;
END $$;
