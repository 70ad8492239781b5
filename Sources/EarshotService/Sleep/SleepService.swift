import Dispatch
import FoundationEssentials
import Glibc
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
/// `sleep_stop` writes the report before it replies (the event server's queue does not wait for it meanwhile:
/// ``handle(command:reply:)``): when it cannot be written the reply has `"error":LINE` (the
/// file, why, and the fix) and `"report":{...}` (the report itself) instead of `report_json` and `report_svg`, and
/// one `sleep_report_unavailable` health event goes out. A session stopped by the schedule or the shutdown has its
/// report written on the report queue, with the same health event when that fails.
///
/// A report that could not be written is kept (at most ``unwrittenReportLimit``, the oldest dropped with a journal
/// line) and written again every ``reportRetrySeconds``, when the next session starts and when the daemon stops,
/// under the file names it was given; once written, one `sleep_report_saved` health event says where. Failed retries
/// say nothing more (the first failure was said); what the stop of the daemon still cannot write is one journal line
/// each, as lost.
///
/// While a session runs, a marker file ``markerName`` in the report directory says so; the stop of the daemon
/// rewrites it with the session's end and report, any other stop removes it. The next daemon finds it
/// (``resumeInterruptedSession()``), starts a session at once and says where the earlier part's report is, or that
/// it was lost (the daemon was killed before it could write one).
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
    /// Reports whose files could not be written, oldest first, tried again (report queue only).
    private var unwritten: [FinishedReport] = []
    /// Tries ``unwritten`` again every ``reportRetrySeconds`` while it holds any (report queue only).
    private var retryTimer: DispatchSourceTimer?
    /// The work ``finishReports(until:)`` queued on the report queue, left when it is done; queued once.
    private let finishing = DispatchGroup()
    private let finishQueued = Atomic<Bool>(false)
    /// Seconds between tries of a report that could not be written: 60.
    package static let reportRetrySeconds = 60.0
    /// Unwritten reports kept for another try: 4 (four nights' reports; each is a few kilobytes of JSON and SVG).
    package static let unwrittenReportLimit = 4
    private let publishReport: @Sendable (JSONObject) -> Void
    private let stateChanged: @Sendable (Bool) -> Void
    private let log: @Sendable (String, Int) -> Void
    /// Sends a health event (`sleep_report_unavailable`, `sleep_session_resumed`) to every output.
    private let reportHealth: @Sendable (HealthEvent) -> Void
    /// Why no audio is arriving now (e.g. `no audio is arriving (capture unavailable: ...)`), or nil while it is:
    /// the capture's state as the daemon last handed it in (``captureChanged(audioProblem:)``).
    private let audioProblemNow: Mutex<String?>
    /// The zone for wall-clock times; nil: local time (``LocalTime``) at each instant.
    private let fixedTimeZone: TimeZone?
    private var session: SleepSession?
    /// The snoring event open in the detection stage now, as it stands, when its onset was published (set by the
    /// pipeline; nil: none).
    package var openSnoreEvent: () -> SnoreEvent? = { nil }
    /// Called with the stream time (s) of a session's first window: the pipeline tells the snore detector to count
    /// snores from there (``SleepSession``).
    package var sessionAudioStarts: (Double) -> Void = { _ in }
    private var startedBySchedule = false
    /// Whether the schedule's window was open at the last check (nil: not checked since start or since the
    /// schedule changed): its closing minute stops the running session, whoever started it.
    private var wasInsideSchedule: Bool?
    /// Set when a scheduled window's session was stopped by hand: no restart until the window closes.
    private var scheduleSkipped = false
    private var scheduleTimer: DispatchSourceTimer?
    /// Set by ``shutDown()``: no session starts any more (the schedule's timer, a reload's queued
    /// ``reconfigure(_:)`` or a command that comes after the daemon's stop stopped the session).
    private var isShutDown = false
    /// The wall clock (a test may shift it).
    private let clock: @Sendable () -> Date
    /// How stream times become the daemon's clock times, as the history's and the clips' do (the daemon derives it
    /// once and hands the same value to each, and shifts each at a clock step): the report's times are the history's.
    private var timeLine: EventLevelMeter.TimeLine
    /// Why the last session marker could not be written, or nil (report queue only): the `sleep_start` reply's
    /// `marker_warning`.
    private var markerProblem: String?
    /// Stream time (s) of the latest window's end, observed with or without a session (the history's latest).
    private var latestWindowEnd: Double = 0
    /// The longest the schedule timer waits before looking again, in seconds: 600. Boundaries are found for the
    /// next 10 minutes only, so a step of the system clock (an NTP step, a manual change) is followed within 10 min.
    package static let scheduleLookAheadSeconds = 600.0

    /// - Parameters:
    ///   - analysisQueue: the daemon's analysis queue.
    ///   - settings: `[sleep]` (the schedule and the report directory; its detector keys are the stage's).
    ///   - publishReport: sends the finished report's JSON to subscribers.
    ///   - log: a journal line and its priority (report written, session started or stopped).
    ///   - reportHealth: a health event for every output: `sleep_report_unavailable` (a report or the directory
    ///     cannot be written), `sleep_session_resumed`.
    ///   - stateChanged: a session started (`true`) or stopped (`false`), by a command or the schedule; called on
    ///     the analysis queue.
    ///   - timeLine: stream time to the daemon's clock (``EventLevelMeter/TimeLine``): `.live` for real-time input,
    ///     `.stream(origin:)` for input replayed at another speed; the history's and the clip names' value.
    ///   - audioProblem: why no audio is arriving at the start (the capture's state), or nil when audio arrives;
    ///     later changes come through ``captureChanged(audioProblem:)``. The `sleep_start` and `sleep_status`
    ///     replies carry it as `warning`.
    package init(
        analysisQueue: DispatchQueue, settings: DaemonConfiguration.Sleep, timeZone: TimeZone? = nil,
        publishReport: @escaping @Sendable (JSONObject) -> Void, log: @escaping @Sendable (String, Int) -> Void,
        reportHealth: @escaping @Sendable (HealthEvent) -> Void = { _ in },
        stateChanged: @escaping @Sendable (Bool) -> Void = { _ in },
        timeLine: EventLevelMeter.TimeLine = .live, audioProblem: String? = nil,
        clock: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.clock = clock
        self.timeLine = timeLine
        self.stateChanged = stateChanged
        audioProblemNow = Mutex(audioProblem)
        self.analysisQueue = analysisQueue
        self.settings = settings
        fixedTimeZone = timeZone
        self.publishReport = publishReport
        self.log = log
        self.reportHealth = reportHealth
        // First on the report queue, before any write there has begun (audit 14 F7).
        let directory = settings.reportDirectory
        reportQueue.async { Self.removeLeftoverStaging(in: directory, log: log) }
    }

    deinit {
        scheduleTimer?.cancel()
        retryTimer?.cancel()
    }

    /// Starts following `[sleep] schedule` (on the analysis queue): checks it now, then sleeps until the next minute
    /// at which the window opens or closes (``nextScheduleChange(after:)``, at most
    /// ``scheduleLookAheadSeconds``) and checks again, so that sessions start and stop at the configured minute
    /// (within milliseconds), not up to a polling interval late.
    package func startSchedule() {
        analysisQueue.async { [self] in
            guard !isShutDown else { return }
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
        latestWindowEnd = max(latestWindowEnd, result.timeRange.end)
        guard session != nil else { return }
        let first = session?.hasAudio == false
        session?.observe(window: result.timeRange)
        if first { sessionAudioStarts(result.timeRange.start) }
    }

    /// One decision of the stage's snore detector (analysis queue): the running session keeps the events that
    /// were published (`published`: ``SnorePublication`` let it out; a mute does not count), so that its report
    /// holds the snoring subscribers saw. A session that starts in the middle of unwatched snoring counts it from
    /// the next event.
    ///
    /// - Parameter now: the wall clock the decision is routed with (the history maps its event with it); nil: now.
    package func observe(_ decision: SnoreDetector.Decision, published: Bool, now: Date? = nil) {
        guard published, session != nil else { return }
        session?.observe(decision, wallClock: wallClock(now: now ?? clock()))
    }

    /// Stream time to the daemon's clock as it stands at wall-clock time `now` (analysis queue).
    private func wallClock(now: Date) -> (Double) -> Date {
        let timeLine = timeLine, latest = latestWindowEnd
        return { streamTime in timeLine.date(of: streamTime, latestWindowEnd: latest, now: now) }
    }

    /// The daemon's clock at wall-clock time `now`: `now` for live input, the replayed stream's latest window end
    /// on its time line otherwise (analysis queue).
    /// Whole milliseconds, as the history stores its times: the replies' start and end are the report's.
    private func onClock(_ now: Date) -> Date {
        HistoryEvent.millisecondDate(HistoryEvent.milliseconds(wallClock(now: now)(latestWindowEnd)))
    }

    /// Applies a reloaded `[sleep]` (analysis queue): the schedule and report directory at once (the detector's
    /// keys reach the stage with the plan).
    package func reconfigure(_ fresh: DaemonConfiguration.Sleep) {
        guard !isShutDown else { return }
        // Another window: the old one's state says nothing of it (a reload is no closing minute).
        if fresh.schedule != settings.schedule { wasInsideSchedule = nil }
        settings = fresh
        // A new schedule: check it now and wait for its own next change.
        if scheduleTimer != nil { scheduleTick() }
    }

    /// Answers a socket command; runs on any queue but the analysis queue and the report queue (it waits for them).
    package func handle(command: String) -> JSONObject {
        let answered = DispatchSemaphore(value: 0)
        let reply = Mutex<JSONObject>([:])
        handle(command: command) { object in
            reply.withLock { $0 = object }
            answered.signal()
        }
        answered.wait()
        return reply.withLock { $0 }
    }

    /// The daemon's clock stepped by `seconds` (analysis queue, on the heartbeat that found the step, before any
    /// later event is mapped): the time line shifts (``EventLevelMeter/TimeLine/shifted(by:)``), a running session's
    /// start moves with the clock (``SleepSession/clockStepped(by:)``: its length is the time it ran, and its report
    /// is named after its true start) and its marker is written again with that start, and the schedule is checked on
    /// the new clock at once.
    package func clockStepped(by seconds: Double) {
        timeLine = timeLine.shifted(by: seconds)
        if var running = session {
            running.clockStepped(by: seconds)
            session = running
            let marker: JSONObject = [
                "start": .string(EventJSON.timestamp(running.startDate)), "scheduled": .bool(startedBySchedule),
            ]
            let directory = settings.reportDirectory
            reportQueue.async { [self] in keepMarker(marker, directory: directory) }
        }
        if scheduleTimer != nil { scheduleTick() }
    }

    /// Answers a socket command without waiting for the disk: `sleep_stop`'s reply is handed to `reply` once the
    /// report is written, `sleep_start`'s once the marker is (both on the report queue), so that they say whether
    /// they were, while the caller's queue (the event server's) goes on serving other clients; `sleep_status` is
    /// answered before returning. Any queue but the analysis queue and the report queue.
    package func handle(command: String, reply: @escaping @Sendable (JSONObject) -> Void) {
        switch command {
        case "sleep_stop":
            stopByCommand(reply: reply)
        case "sleep_start":
            analysisQueue.async { [self] in
                let answer = start(at: clock(), scheduled: false)
                guard answer["state"]?.stringValue == "started" else {
                    reply(answer)
                    return
                }
                // The marker is written before the reply: a session that a restart would not resume is said at
                // bedtime. Queued on the report queue by `start`, before this.
                reportQueue.async { [self] in
                    guard let problem = markerProblem else {
                        reply(answer)
                        return
                    }
                    var warned = answer
                    warned["marker_warning"] = .string(problem)
                    reply(warned)
                }
            }
        default:
            reply(analysisQueue.sync { status(now: clock()) })
        }
    }

    /// `sleep_stop`: ends the session on the analysis queue, writes its report on the report queue, then replies
    /// there (without a report, once the marker is gone).
    private func stopByCommand(reply: @escaping @Sendable (JSONObject) -> Void) {
        analysisQueue.async { [self] in
            let (answer, report) = finish(at: clock(), reason: .command)
            reportQueue.async { [self] in reply(report.map { write($0, reply: answer) } ?? answer) }
        }
    }

    /// Starts a session (analysis queue).
    @discardableResult
    /// - Parameter resumed: started by ``resumeInterruptedSession()`` at the daemon's start, when no audio has come
    ///   yet: that is not worth a warning.
    package func start(at now: Date, scheduled: Bool, resumed: Bool = false) -> JSONObject {
        guard !isShutDown else { return ["type": "error", "message": .string(Self.shutDownMessage)] }
        if let session {
            return ["type": "sleep", "state": "already_running", "start": .string(EventJSON.timestamp(session.startDate))]
        }
        // On the daemon's clock: replayed input starts the session at its stream's time, as the history has it.
        let date = onClock(now)
        session = SleepSession(startDate: date)
        startedBySchedule = scheduled
        log("sleep session started\(scheduled ? " by the schedule \(settings.schedule?.description ?? "")" : "")", 6)
        stateChanged(true)
        let marker: JSONObject = ["start": .string(EventJSON.timestamp(date)), "scheduled": .bool(scheduled)]
        let directory = settings.reportDirectory
        reportQueue.async { [self] in
            // A new night: the reports still unwritten get a try first, under the names they were given.
            retryUnwrittenReports()
            keepMarker(marker, directory: directory)
        }
        var reply: JSONObject = ["type": "sleep", "state": "started", "start": .string(EventJSON.timestamp(date))]
        if let problem = audioProblem {
            reply["warning"] = .string(problem)
            if !resumed { log("sleep session started while \(problem)", 4) }
        }
        return reply
    }

    /// At the daemon's stop, after the running session was stopped (``stop(at:reason:)`` with `.shutdown`; analysis
    /// queue): cancels the schedule's timer and makes ``start(at:scheduled:resumed:)``, ``checkSchedule(now:)`` and
    /// ``reconfigure(_:)`` do nothing from now on, so that neither the timer's next tick nor a reload queued before
    /// the stop starts a session whose marker the next daemon would take for an interrupted one.
    package func shutDown() {
        isShutDown = true
        scheduleTimer?.cancel()
        scheduleTimer = nil
    }

    /// The error reply's message to `sleep_start` after ``shutDown()``.
    package static let shutDownMessage = "the daemon is stopping"

    /// The error reply's message to `sleep_stop` when no session runs.
    package static let notRunning = "no sleep session is running (start one with `earshot sleep start`)"

    /// Who stops a session: a `sleep_stop` command, the schedule's closing minute, or the daemon's shutdown.
    package enum StopReason: Sendable {
        case command, schedule, shutdown
    }

    /// A stopped session's report, waiting to be written.
    private struct FinishedReport: Sendable {
        var json: String
        var svg: String
        var object: JSONObject
        var svgText: String
        var directory: String
        var start: String
        var end: String
        var shutdown: Bool
    }

    /// Stops the running session and queues its report on the report queue (analysis queue): for the schedule, the
    /// shutdown and tests; the reply names the report files (``flushReports()`` waits for them). A `sleep_stop`
    /// command writes before it replies instead (``handle(command:)``).
    @discardableResult
    package func stop(at date: Date, reason: StopReason = .command) -> JSONObject {
        let (reply, report) = finish(at: date, reason: reason)
        guard let report else { return reply }
        reportQueue.async { [self] in _ = write(report, reply: reply) }
        var named = reply
        named["report_json"] = .string(report.json)
        named["report_svg"] = .string(report.svg)
        return named
    }

    /// Ends the running session (analysis queue): the reply without the report's files, and the report to write
    /// (nil when no session runs or it heard no audio; the marker is then dealt with here).
    private func finish(at now: Date, reason: StopReason) -> (reply: JSONObject, report: FinishedReport?) {
        guard var running = session else {
            return (["type": "error", "message": .string(Self.notRunning)], nil)
        }
        session = nil
        if startedBySchedule, settings.schedule?.contains(now, timeZone: zone(at: now)) == true { scheduleSkipped = true }
        if reason == .schedule, let schedule = settings.schedule {
            log("sleep session stopped by the schedule \(schedule)\(startedBySchedule ? "" : " (it was started by hand)")", 6)
        }
        startedBySchedule = false
        let monitored = running.monitoredSeconds
        // The end on the daemon's clock, as the start: the reply's times are the report's.
        let date = onClock(now)
        let report = running.stop(openEvent: openSnoreEvent(), end: date, wallClock: wallClock(now: now))
        stateChanged(false)
        let start = EventJSON.timestamp(running.startDate), end = EventJSON.timestamp(date)
        let directory = settings.reportDirectory
        guard monitored > 0 else {
            // Nothing was heard (capture down, or a start and stop with no window between them): no report file,
            // so that an empty session never stands in for a night's report, and no report message.
            let line = "sleep session from \(start) to \(end) heard no audio: no report written"
            log(line, 4)
            let marker: JSONObject? = reason == .shutdown
                ? ["start": .string(start), "end": .string(end), "report_error": .string("it heard no audio")] : nil
            reportQueue.async { [self] in
                if let marker { keepMarker(marker, directory: directory) } else { removeMarker(directory: directory) }
            }
            return ([
                "type": "sleep", "state": "stopped", "start": .string(start), "end": .string(end),
                "audio_seconds": 0, "message": .string(line),
            ], nil)
        }
        // Published here, not where the files are written: the report queue may wait on a slow disk, and the stop of
        // the daemon does not wait for it beyond ``finishReports(until:)``'s deadline.
        publishReport(report.json)
        let paths = claimReportPaths(start: report.startDate ?? date)
        // Each clock time with its own UTC offset: a night crosses daylight-saving changes.
        let svg = report.svg(zoneAt: { [fixedTimeZone] instant in fixedTimeZone ?? LocalTime.zone(at: instant) })
        let reply: JSONObject = [
            "type": "sleep", "state": "stopped", "start": .string(start), "end": .string(end),
            "snoring_minutes": .number(report.snoringMinutes, decimals: 2),
            "snoring_percent": .number(report.snoringPercent, decimals: 2),
            "audio_seconds": .number(monitored, decimals: 1),
            "episodes": .int(report.episodes.count), "events": .int(report.events.count),
        ]
        return (reply, FinishedReport(
            json: paths.json, svg: paths.svg, object: report.json, svgText: svg, directory: directory, start: start,
            end: end, shutdown: reason == .shutdown))
    }

    /// Writes `report`'s files (report queue; ``finish(at:reason:)`` has published it); `reply` with the files'
    /// paths, or with `error` and the report itself when they could not be written (then one
    /// `sleep_report_unavailable` health event, and the report is kept for another try: ``retryUnwrittenReports()``).
    private func write(_ report: FinishedReport, reply: JSONObject) -> JSONObject {
        var reply = reply
        var marker: JSONObject = ["start": .string(report.start), "end": .string(report.end)]
        do throws(EarshotError) {
            try Self.write(json: report.object, svg: report.svgText, to: (report.json, report.svg), directory: report.directory)
            log("sleep report written: \(report.json) and \(report.svg)", 6)
            reply["report_json"] = .string(report.json)
            reply["report_svg"] = .string(report.svg)
            marker["report"] = .string(report.json)
        } catch {
            reportHealth(HealthEvent(
                state: .sleepReportUnavailable,
                message: "the sleep report of the session from \(report.start) to \(report.end) was not written: \(error.message); its content went out as the snore_report line (to the socket's subscribers and MQTT), and earshotd tries to write it again every minute, at the next session's start and when it stops"))
            reply["error"] = .string(error.message)
            reply["report"] = .object(report.object)
            marker["report_error"] = .string(error.message)
            keepForRetry(report)
        }
        if report.shutdown { keepMarker(marker, directory: report.directory) } else { removeMarker(directory: report.directory) }
        if reply["error"] == nil { _ = claimedStems.withLock { $0.remove(report.json) } }
        return reply
    }

    /// Keeps a report that could not be written for another try (report queue), dropping the oldest beyond
    /// ``unwrittenReportLimit``, and arms the retry timer.
    private func keepForRetry(_ report: FinishedReport) {
        unwritten.append(report)
        while unwritten.count > Self.unwrittenReportLimit {
            let dropped = unwritten.removeFirst()
            _ = claimedStems.withLock { $0.remove(dropped.json) }
            log("the sleep report of the session from \(dropped.start) to \(dropped.end) is lost: it could not be written, and at most \(Self.unwrittenReportLimit) unwritten reports are kept for another try (its content went out as the snore_report line)", 3)
        }
        guard retryTimer == nil else { return }
        let timer = DispatchSource.makeTimerSource(queue: reportQueue)
        let interval = DispatchTimeInterval.milliseconds(Int(Self.reportRetrySeconds * 1000))
        timer.schedule(deadline: .now() + interval, repeating: interval, leeway: .seconds(1))
        timer.setEventHandler { [weak self] in self?.retryUnwrittenReports() }
        retryTimer = timer
        timer.resume()
    }

    /// Tries the reports that could not be written again, oldest first, under their names (report queue): each one
    /// written is one journal line and one `sleep_report_saved` health event; a failure says nothing more. The timer
    /// stops when none is left.
    private func retryUnwrittenReports() {
        guard !unwritten.isEmpty else { return }
        var left: [FinishedReport] = []
        for report in unwritten {
            do throws(EarshotError) {
                try Self.write(json: report.object, svg: report.svgText, to: (report.json, report.svg), directory: report.directory)
            } catch {
                left.append(report)
                continue
            }
            _ = claimedStems.withLock { $0.remove(report.json) }
            let line = "the sleep report of the session from \(report.start) to \(report.end) is written after all: \(report.json) and \(report.svg)"
            log(line, 6)
            reportHealth(HealthEvent(state: .sleepReportSaved, message: line, details: ["report_json": .string(report.json)]))
            removeStaleMarker(of: report)
        }
        unwritten = left
        if left.isEmpty {
            retryTimer?.cancel()
            retryTimer = nil
        }
    }

    /// Removes the marker when it is still the running mark of `report`'s session (report queue): its removal at
    /// the session's stop failed with the report. A marker a later session wrote is left alone.
    private func removeStaleMarker(of report: FinishedReport) {
        let path = joinedPath(report.directory, Self.markerName)
        guard let data = try? Data(contentsOf: URL(fileURLWithPath: path)), let marker = try? JSONValue.parse(data),
              marker["start"]?.stringValue == report.start, marker["end"] == nil else { return }
        Self.removeMarkerFile(in: report.directory)
    }

    /// At the daemon's stop (after the running session's own report is queued): waits until `deadline` for the
    /// reports and the marker being written, tries the unwritten reports once more, and says of each that is still
    /// not written that it is lost. True when all that is done; false when the report queue is still writing at
    /// `deadline` (a disk that does not answer), so that the stop goes on without it. Calling it again (with a later
    /// deadline) waits for the same work, which is queued once.
    package func finishReports(until deadline: DispatchTime) -> Bool {
        if !finishQueued.exchange(true, ordering: .acquiringAndReleasing) {
            finishing.enter()
            reportQueue.async { [self] in
                retryUnwrittenReports()
                retryTimer?.cancel()
                retryTimer = nil
                for report in unwritten {
                    log("the sleep report of the session from \(report.start) to \(report.end) is lost: \(report.directory) still cannot be written as earshotd stops (its content went out as the snore_report line)", 3)
                }
                unwritten.removeAll()
                finishing.leave()
            }
        }
        return finishing.wait(timeout: deadline) == .success
    }

    /// `[sleep] report_dir` as the service has it now (analysis queue).
    package var reportDirectory: String { settings.reportDirectory }

    /// The journal line for sleep reports and markers a disk has not written by the end of the daemon's stop:
    /// `/var/lib/earshot/sleep had not taken the sleep report and session marker 3.75 s into the stop (the report's
    /// content went out as the snore_report line); check that disk`.
    package static func unwrittenAtStopLine(directory: String, seconds: Double) -> String {
        "\(directory) had not taken the sleep report and session marker \(SettingRules.format(seconds)) s into the stop (the report's content went out as the snore_report line); check that disk"
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
        let soFar = session.snoringSoFar(openEvent: openSnoreEvent(), wallClock: wallClock(now: now))
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
        guard !isShutDown else { return }
        guard let schedule = settings.schedule else {
            scheduleSkipped = false
            wasInsideSchedule = nil
            return
        }
        let inside = schedule.contains(now, timeZone: zone(at: now))
        defer { wasInsideSchedule = inside }
        if !inside {
            scheduleSkipped = false
            // The closing minute stops the session whoever started it (the morning report comes at the window's
            // end); outside the window a session started by hand runs until it is stopped.
            if session != nil, startedBySchedule || wasInsideSchedule == true { stop(at: now, reason: .schedule) }
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

    // MARK: The session marker

    /// The file in `[sleep] report_dir` that says a session runs (`{"start":ISO,"scheduled":BOOL}`), or, after the
    /// daemon stopped during one, how it ended (`{"start":ISO,"end":ISO,"report":PATH}`, or `"report_error":LINE`
    /// instead of `report`).
    package static let markerName = ".earshot-sleep-session"
    /// The most bytes of a marker read (one is about 200: a start, an end and a report path).
    static let markerLimit = 65_536

    /// Writes the marker (report queue), mode 0600 and without following a link at its name or in the directory
    /// (``openDirectory(_:writing:parents:cannotCreate:)``, then
    /// ``OutputFile/writePrivate(_:in:name:path:mode:what:hint:readerPatience:)`` through it); a failure is
    /// one journal line (the report directory's own problem is said by the report's write and at start) and the
    /// `sleep_start` reply's `marker_warning` (``markerProblem``).
    private func keepMarker(_ marker: JSONObject, directory: String) {
        let path = joinedPath(directory, Self.markerName)
        do throws(EarshotError) {
            // The last directory only (as the clips directory): a report directory under a missing parent is the
            // report's to create, or to fail on.
            let opened = try Self.openDirectory(directory, writing: "the sleep session marker", parents: false) { reason in
                EarshotError(
                    .cannotCreate,
                    "cannot create the sleep report directory \(directory) for the session marker: \(reason) (a restart of earshotd will not resume this session; set [sleep] report_dir to a writable directory)")
            }
            defer { close(opened) }
            try OutputFile.writePrivate(
                Data((JSONValue.object(marker).encoded + "\n").utf8), in: opened, name: Self.markerName, path: path,
                what: "the sleep session marker",
                hint: "a restart of earshotd will not resume this session; make [sleep] report_dir writable")
            markerProblem = nil
        } catch {
            markerProblem = error.message
            log(error.message, 4)
        }
    }

    /// Removes the marker (report queue).
    private func removeMarker(directory: String) {
        Self.removeMarkerFile(in: directory)
    }

    /// Removes the marker through `directory` opened without following a link (`unlinkat`): never a file of that
    /// name where a link swapped in for the directory points (audit 15 F1).
    private static func removeMarkerFile(in directory: String) {
        let opened = SymbolicLinks.openDirectory(directory)
        guard opened >= 0 else { return }
        _ = unlinkat(opened, markerName, 0)
        close(opened)
    }

    /// At the daemon's start (analysis queue): when the marker says a session was running as the previous daemon
    /// stopped, starts one at once (continuing the night) and says so in one `sleep_session_resumed` health event:
    /// where the earlier part's report is, or that it was lost (no end in the marker: the daemon was killed). A
    /// marker of a scheduled session whose window has closed since is only logged. A marker that cannot be read or
    /// is not one is one journal line and is removed.
    package func resumeInterruptedSession() {
        // A stop that came first leaves the marker for the next daemon.
        guard !isShutDown else { return }
        let directory = settings.reportDirectory
        let path = joinedPath(directory, Self.markerName)
        var status = stat()
        guard lstat(path, &status) == 0 else { return }
        let data: Data
        do throws(RegularFile.Failure) {
            // Not through a link (another user's file, /dev/zero), nor from a FIFO, which would hold the start.
            data = Data(try RegularFile.read(path, limit: Self.markerLimit, followingLinks: false))
        } catch {
            let reason = status.st_mode & S_IFMT == S_IFLNK
                ? "it is a symbolic link, which earshotd does not follow" : "it cannot be read (\(error.reason))"
            log("ignoring the sleep session marker \(path): \(reason); no session is resumed", 4)
            Self.removeMarkerFile(in: directory)
            return
        }
        guard let marker = try? JSONValue.parse(data), case .string(let earlierStart)? = marker["start"] else {
            log("ignoring the sleep session marker \(path): it is not one (no JSON object with a session start); no session is resumed", 4)
            Self.removeMarkerFile(in: directory)
            return
        }
        var scheduled = false
        if case .bool(true)? = marker["scheduled"] { scheduled = true }
        let earlier: String
        if case .string(let end)? = marker["end"] {
            if case .string(let report)? = marker["report"] {
                earlier = "the session from \(earlierStart) ended when earshotd stopped at \(end); its report is \(report)"
            } else {
                let why = marker["report_error"].flatMap { value -> String? in
                    if case .string(let text) = value { text } else { nil }
                } ?? "unknown"
                earlier = "the session from \(earlierStart) ended when earshotd stopped at \(end); its report was not written (\(why))"
            }
        } else {
            earlier = "the session from \(earlierStart) was running when earshotd was killed (or the machine went down): its part up to the restart is lost, no report was written"
        }
        let now = clock()
        if scheduled, let schedule = settings.schedule, !schedule.contains(now, timeZone: zone(at: now)) {
            log("not resuming the sleep session: \(earlier), and the schedule's window \(schedule) has closed since", 4)
            Self.removeMarkerFile(in: directory)
            return
        }
        let reply = start(at: now, scheduled: scheduled && settings.schedule != nil, resumed: true)
        reportHealth(HealthEvent(
            state: .sleepSessionResumed,
            message: "sleep session resumed after earshotd restarted: \(earlier); a new session runs from \(reply["start"]?.stringValue ?? EventJSON.timestamp(now))"))
    }

    // MARK: Files

    /// Why files cannot be created in `directory` (it exists; a missing one is created when a report is written):
    /// an unnamed file is made there and dropped (`O_TMPFILE`: nothing is left behind); nil when it can be, or the
    /// file system cannot tell that way. E.g. `cannot create files in /srv/sleep: Operation not permitted`.
    package static func reportDirectoryProblem(_ directory: String) -> String? {
        guard PathKind(path: directory) == .directory, let code = DirectoryWriteProbe.failure(in: directory) else { return nil }
        return "cannot create files in \(directory): \(String(cString: strerror(code)))"
    }

    /// The line for a report directory that cannot be written (``reportDirectoryProblem(_:)``), at start and in
    /// `--check-config`.
    package static func reportDirectoryLine(_ problem: String) -> String {
        "sleep reports cannot be written: \(problem) (make [sleep] report_dir writable by earshotd's user, or set it to a writable directory); sessions still run, and each report is tried when its session stops"
    }

    /// Removes the staging files of report and marker writes in `directory` that a stop cut short (its deadline, a
    /// kill, a power cut), with one journal line naming them, priority 5 (``OutputFile/removeLeftoverStaging(in:for:)``:
    /// only this user's regular files of those names, not through a link). Run first on the report queue (audit 14 F7).
    package static func removeLeftoverStaging(in directory: String, log: (String, Int) -> Void) {
        let removed = OutputFile.removeLeftoverStaging(in: directory) { name in
            name == markerName || name.hasPrefix("snore-") && (name.hasSuffix(".json") || name.hasSuffix(".svg"))
        }
        guard !removed.isEmpty else { return }
        let count = removed.count == 1 ? "1 file" : "\(removed.count) files"
        log("removed \(count) in \(directory) that a write cut short by an earlier stop left behind: \(removed.joined(separator: ", "))", 5)
    }

    /// Refuses a symbolic link in `directory` (at its name or above it): the reports and the marker are not written
    /// through one (audit 14 F1; the start and `--check-config` refuse it too,
    /// `DaemonConfiguration.checkStoragePaths()`).
    /// - Throws: `EarshotError(.cannotCreate)`, e.g. `cannot write the sleep report in /srv/sleep: it is a symbolic
    ///   link, which earshotd does not follow (delete the link, ...)`.
    private static func refuseLink(in directory: String, writing what: String) throws(EarshotError) {
        if let refusal = SymbolicLinks.directoryRefusal(
            directory, doing: "cannot write \(what) in", setting: "[sleep] report_dir", contents: "sleep reports") {
            throw refusal
        }
    }

    /// Opens `directory` once, without following a symbolic link at its name or above it, for a write's every step
    /// to go through (``SymbolicLinks/openDirectory(_:creatingWithMode:parents:)``: a link swapped in after the open
    /// is never written through, audit 15 F1), making it (mode 0700) when missing, and with `parents` the missing
    /// directories above it.
    /// - Throws: the link's refusal (``refuseLink(in:writing:)``), `cannotCreate(strerror)` when a missing
    ///   directory cannot be made, else `cannot write WHAT in DIRECTORY: REASON (set [sleep] report_dir to a
    ///   writable directory)`.
    private static func openDirectory(
        _ directory: String, writing what: String, parents: Bool, cannotCreate: (String) -> EarshotError
    ) throws(EarshotError) -> Int32 {
        let (descriptor, creating) = SymbolicLinks.openDirectory(directory, creatingWithMode: 0o700, parents: parents)
        if descriptor >= 0 { return descriptor }
        let code = errno
        try refuseLink(in: directory, writing: what)
        let reason = String(cString: strerror(code))
        if creating { throw cannotCreate(reason) }
        throw EarshotError(
            .cannotCreate, "cannot write \(what) in \(directory): \(reason) (set [sleep] report_dir to a writable directory)",
            cause: reason)
    }

    /// Writes the report files, creating the directory (and any missing parent) mode 0700 when missing, as the
    /// clips directory is: a night's snoring is for the household, not for every local user. The files are mode 0600
    /// whatever the umask, written without following a link at their names or in the directory, which is opened once
    /// for both (``openDirectory(_:writing:parents:cannotCreate:)``,
    /// ``OutputFile/writePrivate(_:in:name:path:mode:what:hint:readerPatience:)``). `paths` name files in `directory`.
    /// - Throws: `EarshotError(.cannotCreate)` naming the file and the fix.
    package static func write(json: JSONObject, svg: String, to paths: (json: String, svg: String), directory: String)
        throws(EarshotError)
    {
        let opened = try openDirectory(directory, writing: "the sleep report", parents: true) { reason in
            EarshotError(
                .cannotCreate,
                "cannot create the sleep report directory \(directory): \(reason) (set [sleep] report_dir to a writable directory)",
                cause: reason)
        }
        defer { close(opened) }
        for (path, text) in [(paths.json, JSONValue.object(json).encoded + "\n"), (paths.svg, svg)] {
            try OutputFile.writePrivate(
                Data(text.utf8), in: opened, name: String(path.split(separator: "/").last ?? ""), path: path,
                what: "the sleep report", hint: "check free space and that [sleep] report_dir is writable")
        }
    }
}
