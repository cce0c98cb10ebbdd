# tokenbucket: PGXS build, plus the two set-up commands (demo, test).

EXTENSION = tokenbucket
MODULE_big = tokenbucket
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" tokenbucket.control)
OBJS = src/bucket.o src/period.o src/common.o src/clock.o src/shmem.o src/spi_session.o src/bucket_config.o src/table_store.o \
	src/memory_entries.o src/memory_calendars.o src/memory_list.o src/memory_state.o src/memory_xact.o src/memory_store.o src/stats_hash.o src/stats_state.o src/stats.o src/stats_views.o src/hierarchy.o src/report.o src/alerts.o src/router.o src/wait.o src/limit_config.o src/limit_wake.o src/lease_pool.o src/lease_memory_records.o src/lease_memory_xact.o src/lease_memory.o src/lease_table.o src/limit_router.o src/lease.o src/xact.o src/held.o src/shard_call.o src/quota.o src/test_clock.o src/tokenbucket.o
DATA = $(wildcard sql/tokenbucket--*.sql)
# the queries file for prometheus-postgres-exporter, into $(pg_config --docdir)/extension
DOCS = prometheus/tokenbucket.yaml

# pg_regress: inputs in sql/, outputs in expected/
REGRESS = api errors nulls ensure clock security settle all templates upgrade exact look memory stats \
	untrusted leases leases_memory lease_kinds lease_kinds_swapped deny reserve money periods hierarchy alerts ensure_quota test_clock
# isolation specs live in test/isolation/{specs,expected}
ISOLATION = race_last_token wait_uncommitted rollback_returns all_or_nothing \
	acquire_all_deadlock template_first_use concurrent_purge memory_race \
	memory_committed lease_last_slot lease_memory_last_slot reserve_race \
	template_copy xact_prepare give_back_buckets give_back_limits ensure_race \
	lease_kinds_held deny_committed hierarchy_cache hierarchy_team alerts_notify \
	ensure_quota_race period_boundary memory_rollback_refill
ISOLATION_OPTS = --inputdir=test/isolation

# warnings are errors; silence only what PostgreSQL's own headers trigger
PG_CFLAGS += -Wall -Wextra -Werror -Wno-unused-parameter
PG_CPPFLAGS += -DTOKENBUCKET_VERSION='"$(EXTVERSION)"'

# make test SANITIZE=1: the extension built with AddressSanitizer and
# UndefinedBehaviorSanitizer (the test server preloads their runtimes, see
# tb_start_server in scripts/common.sh).
ifdef SANITIZE
PG_CFLAGS += -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer
SHLIB_LINK += -fsanitize=address,undefined,float-cast-overflow
endif

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(wildcard $(PGXS)),)
include $(PGXS)

