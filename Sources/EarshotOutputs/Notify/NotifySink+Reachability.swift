import Dispatch
import EarshotSupport
import EarshotDetection

/// The reachability checks of the `[notify]` URLs (trial 15 M2, L3): a server that went away (its name no longer
/// resolves, a firewall, a TLS certificate that no longer verifies, the server down) is found within
/// ``NotifySettings/checkIntervalSeconds`` (1 hour by default), not when the smoke alarm sounds; and a URL failing
/// without an answer is seen to work again within ``NotifySettings/failingCheckSeconds`` (1 minute) of the server's
/// return, not at the next alarm days later.
///
/// A check is an HTTP `HEAD` of the URL (``HTTPPoster/head(url:timeoutSeconds:)``): nothing is posted, so no
/// notification reaches the phone. Any HTTP status is an answer: the server can be reached. A 401, 403 or 405 to a
/// `HEAD` cannot say whether a POST would be allowed (ntfy answers a `HEAD` of a topic that needs a login with 401,
/// some webhooks answer 404 or 405 to anything but a POST), so a check only tells whether the server answers; what
/// it answers to a notification, the notifications (and `earshot test-alert`) tell.
///
/// - No answer (DNS, connection refused or timed out, TLS verification, ``NotifySettings/timeoutSeconds`` passed):
///   the URL is failing, `notify_failed` said once (`... failing: Couldn't connect to server (reachability check);
///   ...`), as for a notification given up: the MQTT `Notifications failing` sensor ON, the status reply's
///   `failing`. It is checked every ``NotifySettings/failingCheckSeconds`` from then on.
/// - An answer while the URL is failing without one (a check's failure, or notifications that got no connection:
///   ``Target/failedWithAnswer`` false): `notify_recovered`. A URL failing with an answer (HTTP 401, 404, 503 to a
///   notification, or one sent and not answered) stays failing until a notification or test alert gets through:
///   a server that answers a `HEAD` may still refuse the POST.
///
/// The checks run one after another on ``checkQueue`` with each URL's own second libcurl handle
/// (``Target/checker``), never on a URL's queue: a check never delays a notification. A stop does not wait for
/// them (a check in progress is left to its timeout); none starts once stopping.
extension NotifySink {
    /// Arms the checks: every URL whose check is due (all of them at start and after a reload) is checked at once.
    func scheduleChecks() {
        checkQueue.async { [weak self] in self?.runDueChecks() }
    }

    /// Checks every URL at once (after a reload: new URLs, a new interval), then as scheduled.
    func checkEveryURLNow() {
        checkQueue.async { [weak self] in
            guard let self else { return }
            for target in targets { target.status.nextCheck = 0 }
            runDueChecks()
        }
    }

    /// On ``checkQueue``: checks each URL whose check is due, then arms the wake-up for the next one due.
    private func runDueChecks() {
        let (settings, targets) = configured.withLock { ($0.settings, $0.targets) }
        guard settings.checkIntervalSeconds > 0 else { return }
        for target in targets where target.status.nextCheck <= Self.checkUptime() + 0.001 {
            guard !stopping.load(ordering: .relaxed) else { return }
            check(target, settings: settings)
            let failingUnseen = target.status.failing.load(ordering: .relaxed) && !target.status.failedWithAnswer.load(ordering: .relaxed)
            let interval = failingUnseen
                ? min(settings.failingCheckSeconds, settings.checkIntervalSeconds) : settings.checkIntervalSeconds
            target.status.nextCheck = Self.checkUptime() + interval
        }
        guard !stopping.load(ordering: .relaxed), let due = targets.map(\.status.nextCheck).min() else { return }
        if let armed = checkTimerDue, armed <= due, armed > Self.checkUptime() { return }
        checkTimerDue = due
        checkQueue.asyncAfter(deadline: .now() + max(0, due - Self.checkUptime())) { [weak self] in
            guard let self else { return }
            if checkTimerDue == due { checkTimerDue = nil }
            runDueChecks()
        }
    }

    /// One check of `target` and what its outcome says (``NotifySink`` reachability checks).
    private func check(_ target: Target, settings: NotifySettings) {
        let outcome = target.status.checker.head(url: target.url, timeoutSeconds: settings.timeoutSeconds)
        switch outcome {
        case .status:
            target.status.answerLock.withLock { _ in
                guard !target.status.failedWithAnswer.load(ordering: .relaxed),
                      target.status.failing.exchange(false, ordering: .relaxed) else { return }
                let failures = target.status.failuresInRow.exchange(0, ordering: .relaxed)
                reportHealth(HealthEvent(
                    state: .notifyRecovered,
                    message: Self.checkRecoveredMessage(url: target.origin, failed: failures),
                    details: ["url": .string(target.origin), "failed": .int(failures)]))
            }
        case .failed(let problem, _):
            // A URL a reload removed during its check is not failing.
            guard targets.contains(where: { $0 === target }) else { return }
            let every = min(settings.failingCheckSeconds, settings.checkIntervalSeconds)
            target.status.answerLock.withLock { _ in
                guard !target.status.failing.exchange(true, ordering: .relaxed) else { return }
                reportHealth(HealthEvent(
                    state: .notifyFailed,
                    message: Self.checkFailedMessage(url: target.origin, problem: problem, everySeconds: every),
                    details: ["url": .string(target.origin), "failed": .int(target.status.failuresInRow.load(ordering: .relaxed))]))
            }
        }
    }

    /// The `notify_failed` message of a check without an answer: `notifications to URL are failing: Couldn't
    /// connect to server (reachability check); detection goes on, and the URL is checked every 60 s until it
    /// answers`.
    package static func checkFailedMessage(url: String, problem: String, everySeconds: Double) -> String {
        "notifications to \(url) are failing: \(problem) (reachability check); detection goes on, and the URL is checked every \(SettingRules.format(everySeconds)) s until it answers"
    }

    /// The `notify_recovered` message of a check answered: `notifications to URL can get through again: its server
    /// answers (reachability check; none was lost)`, or `(...; 2 failed before)`.
    package static func checkRecoveredMessage(url: String, failed: Int) -> String {
        "notifications to \(url) can get through again: its server answers (reachability check; \(failed == 0 ? "none was lost" : "\(failed) failed before"))"
    }

    private static func checkUptime() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
}
