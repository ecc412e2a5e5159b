package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// newRegistry returns the registry that /metrics serves, with the Go runtime and process
// collectors; the engine registers sluice's own metrics on it.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	registerRuntime(reg)
	return reg
}

// registerRuntime registers the Go runtime and process collectors (go_*, process_*). The Grafana
// dashboard's test builds the list of metric names from this and the engine's registrations.
func registerRuntime(reg prometheus.Registerer) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}
