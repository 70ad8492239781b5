import Dispatch
import Synchronization

/// What the outputs that reach over the network did with one test alert, for the one who asked (`earshot
/// test-alert`): each destination the daemon expects a result from (a `[notify]` URL, the MQTT broker) reports one
/// ``Outcome``, and `onResult` runs once, when every destination has reported or when ``deadlineSeconds`` have
/// passed since the receipt was made, with what came by then.
///
/// Carried to the sinks in the ``TestAlert`` value: ``NotifySink`` reports each URL's first attempt (retries go on
/// in the background as for any notification), ``MQTTSink`` the broker's acknowledgement (PUBACK) of the alert's
/// QoS 1 messages.
///
/// - Important: Any thread. A report after the result was given, or for a destination not expected, is ignored.
///   `onResult` runs on the thread of the last report or on Dispatch's global queue (the deadline).
package final class TestAlertReceipt: Sendable {
    /// How long a test alert's results are waited for, in seconds: 10, `[notify] timeout`'s default (an attempt
    /// to a URL that does not answer fails by itself then; with a longer timeout it is still waited for when the
    /// result is given), and the most an MQTT broker that is back within its reconnect back-off (at most 5 s
    /// apart) needs to acknowledge. `earshot test-alert` waits 5 s more for the reply.
    package static let deadlineSeconds = 10.0

    /// One place the alert goes over the network.
    package struct Destination: Sendable, Hashable {
        /// The sink's name: `notify`, `mqtt`.
        package var output: String
        /// The URL as messages show it, or the broker's `host:port`.
        package var target: String

        package init(output: String, target: String) {
            self.output = output
            self.target = target
        }
    }

    /// What a destination did with the alert.
    package enum Outcome: Sendable, Equatable {
        /// The URL accepted it on the first attempt, with this HTTP status (2xx).
        case delivered(httpStatus: Int)
        /// The first attempt failed: `problem` is `HTTP 500` or libcurl's words (`Couldn't connect to server`);
        /// `retriesLeft` more attempts follow (0: given up, and `notify_failed` says so).
        case failed(problem: String, httpStatus: Int?, retriesLeft: Int)
        /// The broker acknowledged every message of the alert (PUBACK, QoS 1).
        case acknowledged
        /// The alert was not handed over at all, and why (the URL's queue full, the daemon stopping).
        case notSent(String)
    }

    /// A destination's result: its outcome (nil when none came by the deadline) and the seconds from the receipt's
    /// making to the outcome (to the deadline without one).
    package struct Entry: Sendable, Equatable {
        package var destination: Destination
        package var outcome: Outcome?
        package var seconds: Double
    }

    private struct State {
        var outcomes: [Destination: (Outcome, Double)] = [:]
        var finished = false
    }

    /// The destinations, in the order the result lists them.
    package let destinations: [Destination]
    private let started = DispatchTime.now()
    private let onResult: @Sendable ([Entry]) -> Void
    private let state = Mutex(State())

    /// - Parameters:
    ///   - destinations: where a result is expected from, in the order `onResult` lists them.
    ///   - onResult: runs once with an entry per destination, in that order.
    package init(destinations: [Destination], onResult: @escaping @Sendable ([Entry]) -> Void) {
        self.destinations = destinations
        self.onResult = onResult
    }

    /// Arms the deadline, once the alert is routed; with no destination, gives the result at once.
    package func start() {
        if destinations.isEmpty { return finish() }
        let deadline = started + .milliseconds(Int(Self.deadlineSeconds * 1000))
        DispatchQueue.global().asyncAfter(deadline: deadline) { [self] in finish() }
    }

    /// `destination`'s outcome; the first one counts.
    package func report(_ outcome: Outcome, for destination: Destination) {
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        let complete = state.withLock { state -> Bool in
            guard !state.finished, destinations.contains(destination), state.outcomes[destination] == nil else { return false }
            state.outcomes[destination] = (outcome, seconds)
            return state.outcomes.count == destinations.count
        }
        if complete { finish() }
    }

    /// Gives the result (once): the outcomes reported, nil for the others.
    private func finish() {
        let now = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        let outcomes = state.withLock { state -> [Destination: (Outcome, Double)]? in
            guard !state.finished else { return nil }
            state.finished = true
            return state.outcomes
        }
        guard let outcomes else { return }
        onResult(destinations.map { destination in
            let reported = outcomes[destination]
            return Entry(destination: destination, outcome: reported?.0, seconds: reported?.1 ?? now)
        })
    }
}
