import Foundation
import Synchronization
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("SampleRingBuffer")
struct RingBufferTests {
    /// Writes `values` at `position` (producer side).
    @discardableResult
    private func write(_ ring: SampleRingBuffer, _ values: [Float], at position: Int64, rate: Int = 16_000) -> Int {
        values.withUnsafeBufferPointer { ring.write(from: $0, framePosition: position, sampleRate: rate) }
    }

    /// Reads one chunk of at most `maximum` samples (consumer side).
    private func read(_ ring: SampleRingBuffer, maximum: Int) -> (SampleRingBuffer.Chunk, [Float]) {
        var buffer = [Float](repeating: .nan, count: maximum)
        let chunk = buffer.withUnsafeMutableBufferPointer { ring.readChunk(into: $0) }
        return (chunk, Array(buffer.prefix(chunk.count)))
    }

    @Test func capacityIsRoundedUpToAPowerOfTwo() {
        #expect(SampleRingBuffer(minimumCapacity: 1000).capacity == 1024)
        #expect(SampleRingBuffer(minimumCapacity: 1024).capacity == 1024)
        #expect(SampleRingBuffer(minimumCapacity: 1).capacity == 1)
        #expect(SampleRingBuffer(minimumCapacity: 8, markerCapacity: 5).markerCapacity == 8)
    }

    @Test func didWriteRunsAfterEveryWriteStoredOrDroppedAndNotForAnEmptyOne() {
        let calls = Atomic<Int>(0)
        let seenAvailable = Mutex<[Int]>([])
        let box = RingBox()
        let ring = SampleRingBuffer(minimumCapacity: 4, didWrite: {
            calls.add(1, ordering: .relaxed)
            seenAvailable.withLock { $0.append(box.ring?.availableToRead ?? -1) }
        })
        box.ring = ring
        #expect(write(ring, [1, 2, 3], at: 0) == 3)
        #expect(write(ring, [4, 5], at: 3) == 1)  // one stored, one dropped
        #expect(write(ring, [6], at: 5) == 0)  // full: dropped
        #expect(write(ring, [], at: 6) == 0)  // nothing to write: no call
        #expect(calls.load(ordering: .relaxed) == 3)
        // The consumer it wakes already sees the samples.
        #expect(seenAvailable.withLock { $0 } == [3, 4, 4])
    }

    private final class RingBox: @unchecked Sendable {
        var ring: SampleRingBuffer?
    }

    @Test func contiguousWritesReadBackWithPositionsAcrossTheWrap() {
        let ring = SampleRingBuffer(minimumCapacity: 8)
        #expect(write(ring, [1, 2, 3, 4, 5, 6], at: 0) == 6)
        let (first, firstValues) = read(ring, maximum: 4)
        #expect(first == .init(count: 4, framePosition: 0, sampleRate: 16_000, gapFrames: 0, isRateChange: false))
        #expect(firstValues == [1, 2, 3, 4])
        // Wraps: slots 6, 7, 0, 1, 2 hold 7...11.
        #expect(write(ring, [7, 8, 9, 10, 11], at: 6) == 5)
        #expect(ring.availableToRead == 7)
        let (second, secondValues) = read(ring, maximum: 16)
        #expect(second == .init(count: 7, framePosition: 4, sampleRate: 16_000, gapFrames: 0, isRateChange: false))
        #expect(secondValues == [5, 6, 7, 8, 9, 10, 11])
        #expect(ring.nextFramePosition == 11)
        let (empty, _) = read(ring, maximum: 4)
        #expect(empty == .init(count: 0, framePosition: 11, sampleRate: 16_000, gapFrames: 0, isRateChange: false))
        #expect(ring.overrunCount == 0 && ring.droppedFrameCount == 0)
    }

