package task

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-dev/sluice/changelog"
	"github.com/sluice-dev/sluice/changelog/codec"
	"github.com/sluice-dev/sluice/operators"
	"github.com/sluice-dev/sluice/operators/plan"
	"github.com/sluice-dev/sluice/state"
)

// A keyed operator's state bytes mean what its layout (operators.Layout: the state format and
// the fields) says. Beside each operator's state for a partition, the namespace
// "<operator>#layout" holds the layout the state was written under: its fingerprint and its text.
// New checks it before the task touches the state, and every changelog record carries the
// fingerprint (codec.HeaderLayout) so that a restore checks it too. A config whose layout
// differs from the stored one refuses to start (*LayoutError) instead of reading the old bytes
// as new ones, or treating them as missing: changing an aggregate's fields must never restart
// its totals silently. `sluice reset` deletes the operator's state to start over.

// ErrLayout is wrapped by *LayoutError (test with errors.Is).
var ErrLayout = errors.New("task: state layout changed")

// LayoutError is returned by New when an operator's stored state was written under another
// layout than the config's (or, for a state of a sluice without layout fingerprints, does not
// fit it), and by Process and Checkpoint for a stored state of the wrong size.
type LayoutError struct {
	Operator  string
	Partition int32
	Stored    string // the stored layout's text; "" when unknown (see Detail)
	Current   string // the config's layout text
	Detail    string // what is known of the stored state when Stored is ""
	Changelog string // the operator's changelog topic
}

func (e *LayoutError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: operator %s, partition %d: ", ErrLayout, e.Operator, e.Partition)
	if e.Stored != "" {
		b.WriteString("the stored state was written under another layout")
		if d := layoutDiff(e.Stored, e.Current); d != "" {
			b.WriteString(" (" + d + ")")
		}
		fmt.Fprintf(&b, ": stored: %s; this config: %s", e.Stored, e.Current)
	} else {
		fmt.Fprintf(&b, "the stored state does not fit this config's layout (%s): %s", e.Current, e.Detail)
	}
	b.WriteString("; ")
	b.WriteString(changelog.ResetHint(e.Operator, e.Changelog))
	return b.String()
}

// Unwrap returns ErrLayout.
func (e *LayoutError) Unwrap() error { return ErrLayout }

// layoutDiff says what changed from layout text a to b: "state format v1 -> v2", "removed x",
// "added y"; "" when it cannot tell.
func layoutDiff(a, b string) string {
	la, ok1 := operators.ParseLayout(a)
	lb, ok2 := operators.ParseLayout(b)
	if !ok1 || !ok2 {
		return ""
	}
	var out []string
	if la.Kind != lb.Kind {
		out = append(out, fmt.Sprintf("operator kind %s -> %s", la.Kind, lb.Kind))
	} else if la.Version != lb.Version {
		out = append(out, fmt.Sprintf("state format v%d -> v%d", la.Version, lb.Version))
	}
	var removed, added []string
	for _, p := range la.Parts {
		if !slices.Contains(lb.Parts, p) {
			removed = append(removed, p)
		}
	}
	for _, p := range lb.Parts {
		if !slices.Contains(la.Parts, p) {
			added = append(added, p)
		}
	}
	if len(removed) > 0 {
		out = append(out, "removed "+strings.Join(removed, " "))
	}
	if len(added) > 0 {
		out = append(out, "added "+strings.Join(added, " "))
	}
	return strings.Join(out, ", ")
}

// OperatorNamespaces returns the namespaces of st that hold operator op's state: op's own (one per
// partition) and its reserved ones ("<op>#pending", "<op>#layout"), sorted. A reset drops them.
func OperatorNamespaces(st state.Store, op string) ([]state.Namespace, error) {
	all, err := st.Namespaces()
	if err != nil {
		return nil, err
	}
	var out []state.Namespace
	for _, ns := range all {
		if codec.OwnedBy(ns, op) {
			out = append(out, ns)
		}
	}
	return out, nil
}

// layout is a keyed chain's state layout, with the changelog headers that carry its fingerprint.
// The header slices are shared by every changelog record of the chain and never modified.
type layout struct {
	fingerprint, text string
	accepted          []string           // the fingerprints of the layouts it reads as its own
	headers           []kgo.RecordHeader // codec.HeaderLayout
	pendingHeaders    []kgo.RecordHeader // codec.HeaderPending and codec.HeaderLayout
}

func newLayout(l operators.Layout) *layout {
	fp := l.Fingerprint()
	headers, pending := codec.ChangelogHeaders(fp)
	return &layout{fingerprint: fp, text: l.String(), accepted: l.Accepted(), headers: headers, pendingHeaders: pending}
}

// changelogHeaders returns the headers of the chain's changelog records: the layout fingerprint,
// and the pending mark for a backlog checkpoint's records. No allocation.
func (c *chain) changelogHeaders(pending bool) []kgo.RecordHeader {
	if pending {
		return c.layout.pendingHeaders
	}
	return c.layout.headers
}

