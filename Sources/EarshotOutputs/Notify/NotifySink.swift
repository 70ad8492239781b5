import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotDetection

/// Event notifications over HTTP (`[notify]`): each onset (and, with ``NotifySettings/onEnd``, each end) POSTed to
/// every URL, as JSON or in ntfy's format (``NotificationMessage``).
///
/// Analysis never waits: ``deliver(_:)`` decides on the routing thread (a few dictionary look-ups under a lock) and
/// queues the message for each URL, bounded by ``NotifySettings/queueLimit`` (what does not fit is dropped for that
/// URL and counted). Each URL has its own libcurl handle and its own serial queue, so a slow one delays only itself;
/// smoke, CO and fire have a second one per URL (``Target/urgentChannel``), so an alarm never waits behind another
/// notification's unanswered attempt. A reload changes the URLs and settings in place (``prepare(_:)``,
/// ``apply(_:)``, NotifySink+Reload.swift), and each URL is checked between events (NotifySink+Reachability.swift).
///
/// Each URL's queue runs a small scheduler (``Target/jobs``) and never sleeps: it makes one attempt at a time of
/// the most pressing notification that is due, and a notification to be retried goes back with the time its retry
/// is due, so that whatever comes meanwhile is sent in between (audit 13 F4: one onset a URL kept refusing held
/// every later notification to it for 2 minutes, 15 behind a smoke alarm's). The most pressing: an urgent group's
/// (``NotificationMessage/urgentGroups``), then one not tried yet before a retry, then the first queued. What must
/// stay in order does: an event's onset, reminders and end (one group's, so an end waits for its onset's retries
/// and says whether it got through), the health messages, the test alerts.
///
/// One attempt waits at most ``NotifySettings/timeoutSeconds``; an attempt without an answer, or answered with
/// HTTP 408, 429 or 5xx, is retried up to ``NotifySettings/retries`` times after 1, 2, 4 ... s, an onset or reminder
/// for ``NotifySettings/urgentRetrySeconds`` (smoke, CO, fire) or ``NotifySettings/onsetRetrySeconds`` (any other
/// group) (other statuses below 200 or from 300 on are not retried: a wrong URL stays wrong). A notification given up is counted
/// (``Statistics/failed``); the first one of a URL is said as a `notify_failed` health event, and the URL's next
/// success as `notify_recovered`, so an outage is one pair of events however many notifications it costs (MQTT's
/// `Notifications failing` sensor follows them).
///
/// Repeats (``NotifySettings/repeatAfterSeconds``, R): an onset of a group less than R after that group's last
/// notification is not notified (counted in ``Statistics/suppressed``); while the event stays open, a reminder goes
/// out R after the last notification, and every R after. An end is notified (with `on_end`) when its event's onset
/// or a reminder was; once an end is notified, the group's next onset is notified whenever it comes (the last thing
/// the user was told is that the sound ended). `alarm_chirp` events are points: no reminders, no ends.
///
/// Stopping: no more reminders and no more retries (a notification waiting for its retry is given up); what is
/// queued and not tried yet is tried once, for at most ``NotifySettings/timeoutSeconds`` altogether and no longer
/// than the daemon's stop allows (``stop(deadline:)``); what is left is counted and logged. With an outbox path, the
/// onsets and reminders left are kept in it (``NotifyOutbox``) and sent at the next start, saying they come late
/// because earshotd restarted.
package final class NotifySink: OutputSink, @unchecked Sendable {
    /// Counters since start, for the status reply and the metrics.
    package struct Statistics: Sendable, Equatable {
        /// Notifications a URL accepted (HTTP 2xx), counted per URL.
        package var sent = 0
        /// Notifications given up for a URL (retries exhausted, a status not worth retrying, stopping, or the URL
        /// removed by a reload).
        package var failed = 0
        /// Notifications dropped because a URL's queue was full.
        package var dropped = 0
        /// Onsets not notified because their group was notified less than `repeat_after` before.
        package var suppressed = 0
        /// Reminders sent while events lasted (once per reminder, not per URL).
        package var reminders = 0
        /// Notifications waiting for their next attempt after one failed, now (counted per URL).
        package var retrying = 0

        package init() {}
    }

    package let name = "notify"
    /// ``deliver(_:)`` only queues messages for the URLs' queues.
    package let deliversWithoutWaiting = true
    /// `[notify]` now: at start, then as a reload set it (``prepare(_:)``, ``apply(_:)``).
    package var settings: NotifySettings { configured.withLock { $0.settings } }

    /// The settings and their URLs' targets; replaced together by ``apply(_:)``. Internal (not private) for the
    /// extensions in NotifySink+Reload.swift and NotifySink+Reachability.swift.
    struct Configured {
        var settings: NotifySettings
        var targets: [Target]
    }
    let configured: Mutex<Configured>
    /// The URLs' targets now.
    var targets: [Target] { configured.withLock { $0.targets } }

    let log: @Sendable (String, Int) -> Void
    private let reminderQueue = DispatchQueue(label: "earshot.notify.reminders")
    let state = Mutex(State())
    let stopping = Atomic<Bool>(false)
    /// Where the URLs' reachability checks run (``scheduleChecks()``), never on a URL's own queue: a check never
    /// delays a notification.
    let checkQueue = DispatchQueue(label: "earshot.notify.check")
    /// When the armed wake-up of ``checkQueue`` is due (uptime seconds); nil: none. Used on ``checkQueue`` only.
    var checkTimerDue: Double?
    /// Uptime (ns) after which a stopping sink sends nothing more.
    private let stopDeadline = Atomic<UInt64>(0)
    private let sent = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    let dropped = Atomic<Int>(0)
    private let suppressed = Atomic<Int>(0)
    private let reminders = Atomic<Int>(0)
    /// ``NotifyOutbox``'s file, or nil: none kept.
    private let outboxPath: String?
    /// Onsets and reminders left undelivered by the stop, for the outbox.
    private let kept = Mutex<[NotifyOutbox.Entry]>([])
    /// Jobs restored from the outbox still queued (per URL): at 0, the file is removed.
    let restoredLeft = Atomic<Int>(0)
    /// Notifications queued since start: with ``runID``, each one's id (``Job/id``).
    private let queuedCount = Atomic<Int>(0)
    /// This sink's start (milliseconds since 1970, base 36): ids of one run differ from another's.
    private let runID = String(Int(Date().timeIntervalSince1970 * 1000), radix: 36)

    struct OpenEvent {
        var generation: Int
        var object: JSONObject
        var since: Date
    }

    struct HeldEnd {
        var generation: Int
        var object: JSONObject
        var time: Date
        /// The event it ends, as it was open: a URL a reload adds meanwhile is told of its onset (``apply(_:)``).
        var onset: OpenEvent?
    }

    /// What the phone was last told about monitoring (``NotifySettings/health``).
    enum Monitoring {
        /// Nothing yet (no `capture_live` since start).
        case unknown
        case live
        /// Told that monitoring stopped working (`capture_unavailable`, `input_stalled`).
        case down
    }

    struct State {
        var reportHealth: (@Sendable (HealthEvent) -> Void)?
        /// Uptime seconds of each group's last notification (onset or reminder).
        var lastNotified: [String: Double] = [:]
        /// Each group's open event (its onset seen, its end not yet).
        var open: [String: OpenEvent] = [:]
        /// Groups whose open event was notified (its onset or a reminder): their end is notified with `on_end`.
        var notifiedOpen: Set<String> = []
        /// Ends of notified events caused by a reload or a gap in the audio, held for
        /// ``NotifySettings/continuationSeconds`` (with `on_end`): the group's next onset within it drops the end.
        var heldEnds: [String: HeldEnd] = [:]
        /// Each group's next reminder: the generation of the open event it is for and when it is due (uptime
        /// seconds). One per group: a later onset's reminder replaces an earlier one's, whose event is no longer
        /// open (one timer per group, not one per onset: a flood of suppressed onsets would otherwise hold a timer
        /// each for `repeat_after` seconds).
        var reminder: [String: (generation: Int, due: Double)] = [:]
        var generation = 0
        var stopped = false
        var monitoring = Monitoring.unknown
    }

    /// A notification waiting for one URL, on that URL's queue.
    struct Job {
        var message: NotificationMessage
        /// A test alert's: gets the first attempt's outcome.
        var receipt: TestAlertReceipt?
        /// Jobs of one lane are sent in the order they were queued: one group's events, the health messages, the
        /// test alerts.
        var lane: String
        /// An urgent group's (``NotificationMessage/urgentGroups``): before any other that is due.
        var urgent: Bool
        /// Seconds past `retries` it is tried (an onset's or reminder's retry window), from its first attempt.
        var retryWindow: Double
        /// When it may be tried (uptime seconds): when queued, then when its retry is due.
        var due: Double
        var attempts = 0
        /// When its first attempt began (uptime seconds).
        var started = 0.0
        var lastProblem = ""
        /// Whether the URL's outage was said while it was still being retried.
        var reported = false
        /// Restored from the outbox at start.
        var restored = false
        /// The same on every attempt and every URL (`X-Earshot-Notification-Id`; ntfy's `X-Sequence-ID`).
        var id = ""
        /// Attempts whose request was sent in full and never answered: the server may have them.
        var unanswered = 0
    }

    /// What one URL's channels share: how it is shown, whether it is failing, its reachability checks.
    final class URLStatus: @unchecked Sendable {
        /// The URL as messages show it (``NotifySettings/shownURL(_:index:count:)``): its position in the list may
        /// change at a reload.
        let shown: Mutex<String>
        /// The reachability checks' own handle, used on ``NotifySink/checkQueue`` only.
        let checker: HTTPPoster
        /// When this URL's next reachability check is due (uptime seconds). Used on ``NotifySink/checkQueue`` only.
        var nextCheck = 0.0
        let failing = Atomic<Bool>(false)
        /// Whether a notification to this URL failed, since its last success, in a way a reachability check cannot
        /// see: an HTTP status (401, 404, 503 ...) or a request sent in full and not answered. Such a failing URL is
        /// recovered only by a notification (or test alert) that gets through, not by a check's answer.
        let failedWithAnswer = Atomic<Bool>(false)
        /// Taken where ``failedWithAnswer`` is set by a notification's answer, and around each change of
        /// ``failing`` together with the `notify_failed` or `notify_recovered` that says it: a check whose `HEAD`
        /// was answered before a notification's POST was refused must not clear the failure that refusal makes,
        /// and the two channels' and the checks' health events of one URL reach the router in the order its state
        /// changed (trial 17 L5: a check's `notify_recovered` said after the lock could follow a POST's
        /// `notify_failed`, leaving the MQTT sensor `OFF` while failing). Never held while waiting for the network.
        let answerLock = Mutex(())
        /// Failures since the URL last succeeded (for the recovery line).
        let failuresInRow = Atomic<Int>(0)
        /// How long an attempt waits for the answer (seconds): ``NotifySettings/timeoutSeconds``, doubled after an
        /// attempt whose request was sent and not answered in time, up to ``NotifySettings/maximumAnswerWaitSeconds``;
        /// back to `timeoutSeconds` after an answer within it.
        let answerWait: Mutex<Double>

        init(shown: String, timeoutSeconds: Double) throws(EarshotError) {
            self.shown = Mutex(shown)
            answerWait = Mutex(timeoutSeconds)
            checker = try HTTPPoster()
        }
    }

    /// One channel of one URL: its queue, libcurl handle and jobs. Each URL has two (trial 15 L2): this one, and
    /// ``urgentChannel`` for the notifications of smoke, CO and fire (``NotificationMessage/urgentGroups``), so that
    /// an alarm never waits behind an attempt of another notification to the same URL that the server does not
    /// answer (up to ``NotifySettings/maximumAnswerWaitSeconds``): each request has a connection of its own, and
    /// the alarm's goes at once.
    final class Target: @unchecked Sendable {
        let url: String
        /// Shared by the URL's channels.
        let status: URLStatus
        var origin: String { status.shown.withLock { $0 } }
        let queue: DispatchQueue
        /// Used on ``queue`` only.
        let poster: HTTPPoster
        /// The channel of smoke, CO and fire notifications; nil in that channel itself.
        let urgentChannel: Target?
        /// This channel and ``urgentChannel``.
        var channels: [Target] { [self] + (urgentChannel.map { [$0] } ?? []) }
        let pending = Atomic<Int>(0)
        /// Jobs waiting for their next attempt after one failed (``Statistics/retrying``).
        let retrying = Atomic<Int>(0)
        /// Groups whose last onset or reminder this URL never accepted (given up): their end says so. Used on
        /// ``queue`` only.
        var missedOnsets: Set<String> = []
        /// The notifications waiting for this URL, in the order they were queued (a retry keeps its place). Used
        /// on ``queue`` only.
        var jobs: [Job] = []
        /// When the armed wake-up of ``queue`` is due (uptime seconds); nil: none is armed. Used on ``queue`` only.
        var timerDue: Double?
        /// ``URLStatus/answerWait``, shared by the URL's channels: a slow server is slow for both.
        var answerWait: Double {
            get { status.answerWait.withLock { $0 } }
            set { status.answerWait.withLock { $0 = newValue } }
        }

        /// The index in ``jobs`` of the one to try now: the first of its lane, due by `now` (any, with `allDue`),
        /// an urgent group's first, then one not tried yet, then the first queued; nil when none is.
        func nextJob(now: Double, allDue: Bool) -> Int? {
            var lanes = Set<String>()
            var best: (index: Int, rank: (Int, Int))?
            for (index, job) in jobs.enumerated() {
                guard lanes.insert(job.lane).inserted else { continue }
                // A millisecond of slack: a timer may fire a hair before its uptime deadline.
                guard allDue || job.due <= now + 0.001 else { continue }
                let rank = (job.urgent ? 0 : 1, job.attempts == 0 ? 0 : 1)
                if best == nil || rank < best!.rank { best = (index, rank) }
            }
            return best?.index
        }

        convenience init(url: String, index: Int, count: Int, timeoutSeconds: Double) throws(EarshotError) {
            let status = try URLStatus(shown: NotifySettings.shownURL(url, index: index, count: count), timeoutSeconds: timeoutSeconds)
            let urgent = try Target(url: url, status: status, label: "earshot.notify.\(index).urgent", urgentChannel: nil)
            try self.init(url: url, status: status, label: "earshot.notify.\(index)", urgentChannel: urgent)
        }

        private init(url: String, status: URLStatus, label: String, urgentChannel: Target?) throws(EarshotError) {
            self.url = url
            self.status = status
            self.urgentChannel = urgentChannel
            queue = DispatchQueue(label: label)
            poster = try HTTPPoster()
        }
    }

    /// - Parameters:
    ///   - settings: `[notify]`, with at least one URL.
    ///   - outboxPath: where the onsets and reminders the stop leaves undelivered are kept for the next start
    ///     (``NotifyOutbox``), read and sent by ``start(reportHealth:)``; nil keeps none.
    ///   - log: a journal line and its syslog priority (what stopping left unsent, an onset given up).
    /// - Throws: `EarshotError(.system)` when libcurl cannot make a handle.
    package init(
        settings: NotifySettings, outboxPath: String? = nil, log: @escaping @Sendable (String, Int) -> Void
    ) throws(EarshotError) {
        self.outboxPath = outboxPath
        self.log = log
        var targets: [Target] = []
        for (index, url) in settings.urls.enumerated() {
            targets.append(try Target(url: url, index: index, count: settings.urls.count, timeoutSeconds: settings.timeoutSeconds))
        }
        configured = Mutex(Configured(settings: settings, targets: targets))
    }

    /// The URLs (as messages show them) whose notifications are failing now: `notify_failed` was said for them and
    /// none has got through since.
    package var failingURLs: [String] {
        targets.filter { $0.status.failing.load(ordering: .relaxed) }.map(\.origin)
    }

    package var statistics: Statistics {
        var statistics = Statistics()
        statistics.sent = sent.load(ordering: .relaxed)
        statistics.failed = failed.load(ordering: .relaxed)
        statistics.dropped = dropped.load(ordering: .relaxed)
        statistics.suppressed = suppressed.load(ordering: .relaxed)
        statistics.reminders = reminders.load(ordering: .relaxed)
        statistics.retrying = targets.flatMap(\.channels).reduce(0) { $0 + $1.retrying.load(ordering: .relaxed) }
        return statistics
    }

    // MARK: OutputSink

    package func accepts(_ output: DaemonOutput) -> Bool {
        switch output {
        case .detection, .alarm:
            guard let group = output.group else { return false }
            return settings.groups.isEmpty || settings.groups.contains(group)
        case .health(let health):
            return settings.health && Self.healthStates.contains(health.state)
        case .testAlert:
            // Whatever groups says: it tests the way to the phone.
            return true
        case .mute(let change):
            // A life-safety group's only (MuteNotification.swift), when its events are notified.
            return NotificationMessage.notifiesMuteOf(change.group, groups: settings.groups)
        case .window, .clip, .sleepReport, .controls, .statistics:
            return false
        }
    }

    package func start(reportHealth: @escaping @Sendable (HealthEvent) -> Void) {
        state.withLock { $0.reportHealth = reportHealth }
        restoreOutbox()
        scheduleChecks()
    }

    /// Queues what the last stop kept (``NotifyOutbox``), each to the URLs that did not get it (to all when none of
    /// them is configured any more), saying it is late because earshotd restarted; too old ones are said in one log
    /// line, an unreadable file in another (renamed aside to `.corrupt`). The file is removed once every restored
    /// notification is done with (delivered or given up), not before: a stop meanwhile keeps them again.
    private func restoreOutbox() {
        guard let path = outboxPath else { return }
        let entries: [NotifyOutbox.Entry]
        switch NotifyOutbox.read(path) {
        case .none:
            return
        case .unreadable(let reason):
            let aside = path + ".corrupt"
            let moved = rename(path, aside) == 0
            log("notify: the notifications kept at the last stop in \(path) cannot be read (\(reason)); "
                + (moved ? "moved aside to \(aside)" : "left in place (\(String(cString: strerror(errno))))")
                + ", starting without them", 4)
            return
        case .entries(let read):
            entries = read
        }
        let now = Date()
        var stale: [String] = []
        var jobs: [(NotifyOutbox.Entry, [Target])] = []
        for entry in entries {
            let limit = NotifyOutbox.maximumAgeSeconds(group: entry.group, settings: settings)
            guard now.timeIntervalSince(entry.time) <= limit else {
                stale.append("\(entry.group) of \(EventJSON.timestamp(entry.time)), older than \(limit >= 7200 ? "\(Int((limit / 3600).rounded())) h" : Self.duration(limit))")
                continue
            }
            let matching = targets.filter { entry.urls.contains($0.url) }
            jobs.append((entry, matching.isEmpty ? targets : matching))
        }
        if !stale.isEmpty {
            log("notify: \(stale.count) notification\(stale.count == 1 ? "" : "s") kept at the last stop "
                + "\(stale.count == 1 ? "is" : "are") not sent: \(stale.joined(separator: "; "))", 4)
        }
        restoredLeft.store(jobs.reduce(0) { $0 + $1.1.count }, ordering: .relaxed)
        if jobs.isEmpty { _ = unlink(path) }
        for (entry, targets) in jobs {
            let message = NotificationMessage(
                object: entry.event, group: entry.group, kind: entry.kind, format: settings.format, node: settings.node,
                time: entry.time, keptOverRestart: true)
            enqueue(message, to: targets, restored: true)
        }
    }

    /// A restored job done with: the outbox file goes once all are (not while stopping: the stop writes it anew).
    func restoredDone() {
        guard restoredLeft.subtract(1, ordering: .relaxed).newValue == 0, !stopping.load(ordering: .relaxed),
              let outboxPath else { return }
        _ = unlink(outboxPath)
    }

    /// The health states a phone is told of (with ``NotifySettings/health``): the ones that mean monitoring stopped
    /// working, and `capture_live`, which says it works again. Not `input_silent`, `overrun` and the outputs' own
    /// states: they do not mean that nothing is heard, or say it often.
    package static let healthStates: Set<HealthEvent.State> = [
        .captureUnavailable, .inputStalled, .captureLive, .sleepReportUnavailable, .sleepReportSaved, .sleepSessionResumed,
    ]

    package func deliver(_ routed: RoutedOutput) {
        let isOnset: Bool
        switch routed.output {
        case .health(let health):
            deliverHealth(health, time: routed.time)
            return
        case .testAlert(let alert):
            guard !state.withLock({ $0.stopped }) else {
                for target in targets { alert.receipt?.report(.notSent("the daemon is stopping"), for: destination(target)) }
                return
            }
            enqueue(NotificationMessage.testAlert(node: settings.node, time: routed.time, format: settings.format),
                    receipt: alert.receipt)
            return
        case .mute(let change):
            guard !state.withLock({ $0.stopped }) else { return }
            enqueue(NotificationMessage.mute(change, node: settings.node, time: routed.time, format: settings.format))
            return
        case .detection(.onset): isOnset = true
        case .detection(.offset): isOnset = false
        case .alarm(let alarm): isOnset = alarm.kind == .onset
        default: return
        }
        guard let group = routed.output.group, let object = EventLines.object(for: routed) else { return }
        let isPoint = group == AlarmEvent.alarmChirp
        let now = Self.uptime()
        let repeatAfter = settings.repeatAfterSeconds
        enum Decision {
            case notify(reminderGeneration: Int?), suppress(reminderGeneration: Int?, after: Double)
            case carryOn(reminderGeneration: Int, after: Double?), end(Bool), hold(generation: Int), none
        }
        let continuation = settings.continuationSeconds
        func decide(_ state: inout State) -> Decision {
            guard !state.stopped else { return .none }
            if !isOnset {
                let opened = state.open.removeValue(forKey: group)
                let notifyEnd = state.notifiedOpen.remove(group) != nil && settings.onEnd
                guard notifyEnd else { return .end(false) }
                // A reload or a gap ended the event, not the sound: wait for the group's next onset.
                let reason = object["reason"]?.stringValue
                if continuation > 0, reason == DetectionEvent.EndReason.reload.rawValue
                    || reason == DetectionEvent.EndReason.streamGap.rawValue {
                    state.generation += 1
                    state.heldEnds[group] = HeldEnd(generation: state.generation, object: object, time: routed.time, onset: opened)
                    return .hold(generation: state.generation)
                }
                // The phone now says the sound ended: the next onset is news, whatever repeat_after says.
                state.lastNotified[group] = nil
                return .end(true)
            }
            var generation: Int?
            if !isPoint {
                state.generation += 1
                generation = state.generation
                state.open[group] = OpenEvent(generation: state.generation, object: object, since: routed.time)
            }
            if let generation, state.heldEnds.removeValue(forKey: group) != nil {
                // The same sound after a reload or a gap: the phone already knows; its end will be notified.
                state.notifiedOpen.insert(group)
                let after = state.lastNotified[group].map { max(0, $0 + repeatAfter - now) }
                return .carryOn(reminderGeneration: generation, after: after)
            }
            if repeatAfter > 0, let last = state.lastNotified[group], now - last < repeatAfter {
                return .suppress(reminderGeneration: generation, after: last + repeatAfter - now)
            }
            state.lastNotified[group] = now
            if !isPoint { state.notifiedOpen.insert(group) }
            return .notify(reminderGeneration: generation)
        }
        // Queued under the state's lock, which a reload's ``apply(_:)`` takes too: a URL the reload adds finds the
        // event open (and is told of its onset) or gets this onset or end from here, never both nor neither.
        let decision = state.withLock { state -> Decision in
            let decision = decide(&state)
            switch decision {
            case .end(true): enqueue(message(object, group: group, kind: .end, time: routed.time))
            case .notify: enqueue(message(object, group: group, kind: .onset, time: routed.time))
            default: break
            }
            return decision
        }
        switch decision {
        case .none, .end:
            return
        case .hold(let generation):
            reminderQueue.asyncAfter(deadline: .now() + continuation) { [weak self] in
                self?.releaseHeldEnd(group: group, generation: generation)
            }
        case .carryOn(let generation, let after):
            if repeatAfter > 0 { scheduleReminder(group: group, generation: generation, after: after ?? repeatAfter) }
        case .suppress(let generation, let after):
            suppressed.wrappingAdd(1, ordering: .relaxed)
            if let generation, repeatAfter > 0 { scheduleReminder(group: group, generation: generation, after: after) }
        case .notify(let generation):
            if let generation, repeatAfter > 0 { scheduleReminder(group: group, generation: generation, after: repeatAfter) }
        }
    }

    package var reachesOverNetwork: Bool { true }

    /// Stops with ``NotifySettings/timeoutSeconds`` for what is queued.
    package func stop() {
        stop(deadline: .now() + .milliseconds(Int(settings.timeoutSeconds * 1000)))
    }

    /// Sends what is held and the `stopping` message, then gives what is queued one attempt each until `deadline`
    /// or ``NotifySettings/timeoutSeconds`` from now, whichever comes first (each attempt's libcurl timeout ends
    /// there too), and returns by then: an attempt already waiting for a server that does not answer is left
    /// running. What was not delivered is counted as failed and said in one log line.
    package func stop(deadline: DispatchTime) {
        let (held, wasLive) = state.withLock { state -> ([(String, HeldEnd)], Bool) in
            state.stopped = true
            defer { state.heldEnds = [:] }
            return (state.heldEnds.sorted { $0.value.generation < $1.value.generation }.map { ($0.key, $0.value) },
                    state.monitoring == .live)
        }
        // Held ends go out now, as what they are (the sound was not heard again before stopping).
        for (group, end) in held {
            enqueue(message(end.object, group: group, kind: .end, time: end.time))
        }
        // The daemon is stopping (a reload does not stop the sinks): nothing is heard until it starts again. Not
        // said when the phone was told already that nothing is heard, or was never told that monitoring began.
        if settings.health, wasLive {
            enqueue(NotificationMessage.health(
                state: "stopping", monitoring: false, message: nil, node: settings.node, time: Date(), format: settings.format))
        }
        let end = min(
            deadline.uptimeNanoseconds, DispatchTime.now().uptimeNanoseconds + UInt64(settings.timeoutSeconds * 1e9))
        stopDeadline.store(end, ordering: .relaxed)
        // Read first: a retry's wake-up may give its notification up as soon as `stopping` is set.
        let failedBefore = failed.load(ordering: .relaxed)
        stopping.store(true, ordering: .relaxed)
        reminderQueue.sync {}
        let drained = DispatchGroup()
        for target in targets.flatMap(\.channels) {
            drained.enter()
            target.queue.async { [self] in
                // Stopping: what is queued gets its last turn here (one attempt, or given up when it was waiting
                // for a retry); an attempt in progress finished before this block.
                pump(target)
                drained.leave()
            }
        }
        let finished = drained.wait(timeout: DispatchTime(uptimeNanoseconds: end)) == .success
        // Messages still queued or in an attempt that has not returned: not delivered either.
        let waiting = finished ? 0 : targets.flatMap(\.channels).reduce(0) { $0 + $1.pending.load(ordering: .relaxed) }
        let left = failed.load(ordering: .relaxed) - failedBefore + waiting
        if waiting > 0 { failed.wrappingAdd(waiting, ordering: .relaxed) }
        if left > 0 {
            let note = waiting > 0 ? " (\(waiting) still waiting for an answer when the stop's time was up)" : ""
            log("notify: \(left) notification\(left == 1 ? " was" : "s were") not delivered before stopping\(note)", 4)
        }
        keepForNextStart()
    }

    /// Writes the onsets and reminders the stop left undelivered to the outbox (one per URL and group, the first),
    /// merged per event: one entry for the URLs that all missed the same notification.
    private func keepForNextStart() {
        guard let outboxPath else { return }
        let left = kept.withLock { kept in defer { kept = [] }; return kept }
        guard !left.isEmpty else { return }
        var entries: [NotifyOutbox.Entry] = []
        var seen = Set<String>()
        for entry in left {
            guard let url = entry.urls.first, seen.insert(url + "\u{0}" + entry.group).inserted else { continue }
            if let index = entries.firstIndex(where: { $0.group == entry.group && $0.kind == entry.kind && $0.time == entry.time }) {
                entries[index].urls.append(url)
            } else {
                entries.append(entry)
            }
        }
        let groups = entries.map(\.group).reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } }
        do throws(EarshotError) {
            try OutputFile.writePrivate(NotifyOutbox.encoded(entries), to: outboxPath, what: "notification outbox",
                                        hint: "check the state directory and free space")
            log("notify: kept \(entries.count) undelivered notification\(entries.count == 1 ? "" : "s") "
                + "(\(groups.joined(separator: ", "))) in \(outboxPath), to send when earshotd starts again", 4)
        } catch {
            log("notify: cannot keep \(entries.count) undelivered notification\(entries.count == 1 ? "" : "s") "
                + "for the next start: \(error.message)", 3)
        }
    }

    // MARK: Health, reminders and sending

    /// A notification of `kind` about `object` of `group`, in ``NotifySettings/format``, from ``NotifySettings/node``.
    private func message(_ object: JSONObject, group: String, kind: NotificationMessage.Kind, time: Date) -> NotificationMessage {
        NotificationMessage(object: object, group: group, kind: kind, format: settings.format, node: settings.node, time: time)
    }

    /// Tells the phone once when monitoring stops working (`capture_unavailable`, `input_stalled`) and once when it
    /// works again (`capture_live` after them); the first `capture_live` since start says that monitoring began. A
    /// sleep report that cannot be saved (`sleep_report_unavailable`: the night's report is at risk), the same report
    /// saved on a later try (`sleep_report_saved`) and a session resumed after a restart (`sleep_session_resumed`)
    /// are told as they come: the daemon says each once.
    private func deliverHealth(_ health: HealthEvent, time: Date) {
        guard settings.health else { return }
        let notification = state.withLock { state -> NotificationMessage? in
            guard !state.stopped else { return nil }
            switch health.state {
            case .captureUnavailable, .inputStalled:
                guard state.monitoring != .down else { return nil }
                state.monitoring = .down
                return NotificationMessage.health(
                    state: health.state.rawValue, monitoring: false, message: health.message, node: settings.node,
                    time: time, format: settings.format)
            case .sleepReportUnavailable, .sleepReportSaved, .sleepSessionResumed:
                // Listening goes on: monitoring is as it was.
                return NotificationMessage.health(
                    state: health.state.rawValue, monitoring: state.monitoring != .down, message: health.message,
                    node: settings.node, time: time, format: settings.format)
            case .captureLive:
                let before = state.monitoring
                guard before != .live else { return nil }
                state.monitoring = .live
                return NotificationMessage.health(
                    state: health.state.rawValue, monitoring: true, message: health.message, started: before == .unknown,
                    node: settings.node, time: time, format: settings.format)
            default:
                return nil
            }
        }
        if let notification { enqueue(notification) }
    }

    /// A held end whose group had no onset within ``NotifySettings/continuationSeconds``: notified now.
    private func releaseHeldEnd(group: String, generation: Int) {
        state.withLock { state in
            guard !state.stopped, let held = state.heldEnds[group], held.generation == generation else { return }
            state.heldEnds[group] = nil
            state.lastNotified[group] = nil
            // Under the lock, as ``deliver(_:)``'s ends.
            enqueue(message(held.object, group: group, kind: .end, time: held.time))
        }
    }

    /// Sets the group's next reminder (replacing the one before, see ``State/reminder``); a timer is armed only
    /// when none is armed for the group for an earlier moment.
    private func scheduleReminder(group: String, generation: Int, after seconds: Double) {
        let due = Self.uptime() + max(0, seconds)
        let arm = state.withLock { state -> Bool in
            let armed = state.reminder[group]
            state.reminder[group] = (generation, due)
            return armed.map { due < $0.due } ?? true
        }
        if arm { armReminder(group: group, at: due) }
    }

    private func armReminder(group: String, at due: Double) {
        reminderQueue.asyncAfter(deadline: .now() + max(0, due - Self.uptime())) { [weak self] in
            self?.reminderTimerFired(group: group)
        }
    }

    /// The group's reminder timer: the reminder due now is sent; one due later (set since the timer was armed)
    /// gets the timer again.
    private func reminderTimerFired(group: String) {
        enum Next { case remind(Int), rearm(Double), none }
        let now = Self.uptime()
        let next = state.withLock { state -> Next in
            guard let reminder = state.reminder[group] else { return .none }
            // A millisecond of slack: the timer may fire a hair before its uptime deadline.
            if reminder.due > now + 0.001 { return .rearm(reminder.due) }
            state.reminder[group] = nil
            return .remind(reminder.generation)
        }
        switch next {
        case .remind(let generation): remind(group: group, generation: generation)
        case .rearm(let due): armReminder(group: group, at: due)
        case .none: break
        }
    }

    private func remind(group: String, generation: Int) {
        let now = Self.uptime()
        let open = state.withLock { state -> OpenEvent? in
            guard !state.stopped, let open = state.open[group], open.generation == generation else { return nil }
            state.lastNotified[group] = now
            state.notifiedOpen.insert(group)
            return open
        }
        guard let open else { return }
        reminders.wrappingAdd(1, ordering: .relaxed)
        let time = Date()
        var object = open.object
        object["time"] = .string(EventJSON.timestamp(time))
        object["reminder"] = .bool(true)
        object["since"] = .string(EventJSON.timestamp(open.since))
        object["ongoing_seconds"] = .int(Int(time.timeIntervalSince(open.since).rounded()))
        enqueue(message(object, group: group, kind: .reminder, time: time))
        scheduleReminder(group: group, generation: generation, after: settings.repeatAfterSeconds)
    }

    /// Queues `message` for every URL (or `only` those); `receipt` (a test alert's) gets each URL's first attempt. A
    /// reminder takes the place of the group's reminder still waiting for the URL (a server away for long gets the
    /// latest, not a burst of stale ones: trial 15 M6).
    ///
    /// The targets are picked and their queues handed the job under ``configured``'s lock: a reload that removes a
    /// URL (``apply(_:)``) hands its queue the block that takes its jobs after every job queued for it.
    func enqueue(
        _ message: NotificationMessage, receipt: TestAlertReceipt? = nil, to only: [Target]? = nil, restored: Bool = false,
        id given: String? = nil
    ) {
        let full = configured.withLock { configured in
            queueJobs(message, receipt: receipt, to: only ?? configured.targets, settings: configured.settings,
                      restored: restored, id: given)
        }
        for (target, waiting) in full {
            dropped.wrappingAdd(1, ordering: .relaxed)
            receipt?.report(.notSent("its queue is full (\(waiting) notifications waiting)"), for: destination(target))
        }
    }

    /// ``enqueue(_:receipt:to:restored:id:)``'s work under ``configured``'s lock (`settings` are the ones it holds):
    /// returns the channels whose queue was full, with how many were waiting there.
    func queueJobs(
        _ message: NotificationMessage, receipt: TestAlertReceipt?, to targets: [Target], settings: NotifySettings,
        restored: Bool, id given: String?
    ) -> [(Target, Int)] {
        let now = Self.uptime()
        let isEvent = message.kind == .onset || message.kind == .reminder || message.kind == .end
        let lane = isEvent ? "group \(message.group)" : message.kind == .health ? "health" : message.kind == .mute ? "mute" : "test"
        let urgent = isEvent && NotificationMessage.urgentGroups.contains(message.group)
        // How long past `retries` it is tried: an alert's onset or reminder, while it is still news.
        let retryWindow = message.kind == .onset || message.kind == .reminder
            ? urgent ? settings.urgentRetrySeconds : settings.onsetRetrySeconds
            : 0
        let id = given ?? "\(runID)-\(queuedCount.add(1, ordering: .relaxed).newValue)"
        var full: [(Target, Int)] = []
        for url in targets {
            // Smoke, CO and fire in their own channel (``Target/urgentChannel``).
            let target = urgent ? url.urgentChannel ?? url : url
            let waiting = target.pending.load(ordering: .relaxed)
            if waiting >= settings.queueLimit {
                full.append((target, waiting))
                continue
            }
            target.pending.wrappingAdd(1, ordering: .relaxed)
            queue(message, receipt: receipt, lane: lane, urgent: urgent, retryWindow: retryWindow, due: now, id: id,
                  restored: restored, on: target)
        }
        return full
    }

    /// On `target`'s queue: `message` as a new job, or as the newer reminder in place of the lane's one waiting.
    private func queue(
        _ message: NotificationMessage, receipt: TestAlertReceipt?, lane: String, urgent: Bool, retryWindow: Double,
        due now: Double, id: String, restored: Bool, on target: Target
    ) {
        target.queue.async { [self] in
            if message.kind == .reminder,
               let index = target.jobs.firstIndex(where: { $0.lane == lane && $0.message.kind == .reminder && !$0.restored }) {
                // The same event's newer reminder: the older one is not sent (neither sent nor failed).
                target.jobs[index].message = message
                target.jobs[index].attempts = 0
                target.jobs[index].unanswered = 0
                target.jobs[index].id = id
                target.jobs[index].due = min(target.jobs[index].due, now)
                target.pending.wrappingSubtract(1, ordering: .relaxed)
            } else {
                var job = Job(
                    message: message, receipt: receipt, lane: lane, urgent: urgent, retryWindow: retryWindow, due: now, id: id)
                job.restored = restored
                target.jobs.append(job)
            }
            pump(target)
        }
    }

    /// The URLs a test alert goes to, as its receipt names them (``NotifySettings/shownURL(_:index:count:)``).
    package var testAlertDestinations: [TestAlertReceipt.Destination] { targets.map(destination) }

    func destination(_ target: Target) -> TestAlertReceipt.Destination {
        TestAlertReceipt.Destination(output: name, target: target.origin)
    }

    /// On `target`'s queue: one attempt of the notification to try now (``Target/nextJob(now:allDue:)``), then the
    /// next one in a block of its own, so that notifications queued during the attempt are in the running; when
    /// none is due, a wake-up at the earliest due time. Never waits for a retry. Stopping: every notification left
    /// gets its turn in this block (no retries), so that the stop's block after it finds none.
    private func pump(_ target: Target) {
        while true {
            let stopping = self.stopping.load(ordering: .relaxed)
            guard let index = target.nextJob(now: Self.uptime(), allDue: stopping) else {
                if !stopping, let due = target.jobs.map(\.due).min() { wake(target, at: due) }
                return
            }
            var job = target.jobs[index]
            if let due = attempt(&job, on: target) {
                job.due = due
                target.jobs[index] = job
            } else {
                target.jobs.remove(at: index)
                target.pending.wrappingSubtract(1, ordering: .relaxed)
                if job.restored { restoredDone() }
            }
            target.retrying.store(target.jobs.count { $0.attempts > 0 }, ordering: .relaxed)
            if !stopping {
                target.queue.async { [self] in pump(target) }
                return
            }
        }
    }

    /// Arms a wake-up of `target`'s queue at `due` (uptime seconds), unless one is armed for then or earlier.
    private func wake(_ target: Target, at due: Double) {
        if let armed = target.timerDue, armed <= due { return }
        target.timerDue = due
        target.queue.asyncAfter(deadline: .now() + max(0, due - Self.uptime())) { [weak self] in
            if target.timerDue == due { target.timerDue = nil }
            self?.pump(target)
        }
    }

    /// One attempt of `job` on `target` (on its queue), counting and reporting the outcome; returns when to try it
    /// again (uptime seconds), or nil when it is done: delivered, given up, or stopping.
    ///
    /// A retry waits 1, 2, 4 ... s (``NotifySettings/retryDelay(beforeRetry:)``), or what the server's
    /// `Retry-After` asks when longer (at most ``NotifySettings/maximumRetryAfterSeconds``). An onset or reminder
    /// is retried for ``NotifySettings/urgentRetrySeconds`` (an urgent group's) or
    /// ``NotifySettings/onsetRetrySeconds`` (any other's), with waits of at most
    /// ``NotifySettings/urgentMaximumRetryDelaySeconds`` unless `Retry-After` says more, instead of `retries`
    /// times; the outage is reported once its `retries` are used up, as for any other. An end whose onset this URL
    /// never accepted says so (``NotificationMessage/missedOnset()``): the phone never reads "ended" about an
    /// alarm it was not told of. `receipt` (a test alert's) gets the first attempt's outcome. Stopping: a job
    /// waiting for its retry is given up; one not tried yet gets one attempt within the stop's time.
    private func attempt(_ job: inout Job, on target: Target) -> Double? {
        if job.attempts == 0, job.message.kind == .end, target.missedOnsets.remove(job.message.group) != nil {
            job.message = job.message.missedOnset()
        }
        if job.attempts == 0, job.message.kind == .reminder, target.missedOnsets.contains(job.message.group) {
            // The first the URL would hear of this alarm: it says since when it sounds, not "still".
            job.message = job.message.missedOnset()
        }
        let message = job.message
        let receipt = job.receipt
        var timeout = target.answerWait
        // Whether this attempt waits less than it would because the stop's time ends first.
        var shortenedByStop = false
        if stopping.load(ordering: .relaxed) {
            guard job.attempts == 0 else {
                keep(message, for: target)
                giveUp(message, on: target, problem: job.lastProblem, attempts: job.attempts, unanswered: job.unanswered,
                       retryable: true, reported: job.reported)
                return nil
            }
            let left = Double(Int64(stopDeadline.load(ordering: .relaxed)) - Int64(DispatchTime.now().uptimeNanoseconds)) / 1e9
            guard left > 0.05 else {
                receipt?.report(.notSent("the daemon is stopping"), for: destination(target))
                keep(message, for: target)
                // Counted, and logged by stop(); not an outage of the URL.
                giveUp(message, on: target, problem: job.lastProblem, attempts: 0, retryable: true, reported: true)
                return nil
            }
            shortenedByStop = left < timeout
            timeout = min(timeout, left)
        }
        if job.attempts == 0 { job.started = Self.uptime() }
        job.attempts += 1
        let attempt = job.attempts
        // Rendered for this attempt: one sent late says so (on its last line). The id is the same on every attempt
        // and every URL, so that a receiver can tell a copy it has (ntfy from 2.16 replaces the notification with
        // the same sequence ID instead of showing a new one; older servers ignore the header).
        let attemptMessage = message.sending(at: Date())
        var headers = attemptMessage.headers + ["X-Earshot-Notification-Id: \(job.id)"]
        if settings.format == .ntfy { headers.append("X-Sequence-ID: \(job.id)") }
        let began = Self.uptime()
        let outcome = target.poster.post(url: target.url, headers: headers, body: attemptMessage.body, timeoutSeconds: timeout)
        let took = Self.uptime() - began
        // An answer in time: the server is not slow (any more).
        if case .status = outcome, took <= settings.timeoutSeconds { target.answerWait = settings.timeoutSeconds }
        let retryable: Bool
        var retryAfter: Double?
        // Cut off by the stop's deadline, not failed (trial 16 L5): the stop's own line counts it, and the URL is
        // not said to be failing.
        var cutOff = false
        switch outcome {
        case .status(let status, _) where (200..<300).contains(status):
            if attempt == 1 { receipt?.report(.delivered(httpStatus: status), for: destination(target)) }
            sent.wrappingAdd(1, ordering: .relaxed)
            if message.kind == .onset || message.kind == .reminder { target.missedOnsets.remove(message.group) }
            target.status.answerLock.withLock { _ in
                target.status.failedWithAnswer.store(false, ordering: .relaxed)
                let failures = target.status.failuresInRow.exchange(0, ordering: .relaxed)
                guard target.status.failing.exchange(false, ordering: .relaxed) else { return }
                let before = failures == 0
                    ? "none was lost" : "\(failures) failed before"
                reportHealth(HealthEvent(
                    state: .notifyRecovered,
                    message: "notifications to \(target.origin) are accepted again (\(before))",
                    details: ["url": .string(target.origin), "failed": .int(failures)]))
            }
            return nil
        case .status(let status, let retryAfterSeconds):
            job.lastProblem = "HTTP \(status)"
            target.status.answerLock.withLock { _ in target.status.failedWithAnswer.store(true, ordering: .relaxed) }
            retryable = status == 408 || status == 429 || status >= 500
            retryAfter = retryAfterSeconds
        case .failed(let text, let requestSent):
            job.lastProblem = text
            retryable = true
            cutOff = shortenedByStop && took >= timeout - 0.05
            if requestSent, !cutOff {
                target.status.answerLock.withLock { _ in target.status.failedWithAnswer.store(true, ordering: .relaxed) }
                job.unanswered += 1
                // Waited its whole time for the answer: a server slower than that would get a copy per attempt
                // (trial 15 M1: 4 of one smoke alarm from a server answering after 12 s), so wait longer next time.
                if took >= timeout - 0.05 {
                    let longest = max(settings.timeoutSeconds, settings.maximumAnswerWaitSeconds)
                    target.status.answerWait.withLock { $0 = min(longest, $0 * 2) }
                }
            }
        }
        let now = Self.uptime()
        let retryWindow = job.retryWindow
        let windowLeft = retryWindow > 0 ? job.started + retryWindow - now : 0
        if attempt == 1, let receipt {
            // A test alert keeps `retries` (no retry window): that many more, unless not worth it or stopping.
            var status: Int?
            if case .status(let code, _) = outcome { status = code }
            let retriesLeft = retryable && !stopping.load(ordering: .relaxed) ? settings.retries : 0
            receipt.report(.failed(problem: job.lastProblem, httpStatus: status, retriesLeft: retriesLeft), for: destination(target))
        }
        if retryable, !stopping.load(ordering: .relaxed), attempt <= settings.retries || windowLeft > 0 {
            var wait = settings.retryDelay(beforeRetry: attempt)
            if retryWindow > 0 { wait = min(wait, settings.urgentMaximumRetryDelaySeconds) }
            if let retryAfter { wait = max(wait, min(retryAfter, settings.maximumRetryAfterSeconds)) }
            if attempt > settings.retries { wait = min(wait, max(0, windowLeft)) }
            // An onset still being retried: the outage is said now, not when its window closes; a smoke, CO or fire
            // alarm's at its first failed attempt (trial 15 M3: with Retry-After, retries took minutes and nothing
            // showed that the alarm was undelivered).
            if retryWindow > 0, !job.reported, attempt == settings.retries + 1 || job.urgent {
                job.reported = true
                reportFailing(target, problem: job.lastProblem, attempts: attempt, unanswered: job.unanswered, retryable: true,
                              note: "; this \(message.group) notification is tried again for up to \(Self.duration(retryWindow))")
            }
            return now + wait
        }
        if stopping.load(ordering: .relaxed), retryable {
            keep(message, for: target)
        } else if retryWindow > 0, attempt > settings.retries {
            // Its retry window closed (trial 15 M6: a smoke alarm's onset given up after 15 minutes without a word).
            log("notify: gave up the \(message.group) \(message.kind == .reminder ? "reminder" : "onset") of "
                + "\(NotificationMessage.clock(message.time)) for \(target.origin) after trying for "
                + "\(Self.duration(retryWindow)) (\(job.lastProblem)); the next notification of it that gets through "
                + "says since when it sounds", 4)
        }
        giveUp(message, on: target, problem: job.lastProblem, attempts: attempt, unanswered: job.unanswered,
               retryable: retryable, reported: job.reported || cutOff)
        return nil
    }

    /// Keeps an onset or reminder the stop leaves undelivered to `target` for the outbox.
    private func keep(_ message: NotificationMessage, for target: Target) {
        guard outboxPath != nil, message.kind == .onset || message.kind == .reminder,
              message.group != AlarmEvent.alarmChirp else { return }
        let entry = NotifyOutbox.Entry(
            group: message.group, kind: message.kind, time: message.time, urls: [target.url], event: message.object)
        kept.withLock { $0.append(entry) }
    }

    /// Counts `message` as failed on `target`, remembers an undelivered onset, and reports the outage once.
    private func giveUp(_ message: NotificationMessage, on target: Target, problem: String, attempts: Int,
                        unanswered: Int = 0, retryable: Bool, reported: Bool) {
        failed.wrappingAdd(1, ordering: .relaxed)
        if message.kind == .onset || message.kind == .reminder, message.group != AlarmEvent.alarmChirp {
            target.missedOnsets.insert(message.group)
        }
        target.status.failuresInRow.wrappingAdd(1, ordering: .relaxed)
        guard !reported, attempts > 0 else { return }
        reportFailing(target, problem: problem, attempts: attempts, unanswered: unanswered, retryable: retryable, note: "")
    }

    /// The `notify_failed` health event, once per outage of `target` (until it accepts one again). While stopping
    /// (a notification given up by the stop, or failing in its last attempt) it ends `; earshotd is stopping`: detection
    /// does not go on.
    func reportFailing(
        _ target: Target, problem: String, attempts: Int, unanswered: Int, retryable: Bool, note: String
    ) {
        let advice = retryable ? "" : " (check [notify] url)"
        let then = stopping.load(ordering: .relaxed)
            ? "earshotd is stopping" : "detection goes on, and further failures are counted until one gets through"
        target.status.answerLock.withLock { _ in
            guard !target.status.failing.exchange(true, ordering: .relaxed) else { return }
            reportHealth(HealthEvent(
                state: .notifyFailed,
                message: "notifications to \(target.origin) are failing: \(problem) \(Self.attempts(attempts, unanswered: unanswered))\(advice)\(note); \(then)",
                details: ["url": .string(target.origin), "failed": .int(target.status.failuresInRow.load(ordering: .relaxed))]))
        }
    }

    /// `after 4 attempts`, and how many of them the server may have received (sent in full, not answered): `after
    /// 1 attempt, sent and not answered (the server may have received it)`, `after 4 attempts, 3 of them sent and
    /// not answered (the server may have received them)`, `after 4 attempts, all sent and not answered (...)`.
    static func attempts(_ attempts: Int, unanswered: Int) -> String {
        let tried = "after \(attempts) attempt\(attempts == 1 ? "" : "s")"
        guard unanswered > 0 else { return tried }
        let them = unanswered == 1 ? "it" : "them"
        let which = attempts == 1 ? "" : unanswered == attempts ? "all " : "\(unanswered) of them "
        return "\(tried), \(which)sent and not answered (the server may have received \(them))"
    }

    /// `15 min`, `90 s`.
    private static func duration(_ seconds: Double) -> String {
        seconds >= 120 ? "\(Int((seconds / 60).rounded())) min" : "\(Int(seconds.rounded())) s"
    }

    private static func uptime() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
}

