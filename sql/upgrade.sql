--
-- upgrade: 1.0 updated to 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8 and then 1.9
-- keeps its buckets and gives exactly the objects of a fresh install (which
-- runs tokenbucket--1.9.sql alone); grants made on the functions 1.2, 1.3,
-- 1.7 and 1.9 replace, and 1.8 alters, are kept (1.9's exactly: grant
-- options, grantors and PUBLIC's).
--
-- buckets made under 1.0 (plain SQL: this library is 1.1's)
CREATE EXTENSION tokenbucket VERSION '1.0';
SELECT extversion FROM pg_extension WHERE extname = 'tokenbucket';
INSERT INTO tb_buckets (name, capacity, refill_rate) VALUES ('kept', 5, 1.0 / 3600);
INSERT INTO tb_buckets (name, capacity, refill_rate, deficit) VALUES ('half', 4, 1.0 / 3600, 2);

ALTER EXTENSION tokenbucket UPDATE TO '1.1';
SELECT extversion FROM pg_extension WHERE extname = 'tokenbucket';

-- the buckets are kept, and behave as before, with the new functions too
SELECT name, capacity, round(tokens::numeric, 2) AS tokens, paused_until, debt, template
FROM tb_status ORDER BY name;

-- under 1.1, a DBA restricted tb_try and tb_pause(timestamptz) to one role
CREATE ROLE regress_tb_upgrade_worker;
REVOKE EXECUTE ON FUNCTION tb_try(text, float8) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tb_try(text, float8) TO regress_tb_upgrade_worker;
GRANT EXECUTE ON FUNCTION tb_pause(text, timestamptz) TO regress_tb_upgrade_worker;

ALTER EXTENSION tokenbucket UPDATE TO '1.2';
SELECT extversion FROM pg_extension WHERE extname = 'tokenbucket';

-- under 1.2, a DBA let a role make buckets
GRANT EXECUTE ON FUNCTION tb_create(text, float8, float8, interval) TO regress_tb_upgrade_worker;

ALTER EXTENSION tokenbucket UPDATE TO '1.3';
SELECT extversion FROM pg_extension WHERE extname = 'tokenbucket';
SELECT name, memory FROM tb_status ORDER BY name;

ALTER EXTENSION tokenbucket UPDATE TO '1.4';
SELECT extversion FROM pg_extension WHERE extname = 'tokenbucket';
ALTER EXTENSION tokenbucket UPDATE TO '1.5';
SELECT extversion FROM pg_extension WHERE extname = 'tokenbucket';
ALTER EXTENSION tokenbucket UPDATE TO '1.6';
SELECT extversion FROM pg_extension WHERE extname = 'tokenbucket';

-- under 1.6, a DBA let the role make limits and read the leases, and kept
-- leases to it
GRANT EXECUTE ON FUNCTION tb_create_limit(text, integer) TO regress_tb_upgrade_worker;
GRANT SELECT ON tb_leases TO regress_tb_upgrade_worker;
REVOKE EXECUTE ON FUNCTION tb_lease(text, integer, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tb_lease(text, integer, text, interval) TO regress_tb_upgrade_worker;

ALTER EXTENSION tokenbucket UPDATE TO '1.7';
SELECT extversion FROM pg_extension WHERE extname = 'tokenbucket';

-- under 1.7, a DBA let the role settle calls
GRANT EXECUTE ON FUNCTION tb_settle(text, float8, float8) TO regress_tb_upgrade_worker;

ALTER EXTENSION tokenbucket UPDATE TO '1.8';
SELECT extversion FROM pg_extension WHERE extname = 'tokenbucket';

-- under 1.8, a DBA let the role make buckets again and again
GRANT EXECUTE ON FUNCTION tb_ensure(text, float8, float8, interval, boolean) TO regress_tb_upgrade_worker;
-- and let it pass tb_try and tb_peek on (which 1.9 replaces), which it did
-- to a second role; tb_peek with a reserve is no longer PUBLIC's
CREATE ROLE regress_tb_upgrade_app;
GRANT EXECUTE ON FUNCTION tb_try(text, float8) TO regress_tb_upgrade_worker WITH GRANT OPTION;
GRANT EXECUTE ON FUNCTION tb_peek(text, float8) TO regress_tb_upgrade_worker WITH GRANT OPTION;
REVOKE EXECUTE ON FUNCTION tb_peek(text, float8, float8) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tb_peek(text, float8, float8) TO regress_tb_upgrade_app;
SET ROLE regress_tb_upgrade_worker;
GRANT EXECUTE ON FUNCTION tb_try(text, float8) TO regress_tb_upgrade_app;
GRANT EXECUTE ON FUNCTION tb_peek(text, float8) TO regress_tb_upgrade_app WITH GRANT OPTION;
RESET ROLE;
CREATE TEMP TABLE acls_before AS
SELECT p.oid::regprocedure::text AS function, p.proowner, p.proacl::text AS acl
FROM pg_proc p WHERE p.proname IN ('tb_try', 'tb_peek');

ALTER EXTENSION tokenbucket UPDATE TO '1.9';
SELECT extversion FROM pg_extension WHERE extname = 'tokenbucket';
-- tb_try and tb_peek keep their owner and every privilege, grant options,
-- grantors and PUBLIC's included
SELECT b.function, b.acl AS before, p.acl AS after
FROM acls_before b
LEFT JOIN (SELECT oid::regprocedure::text AS function, proowner, proacl::text AS acl FROM pg_proc) p
	ON p.function = b.function
WHERE p.proowner IS DISTINCT FROM b.proowner OR p.acl IS DISTINCT FROM b.acl;
SELECT count(*) FROM acls_before WHERE acl LIKE '%regress_tb_upgrade_worker=X*/%';
SELECT tb_acquire('kept', 5), tb_acquire('half', 2), tb_acquire('half');
SELECT tb_acquire_all('{kept,half}'), round(tb_refund('kept', 1)::numeric, 2);
-- the buckets made before the update are counted like new ones
SELECT name, granted, granted_tokens, denied, refunded_tokens FROM tb_stats ORDER BY name;
-- the buckets are still there, in tb_status and tb_stats alone; limits beside them
SELECT tb_create_limit('inflight', 2);
SELECT tb_lease('inflight', 2) IS NOT NULL AS leased;
SELECT name, max_in_flight, in_flight, memory FROM tb_status ORDER BY name;
SELECT name FROM tb_stats ORDER BY name;
-- the role that read tb_leases still does, memory leases too
SET ROLE regress_tb_upgrade_worker;
SELECT name, slots FROM tb_leases;
RESET ROLE;

-- the replaced functions keep those grants; what gives tokens is not PUBLIC
SELECT p.oid::regprocedure AS function,
       has_function_privilege('regress_tb_upgrade_worker', p.oid, 'EXECUTE') AS worker,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public
FROM pg_proc p
WHERE p.proname IN ('tb_try', 'tb_pause_until', 'tb_pause', 'tb_refund', 'tb_try_all', 'tb_create',
                    'tb_buckets_changed', 'tb_create_limit', 'tb_memory_leases', 'tb_lease',
                    'tb_lease_wait', 'tb_settle', 'tb_ensure', 'tb_stats_counters',
                    'tb_price', 'tb_cost')
ORDER BY p.oid::regprocedure::text;

-- and the objects are those of a fresh install
-- objects(): every member object of the extension, with its definition,
-- comment and privileges, and of every member table, view and sequence its
-- columns, constraints, indexes, triggers and sequence settings, each a
-- row naming its relation, in a form two installs can be compared in
CREATE FUNCTION pg_temp.objects() RETURNS SETOF text LANGUAGE sql AS $$
	WITH members AS (
		SELECT d.classid, d.objid
		FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
		WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
		  AND e.extname = 'tokenbucket'
	), relations AS (
		SELECT c.oid, c.relname FROM members m JOIN pg_class c ON c.oid = m.objid
		WHERE m.classid = 'pg_class'::regclass
	)
	SELECT pg_describe_object(m.classid, m.objid, 0) || ': ' || coalesce(CASE m.classid
		WHEN 'pg_proc'::regclass THEN pg_get_functiondef(m.objid) || coalesce(
			(SELECT string_agg(a.grantee::regrole::text || '=' || a.privilege_type, ','
				ORDER BY a.grantee::regrole::text)
			 FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) AS a
			 WHERE p.oid = m.objid), '')
		WHEN 'pg_class'::regclass THEN (
			SELECT c.relkind::text || c.relpersistence::text
			       || coalesce(c.relacl, acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char",
			                                        c.relowner))::text
			       || coalesce(' with ' || c.reloptions::text, '')
			       || coalesce(pg_get_viewdef(c.oid), '')
			       || coalesce(pg_get_indexdef(c.oid), '') FROM pg_class c WHERE c.oid = m.objid)
		END, '') || coalesce(' -- ' || obj_description(m.objid, m.classid::regclass::name), '')
	FROM members m
	UNION ALL
	SELECT 'column ' || r.relname || '.' || a.attnum || ' ' || a.attname || ' '
	       || format_type(a.atttypid, a.atttypmod)
	       || CASE WHEN a.attcollation <> t.typcollation
	               THEN ' collate ' || a.attcollation::regcollation::text ELSE '' END
	       || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
	       || CASE a.attidentity WHEN '' THEN '' ELSE ' identity ' || a.attidentity::text END
	       || CASE a.attgenerated WHEN '' THEN '' ELSE ' generated ' || a.attgenerated::text END
	       || coalesce(' default ' || pg_get_expr(ad.adbin, ad.adrelid), '')
	       || coalesce(' -- ' || col_description(a.attrelid, a.attnum), '')
	FROM relations r JOIN pg_attribute a ON a.attrelid = r.oid
	JOIN pg_type t ON t.oid = a.atttypid
	LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
	WHERE a.attnum > 0 AND NOT a.attisdropped
	UNION ALL
	SELECT 'constraint ' || r.relname || ' ' || o.conname || ' ' || pg_get_constraintdef(o.oid)
	       || coalesce(' -- ' || obj_description(o.oid, 'pg_constraint'), '')
	FROM relations r JOIN pg_constraint o ON o.conrelid = r.oid
	UNION ALL
	SELECT 'index ' || pg_get_indexdef(i.indexrelid)
	       || coalesce(' -- ' || obj_description(i.indexrelid, 'pg_class'), '')
	FROM relations r JOIN pg_index i ON i.indrelid = r.oid
	UNION ALL
	SELECT 'trigger ' || pg_get_triggerdef(g.oid) || ' ' || g.tgenabled::text
	       || coalesce(' -- ' || obj_description(g.oid, 'pg_trigger'), '')
	FROM relations r JOIN pg_trigger g ON g.tgrelid = r.oid
	UNION ALL
	-- not its value: a fresh install starts it at a random point
	SELECT 'sequence ' || r.relname || ' ' || format_type(s.seqtypid, NULL)
	       || ' start ' || s.seqstart || ' increment ' || s.seqincrement
	       || ' min ' || s.seqmin || ' max ' || s.seqmax || ' cache ' || s.seqcache
	       || CASE WHEN s.seqcycle THEN ' cycle' ELSE '' END
	       || CASE WHEN pg_sequence_last_value(s.seqrelid) IS NULL THEN ' never set' ELSE ' set' END
	       || coalesce(' owned by ' || (SELECT o.refobjid::regclass || '.' || o.refobjsubid
	                                    FROM pg_depend o
	                                    WHERE o.classid = 'pg_class'::regclass AND o.objid = s.seqrelid
	                                      AND o.refclassid = 'pg_class'::regclass AND o.deptype IN ('a', 'i')), '')
	FROM relations r JOIN pg_sequence s ON s.seqrelid = r.oid
	UNION ALL
	SELECT 'config ' || extconfig::regclass[]::text || ' ' || extcondition::text
	FROM pg_extension WHERE extname = 'tokenbucket'
$$;

-- install_and_update(version): a fresh install of that version, updated
CREATE FUNCTION pg_temp.install_and_update(version text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	DROP EXTENSION IF EXISTS tokenbucket;
	EXECUTE format('CREATE EXTENSION tokenbucket VERSION %L', version);
	ALTER EXTENSION tokenbucket UPDATE;
END $$;

-- (the grants made above are the DBA's, not the install's)
REVOKE EXECUTE ON FUNCTION tb_try(text, float8) FROM regress_tb_upgrade_worker CASCADE;
REVOKE EXECUTE ON FUNCTION tb_pause_until(text, timestamptz) FROM regress_tb_upgrade_worker;
REVOKE EXECUTE ON FUNCTION tb_create(text, float8, float8, interval, boolean) FROM regress_tb_upgrade_worker;
REVOKE EXECUTE ON FUNCTION tb_create_limit(text, integer, boolean) FROM regress_tb_upgrade_worker;
REVOKE EXECUTE ON FUNCTION tb_memory_leases() FROM regress_tb_upgrade_worker;
REVOKE SELECT ON tb_leases FROM regress_tb_upgrade_worker;
REVOKE EXECUTE ON FUNCTION tb_lease(text, integer, text, interval, float8) FROM regress_tb_upgrade_worker;
REVOKE EXECUTE ON FUNCTION tb_settle(text, float8, float8) FROM regress_tb_upgrade_worker;
REVOKE EXECUTE ON FUNCTION tb_peek(text, float8) FROM regress_tb_upgrade_worker CASCADE;
REVOKE EXECUTE ON FUNCTION tb_peek(text, float8, float8) FROM regress_tb_upgrade_app;
GRANT EXECUTE ON FUNCTION tb_peek(text, float8, float8) TO PUBLIC;
GRANT EXECUTE ON FUNCTION tb_try(text, float8) TO PUBLIC;
GRANT EXECUTE ON FUNCTION tb_lease(text, integer, text, interval, float8) TO PUBLIC;
CREATE TEMP TABLE upgraded AS SELECT * FROM pg_temp.objects() AS o(object);
SELECT count(*) > 30 AS many_objects FROM upgraded;
DROP EXTENSION tokenbucket;
CREATE EXTENSION tokenbucket;
SELECT extversion FROM pg_extension WHERE extname = 'tokenbucket';
(SELECT 'only after update: ' || object FROM upgraded EXCEPT SELECT 'only after update: ' || o FROM pg_temp.objects() AS o)
UNION ALL
(SELECT 'only in fresh install: ' || o FROM pg_temp.objects() AS o EXCEPT SELECT 'only in fresh install: ' || object FROM upgraded);

-- from every earlier version straight to this one: the same objects too
CREATE TEMP TABLE fresh AS SELECT * FROM pg_temp.objects() AS o(object);
DROP EXTENSION tokenbucket;
CREATE FUNCTION pg_temp.differences() RETURNS bigint LANGUAGE sql AS $$
	SELECT count(*) FROM (
		(SELECT object FROM fresh EXCEPT SELECT o FROM pg_temp.objects() AS o)
		UNION ALL
		(SELECT o FROM pg_temp.objects() AS o EXCEPT SELECT object FROM fresh)) AS d $$;
SELECT pg_temp.install_and_update('1.0');
SELECT pg_temp.differences() AS from_1_0;
SELECT pg_temp.install_and_update('1.1');
SELECT pg_temp.differences() AS from_1_1;
SELECT pg_temp.install_and_update('1.2');
SELECT pg_temp.differences() AS from_1_2;
SELECT pg_temp.install_and_update('1.3');
SELECT pg_temp.differences() AS from_1_3;
SELECT pg_temp.install_and_update('1.4');
SELECT pg_temp.differences() AS from_1_4;
SELECT pg_temp.install_and_update('1.5');
SELECT pg_temp.differences() AS from_1_5;
SELECT pg_temp.install_and_update('1.6');
SELECT pg_temp.differences() AS from_1_6;
SELECT pg_temp.install_and_update('1.7');
SELECT pg_temp.differences() AS from_1_7;
DROP EXTENSION tokenbucket;
CREATE EXTENSION tokenbucket;

DROP ROLE regress_tb_upgrade_worker, regress_tb_upgrade_app;

-- a library newer than the SQL objects says what to do
DROP EXTENSION tokenbucket;
CREATE EXTENSION tokenbucket VERSION '1.0';
\set VERBOSITY default
SELECT tb_create('x', 1, 1);
SELECT tb_acquire('x');
DROP EXTENSION tokenbucket;
