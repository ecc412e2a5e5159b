package configs

import (
	"fmt"
	havro "github.com/hamba/avro/v2"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxTopicLen is Kafka's limit on topic names.
const maxTopicLen = 249

// Validate checks the whole configuration and returns the first problem as an *Error naming
// its key, or nil. It does not modify c. Enumerations left empty ("") count as their default,
// so a Config built in code validates without Load's defaults; Load and Parse fill them in.
// Expressions are only required to be non-empty here: operators/ compiles them.
func (c *Config) Validate() error {
	for _, check := range []func() *Error{
		c.validateKafka,
		c.validateIdentity,
		c.validateProcessing,
		c.validateBacklog,
		c.validateHTTP,
		c.validateLog,
		c.validateSchemaRegistry,
		c.validateSources,
		c.validateSinks,
		c.validateTables,
		c.validateOperators,
		c.validateTopics,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) validateKafka() *Error {
	k := c.Kafka
	if len(k.Brokers) == 0 {
		return errorf("kafka.brokers", "required: a list of host:port addresses, or [embedded] for an in-process broker")
	}
	for i, b := range k.Brokers {
		key := fmt.Sprintf("kafka.brokers[%d]", i)
		switch {
		case b == EmbeddedBroker:
			if len(k.Brokers) > 1 {
				return errorf(key, "%q must be the only broker", EmbeddedBroker)
			}
		case b == "":
			return errorf(key, "empty broker address")
		case strings.ContainsAny(b, ", \t\n"):
			return errorf(key, "invalid broker address %q (want host:port; give several brokers as a list)", b)
		case strings.Contains(b, ":"):
			if _, port, err := net.SplitHostPort(b); err != nil || !validPort(port, 1) {
				return errorf(key, "invalid broker address %q (want host:port, e.g. 127.0.0.1:9092)", b)
			}
		}
	}
	if k.FetchMaxBytes != 0 && (k.FetchMaxBytes < MiB || k.FetchMaxBytes > 1024*MiB) { // 0: the default
		return errorf("kafka.fetch_max_bytes", "must be between 1MiB and 1GiB, got %s", k.FetchMaxBytes)
	}
	if err := checkEnum("kafka.compression", k.Compression, CompressionNone, CompressionSnappy, CompressionLZ4, CompressionZstd, CompressionGzip); err != nil {
		return err
	}
	if k.TransactionTimeout < time.Second {
		return errorf("kafka.transaction_timeout", "must be at least 1s, got %s", fmtDuration(k.TransactionTimeout))
	}
	if k.ReplicationFactor != -1 && k.ReplicationFactor < 1 {
		return errorf("kafka.replication_factor", "must be -1 (the broker's default) or at least 1, got %d", k.ReplicationFactor)
	}
	if err := validateTLS(k); err != nil {
		return err
	}
	return validateSASL(k)
}

// validateTLS checks kafka.tls: its files are checked when they are read (package security).
func validateTLS(k Kafka) *Error {
	t := k.TLS
	if !t.Enabled {
		for _, f := range []struct{ key, v string }{
			{"kafka.tls.ca_file", t.CAFile},
			{"kafka.tls.cert_file", t.CertFile},
			{"kafka.tls.key_file", t.KeyFile},
			{"kafka.tls.server_name", t.ServerName},
		} {
			if f.v != "" {
				return errorf(f.key, "set, but kafka.tls.enabled is false (set kafka.tls.enabled: true, or remove it)")
			}
		}
		return nil
	}
	if k.Embedded() {
		return errorf("kafka.tls.enabled", "the embedded broker (kafka.brokers: [embedded]) speaks plaintext only; remove kafka.tls")
	}
	if t.CertFile != "" && t.KeyFile == "" {
		return errorf("kafka.tls.key_file", "required with kafka.tls.cert_file: the PEM file of the client certificate's private key")
	}
	if t.KeyFile != "" && t.CertFile == "" {
		return errorf("kafka.tls.cert_file", "required with kafka.tls.key_file: the PEM file of the client certificate")
	}
	return nil
}

// validateSASL checks kafka.sasl. Its messages never quote a value: the section is secret.
func validateSASL(k Kafka) *Error {
	s := k.SASL
	if s.Mechanism == "" {
		for _, f := range []struct{ key, v string }{
			{"kafka.sasl.username", s.Username},
			{"kafka.sasl.password", s.Password},
			{"kafka.sasl.password_file", s.PasswordFile},
		} {
			if f.v != "" {
				return errorf("kafka.sasl.mechanism", "required with %s: one of %s, %s, %s", f.key, SASLPlain, SASLScramSHA256, SASLScramSHA512)
			}
		}
		return nil
	}
	if m := s.MechanismName(); m != SASLPlain && m != SASLScramSHA256 && m != SASLScramSHA512 {
		return errorf("kafka.sasl.mechanism", "unknown mechanism (allowed: %s, %s, %s)", SASLPlain, SASLScramSHA256, SASLScramSHA512)
	}
	if k.Embedded() {
		return errorf("kafka.sasl.mechanism", "the embedded broker (kafka.brokers: [embedded]) has no SASL; remove kafka.sasl")
	}
	if s.Username == "" {
		return errorf("kafka.sasl.username", "required with kafka.sasl.mechanism")
	}
	switch {
	case s.Password == "" && s.PasswordFile == "":
		return errorf("kafka.sasl.password", "required with kafka.sasl.mechanism: set SLUICE_KAFKA__SASL__PASSWORD, or kafka.sasl.password_file")
	case s.Password != "" && s.PasswordFile != "":
		return errorf("kafka.sasl.password_file", "set together with kafka.sasl.password: give only one")
	}
	return nil
}

func (c *Config) validateIdentity() *Error {
	if c.Group == "" {
		return errorf("group", "required: the consumer group, also the prefix of internal topics (letters, digits, '.', '_', '-')")
	}
	if !validName(c.Group, true, ".") {
		return errorf("group", "invalid value %q (allowed characters: letters, digits, '.', '_', '-')", c.Group)
	}
	if c.InstanceID == "" {
		return errorf("instance_id", "required: a name unique within the group (default: the host name)")
	}
	if !validName(c.InstanceID, true, ".") {
		return errorf("instance_id", "invalid value %q (allowed characters: letters, digits, '.', '_', '-')", c.InstanceID)
	}
	if len(c.InstanceID) > maxTopicLen {
		return errorf("instance_id", "longer than %d characters", maxTopicLen)
	}
	return nil
}

func (c *Config) validateProcessing() *Error {
	p := c.Processing
	if err := checkEnum("processing.guarantee", p.Guarantee, ExactlyOnce, AtLeastOnce); err != nil {
		return err
	}
	if p.CommitInterval <= 0 {
		return errorf("processing.commit_interval", "must be greater than 0, got %s", fmtDuration(p.CommitInterval))
	}
	if p.CommitInterval >= c.Kafka.TransactionTimeout {
		return errorf("processing.commit_interval", "must be shorter than kafka.transaction_timeout (%s), got %s",
			fmtDuration(c.Kafka.TransactionTimeout), fmtDuration(p.CommitInterval))
	}
	if p.StateDir == "" {
		return errorf("processing.state_dir", "required: the directory for operator state and sort spills")
	}
	if p.CacheKeys < 1 {
		return errorf("processing.cache_keys", "must be at least 1, got %d", p.CacheKeys)
	}
	if p.MaxCheckpointFailures < 1 {
		return errorf("processing.max_checkpoint_failures", "must be at least 1, got %d", p.MaxCheckpointFailures)
	}
	return nil
}

func (c *Config) validateBacklog() *Error {
	b := c.Backlog
	if err := checkEnum("backlog.mode", b.Mode, ModeAuto, ModeNever, ModeAlways); err != nil {
		return err
	}
	if b.EnterLag <= 0 {
		return errorf("backlog.enter_lag", "must be greater than 0, got %d", b.EnterLag)
	}
	if b.ExitLag < 0 {
		return errorf("backlog.exit_lag", "must be at least 0, got %d", b.ExitLag)
	}
	if b.ExitLag >= b.EnterLag {
		return errorf("backlog.exit_lag", "must be less than backlog.enter_lag (%d), got %d", b.EnterLag, b.ExitLag)
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"backlog.enter_time_lag", b.EnterTimeLag},
		{"backlog.exit_time_lag", b.ExitTimeLag},
		{"backlog.checkpoint_interval", b.CheckpointInterval},
		{"backlog.progress_interval", b.ProgressInterval},
		{"backlog.commit_interval", b.CommitInterval},
	} {
		if d.v < 0 {
			return errorf(d.key, "must not be negative (0 turns it off), got %s", fmtDuration(d.v))
		}
	}
	if b.EnterTimeLag > 0 && b.ExitTimeLag > 0 && b.ExitTimeLag >= b.EnterTimeLag {
		return errorf("backlog.exit_time_lag", "must be less than backlog.enter_time_lag (%s), got %s",
			fmtDuration(b.EnterTimeLag), fmtDuration(b.ExitTimeLag))
	}
	if b.CommitInterval >= c.Kafka.TransactionTimeout {
		return errorf("backlog.commit_interval", "must be shorter than kafka.transaction_timeout (%s), got %s",
			fmtDuration(c.Kafka.TransactionTimeout), fmtDuration(b.CommitInterval))
	}
	if b.SortMemory < MiB {
		return errorf("backlog.sort_memory", "must be at least 1MiB, got %s", b.SortMemory)
	}
	return nil
}

func (c *Config) validateHTTP() *Error {
	l := c.HTTP.Listen
	if !c.HTTP.Enabled() {
		if c.HTTP.Pprof {
			return errorf("http.pprof", "true needs the HTTP server, but http.listen is off (set http.listen, or http.pprof: false)")
		}
		return nil
	}
	if _, port, err := net.SplitHostPort(l); err != nil || !validPort(port, 0) {
		return errorf("http.listen", "invalid address %q (want host:port like 127.0.0.1:9464, or off)", l)
	}
	return nil
}

func (c *Config) validateLog() *Error {
	if err := checkEnum("log.level", c.Log.Level, "info", "debug", "warn", "error"); err != nil {
		return err
	}
	return checkEnum("log.format", c.Log.Format, "text", "json")
}

func (c *Config) validateSources() *Error {
	if len(c.Sources) == 0 {
		return errorf("sources", "at least one source is required, e.g. sources: {orders: {topic: orders}}")
	}
	for _, name := range sortedKeys(c.Sources) {
		s, key := c.Sources[name], "sources."+name
		if !validName(name, true, "") {
			return errorf(key, "invalid source name %q (allowed characters: letters, digits, '_', '-')", name)
		}
		if err := checkTopic(key+".topic", s.Topic); err != nil {
			return err
		}
		if err := c.checkFormats(key, s.Format, s.KeyFormat); err != nil {
			return err
		}
		if s.Key != "" {
			if msg := checkFieldPath(s.Key); msg != "" {
				return errorf(key+".key", "%s; or leave it out to use the Kafka record key", msg)
			}
		}
		if s.Timestamp != "" {
			if msg := checkFieldPath(s.Timestamp); msg != "" {
				return errorf(key+".timestamp", "%s; or leave it out to use the record timestamp", msg)
			}
			if s.ProcessingTime {
				return errorf(key+".processing_time", "a source's time is its timestamp field or the processing time, not both")
			}
		}
		if s.Watermark.MaxDelay < 0 {
			return errorf(key+".watermark.max_delay", "must not be negative, got %s", fmtDuration(s.Watermark.MaxDelay))
		}
		if s.Watermark.IdleAfter < 0 {
			return errorf(key+".watermark.idle_after", "must not be negative (0: never idle), got %s", fmtDuration(s.Watermark.IdleAfter))
		}
	}
	return nil
}

// checkFormats checks the value and key formats of the source or table at key.
func (c *Config) checkFormats(key, format, keyFormat string) *Error {
	if err := checkEnum(key+".format", format, FormatJSON, FormatAvro); err != nil {
		return err
	}
	if format == FormatAvro && !c.SchemaRegistry.Enabled() {
		return errorf(key+".format", "avro needs a schema registry: set schema_registry.urls (or SLUICE_SCHEMA_REGISTRY__URLS)")
	}
	return checkEnum(key+".key_format", keyFormat, KeyBytes, KeyString, KeyJSON)
}

func (c *Config) validateSchemaRegistry() *Error {
	r := c.SchemaRegistry
	for i, u := range r.URLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return errorf(fmt.Sprintf("schema_registry.urls[%d]", i), "invalid URL %q (want http://host:port or https://host:port, with a path if the registry has one)", u)
		}
	}
	if r.Timeout <= 0 {
		return errorf("schema_registry.timeout", "must be greater than 0, got %s", fmtDuration(r.Timeout))
	}
	if r.RetryTimeout < 0 {
		return errorf("schema_registry.retry_timeout", "must not be negative (0: one try), got %s", fmtDuration(r.RetryTimeout))
	}
	if r.BearerToken != "" && (r.Username != "" || r.Password != "") {
		return errorf("schema_registry.bearer_token", "set either bearer_token or username/password, not both")
	}
	return nil
}

