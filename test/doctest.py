#!/usr/bin/python3
"""test/doctest.py: run the code blocks of markdown files against a
throwaway server, and check the output they show.

    /usr/bin/python3 test/doctest.py [--first-test N] FILE.md...

The server is the one PGHOST, PGPORT and PGUSER (a superuser) name, with
tokenbucket installed and preloaded (test/doctest.sh gives it one).  It is
changed freely: databases and roles are made and dropped.

Each file runs in a fresh database of its own, its blocks in order, each
block in a new session, as a reader pasting them one after another would:

  ```sql        run by psql -X -q -v ON_ERROR_STOP=1 (an error fails it)
  ```sh/bash    run by bash -e -o pipefail, in a folder of its own, with
                PGDATABASE set to the file's database and TOP to the tree
  ```python     compiled, not run (a syntax check)

A block followed by a block with no language (or ```text), with nothing
but blank lines between, shows its output: the run's standard output and
error (psql's "psql:<stdin>:N: " prefix dropped) must equal it, line by
line, trailing spaces and blank lines at either end aside.  In an expected
line, "..." matches any text; a line that is only "..." matches any number
of lines.  An output that shows an ERROR expects the block to fail.

HTML comments in the markdown steer it:

  <!-- doctest: skip (reason) -->   right before a block: not run, counted
                                    as skipped (with its output block)
  <!-- doctest: database NAME -->   anywhere: the file runs in a fresh
                                    database NAME with nothing installed
                                    (README.md's installation makes it)

Without the second, the file's database has the extension as README.md
installs it: in the schema limits, which the database's search_path names,
with USAGE on it for the role app (made if missing).  Roles a file makes
are dropped after it (app, which README.md makes, stays for the others).

Beside the blocks, every file is checked for: the Debian package files it
names (postgresql-NN-tokenbucket_V_ARCH.deb and the others) having the
version debian/changelog gives and their architecture; and every relative
link reaching a file of the tree, and a heading of it when it names one.

Prints a TAP line per file and a "# docs:" summary of what was run,
checked and skipped; exits 1 if any file failed."""
import os
import re
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRECTIVE = re.compile(r"<!--\s*doctest:\s*(.*?)\s*-->", re.S)
FENCE = re.compile(r"^( *)```([A-Za-z0-9_+-]*)\s*$")
DEFAULT_SETUP = """
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'app') THEN CREATE ROLE app LOGIN; END IF;
END $$;
CREATE SCHEMA limits;
CREATE EXTENSION tokenbucket SCHEMA limits;
GRANT USAGE ON SCHEMA limits TO app;
ALTER DATABASE "%(db)s" SET search_path = "$user", public, limits;
"""


class Block:
    def __init__(self, lang, text, line, directive):
        self.lang, self.text, self.line, self.directive = lang, text, line, directive
        self.output = None          # the block that shows its output, if any


def blocks_of(text):
    """The fenced blocks of a markdown text, in order, each with the
    directive written right before it and the output block after it."""
    lines = text.split("\n")
    found = []
    i = 0
    last_code_end = None        # index of the line closing the last block
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = len(m.group(1)), m.group(2).lower()
        body = []
        j = i + 1
        while j < len(lines) and not re.match(r"^ {0,%d}```\s*$" % indent, lines[j]):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        # the directive: the nearest non-blank line before the fence
        k = i - 1
        while k >= 0 and lines[k].strip() == "":
            k -= 1
        directive = None
        if k >= 0 and lines[k].strip().endswith("-->"):
            start = k
            while start > 0 and "<!--" not in lines[start]:
                start -= 1
            d = DIRECTIVE.search("\n".join(lines[start:k + 1]))
            directive = d.group(1) if d else None
        block = Block(lang, "\n".join(body), i + 1, directive)
        follows = (last_code_end is not None and found and
                   all(l.strip() == "" for l in lines[last_code_end + 1:i]))
        if lang in ("", "text") and follows and found[-1].lang in ("sql", "sh", "bash") \
                and found[-1].output is None and directive is None:
            found[-1].output = block
        else:
            found.append(block)
        last_code_end = j
        i = j + 1
    return found