# PGXS tracks no header dependencies: an object is rebuilt when any header
# of the extension changes (a struct laid out anew must reach every file)
$(OBJS) $(OBJS:.o=.bc): $(wildcard src/*.h)

# tokenbucket_proxy (proxy/, SQL only), for a PL/Proxy database in front of
# several servers that run tokenbucket, goes along
all: all-proxy
install: install-proxy
clean: clean-proxy
all-proxy install-proxy clean-proxy:
	$(MAKE) -C proxy -s PG_CONFIG=$(PG_CONFIG) $(@:-proxy=)
.PHONY: all-proxy install-proxy clean-proxy

# Against a server of your own, with the extension installed and the
# library preloaded (README.md, "Tests"): make installcheck runs pg_regress
# and isolation (PGXS), make installcheck-pgtap the pgTAP tests (pgTAP and
# pg_prove installed; in a database of their own, made anew), and make
# prove_installcheck the TAP tests, which start clusters of their own
# (TAP_DIR: where they keep them, default tmp_check here).
PGTAP_DB ?= tokenbucket_pgtap
installcheck-pgtap:
	psql -X -q -v ON_ERROR_STOP=1 -d postgres -c 'DROP DATABASE IF EXISTS $(PGTAP_DB)' \
		-c 'CREATE DATABASE $(PGTAP_DB)'
	psql -X -q -v ON_ERROR_STOP=1 -d $(PGTAP_DB) -c 'CREATE EXTENSION pgtap' \
		-c 'CREATE EXTENSION tokenbucket'
	pg_prove $(PG_PROVE_ARGS) -d $(PGTAP_DB) $(or $(PGTAP_TESTS),test/pgtap/*.sql)

TAP_DIR ?= $(CURDIR)
PROVE_TESTS ?= test/t/*.pl
prove_installcheck:
	rm -rf '$(TAP_DIR)/tmp_check'
	TESTDIR='$(TAP_DIR)' TESTDATADIR='$(TAP_DIR)/tmp_check' TESTLOGDIR='$(TAP_DIR)/tmp_check/log' \
	PATH="$(bindir):$$PATH" PG_REGRESS='$(top_builddir)/src/test/regress/pg_regress' \
		$(PROVE) $(PG_PROVE_FLAGS) $(PROVE_FLAGS) $(PROVE_TESTS)
.PHONY: installcheck-pgtap prove_installcheck
else
# No server headers yet: only the set-up targets below work, and they
# install them.
all install installcheck installcheck-pgtap prove_installcheck:
	@echo "PostgreSQL server headers not found; run 'make test' or 'make demo'," \
	      "or install postgresql-server-dev-NN and set PG_CONFIG." >&2; exit 1
endif

.PHONY: demo test check-model test-versions deb dist bench bench-compare bench-instructions

# Both set up a fresh Debian 12 machine as root (packages, build, install,
# a throwaway server) and clean up after themselves.
demo:
	bash scripts/demo.sh

test:
	SANITIZE=$(SANITIZE) bash test/run.sh

# N schedules of each store (seeds 1..N) checked against the rules' model
# (test/model), on a throwaway server with the test clock; MODEL_ARGS adds
# explore.py options (--known "" shows the known findings too).
N ?= 1000
check-model:
	TB_ONLY=model TB_JOBS=1 TB_MODEL_N=$(N) TB_MODEL_ARGS='$(MODEL_ARGS)' bash test/run.sh

# The suite of `make test`, and the Debian packages with their regression
# tests against the installed files, on PostgreSQL 15, 17 and 18, each in a
# chroot of the Debian release that ships it (scripts/versions.sh).
test-versions:
	bash scripts/versions.sh

# Debian packages postgresql-NN-tokenbucket, -proxy and python3-tokenbucket,
# into build/debs.
deb:
	bash scripts/deb.sh

# The archive PGXN takes, described by META.json: the committed tree (HEAD)
# as a zip, every file under tokenbucket-<version>/, into DISTDIR (default
# the top folder).  pgxn install ./tokenbucket-<version>.zip builds it.
DISTVERSION = $(EXTVERSION).0
DISTDIR ?= .
dist:
	git archive --format zip --prefix=$(EXTENSION)-$(DISTVERSION)/ \
		--output $(DISTDIR)/$(EXTENSION)-$(DISTVERSION).zip HEAD
	@echo "$(DISTDIR)/$(EXTENSION)-$(DISTVERSION).zip"

# Not a test: throughput and latency of every scenario against the
# alternatives, in one run (BENCH_SECONDS per run, default 10).
bench:
	bash bench/run.sh

# Not a test either: the memory and table rows of make bench on two
# revisions (BASE, and OTHER or the working tree), taking turns in one run.
bench-compare:
	bash bench/compare.sh $(BASE) $(OTHER)

# Instructions per call (callgrind) of SELECT 1, four kinds of grant, and
# the table bucket's grant and denial beside a plain UPDATE and SELECT 1,
# on two revisions, each in a data directory of its own
# (bench/instructions.sh); repeatable on a busy machine.
bench-instructions:
	bash bench/instructions.sh $(BASE) $(OTHER)