    @Test func aFullRingDropsTheTailCountsAnOverrunAndTheReaderSeesTheGap() {
        let ring = SampleRingBuffer(minimumCapacity: 8)
        #expect(write(ring, [0, 1, 2, 3, 4, 5], at: 0) == 6)
        // Only 2 of these 4 fit: positions 6 and 7 are stored, 8 and 9 dropped.
        #expect(write(ring, [6, 7, 8, 9], at: 6) == 2)
        #expect(ring.overrunCount == 1)
        #expect(ring.droppedFrameCount == 2)
        // Full: the whole chunk is dropped.
        #expect(write(ring, [10, 11], at: 10) == 0)
        #expect(ring.overrunCount == 2)
        #expect(ring.droppedFrameCount == 4)
        let (all, values) = read(ring, maximum: 16)
        #expect(all == .init(count: 8, framePosition: 0, sampleRate: 16_000, gapFrames: 0, isRateChange: false))
        #expect(values == [0, 1, 2, 3, 4, 5, 6, 7])
        // The producer continues at 12; positions 8...11 never arrived.
        #expect(write(ring, [12, 13], at: 12) == 2)
        let (afterGap, gapValues) = read(ring, maximum: 16)
        #expect(afterGap == .init(count: 2, framePosition: 12, sampleRate: 16_000, gapFrames: 4, isRateChange: false))
        #expect(afterGap.isDiscontinuity)
        #expect(gapValues == [12, 13])
    }

    @Test func aReadNeverSpansADiscontinuity() {
        let ring = SampleRingBuffer(minimumCapacity: 32)
        write(ring, [0, 1, 2], at: 0)
        write(ring, [100, 101], at: 100)  // an xrun lost 97 frames
        write(ring, [102, 103], at: 102)
        write(ring, [0.5], at: 0, rate: 48_000)  // a reopened device at another rate, restarting its positions
        let (first, firstValues) = read(ring, maximum: 32)
        #expect(first == .init(count: 3, framePosition: 0, sampleRate: 16_000, gapFrames: 0, isRateChange: false))
        #expect(firstValues == [0, 1, 2])
        let (second, secondValues) = read(ring, maximum: 32)
        #expect(second == .init(count: 4, framePosition: 100, sampleRate: 16_000, gapFrames: 97, isRateChange: false))
        #expect(secondValues == [100, 101, 102, 103])
        let (third, thirdValues) = read(ring, maximum: 32)
        // 104 frames at 16 kHz end at 312 at 48 kHz.
        #expect(third == .init(count: 1, framePosition: 0, sampleRate: 48_000, gapFrames: -312, isRateChange: true))
        #expect(third.isDiscontinuity)
        #expect(thirdValues == [0.5])
    }

    /// A device reopened at another rate after an outage (audit 12 #2): the new session starts where the stream's
    /// time has come to, in frames of its own rate; the gap is the outage, in frames of the new rate, whichever
    /// way the rate went.
    @Test func aGapAcrossARateChangeIsTheTimeBetweenTheTwoSegments() {
        let ring = SampleRingBuffer(minimumCapacity: 1 << 16)
        let tenth = [Float](repeating: 0.25, count: 1_600)
        write(ring, tenth, at: 0)  // 0.1 s at 16 kHz
        // 0.5 s away, back at 48 kHz: (0.1 + 0.5) s * 48000 = 28800.
        write(ring, [Float](repeating: 0.5, count: 4_800), at: 28_800, rate: 48_000)
        // 0.25 s away, back at 16 kHz: (0.7 + 0.25) s * 16000 = 15200.
        write(ring, tenth, at: 15_200, rate: 16_000)
        // 1 s away, back at 44.1 kHz: (1.05 + 1) s * 44100 = 90405.
        write(ring, [Float](repeating: 1, count: 441), at: 90_405, rate: 44_100)
        let (first, _) = read(ring, maximum: 1 << 16)
        #expect(first == .init(count: 1_600, framePosition: 0, sampleRate: 16_000, gapFrames: 0, isRateChange: false))
        let (second, _) = read(ring, maximum: 1 << 16)
        #expect(second == .init(count: 4_800, framePosition: 28_800, sampleRate: 48_000, gapFrames: 24_000, isRateChange: true))
        let (third, _) = read(ring, maximum: 1 << 16)
        #expect(third == .init(count: 1_600, framePosition: 15_200, sampleRate: 16_000, gapFrames: 4_000, isRateChange: true))
        let (fourth, _) = read(ring, maximum: 1 << 16)
        #expect(fourth == .init(count: 441, framePosition: 90_405, sampleRate: 44_100, gapFrames: 44_100, isRateChange: true))
        // A rate change with no time lost: no gap, only the change. (90405 + 441) / 44100 s = 2.06 s = 32960 at 16 kHz.
        write(ring, tenth, at: 32_960, rate: 16_000)
        let (fifth, _) = read(ring, maximum: 1 << 16)
        #expect(fifth == .init(count: 1_600, framePosition: 32_960, sampleRate: 16_000, gapFrames: 0, isRateChange: true))
        #expect(fifth.isDiscontinuity)
    }

