#!/usr/bin/env bash
# nexmark.sh — the Nexmark queries in Flink SQL (STREAMING and BATCH) and in sluice (backlog.mode
# auto, configs/nexmark/qN.yaml), each processing the same backlog of events on the same broker,
# timed, and their results compared (integration/peers/README.md, "Nexmark against Flink SQL").
#
#   bash integration/peers/nexmark.sh [--brokers 127.0.0.1:PORT] [--events 1000000] [--runs 3]
#        [--queries "q0 q1 ..."] [--modes "streaming batch sluice"] [--timeout 30m]
#        [--java-heap 2g] [--parallelism 2] [--out FILE] [--keep-topics] [--smoke] [--warm-dir DIR]
#
# Without --brokers it starts a broker with integration/kafka/kafka.sh on 127.0.0.1:--port
# (19692) and stops it at the end. It produces the events once (nexmark-gen, topics
# nexmark-peers-<events>-{person,auction,bid,side-input}; reused when they hold exactly the
# events), builds the Flink SQL module (mvn package, skipped while its pom, sources and queries
# are unchanged), sluice and nexmarkcmp, then per query runs the contenders interleaved
# (streaming batch sluice streaming batch sluice ...), --runs times, each with a fresh output topic
# and group. Every contender is a bounded run that exits when it has processed the backlog, and
# its time is the process's wall time (for Flink also the job's net runtime, from
# JobExecutionResult.getNetRuntime), and its user+system CPU seconds. The first successful run of each Flink mode is compared
# with sluice's first (nexmarkcmp compare: the results as relations, normalized); every run's
# result rows are counted. A run's topics are deleted as it ends (its output, its repartition
# topics and changelogs), but the outputs the check reads; the rest at the query's end
# (--keep-topics: none). --smoke: 10k events, q0 and q5, batch and sluice, one run.
# Before each run the input topics' log segments are read once into the page cache (the broker's
# data directory: its own, or --warm-dir for one given by --brokers), so that no contender reads
# its input from disk because the one before it (Flink's 8 GB heap) pushed it out of memory: a
# sluice run right after Flink's took 20.3 s for q4 where it takes 15.5-17 s on its own.
# Exit 1 when a run failed or a comparison disagreed. Talks to 127.0.0.1 only; every wait is
# bounded; every child is stopped on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PEERS="$ROOT/integration/peers"
MODULE="$PEERS/flink-sql"
COMMAND="bash integration/peers/nexmark.sh $*"

BROKERS=""
WARM_DIR=""
PORT=19692
EVENTS=1000000
RUNS=3
QUERIES="q0 q1 q2 q3 q4 q5 q7 q8 q9 q11 q12 q14 q15 q16 q17 q18 q19 q20 q21 q22 q23"
MODES="streaming batch sluice"
TIMEOUT=30m
HEAP=2g
PARALLELISM=2
OUT=""
KEEP_TOPICS=0
while (($#)); do
  case "$1" in
  --brokers) BROKERS=$2; shift 2 ;;
  --port) PORT=$2; shift 2 ;;
  --events) EVENTS=$2; shift 2 ;;
  --runs) RUNS=$2; shift 2 ;;
  --queries) QUERIES=$2; shift 2 ;;
  --modes) MODES=$2; shift 2 ;;
  --timeout) TIMEOUT=$2; shift 2 ;;
  --java-heap) HEAP=$2; shift 2 ;;
  --parallelism) PARALLELISM=$2; shift 2 ;;
  --out) OUT=$2; shift 2 ;;
  --keep-topics) KEEP_TOPICS=1; shift ;;
  --warm-dir) WARM_DIR=$2; shift 2 ;;
  --smoke) EVENTS=10000; RUNS=1; QUERIES="q0 q5"; MODES="batch sluice"; TIMEOUT=5m; shift ;;
  *) echo "nexmark.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
