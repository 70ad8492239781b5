import Foundation
import Testing
import EarshotDetection
import EarshotTools

/// A reload that fails is told to every output, not only the log (trial 11 #4): `systemctl reload` reports success
/// whatever the file says. A real earshotd, a real socket, the real `earshot status`.
@Suite("Reload: a failed reload is a health event and a status line", .serialized)
struct ReloadFailureTests {
    @Test("SIGHUP with overlap = 1.5: subscribers get config_reload_failed, the journal a health line, the status reply reload_error and earshot status its line; a good reload clears it",
          .needsEarshotdBuilt, .needsEarshotBuilt)
    func failedReloadIsSaid() throws {
        let scratch = try DaemonScratch(["[detection]", "watch = smoke_alarm"])
        defer { scratch.remove() }
        // No capture device: the socket is served all the same, and no audio is needed.
        let daemon = try DaemonProcess(["--config", scratch.config.path, "--device", "earshot_no_such_pcm"])
        var connected: EventSubscriber?
        #expect(TestWait.until(seconds: 30) { connected = try? SocketTestSupport.subscriber(scratch.socket); return connected != nil },
                "\(daemon.errorText)")
        let subscriber = try #require(connected)
        let good = try String(contentsOf: scratch.config, encoding: .utf8)

        // Lines 8 and 9 of the file.
        try (good + "[analysis]\noverlap = 1.5\n").write(to: scratch.config, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        let message = "\(scratch.config.path):9: [analysis] overlap = 1.5: must be in [0, 1); running the previous configuration"
        var health: [String: Any]?
        while health == nil, case .line(let line) = try subscriber.readLine(timeoutSeconds: 30) {
            guard let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any],
                  object["type"] as? String == "health", object["state"] as? String == "config_reload_failed" else { continue }
            health = object
        }
        let event = try #require(health, "\(daemon.errorText)")
        #expect(event["message"] as? String == message)
        #expect(Array(event.keys).sorted() == ["message", "state", "time", "type"])
        let time = try #require(event["time"] as? String)
        #expect(HealthEvent.State.configReloadFailed.priority == 4)
        #expect(TestWait.until(seconds: 10) { daemon.errorText.contains("earshotd: health config_reload_failed: \(message)\n") },
                "\(daemon.errorText)")
        #expect(!daemon.errorText.contains("configuration reloaded"))

        let status = try #require(try MQTTBrokerTests.status(socket: scratch.socket, timeout: 10))
        let reloadError = try #require(status["reload_error"] as? [String: Any], "\(status)")
        #expect(reloadError["message"] as? String == message)
        #expect(reloadError["time"] as? String == time)
        let text = try #require(try EarshotCLI.run(["status", "--socket", scratch.socket], in: scratch.directory, timeout: 30))
        #expect(text.status == 0, "\(text.standardError)")
        let clock = try #require(EventTextFormat.localTime(time, timeZone: nil)).suffix(8)
        #expect(text.outputLines.last == "reload failed at \(clock): \(message)", "\(text.outputLines)")

        // The file fixed: the reload succeeds and the failure is gone from the status.
        try good.write(to: scratch.config, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        #expect(TestWait.until(seconds: 30) { daemon.errorText.contains("earshotd: configuration reloaded: watching smoke_alarm\n") },
                "\(daemon.errorText)")
        let fixed = try #require(try MQTTBrokerTests.status(socket: scratch.socket, timeout: 10))
        #expect(fixed["reload_error"] == nil, "\(fixed)")
        let fixedText = try #require(try EarshotCLI.run(["status", "--socket", scratch.socket], in: scratch.directory, timeout: 30))
        #expect(fixedText.status == 0)
        #expect(fixedText.outputLines.last?.hasPrefix("windows: ") == true, "\(fixedText.outputLines)")
        #expect(!fixedText.outputLines.contains { $0.hasPrefix("reload failed") })

        daemon.signal(SIGTERM)
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
    }
}
