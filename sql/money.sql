--
-- money: budgets in money.  The DBA's prices (tb_prices) and what a call
-- costs by them (tb_price, tb_cost): the price in force across changes,
-- cached input tokens, exact sums, every error, the grants; a budget
-- reserved with an estimate and settled with the usage reported; and the
-- exactness of a budget's account: a million charges of 0.000123 on a
-- budget of 500 are 123.00 to the cent.  Budgets refill a unit per 1000
-- years, so the clock changes nothing printed (in use: the capacity per
-- '30 days').
--
CREATE EXTENSION tokenbucket;

\i sql/include/catch.sql

-- the prices: "small" always the same (its cached price NULL: the input
-- price), "large" changed on 2020-01-01, "usd" in dollars, "later" only
-- from 2999 on
INSERT INTO tb_prices (model, currency, input_per_million, output_per_million,
	cached_input_per_million, valid_from) VALUES
	('small', 'EUR', 0.123, 0.5, NULL, DEFAULT),
	('large', 'EUR', 2.50, 10.00, 1.25, '2000-01-01 00:00+00'),
	('large', 'EUR', 2.00, 8.00, 0.50, '2020-01-01 00:00+00'),
	('usd', 'USD', 0.15, 0.60, 0.075, '2000-01-01 00:00+00'),
	('later', 'EUR', 1, 1, 1, '2999-01-01 00:00+00');
SELECT model, currency, input_per_million, output_per_million, cached_input_per_million,
       valid_from
FROM tb_prices ORDER BY model, valid_from;

-- the row in force at a moment: the latest valid_from at or before it
SET TimeZone = 'UTC';
SELECT t.at, p.*
FROM unnest(ARRAY['2000-01-01 00:00+00', '2019-12-31 23:59:59.999999+00',
                  '2020-01-01 00:00+00', 'infinity']::timestamptz[]) AS t(at),
     tb_price('large', t.at) AS p;
-- now, by default: a price from 2999 is not in force yet
SELECT currency, valid_from FROM tb_price('large');
SELECT * FROM tb_price('small');
SELECT currency FROM tb_price('usd');

-- what a call costs: (input - cached) x input price + cached x cached
-- price + output x output price, per million tokens, exactly
SELECT tb_cost('small', 1000) AS "1000 in",
       tb_cost('small', 1000, 1000) AS "and 1000 out",
       tb_cost('small', 1000, 0, 1000) AS "all cached, at the input price",
       tb_cost('small', 0) AS nothing,
       tb_cost('small', 1) AS "one token";
-- input_tokens counts the cached ones too: 1000 in of which 600 cached,
-- 200 out, before and after the price change, and at its very moment
SELECT tb_cost('large', 1000, 200, 600, '2019-12-31 23:59:59.999999+00') AS before_the_change,
       tb_cost('large', 1000, 200, 600, '2020-01-01 00:00+00') AS at_the_change,
       tb_cost('large', 1000, 200, 600) AS now;
-- no float, no overflow: the largest counts, to the last digit
SELECT tb_cost('small', 9223372036854775807, 9223372036854775807) AS largest;
-- a sum of costs is exact: a thousand calls of 1 to 1000 tokens
SELECT sum(tb_cost('small', n)) AS sum, 500500 * 0.000000123 AS expected
FROM generate_series(1, 1000) AS n;
-- a price row added later does not change what a past call cost
INSERT INTO tb_prices (model, currency, input_per_million, output_per_million, valid_from)
VALUES ('large', 'EUR', 100, 100, '2030-01-01 00:00+00');
SELECT tb_cost('large', 1000, 200, 600, '2025-01-01 00:00+00') AS still;
DELETE FROM tb_prices WHERE valid_from = '2030-01-01 00:00+00';

\pset format unaligned
\pset fieldsep ' | '
\pset footer off

-- errors: 42704 no price for the model then; 22023 a token count that is
-- negative, or more cached than input tokens; 22004 a NULL, naming it
SELECT c.call, r.* FROM (VALUES
	($$SELECT tb_cost('nope', 1, 0, 0, '2025-01-01 00:00+00')$$),
	($$SELECT tb_cost('Small', 1, 0, 0, '2025-01-01 00:00+00')$$),
	($$SELECT tb_cost('large', 1, 0, 0, '1999-12-31 23:59:59+00')$$),
	($$SELECT tb_cost('later', 1, 0, 0, '2025-01-01 00:00+00')$$),
	($$SELECT * FROM tb_price('nope', '2025-01-01 00:00+00')$$),
	($$SELECT tb_cost('small', -1)$$),
	($$SELECT tb_cost('small', 1, -5)$$),
	($$SELECT tb_cost('small', 1, 0, -1)$$),
	($$SELECT tb_cost('small', 1000, 0, 1001)$$),
	($$SELECT tb_cost(NULL, 1)$$),
	($$SELECT tb_cost('small', NULL)$$),
	($$SELECT tb_cost('small', 1, NULL)$$),
	($$SELECT tb_cost('small', 1, 0, NULL)$$),
	($$SELECT tb_cost('small', 1, 0, 0, NULL)$$),
	($$SELECT * FROM tb_price(NULL)$$),
	($$SELECT * FROM tb_price('small', NULL)$$)
) AS c(call), pg_temp.catch(c.call) AS r;

