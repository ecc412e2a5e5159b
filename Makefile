# The two commands that matter are at the top of README.md: `go run ./cmd/sluice demo` and `make test`.
.PHONY: build image test demo bench bench-join bench-cogroup bench-nexmark peers-smoke peers-smoke-windows peers-smoke-join peers peers-nexmark fuzz

build:
	go build -o bin/sluice ./cmd/sluice

# The container image, built without Docker (deploy/image): dist/sluice-oci, an OCI layout of a
# linux/amd64 + linux/arm64 index (crane push dist/sluice-oci REF), and dist/sluice-linux-<arch>.tar
# (docker load -i), tagged $(IMAGE):$(VERSION). Reproducible: every time in it is the commit's.
# make image IMAGE=registry.example.com/sluice VERSION=0.1.0
VERSION ?= $(shell git describe --tags --dirty 2>/dev/null || echo 0.1.0-dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGE ?= sluice
PLATFORMS ?= linux/amd64,linux/arm64
image:
	SOURCE_DATE_EPOCH='$(SOURCE_DATE_EPOCH)' go run ./deploy/image -o dist -version='$(VERSION)' \
		-revision='$(REVISION)' -image='$(IMAGE)' -platforms='$(PLATFORMS)'

# The whole suite, with a real Kafka broker that it starts and stops (see integration/test.sh).
test:
	bash integration/test.sh

demo: build
	bin/sluice demo --duration 30s

bench: build
	bin/sluice bench

# sluice bench's other workloads at a size that takes minutes, not hours (see BENCHMARKS.md).
bench-join: build
	bin/sluice bench --workload join --records 1000000 --keys 100000

bench-cogroup: build
	bin/sluice bench --workload cogroup --records 1000000 --keys 100000 --cache 10000

# The Nexmark pipelines (configs/nexmark) as bounded runs over 1M events on a broker of yours
# (BROKERS, default 127.0.0.1:19092); see BENCHMARKS.md. The answers: go test ./integration/nexmark/.
BROKERS ?= 127.0.0.1:19092
bench-nexmark:
	bash integration/bench/nexmark.sh --brokers $(BROKERS) --events 1000000 --runs 3

# The side-by-side harness against Kafka Streams and Flink (issue 4); see BENCHMARKS.md.
peers-smoke: build
	bash integration/peers/run.sh --smoke

peers-smoke-windows: build
	bash integration/peers/run.sh --smoke --workload windows

# The join at start (FLIP-326) in both row-timestamp cases: rows newer than every order (after:
# Kafka Streams joins none) and rows at the workload's start (start: it joins them all).
peers-smoke-join: build
	bash integration/peers/run.sh --smoke --workload join --customers-ts after
	bash integration/peers/run.sh --smoke --workload join --customers-ts start

peers: build
	bash integration/peers/run.sh

# Nexmark in Flink SQL (STREAMING, BATCH) against sluice auto, 1M events, 3 runs, outputs compared
# (issue 20; integration/peers/README.md). Not part of make test: it takes about an hour here.
peers-nexmark:
	bash integration/peers/nexmark.sh --brokers $(BROKERS) --events 1000000 --runs 3

# Every fuzz target (go test -fuzz) for FUZZTIME each, FUZZ_JOBS at a time (default: the CPUs):
# make fuzz FUZZTIME=5m.
# A crash leaves its input in <package>/testdata/fuzz/<Target>/ (see integration/fuzz.sh).
FUZZTIME ?= 30s
fuzz:
	bash integration/fuzz.sh $(FUZZTIME)
