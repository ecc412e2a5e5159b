#!/usr/bin/env bash
# kafka.sh — a real Apache Kafka (KRaft) broker for sluice's tests, assembled from Maven Central.
#
#   kafka.sh fetch                                  download the broker classpath into lib/
#   kafka.sh start [--port P] [--dir D] [--brokers 1|3] [--timeout S] [--security S]
#                                                   start (or restart the stopped nodes of) a cluster;
#                                                   prints the bootstrap address(es) on stdout
#   kafka.sh stop  [--dir D] [--node N] [--kill] [--clean]
#                                                   SIGTERM (SIGKILL after 20 s; --kill: at once);
#                                                   --node stops one node; --clean removes the run dir
#   kafka.sh status [--dir D]                       prints "running <addrs>" (exit 0) or "stopped" (exit 3)
#
# Defaults: --port 19092, --dir integration/kafka/run, --brokers 1, --timeout 120 (seconds).
# Broker i (1-based) listens on 127.0.0.1:P+i-1 and its controller on 127.0.0.1:P+100+i-1.
# A node restarted after stop/--kill keeps its data (no reformat); --clean (or a new --dir)
# gives a fresh cluster. Three brokers: RF 3, min ISR 2, a killed broker is fenced after 3 s.
# Only the address goes to stdout; everything else goes to stderr or to D/node-<i>/server.log.
#
# --security S (one broker only) adds TLS and SASL listeners, for the security tests. S is a
# directory holding ca.pem (the CA that signs broker and client certificates), broker.pem (the
# broker's unencrypted PKCS#8 private key, then its certificate, valid for 127.0.0.1) and users
# (lines "name password", letters, digits, '-' and '_' only: each user gets PLAIN and
# SCRAM-SHA-256/512 credentials). The listeners (stdout still prints only the first):
#   P    PLAINTEXT       (also inter-broker)
#   P+1  SSL             client certificate required (ssl.client.auth=required)
#   P+2  SASL_SSL        PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
#   P+3  SASL_PLAINTEXT  PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
#   P+4  CONTROLLER      (instead of P+100)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LIB="$ROOT/lib"
STAMP="$LIB/.complete"
DEPENDENCY_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

PORT=19092
DIR="$ROOT/run"
BROKERS=1
TIMEOUT=120
NODE=""
KILL=0
CLEAN=0
SECURITY=""

log() { echo "kafka.sh: $*" >&2; }
die() { log "$*"; exit 1; }

parse_flags() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --port) PORT="$2"; shift 2 ;;
      --dir) DIR="$2"; shift 2 ;;
      --brokers) BROKERS="$2"; shift 2 ;;
      --timeout) TIMEOUT="$2"; shift 2 ;;
      --node) NODE="$2"; shift 2 ;;
      --kill) KILL=1; shift ;;
      --clean) CLEAN=1; shift ;;
      --security) SECURITY="$2"; shift 2 ;;
      *) die "unknown flag $1" ;;
    esac
  done
  [[ "$PORT" =~ ^[0-9]+$ ]] || die "--port must be a number, got $PORT"
  [[ "$BROKERS" == 1 || "$BROKERS" == 3 ]] || die "--brokers must be 1 or 3, got $BROKERS"
  DIR="$(realpath -m "$DIR")"
  if [[ -n "$SECURITY" ]]; then
    [[ "$BROKERS" == 1 ]] || die "--security needs --brokers 1"
    SECURITY="$(realpath -m "$SECURITY")"
    local f
    for f in ca.pem broker.pem users; do
      [[ -r "$SECURITY/$f" ]] || die "--security: $SECURITY/$f is missing"
    done
  fi
}

# The stamp holds the pom's checksum, so editing the pom (e.g. the Kafka version) refetches.
pom_sum() { sha256sum "$ROOT/pom.xml" | cut -d' ' -f1; }