func (c *Config) validateSinks() *Error {
	for _, name := range sortedKeys(c.Sinks) {
		s, key := c.Sinks[name], "sinks."+name
		if !validName(name, true, "") {
			return errorf(key, "invalid sink name %q (allowed characters: letters, digits, '_', '-')", name)
		}
		if err := checkTopic(key+".topic", s.Topic); err != nil {
			return err
		}
		if err := checkEnum(key+".format", s.Format, FormatJSON, FormatAvro); err != nil {
			return err
		}
		if err := checkEnum(key+".subject_strategy", s.SubjectStrategy, "topic", "record", "topic_record"); err != nil {
			return err
		}
		if s.Format != FormatAvro {
			continue // a schema is only read with format avro
		}
		if !c.SchemaRegistry.Enabled() {
			return errorf(key+".format", "avro needs a schema registry: set schema_registry.urls (or SLUICE_SCHEMA_REGISTRY__URLS)")
		}
		if s.Schema == "" {
			return errorf(key+".schema", "required with format avro: the Avro record schema of the values, as JSON text")
		}
		if sch, err := havro.ParseWithCache(s.Schema, "", &havro.SchemaCache{}); err != nil {
			return errorf(key+".schema", "not an Avro schema: %v", err)
		} else if sch.Type() != havro.Record {
			return errorf(key+".schema", "the top level is %s, want a record", sch.Type())
		}
	}
	return nil
}

