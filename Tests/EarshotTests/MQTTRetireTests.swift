import Foundation
import Testing
import Glibc

/// `earshot mqtt-retire` against a real `mosquitto` broker and a real earshotd: it empties exactly the retained
/// topics of one node (its discovery configs and `earshot/NODE/...`), refuses while that node's daemon is connected,
/// and says in one line why it cannot reach or log in to the broker.
@Suite("MQTTRetire: earshot mqtt-retire empties a retired node's retained topics")
struct MQTTRetireTests {
    /// What the broker retains now, topics sorted: a fresh subscriber on `#` takes the retained messages the broker
    /// sends right after subscribing, until none has come for a second (at most 10 s). (`mosquitto_sub -W` ends by
    /// SIGALRM, which this test process's children may inherit blocked.)
    static func retainedTopics(port: Int) throws -> [String] {
        let subscriber = try MQTTSubscriber(port: port)
        defer { subscriber.stop() }
        var seen = -1
        var quietSince = Date()
        _ = TestWait.until(seconds: 10) {
            let count = subscriber.messages.count
            if count != seen {
                seen = count
                quietSince = Date()
            }
            return seen > 0 && Date().timeIntervalSince(quietSince) >= 1
        }
        return subscriber.messages.filter(\.retained).map(\.topic).sorted()
    }

    /// Another node's topics, and two of a node whose name starts with `garage`: none may be touched.
    static let otherTopics = [
        "earshot/garage2/availability", "earshot/kitchen/availability", "earshot/kitchen/baby_cry/state",
        "homeassistant/binary_sensor/earshot_garage2/glass_break/config",
        "homeassistant/binary_sensor/earshot_kitchen/baby_cry/config",
    ]

    /// What earshotd leaves retained for node `garage` watching `glass_break` (no [notify], no alarm_chirp): its
    /// availability, the group's state, attributes and enabled, capture, sleep, and 7 discovery configs.
    static let garageTopics = [
        "earshot/garage/availability", "earshot/garage/capture/attributes", "earshot/garage/capture/state",
        "earshot/garage/glass_break/enabled", "earshot/garage/glass_break/state", "earshot/garage/sleep/state",
        "homeassistant/binary_sensor/earshot_garage/capture_problem/config",
        "homeassistant/binary_sensor/earshot_garage/glass_break/config",
        "homeassistant/button/earshot_garage/test_alert/config", "homeassistant/event/earshot_garage/events/config",
        "homeassistant/sensor/earshot_garage/level/config",
        "homeassistant/switch/earshot_garage/glass_break_enabled/config",
        "homeassistant/switch/earshot_garage/sleep_session/config",
    ]

    static func publishOthers(port: Int) throws {
        for topic in otherTopics { try MQTTPublish.send(port: port, topic: topic, payload: "kept", retain: true) }
    }

