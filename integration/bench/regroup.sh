#!/usr/bin/env bash
# One bounded run of a pipeline of two stages: orders re-keyed by an aggregate's group_by (the
# re-keying chain writes <group>-by_customer-repartition, the aggregate reads it), with
# processing.cache_keys far below the keys, over a fresh group and state. It measures what the
# in-band backlog mode buys: the aggregate sorts in backlog on its writers' word, whatever its own
# lag on the repartition topic (which the re-keying chain refills every commit).
#
#   integration/bench/regroup.sh produce             # once: the orders topic (2M orders, 500k keys)
#   integration/bench/regroup.sh run BIN [--verify]  # one run of the sluice binary BIN
#
# Time runs of two binaries side by side, e.g. with a tool that alternates them, and quote the
# median. Env: SLUICE_BROKERS (127.0.0.1:19092), REGROUP_TOPIC (regroup-orders),
# REGROUP_RECORDS (2000000), REGROUP_KEYS (500000), REGROUP_CACHE (10000).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
brokers=${SLUICE_BROKERS:-127.0.0.1:19092}
topic=${REGROUP_TOPIC:-regroup-orders}
records=${REGROUP_RECORDS:-2000000}
keys=${REGROUP_KEYS:-500000}
cache=${REGROUP_CACHE:-10000}
case "${1:-}" in
produce)
	(cd "$root" && go run ./integration/bench/regroup produce "$brokers" "$topic" "$records" "$keys")
	;;
run)
	bin=$2
	id=$$-$RANDOM
	dir=$(mktemp -d)
	trap 'rm -rf "$dir"' EXIT
	cat >"$dir/c.yaml" <<YAML
kafka: {brokers: [$brokers]}
group: regroup-$id
instance_id: i0
http: {listen: "127.0.0.1:0"}
processing: {guarantee: exactly_once, commit_interval: 100ms, state_dir: $dir/state, cache_keys: $cache}
backlog: {enter_lag: 50000, exit_lag: 5000, mode: auto}
sources:
  orders: {topic: $topic, format: json, key: customer_id}
operators:
  - name: by_customer
    aggregate:
      input: orders
      group_by: customer_id
      fields: {amount: {sum: amount}, orders: {count: {}}}
    output: out
sinks:
  out: {topic: regroup-out-$id}
YAML
	if ! "$bin" run --bounded -c "$dir/c.yaml" >"$dir/log" 2>&1; then
		tail -20 "$dir/log" >&2
		exit 1
	fi
	echo "switches to backlog: $(grep -c '"switch to backlog mode"' "$dir/log" || true)"
	if [ "${3:-}" = "--verify" ]; then
		(cd "$root" && go run ./integration/bench/regroup verify "$brokers" "regroup-out-$id" "$records" "$keys")
	fi
	;;
*)
	echo "usage: $0 produce | run BIN [--verify]" >&2
	exit 2
	;;
esac
