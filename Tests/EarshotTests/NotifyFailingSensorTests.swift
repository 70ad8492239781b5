import Foundation
import Testing
import Glibc

/// Failing notifications had no Home Assistant entity, only JSON on `P/event` (trial 7 #14). With `[notify] url`
/// set, the `Notifications failing` binary sensor follows the notify sink's `notify_failed` and `notify_recovered`
/// health events, which reach the MQTT sink through the router like every health event. A real earshotd, a real
/// HTTP receiver that refuses its first request, and a real mosquitto.
@Suite("MQTT: the Notifications failing sensor")
struct NotifyFailingSensorTests {
    @Test("the first notification refused: notify_failed, the sensor ON; the next one (a test alert) accepted: notify_recovered, OFF",
          .needsMosquitto, .needsEarshotdBuilt, .needsEarshotBuilt)
    func failingThenAccepted() throws {
        let receiver = try HTTPTestServer { index in .init(status: index == 0 ? 503 : 200) }
        defer { receiver.stop() }
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let setup = try MQTTDaemonSetup(
            port: broker.port, node: "den", extraMQTT: ["[notify]", "url = \(receiver.url("/phone"))", "retries = 0"],
            watch: "baby_cry")
        defer { setup.remove() }
        // A file played in real time (not standard input, whose end would stop the daemon early): its start's
        // "listening" notification is refused; a test alert, once the sensor is ON, is accepted.
        let audio = setup.directory.appendingPathComponent("audio.wav")
        try SyntheticAudio.writeWAV(SyntheticAudio.sine(seconds: 40, amplitude: 0.1), to: audio)
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", audio.path])
        defer { daemon.signal(SIGKILL) }
        let state = "earshot/den/notify/state"
        func changes() -> [String] {
            subscriber.messages(on: state).map(\.payload).reduce(into: []) { changes, payload in
                if changes.last != payload { changes.append(payload) }
            }
        }
        // OFF at connect (unless the refusal came first), then ON.
        #expect(subscriber.waitFor(seconds: 30) { _ in Array(changes().drop { $0 == "OFF" }) == ["ON"] }, "\(changes())\n\(daemon.errorText)")
        let sent = try #require(try EarshotCLI.run(["test-alert", "--socket", setup.socket], in: setup.directory, timeout: 30))
        #expect(sent.status == 0, "\(sent.standardError)")
        #expect(subscriber.waitFor(seconds: 30) { _ in Array(changes().drop { $0 == "OFF" }) == ["ON", "OFF"] }, "\(changes())\n\(daemon.errorText)")
        daemon.signal(SIGTERM)
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")

        let url = "http://127.0.0.1:\(receiver.port)/phon…"
        let health = daemon.objects.filter { $0["type"] as? String == "health" && ($0["state"] as? String)?.hasPrefix("notify_") == true }
        #expect(health.map { $0["state"] as? String ?? "" } == ["notify_failed", "notify_recovered"])
        #expect(health.last?["message"] as? String == "notifications to \(url) are accepted again (1 failed before)")
        #expect(health.last?["url"] as? String == url)
        // The sensor's attributes: the last health event and the URLs still failing.
        // (Once per change: attributes set before the connection are published again at connect.)
        let attributes = subscriber.messages(on: "earshot/den/notify/attributes").map(\.payload).reduce(into: [String]()) { changes, payload in
            if changes.last != payload { changes.append(payload) }
        }.compactMap { MQTTSubscriber.Message(retained: false, topic: "", payload: $0, arrival: Date()).json }.filter { !$0.isEmpty }
        #expect(attributes.map { $0["state"] as? String ?? "" } == ["notify_failed", "notify_recovered"], "\(receiver.requests.map(\.body)) \(subscriber.messages.map { $0.topic + " " + $0.payload })\n\(daemon.errorText)")
        #expect(attributes.map { $0["failing"] as? [String] ?? ["?"] } == [[url], []])
        let config = try #require(subscriber.messages(on: "homeassistant/binary_sensor/earshot_den/notifications_failing/config").last?.json)
        #expect(config["device_class"] as? String == "problem")
        #expect(config["state_topic"] as? String == state)
        // The receiver: the refused start message, then the test alert (then the stop message, SIGTERM's).
        #expect(receiver.requests.prefix(2).map { $0.body.contains(#""state":"capture_live""#) ? "live" : $0.body.contains(#""type":"test_alert""#) ? "test" : "other" }
            == ["live", "test"], "\(receiver.requests.map(\.body)) \(subscriber.messages.map { $0.topic + " " + $0.payload })")
    }
}
