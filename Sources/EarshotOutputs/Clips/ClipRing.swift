import EarshotSupport
import EarshotModel
import EarshotAnalysis
import EarshotDetection
/// The last seconds of the analysis audio (16 kHz mono), as 16-bit samples on the stream's 16 kHz timeline, in one
/// buffer allocated at creation.
///
/// Sample `i` of the timeline is at stream time `i / 16000` s (``AudioStreamAnalyzer/onResampledAudio``). The ring
/// holds the samples `[startIndex, endIndex)`: at most ``capacity``, and none from before the last ``restart(at:)``
/// (a gap in the stream: clips, like windows, never join audio across one).
///
/// Samples are stored as the clip files hold them: `round(x * 32768)` clamped to -32768...32767 (the decoder reads
/// 16-bit PCM back as `q / 32768`, so a 16-bit source round-trips exactly), NaN as 0.
///
/// - Important: A value type without locks: own it on one queue. ``append(_:)`` does not allocate.
package struct ClipRing {
    /// Samples held at most.
    package let capacity: Int
    private var storage: [Int16]
    /// Timeline index after the newest sample.
    package private(set) var endIndex: Int64 = 0
    /// Timeline index of the oldest sample held.
    package private(set) var startIndex: Int64 = 0

    /// - Parameter capacity: samples to keep (> 0), e.g. `70 * 16000` for 70 s.
    package init(capacity: Int) {
        self.capacity = max(1, capacity)
        storage = [Int16](repeating: 0, count: self.capacity)
    }

    /// Bytes of sample storage.
    package var storageBytes: Int { capacity * MemoryLayout<Int16>.stride }

    /// Forgets everything: the next sample appended is at `index`.
    package mutating func restart(at index: Int64) {
        startIndex = index
        endIndex = index
    }

    /// Where timeline index `index` sits in the storage.
    private func slot(_ index: Int64) -> Int {
        let remainder = Int(index % Int64(capacity))
        return remainder < 0 ? remainder + capacity : remainder
    }

    /// The 16-bit value of a full-scale float sample.
    @inline(__always)
    package static func quantize(_ value: Float) -> Int16 {
        guard !value.isNaN else { return 0 }
        let scaled = (value * 32_768).rounded(.toNearestOrAwayFromZero)
        return Int16(max(-32_768, min(32_767, scaled)))
    }

    /// Appends samples after ``endIndex``; the oldest go when the ring is full.
    package mutating func append(_ samples: UnsafeBufferPointer<Float>) {
        guard !samples.isEmpty else { return }
        // Only the last `capacity` samples can stay.
        let source = samples.count > capacity ? UnsafeBufferPointer(rebasing: samples[(samples.count - capacity)...]) : samples
        let skipped = Int64(samples.count - source.count)
        var position = slot(endIndex + skipped)
        storage.withUnsafeMutableBufferPointer { ring in
            for value in source {
                ring[position] = Self.quantize(value)
                position += 1
                if position == capacity { position = 0 }
            }
        }
        endIndex += Int64(samples.count)
        startIndex = max(startIndex, endIndex - Int64(capacity))
    }

    /// Appends `count` zeros (a short hole in the timeline, such as a resampler restarted without its tail).
    package mutating func appendSilence(_ count: Int) {
        guard count > 0 else { return }
        let written = min(count, capacity)
        var position = slot(endIndex + Int64(count - written))
        storage.withUnsafeMutableBufferPointer { ring in
            for _ in 0..<written {
                ring[position] = 0
                position += 1
                if position == capacity { position = 0 }
            }
        }
        endIndex += Int64(count)
        startIndex = max(startIndex, endIndex - Int64(capacity))
    }

    /// The samples of `[from, to)` that the ring holds (the range is clamped to `[startIndex, endIndex)`), and the
    /// timeline index of the first one.
    package func copy(from: Int64, to: Int64) -> (first: Int64, samples: [Int16]) {
        let first = max(from, startIndex)
        let last = min(to, endIndex)
        guard last > first else { return (first, []) }
        let count = Int(last - first)
        var position = slot(first)
        return (first, [Int16](unsafeUninitializedCapacity: count) { out, initialized in
            storage.withUnsafeBufferPointer { ring in
                var index = 0
                while index < count {
                    let run = min(count - index, capacity - position)
                    for offset in 0..<run { out[index + offset] = ring[position + offset] }
                    index += run
                    position = 0
                }
            }
            initialized = count
        })
    }
}
