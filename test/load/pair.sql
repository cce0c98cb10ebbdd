\set cost random(10, 100)
BEGIN;
SELECT tb_acquire_all(ARRAY['tpm', 'rpm'], ARRAY[:cost, 1])::int AS granted \gset
\if :granted
SELECT record('tpm', :cost), record('rpm', 1);
\endif
END;
