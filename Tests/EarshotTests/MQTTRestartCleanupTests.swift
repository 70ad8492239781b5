import Foundation
import Testing
import Glibc

/// A group taken out of the watch list between two runs leaves nothing retained on a real `mosquitto` broker: not its
/// discovery configs, and not its state, attributes and enabled topics.
@Suite("MQTT: retained topics of a group no longer watched, across a restart")
struct MQTTRestartCleanupTests {
    @Test("Run with loud, stop, run without it: the broker keeps no retained topic of loud; baby_cry's stay",
          .needsMosquitto, .needsEarshotdBuilt)
    func groupRemovedBetweenRuns() throws {
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let setup = try MQTTDaemonSetup(port: broker.port, node: "kitchen", watch: "baby_cry | loud")
        defer { setup.remove() }
        let loudTopics = [
            "earshot/kitchen/loud/state", "earshot/kitchen/loud/attributes", "earshot/kitchen/loud/enabled",
            "homeassistant/binary_sensor/earshot_kitchen/loud/config",
            "homeassistant/switch/earshot_kitchen/loud_enabled/config",
        ]
        // samples/demo.flac is loud from 1.44 s on and has a baby crying from 2.40 s: the first run leaves every
        // topic of both retained, attributes too.
        let first = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "samples/demo.flac"])
        #expect(subscriber.waitFor(seconds: 30) { messages in
            (loudTopics + ["earshot/kitchen/baby_cry/attributes"]).allSatisfy { topic in
                messages.contains { $0.topic == topic && !$0.payload.isEmpty }
            }
        }, "\(first.errorText)")
        first.signal(SIGTERM)
        #expect(first.wait(seconds: 20) == 0, "\(first.errorText)")
        let before = try MQTTSubscriber(port: broker.port)
        #expect(before.waitFor(seconds: 10) { messages in
            loudTopics.allSatisfy { topic in messages.contains { $0.retained && $0.topic == topic } }
        }, "\(before.messages.map(\.topic))")
        before.stop()

        try (try String(contentsOf: setup.config, encoding: .utf8))
            .replacingOccurrences(of: "watch = baby_cry | loud", with: "watch = baby_cry")
            .write(to: setup.config, atomically: true, encoding: .utf8)
        let second = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-"], standardInput: true)
        #expect(subscriber.waitFor(seconds: 20) { _ in
            loudTopics.allSatisfy { subscriber.messages(on: $0).last?.payload == "" }
        }, "\(loudTopics.map { subscriber.messages(on: $0).map(\.payload) }) \(second.errorText)")
        try second.input.fileHandleForWriting.close()
        #expect(second.wait(seconds: 20) == 0, "\(second.errorText)")
        // The topics it subscribes to for this (its own capture and sleep states among them) are not commands.
        #expect(!first.errorText.contains("MQTT: ignored"), "\(first.errorText)")
        #expect(!second.errorText.contains("MQTT: ignored"), "\(second.errorText)")

        let after = try MQTTSubscriber(port: broker.port)
        #expect(after.waitFor(seconds: 10) { $0.contains { $0.topic == "earshot/kitchen/baby_cry/enabled" } })
        Thread.sleep(forTimeInterval: 1)
        #expect(after.messages.filter { $0.topic.contains("loud") }.map(\.topic) == [])
        let kept = Set(after.messages.filter(\.retained).map(\.topic))
        for topic in [
            "earshot/kitchen/baby_cry/state", "earshot/kitchen/baby_cry/attributes", "earshot/kitchen/baby_cry/enabled",
            "earshot/kitchen/capture/state", "earshot/kitchen/sleep/state",
            "homeassistant/binary_sensor/earshot_kitchen/baby_cry/config",
        ] {
            #expect(kept.contains(topic), "\(topic) not retained: \(kept.sorted())")
        }
    }
}
