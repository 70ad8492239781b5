import FoundationEssentials
import Dispatch
import Synchronization
import EarshotSupport
import EarshotDetection

/// `[notify]` at a reload (trial 15 M4: a changed URL was read only at start, and `earshot test-alert` after
/// `systemctl reload` tested the old one).
///
/// What a reload changes, from the moment ``apply(_:)`` returns: the URLs, and every other key (groups, format,
/// on_end, health, repeat_after, timeout, retries, check_interval) for the notifications decided from then on; the
/// sink's own state goes on (open events, their reminders, `repeat_after`'s last notifications, what the phone was
/// told about monitoring), so an alarm sounding through the reload gets its reminders and its end at the new URLs.
/// A URL kept (the same text) keeps its queue, its retries and its failing state, and is sent nothing new. A URL
/// added is sent, first, the onset of each event going on (open, or ended by a reload or gap and held for
/// `continuationSeconds`) of a group it notifies, worded as news told late (``NotificationMessage/addedByReload(at:)``:
/// `Smoke alarm sounding in kitchen since 20:43:38 (this URL was added by a reload at 20:44:00)`), so that its
/// reminders and end never speak of a sound it was not told of (trial 16 M2); one journal line names them. An event
/// whose onset a mute holds back is not among them: it is announced to every URL when the mute ends. A URL removed:
/// - its notifications waiting (queued, or waiting for a retry: the server was away) go to the URLs the reload
///   added, each once, as if first queued there: a user who replaces a dead topic gets the alarm that was waiting
///   for it (the onset or a reminder of an event going on excepted: the added URLs were told of it above). Test alerts are not moved (a test alert tests the URL it was sent to; one not tried yet is told "not
///   sent"). With no URL added they are dropped: the URLs kept have their own copies. Said in one journal line per
///   removed URL with notifications waiting, naming how many; counted in ``Statistics/failed``;
/// - its failing state is cleared with `notify_recovered` (`... no longer failing: the URL was removed from
///   [notify] by a reload`): a URL not configured is not failing, and the MQTT sensor follows;
/// - an attempt already in progress ends first (its block on the URL's queue runs before the hand-over).
/// The outbox (``NotifyOutbox``) is not touched: it is written at the stop, and what the last stop kept and is still
/// waiting moves as above (kept as restored, so the file goes once they are all done with).
/// Every URL is checked at once after a reload (``NotifySink`` reachability checks).
extension NotifySink {
    /// A reload's `[notify]` with the targets it needs, made by ``prepare(_:)`` before anything changes.
    package struct Reconfiguration: @unchecked Sendable {
        fileprivate let settings: NotifySettings
        /// In the order of `settings.urls`: the running ones whose URL stays, new ones for the others.
        fileprivate let targets: [Target]
        /// What each target is shown as under `settings` (its position may change).
        fileprivate let shown: [String]
        /// Whether anything differs from the settings running.
        package let changed: Bool
        /// Whether the URLs differ.
        package let urlsChanged: Bool
    }

    /// Makes the targets `settings` needs (a new libcurl handle for each URL not running now), changing nothing.
    /// - Throws: `EarshotError(.system)` when libcurl cannot make a handle.
    package func prepare(_ settings: NotifySettings) throws(EarshotError) -> Reconfiguration {
        let current = configured.withLock { $0 }
        var free = current.targets
        var targets: [Target] = []
        var shown: [String] = []
        for (index, url) in settings.urls.enumerated() {
            if let found = free.firstIndex(where: { $0.url == url }) {
                targets.append(free.remove(at: found))
            } else {
                targets.append(try Target(url: url, index: index, count: settings.urls.count, timeoutSeconds: settings.timeoutSeconds))
            }
            shown.append(NotifySettings.shownURL(url, index: index, count: settings.urls.count))
        }
        return Reconfiguration(
            settings: settings, targets: targets, shown: shown, changed: settings != current.settings,
            urlsChanged: settings.urls != current.settings.urls)
    }

