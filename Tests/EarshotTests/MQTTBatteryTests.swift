import Foundation
import Testing
import EarshotSupport
import EarshotDetection
import EarshotOutputs

/// A low-battery chirp was only a stateless event (trial 7 #14): the `Smoke alarm battery` binary sensor keeps it,
/// `ON` from a chirp until none for `batteryLowHoldSeconds` (2 hours; shortened here), retained across restarts.
/// MQTT sinks of the test's own (as the daemon makes them) and earshotd itself, on a real mosquitto.
@Suite("MQTT: the Smoke alarm battery sensor, on a real mosquitto")
struct MQTTBatteryTests {
    static let controls = ControlState(groups: ["smoke_alarm"], eventGroups: ["smoke_alarm", "snoring", "alarm_chirp"])
    static let state = "earshot/hall/alarm_chirp/state"
    static let config = "homeassistant/binary_sensor/earshot_hall/smoke_alarm_battery/config"

    /// A started sink for node `hall` on `port`, holding a low battery for `holdSeconds`, given `controls`.
    static func sink(port: Int, holdSeconds: Double, controls: ControlState = Self.controls) throws -> MQTTSink {
        var settings = MQTTSettings()
        settings.enabled = true
        settings.host = "127.0.0.1"
        settings.port = port
        settings.node = "hall"
        settings.keepaliveSeconds = 5
        settings.batteryLowHoldSeconds = holdSeconds
        let sink = try MQTTSink(settings: settings, commands: { _ in }, log: { _, _ in })
        sink.start(reportHealth: { _ in })
        sink.deliver(RoutedOutput(output: .controls(controls), time: Date()))
        return sink
    }

    /// An `alarm_chirp` onset as the pattern detector makes it (a chirp every 40 s at 3300 Hz).
    static let chirp = DaemonOutput.alarm(AlarmEvent(
        kind: .onset, group: AlarmEvent.alarmChirp, source: .pattern, pattern: .chirp, cycles: 3, toneHz: 3300,
        toneLevelDBFS: -20, classifierScore: nil, classifierClass: nil, start: 82, time: 84.5, intervalSeconds: 40))

    /// A subscriber on `#` that has subscribed (a probe it published came back): an in-process sink publishes
    /// within milliseconds, before `mosquitto_sub` would be listening.
    static func subscriber(port: Int) throws -> MQTTSubscriber {
        let subscriber = try MQTTSubscriber(port: port)
        for _ in 0..<50 where subscriber.messages(on: "test/ready").isEmpty {
            try MQTTPublish.send(port: port, topic: "test/ready", payload: "1")
            subscriber.waitFor(seconds: 0.2) { !$0.isEmpty }
        }
        return subscriber
    }

    static func payloads(_ subscriber: MQTTSubscriber, after start: Int = 0) -> [String] {
        subscriber.messages.dropFirst(start).filter { $0.topic == state }.map(\.payload)
    }

    /// The state's changes: ``payloads(_:after:)`` without repeats (a state set before the connection is
    /// published, then again with every state at connect).
    static func changes(_ subscriber: MQTTSubscriber) -> [String] {
        payloads(subscriber).reduce(into: []) { changes, payload in if changes.last != payload { changes.append(payload) } }
    }

