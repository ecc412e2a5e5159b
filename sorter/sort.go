package sorter

import (
	"bytes"
	"encoding/binary"
	"slices"
)

// entry is one 32-byte slot of the in-memory index. The record it points to lives in an
// arena chunk: uvarint key length, uvarint payload length, key, payload.
type entry struct {
	// prefix is the normalized key: big-endian key bytes [lcp, lcp+8) zero-padded, where lcp
	// is the segment's common key prefix length (0 until the segment is sorted).
	prefix uint64
	ts     int64
	off    int64
	pos    uint64 // arena chunk index << 32 | byte offset in the chunk; insertion order
}

const entrySize = 32 // unsafe.Sizeof(entry{})

func makePos(chunk, off int) uint64 { return uint64(chunk)<<32 | uint64(off) }

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

// record decodes the record at pos. The returned slices alias the arena.
func record(chunks [][]byte, pos uint64) (key, payload []byte) {
	c := chunks[pos>>32]
	p := int(uint32(pos))
	var kl, pl int
	if b := c[p]; b < 0x80 {
		kl = int(b)
		p++
	} else {
		v, n := binary.Uvarint(c[p:])
		kl = int(v)
		p += n
	}
	if b := c[p]; b < 0x80 {
		pl = int(b)
		p++
	} else {
		v, n := binary.Uvarint(c[p:])
		pl = int(v)
		p += n
	}
	k := p + kl
	e := k + pl
	return c[p:k:k], c[k:e:e]
}

// recordKey is record without the payload.
func recordKey(chunks [][]byte, pos uint64) []byte {
	k, _ := record(chunks, pos)
	return k
}

// segSorter sorts one index segment by (key, ts, offset, insertion order).
type segSorter struct {
	chunks [][]byte
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
		if c := bytes.Compare(recordKey(ss.chunks, a.pos), recordKey(ss.chunks, b.pos)); c != 0 {
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

// normalize computes the segment's common key prefix and rewrites the entries' prefixes to
// the 8 key bytes that follow it, so keys such as "customer-0000042" still sort on the
// fast path. It sets ss.decisive.
func (ss *segSorter) normalize(seg []entry) {
	if len(seg) == 0 {
		return
	}
	first := recordKey(ss.chunks, seg[0].pos)
	lcp, minLen, maxLen := len(first), len(first), len(first)
	for i := 1; i < len(seg); i++ {
		k := recordKey(ss.chunks, seg[i].pos)
		if len(k) < minLen {
			minLen = len(k)
		}
		if len(k) > maxLen {
			maxLen = len(k)
		}
		if lcp > 0 {
			n := min(lcp, len(k))
			j := 0
			for j < n && k[j] == first[j] {
				j++
			}
			lcp = j
		}
	}
	if lcp > 0 {
		for i := range seg {
			seg[i].prefix = prefixAt(recordKey(ss.chunks, seg[i].pos), lcp)
		}
	}
	ss.decisive = minLen == maxLen && maxLen <= lcp+8
}

// sortSegment sorts seg in place.
func sortSegment(chunks [][]byte, seg []entry, radix bool) {
	ss := segSorter{chunks: chunks}
	ss.normalize(seg)
	if radix {
		ss.radix(seg, 56)
		return
	}
	slices.SortFunc(seg, ss.cmp)
}

// radixCutoff is the bucket size below which the radix sort hands over to a comparison sort.
const radixCutoff = 64

// radix is an in-place MSD radix sort (American flag sort) on the prefix byte at shift,
// finishing small buckets and full-prefix ties with the comparison sort.
func (ss *segSorter) radix(es []entry, shift uint) {
	for {
		if len(es) <= radixCutoff {
			slices.SortFunc(es, ss.cmp)
			return
		}
		var count [256]int
		for i := range es {
			count[byte(es[i].prefix>>shift)]++
		}
		if count[byte(es[0].prefix>>shift)] == len(es) {
			// One bucket: this byte does not discriminate; go to the next one.
			if shift == 0 {
				slices.SortFunc(es, ss.cmp)
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
					slices.SortFunc(bucket, ss.cmp)
				} else {
					ss.radix(bucket, shift-8)
				}
			}
			start += n
		}
		return
	}
}