    @Test func theFirstChunkReportsAStartPositionAfterZeroAsAGap() {
        let ring = SampleRingBuffer(minimumCapacity: 8)
        write(ring, [1, 2], at: 5)
        let (chunk, _) = read(ring, maximum: 8)
        #expect(chunk == .init(count: 2, framePosition: 5, sampleRate: 16_000, gapFrames: 5, isRateChange: false))
    }

    @Test func writeWithoutAPositionContinuesTheStream() {
        let ring = SampleRingBuffer(minimumCapacity: 8, sampleRate: 22_050)
        let values: [Float] = [1, 2, 3]
        #expect(values.withUnsafeBufferPointer { ring.write(from: $0) } == 3)
        #expect(values.withUnsafeBufferPointer { ring.write(from: $0) } == 3)
        var buffer = [Float](repeating: 0, count: 8)
        let count = buffer.withUnsafeMutableBufferPointer { ring.read(into: $0) }
        #expect(count == 6)
        #expect(Array(buffer.prefix(6)) == [1, 2, 3, 1, 2, 3])
        #expect(ring.nextFramePosition == 6)
    }

    @Test func aFullMarkerQueueDropsTheChunkRatherThanLosingItsPosition() {
        let ring = SampleRingBuffer(minimumCapacity: 64, markerCapacity: 2)
        #expect(write(ring, [10], at: 10) == 1)  // marker 1
        #expect(write(ring, [20], at: 20) == 1)  // marker 2
        #expect(write(ring, [30], at: 30) == 0)  // no room for a third marker
        #expect(ring.overrunCount == 1 && ring.droppedFrameCount == 1)
        let (first, _) = read(ring, maximum: 8)
        #expect(first.framePosition == 10 && first.count == 1)
        #expect(write(ring, [40], at: 40) == 1)  // a marker slot is free again
        let (second, _) = read(ring, maximum: 8)
        let (third, thirdValues) = read(ring, maximum: 8)
        #expect(second == .init(count: 1, framePosition: 20, sampleRate: 16_000, gapFrames: 9, isRateChange: false))
        #expect(third == .init(count: 1, framePosition: 40, sampleRate: 16_000, gapFrames: 19, isRateChange: false))
        #expect(thirdValues == [40])
    }

    /// The value the stress producers write at a frame position: exact in Float (< 2^24).
    private static func value(at position: Int64) -> Float { Float(position & 0xFF_FFFF) }