cmd_fetch() {
  if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(pom_sum)" ]]; then
    return 0
  fi
  log "fetching the broker classpath from Maven Central into $LIB"
  rm -rf "$LIB"
  mvn -B -q -Dstyle.color=never -f "$ROOT/pom.xml" "$DEPENDENCY_PLUGIN:copy-dependencies" \
    -DincludeScope=runtime -DoutputDirectory="$LIB" >&2
  ls "$LIB"/kafka_2.13-*.jar "$LIB"/log4j-core-*.jar >/dev/null || die "fetch: $LIB is incomplete"
  pom_sum >"$STAMP"
}

broker_port() { echo $((PORT + $1 - 1)); }
controller_port() {
  if [[ -n "$SECURITY" ]]; then echo $((PORT + 4)); else echo $((PORT + 100 + $1 - 1)); fi
}

addresses() {
  local i out=""
  for ((i = 1; i <= BROKERS; i++)); do out+="${out:+,}127.0.0.1:$(broker_port "$i")"; done
  echo "$out"
}

# pid_of N prints the pid of node N if that process is alive and is our broker.
pid_of() {
  local pidfile="$DIR/node-$1/pid" pid
  [[ -f "$pidfile" ]] || return 1
  pid="$(cat "$pidfile")"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "kafka.Kafka $DIR/node-$1/server.properties" || return 1
  echo "$pid"
}

# started_alive: the process start launched for node $1 is still there (not exited, not a zombie).
# Its command line may not be the broker's yet: the shell forks, then execs setsid and java, and
# on a loaded machine the first look can come before that (pid_of would say it is gone).
started_alive() {
  local pid st
  pid="$(cat "$DIR/node-$1/pid" 2>/dev/null)" || return 1
  [[ -n "$pid" ]] || return 1
  st="$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)" || return 1
  [[ -n "$st" && "$st" != Z && "$st" != X ]]
}

# load_cluster reads the layout a previous start wrote, so stop/status/restart agree with it.
load_cluster() {
  [[ -f "$DIR/cluster.env" ]] || return 1
  # shellcheck disable=SC1091
  source "$DIR/cluster.env"
}

write_configs() {
  local i="$1" node="$DIR/node-$1" voters="" j rf=1 isr=1
  for ((j = 1; j <= BROKERS; j++)); do voters+="${voters:+,}$j@127.0.0.1:$(controller_port "$j")"; done
  if [[ "$BROKERS" == 3 ]]; then rf=3; isr=2; fi
  mkdir -p "$node/data"
  cat >"$node/server.properties" <<EOF
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$(broker_port "$i"),CONTROLLER://127.0.0.1:$(controller_port "$i")
advertised.listeners=PLAINTEXT://127.0.0.1:$(broker_port "$i")
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$node/data
num.partitions=8
default.replication.factor=$rf
min.insync.replicas=$isr
auto.create.topics.enable=false
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=4
transaction.max.timeout.ms=900000
# Keep every record: the orders workload stamps records from 2026-01-01 on, and time retention
# (7 days by record timestamp) would otherwise delete a prefilled backlog within minutes.
log.retention.ms=-1
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
group.initial.rebalance.delay.ms=0
EOF
  if [[ "$BROKERS" == 3 ]]; then
    echo "broker.session.timeout.ms=3000" >>"$node/server.properties"
    echo "broker.heartbeat.interval.ms=500" >>"$node/server.properties"
  fi
  [[ -z "$SECURITY" ]] || write_security "$node/server.properties"
  cat >"$node/log4j2.properties" <<EOF
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $node/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.controller.name = org.apache.kafka.controller
logger.controller.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
EOF
}

