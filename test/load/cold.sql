\set n random(0, 9)
\set cost random(1, 3)
BEGIN;
SELECT tb_acquire('cold' || :n, :cost)::int AS granted \gset
\if :granted
SELECT record('cold' || :n, :cost);
\endif
END;
