--
-- leases_memory: every step of sql/leases.sql again, on memory limits
-- (their leases in shared memory): what holds for a table limit holds
-- for a memory limit, the sign of lease ids and tb_purge aside.
--
\set memory true
\i sql/leases.sql