func (c *Config) validateOperators() *Error {
	if len(c.Operators) == 0 {
		return errorf("operators", "at least one operator (filter, map, join or aggregate) is required")
	}
	index := make(map[string]int, len(c.Operators)) // name -> position
	for i := range c.Operators {
		if n := c.Operators[i].Name; n != "" {
			if _, dup := index[n]; !dup {
				index[n] = i
			}
		}
	}
	for i := range c.Operators {
		op := &c.Operators[i]
		p := fmt.Sprintf("operators[%d]", i)
		switch {
		case op.Name == "":
			return errorf(p+".name", "required (lower-case letters, digits, '_', '-'; used in internal topic names)")
		case !validName(op.Name, false, ""):
			return errorf(p+".name", "invalid name %q (allowed characters: lower-case letters, digits, '_', '-')", op.Name)
		case index[op.Name] != i:
			return errorf(p+".name", "duplicate name %q (also operators[%d])", op.Name, index[op.Name])
		}
		if _, isSrc := c.Sources[op.Name]; isSrc {
			return errorf(p+".name", "%q is also a source name; inputs refer to both, so they must differ", op.Name)
		}
		var kinds []string
		for _, k := range []struct {
			name string
			set  bool
		}{{"filter", op.Filter != nil}, {"map", op.Map != nil}, {"join", op.Join != nil}, {"aggregate", op.Aggregate != nil}, {"cogroup", op.Cogroup != nil}, {"dedup", op.Dedup != nil}, {"top", op.Top != nil}, {"changes", op.Changes != nil}, {"distinct", op.Distinct != nil}, {"rekey", op.Rekey != nil}} {
			if k.set {
				kinds = append(kinds, k.name)
			}
		}
		switch len(kinds) {
		case 0:
			return errorf(p, "needs one of filter, map, join, aggregate, cogroup, dedup, top, changes, distinct or rekey")
		case 1:
		default:
			return errorf(p, "has %s; an operator is exactly one of filter, map, join, aggregate, cogroup, dedup, top, changes, distinct or rekey", strings.Join(kinds, " and "))
		}
		kp := p + "." + kinds[0]
		inKey := kp + ".input"
		if op.Join != nil {
			inKey = kp + ".stream"
		}
		if op.Join != nil && op.Join.StreamStream() {
			for _, side := range []struct{ key, in string }{{"left", op.Join.Left}, {"right", op.Join.Right}} {
				if err := c.checkInput(kp+"."+side.key, i, side.in, index); err != nil {
					return err
				}
			}
			if op.Join.Left == op.Join.Right {
				return errorf(kp+".right", "%q is also the left input; a stream-stream join joins two different inputs", op.Join.Right)
			}
		} else if op.Cogroup != nil {
			if len(op.Cogroup.Inputs) < 2 {
				return errorf(kp+".inputs", "needs two or more inputs (one input: use aggregate)")
			}
			for k, in := range op.Cogroup.Inputs {
				if slices.Contains(op.Cogroup.Inputs[:k], in) {
					return errorf(fmt.Sprintf("%s.inputs[%d]", kp, k), "%q is listed twice", in)
				}
				if err := c.checkInput(fmt.Sprintf("%s.inputs[%d]", kp, k), i, in, index); err != nil {
					return err
				}
			}
		} else if err := c.checkInput(inKey, i, op.Input(), index); err != nil {
			return err
		}
		var err *Error
		switch {
		case op.Filter != nil:
			if strings.TrimSpace(op.Filter.Expr) == "" {
				err = errorf(kp+".expr", "required: a boolean expression, e.g. amount > 100")
			}
		case op.Map != nil:
			err = checkMap(kp, op.Map)
		case op.Join != nil && op.Join.StreamStream():
			err = checkStreamJoin(kp, op.Join)
		case op.Join != nil:
			err = c.checkJoin(kp, op.Join)
			if err == nil {
				if _, ok := c.SourceOf(op.Name); !ok {
					err = errorf(kp+".stream", "does not lead to a source")
				}
			}
		case op.Cogroup != nil:
			err = checkCogroup(kp, op.Cogroup)
		case op.Aggregate != nil:
			err = checkAggregate(kp, op.Aggregate)
		case op.Rekey != nil:
			by, ex := strings.TrimSpace(op.Rekey.By) != "", strings.TrimSpace(op.Rekey.Expr) != ""
			switch {
			case by && ex:
				err = errorf(kp+".expr", "given with by: a rekey has one of them (by: field paths; expr: an expression)")
			case ex:
				// Compiled, and refused with its error, by the plan.
			case !by:
				err = errorf(kp+".by", "required: the field path of the new key, e.g. seller (or expr: an expression of the record)")
			default:
				if msg := checkGroupBy(op.Rekey.By); msg != "" {
					err = errorf(kp+".by", "%s", msg)
				}
			}
		case op.Top != nil:
			err = checkTop(kp, op.Top)
		case op.Dedup != nil:
			err = checkDedup(kp, op.Dedup)
		case op.Distinct != nil:
			err = checkDistinct(kp, op.Distinct)
		}
		if err == nil && (op.Aggregate != nil || op.Top != nil || op.Dedup != nil || op.Changes != nil || op.Distinct != nil) {
			// A keyed operator of one input reads, through it, a source.
			if _, ok := c.SourceOf(op.Name); !ok {
				err = errorf(kp+".input", "does not lead to a source")
			}
		}
		if err != nil {
			return err
		}
		if op.Output == "" {
			if c.ReadByLater(op.Name) {
				continue
			}
			if op.Join != nil && op.Join.StreamStream() {
				return errorf(p+".output", "required for a stream-stream join that no later operator reads: the sink its pairs go to (%s)", c.sinkList())
			}
			if op.Cogroup != nil {
				return errorf(p+".output", "required for a cogroup that no later operator reads: the sink its results go to (%s)", c.sinkList())
			}
			if op.Aggregate != nil {
				return errorf(p+".output", "required for an aggregate that no later operator reads: the sink its results go to (%s)", c.sinkList())
			}
			if op.Dedup != nil {
				return errorf(p+".output", "required for a dedup that no later operator reads: the sink its records go to (%s)", c.sinkList())
			}
			if op.Top != nil {
				return errorf(p+".output", "required for a top that no later operator reads: the sink its rows go to (%s)", c.sinkList())
			}
			if op.Changes != nil {
				return errorf(p+".output", "required for a changes operator that no later operator reads: the sink its changes go to (%s)", c.sinkList())
			}
			if op.Distinct != nil {
				return errorf(p+".output", "required for a distinct that no later operator reads: the sink its records go to (%s)", c.sinkList())
			}
		} else if _, ok := c.Sinks[op.Output]; !ok {
			return errorf(p+".output", "unknown sink %q (%s)", op.Output, c.sinkList())
		}
		if err := c.checkOutputChangelog(p, op); err != nil {
			return err
		}
	}
	return nil
}

