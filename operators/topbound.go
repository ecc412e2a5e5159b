package operators

import (
	"encoding/binary"
	"math"
)

// TopBoundMaxN is the largest n of a top whose writers keep a TopBound: a bound's slot holds n
// values.
const TopBoundMaxN = 64

// TopBound is what a re-keying writer keeps of a top it writes for (operators/task/combine.go):
// per key and window, the n best values of the records it passed on, so that it can drop a
// record that cannot enter the top. The top's reader sees every record passed on, in the
// writer's order, in the same partition of the repartition topic; so when n records passed on
// before r rank strictly before it (without ties: before it or equal, as equal values keep their
// arrival order), r's rank is past n there too, and the top would drop it. The bound counts a
// record only in the windows it surely enters: those still open at the watermark wm the writer
// gives (an upper bound of the reader's: see Admit); a window that may be closed there makes the
// record go on, since the reader must see it (it may enter, or be late and dead-lettered).
//
// A slot (SlotSize bytes, zero for a new key) holds a count (uint16, little-endian) and up to n
// values (16 bytes each) in rank order. Not safe for concurrent use.
type TopBound struct {
	top  *Top
	win  *Windows // nil: a top without windows
	ties bool
	key  []byte // scratch: Key's
}

// Bound returns the top's bound, or nil when n is above TopBoundMaxN.
func (t *Top) Bound() *TopBound {
	if t.n > TopBoundMaxN {
		return nil
	}
	return &TopBound{top: t}
}

// Bound returns the window top's bound, or nil when n is above TopBoundMaxN.
func (w *WindowTop) Bound() *TopBound {
	if w.top.n > TopBoundMaxN {
		return nil
	}
	return &TopBound{top: w.top, win: w.win, ties: w.ties}
}

// Windowed reports whether the top is over windows: the bound then rests on the watermark.
func (b *TopBound) Windowed() bool { return b.win != nil }

// SlotSize is the size of a key's slot.
func (b *TopBound) SlotSize() int { return 2 + 16*b.top.n }

// Admit reports whether the writer drops r, whose key is key (as the top would read it): in each
// of its windows (one, without windows) r is beaten by the n values of its slot, which slot(k)
// returns for the window's key k (key, then the window start as 8 bytes; nil: none yet) or
// creates (add). Otherwise r goes on, and its value enters the slot of each window it surely
// enters. wm must be at least the reader's watermark when it reads r. A record whose value the
// top's projection refuses goes on (the top dead-letters it).
func (b *TopBound) Admit(key []byte, r *Record, wm int64, slot, add func(k []byte) []byte) bool {
	v, ok := b.value(r)
	if !ok {
		return false
	}
	if b.win == nil {
		s := slot(key)
		if s != nil && b.beaten(s, v) {
			return true
		}
		if s == nil {
			s = add(key)
		}
		b.enter(s, v)
		return false
	}
	// Every window must be surely open, and beat r, for r to be dropped.
	drop := true
	last := floorDiv(r.Time, b.win.Advance) * b.win.Advance
	for start := last - b.win.Size + b.win.Advance; start <= last; start += b.win.Advance {
		if b.win.Close(start) <= wm {
			drop = false // may be closed at the reader
			continue
		}
		k := b.windowKey(key, start)
		if s := slot(k); s == nil || !b.beaten(s, v) {
			drop = false
		}
	}
	if drop {
		return true
	}
	for start := last - b.win.Size + b.win.Advance; start <= last; start += b.win.Advance {
		if b.win.Close(start) <= wm {
			continue
		}
		k := b.windowKey(key, start)
		s := slot(k)
		if s == nil {
			s = add(k)
		}
		b.enter(s, v)
	}
	return false
}

// AdmitReplacing is Admit of a record as its reader reads it (over windows, with no watermark:
// every window counts as open), that also reports, in a bound of one without windows or ties,
// whether r's value is now the one value of its key's slot (sole), and whether it replaced one
// (replaced): the record admitted before r for key then ranks strictly after r, so r leaves it
// no rank (a top of one would drop it for r; a max would never return it). A slot just made
// (the first value since the slots were reset) replaces nothing.
func (b *TopBound) AdmitReplacing(key []byte, r *Record, slot, add func(k []byte) []byte) (drop, sole, replaced bool) {
	if b.win != nil {
		return b.Admit(key, r, math.MinInt64, slot, add), false, false
	}
	v, ok := b.value(r)
	if !ok {
		return false, false, false
	}
	s := slot(key)
	if s != nil && b.beaten(s, v) {
		return true, false, false
	}
	sole = b.top.n == 1 && !b.ties
	replaced = sole && s != nil && binary.LittleEndian.Uint16(s) == 1
	if s == nil {
		s = add(key)
	}
	b.enter(s, v)
	return false, sole, replaced
}

