// Package configs owns sluice's configuration: the YAML file format, the SLUICE_ environment
// overlay, defaults, validation with errors that name the offending key, the example
// pipelines (examples/*.yaml, with demo.yaml embedded as Demo), and the names of the internal
// topics and transactional id derived from it.
//
// Loading is: YAML file (or bytes) -> environment variables on top -> defaults -> Validate.
// Environment variables start with SLUICE_ and use "__" to nest, lower-cased:
//
//	SLUICE_KAFKA__BROKERS=a:9092,b:9092  -> kafka.brokers = [a:9092, b:9092] (lists are comma-split)
//	SLUICE_INSTANCE_ID=pod-1             -> instance_id
//	SLUICE_BACKLOG__ENTER_LAG=10         -> backlog.enter_lag
//
// Unknown keys, in the file or in the environment, are errors. Variables named SLUICE_TEST_* or
// SLUICE_REQUIRE_* are reserved for test harnesses and ignored.
//
// Every key documents itself in the struct tags of Config; docs/config.md, the reference of
// every key, is generated from them (Reference, `go generate ./configs`). Explain is Load that
// also says where each value came from (file, environment variable, default), secrets masked.
//
// koanf appears only here (and in cmd/): the rest of sluice receives the plain structs below.
package configs

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/v2"
)

// Error is a configuration error. Key is the full dotted key it concerns ("backlog.enter_lag",
// "operators[1].aggregate.fields.amount"), or "" for errors about the whole file (unreadable,
// not YAML) or a malformed environment variable name. It is immutable once returned and safe
// to share. Every error returned by Load, Parse and Validate is an
// *Error, so the command line can map it to exit code 2.
type Error struct {
	Key string
	Msg string

	err error // underlying cause, if any (for errors.Is, e.g. fs.ErrNotExist)
}

// Error returns "config: <key>: <msg>" (or "config: <msg>" without a key).
func (e *Error) Error() string {
	if e.Key == "" {
		return "config: " + e.Msg
	}
	return "config: " + e.Key + ": " + e.Msg
}

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.err }

