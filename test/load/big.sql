SELECT CASE WHEN tb_acquire('big') THEN record('big', 1) END;
