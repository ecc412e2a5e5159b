#!/usr/bin/env bash
# The whole test suite: unit tests, kfake integration tests, and integration tests against a real
# Apache Kafka broker (KRaft, one node) that this script assembles from Maven Central jars and
# starts, unless SLUICE_TEST_KAFKA already names one, and against a real schema registry
# (integration/registry/registry.sh: Apicurio Registry, also from Maven Central) unless
# SLUICE_TEST_REGISTRY already names one. `make test` runs it; so does CI (.ci/run).
# Tests that need other brokers start their own with kafka.sh (e2e TestSecurity: one with TLS and
# SASL listeners on the first five free ports from 19500).
set -euo pipefail
cd "$(dirname "$0")/.."

go mod download
started=() # the services this script started, stopped on exit
cleanup() {
  for svc in "${started[@]}"; do
    bash "integration/$svc/$svc.sh" stop >/dev/null 2>&1 || true
  done
}
trap cleanup EXIT
if [[ -z "${SLUICE_TEST_KAFKA:-}" ]]; then
  bash integration/kafka/kafka.sh fetch
  bash integration/kafka/kafka.sh stop --clean >/dev/null 2>&1 || true # a leftover of an aborted run
  started+=(kafka)
  SLUICE_TEST_KAFKA="$(bash integration/kafka/kafka.sh start --port 19092)"
  export SLUICE_TEST_KAFKA
fi
export SLUICE_REQUIRE_KAFKA=1 # tests that need the real broker fail instead of skipping
echo "real Kafka broker at $SLUICE_TEST_KAFKA"
if [[ -z "${SLUICE_TEST_REGISTRY:-}" ]]; then
  # A real schema registry (Apicurio, built from Maven Central once per machine and cached
  # outside the work tree; about 20 s to start) for the format avro tests.
  bash integration/registry/registry.sh fetch
  bash integration/registry/registry.sh stop >/dev/null 2>&1 || true # a leftover of an aborted run
  started+=(registry)
  SLUICE_TEST_REGISTRY="$(bash integration/registry/registry.sh start --port 18781)"
  export SLUICE_TEST_REGISTRY
fi
export SLUICE_REQUIRE_REGISTRY=1 # the format tests fail instead of skipping without a registry
echo "schema registry at $SLUICE_TEST_REGISTRY"

echo "== vet"
go vet ./...
echo "== tests (race detector on)"
status=0
log=$(mktemp)
set +e
go test -race -count=1 -timeout 30m ./... 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
passed=$(grep -c '^ok ' "$log" || true)
failed=$(grep -c '^FAIL	' "$log" || true)
if ((status == 0)); then
  # Every fuzz target for 2 seconds (about 40 s in all): the decoders meet inputs beyond their
  # seed corpora on every run. `make fuzz` runs them longer.
  echo "== fuzz (2s per target)"
  if bash integration/fuzz.sh 2s; then
    passed=$((passed + 1))
  else
    status=1
    failed=$((failed + 1))
  fi
fi
if ((status == 0)); then
  # The side-by-side harness (Kafka Streams, Flink, sluice) on a small backlog: every contender
  # must start and agree exactly, so the harness cannot rot.
  echo "== peers smoke"
  if bash integration/peers/run.sh --smoke --brokers "$SLUICE_TEST_KAFKA"; then
    passed=$((passed + 1))
  else
    status=1
    failed=$((failed + 1))
  fi
fi
rm -f "$log"
((status == 0 || failed > 0)) || failed=1 # a failure without a FAIL line (build error, timeout)
echo "tests: $passed passed, $failed failed"
if ((status != 0)) && [[ -f integration/kafka/run/node-1/server.log ]]; then
  echo "== tests failed ($status); last broker log lines:"
  tail -n 30 integration/kafka/run/node-1/server.log || true
fi
exit "$status"
