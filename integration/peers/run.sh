#!/usr/bin/env bash
# run.sh — sluice side by side with its peers (consume-only ceiling, Kafka Streams, Flink
# STREAMING/BATCH, sluice backlog.mode never/auto) on one real Kafka broker.
#
#   bash integration/peers/run.sh [--records N] [--keys K] [--smoke] [--workload orders|windows|join]
#                                 [--runs N] [--brokers ADDR [--warm-dir DIR]] [--out FILE] [--port P] [--keep] [harness flags...]
#
# Starts a broker with integration/kafka/kafka.sh (unless --brokers is given), builds the Java
# contenders (cached on their sources) and sluice, then runs the Go harness
# (integration/peers/harness), which prefills the orders topic, runs every contender alone,
# verifies it, and prints the table. Before every catch-up run the input topic's log segments are
# read into the page cache (the broker's data directory: its own, or --warm-dir for the one of
# --brokers), so that no contender reads its input from disk because a JVM before it pushed it
# out. --smoke: 20k records, 1k keys, short latency phase.
# --workload windows: 1-hour tumbling windows per key with one final per window (no latency phase).
# --workload join: the orders joined with a customers table produced after them (FLIP-326).
# Any other flag goes to the harness (go run ./integration/peers/harness -h lists them).
# Every child is stopped on exit. See integration/peers/README.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PEERS="$ROOT/integration/peers"
KAFKA_SH="$ROOT/integration/kafka/kafka.sh"
COMMAND="bash integration/peers/run.sh $*"

BROKERS=""
WARM_DIR=""
PORT=19592
OUT=""
KEEP=0
HARNESS_ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --brokers) BROKERS="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --warm-dir) WARM_DIR="$2"; shift 2 ;;
    --smoke) HARNESS_ARGS+=(-smoke); shift ;;
    --records|--keys|--contenders|--timeout|--latency-rate|--latency-duration|--latency-backlog|--java-heap|--seed|\
    --runs|--latency-warmup|--java-heap-tuned|--latency-runs|--latency-sweep|--latency-sweep-limit|\
    --sluice-commit-interval|--sluice-variants|--partitions|\
    --workload|--window-span|--window-size|--kstreams-emit-interval|--table-topic|--customers-ts|--kstreams-idle)
      HARNESS_ARGS+=("-${1#--}" "$2"); shift 2 ;;
    --*=*) HARNESS_ARGS+=("-${1#--}"); shift ;;
    -*) HARNESS_ARGS+=("$1"); shift ;;
    *) echo "run.sh: unexpected argument $1" >&2; exit 2 ;;
  esac
done

log() { echo "run.sh: $*" >&2; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/sluice-peers.XXXXXX")"
KAFKA_DIR="$WORK/kafka"
STARTED_BROKER=0
HARNESS_PID=""
cleanup() {
  local rc=$?
  if [[ -n "$HARNESS_PID" ]] && kill -0 "$HARNESS_PID" 2>/dev/null; then
    kill -TERM "$HARNESS_PID" 2>/dev/null || true
    wait "$HARNESS_PID" 2>/dev/null || true
  fi
  if ((STARTED_BROKER)); then
    bash "$KAFKA_SH" stop --dir "$KAFKA_DIR" --clean >&2 || true
  fi
  if ((KEEP)); then log "kept $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$SECONDS
if [[ -n "$WARM_DIR" && -z "$BROKERS" ]]; then
  echo "run.sh: --warm-dir is the data directory of the broker of --brokers (without it, run.sh reads its own broker's)" >&2
  exit 2
fi
if [[ -z "$BROKERS" ]]; then
  bash "$KAFKA_SH" fetch
  STARTED_BROKER=1
  BROKERS="$(bash "$KAFKA_SH" start --port "$PORT" --dir "$KAFKA_DIR")"
  WARM_DIR="$KAFKA_DIR/node-1/data"
  log "broker at $BROKERS"
fi
if [[ -n "$WARM_DIR" ]]; then
  HARNESS_ARGS+=(-warm-dir "$WARM_DIR")
fi

# build_java DIR: mvn package, skipped when pom.xml and src/ are unchanged since the last build.
build_java() {
  local dir="$1" sum
  sum="$(cd "$dir" && find pom.xml src -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
  if [[ -f "$dir/target/.built" && "$(cat "$dir/target/.built")" == "$sum" && -d "$dir/target/lib" ]]; then
    return 0
  fi
  log "building $(basename "$dir") (mvn package)"
  rm -rf "$dir/target"
  mvn -B -q -Dstyle.color=never -f "$dir/pom.xml" package -DskipTests >&2
  echo "$sum" >"$dir/target/.built"
}
build_java "$PEERS/kstreams"
build_java "$PEERS/flink"

cd "$ROOT"
SLUICE_BIN="$WORK/bin/sluice"
if ! go build -o "$SLUICE_BIN" ./cmd/sluice >&2; then
  log "WARNING: go build ./cmd/sluice failed: the sluice contenders will be reported as failed"
fi
go build -o "$WORK/bin/harness" ./integration/peers/harness
log "ready after $((SECONDS - t0))s"

if [[ -z "$OUT" ]]; then
  OUT="$PEERS/out/report-$(date -u +%Y%m%dT%H%M%SZ).md"
fi
"$WORK/bin/harness" -brokers "$BROKERS" -sluice "$SLUICE_BIN" -work "$WORK/harness" \
  -out "$OUT" -command "$COMMAND" ${HARNESS_ARGS[@]+"${HARNESS_ARGS[@]}"} &
HARNESS_PID=$!
rc=0
wait "$HARNESS_PID" || rc=$?
HARNESS_PID=""
log "done in $((SECONDS - t0))s (exit $rc)"
exit "$rc"
