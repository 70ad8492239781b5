import Foundation
import Testing
import EarshotOutputs
import EarshotTools

/// A `[notify]` server that accepts and never answers must not take the socket's goodbye (trial 11 #1): the stop
/// gives the network sinks what is left of its 4 s but the local sinks' share, then the socket sends
/// `{"type":"shutdown"}`. A real earshotd, a real HTTP receiver that holds its answer, a real mosquitto.
@Suite("Notify: a receiver that never answers at stop", .serialized)
struct NotifyStopTests {
    @Test("SIGTERM while a notification waits for an answer: the subscriber gets shutdown (exit 0), MQTT goes offline, the log counts the notification, the stop ends in time",
          .needsMosquitto, .needsEarshotdBuilt, .needsEarshotBuilt)
    func hangingReceiver() throws {
        let receiver = try HTTPTestServer { _ in .init(status: 200, delaySeconds: 60) }
        defer { receiver.stop() }
        let broker = try MosquittoBroker()
        let mqtt = try MQTTBatteryTests.subscriber(port: broker.port)
        let setup = try MQTTDaemonSetup(
            port: broker.port, node: "hall",
            extraMQTT: ["[notify]", "url = \(receiver.url("/hook"))", "format = json", "on_end = true"])
        defer { setup.remove() }
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-"], standardInput: true)
        #expect(mqtt.waitFor(seconds: 30) { _ in mqtt.messages(on: "earshot/hall/availability").last?.payload == "online" },
                "\(daemon.errorText)")
        let subscribe = EventServerClientTests.runInBackground(["subscribe", "--socket", setup.socket])
        try #require(subscribe.started)
        // The test alert goes to the receiver, which holds its answer.
        let control = try SocketTestSupport.subscriber(setup.socket)
        try control.send(line: #"{"cmd":"test"}"#)
        let requests = receiver.waitForRequests(1, timeout: 20)
        try #require(requests.count == 1, "\(daemon.errorText)")
        #expect(requests[0].path == "/hook")
        #expect(TestWait.until(seconds: 10) { daemon.objects.contains { $0["type"] as? String == "test_alert" } })

        daemon.signal(SIGTERM)
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
        let outcome = try #require(subscribe.wait())
        #expect(outcome.status == 0, "\(outcome.standardError)")
        #expect(outcome.errorLines.isEmpty)
        #expect(outcome.outputLines.last == #"{"type":"shutdown"}"#)
        // A subscriber that was there before the test alert: the alert, then shutdown as the last line.
        var lines: [String] = []
        while case .line(let line) = try control.readLine(timeoutSeconds: 10) { lines.append(line) }
        #expect(lines.filter { $0.hasPrefix(#"{"type":"test_alert","#) }.count == 1, "\(lines)")
        #expect(lines.last == #"{"type":"shutdown"}"#, "\(lines)")
        let log = daemon.errorText.split(separator: "\n").map(String.init)
        #expect(!daemon.errorText.contains("stop did not finish"), "\(daemon.errorText)")
        let undelivered = "earshotd: notify: 1 notification was not delivered before stopping (1 still waiting for an answer when the stop's time was up)"
        let counted = try #require(log.firstIndex(of: undelivered), "\(daemon.errorText)")
        let stopped = try #require(log.firstIndex(of: "earshotd: stopped (signal 15)"), "\(daemon.errorText)")
        #expect(counted < stopped)
        #expect(log.last == "earshotd: stopped (signal 15)")
        #expect(mqtt.waitFor(seconds: 10) { _ in mqtt.messages(on: "earshot/hall/availability").last?.payload == "offline" })
        mqtt.stop()
        broker.stop()
    }

    @Test("trial 16 L5: an attempt the stop cuts off (the server answers after 20 s) is counted by the stop's line and is not a notify_failed: the journal's last lines are exact",
          .needsEarshotdBuilt)
    func cutOffIsNotAFailure() throws {
        // The first notification (Listening) is answered at once, the stop's (monitoring stopped) after 20 s.
        let receiver = try HTTPTestServer { index in .init(status: 200, delaySeconds: index == 0 ? 0 : 20) }
        defer { receiver.stop() }
        let directory = try NotifyBodyTextTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = try MuteReloadRestartTests.writeConfig(in: directory, watch: nil, url: receiver.url("/hook"), notify: ["timeout = 30"])
        let daemon = try DaemonProcess(["--config", config.path, "--foreground", "--input", "-"], standardInput: true)
        defer { daemon.signal(SIGKILL) }
        daemon.input.fileHandleForWriting.write(Data(count: 16_000 * 2))
        #expect(TestWait.until(seconds: 20) { receiver.answeredCount == 1 }, "\(daemon.errorText)")
        let before = Self.journal(daemon).count
        daemon.signal(SIGTERM)
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
        #expect(receiver.requests.map { $0.body.hasPrefix("Not listening in kitchen since ") } == [false, true])
        // The attempt ends when the stop's time is up, as the stop's wait for it does: it is counted as still waiting
        // or as returned, by a hair, and is never a failure of the URL.
        let stopLines = Array(Self.journal(daemon).dropFirst(before))
        let counted = [
            "earshotd: notify: 1 notification was not delivered before stopping (1 still waiting for an answer when the stop's time was up)",
            "earshotd: notify: 1 notification was not delivered before stopping",
        ]
        #expect(stopLines.count == 2 && counted.contains(stopLines[0]), "\(stopLines)")
        #expect(stopLines.last == "earshotd: stopped (signal 15)", "\(stopLines)")
        #expect(!daemon.errorText.contains("notify_failed"), "\(daemon.errorText)")
        #expect(!daemon.objects.contains { $0["state"] as? String == "notify_failed" })
    }

    @Test("a failure the stop's own attempt finds (a 404 answered 0.5 s after the stop began) is a notify_failed ending '; earshotd is stopping', not 'detection goes on'")
    func failureFoundWhileStopping() throws {
        let server = try HTTPTestServer { _ in .init(status: 404, delaySeconds: 0.5) }
        defer { server.stop() }
        let reports = NotifyTests.Reports()
        let sink = try NotifyTests.sink(NotifyTests.settings([server.url("/missing")]) { $0.checkIntervalSeconds = 0 }, reports)
        sink.deliver(RoutedOutput(output: NotifyTests.onset(), time: NotifyTests.time))
        sink.stop()
        #expect(server.requests.count == 1)
        #expect(reports.healthEvents.map(\.message) == [
            "notifications to \(NotifySettings.shownURL(server.url("/missing"), index: 0, count: 1)) are failing: HTTP 404 after 1 attempt (check [notify] url); earshotd is stopping",
        ])
        #expect(reports.logLines == ["notify: 1 notification was not delivered before stopping"])
    }

    static func journal(_ daemon: DaemonProcess) -> [String] {
        daemon.errorText.split(separator: "\n").map(String.init)
    }
}
