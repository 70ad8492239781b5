import Foundation
import Synchronization
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotSupport
import EarshotTools

/// A temporary directory removed at the end of a test.
struct HistoryScratch {
    let directory: URL
    var database: String { directory.appendingPathComponent("history.sqlite3").path }

    init() throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("earshot-history-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    func remove() { try? FileManager.default.removeItem(at: directory) }
}

/// Collects a writer's reports (called on the writer's queue).
final class ReportLog: Sendable {
    private let reports = Mutex<[EventHistoryWriter.Report]>([])
    var all: [EventHistoryWriter.Report] { reports.withLock { $0 } }
    func append(_ report: EventHistoryWriter.Report) { reports.withLock { $0.append(report) } }
}

@Suite("History: event database")
struct HistoryTests {
    /// 2026-03-01T22:00:00Z.
    static let night = Date(timeIntervalSince1970: 1_772_402_400)

    static func event(
        _ group: String, _ startOffset: Double, _ duration: Double, level: Float = -30, classLabel: String? = nil
    ) -> HistoryEvent {
        HistoryEvent(
            group: group, classLabel: classLabel ?? (group == "snoring" ? "Snoring" : "Smoke detector, smoke alarm"),
            start: night.addingTimeInterval(startOffset), end: night.addingTimeInterval(startOffset + duration),
            peakConfidence: 0.8125, meanConfidence: 0.5, levelDBFS: level, peakLevelDBFS: level + 6.5, windows: 7,
            endReason: "hold_elapsed")
    }

    @Test("a new history and its WAL are mode 0600 whatever the umask")
    func newHistoryIsPrivate() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        let previous = umask(0o022)
        defer { umask(previous) }
        let history = try EventHistory(path: scratch.database)
        _ = try history.insert([Self.event("snoring", 0, 1.0)])
        for path in [scratch.database, scratch.database + "-wal"] {
            var status = stat()
            #expect(stat(path, &status) == 0, "\(path)")
            #expect(status.st_mode & 0o777 == 0o600, "\(path): \(String(status.st_mode & 0o777, radix: 8))")
        }
    }

