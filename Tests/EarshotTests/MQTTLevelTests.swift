import Foundation
import Testing
import EarshotOutputs

/// The `level` topic (Home Assistant's `Sound level` sensor): published on a change of a step or of the gate, and
/// otherwise every `[mqtt] level_interval` seconds, not every window (trial 7 #6: a silent room cost Home
/// Assistant's recorder a row every 1.5 s).
@Suite("MQTT level topic: on change or once a minute, not every window; level_interval = off removes it")
struct MQTTLevelTests {
    static func due(
        _ last: (Double, Double, Bool)?, now: Double, dbfs: Double, gateOpen: Bool, interval: Int? = 60, step: Double = 3
    ) -> Bool {
        MQTTSink.levelIsDue(
            last: last.map { (time: $0.0, dbfs: $0.1, gateOpen: $0.2) }, now: now, dbfs: dbfs, gateOpen: gateOpen,
            interval: interval, step: step)
    }

    @Test("the rule: the first window; a step or a gate change at least 1 s after the last; else the interval; never when off")
    func rule() {
        #expect(Self.due(nil, now: 0, dbfs: -120, gateOpen: false))
        #expect(!Self.due(nil, now: 0, dbfs: -120, gateOpen: false, interval: nil))
        #expect(!Self.due((0, -120, false), now: 59.9, dbfs: -120, gateOpen: false))
        #expect(Self.due((0, -120, false), now: 60, dbfs: -120, gateOpen: false))
        #expect(!Self.due((0, -40, true), now: 5, dbfs: -37.1, gateOpen: true))  // 2.9 dB
        #expect(Self.due((0, -40, true), now: 5, dbfs: -37.0, gateOpen: true))  // 3.0 dB
        #expect(Self.due((0, -40, true), now: 5, dbfs: -43.0, gateOpen: true))
        #expect(!Self.due((0, -40, true), now: 0.9, dbfs: -20, gateOpen: true))  // a step, but within 1 s
        #expect(Self.due((0, -50.5, false), now: 1, dbfs: -49.5, gateOpen: true))  // the gate opened
        #expect(!Self.due((0, -40, true), now: 5, dbfs: -35, gateOpen: true, step: 6))
        #expect(!Self.due((0, -40, true), now: 600, dbfs: -40, gateOpen: true, interval: nil))
    }

    @Test("[mqtt] level_interval and level_step: defaults 60 s and 3 dB; off; bad values name the key and the range")
    func settings() throws {
        let defaults = try MQTTUnitTests.parse("").mqtt
        #expect(defaults.levelIntervalSeconds == 60)
        #expect(defaults.levelStepDB == 3)
        #expect(try MQTTUnitTests.parse("level_interval = off\n").mqtt.levelIntervalSeconds == nil)
        #expect(try MQTTUnitTests.parse("level_interval = 300\nlevel_step = 6\n").mqtt.levelIntervalSeconds == 300)
        #expect(MQTTUnitTests.error("level_interval = 1\n") == "78 /etc/earshot/earshotd.conf:2: [mqtt] level_interval = 1: must be a whole number of seconds in [10, 86400], or off (no level sensor)")
        #expect(MQTTUnitTests.error("level_step = 0\n") == "78 /etc/earshot/earshotd.conf:2: [mqtt] level_step = 0: must be a number in [0.5, 120] dB")
    }

    @Test("8 s of digital silence, fed in real time: one level message, without a time; the sensor's discovery config",
          .needsMosquitto, .needsEarshotdBuilt)
    func silenceIsOneMessage() throws {
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let setup = try MQTTDaemonSetup(port: broker.port, node: "quiet", watch: "smoke_alarm")
        defer { setup.remove() }
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-"], standardInput: true)
        // Connected before any window: a level queued before the connection would be sent as well.
        #expect(subscriber.waitFor(seconds: 20) { $0.contains { $0.topic == "earshot/quiet/availability" && $0.payload == "online" } },
                "\(daemon.errorText)")
        // 16 windows' hops of silence, 0.48 s every 0.5 s: at most once a second this was 5 or more messages.
        for _ in 0..<16 {
            daemon.input.fileHandleForWriting.write(SyntheticAudio.pcm(SyntheticAudio.silence(seconds: 0.48)))
            Thread.sleep(forTimeInterval: 0.5)
        }
        var status: [String: Any] = [:]
        #expect(TestWait.until(seconds: 20) {
            status = (try? MQTTBrokerTests.status(socket: setup.socket, timeout: 5)) ?? [:]
            return (status["windows"] as? Int ?? 0) >= 14
        }, "\(status)")
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 30) == 0, "\(daemon.errorText)")
        #expect(subscriber.waitFor(seconds: 10) { $0.contains { $0.topic == "earshot/quiet/availability" && $0.payload == "offline" } })
        #expect(subscriber.messages(on: "earshot/quiet/level").map(\.payload) == [#"{"dbfs":-120.0,"gate_open":false}"#])
        let config = try #require(subscriber.messages(on: "homeassistant/sensor/earshot_quiet/level/config").last?.json)
        #expect(config["state_topic"] as? String == "earshot/quiet/level")
        #expect(config["json_attributes_topic"] as? String == "earshot/quiet/level")
        #expect(config["value_template"] as? String == "{{ value_json.dbfs }}")
        #expect(config["unit_of_measurement"] as? String == "dBFS")
        #expect(config["state_class"] as? String == "measurement")
        #expect(config["device_class"] == nil)
    }

    @Test("level_interval = off: no level message, and an earlier run's retained Sound level config is deleted",
          .needsMosquitto, .needsEarshotdBuilt)
    func levelOff() throws {
        let broker = try MosquittoBroker()
        let configTopic = "homeassistant/sensor/earshot_quiet/level/config"
        try MQTTPublish.send(port: broker.port, topic: configTopic, payload: #"{"name":"Sound level"}"#, retain: true)
        let subscriber = try MQTTSubscriber(port: broker.port)
        let setup = try MQTTDaemonSetup(port: broker.port, node: "quiet", extraMQTT: ["level_interval = off"], watch: "smoke_alarm")
        defer { setup.remove() }
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-"], standardInput: true)
        #expect(subscriber.waitFor(seconds: 20) { $0.contains { $0.topic == "earshot/quiet/availability" && $0.payload == "online" } },
                "\(daemon.errorText)")
        daemon.input.fileHandleForWriting.write(SyntheticAudio.pcm(
            SyntheticAudio.silence(seconds: 2) + SyntheticAudio.sine(seconds: 3, amplitude: 0.1)))
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 30) == 0, "\(daemon.errorText)")
        #expect(subscriber.waitFor(seconds: 10) { $0.contains { $0.topic == "earshot/quiet/availability" && $0.payload == "offline" } })
        #expect(subscriber.messages(on: "earshot/quiet/level").isEmpty)
        #expect(subscriber.messages(on: configTopic).map(\.payload) == [#"{"name":"Sound level"}"#, ""])
    }
}
