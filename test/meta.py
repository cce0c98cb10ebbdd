#!/usr/bin/python3
"""test/meta.py: META.json against the PGXN Meta Spec, version 1.0.0
(https://pgxn.org/meta/spec.txt), and against the tree it describes.

No validator of the spec is packaged in Debian, so this checks what the
spec's v1 schema asks, key by key: the required keys and their types,
Terms, SemVer versions, version ranges, the license shortcuts, provides,
prereqs, resources, release_status, tags, and no key the spec does not
know (x_ keys aside).  Then that the versions and files it names are the
tree's: the control files' default_version, the install scripts.

    /usr/bin/python3 test/meta.py [META.json [TREE]]

Prints one line per problem and exits 1, or prints "META.json is valid"."""
import json
import os
import re
import sys

SEMVER = (r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
          r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
          r"(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
          r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?")
RANGE_ONE = r"(?:(?:[=!]=|[<>]=?)\s*)?(?:%s|0)" % SEMVER
LICENSES = {"agpl_3", "apache_1_1", "apache_2_0", "artistic_1", "artistic_2",
            "bsd", "freebsd", "gfdl_1_2", "gfdl_1_3", "gpl_1", "gpl_2", "gpl_3",
            "lgpl_2_1", "lgpl_3_0", "mit", "mozilla_1_0", "mozilla_1_1",
            "openssl", "perl_5", "postgresql", "qpl_1_0", "ssleay", "sun",
            "zlib", "open_source", "restricted", "unrestricted", "unknown"}
TOP_KEYS = {"name", "version", "abstract", "maintainer", "license", "provides",
            "meta-spec", "description", "generated_by", "tags", "no_index",
            "prereqs", "release_status", "resources"}
REQUIRED = ["name", "version", "abstract", "maintainer", "license", "provides",
            "meta-spec"]
PHASES = {"configure", "build", "test", "runtime", "develop"}
RELATIONS = {"requires", "recommends", "suggests", "conflicts"}

problems = []


def bad(where, what):
    problems.append("%s: %s" % (where, what))


def custom(key):
    return re.match(r"^[xX]_.", key) is not None


def string(where, value, min_length=1):
    if not isinstance(value, str) or len(value) < min_length:
        bad(where, "must be a string of at least %d characters" % min_length)
        return False
    return True


def term(where, value):
    if string(where, value, 2) and not re.fullmatch(r"[^/\\\s\x00-\x1f\x7f]{2,}", value):
        bad(where, "a Term has no slash, backslash, space or control character")


def version(where, value):
    if string(where, value) and not re.fullmatch(SEMVER, value):
        bad(where, "%r is not a SemVer version" % value)


def version_range(where, value):
    if isinstance(value, int) and value == 0:
        return
    if string(where, value) and not re.fullmatch(r"%s(?:,\s*%s)*" % (RANGE_ONE, RANGE_ONE), value):
        bad(where, "%r is not a version range" % value)


def keys(where, obj, allowed, required=()):
    if not isinstance(obj, dict):
        bad(where, "must be an object")
        return False
    for k in obj:
        if k not in allowed and not custom(k):
            bad(where, "unknown key %r" % k)
    for k in required:
        if k not in obj:
            bad(where, "missing mandatory key %r" % k)
    return True


def check(meta, tree):
    keys("META.json", meta, TOP_KEYS, REQUIRED)
    if "name" in meta:
        term("name", meta["name"])
    if "version" in meta:
        version("version", meta["version"])
    if "abstract" in meta:
        string("abstract", meta["abstract"])
    for k in ("description", "generated_by"):
        if k in meta:
            string(k, meta[k])
    m = meta.get("maintainer")
    if isinstance(m, list):
        if not m or len(set(m)) != len(m):
            bad("maintainer", "a list must be non-empty and unique")
        for i, x in enumerate(m):
            string("maintainer[%d]" % i, x)
    elif m is not None:
        string("maintainer", m)
    lic = meta.get("license")
    if isinstance(lic, str):
        if lic not in LICENSES:
            bad("license", "%r is not one of the spec's shortcuts" % lic)
    elif isinstance(lic, list):
        if not lic or any(x not in LICENSES for x in lic):
            bad("license", "a list of the spec's shortcuts, non-empty")
    elif isinstance(lic, dict):
        if not lic or any(not isinstance(v, str) or "://" not in v for v in lic.values()):
            bad("license", "an object mapping names to URIs, non-empty")
    elif lic is not None:
        bad("license", "a shortcut, a list of them, or an object")
    provides = meta.get("provides")
    if provides is not None and not isinstance(provides, dict):
        bad("provides", "must be an object")
    elif isinstance(provides, dict):
        if not provides:
            bad("provides", "must name at least one extension")
        for name, ext in provides.items():
            where = "provides.%s" % name
            term(where, name)
            if not keys(where, ext, {"file", "version", "abstract", "docfile", "docpath"},
                        ["file", "version"]):
                continue
            version(where + ".version", ext.get("version"))
            for k in ("file", "docfile"):
                if k in ext and string(where + "." + k, ext[k], 2):
                    if ext[k].startswith("/") or "\\" in ext[k]:
                        bad(where + "." + k, "a relative path with Unix conventions")
                    elif tree and not os.path.isfile(os.path.join(tree, ext[k])):
                        bad(where + "." + k, "%s is not in the tree" % ext[k])
            if "abstract" in ext:
                string(where + ".abstract", ext["abstract"])
    ms = meta.get("meta-spec")
    if ms is not None and keys("meta-spec", ms, {"version", "url"}, ["version"]):
        if not re.fullmatch(r"1\.0\.\d+", str(ms.get("version"))):
            bad("meta-spec.version", "must be 1.0.x")
        if "url" in ms and ms["url"] not in ("https://pgxn.org/meta/spec.txt",
                                             "http://pgxn.org/meta/spec.txt"):
            bad("meta-spec.url", "must be the spec's address")
    if "release_status" in meta and meta["release_status"] not in ("stable", "testing", "unstable"):
        bad("release_status", "stable, testing or unstable")
    tags = meta.get("tags")
    if tags is not None:
        if not isinstance(tags, list) or not tags or len(set(tags)) != len(tags):
            bad("tags", "a non-empty list of unique tags")
        else:
            for i, t in enumerate(tags):
                if not isinstance(t, str) or not 2 <= len(t) <= 255 or \
                        re.search(r"[/\\\x00-\x1f\x7f]", t):
                    bad("tags[%d]" % i, "2 to 255 characters, no slash, backslash or control")
    prereqs = meta.get("prereqs")
    if prereqs is not None and keys("prereqs", prereqs, PHASES):
        for phase, rels in prereqs.items():
            where = "prereqs." + phase
            if custom(phase) or not keys(where, rels, RELATIONS):
                continue
            if not any(r in rels for r in RELATIONS):
                bad(where, "names no relationship")
            for rel, deps in rels.items():
                if custom(rel):
                    continue
                if not isinstance(deps, dict) or not deps:
                    bad(where + "." + rel, "a non-empty object of names and version ranges")
                    continue
                for dep, rng in deps.items():
                    term("%s.%s.%s" % (where, rel, dep), dep)
                    version_range("%s.%s.%s" % (where, rel, dep), rng)
    res = meta.get("resources")
    if res is not None and keys("resources", res, {"homepage", "bugtracker", "repository"}):
        if not any(k in res for k in ("homepage", "bugtracker", "repository")):
            bad("resources", "names no homepage, bugtracker or repository")
        if "homepage" in res and (not isinstance(res["homepage"], str) or "://" not in res["homepage"]):
            bad("resources.homepage", "a URI")
        bt = res.get("bugtracker")
        if bt is not None and keys("resources.bugtracker", bt, {"web", "mailto"}):
            if not ("web" in bt or "mailto" in bt):
                bad("resources.bugtracker", "needs web or mailto")
            if "mailto" in bt and not re.fullmatch(r"[^@\s]+@[^@\s]+", str(bt["mailto"])):
                bad("resources.bugtracker.mailto", "an email address")
        repo = res.get("repository")
        if repo is not None and keys("resources.repository", repo, {"url", "web", "type"}):
            if not ({"url", "type"} <= set(repo) or "web" in repo):
                bad("resources.repository", "needs url and type, or web")
    if "no_index" in meta:
        keys("no_index", meta["no_index"], {"file", "directory"})


def check_tree(meta, tree):
    """The versions and files named are the tree's."""
    def default_version(control):
        text = open(os.path.join(tree, control)).read()
        return re.search(r"^default_version = '([^']*)'", text, re.M).group(1)
    ext = meta.get("provides", {})
    for name, control, folder in (("tokenbucket", "tokenbucket.control", "sql"),
                                  ("tokenbucket_proxy", "proxy/tokenbucket_proxy.control", "proxy/sql"),
                                  ("tokenbucket_shard", "proxy/tokenbucket_shard.control", "proxy/sql")):
        v = default_version(control)
        if name not in ext:
            bad("provides", "does not name %s" % name)
            continue
        if ext[name].get("version") != v + ".0":
            bad("provides.%s.version" % name, "%r where %s says %s" % (ext[name].get("version"), control, v))
        if ext[name].get("file") != "%s/%s--%s.sql" % (folder, name, v):
            bad("provides.%s.file" % name, "not %s/%s--%s.sql" % (folder, name, v))
    v = default_version("tokenbucket.control")
    if meta.get("version") != v + ".0":
        bad("version", "%r where tokenbucket.control says %s" % (meta.get("version"), v))


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "META.json"
    tree = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.abspath(path))
    try:
        meta = json.load(open(path))
    except ValueError as e:
        print("%s is not JSON: %s" % (path, e))
        return 1
    check(meta, tree)
    if not problems:
        check_tree(meta, tree)
    for p in problems:
        print(p)
    if problems:
        return 1
    print("%s is valid" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
