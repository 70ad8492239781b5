import Foundation
import Testing
import Glibc
import EarshotSupport
import EarshotAudio
import EarshotModel
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("MQTT: settings, outbox, discovery payloads and commands")
struct MQTTUnitTests {
    static func parse(_ mqtt: String) throws(EarshotError) -> DaemonConfiguration {
        try DaemonConfiguration.parse("[mqtt]\n" + mqtt, source: "/etc/earshot/earshotd.conf")
    }

    static func error(_ mqtt: String) -> String? {
        do {
            _ = try parse(mqtt)
            return nil
        } catch {
            return "\(error.exitStatus) \(error.message)"
        }
    }

    @Test("[mqtt] defaults: off, localhost:1883, node from the host name, earshot-NODE, 30 s keep-alive")
    func defaults() throws {
        let settings = try Self.parse("").mqtt
        #expect(!settings.enabled)
        #expect(settings.host == "localhost")
        #expect(settings.port == 1883)
        #expect(settings.node == MQTTSettings.defaultNode)
        #expect(settings.clientID == "earshot-\(settings.node)")
        #expect(settings.topicPrefix == "earshot")
        #expect(settings.discovery)
        #expect(settings.discoveryPrefix == "homeassistant")
        #expect(settings.keepaliveSeconds == 30)
        #expect(try Self.parse("tls = true\n").mqtt.port == 8883)
        #expect(try Self.parse("tls = true\nport = 1884\n").mqtt.port == 1884)
        #expect(MQTTSettings.node(fromHostName: "Living-Room.local") == "living-room_local")
        #expect(MQTTSettings.node(fromHostName: "...") == "earshot")
    }

    @Test("[mqtt] bad values: the key, file:line and the fix, exit 78")
    func badValues() {
        #expect(Self.error("password = hunter2\n") == "78 /etc/earshot/earshotd.conf:2: [mqtt] password: an inline password is refused (the configuration file is often world-readable); write it on the first line of a file only the daemon's user can read (chown root:earshot and chmod 640) and set password_file = /etc/earshot/mqtt-password")
        #expect(Self.error("port = 0\n") == "78 /etc/earshot/earshotd.conf:2: [mqtt] port = 0: must be a whole number in [1, 65535]")
        #expect(Self.error("node = Kitchen Mic\n") == "78 /etc/earshot/earshotd.conf:2: [mqtt] node = Kitchen Mic: must be 1 to 64 of a-z, 0-9, _ and -, e.g. kitchen")
        #expect(Self.error("topic_prefix = home/#\n") == "78 /etc/earshot/earshotd.conf:2: [mqtt] topic_prefix = home/#: must be topic levels without wildcards, e.g. earshot (no +, #, spaces, leading $, or leading/trailing /)")
        #expect(Self.error("topic_prefix = $SYS\n")?.hasPrefix("78 /etc/earshot/earshotd.conf:2: [mqtt] topic_prefix = $SYS: must be topic levels without wildcards") == true)
        #expect(Self.error("keepalive = 2\n") == "78 /etc/earshot/earshotd.conf:2: [mqtt] keepalive = 2: must be a whole number in [5, 3600] seconds")
        #expect(Self.error("password_file = secret\n") == "78 /etc/earshot/earshotd.conf:2: [mqtt] password_file = secret: must be an absolute file path, e.g. /etc/earshot/mqtt-password")
        #expect(Self.error("tls = true\ncertfile = /etc/earshot/c.pem\n") == "78 /etc/earshot/earshotd.conf:3: [mqtt] certfile and keyfile go together (set both, or neither)")
        #expect(Self.error("cafile = /etc/earshot/ca.pem\n") == "78 /etc/earshot/earshotd.conf:2: [mqtt] cafile, certfile and keyfile need tls = true")
        #expect(Self.error("hots = broker\n")?.hasPrefix("78 /etc/earshot/earshotd.conf:2: [mqtt] hots: unknown key (did you mean host? keys: enabled, host, port,") == true)
    }

