package operators

import (
	"strings"
	"unsafe"
)

// Record is one decoded input record.
//
// A Record is owned by one task goroutine and is not safe for concurrent use. Key and Value
// may alias the Kafka record's memory or the Record's own scratch buffers; they are valid
// until the next Decode into the same Record (a Map stage rewrites Value into the Record's
// scratch). Callers that keep them longer must copy.
//
// Decode and Map keep an index of Value's top-level members so later stages look fields up
// without re-parsing. A Record built or changed by hand (Record{Key, Time, Value}) works too:
// the index is rebuilt whenever Value is a different slice (data pointer or length) from the
// one indexed. Overwriting Value's bytes in place, keeping the same slice, is not detected.
type Record struct {
	Key   []byte // group key (see Source)
	Time  int64  // event time, epoch ms
	Value []byte // JSON object

	members []member // top-level members of Value, valid while idxPtr/idxLen match Value
	idxPtr  *byte
	idxLen  int
	idxErr  error  // indexing error for Value, if any
	keyBuf  []byte // unescaped key field
	jsonKey []byte // unescaped record key (key_format: json)
	decBuf  []byte // the JSON of a value decoded from another format (avro)
	valBuf  [2][]byte
	valCur  int
}

// Error is a per-record failure: the runtime sends the record to the dead-letter topic with
// Reason in a header and carries on. It is a plain value, safe to share once returned.
type Error struct {
	Operator string // source or operator name
	Reason   string
}

func (e *Error) Error() string { return "operators: " + e.Operator + ": " + e.Reason }

// Release drops r's references to the memory it was decoded from (Key, Value and the index's
// identity), keeping its own scratch buffers for the next Decode; Key and Value are nil
// afterwards. A task calls it when a batch is done: without it a decoded Record pins the whole
// fetch response its last record came from (franz-go reads a fetch into one buffer) until its
// next Decode, and in a backlog, where the sorter holds most of the memory limit, pinned
// responses take the garbage collector's headroom.
func (r *Record) Release() {
	r.Key, r.Value, r.idxPtr, r.idxLen, r.idxErr = nil, nil, nil, 0, nil
}

// Set makes r the record key, t, value, as another Record held it after Decode and stages (a
// task's fork starts from what an earlier chain made of the record): r keeps no index of its
// earlier Value, and reads key and value, which the caller leaves unchanged until r's next
// Decode, Set or Release.
func (r *Record) Set(key []byte, t int64, value []byte) {
	r.Release()
	r.Key, r.Time, r.Value = key, t, value
}

// Members is the index of a Record's Value (its top-level members' offsets in it), kept beside a
// copy of the Value's bytes (a task's fork snapshots): valid for those bytes only.
type Members []member

// AppendMembers appends r's index of its current Value to dst, when r has one (a select writes
// its row with it; Decode and the expressions index a value as they read it); ok is false when r
// has none, or its Value is not a JSON object.
func (r *Record) AppendMembers(dst Members) (out Members, ok bool) {
	if r.idxPtr == nil || unsafe.SliceData(r.Value) != r.idxPtr || len(r.Value) != r.idxLen || r.idxErr != nil {
		return dst, false
	}
	return append(dst, r.members...), true
}

// SetIndexed is Set with m, the index AppendMembers gave of the value that value's bytes are a
// copy of: r reads value's members without scanning it again. r keeps a copy of m.
func (r *Record) SetIndexed(key []byte, t int64, value []byte, m Members) {
	r.Set(key, t, value)
	r.members = append(r.members[:0], m...)
	r.setIndexed(value, nil)
}

// setIndexed records that members describe v.
func (r *Record) setIndexed(v []byte, err error) {
	r.idxPtr, r.idxLen, r.idxErr = unsafe.SliceData(v), len(v), err
}

// index returns Value's top-level members, re-scanning Value if it is not the slice that was
// last indexed (identity is the slice's data pointer and length: a Record whose Value is
// overwritten in place with the same length, outside Decode, keeps a stale index).
func (r *Record) index() ([]member, error) {
	if unsafe.SliceData(r.Value) != r.idxPtr || len(r.Value) != r.idxLen || r.idxPtr == nil {
		var err error
		r.members, err = indexObject(r.Value, r.members)
		r.setIndexed(r.Value, err)
	}
	return r.members, r.idxErr
}

// top returns the raw value of top-level member name (later duplicates win).
func (r *Record) top(name string) (raw []byte, ok bool, err error) {
	idx, err := r.index()
	if err != nil {
		return nil, false, err
	}
	raw, ok = memberOf(r.Value, idx, name)
	return raw, ok, nil
}

// memberOf returns the raw value of member name of the object v whose members idx indexes
// (later duplicates win).
func memberOf(v []byte, idx []member, name string) (raw []byte, ok bool) {
	for k := len(idx) - 1; k >= 0; k-- {
		m := &idx[k]
		if m.esc {
			if nameEquals(v[m.ks:m.ke], true, name) {
				return v[m.vs:m.ve], true
			}
		} else if int(m.ke-m.ks) == len(name) && string(v[m.ks:m.ke]) == name {
			return v[m.vs:m.ve], true
		}
	}
	return nil, false
}

// path is a compiled field path: "a.b" is member b of the object in member a.
type path struct {
	text  string
	parts []string
}

func newPath(s string) path { return path{text: s, parts: strings.Split(s, ".")} }

// setIndexedValue installs a rewritten Value built in the buffer from scratchValue, with idx,
// the index of its members the writer made, and returns the index slice it replaced, for the
// writer's next value.
func (r *Record) setIndexedValue(v []byte, idx []member) []member {
	r.valBuf[r.valCur] = v
	r.Value = v
	old := r.members
	r.members = idx
	r.setIndexed(v, nil)
	return old
}

// lookup returns the raw JSON of the field at p. ok is false when a member is missing or an
// intermediate value is not an object. err is non-nil when Value is not a valid JSON object.
func (r *Record) lookup(p path) (raw []byte, ok bool, err error) {
	raw, ok, err = r.top(p.parts[0])
	for _, part := range p.parts[1:] {
		if !ok || len(raw) == 0 || raw[0] != '{' {
			return nil, false, err
		}
		raw, ok = findMember(raw, part)
	}
	return raw, ok, err
}

// scratchValue returns an empty buffer for a rewritten Value that does not alias the current
// Value.
func (r *Record) scratchValue() []byte {
	r.valCur ^= 1
	return r.valBuf[r.valCur][:0]
}

// setValue installs a rewritten Value built in the buffer from scratchValue and indexes it.
func (r *Record) setValue(v []byte) error {
	r.valBuf[r.valCur] = v
	r.Value = v
	var err error
	r.members, err = indexObject(v, r.members)
	r.setIndexed(v, err)
	return err
}

// AppendProjected appends to dst r's Value with only its top-level members named in names (as
// written, in its order, duplicates included), and reports whether it could: false when the
// Value is not a JSON object.
func (r *Record) AppendProjected(dst []byte, names []string) ([]byte, bool) {
	idx, err := r.index()
	if err != nil {
		return dst, false
	}
	return appendMembers(dst, r.Value, idx, names), true
}
