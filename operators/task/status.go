package task

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluice-dev/sluice/operators/plan"
)

// Status is a snapshot of a task for /status. It is a copy; the caller owns it.
type Status struct {
	Partition int32         `json:"partition"`
	Chains    []ChainStatus `json:"chains"`
	Tables    []TableStatus `json:"tables,omitempty"`
	// Waiting says what the task's streams wait for, while a table partition loads its
	// snapshot (FLIP-326); empty when they run.
	Waiting string `json:"waiting,omitempty"`
}

// ChainStatus is one chain of a task.
type ChainStatus struct {
	Source          string         `json:"source"`
	Topic           string         `json:"topic"`
	Operator        string         `json:"operator,omitempty"`
	Mode            string         `json:"mode"` // backlog | real-time | stateless | restoring
	Lag             int64          `json:"lag"`
	TimeLagMs       int64          `json:"time_lag_ms"`
	NextOffset      int64          `json:"next_offset"`
	CommittedOffset int64          `json:"committed_offset"`
	RecordsIn       int64          `json:"records_in"`
	RecordsOut      int64          `json:"records_out"`
	DeadLetters     int64          `json:"dead_letters"`
	CachedKeys      int            `json:"cached_keys"`
	Window          string         `json:"window,omitempty"`
	WatermarkMs     *int64         `json:"watermark_ms,omitempty"` // windowed: event time, ms (absent before any record)
	LateRecords     int64          `json:"late_records,omitempty"`
	Backlog         *BacklogStatus `json:"backlog,omitempty"`
	// In-band RecordAttributes (attributes.go): a chain reading an internal topic lists the
	// writers (their partitions) that say backlog; a chain writing one, the mode it announced
	// last ("backlog" or "real-time"; absent before its first).
	UpstreamBacklog []string `json:"upstream_backlog,omitempty"`
	Announced       string   `json:"announced,omitempty"`
	// Event time across an internal topic: a chain reading timed results lists its writers'
	// watermarks, by writer partition (null: not announced yet; its watermark is their
	// smallest); a chain writing them, the output watermark it announced last.
	WriterWatermarksMs   []*int64 `json:"writer_watermarks_ms,omitempty"`
	IdleWriters          []int    `json:"idle_writers,omitempty"` // left out of the smallest (watermark.idle_after)
	AnnouncedWatermarkMs *int64   `json:"announced_watermark_ms,omitempty"`
	AnnouncedIdle        bool     `json:"announced_idle,omitempty"`
}

// BacklogStatus is the progress of a chain in backlog mode.
type BacklogStatus struct {
	SortedRecords int64 `json:"sorted_records"` // records taken in backlog (pre-aggregated or sorted)
	// PreAggregatedKeys are the keys whose records are aggregated in memory (up to
	// processing.cache_keys), or for an operator that keeps each key's last record (dedup keep
	// last) the keys whose latest record it holds (up to 4096); records of other keys are sorted.
	PreAggregatedKeys  int     `json:"pre_aggregated_keys"`
	PreAggregatedBytes int64   `json:"pre_aggregated_bytes"`
	Progress           float64 `json:"progress"` // 0..1: sorted / (sorted + lag)
	RatePerSec         float64 `json:"rate_per_sec"`
	ETASeconds         float64 `json:"eta_seconds"`
	SorterMem          int64   `json:"sorter_mem_bytes"`
	SpilledBytes       int64   `json:"spilled_bytes"`
	Runs               int64   `json:"runs"`
}

// Status returns the latest snapshot. Safe for concurrent use.
func (t *Task) Status() Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.status
	s.Chains = append([]ChainStatus(nil), s.Chains...)
	return s
}

// RestoringStatus returns the snapshot of a task of plan for partition of topic that is not
// built or not restored yet: its chains, each in mode "restoring", with no offsets.
func RestoringStatus(plan *plan.Plan, topics []string, partition int32) Status {
	st := Status{Partition: partition}
	for _, cp := range plan.Chains {
		if !slices.Contains(topics, cp.Source.Topic) {
			continue
		}
		topic := cp.Source.Topic
		cs := ChainStatus{Source: cp.SourceName, Topic: topic, Mode: "restoring", NextOffset: -1, CommittedOffset: -1}
		if cp.Keyed != nil {
			cs.Operator = cp.Keyed.Name
		}
		st.Chains = append(st.Chains, cs)
	}
	return st
}

