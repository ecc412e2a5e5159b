package configs

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// noHost fails the test if the host name is consulted.
func noHost(t *testing.T) func() (string, error) {
	return func() (string, error) {
		t.Helper()
		t.Error("host name looked up although instance_id is set")
		return "", errors.New("no host")
	}
}

func TestExamples(t *testing.T) {
	checks := map[string]func(t *testing.T, c *Config){
		"minimal.yaml": func(t *testing.T, c *Config) {
			eq(t, "brokers", c.Kafka.Brokers, []string{"127.0.0.1:9092"})
			eq(t, "group", c.Group, "revenue")
			eq(t, "instance_id", c.InstanceID, "pod-0")
			eq(t, "source", c.Sources["orders"], Source{Topic: "orders", Format: "json", KeyFormat: "bytes", Key: "customer_id", Timestamp: "ts"})
			eq(t, "specs", c.Operators[0].Aggregate.Specs(), []AggSpec{{Name: "amount", Func: "sum", Field: "amount"}, {Name: "orders", Func: "count"}})
			eq(t, "sink", c.Sinks["totals_out"], Sink{Topic: "customer-totals", Format: "json", SubjectStrategy: "topic"})
			eq(t, "txn id", c.TransactionalID(), "revenue-pod-0")
			eq(t, "internal", c.InternalTopics(), []string{"revenue-dlq", "revenue-totals-changelog"})
		},
		"avro.yaml": func(t *testing.T, c *Config) {
			eq(t, "source", c.Sources["orders"], Source{Topic: "orders-avro", Format: "avro", KeyFormat: "json", Key: "customer_id", Timestamp: "ts"})
			eq(t, "table format", c.Tables["customers"].Format, "avro")
			eq(t, "registry", c.SchemaRegistry, SchemaRegistry{URLs: []string{"http://127.0.0.1:8081"}, Timeout: 10 * time.Second, RetryTimeout: 2 * time.Minute})
			eq(t, "sink format", c.Sinks["totals_out"].Format, "avro")
			eq(t, "subject strategy", c.Sinks["totals_out"].SubjectStrategy, "topic_record")
		},
		"demo.yaml": func(t *testing.T, c *Config) {
			eq(t, "embedded", c.Kafka.Embedded(), true)
			eq(t, "group", c.Group, "demo")
			eq(t, "state_dir", c.Processing.StateDir, "./data/demo")
			eq(t, "specs", c.Operators[0].Aggregate.Specs(), []AggSpec{
				{Name: "amount", Func: "sum", Field: "amount"},
				{Name: "avg_amount", Func: "avg", Field: "amount"},
				{Name: "max_amount", Func: "max", Field: "amount"},
				{Name: "min_amount", Func: "min", Field: "amount"},
				{Name: "orders", Func: "count", Field: ""},
			})
		},
		"filtered.yaml": func(t *testing.T, c *Config) {
			kinds := []string{}
			for i := range c.Operators {
				kinds = append(kinds, c.Operators[i].Kind())
			}
			eq(t, "kinds", kinds, []string{"filter", "map", "aggregate"})
			eq(t, "expr", c.Operators[0].Filter.Expr, "amount > 100")
			src, ok := c.SourceOf("big_totals")
			eq(t, "source of big_totals", src, "orders")
			eq(t, "source found", ok, true)
		},
		"at-least-once.yaml": func(t *testing.T, c *Config) {
			eq(t, "guarantee", c.Processing.Guarantee, AtLeastOnce)
		},
		"sessions.yaml": func(t *testing.T, c *Config) {
			eq(t, "window", *c.Operators[0].Aggregate.Window, Window{Session: 30 * time.Minute, Grace: time.Minute})
			eq(t, "kind", c.Operators[0].Aggregate.Window.Kind(), "session")
		},
		"sessions-live.yaml": func(t *testing.T, c *Config) {
			eq(t, "kind", c.Operators[0].Aggregate.Window.Kind(), "session")
			eq(t, "emit", c.Operators[0].Aggregate.Emit, EmitUpdates)
		},
		"windowed.yaml": func(t *testing.T, c *Config) {
			eq(t, "watermark", c.Sources["orders"].Watermark, Watermark{MaxDelay: 5 * time.Second})
			eq(t, "window", *c.Operators[0].Aggregate.Window, Window{Tumbling: time.Hour, Grace: 10 * time.Second})
			eq(t, "kind", c.Operators[0].Aggregate.Window.Kind(), "tumbling")
			eq(t, "emit", c.Operators[0].Aggregate.Emit, EmitFinal)
		},
		"backlog-always.yaml": func(t *testing.T, c *Config) {
			eq(t, "mode", c.Backlog.Mode, ModeAlways)
			eq(t, "checkpoint_interval", c.Backlog.CheckpointInterval, 30*time.Second)
			eq(t, "sort_memory", c.Backlog.SortMemory, GiB)
		},
		"cogroup.yaml": func(t *testing.T, c *Config) {
			eq(t, "inputs", strings.Join(c.Operators[0].Cogroup.Inputs, ","), "orders,refunds")
			eq(t, "emit (default)", c.Operators[0].Cogroup.Emit, EmitUpdates)
			eq(t, "from", c.Operators[0].Cogroup.From()["refunded"], "refunds")
			eq(t, "internal topics", strings.Join(c.InternalTopics(), ","), "balances-balance-changelog,balances-dlq")
		},
		"cogroup-sessions.yaml": func(t *testing.T, c *Config) {
			cg := c.Operators[0].Cogroup
			eq(t, "inputs", strings.Join(cg.Inputs, ","), "orders,refunds")
			eq(t, "window", *cg.Window, Window{Session: 30 * time.Minute, Grace: time.Minute})
			eq(t, "kind", cg.Window.Kind(), "session")
			eq(t, "emit", cg.Emit, EmitFinal)
			eq(t, "internal topics", strings.Join(c.InternalTopics(), ","), "visits-dlq,visits-visit-changelog")
		},
		"asof-join.yaml": func(t *testing.T, c *Config) {
			eq(t, "as_of", c.Operators[0].Join.AsOf, "event_time")
			eq(t, "versions", c.Tables["customers"].Versions, time.Hour)
			eq(t, "idle_after", c.Tables["customers"].Watermark.IdleAfter, 30*time.Second)
			eq(t, "internal topics", strings.Join(c.InternalTopics(), ","), "orders-asof-dlq,orders-asof-enriched-changelog")
		},
		"payments-join.yaml": func(t *testing.T, c *Config) {
			j := c.Operators[0].Join
			eq(t, "stream-stream", j.StreamStream(), true)
			eq(t, "within", j.Within, 10*time.Minute)
			eq(t, "type", j.Type, JoinLeft)
			eq(t, "as_of (none)", j.AsOf, "")
			eq(t, "internal topics", strings.Join(c.InternalTopics(), ","), "payments-dlq,payments-paid-changelog")
		},
		"alerts.yaml": func(t *testing.T, c *Config) {
			eq(t, "hourly read later", c.ReadByLater("hourly"), true)
			eq(t, "alerts read later", c.ReadByLater("big_hours"), false)
			eq(t, "output topic", c.OutputTopic("hourly"), "shop-hourly-output")
			eq(t, "internal topics", strings.Join(c.InternalTopics(), ","), "shop-dlq,shop-hourly-changelog,shop-hourly-output,shop-per_customer-changelog")
		},
		"rollup.yaml": func(t *testing.T, c *Config) {
			eq(t, "per_minute read later", c.ReadByLater("per_minute"), true)
			eq(t, "window", *c.Operators[1].Aggregate.Window, Window{Tumbling: 24 * time.Hour})
			eq(t, "input", c.Operators[1].Aggregate.Input, "per_minute")
			eq(t, "internal topics", strings.Join(c.InternalTopics(), ","), "rollup-dlq,rollup-per_day-changelog,rollup-per_minute-changelog,rollup-per_minute-output")
		},
		"sessions-daily.yaml": func(t *testing.T, c *Config) {
			eq(t, "visits read later", c.ReadByLater("visits"), true)
			eq(t, "session", c.Operators[0].Aggregate.Window.Kind(), "session")
			eq(t, "idle_after", c.Sources["orders"].Watermark.IdleAfter, 10*time.Minute)
			eq(t, "internal topics", strings.Join(c.InternalTopics(), ","), "sessions-daily-dlq,sessions-daily-per_day-changelog,sessions-daily-visits-changelog,sessions-daily-visits-output")
		},
		"join.yaml": func(t *testing.T, c *Config) {
			eq(t, "table topic", c.Tables["customers"].Topic, "customers")
			eq(t, "join type (default)", c.Operators[0].Join.Type, JoinInner)
			eq(t, "as_of (default)", c.Operators[0].Join.AsOf, "processing")
			eq(t, "group_by", c.Operators[1].Aggregate.GroupBy, "customers.region")
			eq(t, "internal topics", strings.Join(c.InternalTopics(), ","), "shop-by_region-changelog,shop-by_region-repartition,shop-dlq")
		},
	}
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			check, ok := checks[name]
			if !ok {
				t.Fatalf("no checks for example %s; add them to TestExamples", name)
			}
			c, err := Load(path, []string{"HOME=/root"})
			if err != nil {
				t.Fatal(err)
			}
			check(t, c)
			delete(checks, name)
		})
	}
	for name := range checks {
		t.Errorf("example %s is missing", name)
	}
}