    @Test("a chirp: ON (retained) at once, OFF once the hold passed without another; the next chirp ON again",
          .needsMosquitto)
    func chirpThenQuiet() throws {
        let broker = try MosquittoBroker()
        let subscriber = try Self.subscriber(port: broker.port)
        let hold = 1.5
        let sink = try Self.sink(port: broker.port, holdSeconds: hold)
        var chirpedAt: [Date] = []
        for round in 1...2 {
            // The first at once, before the start's own hold could run out.
            chirpedAt.append(Date())
            sink.deliver(RoutedOutput(output: Self.chirp, time: Date()))
            #expect(subscriber.waitFor(seconds: 10) { _ in Self.changes(subscriber).count == 2 * round }, "\(Self.payloads(subscriber))")
        }
        sink.stop()
        #expect(Self.changes(subscriber) == ["ON", "OFF", "ON", "OFF"])
        // Each OFF came no earlier than the hold after its chirp (the start's own hold was overtaken by the chirp).
        let offs = subscriber.messages(on: Self.state).filter { $0.payload == "OFF" }.map(\.arrival)
        for (off, chirp) in zip(offs, chirpedAt) { #expect(off.timeIntervalSince(chirp) >= hold - 0.05) }
        let config = try #require(subscriber.messages(on: Self.config).last?.json)
        #expect(config["device_class"] as? String == "battery")
        #expect(config["state_topic"] as? String == Self.state)
        #expect(subscriber.messages(on: "earshot/hall/detected").compactMap { $0.json?["event_type"] as? String } == ["alarm_chirp", "alarm_chirp"])
    }

    @Test("a restart keeps a retained ON until the hold passed from the start without a chirp; without alarm_chirp the sensor and its state are deleted",
          .needsMosquitto)
    func restartKeepsLowBattery() throws {
        let broker = try MosquittoBroker()
        let subscriber = try Self.subscriber(port: broker.port)
        let first = try Self.sink(port: broker.port, holdSeconds: 600)
        first.deliver(RoutedOutput(output: Self.chirp, time: Date()))
        #expect(subscriber.waitFor(seconds: 10) { _ in Self.changes(subscriber) == ["ON"] })
        first.stop()
        #expect(subscriber.waitFor(seconds: 10) { $0.filter { $0.topic == "earshot/hall/availability" }.last?.payload == "offline" })

        // The next run: its connect leaves the battery state alone; the hold from its start turns it OFF.
        let seen = subscriber.messages.count
        let hold = 2.0
        let started = Date()
        let second = try Self.sink(port: broker.port, holdSeconds: hold)
        #expect(subscriber.waitFor(seconds: 10) { _ in Self.payloads(subscriber, after: seen) == ["OFF"] })
        let after = Array(subscriber.messages.dropFirst(seen))
        let online = after.firstIndex { $0.topic == "earshot/hall/availability" && $0.payload == "online" }
        let offIndex = try #require(after.firstIndex { $0.topic == Self.state })
        // Online (with every state it publishes at connect) before the OFF, which came a hold after the start.
        #expect(online.map { $0 < offIndex } == true)
        #expect(after[offIndex].arrival.timeIntervalSince(started) >= hold - 0.05)
        second.stop()

        // A run that publishes no alarm_chirp (no smoke or CO watched): the sensor's config and state are emptied.
        let third = try Self.sink(port: broker.port, holdSeconds: hold, controls: ControlState(groups: ["baby_cry"], eventGroups: ["baby_cry", "snoring"]))
        #expect(subscriber.waitFor(seconds: 10) { _ in subscriber.messages(on: Self.config).last?.payload == "" })
        #expect(subscriber.waitFor(seconds: 10) { _ in subscriber.messages(on: Self.state).last?.payload == "" })
        // Its hold passing publishes nothing about a battery it does not watch.
        Thread.sleep(forTimeInterval: hold + 0.5)
        third.stop()
        #expect(subscriber.messages(on: Self.state).last?.payload == "")
    }

    @Test("earshotd hears four low-battery chirps 40 s apart: one alarm_chirp, the sensor ON and still retained after it stopped",
          .needsMosquitto, .needsEarshotdBuilt)
    func daemonChirps() throws {
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let setup = try MQTTDaemonSetup(port: broker.port, node: "hall", watch: "smoke_alarm")
        defer { setup.remove() }
        let audio = setup.directory.appendingPathComponent("chirps.wav")
        try SyntheticAudio.writeWAV(
            AlarmSignals.render(AlarmSignals.chirps(count: 4, interval: 40, start: 2), seconds: 130, sampleRate: 16_000, amplitude: 0.3),
            to: audio)
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", audio.path, "--input-speed", "max"])
        #expect(daemon.wait(seconds: 60) == 0, "\(daemon.errorText)")
        #expect(daemon.objects.filter { $0["group"] as? String == "alarm_chirp" }.map { $0["type"] as? String } == ["detection"])
        #expect(subscriber.waitFor(seconds: 10) { _ in Self.changes(subscriber) == ["ON"] }, "\(Self.payloads(subscriber))")
        #expect(subscriber.messages(on: Self.config).last?.json?["device_class"] as? String == "battery")
        let late = try MQTTSubscriber(port: broker.port, topic: Self.state)
        #expect(late.waitFor(seconds: 10) { !$0.isEmpty })
        #expect(late.messages.map { [$0.retained ? "retained" : "live", $0.payload] } == [["retained", "ON"]])
    }
}
