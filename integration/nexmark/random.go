package nexmark

// splittableRandom is java.util.SplittableRandom (JDK 8 to 21) for a given seed: SplitMix64
// with the seed's golden gamma. Flink's Nexmark generator draws every value from one, so a port
// that matches it bit for bit makes the events comparable with the Java generator's. Only the
// methods the generator calls are ported: nextInt(), nextInt(bound), nextLong(), nextDouble().
// Not safe for concurrent use.
type splittableRandom struct {
	seed  uint64
	gamma uint64
}

// goldenGamma is SplittableRandom.GOLDEN_GAMMA, the gamma of new SplittableRandom(seed).
const goldenGamma = 0x9e3779b97f4a7c15

// newSplittableRandom is new SplittableRandom(seed).
func newSplittableRandom(seed int64) *splittableRandom {
	return &splittableRandom{seed: uint64(seed), gamma: goldenGamma}
}

// mix64 is SplittableRandom.mix64 (Stafford's variant 13 of MurmurHash3's finalizer).
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// mix32 is SplittableRandom.mix32: the upper 32 bits of Stafford's variant 4.
func mix32(z uint64) int32 {
	z = (z ^ (z >> 33)) * 0x62a9d9ed799705f5
	return int32(((z ^ (z >> 28)) * 0xcb24d0a5c88c35b3) >> 32)
}

func (r *splittableRandom) nextSeed() uint64 {
	r.seed += r.gamma
	return r.seed
}

// nextInt is nextInt(): a uniform int over all 2^32 values.
func (r *splittableRandom) nextInt() int32 { return mix32(r.nextSeed()) }

// nextLong is nextLong().
func (r *splittableRandom) nextLong() int64 { return int64(mix64(r.nextSeed())) }

// nextDouble is nextDouble(): (nextLong() >>> 11) * 0x1.0p-53, uniform in [0, 1).
func (r *splittableRandom) nextDouble() float64 {
	return float64(mix64(r.nextSeed())>>11) * (1.0 / (1 << 53))
}

// nextIntn is nextInt(bound) for bound > 0: the low bits of one draw for a power of two,
// otherwise the upper 31 bits modulo bound, rejecting the draws of the over-represented last
// partial range (the loop is Java's, including its int overflow test). It panics on bound <= 0,
// where Java throws IllegalArgumentException.
func (r *splittableRandom) nextIntn(bound int32) int32 {
	if bound <= 0 {
		panic("nexmark: nextInt bound must be positive")
	}
	v := r.nextInt()
	m := bound - 1
	if bound&m == 0 {
		return v & m
	}
	for u := int32(uint32(v) >> 1); ; u = int32(uint32(r.nextInt()) >> 1) {
		v = u % bound
		if u+m-v >= 0 { // int32 arithmetic wraps as Java's does
			return v
		}
	}
}

// nextLongn is the generator's LongGenerator.nextLong(random, n): nextInt((int) n) below
// Integer.MAX_VALUE, else Math.abs(nextLong() % n) (skewed, as the Java comment warns).
func (r *splittableRandom) nextLongn(n int64) int64 {
	if n < 1<<31-1 {
		return int64(r.nextIntn(int32(n)))
	}
	v := r.nextLong() % n
	if v < 0 {
		v = -v
	}
	return v
}
