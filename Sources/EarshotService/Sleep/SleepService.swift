import Dispatch
import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs

/// Sleep sessions inside `earshotd`: started and stopped by socket commands (`{"cmd":"sleep_start"}`,
/// `{"cmd":"sleep_stop"}`, `{"cmd":"sleep_status"}`, sent by `earshot sleep start|stop|status`) or by the daily
/// `[sleep] schedule`; while one runs, the session gathers what the detection stage's snore detector
/// (`SnoreDetector`, the one that decides group `snoring`) finds, and the pipeline publishes those `snoring` events
/// even when `snoring` is not watched (``AnalysisPipeline``). At the end the ``SnoreReport`` is written to
/// `[sleep] report_dir` as `snore-YYYYMMDD-HHMM.json` and `.svg` (local time of the start; `-2`, `-3`, ... added
/// when that name is taken, so that no report replaces another) and sent to subscribers as one
/// `{"type":"snore_report",...}` line. A session that heard no audio writes and sends no report; its stop reply says
/// so (`"audio_seconds":0` and a `message`).
///
/// Replies: `{"type":"sleep","state":"started","start":ISO}` (or `"already_running"`; with `"warning":TEXT` when no
/// audio is arriving), `{"type":"sleep","state":"stopped","start":..,"end":..,"snoring_minutes":..,
/// "snoring_percent":..,"episodes":N,"events":N,"report_json":PATH,"report_svg":PATH}`, `{"type":"sleep",
/// "state":"running","minutes":..,"snoring_minutes":..,"events":N,"snoring_now":BOOL}` (the open snoring event
/// counted as far as it stands; `warning` as for start) or `{"type":"sleep","state":"idle"}`; `sleep_stop` with no
/// session gets `{"type":"error","message":"no sleep session is running (start one with `earshot sleep start`)"}`.
///
/// - Important: ``observe(window:)``, ``observe(_:)``, ``start(at:scheduled:)``, ``stop(at:)`` and
///   ``reconfigure(_:)`` run on the analysis queue (``handle(command:)`` hops there itself, from the socket's
///   queue). Reports are written on a utility queue.
package final class SleepService: @unchecked Sendable {
    // @unchecked: every mutable property is touched only on `analysisQueue`.

    /// Socket commands this service answers.
    package static let commands = ["sleep_start", "sleep_stop", "sleep_status"]

    private let analysisQueue: DispatchQueue
    private let reportQueue = DispatchQueue(label: "earshot.sleep-reports", qos: .utility)
    /// Report files chosen but not yet written (``claimReportPaths(start:)``), so that two sessions of one minute
    /// never share a name.
    private let claimedStems = Mutex<Set<String>>([])
    private var settings: DaemonConfiguration.Sleep
    private let publishReport: @Sendable (JSONObject) -> Void
    private let stateChanged: @Sendable (Bool) -> Void
    private let log: @Sendable (String, Int) -> Void
    /// Why no audio is arriving now (e.g. `no audio is arriving (capture unavailable: ...)`), or nil while it is:
    /// the capture's state as the daemon last handed it in (``captureChanged(audioProblem:)``).
    private let audioProblemNow: Mutex<String?>
    /// The zone for wall-clock times; nil: local time (``LocalTime``) at each instant.
    private let fixedTimeZone: TimeZone?
    private var session: SleepSession?
    /// The snoring event open in the detection stage now, as it stands, when its onset was published (set by the
    /// pipeline; nil: none).
    package var openSnoreEvent: () -> SnoreEvent? = { nil }
    private var startedBySchedule = false
    /// Set when a scheduled window's session was stopped by hand: no restart until the window closes.
    private var scheduleSkipped = false
    private var scheduleTimer: DispatchSourceTimer?
    /// The wall clock (a test may shift it).
    private let clock: @Sendable () -> Date
    /// The longest the schedule timer waits before looking again, in seconds: 600. Boundaries are found for the
    /// next 10 minutes only, so a step of the system clock (an NTP step, a manual change) is followed within 10 min.
    package static let scheduleLookAheadSeconds = 600.0

    /// - Parameters:
    ///   - analysisQueue: the daemon's analysis queue.
    ///   - settings: `[sleep]` (the schedule and the report directory; its detector keys are the stage's).
    ///   - publishReport: sends the finished report's JSON to subscribers.
    ///   - log: a journal line and its priority (report written, or why not).
    ///   - stateChanged: a session started (`true`) or stopped (`false`), by a command or the schedule; called on
    ///     the analysis queue.
    ///   - audioProblem: why no audio is arriving at the start (the capture's state), or nil when audio arrives;
    ///     later changes come through ``captureChanged(audioProblem:)``. The `sleep_start` and `sleep_status`
    ///     replies carry it as `warning`.
    package init(
        analysisQueue: DispatchQueue, settings: DaemonConfiguration.Sleep, timeZone: TimeZone? = nil,
        publishReport: @escaping @Sendable (JSONObject) -> Void, log: @escaping @Sendable (String, Int) -> Void,
        stateChanged: @escaping @Sendable (Bool) -> Void = { _ in },
        audioProblem: String? = nil, clock: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.clock = clock
        self.stateChanged = stateChanged
        audioProblemNow = Mutex(audioProblem)
        self.analysisQueue = analysisQueue
        self.settings = settings
        fixedTimeZone = timeZone
        self.publishReport = publishReport
        self.log = log
    }

    deinit {
        scheduleTimer?.cancel()
    }

    /// Starts following `[sleep] schedule` (on the analysis queue): checks it now, then sleeps until the next minute
    /// at which the window opens or closes (``nextScheduleChange(after:)``, at most
    /// ``scheduleLookAheadSeconds``) and checks again, so that sessions start and stop at the configured minute
    /// (within milliseconds), not up to a polling interval late.
    package func startSchedule() {
        analysisQueue.async { [self] in
            let timer = DispatchSource.makeTimerSource(queue: analysisQueue)
            timer.setEventHandler { [weak self] in self?.scheduleTick() }
            scheduleTimer = timer
            timer.schedule(deadline: .now())
            timer.resume()
        }
    }

    /// Checks the schedule and re-arms the timer for the next change (analysis queue).
    private func scheduleTick() {
        guard let timer = scheduleTimer else { return }
        let now = clock()
        checkSchedule(now: now)
        let next = nextScheduleChange(after: now)
        // Never less than 1 ms: a timer that fired a moment early (the wall clock and the monotonic timer drift
        // apart by milliseconds) finds the same boundary again and waits for it.
        let wait = max(0.001, next.timeIntervalSince(now))
        timer.schedule(deadline: .now() + .nanoseconds(Int(wait * 1e9)), leeway: .milliseconds(5))
    }

    /// The first whole minute after `date` at which `[sleep] schedule` opens or closes, looking
    /// ``scheduleLookAheadSeconds`` ahead (that far when none is, or when no schedule is set). Each minute is read
    /// in the local time zone as it is at that instant (``SleepSchedule/contains(_:timeZone:)``), so a
    /// daylight-saving change is followed: a `02:30` start on the night clocks jump from 02:00 to 03:00 opens at
    /// 03:00, the first local minute past 02:30. Local minutes change on whole UTC minutes (every zone's offset is a
    /// whole number of minutes).
    package func nextScheduleChange(after date: Date) -> Date {
        let horizon = date.addingTimeInterval(Self.scheduleLookAheadSeconds)
        guard let schedule = settings.schedule else { return horizon }
        let inside = schedule.contains(date, timeZone: zone(at: date))
        var minute = Date(timeIntervalSince1970: (date.timeIntervalSince1970 / 60).rounded(.down) * 60 + 60)
        while minute < horizon {
            if schedule.contains(minute, timeZone: zone(at: minute)) != inside { return minute }
            minute.addTimeInterval(60)
        }
        return horizon
    }

    /// The capture's state changed: why no audio is arriving now (`no audio is arriving (capture stalled: ...)`), or
    /// nil once audio arrives. Any queue; the daemon hands it in as the capture reports each change.
    package func captureChanged(audioProblem: String?) {
        audioProblemNow.withLock { $0 = audioProblem }
    }

    private var audioProblem: String? { audioProblemNow.withLock { $0 } }

    /// Whether a session is running (analysis queue).
    package var isActive: Bool { session != nil }

    /// One analysis window (analysis queue): the running session's monitored audio.
    package func observe(window result: ClassificationResult) {
        session?.observe(window: result.timeRange)
    }

    /// One decision of the stage's snore detector (analysis queue): the running session keeps the events that
    /// were published (`published`: ``SnorePublication`` let it out; a mute does not count), so that its report
    /// holds the snoring subscribers saw. A session that starts in the middle of unwatched snoring counts it from
    /// the next event.
    package func observe(_ decision: SnoreDetector.Decision, published: Bool) {
        guard published else { return }
        session?.observe(decision)
    }

    /// Applies a reloaded `[sleep]` (analysis queue): the schedule and report directory at once (the detector's
    /// keys reach the stage with the plan).
    package func reconfigure(_ fresh: DaemonConfiguration.Sleep) {
        settings = fresh
        // A new schedule: check it now and wait for its own next change.
        if scheduleTimer != nil { scheduleTick() }
    }

    /// Answers a socket command; runs on any queue but the analysis queue (it waits for it).
    package func handle(command: String) -> JSONObject {
        analysisQueue.sync {
            let now = clock()
            switch command {
            case "sleep_start": return start(at: now, scheduled: false)
            case "sleep_stop": return stop(at: now)
            default: return status(now: now)
            }
        }
    }

    /// Starts a session (analysis queue).
    @discardableResult
    package func start(at date: Date, scheduled: Bool) -> JSONObject {
        if let session {
            return ["type": "sleep", "state": "already_running", "start": .string(EventJSON.timestamp(session.startDate))]
        }
        session = SleepSession(startDate: date)
        startedBySchedule = scheduled
        log("sleep session started\(scheduled ? " by the schedule \(settings.schedule?.description ?? "")" : "")", 6)
        stateChanged(true)
        var reply: JSONObject = ["type": "sleep", "state": "started", "start": .string(EventJSON.timestamp(date))]
        if let problem = audioProblem {
            reply["warning"] = .string(problem)
            log("sleep session started while \(problem)", 4)
        }
        return reply
    }

    /// The error reply's message to `sleep_stop` when no session runs.
    package static let notRunning = "no sleep session is running (start one with `earshot sleep start`)"

    /// Stops the running session, publishes the report, and writes the report files
    /// (analysis queue; the files are written on the report queue).
    @discardableResult
    package func stop(at date: Date) -> JSONObject {
        guard var running = session else {
            return ["type": "error", "message": .string(Self.notRunning)]
        }
        session = nil
        if startedBySchedule, settings.schedule?.contains(date, timeZone: zone(at: date)) == true { scheduleSkipped = true }
        startedBySchedule = false
        let monitored = running.monitoredSeconds
        let report = running.stop(openEvent: openSnoreEvent())
        stateChanged(false)
        guard monitored > 0 else {
            // Nothing was heard (capture down, or a start and stop with no window between them): no report file,
            // so that an empty session never stands in for a night's report, and no report message.
            let line = "sleep session from \(EventJSON.timestamp(running.startDate)) to \(EventJSON.timestamp(date)) heard no audio: no report written"
            log(line, 4)
            return [
                "type": "sleep", "state": "stopped",
                "start": .string(EventJSON.timestamp(running.startDate)), "end": .string(EventJSON.timestamp(date)),
                "audio_seconds": 0, "message": .string(line),
            ]
        }
        let paths = claimReportPaths(start: report.startDate ?? date)
        let reportObject = report.json
        // Each clock time with its own UTC offset: a night crosses daylight-saving changes.
        let svg = report.svg(zoneAt: { [fixedTimeZone] instant in fixedTimeZone ?? LocalTime.zone(at: instant) })
        let directory = settings.reportDirectory
        reportQueue.async { [self] in
            publishReport(reportObject)
            do throws(EarshotError) {
                try Self.write(json: reportObject, svg: svg, to: paths, directory: directory)
                log("sleep report written: \(paths.json) and \(paths.svg)", 6)
            } catch {
                log(error.message, 4)
            }
            _ = self.claimedStems.withLock { $0.remove(paths.json) }
        }
        return [
            "type": "sleep", "state": "stopped",
            "start": .string(EventJSON.timestamp(running.startDate)), "end": .string(EventJSON.timestamp(date)),
            "snoring_minutes": .number(report.snoringMinutes, decimals: 2),
            "snoring_percent": .number(report.snoringPercent, decimals: 2),
            "audio_seconds": .number(monitored, decimals: 1),
            "episodes": .int(report.episodes.count), "events": .int(report.events.count),
            "report_json": .string(paths.json), "report_svg": .string(paths.svg),
        ]
    }

    /// Waits until reports queued so far are written (shutdown, tests).
    package func flushReports() {
        reportQueue.sync {}
    }

    private func status(now: Date) -> JSONObject {
        guard let session else {
            var object: JSONObject = ["type": "sleep", "state": "idle"]
            if let schedule = settings.schedule { object["schedule"] = .string(schedule.description) }
            return object
        }
        // The snoring going on now counts too, as far as the detector has released it.
        let soFar = session.snoringSoFar(openEvent: openSnoreEvent())
        var object: JSONObject = [
            "type": "sleep", "state": "running", "start": .string(EventJSON.timestamp(session.startDate)),
            "minutes": .number(session.monitoredSeconds / 60, decimals: 1),
            "snoring_minutes": .number(soFar.seconds / 60, decimals: 2),
            "events": .int(soFar.events),
            "snoring_now": .bool(soFar.open),
        ]
        if let problem = audioProblem { object["warning"] = .string(problem) }
        return object
    }

    /// Starts or stops the session as the schedule says (analysis queue).
    package func checkSchedule(now: Date) {
        guard let schedule = settings.schedule else {
            scheduleSkipped = false
            return
        }
        let inside = schedule.contains(now, timeZone: zone(at: now))
        if !inside {
            scheduleSkipped = false
            if session != nil, startedBySchedule { stop(at: now) }
        } else if session == nil, !scheduleSkipped {
            start(at: now, scheduled: true)
        }
    }

    /// `DIR/snore-YYYYMMDD-HHMM.json` and `.svg`, local time of `start`.
    /// The zone for wall-clock times at `date`.
    private func zone(at date: Date) -> TimeZone { fixedTimeZone ?? LocalTime.zone(at: date) }

    /// The report files for a session that started at `start`: ``reportPaths(directory:start:timeZone:)``, or with
    /// `-2`, `-3`, ... before the extension when a report of that minute exists or is still being written, so that
    /// no report ever replaces another (analysis queue).
    private func claimReportPaths(start: Date) -> (json: String, svg: String) {
        let first = Self.reportPaths(directory: settings.reportDirectory, start: start, timeZone: zone(at: start))
        return claimedStems.withLock { claimed -> (json: String, svg: String) in
            var paths = first
            var suffix = 2
            while claimed.contains(paths.json) || PathKind(path: paths.json) != .missing || PathKind(path: paths.svg) != .missing {
                paths = (String(first.json.dropLast(5)) + "-\(suffix).json", String(first.svg.dropLast(4)) + "-\(suffix).svg")
                suffix += 1
            }
            claimed.insert(paths.json)
            return paths
        }
    }

    package static func reportPaths(directory: String, start: Date, timeZone: TimeZone) -> (json: String, svg: String) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute], from: start)
        func two(_ value: Int?) -> String { let v = value ?? 0; return (v < 10 ? "0" : "") + "\(v)" }
        let stem = "snore-\(parts.year ?? 1970)\(two(parts.month))\(two(parts.day))-\(two(parts.hour))\(two(parts.minute))"
        let base = joinedPath(directory, stem)
        return (base + ".json", base + ".svg")
    }

    /// Writes the report files, creating the directory (and any missing parent) mode 0700 when missing, as the
    /// clips directory is: a night's snoring is for the household, not for every local user.
    /// - Throws: `EarshotError(.cannotCreate)` naming the file and the fix.
    package static func write(json: JSONObject, svg: String, to paths: (json: String, svg: String), directory: String)
        throws(EarshotError)
    {
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw EarshotError(
                .cannotCreate,
                "cannot create the sleep report directory \(directory): \(errorText(error)) (set [sleep] report_dir to a writable directory)")
        }
        for (path, text) in [(paths.json, JSONValue.object(json).encoded + "\n"), (paths.svg, svg)] {
            try OutputFile.write(
                Data(text.utf8), to: path, what: "the sleep report", hint: "check free space and that [sleep] report_dir is writable")
        }
    }
}