// checkOutputChangelog checks an aggregate whose output topic is its changelog (changelog:
// output): a restore rebuilds every state from the latest result of its key, so the results
// must give the state back exactly and nothing else may write there.
func (c *Config) checkOutputChangelog(p string, op *Operator) *Error {
	if op.Top != nil {
		return c.checkTopOutputChangelog(p, op)
	}
	a := op.Aggregate
	if a == nil {
		return nil
	}
	key := p + ".aggregate.changelog"
	if err := checkEnum(key, a.Changelog, ChangelogOwnTopic, ChangelogOutput); err != nil || !a.OutputChangelog() {
		return err
	}
	if err := c.checkOwnSink(key, op, "aggregate"); err != nil {
		return err
	}
	switch {
	case a.Window != nil:
		return errorf(key, "output: a window's results leave its state when it closes, so they cannot rebuild it; use changelog: topic")
	case a.Retractions:
		return errorf(key, "output: with retractions a key whose rows were all taken back has no result, but may have a state; use changelog: topic")
	}
	for _, name := range sortedKeys(a.Fields) {
		sp, _ := parseAggSpec(name, a.Fields[name])
		switch {
		case sp.Func == "avg":
			return errorf(p+".aggregate.fields."+name, "avg cannot give its sum and count back exactly, and changelog: output rebuilds the state from the results; write {sum: %s} and {count: {}} fields (and divide downstream), or use changelog: topic", sp.Field)
		case sp.Func == CountDistinct:
			return errorf(p+".aggregate.fields."+name, "count_distinct keeps its values in operators of its own, which changelog: output cannot rebuild from the results; use changelog: topic")
		case sp.Where != "" || sp.Type == AggTypeString:
			return errorf(p+".aggregate.fields."+name, "a field with where or type: string has a state its result does not give back (a filtered count of its own, a string); changelog: output rebuilds the state from the results; use changelog: topic")
		}
	}
	return nil
}

// checkTopOutputChangelog checks a top whose output topic is its changelog (changelog:
// output): a restore gathers each key's latest rows back into its state, so nothing else may
// write there, and no row may leave the result (a window's rows leave its state when it closes).
func (c *Config) checkTopOutputChangelog(p string, op *Operator) *Error {
	tp, key := op.Top, p+".top.changelog"
	if err := checkEnum(key, tp.Changelog, ChangelogOwnTopic, ChangelogOutput); err != nil || !tp.OutputChangelog() {
		return err
	}
	if tp.Window != nil {
		return errorf(key, "output: a window's rows leave its state when it closes, so they cannot rebuild it; use changelog: topic")
	}
	return c.checkOwnSink(key, op, "top")
}

// checkOwnSink checks that operator op (an aggregate or a top, whose changelog: output is at
// key) writes a json sink of its own that no later operator reads.
func (c *Config) checkOwnSink(key string, op *Operator, kind string) *Error {
	switch {
	case op.Output == "":
		return errorf(key, "output needs a sink for the results (a later operator reads them, and a restore needs a topic only this operator writes); use changelog: topic")
	case c.ReadByLater(op.Name):
		return errorf(key, "output: a later operator reads this %s's results; use changelog: topic", kind)
	case c.Sinks[op.Output].Format == "avro":
		return errorf(key, "output: sink %q writes avro; a restore reads the results back as JSON, so it needs format: json (or use changelog: topic)", op.Output)
	}
	for j, other := range c.Operators {
		if other.Name != op.Name && other.Output == op.Output {
			return errorf(key, "output: sink %q is also written by operators[%d] (%s), and a restore would read its records as this %s's states; give this %s a sink of its own", op.Output, j, other.Name, kind, kind)
		}
	}
	return nil
}

