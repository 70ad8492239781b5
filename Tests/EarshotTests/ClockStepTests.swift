import Foundation
import Synchronization
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotSupport

/// System clocks a test sets: the boot clock (ns) and the wall clock's offset from it (s), read together as
/// ``DaemonClock`` reads the system's.
final class TestClocks: Sendable {
    private let state: Mutex<(boot: UInt64, wallAtBootZero: Double)>

    init(boot: UInt64, wall: Double) {
        state = Mutex((boot, wall - Double(boot) / 1e9))
    }

    var readings: DaemonClock.Readings {
        { [self] in state.withLock { ($0.wallAtBootZero + Double($0.boot) / 1e9, $0.boot) } }
    }

    /// Both clocks advance by `seconds`.
    func advance(_ seconds: Double) { state.withLock { $0.boot += UInt64((seconds * 1e9).rounded()) } }
    /// The wall clock steps by `seconds` (NTP's `settimeofday`, `date -s`).
    func step(_ seconds: Double) { state.withLock { $0.wallAtBootZero += seconds } }
}

/// Trial 12: the wall clock stepping under a running earshotd (a Raspberry Pi without a real-time clock starts in 1970
/// or a month behind, then NTP sets it). The daemon's clock re-anchors on its heartbeat, says the step once
/// (`clock_changed`), and moves what it stamped before; durations never count the step.
@Suite("Clock steps: the daemon's clock, sleep sessions, history and retention (trial 12)", .serialized)
struct ClockStepTests {
    /// 1970-12-31T07:08:09Z, the trial's clock 20430 days behind 2026-12-07T07:08:09Z.
    static let boot1970 = 31_475_289.0
    static let stepTo2026 = 20_430.0 * 86_400

    /// `[history]` at `path`, keeping everything (the rows' dates are fixed, the machine's clock is not).
    static func history(_ path: String) -> HistorySettings {
        var settings = HistorySettings()
        settings.path = path
        settings.retentionDays = 0
        return settings
    }

    @Test("the clock anchor follows the boot clock, finds a step of 2 s or more (forward and back) and follows smaller ones silently")
    func anchorSteps() {
        var anchor = ClockAnchor(wallSeconds: 100, bootNanoseconds: 5_000_000_000)
        #expect(anchor.date(atBoot: 6_500_000_000).timeIntervalSince1970 == 101.5)
        // Both clocks advanced 2 s: no step.
        #expect(anchor.reanchor(wallSeconds: 102, bootNanoseconds: 7_000_000_000) == nil)
        // 1 s later the wall clock reads 1.9 s more than the boot clock advanced: followed, not said.
        #expect(anchor.reanchor(wallSeconds: 104.9, bootNanoseconds: 8_000_000_000) == nil)
        #expect(anchor == ClockAnchor(wallSeconds: 104.9, bootNanoseconds: 8_000_000_000))
        // NTP sets the clock from 1970 to 2026.
        #expect(anchor.reanchor(wallSeconds: 105.9 + Self.stepTo2026, bootNanoseconds: 9_000_000_000) == Self.stepTo2026)
        // A step back of an hour.
        #expect(anchor.reanchor(wallSeconds: 106.9 + Self.stepTo2026 - 3600, bootNanoseconds: 10_000_000_000) == -3600)
        #expect(anchor.date(atBoot: 10_000_000_000).timeIntervalSince1970 == 106.9 + Self.stepTo2026 - 3600)
    }