for m in $MODES; do
  case "$m" in streaming | batch | sluice) ;; *) echo "nexmark.sh: unknown mode $m" >&2; exit 2 ;; esac
done

log() { echo "nexmark.sh: $*" >&2; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/sluice-nexmark-peers.XXXXXX")"
STARTED_BROKER=0
CHILD=""
cleanup() {
  local rc=$?
  if [[ -n "$CHILD" ]] && kill -0 "$CHILD" 2>/dev/null; then
    kill -TERM "$CHILD" 2>/dev/null || true
    sleep 1
    kill -KILL "$CHILD" 2>/dev/null || true
    wait "$CHILD" 2>/dev/null || true
  fi
  if ((STARTED_BROKER)); then
    bash "$ROOT/integration/kafka/kafka.sh" stop --dir "$WORK/kafka" --clean >&2 || true
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cd "$ROOT"
if [[ -z "$BROKERS" ]]; then
  bash integration/kafka/kafka.sh fetch
  STARTED_BROKER=1
  BROKERS="$(bash integration/kafka/kafka.sh start --port "$PORT" --dir "$WORK/kafka")"
  WARM_DIR="${WARM_DIR:-$WORK/kafka/node-1/data}"
  log "broker at $BROKERS"
fi
case "$BROKERS" in
127.0.0.1:* | localhost:*) ;;
*) echo "nexmark.sh: --brokers must be on 127.0.0.1, got $BROKERS" >&2; exit 2 ;;
esac

# Build: the Flink SQL module (skipped when unchanged), sluice, nexmarkcmp, nexmark-gen.
t0=$SECONDS
sum="$(cd "$MODULE" && find pom.xml jvm.args src queries -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)"
if [[ " $MODES " == *" streaming "* || " $MODES " == *" batch "* ]]; then
  if [[ ! -f "$MODULE/target/.built" || "$(cat "$MODULE/target/.built")" != "$sum" || ! -d "$MODULE/target/lib" ]]; then
    log "building flink-sql (mvn package)"
    rm -rf "$MODULE/target"
    timeout 20m mvn -B -q -Dstyle.color=never -f "$MODULE/pom.xml" package -DskipTests >&2
    echo "$sum" >"$MODULE/target/.built"
  fi
fi
go build -o bin/sluice ./cmd/sluice
go build -o bin/nexmarkcmp ./integration/peers/nexmarkcmp
go build -o bin/nexmark-gen ./integration/nexmark/cmd/nexmark-gen
log "built in $((SECONDS - t0))s"
CMP=(bin/nexmarkcmp)

# The events, once: reused when the topics hold exactly EVENTS events.
PREFIX="nexmark-peers-$EVENTS-"
have="$(timeout 2m "${CMP[@]}" ends --brokers "$BROKERS" --topics "${PREFIX}person,${PREFIX}auction,${PREFIX}bid")"
if [[ "$have" != "$EVENTS" ]]; then
  if [[ "$have" != "-1" ]]; then
    PREFIX="nexmark-peers-$EVENTS-$(date +%s)-"
    log "the topics hold $have events, not $EVENTS: producing to ${PREFIX}*"
  fi
  timeout 2h bin/nexmark-gen --brokers "$BROKERS" --events "$EVENTS" --prefix "$PREFIX" >&2
else
  log "reusing ${PREFIX}* ($EVENTS events)"
fi

# Each child is timeout(1) (its own process group, which a TERM to it stops whole) running
# /usr/bin/time (CPU seconds) running the contender.
# cpu ID: the user+system CPU seconds of the run (every thread of the process: JIT and GC too).
cpu() {
  awk 'NF == 2 && $1 ~ /^[0-9.]+$/ {printf "%.2f", $1 + $2; found = 1} END {if (!found) printf "-"}' "$WORK/$1.cpu" 2>/dev/null || printf -
}

