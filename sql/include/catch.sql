-- catch(sql): runs a statement and returns the error it raised (code
-- '00000' when none), so that a test shows each error path's SQLSTATE,
-- message, detail and hint and goes on.  Included by the tests that need
-- it (\i sql/include/catch.sql: pg_regress runs psql in the top folder).
CREATE FUNCTION pg_temp.catch(sql text,
	OUT code text, OUT message text, OUT detail text, OUT hint text)
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE sql;
	code := '00000';
EXCEPTION WHEN others THEN
	GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
		detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
END $$;