    @Test("the daemon's clock steps only at its check, and its uptime counts the boot clock: 18.0 s after a step of 20430 days and after one of -1 h")
    func daemonClock() {
        let clocks = TestClocks(boot: 3_000_000_000, wall: Self.boot1970)
        let clock = DaemonClock(readings: clocks.readings)
        clocks.advance(8)
        clocks.step(Self.stepTo2026)
        // Until the heartbeat checks, the clock goes on from its anchor.
        #expect(clock.now().timeIntervalSince1970 == Self.boot1970 + 8)
        #expect(clock.checkForStep() == DaemonClock.Step(
            seconds: Self.stepTo2026, before: Date(timeIntervalSince1970: Self.boot1970 + 8),
            after: Date(timeIntervalSince1970: Self.boot1970 + 8 + Self.stepTo2026)))
        #expect(clock.checkForStep() == nil)
        clocks.advance(10)
        #expect(clock.now().timeIntervalSince1970 == Self.boot1970 + 18 + Self.stepTo2026)
        #expect(clock.uptimeSeconds == 18.0)
        clocks.step(-3600)
        #expect(clock.checkForStep()?.seconds == -3600)
        #expect(clock.uptimeSeconds == 18.0)
    }

    @Test("clock_changed says the step and its two times; the history takes it, the phone does not")
    func healthEvent() {
        let health = HealthEvent.clockChanged(
            seconds: Self.stepTo2026 + 4.5, before: Date(timeIntervalSince1970: Self.boot1970),
            after: Date(timeIntervalSince1970: Self.boot1970 + Self.stepTo2026 + 4.5))
        #expect(health.message == "the system clock was set forward by 20430 d 0 h 0 min (from 1970-12-31T07:08:09.000Z to 2026-12-07T07:08:13.500Z; NTP or a manual change): times from now on follow it; the events this earshotd stored before and a running sleep session's start were moved by the step, and durations do not count it")
        #expect(health.details.encoded == #"{"step_seconds":1765152004.5}"#)
        #expect(health.state.priority == 5)
        #expect(HealthEvent.clockStepText(3600) == "1 h 0 min 0.0 s")
        #expect(HealthEvent.clockStepText(3.25) == "3.3 s")
        #expect(HistorySink(settings: Self.history("/nonexistent/h.sqlite3")).accepts(.health(health)))
        #expect(!NotifySink.healthStates.contains(.clockChanged))
    }

    /// A session of 18.24 s of audio on a clock `behind` seconds behind, set right 8 s into it; returns the stop
    /// reply and the published report.
    static func steppedSession(behind: Double) throws -> (reply: JSONObject, report: JSONObject, files: [String]) {
        let trueStart = 1_796_627_289.335  // 2026-12-07T07:08:09.335Z
        let clocks = TestClocks(boot: 40_000_000_000, wall: trueStart - behind)
        let clock = DaemonClock(readings: clocks.readings)
        let queue = DispatchQueue(label: "test.analysis")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-clock-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        defer { try? FileManager.default.removeItem(at: directory) }
        var settings = DaemonConfiguration.Sleep()
        settings.reportDirectory = directory.path
        let published = Mutex<[JSONObject]>([])
        let service = SleepService(
            analysisQueue: queue, settings: settings, timeZone: try #require(TimeZone(identifier: "UTC")),
            publishReport: { object in published.withLock { $0.append(object) } }, log: { _, _ in },
            clock: { clock.now() })
        let started = service.handle(command: "sleep_start")
        #expect(started["start"]?.stringValue == EventJSON.timestamp(Date(timeIntervalSince1970: trueStart - behind)))
        queue.sync {
            // 19 windows of 0.96 s every 0.96 s: 18.24 s of audio, heard as it plays.
            for k in 0..<19 {
                service.observe(window: ClassificationResult(
                    timeRange: TimeRange(start: Double(k) * 0.96, duration: 0.96), classifications: [], scores: [],
                    levelDBFS: -60, isGated: true))
                clocks.advance(0.96)
                if k == 8 {
                    clocks.step(behind)
                    // The heartbeat, on the analysis queue.
                    if let step = clock.checkForStep() { service.clockStepped(by: step.seconds) }
                }
            }
        }
        let reply = service.handle(command: "sleep_stop")
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        return (reply, try #require(published.withLock { $0 }.first), files)
    }

    @Test("a session started on a 1970 clock that NTP sets 8 s in is 18.24 s long, starts at its true time and has one bin (trial 12 #1: was 56 years of 5-minute bins)")
    func sessionFrom1970() throws {
        let (reply, report, files) = try Self.steppedSession(behind: Self.stepTo2026)
        #expect(reply["start"]?.stringValue == "2026-12-07T07:08:09.335Z")
        #expect(reply["end"]?.stringValue == "2026-12-07T07:08:27.575Z")
        #expect(report["duration_seconds"]?.encoded == "18.24")
        #expect(report["audio_seconds"]?.encoded == "18.24")
        #expect(report["bins"]?.encoded == #"[{"start":0.0,"snoring_seconds":0.0}]"#)
        #expect(files == ["snore-20261207-0708.json", "snore-20261207-0708.svg"])
    }

    @Test("a session started on a clock 30 days behind is 18.24 s long, not 30 days (trial 12 #2)")
    func sessionFromLastMonth() throws {
        let (reply, report, files) = try Self.steppedSession(behind: 30 * 86_400)
        #expect(reply["start"]?.stringValue == "2026-12-07T07:08:09.335Z")
        #expect(reply["end"]?.stringValue == "2026-12-07T07:08:27.575Z")
        #expect(report["duration_seconds"]?.encoded == "18.24")
        #expect(files == ["snore-20261207-0708.json", "snore-20261207-0708.svg"])
    }

    @Test("a clock step moves the rows this run stored and those still held, and later events carry the new time (trial 12 #3)")
    func historyRestamped() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        // A row of an earlier run: not moved.
        _ = try EventHistory(path: scratch.database).insert([HistoryTests.event("glass_break", -86_400, 1)])
        let recorder = HistoryRecorder(settings: Self.history(scratch.database)) { _ in }
        func window(_ k: Int) { recorder.observe(ClassificationResult(
            timeRange: TimeRange(start: Double(k) * 0.48, duration: 0.96), classifications: [], scores: [],
            levelDBFS: -20, isGated: false)) }
        func event(_ start: Double, _ end: Double) -> DetectionEvent {
            .offset(.init(group: "baby_cry", classLabel: "Baby cry", start: start, end: end, peakConfidence: 1,
                          meanConfidence: 0.99, positiveWindows: 9, reason: .holdElapsed))
        }
        let then1970 = Date(timeIntervalSince1970: Self.boot1970)
        for k in 0..<20 { window(k) }
        // Stream 2.4-9.6 s; the latest window ends at 10.08 s, "now" on the 1970 clock.
        recorder.record(event(2.4, 9.6), now: then1970)
        recorder.writer.flush()
        recorder.clockStepped(by: Self.stepTo2026)
        for k in 20..<40 { window(k) }
        recorder.record(event(12.0, 19.2), now: Date(timeIntervalSince1970: Self.boot1970 + 9.6 + Self.stepTo2026))
        recorder.close()
        let rows = try EventHistory(path: scratch.database, access: .readOnly).events()
        #expect(rows.map { "\($0.id) \(EventJSON.timestamp($0.start)) \(EventJSON.timestamp($0.end))" } == [
            "1 2026-02-28T22:00:00.000Z 2026-02-28T22:00:01.000Z",
            "2 2026-12-07T07:08:01.320Z 2026-12-07T07:08:08.520Z",
            "3 2026-12-07T07:08:10.920Z 2026-12-07T07:08:18.120Z",
        ])
    }

    @Test("events held while the database cannot be opened move with the step too")
    func heldEventsRestamped() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        let missing = scratch.directory.appendingPathComponent("later/history.sqlite3").path
        let writer = EventHistoryWriter(path: missing, retentionDays: 0) { _ in }
        var held = HistoryTests.event("baby_cry", 0, 7.2)
        held.start = Date(timeIntervalSince1970: Self.boot1970)
        held.end = Date(timeIntervalSince1970: Self.boot1970 + 7.2)
        writer.append(held)
        writer.clockStepped(by: Self.stepTo2026)
        writer.flush()
        #expect(writer.statistics.backlog == 1)
        try FileManager.default.createDirectory(atPath: (missing as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        writer.close()
        let rows = try EventHistory(path: missing, access: .readOnly).events()
        #expect(rows.map { "\(EventJSON.timestamp($0.start)) \(EventJSON.timestamp($0.end))" } == [
            "2026-12-07T07:08:09.000Z 2026-12-07T07:08:16.200Z",
        ])
    }

    @Test("retention deletes old rows stored before every kept row, not a 1970 row stored after a kept one (a run killed before NTP set the clock)")
    func retentionKeepsLaterStamps() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        let history = try EventHistory(path: scratch.database)
        var unset = HistoryTests.event("baby_cry", 0, 7.2)
        unset.start = Date(timeIntervalSince1970: Self.boot1970)
        unset.end = Date(timeIntervalSince1970: Self.boot1970 + 7.2)
        // 2026-03-01 minus 40 days, minus 10 days, then a row stamped in 1970.
        _ = try history.insert([HistoryTests.event("glass_break", -40 * 86_400, 1), HistoryTests.event("snoring", -10 * 86_400, 4), unset])
        #expect(try history.prune(endedBefore: HistoryTests.night.addingTimeInterval(-30 * 86_400)) == 1)
        #expect(try history.events().map(\.group) == ["baby_cry", "snoring"])
        // Once every row is older than the retention, all go.
        #expect(try history.prune(endedBefore: HistoryTests.night) == 2)
        #expect(try history.events().isEmpty)
    }
}
