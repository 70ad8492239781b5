import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotOutputs

extension DaemonConfiguration {
    /// `[mqtt]`: see ``MQTTSettings`` (the settings belong to the component that uses them).
    package typealias MQTT = MQTTSettings

    /// Reads `[mqtt] password_file` (when MQTT is enabled and a file is named), after checking that the TLS files
    /// named are readable regular files.
    /// - Throws: `EarshotError(.config)` (78) naming where the key was set, e.g. `/etc/earshot/earshotd.conf:12:
    ///   [mqtt] password_file = /etc/earshot/mqtt-password: no such file (create it with the password on one line,
    ///   readable by the daemon's user alone, e.g. chown root:earshot and chmod 640)`, or `...:9: [mqtt] cafile = /etc/earshot/ca.pem: no such file (check the path; a PEM file)`.
    package mutating func readMQTTPassword() throws(EarshotError) {
        guard mqtt.enabled else { return }
        if let problem = mqtt.tlsFileProblems.first {
            let origin = locations["mqtt.\(problem.key)"].map { "\($0): " } ?? ""
            throw EarshotError(.config, "\(origin)[mqtt] \(problem.key) = \(problem.path): \(problem.reason)")
        }
        do {
            try mqtt.readPassword()
        } catch {
            let origin = locations["mqtt.password_file"].map { "\($0): " } ?? ""
            let detail = error.message.hasPrefix(mqtt.passwordFile + ": ")
                ? String(error.message.dropFirst(mqtt.passwordFile.count + 2)) : error.message
            throw EarshotError(.config, "\(origin)[mqtt] password_file = \(mqtt.passwordFile): \(detail)")
        }
    }

    /// Connects to the `[mqtt]` broker once, as `--check-config` does: with a client id of its own (so that a
    /// running daemon is not disconnected), no Last Will, nothing published.
    ///
    /// - Parameter timeout: seconds to wait for the broker's answer.
    /// - Returns: `host:port` of the broker that accepted.
    /// - Throws: `EarshotError(.config)` (78) when the broker refuses the credentials or the client id;
    ///   `EarshotError(.unavailable)` (69) when it cannot be reached (refused, no route, name not resolved, TLS
    ///   failure, no answer within `timeout`), e.g. `[mqtt] broker localhost:1883: Connection refused (is the
    ///   broker running? check [mqtt] host and port)`.
    package func checkMQTTBroker(timeout: Double = 5) throws(EarshotError) -> String {
        let probe = BrokerProbe()
        let connection = try MQTTConnection(
            endpoint: MQTTSink.endpoint(mqtt, clientID: String("\(mqtt.clientID)-check-\(getpid())".prefix(128)), will: nil),
            outboxLimit: 1)
        try connection.start(delegate: probe)
        let outcome = probe.wait(timeout: timeout)
        connection.stop(timeout: 1)
        let broker = connection.endpoint.description
        switch outcome {
        case .connected:
            return broker
        case .failed(let cause):
            throw Self.brokerError(broker, cause: cause)
        case nil:
            throw Self.brokerError(broker, silentFor: timeout)
        }
    }

    /// The error for a broker that could not be reached or refused the connection, as ``checkMQTTBroker(timeout:)``
    /// and `earshot mqtt-retire` say it: `EarshotError(.config)` (78) when the broker refused (credentials, client
    /// id), else `.unavailable` (69), e.g. `[mqtt] broker localhost:1883: Connection refused (is the broker running?
    /// check [mqtt] host and port)`.
    /// - Parameters:
    ///   - broker: `host:port` (``MQTTConnection/Endpoint/description``).
    ///   - cause: what ``MQTTConnectionDelegate/connection(_:didFail:retryIn:)`` said.
    package static func brokerError(_ broker: String, cause: String) -> EarshotError {
        let refused = cause.hasPrefix("the broker refused")
        // A cause that carries its own advice ("(check ...)") or a TLS failure needs no more.
        let advice = refused || cause.contains("TLS") || cause.hasSuffix(")") ? "" : " (is the broker running? check [mqtt] host and port)"
        return EarshotError(refused ? .config : .unavailable, "[mqtt] broker \(broker): \(cause)\(advice)")
    }

    /// The error for a broker that said nothing within `seconds` (69).
    package static func brokerError(_ broker: String, silentFor seconds: Double) -> EarshotError {
        EarshotError(.unavailable, "[mqtt] broker \(broker): no answer within \(Int(seconds)) s (check [mqtt] host, port and tls)")
    }
}

/// Waits for the first thing a connection says.
private final class BrokerProbe: MQTTConnectionDelegate {
    enum Outcome: Sendable { case connected, failed(String) }

    private let outcome = Mutex<Outcome?>(nil)
    private let said = DispatchSemaphore(value: 0)

    func wait(timeout: Double) -> Outcome? {
        _ = said.wait(timeout: .now() + timeout)
        return outcome.withLock { $0 }
    }

    private func settle(_ value: Outcome) {
        let first = outcome.withLock { current -> Bool in
            guard current == nil else { return false }
            current = value
            return true
        }
        if first { said.signal() }
    }

    func connectionDidConnect(_ connection: MQTTConnection) -> MQTTConnection.Birth {
        settle(.connected)
        return MQTTConnection.Birth()
    }

    func connection(_ connection: MQTTConnection, didFail cause: String, retryIn: Double?) {
        settle(.failed(cause))
    }

    func connection(_ connection: MQTTConnection, didReceive topic: String, payload: [UInt8], retained: Bool) {}
}
