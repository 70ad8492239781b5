import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotOutputs
import EarshotService

/// `earshot mqtt-retire`: deletes what a node left retained on its MQTT broker (its Home Assistant discovery configs
/// and its `topic_prefix/NODE/...` topics), so that Home Assistant removes the device of a room that is gone.
///
/// The broker, credentials, TLS files, prefixes and node come from the daemon's configuration file, read as earshotd
/// reads it (``settings(configPath:node:currentDirectory:)``); the connection is earshotd's own client
/// (``MQTTConnection``), with a client id of its own (a running daemon is not disconnected) and no Last Will.
///
/// ``collect(quietSeconds:boundSeconds:)`` subscribes to `DISCOVERY_PREFIX/+/earshot_NODE/#` and
/// `TOPIC_PREFIX/NODE/#` and takes every retained message the broker hands over, until none has come for
/// `quietSeconds`; ``empty(_:timeoutSeconds:)`` publishes a zero-length retained message (QoS 1) to each topic and
/// waits for the broker's acknowledgements. Between the two the caller checks ``Collected/online``: a daemon of that
/// node connected now would publish its topics again at once.
///
/// - Important: not thread-safe: one caller, one run.
package final class MQTTRetirement {
    /// `[mqtt]` as earshotd would run with it (node, prefixes, password read).
    package let settings: MQTTSettings
    /// `DISCOVERY_PREFIX/+/earshot_NODE/#` and `TOPIC_PREFIX/NODE/#`.
    package let filters: [String]
    /// `TOPIC_PREFIX/NODE/availability`: `online` while the node's daemon is connected (its Last Will is `offline`).
    package let availabilityTopic: String
    /// `host:port`.
    package var broker: String { connection.endpoint.description }

    /// Seconds without a retained message after which every one has come: a broker sends a subscription's retained
    /// messages in one burst right after the SUBACK.
    package static let quietSeconds = 1.5
    /// Seconds the collection may last at most, however the messages trickle in.
    package static let boundSeconds = 20.0
    /// Seconds to wait for the broker's CONNACK (``MQTTConnection/connectTimeout`` fails the attempt before).
    package static let connectSeconds = MQTTConnection.connectTimeout + 2
    /// Seconds to wait for the acknowledgements of the empty messages.
    package static let acknowledgeSeconds = 10.0

    /// What the broker held retained for the node.
    package struct Collected: Sendable, Equatable {
        /// The retained topics (non-empty payloads), sorted.
        package var topics: [String]
        /// Whether the availability topic says `online` (retained, or published while subscribed).
        package var online: Bool
    }

    private let connection: MQTTConnection
    private let listener: Listener

    /// - Parameter settings: `[mqtt]` with the password read (``settings(configPath:node:currentDirectory:)``).
    /// - Throws: `EarshotError(.unavailable)` when libmosquitto cannot be loaded.
    package init(settings: MQTTSettings) throws(EarshotError) {
        self.settings = settings
        let discovery = HomeAssistantDiscovery(
            discoveryPrefix: settings.discoveryPrefix, node: settings.node, topics: MQTTTopics(base: settings.baseTopic),
            level: false, area: nil, notify: false)
        filters = ["\(settings.discoveryPrefix)/+/\(discovery.deviceID)/#", "\(settings.baseTopic)/#"]
        availabilityTopic = MQTTTopics(base: settings.baseTopic).availability
        listener = Listener(filters: filters, availability: availabilityTopic)
        let clientID = String("\(settings.clientID)-retire-\(getpid())".prefix(128))
        // Room for every topic a node can have many times over: none is dropped from the outbox.
        connection = try MQTTConnection(
            endpoint: MQTTSink.endpoint(settings, clientID: clientID, will: nil), outboxLimit: 100_000)
    }

    deinit {
        connection.stop(timeout: 1)
    }

    /// `[mqtt]` of the configuration file at `configPath` (nil: /etc/earshot/earshotd.conf when it exists, else the
    /// built-in defaults), as the earshotd started with that file runs: `/etc/earshot/NAME.conf` is instance
    /// `earshotd@NAME`'s, whose unit sets `EARSHOT_DEFAULT_NODE=NAME`, so its default node is `NAME` (set here
    /// before the file is read, as the unit does); `node` (`--node`) wins over the file. The password file and the
    /// TLS files are read even when `[mqtt] enabled` is false (a room being retired may have MQTT turned off).
    /// - Throws: the errors of `DaemonConfiguration.load(path:)` and `readMQTTPassword()` (78);
    ///   `EarshotError(.usage)` for a `node` that is no node name.
    package static func settings(configPath: String?, node: String?, currentDirectory: String) throws(EarshotError)
        -> MQTTSettings
    {
        if let configPath, let instance = StateDirectory.instance(configurationFile: configPath, currentDirectory: currentDirectory) {
            setenv(MQTTSettings.defaultNodeVariable, instance.name, 1)
        }
        var configuration = try DaemonConfiguration.load(path: configPath)
        if let node, let requirement = configuration.mqtt.set(key: "node", value: node) {
            throw EarshotError(.usage, "--node \"\(DisplayText.escaped(node, limit: 80))\" \(requirement)")
        }
        configuration.mqtt.enabled = true
        try configuration.readMQTTPassword()
        return configuration.mqtt
    }

    /// Connects and subscribes, then collects the retained messages until none has come for `quietSeconds` (at
    /// most `boundSeconds` after the connection was accepted).
    /// - Throws: ``DaemonConfiguration/brokerError(_:cause:)``'s errors: 69 unreachable, 78 refused; 69 when the
    ///   connection is lost meanwhile.
    package func collect(quietSeconds: Double = MQTTRetirement.quietSeconds, boundSeconds: Double = MQTTRetirement.boundSeconds)
        throws(EarshotError) -> Collected
    {
        try connection.start(delegate: listener)
        guard let accepted = listener.waitForConnection(seconds: Self.connectSeconds) else {
            throw DaemonConfiguration.brokerError(broker, silentFor: Self.connectSeconds)
        }
        if case .failed(let cause) = accepted { throw DaemonConfiguration.brokerError(broker, cause: cause) }
        let start = Self.now()
        while true {
            let (last, lost) = listener.progress
            if let lost { throw lostError(lost) }
            let now = Self.now()
            if now - max(start, last ?? start) >= quietSeconds || now - start >= boundSeconds { break }
            usleep(50_000)
        }
        return listener.collected
    }

    /// Empties each of `topics` (a zero-length retained message, QoS 1) and waits until the broker has
    /// acknowledged every one.
    /// - Throws: `EarshotError(.unavailable)` when the connection is lost or the acknowledgements do not come
    ///   within `timeoutSeconds`.
    package func empty(_ topics: [String], timeoutSeconds: Double = MQTTRetirement.acknowledgeSeconds) throws(EarshotError) {
        guard !topics.isEmpty else { return }
        let acknowledged = DispatchSemaphore(value: 0)
        let messages = topics.map { MQTTMessage(topic: $0, payload: [], qos: 1, retain: true) }
        guard connection.enqueue(messages, acknowledged: { acknowledged.signal() }) else {
            throw EarshotError(.unavailable, "the connection to the MQTT broker \(broker) was closed before the topics were emptied")
        }
        let deadline = Self.now() + timeoutSeconds
        while acknowledged.wait(timeout: .now() + 0.05) == .timedOut {
            if let lost = listener.progress.lost { throw lostError(lost) }
            if Self.now() >= deadline {
                throw EarshotError(.unavailable, "the MQTT broker \(broker) did not acknowledge the \(topics.count) empty messages within \(Int(timeoutSeconds)) s (run mqtt-retire again to see what is left)")
            }
        }
    }

    /// Disconnects cleanly.
    package func finish() {
        connection.stop(timeout: 2)
    }

    private func lostError(_ cause: String) -> EarshotError {
        EarshotError(.unavailable, "[mqtt] broker \(broker): \(cause) (run mqtt-retire again to see what is left)", cause: cause)
    }

    private static func now() -> Double {
        Double(DispatchTime.now().uptimeNanoseconds) / 1e9
    }

    /// The connection's delegate: what the broker said, behind a lock (callbacks run on the connection's thread).
    private final class Listener: MQTTConnectionDelegate {
        enum Accepted: Sendable { case connected, failed(String) }

        struct State {
            var accepted: Accepted?
            /// A failure after the connection was accepted.
            var lost: String?
            var retained: Set<String> = []
            var lastArrival: Double?
            var availability: [UInt8]?
        }

        let filters: [String]
        let availability: String
        private let state = Mutex(State())
        private let settled = DispatchSemaphore(value: 0)

        init(filters: [String], availability: String) {
            self.filters = filters
            self.availability = availability
        }

        func waitForConnection(seconds: Double) -> Accepted? {
            _ = settled.wait(timeout: .now() + seconds)
            return state.withLock { $0.accepted }
        }

        var progress: (last: Double?, lost: String?) { state.withLock { ($0.lastArrival, $0.lost) } }

        var collected: Collected {
            state.withLock { Collected(topics: $0.retained.sorted(), online: $0.availability == Array("online".utf8)) }
        }

        func connectionDidConnect(_ connection: MQTTConnection) -> MQTTConnection.Birth {
            let first = state.withLock { state -> Bool in
                guard state.accepted == nil else { return false }
                state.accepted = .connected
                return true
            }
            if first { settled.signal() }
            return MQTTConnection.Birth(subscriptions: filters)
        }

        func connection(_ connection: MQTTConnection, didFail cause: String, retryIn: Double?) {
            let first = state.withLock { state -> Bool in
                guard state.accepted == nil else {
                    if state.lost == nil { state.lost = cause }
                    return false
                }
                state.accepted = .failed(cause)
                return true
            }
            if first { settled.signal() }
        }

        func connection(_ connection: MQTTConnection, didReceive topic: String, payload: [UInt8], retained: Bool) {
            let now = MQTTRetirement.now()
            state.withLock { state in
                // A daemon that connects meanwhile says `online` live (not retained): it counts too.
                if topic == availability { state.availability = payload }
                // What is published while subscribed (the empty messages sent here included) arrives without the
                // retain flag (MQTT 3.1.1): only what the broker held is collected.
                guard retained, !payload.isEmpty else { return }
                state.retained.insert(topic)
                state.lastArrival = now
            }
        }
    }
}
