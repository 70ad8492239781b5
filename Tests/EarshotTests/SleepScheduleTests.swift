import Foundation
import Testing
import Synchronization

import EarshotService

/// `[sleep] schedule`: sessions start and stop at the configured minute (a timer to the next change, re-armed after
/// each), in the zone's own daylight-saving rules.
@Suite("Sleep: the schedule's timer")
struct SleepScheduleTests {
    static func date(_ text: String) throws -> Date {
        try #require(try? Date(text, strategy: .iso8601))
    }

    static func settings(_ schedule: String) throws -> DaemonConfiguration.Sleep {
        var settings = DaemonConfiguration.Sleep()
        settings.schedule = try #require(SleepSchedule(schedule))
        settings.reportDirectory = "/nonexistent/earshot-schedule-test"
        return settings
    }

    static func service(_ schedule: String, zone: String, queue: DispatchQueue = DispatchQueue(label: "test.schedule"),
                        clock: @escaping @Sendable () -> Date = { Date() },
                        log: @escaping @Sendable (String, Int) -> Void = { _, _ in }) throws -> SleepService {
        return SleepService(analysisQueue: queue, settings: try settings(schedule),
                            timeZone: try #require(TimeZone(identifier: zone)), publishReport: { _ in }, log: log,
                            clock: clock)
    }

    @Test("the next change is the configured minute: trial 4's 18:58-19:00 in Asia/Kolkata; nothing within 10 min waits 10 min")
    func nextChange() throws {
        let service = try Self.service("18:58-19:00", zone: "Asia/Kolkata")
        // 18:57:14.693 local (the trial's session started at 18:58:14.7, up to 30 s late).
        #expect(service.nextScheduleChange(after: try Self.date("2026-12-06T13:27:14.693Z")) == (try Self.date("2026-12-06T13:28:00Z")))
        #expect(service.nextScheduleChange(after: try Self.date("2026-12-06T13:28:00Z")) == (try Self.date("2026-12-06T13:30:00Z")))
        #expect(service.nextScheduleChange(after: try Self.date("2026-12-06T13:29:59.999Z")) == (try Self.date("2026-12-06T13:30:00Z")))
        // 19:00 local: the next opening is tomorrow, beyond the 10-minute look-ahead.
        #expect(service.nextScheduleChange(after: try Self.date("2026-12-06T13:30:00Z")) == (try Self.date("2026-12-06T13:40:00Z")))
    }

    @Test("daylight saving (Europe/Berlin, 02:30-07:00): the night 02:30 does not exist the session opens at 03:00 CEST; the night it comes twice, at the first")
    func daylightSaving() throws {
        let service = try Self.service("02:30-07:00", zone: "Europe/Berlin")
        // 2026-03-29: 01:55 CET; at 02:00 CET clocks jump to 03:00 CEST (01:00Z).
        #expect(service.nextScheduleChange(after: try Self.date("2026-03-29T00:55:00Z")) == (try Self.date("2026-03-29T01:00:00Z")))
        // 2026-10-25: 02:25 CEST, the first time; 02:30 CEST is 00:30Z.
        #expect(service.nextScheduleChange(after: try Self.date("2026-10-25T00:25:00Z")) == (try Self.date("2026-10-25T00:30:00Z")))
        // 06:55 CET (05:55Z, after the change): closes at 07:00 CET, 06:00Z.
        #expect(service.nextScheduleChange(after: try Self.date("2026-10-25T05:55:00Z")) == (try Self.date("2026-10-25T06:00:00Z")))
    }

    @Test("a running daemon's schedule: the session starts at 18:58:00 and stops at 19:00:00 to the tenth of a second (a shifted clock; the stop after a clock step and a reload)")
    func startsAndStopsOnTheMinute() throws {
        // The service's clock runs at real speed from a chosen instant: 1.5 s before the window opens.
        let base = Mutex((fake: try Self.date("2026-12-06T13:27:58.500Z"), real: Date()))
        let clock: @Sendable () -> Date = { base.withLock { $0.fake.addingTimeInterval(Date().timeIntervalSince($0.real)) } }
        let lines = Mutex<[String]>([])
        let queue = DispatchQueue(label: "test.analysis")
        let service = try Self.service("18:58-19:00", zone: "Asia/Kolkata", queue: queue, clock: clock, log: { line, _ in lines.withLock { $0.append(line) } })
        service.startSchedule()
        Thread.sleep(forTimeInterval: 1)
        #expect(service.handle(command: "sleep_status")["state"]?.stringValue == "idle")
        Thread.sleep(forTimeInterval: 0.8)
        let status = service.handle(command: "sleep_status")
        #expect(status["state"]?.stringValue == "running")
        let start = status["start"]?.stringValue ?? "?"
        #expect(start.hasPrefix("2026-12-06T13:28:00.0"), "\(start)")
        // The clock is stepped to 18:59:58.5 (as an NTP step would), then a reload re-reads the schedule.
        base.withLock { $0 = (try! Self.date("2026-12-06T13:29:58.500Z"), Date()) }
        let settings = try Self.settings("18:58-19:00")
        queue.sync { service.reconfigure(settings) }
        Thread.sleep(forTimeInterval: 2)
        #expect(service.handle(command: "sleep_status")["state"]?.stringValue == "idle")
        let stopped = lines.withLock { $0 }.first { $0.hasPrefix("sleep session from ") } ?? "?"
        #expect(stopped.hasPrefix("sleep session from \(start) to 2026-12-06T13:30:00.0"), "\(lines.withLock { $0 })")
        #expect(lines.withLock { $0 }.contains("sleep session started by the schedule 18:58-19:00"))
    }
}
