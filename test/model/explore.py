#!/usr/bin/python3
"""test/model/explore.py: schedules of sessions, checked against the model.

Each schedule is a world of buckets (WORLD) and steps: sessions s1..s3
taking, peeking, settling, refunding, syncing, pausing, in transactions
with savepoints, prepared or not, or dying; and the DBA moving the test
clock across refills and period starts, resetting, moving a bucket to
another parent, finishing a prepared transaction.  After every step: the
store's answer is one the model allows (model.Expect), no window granted
more than its ceiling (model.Ledger), and no call raised XX000.

    explore.py [--store model|table|memory|both] [--dsn DSN] [--seeds A-B]
               [--new N] [--every [--limit N]] [--known 1,2] [--tap] [--summary] [--keep-going]

--seeds runs the schedules of those seeds (random, each of STEPS steps);
--new N adds N seeds drawn from the time, printed; --every runs every
interleaving of three small programs (two sessions and the DBA, four steps
each) made from each seed.  Without a server (--store model) the model
answers for itself (the most generous answer where it leaves a choice),
which checks the model's own consistency, millions of steps a minute.
A failure prints its seed and its schedule as a psql script (the sessions
as dblink connections) and exits 1.  Prints TAP with --tap.

--known lists KNOWN_FINDINGS to step around: a step that would show a
known finding is skipped (and shown as skipped).  The lead removes a
finding from the default once its fix is merged.
"""

import argparse
import itertools
import random
import sys
import time

sys.path.insert(0, __import__('os').path.dirname(__file__))
import model as M  # noqa: E402

SESSIONS = ('s1', 's2', 's3')
SECOND = 1000000

# Findings of issue 54 that the stores still show; until their fixes are
# merged, the sample that `make test` runs steps around them.  Remove an
# entry when its fix lands.
KNOWN_FINDINGS = {
}


def world(prefix, memory):
    """The buckets of a schedule, and their parents."""
    P = lambda n: prefix + n  # noqa: E731
    cfgs = [
        M.Cfg(P('b'), 10, 2, memory=memory),                    # 10, 2 a second
        M.Cfg(P('q'), 10, 10, period=5 * SECOND, memory=memory),  # 10 per 5 s
        M.Cfg(P('qc'), 10, 10, period=5 * SECOND, carry=5, memory=memory),
        M.Cfg(P('pa'), 10, 10, period=3600 * SECOND, memory=memory),  # 10 an hour
        M.Cfg(P('pb'), 10, 10, period=3600 * SECOND, memory=memory),
        M.Cfg(P('c1'), 10, 2, memory=memory),
        M.Cfg(P('c2'), 10, 2, memory=memory),
    ]
    return cfgs, {P('c1'): P('pa'), P('c2'): P('pb')}


TAKEN = ('b', 'q', 'qc', 'c1', 'c2', 'pb')


def random_step(rng, sessions, names=TAKEN):
    """One step: (actor, op, args), bucket names (of "names") without the prefix."""
    r = rng.random()
    if r < 0.12:
        return ('dba', 'advance', (rng.choice((1, 300000, 1 * SECOND, 2500000, 5 * SECOND)),))
    if r < 0.15:
        return ('dba', 'set_parent', (rng.choice(('c1', 'c2')), rng.choice(('pa', 'pb'))))
    if r < 0.17:
        return ('dba', 'reset', (rng.choice(names),))
    if r < 0.19:
        return ('dba', 'finish_prepared', (rng.random() < 0.8,))
    sid = rng.choice(sessions)
    r = rng.random()
    name = rng.choice(names)
    if r < 0.30:
        return (sid, 'take', (name, rng.choice((1, 3, 5, 10))))
    if r < 0.34 and len(names) > 1:
        a, b = rng.sample(names, 2)
        return (sid, 'take_all', (a, rng.choice((1, 3, 5)), b, rng.choice((1, 3, 5))))
    if r < 0.38:
        return (sid, 'peek', (name,))
    if r < 0.46:
        return (sid, 'settle', (name, rng.choice((0, 1, 7))))       # used
    if r < 0.51:
        return (sid, 'refund', (name, rng.choice((1, 3))))          # of the reservation
    if r < 0.53:
        return (sid, 'sync', (name, rng.choice((0, 4))))
    if r < 0.55:
        return (sid, 'pause', (name, rng.choice((300000, 2 * SECOND))))
    if r < 0.67:
        return (sid, 'begin', ())
    if r < 0.75:
        return (sid, 'commit', ())
    if r < 0.83:
        return (sid, 'rollback', ())
    if r < 0.87:
        return (sid, 'savepoint', ())
    if r < 0.91:
        return (sid, 'rollback_to', ())
    if r < 0.96:
        return (sid, 'prepare', ())
    return (sid, 'die', ())


