package avro

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/operators/internal/jsonstr"
)

// Limits that keep a hostile record from costing more than its size suggests.
const (
	maxDepth = 256     // nested records, arrays, maps and unions
	maxItems = 1 << 20 // items of zero-size types (null, empty records) in one value
)

// decoder walks one Avro binary value along a compiled writer schema and appends its JSON.
type decoder struct {
	b     []byte
	pos   int
	zeros int // items of zero-size types decoded so far
}

// appendJSON appends the JSON of the Avro binary value b (without a header) written with
// schema n. Every byte of b must be used.
func appendJSON(dst []byte, n *node, b []byte) ([]byte, error) {
	d := decoder{b: b}
	dst, err := d.value(dst, n, 0)
	if err != nil {
		return dst, err
	}
	if d.pos != len(d.b) {
		return dst, fmt.Errorf("%d bytes left after the value", len(d.b)-d.pos)
	}
	return dst, nil
}

var errShort = fmt.Errorf("truncated value")

func (d *decoder) long() (int64, error) {
	var u uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if d.pos >= len(d.b) {
			return 0, errShort
		}
		c := d.b[d.pos]
		d.pos++
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			if shift == 63 && c > 1 {
				break
			}
			return int64(u>>1) ^ -int64(u&1), nil
		}
	}
	return 0, fmt.Errorf("varint longer than 64 bits")
}

func (d *decoder) int() (int32, error) {
	v, err := d.long()
	if err != nil {
		return 0, err
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, fmt.Errorf("int %d out of range", v)
	}
	return int32(v), nil
}

// bytes reads a length-prefixed byte string, aliasing b.
func (d *decoder) bytes() ([]byte, error) {
	n, err := d.long()
	if err != nil {
		return nil, err
	}
	if n < 0 || n > int64(len(d.b)-d.pos) {
		return nil, fmt.Errorf("length %d out of range (%d bytes left)", n, len(d.b)-d.pos)
	}
	s := d.b[d.pos : d.pos+int(n)]
	d.pos += int(n)
	return s, nil
}

func (d *decoder) fixed(n int) ([]byte, error) {
	if n > len(d.b)-d.pos {
		return nil, errShort
	}
	s := d.b[d.pos : d.pos+n]
	d.pos += n
	return s, nil
}

// block reads an array or map block header: the item count (0 ends the value). A negative
// count is followed by the block's size in bytes, which is checked and otherwise ignored.
func (d *decoder) block(elem *node, perItem int) (int, error) {
	c, err := d.long()
	if err != nil {
		return 0, err
	}
	if c < 0 {
		if c == math.MinInt64 {
			return 0, fmt.Errorf("block count out of range")
		}
		c = -c
		size, err := d.long()
		if err != nil {
			return 0, err
		}
		if size < 0 || size > int64(len(d.b)-d.pos) {
			return 0, fmt.Errorf("block size %d out of range", size)
		}
	}
	left := int64(len(d.b) - d.pos)
	if min := int64(elem.minSize + perItem); min > 0 {
		if c > left/min {
			return 0, fmt.Errorf("block of %d items in %d bytes", c, left)
		}
	} else {
		if c > int64(maxItems-d.zeros) {
			return 0, fmt.Errorf("more than %d items of an empty type", maxItems)
		}
		d.zeros += int(c)
	}
	return int(c), nil
}

