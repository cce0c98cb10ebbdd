--
-- hierarchy: buckets charged up their parents (tb_parents), all or
-- nothing, without the caller naming them: org > team > user > key, from
-- named rows and from templates with placeholders, table and memory
-- buckets mixed; the level that refused (denied_by), settle and refund on
-- every level, tb_try_all's rows, cycles and depth, a named child over a
-- template, and who may write tb_parents.  Every bucket refills one token
-- a day, so the clock changes nothing printed.
--
CREATE EXTENSION tokenbucket;

\i sql/include/catch.sql

-- the tokens of every bucket there is, templates left out
CREATE FUNCTION pg_temp.levels() RETURNS TABLE (name text, memory boolean, tokens numeric)
LANGUAGE sql AS $$
	SELECT name, memory, round(tokens::numeric, 2) FROM tb_status
	WHERE name NOT LIKE '%*' AND capacity IS NOT NULL ORDER BY name $$;

-- a tb_try row, its waits in whole days
CREATE FUNCTION pg_temp.try(name text, cost float8)
RETURNS TABLE (granted boolean, remaining numeric, retry_days numeric, denied_by text)
LANGUAGE sql AS $$
	SELECT t.granted, round(t.remaining::numeric, 2),
	       round((t.retry_after_seconds / 86400)::numeric, 2), t.denied_by
	FROM tb_try(name, cost) AS t $$;
CREATE FUNCTION pg_temp.peek(name text, cost float8)
RETURNS TABLE (granted boolean, remaining numeric, retry_days numeric, denied_by text)
LANGUAGE sql AS $$
	SELECT t.granted, round(t.remaining::numeric, 2),
	       round((t.retry_after_seconds / 86400)::numeric, 2), t.denied_by
	FROM tb_peek(name, cost) AS t $$;

-- the organisation (table), its teams (memory, from a template; beta a
-- named table bucket), their users (table, from a template) and the
-- users' keys (memory, from a template)
SELECT tb_create('org', 100, 1, '1 day');
SELECT tb_create('team:*', 50, 1, '1 day', memory => true);
SELECT tb_create('team:beta', 30, 1, '1 day');
SELECT tb_create('user:*', 10, 1, '1 day');
SELECT tb_create('key:*', 5, 1, '1 day', memory => true);

-- no parents yet: a call charges its own bucket alone, and denied_by is
-- NULL when granted
SELECT * FROM pg_temp.try('user:acme:ann', 1);
SELECT tb_refund('user:acme:ann', 1);
SELECT * FROM pg_temp.levels();

-- the hierarchy: a template's parent takes the key's fields ({1}: the
-- first ':'-separated field after the prefix, {*}: all of it); a named
-- child's own row wins over its template's
SELECT tb_set_parent('team:*', 'org');
SELECT tb_set_parent('user:*', 'team:{1}');
SELECT tb_set_parent('key:*', 'user:{1}:{2}');
SELECT tb_set_parent('user:acme:boss', 'org');
SELECT tb_set_parent('gone', 'org'), tb_set_parent('gone', NULL);   -- set, then none
SELECT child, parent FROM tb_parents ORDER BY child;

-- a charge takes from every level: user (table), team (memory), org (table)
SELECT tb_acquire('user:acme:ann', 3);
SELECT * FROM pg_temp.levels();
-- four levels from a key: key (memory) > user > team > org
SELECT tb_acquire('key:acme:ann:k1', 2);
SELECT * FROM pg_temp.levels();
-- the named child over the template: the boss charges the org alone
SELECT tb_acquire('user:acme:boss', 4);
SELECT * FROM pg_temp.levels();