// publish refreshes the snapshot and the gauges; called by the task goroutine after each step.
func (t *Task) publish() {
	t.backlogged.Store(t.backlogNow())
	now := t.d.Clock()
	st := Status{Partition: t.partition}
	for _, c := range t.chains {
		cs := ChainStatus{
			Source: c.plan.SourceName, Topic: c.plan.Source.Topic, Mode: "stateless",
			Lag: c.lag, TimeLagMs: c.timeLag.Milliseconds(), NextOffset: c.next, CommittedOffset: c.done.off,
			RecordsIn: c.recordsIn, RecordsOut: c.recordsOut, DeadLetters: c.dead, CachedKeys: len(c.cache),
		}
		if c.plan.Keyed != nil {
			cs.Operator = c.plan.Keyed.Name
			cs.Mode = "real-time"
		}
		for w := range c.upstream {
			cs.UpstreamBacklog = append(cs.UpstreamBacklog, w)
		}
		slices.Sort(cs.UpstreamBacklog)
		for i, m := range c.writers {
			var p *int64
			if m.wm != math.MinInt64 {
				wm := m.wm
				p = &wm
			}
			cs.WriterWatermarksMs = append(cs.WriterWatermarksMs, p)
			if m.idle {
				cs.IdleWriters = append(cs.IdleWriters, i)
			}
		}
		if c.wmSaid != math.MinInt64 {
			wm := c.wmSaid
			cs.AnnouncedWatermarkMs = &wm
		}
		cs.AnnouncedIdle = c.idleSaid
		switch c.said {
		case saidBacklog:
			cs.Announced = "backlog"
		case saidRealTime:
			cs.Announced = "real-time"
		}
		if c.timed() {
			cs.LateRecords = c.late
			if c.kop == nil && c.ops.Agg.Window() != "" {
				cs.Window = c.ops.Agg.Window()
			} else if a := c.plan.Keyed.Aggregate; a != nil && a.Window != nil {
				w := a.Window
				cs.Window = fmt.Sprintf("session gap %v grace %v", w.Session, w.Grace)
			}
			if c.wm != math.MinInt64 {
				wm := c.wm
				cs.WatermarkMs = &wm
			}
		}
		if c.inBack {
			cs.Mode = "backlog"
			b := &BacklogStatus{SortedRecords: c.backRecords}
			if tot := c.backRecords + c.lag; tot > 0 {
				b.Progress = float64(c.backRecords) / float64(tot)
			}
			if d := now.Sub(c.backStart).Seconds(); d > 0 {
				b.RatePerSec = float64(c.backRecords) / d
				if b.RatePerSec > 0 {
					b.ETASeconds = float64(c.lag) / b.RatePerSec
				}
			}
			if c.part != nil {
				b.PreAggregatedKeys, b.PreAggregatedBytes = c.part.len(), c.part.memBytes()
			}
			if c.last != nil { // the latest record of each key it holds (a LastWins operator)
				b.PreAggregatedKeys, b.PreAggregatedBytes = c.last.len(), c.last.memBytes()
			}
			if c.sorter != nil {
				ss := c.sorter.Stats()
				b.SorterMem, b.SpilledBytes, b.Runs = ss.MemBytes, ss.SpilledBytes, ss.Runs
			}
			cs.Backlog = b
		}
		t.d.Metrics.observe(t.partition, c, cs)
		st.Chains = append(st.Chains, cs)
	}
	st.Tables = t.tableStatus(now)
	for _, ts := range st.Tables {
		if !ts.Loaded {
			st.Waiting = fmt.Sprintf("table %s (topic %s) to load its snapshot: %d records to go", ts.Table, ts.Topic, ts.Lag)
			if ts.EndOffset < 0 {
				st.Waiting = fmt.Sprintf("table %s (topic %s): its snapshot's end offset", ts.Table, ts.Topic)
			}
			break
		}
	}
	t.mu.Lock()
	t.status = st
	t.mu.Unlock()
}