    @Test("password_file: read at start; missing or empty is one line naming the key and its file:line")
    func passwordFile() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-pw-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = directory.appendingPathComponent("password")
        var configuration = try Self.parse("enabled = true\nusername = earshot\npassword_file = \(file.path)\n")
        #expect(throws: EarshotError.self) { try configuration.readMQTTPassword() }
        do {
            try configuration.readMQTTPassword()
        } catch {
            #expect(error.message == "/etc/earshot/earshotd.conf:4: [mqtt] password_file = \(file.path): no such file (create it with the password on one line, readable by the daemon's user alone, e.g. chown root:earshot and chmod 640)")
            #expect(error.exitStatus == 78)
        }
        try "\n".write(to: file, atomically: true, encoding: .utf8)
        do {
            try configuration.readMQTTPassword()
            Issue.record("an empty password file was accepted")
        } catch {
            #expect(error.message == "/etc/earshot/earshotd.conf:4: [mqtt] password_file = \(file.path): is empty (write the password on its first line)")
        }
        try "s3cret pass\r\nignored\n".write(to: file, atomically: true, encoding: .utf8)
        try configuration.readMQTTPassword()
        #expect(configuration.mqtt.password == "s3cret pass")
        // TLS files are checked with it: a missing one is a configuration error naming its key and line.
        var tls = try Self.parse("enabled = true\ntls = true\ncafile = \(directory.path)/ca.pem\n")
        do {
            try tls.readMQTTPassword()
            Issue.record("a missing cafile was accepted")
        } catch {
            #expect(error.message == "/etc/earshot/earshotd.conf:4: [mqtt] cafile = \(directory.path)/ca.pem: no such file (check the path; a PEM file)")
            #expect(error.exitStatus == 78)
        }
    }

    static func message(_ topic: String, qos: Int32 = 1, retain: Bool = false, critical: Bool = false) -> MQTTMessage {
        MQTTMessage(topic: topic, text: topic, qos: qos, retain: retain, critical: critical)
    }

    @Test("[mqtt] area: free text of 1 to 64 UTF-8 bytes, empty for none; too long or a control character is one line")
    func area() throws {
        #expect(try Self.parse("area = Living room\n").mqtt.area == "Living room")
        let sixtyFour = String(repeating: "ü", count: 32)
        #expect(try Self.parse("area = \(sixtyFour)\n").mqtt.area == sixtyFour)
        #expect(try Self.parse("area =\n").mqtt.area == nil)
        // The test runs outside earshotd@NAME (no EARSHOT_DEFAULT_NODE): no area by default.
        #expect(try Self.parse("").mqtt.area == nil)
        #expect(Self.error("area = \(sixtyFour)!\n") == "78 /etc/earshot/earshotd.conf:2: [mqtt] area = \(sixtyFour)!: must be 1 to 64 bytes of text without control characters, e.g. Kitchen (empty: no area)")
        var settings = MQTTSettings()
        #expect(settings.set(key: "area", value: "Hall\u{7F}") == "must be 1 to 64 bytes of text without control characters, e.g. Kitchen (empty: no area)")
        #expect(settings.set(key: "area", value: "Hall\tway") == "must be 1 to 64 bytes of text without control characters, e.g. Kitchen (empty: no area)")
        #expect(settings.area == nil)
    }

    @Test("Outbox: order kept, acknowledged entries leave, a lost connection resends all unacknowledged in order")
    func outboxOrder() {
        var outbox = MQTTOutbox(limit: 10)
        for index in 0..<5 { outbox.append(Self.message("e\(index)")) }
        outbox.append(Self.message("level", qos: 0))
        for (mid, entry) in outbox.unsent.enumerated() { outbox.markSent(sequence: entry.sequence, mid: Int32(mid + 1)) }
        outbox.acknowledge(mid: 1)
        outbox.acknowledge(mid: 3)
        #expect(outbox.unsent.isEmpty)
        outbox.connectionLost()
        #expect(outbox.unsent.map(\.message.topic) == ["e1", "e3", "e4"])
    }

    @Test("Outbox: a retained message replaces an unsent one of its topic; a full outbox drops the oldest non-critical")
    func outboxBound() {
        var outbox = MQTTOutbox(limit: 4)
        outbox.append(Self.message("smoke", critical: true))
        outbox.append(Self.message("state", retain: true))
        outbox.append(Self.message("a"))
        outbox.append(Self.message("state", retain: true))
        #expect(outbox.entries.map(\.message.topic) == ["smoke", "a", "state"])
        outbox.append(Self.message("b"))
        outbox.append(Self.message("c"))
        #expect(outbox.entries.map(\.message.topic) == ["smoke", "state", "b", "c"])
        #expect(outbox.dropped == 1)
        var critical = MQTTOutbox(limit: 2)
        for index in 0..<5 { critical.append(Self.message("co\(index)", critical: true)) }
        #expect(critical.count == 5)
        #expect(critical.dropped == 0)
    }

    @Test("Outbox: a P/detected held longer than 5 minutes is dropped before sending (injected times); P/event, states and sent ones stay")
    func outboxDropsStaleDetected() {
        #expect(MQTTOutbox.detectedMaximumAgeSeconds == 300)
        func detected(_ name: String, critical: Bool = false) -> MQTTMessage {
            MQTTMessage(topic: name, text: "{}", qos: 1, retain: false, critical: critical,
                        maximumAgeSeconds: MQTTOutbox.detectedMaximumAgeSeconds)
        }
        var outbox = MQTTOutbox(limit: 10)
        outbox.append(Self.message("event0"), at: 1_000)
        outbox.append(detected("detected0"), at: 1_000)
        outbox.append(detected("smoke0", critical: true), at: 1_000)
        outbox.append(Self.message("state", retain: true), at: 1_000)
        outbox.append(detected("detected1"), at: 1_200)
        // Sent on this connection at 1010, not yet acknowledged: in flight, kept.
        outbox.append(detected("inflight"), at: 1_010)
        let inflight = outbox.entries.last!.sequence
        outbox.markSent(sequence: inflight, mid: 7)
        #expect(outbox.dropExpired(now: 1_300) == 0)
        #expect(outbox.dropExpired(now: 1_300.5) == 2)
        #expect(outbox.entries.map(\.message.topic) == ["event0", "state", "detected1", "inflight"])
        #expect(outbox.expired == 2)
        #expect(outbox.dropped == 0)
        // Lost with the connection: judged again before the next one sends it.
        outbox.connectionLost()
        #expect(outbox.dropExpired(now: 1_310.5) == 1)
        #expect(outbox.unsent.map(\.message.topic) == ["event0", "state", "detected1"])
        #expect(outbox.dropExpired(now: 1_600) == 1)
        #expect(outbox.unsent.map(\.message.topic) == ["event0", "state"])
        #expect(outbox.expired == 4)
    }

    static let controls = ControlState(
        groups: ["smoke_alarm", "co_alarm", "glass_break", "baby_cry"],
        eventGroups: ["smoke_alarm", "co_alarm", "glass_break", "baby_cry", "snoring", "alarm_chirp"])

    @Test("Home Assistant discovery: one device, the entities, device classes, stable unique ids")
    func discoveryPayloads() throws {
        let discovery = HomeAssistantDiscovery(
            discoveryPrefix: "homeassistant", node: "kitchen", topics: MQTTTopics(base: "earshot/kitchen"), version: "0.1.0")
        let configs = discovery.configs(for: Self.controls)
        #expect(configs.map(\.topic) == [
            "homeassistant/binary_sensor/earshot_kitchen/smoke_alarm/config",
            "homeassistant/switch/earshot_kitchen/smoke_alarm_enabled/config",
            "homeassistant/binary_sensor/earshot_kitchen/co_alarm/config",
            "homeassistant/switch/earshot_kitchen/co_alarm_enabled/config",
            "homeassistant/binary_sensor/earshot_kitchen/glass_break/config",
            "homeassistant/switch/earshot_kitchen/glass_break_enabled/config",
            "homeassistant/binary_sensor/earshot_kitchen/baby_cry/config",
            "homeassistant/switch/earshot_kitchen/baby_cry_enabled/config",
            "homeassistant/event/earshot_kitchen/events/config",
            "homeassistant/sensor/earshot_kitchen/level/config",
            "homeassistant/binary_sensor/earshot_kitchen/capture_problem/config",
            "homeassistant/switch/earshot_kitchen/sleep_session/config",
            "homeassistant/button/earshot_kitchen/test_alert/config",
            "homeassistant/binary_sensor/earshot_kitchen/smoke_alarm_battery/config",
        ])
        func object(_ index: Int) throws -> JSONValue { try JSONValue.parse(configs[index].payload.encoded) }
        let smoke = try object(0)
        #expect(smoke["device_class"]?.stringValue == "smoke")
        #expect(smoke["unique_id"]?.stringValue == "earshot_kitchen_smoke_alarm")
        // Home Assistant 2025.10 replaced object_id by default_entity_id (DOMAIN.OBJECT); 2026.4 ignores object_id.
        #expect(smoke["default_entity_id"]?.stringValue == "binary_sensor.earshot_kitchen_smoke_alarm")
        #expect(smoke["object_id"] == nil)
        #expect(try configs.indices.map { try object($0)["default_entity_id"]?.stringValue ?? "" } == [
            "binary_sensor.earshot_kitchen_smoke_alarm", "switch.earshot_kitchen_smoke_alarm_enabled",
            "binary_sensor.earshot_kitchen_co_alarm", "switch.earshot_kitchen_co_alarm_enabled",
            "binary_sensor.earshot_kitchen_glass_break", "switch.earshot_kitchen_glass_break_enabled",
            "binary_sensor.earshot_kitchen_baby_cry", "switch.earshot_kitchen_baby_cry_enabled",
            "event.earshot_kitchen_events", "sensor.earshot_kitchen_level",
            "binary_sensor.earshot_kitchen_capture_problem", "switch.earshot_kitchen_sleep_session",
            "button.earshot_kitchen_test_alert", "binary_sensor.earshot_kitchen_smoke_alarm_battery",
        ])
        // A node may hold '-' (a host name); an entity id may not.
        let hyphen = HomeAssistantDiscovery(
            discoveryPrefix: "homeassistant", node: "living-room_", topics: MQTTTopics(base: "earshot/living-room_"))
        #expect(hyphen.defaultEntityID(component: "binary_sensor", objectID: "baby_cry") == "binary_sensor.earshot_living_room_baby_cry")
        #expect(smoke["state_topic"]?.stringValue == "earshot/kitchen/smoke_alarm/state")
        #expect(smoke["availability_topic"]?.stringValue == "earshot/kitchen/availability")
        #expect(smoke["device"]?["identifiers"]?.arrayValue == [.string("earshot_kitchen")])
        #expect(smoke["device"]?["sw_version"]?.stringValue == "0.1.0")
        #expect(smoke["device"]?["suggested_area"] == nil)
        // [mqtt] area: every entity's device block suggests it.
        let kitchen = HomeAssistantDiscovery(
            discoveryPrefix: "homeassistant", node: "kitchen", topics: MQTTTopics(base: "earshot/kitchen"), version: "0.1.0",
            area: "Küche")
        #expect(try kitchen.configs(for: Self.controls).map { try JSONValue.parse($0.payload.encoded)["device"]?.encoded ?? "" }
            == Array(repeating: #"{"identifiers":["earshot_kitchen"],"name":"Earshot kitchen","manufacturer":"Earshot","model":"earshotd","sw_version":"0.1.0","suggested_area":"Küche"}"#, count: configs.count))
        #expect(try object(2)["device_class"]?.stringValue == "carbon_monoxide")
        #expect(try object(4)["device_class"]?.stringValue == "safety")
        #expect(try object(6)["device_class"]?.stringValue == "sound")
        let mute = try object(1)
        #expect(mute["command_topic"]?.stringValue == "earshot/kitchen/smoke_alarm/set")
        #expect(mute["state_topic"]?.stringValue == "earshot/kitchen/smoke_alarm/enabled")
        let events = try object(8)
        #expect(events["event_types"]?.arrayValue?.compactMap(\.stringValue) == Self.controls.eventGroups + ["test_alert"])
        let level = try object(9)
        #expect(level["unit_of_measurement"]?.stringValue == "dBFS")
        #expect(level["device_class"] == nil)
        #expect(level["entity_category"]?.stringValue == "diagnostic")
        #expect(level["state_class"]?.stringValue == "measurement")
        let noLevel = HomeAssistantDiscovery(
            discoveryPrefix: "homeassistant", node: "kitchen", topics: MQTTTopics(base: "earshot/kitchen"), version: "0.1.0", level: false)
        #expect(noLevel.configs(for: Self.controls).map(\.topic) == configs.map(\.topic).filter { !$0.contains("/level/") })
        #expect(try object(10)["device_class"]?.stringValue == "problem")
        #expect(try object(11)["command_topic"]?.stringValue == "earshot/kitchen/sleep/set")
        // A smoke alarm's low battery, while alarm_chirp publishes (smoke or CO watched, with pattern detection).
        // The Test alert button: PRESS on its command topic.
        let button = try object(12)
        #expect(button["name"]?.stringValue == "Test alert")
        #expect(button["command_topic"]?.stringValue == "earshot/kitchen/test_alert/set")
        #expect(button["payload_press"]?.stringValue == "PRESS")
        #expect(button["entity_category"]?.stringValue == "diagnostic")
        let battery = try object(13)
        #expect(battery["name"]?.stringValue == "Smoke alarm battery")
        #expect(battery["device_class"]?.stringValue == "battery")
        #expect(battery["state_topic"]?.stringValue == "earshot/kitchen/alarm_chirp/state")
        #expect(battery["payload_on"]?.stringValue == "ON")
        #expect(battery["entity_category"] == nil)
        // With [notify] url set: the Notifications failing sensor, after the capture's.
        let notifying = HomeAssistantDiscovery(
            discoveryPrefix: "homeassistant", node: "kitchen", topics: MQTTTopics(base: "earshot/kitchen"), version: "0.1.0", notify: true)
        let withNotify = notifying.configs(for: Self.controls)
        #expect(withNotify.map(\.topic) == Array(configs.map(\.topic).prefix(11)) + ["homeassistant/binary_sensor/earshot_kitchen/notifications_failing/config"]
            + configs.map(\.topic).suffix(3))
        let failing = try JSONValue.parse(withNotify[11].payload.encoded)
        #expect(failing["name"]?.stringValue == "Notifications failing")
        #expect(failing["device_class"]?.stringValue == "problem")
        #expect(failing["state_topic"]?.stringValue == "earshot/kitchen/notify/state")
        #expect(failing["json_attributes_topic"]?.stringValue == "earshot/kitchen/notify/attributes")
        #expect(failing["entity_category"]?.stringValue == "diagnostic")
        #expect(failing["default_entity_id"]?.stringValue == "binary_sensor.earshot_kitchen_notifications_failing")
        let noChirp = ControlState(groups: ["baby_cry"], eventGroups: ["baby_cry", "snoring"])
        #expect(!discovery.configs(for: noChirp).contains { $0.topic.contains("smoke_alarm_battery") })
    }

    @Test("The switchable groups: fire_alarm is shown as smoke_alarm when the pattern detector folds it in")
    func stateGroups() throws {
        // The default watch list's baby_cry needs the built-in head, loaded as the daemon loads it.
        let heads = try DaemonConfiguration().loadHeadModels().set
        let defaults = try DetectionPlan(
            configuration: DaemonConfiguration(), yamnetLabels: ClassMapFixture.labels, heads: heads, configPath: nil)
        #expect(defaults.stateGroups == ["smoke_alarm", "co_alarm", "baby_cry", "glass_break"])
        #expect(defaults.eventGroups == ["smoke_alarm", "co_alarm", "baby_cry", "glass_break", "snoring", "alarm_chirp"])
        var fireOnly = DaemonConfiguration()
        fireOnly.detection.watch = ["fire_alarm", "dog_bark"]
        let folded = try DetectionPlan(configuration: fireOnly, yamnetLabels: ClassMapFixture.labels, heads: HeadModelSet(), configPath: nil)
        #expect(folded.stateGroups == ["smoke_alarm", "dog_bark"])
        var classifierOnly = fireOnly
        classifierOnly.alarms.patternDetection = false
        let plain = try DetectionPlan(configuration: classifierOnly, yamnetLabels: ClassMapFixture.labels, heads: heads, configPath: nil)
        #expect(plain.stateGroups == ["fire_alarm", "dog_bark"])
        #expect(plain.eventGroups == ["fire_alarm", "dog_bark", "snoring"])
    }

    static func sink() throws -> MQTTSink {
        var settings = MQTTSettings()
        settings.enabled = true
        settings.node = "kitchen"
        settings.host = "127.0.0.1"
        settings.port = 9  // never started: parseCommand needs no connection
        return try MQTTSink(settings: settings, commands: { _ in }, log: { _, _ in })
    }

    @Test("Commands: ON/OFF on a watched group's or sleep's set topic; 10,000 random topics and payloads change nothing")
    func commandFuzz() throws {
        let sink = try Self.sink()
        sink.deliver(RoutedOutput(output: .controls(Self.controls), time: Date()))
        #expect(sink.parseCommand(topic: "earshot/kitchen/baby_cry/set", payload: Array("OFF".utf8), retained: false) == .setGroup("baby_cry", enabled: false))
        #expect(sink.parseCommand(topic: "earshot/kitchen/smoke_alarm/set", payload: Array("ON".utf8), retained: false) == .setGroup("smoke_alarm", enabled: true))
        #expect(sink.parseCommand(topic: "earshot/kitchen/sleep/set", payload: Array("ON".utf8), retained: false) == .setSleep(true))
        #expect(sink.parseCommand(topic: "earshot/kitchen/sleep/set", payload: Array("ON".utf8), retained: true) == nil)
        #expect(sink.parseCommand(topic: "earshot/kitchen/speech/set", payload: Array("ON".utf8), retained: false) == nil)
        #expect(sink.parseCommand(topic: "earshot/kitchen/baby_cry/set", payload: Array("on".utf8), retained: false) == nil)
        #expect(sink.parseCommand(topic: "earshot/kitchen//set", payload: Array("ON".utf8), retained: false) == nil)
        // The Test alert button: PRESS, not retained.
        #expect(sink.parseCommand(topic: "earshot/kitchen/test_alert/set", payload: Array("PRESS".utf8), retained: false) == .testAlert)
        #expect(sink.parseCommand(topic: "earshot/kitchen/test_alert/set", payload: Array("ON".utf8), retained: false) == nil)
        #expect(sink.parseCommand(topic: "earshot/kitchen/test_alert/set", payload: Array("PRESS".utf8), retained: true) == nil)
        var generator = SystemRandomNumberGenerator()
        let pieces = ["earshot", "kitchen", "baby_cry", "sleep", "set", "", "+", "#", "\u{0}", "é", "ON", "smoke_alarm", "x/y"]
        var accepted = 0
        for _ in 0..<10_000 {
            let levels = (0..<Int.random(in: 0...6, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }
            let topic = levels.joined(separator: "/")
            let payload = (0..<Int.random(in: 0...8, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            if let command = sink.parseCommand(topic: topic, payload: payload, retained: Bool.random(using: &generator)) {
                // Only an exact command can pass: a valid topic and ON or OFF.
                let valid = ["earshot/kitchen/baby_cry/set", "earshot/kitchen/smoke_alarm/set", "earshot/kitchen/sleep/set"].contains(topic)
                    && (payload == Array("ON".utf8) || payload == Array("OFF".utf8))
                #expect(valid, "accepted \(command) from \(topic) \(payload)")
                accepted += 1
            }
        }
        #expect(accepted < 50)
    }
}

/// Each test starts its own broker on a free port, so they run in parallel.
@Suite("MQTT against a real mosquitto broker")
struct MQTTBrokerTests {
    static let alarm = "audio/alarm-ml-audio-classifier-example-for-pico/ALRMElec_Smoke_detector_alarm_(ID_0800)_BSB.wav"

    /// The event JSON lines of standard output (detections, ends, health), without `time`.
    static func events(_ objects: [[String: Any]]) -> [String] {
        objects.filter { ($0["type"] as? String).map { ["detection", "detection_end"].contains($0) } ?? false }.map(Self.key)
    }

    static func key(_ object: [String: Any]) -> String {
        var copy = object
        copy["time"] = nil
        copy["node"] = nil
        let data = (try? JSONSerialization.data(withJSONObject: copy, options: [.sortedKeys])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    /// The daemon's `{"status":true}` reply on `socket`, parsed; nil when none came within `timeout` seconds.
    static func status(socket: String, timeout: Double) throws -> [String: Any]? {
        let client = try EventSubscriber(path: socket)
        try client.send(line: #"{"status":true}"#)
        guard let reply = try client.nextReply(timeoutSeconds: timeout) else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(reply.utf8))) as? [String: Any]
    }

    static func mqttEvents(_ subscriber: MQTTSubscriber, node: String) -> [String] {
        events(subscriber.messages(on: "earshot/\(node)/event").compactMap(\.json))
    }

    @Test("A real T3 alarm: discovery, online, the same event JSON as the socket's with its stream time, offline after a clean stop",
          .needsMosquitto, .needsEarshotdBuilt, .needsShared)
    func alarmEndToEnd() throws {
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let setup = try MQTTDaemonSetup(port: broker.port, node: "hall")
        defer { setup.remove() }
        let daemon = try DaemonProcess([
            "--config", setup.config.path, "--foreground", "--input", TestPaths.sharedFile(Self.alarm).path,
        ])
        #expect(daemon.wait(seconds: 40) == 0, "\(daemon.errorText)")
        #expect(subscriber.waitFor(seconds: 5) { $0.contains { $0.topic == "earshot/hall/availability" && $0.payload == "offline" } })
        let socketEvents = Self.events(daemon.objects)
        let smoke = daemon.objects.filter { $0["group"] as? String == "smoke_alarm" }
        #expect(smoke.count >= 2, "\(daemon.objects)")
        #expect(subscriber.waitFor(seconds: 5) { _ in Self.mqttEvents(subscriber, node: "hall").count == socketEvents.count })
        #expect(Self.mqttEvents(subscriber, node: "hall") == socketEvents)
        let onset = try #require(subscriber.messages(on: "earshot/hall/event").compactMap(\.json).first { $0["type"] as? String == "detection" && $0["group"] as? String == "smoke_alarm" })
        #expect(onset["node"] as? String == "hall")
        #expect(onset["stream_time"] as? Double == smoke.first?["stream_time"] as? Double)
        let availability = subscriber.messages(on: "earshot/hall/availability").map(\.payload)
        #expect(availability.first == "online")
        #expect(availability.last == "offline")
        // Discovery: the device's entities, retained, and the state going ON then OFF.
        let configs = subscriber.messages.filter { $0.topic.hasPrefix("homeassistant/") && $0.topic.hasSuffix("/config") }
        #expect(Set(configs.map(\.topic)).contains("homeassistant/binary_sensor/earshot_hall/smoke_alarm/config"))
        #expect(Set(configs.map(\.topic)).contains("homeassistant/event/earshot_hall/events/config"))
        // The end's attributes keep the onset's start.
        let attributes = subscriber.messages(on: "earshot/hall/smoke_alarm/attributes").compactMap(\.json)
        #expect(attributes.count >= 2)
        #expect(attributes.last?["started"] as? String == attributes.first?["started"] as? String)
        #expect(attributes.last?["ended"] != nil)
        // Messages on different topics may arrive in any order (QoS 1): wait for the state's OFF as for the events.
        _ = subscriber.waitFor(seconds: 5) { _ in
            subscriber.messages(on: "earshot/hall/smoke_alarm/state").last?.payload == "OFF"
        }
        let states = subscriber.messages(on: "earshot/hall/smoke_alarm/state").map(\.payload)
        #expect(states.contains("ON"))
        #expect(states.last == "OFF")
        // The stop hands the outbox (the end, the state's OFF) to the broker before `offline`, and waits for its
        // acknowledgements before DISCONNECT (audit 12 #8: `offline` went first).
        let all = subscriber.messages
        let offlineIndex = try #require(all.lastIndex { $0.topic == "earshot/hall/availability" && $0.payload == "offline" })
        let offIndex = try #require(all.lastIndex { $0.topic == "earshot/hall/smoke_alarm/state" && $0.payload == "OFF" })
        let endIndex = try #require(all.lastIndex { $0.topic == "earshot/hall/event" && $0.json?["type"] as? String == "detection_end" })
        #expect(offIndex < offlineIndex && endIndex < offlineIndex, "\(all.map { "\($0.topic) \($0.payload.prefix(40))" })")
        #expect(daemon.errorText.contains("not delivered") == false, "\(daemon.errorText)")
        let detected = subscriber.messages(on: "earshot/hall/detected").compactMap(\.json)
        #expect(detected.contains { $0["event_type"] as? String == "smoke_alarm" })
        // A late subscriber gets the retained configs and states.
        let late = try MQTTSubscriber(port: broker.port, topic: "homeassistant/#")
        #expect(late.waitFor(seconds: 5) { $0.contains { $0.retained && $0.topic == "homeassistant/binary_sensor/earshot_hall/smoke_alarm/config" } })
    }

    @Test("Last Will: offline at once after SIGKILL (the socket closes), within 1.5 x keepalive of a frozen daemon (SIGSTOP)",
          .needsMosquitto, .needsEarshotdBuilt)
    func lastWill() throws {
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port, topic: "earshot/+/availability")
        for (node, signal) in [("den", SIGKILL), ("loft", SIGSTOP)] {
            let setup = try MQTTDaemonSetup(port: broker.port, node: node, keepalive: 5)
            defer { setup.remove() }
            let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "samples/demo.flac"])
            let topic = "earshot/\(node)/availability"
            #expect(subscriber.waitFor(seconds: 20) { $0.contains { $0.topic == topic && $0.payload == "online" } }, "\(daemon.errorText)")
            let signalled = Date()
            daemon.signal(signal)
            #expect(subscriber.waitFor(seconds: 12) { $0.last { $0.topic == topic }?.payload == "offline" })
            let offline = try #require(subscriber.messages(on: topic).last { $0.payload == "offline" })
            let delay = offline.arrival.timeIntervalSince(signalled)
            if signal == SIGKILL {
                #expect(delay < 2, "offline \(delay) s after SIGKILL")
            } else {
                // Nothing for 1.5 x 5 s: the broker gives up on the frozen client. Mosquitto 2.0 checks keep-alives
                // on its own schedule, a few seconds late (10.8 s measured here).
                #expect(delay >= 7.5 && delay <= 7.5 + 5, "offline \(delay) s after SIGSTOP")
            }
            daemon.signal(SIGKILL)
            daemon.signal(SIGCONT)
            daemon.wait(seconds: 5)
        }
    }

    @Test("The broker restarted in the middle of an alarm: one mqtt_unavailable, one mqtt_connected, every event delivered afterwards in order",
          .needsMosquitto, .needsEarshotdBuilt, .needsShared)
    func brokerRestart() throws {
        let broker = try MosquittoBroker(persistence: true)
        let subscriber = try MQTTSubscriber(port: broker.port, topic: "earshot/yard/event", session: "earshot-test-\(getpid())")
        let setup = try MQTTDaemonSetup(port: broker.port, node: "yard")
        defer { setup.remove() }
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", TestPaths.sharedFile(Self.alarm).path])
        #expect(subscriber.waitFor(seconds: 20) { $0.contains { $0.payload.contains("\"capture_live\"") } }, "\(daemon.errorText)")
        Thread.sleep(forTimeInterval: 1.5)
        broker.stop()
        Thread.sleep(forTimeInterval: 5)
        try broker.start()
        #expect(daemon.wait(seconds: 40) == 0, "\(daemon.errorText)")
        let socketEvents = Self.events(daemon.objects)
        #expect(socketEvents.count >= 2)
        #expect(subscriber.waitFor(seconds: 15) { _ in Self.mqttEvents(subscriber, node: "yard").count >= socketEvents.count }, "\(subscriber.messages.map(\.payload))")
        // In order, each once or more (QoS 1 is at least once): duplicates removed, the same sequence.
        var seen = Set<String>()
        let delivered = Self.mqttEvents(subscriber, node: "yard").filter { seen.insert($0).inserted }
        #expect(delivered == socketEvents)
        let health = daemon.objects.filter { $0["type"] as? String == "health" }.compactMap { $0["state"] as? String }
        #expect(health.filter { $0 == "mqtt_unavailable" }.count == 1, "\(health)")
        #expect(health.filter { $0 == "mqtt_connected" }.count == 2, "\(health)")
        let unavailable = try #require(daemon.objects.first { $0["state"] as? String == "mqtt_unavailable" })
        #expect(unavailable["broker"] as? String == "127.0.0.1:\(broker.port)")
    }

    @Test("A frozen broker (SIGSTOP): the daemon's own events are those of a free run, and it stops within 5 s",
          .needsMosquitto, .needsEarshotdBuilt)
    func frozenBroker() throws {
        let broker = try MosquittoBroker()
        let setup = try MQTTDaemonSetup(port: broker.port, node: "attic")
        defer { setup.remove() }
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "samples/demo.flac"])
        // The same input without MQTT, at the same time.
        let plain = setup.directory.appendingPathComponent("plain.conf")
        try "[output]\njournal = false\nsocket = \(setup.directory.path)/r.sock\n[history]\nenabled = false\n".write(to: plain, atomically: true, encoding: .utf8)
        let reference = try DaemonProcess(["--foreground", "--input", "samples/demo.flac", "--config", plain.path])
        #expect(TestWait.until(seconds: 20) { daemon.objects.contains { $0["state"] as? String == "mqtt_connected" } }, "\(daemon.errorText)")
        broker.signal(SIGSTOP)
        defer { broker.signal(SIGCONT) }
        #expect(daemon.wait(seconds: 60) == 0)
        #expect(reference.wait(seconds: 60) == 0)
        let expected = Self.events(reference.objects)
        #expect(!expected.isEmpty)
        #expect(Self.events(daemon.objects) == expected)
        let stopped = daemon.errorText.contains("earshotd: stopped (end of input)")
        #expect(stopped, "\(daemon.errorText)")
    }

    @Test("Mute by MQTT: the group's switch echoes OFF, status lists it as muted (earshot status too), its events stop; garbage commands change nothing",
          .needsMosquitto, .needsEarshotdBuilt, .needsEarshotBuilt)
    func muteByCommand() throws {
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let setup = try MQTTDaemonSetup(port: broker.port, node: "nursery", watch: "baby_cry | snoring | glass_break")
        defer { setup.remove() }
        // A retained command waiting on the broker is not applied when the daemon subscribes.
        try MQTTPublish.send(port: broker.port, topic: "earshot/nursery/baby_cry/set", payload: "OFF", retain: true)
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-"], standardInput: true)
        #expect(subscriber.waitFor(seconds: 20) { $0.contains { $0.topic == "earshot/nursery/baby_cry/enabled" && $0.payload == "ON" } }, "\(daemon.errorText)")
        // Garbage first: wrong payloads, unknown groups, other topics, retained commands.
        try MQTTPublish.lines(port: broker.port, topic: "earshot/nursery/baby_cry/set", ["on", "off", "1", "", "ON ", "{\"state\":\"OFF\"}"])
        try MQTTPublish.lines(port: broker.port, topic: "earshot/nursery/kettle/set", ["ON", "OFF"])
        try MQTTPublish.send(port: broker.port, topic: "earshot/nursery/baby_cry/set", payload: "", retain: true)  // clears it
        try MQTTPublish.send(port: broker.port, topic: "earshot/nursery/sleep/set", payload: "maybe")
        Thread.sleep(forTimeInterval: 1)
        #expect(!subscriber.messages(on: "earshot/nursery/baby_cry/enabled").contains { $0.payload == "OFF" })
        try MQTTPublish.send(port: broker.port, topic: "earshot/nursery/baby_cry/set", payload: "OFF")
        #expect(subscriber.waitFor(seconds: 10) { $0.contains { $0.topic == "earshot/nursery/baby_cry/enabled" && $0.payload == "OFF" } })
        let enabled = subscriber.messages(on: "earshot/nursery/baby_cry/enabled").map(\.payload)
        #expect(enabled.filter { $0 == "OFF" }.count == 1, "\(enabled)")
        let status = try #require(try Self.status(socket: setup.socket, timeout: 5), "no status reply")
        #expect(status["muted"] as? [String] == ["baby_cry"])
        // [detection] mute_minutes' default: 8 h from the command.
        let until = try #require(((status["muted_until"] as? [String: String])?["baby_cry"]).flatMap(EventTextFormat.date(fromTimestamp:)), "\(status)")
        #expect(abs(until.timeIntervalSinceNow - 8 * 3600) < 60, "\(until)")
        let mqtt = status["mqtt"] as? [String: Any]
        #expect(mqtt?["broker"] as? String == "127.0.0.1:\(broker.port)")
        #expect(mqtt?["node"] as? String == "nursery")
        #expect(mqtt?["connected"] as? Bool == true)
        #expect(mqtt?["dropped"] as? Int == 0)
        #expect(status["watch"] as? [String] == ["baby_cry", "snoring", "glass_break"])
        // earshot status says it in words, and does not list it as watched (trial 7 #4).
        let text = try #require(try EarshotCLI.run(["status", "--socket", setup.socket], in: setup.directory, timeout: 30))
        #expect(text.status == 0, "\(text.standardError)")
        #expect(text.outputLines.count == 7, "\(text.outputLines)")
        #expect(Array(text.outputLines.dropFirst(3).prefix(2)) == [
            "watching: snoring, glass_break",
            "muted: baby_cry until \(MuteText.clock(until, now: Date())) (no events until then)",
        ])
        // The broker and the node, connected (trial 14 D8); the count is the discovery and state messages so far.
        let mqttLine = text.outputLines.last ?? ""
        #expect((try? #/mqtt: connected to 127\.0\.0\.1:\d+ as node nursery \(\d+ messages published\)/#.wholeMatch(in: mqttLine)) != nil, "\(mqttLine)")
        #expect(mqttLine.hasPrefix("mqtt: connected to 127.0.0.1:\(broker.port) as node nursery ("), "\(mqttLine)")
        // Stream the demo's first 16 s (a baby crying from 2.9 s, snoring from 11.5 s) as raw S16_LE.
        let samples = try AudioFileDecoder(url: TestPaths.packageRoot.appendingPathComponent("samples/demo.flac")).readAllMono()  // 16 kHz
        var pcm = Data(capacity: 16 * 16_000 * 2)
        for sample in samples.prefix(16 * 16_000) {
            let value = Int16(max(-32_768, min(32_767, (sample * 32_768).rounded())))
            withUnsafeBytes(of: value.littleEndian) { pcm.append(contentsOf: $0) }
        }
        daemon.input.fileHandleForWriting.write(pcm)
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 60) == 0, "\(daemon.errorText)")
        let groups = daemon.objects.compactMap { $0["group"] as? String }
        #expect(!groups.contains("baby_cry"), "\(groups)")
        #expect(groups.contains("snoring"), "\(groups)")
        #expect(daemon.errorText.contains("earshotd: baby_cry muted by an MQTT command for 8 h, until \(MuteText.clock(until, now: Date())): its events are not published until then\n"), "\(daemon.errorText)")
        #expect(daemon.errorText.contains("MQTT: ignored a message on earshot/nursery/baby_cry/set: a retained command is not applied (publish it without the retain flag)"), "\(daemon.errorText)")
        #expect(daemon.errorText.contains("MQTT: ignored a message on earshot/nursery/baby_cry/set: the payload must be ON or OFF"), "\(daemon.errorText)")
    }

    @Test("--check-config tries the broker: accepted, refused password, nothing listening; each one line",
          .needsMosquitto, .needsEarshotdBuilt)
    func checkConfigProbe() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-auth-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let passwords = directory.appendingPathComponent("passwd")
        let made = try EarshotCLI.runProcess(URL(fileURLWithPath: "/usr/bin/mosquitto_passwd"), ["-b", "-c", passwords.path, "earshot", "right-one"], timeout: 20)
        #expect(made.status == 0, "\(made.standardError)")
        let broker = try MosquittoBroker(extraLines: ["allow_anonymous false", "password_file \(passwords.path)"])
        let secret = directory.appendingPathComponent("secret")
        func check(password: String, port: Int) throws -> (status: Int32, output: String, error: String) {
            // Readable by the service's user alone, as the README says: no warning, and a root --check-config passes.
            try ServiceSecretFile.write(password, to: secret.path)
            let setup = try MQTTDaemonSetup(port: port, node: "porch", extraMQTT: ["username = earshot", "password_file = \(secret.path)"])
            defer { setup.remove() }
            return try #require(try EarshotdRun.run(["--config", setup.config.path, "--check-config"]))
        }
        let good = try check(password: "right-one\n", port: broker.port)
        #expect(good.status == 0, "\(good.error)")
        #expect(good.output.hasSuffix("; the MQTT broker 127.0.0.1:\(broker.port) accepted the connection\n"), "\(good.output)")
        let wrong = try check(password: "wrong\n", port: broker.port)
        #expect(wrong.status == 78)
        #expect(wrong.error == "earshotd: [mqtt] broker 127.0.0.1:\(broker.port): the broker refused the connection: Connection Refused: not authorised (check [mqtt] username and password_file)\n", "\(wrong.error)")
        let closed = try FreePort.pick()
        let none = try check(password: "right-one\n", port: closed)
        #expect(none.status == 69)
        #expect(none.error == "earshotd: [mqtt] broker 127.0.0.1:\(closed): Connection refused (is the broker running? check [mqtt] host and port)\n", "\(none.error)")
    }

    @Test("A wrong password at run time: one mqtt_unavailable naming the broker and the cause; detection goes on",
          .needsMosquitto, .needsEarshotdBuilt)
    func wrongPasswordAtRunTime() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-auth-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let passwords = directory.appendingPathComponent("passwd")
        _ = try EarshotCLI.runProcess(URL(fileURLWithPath: "/usr/bin/mosquitto_passwd"), ["-b", "-c", passwords.path, "earshot", "right-one"], timeout: 20)
        let broker = try MosquittoBroker(extraLines: ["allow_anonymous false", "password_file \(passwords.path)"])
        let secret = directory.appendingPathComponent("secret")
        try "wrong\n".write(to: secret, atomically: true, encoding: .utf8)
        let setup = try MQTTDaemonSetup(port: broker.port, node: "porch", extraMQTT: ["username = earshot", "password_file = \(secret.path)"])
        defer { setup.remove() }
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "samples/demo.flac"])
        #expect(daemon.wait(seconds: 60) == 0)
        let unavailable = daemon.objects.filter { $0["state"] as? String == "mqtt_unavailable" }
        #expect(unavailable.count == 1, "\(daemon.objects)")
        #expect((unavailable.first?["message"] as? String)?.hasPrefix("MQTT broker 127.0.0.1:\(broker.port): the broker refused the connection: Connection Refused: not authorised (check [mqtt] username and password_file); retrying in 1 s") == true)
        #expect(daemon.objects.contains { $0["group"] as? String == "baby_cry" })
    }

    @Test("TLS: a broker with a test CA's certificate; the right CA connects, another CA fails in one line",
          .needsMosquitto, .needsEarshotdBuilt)
    func tls() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let script = """
        set -e
        cd '\(directory.path)'
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=earshot-test-ca 2>/dev/null
        openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.pem -days 2 -subj /CN=other-ca 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile san.ext 2>/dev/null
        chmod 644 server.key
        """
        let made = try EarshotCLI.runProcess(URL(fileURLWithPath: "/bin/sh"), ["-c", script], timeout: 60)
        #expect(made.status == 0, "\(made.standardError)")
        let broker = try MosquittoBroker(extraLines: [
            "allow_anonymous true", "cafile \(directory.path)/ca.pem", "certfile \(directory.path)/server.pem",
            "keyfile \(directory.path)/server.key",
        ])
        func check(ca: String) throws -> (status: Int32, output: String, error: String) {
            let setup = try MQTTDaemonSetup(port: broker.port, node: "garage", extraMQTT: ["tls = true", "cafile = \(directory.path)/\(ca)"])
            defer { setup.remove() }
            return try #require(try EarshotdRun.run(["--config", setup.config.path, "--check-config"]))
        }
        let good = try check(ca: "ca.pem")
        #expect(good.status == 0, "\(good.error)")
        #expect(good.output.hasSuffix("; the MQTT broker 127.0.0.1:\(broker.port) accepted the connection\n"))
        let other = try check(ca: "other.pem")
        #expect(other.status == 69)
        #expect(other.error.hasPrefix("earshotd: [mqtt] broker 127.0.0.1:\(broker.port): TLS: "), "\(other.error)")
        #expect(other.error.contains("certificate verify failed"), "\(other.error)")
        #expect(other.error.split(separator: "\n").count == 1)
    }

    @Test("Three daemons on one broker: three devices, each with its own node id, availability and events",
          .needsMosquitto, .needsEarshotdBuilt)
    func threeRooms() throws {
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let nodes = ["kitchen", "bedroom", "garage"]
        let setups = try nodes.map { try MQTTDaemonSetup(port: broker.port, node: $0) }
        defer { for setup in setups { setup.remove() } }
        let daemons = try setups.map { try DaemonProcess(["--config", $0.config.path, "--foreground", "--input", "samples/demo.flac"]) }
        for daemon in daemons { #expect(daemon.wait(seconds: 90) == 0, "\(daemon.errorText)") }
        for (node, daemon) in zip(nodes, daemons) {
            let events = Self.events(daemon.objects)
            #expect(subscriber.waitFor(seconds: 10) { _ in Self.mqttEvents(subscriber, node: node).count == events.count })
            #expect(Self.mqttEvents(subscriber, node: node) == events)
            #expect(subscriber.messages(on: "earshot/\(node)/availability").map(\.payload) == ["online", "offline"])
            let device = subscriber.messages.first { $0.topic == "homeassistant/binary_sensor/earshot_\(node)/baby_cry/config" }?.json
            #expect((device?["device"] as? [String: Any])?["identifiers"] as? [String] == ["earshot_\(node)"])
            #expect(subscriber.messages(on: "earshot/\(node)/event").allSatisfy { $0.json?["node"] as? String == node })
        }
    }

    @Test("Discovery lifecycle: configs again on homeassistant/status online, a group taken out of the watch list deleted on reload; 10,000 garbage commands change nothing",
          .needsMosquitto, .needsEarshotdBuilt)
    func discoveryLifecycleAndFuzz() throws {
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let setup = try MQTTDaemonSetup(port: broker.port, node: "study", watch: "baby_cry | glass_break")
        defer { setup.remove() }
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-"], standardInput: true)
        let glassConfig = "homeassistant/binary_sensor/earshot_study/glass_break/config"
        func configs(_ topic: String) -> [MQTTSubscriber.Message] { subscriber.messages(on: topic) }
        #expect(subscriber.waitFor(seconds: 20) { _ in !configs(glassConfig).isEmpty }, "\(daemon.errorText)")
        let before = configs(glassConfig).count
        try MQTTPublish.send(port: broker.port, topic: "homeassistant/status", payload: "online")
        #expect(subscriber.waitFor(seconds: 10) { _ in configs(glassConfig).count > before })

        // 10,000 garbage commands: random levels under the node's prefix and random payloads (never exactly ON/OFF).
        var generator = SystemRandomNumberGenerator()
        let names = ["baby_cry", "glass_break", "sleep", "kettle", "", "a b", "BABY_CRY", "baby_cry/x"]
        for name in names {
            let payloads = (0..<1_250).map { _ -> String in
                let length = Int.random(in: 1...12, using: &generator)
                let text = String((0..<length).map { _ in "ONFonf 01{}\"x".randomElement(using: &generator)! })
                return text == "ON" || text == "OFF" ? text + "!" : text
            }
            try MQTTPublish.lines(port: broker.port, topic: "earshot/study/\(name)/set", payloads)
        }
        Thread.sleep(forTimeInterval: 1)  // what the broker still forwards
        let status = try #require(try Self.status(socket: setup.socket, timeout: 10), "no status reply after the garbage")
        #expect(status["muted"] as? [String] == [])
        #expect(daemon.process.isRunning)
        #expect(!subscriber.messages.contains { $0.topic.hasSuffix("/enabled") && $0.payload == "OFF" })
        #expect(!subscriber.messages.contains { $0.topic == "earshot/study/sleep/state" && $0.payload == "ON" })

        // Reload without glass_break: its entities go (empty retained configs), baby_cry's stay.
        try (try String(contentsOf: setup.config, encoding: .utf8)).replacingOccurrences(of: "watch = baby_cry | glass_break", with: "watch = baby_cry")
            .write(to: setup.config, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        #expect(subscriber.waitFor(seconds: 10) { _ in configs(glassConfig).last?.payload == "" }, "\(daemon.errorText)")
        // Topics may arrive in any order: wait for the switch's deletion too.
        #expect(subscriber.waitFor(seconds: 5) { _ in
            configs("homeassistant/switch/earshot_study/glass_break_enabled/config").last?.payload == ""
        })
        #expect(configs("homeassistant/binary_sensor/earshot_study/baby_cry/config").last?.payload.isEmpty == false)
        let late = try MQTTSubscriber(port: broker.port, topic: "homeassistant/#")
        #expect(late.waitFor(seconds: 5) { $0.contains { $0.topic == "homeassistant/binary_sensor/earshot_study/baby_cry/config" } })
        #expect(!late.messages.contains { $0.topic == glassConfig })
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 20) == 0)
    }
}

