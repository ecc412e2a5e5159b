package operators

// Operator is what every keyed operator is to the runtime, whatever its capability: a name
// (its state's namespace), its attributes, its state's layout and a check of its stored states.
// An operator offers one of two capabilities: Keyed (its records replayed per key in arrival
// order) or Mergeable (its inputs pre-aggregated in any order); the planner (operators/plan)
// builds it and the runtime (operators/task) runs each capability on its path.
type Operator interface {
	// Name is the operator's name (its state and changelog namespace).
	Name() string
	// Attributes are the FLIP-327/331 attributes (printed by validate; not read by the runtime).
	Attributes() Attributes
	// Layout describes what the operator's state bytes mean.
	Layout() Layout
	// ValidState reports whether b is a state of this operator (restores check them).
	ValidState(b []byte) bool
}

// Keyed is the contract of a keyed, stateful operator for the runtime (operators/task). The
// runtime calls the same methods in both modes: in real-time mode Process once per record, in
// offset order, as the record arrives; in backlog mode Process once per record too, replaying
// each key's records from the sort in the order of the watermark at which they arrived, then
// their offset, which for one key is their arrival order. Context.Watermark is, in both modes,
// the watermark at the record's arrival, so an operator whose results depend on the order of its
// inputs and on time gives the same answer in both. OnTimer fires the key's timer once the
// watermark reaches it: in real time after the record that moved the watermark there, in backlog
// before the first of the key's records that arrived at or past it, and at the end of the
// backlog for every timer its final watermark has reached.
//
// An operator whose state depends only on the multiset of its inputs (Aggregate, windowed or
// not) offers the faster capability instead, Mergeable: the runtime pre-aggregates its inputs
// in memory (Fold, Merge) and needs no replay. Keyed is for the others (session windows, stream-stream
// joins). An operator of several inputs gets each input's records (Project's input), a watermark
// that is the smallest of its inputs', and IsLate asked with the record's own input's watermark.
//
// A Keyed operator belongs to one task and is not safe for concurrent use; Layout and
// IsLate are.
type Keyed interface {
	Operator
	// Project appends the input a decoded record of input (its index among the operator's
	// inputs; 0 for an operator of one input) contributes to dst; a bad record is an *Error.
	Project(input int, r *Record, dst []byte) ([]byte, error)
	// IsLate reports whether a record of input with event time ts that arrives at watermark wm
	// (its input's) is late: it would only touch windows that are closed. The runtime sends late
	// records to the dead-letter topic and never calls Process with them.
	IsLate(input int, ts, wm int64) bool
	// Process applies one input of key with event time ts.
	Process(ctx Context, key []byte, ts int64, in []byte) error
	// OnTimer is called when the watermark has reached the key's timer at.
	OnTimer(ctx Context, key []byte, at int64) error
}

// Context is the runtime's side of a Process or OnTimer call: one key's state, its timer, the
// watermark, and emission. It is valid only during the call; slices it returns are owned by the
// runtime and valid until the next call on the Context.
type Context interface {
	// Watermark is the watermark at which the input (or the timer) is processed.
	Watermark() int64
	// State returns the key's state, nil if it has none.
	State() []byte
	// Put replaces the key's state with st (copied).
	Put(st []byte)
	// Append appends b to the key's state (copied), as Put(append(State(), b...)) but at the
	// cost of b alone, whatever the state's size. Slices State returned stay valid and unchanged.
	Append(b []byte)
	// Delete removes the key's state (and its timer).
	Delete()
	// SetTimer sets the key's timer to at, replacing any earlier one (a key has at most one).
	SetTimer(at int64)
	// ClearTimer removes the key's timer.
	ClearTimer()
	// Emit writes an output record with the key as its Kafka key and value (copied).
	Emit(value []byte)
	// EmitAt is Emit of a result with an event time, ts (epoch ms): the record timestamp of a
	// result that later operators read by event time (a window's final: its end - 1).
	EmitAt(value []byte, ts int64)
	// EmitKey is Emit under another Kafka key (both copied): a row of an upsert stream whose key
	// is more than the operator's (a top-N's rank within its key).
	EmitKey(key, value []byte)
}

// ResultFilter is a Context whose runtime filters the operator's results for their one reader, a
// top (operators/task's combine.go): an operator may ask it of a result before writing it, and
// need not write one it drops.
type ResultFilter interface {
	// FilterMember is the top-level member of a result the filter ranks it by, "" when the
	// filter answers nothing before a result is written.
	FilterMember() string
	// DropsBeaten reports whether the filter drops the result the operator would Emit (under
	// the context's key), of at most size bytes (its value), whose FilterMember is raw (its
	// JSON text): the results of the key it passed on before leave it no rank in the top. It
	// counts a result it drops as dropped, as the filter would have when it was produced.
	DropsBeaten(raw []byte, size int) bool
}

// TimedResults is a Keyed operator whose finals carry an event time (EmitAt) that later
// operators may window: no final it emits after its watermark reached wm has an event time
// before wm - OutputLag().
type TimedResults interface {
	OutputLag() int64
}

// PartialMerger is a Keyed operator whose inputs a re-keying writer may fold into partial
// states before the repartition topic (processing.combine_before_rekey; operators/task's
// combine.go), which the operator then merges where it would have processed the records one by
// one: Sessions, whose sessions merge associatively (a partial session is a run of a key's
// records less than the gap apart, and two such runs belong to one session exactly when they
// come within the gap of each other). The writer keeps one partial state per key, of at least
// PartialSize bytes, made by InitPartial and grown by FoldPartial; PartialBytes is what it
// writes of one. The reader asks PartialStart (the earliest event time in a partial, false for
// bytes that are not one of its partials) to judge it late, as IsLate judges a record, and
// MergePartial to merge it into the key's state.
type PartialMerger interface {
	Keyed
	PartialSize() int
	InitPartial(dst []byte)
	// FoldPartial folds one projected input at event time ts into the partial state st and
	// returns it: st itself, or a new slice when it grew.
	FoldPartial(st []byte, ts int64, in []byte) []byte
	PartialBytes(st []byte) []byte
	PartialStart(p []byte) (int64, bool)
	MergePartial(ctx Context, key, p []byte) error
}

// Updater is a Keyed operator that writes updates (emit: updates) once per commit rather than
// as it goes: Process and OnTimer record in the key's state what changed, and the runtime calls
// Flush once for every key they touched, at the checkpoint that commits the change (in real
// time for each changed key; in backlog for each key the fold replays, after its records and
// timers), so a key writes each of its windows at most once per commit. Flush writes what
// changed and stores the state that says it was written.
type Updater interface {
	Keyed
	// Updates reports whether the operator writes updates (false: Flush is never needed).
	Updates() bool
	// Flush writes the key's changes since its last Flush.
	Flush(ctx Context, key []byte) error
}

// LastWins is a Keyed operator whose result for a key, after its records are processed in
// arrival order, depends on the last of them alone: Process of a record replaces the key's whole
// state whatever it held, sets no timer and emits nothing (dedup keep: last). In backlog the
// runtime may then drop a record before sorting it when a later record of the same key arrives
// (it holds each key's latest record in a small table, task/latest.go): the fold replays fewer
// records and writes the same state and outputs.
type LastWins interface {
	Keyed
	// LastWins reports whether the operator, as configured, has the property.
	LastWins() bool
}

// MemberReader is an operator whose results are made of a few top-level members of its input
// records (besides their keys and event times): ReadsMembers names them (ok false: it may read
// any). A writer that re-keys records for it may write only those (operators/plan, Project).
type MemberReader interface {
	ReadsMembers() (names []string, ok bool)
}
