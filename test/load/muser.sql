\set u random(1, 200)
SELECT CASE WHEN tb_acquire('muser:' || :u) THEN record_between('muser:' || :u, 1, t0) END
FROM (SELECT clock_timestamp() AS t0) AS before;
