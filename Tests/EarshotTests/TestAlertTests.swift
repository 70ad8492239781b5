import Foundation
import Testing
import EarshotTools
import EarshotOutputs

/// No way to test the chain from the daemon to a phone and Home Assistant without playing an alarm (trial 7 #14):
/// `earshot test-alert` (`{"cmd":"test"}`) and Home Assistant's `Test alert` button route one test alert to every
/// output that carries alerts. A real earshotd, a real HTTP receiver (ntfy format), a real mosquitto.
@Suite("Test alert: earshot test-alert, {\"cmd\":\"test\"} and the Test alert button")
struct TestAlertTests {
    @Test("earshot test-alert: the socket's subscribers, stdout, the journal (one line), MQTT and the phone get it, the history does not; a second within 10 s is refused (75), by MQTT too; the button sends one after",
          .needsMosquitto, .needsEarshotdBuilt, .needsEarshotBuilt)
    func endToEnd() throws {
        let receiver = try HTTPTestServer { _ in .init(status: 200) }
        defer { receiver.stop() }
        let broker = try MosquittoBroker()
        let subscriber = try MQTTBatteryTests.subscriber(port: broker.port)
        let setup = try MQTTDaemonSetup(
            port: broker.port, node: "den",
            extraMQTT: ["[notify]", "url = \(receiver.url("/phone"))", "format = ntfy", "groups = smoke_alarm", "health = false"],
            watch: "smoke_alarm | baby_cry")
        defer { setup.remove() }
        // The history is on, to show that it does not take test alerts (not among the outputs the CLI prints).
        let history = setup.directory.appendingPathComponent("h.sqlite3").path
        try (try String(contentsOf: setup.config, encoding: .utf8))
            .replacingOccurrences(of: "[history]\nenabled = false", with: "[history]\npath = \(history)")
            .write(to: setup.config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-"], standardInput: true)
        let button = "homeassistant/button/earshot_den/test_alert/config"
        #expect(subscriber.waitFor(seconds: 30) { $0.contains { $0.topic == button } }, "\(daemon.errorText)")
        #expect(subscriber.messages(on: button).last?.json?["command_topic"] as? String == "earshot/den/test_alert/set")

        // A client subscribed to baby_cry alone gets it too: a test alert has no group.
        let listener = try EventSubscriber(path: setup.socket)
        try listener.send(line: #"{"subscribe":["baby_cry"]}"#)
        #expect(try listener.nextReply(timeoutSeconds: 10) == #"{"type":"subscribed","groups":["baby_cry"]}"#)

        let sent = try #require(try EarshotCLI.run(["test-alert", "--socket", setup.socket], in: setup.directory, timeout: 30))
        let sentAt = Date()
        let line = try #require(try listener.nextLine(timeoutSeconds: 10) { _ in true })
        let object = try #require((try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any])
        let time = try #require(object["time"] as? String)
        #expect(line == #"{"type":"test_alert","time":"\#(time)"}"#)
        #expect(EventTextFormat.format(line: #"{"type":"test_alert","time":"2026-12-06T20:19:26.120Z"}"#, timeZone: TimeZone(identifier: "UTC")!)
                == "2026-12-06 20:19:26  test alert (earshot test-alert, or Home Assistant's Test alert button)")
        #expect(sent.status == 0, "\(sent.standardError)")
        // The reply waits for the receiver's answer and the broker's acknowledgement (the times vary).
        let shown = "http://127.0.0.1:\(receiver.port)/phon…"
        #expect(sent.outputLines.map { $0.replacing(#/in \d+\.\d\d s$/#, with: "in S s") } == [
            "test alert sent from den at \(time) to: socket, journal, stdout, notify, mqtt",
            "notify \(shown): delivered (HTTP 200) in S s",
            "mqtt broker 127.0.0.1:\(broker.port): acknowledged in S s",
            "notification: Test alert from den: Earshot can reach this phone",
        ])

        // At once again: refused, from the CLI (75) and from the button (a journal line).
        let again = try #require(try EarshotCLI.run(["test-alert", "--socket", setup.socket], in: setup.directory, timeout: 30))
        #expect(again.status == 75)
        #expect(again.standardOutput == "")
        let refusal = try #require(again.errorLines.first)
        #expect(again.errorLines.count == 1)
        #expect(refusal.hasPrefix("earshot: test alert refused: one was sent ") && refusal.contains(" s ago; at most one per 10 s (try again in "), "\(refusal)")
        try MQTTPublish.send(port: broker.port, topic: "earshot/den/test_alert/set", payload: "PRESS")
        #expect(TestWait.until(seconds: 10) { daemon.errorText.contains("earshotd: MQTT: test alert refused: one was sent ") }, "\(daemon.errorText)")

        // 10 s after the first, the button sends the next.
        Thread.sleep(forTimeInterval: max(0, 10.3 - Date().timeIntervalSince(sentAt)))
        try MQTTPublish.send(port: broker.port, topic: "earshot/den/test_alert/set", payload: "PRESS")
        let requests = receiver.waitForRequests(2, timeout: 15)
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")

        try #require(requests.count == 2)
        #expect(requests.map(\.body) == Array(repeating: "Test alert from den: Earshot can reach this phone", count: 2))
        #expect(requests.map { $0.header("Title") ?? "" } == ["den: test alert", "den: test alert"])
        // The journal (standard error without one): one line each.
        let journal = daemon.errorText.split(separator: "\n").filter { $0.contains("test alert (requested over") }
        #expect(journal == [
            "earshotd: test alert (requested over the event socket): sent to every output that carries alerts",
            "earshotd: test alert (requested over MQTT (Home Assistant's Test alert button)): sent to every output that carries alerts",
        ])
        #expect(daemon.objects.filter { $0["type"] as? String == "test_alert" }.count == 2)
        // MQTT: the event topic as the socket's line plus the node, and the event entity's event_type.
        #expect(subscriber.waitFor(seconds: 10) { _ in subscriber.messages(on: "earshot/den/detected").count == 2 })
        #expect(subscriber.messages(on: "earshot/den/event").first { $0.payload.contains("test_alert") }?.payload
                == #"{"type":"test_alert","time":"\#(time)","node":"den"}"#)
        #expect(subscriber.messages(on: "earshot/den/detected").first?.payload == #"{"event_type":"test_alert","time":"\#(time)","node":"den"}"#)
        let events = try #require(subscriber.messages(on: "homeassistant/event/earshot_den/events/config").last?.json)
        #expect((events["event_types"] as? [String])?.last == "test_alert")
        // The history, which writes its file with the first event it stores, stored nothing.
        #expect(!FileManager.default.fileExists(atPath: history))
        // Like mute and unmute, a test alert needs a control user.
        #expect(EventServer.Configuration().controlCommands.contains("test"))
    }
}