-- what the table refuses: a currency that is not three capitals, a price
-- that is negative, NaN or infinite, an empty model, a second row for the
-- same model and moment, a missing value
SELECT c.call, r.code, r.message FROM (VALUES
	($$INSERT INTO tb_prices VALUES ('x', 'eur', 1, 1)$$),
	($$INSERT INTO tb_prices VALUES ('x', 'EURO', 1, 1)$$),
	($$INSERT INTO tb_prices VALUES ('x', '€', 1, 1)$$),
	($$INSERT INTO tb_prices VALUES ('x', 'EUR', -0.01, 1)$$),
	($$INSERT INTO tb_prices VALUES ('x', 'EUR', 1, 'NaN')$$),
	($$INSERT INTO tb_prices VALUES ('x', 'EUR', 'Infinity', 1)$$),
	($$INSERT INTO tb_prices VALUES ('x', 'EUR', 1, 1, -1)$$),
	($$INSERT INTO tb_prices VALUES ('x', 'EUR', 1, 1, 'NaN')$$),
	($$INSERT INTO tb_prices VALUES ('', 'EUR', 1, 1)$$),
	($$INSERT INTO tb_prices VALUES ('small', 'EUR', 1, 1)$$),
	($$INSERT INTO tb_prices (model, input_per_million, output_per_million) VALUES ('x', 1, 1)$$),
	($$UPDATE tb_prices SET output_per_million = -1 WHERE model = 'small'$$)
) AS c(call), pg_temp.catch(c.call) AS r;
-- and nothing was written
SELECT count(*) AS prices FROM tb_prices;

\pset format aligned
\pset footer on

-- the grants: any role may read the prices and price a call; only the
-- owner writes them.  A caller that puts a table named tb_prices and a
-- trim_scale() of its own first in its search_path changes nothing: every
-- name the functions use is qualified.
CREATE ROLE regress_tb_money;
CREATE SCHEMA regress_money_evil AUTHORIZATION regress_tb_money;
CREATE TABLE regress_money_evil.tb_prices (LIKE tb_prices);
INSERT INTO regress_money_evil.tb_prices VALUES ('small', 'EUR', 0, 0, 0, '-infinity');
ALTER TABLE regress_money_evil.tb_prices OWNER TO regress_tb_money;
CREATE FUNCTION regress_money_evil.trim_scale(numeric) RETURNS numeric LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'the caller''s trim_scale ran as %', current_user;
END $$;
ALTER FUNCTION regress_money_evil.trim_scale(numeric) OWNER TO regress_tb_money;
SET ROLE regress_tb_money;
SET search_path = regress_money_evil, public;
SELECT tb_cost('small', 1000) AS cost, currency FROM tb_price('small');
RESET search_path;
SELECT count(*) AS prices FROM tb_prices;
SELECT (pg_temp.catch($$INSERT INTO tb_prices VALUES ('mine', 'EUR', 0, 0)$$)).code AS "add a price",
       (pg_temp.catch($$UPDATE tb_prices SET input_per_million = 0$$)).code AS "change one",
       (pg_temp.catch($$DELETE FROM tb_prices$$)).code AS "delete them";
RESET ROLE;
-- a DBA who keeps the prices from a role revokes SELECT: then it may
-- price no call either
REVOKE SELECT ON tb_prices FROM PUBLIC;
SET ROLE regress_tb_money;
SELECT (pg_temp.catch($$SELECT tb_cost('small', 1000)$$)).code AS "price a call";
RESET ROLE;
GRANT SELECT ON tb_prices TO PUBLIC;
DROP FUNCTION regress_money_evil.trim_scale(numeric);
DROP TABLE regress_money_evil.tb_prices;
DROP SCHEMA regress_money_evil;
DROP ROLE regress_tb_money;

