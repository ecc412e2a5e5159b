package sorter

import (
	"bytes"
	"encoding/binary"
	"slices"
	"unsafe"
)

// entry is one 32-byte index slot. Slots live at the back of their chunk; the record they
// point to lives at the front of the same chunk: uvarint key length, uvarint payload length,
// key, payload.
type entry struct {
	// prefix is the normalized key: big-endian key bytes [lcp, lcp+8) zero-padded, where lcp
	// is the chunk's common key prefix length (0 until the chunk is sorted).
	prefix uint64
	ts     int64
	off    int64
	pos    uint64 // byte offset of the record in the chunk; increases with insertion order
}

const entrySize = 32

// Compile-time check that entrySize is unsafe.Sizeof(entry{}): a negative constant would not
// convert to uintptr.
const _ = uintptr(entrySize-unsafe.Sizeof(entry{})) + uintptr(unsafe.Sizeof(entry{})-entrySize)

// prefixAt returns the big-endian uint64 of key[from:from+8], zero-padded.
func prefixAt(key []byte, from int) uint64 {
	k := key[from:]
	if len(k) >= 8 {
		return binary.BigEndian.Uint64(k)
	}
	var p uint64
	for i, c := range k {
		p |= uint64(c) << (56 - 8*uint(i))
	}
	return p
}

// uvarintLen is the encoded size of v as a uvarint.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// putUvarint is binary.PutUvarint with a fast path for one byte.
func putUvarint(b []byte, v uint64) int {
	if v < 0x80 {
		b[0] = byte(v)
		return 1
	}
	return binary.PutUvarint(b, v)
}

// lengths decodes the two length prefixes of the record at the start of b and returns them
// with the header size.
func lengths(b []byte) (kl, pl, hdr int) {
	if c := b[0]; c < 0x80 {
		kl = int(c)
		hdr = 1
	} else {
		v, n := binary.Uvarint(b)
		kl = int(v)
		hdr = n
	}
	if c := b[hdr]; c < 0x80 {
		pl = int(c)
		hdr++
	} else {
		v, n := binary.Uvarint(b[hdr:])
		pl = int(v)
		hdr += n
	}
	return kl, pl, hdr
}

// record decodes the record at pos in buf. The returned slices alias buf.
func record(buf []byte, pos uint64) (key, payload []byte) {
	b := buf[pos:]
	kl, pl, p := lengths(b)
	k := p + kl
	e := k + pl
	return b[p:k:k], b[k:e:e]
}

// recordKey is record without the payload.
func recordKey(buf []byte, pos uint64) []byte {
	b := buf[pos:]
	kl, _, p := lengths(b)
	return b[p : p+kl : p+kl]
}

// segSorter sorts the slots of one chunk by (key, ts, offset, insertion order).
type segSorter struct {
	buf []byte // the chunk's records
	// lcp: the length of the key bytes every slot it sorts has in common; the prefixes are the
	// 8 key bytes from there.
	lcp int
	// decisive: equal prefixes mean equal keys (all keys have the same length and fit in
	// lcp+8 bytes), so the arena is never touched.
	decisive bool
}

func (ss *segSorter) cmp(a, b entry) int {
	if a.prefix != b.prefix {
		if a.prefix < b.prefix {
			return -1
		}
		return 1
	}
	if !ss.decisive {
		if c := bytes.Compare(recordKey(ss.buf, a.pos), recordKey(ss.buf, b.pos)); c != 0 {
			return c
		}
	}
	switch {
	case a.ts != b.ts:
		if a.ts < b.ts {
			return -1
		}
		return 1
	case a.off != b.off:
		if a.off < b.off {
			return -1
		}
		return 1
	case a.pos != b.pos:
		if a.pos < b.pos {
			return -1
		}
		return 1
	}
	return 0
}

// normalize computes the chunk's common key prefix and rewrites the entries' prefixes to
// the 8 key bytes that follow it, so keys such as "customer-0000042" still sort on the
// fast path. It sets ss.lcp and ss.decisive.
func (ss *segSorter) normalize(seg []entry) {
	ss.normalizeFrom(seg, 0)
}

