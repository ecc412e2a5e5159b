# The two commands that matter are at the top of README.md: `go run ./cmd/sluice demo` and `make test`.
.PHONY: build test demo bench peers-smoke peers-smoke-windows peers-smoke-join peers fuzz

build:
	go build -o bin/sluice ./cmd/sluice

# The whole suite, with a real Kafka broker that it starts and stops (see integration/test.sh).
test:
	bash integration/test.sh

demo: build
	bin/sluice demo --duration 30s

bench: build
	bin/sluice bench

# The side-by-side harness against Kafka Streams and Flink (issue 4); see BENCHMARKS.md.
peers-smoke: build
	bash integration/peers/run.sh --smoke

peers-smoke-windows: build
	bash integration/peers/run.sh --smoke --workload windows

peers-smoke-join: build
	bash integration/peers/run.sh --smoke --workload join

peers: build
	bash integration/peers/run.sh

# Every fuzz target (go test -fuzz) for FUZZTIME each, FUZZ_JOBS at a time (default: the CPUs):
# make fuzz FUZZTIME=5m.
# A crash leaves its input in <package>/testdata/fuzz/<Target>/ (see integration/fuzz.sh).
FUZZTIME ?= 30s
fuzz:
	bash integration/fuzz.sh $(FUZZTIME)
