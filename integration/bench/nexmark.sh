#!/usr/bin/env bash
# Nexmark queries as bounded runs: the time sluice takes to process a backlog of Nexmark events
# with each shipped pipeline (configs/nexmark/qN.yaml), on a broker you name.
#
#   bash integration/bench/nexmark.sh --brokers 127.0.0.1:19092 [--events 1000000] [--runs 3] [--queries "q0 q1 q2 q3 q4 q5 q7 q8 q9 q11 q12 q13 q14 q15 q16 q17 q18 q19 q20 q21 q22 q23"]
#        [--env "SLUICE_KEY=value ..."] [--vs-env "SLUICE_KEY=value ..."]
#
# It builds bin/sluice, produces the events once (integration/nexmark/cmd/nexmark-gen, topics
# bench-<events>-<time>-{person,auction,bid}), then runs each
# query --runs times as `sluice run --bounded` with a new group and output topic each time
# (backlog.mode auto; a bounded run treats its input as a backlog), and prints one line per
# run (wall seconds) and the median per query (TestNexmark checks the answers). Times include the process's
# start (joining the group, creating topics), which is about a second. --env gives every run
# more of sluice's environment (a setting to measure); with --vs-env each run is a pair, A with
# --env then B with --vs-env, and it prints each pair's ratio A/B (wall and CPU seconds) and
# their medians: an A/B comparison that holds while the machine's speed drifts.
set -euo pipefail
cd "$(dirname "$0")/../.."

brokers=127.0.0.1:19092
events=1000000
runs=3
queries="q0 q1 q2 q3 q4 q5 q7 q8 q9 q11 q12 q13 q14 q15 q16 q17 q18 q19 q20 q21 q22 q23"
env_a=""
env_b=""
pairs=0
while (($#)); do
  case "$1" in
  --brokers) brokers=$2; shift 2 ;;
  --events) events=$2; shift 2 ;;
  --runs) runs=$2; shift 2 ;;
  --queries) queries=$2; shift 2 ;;
  --env) env_a=$2; shift 2 ;;
  --vs-env) env_b=$2; pairs=1; shift 2 ;;
  *) echo "nexmark.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done

go build -o bin/sluice ./cmd/sluice
go build -o bin/nexmark-gen ./integration/nexmark/cmd/nexmark-gen
prefix="bench-${events}-$(date +%s)-"
bin/nexmark-gen --brokers "$brokers" --events "$events" --prefix "$prefix"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# run Q ENV: one bounded run of query Q with the extra environment ENV (words K=V); prints
# "<wall s> <cpu s>" (user + system).
run() {
  local q=$1 id t
  id="bench-$q-$(date +%s%N)"
  local extra=()
  grep -q "topic: nexmark-auction" "configs/nexmark/$q.yaml" && extra+=(SLUICE_SOURCES__AUCTION__TOPIC="${prefix}auction")
  grep -q "topic: nexmark-person" "configs/nexmark/$q.yaml" && extra+=(SLUICE_SOURCES__PERSON__TOPIC="${prefix}person")
  grep -q "topic: nexmark-side-input" "configs/nexmark/$q.yaml" && extra+=(SLUICE_TABLES__SIDE_INPUT__TOPIC="${prefix}side-input")
  # shellcheck disable=SC2206 # words K=V, split on purpose
  extra+=($2)
  t=$({
    TIMEFORMAT='%R %U %S'
    time env "${extra[@]}" SLUICE_KAFKA__BROKERS=$brokers SLUICE_GROUP=$id SLUICE_INSTANCE_ID=bench \
      SLUICE_PROCESSING__STATE_DIR="$work/$id" SLUICE_HTTP__LISTEN=off SLUICE_LOG__LEVEL=warn \
      SLUICE_SOURCES__BID__TOPIC="${prefix}bid" SLUICE_SINKS__OUT__TOPIC="$id-out" \
      bin/sluice run --bounded -c "configs/nexmark/$q.yaml" >"$work/$id.log" 2>&1
  } 2>&1) || {
    echo "nexmark.sh: $q failed:" >&2
    tail -n 20 "$work/$id.log" >&2
    exit 1
  }
  rm -rf "${work:?}/$id"
  awk '{printf "%.2f %.2f\n", $1, $2 + $3}' <<<"$t"
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for q in $queries; do
  walls=() cpus=() rwall=() rcpu=()
  for ((i = 1; i <= runs; i++)); do
    a=$(run "$q" "$env_a") || exit 1
    read -r wall cpu <<<"$a"
    walls+=("$wall") cpus+=("$cpu")
    if ((pairs)); then
      b=$(run "$q" "$env_b") || exit 1
      read -r bwall bcpu <<<"$b"
      rwall+=("$(echo "$wall / $bwall" | bc -l)") rcpu+=("$(echo "$cpu / $bcpu" | bc -l)")
      printf '%s pair %d: A %.2f s wall %.2f s CPU, B %.2f s wall %.2f s CPU, A/B %.2f wall %.2f CPU\n' \
        "$q" "$i" "$wall" "$cpu" "$bwall" "$bcpu" "${rwall[-1]}" "${rcpu[-1]}"
    else
      printf '%s run %d: %.2f s wall, %.2f s CPU\n' "$q" "$i" "$wall" "$cpu"
    fi
  done
  printf '%s median of %d: %.2f s wall, %.2f s CPU (events %d)\n' "$q" "$runs" \
    "$(printf '%s\n' "${walls[@]}" | median)" "$(printf '%s\n' "${cpus[@]}" | median)" "$events"
  if ((pairs)); then
    printf '%s median A/B of %d pairs: %.2f wall, %.2f CPU (A: %s; B: %s)\n' "$q" "$runs" \
      "$(printf '%s\n' "${rwall[@]}" | median)" "$(printf '%s\n' "${rcpu[@]}" | median)" "$env_a" "$env_b"
  fi
done
