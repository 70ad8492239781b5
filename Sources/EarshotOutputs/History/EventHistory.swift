import FoundationEssentials
import Glibc
import Dispatch
internal import CSQLite
import EarshotSupport
import EarshotModel
import EarshotAnalysis
import EarshotDetection

/// One detection as the event history stores it: a finished event of a label group, in wall-clock time.
///
/// Times are whole milliseconds since 1970 (the stored precision): `start` and `end` made by ``init(id:group:classLabel:start:end:peakConfidence:meanConfidence:levelDBFS:peakLevelDBFS:windows:endReason:)``
/// are rounded to the millisecond, so a stored event reads back equal.
package struct HistoryEvent: Sendable, Equatable {
    /// The row id (assigned by the database; 0 before the event is stored).
    package var id: Int64
    /// The label group (`snoring`, `smoke_alarm`, ...).
    package var group: String
    /// The AudioSet class label that scored highest in the event (e.g. `Snoring`).
    package var classLabel: String
    /// Wall-clock start: the start of the event's first positive window.
    package var start: Date
    /// Wall-clock end: the end of the event's last positive window.
    package var end: Date
    /// Highest group score over the event's positive windows, 0...1.
    package var peakConfidence: Float
    /// Mean group score over the event's positive windows, 0...1.
    package var meanConfidence: Float
    /// Level of the event's audio in dBFS: the energy mean of the RMS levels of the windows inside the event
    /// (`10 log10(mean(10^(L/10)))`), -120 for digital silence.
    package var levelDBFS: Float
    /// The loudest window's RMS level inside the event, in dBFS.
    package var peakLevelDBFS: Float
    /// Positive windows the event had.
    package var windows: Int
    /// Why the event ended (`hold_elapsed`, `stream_gap`, `stream_end`; see `DetectionEvent.EndReason`).
    package var endReason: String

    /// Seconds from `start` to `end`.
    package var duration: Double { end.timeIntervalSince(start) }

    package init(
        id: Int64 = 0, group: String, classLabel: String, start: Date, end: Date, peakConfidence: Float,
        meanConfidence: Float, levelDBFS: Float, peakLevelDBFS: Float, windows: Int, endReason: String
    ) {
        self.id = id
        self.group = group
        self.classLabel = classLabel
        self.start = HistoryEvent.millisecondDate(HistoryEvent.milliseconds(start))
        self.end = HistoryEvent.millisecondDate(HistoryEvent.milliseconds(end))
        self.peakConfidence = peakConfidence
        self.meanConfidence = meanConfidence
        self.levelDBFS = levelDBFS
        self.peakLevelDBFS = peakLevelDBFS
        self.windows = windows
        self.endReason = endReason
    }

    /// Whole milliseconds since 1970, rounded to nearest (dates beyond ±10^14 s are clamped).
    package static func milliseconds(_ date: Date) -> Int64 {
        let value = (date.timeIntervalSince1970 * 1000).rounded()
        guard value.isFinite else { return 0 }
        return Int64(max(-1e17, min(1e17, value)))
    }

    package static func millisecondDate(_ milliseconds: Int64) -> Date {
        Date(timeIntervalSince1970: Double(milliseconds) / 1000)
    }
}

/// Which stored events to read: those overlapping `[since, until]`, of the listed groups, oldest first.
package struct HistoryQuery: Sendable, Equatable {
    /// Events that ended at or after this time (nil: no lower bound).
    package var since: Date?
    /// Events that started at or before this time (nil: no upper bound).
    package var until: Date?
    /// Only these groups (empty: every group).
    package var groups: [String]
    /// At most this many events: the newest ones, still returned oldest first (nil: all).
    package var limit: Int?

    package init(since: Date? = nil, until: Date? = nil, groups: [String] = [], limit: Int? = nil) {
        self.since = since
        self.until = until
        self.groups = groups
        self.limit = limit
    }
}

