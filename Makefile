# tailcause developer entry points. CI runs .ci/run, which calls `make test`.
SHELL := /bin/bash
GO ?= go
SERVICES := bash deploy/dev/services.sh
# Tests that stop or restart a shared service have "Fault" in their name and
# run in a separate pass, one package at a time (see internal/testkit.EnvFaults).
FAULT_RUN ?= Fault
# Packages to test: make test PKGS=./enrich/...
PKGS ?= ./...
DEMO_FLAGS ?=

.PHONY: build test services-up services-down fmt vet bench demo collector

# The OpenTelemetry Collector build of deploy/otelcol that the Collector
# tests run (cmd/tailcause/collector_e2e_test.go, deploy/otelcol). build.sh
# caches it under $(TAILCAUSE_CACHE)/otelcol and skips the build when the
# cached binary matches the manifest; the first build takes minutes.
TAILCAUSE_CACHE ?= $(HOME)/.cache/tailcause
export TAILCAUSE_OTELCOL_BIN ?= $(TAILCAUSE_CACHE)/otelcol/bin/otelcol-tailcause

collector:
	@TAILCAUSE_CACHE='$(TAILCAUSE_CACHE)' bash deploy/otelcol/build.sh >/dev/null

build:
	$(GO) build -o bin/tailcause ./cmd/tailcause

# Brings ClickHouse and Kafka up, runs every test against them, and always
# brings them down again; the exit status is the tests'. The fault pass runs
# first, so that the main pass's summary is what ends the output.
test: collector
	@set -euo pipefail; \
	trap 'rc=$$?; $(SERVICES) down || { echo "make test: services down failed" >&2; [ $$rc -ne 0 ] || rc=1; }; exit $$rc' EXIT; \
	env_lines="$$($(SERVICES) up)"; \
	eval "$$env_lines"; \
	status=0; \
	echo "== fault tests (-run '$(FAULT_RUN)', one package at a time)" >&2; \
	TAILCAUSE_TEST_FAULTS=1 $(GO) test -count=1 -p 1 -timeout 30m -run '$(FAULT_RUN)' $(PKGS) || status=$$?; \
	echo "== all tests" >&2; \
	TAILCAUSE_TEST_FAULTS= $(GO) test -count=1 -timeout 60m $(PKGS) || { s=$$?; [ $$status -ne 0 ] || status=$$s; }; \
	exit $$status

# Prints `export ...` lines: eval "$(make -s services-up)".
services-up:
	@$(SERVICES) up

services-down:
	@$(SERVICES) down

fmt:
	$(GO) fmt ./...

vet:
	$(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The demo needs only ClickHouse; it is left running for a look around
# (make services-down stops it).
demo: build
	@set -euo pipefail; \
	ch="$$(bash deploy/dev/clickhouse.sh start)"; \
	export "$$ch"; \
	bin/tailcause demo $(DEMO_FLAGS)
