BEGIN;
SELECT tb_acquire_wait('queue', 1, '100 ms')::int AS granted \gset
\if :granted
SELECT record('queue', 1);
\endif
END;