func TestDemoEmbedded(t *testing.T) {
	onDisk, err := os.ReadFile("examples/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(Demo, onDisk) {
		t.Fatal("Demo differs from examples/demo.yaml")
	}
	if _, err := Parse(Demo, nil); err != nil {
		t.Fatal(err)
	}
}

// TestBad runs every testdata/bad/*.yaml. Each file starts with comment lines naming the
// expected error key ("# key: ..."), a substring of the message ("# error: ...") and optional
// environment variables ("# env: NAME=value").
func TestBad(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("only %d bad configs found", len(files))
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".yaml"), func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var key, want string
			var env []string
			haveKey := false
			for line := range strings.Lines(string(b)) {
				line = strings.TrimSpace(line)
				switch {
				case strings.HasPrefix(line, "# key:"):
					key, haveKey = strings.TrimSpace(strings.TrimPrefix(line, "# key:")), true
				case strings.HasPrefix(line, "# error:"):
					want = strings.TrimSpace(strings.TrimPrefix(line, "# error:"))
				case strings.HasPrefix(line, "# env:"):
					env = append(env, strings.TrimSpace(strings.TrimPrefix(line, "# env:")))
				}
			}
			if !haveKey || want == "" {
				t.Fatal("file lacks # key: and # error: lines")
			}
			c, err := Load(path, env)
			if err == nil {
				t.Fatalf("loaded without error: %+v", c)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T) is not *Error", err, err)
			}
			if ce.Key != key {
				t.Errorf("key %q, want %q (error: %v)", ce.Key, key, err)
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
			if key != "" && !strings.HasPrefix(err.Error(), "config: "+key+": ") {
				t.Errorf("error %q does not start with the key", err)
			}
		})
	}
}

