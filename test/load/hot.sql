SELECT CASE WHEN tb_acquire('hot') THEN record('hot', 1) END;
