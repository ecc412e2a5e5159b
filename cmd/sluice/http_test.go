package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/configs"
	"github.com/sluice-dev/sluice/consumer"
)

// TestPprofOptIn: Go's profiles are served only with http.pprof true (file or environment);
// the other endpoints are served either way.
func TestPprofOptIn(t *testing.T) {
	const doc = `kafka: {brokers: [127.0.0.1:9092]}
group: g
instance_id: i
sources: {orders: {topic: orders}}
operators:
  - {name: totals, aggregate: {input: orders, fields: {n: {count: {}}}}, output: out}
sinks: {out: {topic: totals}}
`
	tests := []struct {
		name  string
		extra string
		env   []string
		want  int // for the pprof paths
	}{
		{"default", "", nil, http.StatusNotFound},
		{"file false", "http: {pprof: false}\n", nil, http.StatusNotFound},
		{"file true", "http: {pprof: true}\n", nil, http.StatusOK},
		{"env true", "", []string{"SLUICE_HTTP__PPROF=true"}, http.StatusOK},
		{"env false over file true", "http: {pprof: true}\n", []string{"SLUICE_HTTP__PPROF=false"}, http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "sluice.yaml")
			if err := os.WriteFile(file, []byte(doc+tt.extra), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg, err := configs.Load(file, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			eng, err := consumer.New(consumer.Options{Registry: prometheus.NewRegistry()})
			if err != nil {
				t.Fatal(err)
			}
			h := httpHandler(eng, prometheus.NewRegistry(), cfg.HTTP.Pprof)
			get := func(p string) int {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
				return rec.Code
			}
			for _, p := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/heap", "/debug/pprof/symbol"} {
				if got := get(p); got != tt.want {
					t.Errorf("GET %s: %d, want %d", p, got, tt.want)
				}
			}
			for _, p := range []string{"/metrics", "/healthz", "/status"} {
				if got := get(p); got != http.StatusOK {
					t.Errorf("GET %s: %d, want 200", p, got)
				}
			}
		})
	}
}