# write_security rewrites the listeners of a --security broker and appends its TLS and SASL
# settings (see the header).
write_security() {
  local props="$1" p=$PORT plain_users="" name pass l
  while read -r name pass; do
    [[ -n "$name" ]] || continue
    [[ "$name$pass" =~ ^[A-Za-z0-9_-]+$ ]] || die "--security: users: only letters, digits, '-' and '_' (user $name)"
    plain_users+=" user_$name=\"$pass\""
  done <"$SECURITY/users"
  sed -i -e '/^listeners=/d' -e '/^advertised.listeners=/d' -e '/^listener.security.protocol.map=/d' "$props"
  cat >>"$props" <<EOF
listeners=PLAINTEXT://127.0.0.1:$p,SSL://127.0.0.1:$((p + 1)),SASL_SSL://127.0.0.1:$((p + 2)),SASL_PLAINTEXT://127.0.0.1:$((p + 3)),CONTROLLER://127.0.0.1:$(controller_port 1)
advertised.listeners=PLAINTEXT://127.0.0.1:$p,SSL://127.0.0.1:$((p + 1)),SASL_SSL://127.0.0.1:$((p + 2)),SASL_PLAINTEXT://127.0.0.1:$((p + 3))
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT
ssl.keystore.type=PEM
ssl.keystore.location=$SECURITY/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$SECURITY/ca.pem
listener.name.ssl.ssl.client.auth=required
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
EOF
  for l in sasl_ssl sasl_plaintext; do
    cat >>"$props" <<EOF
listener.name.$l.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required$plain_users;
listener.name.$l.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.$l.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
EOF
  done
}

# scram_args prints the StorageTool format arguments that create the --security users' SCRAM
# credentials, one per line.
scram_args() {
  local name pass m
  while read -r name pass; do
    [[ -n "$name" ]] || continue
    for m in SCRAM-SHA-256 SCRAM-SHA-512; do
      printf -- '--add-scram\n%s=[name=%s,password=%s]\n' "$m" "$name" "$pass"
    done
  done <"$SECURITY/users"
}

