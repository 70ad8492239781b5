import Foundation
import Testing
import EarshotOutputs
import EarshotTools

/// `earshot test-alert` must not say a phone or Home Assistant was reached when it was not (trial 11 #8): with the
/// MQTT broker down and a `[notify]` URL answering 500, the reply comes once the URL's first attempt has failed
/// and the broker has not acknowledged the alert by the deadline (10 s): a line for each, both under
/// `not_reached` (the command exits 69), and `earshot status` shows both outputs' trouble. A real earshotd, a real
/// HTTP receiver, a real mosquitto stopped before the daemon starts (its port then has nothing listening).
@Suite("Test alert: outputs known not to reach", .serialized)
struct TestAlertReachTests {
    @Test("broker down and a URL answering 500: test-alert prints 'failed: HTTP 500 (retrying: 3 more attempts)' and 'not reached: disconnected' and exits 69; earshot status shows the mqtt and notify lines; a second alert's JSON names both under not_reached and the URL under notify_failing",
          .needsMosquitto, .needsEarshotdBuilt, .needsEarshotBuilt)
    func outputsNotReached() throws {
        let receiver = try HTTPTestServer { _ in .init(status: 500) }
        defer { receiver.stop() }
        let broker = try MosquittoBroker()
        let port = broker.port
        broker.stop()
        let setup = try MQTTDaemonSetup(port: port, node: "hall", extraMQTT: ["[notify]", "url = \(receiver.url("/hook"))"])
        defer { setup.remove() }
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-"], standardInput: true)
        #expect(TestWait.until(seconds: 30) { daemon.objects.contains { $0["state"] as? String == "mqtt_unavailable" } },
                "\(daemon.errorText)")
        let scratch = FileManager.default.temporaryDirectory
        let origin = receiver.url("/hook")  // one URL: shown with its path

        let first = try #require(try EarshotCLI.run(["test-alert", "--socket", setup.socket], in: scratch, timeout: 30))
        let sentAt = Date()
        #expect(first.status == 69, "\(first.standardOutput)\(first.standardError)")
        #expect(first.outputLines.count == 4, "\(first.outputLines)")
        #expect(first.outputLines.first?.hasPrefix("test alert sent from hall at ") == true)
        #expect(first.outputLines.count > 1 && first.outputLines[1] == "notify \(origin): failed: HTTP 500 (retrying: 3 more attempts)")
        let mqttLine = #/mqtt broker 127\.0\.0\.1:(\d+): not reached: disconnected; the alert waits in the outbox \((\d+) messages waiting\) and goes out when it connects/#
        let match = try #require(try mqttLine.wholeMatch(in: first.outputLines.count > 2 ? first.outputLines[2] : ""), "\(first.outputLines)")
        #expect(Int(match.output.1) == port)
        // Trial 15 L4: not "notification: ... Earshot can reach this phone" when the URL did not accept it.
        #expect(first.outputLines.last == #"notification not delivered to every URL (see above); the text sent: "Test alert from hall: Earshot can reach this phone""#)

        // The receiver's 500s make notify give up (1 + 2 + 4 s of retries): notify_failed, then the URL is failing.
        #expect(TestWait.until(seconds: 30) { daemon.objects.contains { $0["state"] as? String == "notify_failed" } },
                "\(daemon.errorText)")
        let status = try #require(try EarshotCLI.run(["status", "--socket", setup.socket], in: scratch, timeout: 30))
        #expect(status.status == 0)
        #expect(status.outputLines.contains { (try? #/mqtt: disconnected from 127\.0\.0\.1:\d+ \(\d+ messages waiting\)/#.wholeMatch(in: $0)) != nil }, "\(status.outputLines)")
        #expect(status.outputLines.contains("notify: failing to \(origin) (1 given up since start; see notify_failed in the journal)"), "\(status.outputLines)")

        // A second test alert once the 10 s interval is over, as JSON: the URL failing until now is named too.
        let wait = 10.5 - Date().timeIntervalSince(sentAt)
        if wait > 0 { Thread.sleep(forTimeInterval: wait) }
        let second = try #require(try EarshotCLI.run(["test-alert", "--socket", setup.socket, "--json"], in: scratch, timeout: 30))
        #expect(second.status == 69, "\(second.standardOutput)\(second.standardError)")
        let reply = try #require((try? JSONSerialization.jsonObject(with: Data(second.standardOutput.utf8))) as? [String: Any], "\(second.standardOutput)")
        #expect(reply["notify_failing"] as? [String] == [origin])
        let notReached = try #require(reply["not_reached"] as? [String: String], "\(reply)")
        #expect(notReached.keys.sorted() == ["mqtt", "notify"])
        #expect(notReached["notify"] == "\(origin): HTTP 500 (retrying: 3 more attempts)")
        #expect(notReached["mqtt"]?.hasPrefix("the broker 127.0.0.1:\(port) is disconnected: the alert waits in the outbox (") == true)
        let results = try #require(reply["results"] as? [[String: Any]], "\(reply)")
        #expect(results.map { $0["output"] as? String } == ["notify", "mqtt"])
        #expect(results.map { $0["target"] as? String } == [origin, "127.0.0.1:\(port)"])
        #expect(results.map { $0["result"] as? String } == ["failed", "not_acknowledged"])
        #expect(results.first?["problem"] as? String == "HTTP 500")
        #expect(results.first?["http_status"] as? Int == 500)
        #expect(results.first?["retries_left"] as? Int == 3)
        #expect(results.last?["connected"] as? Bool == false)
        daemon.signal(SIGTERM)
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
    }
}
