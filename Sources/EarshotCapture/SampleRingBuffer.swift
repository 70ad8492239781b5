import Synchronization
import EarshotSupport
import EarshotAudio

/// A lock-free single-producer/single-consumer ring of mono `Float` samples that also carries stream positions.
///
/// Samples are mono (capture mixes channels to mono before writing) at the sample rate the producer states, in
/// [-1, 1] full scale. Every sample has an absolute *frame position*: its index in the stream since capture started,
/// counting frames that were lost. The producer writes chunks with the position of their first frame; whenever that
/// position is not the one that follows the last stored sample (an xrun on the device, a chunk the ring had to drop,
/// a device reopened later) or the sample rate changes, the ring records a *marker* in a second small SPSC queue:
/// "the sample at ring index I has frame position P at rate R". The consumer never reads across a marker, so each
/// chunk it gets is contiguous audio, and it learns the chunk's frame position and how many frames are missing
/// before it (``Chunk/gapFrames``). Analysis windows must not join audio across a chunk with a non-zero gap.
///
/// Overruns: a writer never blocks. When the ring is full, the samples that do not fit are dropped (the head of the
/// chunk is kept), ``overrunCount`` and ``droppedFrameCount`` grow, and the consumer sees the loss as a gap at the
/// next stored sample. If the marker queue is full (more than `markerCapacity` discontinuities waiting), the whole
/// chunk is dropped the same way, so a sample is never stored without its true position.
///
/// Design: two `Atomic<Int>` indices count samples ever written and ever read (they never wrap in practice: 2^63
/// samples is ~18 million years at 16 kHz); the slot is `index & (capacity - 1)`. The producer publishes with a
/// `.releasing` store after copying samples; the consumer loads it `.acquiring` before copying them out, and
/// publishes its read index `.releasing` so the producer (loading `.acquiring`) may reuse the slots. Markers are
/// published before the samples they describe, so a consumer that sees a sample also sees its marker.
///
/// - Important: Exactly one thread may call the producer methods (``write(from:framePosition:sampleRate:)``,
///   ``write(from:)``) and exactly one thread may call the consumer methods (``read(into:)``, ``readChunk(into:)``,
///   ``nextFramePosition``). The counters (``overrunCount``, ``droppedFrameCount``, ``availableToRead``) may be read
///   from any thread. No method allocates, locks or blocks, so the producer may run on a real-time capture thread.
public final class SampleRingBuffer: @unchecked Sendable {
    /// A contiguous run of samples returned by ``readChunk(into:)``.
    public struct Chunk: Sendable, Equatable {
        /// Samples copied into the destination (0 when nothing was available).
        public var count: Int
        /// Absolute frame position of the first sample copied, in frames at ``sampleRate``.
        public var framePosition: Int64
        /// Sample rate of these samples, in Hz.
        public var sampleRate: Int
        /// Frames missing between the previous chunk and this one, in frames at ``sampleRate``: `framePosition`
        /// minus the position that would have followed the previous chunk. 0 means contiguous. Non-zero means a
        /// discontinuity (an xrun, a drop, a reopened device; negative only if a producer restarted its positions).
        /// When the rate changed (`isRateChange`), the position that would have followed is the previous chunk's
        /// end converted to this rate (time is what both rates share: 22 s of 16 kHz frames end at 1 056 000 at
        /// 48 kHz), so a device reopened at another rate after an outage reports the outage, not a difference of
        /// two units (audit 12 #2).
        public var gapFrames: Int64
        /// True when the sample rate differs from the previous chunk's (the first chunk never counts as a change).
        public var isRateChange: Bool

        /// True when audio is missing before this chunk or the rate changed: windows must not span it.
        public var isDiscontinuity: Bool { gapFrames != 0 || isRateChange }

        public init(count: Int, framePosition: Int64, sampleRate: Int, gapFrames: Int64, isRateChange: Bool) {
            self.count = count
            self.framePosition = framePosition
            self.sampleRate = sampleRate
            self.gapFrames = gapFrames
            self.isRateChange = isRateChange
        }
    }

    /// Samples the ring holds at most (a power of two).
    public let capacity: Int
    /// Discontinuity markers the ring holds at most (a power of two).
    public let markerCapacity: Int

