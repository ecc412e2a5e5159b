package codec

import (
	"encoding/binary"
	"fmt"

	"github.com/sluice-dev/sluice/state"
)

// KeyedPrefixSize is the size of the timer prefix of a Keyed operator's stored value.
const KeyedPrefixSize = 9

// AppendKeyed appends to dst the stored value of a Keyed operator's key (in its namespace and
// its changelog): a flag (1 when the key has a timer, else 0), the timer (8 bytes, big-endian;
// written as given even without the flag), then the operator's state. The timer travels with
// the state so that a restore from the changelog rebuilds the timer namespace.
func AppendKeyed(dst []byte, hasTimer bool, timer int64, st []byte) []byte {
	flag := byte(0)
	if hasTimer {
		flag = 1
	}
	dst = append(dst, flag)
	dst = binary.BigEndian.AppendUint64(dst, uint64(timer))
	return append(dst, st...)
}

// ParseKeyed decodes a value made by AppendKeyed; st aliases v. A value without a valid timer
// prefix is an error wrapping state.ErrCorrupt.
func ParseKeyed(v []byte) (hasTimer bool, timer int64, st []byte, err error) {
	if len(v) < KeyedPrefixSize || v[0] > 1 {
		return false, 0, nil, fmt.Errorf("%w: keyed state of %d bytes without its timer prefix", state.ErrCorrupt, len(v))
	}
	return v[0] == 1, int64(binary.BigEndian.Uint64(v[1:])), v[KeyedPrefixSize:], nil
}

// KeyedState returns the operator's state of a value made by AppendKeyed (aliasing v); ok is
// false when v has no valid timer prefix. It does not allocate.
func KeyedState(v []byte) (st []byte, ok bool) {
	if len(v) < KeyedPrefixSize || v[0] > 1 {
		return nil, false
	}
	return v[KeyedPrefixSize:], true
}

// WatermarkSize is the size of a watermark value.
const WatermarkSize = 8

// AppendWatermark appends to dst the value of a committed watermark (under WatermarkKey or an
// InputWatermarkKey): the event time in ms, 8 bytes, big-endian.
func AppendWatermark(dst []byte, wm int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(wm))
}

// ParseWatermark decodes a value made by AppendWatermark; ok is false unless v is 8 bytes.
func ParseWatermark(v []byte) (wm int64, ok bool) {
	if len(v) != WatermarkSize {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

// AppendWriterMark appends to dst the value of a writer's mark (under a WriterWatermarkKey):
// the watermark the writer announced last (AppendWatermark), and a ninth byte 1 when it said
// since that its inputs are idle.
func AppendWriterMark(dst []byte, wm int64, idle bool) []byte {
	dst = AppendWatermark(dst, wm)
	if idle {
		dst = append(dst, 1)
	}
	return dst
}

// ParseWriterMark decodes a value made by AppendWriterMark; ok is false unless v is 8 bytes,
// or 9 ending in 1.
func ParseWriterMark(v []byte) (wm int64, idle bool, ok bool) {
	if len(v) != WatermarkSize && !(len(v) == WatermarkSize+1 && v[WatermarkSize] == 1) {
		return 0, false, false
	}
	return int64(binary.BigEndian.Uint64(v)), len(v) == WatermarkSize+1, true
}
