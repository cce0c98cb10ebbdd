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
	since timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	CONSTRAINT tb_parents_check CHECK (@extschema@.tb_check_parent(child, parent))
);

COMMENT ON TABLE @extschema@.tb_parents IS
	'the parent of each bucket, or of each key of a template, charged with it';
COMMENT ON COLUMN @extschema@.tb_parents.child IS
	'a bucket''s name, or a template''s (ending in *) for each key it makes';
COMMENT ON COLUMN @extschema@.tb_parents.parent IS
	'the parent bucket''s name; for a template, {N} is the key''s N-th field after the prefix, {*} all of it';
COMMENT ON COLUMN @extschema@.tb_parents.since IS
	'when the row was written: a settle or refund gives back up it only for a reservation made since (-infinity: before every reservation)';

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

-- a row's since when an UPDATE changes its child or parent (and does not
-- set since itself): the moment of the change, as an INSERT's default is
CREATE FUNCTION @extschema@.tb_parents_since()
RETURNS trigger
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
BEGIN
	IF (NEW.child, NEW.parent) IS DISTINCT FROM (OLD.child, OLD.parent) AND
		NEW.since IS NOT DISTINCT FROM OLD.since THEN
		NEW.since := pg_catalog.clock_timestamp();
	END IF;
	RETURN NEW;
END $$;

COMMENT ON FUNCTION @extschema@.tb_parents_since() IS
	'the trigger of tb_parents that writes since when an UPDATE changes a row''s child or parent';

CREATE TRIGGER tb_parents_since
	BEFORE UPDATE ON @extschema@.tb_parents
	FOR EACH ROW
	EXECUTE FUNCTION @extschema@.tb_parents_since();

REVOKE ALL ON FUNCTION @extschema@.tb_parents_since() FROM PUBLIC;

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

-- tb_refund and tb_settle told when the reservation was made (now() of
-- the transaction that reserved): they give back up each link of
-- tb_parents written before it, and stop at the first written since (the
-- reservation may have been charged to another parent).  Without it
-- (the forms above, or NULL) to the bucket alone, but up links whose
-- since is -infinity.  Not for PUBLIC, like the forms above.
CREATE FUNCTION @extschema@.tb_refund(name text, tokens float8, reserved_at timestamptz)
RETURNS float8
AS 'MODULE_PATHNAME', 'tb_refund'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_refund(text, float8, timestamptz) IS
	'give unused tokens of a reservation made at reserved_at back (capped at capacity), up the parents it was charged to; returns the tokens held';

CREATE FUNCTION @extschema@.tb_settle(name text, reserved float8, used float8,
	reserved_at timestamptz)
RETURNS float8
AS 'MODULE_PATHNAME', 'tb_settle'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_settle(text, float8, float8, timestamptz) IS
	'settle a reservation made at reserved_at: refund reserved - used up the parents it was charged to, or take used - reserved more up every parent; returns the tokens held';