    private let mask: Int
    private let markerMask: Int
    private let storage: UnsafeMutablePointer<Float>
    private let markerSampleIndex: UnsafeMutablePointer<Int>
    private let markerFramePosition: UnsafeMutablePointer<Int64>
    private let markerSampleRate: UnsafeMutablePointer<Int>

    // Shared indices: written by one side, read by the other.
    /// Samples ever written; stored by the producer (`.releasing`), loaded by the consumer (`.acquiring`).
    private let writeIndex = Atomic<Int>(0)
    /// Samples ever read; stored by the consumer (`.releasing`), loaded by the producer (`.acquiring`).
    private let readIndex = Atomic<Int>(0)
    /// Markers ever written; stored by the producer (`.releasing`), loaded by the consumer (`.acquiring`).
    private let markerWriteIndex = Atomic<Int>(0)
    /// Markers ever consumed; stored by the consumer (`.releasing`), loaded by the producer (`.acquiring`).
    private let markerReadIndex = Atomic<Int>(0)

    // Counters, any thread may read them.
    private let overruns = Atomic<Int>(0)
    private let droppedFrames = Atomic<Int64>(0)

    // Producer-private state: only the producer thread touches it (atomic only so the class is data-race free;
    // `.relaxed` because no other thread reads it).
    private let producerNextPosition = Atomic<Int64>(0)
    private let producerSampleRate: Atomic<Int>

    // Consumer-private state, likewise only the consumer thread touches it (`.relaxed`).
    private let consumerNextPosition = Atomic<Int64>(0)
    private let consumerSampleRate: Atomic<Int>
    private let consumerHasRead = Atomic<Bool>(false)

    private let didWrite: (@Sendable () -> Void)?

    /// Creates an empty ring.
    ///
    /// - Parameters:
    ///   - minimumCapacity: samples to hold at least (> 0); rounded up to a power of two. For capture, a few seconds
    ///     of audio (e.g. 2^17 = 131072 samples, 2.7 s at 48 kHz) rides out analysis stalls.
    ///   - markerCapacity: discontinuity markers to hold at least (> 0); rounded up to a power of two.
    ///   - sampleRate: the rate, in Hz, assumed for samples written without a rate (``write(from:)``), and the rate
    ///     a consumer reports before the first marker.
    /// - Precondition: `minimumCapacity > 0`, `markerCapacity > 0`, `sampleRate > 0` (programming errors, not input).
    ///   - didWrite: called on the producer thread after every write (stored or dropped), to wake the consumer, e.g.
    ///     `{ source.add(data: 1) }` on a Dispatch user-data source (lock-free, coalescing); it must not block,
    ///     allocate or lock.
    public init(
        minimumCapacity: Int, markerCapacity: Int = 64, sampleRate: Int = 16_000,
        didWrite: (@Sendable () -> Void)? = nil
    ) {
        precondition(minimumCapacity > 0 && minimumCapacity <= 1 << 40, "ring capacity must be in 1...2^40")
        precondition(markerCapacity > 0 && markerCapacity <= 1 << 20, "marker capacity must be in 1...2^20")
        precondition(sampleRate > 0, "sample rate must be positive")
        capacity = Self.powerOfTwo(atLeast: minimumCapacity)
        self.markerCapacity = Self.powerOfTwo(atLeast: markerCapacity)
        mask = capacity - 1
        markerMask = self.markerCapacity - 1
        storage = .allocate(capacity: capacity)
        storage.initialize(repeating: 0, count: capacity)
        markerSampleIndex = .allocate(capacity: self.markerCapacity)
        markerSampleIndex.initialize(repeating: 0, count: self.markerCapacity)
        markerFramePosition = .allocate(capacity: self.markerCapacity)
        markerFramePosition.initialize(repeating: 0, count: self.markerCapacity)
        markerSampleRate = .allocate(capacity: self.markerCapacity)
        markerSampleRate.initialize(repeating: 0, count: self.markerCapacity)
        producerSampleRate = Atomic(sampleRate)
        consumerSampleRate = Atomic(sampleRate)
        self.didWrite = didWrite
    }