# the buckets one schedule uses: a few, so that sessions meet on them
THEMES = (('b', 'q'), ('q', 'qc'), ('b', 'qc'), ('c1', 'c2'), ('c1', 'pb'), ('c1', 'c2', 'pb'),
          ('b', 'q', 'qc', 'c1', 'c2', 'pb'))


def schedule(seed, steps=30, sessions=SESSIONS):
    rng = random.Random(seed)
    names = rng.choice(THEMES)
    sessions = sessions[:rng.choice((2, 3))]
    return [random_step(rng, sessions, names) for _ in range(steps)]


def small_programs(seed, length=4):
    """Three programs of "length" steps (s1, s2, the DBA) for --every."""
    rng = random.Random(seed)
    progs = []
    for sid in ('s1', 's2'):
        prog = [(sid, 'begin', ())]
        while len(prog) < length:
            step = random_step(rng, (sid,))
            if step[0] == sid and step[1] not in ('begin', 'die', 'prepare'):
                prog.append(step)
        progs.append(prog)
    dba = []
    while len(dba) < length:
        step = random_step(rng, ('s1',))
        if step[0] == 'dba':
            dba.append(step)
    progs.append(dba)
    return progs


def interleavings(progs, done=()):
    """Every order of the steps that keeps each program's own order."""
    if not any(progs):
        yield list(done)
    for i, prog in enumerate(progs):
        if prog:
            rest = progs[:i] + [prog[1:]] + progs[i + 1:]
            yield from interleavings(rest, done + (prog[0],))


class ModelAnswers:
    """No store: the model answers for itself, as generously as it allows."""

    name = 'model'

    def __init__(self, memory):
        self.memory = memory

    @staticmethod
    def answer(expect):
        if expect.ok:
            if expect.values is not None:
                return ('ok', max(expect.values)) if expect.values else ('err', min(expect.errors))
            if expect.lo is not None:
                return ('ok', expect.hi)
            return ('ok', None)
        return ('err', min(expect.errors))


class Known(Exception):
    """A step that would show a known finding: skipped."""


def skip_known(m, known, actor, op, args):
    """The known finding (from "known") a step would show, or None."""
    if '1' in known and m.memory and actor != 'dba':
        s = m.session(actor)
        undone = []
        if op in ('rollback', 'die', 'prepare') or (op == 'commit' and s.state == 'aborted'):
            undone = s.levels
        elif op == 'rollback_to':     # or an error (no savepoint): the same level
            undone = s.levels[-1:]
        # the store gives back all it took (capped at capacity): more than
        # as if never made once the bucket refilled or changed meanwhile
        for rec in (rec for lv in undone for rec in lv.taken):
            row, cfg = m.rows[rec.name], m.cfg[rec.name]
            row.advance(cfg, m.now)
            rec.without.advance(cfg, m.now)
            if max(0.0, row.lo - rec.tokens) < rec.without.lo - 1e-9:
                return '1'
    return None


def run(steps, store, k, known=(), script=None):
    """Run one schedule on store (or the model alone); raise Mismatch."""
    prefix = 'x%d_' % k
    cfgs, parents = world(prefix, store.memory)
    m = M.Model(cfgs, store.memory)
    for child, parent in parents.items():
        m.set_parent(child, parent)
    live = not isinstance(store, ModelAnswers)
    if live:
        store.begin_schedule(cfgs, parents, k)
    if script is not None:
        script.setup(cfgs, parents, k)
    gids = []
    try:
        for n, (actor, op, args) in enumerate(steps):
            args = tuple(prefix + a if isinstance(a, str) else a for a in args)
            if op == 'settle':           # settles the session's reservation
                r = m.session(actor).reservations.get(args[0])
                if not r:
                    continue
                args = (args[0], r[0], min(args[1], 10))
            if op == 'refund':
                r = m.session(actor).reservations.get(args[0])
                if not r:
                    continue
                args = (args[0], min(args[1], r[0]))
            if op == 'prepare':
                args = ('%s%s_%d' % (prefix, actor, n),)
            if op == 'take_all':     # a parent met twice in one call: not modelled
                s = m.session(actor)
                met = [x for name in args[::2] for x in m.chain(s, name)]
                if s.state == 'idle':
                    s.parents = None
                if len(set(met)) < len(met):
                    continue
            if op == 'set_parent' and (m.prepared or any(
                    x.state != 'idle' for x in m.sessions.values())):
                continue     # read by an open transaction at a moment the model does not fix
            finding = skip_known(m, known, actor, op, args)
            if finding:
                if script is not None:
                    script.comment('skipped: %s %s%r (known finding %s)' % (actor, op, args, finding))
                continue
            step(m, store, live, actor, op, args, gids, script)
    except M.Mismatch as e:
        if script is not None:
            script.comment('FAILED: %s' % e)
        raise
    finally:
        if live:
            store.end_schedule()


