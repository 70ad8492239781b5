import Foundation
import Glibc
import Testing
import EarshotOutputs

/// Trial 6 #11: the history database deleted (or replaced) while the writer has it open: the writer notices before
/// its next write, creates a new database at the path, says so once, and stores every later event there.
@Suite("History: a database deleted while open")
struct HistoryReplacedTests {
    @Test("rm of the database and its WAL while open: one replaced report, the next events in a new file at the path")
    func deletedWhileOpen() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        let reports = ReportLog()
        let writer = EventHistoryWriter(path: scratch.database, retentionDays: 0) { reports.append($0) }
        writer.append(HistoryTests.event("smoke_alarm", 0, 5))
        writer.flush()
        #expect(try EventHistory(path: scratch.database, access: .readOnly).events().count == 1)
        for suffix in ["", "-wal", "-shm"] { unlink(scratch.database + suffix) }
        #expect(!FileManager.default.fileExists(atPath: scratch.database))

        writer.append(HistoryTests.event("baby_cry", 60, 7))
        writer.append(HistoryTests.event("glass_break", 120, 1))
        writer.flush()
        #expect(reports.all == [.replaced("event history \(scratch.database) was deleted or replaced while earshotd had it open; a new database was created there and events are stored in it from now on (the events before are only in the old file, gone if it was deleted)")])
        // Said once: the new file is the one open now.
        writer.append(HistoryTests.event("snoring", 180, 10))
        writer.close()
        #expect(reports.all.count == 1)
        let stored = try EventHistory(path: scratch.database, access: .readOnly).events()
        #expect(stored.map(\.group) == ["baby_cry", "glass_break", "snoring"])
        #expect(writer.statistics == EventHistoryWriter.Statistics(written: 4, dropped: 0, backlog: 0, pruned: 0, failing: false))
    }
}