    @Test("the daemon's connection keeps a 128 KiB page cache, not SQLite's 2000 KiB default that grew its RSS")
    func boundedPageCache() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        let history = try EventHistory(path: scratch.database)
        #expect(EventHistory.pageCacheKibibytes == 128)
        #expect(try history.pageCacheSizeKibibytes() == 128)
        // The bound holds once the file is larger than the cache: 5,000 rows (about 600 KB with both indexes).
        _ = try history.insert((0..<5000).map { Self.event("smoke_alarm", Double($0), 0.5) })
        #expect(try history.pageCacheSizeKibibytes() == 128)
        #expect(try history.events().count == 5000)
    }

    @Test("insert and query round trip: exact rows, time, group and limit filters")
    func roundTrip() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        let history = try EventHistory(path: scratch.database)
        let stored = [
            Self.event("snoring", 0, 12.48),
            Self.event("smoke_alarm", 600, 4.32),
            Self.event("snoring", 3600, 95.04, level: -41.25),
            Self.event("snoring", 7200.123, 3.5),
        ]
        let ids = try history.insert(stored)
        #expect(ids == [1, 2, 3, 4])
        var expected = stored
        for index in expected.indices { expected[index].id = Int64(index + 1) }

        // A second connection, read-only, sees exactly what was written (times to the millisecond).
        let reader = try EventHistory(path: scratch.database, access: .readOnly)
        #expect(try reader.events() == expected)
        #expect(try reader.events()[3].start == Date(timeIntervalSince1970: 1_772_409_600.123))
        #expect(try reader.events(matching: HistoryQuery(groups: ["snoring"])).map(\.id) == [1, 3, 4])
        #expect(try reader.events(matching: HistoryQuery(groups: ["smoke_alarm", "baby_cry"])) == [expected[1]])
        // since: ended at or after; until: started at or before.
        #expect(try reader.events(matching: HistoryQuery(since: Self.night.addingTimeInterval(604.32))).map(\.id) == [2, 3, 4])
        #expect(try reader.events(matching: HistoryQuery(since: Self.night.addingTimeInterval(604.33))).map(\.id) == [3, 4])
        #expect(try reader.events(matching: HistoryQuery(until: Self.night.addingTimeInterval(3600))).map(\.id) == [1, 2, 3])
        #expect(try reader.events(matching: HistoryQuery(
            since: Self.night.addingTimeInterval(100), until: Self.night.addingTimeInterval(5000), groups: ["snoring"])).map(\.id) == [3])
        // limit: the newest N, still oldest first.
        #expect(try reader.events(matching: HistoryQuery(limit: 2)).map(\.id) == [3, 4])
        #expect(try reader.events(matching: HistoryQuery(groups: ["nothing"])) == [])
    }

    @Test("retention: the writer deletes events that ended more than retention_days ago")
    func retention() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        let history = try EventHistory(path: scratch.database)
        // Ended 31 days, 30 days + 1 s, and 29 days before "now".
        let now = Self.night.addingTimeInterval(40 * 86_400)
        try history.insert([
            Self.event("snoring", 9 * 86_400 - 10, 10),
            Self.event("snoring", 10 * 86_400 - 11, 10),
            Self.event("snoring", 11 * 86_400 - 10, 10),
        ])
        let reports = ReportLog()
        let writer = EventHistoryWriter(path: scratch.database, retentionDays: 30, now: { now }) { reports.append($0) }
        writer.append(Self.event("smoke_alarm", 40 * 86_400 - 60, 5))
        writer.close()
        #expect(writer.statistics == EventHistoryWriter.Statistics(written: 1, dropped: 0, backlog: 0, pruned: 2, failing: false))
        #expect(reports.all == [])
        let left = try EventHistory(path: scratch.database, access: .readOnly).events()
        #expect(left.map(\.id) == [3, 4])
        #expect(left.map(\.group) == ["snoring", "smoke_alarm"])
        #expect(try history.prune(endedBefore: now) == 2)
    }

    @Test("a database locked by another process is reported once, not fatal; the events wait and are stored later")
    func lockedDatabase() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        _ = try EventHistory(path: scratch.database)
        let locker = try SQLiteDatabase(path: scratch.database, mode: .readWriteCreate)
        try locker.execute("BEGIN EXCLUSIVE")

        let reports = ReportLog()
        let writer = EventHistoryWriter(path: scratch.database, retentionDays: 0, busyTimeoutMilliseconds: 20) {
            reports.append($0)
        }
        writer.append(Self.event("snoring", 0, 10))
        writer.append(Self.event("snoring", 60, 10))
        writer.flush()
        let failing = "event history \(scratch.database): cannot write: database is locked (another process holds a lock on it; close that program or wait); events are kept in memory and retried every 30 s"
        #expect(reports.all == [.failing(failing)])
        #expect(writer.statistics == EventHistoryWriter.Statistics(written: 0, dropped: 0, backlog: 2, pruned: 0, failing: true))

        try locker.execute("COMMIT")
        writer.append(Self.event("smoke_alarm", 120, 3))
        writer.close()
        #expect(reports.all == [
            .failing(failing),
            .recovered("event history \(scratch.database) is writable again (no events were lost)"),
        ])
        #expect(writer.statistics.written == 3)
        #expect(try EventHistory(path: scratch.database, access: .readOnly).events().map(\.group) == ["snoring", "snoring", "smoke_alarm"])
    }

    @Test("the history's outage and its recovery reach the socket as health events: history_unavailable, then history_recovered (trial 11 #6)")
    func recoveryIsAHealthEvent() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        _ = try EventHistory(path: scratch.database)
        let locker = try SQLiteDatabase(path: scratch.database, mode: .readWriteCreate)
        try locker.execute("BEGIN EXCLUSIVE")
        let sockets = try TemporarySocketDirectory()
        let server = try SocketTestSupport.server(sockets.file("e.sock"))
        var settings = HistorySettings()
        settings.path = scratch.database
        let history = HistorySink(settings: settings)
        let router = OutputRouter(sinks: [SocketSink(server: server), history])
        router.start()
        let client = try SocketTestSupport.subscriber(sockets.file("e.sock"))

        // Locked: the write waits the busy timeout (2 s), fails, and the event is kept.
        history.recorder.writer.append(Self.event("smoke_alarm", 0, 10))
        history.recorder.writer.flush()
        try locker.execute("COMMIT")
        history.recorder.writer.append(Self.event("smoke_alarm", 60, 10))
        history.recorder.writer.flush()
        router.flush()
        router.stop()
        var states: [String] = []
        var messages: [String] = []
        while case .line(let line) = try client.readLine(timeoutSeconds: SocketTestSupport.timeout) {
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { continue }
            states.append(object["type"] as? String == "health" ? object["state"] as? String ?? "" : object["type"] as? String ?? "")
            if let message = object["message"] as? String { messages.append(message) }
            if object["type"] as? String == "shutdown" { break }
        }
        #expect(states == ["history_unavailable", "history_recovered", "shutdown"])
        #expect(messages == [
            "event history \(scratch.database): cannot write: database is locked (another process holds a lock on it; close that program or wait); events are kept in memory and retried every 30 s",
            "event history \(scratch.database) is writable again (no events were lost)",
        ])
        #expect(HealthEvent.State.historyRecovered.priority == 6)
        #expect(try EventHistory(path: scratch.database, access: .readOnly).events().count == 2)
    }

    @Test("a directory that cannot hold the database is reported with the fix, and appends stay harmless")
    func unwritableLocation() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        // /proc accepts no new files, even for root: like a read-only state directory.
        let path = "/proc/earshot-history-test.sqlite3"
        let reports = ReportLog()
        let writer = EventHistoryWriter(path: path, retentionDays: 30) { reports.append($0) }
        for offset in stride(from: 0.0, to: 30, by: 10) { writer.append(Self.event("snoring", offset, 5)) }
        writer.close()
        #expect(reports.all == [.failing(
            "event history \(path): cannot open: unable to open database file (check that /proc exists and is writable by the daemon's user; under systemd use StateDirectory=earshot, or set [history] path); events are kept in memory and retried every 30 s")])
        #expect(writer.statistics == EventHistoryWriter.Statistics(written: 0, dropped: 0, backlog: 3, pruned: 0, failing: true))
    }

    @Test("a full database is an I/O error naming the fix; nothing of the failed batch is stored")
    func fullDatabase() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        let history = try EventHistory(path: scratch.database)
        var pages = 0
        try history.database.run("PRAGMA page_count") { pages = Int($0.integer(0)) }
        try history.database.execute("PRAGMA max_page_count = \(pages + 1)")
        let batch = (0..<400).map { Self.event("snoring", Double($0) * 60, 5, classLabel: String(repeating: "x", count: 100)) }
        #expect(throws: EarshotError(
            .io,
            "event history \(scratch.database): cannot write: database or disk is full (free space on that file system, or lower [history] retention_days)",
            cause: "database or disk is full")) {
            try history.insert(batch)
        }
        #expect(try history.events() == [])
    }

    @Test("files that are not a history are refused with one clear line")
    func notAHistory() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        let text = scratch.directory.appendingPathComponent("notes.txt").path
        try Data(String(repeating: "not a database\n", count: 100).utf8).write(to: URL(fileURLWithPath: text))
        #expect(throws: EarshotError(
            .data, "event history \(text): cannot read: file is not a database (the file is not an Earshot event history; move it aside)",
            cause: "file is not a database")) {
            _ = try EventHistory(path: text, access: .readOnly)
        }
        let other = scratch.directory.appendingPathComponent("other.sqlite3").path
        try SQLiteDatabase(path: other, mode: .readWriteCreate).execute("CREATE TABLE t (x)")
        #expect(throws: EarshotError(.data, "\(other) is not an Earshot event history (it has no events table)")) {
            _ = try EventHistory(path: other, access: .readOnly)
        }
    }

    @Test("earshot history as a user who may read a root-owned WAL history but not write beside it: listed read-only; with the daemon's -wal there, the reader's advice (66)",
          .needsEarshotBuilt, .enabled(if: getuid() == 0, "needs root, to read as the user nobody through setpriv"))
    func readOnlyListing() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        chmod(scratch.directory.path, 0o755)  // root's directory: nobody may enter it, not create files in it
        let path = scratch.database
        let earshot = try #require(EarshotCLI.executable)
        let asNobody = { () throws -> EarshotCLI.Outcome in
            try EarshotCLI.runProcess(
                URL(fileURLWithPath: "/usr/bin/setpriv"),
                ["--reuid=65534", "--regid=65534", "--clear-groups", earshot.path, "history", "--db", path, "--format", "jsonl"],
                timeout: 20)
        }
        let expected: [String]
        do {
            let writer = try EventHistory(path: path)  // the daemon's connection: WAL mode
            try writer.insert([Self.event("snoring", 60, 12), Self.event("smoke_alarm", 120, 30)])
            expected = try writer.events().map { HistoryListing.line(for: $0, format: .jsonl, timeZone: .current) }
        }  // closed: SQLite checkpoints and removes the -wal and -shm files
        chmod(path, 0o644)
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.directory.path) == ["history.sqlite3"])
        #expect(expected.count == 2)
        let listed = try asNobody()
        #expect(listed.status == 0, "\(listed.standardError)")
        #expect(listed.outputLines == expected)
        #expect(listed.standardError.isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.directory.path) == ["history.sqlite3"])

        // The daemon has it open: its -wal and -shm (0600, root's) are needed to read the latest events.
        let writer = try EventHistory(path: path)
        try writer.insert(Self.event("baby_cry", 180, 5))
        chmod(path + "-wal", 0o600)
        chmod(path + "-shm", 0o600)
        let refused = try asNobody()
        #expect(refused.status == 66)
        #expect(refused.standardOutput.isEmpty)
        #expect(refused.errorLines == [
            "earshot: event history \(path): cannot read: unable to open database file (earshotd has it open and this user may not read its \(path)-wal and -shm files; run as root or the daemon's user: sudo earshot history)",
        ])
        withExtendedLifetime(writer) {}
    }

    @Test("the level meter measures an event over its windows and maps stream time to the wall clock")
    func levelMeter() {
        var meter = EventLevelMeter()
        let levels: [Float] = [-60, -30, -20, -30, -60, -60]
        var recorded: [HistoryEvent] = []
        let now = Self.night
        for (index, level) in levels.enumerated() {
            let start = 100 + 0.48 * Double(index)
            meter.observe(windowStart: start, windowDuration: 0.96, levelDBFS: level)
            if index == 2 {
                #expect(meter.finish(.onset(.init(group: "snoring", classLabel: "Snoring", confidence: 0.5, start: 100.48,
                                                   decisionTime: 102.4)), now: now) == nil)
            }
        }
        // Windows 1...3 (100.48 to 102.40) lie inside the event: levels -30, -20, -30.
        let offset = DetectionEvent.Offset(
            group: "snoring", classLabel: "Snoring", start: 100.48, end: 102.40, peakConfidence: 0.75,
            meanConfidence: 0.5, positiveWindows: 3, reason: .holdElapsed)
        if let event = meter.finish(.offset(offset), now: now) { recorded.append(event) }
        #expect(meter.latestWindowEnd == 100 + 0.48 * 5 + 0.96)
        let energy = (2 * pow(10, -3.0) + pow(10, -2.0)) / 3
        #expect(recorded == [HistoryEvent(
            group: "snoring", classLabel: "Snoring", start: now.addingTimeInterval(100.48 - 103.36),
            end: now.addingTimeInterval(102.40 - 103.36), peakConfidence: 0.75, meanConfidence: 0.5,
            levelDBFS: Float(10 * log10(energy)), peakLevelDBFS: -20, windows: 3, endReason: "hold_elapsed")])
    }

    @Test("replayed input (--input-speed other than 1): history times are the daemon's start plus stream seconds, in order, whenever the events are routed (trial 4 #7)")
    func streamTimeLine() {
        let origin = Self.night
        var meter = EventLevelMeter(timeLine: .stream(origin: origin))
        for index in 0..<2_000 { meter.observe(windowStart: 0.48 * Double(index), windowDuration: 0.96, levelDBFS: -30) }
        func offset(_ start: Double, _ end: Double) -> DetectionEvent {
            .offset(.init(group: "snoring", classLabel: "Snoring", start: start, end: end, peakConfidence: 0.5,
                          meanConfidence: 0.5, positiveWindows: 3, reason: .holdElapsed))
        }
        // At --input-speed max three events end within a second of the wall clock, 13 s after the start: the
        // live time line would put them minutes before the daemon started, out of order.
        let first = meter.finish(offset(59.52, 180.00), now: origin.addingTimeInterval(13.0))
        let second = meter.finish(offset(523.20, 693.12), now: origin.addingTimeInterval(13.2))
        let third = meter.finish(offset(995.52, 1086.72), now: origin.addingTimeInterval(13.1))
        // Times are kept to the millisecond.
        func at(_ date: Date?, _ seconds: Double) -> Bool {
            guard let date else { return false }
            return abs(date.timeIntervalSince(origin) - seconds) < 0.0005
        }
        #expect(at(first?.start, 59.52) && at(first?.end, 180.00), "\(String(describing: first))")
        #expect(at(second?.start, 523.20) && at(second?.end, 693.12), "\(String(describing: second))")
        #expect(at(third?.start, 995.52) && at(third?.end, 1086.72), "\(String(describing: third))")
        // The live time line (real-time input) still follows the routed time: the latest window's end is now.
        var live = EventLevelMeter()
        for index in 0..<2_000 { live.observe(windowStart: 0.48 * Double(index), windowDuration: 0.96, levelDBFS: -30) }
        let latest = 0.48 * 1_999 + 0.96
        #expect(at(live.finish(offset(59.52, 180.00), now: origin)?.start, 59.52 - latest))
    }

    @Test("the recorder stores a finished event with its loudness and wall-clock times")
    func recorder() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        var settings = DaemonConfiguration.History()
        settings.path = scratch.database
        let reports = ReportLog()
        let recorder = HistoryRecorder(settings: settings) { reports.append($0) }
        for index in 0..<10 {
            let result = ClassificationResult(
                timeRange: TimeRange(start: 0.48 * Double(index), duration: 0.96), classifications: [], scores: [],
                levelDBFS: index == 3 ? -12 : -40, isGated: false)
            recorder.observe(result)
        }
        // The latest window ends at 0.48 * 9 + 0.96 = 5.28 s of stream time, at `now`.
        let now = Self.night
        recorder.recordFinished(group: "smoke_alarm", classLabel: "Smoke detector, smoke alarm", start: 0.96, end: 2.88,
                                peakConfidence: 0.9, meanConfidence: 0.7, windows: 3, endReason: .holdElapsed, now: now)
        recorder.close()
        #expect(reports.all == [])
        let stored = try EventHistory(path: scratch.database, access: .readOnly).events()
        // Windows 2, 3 and 4 lie inside [0.96, 2.88]: -40, -12, -40 dBFS.
        let level = Float(10 * log10((2 * pow(10, -4.0) + pow(10, -1.2)) / 3))
        #expect(stored.count == 1)
        // Stored to the millisecond: 4.32 s and 2.40 s before `now`.
        #expect(stored.first.map { HistoryEvent.milliseconds($0.start) } == HistoryEvent.milliseconds(now) - 4_320)
        #expect(stored.first.map { HistoryEvent.milliseconds($0.end) } == HistoryEvent.milliseconds(now) - 2_400)
        #expect(stored.first.map { abs($0.levelDBFS - level) < 1e-5 } == true)
        #expect(stored.first?.peakLevelDBFS == -12)
        #expect(stored.first?.windows == 3)
    }

    @Test("history command line: options, times and exact errors")
    func commandLine() throws {
        let now = Self.night
        let utc = try #require(TimeZone(identifier: "UTC"))
        let listing = try HistoryListing.parse(
            ["--since", "8h", "--group", "snoring,smoke_alarm", "--group=baby_cry", "--format", "csv", "--limit", "5",
             "--db", "/tmp/h.sqlite3", "--until=2026-03-01T21:30"], now: now, timeZone: utc)
        var expected = HistoryListing()
        expected.since = now.addingTimeInterval(-8 * 3600)
        expected.until = now.addingTimeInterval(-1800)
        expected.groups = ["snoring", "smoke_alarm", "baby_cry"]
        expected.format = .csv
        expected.limit = 5
        expected.databasePath = "/tmp/h.sqlite3"
        expected.sinceText = "8h"
        expected.untilText = "2026-03-01T21:30"
        #expect(listing == expected)
        #expect(HistoryListing.parseTime("90s", now: now, timeZone: utc) == now.addingTimeInterval(-90))
        #expect(HistoryListing.parseTime("2d", now: now, timeZone: utc) == now.addingTimeInterval(-2 * 86_400))
        #expect(HistoryListing.parseTime("2026-03-01", now: now, timeZone: utc) == now.addingTimeInterval(-22 * 3600))
        #expect(HistoryListing.parseTime("2026-03-01T23:00:00+01:00", now: now, timeZone: utc) == now)

        let errors: [([String], String)] = [
            (["--since", "yesterday"], "--since \"yesterday\": expected a duration (90s, 30m, 8h, 2d, 1w), a local date or time (2026-05-01, 2026-05-01T22:30, 22:30) or ISO 8601 with Z or an offset (2026-05-01T22:30Z, 2026-05-01T22:30+02:00)"),
            (["--until", "2026-03-01T21:00+25:00"], "--until \"2026-03-01T21:00+25:00\": expected a duration (90s, 30m, 8h, 2d, 1w), a local date or time (2026-05-01, 2026-05-01T22:30, 22:30) or ISO 8601 with Z or an offset (2026-05-01T22:30Z, 2026-05-01T22:30+02:00)"),
            (["--format", "xml"], "--format \"xml\": expected text, jsonl or csv"),
            (["--limit", "0"], "--limit \"0\": expected a whole number of events, 1 or more"),
            (["--group"], "--group needs a value (\(HistoryListing.usage))"),
            (["--verbose"], "unknown option \"--verbose\" (\(HistoryListing.usage))"),
        ]
        for (arguments, message) in errors {
            #expect(throws: EarshotError(.usage, message)) { _ = try HistoryListing.parse(arguments, now: now) }
        }
    }

    @Test("--since/--until: ISO 8601 with Z or an offset without seconds, and a local time of day (the last one before now)")
    func timesWithoutSeconds() throws {
        let now = Self.night  // 2026-03-01T22:00:00Z
        let utc = try #require(TimeZone(identifier: "UTC"))
        let kolkata = try #require(TimeZone(identifier: "Asia/Kolkata"))  // now is 2026-03-02 03:30 there
        let cases: [(String, TimeZone, Date?)] = [
            ("2026-03-01T21:00Z", utc, now.addingTimeInterval(-3600)),
            ("2026-03-01T21:00z", kolkata, now.addingTimeInterval(-3600)),
            ("2026-03-01T23:00+01:00", utc, now),
            ("2026-03-02T03:30+05:30", utc, now),
            ("2026-03-02T03:30+0530", utc, now),
            ("2026-03-01T17:00-05", utc, now),
            ("2026-03-01T21:00:30Z", utc, now.addingTimeInterval(-3570)),
            ("22:00", utc, now),
            ("21:15", utc, now.addingTimeInterval(-2700)),
            ("22:30", utc, now.addingTimeInterval(-23.5 * 3600)),
            ("22:30:15", utc, now.addingTimeInterval(-23.5 * 3600 + 15)),
            ("22:30", kolkata, now.addingTimeInterval(-5 * 3600)),
            ("02:00", kolkata, now.addingTimeInterval(-1.5 * 3600)),
            ("2026-03-01T21:00+25:00", utc, nil),
            ("2026-03-01T21:00+5:30", utc, nil),
            ("2026-03-01T21:00Q", utc, nil),
            ("24:00", utc, nil),
            ("9:30", utc, nil),
        ]
        for (text, zone, expected) in cases {
            #expect(HistoryListing.parseTime(text, now: now, timeZone: zone) == expected, "\(text) in \(zone.identifier)")
        }
    }

    @Test("earshot history --since 2026-12-06T13:00Z and +05:30 are accepted on the command line", .needsEarshotBuilt)
    func commandLineZonedSince() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        for since in ["2026-12-06T13:00Z", "2026-12-06T13:00+05:30", "22:30"] {
            let run = try #require(try EarshotCLI.run(["history", "--db", scratch.database, "--since", since], in: scratch.directory))
            // Parsed: the next complaint is the missing database (66), not the time (64).
            #expect(run.status == 66, "\(since): \(run.standardError)")
        }
        let bad = try #require(try EarshotCLI.run(["history", "--since", "tonight"], in: scratch.directory))
        #expect(bad.status == 64)
        #expect(bad.errorLines == ["earshot: --since \"tonight\": expected a duration (90s, 30m, 8h, 2d, 1w), a local date or time (2026-05-01, 2026-05-01T22:30, 22:30) or ISO 8601 with Z or an offset (2026-05-01T22:30Z, 2026-05-01T22:30+02:00)"])
    }

    @Test("history formats: text, jsonl and csv lines are exact (class labels with commas are quoted)")
    func formats() throws {
        let utc = try #require(TimeZone(identifier: "UTC"))
        var event = Self.event("smoke_alarm", 61.5, 4.32)
        event.id = 12
        #expect(HistoryListing.line(for: event, format: .text, timeZone: utc)
            == "2026-03-01 22:01:01  4.3 s  smoke_alarm  Smoke detector, smoke alarm  peak 0.81 mean 0.50  -30.0 dBFS (peak -23.5)")
        // A model's class in words in the text (as the journal and `subscribe --format text` give it); the
        // machine-readable formats keep the class as stored.
        var cry = event
        cry.group = "baby_cry"
        cry.classLabel = "builtin_baby_cry:baby_cry"
        #expect(HistoryListing.line(for: cry, format: .text, timeZone: utc)
            == "2026-03-01 22:01:01  4.3 s  baby_cry  Baby cry  peak 0.81 mean 0.50  -30.0 dBFS (peak -23.5)")
        #expect(HistoryListing.line(for: cry, format: .jsonl).contains(#""class":"builtin_baby_cry:baby_cry""#))
        #expect(HistoryListing.line(for: event, format: .jsonl)
            == #"{"id":12,"start":"2026-03-01T22:01:01.500Z","end":"2026-03-01T22:01:05.820Z","duration":4.32,"group":"smoke_alarm","class":"Smoke detector, smoke alarm","peak_confidence":0.8125,"mean_confidence":0.5,"level_dbfs":-30.0,"peak_level_dbfs":-23.5,"windows":7,"reason":"hold_elapsed"}"#)
        #expect(HistoryListing.csvHeader
            == "id,start,end,duration,group,class,peak_confidence,mean_confidence,level_dbfs,peak_level_dbfs,windows,reason")
        #expect(HistoryListing.line(for: event, format: .csv)
            == #"12,2026-03-01T22:01:01.500Z,2026-03-01T22:01:05.820Z,4.32,smoke_alarm,"Smoke detector, smoke alarm",0.8125,0.5,-30.0,-23.5,7,hold_elapsed"#)
    }

    @Test("[history] and [sleep] settings are read and checked; the unit gives the database its state directory")
    func configuration() throws {
        let configuration = try DaemonConfiguration.parse(
            "[history]\nenabled = no\npath = /srv/e.sqlite3\nretention_days = 7\n[sleep]\nschedule = 22:30-07:00\nreport_dir = /srv/sleep\nthreshold = 0.4\nrhythm_threshold = 0.2\nmodel = /srv/snoring.earshot\n",
            source: "t.conf")
        var expected = DaemonConfiguration()
        expected.history.enabled = false
        expected.history.path = "/srv/e.sqlite3"
        expected.history.retentionDays = 7
        expected.sleep.schedule = SleepSchedule(startMinute: 22 * 60 + 30, endMinute: 7 * 60)
        expected.sleep.reportDirectory = "/srv/sleep"
        expected.sleep.threshold = 0.4
        expected.sleep.rhythmThreshold = 0.2
        expected.sleep.modelPath = "/srv/snoring.earshot"
        #expect(configuration == expected)

        let bad: [(String, String)] = [
            ("[history]\nretention_days = -1", "t.conf:2: [history] retention_days = -1: must be a whole number in [0, 36500] days (0 keeps everything)"),
            ("[history]\nenabled = perhaps", "t.conf:2: [history] enabled = perhaps: must be true or false (or yes/no, on/off, 1/0)"),
            ("[sleep]\nschedule = 25:00-07:00", "t.conf:2: [sleep] schedule = 25:00-07:00: must be a daily time window HH:MM-HH:MM in local time, e.g. 22:30-07:00 (empty: no schedule)"),
            ("[sleep]\nthreshold = 0.2\nrhythm_threshold = 0.25", "t.conf:3: [sleep] rhythm_threshold = 0.25: must be at most threshold (0.2)"),
            ("[sleep]\nrhythm_threshold = 0.25\nthreshold = 0.2", "t.conf:2: [sleep] rhythm_threshold = 0.25: must be at most threshold (0.2)"),
            // Only threshold written, below the default rhythm threshold: the line and key written, and the fix.
            ("[sleep]\nthreshold = 0.1", "t.conf:2: [sleep] threshold = 0.1: below rhythm_threshold (default 0.2); set rhythm_threshold too, at most 0.1"),
            ("# night\n[sleep]\n\nreport_dir = /srv/s\nthreshold = 0.15", "t.conf:5: [sleep] threshold = 0.15: below rhythm_threshold (default 0.2); set rhythm_threshold too, at most 0.15"),
        ]
        for (text, message) in bad {
            #expect(throws: EarshotError(.config, message)) { _ = try DaemonConfiguration.parse(text, source: "t.conf") }
        }

        let unit = try LifecycleServiceFileTests.serviceSettings()
        let stateDirectory = try #require(unit["StateDirectory"]?.first)
        #expect(stateDirectory == "earshot")
        #expect(DaemonConfiguration().history.path == "/var/lib/\(stateDirectory)/history.sqlite3")
        #expect(DaemonConfiguration().sleep.reportDirectory == "/var/lib/\(stateDirectory)/sleep")
    }

    @Test("earshotd --check-config: [sleep] threshold alone below the default rhythm threshold is its line, exit 78", .needsEarshotdBuilt)
    func sleepThresholdCheckConfig() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        let config = scratch.directory.appendingPathComponent("t.conf")
        try "[sleep]\nthreshold = 0.1\n".write(to: config, atomically: true, encoding: .utf8)
        let run = try #require(try EarshotdRun.run(["--check-config", "--config", config.path]))
        #expect(run.status == 78)
        #expect(run.error == "earshotd: \(config.path):2: [sleep] threshold = 0.1: below rhythm_threshold (default 0.2); set rhythm_threshold too, at most 0.1\n")
    }

    @Test("sleep schedules cross midnight")
    func schedule() throws {
        let utc = try #require(TimeZone(identifier: "UTC"))
        let schedule = try #require(SleepSchedule("22:30-07:00"))
        #expect(schedule.description == "22:30-07:00")
        #expect(schedule.contains(Self.night.addingTimeInterval(1800), timeZone: utc))  // 22:30
        #expect(!schedule.contains(Self.night.addingTimeInterval(1799), timeZone: utc))  // 22:29:59
        #expect(schedule.contains(Self.night.addingTimeInterval(9 * 3600 - 1), timeZone: utc))  // 06:59:59
        #expect(!schedule.contains(Self.night.addingTimeInterval(9 * 3600), timeZone: utc))  // 07:00
        #expect(SleepSchedule("07:00-07:00") == nil)
        #expect(SleepSchedule("7:5-8:00") == nil)
    }
}

