import Dispatch
import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotModel
import EarshotAnalysis
import EarshotDetection

/// A clip written to disk: what the `clip_saved` line and the journal say.
package struct SavedClip: Sendable, Equatable {
    /// The file, e.g. `/var/lib/earshot/clips/2026-11-30T21-15-03Z_smoke_alarm.wav`.
    package var path: String
    package var group: String
    /// Stream time (s) of the first sample and after the last.
    package var start: Double
    package var end: Double
    /// Samples in the file (16 kHz mono).
    package var frames: Int
    package var eventStart: Double
    /// Nil when the event was still going when the clip was cut.
    package var eventEnd: Double?
    /// True when the event was longer than ``ClipRecorder/maximumEventSeconds`` and the clip stops there.
    package var capped: Bool
    /// File size in bytes (44-byte header + 2 bytes per frame).
    package var bytes: Int
    /// Seconds the write took (open, write, fsync, rename), for the record.
    package var writeSeconds: Double

    package var duration: Double { end - start }

    package init(
        path: String, group: String, start: Double, end: Double, frames: Int, eventStart: Double, eventEnd: Double?,
        capped: Bool, bytes: Int, writeSeconds: Double
    ) {
        self.path = path
        self.group = group
        self.start = start
        self.end = end
        self.frames = frames
        self.eventStart = eventStart
        self.eventEnd = eventEnd
        self.capped = capped
        self.bytes = bytes
        self.writeSeconds = writeSeconds
    }

    /// The socket line, e.g. `{"type":"clip_saved","group":"baby_cry","path":"/var/lib/earshot/clips/...wav",
    /// "start":0,"end":14.6,"duration":14.6,"frames":233600,"sample_rate":16000,"event_start":2.88,"event_end":9.6,
    /// "capped":false,"time":"..."}`; `event_end` is left out while the event goes on.
    package func object(time: Date) -> JSONObject {
        var object: JSONObject = [
            "type": "clip_saved",
            "group": .string(group),
            "path": .string(path),
            "start": .number(start, decimals: EventJSON.timeDecimals),
            "end": .number(end, decimals: EventJSON.timeDecimals),
            "duration": .number(duration, decimals: EventJSON.timeDecimals),
            "frames": .int(frames),
            "sample_rate": .int(ClipAudio.sampleRate),
            "event_start": .number(eventStart, decimals: EventJSON.timeDecimals),
        ]
        if let eventEnd { object["event_end"] = .number(eventEnd, decimals: EventJSON.timeDecimals) }
        object["capped"] = .bool(capped)
        object["time"] = .string(EventJSON.timestamp(time))
        return object
    }

    /// The journal line, e.g. `clip saved: /var/lib/earshot/clips/2026-11-30T21-15-03Z_baby_cry.wav (baby_cry,
    /// 14.60 s: stream time 0.00 s to 14.60 s)`, with `; event longer than 60 s, cut there` when capped.
    package var message: String {
        func fixed(_ value: Double) -> String { String(cFormat: "%.2f", value) }
        let cap = capped ? "; event longer than \(Int(ClipRecorder.maximumEventSeconds)) s, cut there" : ""
        return "clip saved: \(path) (\(group), \(fixed(duration)) s: stream time \(fixed(start)) s to \(fixed(end)) s\(cap))"
    }

    /// The journal entry: ``message`` (priority 6), `EARSHOT_EVENT=clip`, `EARSHOT_GROUP`, `EARSHOT_CLIP` (the
    /// path) and `EARSHOT_STREAM_TIME` (the event's start, as in its detection entries), so that
    /// `journalctl EARSHOT_EVENT=clip` lists the clips.
    package func journalFields(identifier: String) -> [JournalSink.Field] {
        [
            .init("MESSAGE", message),
            .init("PRIORITY", "6"),
            .init("SYSLOG_IDENTIFIER", identifier),
            .init("EARSHOT_EVENT", "clip"),
            .init("EARSHOT_GROUP", group),
            .init("EARSHOT_CLIP", path),
            .init("EARSHOT_STREAM_TIME", JSONValue.format(eventStart, decimals: EventJSON.timeDecimals)),
        ]
    }
}

