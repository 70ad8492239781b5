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

    @Test("SIGHUP with a URL written in [notify] url_file, then in a class name: config_reload_failed shows it cut to subscribers, the log and the status reply (audit 14 F2)",
          .needsEarshotdBuilt)
    func failedReloadRedactsURLs() throws {
        let scratch = try DaemonScratch(["[detection]", "watch = smoke_alarm"])
        defer { scratch.remove() }
        let daemon = try DaemonProcess(["--config", scratch.config.path, "--device", "earshot_no_such_pcm"])
        var connected: EventSubscriber?
        #expect(TestWait.until(seconds: 30) { connected = try? SocketTestSupport.subscriber(scratch.socket); return connected != nil },
                "\(daemon.errorText)")
        let subscriber = try #require(connected)
        let good = try String(contentsOf: scratch.config, encoding: .utf8)
        /// The message of the config_reload_failed the socket sends after a reload with `text`.
        func reloadFailure(_ text: String) throws -> String? {
            try text.write(to: scratch.config, atomically: true, encoding: .utf8)
            daemon.signal(SIGHUP)
            while case .line(let line) = try subscriber.readLine(timeoutSeconds: 30) {
                guard let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any],
                      object["type"] as? String == "health", object["state"] as? String == "config_reload_failed" else { continue }
                return object["message"] as? String
            }
            return nil
        }
        // Lines 8 and 9: found while the file is read.
        let urlFile = "\(scratch.config.path):9: [notify] url_file = https://ntfy.sh/my-s…: takes the path of a file holding the URLs, not a URL (write the URL in that file, one per line, or in url); running the previous configuration"
        #expect(try reloadFailure(good + "[notify]\nurl_file = https://ntfy.sh/my-secret-topic-xyz\n") == urlFile, "\(daemon.errorText)")
        #expect(TestWait.until(seconds: 10) { daemon.errorText.contains("earshotd: health config_reload_failed: \(urlFile)\n") },
                "\(daemon.errorText)")
        let status = try #require(try MQTTBrokerTests.status(socket: scratch.socket, timeout: 10))
        #expect((status["reload_error"] as? [String: Any])?["message"] as? String == urlFile, "\(status)")
        // Found after the file was read (the class names against the classifier's labels): the same.
        let withWatch = good.replacingOccurrences(of: "watch = smoke_alarm", with: "watch = smoke_alarm kettle")
        let className = "\(scratch.config.path):9: [group.kettle] classes: unknown class \"https://ntfy.sh/my-s…\" (no model named https is loaded; add its file to [models] files); running the previous configuration"
        let message = try reloadFailure(withWatch + "[group.kettle]\nclasses = https://ntfy.sh/my-secret-topic-xyz\nthreshold = 0.5\n")
        #expect(message == className, "\(daemon.errorText)")
        #expect(TestWait.until(seconds: 10) { daemon.errorText.contains("earshotd: health config_reload_failed: \(className)\n") },
                "\(daemon.errorText)")
        daemon.signal(SIGTERM)
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
        #expect(!daemon.errorText.contains("my-secret-topic"), "\(daemon.errorText)")
    }
}
