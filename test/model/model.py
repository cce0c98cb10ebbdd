"""test/model/model.py: tokenbucket's rules as one executable model.

The documentation of the rules (docs/sql-reference.md, docs/guarantees.md,
docs/memory-buckets.md) written as a program, and checked against every
store by test/model/explore.py.  Time is an integer of microseconds
(the test clock's, from the server's tokenbucket.test_clock); tokens are
float8s computed as src/bucket.c computes them.

What a bucket holds is kept as an interval: the deficit (tokens short of
full) is between lo and hi.  It is exact (lo == hi) until a rule leaves
the store a choice: a rolled-back grant of a memory bucket gives back at
most what it took, and no more than the bucket could hold had the grant
never been made, so the model only knows it gives back between nothing
and all of it.  An answer is "decided" when every state in the interval
gives it; otherwise the store's answer is taken, and narrows the interval.

Whatever the states, the safety rule is checked on its own, from the
grants alone (Ledger.check): over any window [a, b] a bucket grants at most
what it can hold at a (its capacity) plus what refills in (a, b] (a
quota: the budgets of the periods begun), plus the tokens given back to it
(refunds and settlements that were not rolled back) and its capacity again
for each reset.  Grants rolled back count for nothing: they were as if
never made.  Takes into debt (tb_settle above the reservation) are not
grants, and only lower what can be granted.

The transaction rules (src/xact.c): what takes capacity takes effect at
once; what gives it back reaches others at commit (its own session sees
it at once); a rolled-back call is as if it had never been made.  A table
bucket follows them through its row: a write holds the row until the
transaction ends (others fail with 55P03 after tokenbucket.row_lock_timeout)
and a rollback puts back the row as it was.  A memory bucket is taken from
in shared memory at once, without locks.

Parents: a take charges the bucket and its parent, all or nothing; a
settlement or refund without reserved_at gives back to the bucket alone
(never to a parent it was not charged to: finding 2 of issue 54), and a
settlement above the reservation takes from the bucket and its parents.
tb_sync lowers the bucket alone.  A session reads tb_parents at the start
of its transaction, or later: PostgreSQL hands a backend the change at
the start of a transaction or when a call first locks a table in it, so
the explorer moves a parent only while no transaction is open (and the
model reads tb_parents once per transaction).
"""

import copy