// normalizeFrom is normalize for slots whose keys have their first from bytes in common. It
// returns the shortest key's length, and false, having changed nothing, as soon as it meets a
// key shorter than from.
func (ss *segSorter) normalizeFrom(seg []entry, from int) (minLen int, ok bool) {
	if len(seg) == 0 {
		return 0, true
	}
	first := recordKey(ss.buf, seg[0].pos)
	lcp, minLen, maxLen := len(first), len(first), len(first)
	for i := 1; i < len(seg) && minLen >= from; i++ {
		k := recordKey(ss.buf, seg[i].pos)
		minLen, maxLen = min(minLen, len(k)), max(maxLen, len(k))
		if lcp > from {
			n := min(lcp, len(k))
			j := from
			for j+8 <= n && binary.LittleEndian.Uint64(k[j:]) == binary.LittleEndian.Uint64(first[j:]) {
				j += 8
			}
			for j < n && k[j] == first[j] {
				j++
			}
			lcp = j
		}
	}
	if minLen < from {
		return minLen, false
	}
	if lcp > 0 {
		for i := range seg {
			seg[i].prefix = prefixAt(recordKey(ss.buf, seg[i].pos), lcp)
		}
	}
	ss.lcp = lcp
	ss.decisive = minLen == maxLen && maxLen <= lcp+8
	return minLen, true
}

// sortSlots sorts a chunk's slots in place.
func sortSlots(buf []byte, seg []entry, radix bool) {
	ss := segSorter{buf: buf}
	ss.normalize(seg)
	if radix {
		ss.radix(seg, 56)
		return
	}
	slices.SortFunc(seg, ss.cmp)
}

// deeper sorts slots whose prefixes are all equal. Where the prefix was all key bytes (every
// key at least lcp+8 long), their keys share lcp+8 bytes, and it radix-sorts them again on the
// 8 key bytes after all the bytes they share: composite keys such as
// {"channel":"Apple","day":"2015-07-15","bidder":1234} tie on their first 8 bytes by the
// thousand, and comparing them whole took most of a chunk's sort. Otherwise (a key ends within
// the prefix, equal prefixes are equal keys, or few slots) the comparison sort finishes them.
func (ss *segSorter) deeper(es []entry) {
	if len(es) <= radixCutoff || ss.decisive {
		slices.SortFunc(es, ss.cmp)
		return
	}
	sub := segSorter{buf: ss.buf}
	minLen, ok := sub.normalizeFrom(es, ss.lcp+8)
	switch {
	case !ok:
		slices.SortFunc(es, ss.cmp)
	case minLen > sub.lcp:
		sub.radix(es, 56)
	default:
		// Every key is the same, or one ends where they stop agreeing: sub's prefixes and
		// decisive serve the comparison sort.
		slices.SortFunc(es, sub.cmp)
	}
}

// radixCutoff is the bucket size below which the radix sort hands over to insertion sort.
const radixCutoff = 24

// less is cmp < 0 with the prefix test inlined.
func (ss *segSorter) less(a, b *entry) bool {
	if a.prefix != b.prefix {
		return a.prefix < b.prefix
	}
	return ss.cmp(*a, *b) < 0
}

// insertion sorts a small bucket.
func (ss *segSorter) insertion(es []entry) {
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && ss.less(&es[j], &es[j-1]); j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}

// radix is an in-place MSD radix sort (American flag sort) on the prefix byte at shift,
// finishing small buckets with the comparison sort and full-prefix ties with deeper.
func (ss *segSorter) radix(es []entry, shift uint) {
	for {
		if len(es) <= radixCutoff {
			ss.insertion(es)
			return
		}
		var count [256]int
		for i := range es {
			count[byte(es[i].prefix>>shift)]++
		}
		if count[byte(es[0].prefix>>shift)] == len(es) {
			// One bucket: this byte does not discriminate; go to the next one.
			if shift == 0 {
				ss.deeper(es)
				return
			}
			shift -= 8
			continue
		}
		var next, end [256]int
		sum := 0
		for b := range count {
			next[b] = sum
			sum += count[b]
			end[b] = sum
		}
		for b := range 256 {
			for next[b] < end[b] {
				e := es[next[b]]
				d := int(byte(e.prefix >> shift))
				for d != b {
					es[next[d]], e = e, es[next[d]]
					next[d]++
					d = int(byte(e.prefix >> shift))
				}
				es[next[b]] = e
				next[b]++
			}
		}
		start := 0
		for b := range count {
			n := count[b]
			if n > 1 {
				bucket := es[start : start+n]
				if shift == 0 {
					ss.deeper(bucket)
				} else {
					ss.radix(bucket, shift-8)
				}
			}
			start += n
		}
		return
	}
}
