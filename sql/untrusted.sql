--
-- untrusted: what a role with no grants but the defaults can do to memory
-- buckets (nothing), and which names a bucket's configuration gives to
-- which store.
--
CREATE EXTENSION tokenbucket;
CREATE ROLE regress_tb_intruder;
GRANT USAGE ON SCHEMA public TO regress_tb_intruder;

-- tb_buckets_changed() hands changes to shared memory: no role may call
-- it or make a trigger of it
SET ROLE regress_tb_intruder;
CREATE TEMP TABLE t (name text, capacity float8, refill_rate float8, memory bool);
CREATE TRIGGER x AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION tb_buckets_changed();
RESET ROLE;

-- a superuser's trigger of it on any other table, or of another kind,
-- only fails (NULLs included), with shared memory untouched
CREATE TABLE not_buckets (name text, capacity float8, refill_rate float8, memory bool);
CREATE TRIGGER x AFTER INSERT ON not_buckets FOR EACH ROW EXECUTE FUNCTION tb_buckets_changed();
INSERT INTO not_buckets VALUES (NULL, 1, 1, true);
INSERT INTO not_buckets VALUES ('m', 1, 1, true);
DROP TABLE not_buckets;
CREATE TRIGGER before_insert BEFORE INSERT ON tb_buckets
	FOR EACH ROW EXECUTE FUNCTION tb_buckets_changed();
SELECT tb_create('m', 1, 1, memory => true);
DROP TRIGGER before_insert ON tb_buckets;
CREATE TRIGGER per_statement AFTER UPDATE ON tb_buckets
	FOR EACH STATEMENT EXECUTE FUNCTION tb_buckets_changed();
SELECT tb_create('m', 1, 1, memory => true);
SELECT tb_alter('m', 2);
DROP TRIGGER per_statement ON tb_buckets;
SELECT name, capacity FROM tb_memory_buckets();

-- a named table bucket takes its name from a memory template's key
SELECT tb_create('u:*', 5, 1, '1 hour', memory => true);
SELECT tb_acquire('u:1', 5), tb_acquire('u:1');
SELECT tb_create('u:1', 3, 1, '1 hour');
SELECT tb_acquire('u:1', 3), tb_acquire('u:1');
SELECT name, memory, template FROM tb_status WHERE name LIKE 'u:%' ORDER BY name;
-- a longer template takes the keys its prefix covers from a shorter one
SELECT tb_acquire('u:22', 5);
SELECT tb_create('u:2*', 7, 1, '1 hour', memory => true);
SELECT tb_acquire('u:22', 7);
SELECT name, capacity, template FROM tb_memory_buckets() ORDER BY name;

DROP EXTENSION tokenbucket;
DROP TABLE pg_temp.t;
REVOKE USAGE ON SCHEMA public FROM regress_tb_intruder;
DROP ROLE regress_tb_intruder;
