import Foundation
import Testing
import Glibc

/// What `mqtt_unavailable` says when the broker ends a connection it had accepted: a broker that stops or restarts
/// (once) is not mistaken for another client taking the client id (again and again), against real `mosquitto`
/// brokers and real daemons.
@Suite("MQTT: the cause of a lost connection")
struct MQTTConnectionLossTests {
    static let lost = "the connection was lost (the broker stopped or restarted?)"

    static func health(_ daemon: DaemonProcess, _ state: String) -> [[String: Any]] {
        daemon.objects.filter { $0["type"] as? String == "health" && $0["state"] as? String == state }
    }

    @Test("A broker stopped 1 s after accepting the daemon and started again: the connection was lost, no client-id hint",
          .needsMosquitto, .needsEarshotdBuilt)
    func brokerRestartRightAfterConnecting() throws {
        let broker = try MosquittoBroker()
        let setup = try MQTTDaemonSetup(port: broker.port, node: "kitchen")
        defer { setup.remove() }
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-"], standardInput: true)
        #expect(TestWait.until(seconds: 20) { !Self.health(daemon, "mqtt_connected").isEmpty }, "\(daemon.errorText)")
        Thread.sleep(forTimeInterval: 1)
        broker.stop()
        #expect(TestWait.until(seconds: 10) { !Self.health(daemon, "mqtt_unavailable").isEmpty }, "\(daemon.errorText)")
        Thread.sleep(forTimeInterval: 2)
        try broker.start()
        #expect(TestWait.until(seconds: 20) { Self.health(daemon, "mqtt_connected").count == 2 }, "\(daemon.errorText)")
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 20) == 0)

        let unavailable = Self.health(daemon, "mqtt_unavailable")
        #expect(unavailable.count == 1, "\(unavailable)")
        #expect(unavailable.first?["cause"] as? String == Self.lost)
        let message = try #require(unavailable.first?["message"] as? String)
        #expect(message.hasPrefix("MQTT broker 127.0.0.1:\(broker.port): \(Self.lost); retrying in 1 s (then twice as long each time, up to every 5 s); detection goes on and messages wait ("), "\(message)")
        #expect(!daemon.errorText.contains("client id"), "\(daemon.errorText)")
    }

    @Test("Two daemons with the same client id: each is dropped right after every connect; the second drop in a row names the client id",
          .needsMosquitto, .needsEarshotdBuilt)
    func twoClientsWithOneClientID() throws {
        let broker = try MosquittoBroker()
        let setups = try (0..<2).map { _ in try MQTTDaemonSetup(port: broker.port, node: "kitchen") }
        defer { for setup in setups { setup.remove() } }
        let daemons = try setups.map {
            try DaemonProcess(["--config", $0.config.path, "--foreground", "--input", "-"], standardInput: true)
        }
        for daemon in daemons {
            #expect(TestWait.until(seconds: 40) { Self.health(daemon, "mqtt_unavailable").count >= 2 }, "\(daemon.errorText)")
        }
        for daemon in daemons {
            try daemon.input.fileHandleForWriting.close()
            #expect(daemon.wait(seconds: 20) == 0)
        }
        let hint = "the broker accepted the connection and dropped it within 10 s, 2 times in a row (another client using the client id earshot-kitchen? each daemon needs its own: set [mqtt] node to a unique name on each machine, as two machines with the same host name share the default node, or set [mqtt] client_id)"
        for daemon in daemons {
            let causes = Self.health(daemon, "mqtt_unavailable").compactMap { $0["cause"] as? String }
            // The first drop may be a broker restarting; the second one right after a reconnect is not.
            #expect(Array(causes.prefix(2)) == [Self.lost, hint], "\(causes)")
        }
    }
}
