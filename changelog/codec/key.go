package codec

import (
	"bytes"
	"encoding/binary"
	"strconv"
)

// watermarkKey is WatermarkKey as a constant.
const watermarkKey = "wm"

// WatermarkKey is the key of an operator's committed watermark, in WatermarkNamespace and in
// its changelog (a record with HeaderWatermark). It is shorter than any window key, so
// compaction keeps it apart from the states. The slice is shared: never modify it.
var WatermarkKey = []byte(watermarkKey)

// InputWatermarkKey is the key of input i's watermark beside the operator's (WatermarkKey), in
// WatermarkNamespace and the changelog of an operator of several inputs: "wm/<i>".
func InputWatermarkKey(i int) []byte {
	return strconv.AppendInt([]byte(watermarkKey+"/"), int64(i), 10)
}

// WriterWatermarkKey is the key of the mark writer w announced to input i (a reader of an
// internal topic that carries event time), beside the operator's, in WatermarkNamespace and
// the changelog: "wm/<i>/<w>". Its value is a writer mark (AppendWriterMark).
func WriterWatermarkKey(i, w int) []byte {
	k := InputWatermarkKey(i)
	k = append(k, '/')
	return strconv.AppendInt(k, int64(w), 10)
}

// IsWatermarkKey reports whether k is the key of a watermark record: WatermarkKey (the
// operator's), InputWatermarkKey (an operator of several inputs), or WriterWatermarkKey (what a
// writer of the input's internal topic announced), with indexes of 1 to 4 decimal digits.
func IsWatermarkKey(k []byte) bool {
	if string(k) == watermarkKey {
		return true
	}
	rest, ok := bytes.CutPrefix(k, []byte(watermarkKey+"/"))
	if !ok {
		return false
	}
	for n := 0; ; n++ {
		if n == 2 {
			return false
		}
		part, tail, more := bytes.Cut(rest, []byte{'/'})
		if len(part) == 0 || len(part) > 4 {
			return false
		}
		for _, c := range part {
			if c < '0' || c > '9' {
				return false
			}
		}
		if !more {
			return true
		}
		rest = tail
	}
}

// IsWriterWatermarkKey reports whether k is a WriterWatermarkKey (IsWatermarkKey, with two
// indexes).
func IsWriterWatermarkKey(k []byte) bool {
	return IsWatermarkKey(k) && bytes.Count(k, []byte{'/'}) == 2
}

// TimerKeySize is the number of bytes a timer key adds to its key.
const TimerKeySize = 8

// AppendTimerKey appends to dst the timer key of key (a window key, or a Keyed operator's key)
// due at at: the time (big-endian, sign bit flipped, so byte order is time order), then key.
func AppendTimerKey(dst []byte, at int64, key []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(at)^(1<<63))
	return append(dst, key...)
}

// SplitTimerKey returns the time and key of a timer key made by AppendTimerKey (key aliases
// tk); ok is false when tk is too short.
func SplitTimerKey(tk []byte) (at int64, key []byte, ok bool) {
	if len(tk) < TimerKeySize {
		return 0, nil, false
	}
	return int64(binary.BigEndian.Uint64(tk) ^ (1 << 63)), tk[TimerKeySize:], true
}

// WindowKeySize is the number of bytes a window start adds to a key.
const WindowKeySize = 8

// AppendWindowKey appends to dst the state key of key's window starting at start: key, then
// the start (big-endian with the sign bit flipped, so byte order is time order). The runtime
// caches, sorts, pre-aggregates, stores and changelogs it as any other key.
func AppendWindowKey(dst, key []byte, start int64) []byte {
	dst = append(dst, key...)
	return binary.BigEndian.AppendUint64(dst, uint64(start)^(1<<63))
}

// SplitWindowKey returns the group key and window start of a window key made by
// AppendWindowKey (key aliases wk, capped so appending to it copies); ok is false when wk is
// too short.
func SplitWindowKey(wk []byte) (key []byte, start int64, ok bool) {
	if len(wk) < WindowKeySize {
		return nil, 0, false
	}
	n := len(wk) - WindowKeySize
	return wk[:n:n], int64(binary.BigEndian.Uint64(wk[n:]) ^ (1 << 63)), true
}
