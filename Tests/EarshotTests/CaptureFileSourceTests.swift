import Dispatch
import Foundation
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("RealtimeFileSource", .timeLimit(.minutes(1)))
struct CaptureFileSourceTests {
    private let queue = DispatchQueue(label: "file-source-tests")

    @Test(.needsShared) func aFileIsReplayedThroughTheRingAtItsRateAndEnds() throws {
        let path = TestPaths.sharedFile(
            "audio/debian-sound-theme-freedesktop/sounds/freedesktop/stereo/alarm-clock-elapsed.oga").path
        let expected = try AudioFileDecoder(url: URL(fileURLWithPath: path)).readAllMono()
        // 40 times real time: the 6.128 s recording takes about 0.15 s.
        let source = try RealtimeFileSource(path: path, pacing: .clock(speed: 40))
        #expect(source.format == CaptureFormat(
            sampleFormat: .floatLE, channels: 2, sampleRate: 48_000, periodFrames: 9_600, bufferFrames: 9_600))
        let ring = SampleRingBuffer(minimumCapacity: 1 << 19)
        let ends = CaptureRecorder<CaptureEnd>()
        let started = Date()
        try source.start(into: ring, queue: queue) { ends.append($0) }
        let (samples, chunks) = CaptureFixtures.read(ring, frames: expected.count)
        let elapsed = Date().timeIntervalSince(started)
        #expect(CaptureFixtures.wait(timeout: 5) { ends.values == [.finished] })
        #expect(samples.count == 294_128)
        #expect(samples == expected)
        #expect(chunks.first?.framePosition == 0)
        #expect(chunks.allSatisfy { $0.gapFrames == 0 && $0.sampleRate == 48_000 })
        #expect(ring.availableToRead == 0)
        #expect(source.framesCaptured == 294_128)
        #expect(source.nextFramePosition == 294_128)
        #expect(elapsed >= 6.128 / 40 - 0.03)
        #expect(!source.isRunning)
    }

    @Test func rawS16FromAPipeArrivesExactlyEvenWhenWritesSplitSamples() throws {
        var descriptors: [Int32] = [0, 0]
        #expect(pipe(&descriptors) == 0)
        let (readEnd, writeEnd) = (descriptors[0], descriptors[1])
        defer { close(readEnd) }
        let values: [Int16] = (0..<20_000).map { Int16(truncatingIfNeeded: $0 * 7919) }
        let bytes = CaptureFixtures.bytes(of: values)
        let writer = Thread {
            // 333-byte writes: odd, so samples are split across reads.
            var offset = 0
            while offset < bytes.count {
                let count = min(333, bytes.count - offset)
                let written = bytes[offset..<offset + count].withUnsafeBytes { write(writeEnd, $0.baseAddress, count) }
                guard written > 0 else { break }
                offset += written
            }
            close(writeEnd)
        }
        let source = try RealtimeFileSource(rawDescriptor: readEnd, sampleRate: 16_000, pacing: .clock(speed: 100))
        #expect(source.format.sampleFormat == .s16LE && source.format.sampleRate == 16_000 && source.format.channels == 1)
        let ring = SampleRingBuffer(minimumCapacity: 1 << 16)
        let ends = CaptureRecorder<CaptureEnd>()
        try source.start(into: ring, queue: queue) { ends.append($0) }
        writer.start()
        let (samples, chunks) = CaptureFixtures.read(ring, frames: values.count)
        #expect(CaptureFixtures.wait(timeout: 5) { ends.values == [.finished] })
        #expect(samples == values.map { Float($0) / 32_768 })
        #expect(chunks.allSatisfy { $0.gapFrames == 0 })
        #expect(source.framesCaptured == 20_000)
    }

    @Test func stopEndsAReadWaitingOnAnIdlePipe() throws {
        var descriptors: [Int32] = [0, 0]
        #expect(pipe(&descriptors) == 0)
        defer {
            close(descriptors[0])
            close(descriptors[1])
        }
        let source = try RealtimeFileSource(rawDescriptor: descriptors[0], sampleRate: 16_000)
        let ends = CaptureRecorder<CaptureEnd>()
        try source.start(into: SampleRingBuffer(minimumCapacity: 1024), queue: queue) { ends.append($0) }
        usleep(50_000)
        #expect(source.isRunning)
        #expect(source.stop(timeout: 1))
        #expect(CaptureFixtures.wait(timeout: 2) { ends.values == [.stopped] })
    }

    @Test func badInputsAreRefusedWithTheirLine() {
        #expect {
            _ = try RealtimeFileSource(path: "-", rawSampleRate: 100)
        } throws: { error in
            (error as? EarshotError) == EarshotError(
                .usage, "raw input \"-\": sample rate 100 Hz is out of range (use 8000-192000, e.g. 16000)")
        }
        #expect {
            _ = try RealtimeFileSource(path: CaptureFixtures.directory.appendingPathComponent("missing.wav").path)
        } throws: { error in
            (error as? EarshotError)?.code == .noInput
        }
    }
}
