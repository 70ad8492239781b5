import Foundation
import Testing
import EarshotDetection
import EarshotService
import EarshotSupport
import EarshotTools

/// The `overrun` lines of xrun gaps (audit 12 #4): at most one per 10 s, and the gaps held back in those 10 s are
/// said once the 10 s have passed (the daemon asks every second, on its heartbeat) or when the stage stops; before,
/// the tail of a burst was never said. The stage's clock is a counter the test sets.
@Suite("overrun lines: the tail of a burst of gaps")
struct GapReportTests {
    /// A clock the test moves, in nanoseconds.
    final class TestClock {
        var nanoseconds: UInt64 = 5_000_000_000
        func set(seconds: Double) { nanoseconds = 5_000_000_000 + UInt64(seconds * 1e9) }
    }

    /// A stage with the default configuration, on `clock`.
    static func stage(_ clock: TestClock) throws -> DetectionStage {
        let detection = try FileDetection(configuration: try DaemonConfiguration.parse("", source: "test"), configPath: nil)
        let stage = try DetectionStage(
            settings: detection.plan.stageSettings, engine: detection.plan.engine, heads: detection.heads,
            snoreHead: detection.snoreHead)
        stage.clock = { clock.nanoseconds }
        return stage
    }

    /// Feeds 0.2 s of silence at 16 kHz at `position`, after `gap` lost frames (nil: none); returns the health
    /// events it produced and the position after it.
    static func feed(_ stage: DetectionStage, at position: inout Int64, gap: Int64? = nil) -> [String] {
        position += gap ?? 0
        let silence = [Float](repeating: 0, count: 3_200)
        let outputs = silence.withUnsafeBufferPointer {
            stage.process($0, sampleRate: 16_000, framePosition: position, gap: gap)
        }
        position += 3_200
        return health(outputs)
    }

    /// The health events among `outputs`, each as "STATE MESSAGE DETAILS" (the details as JSON, in order).
    static func health(_ outputs: [DetectionStage.Output]) -> [String] {
        outputs.compactMap {
            if case .health(let event) = $0 { "\(event.state.rawValue) \(event.message) \(JSONValue.object(event.details).encoded)" } else { nil }
        }
    }

    /// The `overrun` line for `gaps` gaps of `seconds` (as the line writes it: 3 decimals, trailing zeros trimmed) in all, `total` since the start.
    static func overrun(gaps: Int, seconds: String, total: Int) -> String {
        "overrun audio lost: \(gaps) gap(s), \(seconds) s in all (xrun or the analysis fell behind); windows restart after each gap "
            + #"{"gaps":\#(gaps),"lost_seconds":\#(seconds),"total_gaps":\#(total)}"#
    }

    @Test("three gaps within 2 s: the first said at once, the other two together 10 s after it, then nothing more")
    func theTailOfABurstIsSaidOnceTheTenSecondsHavePassed() throws {
        let clock = TestClock()
        let stage = try Self.stage(clock)
        var position: Int64 = 0
        #expect(Self.feed(stage, at: &position).isEmpty)
        #expect(Self.feed(stage, at: &position, gap: 800) == [Self.overrun(gaps: 1, seconds: "0.05", total: 1)])
        clock.set(seconds: 1)
        #expect(Self.feed(stage, at: &position, gap: 1_600).isEmpty)
        clock.set(seconds: 2)
        #expect(Self.feed(stage, at: &position, gap: 320).isEmpty)
        #expect(Self.feed(stage, at: &position).isEmpty)
        clock.set(seconds: 9.999)
        #expect(Self.health(stage.flushGapReport()).isEmpty)
        clock.set(seconds: 10)
        #expect(Self.health(stage.flushGapReport()) == [Self.overrun(gaps: 2, seconds: "0.12", total: 3)])
        clock.set(seconds: 30)
        #expect(Self.health(stage.flushGapReport()).isEmpty)
        // A gap after a quiet 10 s is said at once again, alone.
        #expect(Self.feed(stage, at: &position, gap: 160) == [Self.overrun(gaps: 1, seconds: "0.01", total: 4)])
        #expect(Self.health(stage.stop()).isEmpty)
        #expect(stage.counters.gaps == 4)
        #expect(abs(stage.counters.lostSeconds - 0.18) < 1e-9)
    }