// Beaten reports whether the slot of key (slot(key); a top without windows) leaves r no rank,
// without counting r: what Admit drops first, before anything else is asked of r.
func (b *TopBound) Beaten(key []byte, r *Record, slot func(k []byte) []byte) bool {
	v, ok := b.value(r)
	if !ok || b.win != nil {
		return false
	}
	s := slot(key)
	return s != nil && b.beaten(s, v)
}

// Member is the top-level member of a record whose value the top ranks, when its field is one
// ("" when it is a path into one).
func (b *TopBound) Member() string {
	if len(b.top.by.parts) != 1 {
		return ""
	}
	return b.top.by.parts[0]
}

// BeatenMember is Beaten of a record not written yet, whose Member is raw (its JSON text).
func (b *TopBound) BeatenMember(key, raw []byte, slot func(k []byte) []byte) bool {
	v, ok := rankValue(raw)
	if !ok || b.win != nil || len(b.top.by.parts) != 1 {
		return false
	}
	s := slot(key)
	return s != nil && b.beaten(s, v)
}

// EnterMember counts in the slot of key (slot(key), or add(key) when it has none) a record not
// written yet whose Member is raw, as Admit counts a record it passes on; false when raw is no
// value the top ranks (nothing counted).
func (b *TopBound) EnterMember(key, raw []byte, slot, add func(k []byte) []byte) bool {
	v, ok := rankValue(raw)
	if !ok || b.win != nil || len(b.top.by.parts) != 1 {
		return false
	}
	s := slot(key)
	if s == nil {
		s = add(key)
	}
	b.enter(s, v)
	return true
}

// value returns r's value of the top's field, if the top's projection would take it.
func (b *TopBound) value(r *Record) (dec, bool) {
	raw, ok, err := r.lookup(b.top.by)
	if err != nil || !ok {
		return dec{}, false
	}
	return rankValue(raw)
}

// rankValue returns the value of a top's field of JSON text raw, if the top's projection would
// take it: a number.
func rankValue(raw []byte) (dec, bool) {
	if len(raw) == 0 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return dec{}, false
	}
	v, err := parseDecimal(raw)
	return v, err == nil
}

// windowKey returns key with the window's start after it (in b's scratch).
func (b *TopBound) windowKey(key []byte, start int64) []byte {
	b.key = binary.BigEndian.AppendUint64(append(b.key[:0], key...), uint64(start))
	return b.key
}

// beaten reports whether the slot's values leave no rank of n for v: n of them rank strictly
// before it, or (without ties) before it or equal.
func (b *TopBound) beaten(s []byte, v dec) bool {
	cnt := int(binary.LittleEndian.Uint16(s))
	if cnt < b.top.n {
		return false
	}
	worst := loadDec(s[2+16*(cnt-1):])
	c := worst.cmp(v)
	if !b.top.desc {
		c = -c
	}
	return c > 0 || c == 0 && !b.ties
}

// enter puts v into the slot's n best values, if it is among them.
func (b *TopBound) enter(s []byte, v dec) {
	cnt := int(binary.LittleEndian.Uint16(s))
	at := cnt
	for i := range cnt {
		c := v.cmp(loadDec(s[2+16*i:]))
		if b.top.desc && c > 0 || !b.top.desc && c < 0 {
			at = i
			break
		}
	}
	if at >= b.top.n {
		return
	}
	if cnt < b.top.n {
		cnt++
	}
	copy(s[2+16*(at+1):2+16*cnt], s[2+16*at:])
	storeDec(s[2+16*at:], v)
	binary.LittleEndian.PutUint16(s, uint16(cnt))
}

// Bound returns the bound of an aggregate whose one field is the max or the min of a number
// (no where, no windows, no retractions, one input), as a top of one without ties: its state
// and its results depend on the best value of its records alone (and on having one), so a
// writer may drop a record that a record it passed on before for the same key beats or equals.
// Nil for any other aggregate.
func (a *Aggregate) Bound() *TopBound {
	if len(a.specs) != 1 || a.windows != nil || a.window != "" || a.retract || len(a.inputs) > 1 {
		return nil
	}
	s := &a.specs[0]
	if s.kind != aggMin && s.kind != aggMax || s.where >= 0 || s.str >= 0 || len(a.fields) != 1 {
		return nil
	}
	return &TopBound{top: &Top{name: a.name, n: 1, by: a.fields[0], desc: s.kind == aggMax}}
}