// checkLayouts checks every keyed chain's stored layout against the config's (New calls it
// before the state is used).
func (t *Task) checkLayouts() error {
	for _, c := range t.chains {
		if c.ops.Keyed() {
			if err := t.checkLayout(c); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkLayout compares the chain's stored layout with the config's:
//   - equal: nothing to do;
//   - none stored and no state: a new operator or partition, the layout is written;
//   - none stored, but state (of a sluice without layout fingerprints): accepted, and the layout
//     written, if a sample state is valid under the config's layout; else a *LayoutError;
//   - another layout stored: a *LayoutError if there is state; with none, nothing can be misread
//     and the config's layout replaces it.
func (t *Task) checkLayout(c *chain) error {
	c.layout = newLayout(spec(c.ops).Layout())
	lns := codec.LayoutNamespace(c.ns)
	st := t.d.Store
	fp, stored, err := st.Get(lns, codec.LayoutFingerprintKey, nil)
	if err != nil {
		return fmt.Errorf("task %d: layout: %w", t.partition, err)
	}
	if stored && string(fp) == c.layout.fingerprint {
		return nil
	}
	accepted := stored && slices.Contains(c.layout.accepted, string(fp))
	sample, has, err := firstValue(st, c.ns)
	if err != nil {
		return fmt.Errorf("task %d: layout: %w", t.partition, err)
	}
	switch {
	case has && stored && !accepted:
		text, _, err := st.Get(lns, codec.LayoutTextKey, nil)
		if err != nil {
			return fmt.Errorf("task %d: layout: %w", t.partition, err)
		}
		e := t.layoutError(c)
		if e.Stored = string(text); e.Stored == "" {
			e.Detail = "a layout with fingerprint " + string(fp)
		}
		return e
	case has && !spec(c.ops).ValidState(sample):
		e := t.layoutError(c)
		e.Detail = fmt.Sprintf("it was written by a sluice without layout fingerprints, and a sampled state is %d bytes, %s",
			len(sample), stateSizes(c.ops))
		return e
	}
	switch {
	case accepted:
		// Its records from now on are under this layout: a config that reads more of them
		// than it keeps is refused (it does not accept this one).
		t.log.Info("state layout replaced (this config reads the stored state as its own)", "operator", c.ns.Operator, "layout", c.layout.text, "previous", string(fp))
	case stored:
		t.log.Info("state layout replaced (the operator has no state here yet)", "operator", c.ns.Operator, "fingerprint", c.layout.fingerprint, "previous", string(fp))
	}
	b := st.NewBatch()
	defer b.Close()
	if err := b.Set(lns, codec.LayoutFingerprintKey, []byte(c.layout.fingerprint)); err != nil {
		return err
	}
	if err := b.Set(lns, codec.LayoutTextKey, []byte(c.layout.text)); err != nil {
		return err
	}
	if err := b.Commit(); err != nil {
		return fmt.Errorf("task %d: layout: %w", t.partition, err)
	}
	return nil
}

func (t *Task) layoutError(c *chain) *LayoutError {
	return &LayoutError{Operator: c.ns.Operator, Partition: t.partition, Current: c.layout.text, Changelog: c.plan.Changelog}
}

// badState is the error for a stored state of key whose size does not fit the chain's layout
// (which checkLayout makes impossible short of a corrupt store: it is never read as empty).
func (t *Task) badState(c *chain, key, val []byte) error {
	e := t.layoutError(c)
	e.Detail = fmt.Sprintf("the state of key %q is %d bytes, %s", key, len(val), stateSizes(c.ops))
	return e
}

// firstValue returns a copy of the first value of ns, if any.
func firstValue(st state.Store, ns state.Namespace) ([]byte, bool, error) {
	var v []byte
	found := errors.New("found")
	err := st.Scan(ns, func(_, val []byte) error {
		v = append([]byte{}, val...)
		return found
	})
	if errors.Is(err, found) {
		return v, true, nil
	}
	return nil, false, err
}

// StateChecks validate the changelog records a restore replays against the plan's keyed
// operators: their layout fingerprints and their states. Build them with NewStateChecks; safe
// for concurrent use (they only read the compiled operators).
type StateChecks map[string]stateSpec

// stateSpec is what a restore checks a keyed operator's stored values against.
type stateSpec interface {
	Layout() operators.Layout
	ValidState([]byte) bool
}

// stateSizes says what sizes the chain's states have, for an error about one that has another.
func stateSizes(ops *plan.Ops) string {
	if ops.Kop != nil {
		return "which is not a state of this layout"
	}
	return fmt.Sprintf("where this layout's are %d", ops.Agg.StateSize())
}

// spec returns the chain's state spec: the aggregate's, or a Keyed operator's with the timer
// prefix the runtime stores before its states.
//
// An operator keyed in its input's partitions (plan.Ops.LocalKey) has its keys in other
// partitions than with a repartition topic: its layout says so (inputPartitioned), so that a
// state written the other way is refused rather than read in the wrong partition.
func spec(ops *plan.Ops) stateSpec {
	var s stateSpec = ops.Agg
	if ops.Kop != nil {
		k := keyedState{layout: ops.Kop.Layout(), valid: ops.Kop.ValidState}
		if r, ok := ops.Kop.(rowsLog); ok && r.OutputChangelog() {
			k.gather = r.GatherRow
		}
		s = k
	}
	if ops.LocalKey != nil {
		return inputPartitioned{s}
	}
	return s
}

// inputPartitioned is the state spec of an operator keyed in its input's partitions: its
// operator's, with the layout part "partitions=input".
type inputPartitioned struct{ stateSpec }

func (s inputPartitioned) Layout() operators.Layout {
	l := s.stateSpec.Layout()
	l.Parts = append(slices.Clip(l.Parts), "partitions=input")
	l.Accepts = slices.Clone(l.Accepts)
	for i := range l.Accepts {
		l.Accepts[i].Parts = append(slices.Clip(l.Accepts[i].Parts), "partitions=input")
	}
	return l
}

// specOf returns the operator's own spec under an inputPartitioned one.
func specOf(s stateSpec) stateSpec {
	if p, ok := s.(inputPartitioned); ok {
		return p.stateSpec
	}
	return s
}

// NewStateChecks compiles the plan's keyed operators for restore checks.
func NewStateChecks(p *plan.Plan) (StateChecks, error) {
	s := StateChecks{}
	for _, c := range p.Chains {
		if c.Keyed == nil {
			continue
		}
		ops, err := c.Build(nil, nil)
		if err != nil {
			return nil, err
		}
		s[c.Keyed.Name] = spec(ops)
	}
	return s, nil
}

// Valid reports whether val is a state of operator op (an operator it does not know accepts
// everything). For changelog.Restorer.Valid.
func (s StateChecks) Valid(op string, val []byte) bool {
	a, ok := s[op]
	return !ok || a.ValidState(val)
}

// resultsLog is an aggregate whose results may be its changelog (changelog: output).
type resultsLog interface {
	OutputChangelog() bool
	StateOf(key, val, dst []byte) ([]byte, error)
}

// Decode returns the state a changelog value of operator op stands for: the value itself, or,
// for an aggregate whose results are its changelog, the state rebuilt from its result. For
// changelog.Restorer.Decode.
func (s StateChecks) Decode(op string, key, val []byte) ([]byte, error) {
	if r, ok := specOf(s[op]).(resultsLog); ok && r.OutputChangelog() {
		return r.StateOf(key, val, nil)
	}
	return val, nil
}

// rowsLog is a keyed operator whose rows may be its changelog, several to a key's state (a top
// with changelog: output).
type rowsLog interface {
	OutputChangelog() bool
	GatherRow(key, rowKey, row, old, dst []byte) ([]byte, error)
}

// Gather puts a row of operator op (a keyed operator whose rows are its changelog) back into
// the state of its key (its codec.HeaderKey), whose state so far old returns; ok false for the
// other operators' records, which are whole states. For changelog.Restorer.Gather.
func (s StateChecks) Gather(op string, rec *kgo.Record, old func(key []byte) ([]byte, error)) (key, st []byte, ok bool, err error) {
	k, isKeyed := specOf(s[op]).(keyedState)
	if !isKeyed || k.gather == nil {
		return nil, nil, false, nil
	}
	key = codec.Header(rec, codec.HeaderKey)
	switch {
	case key == nil:
		return nil, nil, true, fmt.Errorf("a row without its key's header %s", codec.HeaderKey)
	case rec.Value == nil:
		return nil, nil, true, errors.New("a tombstone (the operator never deletes a row)")
	}
	prev, err := old(key)
	if err != nil {
		return nil, nil, true, err
	}
	var top []byte
	if prev != nil {
		var valid bool
		if top, valid = codec.KeyedState(prev); !valid {
			return nil, nil, true, fmt.Errorf("key %q: stored state is not a keyed state", key)
		}
	}
	if top, err = k.gather(key, rec.Key, rec.Value, top, nil); err != nil {
		return nil, nil, true, err
	}
	return key, codec.AppendKeyed(nil, false, 0, top), true, nil
}

// Layout returns operator op's layout fingerprint and text ("" for an operator it does not
// know). For changelog.Restorer.Layout.
func (s StateChecks) Layout(op string) (fingerprint, text string) {
	a, ok := s[op]
	if !ok {
		return "", ""
	}
	l := a.Layout()
	return l.Fingerprint(), l.String()
}

// Accepted returns the fingerprints of the other layouts whose states operator op reads as its
// own (operators.Layout.Accepts). For changelog.Restorer.Accepted.
func (s StateChecks) Accepted(op string) []string {
	a, ok := s[op]
	if !ok {
		return nil
	}
	return a.Layout().Accepted()
}