const minimalDoc = `
kafka: {brokers: [127.0.0.1:9092]}
group: revenue
instance_id: pod-0
sources:
  orders: {topic: orders, key: customer_id}
operators:
  - name: totals
    aggregate:
      input: orders
      fields: {amount: {sum: amount}, orders: {count: }}
    output: out
sinks:
  out: {topic: totals}
`

func TestDefaults(t *testing.T) {
	c, err := parse([]byte(minimalDoc), "", nil, noHost(t))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Kafka:      Kafka{Brokers: []string{"127.0.0.1:9092"}, TransactionTimeout: 2 * time.Minute, ReplicationFactor: -1, FetchMaxBytes: 32 * MiB, Compression: "none"},
		Group:      "revenue",
		InstanceID: "pod-0",
		Processing: Processing{Guarantee: "exactly_once", CommitInterval: 100 * time.Millisecond, StateDir: "./data", CacheKeys: 100000, CombineBeforeRekey: true, InlineStages: true, MaxCheckpointFailures: 100, MinFreeSpace: 64 * MiB},
		Backlog: Backlog{Mode: "auto", EnterLag: 50000, ExitLag: 500, SortMemory: 256 * MiB,
			ProgressInterval: 5 * time.Second},
		HTTP:    HTTP{Listen: "127.0.0.1:9464"},
		Log:     Log{Level: "info", Format: "text"},
		Sources: map[string]Source{"orders": {Topic: "orders", Format: "json", KeyFormat: "bytes", Key: "customer_id"}},
		Operators: []Operator{{Name: "totals", Output: "out", Aggregate: &Aggregate{
			Input:  "orders",
			Fields: map[string]map[string]any{"amount": {"sum": "amount"}, "orders": {"count": nil}},
			Emit:   "updates",
		}}},
		Sinks:          map[string]Sink{"out": {Topic: "totals", Format: "json", SubjectStrategy: "topic"}},
		SchemaRegistry: SchemaRegistry{Timeout: 10 * time.Second, RetryTimeout: 2 * time.Minute},
	}
	eq(t, "config", *c, want)
}