// validateTables checks the tables: names, topics, key fields; versions must be 0 until joins
// with as_of: event_time exist.
func (c *Config) validateTables() *Error {
	for _, name := range sortedKeys(c.Tables) {
		t, key := c.Tables[name], "tables."+name
		if !validName(name, true, "") {
			return errorf(key, "invalid table name %q (allowed characters: letters, digits, '_', '-')", name)
		}
		if _, dup := c.Sources[name]; dup {
			return errorf(key, "%q is also a source name; joins and inputs refer to both, so they must differ", name)
		}
		for i, op := range c.Operators {
			if op.Name == name {
				return errorf(key, "%q is also the name of operators[%d]; they must differ", name, i)
			}
		}
		if err := checkTopic(key+".topic", t.Topic); err != nil {
			return err
		}
		if err := c.checkFormats(key, t.Format, t.KeyFormat); err != nil {
			return err
		}
		if t.Key != "" {
			if msg := checkFieldPath(t.Key); msg != "" {
				return errorf(key+".key", "%s; or leave it out to use the Kafka record key", msg)
			}
		}
		if t.Versions < 0 {
			return errorf(key+".versions", "must not be negative, got %s", fmtDuration(t.Versions))
		}
		if t.Timestamp != "" {
			if msg := checkFieldPath(t.Timestamp); msg != "" {
				return errorf(key+".timestamp", "%s; or leave it out to use the record timestamp", msg)
			}
		}
		if t.Watermark.MaxDelay < 0 {
			return errorf(key+".watermark.max_delay", "must not be negative, got %s", fmtDuration(t.Watermark.MaxDelay))
		}
		if t.Watermark.IdleAfter < 0 {
			return errorf(key+".watermark.idle_after", "must not be negative (0: never idle), got %s", fmtDuration(t.Watermark.IdleAfter))
		}
	}
	return nil
}

// checkStreamJoin checks a windowed stream-stream join (its inputs are checked as inputs).
func checkStreamJoin(kp string, j *Join) *Error {
	switch {
	case j.Stream != "" || j.Table != "":
		return errorf(kp, "is a stream-table join (stream, table) or a stream-stream join (left, right, within), not both")
	case j.Left == "":
		return errorf(kp+".left", "required for a stream-stream join (with right and within)")
	case j.Right == "":
		return errorf(kp+".right", "required for a stream-stream join (with left and within)")
	case j.Within < 0:
		return errorf(kp+".within", "must not be negative: how far apart in event time a left and a right record may be, e.g. 10m (or leave it out for a regular join)")
	case j.Within == 0 && j.Type != "" && j.Type != JoinInner:
		return errorf(kp+".type", "a regular join (no within) is inner: a %s join emits a record without a partner only once its window has closed, so it needs within", j.Type)
	case j.Within > 0 && j.Unique != "":
		return errorf(kp+".unique", "applies to regular joins (no within); a windowed join keeps its records until their window closes")
	case j.AsOf != "":
		return errorf(kp+".as_of", "applies to stream-table joins only")
	}
	if err := checkEnum(kp+".unique", j.Unique, SideLeft, SideRight); err != nil {
		return err
	}
	if len(j.Select) > 0 {
		if err := checkSelect(kp+".select", j.Select); err != nil {
			return err
		}
	}
	if j.Where != "" && strings.TrimSpace(j.Where) == "" {
		return errorf(kp+".where", "empty: a condition on each pair, e.g. \"bid.dateTime <= auction.expires\" (or leave it out)")
	}
	return checkEnum(kp+".type", j.Type, JoinInner, JoinLeft, JoinOuter)
}

// checkJoin checks a join's table, type and as_of (its stream is checked as its input).
func (c *Config) checkJoin(kp string, j *Join) *Error {
	if j.Stream == "" {
		return errorf(kp+".stream", "required: a source or an earlier operator (or left, right and within for a stream-stream join)")
	}
	if j.Type == JoinOuter {
		return errorf(kp+".type", "outer applies to stream-stream joins; a stream-table join is inner or left")
	}
	if j.Unique != "" {
		return errorf(kp+".unique", "applies to regular stream-stream joins (left and right, no within); a table has one row per key already")
	}
	if j.Where != "" {
		return errorf(kp+".where", "applies to stream-stream joins; after a stream-table join, a filter reads the joined record")
	}
	if j.Table == "" {
		return errorf(kp+".table", "required: a table (%s)", c.tableList())
	}
	if _, ok := c.Tables[j.Table]; !ok {
		return errorf(kp+".table", "unknown table %q (%s)", j.Table, c.tableList())
	}
	if err := checkEnum(kp+".type", j.Type, JoinInner, JoinLeft); err != nil {
		return err
	}
	if err := checkEnum(kp+".as_of", j.AsOf, "processing", "event_time"); err != nil {
		return err
	}
	if len(j.Select) > 0 {
		if j.AsOf != "event_time" {
			return errorf(kp+".select", "applies to stream-stream joins and to stream-table joins with as_of: event_time; a join as of processing time runs in its input's chain, so a map after it (with this select) costs no second write")
		}
		return checkSelect(kp+".select", j.Select)
	}
	return nil
}

func (c *Config) tableList() string {
	if len(c.Tables) == 0 {
		return "no tables are defined; declare one under tables:, e.g. tables: {customers: {topic: customers}}"
	}
	return "tables: " + strings.Join(sortedKeys(c.Tables), ", ")
}

// checkInput resolves the input of operator i: a source or an earlier operator.
func (c *Config) checkInput(key string, i int, in string, index map[string]int) *Error {
	if in == "" {
		return errorf(key, "required: a source or an earlier operator")
	}
	if _, ok := c.Sources[in]; ok {
		return nil
	}
	j, isOp := index[in]
	switch {
	case isOp && j < i:
		return nil
	case isOp && j == i:
		return errorf(key, "operator %q cannot read its own output", in)
	case isOp:
		return errorf(key, "%q is operators[%d], which comes later; an input must be a source or an earlier operator", in, j)
	}
	earlier := make([]string, 0, i)
	for _, op := range c.Operators[:i] {
		earlier = append(earlier, op.Name)
	}
	msg := "sources: " + strings.Join(sortedKeys(c.Sources), ", ")
	if len(earlier) > 0 {
		msg += "; earlier operators: " + strings.Join(earlier, ", ")
	}
	return errorf(key, "unknown input %q (%s)", in, msg)
}

func (c *Config) sinkList() string {
	if len(c.Sinks) == 0 {
		return "no sinks are defined"
	}
	return "sinks: " + strings.Join(sortedKeys(c.Sinks), ", ")
}

func checkMap(kp string, m *Map) *Error {
	switch {
	case len(m.Set) > 0 && len(m.Select) > 0:
		return errorf(kp, "both set and select: give one (select lists every output column, so set's fields go into it as name: expression)")
	case len(m.Select) > 0:
		return checkSelect(kp+".select", m.Select)
	case len(m.Set) == 0:
		return errorf(kp+".set", "required: set (at least one field: expression, e.g. set: {amount_cents: amount * 100}) or select (the output columns, e.g. select: [id, {cents: amount * 100}])")
	}
	for _, field := range sortedKeys(m.Set) {
		key := kp + ".set." + field
		if field == "" || strings.TrimSpace(field) != field || strings.Contains(field, ".") {
			return errorf(key, "invalid field name %q (map sets top-level fields; nested paths are not supported)", field)
		}
		if strings.TrimSpace(m.Set[field]) == "" {
			return errorf(key, "required: an expression")
		}
	}
	return nil
}