-- refused by the user's own bucket (5 left): nothing taken anywhere; the
-- row reports the level that refused
SELECT * FROM pg_temp.try('user:acme:ann', 6);
-- refused by the team (drained to 2): the user has enough
SELECT tb_sync('team:acme', 2);
SELECT * FROM pg_temp.try('user:acme:bob', 3);
-- refused by the org (drained to 1), through a named table team
SELECT tb_sync('org', 1);
SELECT * FROM pg_temp.try('user:beta:cy', 2);
-- not one bucket changed by the three refusals (bob and cy not even made)
SELECT * FROM pg_temp.levels();
-- several levels refuse: denied_by is the one that makes retry_after
-- longest, and retry_after is when every level grants (the org, 9 days;
-- the team, 8; ann herself, 5)
SELECT * FROM pg_temp.try('user:acme:ann', 10);
-- tb_acquire answers the same, without the row
SELECT tb_acquire('user:acme:ann', 10), tb_acquire('user:beta:cy', 2);
-- tb_peek reports as tb_try does, taking nothing
SELECT * FROM pg_temp.peek('user:acme:ann', 10);
SELECT * FROM pg_temp.peek('user:beta:cy', 2);
SELECT * FROM pg_temp.peek('user:acme:ann', 1);
-- granted: the row reports the tightest level (the fewest tokens left)
SELECT tb_reset('org'), tb_reset('team:acme');
SELECT * FROM pg_temp.try('user:acme:ann', 1);
SELECT * FROM pg_temp.try('key:acme:ann:k1', 1);
SELECT * FROM pg_temp.levels();

-- settle and refund apply to every level: a settle of 2 more takes 2
-- more from each; a refund of a reservation made since the parents were
-- set (reserved_at) gives each back (see the moves below for one made
-- before); the answer is the call's own bucket's
SELECT round(tb_settle('user:acme:ann', 1, 3)::numeric, 2) AS settled;
SELECT * FROM pg_temp.levels();
SELECT round(tb_refund('user:acme:ann', 2, now())::numeric, 2) AS refunded;
SELECT * FROM pg_temp.levels();
-- tb_sync, tb_pause and tb_reset are the bucket's own
SELECT round(tb_sync('key:acme:ann:k1', 1)::numeric, 2) AS synced;
SELECT * FROM pg_temp.levels();

-- tb_try_all: a row per bucket of the chains, the names given first in
-- their order, then the parents; a parent of both users is charged both
-- costs, and so is a parent also named
SELECT tb_reset('user:acme:ann'), tb_reset('team:acme'), tb_reset('org');
SELECT name, granted, round(remaining::numeric, 2) AS remaining, retry_after > '0' AS holds_back
FROM tb_try_all('{user:acme:bob,user:acme:ann}', '{2,3}');
SELECT name, granted, round(remaining::numeric, 2) AS remaining, retry_after > '0' AS holds_back
FROM tb_try_all('{user:acme:ann,org}', '{1,95}');
SELECT name, granted, round(remaining::numeric, 2) AS remaining, retry_after > '0' AS holds_back
FROM tb_try_all('{user:acme:ann,org}', '{1,94}');
SELECT * FROM pg_temp.levels();
-- naming a bucket twice is still an error, parents or not
SELECT code, message FROM pg_temp.catch($$SELECT tb_acquire_all('{user:acme:ann,user:acme:ann}')$$);
-- the waiting forms: the team short, the wait times out; then granted
SELECT tb_reset('org'), tb_sync('team:acme', 0);
SELECT tb_acquire_wait('user:acme:ann', 1, '50 ms');
SELECT tb_acquire_all_wait('{user:acme:bob}', '{1}', '50 ms');
SELECT tb_reset('team:acme');
SELECT tb_acquire_wait('user:acme:ann', 1, '50 ms'), tb_acquire_all_wait('{user:acme:bob}', '{1}', '50 ms');
SELECT * FROM pg_temp.levels();

