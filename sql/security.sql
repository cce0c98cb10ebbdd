--
-- security: what an application role may do with EXECUTE alone, and what
-- stays the owner's.  (test/pgtap/privileges.sql attacks search_path.)
--
CREATE EXTENSION tokenbucket;
SELECT tb_create('shared', 2, 1, '1 hour');
CREATE ROLE regress_tb_app;
GRANT USAGE ON SCHEMA public TO regress_tb_app;

SET ROLE regress_tb_app;
-- taking tokens needs no right on the table
SELECT tb_acquire('shared'), (tb_try('shared')).granted;
-- the table, the view and the admin functions stay the owner's
SELECT * FROM tb_buckets;
SELECT * FROM tb_status;
UPDATE tb_buckets SET deficit = 0;
SELECT tb_create('mine', 100, 100);
SELECT tb_alter('shared', 1000);
SELECT tb_reset('shared');
SELECT tb_drop('shared');
RESET ROLE;

-- giving tokens back, settling, syncing and pausing are not PUBLIC: one
-- compromised login could lift or stop every limit
SET ROLE regress_tb_app;
SELECT tb_refund('shared', 1);
SELECT tb_settle('shared', 1, 0);
SELECT tb_sync('shared', 0);
SELECT tb_pause('shared', '1 hour');
SELECT tb_pause_until('shared', 'infinity');
-- a look is, and an error tells a caller nothing of the bucket's settings
SELECT granted FROM tb_peek('shared');
SELECT tb_acquire('shared', 1000);
RESET ROLE;

-- the README's grant block gives a worker all it needs in one paste
GRANT EXECUTE ON FUNCTION tb_refund(text, float8), tb_settle(text, float8, float8),
	tb_sync(text, float8), tb_pause(text, interval),
	tb_pause_until(text, timestamptz) TO regress_tb_app;
SET ROLE regress_tb_app;
SELECT tb_refund('shared', 1) >= 0 AS refunded, tb_settle('shared', 1, 1) >= 0 AS settled,
       tb_sync('shared', 2) >= 0 AS synced;
SELECT tb_pause('shared', '1 s'), tb_pause_until('shared', '-infinity');
RESET ROLE;

-- a DBA hands out management rights with GRANT
GRANT EXECUTE ON FUNCTION tb_reset(text) TO regress_tb_app;
GRANT SELECT ON tb_status TO regress_tb_app;
GRANT EXECUTE ON FUNCTION tb_memory_buckets(), tb_memory_leases() TO regress_tb_app;
SET ROLE regress_tb_app;
SELECT tb_reset('shared');
SELECT name, tokens FROM tb_status;
RESET ROLE;

-- no function is SECURITY DEFINER or sets a parameter: those that touch the
-- table switch to the owner and a fixed search_path in C, around the table
-- work only
SELECT p.oid::regprocedure AS function, p.prosecdef AS security_definer, p.proconfig,
       p.provolatile, p.proparallel, p.proisstrict,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'tokenbucket'
ORDER BY p.proname, p.pronargs;

DROP EXTENSION tokenbucket;
DROP OWNED BY regress_tb_app;
DROP ROLE regress_tb_app;