def slug(heading):
    """GitHub's anchor for a heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors_of(path):
    seen = {}
    out = set()
    in_code = False
    for line in open(path, encoding="utf-8").read().split("\n"):
        if FENCE.match(line):
            in_code = not in_code
        if in_code:
            continue
        m = re.match(r"^#{1,6} (.*)$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            out.add(s if n == 0 else "%s-%d" % (s, n))
            seen[s] = n + 1
    return out


def check_links(path, text):
    problems = []
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for m in re.finditer(r"\]\(([^)\s]+)\)", prose):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            problems.append("a link to %s, which is not in the tree" % target)
        elif anchor and dest.endswith(".md") and anchor not in anchors_of(dest):
            problems.append("a link to %s, whose file has no such heading" % target)
    return problems


def debian_version():
    first = open(os.path.join(TOP, "debian", "changelog")).readline()
    return re.match(r"^\S+ \(([^)]+)\)", first).group(1)


def python_version():
    """python3-tokenbucket's version: the client's own, with the source's
    Debian revision (debian/rules stamps it so)."""
    init = open(os.path.join(TOP, "clients", "python", "tokenbucket", "__init__.py")).read()
    own = re.search(r'^__version__ = "([^"]+)"', init, re.M).group(1)
    return own + "-" + debian_version().rsplit("-", 1)[1]


def check_debs(text):
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True,
                          text=True).stdout.strip() or "amd64"
    problems = []
    for m in re.finditer(r"\b((?:postgresql-\d+-tokenbucket(?:-proxy)?|python3-tokenbucket))"
                         r"_([0-9][^_\s`]*)_([a-z0-9]+)\.deb", text):
        want = "all" if m.group(1).endswith("-proxy") or m.group(1).startswith("python3") else arch
        version = python_version() if m.group(1).startswith("python3") else debian_version()
        if m.group(2) != version or m.group(3) != want:
            problems.append("%s: make deb builds %s_%s_%s.deb (debian/changelog)"
                            % (m.group(0), m.group(1), version, want))
    return problems


def matches(expected, actual):
    """Whether the actual output is what the block shows."""
    def clean(t):
        lines = [l.rstrip() for l in t.replace("\r", "").split("\n")]
        while lines and lines[0] == "":
            lines.pop(0)
        while lines and lines[-1] == "":
            lines.pop()
        return lines
    exp, act = clean(expected), clean(actual)
    pattern = ""
    for line in exp:
        if line.strip() == "...":
            pattern += r"(?:[^\n]*\n)*?"
        else:
            pattern += ".*".join(re.escape(part) for part in line.split("...")) + r"\n"
    return re.fullmatch(pattern, "\n".join(act) + "\n" if act else "") is not None


def psql(db, sql, check=True):
    r = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", db],
                       input=sql, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(r.stderr.strip())
    return r.stdout


def run_block(block, db, workdir):
    """Run one block: (returncode, output)."""
    if block.lang == "sql":
        r = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db],
                           input=block.text + "\n", stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
        out = re.sub(r"(?m)^psql:<stdin>:\d+: ", "", r.stdout)
        return r.returncode, out
    env = dict(os.environ, PGDATABASE=db, TOP=TOP)
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.text], cwd=workdir, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return r.returncode, r.stdout


def run_file(path, counts):
    """Run one file's blocks; returns (summary, problems)."""
    text = open(path, encoding="utf-8").read()
    name = os.path.relpath(path, TOP) if path.startswith(TOP) else path
    problems = check_debs(text) + check_links(path, text)
    blocks = blocks_of(text)
    dbname = None
    for d in DIRECTIVE.findall(text):
        m = re.match(r"database (\w+)$", d)
        if m:
            dbname = m.group(1)
    db = dbname or "doctest_" + re.sub(r"\W", "_", name.lower())
    roles_before = set(psql("postgres", "SELECT rolname FROM pg_roles").split())
    psql("postgres", 'DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % db)
    psql("postgres", 'CREATE DATABASE "%s"' % db)
    if not dbname:
        psql(db, DEFAULT_SETUP % {"db": db})
    ran = checked = skipped = compiled = 0
    reasons = []
    workdir = tempfile.mkdtemp(prefix="doctest.")
    try:
        for b in blocks:
            if b.lang not in ("sql", "sh", "bash", "python"):
                continue
            if b.directive and b.directive.startswith("skip"):
                skipped += 1
                reasons.append(b.directive[4:].strip(" ()"))
                continue
            if b.directive:
                problems.append("line %d: unknown directive %r" % (b.line, b.directive))
                continue
            if b.lang == "python":
                try:
                    compile(b.text, "%s:%d" % (name, b.line), "exec")
                    compiled += 1
                except SyntaxError as e:
                    problems.append("line %d: python block does not compile: %s" % (b.line, e))
                continue
            rc, out = run_block(b, db, workdir)
            ran += 1
            if b.output is not None:
                checked += 1
                expect_error = "ERROR:" in b.output.text
                if not matches(b.output.text, out) or (rc != 0) != expect_error:
                    problems.append("line %d: %s block's output is not the one shown at line %d:\n%s"
                                    % (b.line, b.lang, b.output.line,
                                       "\n".join("  > " + l for l in out.rstrip().split("\n"))))
            elif rc != 0:
                problems.append("line %d: %s block failed (exit %d):\n%s"
                                % (b.line, b.lang, rc,
                                   "\n".join("  > " + l for l in out.rstrip().split("\n")[-15:])))
    finally:
        subprocess.run(["rm", "-rf", workdir])
        psql("postgres", 'DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % db, check=False)
        made = set(psql("postgres", "SELECT rolname FROM pg_roles").split()) - roles_before - {"app"}
        for role in sorted(made):
            psql("postgres", 'DROP ROLE "%s"' % role, check=False)
    counts["ran"] += ran
    counts["checked"] += checked
    counts["skipped"] += skipped
    counts["compiled"] += compiled
    summary = "%s: %d blocks run, %d checked against their output, %d skipped" % (name, ran, checked, skipped)
    if compiled:
        summary += ", %d python compiled" % compiled
    if reasons:
        summary += " (%s)" % "; ".join(sorted(set(reasons)))
    return summary, problems


def main():
    args = sys.argv[1:]
    first = 1
    if args[:1] == ["--first-test"]:
        first = int(args[1])
        args = args[2:]
    began = time.time()
    counts = {"ran": 0, "checked": 0, "skipped": 0, "compiled": 0}
    failed = 0
    for n, path in enumerate(args, first):
        try:
            summary, problems = run_file(os.path.abspath(path), counts)
        except Exception as e:                      # the set-up itself failed
            summary, problems = path, ["could not run: %s" % e]
        if problems:
            failed += 1
            print("not ok %d - %s" % (n, summary))
            for p in problems:
                for line in p.split("\n"):
                    print("#   " + line)
        else:
            print("ok %d - %s" % (n, summary))
    print("# docs: %d blocks run, %d checked against their output, %d skipped, %d python compiled, "
          "in %.1f s" % (counts["ran"], counts["checked"], counts["skipped"], counts["compiled"],
                         time.time() - began))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