    @Test("gaps held back when the stage stops are said in its stop's outputs")
    func theTailIsSaidAtStop() throws {
        let clock = TestClock()
        let stage = try Self.stage(clock)
        var position: Int64 = 0
        #expect(Self.feed(stage, at: &position).isEmpty)
        #expect(Self.feed(stage, at: &position, gap: 3_200) == [Self.overrun(gaps: 1, seconds: "0.2", total: 1)])
        clock.set(seconds: 1)
        #expect(Self.feed(stage, at: &position, gap: 480).isEmpty)
        #expect(Self.feed(stage, at: &position, gap: 16).isEmpty)
        clock.set(seconds: 1.5)
        #expect(Self.health(stage.stop()) == [Self.overrun(gaps: 2, seconds: "0.031", total: 3)])
        // Said once: a flush after the stop finds nothing held back.
        clock.set(seconds: 20)
        #expect(Self.health(stage.flushGapReport()).isEmpty)
    }

    @Test("the first gap is said at once even when the clock has run less than 10 s")
    func theFirstGapIsSaidAtOnce() throws {
        let clock = TestClock()
        clock.nanoseconds = 1_000_000_000  // 1 s after boot
        let stage = try Self.stage(clock)
        var position: Int64 = 0
        #expect(Self.feed(stage, at: &position).isEmpty)
        #expect(Self.feed(stage, at: &position, gap: 800) == [Self.overrun(gaps: 1, seconds: "0.05", total: 1)])
    }

    /// earshotd on real xruns: ALSA's `file` plugin writing what it captures to /dev/full, whose failed writes
    /// alsa-lib answers with -EIO, which capture recovers as gaps until 5 come within 2 s and the device fails; it
    /// is reopened 1, 2, 4 s later and fails the same way. The first xrun gap is said at once, the next ones are
    /// held back by the 10 s limit; stopped within those 10 s, the daemon says them at its stop. Every gap is then
    /// in exactly one `overrun` line: their `gaps` add up to the last line's `total_gaps`. Before, the held-back
    /// gaps of the tail were never said.
    @Test("earshotd on a device whose recovered errors are xruns: every gap is in one overrun line, the tail at stop",
          .needsEarshotdBuilt, .timeLimit(.minutes(1)))
    func everyXrunGapIsSaidOnceTheTailAtStop() throws {
        let directory = URL(fileURLWithPath: "/tmp/earshot-xruns-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        let home = directory.appendingPathComponent("home")
        let state = directory.appendingPathComponent("state")
        for url in [home, state] { try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true) }
        defer { try? FileManager.default.removeItem(at: directory) }
        let infile = directory.appendingPathComponent("zero.raw")
        try Data(count: 64).write(to: infile)
        try CaptureFixtures.filePCM("earshot_xruns", infile: infile.path, output: "/dev/full")
            .write(to: home.appendingPathComponent(".asoundrc"), atomically: true, encoding: .utf8)
        var environment = ProcessInfo.processInfo.environment
        for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] { environment[name] = nil }
        environment["HOME"] = home.path
        environment["STATE_DIRECTORY"] = state.path
        let daemon = try DaemonProcess(
            ["--device", "earshot_xruns", "--socket", directory.appendingPathComponent("e.sock").path, "--foreground",
             "--no-journal", "--watch", "baby_cry"],
            environment: environment)
        func overruns() -> [[String: Any]] {
            daemon.objects.filter { $0["type"] as? String == "health" && $0["state"] as? String == "overrun" }
        }
        // Three outages (sessions at 0, 1 and 3 s failed): the fourth session runs, some 7 s after the first xrun.
        try #require(TestWait.until(seconds: 30) { overruns().filter { $0["cause"] != nil }.count >= 3 },
                     "no three outages: \(daemon.lines.map(\.line)) \(daemon.errorText)")
        daemon.signal(SIGINT)
        #expect(daemon.wait(seconds: 10) == 0, "\(daemon.errorText)")
        let lines = overruns()
        let xrunLines = lines.filter { $0["cause"] == nil }
        let said = lines.reduce(0) { $0 + ($1["gaps"] as? Int ?? 0) }
        let total = try #require(lines.last?["total_gaps"] as? Int)
        #expect(said == total, "\(lines)")
        // The limit held gaps back (more xrun gaps than xrun lines), and they were said.
        let xrunGaps = xrunLines.reduce(0) { $0 + ($1["gaps"] as? Int ?? 0) }
        #expect(xrunGaps > xrunLines.count, "\(xrunLines)")
        #expect(xrunLines.first?["gaps"] as? Int == 1)
        for line in xrunLines {
            let gaps = line["gaps"] as? Int ?? -1
            let lost = JSONValue.format(line["lost_seconds"] as? Double ?? -1, decimals: 3)
            #expect(line["message"] as? String
                    == "audio lost: \(gaps) gap(s), \(lost) s in all (xrun or the analysis fell behind); windows restart after each gap")
        }
        print("xruns: \(lines.count) overrun lines (\(xrunLines.count) for xruns, gaps \(xrunLines.map { $0["gaps"] as? Int ?? -1 })), \(said) gaps said of \(total)")
    }
}