    /// Runs `reconfiguration` from now on (see the extension's summary). Any thread; returns at once (the removed
    /// URLs' notifications are handed over on their queues).
    package func apply(_ reconfiguration: Reconfiguration) {
        let settings = reconfiguration.settings
        let reloadTime = Date()
        // The state's lock first (as ``deliver(_:)``, which queues an event's onset and end under it): an event is
        // open here, and the URLs added are told of it below, or its onset or end is queued already.
        let (added, renamed, told, full) = state.withLock { state in
            let going = Self.goingOn(state, groups: settings.groups)
            return configured.withLock { configured in
                let old = configured.targets
                configured.settings = settings
                configured.targets = reconfiguration.targets
                let removed = old.filter { target in !reconfiguration.targets.contains { $0 === target } }
                let added = reconfiguration.targets.filter { target in !old.contains { $0 === target } }
                // A URL kept is renamed below, with what says it; an added one now.
                var renamed: [(Target, shown: String)] = []
                for (target, shown) in zip(reconfiguration.targets, reconfiguration.shown) {
                    if old.contains(where: { $0 === target }) {
                        if target.origin != shown { renamed.append((target, shown)) }
                    } else {
                        target.status.shown.withLock { $0 = shown }
                    }
                }
                // The onset of each event going on, to the URLs added only, before anything else is queued there:
                // its reminders and end follow it as for any onset.
                var full: [(Target, Int)] = []
                if !added.isEmpty {
                    for (group, event) in going {
                        let onset = NotificationMessage(
                            object: event.object, group: group, kind: .onset, format: settings.format, node: settings.node,
                            time: event.since)
                        full += queueJobs(onset.addedByReload(at: reloadTime), receipt: nil, to: added, settings: settings,
                                          restored: false, id: nil)
                    }
                }
                // Under the lock: every job queued for a removed URL (``enqueue``) is on its queue before this block.
                let handedOver = HandedOver(told: added.isEmpty ? [:] : Dictionary(
                    going.map { ($0.group, EventJSON.timestamp($0.event.since)) }, uniquingKeysWith: { first, _ in first }))
                for target in removed {
                    for channel in target.channels {
                        channel.queue.async { [self] in retire(channel, handingOverTo: added, handedOver: handedOver) }
                    }
                }
                return (added, renamed, added.isEmpty ? [] : going, full)
            }
        }
        if !full.isEmpty { dropped.wrappingAdd(full.count, ordering: .relaxed) }
        if !told.isEmpty {
            let events = told.map { "\($0.group) since \(NotificationMessage.clock($0.event.since))" }
            log("notify: \(added.map(\.origin).joined(separator: ", ")), added by the reload, \(added.count == 1 ? "is" : "are") "
                + "sent the onset of what is going on: \(events.joined(separator: ", "))", 6)
        }
        for target in reconfiguration.targets where !added.contains(where: { $0 === target }) {
            target.answerWait = settings.timeoutSeconds
        }
        // A URL kept and shown under another name (its position in the list changed): renamed under the lock its
        // health events take, so that each says the name of its time; a failing one says so under its new name,
        // `replaces` naming the old (the MQTT sensor's list follows; trial 17 L3: a `notify_recovered` for the old
        // name told automations it worked again).
        for (target, shown) in renamed {
            target.status.answerLock.withLock { _ in
                let old = target.status.shown.withLock { name in defer { name = shown }; return name }
                guard target.status.failing.load(ordering: .relaxed) else { return }
                reportHealth(HealthEvent(
                    state: .notifyFailed,
                    message: "notifications to \(shown) are failing (as before the reload, as \(old)); detection goes on, and further failures are counted until one gets through",
                    details: ["url": .string(shown), "replaces": .string(old),
                              "failed": .int(target.status.failuresInRow.load(ordering: .relaxed))]))
            }
        }
        checkEveryURLNow()
    }

