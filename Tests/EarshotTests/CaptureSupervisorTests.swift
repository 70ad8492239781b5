import Dispatch
import Foundation
import Synchronization
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("CaptureSupervisor", .timeLimit(.minutes(1)))
struct CaptureSupervisorTests {
    private let missingLine =
        "cannot open capture device \"hw:99,0\": No such file or directory (no such device; list devices with "
        + "`earshot devices` or `arecord -L`)"

    @Test func backoffDoublesFromOneSecondUpToFour() {
        let backoff = CaptureSupervisor.Backoff()
        #expect((1...8).map { backoff.delay(afterFailures: $0) } == [1, 2, 4, 4, 4, 4, 4, 4])
        #expect(backoff.delay(afterFailures: 1_000) == 4)
        let fast = CaptureSupervisor.Backoff(initialDelay: 0.01, maximumDelay: 0.05)
        #expect((1...4).map { fast.delay(afterFailures: $0) } == [0.01, 0.02, 0.04, 0.05])
    }

    /// trial 6 #10: the outage line said `retrying in 2 s` for all of an outage whose retries grow; it is said once,
    /// so it names the schedule.
    @Test func theRetryTextNamesTheNextDelayAndTheLongest() {
        let backoff = CaptureSupervisor.Backoff()
        #expect(backoff.retryText(delay: 1) == "retrying in 1 s, then twice as long each time, up to every 4 s")
        #expect(backoff.retryText(delay: 2) == "retrying in 2 s, then twice as long each time, up to every 4 s")
        #expect(backoff.retryText(delay: 4) == "retrying every 4 s")
        let fast = CaptureSupervisor.Backoff(initialDelay: 0.01, maximumDelay: 0.05)
        #expect(fast.retryText(delay: 0.02) == "retrying in 0.02 s, then twice as long each time, up to every 0.05 s")
    }

    @Test func aMissingDeviceIsReportedOnceThenCaptureStartsWhenItAppears() throws {
        let path = CaptureFixtures.writeRaw(CaptureFixtures.bytes(of: [1, 2, 3, 4]), name: "supervised.raw")
        let working = CaptureConfiguration(
            device: "earshot_supervised", pacing: .realTime,
            alsaConfiguration: CaptureFixtures.filePCM("earshot_supervised", infile: path))
        let attempts = AttemptCounter()
        let states = CaptureRecorder<CaptureSupervisor.State>()
        let ring = SampleRingBuffer(minimumCapacity: 1 << 16)
        let supervisor = CaptureSupervisor(
            ring: ring, backoff: .init(initialDelay: 0.01, maximumDelay: 0.02),
            callbackQueue: DispatchQueue(label: "supervisor-states"),
            open: {
                // The device "appears" at the fourth attempt.
                let attempt = attempts.next()
                return try PCMCapture(configuration: attempt < 4 ? CaptureConfiguration(device: "hw:99,0") : working)
            },
            onStateChange: { states.append($0) })
        supervisor.start()
        #expect(CaptureFixtures.wait(timeout: 10) { states.values.count >= 3 })
        let format = try #require(supervisor.currentSource?.format)
        #expect(attempts.count == 4)
        #expect(states.values == [
            .opening,
            .unavailable(EarshotError(.unavailable, missingLine)),
            .running(name: "earshot_supervised", format: format),
        ])
        // Audio flows into the supervisor's ring.
        let (samples, _) = CaptureFixtures.read(ring, frames: 4)
        #expect(samples == [1, 2, 3, 4].map { Float($0) / 32_768 })
        supervisor.stop()
        #expect(CaptureFixtures.wait(timeout: 2) { states.values.last == .stopped })
        #expect(supervisor.state == .stopped)
        #expect(supervisor.currentSource == nil)
        #expect(supervisor.framesCaptured >= 4)
        // No retries after stop.
        let attemptsAtStop = attempts.count
        usleep(100_000)
        #expect(attempts.count == attemptsAtStop)
    }

    @Test func aDeviceThatFailsWhileRunningIsReopenedAndTheOutageIsAGap() throws {
        // /dev/full as the file plugin's output: the capture fails with I/O errors after a few thousand frames.
        let path = CaptureFixtures.writeRaw([UInt8](repeating: 0, count: 64), name: "supervised-eio.raw")
        let failing = CaptureConfiguration(
            device: "earshot_supervised_eio",
            alsaConfiguration: CaptureFixtures.filePCM("earshot_supervised_eio", infile: path, output: "/dev/full"))
        let states = CaptureRecorder<CaptureSupervisor.State>()
        let ring = SampleRingBuffer(minimumCapacity: 1 << 20, markerCapacity: 256)
        let supervisor = CaptureSupervisor(
            ring: ring, backoff: .init(initialDelay: 0.05, maximumDelay: 0.05),
            callbackQueue: DispatchQueue(label: "supervisor-states"),
            open: { try PCMCapture(configuration: failing) },
            onStateChange: { states.append($0) })
        supervisor.start()
        #expect(CaptureFixtures.wait(timeout: 10) { states.values.count >= 5 })
        supervisor.stop()
        #expect(CaptureFixtures.wait(timeout: 2) { states.values.last == .stopped })
        let values = states.values
        let format = CaptureFormat(
            sampleFormat: .s16LE, channels: 1, sampleRate: 16_000, periodFrames: 3_200, bufferFrames: 25_600)
        let failure = EarshotError(
            .unavailable,
            "capture device \"earshot_supervised_eio\" stopped: Input/output error (the device was unplugged or failed; "
                + "check it with `earshot devices`)")
        let running = CaptureSupervisor.State.running(name: "earshot_supervised_eio", format: format)
        #expect(Array(values.prefix(5)) == [.opening, running, .unavailable(failure), running, .unavailable(failure)])
        // The second session starts at least the 50 ms back-off (800 frames at 16 kHz) after the first ended.
        let (_, chunks) = CaptureFixtures.read(ring, frames: ring.availableToRead, timeout: 1)
        let reopened = chunks.filter { $0.gapFrames >= 800 }
        #expect(reopened.count >= 1)
        #expect(supervisor.xrunCount >= 8)  // at least 4 recovered I/O errors per session
    }
}

/// Counts open attempts from the supervisor's queue.
private final class AttemptCounter: Sendable {
    private let value = Atomic<Int>(0)
    func next() -> Int { value.add(1, ordering: .relaxed).newValue }
    var count: Int { value.load(ordering: .relaxed) }
}