@Suite("History: earshot history reads local time as earshotd does, refuses filters that cannot be meant, reads --config")
struct HistoryCommandTests {
    /// A history with a baby cry on 2026-12-07 at 01:37:56 UTC (winter), snoring on 2026-07-01 at 12:00:00 UTC
    /// (summer) and an event of a custom group `mydog`.
    static func writeHistory(_ scratch: HistoryScratch) throws {
        func event(_ group: String, _ label: String, _ start: Double, _ duration: Double) -> HistoryEvent {
            HistoryEvent(group: group, classLabel: label, start: Date(timeIntervalSince1970: start),
                         end: Date(timeIntervalSince1970: start + duration), peakConfidence: 0.9, meanConfidence: 0.75,
                         levelDBFS: -23.75, peakLevelDBFS: -20, windows: 12, endReason: "hold_elapsed")
        }
        let history = try EventHistory(path: scratch.database)
        try history.insert([
            event("snoring", "Snoring", 1_782_907_200, 30),  // 2026-07-01T12:00:00Z
            event("baby_cry", "builtin_baby_cry:baby_cry", 1_796_607_476, 6.25),  // 2026-12-07T01:37:56Z
            event("mydog", "Bark", 1_796_612_400, 2),  // 2026-12-07T03:00:00Z
        ])
    }