func TestExplicitZeroesKept(t *testing.T) {
	doc := minimalDoc + `
backlog: {exit_lag: 0, progress_interval: 0s}
http: {listen: ""}
`
	c, err := parse([]byte(doc), "", nil, noHost(t))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "exit_lag", c.Backlog.ExitLag, int64(0))
	eq(t, "progress_interval", c.Backlog.ProgressInterval, time.Duration(0))
	eq(t, "listen", c.HTTP.Listen, "")
	eq(t, "http enabled", c.HTTP.Enabled(), false)

	c, err = parse([]byte(minimalDoc+"http: {listen: off}\n"), "", nil, noHost(t))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "http enabled with off", c.HTTP.Enabled(), false)
}

func TestEnvOverrides(t *testing.T) {
	tests := []struct {
		name  string
		env   []string
		check func(t *testing.T, c *Config)
	}{
		{"two brokers", []string{"SLUICE_KAFKA__BROKERS=a:9092,b:9092"}, func(t *testing.T, c *Config) {
			eq(t, "brokers", c.Kafka.Brokers, []string{"a:9092", "b:9092"})
		}},
		{"brokers with blanks", []string{"SLUICE_KAFKA__BROKERS= a:9092 , b:9092 ,"}, func(t *testing.T, c *Config) {
			eq(t, "brokers", c.Kafka.Brokers, []string{"a:9092", "b:9092"})
		}},
		{"nested size", []string{"SLUICE_BACKLOG__SORT_MEMORY=1GiB"}, func(t *testing.T, c *Config) {
			eq(t, "sort_memory", c.Backlog.SortMemory, GiB)
		}},
		{"instance id with underscore", []string{"SLUICE_INSTANCE_ID=pod-1"}, func(t *testing.T, c *Config) {
			eq(t, "instance_id", c.InstanceID, "pod-1")
			eq(t, "txn id", c.TransactionalID(), "revenue-pod-1")
		}},
		{"int and duration", []string{"SLUICE_BACKLOG__ENTER_LAG=10", "SLUICE_BACKLOG__EXIT_LAG=0", "SLUICE_PROCESSING__COMMIT_INTERVAL=1s"}, func(t *testing.T, c *Config) {
			eq(t, "enter_lag", c.Backlog.EnterLag, int64(10))
			eq(t, "exit_lag", c.Backlog.ExitLag, int64(0))
			eq(t, "commit_interval", c.Processing.CommitInterval, time.Second)
		}},
		{"int16", []string{"SLUICE_KAFKA__REPLICATION_FACTOR=3"}, func(t *testing.T, c *Config) {
			eq(t, "replication_factor", c.Kafka.ReplicationFactor, int16(3))
		}},
		{"into a map entry", []string{"SLUICE_SOURCES__ORDERS__TOPIC=orders-v2", "SLUICE_SINKS__OUT__TOPIC=totals-v2"}, func(t *testing.T, c *Config) {
			eq(t, "source", c.Sources["orders"], Source{Topic: "orders-v2", Format: "json", KeyFormat: "bytes", Key: "customer_id"})
			eq(t, "sink topic", c.Sinks["out"].Topic, "totals-v2")
		}},
		{"disable http", []string{"SLUICE_HTTP__LISTEN=off", "SLUICE_LOG__FORMAT=json"}, func(t *testing.T, c *Config) {
			eq(t, "http enabled", c.HTTP.Enabled(), false)
			eq(t, "log format", c.Log.Format, "json")
		}},
		{"pprof on", []string{"SLUICE_HTTP__PPROF=true"}, func(t *testing.T, c *Config) {
			eq(t, "pprof", c.HTTP.Pprof, true)
		}},
		{"pprof off", []string{"SLUICE_HTTP__PPROF=False"}, func(t *testing.T, c *Config) {
			eq(t, "pprof", c.HTTP.Pprof, false)
		}},
		{"tls and sasl", []string{"SLUICE_KAFKA__TLS__ENABLED=true", "SLUICE_KAFKA__TLS__CA_FILE=/etc/ca.pem",
			"SLUICE_KAFKA__SASL__MECHANISM=SCRAM-SHA-256", "SLUICE_KAFKA__SASL__USERNAME=svc", "SLUICE_KAFKA__SASL__PASSWORD=hunter2"}, func(t *testing.T, c *Config) {
			eq(t, "tls", c.Kafka.TLS, TLS{Enabled: true, CAFile: "/etc/ca.pem"})
			eq(t, "sasl", c.Kafka.SASL, SASL{Mechanism: "SCRAM-SHA-256", Username: "svc", Password: "hunter2"})
			eq(t, "mechanism", c.Kafka.SASL.MechanismName(), SASLScramSHA256)
		}},
		{"other variables ignored", []string{"PATH=/bin", "SLUICE_TEST_KAFKA=127.0.0.1:19092", "SLUICE_REQUIRE_KAFKA=1", "NOEQUALS"}, func(t *testing.T, c *Config) {
			eq(t, "brokers", c.Kafka.Brokers, []string{"127.0.0.1:9092"})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parse([]byte(minimalDoc), "", tt.env, noHost(t))
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestEnvErrors(t *testing.T) {
	tests := []struct {
		env      []string
		key, msg string
	}{
		{[]string{"SLUICE_BACKLOG__NOPE=1"}, "backlog.nope", "unknown key (allowed here: mode, enter_lag, exit_lag, enter_time_lag, exit_time_lag, sort_memory, checkpoint_interval, progress_interval, commit_interval) (set by environment variable SLUICE_BACKLOG__NOPE)"},
		{[]string{"SLUICE_NOPE__DEEP=1"}, "nope", "(set by environment variable SLUICE_NOPE__DEEP)"},
		{[]string{"SLUICE_BACKLOG__SORT_MEMORY=1XB"}, "backlog.sort_memory", `unknown unit "XB"`},
		{[]string{"SLUICE_KAFKA__COMPRESSION=brotli"}, "kafka.compression", `unknown value "brotli" (allowed: none, snappy, lz4, zstd, gzip)`},
		{[]string{"SLUICE_BACKLOG__ENTER_LAG=010x"}, "backlog.enter_lag", `expected a whole number, got "010x"`},
		{[]string{"SLUICE_KAFKA=x", "SLUICE_KAFKA__BROKERS=a:9092"}, "kafka", "set as a value by environment variable SLUICE_KAFKA and as a section by SLUICE_KAFKA__BROKERS"},
		{[]string{"SLUICE_GROUP=a", "SLUICE_group=b"}, "group", "set twice, by environment variables SLUICE_GROUP and SLUICE_group"},
		{[]string{"SLUICE_KAFKA__BROKERS="}, "kafka.brokers", "required"},
		{[]string{"SLUICE_BACKLOG=fast"}, "backlog", "expected a mapping of keys"},
		{[]string{"SLUICE_=1"}, "", "malformed name"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.env, " "), func(t *testing.T) {
			_, err := parse([]byte(minimalDoc), "", tt.env, noHost(t))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want *Error", err)
			}
			if ce.Key != tt.key || !strings.Contains(ce.Msg, tt.msg) {
				t.Fatalf("got key %q msg %q, want key %q msg containing %q", ce.Key, ce.Msg, tt.key, tt.msg)
			}
		})
	}
}

func TestInstanceIDFromHostname(t *testing.T) {
	doc := strings.Replace(minimalDoc, "instance_id: pod-0\n", "", 1)
	c, err := parse([]byte(doc), "", nil, func() (string, error) { return "host-7.example", nil })
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "instance_id", c.InstanceID, "host-7.example")

	_, err = parse([]byte(doc), "", nil, func() (string, error) { return "", errors.New("uname failed") })
	var ce *Error
	if !errors.As(err, &ce) || ce.Key != "instance_id" {
		t.Fatalf("got %v, want an instance_id error", err)
	}
}

func TestLoadErrors(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), nil)
	var ce *Error
	if !errors.As(err, &ce) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("got %v, want *Error wrapping fs.ErrNotExist", err)
	}

	// An empty path is defaults plus environment only: here, not enough for a pipeline.
	_, err = Load("", []string{"SLUICE_GROUP=g"})
	if !errors.As(err, &ce) || ce.Key != "kafka.brokers" {
		t.Fatalf("got %v, want a kafka.brokers error", err)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("- a list\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad, nil)
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "bad.yaml: invalid YAML") {
		t.Fatalf("got %v, want an invalid YAML error naming the file", err)
	}
}