func checkSelect(kp string, items []any) *Error {
	seen := map[string]int{}
	for i, item := range items {
		key := fmt.Sprintf("%s[%d]", kp, i)
		c, msg := parseColumn(item)
		if msg != "" {
			return errorf(key, "%s", msg)
		}
		if c.Name == "" || strings.TrimSpace(c.Name) != c.Name || strings.Contains(c.Name, ".") {
			return errorf(key, "invalid column name %q (select writes top-level fields; nested paths are not supported)", c.Name)
		}
		if strings.TrimSpace(c.Expr) == "" {
			return errorf(key, "required: an expression for %s", c.Name)
		}
		if j, dup := seen[c.Name]; dup {
			return errorf(key, "duplicate column %q (also %s[%d])", c.Name, kp, j)
		}
		seen[c.Name] = i
	}
	return nil
}

// reservedOutputFields are keys of an aggregate's output record that sluice writes itself.
var reservedOutputFields = []string{"key", "window_start", "window_end"}

func checkAggregate(kp string, a *Aggregate) *Error {
	if len(a.Fields) == 0 {
		return errorf(kp+".fields", "required: at least one output field, e.g. fields: {amount: {sum: amount}, orders: {count: {}}}")
	}
	for _, name := range sortedKeys(a.Fields) {
		key := kp + ".fields." + name
		if !validName(name, true, "") {
			return errorf(key, "invalid field name %q (allowed characters: letters, digits, '_', '-')", name)
		}
		if slices.Contains(reservedOutputFields, name) {
			return errorf(key, "%q is reserved in the output record (reserved: %s)", name, strings.Join(reservedOutputFields, ", "))
		}
		if _, msg := parseAggSpec(name, a.Fields[name]); msg != "" {
			return errorf(key, "%s", msg)
		}
	}
	// A field path is read as a number or as a string, not both: every record would fail one.
	asString := map[string]string{}
	for _, sp := range a.Specs() {
		if sp.Type == AggTypeString {
			asString[sp.Field] = sp.Name
		}
	}
	for _, sp := range a.Specs() {
		if other, ok := asString[sp.Field]; ok && sp.Func != "count" && sp.Func != CountDistinct && sp.Type != AggTypeString {
			return errorf(kp+".fields."+sp.Name, "%s reads %s as a number, but %s reads it as a string (type: string); a value is one or the other", sp.Func, sp.Field, other)
		}
		if sp.Type == AggTypeString && a.Window.Kind() == "session" {
			return errorf(kp+".fields."+sp.Name+".type", "a min or max over strings is not supported with session windows (a session's state is fixed-size); use a tumbling or hopping window, or none")
		}
	}
	if err := checkCountDistinct(kp, a); err != nil {
		return err
	}
	if err := checkEnum(kp+".emit", a.Emit, EmitUpdates, EmitFinal); err != nil {
		return err
	}
	if a.GroupBy != "" {
		if msg := checkGroupBy(a.GroupBy); msg != "" {
			return errorf(kp+".group_by", "%s; or leave it out to group by the input's key", msg)
		}
		if names := GroupByNames(a.GroupBy); len(names) > 1 {
			for _, n := range names {
				if _, ok := a.Fields[n]; ok {
					return errorf(kp+".fields."+n, "is a column of the composite group_by key (the output carries it); rename the field")
				}
			}
		}
	}
	if a.Retractions {
		if a.Window != nil {
			return errorf(kp+".retractions", "an aggregate over retractions has one result per key, not windows (a retraction takes back a row, which belongs to no window); leave the window out")
		}
		for _, name := range sortedKeys(a.Fields) {
			if sp, _ := parseAggSpec(name, a.Fields[name]); sp.Func == "min" || sp.Func == "max" {
				return errorf(kp+".fields."+name, "%s cannot take a retraction back (the value it would fall back to is gone); with retractions: true use sum, count or avg, or drop retractions and aggregate rows that never change", sp.Func)
			}
		}
	}
	if a.WindowFinals && (a.Window.Kind() == "" || a.Window.Kind() == "session") {
		return errorf(kp+".window_finals", "puts each record into its own window of a tumbling or hopping window; add window: {hopping: ..., advance: ...} or leave window_finals out")
	}
	if a.Window == nil {
		if a.Emit == EmitFinal {
			return errorf(kp+".emit", `"final" needs a window (a result per key without a window never closes); add window: {tumbling: 1m} or use emit: updates`)
		}
		return nil
	}
	if err := checkWindow(kp+".window", a.Window); err != nil {
		return err
	}
	if _, ok := a.Fields["retract"]; ok && a.Window.Kind() == "session" && a.Emit != EmitFinal {
		return errorf(kp+".fields.retract", `"retract" is reserved in the updates of session windows (it marks the retraction of a merged session); rename the field or use emit: final`)
	}
	return nil
}

// checkCogroup checks a cogroup's fields (as an aggregate's) and that each names one of its
// inputs in from.
func checkCogroup(kp string, cg *Cogroup) *Error {
	for _, name := range sortedKeys(cg.Fields) {
		if _, ok := cg.Fields[name][CountDistinct]; ok {
			return errorf(kp+".fields."+name, "count_distinct is an aggregate's field, not a cogroup's; count the distinct values in an aggregate with group_by (or with a distinct operator whose columns the cogroup sums)")
		}
	}
	if err := checkAggregate(kp, cg.Aggregate()); err != nil {
		return err
	}
	for _, in := range cg.WindowFinals {
		switch {
		case !slices.Contains(cg.Inputs, in):
			return errorf(kp+".window_finals", "%q is not an input of the cogroup (%s)", in, strings.Join(cg.Inputs, ", "))
		case cg.Window.Kind() == "" || cg.Window.Kind() == "session":
			return errorf(kp+".window_finals", "puts each record of an input into its own window of a tumbling or hopping window; add window: {hopping: ..., advance: ...} or leave window_finals out")
		}
	}
	for _, name := range sortedKeys(cg.Fields) {
		from, ok := cg.Fields[name]["from"].(string)
		if !ok || from == "" {
			return errorf(kp+".fields."+name+".from", "required: the input whose records the field aggregates (%s)", strings.Join(cg.Inputs, ", "))
		}
		if !slices.Contains(cg.Inputs, from) {
			return errorf(kp+".fields."+name+".from", "%q is not an input of the cogroup (%s)", from, strings.Join(cg.Inputs, ", "))
		}
	}
	return nil
}