class Cfg:
    """A bucket's settings: continuous (refill tokens a second), or a quota
    (refill = budget at each start of a period of "period" microseconds from
    the time 0, holding at most budget + carry)."""

    def __init__(self, name, capacity, refill, period=0, carry=0.0, memory=False):
        self.name = name
        self.refill = float(refill)
        self.period = period
        self.capacity = float(capacity) + (carry if period else 0.0)
        self.memory = memory

    def refilled(self, t0, t1):
        """Tokens refilled in (t0, t1]."""
        if t1 <= t0:
            return 0.0
        if self.period:
            return self.refill * (t1 // self.period - t0 // self.period)
        return (t1 - t0) / 1e6 * self.refill

    def deficit_at(self, d, t0, t1):
        """bucket_deficit_at(): the deficit d written at t0, at t1."""
        if t1 <= t0:
            return d
        if self.period:
            n = t1 // self.period - t0 // self.period
            return d if n == 0 else max(0.0, d - n * self.refill)
        return max(0.0, d - ((t1 - t0) / 1e6) * self.refill)

    def initial_deficit(self):
        return max(0.0, self.capacity - self.refill) if self.period else 0.0


class Row:
    """A bucket's state: deficit in [lo, hi] at "at", paused until [plo, phi]."""

    def __init__(self, cfg, t):
        self.lo = self.hi = cfg.initial_deficit()
        self.at = t
        self.plo = self.phi = -1

    def advance(self, cfg, t):
        """Refill to t (never back: updated_at = max(updated_at, t))."""
        if t > self.at:
            self.lo = cfg.deficit_at(self.lo, self.at, t)
            self.hi = cfg.deficit_at(self.hi, self.at, t)
            self.at = t


class Expect:
    """What the model allows a call to answer: a value (a set of booleans, an
    interval of float8s, or None for void) and/or errors (SQLSTATEs)."""

    def __init__(self, values=None, lo=None, hi=None, errors=(), ok=True, why=''):
        self.values, self.lo, self.hi, self.why = values, lo, hi, why
        self.errors = set(errors)
        self.ok = ok

    def allows(self, result, eps):
        kind, v = result
        if kind == 'err':
            return v in self.errors
        if not self.ok:
            return False
        if self.values is not None:
            return v in self.values
        if self.lo is not None:
            return v is not None and self.lo - eps <= v <= self.hi + eps
        return True

    def decided(self):
        return not self.errors and (self.values is None or len(self.values) == 1) \
            and (self.lo is None or self.lo == self.hi)

    def __repr__(self):
        parts = []
        if self.ok:
            if self.values is not None:
                parts.append('/'.join(str(v) for v in sorted(self.values)))
            elif self.lo is not None:
                parts.append('%g' % self.lo if self.lo == self.hi else '[%g, %g]' % (self.lo, self.hi))
            else:
                parts.append('ok')
        parts += ['ERROR %s' % e for e in sorted(self.errors)]
        return ' or '.join(parts) + (' (%s)' % self.why if self.why else '')


def add(row, tokens):
    """Take tokens (give back when negative: capped at full, never below 0)."""
    row.lo, row.hi = max(0.0, row.lo + tokens), max(0.0, row.hi + tokens)


def fmt(lo, hi):
    return '%g' % lo if lo == hi else '[%g, %g]' % (lo, hi)


class Mismatch(Exception):
    """A store answered what the model does not allow, or over-granted."""


class Entry:
    """A grant, or tokens given back, as the ledger counts them."""

    def __init__(self, kind, t, amount):
        self.kind, self.t, self.amount = kind, t, amount
        self.live = True
        self.commit_t = None


class Ledger:
    """Every grant and give-back of one bucket, for the ceiling of any window."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.entries = []

    def add(self, kind, t, amount):
        e = Entry(kind, t, amount)
        self.entries.append(e)
        return e

    def check(self, now):
        """Over every window [a, now] starting at a grant: granted <= capacity
        + refilled in (a, now] + given back meanwhile + capacity per reset."""
        cfg = self.cfg
        grants = [e for e in self.entries if e.live and e.kind == 'grant']
        eps = 1e-6 * max(1.0, cfg.capacity)
        for a in sorted({e.t for e in grants}):
            granted = sum(e.amount for e in grants if e.t >= a)
            ceiling = cfg.capacity + cfg.refilled(a, now)
            for e in self.entries:
                if e.live and e.kind == 'back' and e.t <= now and \
                        (e.commit_t is None or e.commit_t >= a):
                    ceiling += e.amount
                elif e.kind == 'reset' and e.t >= a:
                    ceiling += cfg.capacity
            if granted > ceiling + eps:
                raise Mismatch('over the ceiling: bucket %s granted %g in [%d, %d] us, '
                               'at most %g' % (cfg.name, granted, a, now, ceiling))


class Taken:
    """A memory bucket's capacity taken at once (a grant, a take into debt,
    a sync), and the bucket as it would be had it never been taken
    ("without": refilled and changed by everyone else alike).  A rollback
    leaves the bucket between "without" and as it is: as if the call had
    never been made, or giving back less."""

    def __init__(self, name, tokens, t, without):
        self.name, self.tokens, self.t, self.without = name, tokens, t, without


class Level:
    """What a transaction (index 0) or a savepoint did, to undo or commit."""

    def __init__(self):
        self.saved = {}        # table: name -> Row before this level (None: not held)
        self.taken = []        # memory: Taken records, to give back on rollback
        self.paused = []       # memory: (name, plo before)
        self.pending = []      # memory: (name, tokens) given back at commit
        self.entries = []      # ledger entries made here
        self.resv = []         # (name, reservation before)


class Session:
    def __init__(self, sid):
        self.sid = sid
        self.state = 'idle'    # idle, open, aborted
        self.levels = []
        self.parents = None    # tb_parents as read at the transaction's start
        self.reservations = {}  # name -> (tokens, parents charged)


class Model:
    """The rules, over a world of buckets (Cfg) of one store."""

    def __init__(self, cfgs, memory, t=0):
        self.cfg = {c.name: c for c in cfgs}
        self.memory = memory
        self.rows = {c.name: Row(c, t) for c in cfgs}   # memory: shared; table: committed
        self.owner = {}        # table: name -> sid holding its row
        self.work = {}         # table: name -> the holder's row
        self.ledger = {c.name: Ledger(c) for c in cfgs}
        self.parents = {}      # committed tb_parents: child -> parent
        self.sessions = {}
        self.now = t
        self.prepared = {}     # gid -> Session
        self.open = {c.name: [] for c in cfgs}  # memory: Taken not yet ended

    # -- reading ------------------------------------------------------

    def session(self, sid):
        if sid not in self.sessions:
            self.sessions[sid] = Session(sid)
        return self.sessions[sid]

    def chain(self, s, name):
        """The bucket and its parents, as session s's transaction reads them."""
        if s.parents is None:
            s.parents = dict(self.parents)
        out = [name]
        while out[-1] in s.parents and len(out) < 9:
            out.append(s.parents[out[-1]])
        return out

    def row_seen(self, s, name):
        """The row s sees (a copy, refilled to now): its own changes included."""
        cfg = self.cfg[name]
        if not self.memory and self.owner.get(name) == s.sid:
            row = copy.copy(self.work[name])
        else:
            row = copy.copy(self.rows[name])
        row.advance(cfg, self.now)
        if self.memory:
            back = sum(x for lv in s.levels for (n, x) in lv.pending if n == name)
            row.lo, row.hi = max(0.0, row.lo - back), max(0.0, row.hi - back)
        return row

    def held_by_other(self, s, names):
        return not self.memory and any(self.owner.get(n) not in (None, s.sid) for n in names)

    # -- writing ------------------------------------------------------

    def write(self, s, name):
        """The row s changes now (refilled to now); the table store's is held."""
        cfg = self.cfg[name]
        if self.memory:
            row = self.rows[name]
        else:
            lv = s.levels[-1]
            if self.owner.get(name) != s.sid:
                lv.saved.setdefault(name, None)
                self.owner[name] = s.sid
                self.work[name] = copy.copy(self.rows[name])
            else:
                lv.saved.setdefault(name, copy.copy(self.work[name]))
            row = self.work[name]
        row.advance(cfg, self.now)
        return row

    def shared_change(self, name, change):
        """Change a memory bucket (row -> None), and alike the bucket each
        open Taken of it would be without its own take."""
        cfg = self.cfg[name]
        for row in [self.rows[name]] + [r.without for r in self.open[name]]:
            row.advance(cfg, self.now)
            change(row)

    def cap_back(self, s, name):
        """A memory bucket's uncommitted give-back of s counts, when s next
        calls on it, no more than the bucket is then short of full (a
        refill that filled it meanwhile used it up)."""
        back = sum(x for lv in s.levels for (n, x) in lv.pending if n == name)
        row = self.rows[name]
        row.advance(self.cfg[name], self.now)
        if back > row.hi:
            s.levels[-1].pending.append((name, row.hi - back))

    def take_now(self, s, name, tokens):
        """Take at once.  A memory bucket's session takes first what it gave
        back itself and has not committed yet, as far as that still counts
        (no more than the bucket is short of full: what a refill made full
        again gives nothing); the rest from shared memory."""
        if self.memory:
            back = sum(x for lv in s.levels for (n, x) in lv.pending if n == name)
            row = self.rows[name]
            row.advance(self.cfg[name], self.now)
            own = min(tokens, back, row.hi) if back > 0 else 0.0
            if own > 0:
                s.levels[-1].pending.append((name, -own))
            def take(r):
                r.lo += tokens - (min(tokens, back, r.lo) if back > 0 else 0.0)
                r.hi += tokens - own
            if tokens - own > 0 or row.lo + tokens - min(tokens, back, row.lo) > row.lo:
                self.remember(s, name, tokens - (min(tokens, back, row.lo) if back > 0 else 0.0), take)
        else:
            add(self.write(s, name), tokens)

    def remember(self, s, name, tokens, change):
        """Take capacity of a memory bucket at once, remembering it to undo."""
        row = self.rows[name]
        row.advance(self.cfg[name], self.now)
        rec = Taken(name, tokens, self.now, copy.copy(row))
        self.shared_change(name, change)
        self.open[name].append(rec)
        s.levels[-1].taken.append(rec)

    def give_back(self, s, name, tokens):
        """Give back, capped at what s sees missing then (a memory bucket's
        reaches others at commit: no more than that then either)."""
        tokens = min(tokens, self.row_seen(s, name).hi)
        if self.memory:
            s.levels[-1].pending.append((name, tokens))
        else:
            row = self.write(s, name)
            row.lo, row.hi = max(0.0, row.lo - tokens), max(0.0, row.hi - tokens)
        s.levels[-1].entries.append(self.ledger[name].add('back', self.now, tokens))

    def reserve(self, s, name, value):
        s.levels[-1].resv.append((name, s.reservations.get(name)))
        if value is None:
            s.reservations.pop(name, None)
        else:
            s.reservations[name] = value

    # -- transactions -------------------------------------------------

    def undo(self, s, lv):
        """Roll back one level: as if its calls had never been made."""
        for name, before in lv.saved.items():
            if before is None:
                self.owner.pop(name, None)
                self.work.pop(name, None)
            else:
                self.work[name] = before
        for rec in reversed(lv.taken):
            # as if never made, or giving back less
            self.open[rec.name].remove(rec)
            row = self.rows[rec.name]
            rec.without.advance(self.cfg[rec.name], self.now)
            row.advance(self.cfg[rec.name], self.now)
            row.lo = min(max(row.lo - rec.tokens, rec.without.lo), row.hi)
            row.lo = max(row.lo, 0.0)
            for other in self.open[rec.name]:   # without both: at most as much less
                other.without.advance(self.cfg[rec.name], self.now)
                other.without.lo = max(0.0, other.without.lo - rec.tokens)
        for name, plo in lv.paused:
            self.rows[name].plo = min(self.rows[name].plo, plo)
        for e in lv.entries:
            e.live = False
        for name, before in reversed(lv.resv):
            if before is None:
                s.reservations.pop(name, None)
            else:
                s.reservations[name] = before

    def end(self, s, commit):
        for lv in s.levels:
            for rec in lv.taken if commit else ():
                self.open[rec.name].remove(rec)
        if commit:
            net = {}
            for lv in s.levels:
                for name, tokens in lv.pending:
                    net[name] = net.get(name, 0.0) + tokens
                for e in lv.entries:
                    e.commit_t = self.now
            for name, tokens in net.items():     # what is left of them, at once
                self.shared_change(name, lambda row: add(row, -tokens))
            for name in [n for n, o in self.owner.items() if o == s.sid]:
                self.rows[name] = self.work.pop(name)
                del self.owner[name]
        else:
            for lv in reversed(s.levels):
                self.undo(s, lv)
        s.levels, s.state, s.parents = [], 'idle', None

    # -- calls ----------------------------------------------------------
    #
    # Each returns the Expect for a call by session sid at self.now, and a
    # function that applies the answer the store gave (or the model chose).

    def call(self, sid, op, args, answer):
        """Run one step: the model's Expect, the answer (answer(expect)),
        checked, then applied.  Returns (expect, result)."""
        s = self.session(sid)
        handler = getattr(self, 'do_' + op)
        implicit = False
        if op in ('begin', 'commit', 'rollback', 'savepoint', 'rollback_to', 'prepare'):
            expect, apply = handler(s, *args)
        elif s.state == 'aborted':
            expect, apply = Expect(ok=False, errors={'25P02'}), None
        else:
            implicit = s.state == 'idle'
            if implicit:
                s.state, s.levels = 'open', [Level()]
            if self.memory:
                for name in args[::2] if op == 'take_all' else args[:1]:
                    for n in self.chain(s, name):
                        self.cap_back(s, n)
            expect, apply = handler(s, *args)
        result = answer(expect)
        if not expect.allows(result, 1e-6 * max([1.0] + [c.capacity for c in self.cfg.values()])):
            text = '%s %s%r: the model allows %r, the store answered %r' % (sid, op, tuple(args), expect, result)
            if op in ('take', 'take_all') and result == ('ok', True):
                # a grant the model refuses: is it over the ceiling too?
                for name, cost in zip(args[::2], args[1::2]):
                    for n in self.chain(s, name):
                        self.ledger[n].add('grant', self.now, cost)
                try:
                    for n in self.cfg:
                        self.ledger[n].check(self.now)
                except Mismatch as e:
                    text += '; ' + str(e)
            raise Mismatch(text)
        if op not in ('begin', 'commit', 'rollback', 'savepoint', 'rollback_to', 'prepare'):
            if result[0] == 'err':
                if implicit:
                    self.end(s, False)
                else:
                    self.fail(s)
            else:
                if apply:
                    apply(result[1])
                if implicit:
                    self.end(s, True)
        elif apply:
            apply(result)
        for name in self.cfg:
            self.ledger[name].check(self.now)
        return expect, result

    def fail(self, s):
        """An error in a transaction block: PostgreSQL aborts the (sub)transaction
        at once (its locks and memory changes go now); the block waits for
        ROLLBACK (or ROLLBACK TO a savepoint)."""
        if s.state == 'open':
            self.undo(s, s.levels[-1])
            s.levels[-1] = Level()
            s.state = 'aborted'

    def do_begin(self, s):
        if s.state == 'aborted':
            return Expect(ok=False, errors={'25P02'}), None
        if s.state != 'idle':
            return Expect(), None      # a WARNING only
        def apply(_):
            s.state, s.levels = 'open', [Level()]
        return Expect(), apply

    def do_commit(self, s):
        def apply(_):
            if s.state != 'idle':
                self.end(s, s.state == 'open')
        return Expect(), apply

    def do_rollback(self, s):
        def apply(_):
            if s.state != 'idle':
                self.end(s, False)
        return Expect(), apply

    def do_savepoint(self, s):
        if s.state != 'open':
            return Expect(ok=False, errors={'25P01' if s.state == 'idle' else '25P02'}), None
        def apply(_):
            s.levels.append(Level())
        return Expect(), apply

    def do_rollback_to(self, s):
        if s.state == 'idle':
            return Expect(ok=False, errors={'25P01'}), None
        if len(s.levels) < 2:
            return Expect(ok=False, errors={'3B001'}), lambda _: self.fail(s)
        def apply(_):
            self.undo(s, s.levels[-1])
            s.levels[-1] = Level()
            s.state = 'open'
        return Expect(), apply

    def do_prepare(self, s, gid):
        """PREPARE TRANSACTION: refused (0A000, rolled back) after any change of
        shared memory; a table transaction is prepared, holding its rows."""
        if s.state != 'open':
            return Expect(), (lambda _: self.end(s, False)) if s.state == 'aborted' else None
        if self.memory and any(lv.taken or lv.pending or lv.paused for lv in s.levels):
            return Expect(ok=False, errors={'0A000'}), lambda _: self.end(s, False)
        def apply(_):
            p = Session(gid)
            p.levels, p.state, p.reservations = s.levels, 'open', {}
            for name, o in list(self.owner.items()):
                if o == s.sid:
                    self.owner[name] = gid
            self.prepared[gid] = p
            s.levels, s.state, s.parents = [], 'idle', None
        return Expect(), apply

    def finish_prepared(self, gid, commit):
        self.end(self.prepared.pop(gid), commit)

    def do_take(self, s, name, cost):
        """tb_acquire(name, cost): from the bucket and its parents, all or none."""
        return self.do_take_all(s, name, cost)

    def do_take_all(self, s, *pairs):
        """tb_acquire_all(names, costs) (pairs: name, cost, name, cost...):
        from every bucket and every parent of theirs, all or none."""
        asked = list(zip(pairs[::2], pairs[1::2]))
        if any(cost > self.cfg[name].capacity for name, cost in asked):
            return Expect(ok=False, errors={'22023'}), None
        reqs = [(n, cost) for name, cost in asked for n in self.chain(s, name)]
        rows = [self.row_seen(s, n) for n, _ in reqs]
        must = all(r.phi <= self.now and r.hi + c <= self.cfg[n].capacity
                   for (n, c), r in zip(reqs, rows))
        may = all(r.plo <= self.now and r.lo + c <= self.cfg[n].capacity
                  for (n, c), r in zip(reqs, rows))
        if self.held_by_other(s, [n for n, _ in reqs]):
            # waits for the row, then 55P03; a refusal may come first
            return Expect(values={False} if not must else set(), errors={'55P03'}, ok=not must), None
        values = {True} if must else {False} if not may else {True, False}
        why = ', '.join('%s: tokens %s%s' % (n, fmt(self.cfg[n].capacity - r.hi, self.cfg[n].capacity - r.lo),
                                              ', paused' if r.plo > self.now else '')
                        for (n, _), r in zip(reqs, rows))
        def apply(granted):
            if not granted:
                return
            for n, cost in reqs:
                if not must:   # the store said yes: it held cost
                    row = self.write(s, n)
                    row.hi = min(row.hi, self.cfg[n].capacity - cost +
                                 (sum(x for lv in s.levels for (m, x) in lv.pending if m == n)
                                  if self.memory else 0.0))
                self.take_now(s, n, cost)
                s.levels[-1].entries.append(self.ledger[n].add('grant', self.now, cost))
            for name, cost in asked:
                self.reserve(s, name, (cost, self.chain(s, name)[1:]))
        return Expect(values=values, why=why), apply

    def tokens_expect(self, s, name):
        row = self.row_seen(s, name)
        cap = self.cfg[name].capacity
        return Expect(lo=cap - row.hi, hi=cap - row.lo)

    def narrow(self, s, name, tokens):
        """The store said what s sees of a bucket: narrow the interval to it."""
        if self.memory and any(n == name for lv in s.levels for (n, _) in lv.pending):
            return
        if not self.memory and self.owner.get(name) not in (None, s.sid):
            return
        row = self.work[name] if self.owner.get(name) == s.sid else self.rows[name]
        row.advance(self.cfg[name], self.now)
        d = min(max(self.cfg[name].capacity - tokens, row.lo), row.hi)
        row.lo = row.hi = d

    def do_peek(self, s, name):
        """(tb_peek(name, 0)).remaining: the tokens s sees, taking nothing; of
        a bucket with parents, the fewest of any level (when all grant)."""
        names = self.chain(s, name)
        rows = [self.row_seen(s, n) for n in names]
        if not all(r.phi <= self.now and r.hi <= self.cfg[n].capacity for n, r in zip(names, rows)):
            return Expect(lo=-1e300, hi=1e300), None    # a refusal's row: not modelled
        expect = Expect(lo=min(self.cfg[n].capacity - r.hi for n, r in zip(names, rows)),
                        hi=min(self.cfg[n].capacity - r.lo for n, r in zip(names, rows)))
        if len(names) > 1:
            return expect, None
        return expect, lambda tokens: self.narrow(s, name, tokens)

    def settle_to(self, s, name):
        """Where a give-back without reserved_at goes: to the bucket alone.
        (It goes up a row of tb_parents only when the reservation was made
        after the row was written, which only reserved_at tells; the rows
        tb_set_parent writes are never older than that: never.)"""
        return [name]

    def do_refund(self, s, name, tokens):
        """tb_refund: give back (without reserved_at: to the bucket alone)."""
        names = self.settle_to(s, name)
        if self.held_by_other(s, names):
            return Expect(ok=False, errors={'55P03'}), None
        def apply(_):
            for n in names:
                self.give_back(s, n, tokens)
            self.reserve(s, name, None)
        return self.after(s, name, lambda: apply(None)), None

    def after(self, s, name, change):
        """Make "change" (a give-back or take into debt: no choice to narrow)
        and expect the tokens s then sees, as the call returns them.  Were the
        store to fail instead, the run stops there (Mismatch)."""
        change()
        return self.tokens_expect(s, name)

    def do_settle(self, s, name, reserved, used):
        """tb_settle: refund reserved - used (as tb_refund), or take used -
        reserved more (into debt if need be) on the bucket and its parents."""
        names = self.settle_to(s, name) if reserved >= used else self.chain(s, name)
        if self.held_by_other(s, names):
            return Expect(ok=False, errors={'55P03'}), None
        def change():
            for n in names:
                if reserved >= used:
                    self.give_back(s, n, reserved - used)
                else:
                    self.take_now(s, n, used - reserved)
            self.reserve(s, name, None)
        return self.after(s, name, change), None

    def do_sync(self, s, name, remaining):
        """tb_sync: lower the tokens of the bucket alone, never raise them."""
        if self.held_by_other(s, [name]):
            return Expect(ok=False, errors={'55P03'}), None
        def change():
            d = self.cfg[name].capacity - remaining
            def lower(row):
                row.lo, row.hi = max(row.lo, d), max(row.hi, d)
            if self.memory:   # what s sees, its own give-backs included, is lowered
                d += sum(x for lv in s.levels for (n, x) in lv.pending if n == name)
                row = self.rows[name]
                row.advance(self.cfg[name], self.now)
                self.remember(s, name, max(0.0, d - row.lo), lower)
            else:
                lower(self.write(s, name))
        return self.after(s, name, change), None

    def do_pause(self, s, name, usecs):
        """tb_pause: no grants before now + usecs (a shorter one cuts nothing)."""
        if self.held_by_other(s, [name]):
            return Expect(ok=False, errors={'55P03'}), None
        def apply(_):
            row = self.write(s, name)
            if self.memory:
                s.levels[-1].paused.append((name, row.plo))
            row.plo, row.phi = max(row.plo, self.now + usecs), max(row.phi, self.now + usecs)
        return Expect(), apply

    # -- the DBA's (autocommit, a session of its own) -----------------

    def reset(self, name):
        """tb_reset: fill the bucket and lift its pause; its row held: 55P03."""
        if self.owner.get(name) is not None:
            return Expect(ok=False, errors={'55P03'}), None
        def apply(_):
            def fill(row):
                row.lo = row.hi = 0.0
                row.plo = row.phi = -1
            if self.memory:
                self.shared_change(name, fill)
            else:
                fill(self.rows[name])
            self.ledger[name].add('reset', self.now, 0.0)
        return Expect(), apply

    def set_parent(self, child, parent):
        if parent is None:
            self.parents.pop(child, None)
        else:
            self.parents[child] = parent

    def advance(self, usecs):
        self.now += usecs
