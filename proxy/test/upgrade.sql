-- proxy/test/upgrade.sql: a fresh install of tokenbucket_proxy (one
-- install script) has exactly the objects of an install of every earlier
-- version updated to it: each member function, procedure and view, with
-- its definition (a function's body to the character), comment and
-- privileges, compared as sql/upgrade.sql compares tokenbucket's.
-- proxy/test/errors.sh runs it in a database of its own, and expects
-- "installed <default_version>, <n> objects", then "from <version>: 0
-- differences" for each earlier version; any other line is an object
-- that differs (its first line).  With -v ext=tokenbucket_shard (in a
-- database with tokenbucket), the same of tokenbucket_shard.
\if :{?ext}
\else
\set ext tokenbucket_proxy
\endif
SET upgrade.ext = :'ext';

-- objects(): every member object of the extension, with its definition,
-- comment and privileges, in a form two installs can be compared in
CREATE FUNCTION pg_temp.objects() RETURNS SETOF text LANGUAGE sql AS $$
	SELECT pg_describe_object(d.classid, d.objid, 0) || ': ' || coalesce(CASE d.classid
		WHEN 'pg_proc'::regclass THEN pg_get_functiondef(d.objid) || coalesce(
			(SELECT string_agg(a.grantee::regrole::text || '=' || a.privilege_type, ','
				ORDER BY a.grantee::regrole::text)
			 FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) AS a
			 WHERE p.oid = d.objid), '')
		WHEN 'pg_class'::regclass THEN (
			SELECT c.relkind::text || coalesce(c.relacl, acldefault('r', c.relowner))::text
			       || coalesce(pg_get_viewdef(c.oid), '')
			FROM pg_class c WHERE c.oid = d.objid)
		END, '') || coalesce(' -- ' || obj_description(d.objid, d.classid::regclass::name), '')
	FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
	WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	  AND e.extname = current_setting('upgrade.ext')
$$;

-- differences(version): install that version, update it, and list the
-- objects only it has or only the fresh install has (the first line of
-- each), then how many
CREATE FUNCTION pg_temp.differences(version text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
	n bigint;
BEGIN
	EXECUTE format('CREATE EXTENSION %I VERSION %L', current_setting('upgrade.ext'), version);
	EXECUTE format('ALTER EXTENSION %I UPDATE', current_setting('upgrade.ext'));
	RETURN QUERY
	SELECT format('from %s, only after update: %s', version, split_part(o, E'\n', 1))
	FROM (SELECT o FROM pg_temp.objects() AS o EXCEPT SELECT object FROM fresh) AS d(o)
	UNION ALL
	SELECT format('from %s, only in fresh install: %s', version, split_part(object, E'\n', 1))
	FROM (SELECT object FROM fresh EXCEPT SELECT o FROM pg_temp.objects() AS o) AS d(object);
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN NEXT format('from %s: %s differences', version, n);
	EXECUTE format('DROP EXTENSION %I', current_setting('upgrade.ext'));
END
$$;

CREATE EXTENSION IF NOT EXISTS plproxy;
CREATE EXTENSION :"ext";
CREATE TEMP TABLE fresh AS SELECT * FROM pg_temp.objects() AS o(object);
SELECT format('installed %s, %s objects', e.extversion, (SELECT count(*) FROM fresh))
FROM pg_extension AS e WHERE e.extname = :'ext';
DROP EXTENSION :"ext";

SELECT pg_temp.differences(v.version)
FROM pg_available_extension_versions AS v
WHERE v.name = :'ext'
  AND v.version <> (SELECT default_version FROM pg_available_extensions WHERE name = :'ext')
ORDER BY string_to_array(v.version, '.')::int[];
