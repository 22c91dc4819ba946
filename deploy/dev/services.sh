#!/usr/bin/env bash
# Starts or stops the dev/test services (ClickHouse and Kafka).
#
#   eval "$(deploy/dev/services.sh up)"   # exports TAILCAUSE_CLICKHOUSE, TAILCAUSE_KAFKA
#                                         # and the TAILCAUSE_TEST_* twins read by internal/testkit
#   deploy/dev/services.sh down [--purge]
#   deploy/dev/services.sh status
#
# Progress goes to stderr; `up` prints only `export X=...` lines on stdout.
# See clickhouse.sh and kafka.sh for the ports and directories they use.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# exports turns a script's NAME=value lines into export lines for the
# service address and for the test kit.
exports() {
	local line name value
	while IFS= read -r line; do
		[[ "$line" == TAILCAUSE_*=* ]] || continue
		name=${line%%=*}
		value=${line#*=}
		printf 'export %s=%q\n' "$name" "$value"
		printf 'export %s=%q\n' "TAILCAUSE_TEST_${name#TAILCAUSE_}" "$value"
	done
}

case "${1:-}" in
up)
	ch=$(bash "$HERE/clickhouse.sh" start)
	kafka=$(bash "$HERE/kafka.sh" start)
	printf '%s\n%s\n' "$ch" "$kafka" | exports
	;;
down)
	# Stop both even if one fails; report the first failure.
	rc=0
	bash "$HERE/kafka.sh" stop "${2:-}" || rc=$?
	bash "$HERE/clickhouse.sh" stop "${2:-}" || rc=$?
	exit "$rc"
	;;
status)
	rc=0
	bash "$HERE/clickhouse.sh" status || rc=$?
	bash "$HERE/kafka.sh" status || rc=$?
	exit "$rc"
	;;
env)
	{ bash "$HERE/clickhouse.sh" env; bash "$HERE/kafka.sh" env; } | exports
	;;
*)
	echo "usage: $0 up|down [--purge]|status|env" >&2
	exit 2
	;;
esac