/// The headers and body of one notification.
package struct NotificationMessage: Sendable, Equatable {
    package enum Kind: Sendable, Equatable {
        /// An event's onset, end, or a reminder while it lasts.
        case onset, end, reminder
        /// Monitoring stopped working or works again (``NotificationMessage/health(state:message:started:node:time:format:)``).
        case health
        /// A test alert (``NotificationMessage/testAlert(node:time:format:)``).
        case test
        /// A life-safety group muted or unmuted (``NotificationMessage/mute(_:node:time:format:)``).
        case mute
    }

    /// `Name: value` lines.
    package var headers: [String]
    package var body: [UInt8]
    package let kind: Kind
    /// The event's group; empty for ``Kind/health`` and ``Kind/test``.
    package let group: String
    /// The event's JSON (for a reminder: with `reminder`, `since`, `ongoing_seconds`).
    package let object: JSONObject
    private let format: NotifySettings.Format
    private let node: String
    /// When the event (or reminder, or health change) happened.
    package let time: Date
    private let onsetMissed: Bool
    /// Kept over a restart (``NotifyOutbox``).
    private let keptOverRestart: Bool

    /// Groups whose notifications are urgent (ntfy priority 5).
    package static let urgentGroups: Set<String> = ["smoke_alarm", "co_alarm", "fire_alarm"]

    /// A message sent more than this many seconds after ``time`` says how late it is (ntfy).
    package static let lateAfterSeconds: Double = 10

    /// - Parameters:
    ///   - object: the event's JSON as the socket carries it (for a reminder: the onset's, with `reminder`,
    ///     `since` and `ongoing_seconds`; for ``Kind/health``: `type`, `state`, `monitoring`, `message`, `time`).
    ///   - format: `json`: that object with `"node"` added, `Content-Type: application/json`. `ntfy`: a first line
    ///     that says in plain words what was heard, where and when (``NotifySettings/node``, local time), and a
    ///     second line with the technical evidence, when there is some:
    ///     `Smoke alarm sounding in kitchen at 20:19:26` / `T3 pattern at 3057 Hz (confidence 1.0)`, with
    ///     `Title: kitchen: Smoke alarm`, `Priority: 5` and `Tags: rotating_light,smoke_alarm`; an end is `Baby cry
    ///     in kitchen ended at 20:19:40, after 7.2 s` (`Title: kitchen: Baby cry ended`, priority 2, tag
    ///     `white_check_mark`), a reminder `Smoke alarm still sounding in kitchen at 20:24:26, 5 min after it
    ///     started` (`Title: kitchen: Smoke alarm still heard`). An end says what ended the event (its `reason`):
    ///     the sound (`hold_elapsed`, `pattern_stopped`), a reload the group did not resume after (`reload`: `...,
    ///     after 13.8 s: not heard again after a configuration reload`), the audio capture (`stream_gap`: `Smoke
    ///     alarm heard in kitchen for 13.9 s, then the audio capture was lost at 20:19:40`, `Title: kitchen: Smoke
    ///     alarm: capture lost`, priority 4, tag `warning`), or monitoring (`stream_end`: `... then monitoring
    ///     stopped at 20:19:40 (earshotd stopped or its input ended)`, `Title: kitchen: Smoke alarm: monitoring
    ///     stopped`, priority 4, tag `warning`): not an all-clear.
    ///   - node: the daemon's name (``NotifySettings/node``); empty leaves the place out.
    ///   - time: when the event (or reminder, or health change) happened.
    ///   - onsetMissed: for an end, the URL never accepted the event's onset (``missedOnset()``).
    ///   - sentAt: when this attempt is sent; more than ``lateAfterSeconds`` after `time` (or kept over a restart),
    ///     the ntfy message ends with a line `(delivered 25 s late)` (``sending(at:)``); its title and first line
    ///     stay as they were, so the attempts of one notification read alike.
    ///   - keptOverRestart: kept in the outbox over a restart (``NotifyOutbox``): the ntfy first line ends with
    ///     ` (heard before earshotd restarted)`, and the last line says how late it is whatever the delay; JSON adds
    ///     `"kept_over_restart":true`.
    package init(
        object: JSONObject, group: String, kind: Kind, format: NotifySettings.Format, node: String, time: Date,
        onsetMissed: Bool = false, sentAt: Date? = nil, keptOverRestart: Bool = false
    ) {
        self.keptOverRestart = keptOverRestart
        self.kind = kind
        self.group = group
        self.object = object
        self.format = format
        self.node = node
        self.time = time
        self.onsetMissed = onsetMissed
        switch format {
        case .json:
            headers = ["Content-Type: application/json"]
            var object = object
            if onsetMissed { object["onset_delivered"] = .bool(false) }
            if keptOverRestart { object["kept_over_restart"] = .bool(true) }
            if !node.isEmpty { object["node"] = .string(node) }
            body = Array(object.encoded.utf8)
        case .ntfy:
            let place = node.isEmpty ? "" : " in \(node)"
            let clock = Self.clock(time)
            let addedAt = kind == .onset ? object[Self.urlAddedKey]?.stringValue.flatMap(Self.utcDate) : nil
            var title: String
            var line: String
            var details: String?
            var priority: Int
            var tags: [String]
            if kind == .mute {
                (title, line, details, priority, tags) = Self.muteText(object, node: node, time: time)
            } else if kind == .test {
                title = node.isEmpty ? "Test alert" : "\(node): test alert"
                line = Self.testAlertText(node: node)
                priority = 3
                tags = ["bell", TestAlert.type]
            } else if kind == .health {
                let monitoring = object["monitoring"]?.boolValue ?? false
                let message = object["message"]?.stringValue
                var sleepPriority: (Int, String)?
                switch object["state"]?.stringValue {
                case HealthEvent.State.sleepReportUnavailable.rawValue?:
                    title = "sleep report not saved"
                    line = "Sleep report not saved\(place) at \(clock)"
                    details = message
                    sleepPriority = (4, "warning")
                case HealthEvent.State.sleepReportSaved.rawValue?:
                    title = "sleep report saved"
                    line = "Sleep report saved\(place) at \(clock), after it could not be written"
                    details = message
                    sleepPriority = (3, "white_check_mark")
                case HealthEvent.State.sleepSessionResumed.rawValue?:
                    title = "sleep session resumed"
                    line = "Sleep session resumed\(place) at \(clock) after earshotd restarted"
                    details = message
                    sleepPriority = (3, "zzz")
                case HealthEvent.State.captureUnavailable.rawValue?:
                    title = "not listening"
                    line = "Not listening\(place) since \(clock): the audio capture is unavailable"
                    details = message
                case HealthEvent.State.inputStalled.rawValue?:
                    title = "not listening"
                    line = "Not listening\(place) since \(clock): no audio arrives"
                    details = message
                case _ where !monitoring:
                    title = "monitoring stopped"
                    line = "Not listening\(place) since \(clock): earshotd stopped (or its input ended)"
                case _ where object["started"]?.boolValue == true:
                    title = "listening"
                    line = "Listening\(place) since \(clock) (earshotd started)"
                    details = message
                default:
                    title = "listening again"
                    line = "Listening again\(place) since \(clock)"
                    details = message
                }
                title = node.isEmpty ? title.prefix(1).uppercased() + title.dropFirst() : "\(node): \(title)"
                priority = monitoring ? (object["started"]?.boolValue == true ? 2 : 3) : 4
                tags = [monitoring ? "white_check_mark" : "warning"]
                if let (sleep, tag) = sleepPriority { (priority, tags) = (sleep, [tag]) }
            } else {
                let (what, evidence) = Self.heard(object, group: group)
                let subject = Self.subject(group)
                // The evidence, or the class heard when it says more than the group's name.
                let detail = evidence ?? (what == subject ? nil : what)
                let urgent = Self.urgentGroups.contains(group)
                let verb = group != AlarmEvent.alarmChirp && (urgent || object["source"] != nil) ? "sounding" : "heard"
                let prefix = node.isEmpty ? "" : "\(node): "
                // An onset's and a reminder's: the sound is going on.
                let soundingPriority = urgent ? 5 : group == "glass_break" ? 4 : 3
                let soundingTags = [urgent ? "rotating_light" : group == "glass_break" ? "warning" : "loud_sound"]
                switch kind {
                case .onset, .health, .test, .mute:
                    let confidence = object["confidence"]?.doubleValue ?? object["peak_confidence"]?.doubleValue
                    let shown = confidence.map { "confidence \(JSONValue.format($0, decimals: 2))" }
                    // An onset held back while its group was muted (trial 16 M1): it began earlier, and the phone
                    // is told so rather than given the unmute's time as the start.
                    line = object["reason"]?.stringValue == EventLines.unmutedReason
                        ? "\(subject) \(verb)\(place): it began while muted, announced at \(clock) when unmuted"
                        : "\(subject) \(verb)\(place) \(addedAt == nil ? "at" : "since") \(clock)"
                    // Told to a URL a reload added while the event went on (trial 16 M2): since when, and why now.
                    if let addedAt { line += " (this URL was added by a reload at \(Self.clock(addedAt)))" }
                    details = detail.map { d in shown.map { "\(d) (\($0))" } ?? d } ?? shown
                    title = prefix + subject
                    (priority, tags) = (soundingPriority, soundingTags)
                case .end:
                    let duration = Self.duration(object["duration"]?.doubleValue ?? 0)
                    details = detail
                    switch object["reason"]?.stringValue.flatMap(DetectionEvent.EndReason.init(rawValue:)) {
                    case .streamGap?:
                        line = "\(subject) heard\(place) for \(duration), then the audio capture was lost at \(clock)"
                        title = "\(prefix)\(subject): \(DetectionEvent.EndReason.streamGap.words ?? "")"
                        priority = 4
                        tags = ["warning"]
                    case .streamEnd?:
                        line = "\(subject) heard\(place) for \(duration), then monitoring stopped at \(clock) (earshotd stopped or its input ended)"
                        title = "\(prefix)\(subject): \(DetectionEvent.EndReason.streamEnd.words ?? "")"
                        priority = 4
                        tags = ["warning"]
                    case .reload?:
                        line = "\(subject)\(place) ended at \(clock), after \(duration): not heard again after a configuration reload"
                        title = "\(prefix)\(subject) ended"
                        priority = 2
                        tags = ["white_check_mark"]
                    default:
                        line = "\(subject)\(place) ended at \(clock), after \(duration)"
                        title = "\(prefix)\(subject) ended"
                        priority = 2
                        tags = ["white_check_mark"]
                    }
                case .reminder where onsetMissed:
                    // The first this URL hears of the alarm (its onset given up): since when it sounds, as an onset.
                    let since = object["since"]?.stringValue.flatMap(Self.utcDate)
                        ?? time.addingTimeInterval(-(object["ongoing_seconds"]?.doubleValue ?? 0))
                    line = "\(subject) \(verb)\(place) since \(Self.clock(since))"
                    details = detail
                    title = prefix + subject
                    (priority, tags) = (soundingPriority, soundingTags)
                case .reminder:
                    let ongoing = object["ongoing_seconds"]?.doubleValue ?? 0
                    line = "\(subject) still \(verb)\(place) at \(clock), \(Self.duration(ongoing)) after it started"
                    details = detail
                    title = "\(prefix)\(subject) still heard"
                    (priority, tags) = (soundingPriority, soundingTags)
                }
                if onsetMissed {
                    // The first the phone hears of this event: as loud as an onset.
                    line += "; its start could not be delivered"
                    priority = max(priority, urgent ? 5 : 3)
                }
                tags.append(group)
            }
            if keptOverRestart { line += " (heard before earshotd restarted)" }
            // On a line of its own, the last: every attempt of one notification has the same title and first line.
            // A reminder that stands for an onset never delivered says since when it sounds instead.
            var late = ""
            // An onset told to a URL a reload added is late from the reload on.
            let due = addedAt ?? time
            if let sentAt, kind != .reminder || !onsetMissed,
               keptOverRestart || sentAt.timeIntervalSince(due) > Self.lateAfterSeconds {
                late = "\n(delivered \(Self.lateness(max(0, sentAt.timeIntervalSince(due)))) late)"
            }
            headers = ["Title: \(title)", "Priority: \(priority)", "Tags: \(tags.joined(separator: ","))",
                       "Content-Type: text/plain; charset=utf-8"].map(Self.headerSafe)
            body = Array((line + (details.map { "\n\($0)" } ?? "") + late).utf8)
        }
    }

    /// A health notification: monitoring stopped working (`monitoring` false: `capture_unavailable`,
    /// `input_stalled`, or `stopping`, the daemon stopping) or works again (`capture_live`; `started` for the
    /// first time since the daemon started). JSON: `{"type":"health","state":...,"monitoring":...,"message":...,
    /// "time":...,"node":...}`.
    package static func health(
        state: String, monitoring: Bool, message: String?, started: Bool = false, node: String, time: Date,
        format: NotifySettings.Format
    ) -> NotificationMessage {
        var object: JSONObject = ["type": "health", "state": .string(state), "monitoring": .bool(monitoring)]
        if started { object["started"] = .bool(true) }
        if let message { object["message"] = .string(message) }
        object["time"] = .string(EventJSON.timestamp(time))
        return NotificationMessage(object: object, group: "", kind: .health, format: format, node: node, time: time)
    }

    /// A test alert (``Kind/test``): ntfy `Test alert from kitchen: Earshot can reach this phone` (``testAlertText(node:)``),
    /// title `kitchen: test alert`, priority 3 (the default: the phone sounds as for a baby cry), tags `bell,test_alert`;
    /// JSON `{"type":"test_alert","time":...,"node":"kitchen"}`.
    package static func testAlert(node: String, time: Date, format: NotifySettings.Format) -> NotificationMessage {
        let object: JSONObject = ["type": .string(TestAlert.type), "time": .string(EventJSON.timestamp(time))]
        return NotificationMessage(object: object, group: "", kind: .test, format: format, node: node, time: time)
    }

    /// The words of a test alert: `Test alert from kitchen: Earshot can reach this phone` (`Test alert: ...` without a
    /// node).
    package static func testAlertText(node: String) -> String {
        "Test alert\(node.isEmpty ? "" : " from \(node)"): Earshot can reach this phone"
    }

    /// This message as sent at `date`: in ntfy's format, a last line `(delivered 25 s late)` when `date` is more
    /// than ``lateAfterSeconds`` after the event.
    package func sending(at date: Date) -> NotificationMessage {
        NotificationMessage(
            object: object, group: group, kind: kind, format: format, node: node, time: time,
            onsetMissed: onsetMissed, sentAt: date, keptOverRestart: keptOverRestart)
    }

    /// This end or reminder, for a URL that never accepted the event's onset (given up after its retries): ntfy
    /// appends `; its start could not be delivered` and raises the priority to the onset's (a reminder says since
    /// when the sound goes on, `Smoke alarm sounding in kitchen since 20:19:26; ...`, titled as an onset); JSON adds
    /// `"onset_delivered":false`.
    package func missedOnset() -> NotificationMessage {
        NotificationMessage(
            object: object, group: group, kind: kind, format: format, node: node, time: time, onsetMissed: true,
            keptOverRestart: keptOverRestart)
    }

    /// The field an onset told to a URL a reload added carries (``addedByReload(at:)``): when the reload was.
    package static let urlAddedKey = "url_added_at"

    /// This onset, for a URL that a reload at `reloadTime` added while the event was still going on (trial 16 M2):
    /// ntfy `Smoke alarm sounding in kitchen since 20:43:38 (this URL was added by a reload at 20:44:00)`, with the
    /// onset's title, priority and evidence (one announced when its group was unmuted keeps that wording, `...: it
    /// began while muted, announced at 19:15:02 when unmuted (this URL was added by a reload at 19:16:00)`); a last
    /// line `(delivered 25 s late)` counts from the reload. JSON: the onset's object (its own `time`) with
    /// `"url_added_at"`, the reload's time.
    package func addedByReload(at reloadTime: Date) -> NotificationMessage {
        var object = object
        object[Self.urlAddedKey] = .string(EventJSON.timestamp(reloadTime))
        return NotificationMessage(
            object: object, group: group, kind: kind, format: format, node: node, time: time, keptOverRestart: keptOverRestart)
    }

    /// The plain name of what a group's events are, as a title and a first line start: the group's title
    /// (`Smoke alarm`, `Baby cry`), `Loud sound` for the `loud` group, and `Smoke alarm low battery chirp` for
    /// `alarm_chirp` (what a lone chirp every 30 to 60 s means).
    package static func subject(_ group: String) -> String {
        switch group {
        case AlarmEvent.alarmChirp: "Smoke alarm low battery chirp"
        case LabelGroup.loudName: "Loud sound"
        default: GroupTitle.of(group)
        }
    }

    /// `20:19:26`: `date` in local time.
    package static func clock(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        localtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))"
    }

    /// The date of an event JSON timestamp (`2026-12-07T15:45:16.000Z`, ``EventJSON/timestamp(_:)``), or nil.
    static func utcDate(_ text: String) -> Date? {
        let parts = text.split(whereSeparator: { "-T:.Z".contains($0) }).compactMap { Int($0) }
        guard parts.count >= 6 else { return nil }
        var fields = tm()
        (fields.tm_year, fields.tm_mon, fields.tm_mday) = (Int32(parts[0] - 1900), Int32(parts[1] - 1), Int32(parts[2]))
        (fields.tm_hour, fields.tm_min, fields.tm_sec) = (Int32(parts[3]), Int32(parts[4]), Int32(parts[5]))
        let milliseconds = parts.count > 6 ? Double(parts[6]) / 1000 : 0
        return Date(timeIntervalSince1970: Double(timegm(&fields)) + milliseconds)
    }

    /// `25 s` under two minutes, else whole minutes (`15 min`).
    private static func lateness(_ seconds: Double) -> String {
        seconds < 120 ? "\(Int(seconds.rounded())) s" : "\(Int((seconds / 60).rounded())) min"
    }

    /// What was heard, in the words a phone should show, and the evidence when there is some to show:
    /// - an alarm the pattern detector decided (its JSON has `source`): the group's title and the pattern
    ///   (`Smoke alarm`, `T3 pattern at 3057 Hz`; `alarm tone at 3150 Hz` for a steady tone; for a low-battery
    ///   chirp `Alarm chirp`, `a chirp every 42.0 s at 3150 Hz`);
    /// - the level-driven `loud` group: `Loud sound`, and the level (`-10.6 dBFS`);
    /// - a class of a custom or built-in model (`MODEL:LABEL`, e.g. `builtin_baby_cry:baby_cry`): its label as words
    ///   (`Baby cry`), not the model's identifier;
    /// - a class of the classifier: its AudioSet display name (`Smoke detector, smoke alarm`, `Shatter`);
    /// - no class: the group's title.
    package static func heard(_ object: JSONObject, group: String) -> (what: String, evidence: String?) {
        let tone = object["tone_hz"]?.doubleValue.map { " at \(Int($0)) Hz" } ?? ""
        if object["source"] != nil {
            let evidence: String
            switch object["pattern"]?.stringValue {
            case nil: evidence = "alarm tone\(tone)"
            case "chirp"?:
                evidence = object["interval"]?.doubleValue.map { "a chirp every \(JSONValue.format($0, decimals: 1)) s\(tone)" }
                    ?? "chirp pattern\(tone)"
            case let pattern?: evidence = "\(pattern) pattern\(tone)"
            }
            return (GroupTitle.of(group), evidence)
        }
        guard let label = object["class"]?.stringValue else { return (GroupTitle.of(group), nil) }
        if group == LabelGroup.loudName { return ("Loud sound", label) }
        return (GroupTitle.ofClass(label), nil)
    }

    /// `12.5 s` under two minutes, else whole minutes (`5 min`).
    private static func duration(_ seconds: Double) -> String {
        seconds < 120 ? "\(JSONValue.format(seconds, decimals: 1)) s" : "\(Int((seconds / 60).rounded())) min"
    }

    /// A header line without control characters (a line break would end it).
    private static func headerSafe(_ line: String) -> String {
        String(line.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? " " : Character($0) })
    }
}