    /// On `target`'s queue, for each channel of a URL the reload removed (``Target/channels``): its waiting
    /// notifications go to `added` (each once, whichever removed URL had it: `handedOver` holds their ids), and the
    /// URL is no longer failing.
    private func retire(_ target: Target, handingOverTo added: [Target], handedOver: HandedOver) {
        let jobs = target.jobs
        target.jobs = []
        target.pending.wrappingSubtract(jobs.count, ordering: .relaxed)
        target.retrying.store(0, ordering: .relaxed)
        var moved = 0
        var tests = 0
        for job in jobs {
            if job.message.kind == .test {
                tests += 1
                if job.attempts == 0 {
                    job.receipt?.report(.notSent("its URL was removed from [notify] by a reload"), for: destination(target))
                }
            } else if !added.isEmpty {
                moved += 1
                if !handedOver.wasTold(job.message), handedOver.ids.withLock({ $0.insert(job.id).inserted }) {
                    if job.restored { restoredLeft.wrappingAdd(added.count, ordering: .relaxed) }
                    enqueue(job.message, to: added, restored: job.restored, id: job.id)
                }
            }
            if job.restored { restoredDone() }
        }
        if !jobs.isEmpty {
            failed.wrappingAdd(jobs.count, ordering: .relaxed)
            let waiting = "\(jobs.count) notification\(jobs.count == 1 ? "" : "s") waiting for it"
            let fate = added.isEmpty
                ? "dropped (no URL was added to take them; the URLs kept have their own copies)"
                : moved == 0 ? "dropped (test alerts test the URL they were sent to)"
                : "handed to \(added.map(\.origin).joined(separator: ", "))"
                    + (tests > 0 ? " (\(tests) test alert\(tests == 1 ? "" : "s") dropped: a test alert tests the URL it was sent to)" : "")
            log("notify: the reload removed \(target.origin) from [notify]: \(waiting) \(jobs.count == 1 ? "is" : "are") \(fate)", 4)
        }
        target.status.answerLock.withLock { _ in
            guard target.status.failing.exchange(false, ordering: .relaxed) else { return }
            let failed = target.status.failuresInRow.exchange(0, ordering: .relaxed)
            reportHealth(HealthEvent(
                state: .notifyRecovered,
                message: "notifications to \(target.origin) are no longer failing: the URL was removed from [notify] by a reload",
                details: ["url": .string(target.origin), "failed": .int(failed)]))
        }
    }

    /// The ids of the notifications one reload handed over (``retire(_:handingOverTo:handedOver:)``), and the
    /// groups whose event going on the added URLs were told of (an onset or reminder of theirs is not handed over:
    /// it would tell them twice).
    private final class HandedOver: Sendable {
        let ids = Mutex(Set<String>())
        /// Each group told of, and its event's start as its JSON says it (an onset's `time`, a reminder's `since`).
        let told: [String: String]

        init(told: [String: String]) {
            self.told = told
        }

        /// Whether `message` is the onset or a reminder of an event the added URLs were told of.
        func wasTold(_ message: NotificationMessage) -> Bool {
            guard let since = told[message.group] else { return false }
            switch message.kind {
            case .onset: return message.object["time"]?.stringValue == since
            case .reminder: return message.object["since"]?.stringValue == since
            default: return false
            }
        }
    }

    /// The events going on (open, or ended by a reload or a gap and held to see whether they go on), of the
    /// `groups` notified (all when empty), in the order they began: what a URL a reload adds is told of.
    private static func goingOn(_ state: State, groups: [String]) -> [(group: String, event: OpenEvent)] {
        let held = state.heldEnds.compactMap { group, end in end.onset.map { (group: group, event: $0) } }
        return (state.open.map { (group: $0.key, event: $0.value) } + held)
            .filter { groups.isEmpty || groups.contains($0.group) }
            .sorted { $0.event.generation < $1.event.generation }
    }

    /// Routes `health` (`notify_failed`, `notify_recovered`) to the other outputs.
    func reportHealth(_ health: HealthEvent) {
        state.withLock { $0.reportHealth }?(health)
    }
}