func checkWindow(kp string, w *Window) *Error {
	var kinds []string
	for _, k := range []struct {
		name string
		v    time.Duration
	}{{"tumbling", w.Tumbling}, {"hopping", w.Hopping}, {"session", w.Session}} {
		if k.v < 0 {
			return errorf(kp+"."+k.name, "must be a positive duration, got %s", fmtDuration(k.v))
		}
		if k.v > 0 {
			kinds = append(kinds, k.name)
		}
	}
	switch len(kinds) {
	case 0:
		return errorf(kp, "needs one of tumbling, hopping (with advance) or session, e.g. window: {tumbling: 1m}")
	case 1:
	default:
		return errorf(kp, "has %s; a window is exactly one of tumbling, hopping or session", strings.Join(kinds, " and "))
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"tumbling", w.Tumbling}, {"hopping", w.Hopping}, {"advance", w.Advance}, {"session", w.Session}} {
		if d.v%time.Millisecond != 0 {
			return errorf(kp+"."+d.key, "must be a whole number of milliseconds (event time is in ms), got %s", d.v)
		}
	}
	if w.Grace < 0 {
		return errorf(kp+".grace", "must not be negative, got %s", fmtDuration(w.Grace))
	}
	switch kinds[0] {
	case "hopping":
		switch {
		case w.Advance <= 0:
			return errorf(kp+".advance", "required for a hopping window: how often a window starts, e.g. {hopping: 5m, advance: 1m}")
		case w.Advance > w.Hopping:
			return errorf(kp+".advance", "must not exceed the window size (%s), got %s", fmtDuration(w.Hopping), fmtDuration(w.Advance))
		case w.Hopping%w.Advance != 0:
			return errorf(kp+".advance", "must divide the window size (%s), got %s", fmtDuration(w.Hopping), fmtDuration(w.Advance))
		case w.Hopping/w.Advance > 100:
			return errorf(kp+".advance", "gives %d windows per record (at most 100), got %s", w.Hopping/w.Advance, fmtDuration(w.Advance))
		}
	case "session":
		if w.Advance != 0 {
			return errorf(kp+".advance", "only a hopping window takes advance")
		}
	default:
		if w.Advance != 0 {
			return errorf(kp+".advance", "only a hopping window takes advance")
		}
	}
	return nil
}

// validateTopics checks that user topics do not collide with each other or with internal
// topics, and that internal topic names fit Kafka's limits.
func (c *Config) validateTopics() *Error {
	internal := c.InternalTopics()
	for _, t := range internal {
		if len(t) > maxTopicLen {
			return errorf("group", "internal topic %q would be longer than Kafka's %d-character limit; shorten group or operator names", t, maxTopicLen)
		}
	}
	readBy := map[string]string{}
	for _, name := range sortedKeys(c.Sources) {
		t := c.Sources[name].Topic
		if other, dup := readBy[t]; dup {
			return errorf("sources."+name+".topic", "topic %q is already read by source %q", t, other)
		}
		if slices.Contains(internal, t) {
			return errorf("sources."+name+".topic", "topic %q is one of sluice's internal topics", t)
		}
		readBy[t] = name
	}
	for _, name := range sortedKeys(c.Tables) {
		t := c.Tables[name].Topic
		if other, dup := readBy[t]; dup {
			return errorf("tables."+name+".topic", "topic %q is already read by source %q", t, other)
		}
		if slices.Contains(internal, t) {
			return errorf("tables."+name+".topic", "topic %q is one of sluice's internal topics", t)
		}
		readBy[t] = name
	}
	for _, name := range sortedKeys(c.Sinks) {
		t := c.Sinks[name].Topic
		if src, dup := readBy[t]; dup {
			return errorf("sinks."+name+".topic", "topic %q is also the topic of source %q; the pipeline would read its own output", t, src)
		}
		if slices.Contains(internal, t) {
			return errorf("sinks."+name+".topic", "topic %q is one of sluice's internal topics", t)
		}
	}
	return nil
}

// checkEnum accepts "" (the default) or one of allowed.
func checkEnum(key, v string, allowed ...string) *Error {
	if v == "" || slices.Contains(allowed, v) {
		return nil
	}
	return errorf(key, "unknown value %q (allowed: %s)", v, strings.Join(allowed, ", "))
}

// checkTopic checks a Kafka topic name.
func checkTopic(key, t string) *Error {
	switch {
	case t == "":
		return errorf(key, "required: a Kafka topic name")
	case len(t) > maxTopicLen:
		return errorf(key, "topic name longer than %d characters", maxTopicLen)
	case t == "." || t == ".." || !validName(t, true, "."):
		return errorf(key, "invalid topic name %q (allowed characters: letters, digits, '.', '_', '-')", t)
	}
	return nil
}

// checkFieldPath checks a JSON field path "a.b"; it returns "" when valid.
// checkGroupBy checks a group_by: one field path, or several separated by commas (a composite
// key).
func checkGroupBy(spec string) string {
	seen := map[string]bool{}
	for _, p := range SplitGroupBy(spec) {
		switch {
		case p.Text == "":
			return fmt.Sprintf("invalid group_by %q (want field paths or name: expression parts separated by ',', e.g. bidder, auction or auction, day: date_format(dateTime, 'yyyy-MM-dd'))", spec)
		case p.Expr == "" && p.Name != p.Text:
			return fmt.Sprintf("%q has no expression after its name (want name: expression)", p.Text)
		case p.Expr == "" && strings.ContainsAny(p.Text, "()"):
			return fmt.Sprintf("%q looks like an expression: name its key column, e.g. day: %s", p.Text, p.Text)
		case p.Expr == "":
			if msg := checkFieldPath(p.Text); msg != "" {
				return msg
			}
		}
		if seen[p.Name] {
			return fmt.Sprintf("key column %q is listed twice", p.Name)
		}
		seen[p.Name] = true
	}
	return ""
}

func checkFieldPath(p string) string {
	if strings.TrimSpace(p) != p {
		return fmt.Sprintf("invalid field path %q (leading or trailing blanks)", p)
	}
	for seg := range strings.SplitSeq(p, ".") {
		if seg == "" {
			return fmt.Sprintf("invalid field path %q (want field names joined by '.', e.g. customer.id)", p)
		}
	}
	return ""
}

