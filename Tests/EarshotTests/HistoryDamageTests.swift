import Foundation
import Glibc
import Testing
import EarshotDetection
import EarshotOutputs
import EarshotSupport

/// Trial 11 #7: a history damaged on disk while earshotd has it open. The writer's own connection went on
/// committing (its page cache held good copies of the damaged pages) while every new reader got "file is not a
/// database". Now the file is judged as a reader sees it: each write is read back, and `PRAGMA quick_check` runs on
/// a timer; a damaged file is moved aside with its -wal and -shm, kept as found, and a new history holds the events
/// since the last good check and every later one.
@Suite("History: a file damaged while earshotd has it open", .serialized)
struct HistoryDamageTests {
    /// `name.damaged-YYYYMMDD-HHMMSS` for `date` in local time, as the writer names the file it moves aside.
    static func asideName(_ path: String, _ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        localtime_r(&seconds, &parts)
        return path + String(format: ".damaged-%04d%02d%02d-%02d%02d%02d", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
                             Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec))
    }

    @Test("an index page damaged on disk: the read-back of a write does not reach it, quick_check does; moved aside as found, the events since stored again")
    func quickCheckFindsADamagedIndex() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        let reports = ReportLog()
        let clock = Date(timeIntervalSince1970: 1_796_612_400)  // 2026-12-07T03:00:00Z
        let writer = EventHistoryWriter(path: scratch.database, retentionDays: 0, now: { clock }) { reports.append($0) }
        for (index, group) in ["smoke_alarm", "baby_cry", "snoring"].enumerated() {
            writer.append(HistoryTests.event(group, Double(index) * 60, 5))
        }
        writer.flush()
        #expect(reports.all == [])

        // Into the main file (a checkpoint empties the WAL), over the end-time index's only page: a page the writer
        // holds in its cache, and which reading rows by id never touches.
        var root = 0, pageSize = 0
        do {
            let other = try SQLiteDatabase(path: scratch.database, mode: .readWriteCreate)
            try other.run("PRAGMA wal_checkpoint(TRUNCATE)")
            try other.run("SELECT rootpage FROM sqlite_schema WHERE name = 'events_end'") { root = Int($0.integer(0)) }
            try other.run("PRAGMA page_size") { pageSize = Int($0.integer(0)) }
        }
        #expect(root == 3 && pageSize == 4096)
        let garbage = Data(repeating: 0xA5, count: pageSize)
        let file = try #require(FileHandle(forUpdatingAtPath: scratch.database))
        try file.seek(toOffset: UInt64((root - 1) * pageSize))
        try file.write(contentsOf: garbage)
        try file.close()

        #expect(EventHistory.check(path: scratch.database, rows: 1...3, quickCheck: false) == .sound)
        let finding = "PRAGMA quick_check: *** in database main *** Page 3: btreeInitPage() returns error code 11"
        #expect(EventHistory.check(path: scratch.database, rows: nil, quickCheck: true) == .damaged(finding))

        writer.checkNow()
        let aside = Self.asideName(scratch.database, clock)
        #expect(reports.all == [
            .failing("event history \(scratch.database) is damaged (\(finding)); it was moved aside to \(aside) with its -wal and -shm files and a new history is started at \(scratch.database), where the events stored since the last good check are stored again"),
            .recovered("event history \(scratch.database) is writable again, as a new file (no events were lost); the events from before the last good check are in the damaged file \(aside), which sqlite3's .recover may read"),
        ])
        // Kept as found: SQLite did not checkpoint into the moved file when the writer closed it.
        for suffix in ["", "-wal", "-shm"] { #expect(FileManager.default.fileExists(atPath: aside + suffix), "\(suffix)") }
        let kept = try #require(FileHandle(forReadingAtPath: aside))
        try kept.seek(toOffset: UInt64((root - 1) * pageSize))
        #expect(try kept.read(upToCount: pageSize) == garbage)
        try kept.close()

        // The new file holds the three events, and the next one; nothing more is said.
        writer.append(HistoryTests.event("glass_break", 240, 1))
        writer.close()
        #expect(reports.all.count == 2)
        let stored = try EventHistory(path: scratch.database, access: .readOnly).events()
        #expect(stored.map(\.group) == ["smoke_alarm", "baby_cry", "snoring", "glass_break"])
        #expect(EventHistory.check(path: scratch.database, rows: nil, quickCheck: true) == .sound)
        #expect(writer.statistics == EventHistoryWriter.Statistics(written: 7, dropped: 0, backlog: 0, pruned: 0, failing: false))
        #expect(writer.writeErrors == 1)
    }

    /// The time in the name of the file the first report says was moved aside (the writer's clock is the real one).
    func asideDate(_ reports: [EventHistoryWriter.Report]) -> Date? {
        guard case .failing(let line) = reports.first, let range = line.range(of: ".damaged-") else { return nil }
        let digits = line[range.upperBound...].prefix(15).filter(\.isNumber).map { Int(String($0))! }
        guard digits.count == 14 else { return nil }
        let number = { (from: Int, count: Int) in digits[from..<(from + count)].reduce(0) { $0 * 10 + $1 } }
        return LocalTime.date(year: number(0, 4), month: number(4, 2), day: number(6, 2), hour: number(8, 2),
                              minute: number(10, 2), second: number(12, 2))
    }

    @Test("a check that passed clears what would be stored again: a later damage stores only the events since")
    func passedCheckMovesTheMark() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        let reports = ReportLog()
        let writer = EventHistoryWriter(path: scratch.database, retentionDays: 0) { reports.append($0) }
        writer.append(HistoryTests.event("smoke_alarm", 0, 5))
        writer.flush()
        writer.checkNow()  // sound: the first event is no longer kept in memory
        writer.append(HistoryTests.event("baby_cry", 60, 5))
        writer.flush()
        // The whole head of the main file and of the WAL, as in the trial.
        for (suffix, count) in [("", 3 * 4096), ("-wal", 30 * 1024)] {
            let file = try #require(FileHandle(forUpdatingAtPath: scratch.database + suffix))
            try file.write(contentsOf: Data(repeating: 0x5A, count: count))
            try file.close()
        }
        writer.checkNow()
        writer.close()
        let aside = Self.asideName(scratch.database, try #require(asideDate(reports.all)))
        #expect(reports.all == [
            .failing("event history \(scratch.database) is damaged (PRAGMA quick_check: file is not a database); it was moved aside to \(aside) with its -wal and -shm files and a new history is started at \(scratch.database), where the events stored since the last good check are stored again"),
            .recovered("event history \(scratch.database) is writable again, as a new file (no events were lost); the events from before the last good check are in the damaged file \(aside), which sqlite3's .recover may read"),
        ])
        #expect(try EventHistory(path: scratch.database, access: .readOnly).events().map(\.group) == ["baby_cry"])
    }

    @Test("trial 11 #7 with a real earshotd: dd over the heads of the file and its WAL; the next event's read-back finds it; history_unavailable, history_recovered; earshot history reads both events; the damaged file is kept",
          .needsEarshotdBuilt, .needsEarshotBuilt)
    func damagedWhileRunning() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-damage-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = directory.appendingPathComponent("history.sqlite3").path
        let config = directory.appendingPathComponent("earshotd.conf")
        try """
            [output]
            socket = \(directory.appendingPathComponent("e.sock").path)
            journal = false
            [history]
            path = \(database)
            [detection]
            watch = smoke_alarm

            """.write(to: config, atomically: true, encoding: .utf8)
        // A T3 smoke alarm (three cycles at 3.1 kHz) and the silence that ends it.
        let alarm = SyntheticAudio.pcm(AlarmSignals.render(AlarmSignals.t3(frequencyHz: 3100, cycles: 3, start: 1),
                                                           seconds: 30, sampleRate: 16_000, amplitude: 0.3))
        let daemon = try DaemonProcess(["--config", config.path, "--foreground", "--input", "-", "--input-speed", "max"],
                                       environment: DaemonEndToEndTests.environment(home: directory), standardInput: true)
        let storedCount = { (try? EventHistory(path: database, access: .readOnly).events().count) ?? -1 }

        try daemon.input.fileHandleForWriting.write(contentsOf: alarm)
        #expect(TestWait.until(seconds: 60) { storedCount() == 1 }, "\(daemon.errorText)")
        for (file, size, count) in [(database, "4096", "3"), (database + "-wal", "1024", "30")] {
            let dd = try EarshotCLI.runProcess(URL(fileURLWithPath: "/bin/dd"),
                                               ["if=/dev/urandom", "of=\(file)", "bs=\(size)", "count=\(count)", "conv=notrunc", "status=none"],
                                               timeout: 20)
            #expect(dd.status == 0, "\(dd.standardError)")
        }
        #expect(storedCount() == -1, "the damage must be what a reader sees")

        try daemon.input.fileHandleForWriting.write(contentsOf: alarm)
        let history = { daemon.objects.filter { ($0["state"] as? String)?.hasPrefix("history_") == true } }
        #expect(TestWait.until(seconds: 60) { history().count == 2 }, "\(daemon.errorText)")
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")

        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        let asideName = try #require(names.first { $0.hasPrefix("history.sqlite3.damaged-") && !$0.contains("-wal") && !$0.contains("-shm") })
        let aside = directory.appendingPathComponent(asideName).path
        #expect(history().map { $0["state"] as? String } == ["history_unavailable", "history_recovered"])
        #expect(history().map { $0["message"] as? String } == [
            "event history \(database) is damaged (reading back the events just written: file is not a database); it was moved aside to \(aside) with its -wal and -shm files and a new history is started at \(database), where the events stored since the last good check are stored again",
            "event history \(database) is writable again, as a new file (no events were lost); the events from before the last good check are in the damaged file \(aside), which sqlite3's .recover may read",
        ])
        // Both alarms: the one stored before the damage (no check had passed since) and the one after.
        let ends = daemon.objects.filter { $0["type"] as? String == "alarm_end" || $0["type"] as? String == "detection_end" }
        #expect(ends.count == 2, "\(daemon.objects)")
        let listed = try #require(try EarshotCLI.run(["history", "--config", config.path, "--format", "jsonl"], in: directory))
        #expect(listed.status == 0, "\(listed.errorLines)")
        let rows = listed.outputLines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(rows.map { $0["id"] as? Int } == [1, 2])
        #expect(rows.map { $0["group"] as? String } == ["smoke_alarm", "smoke_alarm"])
        // The damaged file is kept with its WAL, as unreadable as it was found.
        #expect(FileManager.default.fileExists(atPath: aside + "-wal"))
        let old = try #require(try EarshotCLI.run(["history", "--db", aside], in: directory))
        #expect(old.status == 65)
        #expect(old.errorLines == ["earshot: event history \(aside): cannot read: file is not a database (the file is not an Earshot event history; move it aside)"])
    }
}
