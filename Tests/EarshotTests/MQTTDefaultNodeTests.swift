import Foundation
import Testing
import EarshotOutputs

/// Two `earshotd@` instances on one host used to share the default node (the host name) and with it the client
/// id: the broker dropped each in turn (trial 7 #10). The template unit sets `EARSHOT_DEFAULT_NODE` to the
/// instance name, which is the node unless `[mqtt] node` says otherwise.
@Suite("MQTT default node: EARSHOT_DEFAULT_NODE (earshotd@NAME) before the host name")
struct MQTTDefaultNodeTests {
    static func config(in directory: URL, port: Int, node: String?, extra: [String] = []) throws -> URL {
        let socket = directory.appendingPathComponent("e-\(node ?? "default").sock").path
        let url = directory.appendingPathComponent("\(node ?? "default").conf")
        var lines = ["[output]", "socket = \(socket)", "journal = false", "[history]", "enabled = false", "[detection]", "watch = smoke_alarm",
                     "[mqtt]", "enabled = true", "host = 127.0.0.1", "port = \(port)", "keepalive = 5"]
        if let node { lines.append("node = \(node)") }
        lines += extra
        try (lines.joined(separator: "\n") + "\n").write(to: url, atomically: true, encoding: .utf8)
        return url
    }

    @Test("two daemons without [mqtt] node, as earshotd@kitchen and earshotd@nursery: two nodes, two client ids, no clash; [mqtt] node still wins",
          .needsMosquitto, .needsEarshotdBuilt)
    func instancesGetTheirOwnNode() throws {
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-node-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let shared = try Self.config(in: directory, port: broker.port, node: nil)
        let garage = try Self.config(in: directory, port: broker.port, node: "garage", extra: ["area = Garage & workshop"])
        func environment(_ instance: String) -> [String: String] {
            var environment = ProcessInfo.processInfo.environment
            environment[MQTTSettings.defaultNodeVariable] = instance
            return environment
        }
        // Both read the same file (no node in it), as `earshotd@kitchen` and `earshotd@nursery` would read copies of it.
        let kitchen = try DaemonProcess(["--config", shared.path, "--foreground", "--input", "-", "--socket", directory.appendingPathComponent("k.sock").path],
                                        environment: environment("kitchen"), standardInput: true)
        let nursery = try DaemonProcess(["--config", shared.path, "--foreground", "--input", "-", "--socket", directory.appendingPathComponent("n.sock").path],
                                        environment: environment("nursery"), standardInput: true)
        let named = try DaemonProcess(["--config", garage.path, "--foreground", "--input", "-"], environment: environment("other"), standardInput: true)
        let online = subscriber.waitFor(seconds: 30) { messages in
            ["kitchen", "nursery", "garage"].allSatisfy { node in
                messages.contains { $0.topic == "earshot/\(node)/availability" && $0.payload == "online" }
            }
        }
        #expect(online, "\(kitchen.errorText)\n\(nursery.errorText)\n\(named.errorText)")
        for daemon in [kitchen, nursery, named] { try daemon.input.fileHandleForWriting.close() }
        for daemon in [kitchen, nursery, named] { #expect(daemon.wait(seconds: 30) == 0, "\(daemon.errorText)") }
        #expect(kitchen.errorText.contains("connected to the MQTT broker 127.0.0.1:\(broker.port) as earshot-kitchen, publishing under earshot/kitchen"), "\(kitchen.errorText)")
        #expect(nursery.errorText.contains("as earshot-nursery, publishing under earshot/nursery"), "\(nursery.errorText)")
        #expect(named.errorText.contains("as earshot-garage, publishing under earshot/garage"), "\(named.errorText)")
        for daemon in [kitchen, nursery, named] { #expect(!daemon.errorText.contains("mqtt_unavailable"), "\(daemon.errorText)") }
        for node in ["kitchen", "nursery", "garage"] {
            #expect(subscriber.messages(on: "earshot/\(node)/availability").map(\.payload) == ["online", "offline"], "\(node)")
        }
        #expect(subscriber.messages(on: "earshot/other/availability").isEmpty)
        #expect(MQTTSettings.node(fromHostName: "Living Room") == "living_room")
        // Home Assistant's area for a new device: the instance name, unless [mqtt] area names one.
        #expect(Self.suggestedAreas(subscriber, node: "kitchen") == ["kitchen"])
        #expect(Self.suggestedAreas(subscriber, node: "nursery") == ["nursery"])
        #expect(Self.suggestedAreas(subscriber, node: "garage") == ["Garage & workshop"])
    }

    /// The `suggested_area` of every discovery config of `node` received (`"none"` for a config without one), once
    /// each.
    static func suggestedAreas(_ subscriber: MQTTSubscriber, node: String) -> Set<String> {
        let configs = subscriber.messages.filter { $0.topic.hasPrefix("homeassistant/") && $0.topic.contains("/earshot_\(node)/") && !$0.payload.isEmpty }
        return Set(configs.map { (($0.json?["device"] as? [String: Any])?["suggested_area"] as? String) ?? "none" })
    }

    @Test("suggested_area: none for earshotd outside an instance (no EARSHOT_DEFAULT_NODE), none with area = (empty) under one",
          .needsMosquitto, .needsEarshotdBuilt)
    func noArea() throws {
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-area-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var plain = ProcessInfo.processInfo.environment
        plain[MQTTSettings.defaultNodeVariable] = nil
        var instance = plain
        instance[MQTTSettings.defaultNodeVariable] = "hall"
        let single = try DaemonProcess(
            ["--config", try Self.config(in: directory, port: broker.port, node: "attic").path, "--foreground", "--input", "-"],
            environment: plain, standardInput: true)
        let emptied = try DaemonProcess(
            ["--config", try Self.config(in: directory, port: broker.port, node: nil, extra: ["area ="]).path, "--foreground", "--input", "-"],
            environment: instance, standardInput: true)
        let online = subscriber.waitFor(seconds: 30) { messages in
            ["attic", "hall"].allSatisfy { node in
                messages.contains { $0.topic == "earshot/\(node)/availability" && $0.payload == "online" }
            }
        }
        #expect(online, "\(single.errorText)\n\(emptied.errorText)")
        for daemon in [single, emptied] { try daemon.input.fileHandleForWriting.close() }
        for daemon in [single, emptied] { #expect(daemon.wait(seconds: 30) == 0, "\(daemon.errorText)") }
        #expect(Self.suggestedAreas(subscriber, node: "attic") == ["none"])
        #expect(Self.suggestedAreas(subscriber, node: "hall") == ["none"])
        // Both published their configs (the smoke alarm's binary sensor among them).
        #expect(subscriber.messages.contains { $0.topic == "homeassistant/binary_sensor/earshot_attic/smoke_alarm/config" })
        #expect(subscriber.messages.contains { $0.topic == "homeassistant/binary_sensor/earshot_hall/smoke_alarm/config" })
    }
}