# java_cmd N sets JAVA to the JVM command line for node N.
java_cmd() {
  JAVA=(java -Xms512m -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$DIR/node-$1/log4j2.properties" -cp "$LIB/*")
}

fail_start() {
  local i="$1" msg="$2" node="$DIR/node-$1"
  log "node $i: $msg; last lines of $node/server.log and $node/stdout.log:"
  tail -n 40 "$node/server.log" >&2 2>/dev/null || true
  tail -n 20 "$node/stdout.log" >&2 2>/dev/null || true
  exit 1
}

cmd_start() {
  local requested_port="$PORT" requested_brokers="$BROKERS" requested_security="$SECURITY"
  if load_cluster; then
    [[ "$requested_port" == "$PORT" && "$requested_brokers" == "$BROKERS" && "$requested_security" == "${SECURITY:-}" ]] ||
      die "$DIR holds a cluster with --port $PORT --brokers $BROKERS${SECURITY:+ --security $SECURITY}; stop it with --clean or use another --dir"
  fi
  cmd_fetch
  mkdir -p "$DIR"

  local i cid started=() t0=$SECONDS
  if [[ -f "$DIR/cluster.id" ]]; then
    cid="$(cat "$DIR/cluster.id")"
    [[ -n "$cid" && "$cid" != -* ]] || die "$DIR/cluster.id holds '$cid': a cluster id must not be empty or start with '-'"
  else
    # A cluster id is URL-safe base64 and may start with '-', which the format's argument
    # parser takes for an option ("argument --cluster-id/-t: expected one argument"): draw again.
    local tries
    for ((tries = 0; tries < 20; tries++)); do
      cid="$(java -cp "$LIB/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)"
      [[ "$cid" == -* ]] || break
    done
    [[ -n "$cid" && "$cid" != -* ]] || die "StorageTool random-uuid printed no usable cluster id (last: '$cid')"
    echo "$cid" >"$DIR/cluster.id"
  fi
  printf 'PORT=%s\nBROKERS=%s\nSECURITY=%q\n' "$PORT" "$BROKERS" "$SECURITY" >"$DIR/cluster.env"

  for ((i = 1; i <= BROKERS; i++)); do
    if pid_of "$i" >/dev/null; then continue; fi
    local node="$DIR/node-$i" p
    local ports=("$(broker_port "$i")" "$(controller_port "$i")")
    [[ -z "$SECURITY" ]] || ports+=($((PORT + 1)) $((PORT + 2)) $((PORT + 3)))
    for p in "${ports[@]}"; do
      if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
        die "node $i: port $p is already in use (another broker? try: kafka.sh status --dir ...)"
      fi
    done
    write_configs "$i"
    if [[ ! -f "$node/data/meta.properties" ]]; then
      local scram=()
      [[ -z "$SECURITY" ]] || mapfile -t scram < <(scram_args)
      java_cmd "$i"
      "${JAVA[@]}" kafka.tools.StorageTool format -t "$cid" -c "$node/server.properties" ${scram[@]+"${scram[@]}"} \
        >"$node/format.log" 2>&1 || { cat "$node/format.log" >&2; die "node $i: format failed"; }
    fi
    [[ ! -f "$node/server.log" ]] || mv -f "$node/server.log" "$node/server.log.prev"
    # setsid: the broker outlives this script and the caller's process group.
    java_cmd "$i"
    setsid "${JAVA[@]}" kafka.Kafka "$node/server.properties" </dev/null >"$node/stdout.log" 2>&1 &
    echo $! >"$node/pid"
    started+=("$i")
  done

  for i in "${started[@]}"; do
    local node="$DIR/node-$i" port
    port="$(broker_port "$i")"
    while ! grep -q "Kafka Server started" "$node/server.log" 2>/dev/null; do
      started_alive "$i" || fail_start "$i" "the broker process exited"
      ((SECONDS - t0 < TIMEOUT)) || fail_start "$i" "not started after ${TIMEOUT}s"
      sleep 0.2
    done
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || fail_start "$i" "port $port does not accept connections"
  done
  ((${#started[@]} == 0)) || log "started node(s) ${started[*]} in $((SECONDS - t0))s ($DIR)"
  addresses
}

stop_node() {
  local i="$1" pid
  pid="$(pid_of "$i")" || return 0
  if ((KILL)); then kill -KILL "$pid" 2>/dev/null || true; else kill -TERM "$pid" 2>/dev/null || true; fi
  echo "$pid"
}

cmd_stop() {
  if ! load_cluster; then
    log "no cluster in $DIR"
  else
    local i pids=() pid deadline=$((SECONDS + 20))
    for ((i = 1; i <= BROKERS; i++)); do
      [[ -z "$NODE" || "$NODE" == "$i" ]] || continue
      pid="$(stop_node "$i")"
      [[ -z "$pid" ]] || pids+=("$pid")
    done
    for pid in "${pids[@]}"; do
      while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
      if kill -0 "$pid" 2>/dev/null; then
        log "pid $pid ignored SIGTERM for 20s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
      fi
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    done
  fi
  if ((CLEAN)); then
    [[ ! -e "$DIR" || -f "$DIR/cluster.env" || -z "$(ls -A "$DIR")" ]] ||
      die "--clean: $DIR does not look like a kafka.sh run dir; not removing it"
    rm -rf "$DIR"
  fi
}

cmd_status() {
  local i up=0
  if load_cluster; then
    for ((i = 1; i <= BROKERS; i++)); do
      if pid_of "$i" >/dev/null; then up=$((up + 1)); fi
    done
  fi
  if ((up == 0)); then
    echo stopped
    exit 3
  fi
  echo "running $(addresses) ($up/$BROKERS nodes up)"
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
case "$cmd" in
  fetch) cmd_fetch ;;
  start) parse_flags "$@"; cmd_start ;;
  stop) parse_flags "$@"; cmd_stop ;;
  status) parse_flags "$@"; cmd_status ;;
  *) die "usage: kafka.sh fetch | start [--port P] [--dir D] [--brokers 1|3] [--security S] | stop [--dir D] [--node N] [--kill] [--clean] | status [--dir D]" ;;
esac
