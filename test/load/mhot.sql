SELECT CASE WHEN tb_acquire('mhot') THEN record_between('mhot', 1, t0) END
FROM (SELECT clock_timestamp() AS t0) AS before;