/// The event history: a SQLite database of finished detections (``HistoryEvent``), written by `earshotd` and read
/// by `earshot history`.
///
/// The file is in WAL mode (readers never block the daemon's writes), with a busy timeout so that a short lock by
/// another process is waited out. Table `events` (schema version 1 in `PRAGMA user_version`): `id`, `start_ms`,
/// `end_ms` (Unix milliseconds), `grp`, `class`, `peak_confidence`, `mean_confidence`, `level_dbfs`,
/// `peak_level_dbfs`, `windows`, `end_reason`; indexed by `end_ms` and `start_ms`.
///
/// - Important: Not thread-safe: use one instance from one queue (``EventHistoryWriter`` owns the daemon's).
package final class EventHistory {
    /// The daemon's default database: systemd's `StateDirectory=earshot` (`/var/lib/earshot`).
    package static let defaultPath = "/var/lib/earshot/history.sqlite3"
    /// The page cache of the daemon's connection, in KiB (`PRAGMA cache_size = -128`; SQLite's default is
    /// 2000 KiB). Bounds the history's share of the daemon's resident memory, whatever the database's size.
    package static let pageCacheKibibytes = 128

    /// The page cache this connection was given, in KiB (`PRAGMA cache_size`, negated), for tests and status.
    package func pageCacheSizeKibibytes() throws -> Int {
        var pages = 0
        try database.run("PRAGMA cache_size") { pages = Int($0.integer(0)) }
        return -pages
    }

    /// The schema version this code writes and reads (`PRAGMA user_version`).
    package static let schemaVersion = 1

    /// How to open the database.
    package enum Access: Sendable {
        /// Read and write, creating the file and the table when missing (the daemon).
        case readWrite
        /// Read only; the file must exist (`earshot history`).
        case readOnly
    }

    /// The database file's path.
    package let path: String
    /// How it was opened (decides the advice in errors: the daemon's, or the reader's).
    package let access: Access
    /// The connection (internal so that tests can set pragmas such as `max_page_count`).
    package let database: SQLiteDatabase

    /// Opens (or, with `.readWrite`, creates) the history at `path`.
    ///
    /// - Parameters:
    ///   - busyTimeoutMilliseconds: how long a statement waits for another process's lock (default 2000 ms).
    /// - Throws: `EarshotError`: `.noInput` when `.readOnly` finds no file (`no event history at PATH (...)`);
    ///   `.cannotCreate` when `path` is a directory (SQLite alone would say "disk I/O error");
    ///   `.cannotCreate` when the file or its directory cannot be created or written; `.data` when the file is not
    ///   an event history or has a newer schema; `.unavailable` when it stays locked past the timeout; `.io` for a
    ///   full disk or another I/O failure.
    package init(path: String, access: Access = .readWrite, busyTimeoutMilliseconds: Int32 = 2000) throws(EarshotError) {
        self.path = path
        self.access = access
        // SQLite refuses it too (SQLITE_CANTOPEN_SYMLINK, "unable to open database file"); said first, with the part
        // that is a link, so that a dangling link is not "no event history", nor a link to a directory "a directory".
        if let link = SymbolicLinks.first(in: path) {
            throw Self.symbolicLinkError(path: path, link: link, access: access)
        }
        if PathKind(path: path) == .directory {
            throw EarshotError(
                .cannotCreate,
                "event history \(path) is a directory, not a database file (set [history] path to a file, e.g. \(Self.defaultPath))")
        }
        if access == .readOnly, !FileManager.default.fileExists(atPath: path) {
            throw EarshotError(
                .noInput,
                "no event history at \(path) (earshotd writes it when [history] enabled = true; name another file with --db)")
        }
        do {
            database = try Self.open(path: path, access: access, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
            var version = 0
            try database.run("PRAGMA user_version") { version = Int($0.integer(0)) }
            if version > Self.schemaVersion {
                throw EarshotError(
                    .data,
                    "\(path): event history schema version \(version) is newer than this earshot reads (\(Self.schemaVersion)); update earshot")
            }
            if access == .readWrite {
                try database.execute("PRAGMA journal_mode = WAL")
                // In WAL mode NORMAL loses at most the last transactions on power loss, never the file.
                try database.execute("PRAGMA synchronous = NORMAL")
                // SQLite's page cache grows with the file up to its default 2 MB (cache_size -2000); for a daemon
                // that appends a row now and then and is asked for history rarely, that is resident memory growing
                // for weeks. 128 KiB holds the indexes' hot pages (measured: sqlite3_memory_used stays ~146 KB over
                // 24 h of audio, against 107 -> 608 KB with the default).
                try database.execute("PRAGMA cache_size = -\(Self.pageCacheKibibytes)")
                if version < Self.schemaVersion {
                    try database.execute("""
                        BEGIN IMMEDIATE;
                        CREATE TABLE IF NOT EXISTS events (
                            id INTEGER PRIMARY KEY,
                            start_ms INTEGER NOT NULL,
                            end_ms INTEGER NOT NULL,
                            grp TEXT NOT NULL,
                            class TEXT NOT NULL,
                            peak_confidence REAL NOT NULL,
                            mean_confidence REAL NOT NULL,
                            level_dbfs REAL NOT NULL,
                            peak_level_dbfs REAL NOT NULL,
                            windows INTEGER NOT NULL,
                            end_reason TEXT NOT NULL
                        );
                        CREATE INDEX IF NOT EXISTS events_end ON events(end_ms);
                        CREATE INDEX IF NOT EXISTS events_start ON events(start_ms);
                        PRAGMA user_version = \(Self.schemaVersion);
                        COMMIT;
                        """)
                }
            } else if version == 0 {
                // An empty file, or a database that another program made: nothing of ours to read.
                var tables = 0
                try database.run("SELECT count(*) FROM sqlite_schema WHERE name = 'events'") { tables = Int($0.integer(0)) }
                if tables == 0 {
                    throw EarshotError(.data, "\(path) is not an Earshot event history (it has no events table)")
                }
            }
        } catch let error as SQLiteError {
            throw Self.error(error, path: path, doing: access == .readOnly ? "cannot read" : "cannot open", access: access)
        } catch let error as EarshotError {
            throw error
        } catch {
            throw EarshotError(.io, "\(path): cannot open the event history: \(error)")
        }
    }

    /// The connection for `access`. Read only, a WAL database needs its `-shm` index, which SQLite creates beside
    /// the file when no connection has it open: a user who may read the file but not write its directory (a root
    /// daemon's 0644 history) gets "attempt to write a readonly database". With no `-wal` file beside it no writer
    /// has it open, so it is read as an immutable file instead; with one, the reader needs its `-wal` and `-shm`.
    private static func open(path: String, access: Access, busyTimeoutMilliseconds: Int32) throws(SQLiteError) -> SQLiteDatabase {
        guard access == .readOnly else {
            let database = try SQLiteDatabase(path: path, mode: .readWriteCreate)
            try database.setBusyTimeout(milliseconds: busyTimeoutMilliseconds)
            return database
        }
        let database = try SQLiteDatabase(path: path, mode: .readOnly)
        try database.setBusyTimeout(milliseconds: busyTimeoutMilliseconds)
        do throws(SQLiteError) {
            try database.run("PRAGMA schema_version")  // reads the header and, in WAL mode, opens the -shm index
            return database
        } catch {
            guard error.isReadOnly || error.isCannotOpen, PathKind(path: path + "-wal") == .missing else { throw error }
            return try SQLiteDatabase(path: path, mode: .readOnlyImmutable)
        }
    }

    /// Stores one event and returns its row id.
    /// - Throws: `EarshotError` as described in ``init(path:access:busyTimeoutMilliseconds:)`` (locked, full,
    ///   read-only).
    @discardableResult
    package func insert(_ event: HistoryEvent) throws(EarshotError) -> Int64 {
        try insert([event]).first ?? 0
    }

    /// Stores events in one transaction (all or none) and returns their row ids in order.
    /// - Throws: `EarshotError` as ``insert(_:)``; on failure nothing is stored.
    @discardableResult
    package func insert(_ events: [HistoryEvent]) throws(EarshotError) -> [Int64] {
        guard !events.isEmpty else { return [] }
        do throws(SQLiteError) {
            try database.execute("BEGIN IMMEDIATE")
            var ids: [Int64] = []
            do throws(SQLiteError) {
                for event in events {
                    try database.run(
                        """
                        INSERT INTO events (start_ms, end_ms, grp, class, peak_confidence, mean_confidence, level_dbfs,
                                            peak_level_dbfs, windows, end_reason)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                        [.integer(HistoryEvent.milliseconds(event.start)), .integer(HistoryEvent.milliseconds(event.end)),
                         .text(event.group), .text(event.classLabel), .real(Double(event.peakConfidence)),
                         .real(Double(event.meanConfidence)), .real(Double(event.levelDBFS)),
                         .real(Double(event.peakLevelDBFS)), .integer(Int64(event.windows)), .text(event.endReason)])
                    ids.append(database.lastInsertRowID)
                }
                try database.execute("COMMIT")
            } catch {
                try? database.execute("ROLLBACK")
                throw error
            }
            return ids
        } catch {
            throw Self.error(error, path: path, doing: "cannot write")
        }
    }

    /// The stored events matching `query`, oldest first (by start, then id).
    /// - Throws: `EarshotError` (`.unavailable` when locked past the timeout, `.data` for a damaged file).
    package func events(matching query: HistoryQuery = HistoryQuery()) throws(EarshotError) -> [HistoryEvent] {
        var conditions: [String] = []
        var parameters: [SQLiteDatabase.Value] = []
        if let since = query.since {
            conditions.append("end_ms >= ?")
            parameters.append(.integer(HistoryEvent.milliseconds(since)))
        }
        if let until = query.until {
            conditions.append("start_ms <= ?")
            parameters.append(.integer(HistoryEvent.milliseconds(until)))
        }
        if !query.groups.isEmpty {
            conditions.append("grp IN (" + Array(repeating: "?", count: query.groups.count).joined(separator: ", ") + ")")
            parameters += query.groups.map { .text($0) }
        }
        var sql = """
            SELECT id, start_ms, end_ms, grp, class, peak_confidence, mean_confidence, level_dbfs, peak_level_dbfs,
                   windows, end_reason FROM events
            """
        if !conditions.isEmpty { sql += " WHERE " + conditions.joined(separator: " AND ") }
        if let limit = query.limit {
            // The newest `limit` events, then put back in time order.
            sql = "SELECT * FROM (\(sql) ORDER BY start_ms DESC, id DESC LIMIT ?) ORDER BY start_ms, id"
            parameters.append(.integer(Int64(max(0, limit))))
        } else {
            sql += " ORDER BY start_ms, id"
        }
        var events: [HistoryEvent] = []
        do throws(SQLiteError) {
            try database.run(sql, parameters) { row in
                var event = HistoryEvent(
                    id: row.integer(0), group: row.text(3), classLabel: row.text(4), start: Date(), end: Date(),
                    peakConfidence: Float(row.real(5)), meanConfidence: Float(row.real(6)), levelDBFS: Float(row.real(7)),
                    peakLevelDBFS: Float(row.real(8)), windows: Int(row.integer(9)), endReason: row.text(10))
                event.start = HistoryEvent.millisecondDate(row.integer(1))
                event.end = HistoryEvent.millisecondDate(row.integer(2))
                events.append(event)
            }
        } catch {
            throw Self.error(error, path: path, doing: "cannot read", access: access)
        }
        return events
    }

    /// The groups of the stored events, each once, sorted.
    /// - Throws: `EarshotError` as ``events(matching:)``.
    package func groups() throws(EarshotError) -> [String] {
        var names: [String] = []
        do throws(SQLiteError) {
            try database.run("SELECT DISTINCT grp FROM events ORDER BY grp") { row in names.append(row.text(0)) }
        } catch {
            throw Self.error(error, path: path, doing: "cannot read", access: access)
        }
        return names
    }

    /// Deletes the events that ended before `cutoff` and were stored before every event that is kept (a lower row
    /// id than any row that ended at `cutoff` or later), and returns how many were deleted. Rows are stored in the
    /// order events end, so on a clock that never stepped that is every row that ended before `cutoff`; a row stored
    /// after a kept one yet stamped earlier was stamped on a wrong clock (a Raspberry Pi without a real-time clock,
    /// running in 1970 until a power cut, before NTP set its clock), not heard before the retention began.
    /// - Throws: `EarshotError` as ``insert(_:)``.
    @discardableResult
    package func prune(endedBefore cutoff: Date) throws(EarshotError) -> Int {
        do throws(SQLiteError) {
            let milliseconds = SQLiteDatabase.Value.integer(HistoryEvent.milliseconds(cutoff))
            try database.run(
                "DELETE FROM events WHERE end_ms < ? AND id < coalesce((SELECT min(id) FROM events WHERE end_ms >= ?), 9223372036854775807)",
                [milliseconds, milliseconds])
            return database.changes
        } catch {
            throw Self.error(error, path: path, doing: "cannot prune")
        }
    }

    /// Moves the start and end of the rows whose ids lie in `ids` by `milliseconds` (the daemon's clock stepped
    /// after they were stored: ``EventHistoryWriter/clockStepped(by:)``) and returns how many rows moved.
    /// - Throws: `EarshotError` as ``insert(_:)``.
    @discardableResult
    package func shiftTimes(byMilliseconds milliseconds: Int64, ids: ClosedRange<Int64>) throws(EarshotError) -> Int {
        do throws(SQLiteError) {
            try database.run(
                "UPDATE events SET start_ms = start_ms + ?, end_ms = end_ms + ? WHERE id BETWEEN ? AND ?",
                [.integer(milliseconds), .integer(milliseconds), .integer(ids.lowerBound), .integer(ids.upperBound)])
            return database.changes
        } catch {
            throw Self.error(error, path: path, doing: "cannot prune")
        }
    }

    /// What ``check(path:rows:quickCheck:)`` found.
    package enum Finding: Sendable, Equatable {
        /// The file reads back as a sound history.
        case sound
        /// The file is damaged: SQLite's message, or the first line of `PRAGMA quick_check`, and how it showed.
        case damaged(String)
        /// The check could not run (the file locked, missing or unreadable): nothing is known; try again later.
        case unknown(String)
    }

    /// Reads the history at `path` through a new read-only connection, as `earshot history` would, and says whether
    /// it is damaged. A writer's own connection is no judge: its page cache can hold good copies of pages that are
    /// damaged on disk (trial 11 #7: the writer's `quick_check` said "ok" where every new reader got "file is not a
    /// database").
    ///
    /// - Parameters:
    ///   - rows: row ids just written, read back by id (a handful of pages: the header, the schema and the table's
    ///     path to them; about 0.2 ms); nil reads none.
    ///   - quickCheck: also run `PRAGMA quick_check(1)` over every page (about 30 ms for 100,000 events, 12 MB, in
    ///     the page cache; measured on this machine's SQLite 3.40).
    /// - Returns: `.damaged` for `SQLITE_CORRUPT`, `SQLITE_NOTADB` or `SQLITE_IOERR` from any step, rows that do
    ///   not read back, or a `quick_check` line other than "ok"; `.unknown` for any other failure.
    /// - Important: Blocks for the check's reads; run it on the writer's queue, never on the analysis path.
    package static func check(path: String, rows: ClosedRange<Int64>?, quickCheck: Bool) -> Finding {
        do throws(SQLiteError) {
            let database = try SQLiteDatabase(path: path, mode: .readOnly)
            try database.setBusyTimeout(milliseconds: 2000)
            try database.execute("PRAGMA cache_size = -\(pageCacheKibibytes)")
            if let rows {
                var found = 0
                try database.run("SELECT count(*) FROM events WHERE id BETWEEN ? AND ?",
                                 [.integer(rows.lowerBound), .integer(rows.upperBound)]) { found = Int($0.integer(0)) }
                if found != rows.count {
                    return .damaged("reading back the \(rows.count == 1 ? "event" : "\(rows.count) events") just written found \(found)")
                }
            }
            if quickCheck {
                var first = "ok"
                try database.run("PRAGMA quick_check(1)") { first = $0.text(0) }
                if first != "ok" {
                    // Its first line may span lines ("*** in database main ***\nPage 3: ...").
                    let line = first.split(separator: "\n").joined(separator: " ")
                    return .damaged("PRAGMA quick_check: " + DisplayText.escaped(line, limit: 200))
                }
            }
            return .sound
        } catch {
            let doing = rows != nil ? "reading back the events just written" : "PRAGMA quick_check"
            return error.isDamage ? .damaged("\(doing): \(error.message)") : .unknown("\(doing): \(error.message)")
        }
    }

    /// The one-line error for a symbolic link in `path` (`link`: the part that is one, maybe `path` itself), which
    /// neither earshotd nor `earshot history` follows (trial 13 D1), with the fix: `.cannotCreate` (73) for the
    /// daemon, e.g. `event history /srv/h.sqlite3: cannot open: it is a symbolic link, which earshotd does not follow
    /// (delete the link, which whoever may write in /srv could have planted; to keep the history elsewhere, set
    /// [history] path to the real file)`; `.noInput` (66) for a reader, whose fix is `--db`.
    package static func symbolicLinkError(path: String, link: String, access: Access) -> EarshotError {
        let reader = access == .readOnly
        let what = link == path ? "it is a symbolic link" : "\(link) is a symbolic link"
        let follows = reader ? "earshot history does not follow" : "earshotd does not follow"
        let fix: String
        if reader {
            fix = link == path
                ? "give the real file with --db" : "give the path without links with --db: realpath \(link) shows where it leads"
        } else {
            fix = SymbolicLinks.refusal(path: path, link: link, setting: "[history] path", contents: "history", kind: "file").fix
        }
        let line = "event history \(path): \(reader ? "cannot read" : "cannot open"): \(what), which \(follows) (\(fix))"
        return EarshotError(reader ? .noInput : .cannotCreate, line, cause: "symbolic link")
    }

    /// The one-line error for a failed SQLite call on `path`, with the fix: the daemon's (`.readWrite`), or for
    /// `.readOnly` a reader's (`earshot history`), who cannot change the daemon's files.
    package static func error(_ error: SQLiteError, path: String, doing: String, access: Access = .readWrite) -> EarshotError {
        if error.isSymbolicLink {
            // Made a link between the check in init and SQLite's open (or a reader's or check's own connection).
            return symbolicLinkError(path: path, link: SymbolicLinks.first(in: path) ?? path, access: access)
        }
        let what = "event history \(path): \(doing): \(error.message)"
        if access == .readOnly, error.isReadOnly || error.isCannotOpen {
            // With a -wal beside it (earshotd has it open) the reader needs its -wal and -shm files, which the
            // daemon's user owns; or the database itself is not readable for this user.
            let fix = PathKind(path: path + "-wal") == .missing
                ? "this user may not read it; run as root or the daemon's user: sudo earshot history"
                : "earshotd has it open and this user may not read its \(path)-wal and -shm files; run as root or the daemon's user: sudo earshot history"
            return EarshotError(.noInput, "\(what) (\(fix))", cause: error.message)
        }
        if error.isLocked {
            return EarshotError(.unavailable, "\(what) (another process holds a lock on it; close that program or wait)",
                                cause: error.message)
        }
        if error.isFull {
            return EarshotError(.io, "\(what) (free space on that file system, or lower [history] retention_days)",
                                cause: error.message)
        }
        if error.isReadOnly {
            return EarshotError(
                .cannotCreate,
                "\(what) (make the file and its directory writable by the daemon's user, or set [history] path)",
                cause: error.message)
        }
        if error.isCannotOpen {
            let directory = parentDirectory(of: path)
            return EarshotError(
                .cannotCreate,
                "\(what) (check that \(directory.isEmpty ? "." : directory) exists and is writable by the daemon's user; under systemd use StateDirectory=earshot, or set [history] path)",
                cause: error.message)
        }
        if error.isNotADatabase {
            return EarshotError(.data, "\(what) (the file is not an Earshot event history; move it aside)",
                                cause: error.message)
        }
        return EarshotError(.io, what, cause: error.message)
    }
}