/// Writes clips on its own serial queue, so that the analysis never waits for the disk, and applies retention.
///
/// Each clip is a 16-bit PCM mono WAV at 16 kHz (``WaveFileWriter``, libsndfile), written as `.NAME.partial` with
/// mode 0600, flushed (`fsync`) and renamed to its name (``ClipFiles``): a reader never sees half a clip. The
/// directory is created (mode 0700) when missing; its parent must exist.
///
/// Failures are not fatal: a clip that cannot be written (missing parent, read-only file system, full disk, no
/// permission) is dropped, its partial file removed, and `report` gets one line; later clips are tried as they come,
/// and when one is written again `report` says so with the number lost. At most ``maximumBacklog`` clips wait in
/// memory (a stalled disk); more are dropped and counted.
///
/// At start the writer makes the directory and checks that a file can be created in it, so that a wrong directory is
/// reported before the first event rather than when a smoke alarm's clip is lost.
///
/// Retention (``ClipFiles/prune(directory:maxClips:retentionDays:now:)``) runs at start, after each clip and every
/// ``pruneInterval``. It goes by the files' modification times, which the system clock gives: when the daemon's clock
/// steps (``clockStepped(by:)``) the clips this writer wrote before the step get their times moved by it, so that a
/// clip written while a Raspberry Pi's clock still read 1970 is not deleted as 56 years old once NTP sets it.
///
/// - Important: ``save(_:)`` may be called from any thread and returns at once. `report` and `saved` are called on
///   the writer's queue and must not call back into the writer synchronously.
package final class ClipWriter: @unchecked Sendable {
    // @unchecked: the mutable properties other than `counters` are touched only on `queue`.

    /// What `report` is told.
    package enum Report: Sendable, Equatable {
        /// Clips cannot be written; the line says why and how to fix it. Sent once until a clip is written again.
        case failing(String)
        /// Clips are written again after a failure; the line says how many were lost.
        case recovered(String)
        /// Something to log that needs no health event (clips dropped for a slow disk, retention failing).
        case warning(String)
    }

    /// Counters (read with ``statistics``).
    package struct Statistics: Sendable, Equatable {
        package var written = 0
        /// Clips not written: failed or dropped.
        package var lost = 0
        /// Clips deleted by retention since start.
        package var pruned = 0
        /// Clips waiting to be written.
        package var queued = 0
        package var failing = false
        /// Total seconds spent writing (for the mean write time).
        package var writeSeconds: Double = 0
    }

    /// Clips waiting for the disk at most: about 18 MB at the default 70 s clip.
    package static let maximumBacklog = 8
    /// Seconds between retention runs when no clip is saved.
    package static let pruneInterval: Double = 3600

    package let directory: String
    package let maxClips: Int
    package let retentionDays: Int
    private let queue = DispatchQueue(label: "earshot.clips", qos: .utility)
    private let report: @Sendable (Report) -> Void
    private let saved: @Sendable (SavedClip) -> Void
    private let now: @Sendable () -> Date
    private let counters = Mutex(Statistics())
    private var lostSinceFailure = 0
    private var pruneTimer: DispatchSourceTimer?
    private var stopped = false
    /// Clips queued and not yet written or failed, by the order they came in: what a stop that runs out of time
    /// names as not saved (``close(deadline:)``).
    private let waiting = Mutex<(next: Int, clips: [Int: String])>((0, [:]))
    /// Entered while ``finishWrites(until:)`` holds the clips it did not wait for; each write waits for it.
    private let held = DispatchGroup()
    private let holding = Atomic<Bool>(false)
    /// Set when ``close(deadline:)`` gave up waiting: the clips still queued are not begun.
    private let abandoned = Atomic<Bool>(false)
    /// The clips this writer wrote (paths, oldest first; at most ``maxClips``, as retention keeps), for a clock step.
    private var writtenPaths: [String] = []

    /// - Parameters:
    ///   - settings: `[clips]`: directory, max_clips, retention_days.
    ///   - now: the clock for retention (tests pass a fixed one).
    ///   - report: told once when writing starts failing, once when it works again, and of warnings.
    ///   - saved: told of each clip written, after the rename.
    package init(
        settings: ClipSettings, now: @escaping @Sendable () -> Date = { Date() },
        report: @escaping @Sendable (Report) -> Void, saved: @escaping @Sendable (SavedClip) -> Void
    ) {
        directory = settings.directory
        maxClips = settings.maxClips
        retentionDays = settings.retentionDays
        self.now = now
        self.report = report
        self.saved = saved
        queue.async { [self] in
            probe()
            prune()
            startPruneTimer()
        }
    }

    deinit {
        pruneTimer?.cancel()
    }

    /// Queues one clip for writing. Returns at once.
    package func save(_ clip: ClipAudio) {
        let accepted = counters.withLock { counters -> Bool in
            guard counters.queued < Self.maximumBacklog else {
                counters.lost += 1
                return false
            }
            counters.queued += 1
            return true
        }
        let id = waiting.withLock { waiting -> Int in
            guard accepted else { return 0 }
            waiting.next += 1
            waiting.clips[waiting.next] = "\(clip.group) at stream time \(String(cFormat: "%.2f", clip.eventStart)) s"
            return waiting.next
        }
        guard accepted else {
            queue.async { [self] in
                lostSinceFailure += 1
                report(.warning("clip of \(clip.group) at stream time \(String(cFormat: "%.2f", clip.eventStart)) s dropped: \(Self.maximumBacklog) clips are still waiting for the disk"))
            }
            return
        }
        queue.async { [self] in
            defer {
                counters.withLock { $0.queued -= 1 }
                _ = waiting.withLock { $0.clips.removeValue(forKey: id) }
            }
            held.wait()
            guard !stopped, !abandoned.load(ordering: .acquiring) else { return }
            write(clip)
        }
    }

    /// The daemon's clock stepped by `seconds` (`clock_changed`): the clips written before this call get their
    /// access and modification times moved by it (those already deleted are skipped; none when the directory is
    /// missing or a link now). Returns at once. The corresponding C function is `utimensat`.
    package func clockStepped(by seconds: Double) {
        let nanoseconds = Int64((seconds * 1e9).rounded())
        queue.async { [self] in
            // Through the directory opened without following a link, as the writes: never another directory's files.
            let opened = SymbolicLinks.openDirectory(directory)
            guard opened >= 0 else { return }
            defer { Glibc.close(opened) }
            for path in writtenPaths {
                let name = String(path.split(separator: "/").last ?? "")
                var status = stat()
                guard fstatat(opened, name, &status, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
                func moved(_ time: timespec) -> timespec {
                    let total = Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec) + nanoseconds
                    let (quotient, remainder) = total.quotientAndRemainder(dividingBy: 1_000_000_000)
                    return remainder < 0
                        ? timespec(tv_sec: Int(quotient - 1), tv_nsec: Int(remainder + 1_000_000_000))
                        : timespec(tv_sec: Int(quotient), tv_nsec: Int(remainder))
                }
                var times = [moved(status.st_atim), moved(status.st_mtim)]
                if utimensat(opened, name, &times, AT_SYMLINK_NOFOLLOW) != 0 {
                    report(.warning("cannot move the time of the clip \(path) by the clock's step: \(String(cString: strerror(errno))); retention goes by the old time"))
                }
            }
        }
    }

    /// Waits until every clip queued before this call has been written or has failed.
    package func flush() {
        queue.sync {}
    }

    /// Writes what is queued, stops the timer; later clips are ignored. Waits.
    package func close() {
        if holding.exchange(false, ordering: .acquiringAndReleasing) { held.leave() }
        queue.sync {
            stopped = true
            pruneTimer?.cancel()
            pruneTimer = nil
        }
    }

    /// The daemon's stop, first part: waits until the clips queued so far are written (or have failed), at most
    /// until `deadline`, and returns whether they are. When they are not (a slow disk), the clips not begun by then
    /// are held until ``close(deadline:)`` (the one being written goes on), so that the outputs can stop meanwhile
    /// and no clip is announced to half-stopped outputs.
    package func finishWrites(until deadline: DispatchTime) -> Bool {
        let done = DispatchSemaphore(value: 0)
        queue.async { done.signal() }
        guard done.wait(timeout: deadline) == .timedOut else { return true }
        if !holding.exchange(true, ordering: .acquiringAndReleasing) { held.enter() }
        return false
    }

    /// The daemon's stop, last part: writes the clips still queued (held by ``finishWrites(until:)``), at most until
    /// `deadline`, then stops (later clips are ignored). Returns the clips not saved by then, oldest first, as
    /// `smoke_alarm at stream time 12.30 s`: those not begun, and the one being written, whose partial file the
    /// process leaves when it exits (retention removes it once it is a minute old); empty when all were written.
    package func close(deadline: DispatchTime) -> [String] {
        if holding.exchange(false, ordering: .acquiringAndReleasing) { held.leave() }
        let done = DispatchSemaphore(value: 0)
        queue.async { [self] in
            stopped = true
            pruneTimer?.cancel()
            pruneTimer = nil
            done.signal()
        }
        guard done.wait(timeout: deadline) == .timedOut else { return [] }
        abandoned.store(true, ordering: .releasing)
        return waiting.withLock { waiting in waiting.clips.keys.sorted().compactMap { waiting.clips[$0] } }
    }

    package var statistics: Statistics {
        counters.withLock { $0 }
    }

    // MARK: On the queue

    private func write(_ clip: ClipAudio) {
        let started = DispatchTime.now().uptimeNanoseconds
        do throws(EarshotError) {
            let path = try writeFile(clip)
            writtenPaths.append(path)
            if writtenPaths.count > max(1, maxClips) { writtenPaths.removeFirst(writtenPaths.count - max(1, maxClips)) }
            let seconds = Double(DispatchTime.now().uptimeNanoseconds - started) / 1e9
            let wasFailing = counters.withLock { counters -> Bool in
                counters.written += 1
                counters.writeSeconds += seconds
                defer { counters.failing = false }
                return counters.failing
            }
            if wasFailing {
                let lost = lostSinceFailure
                let note = lost == 0 ? "no clip was lost" : lost == 1 ? "1 clip was lost" : "\(lost) clips were lost"
                report(.recovered("clips are saved to \(directory) again (\(note))"))
            }
            lostSinceFailure = 0
            saved(SavedClip(
                path: path, group: clip.group, start: clip.start, end: clip.end, frames: clip.samples.count,
                eventStart: clip.eventStart, eventEnd: clip.eventEnd, capped: clip.capped,
                bytes: 44 + 2 * clip.samples.count, writeSeconds: seconds))
            prune()
        } catch {
            lostSinceFailure += 1
            let firstFailure = counters.withLock { counters -> Bool in
                counters.lost += 1
                defer { counters.failing = true }
                return !counters.failing
            }
            if firstFailure {
                report(.failing("clip of \(clip.group) not saved: \(error.message); detection goes on without clips, and later clips are tried as they come"))
            }
        }
    }

    /// Makes the directory and creates an unnamed file in it (`O_TMPFILE`: nothing is left behind), reporting a
    /// failure as for a clip.
    private func probe() {
        do throws(EarshotError) {
            let opened = try ClipDirectory(opening: directory)
            tightenDirectory(opened)
            if let code = DirectoryWriteProbe.failure(inDirectory: opened.descriptor) {
                throw ClipDirectory.failure("cannot create files in \(directory)", code)
            }
        } catch {
            counters.withLock { $0.failing = true }
            report(.failing("clips cannot be saved: \(error.message); detection goes on without clips, and clips are tried as they come"))
        }
    }

    /// An existing directory that lets its group or other users in is made as the writer makes one, 0700 (its
    /// special bits dropped), and a warning says so: the clips' names say when events happened and of which group
    /// (trial 13 D4). When that fails (another user's directory, a read-only file system) the warning says so, with
    /// the fix. At start only: a mode set later by hand is the administrator's. The directory is opened without
    /// following a symbolic link (``SymbolicLinks/openDirectory(_:)``) and the mode set on what was opened: a link
    /// put there (refused by ``ClipDirectory``) never gets its target's mode changed (audit 14 F1).
    private func tightenDirectory(_ opened: ClipDirectory) {
        let descriptor = opened.descriptor
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & 0o077 != 0 else { return }
        let mode = status.st_mode & 0o7777
        let tightened = mode & 0o700
        func octal(_ value: mode_t) -> String { String(cFormat: "%04o", UInt32(value)) }
        let exposure = "which lets other users list the clips (when events happened, and of which group)"
        if fchmod(descriptor, tightened) == 0 {
            report(.warning("clips directory \(directory) was mode \(octal(mode)), \(exposure): made it \(octal(tightened))"))
        } else {
            let reason = String(cString: strerror(errno))
            report(.warning("clips directory \(directory) is mode \(octal(mode)), \(exposure), and cannot be made \(octal(tightened)): \(reason) (chmod \(octal(tightened)) \(directory))"))
        }
    }

    /// Writes `clip` under a fresh name in the directory opened once for it (``ClipDirectory``); returns its path.
    private func writeFile(_ clip: ClipAudio) throws(EarshotError) -> String {
        try ClipDirectory(opening: directory).write(clip)
    }

    private func prune() {
        // Not through a link (its target's files named like clips): ClipFiles.prune opens the directory without
        // following one, and the writes say why no clip is saved.
        do throws(EarshotError) {
            let pruned = try ClipFiles.prune(
                directory: directory, maxClips: maxClips, retentionDays: retentionDays, now: now())
            counters.withLock { $0.pruned += pruned.expired.count + pruned.excess.count }
        } catch {
            report(.warning("clip retention: \(error.message)"))
        }
    }

    private func startPruneTimer() {
        guard pruneTimer == nil, !stopped else { return }
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + Self.pruneInterval, repeating: Self.pruneInterval, leeway: .seconds(60))
        timer.setEventHandler { [weak self] in self?.prune() }
        pruneTimer = timer
        timer.resume()
    }
}
