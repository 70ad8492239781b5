import Foundation
import Testing
import EarshotOutputs
import EarshotTools

/// `earshot test-alert` must not say a phone or Home Assistant was reached when the daemon knows it was not (trial 11
/// #8): with the MQTT broker down and a `[notify]` URL answering 500, the reply names MQTT under `not_reached` (the
/// command exits 69) and the failing URL under `notify_failing`, and `earshot status` shows both outputs' trouble. A real earshotd, a real HTTP
/// receiver, a real mosquitto stopped before the daemon starts (its port then has nothing listening).
@Suite("Test alert: outputs known not to reach", .serialized)
struct TestAlertReachTests {
    @Test("broker down and a URL answering 500: test-alert prints 'not reached now' for mqtt and exits 69, and, once notify_failed was said, names the failing URL (tried all the same); earshot status shows the mqtt and notify lines",
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
        #expect(first.outputLines.count == 3, "\(first.outputLines)")
        #expect(first.outputLines.first?.hasPrefix("test alert sent from hall at ") == true)
        let mqttLine = #/not reached now: mqtt: the broker 127\.0\.0\.1:(\d+) is disconnected: the alert waits in the outbox \((\d+) messages waiting\) and goes out when it connects/#
        let match = try #require(try mqttLine.wholeMatch(in: first.outputLines.count > 1 ? first.outputLines[1] : ""), "\(first.outputLines)")
        #expect(Int(match.output.1) == port)
        #expect(first.outputLines.last == "notification: Test alert from hall: Earshot can reach this phone")

        // The receiver's 500s make notify give up (1 + 2 + 4 s of retries): notify_failed, then the URL is failing.
        #expect(TestWait.until(seconds: 30) { daemon.objects.contains { $0["state"] as? String == "notify_failed" } },
                "\(daemon.errorText)")
        let status = try #require(try EarshotCLI.run(["status", "--socket", setup.socket], in: scratch, timeout: 30))
        #expect(status.status == 0)
        #expect(status.outputLines.contains { (try? #/mqtt: disconnected from 127\.0\.0\.1:\d+ \(\d+ messages waiting\)/#.wholeMatch(in: $0)) != nil }, "\(status.outputLines)")
        #expect(status.outputLines.contains("notify: failing to \(origin) (1 given up since start; see notify_failed in the journal)"), "\(status.outputLines)")

        // A second test alert once the 10 s interval is over: both outputs are named.
        let wait = 10.5 - Date().timeIntervalSince(sentAt)
        if wait > 0 { Thread.sleep(forTimeInterval: wait) }
        let second = try #require(try EarshotCLI.run(["test-alert", "--socket", setup.socket], in: scratch, timeout: 30))
        #expect(second.status == 69, "\(second.standardOutput)\(second.standardError)")
        #expect(second.outputLines.count == 4, "\(second.outputLines)")
        #expect(second.outputLines.count > 1 && second.outputLines[1].hasPrefix("not reached now: mqtt: the broker 127.0.0.1:\(port) is disconnected: "))
        #expect(second.outputLines.count > 2 && second.outputLines[2] == "notify: notifications to \(origin) were failing until now (notify_failed); this alert is tried all the same: notify_recovered in the journal says it got through")
        daemon.signal(SIGTERM)
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
    }
}