    deinit {
        storage.deallocate()
        markerSampleIndex.deallocate()
        markerFramePosition.deallocate()
        markerSampleRate.deallocate()
    }

    // MARK: Producer

    /// Writes `samples` whose first frame has absolute position `framePosition`, at `sampleRate` Hz.
    ///
    /// A position other than the one following the last stored sample, or a new rate, starts a new contiguous
    /// segment (a marker). When the ring has room for only part of the chunk, the head is stored and the rest
    /// dropped; with no room at all (or no room for a needed marker) the whole chunk is dropped. Any drop adds 1 to
    /// ``overrunCount`` and the dropped samples to ``droppedFrameCount``; the consumer then sees a gap.
    ///
    /// - Parameters:
    ///   - samples: mono samples, full scale [-1, 1].
    ///   - framePosition: absolute frame position of `samples[0]` (>= 0, increasing from chunk to chunk).
    ///   - sampleRate: Hz (> 0).
    /// - Returns: samples stored (0...samples.count).
    /// - Important: Producer thread only. Never blocks, allocates or locks.
    @discardableResult
    public func write(from samples: UnsafeBufferPointer<Float>, framePosition: Int64, sampleRate: Int) -> Int {
        let count = samples.count
        guard count > 0, let source = samples.baseAddress else { return 0 }
        defer { didWrite?() }
        let write = writeIndex.load(ordering: .relaxed)  // only this thread stores it
        let read = readIndex.load(ordering: .acquiring)
        let free = capacity - (write - read)
        let stored = min(count, free)
        let needsMarker = framePosition != producerNextPosition.load(ordering: .relaxed)
            || sampleRate != producerSampleRate.load(ordering: .relaxed)
        if stored == 0 {
            recordDrop(count)
            return 0
        }
        if needsMarker {
            let markerWrite = markerWriteIndex.load(ordering: .relaxed)  // only this thread stores it
            let markerRead = markerReadIndex.load(ordering: .acquiring)
            guard markerWrite - markerRead < markerCapacity else {
                recordDrop(count)
                return 0
            }
            let slot = markerWrite & markerMask
            markerSampleIndex[slot] = write
            markerFramePosition[slot] = framePosition
            markerSampleRate[slot] = sampleRate
            // Published before the samples, so whoever sees the samples sees the marker.
            markerWriteIndex.store(markerWrite + 1, ordering: .releasing)
            producerSampleRate.store(sampleRate, ordering: .relaxed)
        }
        let slot = write & mask
        let firstPart = min(stored, capacity - slot)
        (storage + slot).update(from: source, count: firstPart)
        if stored > firstPart {
            storage.update(from: source + firstPart, count: stored - firstPart)
        }
        writeIndex.store(write + stored, ordering: .releasing)
        producerNextPosition.store(framePosition + Int64(stored), ordering: .relaxed)
        if stored < count { recordDrop(count - stored) }
        return stored
    }

    /// Writes `samples` right after the last stored sample (the position that follows it), at the current rate.
    ///
    /// - Returns: samples stored (0...samples.count); see ``write(from:framePosition:sampleRate:)`` for drops.
    /// - Important: Producer thread only. Never blocks, allocates or locks.
    @discardableResult
    public func write(from samples: UnsafeBufferPointer<Float>) -> Int {
        write(
            from: samples, framePosition: producerNextPosition.load(ordering: .relaxed),
            sampleRate: producerSampleRate.load(ordering: .relaxed))
    }

    /// Samples the producer can write now without a drop (a lower bound: the consumer may free more meanwhile).
    ///
    /// - Important: Exact only on the producer thread; elsewhere a snapshot.
    public var availableToWrite: Int {
        capacity - (writeIndex.load(ordering: .acquiring) - readIndex.load(ordering: .acquiring))
    }

    private func recordDrop(_ count: Int) {
        overruns.add(1, ordering: .relaxed)
        droppedFrames.add(Int64(count), ordering: .relaxed)
    }

    // MARK: Consumer