# settle: writes the page cache's dirty pages out before a run starts its clock, so that no run
# pays for the one before it: a run writes gigabytes (Flink's RocksDB under $WORK, sluice's
# Pebble and sort runs, the broker's logs) that the kernel writes back for seconds after the
# process is gone, and the next run's writes queue behind them. sluice's q8 at 10M right after
# Flink STREAMING took 6.6-8.0 s without it and 3.7-4.2 s with it (3.8 s alone).
settle() {
  sync
  if [ -n "$WARM_DIR" ]; then
    cat "$WARM_DIR"/"$PREFIX"*/*.log >/dev/null 2>&1 || true
  fi
}

# run_flink Q MODE ID: runs the Flink SQL job; prints "status seconds net_seconds cpu_seconds".
run_flink() {
  local q=$1 mode=$2 id=$3 logf="$WORK/$3.log" start end rc=0 net
  timeout 2m "${CMP[@]}" create --brokers "$BROKERS" --topic "$id-out"
  settle
  start=$(date +%s.%N)
  timeout --kill-after=10s "$TIMEOUT" /usr/bin/time -f '%U %S' -o "$WORK/$id.cpu" java "-Xmx$HEAP" "@$MODULE/jvm.args" \
    -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -Dorg.slf4j.simpleLogger.log.org.apache.flink.metrics=error \
    "-Djava.io.tmpdir=$WORK" -cp "$MODULE/target/classes:$MODULE/target/lib/*" dev.sluice.peers.flinksql.Main \
    "$q" "$BROKERS" "$mode" "$MODULE/queries/$q.sql" "$id-out" "$PREFIX" "$id" "$PARALLELISM" 1000 \
    >"$logf" 2>&1 &
  CHILD=$!
  wait "$CHILD" || rc=$?
  CHILD=""
  end=$(date +%s.%N)
  net=$(sed -n 's/^flink-sql: job finished in \([0-9]*\) ms$/\1/p' "$logf" | tail -n 1)
  case "$rc" in
  0) echo "ok $(echo "$end - $start" | bc) $(echo "scale=3; ${net:-0} / 1000" | bc) $(cpu "$id")" ;;
  3) echo "unsupported - - -"; grep -m1 'UNSUPPORTED' "$logf" | cut -c1-400 >"$WORK/$id.why" ;;
  124 | 137) echo "timeout - - -" ;;
  *) echo "failed - - -"; grep -m1 'job failed' "$logf" | cut -c1-400 >"$WORK/$id.why" || tail -n 3 "$logf" >"$WORK/$id.why" ;;
  esac
}

# run_sluice Q ID: sluice run --bounded as integration/bench/nexmark.sh runs it.
run_sluice() {
  local q=$1 id=$2 logf="$WORK/$2.log" start end rc=0 extra=()
  grep -q "topic: nexmark-auction" "configs/nexmark/$q.yaml" && extra+=(SLUICE_SOURCES__AUCTION__TOPIC="${PREFIX}auction")
  grep -q "topic: nexmark-person" "configs/nexmark/$q.yaml" && extra+=(SLUICE_SOURCES__PERSON__TOPIC="${PREFIX}person")
  grep -q "topic: nexmark-side-input" "configs/nexmark/$q.yaml" && extra+=(SLUICE_TABLES__SIDE_INPUT__TOPIC="${PREFIX}side-input")
  settle
  start=$(date +%s.%N)
  env ${extra[@]+"${extra[@]}"} SLUICE_KAFKA__BROKERS="$BROKERS" SLUICE_GROUP="$id" SLUICE_INSTANCE_ID=bench \
    SLUICE_PROCESSING__STATE_DIR="$WORK/$id" SLUICE_HTTP__LISTEN=off SLUICE_LOG__LEVEL=warn \
    SLUICE_SOURCES__BID__TOPIC="${PREFIX}bid" SLUICE_SINKS__OUT__TOPIC="$id-out" \
    timeout --kill-after=10s "$TIMEOUT" /usr/bin/time -f '%U %S' -o "$WORK/$id.cpu" bin/sluice run --bounded -c "configs/nexmark/$q.yaml" >"$logf" 2>&1 &
  CHILD=$!
  wait "$CHILD" || rc=$?
  CHILD=""
  end=$(date +%s.%N)
  rm -rf "${WORK:?}/$id"
  case "$rc" in
  0) echo "ok $(echo "$end - $start" | bc) - $(cpu "$id")" ;;
  124 | 137) echo "timeout - - -" ;;
  *) echo "failed - - -"; tail -n 3 "$logf" >"$WORK/$id.why" ;;
  esac
}

# stats: "median min max" of the numbers on stdin (one a line), or "- - -".
stats() {
  sort -n | awk '{a[NR]=$1} END {if (NR==0) {print "- - -"} else {printf "%.2f %.2f %.2f\n", a[int((NR+1)/2)], a[1], a[NR]}}'
}

RESULTS="$WORK/results" # query mode run status seconds net rows topic cpu
: >"$RESULTS"
FAILED=0
TABLE="$WORK/table.md"
{
  echo "| query | mode | wall s, median (min–max) | Flink net job s | CPU s | result rows | check | sluice speedup: wall / net / CPU |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
} >"$TABLE"

for q in $QUERIES; do
  RUNID="nxpeer-$q-$(date +%s)"
  UNSUPPORTED=""
  for ((i = 1; i <= RUNS; i++)); do
    for m in $MODES; do
      id="$RUNID-$m-$i"
      if [[ " ${UNSUPPORTED:-} " == *" $m "* ]]; then
        continue
      fi
      # In this shell, not a subshell: the EXIT trap must see CHILD to stop it.
      if [[ "$m" == sluice ]]; then
        run_sluice "$q" "$id" >"$WORK/$id.res"
      else
        run_flink "$q" "$m" "$id" >"$WORK/$id.res"
      fi
      read -r status secs net cpus <"$WORK/$id.res"
      rows=-
      if [[ "$status" == ok ]]; then
        side=flink
        [[ "$m" == sluice ]] && side=sluice
        rows=$(timeout 10m "${CMP[@]}" rows --brokers "$BROKERS" --query "$q" --side "$side" --topic "$id-out" 2>>"$WORK/cmp.log" || echo "?")
      else
        [[ "$status" != unsupported ]] && FAILED=1
        log "$q $m run $i: $status: $(cat "$WORK/$id.why" 2>/dev/null || true)"
      fi
      echo "$q $m $i $status $secs $net $rows $id-out $cpus" >>"$RESULTS"
      # The run's topics go as it ends, but the output of each mode's first successful run, which
      # the check below reads: q23's runs (12M wide rows each, and sluice's repartition topics
      # and changelogs) filled a 60 GB disk by the fifth run when they were all kept to the end.
      if ((KEEP_TOPICS == 0)); then
        first=$(awk -v q="$q" -v m="$m" '$1==q && $2==m && $4=="ok" {print $8; exit}' "$RESULTS")
        timeout 2m "${CMP[@]}" delete --brokers "$BROKERS" --prefix "$id-" --except "$first" || log "could not delete the topics $id-*"
      fi
      log "$q $m run $i: $status ${secs}s (net ${net}s, CPU ${cpus}s) rows $rows"
      if [[ "$status" == unsupported ]]; then
        UNSUPPORTED="${UNSUPPORTED:-} $m" # the planner's answer does not change: not retried
      fi
    done
  done

  # The check: the first successful run of each Flink mode against sluice's first.
  sluice_topic=$(awk -v q="$q" '$1==q && $2=="sluice" && $4=="ok" {print $8; exit}' "$RESULTS")
  sluice_med=$(awk -v q="$q" '$1==q && $2=="sluice" && $4=="ok" {print $5}' "$RESULTS" | stats | cut -d' ' -f1)
  sluice_cpu=$(awk -v q="$q" '$1==q && $2=="sluice" && $4=="ok" && $9!="-" {print $9}' "$RESULTS" | stats | cut -d' ' -f1)
  for m in $MODES; do
    read -r med lo hi < <(awk -v q="$q" -v m="$m" '$1==q && $2==m && $4=="ok" {print $5}' "$RESULTS" | stats)
    read -r netmed _ _ < <(awk -v q="$q" -v m="$m" '$1==q && $2==m && $4=="ok" && $6!="-" {print $6}' "$RESULTS" | stats)
    read -r cpumed _ _ < <(awk -v q="$q" -v m="$m" '$1==q && $2==m && $4=="ok" && $9!="-" {print $9}' "$RESULTS" | stats)
    rows=$(awk -v q="$q" -v m="$m" '$1==q && $2==m && $4=="ok" {print $7}' "$RESULTS" | sort -u | paste -sd/ -)
    statuses=$(awk -v q="$q" -v m="$m" '$1==q && $2==m && $4!="ok" {print $4}' "$RESULTS" | sort | uniq -c | awk '{printf "%s%s×%s", (NR>1?", ":""), $2, $1}')
    check="-"
    speedup="-"
    time="$med ($lo–$hi)"
    if [[ "$med" == "-" ]]; then
      time="${statuses:-not run}"
      why=$(cat "$WORK/$RUNID-$m-1.why" 2>/dev/null | head -c 200 || true)
      [[ -n "$why" ]] && log "$q $m: $why"
    elif [[ "$m" != sluice ]]; then
      [[ -n "$statuses" ]] && time="$time; $statuses"
      if [[ -n "$sluice_topic" ]]; then
        flink_topic=$(awk -v q="$q" -v m="$m" '$1==q && $2==m && $4=="ok" {print $8; exit}' "$RESULTS")
        if out=$(timeout 15m "${CMP[@]}" compare --brokers "$BROKERS" --query "$q" --flink "$flink_topic" --sluice "$sluice_topic" 2>>"$WORK/cmp.log"); then
          check="agrees"
          if [[ "$out" == *";"* ]]; then check="agrees;${out#*;}"; fi
        else
          check="DISAGREES (${out#DISAGREES })"
          FAILED=1
          grep "nexmarkcmp: $q " "$WORK/cmp.log" | tail -n 6 >&2 || true
        fi
        if [[ "$sluice_med" != "-" ]]; then
          speedup="$(echo "scale=1; $med / $sluice_med" | bc)x / $(echo "scale=1; $netmed / $sluice_med" | bc)x"
          if [[ "$cpumed" != "-" && "$sluice_cpu" != "-" ]]; then
            speedup="$speedup / $(echo "scale=1; $cpumed / $sluice_cpu" | bc)x"
          fi
        fi
      fi
    else
      [[ -n "$statuses" ]] && time="$time; $statuses"
    fi
    if [[ "$check" == DISAGREES* ]]; then
      time="DISAGREES ($time)"
    fi
    [[ "$m" == sluice ]] && netmed="-"
    echo "| $q | $m | $time | $netmed | $cpumed | ${rows:--} | $check | $speedup |" >>"$TABLE"
  done
  if ((KEEP_TOPICS == 0)); then
    timeout 2m "${CMP[@]}" delete --brokers "$BROKERS" --prefix "$RUNID-" || log "could not delete the topics $RUNID-*"
  fi
  tail -n "$(echo $MODES | wc -w)" "$TABLE" >&2
done

{
  echo
  echo "Nexmark against Flink SQL: $EVENTS events (${PREFIX}*), $RUNS runs per contender, interleaved."
  echo "Command: $COMMAND"
  echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), load average at the end $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  cat "$TABLE"
} | tee -a "${OUT:-/dev/null}"
exit "$FAILED"
