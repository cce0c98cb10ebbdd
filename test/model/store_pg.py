"""test/model/store_pg.py: the table store and the memory store behind one
small adapter, for test/model/explore.py.

An adapter makes a schedule's buckets, runs each session's SQL on a
connection of its own, moves the test clock, and answers each call as
("ok", value) or ("err", SQLSTATE).  Another store (or the edition without
C) plugs in as another class with the same methods; the model does not
change.  The server must run with tokenbucket.test_clock = on.
"""

import time

import psycopg

# a call on a row another transaction holds fails fast with 55P03
SESSION_OPTIONS = '-c tokenbucket.row_lock_timeout=20ms -c lock_timeout=2s -c statement_timeout=30s'

# the calendars' anchor: a schedule's time 0 is a whole hour after it, so
# that its quotas' periods start at 0 (the memory store keeps at most 1,024
# calendars: every schedule shares two)
ANCHOR = '2030-01-01 00:00:00'


def sql_for(op, args):
    """The SQL of a session's call (the script shows the same)."""
    if op == 'begin':
        return 'BEGIN'
    if op == 'commit':
        return 'COMMIT'
    if op == 'rollback':
        return 'ROLLBACK'
    if op == 'savepoint':
        return 'SAVEPOINT s'
    if op == 'rollback_to':
        return 'ROLLBACK TO SAVEPOINT s'
    if op == 'prepare':
        return "PREPARE TRANSACTION '%s'" % args[0]
    if op == 'take':
        return "SELECT tb_acquire('%s', %g)" % args
    if op == 'take_all':
        return "SELECT tb_acquire_all(ARRAY['%s', '%s'], ARRAY[%g, %g])" % (args[0], args[2], args[1], args[3])
    if op == 'peek':
        return "SELECT (tb_peek('%s', 0)).remaining" % args
    if op == 'refund':
        return "SELECT tb_refund('%s', %g)" % args
    if op == 'settle':
        return "SELECT tb_settle('%s', %g, %g)" % args
    if op == 'sync':
        return "SELECT tb_sync('%s', %g)" % args
    if op == 'pause':
        return "SELECT tb_pause('%s', '%d microseconds')" % args
    raise ValueError(op)


def setup_sql(cfgs, parents, k):
    """The SQL that makes a schedule's buckets at time 0 (schedule k)."""
    out = ["SELECT tb_test_clock_set(timestamptz '%s+00' + interval '%d hours')" % (ANCHOR, k + 1)]
    for c in cfgs:
        memory = 'true' if c.memory else 'false'
        if c.period:
            out.append("SELECT tb_create_quota('%s', %g, '%d microseconds', 'UTC', '%s', %g, %s)"
                       % (c.name, c.refill, c.period, ANCHOR, c.capacity - c.refill, memory))
        else:
            out.append("SELECT tb_create('%s', %g, %g, memory => %s)"
                       % (c.name, c.capacity, c.refill, memory))
    for child, parent in parents.items():
        out.append("SELECT tb_set_parent('%s', '%s')" % (child, parent))
    return out


class PgStore:
    """Buckets in one PostgreSQL database, table (memory=False) or memory."""

    memory = False
    name = 'table'

    def __init__(self, dsn):
        self.dsn = dsn
        self.admin = psycopg.connect(dsn, autocommit=True, options=SESSION_OPTIONS)
        self.admin.execute('CREATE EXTENSION IF NOT EXISTS tokenbucket')
        # what an interrupted run left: the explorer's buckets and prepared transactions
        for (gid,) in self.admin.execute("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'x%' AND database = current_database()").fetchall():
            self.admin.execute("ROLLBACK PREPARED '%s'" % gid)
        self.admin.execute("DELETE FROM tb_parents WHERE child LIKE 'x%'")
        self.admin.execute("SELECT tb_drop(name) FROM tb_buckets WHERE name LIKE 'x%'")
        self.conns = {}
        self.names = []

    def conn(self, sid):
        if sid not in self.conns:
            self.conns[sid] = psycopg.connect(self.dsn, autocommit=True, options=SESSION_OPTIONS)
        return self.conns[sid]

    @staticmethod
    def execute(conn, sql):
        try:
            cur = conn.execute(sql)
            row = cur.fetchone() if cur.description else None
            return ('ok', row[0] if row else None)
        except psycopg.Error as e:
            return ('err', e.sqlstate or 'connection')

    def admin_sql(self, sql):
        result = self.execute(self.admin, sql)
        if result[0] == 'err' and result[1] not in ('55P03',):
            raise RuntimeError('%s: %s' % (sql, result))
        return result

    def begin_schedule(self, cfgs, parents, k):
        self.names = [c.name for c in cfgs]
        for sql in setup_sql(cfgs, parents, k):
            self.admin_sql(sql)

    def call(self, sid, op, args):
        return self.execute(self.conn(sid), sql_for(op, args))

    def advance(self, usecs):
        self.admin_sql("SELECT tb_test_clock_advance('%d microseconds')" % usecs)

    def reset(self, name):
        return self.admin_sql("SELECT tb_reset('%s')" % name)

    def set_parent(self, child, parent):
        self.admin_sql("SELECT tb_set_parent('%s', %s)" % (child, "'%s'" % parent if parent else 'NULL'))

    def finish_prepared(self, gid, commit):
        self.admin_sql("%s PREPARED '%s'" % ('COMMIT' if commit else 'ROLLBACK', gid))

    def die(self, sid):
        """The session's backend ends (pg_terminate_backend); a new one replaces it."""
        conn = self.conns.pop(sid, None)
        if conn is None:
            return
        pid = conn.info.backend_pid
        self.admin_sql('SELECT pg_terminate_backend(%d)' % pid)
        for _ in range(3000):
            gone = self.admin.execute('SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = %d)'
                                      % pid).fetchone()[0]
            if gone:
                break
            time.sleep(0.002)
        conn.close()

    def end_schedule(self):
        for conn in self.conns.values():
            self.execute(conn, 'ROLLBACK')
            conn.close()
        self.conns = {}
        for (gid,) in self.admin.execute("SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'x%' AND database = current_database()").fetchall():
            self.finish_prepared(gid, False)
        self.admin_sql('DELETE FROM tb_parents')
        for name in self.names:
            self.admin_sql("SELECT tb_drop('%s')" % name)

    def close(self):
        self.end_schedule()
        self.admin.close()


class TableStore(PgStore):
    memory = False
    name = 'table'


class MemoryStore(PgStore):
    memory = True
    name = 'memory'