@Suite("MQTT attributes: the wall clock of the history")
struct MQTTAttributeTimeTests {
    static func date(_ text: Any?) -> Date? {
        (text as? String).flatMap { try? Date($0, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)) }
    }

    @Test("GROUP/attributes started/ended agree with the history for every event, snoring too (its onsets are released seconds after their decision)",
          .needsMosquitto, .needsEarshotdBuilt)
    func attributesAgreeWithHistory() throws {
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let setup = try MQTTDaemonSetup(port: broker.port, node: "kitchen", watch: "baby_cry | snoring | glass_break")
        defer { setup.remove() }
        let history = setup.directory.appendingPathComponent("h.sqlite3").path
        try (try String(contentsOf: setup.config, encoding: .utf8))
            .replacingOccurrences(of: "[history]\nenabled = false", with: "[history]\npath = \(history)")
            .write(to: setup.config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "samples/demo.flac"])
        #expect(daemon.wait(seconds: 90) == 0, "\(daemon.errorText)")
        let stored = try EventHistory(path: history, access: .readOnly).events()
        #expect(stored.map(\.group).sorted() == ["baby_cry", "glass_break", "snoring"], "\(stored)")
        for event in stored {
            let topic = "earshot/kitchen/\(event.group)/attributes"
            #expect(subscriber.waitFor(seconds: 10) { _ in subscriber.messages(on: topic).last?.json?["ended"] != nil })
            let attributes = subscriber.messages(on: topic).compactMap(\.json)
            let onset = try #require(attributes.first, "\(topic)")
            let end = try #require(attributes.last)
            let started = try #require(Self.date(onset["started"]))
            // The onset's wall clock is taken when it is routed, the history's when the end is: the real-time
            // input's pacing and the machine's load move them apart by up to a second (snoring's was 3.7 s late).
            #expect(abs(started.timeIntervalSince(event.start)) < 1.5, "\(event.group): \(onset) vs history \(event.start)")
            // An end keeps its onset's start; it ends its duration later.
            #expect(Self.date(end["started"]) == started)
            let ended = try #require(Self.date(end["ended"]))
            #expect(abs(ended.timeIntervalSince(event.end)) < 1.5, "\(event.group): \(end) vs history \(event.end)")
        }
    }
}