func errorf(key, format string, args ...any) *Error {
	return &Error{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// Config is the whole configuration of one sluice process.
//
// A Config is a plain value: it is not safe for concurrent mutation, but any number of
// goroutines may read it once loaded. Load and Parse return a fresh Config owned by the caller;
// its slices and maps are not shared with anything else.
//
// Each key documents itself in struct tags, which docs/config.md is generated from (see
// reference.go): doc is its meaning; enum lists its allowed values (a test checks them against
// Validate); default stands in the reference for the loaded default where that says too little
// ("required", "none", "the host name"); secret:"true" masks its value in `sluice validate
// --explain` (keys whose names contain password, secret, token, sasl, key_file... are masked
// without it).
type Config struct {
	Kafka      Kafka             `koanf:"kafka" doc:"The Kafka cluster and the client settings of every connection sluice makes."`
	Group      string            `koanf:"group" default:"required" doc:"Consumer group; also the prefix of the internal topics and of the transactional id. Letters, digits, '.', '_', '-'."`
	InstanceID string            `koanf:"instance_id" default:"the host name" doc:"Static group member id (KIP-345) and transactional.id = <group>-<instance_id>: unique within the group and the same after a restart (in Kubernetes: the pod name). Letters, digits, '.', '_', '-'."`
	Processing Processing        `koanf:"processing" doc:"How records are processed and checkpointed."`
	Backlog    Backlog           `koanf:"backlog" doc:"When a task's input counts as a backlog, and how backlog processing is bounded."`
	HTTP       HTTP              `koanf:"http" doc:"The HTTP server: /metrics (Prometheus), /healthz, /readyz, /status; /debug/pprof/ when asked."`
	Log        Log               `koanf:"log" doc:"The log, written to stderr."`
	Sources    map[string]Source `koanf:"sources" doc:"The input topics, by name: operators name a source as their input. At least one."`
	Tables     map[string]Table  `koanf:"tables" doc:"Tables, by name: compacted topics materialized per partition in Pebble (the topic is its own changelog), which join operators look rows up in."`
	Operators  []Operator        `koanf:"operators" doc:"The pipeline: a list of operators, each exactly one of filter, map, join, aggregate, cogroup, dedup, top, changes and rekey, reading a source or an earlier operator. At least one. Lists can only be written in the file, not set by environment variables."`
	Sinks      map[string]Sink   `koanf:"sinks" doc:"The output topics, by name: an operator's output names a sink."`

	SchemaRegistry SchemaRegistry `koanf:"schema_registry" doc:"The schema registry that format avro fetches writer schemas from (by id, cached for the process)."`
}

// Kafka is the kafka section. Like every section type below, it is a plain part of Config
// with the same rules: read freely once loaded, do not mutate concurrently.
type Kafka struct {
	Brokers            []string      `koanf:"brokers" default:"required" doc:"Seed brokers, host:port; [embedded] starts an in-process broker (demo, tests)."`
	TransactionTimeout time.Duration `koanf:"transaction_timeout" doc:"Transaction timeout, at least 1s. A switch from backlog to real-time writes every key it folded in one transaction: keep it generous."`
	ReplicationFactor  int16         `koanf:"replication_factor" doc:"Replication factor of the internal topics sluice creates; -1: the broker's default."`
	// FetchMaxBytes bounds one fetch response. Records stay in their response's buffer until
	// processed and the client prefetches the next response, so about three responses are in
	// memory.
	FetchMaxBytes Size `koanf:"fetch_max_bytes" doc:"Largest fetch response, 1MiB to 1GiB. About three are in memory at once: larger catches up faster, smaller uses less memory (see BENCHMARKS.md)."`
	// Compression is the codec of every batch sluice produces: its outputs, its internal
	// topics and its changelogs. It is one setting because one client produces them all.
	Compression string `koanf:"compression" enum:"none,snappy,lz4,zstd,gzip" doc:"Codec of the batches sluice produces: outputs, internal topics, changelogs. none, as Kafka's own producer: a pipeline of several stages reads its internal topics back, and a compressed batch decodes to 5 to 7 times what a fetch counts (Nexmark q5), memory beyond the allowance; a codec saves network and broker disk where they cost more than CPU and memory (see BENCHMARKS.md)."`
	// TLS and SASL apply to every connection sluice makes (see package security, which turns
	// them into the options of every client).
	TLS  TLS  `koanf:"tls" doc:"TLS to the brokers (listeners of protocol SSL or SASL_SSL). Not with brokers: [embedded]."`
	SASL SASL `koanf:"sasl" doc:"SASL authentication (listeners of protocol SASL_SSL or SASL_PLAINTEXT). Not with brokers: [embedded]. validate --explain masks every key of this section."`
}

// TLS is the kafka.tls section. The files are read when the clients are built (sluice run,
// sluice validate), not by Validate.
type TLS struct {
	Enabled    bool   `koanf:"enabled" doc:"Connect to the brokers with TLS (1.2 or later), verifying their certificates. The other tls keys need it."`
	CAFile     string `koanf:"ca_file" default:"none" doc:"PEM file of the certificate authorities that sign the brokers' certificates; empty: the system's roots."`
	CertFile   string `koanf:"cert_file" default:"none" doc:"PEM file of the client certificate (then its chain), for listeners that require client authentication (ssl.client.auth=required). Needs key_file."`
	KeyFile    string `koanf:"key_file" default:"none" doc:"PEM file of cert_file's private key (unencrypted: PKCS#8, PKCS#1 or SEC 1). Needs cert_file. Readable by sluice only (mode 0600 or a mounted Secret)."`
	ServerName string `koanf:"server_name" default:"the broker's host" doc:"The name the brokers' certificates must be valid for, when it is not the host of the address dialed (e.g. brokers dialed by IP)."`
}

// SASL is the kafka.sasl section.
type SASL struct {
	Mechanism    string `koanf:"mechanism" default:"none" doc:"plain, scram-sha-256 or scram-sha-512 (case does not matter); empty: no SASL. plain sends the password itself: use it with kafka.tls (sluice warns at start without)."`
	Username     string `koanf:"username" default:"none" doc:"User name; required with a mechanism."`
	Password     string `koanf:"password" secret:"true" default:"none" doc:"Password; exactly one of password and password_file with a mechanism. Set it through the environment (SLUICE_KAFKA__SASL__PASSWORD) rather than in the file (where it must be a string: quote it)."`
	PasswordFile string `koanf:"password_file" default:"none" doc:"File holding the password (one trailing newline is dropped), e.g. a mounted Kubernetes Secret; read once at start."`
}

// Compression codecs (kafka.compression).
const (
	CompressionNone   = "none"
	CompressionSnappy = "snappy"
	CompressionLZ4    = "lz4"
	CompressionZstd   = "zstd"
	CompressionGzip   = "gzip"
)

// SASL mechanisms.
const (
	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
)

// MechanismName returns the mechanism lower-cased, as the constants above spell it.
func (s SASL) MechanismName() string { return strings.ToLower(s.Mechanism) }

// EmbeddedBroker is the broker list entry that asks for an in-process broker.
const EmbeddedBroker = "embedded"

// Embedded reports whether the brokers are ["embedded"]: an in-process broker (demo, tests).
func (k Kafka) Embedded() bool { return len(k.Brokers) == 1 && k.Brokers[0] == EmbeddedBroker }

// Processing is the processing section.
type Processing struct {
	Guarantee      string        `koanf:"guarantee" enum:"exactly_once,at_least_once" doc:"exactly_once: the outputs, the changelog records and the input offsets in one Kafka transaction; at_least_once: an idempotent producer, offsets committed after the records are acknowledged."`
	CommitInterval time.Duration `koanf:"commit_interval" doc:"Checkpoint interval in real-time mode: greater than 0 and shorter than kafka.transaction_timeout."`
	// CommitOnCatchUp: see consumer.Engine.loop.
	CommitOnCatchUp bool   `koanf:"commit_on_catch_up" doc:"Also checkpoint as soon as a fetch that reached the end of every partition it read has been processed, instead of waiting for commit_interval: a caught-up sluice makes its outputs visible about one fetch and one transaction after their inputs arrive. Under load (a fetch that leaves records behind) checkpoints stay commit_interval apart. Each checkpoint is a transaction, so on a busy machine more of them can cost more than they save (BENCHMARKS.md, Latency). false: only every commit_interval."`
	StateDir        string `koanf:"state_dir" doc:"Directory of the Pebble state (pebble/) and the sort spill files (sort/). Keep it on a persistent volume: without it a task restores its state from the changelog."`
	CacheKeys       int    `koanf:"cache_keys" doc:"Per task: write-back cache entries in real-time mode, keys pre-aggregated in memory in backlog mode (beyond them records are sorted). At least 1."`
	// CombineBeforeRekey: see operators/task/combine.go.
	CombineBeforeRekey bool `koanf:"combine_before_rekey" doc:"A re-keying step (group_by, rekey) whose records only an aggregate or cogroup without windows or retractions reads combines them per key before the repartition topic: one partial state per key and checkpoint (for at most cache_keys keys; the others go as they are) instead of each record. Before a distinct it passes on only the records that set a flag it has not yet passed for their key (and a distinct whose results only such a step reads writes only the members it and its reader read); before a top (n up to 64; over windows under exactly_once), only the records that its own earlier ones for their key and window leave a rank. Likewise a keyed operator (not an aggregate or cogroup) whose results only a top without windows reads, after filters at most, writes only the results those filters keep and its earlier ones leave a rank; and an aggregate over windows with emit: final whose finals a re-key sends to a top over windows, after filters and maps, writes only the finals its earlier ones leave a rank in the top's window (one the top would take as late is dropped rather than dead-lettered). Before an aggregate over tumbling windows, one partial state per key and window likewise; before an aggregate of one input over sessions, one partial state of each key's sessions per checkpoint, which the aggregate merges into the key's sessions; in both, a record the aggregate might take as late goes as it is, and only under exactly_once with a source whose watermark.idle_after is 0s (else each record goes with only the members the aggregate reads, as below). Before another aggregate of one input (over hopping windows, or with retractions), each record goes with only the members the aggregate reads (its fields' and wheres'), unless the aggregate might dead-letter it (a field it cannot read, or late by the largest watermark the step announces): then whole, so that the dead letter is the record as it was. The same results with fewer records or bytes through Kafka (Flink's local-global aggregation). false: every record goes through whole."`
	// LocalRekey: see plan.keepsPartition.
	LocalRekey bool `koanf:"local_rekey" doc:"A keyed operator whose group_by lists the field its source is keyed by (sources.<name>.key), unchanged by the stages before it (filters; maps that copy it by name or leave it alone), runs in its input's partitions with the group key as its key, without a repartition topic (not over event-time windows: their lateness is judged by the watermark of all the input's partitions, which only a repartition topic gives them): every record of a group key is in one partition already. It needs the source topic partitioned by that field, as every keyed operator reading a source directly does. The same results with one write and one read of each record fewer. Off by default because it moves the state of such operators: turning it on (or off) for a pipeline that has state refuses to start, naming the operator (its layout changed); sluice reset clears it."`
	// InlineStages: see plan.inlineReaders.
	InlineStages bool `koanf:"inline_stages" doc:"Filters and maps that alone read a keyed operator's results and write them to a sink run in the keyed operator's task, on each result as it is emitted and in the same transaction, instead of reading them back from the <group>-<op>-output topic: the same records in the sink, with one write, one read and one commit wait of each result fewer (no output topic is created for them). Turning it on for a group that ran without it leaves unread what that group's operator had written to its output topic and the maps had not read yet: let the group catch up first, or keep it off. false: such stages read the output topic."`
	// MaxCheckpointFailures is the rule of consumer/failure.go for a record that cannot be
	// produced.
	// MinFreeSpace is the free space the state store keeps (state.Options.MinFreeBytes).
	MinFreeSpace          Size `koanf:"min_free_space" doc:"Free space the state store keeps on processing.state_dir's file system: a state write that would start with less fails, and sluice exits 1 naming the dir (a write Pebble's log cannot make is fatal to it). 0 disables the check."`
	MaxCheckpointFailures int  `koanf:"max_checkpoint_failures" doc:"Checkpoints in a row that may abort because a record cannot be produced (a topic refuses it) before sluice exits 1; from 10 (or this, if lower) on, an ERROR names the record and /readyz is false. At least 1."`
}

// Guarantee values.
const (
	ExactlyOnce = "exactly_once"
	AtLeastOnce = "at_least_once"
)

// Backlog is the backlog section: when a task's input counts as a backlog, and how backlog
// processing is bounded.
type Backlog struct {
	Mode               string        `koanf:"mode" enum:"auto,never,always" doc:"auto: lag-driven, both ways; never: pure streaming; always: batch-like until caught up once."`
	EnterLag           int64         `koanf:"enter_lag" doc:"A task enters backlog mode when its lag reaches this many records. Greater than 0."`
	ExitLag            int64         `koanf:"exit_lag" doc:"A task in backlog mode leaves it when its lag falls to this many records. At least 0, less than enter_lag."`
	EnterTimeLag       time.Duration `koanf:"enter_time_lag" doc:"Also enter backlog mode when the time lag (wall clock minus event time) reaches this; 0s: off."`
	ExitTimeLag        time.Duration `koanf:"exit_time_lag" doc:"Leave backlog mode only when the time lag is also at most this; 0s: off. Less than enter_time_lag when both are set."`
	SortMemory         Size          `koanf:"sort_memory" doc:"One sort budget for the whole process, shared by its tasks; beyond it sorted runs spill to processing.state_dir. At least 1MiB."`
	CheckpointInterval time.Duration `koanf:"checkpoint_interval" doc:"During a long backlog, fold the sorted records into state and commit the offsets this often, to bound the re-work after a crash: aggregates still write no output (their keys owe it at the switch), session windows and stream-stream or as-of joins write the finals and pairs they produce; 0s: only at the switch."`
	ProgressInterval   time.Duration `koanf:"progress_interval" doc:"Progress log line (percent, rate, ETA) while in backlog mode; 0s: off."`
	CommitInterval     time.Duration `koanf:"commit_interval" doc:"Checkpoint interval while every task of the process holds a backlog (its keyed operators in backlog mode, its other chains reading at least enter_lag behind): outputs written meanwhile (a re-keying stage's, a stateless chain's) become visible up to this late, and fewer checkpoints stop the tasks; the longer of it and processing.commit_interval, and shorter than kafka.transaction_timeout; 0s (the default, for now): processing.commit_interval. 1s took 5-8% off bounded Nexmark runs whose stages write all through their backlog."`
}

// Backlog modes.
const (
	ModeAuto   = "auto"
	ModeNever  = "never"
	ModeAlways = "always"
)

// HTTP is the http section.
type HTTP struct {
	Listen string `koanf:"listen" doc:"host:port of /metrics, /healthz, /readyz and /status (and /debug/pprof/ with http.pprof); off (or empty) disables the server. In a container use 0.0.0.0:9464, so that probes and scrapes reach it."`
	Pprof  bool   `koanf:"pprof" doc:"Also serve Go's profiles (/debug/pprof/) on http.listen. Off by default: anyone who reaches the port could read the process's memory layout and stall it with a CPU profile, and in a container that port is open to the cluster for scrapes. Needs http.listen."`
}

// Enabled reports whether the HTTP server should run.
func (h HTTP) Enabled() bool { return h.Listen != "" && h.Listen != "off" }

// Log is the log section.
type Log struct {
	Level  string `koanf:"level" enum:"debug,info,warn,error" doc:"Least severe level logged."`
	Format string `koanf:"format" enum:"text,json" doc:"Line format: logfmt-like text or JSON objects."`
}

// Source is one input topic.
type Source struct {
	Topic     string `koanf:"topic" default:"required" doc:"Kafka topic; it must exist."`
	Format    string `koanf:"format" enum:"json,avro" doc:"Format of the record values: json (one JSON object), or avro (the Confluent wire format: magic byte 0, 4-byte schema id, Avro binary; the writer schema is fetched from schema_registry by id and the value decoded to a JSON object, see README Formats). A value that does not decode is a dead letter."`
	KeyFormat string `koanf:"key_format" enum:"string,bytes,json" doc:"How the Kafka record key is read: bytes (any bytes, as they are; where the key is written as JSON text, such as an aggregate's key field, invalid UTF-8 shows as U+FFFD, while the output record's Kafka key keeps the exact bytes), string (UTF-8 text, as is; a key that is not valid UTF-8 is a dead letter), json (a JSON string's text or a JSON number's text, so the key \"c-1\" groups with c-1; any other key is a dead letter). With key set, the field must equal the key so read."`
	Key       string `koanf:"key" doc:"Field path (a.b) of the key that keyed operators group by, which must equal the Kafka record key (read by key_format); empty: the Kafka record key."`
	Timestamp string `koanf:"timestamp" doc:"Field path of the event time (epoch ms or RFC 3339); empty: the record timestamp."`
	// ProcessingTime makes the wall clock the records' time.
	ProcessingTime bool      `koanf:"processing_time" doc:"The records' time is the wall clock when sluice reads them (processing time, fixed at the source: later stages, across repartition topics too, keep it), instead of an event time; windows then count what arrived in each interval, and a rerun gives other windows. Exclusive with timestamp."`
	Watermark      Watermark `koanf:"watermark" doc:"How event time advances, for the windows of the operators reading this source."`
}

// Watermark is a source's event-time progress: the watermark of an input partition is the
// largest event time seen in it minus MaxDelay. IdleAfter (0 = never) lets an input with no
// records for that long stop holding back the watermark of an operator with several inputs.
type Watermark struct {
	MaxDelay  time.Duration `koanf:"max_delay" doc:"The watermark of an input partition is the largest event time seen in it minus this: how out of order records may arrive and still be on time."`
	IdleAfter time.Duration `koanf:"idle_after" doc:"An input with no records for this long stops holding back the watermark of an operator with several inputs; 0s: never."`
}

// Table is a compacted topic materialized per partition in Pebble: the latest row of each key,
// a tombstone deleting it. The topic is its own changelog.
type Table struct {
	Topic     string        `koanf:"topic" default:"required" doc:"Kafka topic (compacted); it must exist, with the partition count of the streams joined with it."`
	Format    string        `koanf:"format" enum:"json,avro" doc:"Format of the record values: json or avro (as a source's; a row is stored as its JSON object)."`
	KeyFormat string        `koanf:"key_format" enum:"string,bytes,json" doc:"How the Kafka record key is read (as a source's key_format)."`
	Key       string        `koanf:"key" doc:"Field path of the row key, which must equal the Kafka record key; empty: the Kafka record key."`
	Timestamp string        `koanf:"timestamp" doc:"Joins with as_of: event_time: field path of the time from which a row version is valid (epoch ms or RFC 3339); empty: the record timestamp (also a tombstone's)."`
	Watermark Watermark     `koanf:"watermark" doc:"Joins with as_of: event_time: how the table's event time advances (a stream record waits until it has passed the record's time)."`
	Versions  time.Duration `koanf:"versions" doc:"Joins with as_of: event_time: how long superseded row versions are kept behind the watermark; 0s: only the version valid at the watermark."`
}

// Value formats (sources, tables, sinks).
const (
	FormatJSON = "json"
	FormatAvro = "avro"
)

// Key formats: how a source or table reads the Kafka record key (bytes, the default, is how
// sluice always read it).
const (
	KeyString = "string"
	KeyBytes  = "bytes"
	KeyJSON   = "json"
)

// SchemaRegistry is the schema registry of format avro (the Confluent REST protocol; Apicurio's
// ccompat API and Karapace speak it too).
type SchemaRegistry struct {
	URLs         []string      `koanf:"urls" default:"none" doc:"Base URLs of the schema registry, e.g. [http://registry:8081] (Apicurio: http://host:8080/apis/ccompat/v7); required by format avro. Several: tried in turn."`
	Username     string        `koanf:"username" doc:"HTTP basic auth user name; empty: no basic auth."`
	Password     string        `koanf:"password" secret:"true" doc:"HTTP basic auth password."`
	BearerToken  string        `koanf:"bearer_token" secret:"true" doc:"Bearer token sent instead of basic auth; empty: none."`
	Timeout      time.Duration `koanf:"timeout" doc:"Timeout of one HTTP request to the registry."`
	RetryTimeout time.Duration `koanf:"retry_timeout" doc:"How long an unreachable registry (network errors, 5xx, 401, 403, 429) is retried, with backoff from 100ms to 5s, when a schema is first needed; then sluice exits 1 (the record is read again after a restart: a record is never a dead letter because the registry was down). An id the registry does not know (404) makes a dead letter at once."`
}

// Enabled reports whether a registry is configured.
func (s SchemaRegistry) Enabled() bool { return len(s.URLs) > 0 }

// Sink is one output topic.
type Sink struct {
	Topic           string `koanf:"topic" default:"required" doc:"Kafka topic; created if missing."`
	Format          string `koanf:"format" enum:"json,avro" doc:"Format of the record values: json, or avro (the output's JSON object encoded with schema, in the Confluent wire format, the schema registered in schema_registry at start; a value the schema cannot hold fails its checkpoint, see README Formats)."`
	Schema          string `koanf:"schema" default:"none" doc:"format avro: the Avro schema of the values (JSON text of a record schema), e.g. {\"type\":\"record\",\"name\":\"Total\",\"fields\":[{\"name\":\"key\",\"type\":\"string\"},...]}."`
	SubjectStrategy string `koanf:"subject_strategy" enum:"topic,record,topic_record" doc:"format avro: the subject the schema is registered under: topic (<topic>-value), record (the record's full name) or topic_record (<topic>-<full name>)."`
}

// Operator is one step of the pipeline. Exactly one of its kinds (Filter, Map, Aggregate, ...) is set.
type Operator struct {
	Name      string     `koanf:"name" default:"required" doc:"Unique name: lower-case letters, digits, '_', '-'. Later operators name it as their input; internal topics carry it (<group>-<name>-changelog)."`
	Filter    *Filter    `koanf:"filter" doc:"Keeps the records for which expr is true."`
	Map       *Map       `koanf:"map" doc:"Rewrites the record: set fields (set) or keep exactly a list of columns (select)."`
	Aggregate *Aggregate `koanf:"aggregate" doc:"A keyed aggregate over its input's key, with its state in Pebble and the changelog topic <group>-<name>-changelog."`
	Cogroup   *Cogroup   `koanf:"cogroup" doc:"A keyed aggregate over several co-partitioned inputs: each field aggregates the records of one input (from), per key of all of them; state and changelog as an aggregate's."`
	Join      *Join      `koanf:"join" doc:"A stream-table join: each record of stream gets its key's row of table (FLIP-326: a task's stream waits until its table partition has loaded its snapshot)."`
	Dedup     *Dedup     `koanf:"dedup" doc:"Keeps one record per key, in arrival order: the first (emitted once) or the latest (an upsert stream); state and changelog as an aggregate's."`
	Rekey     *Rekey     `koanf:"rekey" doc:"Re-keys its input by a field (or several): the records go through the topic <group>-<name>-repartition, written in the same transaction as the input offsets, keyed by the new key, and later operators (a join on another field, a windowed join) read them from there."`
	Top       *Top       `koanf:"top" doc:"Keeps each key's n records with the largest (or smallest) value of a field, ranked 1 to n (ties in arrival order): an upsert stream of one row per key and rank; state and changelog as an aggregate's. With window, a window Top-N (Flink's): each key and event-time window keeps only its top rows (with ties: true and n: 1, exactly the rows at the window's maximum, e.g. Nexmark q5 and q7) and writes them once when it closes; a closed window's state is deleted."`
	Changes   *Changes   `koanf:"changes" doc:"Turns an upsert stream (the latest row per key: an aggregate's updates, a top's rows, a dedup's latest records, or a topic of rows and tombstones) into its changes: when a key's row changes, the retraction of the row it replaces ({...the old row, \"retract\": true}) and then the new row; a tombstone (null value) retracts the key's row. An aggregate with retractions: true reads them (Kafka Streams' KTable groupBy/aggregate with a subtractor). State: each key's last row; changelog as an aggregate's."`
	Distinct  *Distinct  `koanf:"distinct" doc:"Marks, per key, the first record that passes each of its flags: such a record goes on with one 0/1 column per flag (1: the key's first record passing that flag), the others are dropped. Keyed by (group, value), an aggregate or cogroup that sums the columns per group counts the distinct values (COUNT(DISTINCT value) FILTER (WHERE flag)); state: a bitmask per key, changelog as an aggregate's."`
	Output    string     `koanf:"output" default:"none" doc:"The sink the operator's records go to; required for an aggregate, cogroup, dedup, top, changes, distinct or stream-stream join that no later operator reads (later operators read a keyed operator's results through <group>-<name>-output)."`

	// expandedFrom: the aggregate whose count_distinct fields this internal operator serves;
	// origin: the key of the aggregate in the config file, for each operator the expansion
	// wrote (the aggregate's own, now a cogroup, included).
	expandedFrom string
	origin       string
}

// Kind returns "filter", "map" or "aggregate" ("" when none is set).
func (o *Operator) Kind() string {
	switch {
	case o.Filter != nil:
		return "filter"
	case o.Map != nil:
		return "map"
	case o.Aggregate != nil:
		return "aggregate"
	case o.Join != nil:
		return "join"
	case o.Cogroup != nil:
		return "cogroup"
	case o.Dedup != nil:
		return "dedup"
	case o.Top != nil:
		return "top"
	case o.Changes != nil:
		return "changes"
	case o.Distinct != nil:
		return "distinct"
	case o.Rekey != nil:
		return "rekey"
	}
	return ""
}

// Input returns the input of whichever of Filter, Map and Aggregate is set.
func (o *Operator) Input() string {
	switch {
	case o.Filter != nil:
		return o.Filter.Input
	case o.Map != nil:
		return o.Map.Input
	case o.Aggregate != nil:
		return o.Aggregate.Input
	case o.Join != nil && o.Join.StreamStream():
		return o.Join.Left
	case o.Join != nil:
		return o.Join.Stream
	case o.Cogroup != nil && len(o.Cogroup.Inputs) > 0:
		return o.Cogroup.Inputs[0]
	case o.Dedup != nil:
		return o.Dedup.Input
	case o.Top != nil:
		return o.Top.Input
	case o.Changes != nil:
		return o.Changes.Input
	case o.Distinct != nil:
		return o.Distinct.Input
	case o.Rekey != nil:
		return o.Rekey.Input
	}
	return ""
}

// Inputs returns every input of the operator: a cogroup's inputs, or Input.
func (o *Operator) Inputs() []string {
	if o.Cogroup != nil {
		return o.Cogroup.Inputs
	}
	if o.Join != nil && o.Join.StreamStream() {
		return []string{o.Join.Left, o.Join.Right}
	}
	return []string{o.Input()}
}

// Filter keeps the records for which Expr is true.
type Filter struct {
	Input string `koanf:"input" default:"required" doc:"A source or an earlier operator."`
	Expr  string `koanf:"expr" default:"required" doc:"A boolean expression (expr-lang.org) over the record's JSON fields plus key and ts, e.g. amount > 100."`
}

// Map rewrites the record's value: Set replaces or adds top-level fields and keeps the others;
// Select builds a new object of exactly the listed columns. Exactly one of them is given.
type Map struct {
	Input string            `koanf:"input" default:"required" doc:"A source or an earlier operator."`
	Set   map[string]string `koanf:"set" default:"none" doc:"field: expression, e.g. {amount_cents: amount * 100}; the other fields stay as they are. The expressions see the record's JSON fields plus key and ts. Exactly one of set and select."`
	// Select is the raw YAML list, [auction, {price: price * 0.908}]: see Columns.
	Select []any `koanf:"select" default:"none" doc:"The output's columns, exactly these, in this order: each item a field name (the field as written, null when the record lacks it) or a one-entry mapping name: expression, e.g. [auction, bidder, {price: price * 0.908}]. A null result is written as null. Expressions as in set, with SQL's hour, date_format, regexp_extract, split_index and count_char (README Configuration); a CASE is c1 ? a : (c2 ? b : c). Exactly one of set and select."`
}

// Column is one column of a map's select: its output name and the expression that computes it.
// Field is true for an item written as a bare field name (Expr is then that name).
type Column struct {
	Name  string
	Expr  string
	Field bool
}

// Columns returns the columns of Select in order, skipping items that do not parse (Validate
// reports those).
func (m *Map) Columns() []Column { return columns(m.Select) }

// columns parses a select list, skipping items that do not parse.
func columns(items []any) []Column {
	cols := make([]Column, 0, len(items))
	for _, item := range items {
		if c, msg := parseColumn(item); msg == "" {
			cols = append(cols, c)
		}
	}
	return cols
}

// parseColumn parses one select item, a field name or {name: expression}; it returns a message
// for Validate on error.
func parseColumn(item any) (Column, string) {
	switch x := item.(type) {
	case string:
		return Column{Name: x, Expr: x, Field: true}, ""
	case map[string]any:
		if len(x) != 1 {
			return Column{}, fmt.Sprintf("a mapping of %d entries (%s); give one, name: expression, or a field name", len(x), strings.Join(sortedKeys(x), ", "))
		}
		for name, v := range x {
			switch e := v.(type) {
			case string:
				return Column{Name: name, Expr: e}, ""
			case int, int64, uint64, float64, bool:
				return Column{Name: name, Expr: fmt.Sprint(e)}, ""
			case nil:
				return Column{Name: name, Expr: "nil"}, ""
			}
			return Column{}, fmt.Sprintf("%s: expected an expression (a string), got %s", name, describe(v))
		}
	}
	return Column{}, fmt.Sprintf("expected a field name or name: expression, got %s", describe(item))
}

// Aggregate is a keyed aggregate over its input's key.
type Aggregate struct {
	Input string `koanf:"input" default:"required" doc:"A source or an earlier operator."`
	// Fields is the raw YAML, {amount: {sum: amount}, orders: {count: {}}}: see Specs.
	Fields  map[string]map[string]any `koanf:"fields" default:"required" doc:"Output fields: name: {sum|min|max|avg: input field path}, name: {count: {}} or name: {count_distinct: input field path}. Sums are exact decimals. count_distinct (exact; needs group_by, no session window, no retractions; with a tumbling or hopping window, per window) runs as internal operators <name>-distinct-<field> (a distinct keyed by the group and the value, read by a rekey <name>-distinct-<field>-by) and turns this aggregate into a cogroup of them and, for its other fields, of the rekey <name>-by. Each may add where: a boolean expression (as a filter's; e.g. {count: {}, where: \"price < 10000\"}, SQL's count(*) filter (where ...)): only the records for which it holds count towards that field (its min, max and avg are null, its count and sum 0, while none has). A min or max compares numbers unless it adds type: string, which compares strings by their UTF-8 bytes (as SQL compares VARCHAR); a value of the other type is a dead letter. Not with session windows."`
	Emit    string                    `koanf:"emit" enum:"updates,final" doc:"updates: the current value at most once per key (and window) per commit; final (windows only): exactly one output per key and window, when it closes."`
	GroupBy string                    `koanf:"group_by" default:"none" doc:"Field path to group by instead of the input's key (e.g. customers.region), or several separated by commas for a composite key (e.g. bidder, auction: the key is the JSON object {\"bidder\":7,\"auction\":1001}, and the output carries its columns in place of key). A part may be an expression of the record, named before a colon, as SQL groups by an expression (e.g. auction, day: date_format(dateTime, 'yyyy-MM-dd'): the key {\"auction\":1001,\"day\":\"2015-07-15\"}; alone, its value is the key, as rekey.expr's); its value must be a string or a number, else the record is a dead letter. Records are re-keyed through the topic <group>-<name>-repartition, written in the same transaction as the input offsets; empty: the input's key."`
	// Retractions: the input is a change stream (a changes operator's, or any stream whose
	// records carry "retract": true to take an earlier record back).
	WindowFinals bool `koanf:"window_finals" default:"false" doc:"The input's records are each the final of a window of this aggregate's size and advance, at the window's end - 1 (a windowed distinct's firsts; the finals of another operator's windows): each goes into that window alone, not into every hopping window containing its time. With tumbling windows it changes nothing."`
	Retractions  bool `koanf:"retractions" doc:"The input is a change stream (a changes operator's): a record with \"retract\": true is subtracted (sum, avg and count are taken back exactly; min and max cannot be, and are refused), any other record added. A key whose records all were retracted leaves the result: its update is a tombstone (null value). No window."`

	// Changelog: where the state's changelog lives (ChangelogTopic, ChangelogOutput).
	Changelog string `koanf:"changelog" enum:"topic,output" default:"topic" doc:"topic: the operator's own compacted changelog topic <group>-<name>-changelog, beside its output. output: its output topic is its changelog (one write per key instead of two): each result goes to the input's partition number, carries the state's layout header, and a restore rebuilds the states from the latest results. Needs a sink (json) that only this operator writes and no later operator reads, with as many partitions as the input, no window, no retractions and no avg (which the results cannot give back exactly); results of a backlog checkpoint (backlog.checkpoint_interval) are written too."`

	// Window is nil for one result per key, never closed.
	Window *Window `koanf:"window" doc:"An event-time window: exactly one of tumbling, hopping (with advance) and session. Without one, each key has one result that never closes. Over the finals of another operator's windows (emit: final), a final's event time is its window's end - 1 and the watermark is the smallest of the output watermarks that operator's tasks announce."`
}

// Cogroup aggregates several inputs per key: each field takes its records from one input.
type Cogroup struct {
	Inputs []string `koanf:"inputs" default:"required" doc:"Two or more sources or earlier operators, co-partitioned (same partition count) and keyed alike."`
	// Fields is the raw YAML, {spent: {sum: amount, from: orders}, ...}: see Specs.
	Fields map[string]map[string]any `koanf:"fields" default:"required" doc:"Output fields: name: {sum|min|max|avg: input field path, from: input} or name: {count: {}, from: input}. Sums are exact decimals. As an aggregate's fields, each may add where: a boolean expression over its input's records, and a min or max type: string (not with session windows)."`
	Emit   string                    `koanf:"emit" enum:"updates,final" doc:"updates: the current value at most once per key (and window) per commit; final (windows only): exactly one output per key and window, when it closes."`
	// KeyColumns: the key is a composite key's JSON object, written as columns.
	KeyColumns bool `koanf:"key_columns" doc:"The inputs are keyed by a composite key (re-keyed by several fields, e.g. rekey: {by: \"channel, day\"}, whose key is the JSON object {\"channel\":..,\"day\":..}): the output carries the object's members as columns in place of key, as an aggregate with that group_by does (a field must not be named like one of them). A key that is not a JSON object is still written as key."`
	// WindowFinals: the inputs whose records each go into one window (Aggregate.WindowFinals).
	WindowFinals []string `koanf:"window_finals" default:"none" doc:"Inputs whose records are each the final of a window of this cogroup's size and advance, at the window's end - 1 (a windowed distinct's firsts): each goes into that window alone, not into every hopping window containing its time."`
	// Window is nil for one result per key, never closed.
	Window *Window `koanf:"window" doc:"An event-time window (tumbling, hopping or session): a record is late when its own input's watermark has closed its windows (a session: a session of the record alone); a window closes when the smallest of the inputs' watermarks reaches its end plus grace. A session gathers the key's records of every input and closes one gap - 1ms later (last + 2 × gap - 1ms + grace), once no record on time can join it."`
}

// Aggregate returns the cogroup as an aggregate of its fields (without their inputs), for
// the checks and the state both share.
func (cg *Cogroup) Aggregate() *Aggregate {
	fields := make(map[string]map[string]any, len(cg.Fields))
	for name, raw := range cg.Fields {
		f := make(map[string]any, len(raw))
		for k, v := range raw {
			if k != "from" {
				f[k] = v
			}
		}
		fields[name] = f
	}
	return &Aggregate{Input: cg.Inputs[0], Fields: fields, Emit: cg.Emit, Window: cg.Window}
}

// From returns, per field name, the input its records come from.
func (cg *Cogroup) From() map[string]string {
	out := make(map[string]string, len(cg.Fields))
	for name, raw := range cg.Fields {
		if s, ok := raw["from"].(string); ok {
			out[name] = s
		}
	}
	return out
}

// Dedup keeps one record per key: the first or the latest, in arrival order.
type Dedup struct {
	Input   string        `koanf:"input" default:"required" doc:"A source or an earlier operator."`
	Keep    string        `koanf:"keep" enum:"first,last" default:"first" doc:"first: a key's first record, emitted once; the key's later records are dropped. last: the key's latest record, written at most once per key per commit (an upsert stream: the latest value per key wins)."`
	Within  time.Duration `koanf:"within" default:"none" doc:"keep: first only: a key forgets its first record once the watermark passes its event time + within (a later record of the key is a first again); a record whose own time + within the watermark has passed is late (dead letter). None: a key remembers for ever."`
	GroupBy string        `koanf:"group_by" default:"none" doc:"Field path (or several, separated by commas: a composite key) to deduplicate by instead of the input's key: records are re-keyed through the topic <group>-<name>-repartition, as an aggregate's group_by."`
}

// Top keeps each key's n records with the largest (or smallest) value of a field.
type Top struct {
	Input   string `koanf:"input" default:"required" doc:"A source or an earlier operator."`
	N       int    `koanf:"n" default:"required" doc:"How many records each key (with window: each key and window) keeps (1 to 32768): its rows, ranked 1 to n; with ties, also the records tied with the n-th."`
	By      string `koanf:"by" default:"required" doc:"The numeric field path the records are ranked by (exact decimals); a record without it is a dead letter."`
	Order   string `koanf:"order" enum:"desc,asc" default:"desc" doc:"desc: the largest values rank first; asc: the smallest. Records of equal value rank in arrival order (the earlier first), or with ties: true share a rank."`
	Rank    string `koanf:"rank" default:"rank" doc:"The name of the rank column added to each row (and to its Kafka key, {\"key\":\"<key>\",\"rank\":1})."`
	GroupBy string `koanf:"group_by" default:"none" doc:"Field path (or several, separated by commas) to rank within instead of the input's key: records are re-keyed through the topic <group>-<name>-repartition, as an aggregate's group_by."`
	// Window: a top per key and event-time window (Flink's window Top-N), emitted once per
	// window when it closes, instead of an upsert stream.
	Window *Window `koanf:"window" default:"none" doc:"Tumbling or hopping event-time windows (with grace) to rank within: each key and window keeps only its top rows and writes them once, when the window closes (the watermark passes its end + grace), each row the record with the rank column, under the key, at the window's end - 1 as event time (as an aggregate's finals; later operators may window them); then the window's state is deleted. A record whose every window is closed is late (dead-letter topic). Without window: an upsert stream of one row per key and rank."`
	Ties   bool    `koanf:"ties" doc:"With window only: rank as SQL's RANK() (1 + the number of records strictly better) and keep every record whose rank is at most n, so records tied with the n-th all come out with the same rank; with n: 1, exactly the records at the window's maximum (or minimum). A window keeps n records plus those tied with its n-th, never the rest of its input. false: ranks 1 to n, ties in arrival order (ROW_NUMBER())."`
	// OmitRank: rows without the rank column (operators.Top.rowValue).
	OmitRank bool `koanf:"omit_rank" doc:"Each row is the record as it came, without the rank column (as SQL's outer SELECT that leaves ROW_NUMBER's column out, Nexmark q9): without window the rank is then only in the row's Kafka key, and with changelog: output a restore reads it from there. false: each row has the rank column."`
	// Changelog: where the state's changelog lives (ChangelogTopic, ChangelogOutput).
	Changelog string `koanf:"changelog" enum:"topic,output" default:"topic" doc:"topic: the operator's own compacted changelog topic <group>-<name>-changelog, beside its output. output: its output topic is its changelog (each row once instead of the row and the key's whole state): each row goes to the input's partition number with the state's layout header and its key's header (sluice.key), and a restore gathers each key's latest rows back into its state. Needs a sink (json) that only this operator writes and no later operator reads, with as many partitions as the input, and no window."`
}

// Changes turns an upsert stream into its changes: per key, the retraction of the row a new row
// (or a tombstone) replaces, then the new row.
type Changes struct {
	Input string `koanf:"input" default:"required" doc:"An earlier operator whose results are an upsert stream (an unwindowed aggregate or cogroup, a top, a dedup with keep: last), or a source of rows and tombstones keyed by row (the latest value per Kafka key wins, a null value deletes it)."`
}

// RetractField is the field that marks a retraction in a change stream: a changes operator
// writes the row a key no longer has with "retract": true, and an aggregate with retractions
// subtracts a record whose retract field is true.
const RetractField = "retract"

// Distinct marks, per key, the first record that passes each flag (the first step of COUNT
// DISTINCT: keyed by (group, value), the flags summed per group count the distinct values).
type Distinct struct {
	Input   string            `koanf:"input" default:"required" doc:"A source or an earlier operator."`
	GroupBy string            `koanf:"group_by" default:"none" doc:"Field paths, separated by commas, of the key whose first records are marked: the group and the value counted, e.g. day, bidder (the key is the JSON object {\"day\":..,\"bidder\":..}); records are re-keyed through the topic <group>-<name>-repartition, as an aggregate's group_by. None: the input's key."`
	Flags   map[string]string `koanf:"flags" default:"required" doc:"column: boolean expression (1 to 64), e.g. {total_bidders: 'true', rank1_bidders: 'price < 10000'}: a record the key's first for some flag goes on with every flag's column, 1 if it is the key's first record for which that expression holds, else 0 (a column of the input of the same name is replaced); the key's other records are dropped. Expressions as a filter's."`
	Window  *Window           `koanf:"window" default:"none" doc:"Tumbling or hopping event-time windows (with grace): a key's flags are per window and forgotten when the window closes (the watermark passes its end + grace); a record goes on once for each of its windows in which it is the key's first for some flag, with that window's window_start and window_end columns and its end - 1 as event time (as an aggregate's finals: a later aggregate or cogroup over the same windows sums each into its own window with window_finals). A record whose every window is closed is late (dead-letter topic). None: a key remembers its flags for ever."`
}

// Rekey re-keys a stream through a repartition topic.
type Rekey struct {
	Input string `koanf:"input" default:"required" doc:"A source or an earlier operator."`
	By    string `koanf:"by" default:"none" doc:"The field path of the new key (e.g. seller), or several separated by commas for a composite key (the JSON object {\"a\":1,\"b\":2}); a record without it is a dead letter. Exactly one of by and expr."`
	Expr  string `koanf:"expr" default:"none" doc:"An expression of the record whose value is the new key (e.g. \"dateTime - dateTime % 10000\", \"auction % 10000\"): a string as it is, a number as its text (an int's digits, an exact decimal's shortest form). A record whose expression fails or gives anything else (null: a member it reads is missing) is a dead letter. Exactly one of by and expr."`
}

// Top's order values.
const (
	OrderDesc = "desc"
	OrderAsc  = "asc"
)

// Dedup's keep values.
const (
	KeepFirst = "first"
	KeepLast  = "last"
)

// GroupBy returns the field path a keyed operator (or a rekey) re-keys its input by ("" = its
// input's key).
func (o *Operator) GroupBy() string {
	switch {
	case o.Aggregate != nil:
		return o.Aggregate.GroupBy
	case o.Dedup != nil:
		return o.Dedup.GroupBy
	case o.Top != nil:
		return o.Top.GroupBy
	case o.Distinct != nil:
		return o.Distinct.GroupBy
	case o.Rekey != nil && o.Rekey.Expr != "":
		return o.Rekey.Expr
	case o.Rekey != nil:
		return o.Rekey.By
	}
	return ""
}

// RekeyExpr reports whether the operator is a rekey by an expression (rekey.expr), whose text
// GroupBy returns.
func (o *Operator) RekeyExpr() bool { return o.Rekey != nil && o.Rekey.Expr != "" }

// Join is a stream-table join (stream, table; as_of processing: a record joins its key's latest
// row) or a windowed stream-stream join (left, right, within).
type Join struct {
	Stream string        `koanf:"stream" default:"none" doc:"Stream-table join: a source or an earlier operator, the records to enrich, keyed by the table's key."`
	Table  string        `koanf:"table" default:"none" doc:"Stream-table join: a table; each record gets its key's row under the table's name (null when a left join finds none)."`
	Left   string        `koanf:"left" default:"none" doc:"Stream-stream join: the left input (a source or an earlier operator), keyed like right and co-partitioned with it."`
	Right  string        `koanf:"right" default:"none" doc:"Stream-stream join: the right input."`
	Within time.Duration `koanf:"within" default:"none" doc:"Stream-stream join: a left and a right record of one key whose event times are at most this apart are a pair, emitted once as {<left>: ..., <right>: ...}. Without within, a regular inner join: every pair of a left and a right record of one key, whenever each arrived (see unique)."`
	Type   string        `koanf:"type" enum:"inner,left,outer" default:"inner" doc:"inner: only matches; left: also each record of the stream (or left) side without a match, with null (for a stream-stream join, once its window has closed, never earlier); outer (stream-stream only): unmatched records of both sides."`
	Unique string        `koanf:"unique" enum:"left,right" default:"none" doc:"Stream-stream join without within (a regular join): the side that has at most one record per key (an entity: an auction, a person). Its first record of a key joins every record of the other side, before or after it, and the key's state is that one record once it came (later records of the unique side for the key are ignored). Without it, a regular join keeps every record of both sides for ever."`
	AsOf   string        `koanf:"as_of" enum:"processing,event_time" doc:"Stream-table join: processing, the latest row when the record is processed, after the table's snapshot has loaded; event_time, the row version valid at the record's event time, once the table's watermark has passed it (the table is then read as a stream of versions, with the task's other inputs)."`
	Where  string        `koanf:"where" default:"none" doc:"Stream-stream joins: a condition each pair must meet besides its key, an expression over the joined record ({<left>: ..., <right>: ...}) and key, e.g. \"bid.dateTime >= auction.dateTime && bid.dateTime <= auction.expires\" (SQL's conditions beside the equality in ON). The join emits only the pairs it is true for, and evaluates it before it writes a pair's columns (select). A pair it is not true for (false, null, or an error such as a missing member or a wrong type, as SQL's unknown) is no pair: not emitted, and a left or outer join's record without any such pair is emitted with null when its window closes. Not ts (a joined record has no event time of its own)."`
	// Select is the raw YAML list, as Map.Select: see Columns.
	Select []any `koanf:"select" default:"none" doc:"Stream-stream joins and stream-table joins as_of event_time: the output's columns, as a map's select (a field name or name: expression), computed on each joined record, e.g. [{auction: bid.auction}, {seller: auction.seller}]; the join then writes these columns instead of the whole joined record (no map after it, no second write of each row through an internal topic). The expressions see the joined record as a map after the join would ({<left>: ..., <right>: ...}; a stream-table join's record with the table's member), and key; not ts (a joined record has no event time of its own). A column whose expression fails on a joined record (a wrong type, division by zero) is null in it: the record is made from the join's state, and a join emits either all of a record's pairs or none."`
}

// Columns returns the columns of Select in order, skipping items that do not parse (Validate
// reports those).
func (j *Join) Columns() []Column { return columns(j.Select) }

// StreamStream reports whether the join is a windowed stream-stream join (left, right).
func (j *Join) StreamStream() bool { return j.Left != "" || j.Right != "" }

// Join types.
const (
	JoinInner = "inner"
	JoinLeft  = "left"
	JoinOuter = "outer"
)

// Changelogs of an aggregate or a top (Aggregate.Changelog, Top.Changelog).
const (
	ChangelogOwnTopic = "topic"
	ChangelogOutput   = "output"
)

// OutputChangelog reports whether the aggregate's output topic is its changelog.
func (a *Aggregate) OutputChangelog() bool { return a != nil && a.Changelog == ChangelogOutput }

// OutputChangelog reports whether the top's output topic is its changelog.
func (t *Top) OutputChangelog() bool { return t != nil && t.Changelog == ChangelogOutput }

// Join sides (unique).
const (
	SideLeft  = "left"
	SideRight = "right"
)

// Window is an aggregate's event-time window: exactly one of Tumbling, Hopping (with Advance) and
// Session is set. Tumbling and hopping windows are aligned to the epoch, [start, end); a window
// closes when the watermark reaches end + Grace.
type Window struct {
	Tumbling time.Duration `koanf:"tumbling" default:"none" doc:"Size of epoch-aligned windows [start, end) that follow each other."`
	Hopping  time.Duration `koanf:"hopping" default:"none" doc:"Size of epoch-aligned windows that start every advance (a record is in size/advance windows)."`
	Advance  time.Duration `koanf:"advance" default:"none" doc:"Hopping windows only: how often a window starts; it must divide hopping (at most 100 windows per record)."`
	Session  time.Duration `koanf:"session" default:"none" doc:"Inactivity gap: a key's records closer than this form one session [first, last + gap). With emit: updates, a session a record merges into another (or extends backwards) is retracted: {\"key\", \"window_start\", \"window_end\", \"retract\": true} with the window it was published with."`
	Grace    time.Duration `koanf:"grace" doc:"A window closes when the watermark reaches its end plus this; later records are late (dead-letter topic)."`
}

// Kind returns "tumbling", "hopping", "session", or "" when none is set.
func (w *Window) Kind() string {
	switch {
	case w == nil:
		return ""
	case w.Tumbling > 0:
		return "tumbling"
	case w.Hopping > 0:
		return "hopping"
	case w.Session > 0:
		return "session"
	}
	return ""
}

// Emit values.
const (
	EmitUpdates = "updates"
	EmitFinal   = "final"
)

// AggSpec (a plain value) is one output field of an aggregate: Name is the output field, Func one of sum,
// count, min, max, avg, and Field the input field path ("" for count). Where is the field's filter,
// a boolean expression ("": every record), and Type the type of a min or max ("" numbers,
// "string" strings compared by their UTF-8 bytes).
type AggSpec struct {
	Name, Func, Field string
	Where             string
	Type              string
}

// Aggregate field options beside the function.
const (
	aggWhere = "where"
	aggType  = "type"
	// AggTypeString is the type of a min or max over strings.
	AggTypeString = "string"
)

// aggFuncs are the aggregate functions, in the order error messages list them.
var aggFuncs = []string{"sum", "count", "min", "max", "avg", CountDistinct}

// CountDistinct is the aggregate function that counts a field's distinct values; Parse expands
// it into a distinct, a rekey and a cogroup (see expandCountDistinct): no operator sees it.
const CountDistinct = "count_distinct"

// Specs returns the parsed aggregate fields sorted by Name. It is meaningful only for an
// aggregate that passed Validate: entries that do not parse are left out. The returned slice is
// new and owned by the caller.
func (a *Aggregate) Specs() []AggSpec {
	specs := make([]AggSpec, 0, len(a.Fields))
	for _, name := range sortedKeys(a.Fields) {
		s, err := parseAggSpec(name, a.Fields[name])
		if err != "" {
			continue
		}
		specs = append(specs, s)
	}
	return specs
}

// parseAggSpec parses {sum: amount} / {count: {}}, each with an optional where: "expression",
// and a min or max with an optional type: string; it returns a message for Validate on error.
func parseAggSpec(name string, raw map[string]any) (AggSpec, string) {
	var opts AggSpec
	funcs := make(map[string]any, len(raw))
	for k, v := range raw {
		switch k {
		case aggWhere:
			s, ok := v.(string)
			if !ok || strings.TrimSpace(s) == "" {
				return AggSpec{}, "where needs a boolean expression, e.g. {count: {}, where: \"price < 10000\"}"
			}
			opts.Where = s
		case aggType:
			s, ok := v.(string)
			if !ok || s != AggTypeString && s != "number" {
				return AggSpec{}, fmt.Sprintf("type must be string or number (the default), got %s", describe(v))
			}
			if s == AggTypeString {
				opts.Type = s
			}
		default:
			funcs[k] = v
		}
	}
	if len(funcs) != 1 {
		keys := sortedKeys(funcs)
		if len(keys) == 0 {
			return AggSpec{}, fmt.Sprintf("needs one function (one of %s), e.g. {sum: amount} or {count: {}}", strings.Join(aggFuncs, ", "))
		}
		return AggSpec{}, fmt.Sprintf("has %d functions (%s); give exactly one, e.g. {sum: amount}", len(keys), strings.Join(keys, ", "))
	}
	var fn string
	var arg any
	for f, a := range funcs { // exactly one entry
		fn, arg = f, a
	}
	if !slices.Contains(aggFuncs, fn) {
		return AggSpec{}, fmt.Sprintf("unknown function %q (allowed: %s); beside it a field may have where, and a min or max type", fn, strings.Join(aggFuncs, ", "))
	}
	if _, ok := raw[aggType]; ok && fn != "min" && fn != "max" {
		return AggSpec{}, fmt.Sprintf("type applies to min and max (over numbers or strings), not %s", fn)
	}
	if fn == "count" {
		switch v := arg.(type) {
		case nil:
		case map[string]any:
			if len(v) != 0 {
				return AggSpec{}, "count takes {} or nothing (it counts records), not a field"
			}
		case string:
			if v != "" {
				return AggSpec{}, "count takes {} or nothing (it counts records), not a field"
			}
		default:
			return AggSpec{}, "count takes {} or nothing (it counts records)"
		}
		return AggSpec{Name: name, Func: fn, Where: opts.Where}, ""
	}
	field, ok := arg.(string)
	if !ok || field == "" {
		return AggSpec{}, fmt.Sprintf("%s needs an input field path, e.g. {%s: amount}", fn, fn)
	}
	if msg := checkFieldPath(field); msg != "" {
		return AggSpec{}, fmt.Sprintf("%s: %s", fn, msg)
	}
	return AggSpec{Name: name, Func: fn, Field: field, Where: opts.Where, Type: opts.Type}, ""
}

// TransactionalID returns "<group>-<instance_id>", the Kafka transactional.id of this instance.
func (c *Config) TransactionalID() string { return c.Group + "-" + c.InstanceID }

// ChangelogTopic returns the compacted changelog topic of operator op: "<group>-<op>-changelog".
func (c *Config) ChangelogTopic(op string) string { return c.Group + "-" + op + "-changelog" }

// RepartitionTopic returns the repartition topic of operator op: "<group>-<op>-repartition".
func (c *Config) RepartitionTopic(op string) string { return c.Group + "-" + op + "-repartition" }

// OutputTopic returns the internal topic through which later operators read the results of
// keyed operator op: "<group>-<op>-output".
func (c *Config) OutputTopic(op string) string { return c.Group + "-" + op + "-output" }

// ReadByLater reports whether a later operator reads operator op's output.
func (c *Config) ReadByLater(op string) bool {
	for i := range c.Operators {
		if slices.Contains(c.Operators[i].Inputs(), op) {
			return true
		}
	}
	return false
}

// Keyed reports whether the operator is keyed and stateful (an aggregate, a cogroup, a
// stream-stream join or a join as of event time): later operators read its results through
// its output topic.
func (o *Operator) Keyed() bool {
	return o.Aggregate != nil || o.Cogroup != nil || o.Dedup != nil || o.Top != nil || o.Changes != nil || o.Distinct != nil || o.Join != nil && (o.Join.StreamStream() || o.Join.AsOf == "event_time")
}

// DLQTopic returns the dead-letter topic: "<group>-dlq".
func (c *Config) DLQTopic() string { return c.Group + "-dlq" }

// InternalTopics returns the internal topics this pipeline uses, sorted: the dead-letter topic,
// the changelog of every keyed operator, the repartition topic of every keyed operator with
// group_by and the output topic of every keyed operator that later operators read.
func (c *Config) InternalTopics() []string {
	topics := []string{c.DLQTopic()}
	for i := range c.Operators {
		op := c.Operators[i]
		if op.Keyed() {
			topics = append(topics, c.ChangelogTopic(op.Name))
		}
		if op.GroupBy() != "" {
			topics = append(topics, c.RepartitionTopic(op.Name))
		}
		if op.Keyed() && c.ReadByLater(op.Name) {
			topics = append(topics, c.OutputTopic(op.Name))
		}
	}
	slices.Sort(topics)
	return topics
}

// SourceOf returns the source that operator op ultimately reads, following inputs through
// earlier operators. ok is false when op is not an operator or its chain does not reach a
// source (which Validate rejects).
func (c *Config) SourceOf(op string) (source string, ok bool) {
	byName := make(map[string]*Operator, len(c.Operators))
	for i := range c.Operators {
		byName[c.Operators[i].Name] = &c.Operators[i]
	}
	cur, isOp := byName[op]
	if !isOp {
		return "", false
	}
	for range len(c.Operators) { // bounded: a chain cannot be longer than the operator list
		in := cur.Input()
		if _, isSrc := c.Sources[in]; isSrc {
			return in, true
		}
		if cur, isOp = byName[in]; !isOp {
			return "", false
		}
	}
	return "", false
}

// defaults returns a Config with every default that Load applies before reading the file.
// Defaults whose zero value is meaningful (exit_lag, http.listen, progress_interval) must be
// set before decoding, so an explicit zero in the file is kept.
func defaults() Config {
	return Config{
		Kafka: Kafka{
			TransactionTimeout: 2 * time.Minute,
			ReplicationFactor:  -1,
			FetchMaxBytes:      32 * MiB,
			Compression:        CompressionNone,
		},
		Processing: Processing{
			Guarantee:      ExactlyOnce,
			CommitInterval: 100 * time.Millisecond,
			StateDir:       "./data",
			CacheKeys:      100000,

			CombineBeforeRekey: true,
			InlineStages:       true,

			MaxCheckpointFailures: 100,
			MinFreeSpace:          64 * MiB,
		},
		Backlog: Backlog{
			Mode:             ModeAuto,
			EnterLag:         50000,
			ExitLag:          500,
			SortMemory:       256 * MiB,
			ProgressInterval: 5 * time.Second,
		},
		HTTP: HTTP{Listen: "127.0.0.1:9464"},
		Log:  Log{Level: "info", Format: "text"},

		SchemaRegistry: SchemaRegistry{Timeout: 10 * time.Second, RetryTimeout: 2 * time.Minute},
	}
}

// fillDefaults sets the defaults that live inside maps and lists (and any enum left empty),
// so a loaded Config holds explicit values everywhere.
func (c *Config) fillDefaults(hostname func() (string, error)) *Error {
	setIfEmpty := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	setIfEmpty(&c.Processing.Guarantee, ExactlyOnce)
	setIfEmpty(&c.Processing.StateDir, "./data")
	setIfEmpty(&c.Backlog.Mode, ModeAuto)
	setIfEmpty(&c.Log.Level, "info")
	setIfEmpty(&c.Log.Format, "text")
	if len(c.SchemaRegistry.URLs) == 0 {
		c.SchemaRegistry.URLs = nil // "urls: []" and no urls are one configuration
	}
	for name, s := range c.Sources {
		setIfEmpty(&s.Format, FormatJSON)
		setIfEmpty(&s.KeyFormat, KeyBytes)
		c.Sources[name] = s
	}
	for name, s := range c.Sinks {
		setIfEmpty(&s.Format, FormatJSON)
		setIfEmpty(&s.SubjectStrategy, "topic")
		c.Sinks[name] = s
	}
	for name, t := range c.Tables {
		setIfEmpty(&t.Format, FormatJSON)
		setIfEmpty(&t.KeyFormat, KeyBytes)
		c.Tables[name] = t
	}
	for i := range c.Operators {
		if a := c.Operators[i].Aggregate; a != nil {
			setIfEmpty(&a.Emit, EmitUpdates)
		}
		if cg := c.Operators[i].Cogroup; cg != nil {
			setIfEmpty(&cg.Emit, EmitUpdates)
		}
		if d := c.Operators[i].Dedup; d != nil {
			setIfEmpty(&d.Keep, KeepFirst)
		}
		if t := c.Operators[i].Top; t != nil {
			setIfEmpty(&t.Order, OrderDesc)
			setIfEmpty(&t.Rank, "rank")
		}
		if j := c.Operators[i].Join; j != nil {
			setIfEmpty(&j.Type, JoinInner)
			if !j.StreamStream() {
				setIfEmpty(&j.AsOf, "processing")
			}
		}
	}
	if c.InstanceID == "" {
		h, err := hostname()
		if err != nil || h == "" {
			return &Error{Key: "instance_id", Msg: fmt.Sprintf("not set and the host name is unknown (%v); set instance_id", err), err: err}
		}
		c.InstanceID = h
	}
	return nil
}

// Load reads the YAML file at path (path may be "" = defaults only), then overlays environment
// variables from environ (e.g. os.Environ()) with prefix SLUICE_, "__" nesting, lower-cased.
// Then it applies defaults and Validate. Every error is an *Error naming the key.
func Load(path string, environ []string) (*Config, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return parse(b, path, environ, os.Hostname)
}

// Parse is Load from bytes (tests, the embedded demo config).
func Parse(yamlDoc []byte, environ []string) (*Config, error) {
	return parse(yamlDoc, "", environ, os.Hostname)
}

// parse is Parse with the file name for messages (or "") and the host name lookup injected.
func parse(yamlDoc []byte, fileName string, environ []string, hostname func() (string, error)) (*Config, error) {
	c, _, err := parseOrigins(yamlDoc, fileName, environ, hostname)
	return c, err
}

// parseOrigins is parse that also says which keys the file and the environment set.
func parseOrigins(yamlDoc []byte, fileName string, environ []string, hostname func() (string, error)) (*Config, *origins, error) {
	fileMap, err := yaml.Parser().Unmarshal(yamlDoc)
	if err != nil {
		msg := fmt.Sprintf("invalid YAML: %v", err)
		if fileName != "" {
			msg = fileName + ": " + msg
		}
		return nil, nil, &Error{Msg: msg, err: err}
	}
	if fileMap == nil {
		fileMap = map[string]any{}
	}
	configType := reflect.TypeFor[Config]()
	if cerr := normalizeStruct("", fileMap, configType); cerr != nil {
		return nil, nil, cerr
	}
	envMap, envNames, cerr := environMap(environ)
	if cerr != nil {
		return nil, nil, cerr
	}
	if cerr := normalizeStruct("", envMap, configType); cerr != nil {
		cerr.Msg += " (set by " + envNames.culprit(cerr.Key) + ")"
		return nil, nil, cerr
	}

	k := koanf.New(".")
	if err := k.Load(confmap.Provider(fileMap, ""), nil); err != nil {
		return nil, nil, &Error{Msg: err.Error(), err: err}
	}
	if err := k.Load(confmap.Provider(envMap, ""), nil); err != nil {
		return nil, nil, &Error{Msg: err.Error(), err: err}
	}
	c := defaults()
	err = k.UnmarshalWithConf("", &c, koanf.UnmarshalConf{
		DecoderConfig: &mapstructure.DecoderConfig{
			DecodeHook: mapstructure.ComposeDecodeHookFunc(
				mapstructure.StringToTimeDurationHookFunc(),
				mapstructure.TextUnmarshallerHookFunc(),
			),
			WeaklyTypedInput: true,
			ErrorUnused:      true,
			TagName:          "koanf",
		},
	})
	if err != nil {
		// normalize has checked every key and value, so this is a bug rather than a user error;
		// still report it as a config error rather than crash.
		return nil, nil, &Error{Msg: fmt.Sprintf("decode: %v", err), err: err}
	}
	if cerr := c.fillDefaults(hostname); cerr != nil {
		return nil, nil, cerr
	}
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	if err := c.expandCountDistinct(); err != nil {
		return nil, nil, err
	}
	return &c, &origins{file: fileMap, env: envNames}, nil
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