-- errors name the level concerned: a cost above the team's capacity, a
-- parent that is no bucket
SELECT code, message FROM pg_temp.catch($$SELECT tb_acquire('user:beta:cy', 40)$$);
SELECT tb_create('user:solo:*', 100, 1, '1 day');
SELECT code, message FROM pg_temp.catch($$SELECT tb_try('user:solo:x', 60)$$);
SELECT code, message FROM pg_temp.catch($$SELECT tb_peek('user:solo:x', 60)$$);
SELECT tb_set_parent('lost', 'nowhere'), tb_create('lost', 5, 1, '1 day');
SELECT code, message FROM pg_temp.catch($$SELECT tb_acquire('lost')$$);
SELECT code, message FROM pg_temp.catch($$SELECT tb_refund('lost', 1, now())$$);
-- a key without the field its template's parent takes
SELECT * FROM pg_temp.catch($$SELECT tb_acquire('key:solo')$$);
-- the bad declarations: 23514 naming what is wrong
SELECT * FROM pg_temp.catch($$SELECT tb_set_parent('', 'org')$$);
SELECT * FROM pg_temp.catch($$SELECT tb_set_parent('x', '')$$);
SELECT * FROM pg_temp.catch($$SELECT tb_set_parent('x', 'team:{1}')$$);
SELECT * FROM pg_temp.catch($$SELECT tb_set_parent('x:*', 'team:{0}')$$);
SELECT * FROM pg_temp.catch($$SELECT tb_set_parent('x:*', 'team:{99999999999}')$$);
SELECT * FROM pg_temp.catch($$SELECT tb_set_parent('x', 'team:*')$$);
SELECT * FROM pg_temp.catch($$SELECT tb_set_parent(NULL, 'org')$$);
SELECT code, message FROM pg_temp.catch($$INSERT INTO tb_parents VALUES ('x', NULL)$$);
-- a '{' that begins no placeholder is itself, as in a proxy's hash tag
SELECT tb_create('{acme}:team', 10, 1, '1 day'), tb_create('{acme}:user:*', 5, 1, '1 day');
SELECT tb_set_parent('{acme}:user:*', '{acme}:team'), tb_set_parent('x:*', 'team:{a}:{1'),
       tb_set_parent('{acme}:user:{x}', '{acme}:team');
SELECT name, round(remaining::numeric, 2) AS remaining
FROM tb_try_all('{"{acme}:user:ann","{acme}:user:{x}"}', '{1,1}');
SELECT tb_set_parent('x:*', NULL);
-- cycles known at declaration: 42P19, the chain in the detail
SELECT * FROM pg_temp.catch($$SELECT tb_set_parent('org', 'org')$$);
SELECT * FROM pg_temp.catch($$SELECT tb_set_parent('org', 'user:acme:ann')$$);
SELECT * FROM pg_temp.catch($$INSERT INTO tb_parents VALUES ('a', 'b'), ('b', 'a')$$);
-- a cycle a template makes for some keys only: at the call, 42P19
SELECT tb_create('swap:*', 5, 1, '1 day'), tb_set_parent('swap:*', 'swap:{2}:{1}'),
       tb_set_parent('swap:b:a', 'org');
SELECT tb_acquire('swap:a:b');   -- swap:a:b > swap:b:a > org
SELECT * FROM pg_temp.catch($$SELECT tb_acquire('swap:c:d')$$);
SELECT * FROM pg_temp.levels() WHERE name LIKE 'swap:%';
-- deeper than 8 levels: at declaration when it is known, 54000
SELECT * FROM pg_temp.catch($$INSERT INTO tb_parents VALUES
	('d1', 'd2'), ('d2', 'd3'), ('d3', 'd4'), ('d4', 'd5'), ('d5', 'd6'),
	('d6', 'd7'), ('d7', 'd8'), ('d8', 'd9')$$);
INSERT INTO tb_parents VALUES
	('d1', 'd2'), ('d2', 'd3'), ('d3', 'd4'), ('d4', 'd5'), ('d5', 'd6'),
	('d6', 'd7'), ('d7', 'd8');
SELECT * FROM pg_temp.catch($$SELECT tb_set_parent('d0', 'd1')$$);
-- and at the call for a template's keys
SELECT tb_create('deep:*', 5, 1, '1 day'), tb_set_parent('deep:*', 'deep:{*}:x');
SELECT * FROM pg_temp.catch($$SELECT tb_acquire('deep:a')$$);
DELETE FROM tb_parents WHERE child LIKE 'd%' OR child LIKE 'swap%';

-- a change of tb_parents takes effect at the next call, in this session
-- too; a rolled-back one never
SELECT name FROM tb_try_all('{user:acme:ann}', '{1}');
BEGIN;
SELECT tb_set_parent('user:acme:ann', 'team:beta');
SELECT name FROM tb_try_all('{user:acme:ann}', '{1}');
ROLLBACK;
SELECT name FROM tb_try_all('{user:acme:ann}', '{1}');
TRUNCATE tb_parents;
SELECT name FROM tb_try_all('{user:acme:ann}', '{1}');