// progress logs a line per chain in backlog every backlog.progress_interval.
func (t *Task) progress() {
	every := t.plan.Config.Backlog.ProgressInterval
	if every <= 0 {
		return
	}
	now := t.d.Clock()
	for _, c := range t.chains {
		if !c.inBack || now.Sub(c.lastLog) < every {
			continue
		}
		c.lastLog = now
		d := now.Sub(c.backStart).Seconds()
		rate, eta, pct := 0.0, 0.0, 0.0
		if d > 0 {
			rate = float64(c.backRecords) / d
		}
		if rate > 0 {
			eta = float64(c.lag) / rate
		}
		if tot := c.backRecords + c.lag; tot > 0 {
			pct = 100 * float64(c.backRecords) / float64(tot)
		}
		t.log.Info("backlog progress", "operator", c.plan.Keyed.Name, "sorted", c.backRecords, "lag", c.lag,
			"percent", int(pct), "rate_per_s", int64(rate), "eta", (time.Duration(eta) * time.Second).String())
	}
}

// Metrics are the task runtime's Prometheus metrics. Safe for concurrent use; a nil *Metrics
// records nothing (tests).
type Metrics struct {
	in, out  *prometheus.CounterVec
	dead     *prometheus.CounterVec
	switches *prometheus.CounterVec
	backlog  *prometheus.GaugeVec
	lag      *prometheus.GaugeVec
	sortMem  *prometheus.GaugeVec
	spilled  *prometheus.GaugeVec
	runs     *prometheus.GaugeVec
	progress *prometheus.GaugeVec
	preKeys  *prometheus.GaugeVec
	late     *prometheus.CounterVec
	waiting  prometheus.Gauge
	waitSecs prometheus.Histogram
	attrs    *prometheus.CounterVec
}

// NewMetrics registers the task metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		in:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_records_in_total", Help: "Records consumed, by topic."}, []string{"topic"}),
		out:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_records_out_total", Help: "Output records produced, by sink topic."}, []string{"topic"}),
		dead:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_dead_letters_total", Help: "Records sent to the dead-letter topic, by operator."}, []string{"operator"}),
		switches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_backlog_switches_total", Help: "Mode switches, by direction (to_backlog, to_realtime)."}, []string{"direction"}),
		backlog:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_backlog", Help: "1 while the task's keyed operator is in backlog mode."}, []string{"operator", "partition"}),
		lag:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_lag_records", Help: "Consumer lag seen in the last fetch."}, []string{"topic", "partition"}),
		sortMem:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_sorter_memory_bytes", Help: "Sorter memory in use."}, []string{"operator", "partition"}),
		spilled:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_sorter_spilled_bytes", Help: "Bytes spilled to sorted runs in the current backlog."}, []string{"operator", "partition"}),
		runs:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_sorter_runs", Help: "Sorted runs on disk in the current backlog."}, []string{"operator", "partition"}),
		progress: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_backlog_progress_ratio", Help: "Backlog progress: sorted / (sorted + lag)."}, []string{"operator", "partition"}),
		preKeys:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_backlog_preaggregated_keys", Help: "Keys aggregated in memory in the current backlog (the rest is sorted)."}, []string{"operator", "partition"}),
	}
	m.late = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_late_records_total", Help: "Records whose every window was closed when they arrived (sent to the dead-letter topic), by operator."}, []string{"operator"})
	m.waiting = prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_join_waiting", Help: "Tasks whose streams wait for a table partition to load its snapshot (FLIP-326)."})
	m.waitSecs = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_join_wait_seconds", Help: "How long a task's streams waited for its table partitions' snapshots.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 18)})
	m.attrs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_record_attributes_total", Help: "Attribute records (a writer's backlog mode, in-band) written to an internal topic, by topic."}, []string{"topic"})
	reg.MustRegister(m.in, m.out, m.dead, m.switches, m.backlog, m.lag, m.sortMem, m.spilled, m.runs, m.progress, m.preKeys, m.late, m.waiting, m.waitSecs, m.attrs)
	for _, d := range []string{"to_backlog", "to_realtime"} {
		m.switches.WithLabelValues(d)
	}
	return m
}