    /// Reads up to `destination.count` contiguous samples (never across a discontinuity) and returns how many.
    ///
    /// Use ``nextFramePosition`` before the call to learn the position of what is read, or ``readChunk(into:)`` to
    /// also learn about gaps.
    ///
    /// - Returns: samples copied (0 when none are available).
    /// - Important: Consumer thread only. Never blocks, allocates or locks.
    @discardableResult
    public func read(into destination: UnsafeMutableBufferPointer<Float>) -> Int {
        readChunk(into: destination).count
    }

    /// Reads up to `destination.count` contiguous samples and describes them: frame position, rate and the gap
    /// before them. A chunk ends before the next discontinuity, so one call never mixes two segments.
    ///
    /// - Returns: the chunk; `count == 0` when nothing is available (its position is then ``nextFramePosition``
    ///   and its gap 0: a gap is reported with the first sample after it).
    /// - Important: Consumer thread only. Never blocks, allocates or locks.
    public func readChunk(into destination: UnsafeMutableBufferPointer<Float>) -> Chunk {
        let read = readIndex.load(ordering: .relaxed)  // only this thread stores it
        // Samples first: their release happened after their markers' release, so the marker load below sees them.
        let write = writeIndex.load(ordering: .acquiring)
        let markerWrite = markerWriteIndex.load(ordering: .acquiring)
        var markerRead = markerReadIndex.load(ordering: .relaxed)  // only this thread stores it
        var position = consumerNextPosition.load(ordering: .relaxed)
        let previousRate = consumerSampleRate.load(ordering: .relaxed)
        var rate = previousRate
        let available = write - read
        guard available > 0, let base = destination.baseAddress, destination.count > 0 else {
            return Chunk(count: 0, framePosition: position, sampleRate: rate, gapFrames: 0, isRateChange: false)
        }
        let expected = position
        // Apply the marker(s) that start at the next sample to read.
        while markerRead < markerWrite, markerSampleIndex[markerRead & markerMask] == read {
            position = markerFramePosition[markerRead & markerMask]
            rate = markerSampleRate[markerRead & markerMask]
            markerRead += 1
        }
        var limit = available
        if markerRead < markerWrite {
            limit = min(limit, markerSampleIndex[markerRead & markerMask] - read)
        }
        let count = min(limit, destination.count)
        let slot = read & mask
        let firstPart = min(count, capacity - slot)
        base.update(from: storage + slot, count: firstPart)
        if count > firstPart {
            (base + firstPart).update(from: storage, count: count - firstPart)
        }
        readIndex.store(read + count, ordering: .releasing)
        markerReadIndex.store(markerRead, ordering: .releasing)
        consumerNextPosition.store(position + Int64(count), ordering: .relaxed)
        consumerSampleRate.store(rate, ordering: .relaxed)
        let first = !consumerHasRead.load(ordering: .relaxed)
        consumerHasRead.store(true, ordering: .relaxed)
        let isRateChange = !first && rate != previousRate
        // Across a rate change the previous end is in frames of the previous rate: converted, through time.
        let expectedHere = isRateChange
            ? Int64((Double(expected) * Double(rate) / Double(previousRate)).rounded()) : expected
        return Chunk(
            count: count, framePosition: position, sampleRate: rate, gapFrames: position - expectedHere,
            isRateChange: isRateChange)
    }

    /// The frame position that follows the last sample read (0 before any read). The next chunk starts here unless
    /// it reports a gap.
    ///
    /// - Important: Consumer thread only.
    public var nextFramePosition: Int64 { consumerNextPosition.load(ordering: .relaxed) }

    /// Samples waiting to be read (a snapshot; may span discontinuities).
    public var availableToRead: Int {
        writeIndex.load(ordering: .acquiring) - readIndex.load(ordering: .acquiring)
    }

    // MARK: Counters

    /// Writes that dropped samples because the ring (or its marker queue) was full. Any thread.
    public var overrunCount: Int { overruns.load(ordering: .relaxed) }

    /// Samples dropped because the ring was full, in frames. Any thread.
    public var droppedFrameCount: Int64 { droppedFrames.load(ordering: .relaxed) }

    private static func powerOfTwo(atLeast value: Int) -> Int {
        var result = 1
        while result < value { result <<= 1 }
        return result
    }
}