// TestValidateLiteral checks that a Config built in code, with enums left empty, validates.
func TestValidateLiteral(t *testing.T) {
	c := defaults()
	c.Processing.Guarantee, c.Backlog.Mode, c.Log.Level, c.Log.Format = "", "", "", ""
	c.Kafka.Brokers = []string{EmbeddedBroker}
	c.Group, c.InstanceID = "g", "i"
	c.Sources = map[string]Source{"in": {Topic: "in"}}
	c.Sinks = map[string]Sink{"out": {Topic: "out"}}
	c.Operators = []Operator{
		{Name: "keep", Filter: &Filter{Input: "in", Expr: "true"}},
		{Name: "agg", Aggregate: &Aggregate{Input: "keep", Fields: map[string]map[string]any{"n": {"count": nil}}}, Output: "out"},
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	before, _ := c.YAML()
	_ = c.Validate()
	after, _ := c.YAML()
	if !bytes.Equal(before, after) {
		t.Fatal("Validate modified the config")
	}
	c.Operators[1].Aggregate.Input = "nowhere"
	var ce *Error
	if err := c.Validate(); !errors.As(err, &ce) || ce.Key != "operators[1].aggregate.input" {
		t.Fatalf("got %v", err)
	}
}

func TestYAMLRoundTrip(t *testing.T) {
	files, _ := filepath.Glob("examples/*.yaml")
	docs := []string{minimalDoc}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	for i, doc := range docs {
		env := []string{"SLUICE_INSTANCE_ID=rt", "SLUICE_HTTP__LISTEN=off", "SLUICE_BACKLOG__ENTER_TIME_LAG=90m"}
		c, err := Parse([]byte(doc), env)
		if err != nil {
			t.Fatal(err)
		}
		out, err := c.YAML()
		if err != nil {
			t.Fatal(err)
		}
		c2, err := Parse(out, nil)
		if err != nil {
			t.Fatalf("doc %d: effective YAML does not parse: %v\n%s", i, err, out)
		}
		normalizeCounts(c)
		normalizeCounts(c2)
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("doc %d: round trip differs:\n%s", i, out)
		}
		if !strings.Contains(string(out), "enter_time_lag: 1h30m\n") || !strings.Contains(string(out), "listen: off\n") {
			t.Fatalf("doc %d: unexpected rendering:\n%s", i, out)
		}
	}
}

