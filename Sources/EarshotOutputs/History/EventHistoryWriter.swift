import Dispatch
import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotModel
import EarshotAnalysis
import EarshotDetection

/// The daemon's writer of the event history: stores finished events on its own serial queue so that the analysis
/// never waits for the disk, and prunes events older than the retention.
///
/// Failures are not fatal. The database is opened at the first event (so a daemon that detects nothing never
/// touches the disk). When opening or writing fails (a locked file past the busy timeout, a full disk, a read-only
/// directory), `report` gets one line and the events are kept in memory (at most ``maximumBacklog``; older ones are
/// dropped and counted) and retried with each new event and every ``retryInterval``; when a write succeeds again,
/// `report` gets one line saying so, with the number of events lost.
///
/// Damage (a disk error, something writing over the file): SQLite may go on committing through a connection whose
/// page cache still holds good copies of pages that are damaged on disk, while every new reader fails (trial 11 #7).
/// So the file is judged as `earshot history` would read it, through a new read-only connection
/// (``EventHistory/check(path:rows:quickCheck:)``): the rows of each write are read back (about 0.2 ms), a write that
/// fails with `SQLITE_CORRUPT`, `SQLITE_NOTADB` or `SQLITE_IOERR` is checked, and every `checkIntervalSeconds`
/// (default ``defaultCheckInterval``) in which anything was written, `PRAGMA quick_check` reads every page (about 30 ms
/// for 100,000 events). A damaged file is moved aside to `PATH.damaged-YYYYMMDD-HHMMSS` with its `-wal` and `-shm`
/// (renamed while still open, so that SQLite does not checkpoint into it when closing: it stays as found), a new
/// history is started at the path, and the events stored since the last good `quick_check` (kept in memory for this,
/// at most ``maximumBacklog``) are stored again in it, with those that came meanwhile: `report` gets `.failing` and
/// then `.recovered`, saying where the old file went. Only a file this writer opened as an event history is moved;
/// one that fails to open is reported as before (it may be another program's file named by mistake).
///
/// Retention: events that ended more than `retentionDays` ago are deleted when the database is opened and then
/// every hour (0 keeps everything), except those stored after an event that is kept (``EventHistory/prune(endedBefore:)``).
///
/// A step of the daemon's clock (``clockStepped(by:)``, `clock_changed`) moves the events this writer stored or
/// holds that were stamped before it by the step: they were heard at the new clock's time less their age, and keep
/// their place in time (and in retention) beside the events that follow.
///
/// - Important: ``append(_:)`` may be called from any thread and returns at once. `report` is called on the writer's
///   queue and must not call back into the writer synchronously.
package final class EventHistoryWriter: @unchecked Sendable {
    // @unchecked: the mutable properties below other than `counters` are touched only on `queue`.

    /// What `report` is told.
    package enum Report: Sendable, Equatable {
        /// Storing failed; the line says why and how to fix it. Sent once until writes work again.
        case failing(String)
        /// Storing works again after a failure; the line says how many events were lost.
        case recovered(String)
        /// The open database file was deleted or replaced (its path now names another file, or none): a new one
        /// was opened (created) at the path, and events go there from now on. Sent once per such change.
        case replaced(String)
    }

    /// Events held in memory while the database cannot be written (days of busy detections).
    package static let maximumBacklog = 4096
    /// Seconds between retries while failing.
    package static let retryInterval: Double = 30
    /// Seconds between retention pruning runs.
    package static let pruneInterval: Double = 3600
    /// Seconds between full checks of the file (`PRAGMA quick_check`), run only when something was written since the
    /// last one. About 30 ms for 100,000 events (12 MB), so an hour costs next to nothing; the read-back of every
    /// write catches a damaged header or schema at once, this the rest.
    package static let defaultCheckInterval: Double = 3600

    /// Counters (read with ``statistics``).
    package struct Statistics: Sendable, Equatable {
        /// Events stored since start.
        package var written = 0
        /// Events dropped because the backlog was full.
        package var dropped = 0
        /// Events waiting in memory for the database.
        package var backlog = 0
        /// Events deleted by retention since start.
        package var pruned = 0
        /// True while writes fail.
        package var failing = false

        package init(written: Int = 0, dropped: Int = 0, backlog: Int = 0, pruned: Int = 0, failing: Bool = false) {
            self.written = written
            self.dropped = dropped
            self.backlog = backlog
            self.pruned = pruned
            self.failing = failing
        }
    }

    /// The database file.
    package let path: String
    /// Days events are kept; 0 keeps everything.
    package let retentionDays: Int
    private let busyTimeoutMilliseconds: Int32
    private let checkIntervalSeconds: Double
    private let queue = DispatchQueue(label: "earshot.history", qos: .utility)
    private let report: @Sendable (Report) -> Void
    private let now: @Sendable () -> Date
    private let counters = Mutex(Statistics())

    private var history: EventHistory?
    /// The device and inode of the file `history` has open, to notice a file deleted or replaced under it.
    private var openedFile: FileIdentity?
    private var backlog: [HistoryEvent] = []
    /// The row ids this writer stored in the open file (first and last), for a clock step's move.
    private var storedIDs: ClosedRange<Int64>?
    /// Clock steps not yet applied to the rows stored before them (the database could not be written): milliseconds
    /// and the ids they apply to, oldest first.
    private var pendingShifts: [(milliseconds: Int64, ids: ClosedRange<Int64>)] = []
    private var lostSinceFailure = 0
    private var retryTimer: DispatchSourceTimer?
    private var pruneTimer: DispatchSourceTimer?
    private var checkTimer: DispatchSourceTimer?
    private var stopped = false
    /// Events stored since the last `quick_check` that passed (or since start), to be stored again if the file turns
    /// out damaged; at most ``maximumBacklog`` (older ones are then only in the file).
    private var unchecked: [HistoryEvent] = []
    /// Whether anything was written since the last full check.
    private var writtenSinceCheck = false
    /// The damaged file still at `path` (its move aside failed; tried again with each retry), and what was found.
    private var damaged: (file: FileIdentity?, finding: String)?
    /// Where the damaged file was moved, for the recovery line.
    private var movedAside: String?

    /// - Parameters:
    ///   - path: the database file (`[history] path`); its directory must exist.
    ///   - retentionDays: days events are kept (`[history] retention_days`); 0 keeps everything.
    ///   - busyTimeoutMilliseconds: how long one write waits for another process's lock before failing.
    ///   - checkIntervalSeconds: seconds between full checks of the file (``defaultCheckInterval``).
    ///   - now: the clock used for retention and the damaged file's name (tests pass a fixed one).
    ///   - report: told once when storing starts failing and once when it works again.
    package init(
        path: String, retentionDays: Int, busyTimeoutMilliseconds: Int32 = 2000,
        checkIntervalSeconds: Double = EventHistoryWriter.defaultCheckInterval,
        now: @escaping @Sendable () -> Date = { Date() }, report: @escaping @Sendable (Report) -> Void
    ) {
        self.path = path
        self.retentionDays = max(0, retentionDays)
        self.busyTimeoutMilliseconds = busyTimeoutMilliseconds
        self.checkIntervalSeconds = checkIntervalSeconds
        self.now = now
        self.report = report
    }

    deinit {
        retryTimer?.cancel()
        pruneTimer?.cancel()
        checkTimer?.cancel()
    }

    /// Queues one finished event for storing. Returns at once.
    package func append(_ event: HistoryEvent) {
        queue.async { [self] in
            guard !stopped else { return }
            backlog.append(event)
            if backlog.count > Self.maximumBacklog {
                let excess = backlog.count - Self.maximumBacklog
                backlog.removeFirst(excess)
                lostSinceFailure += excess
                counters.withLock { $0.dropped += excess }
            }
            drain()
        }
    }

    /// The daemon's clock stepped by `seconds` (`clock_changed`): every event appended before this call (stored in
    /// this run, or still held) moves by it. Returns at once; the rows are moved on the writer's queue, at once or, while
    /// the database cannot be written, before the next events are stored.
    package func clockStepped(by seconds: Double) {
        let milliseconds = Int64((seconds * 1000).rounded())
        guard milliseconds != 0 else { return }
        queue.async { [self] in
            guard !stopped else { return }
            let shift = Double(milliseconds) / 1000
            for index in backlog.indices {
                backlog[index].start.addTimeInterval(shift)
                backlog[index].end.addTimeInterval(shift)
            }
            // Kept to be stored again should the file prove damaged: they move too.
            for index in unchecked.indices {
                unchecked[index].start.addTimeInterval(shift)
                unchecked[index].end.addTimeInterval(shift)
            }
            if let storedIDs { pendingShifts.append((milliseconds, storedIDs)) }
            applyShifts()
        }
    }

    /// Waits until every event appended before this call has been stored or has failed (for shutdown and tests).
    package func flush() {
        queue.sync {}
    }

    /// Runs the full check now, as the timer does every `checkIntervalSeconds` (when something was written since
    /// the last one), and waits for it and for whatever it leads to (for tests).
    package func checkNow() {
        queue.sync { checkFile() }
    }

    /// Stores what it can, stops the timers and closes the database; later appends are ignored. Waits.
    package func close() {
        queue.sync {
            drain()
            stopped = true
            retryTimer?.cancel()
            retryTimer = nil
            pruneTimer?.cancel()
            pruneTimer = nil
            checkTimer?.cancel()
            checkTimer = nil
            history = nil
        }
    }

    /// Counters so far.
    package var statistics: Statistics {
        counters.withLock { $0 }
    }

    /// Writes of the backlog that failed since start (each retry that fails counts); any thread.
    package var writeErrors: Int { failedWrites.load(ordering: .relaxed) }
    private let failedWrites = Atomic<Int>(0)

    // MARK: On the queue

    /// Opens the database when needed, writes the backlog in one transaction and reads it back.
    private func drain() {
        defer { counters.withLock { $0.backlog = backlog.count } }
        guard !stopped, !backlog.isEmpty else { return }
        if let damaged {
            // Still at the path: try the move again (the retry timer runs); moved (by hand too): a new file.
            if FileIdentity(path: path) == damaged.file, damaged.file != nil {
                guard moveAside() != nil else { return }
            }
            self.damaged = nil
            history = nil
        }
        let ids: [Int64]
        do throws(EarshotError) {
            let history = try openIfNeeded()
            try applyPendingShifts(history)
            ids = try history.insert(backlog)
            if let first = ids.first, let last = ids.last { storedIDs = (storedIDs?.lowerBound ?? first)...last }
        } catch {
            failedWrites.wrappingAdd(1, ordering: .relaxed)
            // A write SQLite itself calls damaged or an I/O error: the file is judged as a reader would see it.
            if error.code == .data || error.code == .io, let opened = openedFile, FileIdentity(path: path) == opened,
               case .damaged(let finding) = EventHistory.check(path: path, rows: nil, quickCheck: true) {
                handleDamage("\(error.cause ?? error.message); \(finding)")
                return
            }
            let firstFailure = counters.withLock { counters -> Bool in
                defer { counters.failing = true }
                return !counters.failing
            }
            if firstFailure {
                report(.failing(error.message + "; events are kept in memory and retried every \(Int(Self.retryInterval)) s"))
            }
            // A handle that failed may be stale (file moved, directory remounted): reopen at the retry.
            history = nil
            scheduleRetry()
            return
        }
        let stored = backlog
        backlog.removeAll()
        remember(stored)
        if let first = ids.first, let last = ids.last,
           case .damaged(let finding) = EventHistory.check(path: path, rows: first...last, quickCheck: false) {
            failedWrites.wrappingAdd(1, ordering: .relaxed)
            handleDamage(finding)
            return
        }
        let wasFailing = counters.withLock { counters -> Bool in
            counters.written += stored.count
            defer { counters.failing = false }
            return counters.failing
        }
        guard wasFailing else { return }
        retryTimer?.cancel()
        retryTimer = nil
        let lost = lostSinceFailure
        lostSinceFailure = 0
        let note = lost == 0 ? "no events were lost" : "\(lost) event\(lost == 1 ? " was" : "s were") lost"
        if let aside = movedAside {
            movedAside = nil
            report(.recovered("event history \(path) is writable again, as a new file (\(note)); the events from before the last good check are in the damaged file \(aside), which sqlite3's .recover may read"))
        } else {
            report(.recovered("event history \(path) is writable again (\(note))"))
        }
    }

    /// Keeps what was just stored until the next full check passes.
    private func remember(_ stored: [HistoryEvent]) {
        writtenSinceCheck = true
        unchecked += stored
        if unchecked.count > Self.maximumBacklog { unchecked.removeFirst(unchecked.count - Self.maximumBacklog) }
    }

    /// The damaged file goes aside, the events since the last good check go back to the backlog (before those that
    /// came since), and, once moved, a new history is started at the path.
    private func handleDamage(_ finding: String) {
        let wasFailing = counters.withLock { counters -> Bool in
            defer { counters.failing = true }
            return counters.failing
        }
        // The backlog holds at most maximumBacklog; unchecked events beyond that stay only in the damaged file.
        backlog = unchecked.suffix(max(0, Self.maximumBacklog - backlog.count)) + backlog
        unchecked.removeAll()
        writtenSinceCheck = false
        damaged = (openedFile, finding)
        let aside = moveAside()
        if !wasFailing {
            if let aside {
                report(.failing("event history \(path) is damaged (\(finding)); it was moved aside to \(aside) with its -wal and -shm files and a new history is started at \(path), where the events stored since the last good check are stored again"))
            } else {
                report(.failing("event history \(path) is damaged (\(finding)) and could not be moved aside: \(movingError) (move it aside yourself, or make its directory writable by the daemon's user); events are kept in memory and retried every \(Int(Self.retryInterval)) s"))
            }
        }
        guard aside != nil else {
            scheduleRetry()
            return
        }
        damaged = nil
        drain()
    }

    /// Why the last ``moveAside()`` failed.
    private var movingError = ""

    /// Renames the damaged file and its `-wal` and `-shm` to `PATH.damaged-YYYYMMDD-HHMMSS` (`-2`, `-3`, ... when
    /// taken) while it is still open, then closes it: SQLite does not checkpoint a database that was moved when it
    /// closes it, so the files stay as they were found. nil when the file could not be renamed (`movingError` says
    /// why). The corresponding C function is `rename`.
    private func moveAside() -> String? {
        var seconds = time_t(now().timeIntervalSince1970.rounded(.down))
        var parts = tm()
        localtime_r(&seconds, &parts)
        let stamp = String(cFormat: "%04d%02d%02d-%02d%02d%02d", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
                           Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec))
        var aside = "\(path).damaged-\(stamp)"
        var number = 2
        while PathKind(path: aside) != .missing || PathKind(path: aside + "-wal") != .missing {
            aside = "\(path).damaged-\(stamp)-\(number)"
            number += 1
        }
        guard rename(path, aside) == 0 else {
            movingError = "rename to \(aside): " + String(cString: strerror(errno))
            return nil
        }
        for suffix in ["-wal", "-shm"] where PathKind(path: path + suffix) != .missing {
            _ = rename(path + suffix, aside + suffix)
        }
        history = nil
        openedFile = nil
        movedAside = aside
        // The new file holds none of this run's rows yet: a later clock step has nothing stored to move there.
        storedIDs = nil
        pendingShifts.removeAll()
        return aside
    }

    /// The full check, every `checkIntervalSeconds` when something was written since the last.
    private func checkFile() {
        guard !stopped, damaged == nil, writtenSinceCheck, history != nil,
              let opened = openedFile, FileIdentity(path: path) == opened else { return }
        switch EventHistory.check(path: path, rows: nil, quickCheck: true) {
        case .sound:
            writtenSinceCheck = false
            unchecked.removeAll()
        case .damaged(let finding):
            failedWrites.wrappingAdd(1, ordering: .relaxed)
            handleDamage(finding)
        case .unknown:
            break  // locked or unreadable for now: the next interval tries again
        }
    }

    /// Moves the stored rows by the clock steps waiting (queue); a failure leaves them waiting for the next write.
    private func applyShifts() {
        guard !pendingShifts.isEmpty, let history else { return }
        try? applyPendingShifts(history)
    }

    private func applyPendingShifts(_ history: EventHistory) throws(EarshotError) {
        while let shift = pendingShifts.first {
            try history.shiftTimes(byMilliseconds: shift.milliseconds, ids: shift.ids)
            pendingShifts.removeFirst()
        }
    }

    private func openIfNeeded() throws(EarshotError) -> EventHistory {
        if let history {
            // Deleted (`rm history.sqlite3`, the only way the README gave to clear it) or replaced: SQLite would go
            // on writing into the unlinked file, and every later event would be lost with it (trial 6 #11).
            guard let opened = openedFile, FileIdentity(path: path) != opened else { return history }
            self.history = nil  // closes the old file first (its WAL is checkpointed into it, not into the new one)
            openedFile = nil
            // The rows stored so far are in the old file.
            storedIDs = nil
            pendingShifts.removeAll()
            let reopened = try open()
            report(.replaced("event history \(path) was deleted or replaced while earshotd had it open; a new database was created there and events are stored in it from now on (the events before are only in the old file, gone if it was deleted)"))
            return reopened
        }
        return try open()
    }

    private func open() throws(EarshotError) -> EventHistory {
        let opened = try EventHistory(path: path, access: .readWrite, busyTimeoutMilliseconds: busyTimeoutMilliseconds)
        history = opened
        openedFile = FileIdentity(path: path)
        prune()
        startPruneTimer()
        startCheckTimer()
        return opened
    }

    private func prune() {
        guard retentionDays > 0, let history else { return }
        let cutoff = now().addingTimeInterval(-Double(retentionDays) * 86_400)
        // A failed prune is tried again at the next interval; lasting problems show up on the write path.
        if let deleted = try? history.prune(endedBefore: cutoff) {
            counters.withLock { $0.pruned += deleted }
        }
    }

    private func startPruneTimer() {
        guard retentionDays > 0, pruneTimer == nil, !stopped else { return }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + Self.pruneInterval, repeating: Self.pruneInterval, leeway: .seconds(60))
        timer.setEventHandler { [weak self] in self?.prune() }
        pruneTimer = timer
        timer.resume()
    }

    private func startCheckTimer() {
        guard checkTimer == nil, !stopped else { return }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        let leeway = DispatchTimeInterval.milliseconds(Int(min(60_000, checkIntervalSeconds * 100)))
        timer.schedule(deadline: .now() + checkIntervalSeconds, repeating: checkIntervalSeconds, leeway: leeway)
        timer.setEventHandler { [weak self] in self?.checkFile() }
        checkTimer = timer
        timer.resume()
    }

    private func scheduleRetry() {
        guard retryTimer == nil, !stopped else { return }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + Self.retryInterval, repeating: Self.retryInterval, leeway: .seconds(1))
        timer.setEventHandler { [weak self] in self?.drain() }
        retryTimer = timer
        timer.resume()
    }
}

/// A file's device and inode (`lstat`): the same path naming another file, or none, is a different identity. A
/// symbolic link put in the file's place is one too, even one to the file itself (moved aside): the writer then
/// opens the path again, and refuses the link (trial 13 D1).
private struct FileIdentity: Equatable {
    var device: UInt64
    var inode: UInt64

    /// nil when `path` cannot be looked at (deleted). The corresponding C function is `lstat`.
    init?(path: String) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
    }
}
