#!/usr/bin/env bash
# Dev/test Kafka: a single-node KRaft broker+controller of Apache Kafka 4.x,
# run from its Maven Central jars on the machine's JDK (17).
#
#   deploy/dev/kafka.sh start|stop [--purge]|status|restart|env
#
# With KAFKA_SECURE=1 it runs a second, secured broker instead (its own state
# dir and ports, the same jar cache): listeners SSL (client certificate
# required) and SASL_SSL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), certificates
# from a CA generated with openssl in $STATE/tls, SCRAM users created when the
# storage is formatted. The tests of the Kafka clients' TLS and SASL start it
# themselves (internal/testkit.SecureKafka) in a temporary TAILCAUSE_DEV_DIR.
#
# Environment:
#   TAILCAUSE_DEV_DIR       state root              (default /tmp/tailcause-dev)
#   TAILCAUSE_CACHE         jar cache               (default $HOME/.cache/tailcause)
#   KAFKA_VERSION           org.apache.kafka:kafka_2.13 version (default 4.4.0)
#   KAFKA_PORT              PLAINTEXT listener port (default 9092)
#   KAFKA_CONTROLLER_PORT   KRaft controller port   (default 9093)
#   KAFKA_HEAP_OPTS         JVM heap                (default -Xms256m -Xmx768m)
#   KAFKA_JVM_OPTS          other JVM flags         (default -XX:+UseSerialGC -XX:TieredStopAtLevel=1)
#   KAFKA_JAVA              java binary             (default: java on PATH)
#   KAFKA_START_TIMEOUT     seconds to wait for readiness (default 120)
#   KAFKA_STOP_TIMEOUT      seconds between SIGTERM and SIGKILL (default 30)
#   KAFKA_SECURE            1: the secured broker (state in $TAILCAUSE_DEV_DIR/kafka-secure)
#   KAFKA_SSL_PORT          secure mode: SSL listener port      (default 9192)
#   KAFKA_SASL_SSL_PORT     secure mode: SASL_SSL listener port (default 9193)
#                           (and KAFKA_CONTROLLER_PORT defaults to 9194)
#
# In secure mode stdout carries TAILCAUSE_KAFKA_SSL=host:port,
# TAILCAUSE_KAFKA_SASL_SSL=host:port and TAILCAUSE_KAFKA_TLS_DIR=dir: the
# directory holds ca.crt, client.crt/client.key (for the SSL listener) and
# the users' passwords: scram-sha-512.password (user tailcause-scram512),
# scram-sha-256.password (tailcause-scram256), plain.password (tailcause-plain).
#
# Progress goes to stderr; stdout carries only TAILCAUSE_KAFKA=host:port
# (from start, restart and env).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEV_DIR="${TAILCAUSE_DEV_DIR:-/tmp/tailcause-dev}"
SECURE="${KAFKA_SECURE:-}"
[[ "$SECURE" == 0 ]] && SECURE=
STATE="${DEV_DIR}/kafka${SECURE:+-secure}"
CACHE="${TAILCAUSE_CACHE:-${HOME:-/root}/.cache/tailcause}"
KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
KAFKA_PORT="${KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-${SECURE:+9194}}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
KAFKA_SSL_PORT="${KAFKA_SSL_PORT:-9192}"
KAFKA_SASL_SSL_PORT="${KAFKA_SASL_SSL_PORT:-9193}"
TLS_DIR="${STATE}/tls"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx768m}"
# C1 only and the serial collector: a test broker on a 2-core machine starts
# ~25% faster this way (its JIT and GC threads compete with the tests).
KAFKA_JVM_OPTS="${KAFKA_JVM_OPTS:--XX:+UseSerialGC -XX:TieredStopAtLevel=1}"
JAVA="${KAFKA_JAVA:-java}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-120}"
KAFKA_STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
DIST="${CACHE}/kafka-${KAFKA_VERSION}"
LIBS="${DIST}/libs"
PIDFILE="${STATE}/kafka.pid"
LOGDIR="${STATE}/log"
DATA="${STATE}/data"

say() { echo "kafka: $*" >&2; }
die() { say "error: $*"; exit 1; }
# shellcheck source=deploy/dev/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

