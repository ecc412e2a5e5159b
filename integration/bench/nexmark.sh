#!/usr/bin/env bash
# Nexmark queries as bounded runs: the time sluice takes to process a backlog of Nexmark events
# with each shipped pipeline (configs/nexmark/qN.yaml), on a broker you name.
#
#   bash integration/bench/nexmark.sh --brokers 127.0.0.1:19092 [--events 1000000] [--runs 3] [--queries "q0 q1 q2 q3 q4 q5 q7 q8 q9 q11 q12 q13 q14 q15 q16 q17 q18 q19 q20 q21 q22 q23"]
#
# It builds bin/sluice, produces the events once (integration/nexmark/cmd/nexmark-gen, topics
# bench-<events>-<time>-{person,auction,bid}), then runs each
# query --runs times as `sluice run --bounded` with a new group and output topic each time
# (backlog.mode auto; a bounded run treats its input as a backlog), and prints one line per
# run (wall seconds) and the median per query (TestNexmark checks the answers). Times include the process's
# start (joining the group, creating topics), which is about a second.
set -euo pipefail
cd "$(dirname "$0")/../.."

brokers=127.0.0.1:19092
events=1000000
runs=3
queries="q0 q1 q2 q3 q4 q5 q7 q8 q9 q11 q12 q13 q14 q15 q16 q17 q18 q19 q20 q21 q22 q23"
while (($#)); do
  case "$1" in
  --brokers) brokers=$2; shift 2 ;;
  --events) events=$2; shift 2 ;;
  --runs) runs=$2; shift 2 ;;
  --queries) queries=$2; shift 2 ;;
  *) echo "nexmark.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done

go build -o bin/sluice ./cmd/sluice
go build -o bin/nexmark-gen ./integration/nexmark/cmd/nexmark-gen
prefix="bench-${events}-$(date +%s)-"
bin/nexmark-gen --brokers "$brokers" --events "$events" --prefix "$prefix"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for q in $queries; do
  times=()
  for ((i = 1; i <= runs; i++)); do
    id="bench-$q-$(date +%s%N)"
    start=$(date +%s.%N)
    extra=()
    grep -q "topic: nexmark-auction" "configs/nexmark/$q.yaml" && extra+=(SLUICE_SOURCES__AUCTION__TOPIC="${prefix}auction")
    grep -q "topic: nexmark-person" "configs/nexmark/$q.yaml" && extra+=(SLUICE_SOURCES__PERSON__TOPIC="${prefix}person")
    grep -q "topic: nexmark-side-input" "configs/nexmark/$q.yaml" && extra+=(SLUICE_TABLES__SIDE_INPUT__TOPIC="${prefix}side-input")
    env "${extra[@]}" SLUICE_KAFKA__BROKERS=$brokers SLUICE_GROUP=$id SLUICE_INSTANCE_ID=bench \
      SLUICE_PROCESSING__STATE_DIR="$work/$id" SLUICE_HTTP__LISTEN=off SLUICE_LOG__LEVEL=warn \
      SLUICE_SOURCES__BID__TOPIC="${prefix}bid" SLUICE_SINKS__OUT__TOPIC="$id-out" \
      bin/sluice run --bounded -c "configs/nexmark/$q.yaml" 2>"$work/$id.log" || {
      echo "nexmark.sh: $q run $i failed:" >&2
      tail -n 20 "$work/$id.log" >&2
      exit 1
    }
    end=$(date +%s.%N)
    secs=$(echo "$end - $start" | bc)
    times+=("$secs")
    printf '%s run %d: %.2f s\n' "$q" "$i" "$secs"
  done
  median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  printf '%s median of %d: %.2f s (events %d)\n' "$q" "$runs" "$median" "$events"
done
