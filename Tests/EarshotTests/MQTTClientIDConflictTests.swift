import Foundation
import Synchronization
import Testing
import EarshotSupport
import EarshotDetection
import EarshotOutputs

/// Audit 13 F5: two machines with the same host name share one node and client id by default; the broker drops
/// each whenever the other connects, for as long as both run. Once the daemon has named the likely cause (and the
/// fix), the drops and reconnects of that fight are not said again until a connection lasts
/// ``MQTTSettings/clientIDConflictStableSeconds``; then one `mqtt_connected` closes the story. Real mosquitto brokers,
/// real libmosquitto clients (two in-process sinks), and real earshotd processes.
@Suite("MQTT: two clients with one client id")
struct MQTTClientIDConflictTests {
    static let lost = "the connection was lost (the broker stopped or restarted?)"
    static func hint(_ node: String) -> String {
        "the broker accepted the connection and dropped it within 10 s, 2 times in a row (another client using the client id earshot-\(node)? each daemon needs its own: set [mqtt] node to a unique name on each machine, as two machines with the same host name share the default node, or set [mqtt] client_id)"
    }

    /// The health events a sink reported.
    final class HealthLog: Sendable {
        private let events = Mutex<[HealthEvent]>([])
        func append(_ event: HealthEvent) { events.withLock { $0.append(event) } }
        var all: [HealthEvent] { events.withLock { $0 } }
    }

    /// A started sink for node `twin` on `port`, reporting health to `reports`.
    static func sink(port: Int, stableSeconds: Double, reports: HealthLog) throws -> MQTTSink {
        var settings = MQTTSettings()
        settings.enabled = true
        settings.host = "127.0.0.1"
        settings.port = port
        settings.node = "twin"
        settings.keepaliveSeconds = 5
        settings.clientIDConflictStableSeconds = stableSeconds
        let sink = try MQTTSink(settings: settings, commands: { _ in }, log: { _, _ in })
        sink.start(reportHealth: { health in reports.append(health) })
        return sink
    }

    @Test("two sinks fighting over one client id: connected, lost, connected, the hint naming [mqtt] node; then nothing until the survivor's connection lasts; then one mqtt_connected",
          .needsMosquitto)
    func quietUntilStable() throws {
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port, topic: "earshot/twin/availability")
        let first = HealthLog(), second = HealthLog()
        let survivor = try Self.sink(port: broker.port, stableSeconds: 10, reports: first)
        defer { survivor.stop() }
        #expect(TestWait.until(seconds: 10) { first.all.count == 1 })
        let other = try Self.sink(port: broker.port, stableSeconds: 10, reports: second)
        defer { other.stop() }
        func said(_ reports: HealthLog) -> [HealthEvent] { reports.all }
        #expect(TestWait.until(seconds: 30) { said(first).count >= 4 && said(second).count >= 4 }, "\(said(first).map(\.message)) \(said(second).map(\.message))")
        // The fight goes on: each drop puts the loser's Last Will (offline) on the broker, again and again (each
        // connection lasts until the other's next attempt, at most 5 s: less than the 10 s asked here)...
        #expect(subscriber.waitFor(seconds: 60) { $0.filter { $0.payload == "offline" }.count >= 8 },
                "\(subscriber.messages.map(\.payload))")
        // ...and neither sink has said anything more.
        let brokerText = "127.0.0.1:\(broker.port)"
        for reports in [first, second] {
            let health = said(reports)
            #expect(health.map(\.state) == [.mqttConnected, .mqttUnavailable, .mqttConnected, .mqttUnavailable], "\(health.map(\.message))")
            #expect(health.compactMap { $0.details["cause"]?.stringValue } == [Self.lost, Self.hint("twin")])
            #expect(health.last?.message.hasPrefix("MQTT broker \(brokerText): \(Self.hint("twin")); retrying in ") == true, "\(health.last?.message ?? "")")
            #expect(health.last?.message.hasSuffix(" now, up to 1000); until a connection lasts 10 s, its drops and reconnects are not said again") == true, "\(health.last?.message ?? "")")
        }
        // One gives up the id: the other's next connection lasts, and that is said once.
        other.stop()
        #expect(TestWait.until(seconds: 40) { said(first).count == 5 }, "\(said(first).map(\.message))")
        let last = try #require(said(first).last)
        #expect(last.state == .mqttConnected)
        #expect(last.message == "connected to the MQTT broker \(brokerText) as earshot-twin, publishing under earshot/twin, and the connection has lasted 10 s: no other client takes the client id now")
        #expect(said(second).count == 4)
    }

    @Test("two earshotd with one node: each says mqtt_unavailable twice (the second naming [mqtt] node) and mqtt_connected twice, however long they fight",
          .needsMosquitto, .needsEarshotdBuilt)
    func twoDaemonsSayItOnce() throws {
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port, topic: "earshot/kitchen/availability")
        let setups = try (0..<2).map { _ in try MQTTDaemonSetup(port: broker.port, node: "kitchen") }
        defer { for setup in setups { setup.remove() } }
        let daemons = try setups.map {
            try DaemonProcess(["--config", $0.config.path, "--foreground", "--input", "-"], standardInput: true)
        }
        func health(_ daemon: DaemonProcess, _ state: String) -> [[String: Any]] {
            daemon.objects.filter { $0["type"] as? String == "health" && $0["state"] as? String == state }
        }
        for daemon in daemons {
            #expect(TestWait.until(seconds: 40) { health(daemon, "mqtt_unavailable").count >= 2 }, "\(daemon.errorText)")
        }
        // Many more drops (before the fix, each was one more mqtt_unavailable and mqtt_connected pair).
        #expect(subscriber.waitFor(seconds: 60) { $0.filter { $0.payload == "offline" }.count >= 8 },
                "\(subscriber.messages.map(\.payload))")
        for daemon in daemons {
            try daemon.input.fileHandleForWriting.close()
            #expect(daemon.wait(seconds: 20) == 0)
        }
        for daemon in daemons {
            let causes = health(daemon, "mqtt_unavailable").compactMap { $0["cause"] as? String }
            #expect(causes == [Self.lost, Self.hint("kitchen")], "\(causes)")
            #expect(health(daemon, "mqtt_connected").count == 2, "\(daemon.errorText)")
        }
    }
}
