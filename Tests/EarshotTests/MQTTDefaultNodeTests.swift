import Foundation
import Testing
import EarshotOutputs

/// Two `earshotd@` instances on one host used to share the default node (the host name) and with it the client
/// id: the broker dropped each in turn (trial 7 #10). The template unit sets `EARSHOT_DEFAULT_NODE` to the
/// instance name, which is the node unless `[mqtt] node` says otherwise.
@Suite("MQTT default node: EARSHOT_DEFAULT_NODE (earshotd@NAME) before the host name")
struct MQTTDefaultNodeTests {
    static func config(in directory: URL, port: Int, node: String?) throws -> URL {
        let socket = directory.appendingPathComponent("e-\(node ?? "default").sock").path
        let url = directory.appendingPathComponent("\(node ?? "default").conf")
        var lines = ["[output]", "socket = \(socket)", "journal = false", "[history]", "enabled = false", "[detection]", "watch = smoke_alarm",
                     "[mqtt]", "enabled = true", "host = 127.0.0.1", "port = \(port)", "keepalive = 5"]
        if let node { lines.append("node = \(node)") }
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
        let garage = try Self.config(in: directory, port: broker.port, node: "garage")
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
    }
}