-- a settle or refund gives back only to levels the reservation was
-- charged to.  Each row of tb_parents says since when it holds (since); a
-- give-back goes up a link only for a reservation made since, as the
-- settle's reserved_at says; without it, to the bucket alone.  ann
-- reserves 80 under team:a; team:b spends its 100; the DBA moves ann to
-- team:b; ann settles (before 1.9 was released, the 80 went to team:b,
-- which granted 80 more: 180 in a day against 100, while team:a never got
-- them back).  Table and memory (m...), a named child, and a template's
-- key ({1}) given a row of its own, alike.
SELECT tb_create('team:a', 100, 1, '1 day'), tb_create('team:b', 100, 1, '1 day'),
	tb_create('ann', 100, 1, '1 day'), tb_create('mteam:a', 100, 1, '1 day', memory => true),
	tb_create('mteam:b', 100, 1, '1 day', memory => true), tb_create('mann', 100, 1, '1 day', memory => true),
	tb_create('pool:a', 100, 1, '1 day'), tb_create('pool:b', 100, 1, '1 day'),
	tb_create('member:*', 100, 1, '1 day', memory => true);
SELECT tb_set_parent('ann', 'team:a'), tb_set_parent('mann', 'mteam:a'),
	tb_set_parent('member:*', 'pool:{1}');
SELECT child, parent, since <= clock_timestamp() AS since_written FROM tb_parents ORDER BY child;
CREATE FUNCTION pg_temp.moved() RETURNS TABLE (name text, tokens numeric)
LANGUAGE sql AS $$
	SELECT name, round(tokens::numeric, 2) FROM tb_status
	WHERE name ~ '^(m?team:[ab]|m?ann|pool:[ab]|member:a:ann)$' ORDER BY name $$;
SELECT now() AS before_move \gset
-- two reservations each, 80 and 10, before the move
SELECT tb_acquire('ann', 80), tb_acquire('mann', 80), tb_acquire('member:a:ann', 80),
	tb_acquire('ann', 10), tb_acquire('mann', 10), tb_acquire('member:a:ann', 10),
	tb_acquire('team:b', 100), tb_acquire('mteam:b', 100), tb_acquire('pool:b', 100);
SELECT * FROM pg_temp.moved();
-- the moves: a named child's row changed; a template's key given a row
-- of its own (a new parent by INSERT)
SELECT tb_set_parent('ann', 'team:b'), tb_set_parent('mann', 'mteam:b'),
	tb_set_parent('member:a:ann', 'pool:b');
SELECT child, parent, since > :'before_move' AS since_the_move FROM tb_parents ORDER BY child;
-- the 80 settled without the moment: the bucket gets them back, no parent
SELECT round(tb_settle('ann', 80, 0)::numeric, 2) AS ann,
	round(tb_settle('mann', 80, 0)::numeric, 2) AS mann,
	round(tb_refund('member:a:ann', 80)::numeric, 2) AS member;
SELECT * FROM pg_temp.moved();
-- team:b grants nothing more in its day: 100, not 180
SELECT tb_acquire('team:b', 80) AS team_b, tb_acquire('mteam:b', 80) AS mteam_b,
	tb_acquire('pool:b', 80) AS pool_b;
-- the 10 settled with the moment they were reserved, before the move: the
-- same, the bucket alone
SELECT round(tb_settle('ann', 10, 0, :'before_move')::numeric, 2) AS ann,
	round(tb_refund('mann', 10, :'before_move')::numeric, 2) AS mann,
	round(tb_settle('member:a:ann', 10, 4, :'before_move')::numeric, 2) AS member;
SELECT * FROM pg_temp.moved();
SELECT tb_reset('team:b'), tb_reset('mteam:b'), tb_reset('pool:b');
-- reserved after the move: given back up the new chain; a settle above
-- the reservation charges the chain the bucket has now, whatever the moment
SELECT now() AS after_move \gset
SELECT tb_acquire('ann', 10), tb_acquire('mann', 10), tb_acquire('member:a:ann', 10);
SELECT round(tb_settle('ann', 10, 4, :'after_move')::numeric, 2) AS ann,
	round(tb_refund('mann', 10, :'after_move')::numeric, 2) AS mann,
	round(tb_settle('member:a:ann', 10, 12, :'before_move')::numeric, 2) AS member;