    /// A deterministic pseudo-random sequence (xorshift), so chunk sizes vary without depending on the run.
    private struct XorShift {
        var state: UInt64
        mutating func next(_ range: ClosedRange<Int>) -> Int {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return range.lowerBound + Int(state % UInt64(range.count))
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func twoThreadStressDeliversEverySampleInOrderWithExactValues() async {
        let ring = SampleRingBuffer(minimumCapacity: 4096)
        let total: Int64 = 3_000_000
        let producer = Thread {
            var random = XorShift(state: 0x9E37_79B9_7F4A_7C15)
            var chunk = [Float](repeating: 0, count: 1500)
            var position: Int64 = 0
            while position < total {
                let count = min(random.next(1...1500), Int(total - position))
                // Respect back-pressure so nothing is dropped: wait for room (the ring itself never blocks).
                while ring.availableToWrite < count { sched_yield() }
                for index in 0..<count { chunk[index] = Self.value(at: position + Int64(index)) }
                let written = chunk.withUnsafeBufferPointer {
                    ring.write(from: UnsafeBufferPointer(rebasing: $0[0..<count]), framePosition: position, sampleRate: 16_000)
                }
                precondition(written == count, "a write with room available dropped samples")
                position += Int64(count)
            }
        }
        producer.start()
        var random = XorShift(state: 0xD1B5_4A32_D192_ED03)
        var buffer = [Float](repeating: 0, count: 2048)
        var expected: Int64 = 0
        var mismatches = 0
        var gaps = 0
        let deadline = Date().addingTimeInterval(50)
        while expected < total, Date() < deadline {
            let size = random.next(1...2048)
            let chunk = buffer.withUnsafeMutableBufferPointer {
                ring.readChunk(into: UnsafeMutableBufferPointer(rebasing: $0[0..<size]))
            }
            if chunk.count == 0 {
                sched_yield()
                continue
            }
            if chunk.framePosition != expected || chunk.gapFrames != 0 { gaps += 1 }
            for index in 0..<chunk.count where buffer[index] != Self.value(at: chunk.framePosition + Int64(index)) {
                mismatches += 1
            }
            expected = chunk.framePosition + Int64(chunk.count)
        }
        #expect(expected == total)
        #expect(mismatches == 0)
        #expect(gaps == 0)
        #expect(ring.overrunCount == 0)
        #expect(ring.droppedFrameCount == 0)
    }

    @Test(.timeLimit(.minutes(1)))
    func twoThreadStressWithDropsAndJumpsReportsEveryGapExactly() async {
        // The producer never waits: the ring overruns whenever the consumer falls behind, and some chunks also
        // skip ahead (an xrun). Each chunk read must hold exactly the values of its positions, and the
        // positions read plus the gaps reported must account for every frame up to the last one read.
        let ring = SampleRingBuffer(minimumCapacity: 1024, markerCapacity: 8)
        let total: Int64 = 2_000_000
        let finished = StressFlag()
        let producer = Thread {
            var random = XorShift(state: 0x1234_5678_9ABC_DEF1)
            var chunk = [Float](repeating: 0, count: 700)
            var position: Int64 = 0
            var chunks = 0
            while position < total {
                let count = random.next(1...700)
                chunks += 1
                // From the 2nd chunk on, every 10th skips ahead. The 2nd always finds room (the 1st takes at
                // most 700 of 1024 slots), so at least one gap is seen however the threads are scheduled.
                if chunks % 10 == 2 { position += Int64(random.next(1...300)) }
                for index in 0..<count { chunk[index] = Self.value(at: position + Int64(index)) }
                chunk.withUnsafeBufferPointer {
                    _ = ring.write(from: UnsafeBufferPointer(rebasing: $0[0..<count]), framePosition: position, sampleRate: 16_000)
                }
                position += Int64(count)
            }
            finished.value.store(true, ordering: .releasing)
        }
        producer.start()
        var random = XorShift(state: 0x0F0F_0F0F_1234_4321)
        var buffer = [Float](repeating: 0, count: 1024)
        var next: Int64 = 0
        var framesRead: Int64 = 0
        var gapTotal: Int64 = 0
        var gapChunks = 0
        var mismatches = 0
        var backwards = 0
        let deadline = Date().addingTimeInterval(50)
        while Date() < deadline {
            let size = random.next(1...1024)
            let done = finished.value.load(ordering: .acquiring)
            let chunk = buffer.withUnsafeMutableBufferPointer {
                ring.readChunk(into: UnsafeMutableBufferPointer(rebasing: $0[0..<size]))
            }
            if chunk.count == 0 {
                if done { break }
                sched_yield()
                continue
            }
            if chunk.framePosition < next { backwards += 1 }
            if chunk.gapFrames != 0 { gapChunks += 1 }
            #expect(chunk.gapFrames == chunk.framePosition - next)
            gapTotal += chunk.gapFrames
            for index in 0..<chunk.count where buffer[index] != Self.value(at: chunk.framePosition + Int64(index)) {
                mismatches += 1
            }
            framesRead += Int64(chunk.count)
            next = chunk.framePosition + Int64(chunk.count)
        }
        #expect(mismatches == 0)
        #expect(backwards == 0)
        #expect(framesRead + gapTotal == next)
        #expect(gapChunks > 0)
        #expect(framesRead > 0)
    }
}

/// A flag the stress producer raises when it is done.
private final class StressFlag: Sendable {
    let value = Atomic<Bool>(false)
}
