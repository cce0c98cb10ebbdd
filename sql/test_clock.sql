--
-- test_clock: the clock the tests control is off by default, refused
-- (55000) on a server started without it, and never PUBLIC's.
-- (test/model.sh runs a server with it on, and moves it.)
--
CREATE EXTENSION tokenbucket;
SHOW tokenbucket.test_clock;
-- a production setting: only at server start
SET tokenbucket.test_clock = on;
SELECT tb_test_clock_set('2030-01-01 00:00:00+00');
SELECT tb_test_clock_advance('1 second');
-- revoked from PUBLIC
SELECT p.proname, p.proacl IS NOT NULL AND NOT EXISTS (
		SELECT FROM aclexplode(p.proacl) AS a WHERE a.grantee = 0) AS not_public
FROM pg_proc AS p WHERE p.proname LIKE 'tb\_test\_clock%' ORDER BY 1;
CREATE ROLE regress_tb_clock;
SET ROLE regress_tb_clock;
SELECT tb_test_clock_advance('1 second');
RESET ROLE;
DROP ROLE regress_tb_clock;
DROP EXTENSION tokenbucket;
