import Foundation
import Testing
import Glibc
import EarshotOutputs
import EarshotTools

/// `earshot test-alert` replied at once, so a webhook answering 500 or a broker that never got the alert went unseen
/// by the command meant to check the chain to the phone (trial 11 #8): the daemon now replies once each `[notify]`
/// URL's first attempt has its answer and the MQTT broker has acknowledged the alert (PUBACK), or 10 s after it
/// went out, and the socket keeps serving other clients meanwhile. A real earshotd, a real HTTP receiver on
/// 127.0.0.1, a real mosquitto; the exact lines and exit statuses of the real `earshot`.
@Suite("Test alert: each output's result for this alert", .serialized)
struct TestAlertResultsTests {
    /// The node of a `test alert sent from NODE at TIME to: socket, journal, stdout, notify, mqtt` line, whatever the time.
    static func sentFrom(_ line: String) -> String? {
        (try? #/test alert sent from (\w+) at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z to: socket, journal, stdout, notify, mqtt/#.wholeMatch(in: line))
            .flatMap { $0 }.map { String($0.output.1) }
    }

    @Test("a receiver answering 200 and a broker up: 'notify URL: delivered (HTTP 200) in S s', 'mqtt broker HOST:PORT: acknowledged in S s', exit 0; the JSON reply's results say the same",
          .needsMosquitto, .needsEarshotdBuilt, .needsEarshotBuilt)
    func deliveredAndAcknowledged() throws {
        let receiver = try HTTPTestServer { _ in .init(status: 200) }
        defer { receiver.stop() }
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let setup = try MQTTDaemonSetup(
            port: broker.port, node: "attic", extraMQTT: ["[notify]", "url = \(receiver.url("/ring"))", "format = ntfy", "health = false"])
        defer { setup.remove() }
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-"], standardInput: true)
        defer { daemon.signal(SIGKILL) }
        #expect(subscriber.waitFor(seconds: 30) { _ in subscriber.messages(on: "earshot/attic/availability").last?.payload == "online" },
                "\(daemon.errorText)")
        let origin = receiver.url("/ring")  // one URL, a path of 4 characters: shown whole

        let sent = try #require(try EarshotCLI.run(["test-alert", "--socket", setup.socket], in: setup.directory, timeout: 30))
        let sentAt = Date()
        #expect(sent.status == 0, "\(sent.standardOutput)\(sent.standardError)")
        #expect(sent.outputLines.count == 4, "\(sent.outputLines)")
        let lines = sent.outputLines + Array(repeating: "", count: 4)
        #expect(Self.sentFrom(lines[0]) == "attic", "\(lines[0])")
        let notifyLine = try Regex(#"notify \#(NSRegularExpression.escapedPattern(for: origin)): delivered \(HTTP 200\) in \d+\.\d\d s"#)
        #expect(try notifyLine.wholeMatch(in: lines[1]) != nil, "\(lines[1])")
        let mqttLine = try Regex(#"mqtt broker 127\.0\.0\.1:\#(broker.port): acknowledged in \d+\.\d\d s"#)
        #expect(try mqttLine.wholeMatch(in: lines[2]) != nil, "\(lines[2])")
        #expect(lines[3] == "notification: Test alert from attic: Earshot can reach this phone")
        // The reply came after the receiver had the alert, and the broker passed it on.
        #expect(receiver.requests.map(\.body) == ["Test alert from attic: Earshot can reach this phone"])
        #expect(subscriber.waitFor(seconds: 10) { _ in subscriber.messages(on: "earshot/attic/detected").count == 1 })

        // The JSON reply of the next one (the 10 s interval over): a result per destination, nothing not reached.
        Thread.sleep(forTimeInterval: max(0, 10.3 - Date().timeIntervalSince(sentAt)))
        let json = try #require(try EarshotCLI.run(["test-alert", "--socket", setup.socket, "--json"], in: setup.directory, timeout: 30))
        #expect(json.status == 0, "\(json.standardOutput)\(json.standardError)")
        let reply = try #require((try? JSONSerialization.jsonObject(with: Data(json.standardOutput.utf8))) as? [String: Any], "\(json.standardOutput)")
        #expect(reply["not_reached"] == nil)
        #expect(reply["notify_failing"] == nil)
        let results = try #require(reply["results"] as? [[String: Any]], "\(reply)")
        #expect(results.map { $0.keys.sorted() } == [["http_status", "output", "result", "seconds", "target"], ["output", "result", "seconds", "target"]])
        #expect(results.map { $0["output"] as? String } == ["notify", "mqtt"])
        #expect(results.map { $0["target"] as? String } == [origin, "127.0.0.1:\(broker.port)"])
        #expect(results.map { $0["result"] as? String } == ["delivered", "acknowledged"])
        #expect(results.first?["http_status"] as? Int == 200)
        daemon.signal(SIGTERM)
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
    }

    @Test("a receiver holding its answer past the deadline: the reply comes 10 s after the alert with 'notify URL: no answer within 10 s (still trying; ...)', exit 69; an earshot status sent while it waits is answered before it",
          .needsMosquitto, .needsEarshotdBuilt, .needsEarshotBuilt)
    func heldAnswerAndStatusMeanwhile() throws {
        // Held until the receiver stops (the test's end); the attempt's own timeout, 30 s, is past the deadline.
        let receiver = try HTTPTestServer { _ in .init(status: 200, delaySeconds: 600) }
        defer { receiver.stop() }
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let setup = try MQTTDaemonSetup(
            port: broker.port, node: "cellar",
            extraMQTT: ["[notify]", "url = \(receiver.url("/slow"))", "health = false", "timeout = 30"])
        defer { setup.remove() }
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-"], standardInput: true)
        defer { daemon.signal(SIGKILL) }
        #expect(subscriber.waitFor(seconds: 30) { _ in subscriber.messages(on: "earshot/cellar/availability").last?.payload == "online" },
                "\(daemon.errorText)")
        let executable = try #require(EarshotCLI.executable)

        let alert = try DaemonProcess(["test-alert", "--socket", setup.socket], program: executable)
        defer { alert.signal(SIGKILL) }
        // The receiver has the request and holds its answer: the daemon waits for it.
        #expect(receiver.waitForRequests(1, timeout: 30).count == 1, "\(daemon.errorText)")
        let status = try #require(try EarshotCLI.run(["status", "--socket", setup.socket], in: setup.directory, timeout: 30))
        // Answered while the test alert's reply is still to come (that one waits for the deadline).
        #expect(alert.process.isRunning, "\(alert.lines.map(\.line))")
        #expect(status.status == 0, "\(status.standardError)")
        // Two clients: this one and the test alert waiting for its reply.
        #expect(status.outputLines.first?.hasPrefix("earshotd: capture ") == true, "\(status.outputLines)")
        #expect(status.outputLines.contains { $0.hasPrefix("windows: ") && $0.hasSuffix(", clients: 2") }, "\(status.outputLines)")

        #expect(alert.wait(seconds: 30) == 69, "\(alert.lines.map(\.line)) \(alert.errorText)")
        let lines = alert.lines.map(\.line) + Array(repeating: "", count: 4)
        #expect(alert.lines.count == 4, "\(alert.lines.map(\.line))")
        #expect(Self.sentFrom(lines[0]) == "cellar", "\(lines[0])")
        #expect(lines[1] == "notify \(receiver.url("/slow")): no answer within 10 s (still trying; notify_failed in the journal says if it fails)")
        let mqttLine = try Regex(#"mqtt broker 127\.0\.0\.1:\#(broker.port): acknowledged in \d+\.\d\d s"#)
        #expect(try mqttLine.wholeMatch(in: lines[2]) != nil, "\(lines[2])")
        #expect(lines[3] == #"notification not delivered to every URL (see above); the text sent: "Test alert from cellar: Earshot can reach this phone""#)
        #expect(alert.errorText == "")
        receiver.stop()
        daemon.signal(SIGTERM)
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
    }
}
