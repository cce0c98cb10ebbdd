\set u random(1, 200)
SELECT tb_acquire('user:' || :u);
