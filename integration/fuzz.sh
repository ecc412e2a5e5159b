#!/usr/bin/env bash
# Runs every fuzz target (go test -fuzz) for a while each: `integration/fuzz.sh [TIME]`, TIME a
# -fuzztime value (default $FUZZTIME, else 2s). `make fuzz` runs it for 30s a target; the test
# suite (integration/test.sh) for 2s, so CI exercises each target briefly. Each target's seed
# corpus is committed in <package>/testdata/fuzz/<Target>/; a crash adds its input there (commit
# it with the fix). The list below must name every Fuzz function of the module: the script fails
# if one is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime="${1:-${FUZZTIME:-2s}}"
targets=(
  "./operators FuzzDecode"          # record values: Source.Decode, the JSON scanner, Project
  "./operators/avro FuzzAppendJSON" # Avro binary values to JSON (format avro), against hamba/avro
  "./operators/internal/jsonstr FuzzAppendString" # the JSON string escaper: valid JSON and UTF-8 out
  "./operators FuzzStages"          # field lookups, filter and map over any JSON
  "./operators FuzzExprDecimal"     # expression decimals: parse, format, + - * / against big.Rat
  "./operators FuzzExprTimeFuncs"   # hour, date_format against the time package; split_index against strings.Split
  "./operators FuzzDecimal"         # the 128-bit decimal parser
  "./operators FuzzAggregateState"  # stored aggregate states
  "./operators FuzzAggregateFieldsState" # stored aggregate states with where and strings (variable size)
  "./operators FuzzSessionState"    # stored session-window states (decode, ValidState)
  "./operators FuzzChangesState"    # stored changes states (decode, ValidState, Process, Flush)
  "./operators FuzzDistinctState"   # stored distinct states (refused or kept valid, flags only added)
  "./operators FuzzDistinctWindowsState" # stored windowed distinct states (refused or kept valid, closed windows forgotten)
  "./operators FuzzWindowTopState"  # stored window top states (decode, ValidState, Process, OnTimer)
  "./operators FuzzRegularJoinState" # stored regular join states (records with links: decode, ValidState, Process)
  "./changelog/codec FuzzWindowKey" # window keys
  "./changelog/codec FuzzDecoders"  # every decoder of the codec: no panic, what decodes re-encodes to the same bytes
  "./operators/task FuzzRestoredState" # a task over any state the restore accepts
  "./sorter FuzzRunReader"          # sorter run files
  "./state FuzzKeyLayout"           # state key layout
  "./state FuzzDecodeOffset"        # stored offsets
  "./changelog FuzzApplyRecord"     # changelog records and headers
  "./configs FuzzParse"             # config files and environment
  "./configs FuzzSizeUnmarshalText" # sizes (256MiB)
  "./cmd/sluice/workload FuzzParseDecimal" # the workload verifier's decimals
)

# Every Fuzz function of the module must be listed.
listed=$(printf '%s\n' "${targets[@]}" | awk '{print $2}' | sort)
found=$(grep -rhoE --include='*_test.go' '^func (Fuzz[A-Za-z0-9_]+)\(' . | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/' | sort -u)
if missing=$(comm -13 <(echo "$listed") <(echo "$found")) && [[ -n "$missing" ]]; then
  echo "fuzz.sh: fuzz targets not in its list: $missing" >&2
  exit 1
fi

# Targets run $FUZZ_JOBS at a time (default: the number of CPUs), each with one fuzzing worker:
# the build and start-up of one overlap the fuzzing of another.
par="${FUZZ_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# A run can end in "context deadline exceeded" without any crash when -fuzztime expires while a
# worker is still executing an input (a known go test -fuzz behaviour): no failing input is
# written then. Such a run is tried once more; a real failure writes its input ("Failing input
# written to ...") or reports something else, and fails the target.
deadline_only() { # log
  grep -q 'context deadline exceeded' "$1" && ! grep -qE 'Failing input written to|panic:' "$1"
}
run() { # pkg name
  local try
  for try in 1 2; do
    if go test -run='^$' -fuzz="^$2\$" -fuzztime="$fuzztime" -parallel=1 "$1" >"$logs/$2" 2>&1; then
      echo ok >"$logs/$2.rc"
      return
    fi
    deadline_only "$logs/$2" || break
    echo "fuzz $2: ended on the fuzz deadline without a failing input; once more" >>"$logs/$2.retries"
  done
  if deadline_only "$logs/$2"; then
    echo ok >"$logs/$2.rc" # twice the deadline, never a failing input: no crash found
  else
    echo failed >"$logs/$2.rc"
  fi
}
start=$SECONDS
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  while (($(jobs -rp | wc -l) >= par)); do
    wait -n || true
  done
  run "$pkg" "$name" &
done
wait
failed=()
for t in "${targets[@]}"; do
  read -r pkg name <<<"$t"
  if [[ "$(cat "$logs/$name.rc" 2>/dev/null)" != ok ]]; then
    tail -n 30 "$logs/$name"
    failed+=("$name")
  fi
  echo "fuzz $name ($pkg): $(tail -n 1 "$logs/$name")"
done
echo "fuzz: ${#targets[@]} targets for $fuzztime each, ${#failed[@]} failed, $((SECONDS - start))s"
if ((${#failed[@]} > 0)); then
  echo "fuzz: failed: ${failed[*]} (the failing inputs are in <package>/testdata/fuzz/<Target>/)" >&2
  exit 1
fi