def step(m, store, live, actor, op, args, gids, script):
    if actor == 'dba':
        if op == 'advance':
            m.advance(args[0])
            if live:
                store.advance(args[0])
            if script is not None:
                script.dba("SELECT tb_test_clock_advance('%d microseconds')" % args[0])
        elif op == 'set_parent':
            m.set_parent(*args)
            if live:
                store.set_parent(*args)
            if script is not None:
                script.dba("SELECT tb_set_parent('%s', '%s')" % args)
        elif op == 'reset':
            expect, apply = m.reset(args[0])
            result = store.reset(args[0]) if live else store.answer(expect)
            if script is not None:
                script.dba("SELECT tb_reset('%s')" % args[0], expect, result)
            if not expect.allows(result, 1e-6):
                raise M.Mismatch('dba reset(%s): the model allows %r, the store answered %r'
                                 % (args[0], expect, result))
            if apply and result[0] == 'ok':
                apply(None)
        elif op == 'finish_prepared' and gids:
            gid = gids.pop(0)
            m.finish_prepared(gid, args[0])
            if live:
                store.finish_prepared(gid, args[0])
            if script is not None:
                script.dba("%s PREPARED '%s'" % ('COMMIT' if args[0] else 'ROLLBACK', gid))
        for name in m.cfg:
            m.ledger[name].check(m.now)
        return
    if op == 'die':
        s = m.session(actor)
        if s.state != 'idle':
            m.end(s, False)
        if live:
            store.die(actor)
        if script is not None:
            script.die(actor)
        return

    def answer(expect):
        return store.call(actor, op, args) if live else store.answer(expect)
    if script is not None:
        from store_pg import sql_for
        sql = sql_for(op, args)
    try:
        expect, result = m.call(actor, op, args, answer)
    except M.Mismatch:
        if script is not None:
            script.session(actor, sql, None, None)
        raise
    if script is not None:
        script.session(actor, sql, expect, result)
    if result == ('err', 'XX000'):
        raise M.Mismatch('%s %s%r raised XX000' % (actor, op, args))
    if op == 'prepare' and result[0] == 'ok' and args[0] in m.prepared:
        gids.append(args[0])


class Script:
    """A failing schedule as a psql script: the DBA's statements run in
    psql's own session, each session's through a dblink connection."""

    def __init__(self, seed, store):
        self.lines = [
            '-- test/model: seed %s on the %s store' % (seed, store),
            '-- Run on a server started with tokenbucket.test_clock = on (the library',
            '-- preloaded), as a superuser, in a database of its own: psql -f FILE',
            'CREATE EXTENSION IF NOT EXISTS tokenbucket;',
            'CREATE EXTENSION IF NOT EXISTS dblink;',
        ]
        self.connected = set()

    def setup(self, cfgs, parents, k):
        from store_pg import setup_sql
        self.lines += [sql + ';' for sql in setup_sql(cfgs, parents, k)]

    def comment(self, text):
        self.lines.append('-- ' + text)

    def dba(self, sql, expect=None, result=None):
        self.lines.append(sql + ';' + (note(expect, result) if expect else ''))

    def connect(self, sid):
        if sid not in self.connected:
            self.connected.add(sid)
            self.lines.append(
                "SELECT dblink_connect('%s', format('dbname=%%s port=%%s host=%%s options=''-c "
                "tokenbucket.row_lock_timeout=20ms''', current_database(), current_setting('port'), "
                "split_part(current_setting('unix_socket_directories'), ',', 1)));" % sid)

    def session(self, sid, sql, expect, result):
        self.connect(sid)
        self.lines.append("SELECT * FROM dblink('%s', $q$%s$q$) AS %s(answer text);%s"
                          % (sid, sql, sid, note(expect, result)))

    def die(self, sid):
        if sid in self.connected:
            self.lines.append("SELECT pg_terminate_backend(pid) FROM dblink('%s', 'SELECT pg_backend_pid()') "
                              "AS %s(pid int); SELECT dblink_disconnect('%s');" % (sid, sid, sid))
            self.lines.append("SELECT pg_sleep(0.2);  -- its backend ends")
            self.connected.discard(sid)

    def text(self):
        return '\n'.join(self.lines) + '\n'