// normalizeCounts makes {count: } and {count: {}} compare equal.
func normalizeCounts(c *Config) {
	for i := range c.Operators {
		if a := c.Operators[i].Aggregate; a != nil {
			for _, spec := range a.Fields {
				if v, ok := spec["count"]; ok && v == nil {
					spec["count"] = map[string]any{}
				}
			}
		}
	}
}

func TestTopicNames(t *testing.T) {
	c := &Config{Group: "revenue", InstanceID: "pod-0"}
	eq(t, "txn", c.TransactionalID(), "revenue-pod-0")
	eq(t, "changelog", c.ChangelogTopic("totals"), "revenue-totals-changelog")
	eq(t, "repartition", c.RepartitionTopic("totals"), "revenue-totals-repartition")
	eq(t, "dlq", c.DLQTopic(), "revenue-dlq")
}

func TestSpecsWithoutValidate(t *testing.T) {
	a := Aggregate{Fields: map[string]map[string]any{
		"z":   {"max": "a.b"},
		"n":   {"count": map[string]any{}},
		"bad": {"summ": "x"},
	}}
	eq(t, "specs", a.Specs(), []AggSpec{{Name: "n", Func: "count", Field: ""}, {Name: "z", Func: "max", Field: "a.b"}})
}

func TestUnknownKeySuggestion(t *testing.T) {
	allowed := structKeys(reflect.TypeFor[Backlog]())
	if !slices.Contains(allowed, "enter_lag") {
		t.Fatal(allowed)
	}
	for _, tt := range []struct{ name, want string }{
		{"enter_lagg", `did you mean "enter_lag"?`},
		{"modes", `did you mean "mode"?`},
		{"nope", "unknown key (allowed here:"},
	} {
		if got := unknownKey("backlog."+tt.name, tt.name, allowed).Msg; !strings.Contains(got, tt.want) {
			t.Errorf("%s: %q does not contain %q", tt.name, got, tt.want)
		}
	}
}