    @Test("A stopped daemon's node: --dry-run lists its topics and changes nothing; then every one is emptied, the others kept",
          .needsMosquitto, .needsEarshotdBuilt, .needsEarshotBuilt)
    func retiresStoppedNode() throws {
        let broker = try MosquittoBroker()
        try Self.publishOthers(port: broker.port)
        let setup = try MQTTDaemonSetup(port: broker.port, node: "garage", watch: "glass_break")
        defer { setup.remove() }
        let watcher = try MQTTSubscriber(port: broker.port)
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-"], standardInput: true)
        #expect(watcher.waitFor(seconds: 30) { messages in
            Self.garageTopics.allSatisfy { topic in messages.contains { $0.topic == topic && !$0.payload.isEmpty } }
        }, "\(watcher.messages.map(\.topic)) \(daemon.errorText)")
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
        #expect(watcher.waitFor(seconds: 10) { _ in watcher.messages(on: "earshot/garage/availability").last?.payload == "offline" })
        watcher.stop()
        let before = try Self.retainedTopics(port: broker.port)
        #expect(before == (Self.garageTopics + Self.otherTopics).sorted())

        let dry = try #require(try EarshotCLI.run(["mqtt-retire", "--config", setup.config.path, "--dry-run"], in: setup.directory, timeout: 60))
        #expect(dry.status == 0, "\(dry.standardError)")
        #expect(dry.standardError == "")
        #expect(dry.outputLines == Self.garageTopics.sorted()
            + ["13 retained topics of node garage on 127.0.0.1:\(broker.port) (dry run: nothing emptied)"])
        #expect(try Self.retainedTopics(port: broker.port) == before)

        let retire = try #require(try EarshotCLI.run(["mqtt-retire", "--config", setup.config.path], in: setup.directory, timeout: 60))
        #expect(retire.status == 0, "\(retire.standardError)")
        #expect(retire.standardError == "")
        #expect(retire.outputLines == Self.garageTopics.sorted() + ["13 retained topics of node garage emptied on 127.0.0.1:\(broker.port)"])
        #expect(try Self.retainedTopics(port: broker.port) == Self.otherTopics.sorted())

        // Again: nothing is left, and the line says where it looked.
        let again = try #require(try EarshotCLI.run(["mqtt-retire", "--config", setup.config.path], in: setup.directory, timeout: 60))
        #expect(again.status == 0)
        #expect(again.outputLines == [
            "0 retained topics of node garage emptied on 127.0.0.1:\(broker.port) (none found under homeassistant/+/earshot_garage/# and earshot/garage/#: check --node, or [mqtt] node, topic_prefix and discovery_prefix)",
        ])
        // --node names another node of the same broker: kitchen's two go, garage2's stay.
        let kitchen = try #require(try EarshotCLI.run(["mqtt-retire", "--config", setup.config.path, "--node", "kitchen"], in: setup.directory, timeout: 60))
        #expect(kitchen.status == 0, "\(kitchen.standardError)")
        #expect(kitchen.outputLines == [
            "earshot/kitchen/availability", "earshot/kitchen/baby_cry/state",
            "homeassistant/binary_sensor/earshot_kitchen/baby_cry/config",
            "3 retained topics of node kitchen emptied on 127.0.0.1:\(broker.port)",
        ])
        #expect(try Self.retainedTopics(port: broker.port) == [
            "earshot/garage2/availability", "homeassistant/binary_sensor/earshot_garage2/glass_break/config",
        ])
    }

    @Test("While the node's daemon is connected: refused in one line, status 75, nothing emptied; --dry-run says so",
          .needsMosquitto, .needsEarshotdBuilt, .needsEarshotBuilt)
    func refusesWhileOnline() throws {
        let broker = try MosquittoBroker()
        let setup = try MQTTDaemonSetup(port: broker.port, node: "garage", watch: "glass_break")
        defer { setup.remove() }
        let watcher = try MQTTSubscriber(port: broker.port)
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-"], standardInput: true)
        defer { try? daemon.input.fileHandleForWriting.close() }
        #expect(watcher.waitFor(seconds: 30) { messages in
            Self.garageTopics.allSatisfy { topic in messages.contains { $0.topic == topic && !$0.payload.isEmpty } }
        }, "\(watcher.messages.map(\.topic)) \(daemon.errorText)")

        let refused = try #require(try EarshotCLI.run(["mqtt-retire", "--config", setup.config.path], in: setup.directory, timeout: 60))
        #expect(refused.status == 75)
        #expect(refused.standardOutput == "")
        #expect(refused.errorLines == [
            "earshot: node garage is online on 127.0.0.1:\(broker.port) (earshot/garage/availability is \"online\"): its earshotd would publish the topics again; stop it first (e.g. sudo systemctl disable --now earshotd on the machine it runs on), then run mqtt-retire again",
        ])
        #expect(try Self.retainedTopics(port: broker.port) == Self.garageTopics.sorted())
        // Nothing was emptied while it ran: no empty message reached the broker's subscribers.
        #expect(watcher.messages.filter { $0.payload.isEmpty }.map(\.topic) == [])

        let dry = try #require(try EarshotCLI.run(["mqtt-retire", "--config", setup.config.path, "--dry-run"], in: setup.directory, timeout: 60))
        #expect(dry.status == 0)
        #expect(dry.outputLines.last == "13 retained topics of node garage on 127.0.0.1:\(broker.port) (dry run: nothing emptied; node garage is online, so mqtt-retire would refuse until its earshotd stops)")
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
    }

    @Test("No broker on the port: one line, status 69; a wrong password: one line, status 78",
          .needsMosquitto, .needsEarshotBuilt)
    func unreachableAndRefused() throws {
        let closed = try FreePort.pick()
        let nowhere = try MQTTDaemonSetup(port: closed, node: "garage")
        defer { nowhere.remove() }
        let unreachable = try #require(try EarshotCLI.run(["mqtt-retire", "--config", nowhere.config.path], in: nowhere.directory, timeout: 60))
        #expect(unreachable.status == 69)
        #expect(unreachable.standardOutput == "")
        #expect(unreachable.errorLines == [
            "earshot: [mqtt] broker 127.0.0.1:\(closed): Connection refused (is the broker running? check [mqtt] host and port)",
        ])

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-retire-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let passwords = directory.appendingPathComponent("passwd")
        let made = try EarshotCLI.runProcess(URL(fileURLWithPath: "/usr/bin/mosquitto_passwd"), ["-b", "-c", passwords.path, "earshot", "right-one"], timeout: 20)
        #expect(made.status == 0, "\(made.standardError)")
        let broker = try MosquittoBroker(extraLines: ["allow_anonymous false", "password_file \(passwords.path)"])
        let secret = directory.appendingPathComponent("secret")
        try ServiceSecretFile.write("wrong\n", to: secret.path)
        let setup = try MQTTDaemonSetup(port: broker.port, node: "garage", extraMQTT: ["username = earshot", "password_file = \(secret.path)"])
        defer { setup.remove() }
        let wrong = try #require(try EarshotCLI.run(["mqtt-retire", "--config", setup.config.path], in: setup.directory, timeout: 60))
        #expect(wrong.status == 78)
        #expect(wrong.standardOutput == "")
        #expect(wrong.errorLines == [
            "earshot: [mqtt] broker 127.0.0.1:\(broker.port): the broker refused the connection: Connection Refused: not authorised (check [mqtt] username and password_file)",
        ])
    }
}