func (d *decoder) value(dst []byte, n *node, depth int) ([]byte, error) {
	switch n.kind {
	case kNull:
		return append(dst, "null"...), nil
	case kBool:
		b, err := d.fixed(1)
		if err != nil {
			return dst, err
		}
		switch b[0] {
		case 0:
			return append(dst, "false"...), nil
		case 1:
			return append(dst, "true"...), nil
		}
		return dst, fmt.Errorf("boolean byte %d", b[0])
	case kInt:
		v, err := d.int()
		if err != nil {
			return dst, err
		}
		return strconv.AppendInt(dst, int64(v), 10), nil
	case kLong:
		v, err := d.long()
		if err != nil {
			return dst, err
		}
		return strconv.AppendInt(dst, v, 10), nil
	case kMicros:
		v, err := d.long()
		if err != nil {
			return dst, err
		}
		return appendScaledInt(dst, v, 3), nil
	case kFloat:
		b, err := d.fixed(4)
		if err != nil {
			return dst, err
		}
		return appendFloat(dst, float64(math.Float32frombits(binary.LittleEndian.Uint32(b))), 32), nil
	case kDouble:
		b, err := d.fixed(8)
		if err != nil {
			return dst, err
		}
		return appendFloat(dst, math.Float64frombits(binary.LittleEndian.Uint64(b)), 64), nil
	case kString:
		s, err := d.bytes()
		if err != nil {
			return dst, err
		}
		if !utf8.Valid(s) {
			return dst, fmt.Errorf("string is not valid UTF-8")
		}
		return jsonstr.AppendBytes(dst, s), nil
	case kBytes:
		s, err := d.bytes()
		if err != nil {
			return dst, err
		}
		return appendBase64(dst, s), nil
	case kFixed:
		s, err := d.fixed(n.size)
		if err != nil {
			return dst, err
		}
		return appendBase64(dst, s), nil
	case kDecimalBytes, kDecimalFixed:
		var s []byte
		var err error
		if n.kind == kDecimalBytes {
			s, err = d.bytes()
		} else {
			s, err = d.fixed(n.size)
		}
		if err != nil {
			return dst, err
		}
		if len(s) <= 8 {
			var v int64
			if len(s) > 0 && s[0]&0x80 != 0 {
				v = -1
			}
			for _, c := range s {
				v = v<<8 | int64(c)
			}
			return appendScaledInt(dst, v, n.scale), nil
		}
		return appendScaled(dst, twosComplement(s), n.scale), nil
	case kEnum:
		i, err := d.int()
		if err != nil {
			return dst, err
		}
		if i < 0 || int(i) >= len(n.symbols) {
			return dst, fmt.Errorf("enum %s: index %d out of range (%d symbols)", n.name, i, len(n.symbols))
		}
		return append(dst, n.symbols[i]...), nil
	}
	if depth >= maxDepth {
		return dst, fmt.Errorf("nested more than %d deep", maxDepth)
	}
	switch n.kind {
	case kUnion:
		i, err := d.long()
		if err != nil {
			return dst, err
		}
		if i < 0 || i >= int64(len(n.arms)) {
			return dst, fmt.Errorf("union index %d out of range (%d branches)", i, len(n.arms))
		}
		return d.value(dst, n.arms[i], depth+1)
	case kRecord:
		dst = append(dst, '{')
		for i, f := range n.fields {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, f.key...)
			var err error
			if dst, err = d.value(dst, f.node, depth+1); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	case kArray, kMap:
		open, close, perItem := byte('['), byte(']'), 0
		if n.kind == kMap {
			open, close, perItem = '{', '}', 1 // a map item starts with its key's length
		}
		dst = append(dst, open)
		first := true
		for {
			c, err := d.block(n.elem, perItem)
			if err != nil {
				return dst, err
			}
			if c == 0 {
				return append(dst, close), nil
			}
			for range c {
				if !first {
					dst = append(dst, ',')
				}
				first = false
				if n.kind == kMap {
					k, err := d.bytes()
					if err != nil {
						return dst, err
					}
					if !utf8.Valid(k) {
						return dst, fmt.Errorf("map key is not valid UTF-8")
					}
					dst = append(jsonstr.AppendBytes(dst, k), ':')
				}
				if dst, err = d.value(dst, n.elem, depth+1); err != nil {
					return dst, err
				}
			}
		}
	}
	return dst, fmt.Errorf("unsupported schema node %d", n.kind)
}

// appendFloat appends f as a JSON number (shortest form that reads back as the same float);
// NaN and the infinities, which JSON cannot write, become null.
func appendFloat(dst []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, bits)
}

// twosComplement reads a big-endian two's-complement integer (Avro's decimal encoding).
func twosComplement(b []byte) *big.Int {
	v := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(len(b))*8))
	}
	return v
}

// appendScaledInt is appendScaled for an int64, without allocating.
func appendScaledInt(dst []byte, v int64, scale int) []byte {
	var buf [24]byte
	u := uint64(v)
	if v < 0 {
		dst = append(dst, '-')
		u = -u
	}
	return appendDigits(dst, strconv.AppendUint(buf[:0], u, 10), scale)
}

// appendScaled appends unscaled·10^-scale as an exact JSON number: "-12.34", "0.05", "100".
func appendScaled(dst []byte, unscaled *big.Int, scale int) []byte {
	if unscaled.Sign() < 0 {
		dst = append(dst, '-')
		unscaled = new(big.Int).Neg(unscaled)
	}
	return appendDigits(dst, []byte(unscaled.Text(10)), scale)
}

// appendDigits appends the decimal digits of an unsigned integer scaled by 10^-scale.
func appendDigits(dst, digits []byte, scale int) []byte {
	if scale <= 0 {
		dst = append(dst, digits...)
		for range -scale {
			dst = append(dst, '0')
		}
		return dst
	}
	if len(digits) <= scale {
		dst = append(dst, '0', '.')
		for range scale - len(digits) {
			dst = append(dst, '0')
		}
		return append(dst, digits...)
	}
	dst = append(dst, digits[:len(digits)-scale]...)
	dst = append(dst, '.')
	return append(dst, digits[len(digits)-scale:]...)
}

func appendBase64(dst, b []byte) []byte {
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}