func eq[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: got %#v, want %#v", what, got, want)
	}
}

// FuzzParse checks that any document either loads or fails with an *Error, never panics, and
// that a loaded config's effective YAML loads again.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("examples/*.yaml")
	bad, _ := filepath.Glob("testdata/bad/*.yaml")
	for _, path := range append(seeds, bad...) {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "SLUICE_BACKLOG__ENTER_LAG=10")
	}
	f.Add([]byte(minimalDoc), "SLUICE_KAFKA__BROKERS=a:1,b:2")
	f.Fuzz(func(t *testing.T, doc []byte, env string) {
		host := func() (string, error) { return "h", nil }
		c, err := parse(doc, "", []string{env}, host)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T) is not *Error", err, err)
			}
			return
		}
		out, err := c.YAML()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parse(out, "", nil, host); err != nil {
			t.Fatalf("effective YAML does not load: %v\n%s", err, out)
		}
	})
}

func TestYAMLShapes(t *testing.T) {
	tests := []struct {
		name, extra, key, msg string
		check                 func(t *testing.T, c *Config)
	}{
		{name: "scalar broker list", extra: "kafka: {brokers: 10.0.0.1:9092}\n", check: func(t *testing.T, c *Config) {
			eq(t, "brokers", c.Kafka.Brokers, []string{"10.0.0.1:9092"})
		}},
		{name: "numeric instance id", extra: "instance_id: 7\n", check: func(t *testing.T, c *Config) {
			eq(t, "instance_id", c.InstanceID, "7")
		}},
		{name: "integral float", extra: "kafka: {brokers: [a:1], replication_factor: 3.0}\n", check: func(t *testing.T, c *Config) {
			eq(t, "replication_factor", c.Kafka.ReplicationFactor, int16(3))
		}},
		{name: "plain byte size", extra: "backlog: {sort_memory: 2097152}\n", check: func(t *testing.T, c *Config) {
			eq(t, "sort_memory", c.Backlog.SortMemory, 2*MiB)
		}},
		{name: "duration zero without unit", extra: "backlog: {checkpoint_interval: 0}\n", check: func(t *testing.T, c *Config) {
			eq(t, "checkpoint_interval", c.Backlog.CheckpointInterval, time.Duration(0))
		}},
		{name: "null section keeps defaults", extra: "processing:\n", check: func(t *testing.T, c *Config) {
			eq(t, "commit_interval", c.Processing.CommitInterval, 100*time.Millisecond)
		}},
		{name: "fractional int", extra: "backlog: {enter_lag: 1.5}\n", key: "backlog.enter_lag", msg: "expected a whole number, got 1.5"},
		{name: "list for int", extra: "backlog: {enter_lag: [1]}\n", key: "backlog.enter_lag", msg: "expected a whole number, got a list"},
		{name: "negative size", extra: "backlog: {sort_memory: -1}\n", key: "backlog.sort_memory", msg: "negative size"},
		{name: "huge int", extra: "backlog: {enter_lag: 99999999999999999999}\n", key: "backlog.enter_lag", msg: "expected a whole number"},
		{name: "null list item", extra: "kafka: {brokers: [a:1, null]}\n", key: "kafka.brokers[1]", msg: "empty list item"},
		{name: "duplicate yaml key", extra: "group: again\n", key: "", msg: `mapping key "group" already defined`},
		{name: "map for string", extra: "instance_id: {a: b}\n", key: "instance_id", msg: "expected a string, got a mapping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Later keys in a YAML mapping may not repeat earlier ones, so replace the line.
			doc := minimalDoc
			for _, section := range []string{"kafka:", "instance_id:"} {
				if strings.HasPrefix(tt.extra, section) {
					doc = strings.Replace(doc, section, "old_"+section, 1)
					doc = strings.Replace(doc, "old_"+section, "#", 1)
				}
			}
			c, err := parse([]byte(doc+tt.extra), "", nil, noHost(t))
			if tt.check != nil {
				if err != nil {
					t.Fatal(err)
				}
				tt.check(t, c)
				return
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Key != tt.key || !strings.Contains(ce.Msg, tt.msg) {
				t.Fatalf("got %v, want key %q and a message containing %q", err, tt.key, tt.msg)
			}
		})
	}
}