    static func run(_ arguments: [String], tz: String? = nil, in scratch: HistoryScratch) throws -> EarshotCLI.Outcome {
        let executable = try #require(EarshotCLI.executable)
        var environment = ProcessInfo.processInfo.environment
        environment["TZ"] = tz
        return try EarshotCLI.runProcess(executable, ["history"] + arguments, in: scratch.directory, environment: environment, timeout: 30)
    }

    @Test("TZ as a POSIX rule or with a leading colon (glibc's forms, which earshotd honours) gives the printed times and reads --since/--until (trial 9 #12)",
          .needsEarshotBuilt)
    func posixTimeZones() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        try Self.writeHistory(scratch)
        let berlin = [
            "2026-07-01 14:00:00  30.0 s  snoring  Snoring  peak 0.90 mean 0.75  -23.8 dBFS (peak -20.0)",
            "2026-12-07 02:37:56  6.2 s  baby_cry  Baby cry  peak 0.90 mean 0.75  -23.8 dBFS (peak -20.0)",
        ]
        let cases: [(tz: String, lines: [String], cryMinute: (String, String))] = [
            ("CET-1CEST,M3.5.0,M10.5.0/3", berlin, ("2026-12-07T02:37", "2026-12-07 02:38")),
            (":Europe/Berlin", berlin, ("2026-12-07T02:37", "2026-12-07 02:38")),
            ("Europe/Berlin", berlin, ("2026-12-07T02:37", "2026-12-07 02:38")),
            // 1 h 35 min west of UTC, no daylight saving: the cry is just after midnight local time.
            ("ZZZ+01:35", [
                "2026-07-01 10:25:00  30.0 s  snoring  Snoring  peak 0.90 mean 0.75  -23.8 dBFS (peak -20.0)",
                "2026-12-07 00:02:56  6.2 s  baby_cry  Baby cry  peak 0.90 mean 0.75  -23.8 dBFS (peak -20.0)",
            ], ("2026-12-07T00:02", "2026-12-07 00:03")),
            ("UTC0", [
                "2026-07-01 12:00:00  30.0 s  snoring  Snoring  peak 0.90 mean 0.75  -23.8 dBFS (peak -20.0)",
                "2026-12-07 01:37:56  6.2 s  baby_cry  Baby cry  peak 0.90 mean 0.75  -23.8 dBFS (peak -20.0)",
            ], ("2026-12-07T01:37", "2026-12-07 01:38")),
        ]
        for (tz, lines, cryMinute) in cases {
            let listed = try Self.run(["--db", scratch.database, "--group", "snoring,baby_cry"], tz: tz, in: scratch)
            #expect(listed.status == 0, "\(tz): \(listed.standardError)")
            #expect(listed.outputLines == lines, "\(tz)")
            // --since/--until as local dates: the cry's local minute finds the cry alone.
            let minute = try Self.run(["--db", scratch.database, "--since", cryMinute.0, "--until", cryMinute.1], tz: tz, in: scratch)
            #expect(minute.status == 0, "\(tz): \(minute.standardError)")
            #expect(minute.outputLines == [lines[1]], "\(tz)")
        }
    }

    @Test("--since later than --until, and a --group that is no group, are refused with one line, 64; a group stored in the history is accepted (trial 9 #13)",
          .needsEarshotBuilt)
    func refusedFilters() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        try Self.writeHistory(scratch)
        let groups = "alarm_chirp, baby_cry, co_alarm, dog_bark, doorbell_knock, fire_alarm, glass_break, loud, mydog, smoke_alarm, snoring, speech"
        let cases: [([String], String)] = [
            (["--since", "1h", "--until", "2h"],
             "earshot: --since \"1h\" is later than --until \"2h\" (give the earlier time to --since, e.g. --since 2h --until 1h)"),
            (["--since", "2026-12-07T02:00Z", "--until=2026-12-07T01:00Z"],
             "earshot: --since \"2026-12-07T02:00Z\" is later than --until \"2026-12-07T01:00Z\" (give the earlier time to --since, e.g. --since 2026-12-07T01:00Z --until 2026-12-07T02:00Z)"),
            (["--group", "snorring"], "earshot: --group \"snorring\" is not a group (did you mean snoring? groups: \(groups))"),
            (["--group", "baby_cry,mydgo"], "earshot: --group \"mydgo\" is not a group (did you mean mydog? groups: \(groups))"),
            (["--group", "cat"], "earshot: --group \"cat\" is not a group (groups: \(groups))"),
        ]
        for (arguments, line) in cases {
            let outcome = try Self.run(["--db", scratch.database] + arguments, tz: "UTC0", in: scratch)
            #expect(outcome.status == 64, "\(arguments)")
            #expect(outcome.standardError == line + "\n", "\(arguments)")
            #expect(outcome.standardOutput == "", "\(arguments)")
        }
        // Equal times, a custom group stored in the history, and a known group with no events pass.
        let same = try Self.run(["--db", scratch.database, "--since", "2026-12-07T01:37:56Z", "--until", "2026-12-07T01:37:56Z"], tz: "UTC0", in: scratch)
        #expect(same.status == 0)
        #expect(same.outputLines == ["2026-12-07 01:37:56  6.2 s  baby_cry  Baby cry  peak 0.90 mean 0.75  -23.8 dBFS (peak -20.0)"])
        let dog = try Self.run(["--db", scratch.database, "--group", "mydog"], tz: "UTC0", in: scratch)
        #expect(dog.status == 0)
        #expect(dog.outputLines == ["2026-12-07 03:00:00  2.0 s  mydog  Bark  peak 0.90 mean 0.75  -23.8 dBFS (peak -20.0)"])
        let glass = try Self.run(["--db", scratch.database, "--group", "glass_break"], tz: "UTC0", in: scratch)
        #expect(glass.status == 0)
        #expect(glass.errorLines == ["earshot: no events in \(scratch.database) match"])
        // In process, the parser refuses the order too.
        #expect(throws: EarshotError(.usage, "--since \"1h\" is later than --until \"2h\" (give the earlier time to --since, e.g. --since 2h --until 1h)")) {
            _ = try HistoryListing.parse(["--since", "1h", "--until", "2h"], now: HistoryTests.night)
        }
    }

    @Test("--config of an instance's file, /etc/earshot/NAME.conf, means earshotd@NAME's state directory, /var/lib/earshot/NAME (the unit's StateDirectory=earshot/%i); any other file does not (trial 14 D3)")
    func instanceConfigurationFile() {
        func instance(_ path: String, in directory: String = "/root") -> [String]? {
            StateDirectory.instance(configurationFile: path, currentDirectory: directory).map { [$0.name, $0.directory] }
        }
        #expect(instance("/etc/earshot/garage.conf") == ["garage", "/var/lib/earshot/garage"])
        #expect(instance("garage.conf", in: "/etc/earshot") == ["garage", "/var/lib/earshot/garage"])
        #expect(instance("earshot/living-room.conf", in: "/etc") == ["living-room", "/var/lib/earshot/living-room"])
        #expect(instance("/etc/./earshot/../earshot/garage.conf") == ["garage", "/var/lib/earshot/garage"])
        #expect(instance("//etc/earshot//garage.conf") == ["garage", "/var/lib/earshot/garage"])
        // earshotd.service's own file, other directories, other names: not an instance.
        #expect(instance("/etc/earshot/earshotd.conf") == nil)
        #expect(instance("/etc/earshot/.conf") == nil)
        #expect(instance("/etc/earshot/garage.conf.dpkg-dist") == nil)
        #expect(instance("/etc/earshot/rooms/garage.conf") == nil)
        #expect(instance("/root/garage.conf") == nil)
        #expect(instance("garage.conf", in: "/root") == nil)
        #expect(instance("/etc/garage.conf") == nil)
    }

    @Test("--config FILE: the database is its [history] path (--db wins); a missing file is 78, a directory there is named with the fix", .needsEarshotBuilt)
    func configFile() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        try Self.writeHistory(scratch)
        let config = scratch.directory.appendingPathComponent("earshotd.conf")
        try "[history]\npath = \(scratch.database)\n".write(to: config, atomically: true, encoding: .utf8)
        let cry = "2026-12-07 01:37:56  6.2 s  baby_cry  Baby cry  peak 0.90 mean 0.75  -23.8 dBFS (peak -20.0)"
        let listed = try Self.run(["--config", config.path, "--group", "baby_cry"], tz: "UTC0", in: scratch)
        #expect(listed.status == 0, "\(listed.standardError)")
        #expect(listed.outputLines == [cry])
        #expect(try HistoryListing.parse(["--config", "earshotd.conf"]).configPath == "earshotd.conf")

        // --db wins over the file's [history] path.
        let other = scratch.directory.appendingPathComponent("other.sqlite3").path
        let overridden = try Self.run(["--config=earshotd.conf", "--db", other], tz: "UTC0", in: scratch)
        #expect(overridden.status == 66)
        #expect(overridden.errorLines == ["earshot: no event history at \(other) (earshotd writes it when [history] enabled = true; name another file with --db)"])

        let missing = try Self.run(["--config", "gone.conf"], tz: "UTC0", in: scratch)
        #expect(missing.status == 78)
        #expect(missing.errorLines == [
            "earshot: gone.conf: cannot read the configuration file: No such file or directory (check the --config path, or omit --config to run with the built-in defaults)",
        ])

        let directoryConfig = scratch.directory.appendingPathComponent("dir.conf")
        try "[history]\npath = \(scratch.directory.path)\n".write(to: directoryConfig, atomically: true, encoding: .utf8)
        let directory = try Self.run(["--config", "dir.conf"], tz: "UTC0", in: scratch)
        #expect(directory.status == 64)
        #expect(directory.errorLines == ["earshot: [history] path \(scratch.directory.path) in dir.conf is a directory: name the history database file with --db"])
    }
}