// validName reports whether s is non-empty and made of digits, '_', '-', lower-case letters,
// upper-case letters when upper is set, and the characters in extra.
func validName(s string, upper bool, extra string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_', r == '-':
		case upper && r >= 'A' && r <= 'Z':
		case strings.ContainsRune(extra, r):
		default:
			return false
		}
	}
	return true
}

// validPort reports whether port is a decimal number in [lowest, 65535].
func validPort(port string, lowest int) bool {
	n, err := strconv.Atoi(port)
	return err == nil && allDigits(port) && n >= lowest && n <= 65535
}

// fmtDuration prints d like time.Duration.String without zero tails: "2m", "1h", "1h30m".
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// checkDedup checks a dedup operator at key kp.
func checkDedup(kp string, d *Dedup) *Error {
	if err := checkEnum(kp+".keep", d.Keep, KeepFirst, KeepLast); err != nil {
		return err
	}
	switch {
	case d.Within < 0:
		return errorf(kp+".within", "must not be negative")
	case d.Within > 0 && d.Keep == KeepLast:
		return errorf(kp+".within", "applies to keep: first only (keep: last keeps no state past the commit that writes a key's record)")
	}
	if d.GroupBy != "" {
		if msg := checkGroupBy(d.GroupBy); msg != "" {
			return errorf(kp+".group_by", "%s; or leave it out to deduplicate by the input's key", msg)
		}
	}
	return nil
}

// checkTop checks a top operator at key kp.
func checkTop(kp string, t *Top) *Error {
	switch {
	case t.N < 1 || t.N > 1<<15:
		return errorf(kp+".n", "must be 1 to %d (the rows each key keeps), not %d", 1<<15, t.N)
	case strings.TrimSpace(t.By) == "":
		return errorf(kp+".by", "required: the numeric field the records are ranked by, e.g. price")
	}
	if msg := checkFieldPath(t.By); msg != "" {
		return errorf(kp+".by", "%s", msg)
	}
	if err := checkEnum(kp+".order", t.Order, OrderDesc, OrderAsc); err != nil {
		return err
	}
	if t.Rank != "" && !validName(t.Rank, true, "") {
		return errorf(kp+".rank", "invalid column name %q (letters, digits, '_', '-')", t.Rank)
	}
	if t.GroupBy != "" {
		if msg := checkGroupBy(t.GroupBy); msg != "" {
			return errorf(kp+".group_by", "%s; or leave it out to rank within the input's key", msg)
		}
	}
	if t.Window == nil {
		if t.Ties {
			return errorf(kp+".ties", "applies with window only (a top without window writes one row per key and rank, so ties rank in arrival order); add window: {tumbling: ...} or leave ties out")
		}
		return nil
	}
	if err := checkWindow(kp+".window", t.Window); err != nil {
		return err
	}
	if t.Window.Session > 0 {
		return errorf(kp+".window.session", "a top ranks within tumbling or hopping windows, not sessions; use window: {tumbling: ...} or {hopping: ..., advance: ...}")
	}
	return nil
}

// maxDistinctFlags bounds a distinct's flags: its state is a 64-bit mask.
const maxDistinctFlags = 64

// checkDistinct checks a distinct operator at key kp.
func checkDistinct(kp string, d *Distinct) *Error {
	switch n := len(d.Flags); {
	case n == 0:
		return errorf(kp+".flags", "required: one or more column: boolean expression, e.g. {total_bidders: 'true', rank1_bidders: 'price < 10000'}")
	case n > maxDistinctFlags:
		return errorf(kp+".flags", "has %d flags; at most %d (a key's state is a 64-bit mask)", n, maxDistinctFlags)
	}
	for _, name := range sortedKeys(d.Flags) {
		if !validName(name, true, "") {
			return errorf(kp+".flags", "invalid column name %q (letters, digits, '_', '-')", name)
		}
		if strings.TrimSpace(d.Flags[name]) == "" {
			return errorf(kp+".flags."+name, "required: a boolean expression, e.g. price < 10000 (true: every record)")
		}
	}
	if d.GroupBy != "" {
		if msg := checkGroupBy(d.GroupBy); msg != "" {
			return errorf(kp+".group_by", "%s; or leave it out to mark the first records of the input's key", msg)
		}
	}
	if d.Window != nil {
		if err := checkWindow(kp+".window", d.Window); err != nil {
			return err
		}
		if d.Window.Session > 0 {
			return errorf(kp+".window.session", "a distinct marks first records per tumbling or hopping window, not per session; use window: {tumbling: ...} or {hopping: ..., advance: ...}")
		}
		for _, c := range []string{"window_start", "window_end"} {
			if _, ok := d.Flags[c]; ok {
				return errorf(kp+".flags."+c, "is a column the windows write; name the flag otherwise")
			}
		}
	}
	return nil
}

// checkCountDistinct checks an aggregate's count_distinct fields: they run as a distinct keyed
// by the group and the value (expandCountDistinct), so the group must be fields of the record
// (group_by); its windows are tumbling or hopping ones (the distinct's records for a window
// carry its end - 1, window_finals puts each back into that window alone), and a distinct takes
// no retractions.
func checkCountDistinct(kp string, a *Aggregate) *Error {
	perValue := map[string]int{}
	for _, sp := range a.Specs() {
		if sp.Func != CountDistinct {
			continue
		}
		key := kp + ".fields." + sp.Name
		switch {
		case a.GroupBy == "":
			return errorf(key, "count_distinct needs group_by (its distinct values are kept per group and value, both fields of the record); group by the field the input is keyed by, e.g. group_by: auction")
		case a.Window.Kind() == "session":
			return errorf(key, "count_distinct takes tumbling or hopping windows, not sessions (a value's sessions merge); use window: {tumbling: ...}, or group by a column holding the window (e.g. a map's date_format)")
		case a.Retractions:
			return errorf(key, "count_distinct cannot take a retraction back (a value's first record may be the one retracted); use it over rows that never change")
		case slices.Contains(GroupByNames(a.GroupBy), sp.Field):
			return errorf(key, "counts the distinct values of %s, a group_by field (always 1)", sp.Field)
		}
		if perValue[sp.Field]++; perValue[sp.Field] > maxDistinctFlags {
			return errorf(key, "more than %d count_distinct fields of %s (a distinct's state is a 64-bit mask)", maxDistinctFlags, sp.Field)
		}
	}
	return nil
}