SELECT * FROM pg_temp.moved();
-- a link written above the bucket stops give-backs above it: team:b given
-- a parent, ann's reservation made before that gives back to ann and to
-- team:b (ann's link is older than the reservation), not to org
SELECT tb_reset('org');
SELECT tb_set_parent('team:b', 'org');
SELECT tb_acquire('ann', 5);
SELECT round(tb_refund('ann', 5, :'after_move')::numeric, 2) AS ann;
SELECT * FROM pg_temp.moved() UNION ALL SELECT 'org', round(tokens::numeric, 2) FROM tb_status WHERE name = 'org';
-- the DBA may declare a link older than every reservation: with since
-- '-infinity', even a settle that does not say when gives back up it
UPDATE tb_parents SET since = '-infinity' WHERE child = 'ann';
SELECT tb_acquire('ann', 5);
SELECT round(tb_refund('ann', 5)::numeric, 2) AS ann;
SELECT * FROM pg_temp.moved() UNION ALL SELECT 'org', round(tokens::numeric, 2) FROM tb_status WHERE name = 'org';
-- an UPDATE of a row's parent writes since (unless it sets since itself);
-- a NULL moment is the 3-argument form's; a moment after now is refused
UPDATE tb_parents SET parent = 'team:a' WHERE child = 'ann';
SELECT child, since > :'after_move' AS since_the_update FROM tb_parents WHERE child = 'ann';
SELECT round(tb_settle('ann', 1, 0, NULL)::numeric, 2) AS ann, round(tb_refund('ann', 0, NULL)::numeric, 2) AS ann_again;
SELECT * FROM pg_temp.catch($$SELECT tb_settle('ann', 1, 0, 'infinity')$$);
SELECT code, message ~ '^reserved_at .* is after now$' AS after_now
FROM pg_temp.catch($$SELECT tb_refund('ann', 1, clock_timestamp() + interval '1 minute')$$);
-- a template's row changed: what its keys reserved before gives back to
-- the key alone (pool:a keeps bo's 10, pool:b is given none); what they
-- reserve after, up the new row; writing the same parent again keeps since
SELECT tb_reset('pool:a'), tb_reset('pool:b');
SELECT now() AS before_template \gset
SELECT tb_acquire('member:a:bo', 10);
SELECT tb_set_parent('member:*', 'pool:b');
SELECT since AS template_since FROM tb_parents WHERE child = 'member:*' \gset
SELECT round(tb_refund('member:a:bo', 10, :'before_template')::numeric, 2) AS bo;
SELECT name, round(tokens::numeric, 2) AS tokens FROM tb_status
WHERE name IN ('pool:a', 'pool:b', 'member:a:bo') ORDER BY name;
SELECT now() AS after_template \gset
SELECT tb_acquire('member:a:bo', 10);
SELECT round(tb_refund('member:a:bo', 4, :'after_template')::numeric, 2) AS bo;
SELECT name, round(tokens::numeric, 2) AS tokens FROM tb_status
WHERE name IN ('pool:a', 'pool:b', 'member:a:bo') ORDER BY name;
SELECT tb_set_parent('member:*', 'pool:b');
SELECT since = :'template_since' AS since_kept FROM tb_parents WHERE child = 'member:*';
DELETE FROM tb_parents WHERE child IN ('ann', 'mann', 'member:*', 'member:a:ann', 'team:b');

-- who may: tb_parents is the owner's, like tb_buckets; tb_set_parent is
-- not PUBLIC
CREATE ROLE regress_tb_hierarchy;
SET ROLE regress_tb_hierarchy;
SELECT code, message FROM pg_temp.catch($$INSERT INTO tb_parents VALUES ('user:*', 'org')$$);
SELECT code, message FROM pg_temp.catch($$SELECT tb_set_parent('user:*', 'org')$$);
SELECT code, message FROM pg_temp.catch($$SELECT * FROM tb_parents$$);
RESET ROLE;
GRANT EXECUTE ON FUNCTION tb_set_parent(text, text) TO regress_tb_hierarchy;
SET ROLE regress_tb_hierarchy;
SELECT code, message FROM pg_temp.catch($$SELECT tb_set_parent('user:*', 'org')$$);
RESET ROLE;
SELECT count(*) FROM tb_parents;
-- pg_dump keeps what the DBA declared
SELECT 'tb_parents'::regclass = ANY (extconfig) AS dumped FROM pg_extension WHERE extname = 'tokenbucket';
REVOKE EXECUTE ON FUNCTION tb_set_parent(text, text) FROM regress_tb_hierarchy;
DROP ROLE regress_tb_hierarchy;

DROP EXTENSION tokenbucket;