--
-- A budget in money: a bucket whose tokens are euros.  A team's 500 EUR
-- and a user's 0.10, charged together; each call reserves its estimate
-- (the prompt's tokens and max_tokens) and settles with the usage the
-- provider reports.
--
SELECT tb_create('team:acme', 500, 1, '1000 years'),
       tb_create('user:ann', 0.10, 1, '1000 years');
SELECT currency = 'EUR' AS budget_currency FROM tb_price('large');
SELECT tb_cost('large', 20000, 4000) AS estimate \gset
SELECT :estimate AS estimate,
       tb_acquire_all('{team:acme,user:ann}', ARRAY[:estimate, :estimate]) AS reserved;
-- reported: 18000 input tokens, 12000 of them from the cache, 1500 output
SELECT tb_cost('large', 18000, 1500, 12000) AS used \gset
SELECT :used AS used,
       round(tb_settle('team:acme', :estimate, :used)::numeric, 6) AS team_left,
       round(tb_settle('user:ann', :estimate, :used)::numeric, 6) AS ann_left;
-- the next call's estimate is more than Ann has left: refused, nothing taken
SELECT tb_acquire_all('{team:acme,user:ann}', ARRAY[:estimate, :estimate]) AS reserved;
SELECT granted, round(remaining::numeric, 6) AS remaining, retry_after > '1 year' AS waits
FROM tb_try('user:ann', :estimate);
SELECT name, round(capacity::numeric - tokens::numeric, 6) AS spent
FROM tb_status WHERE name IN ('team:acme', 'user:ann') ORDER BY name;
-- used more than reserved: the rest is taken, into debt if need be
SELECT tb_acquire('user:ann', 0.05) AS reserved;
SELECT round(tb_settle('user:ann', 0.05, tb_cost('large', 0, 10000))::numeric, 6) AS ann_left;
SELECT round(debt::numeric, 6) AS ann_debt FROM tb_status WHERE name = 'user:ann';

--
-- Exact to the cent.  A million charges of 0.000123 EUR (1000 input
-- tokens of "small") on a memory budget of 500: its account says 123.00
-- spent.  The bucket keeps it in float8: each charge may be off by half a
-- unit in the last place of what it holds (at most 2.8e-14 of a budget
-- under 512), so a million charges are off by 1.4e-9 EUR, as float8's
-- own sum of them is, and a million reserve-and-settle pairs by 1.4e-8;
-- numeric's sum is exact.
--
SELECT tb_cost('small', 1000) AS charge \gset
SELECT tb_create('month', 500, 1, '1000 years', true);
SELECT count(*) FILTER (WHERE tb_acquire('month', :charge)) AS charged
FROM generate_series(1, 1000000);
SELECT round(500 - tokens::numeric, 2) AS spent,
       abs(500 - tokens::numeric - 123) < 0.0000001 AS within_1e_7
FROM tb_status WHERE name = 'month';
SELECT granted, round(granted_tokens::numeric, 2) AS spent,
       round(granted_tokens::numeric - 123, 10) AS float8_error
FROM tb_stats WHERE name = 'month';
SELECT sum(:charge::numeric) AS numeric_sum, round(sum(:charge::float8)::numeric - 123, 10) AS float8_error
FROM generate_series(1, 1000000);
-- a million reserved at 4000 tokens' price and settled at 1000's
SELECT tb_cost('small', 4000) AS estimate \gset
SELECT tb_create('settled', 500, 1, '1000 years', true);
SELECT count(*) FILTER (WHERE tb_acquire('settled', :estimate)
                        AND tb_settle('settled', :estimate, :charge) IS NOT NULL) AS settled
FROM generate_series(1, 1000000);
SELECT round(500 - tokens::numeric, 2) AS spent,
       abs(500 - tokens::numeric - 123) < 0.0000001 AS within_1e_7
FROM tb_status WHERE name = 'settled';
-- a table budget does the same arithmetic: ten thousand charges
SELECT tb_create('table month', 500, 1, '1000 years');
SELECT count(*) FILTER (WHERE tb_acquire('table month', :charge)) AS charged
FROM generate_series(1, 10000);
SELECT round(500 - tokens::numeric, 2) AS spent,
       abs(500 - tokens::numeric - 1.23) < 0.0000001 AS within_1e_7
FROM tb_status WHERE name = 'table month';

--
-- The smallest cost tb_acquire takes is capacity / 2^32, whatever the
-- unit: 0.000000116 of a budget of 500, 0.000233 of 1,000,000, which
-- refuses a charge of 0.000001 (22023).  Reserving at least that and
-- settling with the real cost charges it: tb_settle has no such floor.
--
SELECT tb_create('big', 1000000, 1, '1000 years', true),
       tb_create('budget of 500', 500, 1, '1000 years', true);
SELECT (pg_temp.catch($$SELECT tb_acquire('big', 0.000001)$$)).*;
SELECT tb_acquire('budget of 500', 0.000001) AS on_500;
SELECT greatest(0.000001, 1000000 * 2::float8 ^ -32) AS floor \gset
SELECT tb_acquire('big', :floor) AS reserved,
       round(1000000 - tb_settle('big', :floor, 0.000001)::numeric, 8) AS spent;

DROP EXTENSION tokenbucket;