// Declare creates, at 0, every labelled counter series plan can move: the dead letters of each
// source, stage, keyed operator, table and written topic, and the late records of each
// event-time operator, so that a dashboard or an alert rule (rate(...), absent(...)) sees them
// before the first dead letter instead of no series at all.
func (m *Metrics) Declare(plan *plan.Plan) {
	if m == nil {
		return
	}
	dead := func(op string) { m.dead.WithLabelValues(op) }
	for _, c := range plan.Chains {
		dead("source " + c.SourceName)
		for _, st := range c.Stages {
			dead(st.Name)
		}
		if c.Rekey != "" {
			dead(c.RekeyFor)
		}
		if c.Keyed != nil {
			dead(c.Keyed.Name)
			if c.Keyed.Aggregate != nil && c.Keyed.Aggregate.Window != nil || c.StreamJoin != nil || c.AsOf != nil {
				m.late.WithLabelValues(c.Keyed.Name)
			}
		}
		for _, tb := range c.Tables {
			dead("table " + tb)
		}
		for _, tp := range c.Taps {
			dead("produce " + tp.SinkTopic)
		}
		if a := c.After; a != nil {
			// Its output topic's name stands for these stages (after.go).
			dead("source " + a.SourceName)
			for _, st := range a.Stages {
				dead(st.Name)
			}
			dead("produce " + a.SinkTopic)
		} else if c.SinkTopic != "" {
			dead("produce " + c.SinkTopic)
		}
	}
}

func (m *Metrics) recordsIn(topic string, n int) {
	if m != nil {
		m.in.WithLabelValues(topic).Add(float64(n))
	}
}

func (m *Metrics) recordsOut(topic string, n int) {
	if m != nil && topic != "" && n > 0 {
		m.out.WithLabelValues(topic).Add(float64(n))
	}
}

func (m *Metrics) attributes(topic string, n int) {
	if m != nil {
		m.attrs.WithLabelValues(topic).Add(float64(n))
	}
}

func (m *Metrics) deadLetter(op string) {
	if m != nil {
		m.dead.WithLabelValues(op).Inc()
	}
}

// joinWaiting adds d to the tasks waiting for a table snapshot.
func (m *Metrics) joinWaiting(d float64) {
	if m != nil {
		m.waiting.Add(d)
	}
}

func (m *Metrics) joinWaited(seconds float64) {
	if m != nil {
		m.waitSecs.Observe(seconds)
	}
}

func (m *Metrics) lateRecord(op string) {
	if m != nil {
		m.late.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) switched(direction string) {
	if m != nil {
		m.switches.WithLabelValues(direction).Inc()
	}
}

func (m *Metrics) setBacklog(c *chain, on bool) {
	if m == nil || c.plan.Keyed == nil {
		return
	}
	v := 0.0
	if on {
		v = 1
	}
	m.backlog.WithLabelValues(c.plan.Keyed.Name, itoa(c.ns.Partition)).Set(v)
}

func (m *Metrics) observe(p int32, c *chain, cs ChainStatus) {
	if m == nil {
		return
	}
	m.lag.WithLabelValues(c.plan.Source.Topic, itoa(p)).Set(float64(cs.Lag))
	if c.plan.Keyed == nil {
		return
	}
	labels := []string{c.plan.Keyed.Name, itoa(p)}
	var mem, spill, runs, prog, pre float64
	if b := cs.Backlog; b != nil {
		mem, spill, runs, prog = float64(b.SorterMem), float64(b.SpilledBytes), float64(b.Runs), b.Progress
		pre = float64(b.PreAggregatedKeys)
	}
	m.preKeys.WithLabelValues(labels...).Set(pre)
	m.sortMem.WithLabelValues(labels...).Set(mem)
	m.spilled.WithLabelValues(labels...).Set(spill)
	m.runs.WithLabelValues(labels...).Set(runs)
	m.progress.WithLabelValues(labels...).Set(prog)
}

// forget removes a closed task's per-partition series.
func (m *Metrics) forget(c *chain) {
	if m == nil || c.plan.Keyed == nil {
		return
	}
	labels := []string{c.plan.Keyed.Name, itoa(c.ns.Partition)}
	m.backlog.DeleteLabelValues(labels...)
	m.sortMem.DeleteLabelValues(labels...)
	m.spilled.DeleteLabelValues(labels...)
	m.runs.DeleteLabelValues(labels...)
	m.progress.DeleteLabelValues(labels...)
	m.preKeys.DeleteLabelValues(labels...)
	m.lag.DeleteLabelValues(c.plan.Source.Topic, itoa(c.ns.Partition))
}

func itoa(p int32) string { return strconv.Itoa(int(p)) }
