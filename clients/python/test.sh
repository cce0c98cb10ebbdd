#!/usr/bin/env bash
# clients/python/test.sh: the Python client's tests (pytest, Debian's
# python3-pytest) against the server in PGHOST/PGPORT (test/run.sh's
# suite_shell starts a throwaway one), printing TAP: a line per test from
# the plugin in test/conftest.py, then pytest's own summary.  The tests
# make their own database, and start examples/provider/provider.py where
# they need a provider.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE"
TB_TAP=1 PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pytest -p no:cacheprovider -q \
	-o console_output_style=classic -W ignore::DeprecationWarning test "$@"
