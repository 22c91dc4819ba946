# shellcheck shell=bash
# Shared by clickhouse.sh and kafka.sh (sourced, not run). The caller sets
# PIDFILE and STATE and defines say, die and running_pid.

# stop_pid sends SIGTERM (a controlled shutdown), waits up to $2 seconds
# (default 30), then SIGKILL.
stop_pid() {
	local pid=$1 timeout=${2:-30} i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < timeout * 5; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.2
	done
	say "pid $pid ignored SIGTERM for ${timeout}s; killing"
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.2
	done
	die "pid $pid survived SIGKILL"
}

# stop stops the server (keeping its data unless --purge); $2 is the
# SIGTERM timeout.
stop() {
	local purge=${1:-} timeout=${2:-30} pid
	if pid=$(running_pid); then
		say "stopping pid $pid"
		stop_pid "$pid" "$timeout"
	else
		say "not running"
	fi
	rm -f "$PIDFILE"
	if [[ "$purge" == --purge ]]; then
		say "purging $STATE"
		rm -rf "$STATE"
	fi
}