address() {
	if [[ -n "$SECURE" ]]; then
		echo "TAILCAUSE_KAFKA_SSL=127.0.0.1:${KAFKA_SSL_PORT}"
		echo "TAILCAUSE_KAFKA_SASL_SSL=127.0.0.1:${KAFKA_SASL_SSL_PORT}"
		echo "TAILCAUSE_KAFKA_TLS_DIR=${TLS_DIR}"
		return
	fi
	echo "TAILCAUSE_KAFKA=127.0.0.1:${KAFKA_PORT}"
}

# The port the readiness probe asks, and its client settings.
probe_addr() {
	if [[ -n "$SECURE" ]]; then echo "127.0.0.1:${KAFKA_SASL_SSL_PORT}"; else echo "127.0.0.1:${KAFKA_PORT}"; fi
}
probe_props() {
	if [[ -n "$SECURE" ]]; then echo "$STATE/probe.properties"; fi
}

# ensure_tls makes, once per state dir, a CA, the broker's certificate (for
# 127.0.0.1 and localhost, in a PKCS12 keystore), a client certificate, and
# random passwords for the keystore and the SASL users.
ensure_tls() {
	[[ -f "$TLS_DIR/.complete" ]] && return
	command -v openssl >/dev/null 2>&1 || die "openssl is needed for the secure broker's certificates"
	say "generating a CA and certificates in $TLS_DIR"
	rm -rf "$TLS_DIR"
	mkdir -p "$TLS_DIR"
	chmod 700 "$TLS_DIR"
	(
		cd "$TLS_DIR"
		openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 30 -keyout ca.key -out ca.crt -subj "/CN=tailcause dev kafka CA" \
			-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
		openssl req -newkey rsa:2048 -nodes -sha256 -keyout broker.key -out broker.csr -subj "/CN=localhost"
		printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >broker.ext
		openssl x509 -req -sha256 -days 30 -in broker.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out broker.crt -extfile broker.ext
		openssl req -newkey rsa:2048 -nodes -sha256 -keyout client.key -out client.csr -subj "/CN=tailcause-client"
		printf 'extendedKeyUsage=clientAuth\n' >client.ext
		openssl x509 -req -sha256 -days 30 -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -extfile client.ext
		for f in keystore scram-sha-512 scram-sha-256 plain; do
			openssl rand -hex 16 >"$f.password"
		done
		openssl pkcs12 -export -in broker.crt -inkey broker.key -certfile ca.crt -name broker \
			-out broker.p12 -passout "pass:$(<keystore.password)"
		rm -f ./*.csr ./*.ext ./*.srl
	) >"$STATE/tls.log" 2>&1 || { cat "$STATE/tls.log" >&2; die "generating certificates failed"; }
	chmod 600 "$TLS_DIR"/*
	touch "$TLS_DIR/.complete"
}

ensure_java() {
	command -v "$JAVA" >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1 && return
	say "installing openjdk-17-jdk-headless and maven from Debian"
	[[ $(id -u) -eq 0 ]] || die "java, javac or mvn is missing and installing them needs root"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q openjdk-17-jdk-headless maven >&2; then
		apt-get update -q >&2
		apt-get install -y -q openjdk-17-jdk-headless maven >&2
	fi
}

# ensure_jars fetches the broker's jars once per version into the cache; a
# stamp file marks a complete download so an interrupted one is redone.
ensure_jars() {
	ensure_java
	if [[ ! -f "$DIST/.complete" ]]; then
		say "fetching kafka_2.13 ${KAFKA_VERSION} jars from Maven Central into $LIBS"
		rm -rf "$LIBS"
		mkdir -p "$LIBS"
		if ! mvn -B -Dstyle.color=never --no-transfer-progress -f "$HERE/kafka/pom.xml" \
			-Dkafka.version="$KAFKA_VERSION" \
			dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$LIBS" >"$DIST/mvn.log" 2>&1; then
			tail -n 40 "$DIST/mvn.log" >&2
			die "mvn could not fetch kafka_2.13 ${KAFKA_VERSION} (log: $DIST/mvn.log)"
		fi
		[[ -f "$LIBS/kafka_2.13-${KAFKA_VERSION}.jar" ]] || die "kafka_2.13-${KAFKA_VERSION}.jar missing after mvn"
		touch "$DIST/.complete"
	fi
	# The readiness probe, compiled against these jars when missing or stale.
	local classes="$DIST/probe"
	if [[ ! -f "$classes/Ready.class" || "$HERE/kafka/Ready.java" -nt "$classes/Ready.class" ]]; then
		mkdir -p "$classes"
		javac -nowarn -d "$classes" -cp "$LIBS/*" "$HERE/kafka/Ready.java" >&2 || die "compile Ready.java"
	fi
}

running_pid() {
	local pid
	[[ -f "$PIDFILE" ]] || return 1
	pid=$(<"$PIDFILE")
	[[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
	# Guard against a recycled pid: it must be our broker's JVM.
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "kafka.Kafka ${STATE}/server.properties" || return 1
	echo "$pid"
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

write_config() {
	mkdir -p "$DATA" "$LOGDIR"
	if [[ -n "$SECURE" ]]; then
		write_secure_config
	else
		write_plain_config
	fi
	write_log_config
}

write_plain_config() {
	cat >"$STATE/server.properties" <<EOF
# Generated by deploy/dev/kafka.sh; rewritten on every start.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:${KAFKA_CONTROLLER_PORT}
listeners=PLAINTEXT://127.0.0.1:${KAFKA_PORT},CONTROLLER://127.0.0.1:${KAFKA_CONTROLLER_PORT}
advertised.listeners=PLAINTEXT://127.0.0.1:${KAFKA_PORT}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=${DATA}
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
delete.topic.enable=true
offsets.topic.replication.factor=1
# Fewer than the default 50: the first consumer group on a 2-core machine
# otherwise waits for 50 partitions to be created.
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=24
log.segment.bytes=67108864
EOF
}

# write_secure_config: SSL (client certificate required; also the
# inter-broker listener) and SASL_SSL (PLAIN users in the JAAS line, SCRAM
# users in the metadata log); the controller stays PLAINTEXT on 127.0.0.1.
write_secure_config() {
	local ks
	ks=$(<"$TLS_DIR/keystore.password")
	cat >"$STATE/server.properties" <<EOF
# Generated by deploy/dev/kafka.sh (KAFKA_SECURE=1); rewritten on every start.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:${KAFKA_CONTROLLER_PORT}
listeners=SSL://127.0.0.1:${KAFKA_SSL_PORT},SASL_SSL://127.0.0.1:${KAFKA_SASL_SSL_PORT},CONTROLLER://127.0.0.1:${KAFKA_CONTROLLER_PORT}
advertised.listeners=SSL://127.0.0.1:${KAFKA_SSL_PORT},SASL_SSL://127.0.0.1:${KAFKA_SASL_SSL_PORT}
controller.listener.names=CONTROLLER
inter.broker.listener.name=SSL
listener.security.protocol.map=CONTROLLER:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL
ssl.keystore.type=PKCS12
ssl.keystore.location=${TLS_DIR}/broker.p12
ssl.keystore.password=${ks}
ssl.key.password=${ks}
ssl.truststore.type=PEM
ssl.truststore.location=${TLS_DIR}/ca.crt
listener.name.ssl.ssl.client.auth=required
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_tailcause-plain="$(<"$TLS_DIR/plain.password")";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
log.dirs=${DATA}
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
delete.topic.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=24
log.segment.bytes=67108864
EOF
	cat >"$STATE/probe.properties" <<EOF
security.protocol=SASL_SSL
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="tailcause-plain" password="$(<"$TLS_DIR/plain.password")";
ssl.truststore.type=PEM
ssl.truststore.location=${TLS_DIR}/ca.crt
EOF
	chmod 600 "$STATE/server.properties" "$STATE/probe.properties"
}

write_log_config() {
	cat >"$STATE/log4j2.properties" <<EOF
# Generated by deploy/dev/kafka.sh: broker log to a file, nothing on stdout.
status = warn
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = ${LOGDIR}/server.log
appender.file.filePattern = ${LOGDIR}/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 50MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = warn
EOF
	cat >"$STATE/log4j2-tools.properties" <<EOF
# Generated by deploy/dev/kafka.sh: tools (StorageTool, the probe) log errors only.
status = error
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m%n
rootLogger.level = error
rootLogger.appenderRef.err.ref = err
EOF
}

tool() {
	"$JAVA" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile="$STATE/log4j2-tools.properties" \
		-cp "$DIST/probe:$LIBS/*" "$@"
}

# format_storage formats the log dir once (KRaft needs a cluster id and the
# bootstrap metadata before the first start); later starts keep the data.
format_storage() {
	[[ -f "$DATA/meta.properties" ]] && return
	local id
	id=$(tool kafka.tools.StorageTool random-uuid) || die "StorageTool random-uuid failed"
	say "formatting storage in $DATA (cluster id $id)"
	local scram=()
	if [[ -n "$SECURE" ]]; then
		scram=(--add-scram "SCRAM-SHA-512=[name=tailcause-scram512,password=$(<"$TLS_DIR/scram-sha-512.password")]"
			--add-scram "SCRAM-SHA-256=[name=tailcause-scram256,password=$(<"$TLS_DIR/scram-sha-256.password")]")
	fi
	if ! tool kafka.tools.StorageTool format --standalone -t "$id" -c "$STATE/server.properties" "${scram[@]}" >"$LOGDIR/format.log" 2>&1; then
		cat "$LOGDIR/format.log" >&2
		die "StorageTool format failed"
	fi
}

log_tail() {
	local f
	for f in "$LOGDIR/stdout.log" "$LOGDIR/server.log"; do
		if [[ -s "$f" ]]; then
			say "--- last lines of $f"
			tail -n 30 "$f" >&2
		fi
	done
}

start() {
	local pid
	if pid=$(running_pid); then
		say "already running (pid $pid) on $(probe_addr)"
		address
		return
	fi
	ensure_jars
	local ports=("$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT")
	if [[ -n "$SECURE" ]]; then
		ports=("$KAFKA_SSL_PORT" "$KAFKA_SASL_SSL_PORT" "$KAFKA_CONTROLLER_PORT")
		mkdir -p "$STATE"
		ensure_tls
	fi
	for p in "${ports[@]}"; do
		port_busy "$p" && die "port $p on 127.0.0.1 is already in use by another process"
	done
	write_config
	format_storage
	say "starting ${KAFKA_VERSION} on $(probe_addr)${SECURE:+ (SASL_SSL; SSL on ${KAFKA_SSL_PORT})} (controller ${KAFKA_CONTROLLER_PORT}), state in $STATE"
	# shellcheck disable=SC2086 # KAFKA_HEAP_OPTS and KAFKA_JVM_OPTS are lists of flags.
	setsid "$JAVA" $KAFKA_HEAP_OPTS $KAFKA_JVM_OPTS \
		-XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
		-Dlog4j2.configurationFile="$STATE/log4j2.properties" -Dkafka.logs.dir="$LOGDIR" \
		-cp "$LIBS/*" kafka.Kafka "$STATE/server.properties" \
		</dev/null >"$LOGDIR/stdout.log" 2>&1 &
	pid=$!
	echo "$pid" >"$PIDFILE"
	# The probe waits for DescribeCluster; meanwhile make sure the JVM lives.
	local probe
	# shellcheck disable=SC2046 # probe_props is empty or one file name.
	tool Ready "$(probe_addr)" "$KAFKA_START_TIMEOUT" $(probe_props) &
	probe=$!
	while kill -0 "$probe" 2>/dev/null; do
		if ! kill -0 "$pid" 2>/dev/null; then
			kill "$probe" 2>/dev/null || true
			wait "$probe" 2>/dev/null || true
			rm -f "$PIDFILE"
			log_tail
			die "broker exited during startup"
		fi
		sleep 0.3
	done
	if ! wait "$probe"; then
		log_tail
		stop_pid "$pid" "$KAFKA_STOP_TIMEOUT"
		rm -f "$PIDFILE"
		die "broker not ready on $(probe_addr) within ${KAFKA_START_TIMEOUT}s"
	fi
	say "running (pid $pid)"
	address
}

status() {
	local pid
	if ! pid=$(running_pid); then
		say "not running"
		return 3
	fi
	# shellcheck disable=SC2046 # probe_props is empty or one file name.
	if [[ -f "$DIST/probe/Ready.class" ]] && tool Ready "$(probe_addr)" 5 $(probe_props); then
		say "running (pid $pid) on $(probe_addr)"
		return 0
	fi
	say "pid $pid is running but not ready on $(probe_addr)"
	return 1
}

case "${1:-}" in
start) start ;;
stop) stop "${2:-}" "$KAFKA_STOP_TIMEOUT" ;;
restart) stop "" "$KAFKA_STOP_TIMEOUT" && start ;;
status) status ;;
env) address ;;
*)
	echo "usage: $0 start|stop [--purge]|status|restart|env" >&2
	exit 2
	;;
esac