def note(expect, result):
    if expect is None and result is None:
        return '  -- the step that failed'
    if expect is None:
        return ''
    got = 'ERROR %s' % result[1] if result[0] == 'err' else result[1]
    return '  -- model: %r; store: %s' % (expect, got)


def stores(which, dsn):
    if which == 'model':
        return [ModelAnswers(False), ModelAnswers(True)]
    import store_pg
    out = []
    if which in ('table', 'both'):
        out.append(store_pg.TableStore(dsn))
    if which in ('memory', 'both'):
        out.append(store_pg.MemoryStore(dsn))
    return out


def parse_seeds(text):
    out = []
    for part in filter(None, text.split(',')):
        a, _, b = part.partition('-')
        out += list(range(int(a), int(b or a) + 1))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--store', default='model', choices=('model', 'table', 'memory', 'both'))
    ap.add_argument('--dsn', default='')
    ap.add_argument('--seeds', default='1-20')
    ap.add_argument('--new', type=int, default=0)
    ap.add_argument('--steps', type=int, default=30)
    ap.add_argument('--every', action='store_true')
    ap.add_argument('--limit', type=int, default=0)
    ap.add_argument('--length', type=int, default=4, help='steps of each program of --every')
    ap.add_argument('--known', default=','.join(KNOWN_FINDINGS))
    ap.add_argument('--tap', action='store_true')
    ap.add_argument('--summary', action='store_true', help='one TAP line per store')
    ap.add_argument('--keep-going', action='store_true')
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    known = set(filter(None, args.known.split(',')))
    seeds = parse_seeds(args.seeds)
    if args.new:
        base = int(time.time() * 1000) % 10 ** 9
        fresh = [base + i for i in range(args.new)]
        print('# new seeds: %s' % ','.join(map(str, fresh)))
        seeds += fresh
    if known:
        print('# stepping around known findings: %s' % ', '.join(
            '%s (%s)' % (f, KNOWN_FINDINGS.get(f, '?')) for f in sorted(known)))
    failed = 0
    count = steps_run = 0
    t0 = time.time()
    k = 0
    tap_n = 0
    for store in stores(args.store, args.dsn):
        for seed in seeds:
            if args.every:
                cases = interleavings(small_programs(seed, args.length))
                if args.limit:
                    cases = itertools.islice(cases, args.limit)
            else:
                cases = [schedule(seed, args.steps)]
            bad = None
            for steps in cases:
                k += 1
                try:
                    run(steps, store, k, known)
                    count += 1
                    steps_run += len(steps)
                except M.Mismatch as e:
                    bad = (steps, e)
                    break
            tap_n += 1
            if bad is None:
                if args.tap and not args.summary:
                    print('ok %d - %s store, seed %d%s' % (tap_n, store.name, seed,
                                                           ' (every interleaving)' if args.every else ''))
                continue
            failed += 1
            steps, e = bad
            k += 1
            script = Script(seed, store.name)
            try:
                run(steps, store, k, known, script)
            except M.Mismatch:
                pass
            print('%s %d - %s store, seed %d: %s' % ('not ok' if args.tap else 'FAILED', tap_n,
                                                      store.name, seed, e))
            print('\n'.join('# ' + line for line in script.text().splitlines()))
            if not args.keep_going:
                break
        if failed and not args.keep_going:
            break
    secs = time.time() - t0
    if args.summary:
        print('%s - %s: %d seeds%s' % ('not ok' if failed else 'ok', args.store, len(seeds),
                                      ' (every interleaving)' if args.every else ''))
    elif args.tap:
        print('1..%d' % tap_n)
    print('# %d schedules, %d steps in %.1f s: %.0f schedules/s, %.0f steps/s'
          % (count, steps_run, secs, count / secs if secs else 0, steps_run / secs if secs else 0))
    sys.exit(1 if failed else 0)


if __name__ == '__main__':
    main()