// TestMapSelect checks select's columns (order kept, bare names are fields) and its errors.
func TestMapSelect(t *testing.T) {
	doc := func(mapYAML string) []byte {
		return []byte(strings.Replace(minimalDoc, "operators:\n", "operators:\n  - name: pick\n    map: "+mapYAML+"\n    output: out\n", 1))
	}
	c, err := parse(doc(`{input: orders, select: [id, {cents: "amount * 100"}, {flag: true}, {none: null}, customer_id]}`), "", nil, noHost(t))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "columns", c.Operators[0].Map.Columns(), []Column{
		{Name: "id", Expr: "id", Field: true},
		{Name: "cents", Expr: "amount * 100"},
		{Name: "flag", Expr: "true"},
		{Name: "none", Expr: "nil"},
		{Name: "customer_id", Expr: "customer_id", Field: true},
	})
	out, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	c2, err := parse(out, "", nil, noHost(t))
	if err != nil {
		t.Fatalf("effective YAML does not load: %v\n%s", err, out)
	}
	eq(t, "columns after a round trip", c2.Operators[0].Map.Columns(), c.Operators[0].Map.Columns())
	for _, tt := range []struct{ name, mapYAML, key, msg string }{
		{"both", `{input: orders, set: {a: "1"}, select: [a]}`, "operators[0].map", "both set and select"},
		{"neither", `{input: orders}`, "operators[0].map.set", "required: set"},
		{"two entries", `{input: orders, select: [{a: "1", b: "2"}]}`, "operators[0].map.select[0]", "a mapping of 2 entries (a, b)"},
		{"duplicate", `{input: orders, select: [a, {a: "1"}]}`, "operators[0].map.select[1]", `duplicate column "a" (also operators[0].map.select[0])`},
		{"nested name", `{input: orders, select: [a.b]}`, "operators[0].map.select[0]", "nested paths are not supported"},
		{"list item", `{input: orders, select: [[a]]}`, "operators[0].map.select[0]", "expected a field name or name: expression, got a list"},
		{"empty expression", `{input: orders, select: [{a: " "}]}`, "operators[0].map.select[0]", "required: an expression for a"},
		{"not a list", `{input: orders, select: a}`, "operators[0].map.select", "expected a list"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(doc(tt.mapYAML), "", nil, noHost(t))
			var ce *Error
			if !errors.As(err, &ce) || ce.Key != tt.key || !strings.Contains(ce.Msg, tt.msg) {
				t.Fatalf("got %v, want key %q and a message containing %q", err, tt.key, tt.msg)
			}
		})
	}
}
