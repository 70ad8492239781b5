/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014): a small, fast,
/// seedable generator, so that synthetic signals, evaluations and benchmarks are the same on every run. Not for
/// anything that needs unpredictability.
package struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    package init(seed: UInt64) { state = seed }

    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Uniform in [0, 1): the top 53 bits of ``next()`` over 2^53.
    package mutating func nextUnit() -> Double {
        Double(next() >> 11) / 9_007_199_254_740_992
    }
}