REVOKE ALL ON FUNCTION @extschema@.tb_refund(text, float8, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.tb_settle(text, float8, float8, timestamptz) FROM PUBLIC;

--
-- 1.9: tb_try and tb_peek end with denied_by, the bucket or parent that
-- refused.  Replacing a function drops the privileges on it, so each one's
-- owner and ACL are saved first and given back exactly below.
--
SELECT pg_catalog.set_config('tokenbucket_upgrade.acls', coalesce(pg_catalog.string_agg(
		pg_catalog.concat_ws(E'\t', f.f, p.proowner::pg_catalog.regrole, p.proacl), E'\n'), ''), true)
FROM (VALUES ('@extschema@.tb_try(text, float8)'), ('@extschema@.tb_try(text, float8, float8)'),
	('@extschema@.tb_peek(text, float8)'), ('@extschema@.tb_peek(text, float8, float8)')) AS f (f)
JOIN pg_catalog.pg_proc AS p ON p.oid OPERATOR(pg_catalog.=) f.f::pg_catalog.regprocedure;

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

-- the owners and privileges saved above, given again to the replaced
-- functions: from no privilege at all, each entry of the ACL in its order,
-- granted by its grantor (a superuser's grant is the owner's), with its
-- grant option; a function that had the default ACL (NULL) keeps it
DO $$
DECLARE
	saved text;
	f pg_catalog.regprocedure;
	owner pg_catalog.regrole;
	acl pg_catalog.aclitem[];
	item record;
	role text := pg_catalog.current_setting('role');
BEGIN
	FOREACH saved IN ARRAY pg_catalog.string_to_array(
		pg_catalog.current_setting('tokenbucket_upgrade.acls'), E'\n')
	LOOP
		f := pg_catalog.split_part(saved, E'\t', 1);
		owner := pg_catalog.split_part(saved, E'\t', 2);
		acl := NULLIF(pg_catalog.split_part(saved, E'\t', 3), '');
		EXECUTE pg_catalog.format('ALTER FUNCTION %s OWNER TO %s', f, owner);
		CONTINUE WHEN acl IS NULL;
		EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC, %s', f, owner);
		FOR item IN
			SELECT a.grantor, a.is_grantable, g.rolname AS grantor_name,
				CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
					ELSE pg_catalog.quote_ident(r.rolname) END AS grantee
			FROM pg_catalog.aclexplode(acl) WITH ORDINALITY AS a
			JOIN pg_catalog.pg_roles AS g ON g.oid OPERATOR(pg_catalog.=) a.grantor
			LEFT JOIN pg_catalog.pg_roles AS r ON r.oid OPERATOR(pg_catalog.=) a.grantee
			ORDER BY a.ordinality
		LOOP
			IF item.grantor OPERATOR(pg_catalog.<>) owner THEN
				PERFORM pg_catalog.set_config('role', item.grantor_name, true);
			END IF;
			EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', f, item.grantee,
				CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
			PERFORM pg_catalog.set_config('role', role, true);
		END LOOP;
	END LOOP;
END $$;

-- 1.9: quotas over calendar periods.  A period bucket (a quota) gets its
-- tokens back all at once at each period's start, by the calendar of a
-- time zone: refill_rate is then the tokens added at each start, not per
-- second.  period: whole months, whole days, or a duration (NULL: a
-- continuous bucket); period_anchor: a local time at which a period
-- starts; time_zone: the zone of that calendar.  The helpers take them
-- as three more arguments, NULL for a continuous bucket: forms that are
-- not STRICT (NULL in another argument still gives NULL).
--
ALTER TABLE @extschema@.tb_buckets ADD COLUMN period interval,
	ADD COLUMN period_anchor timestamp, ADD COLUMN time_zone text;

CREATE FUNCTION @extschema@.tb_take(capacity float8, refill_rate float8,
	deficit float8, updated_at timestamptz, paused_until timestamptz,
	cost float8, at timestamptz, reserve float8, period interval,
	period_anchor timestamp, time_zone text)
RETURNS float8
AS 'MODULE_PATHNAME', 'tb_take'
LANGUAGE C IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.tb_take(float8, float8, float8, timestamptz, timestamptz, float8, timestamptz, float8, interval, timestamp, text) IS
	'deficit after taking cost tokens at a moment, leaving reserve x capacity, from a bucket with a period (NULL: continuous), or NULL when it is paused or does not hold them';

CREATE FUNCTION @extschema@.tb_tokens(capacity float8, refill_rate float8,
	deficit float8, updated_at timestamptz, at timestamptz, period interval,
	period_anchor timestamp, time_zone text)
RETURNS float8
AS 'MODULE_PATHNAME', 'tb_tokens'
LANGUAGE C IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.tb_tokens(float8, float8, float8, timestamptz, timestamptz, interval, timestamp, text) IS
	'tokens a bucket with a period (NULL: continuous) holds at a moment';

CREATE FUNCTION @extschema@.tb_full_at(capacity float8, refill_rate float8,
	deficit float8, updated_at timestamptz, period interval,
	period_anchor timestamp, time_zone text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'tb_full_at'
LANGUAGE C IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.tb_full_at(float8, float8, float8, timestamptz, interval, timestamp, text) IS
	'when a bucket with a period (NULL: continuous) is, or was, full';

CREATE FUNCTION @extschema@.tb_ready_at(capacity float8, refill_rate float8,
	deficit float8, updated_at timestamptz, paused_until timestamptz,
	cost float8, at timestamptz, period interval, period_anchor timestamp,
	time_zone text)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'tb_ready_at'
LANGUAGE C IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.tb_ready_at(float8, float8, float8, timestamptz, timestamptz, float8, timestamptz, interval, timestamp, text) IS
	'the first moment, not before at, at which a bucket with a period (NULL: continuous) grants cost tokens';

CREATE FUNCTION @extschema@.tb_resize(capacity float8, refill_rate float8,
	deficit float8, updated_at timestamptz, new_capacity float8, at timestamptz,
	period interval, period_anchor timestamp, time_zone text)
RETURNS float8
AS 'MODULE_PATHNAME', 'tb_resize'
LANGUAGE C IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.tb_resize(float8, float8, float8, timestamptz, float8, timestamptz, interval, timestamp, text) IS
	'deficit after giving a bucket with a period (NULL: continuous) a new capacity at a moment, keeping its tokens, capped';

-- the start of the period a moment falls in (n: of the n-th after it)
CREATE FUNCTION @extschema@.tb_period_start(period interval,
	period_anchor timestamp, time_zone text, at timestamptz, n integer DEFAULT 0)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'tb_period_start'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

COMMENT ON FUNCTION @extschema@.tb_period_start(interval, timestamp, text, timestamptz, integer) IS
	'the start of the period a moment falls in, or with n, of the n-th period after it, by a period bucket''s calendar';

COMMENT ON COLUMN @extschema@.tb_buckets.period IS
	'a period bucket''s period: whole months, whole days, or a duration (NULL: refills continuously)';
COMMENT ON COLUMN @extschema@.tb_buckets.period_anchor IS
	'a local time at which a period starts, in time_zone';
COMMENT ON COLUMN @extschema@.tb_buckets.time_zone IS
	'the time zone of a period bucket''s calendar';
COMMENT ON COLUMN @extschema@.tb_buckets.refill_rate IS
	'tokens added per second (a period bucket''s: at each period''s start)';

-- the row checks (the trigger's) cover a quota's settings too
CREATE OR REPLACE TRIGGER tb_buckets_memory_update
	AFTER UPDATE OF name, capacity, refill_rate, memory, period, period_anchor, time_zone
	ON @extschema@.tb_buckets
	FOR EACH ROW EXECUTE FUNCTION @extschema@.tb_buckets_changed();

--
-- A quota: budget tokens at each start of period (by the calendar of
-- time_zone, from the local time starts: by default the start of the
-- current month, day or hour), at most carry_max more carried over from
-- earlier periods; it starts with budget tokens.  A name ending in * is a
-- template whose buckets are such quotas.  The DBA's, like tb_create.
--
CREATE FUNCTION @extschema@.tb_create_quota(name text, budget float8, period interval,
	time_zone text DEFAULT 'UTC', starts timestamp DEFAULT NULL,
	carry_max float8 DEFAULT 0, memory boolean DEFAULT false)
RETURNS void
AS 'MODULE_PATHNAME', 'tb_create_quota'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_create_quota(text, float8, interval, text, timestamp, float8, boolean) IS
	'a quota: a bucket that gets budget tokens at each start of a calendar period in a time zone, carrying over at most carry_max';

REVOKE ALL ON FUNCTION @extschema@.tb_create_quota(text, float8, interval, text, timestamp, float8, boolean) FROM PUBLIC;

--
-- tb_status with each bucket's period: period, the start and end of the
-- period it is in now, and its time zone (NULL for continuous buckets and
-- for limits).  A memory template's buckets have their template's.
--
CREATE OR REPLACE VIEW @extschema@.tb_status AS
WITH m AS MATERIALIZED (
	SELECT * FROM @extschema@.tb_memory_buckets()
), ml AS MATERIALIZED (
	SELECT * FROM @extschema@.tb_memory_leases()
), e AS (
	SELECT @extschema@.tb_memory_empty_at() AS empty_at
), b AS (
	-- table buckets, and every template
	SELECT b.name, b.capacity, b.refill_rate, b.deficit, b.updated_at,
		b.paused_until, b.template, b.memory, b.period, b.period_anchor, b.time_zone
	FROM @extschema@.tb_buckets AS b
	WHERE NOT b.memory OR b.name OPERATOR(pg_catalog.~~) '%*'
	UNION ALL
	-- named memory buckets: their state, or the state they would start with
	SELECT b.name, b.capacity, b.refill_rate,
		CASE WHEN m.name IS NOT NULL THEN m.deficit
			WHEN e.empty_at OPERATOR(pg_catalog.=) '-infinity' THEN
				CASE WHEN b.period IS NULL THEN 0
					ELSE b.capacity OPERATOR(pg_catalog.-) b.refill_rate END
			ELSE b.capacity END,
		CASE WHEN m.name IS NOT NULL THEN m.updated_at
			WHEN e.empty_at OPERATOR(pg_catalog.=) '-infinity' THEN b.updated_at
			ELSE e.empty_at END,
		coalesce(m.paused_until, '-infinity'), NULL, true,
		b.period, b.period_anchor, b.time_zone
	FROM @extschema@.tb_buckets AS b
	CROSS JOIN e
	LEFT JOIN m ON m.name OPERATOR(pg_catalog.=) b.name
	WHERE b.memory AND b.name OPERATOR(pg_catalog.!~~) '%*'
	UNION ALL
	-- buckets made from memory templates
	SELECT m.name, m.capacity, m.refill_rate, m.deficit, m.updated_at,
		m.paused_until, m.template, true, t.period, t.period_anchor, t.time_zone
	FROM m
	LEFT JOIN @extschema@.tb_buckets AS t ON t.name OPERATOR(pg_catalog.=) m.template
	WHERE m.template IS NOT NULL
)
SELECT b.name,
	b.capacity,
	b.refill_rate,
	s.tokens,
	@extschema@.tb_full_at(b.capacity, b.refill_rate, b.deficit, b.updated_at,
		b.period, b.period_anchor, b.time_zone) AS full_at,
	CASE WHEN b.paused_until OPERATOR(pg_catalog.>) s.at THEN b.paused_until END AS paused_until,
	GREATEST(0, OPERATOR(pg_catalog.-) s.tokens) AS debt,
	b.template,
	b.name OPERATOR(pg_catalog.~~) '%*' AS is_template,
	b.memory,
	NULL::integer AS max_in_flight,
	NULL::integer AS in_flight,
	b.period,
	@extschema@.tb_period_start(b.period, b.period_anchor, b.time_zone, s.at) AS period_start,
	@extschema@.tb_period_start(b.period, b.period_anchor, b.time_zone, s.at, 1) AS period_end,
	b.time_zone
FROM b,
	LATERAL (SELECT @extschema@.tb_tokens(b.capacity, b.refill_rate, b.deficit,
			b.updated_at, c.at, b.period, b.period_anchor, b.time_zone) AS tokens, c.at
		FROM (SELECT pg_catalog.clock_timestamp() AS at) AS c) AS s
UNION ALL
SELECT l.name, NULL, NULL, NULL, NULL, NULL, NULL, l.template,
	l.name OPERATOR(pg_catalog.~~) '%*', l.memory, l.max_in_flight,
	CASE WHEN l.memory THEN
		coalesce((SELECT pg_catalog.sum(h.slots) FROM ml AS h
			WHERE h.name OPERATOR(pg_catalog.=) l.name), 0)::integer
	ELSE
		(SELECT pg_catalog.count(*) FROM @extschema@.tb_lease_slots AS h
			WHERE h.name OPERATOR(pg_catalog.=) l.name AND h.lease IS NOT NULL
				AND (h.expires IS NULL OR h.expires OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
				AND @extschema@.tb_holder_alive(h.pid, h.started, h.xid))::integer
	END,
	NULL, NULL, NULL, NULL
FROM (
	-- limits and templates of limits
	SELECT n.name, NULL::text AS template, n.max_in_flight, n.memory
	FROM @extschema@.tb_limits AS n
	UNION ALL
	-- names templates made, with their template's settings
	SELECT k.name, t.name, t.max_in_flight, t.memory
	FROM (SELECT DISTINCT s.name FROM @extschema@.tb_lease_slots AS s
		UNION SELECT h.name FROM ml AS h) AS k
	CROSS JOIN LATERAL (
		SELECT t.name, t.max_in_flight, t.memory FROM @extschema@.tb_limits AS t
		WHERE t.name OPERATOR(pg_catalog.~~) '%*'
			AND pg_catalog.starts_with(k.name, pg_catalog.left(t.name, -1))
		ORDER BY pg_catalog.octet_length(t.name) DESC LIMIT 1) AS t
	WHERE NOT EXISTS (SELECT FROM @extschema@.tb_limits AS o
		WHERE o.name OPERATOR(pg_catalog.=) k.name)
) AS l;

COMMENT ON VIEW @extschema@.tb_status IS
	'each bucket''s settings, the tokens it holds now, when it is full, its pause, its debt, its template, whether it is a memory bucket, and a quota''s period, its current period''s start and end and its time zone; and each limit''s max_in_flight and the slots held now';

--
-- 1.9: alerts at a share of a quota's budget.  tb_alerts holds the DBA's
-- thresholds (a named quota's, or a quota template's for each of its
-- keys): threshold t is reached when the quota holds (1 - t) x its budget
-- (refill_rate) or less.  A charge that leaves a quota there writes the
-- event into tb_alert_events, once per quota, period and threshold (the
-- unique key), in the charge's own transaction, and sends it with NOTIFY
-- on the channel tb_alerts as JSON.  Both tables are the DBA's and
-- dumped; the events are written as the extension's owner.
--
CREATE TABLE @extschema@.tb_alerts (
	bucket text NOT NULL,
	threshold float8 NOT NULL
		CONSTRAINT tb_alerts_threshold_check
		CHECK (threshold OPERATOR(pg_catalog.>) 0 AND threshold OPERATOR(pg_catalog.<=) 1),
	PRIMARY KEY (bucket, threshold)
);

COMMENT ON TABLE @extschema@.tb_alerts IS
	'thresholds of quotas (a name, or a template for its keys): shares of a period''s budget used up that write an event once a period';
COMMENT ON COLUMN @extschema@.tb_alerts.bucket IS 'a quota''s name, or a quota template''s (''user:*'')';
COMMENT ON COLUMN @extschema@.tb_alerts.threshold IS
	'a share of the budget, above 0 and at most 1: reached when the quota holds (1 - threshold) x budget or less';

CREATE TABLE @extschema@.tb_alert_events (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	bucket text NOT NULL,
	threshold float8 NOT NULL,
	period_start timestamptz NOT NULL,
	period_end timestamptz NOT NULL,
	budget float8,
	remaining float8,
	at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	UNIQUE (bucket, period_start, threshold)
);

COMMENT ON TABLE @extschema@.tb_alert_events IS
	'one row per quota, period and threshold reached, written by the charge that reached it, in its transaction; also sent with NOTIFY tb_alerts';
COMMENT ON COLUMN @extschema@.tb_alert_events.bucket IS 'the quota (a template''s key: the key)';
COMMENT ON COLUMN @extschema@.tb_alert_events.remaining IS
	'the tokens the quota held after the charge (below 0: in debt)';
COMMENT ON COLUMN @extschema@.tb_alert_events.at IS 'when the charge wrote it';

-- pg_dump keeps the thresholds and the events, and where the ids go on from
SELECT pg_catalog.pg_extension_config_dump('@extschema@.tb_alerts', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.tb_alert_events', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.tb_alert_events_id_seq', '');

-- a change of thresholds makes every session read them again once it commits
CREATE FUNCTION @extschema@.tb_alerts_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'tb_alerts_changed'
LANGUAGE C;

COMMENT ON FUNCTION @extschema@.tb_alerts_changed() IS
	'trigger: tells every session that the thresholds of tb_alerts changed, when the transaction commits';

CREATE TRIGGER tb_alerts_changed
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON @extschema@.tb_alerts
	FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.tb_alerts_changed();

REVOKE ALL ON FUNCTION @extschema@.tb_alerts_changed() FROM PUBLIC;

-- a quota's (or quota template's) thresholds, replacing its others;
-- empty or NULL: none.  The DBA's, like tb_create_quota.
CREATE FUNCTION @extschema@.tb_set_alerts(bucket text, thresholds float8[])
RETURNS void
AS 'MODULE_PATHNAME', 'tb_set_alerts'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_set_alerts(text, float8[]) IS
	'sets the alert thresholds of a quota or quota template (shares of its budget, above 0 and at most 1), replacing its others; empty or NULL: none';

REVOKE ALL ON FUNCTION @extschema@.tb_set_alerts(text, float8[]) FROM PUBLIC;

--
-- Each quota's spend in its current period: its budget (refill_rate),
-- what it holds (remaining; below 0 in debt), what is spent of the budget
-- (budget - remaining, at least 0: debt carried in counts as spent,
-- tokens carried over as extra), and the period.  Quotas made from
-- templates included; templates not.  Readable as tb_status is.
--
CREATE VIEW @extschema@.tb_quotas AS
SELECT s.name,
	s.refill_rate AS budget,
	s.capacity,
	s.tokens AS remaining,
	GREATEST(0, s.refill_rate OPERATOR(pg_catalog.-) s.tokens) AS spent,
	s.period,
	s.time_zone,
	s.period_start,
	s.period_end,
	s.memory,
	s.template
FROM @extschema@.tb_status AS s
WHERE s.period IS NOT NULL AND NOT s.is_template;

COMMENT ON VIEW @extschema@.tb_quotas IS
	'each quota''s budget, what it holds and has spent of it in its current period, and that period''s start and end';

--
-- tb_stats with a quota's spend, for Prometheus: spent, remaining and the
-- end of its period, at the end (NULL for other buckets and for limits).
--
CREATE OR REPLACE VIEW @extschema@.tb_stats AS
WITH c AS MATERIALIZED (
	SELECT * FROM @extschema@.tb_stats_counters()
	UNION ALL
	SELECT * FROM @extschema@.tb_memory_counters()
), l AS MATERIALIZED (
	SELECT * FROM @extschema@.tb_limit_counters()
), s AS MATERIALIZED (
	SELECT * FROM @extschema@.tb_status AS s WHERE NOT s.is_template
)
SELECT s.name,
	s.memory,
	s.template,
	s.capacity,
	s.refill_rate,
	coalesce(c.granted, 0) AS granted,
	coalesce(c.granted_tokens, 0) AS granted_tokens,
	coalesce(c.denied, 0) AS denied,
	coalesce(c.waited, 0) AS waited,
	coalesce(c.wait_seconds, 0) AS wait_seconds,
	coalesce(c.timeouts, 0) AS timeouts,
	coalesce(c.refunded_tokens, 0) AS refunded_tokens,
	coalesce(c.pauses, 0) AS pauses,
	coalesce(c.since, i.since) AS since,
	s.tokens,
	coalesce(c.cancelled, 0) AS cancelled,
	NULL::integer AS max_in_flight,
	NULL::integer AS in_flight,
	NULL::bigint AS released,
	NULL::bigint AS ended,
	NULL::bigint AS expired,
	CASE WHEN s.period IS NOT NULL
		THEN GREATEST(0, s.refill_rate OPERATOR(pg_catalog.-) s.tokens) END AS spent,
	CASE WHEN s.period IS NOT NULL THEN s.tokens END AS remaining,
	s.period_end
FROM s
CROSS JOIN (SELECT c.since FROM c WHERE c.name IS NULL) AS i
LEFT JOIN c ON c.name OPERATOR(pg_catalog.=) CASE
	WHEN pg_catalog.octet_length(s.name) OPERATOR(pg_catalog.<=) 128 THEN s.name
	ELSE @extschema@.tb_stats_key(s.name) END
WHERE s.max_in_flight IS NULL
UNION ALL
SELECT s.name,
	s.memory,
	s.template,
	NULL,
	NULL,
	coalesce(l.granted, 0),
	coalesce(l.slots, 0)::float8,
	coalesce(l.refused, 0),
	coalesce(l.waited, 0),
	coalesce(l.wait_seconds, 0),
	coalesce(l.timeouts, 0),
	0::float8,
	0::bigint,
	coalesce(l.since, i.since),
	NULL,
	coalesce(l.cancelled, 0),
	s.max_in_flight,
	s.in_flight,
	coalesce(l.released, 0),
	coalesce(l.ended, 0),
	coalesce(l.expired, 0),
	NULL,
	NULL,
	NULL
FROM s
CROSS JOIN (SELECT l.since FROM l WHERE l.name IS NULL) AS i
LEFT JOIN l ON l.name OPERATOR(pg_catalog.=) CASE
	WHEN pg_catalog.octet_length(s.name) OPERATOR(pg_catalog.<=) 128 THEN s.name
	ELSE @extschema@.tb_stats_key(s.name) END
WHERE s.max_in_flight IS NOT NULL;

COMMENT ON VIEW @extschema@.tb_stats IS
	'each bucket''s and limit''s counters since the server started (kept across a clean restart) or tb_stats_reset, with its settings and what it holds now; a quota''s spend, remaining tokens and period end';

--
-- tb_create_quota's quota as a set-up that can be run again, as tb_ensure
-- is tb_create's: made if missing ('created'), given these settings if it
-- has others ('changed': a new budget or carry keeps the tokens held,
-- capped; a table quota's new calendar counts from now on), or left as it
-- is ('unchanged'; a NULL starts keeps its anchor for the same period).
-- A memory quota's calendar, where tokens live, and a continuous bucket
-- of that name are not changed in place: refused.  The DBA's, like
-- tb_create_quota.
--
CREATE FUNCTION @extschema@.tb_ensure_quota(name text, budget float8, period interval,
	time_zone text DEFAULT 'UTC', starts timestamp DEFAULT NULL,
	carry_max float8 DEFAULT 0, memory boolean DEFAULT false)
RETURNS text
AS 'MODULE_PATHNAME', 'tb_ensure_quota'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_ensure_quota(text, float8, interval, text, timestamp, float8, boolean) IS
	'tb_create_quota''s quota, made if missing (''created''), given these settings if it has others, keeping its tokens (''changed''), or left as it is (''unchanged'')';

REVOKE ALL ON FUNCTION @extschema@.tb_ensure_quota(text, float8, interval, text, timestamp, float8, boolean) FROM PUBLIC;

--
-- The test clock (tokenbucket.test_clock, for tests only): set or move
-- the moment every decision reads.  Refused (55000) unless the server was
-- started with the setting on; superuser only.
--
CREATE FUNCTION @extschema@.tb_test_clock_set(at timestamptz)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'tb_test_clock_set'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_test_clock_set(timestamptz) IS
	'for tests only (tokenbucket.test_clock = on): the moment every decision reads is now "at"';

CREATE FUNCTION @extschema@.tb_test_clock_advance(by interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'tb_test_clock_advance'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;

COMMENT ON FUNCTION @extschema@.tb_test_clock_advance(interval) IS
	'for tests only (tokenbucket.test_clock = on): move the moment every decision reads on by "by"; returns the new moment';

REVOKE ALL ON FUNCTION @extschema@.tb_test_clock_set(timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.tb_test_clock_advance(interval) FROM PUBLIC;
