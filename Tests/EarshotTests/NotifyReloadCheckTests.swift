import Foundation
import Testing
import Glibc
import EarshotSupport
import EarshotDetection
import EarshotOutputs
import EarshotTools

/// Trial 15 M4, M2, L3: `[notify]` applies at a reload (a test alert after `systemctl reload` tests the new URL),
/// and each URL is checked between events (an HTTP `HEAD`), so a server that went away is failing before the
/// smoke alarm finds it out, and a URL failing without an answer clears soon after the server is back. Real HTTP
/// servers on 127.0.0.1, a real earshotd and a real mosquitto.
@Suite("Notify: reload and reachability checks")
struct NotifyReloadCheckTests {
    static let live = NotifyHealthTests.live

    @Test("a reload with a bad [notify] fails; then from one URL to another: the test alert reaches the new server (1 request) and not the old (0), and test-alert names the new URL",
          .needsMosquitto, .needsEarshotdBuilt, .needsEarshotBuilt)
    func reloadChangesTheURL() throws {
        let old = try HTTPTestServer { _ in .init(status: 200) }
        defer { old.stop() }
        let new = try HTTPTestServer { _ in .init(status: 200) }
        defer { new.stop() }
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let setup = try MQTTDaemonSetup(
            port: broker.port, node: "den", extraMQTT: ["[notify]", "url = \(old.url("/oldtopic"))", "check_interval = 0"])
        defer { setup.remove() }
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-"], standardInput: true)
        defer { daemon.signal(SIGKILL) }
        let button = "homeassistant/button/earshot_den/test_alert/config"
        #expect(subscriber.waitFor(seconds: 30) { $0.contains { $0.topic == button } }, "\(daemon.errorText)")

        // A bad [notify] fails the reload as any bad section does: the old configuration goes on.
        let text = try String(contentsOf: setup.config, encoding: .utf8)
        try text.replacingOccurrences(of: old.url("/oldtopic"), with: new.url("/newtopic"))
            .replacingOccurrences(of: "check_interval = 0", with: "check_interval = 0.5")
            .write(to: setup.config, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        #expect(TestWait.until(seconds: 20) { daemon.objects.contains { $0["state"] as? String == "config_reload_failed" } },
                "\(daemon.errorText)")
        #expect(daemon.objects.first { $0["state"] as? String == "config_reload_failed" }?["message"] as? String
            == "\(setup.config.path):14: [notify] check_interval = 0.5: must be 0 (no reachability checks) or a number in [1, 86400] seconds; running the previous configuration")
        try text.replacingOccurrences(of: old.url("/oldtopic"), with: new.url("/newtopic"))
            .write(to: setup.config, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        let shownNew = "http://127.0.0.1:\(new.port)/newt…"
        #expect(TestWait.until(seconds: 20) { daemon.errorText.contains("configuration reloaded: watching ") },
                "\(daemon.errorText)")
        let reloaded = daemon.errorText.split(separator: "\n").first { $0.contains("configuration reloaded") }.map(String.init) ?? ""
        #expect(reloaded.hasSuffix("; [notify] now notifies \(shownNew)"), "\(reloaded)")
        // earshot status names the URL in use, without a test alert to the phone (trial 17 M1).
        let status = try #require(try EarshotCLI.run(["status", "--socket", setup.socket], in: setup.directory, timeout: 30))
        #expect(status.outputLines.filter { $0.hasPrefix("notify: ") }.map { $0.replacing(/\(\d+ sent/, with: "(N sent") }
            == ["notify: \(shownNew) (N sent since start)"], "\(status.outputLines)")
        let json = try #require(try EarshotCLI.run(["status", "--socket", setup.socket, "--json"], in: setup.directory, timeout: 30))
        let notify = try #require(json.outputLines.first.flatMap { try? JSONValue.parse($0) }?["notify"])
        #expect(notify["urls"] == .array([.string(shownNew)]))

        let sent = try #require(try EarshotCLI.run(["test-alert", "--socket", setup.socket], in: setup.directory, timeout: 30))
        #expect(sent.status == 0, "\(sent.standardOutput)\(sent.standardError)")
        #expect(sent.outputLines.count == 4, "\(sent.outputLines)")
        // The URL tested, as health events show it: the new one.
        #expect(sent.outputLines.count > 1 && sent.outputLines[1].hasPrefix("notify \(shownNew): delivered (HTTP 200) in "),
                "\(sent.outputLines)")
        #expect(new.waitForRequests(1, timeout: 10).count == 1)
        daemon.signal(SIGTERM)
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
        #expect(new.requests.map(\.path) == ["/newtopic"])
        #expect(new.requests.first?.body.contains(#""type":"test_alert""#) == true)
        #expect(old.requests.count == 0)
        #expect(old.checks.count == 0)
    }

    @Test("a check of a closed port: notify_failed once with the reachability text, the MQTT sensor ON; a server started on that port: notify_recovered, OFF; no notification posted",
          .needsMosquitto, .needsEarshotdBuilt, .needsEarshotBuilt)
    func checkFindsAndClears() throws {
        let port = try FreePort.pick()
        let url = "http://127.0.0.1:\(port)/phone"
        let shown = "http://127.0.0.1:\(port)/phon…"
        let broker = try MosquittoBroker()
        let subscriber = try MQTTSubscriber(port: broker.port)
        let setup = try MQTTDaemonSetup(
            port: broker.port, node: "den", extraMQTT: ["[notify]", "url = \(url)", "check_interval = 1"])
        defer { setup.remove() }
        let daemon = try DaemonProcess(["--config", setup.config.path, "--foreground", "--input", "-"], standardInput: true)
        defer { daemon.signal(SIGKILL) }
        let state = "earshot/den/notify/state"
        func changes() -> [String] {
            subscriber.messages(on: state).map(\.payload).reduce(into: []) { changes, payload in
                if changes.last != payload { changes.append(payload) }
            }
        }
        func notifyHealth() -> [[String: Any]] {
            daemon.objects.filter { ($0["state"] as? String)?.hasPrefix("notify_") == true }
        }
        #expect(subscriber.waitFor(seconds: 30) { _ in Array(changes().drop { $0 == "OFF" }) == ["ON"] }, "\(changes())\n\(daemon.errorText)")
        let server = try HTTPTestServer(port: port) { _, _ in .init(status: 200) }
        defer { server.stop() }
        #expect(subscriber.waitFor(seconds: 30) { _ in Array(changes().drop { $0 == "OFF" }) == ["ON", "OFF"] }, "\(changes())\n\(daemon.errorText)")
        daemon.signal(SIGTERM)
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
        #expect(notifyHealth().map { $0["state"] as? String ?? "" } == ["notify_failed", "notify_recovered"])
        #expect(notifyHealth().first?["message"] as? String
            == "notifications to \(shown) are failing: Couldn't connect to server (reachability check); detection goes on, and the URL is checked every 1 s until it answers")
        #expect(notifyHealth().last?["message"] as? String
            == "notifications to \(shown) can get through again: its server answers (reachability check; none was lost)")
        #expect(notifyHealth().map { $0["url"] as? String ?? "" } == [shown, shown])
        #expect(server.requests.count == 0)
        #expect(server.checks.first.map { [$0.method, $0.path] } == ["HEAD", "/phone"])
    }

    @Test("failing without an answer: checked every failingCheckSeconds (1 s), not check_interval (1 h), so the URL clears within seconds of the server's return")
    func failingChecksFaster() throws {
        let port = try FreePort.pick()
        let reports = NotifyTests.Reports()
        let sink = try NotifyTests.sink(NotifyTests.settings(["http://127.0.0.1:\(port)/a"]) {
            $0.checkIntervalSeconds = 3600
            $0.failingCheckSeconds = 1
        }, reports)
        defer { sink.stop() }
        #expect(TestWait.until(seconds: 20) { reports.healthEvents.count == 1 })
        #expect(sink.failingURLs == ["http://127.0.0.1:\(port)/a"])
        let server = try HTTPTestServer(port: port) { _, _ in .init(status: 200) }
        defer { server.stop() }
        #expect(TestWait.until(seconds: 20) { reports.healthEvents.count == 2 }, "\(reports.healthEvents.map(\.message))")
        #expect(reports.healthEvents.map(\.state) == [.notifyFailed, .notifyRecovered])
        #expect(sink.failingURLs == [])
        #expect(server.checks.count == 1)
        #expect(server.requests.count == 0)
    }

    @Test("a POST answered 503 makes the URL failing; checks answered 200 do not clear it, a notification that gets through does")
    func statusFailureStaysUntilDelivery() throws {
        let server = try HTTPTestServer { index in .init(status: index == 0 ? 503 : 200) }
        defer { server.stop() }
        let reports = NotifyTests.Reports()
        let sink = try NotifyTests.sink(NotifyTests.settings([server.url("/b")]) {
            $0.retries = 0
            $0.checkIntervalSeconds = 1
        }, reports)
        defer { sink.stop() }
        sink.deliver(RoutedOutput(output: .health(Self.live), time: NotifyTests.time))
        #expect(TestWait.until(seconds: 20) { reports.healthEvents.count == 1 })
        let checksAtFailure = server.checks.count
        // Two checks answered after the failure.
        #expect(TestWait.until(seconds: 20) { server.checks.count >= checksAtFailure + 2 })
        #expect(reports.healthEvents.map(\.state) == [.notifyFailed])
        #expect(reports.healthEvents.first?.message == "notifications to \(server.url("/b")) are failing: HTTP 503 after 1 attempt; detection goes on, and further failures are counted until one gets through")
        #expect(sink.failingURLs == [server.url("/b")])
        sink.deliver(RoutedOutput(output: .health(NotifyHealthTests.unavailable), time: NotifyTests.time))
        #expect(TestWait.until(seconds: 20) { reports.healthEvents.count == 2 })
        #expect(reports.healthEvents.last?.message == "notifications to \(server.url("/b")) are accepted again (1 failed before)")
        #expect(server.requests.count == 2)
    }

    /// A URL that answers 503 (its first retry 30 s away) to be replaced by one that answers 200, and a started sink
    /// notifying the first.
    struct Replacement {
        let old: HTTPTestServer
        let new: HTTPTestServer
        let reports = NotifyTests.Reports()
        let settings: NotifySettings
        let sink: NotifySink

        init(configure: (inout NotifySettings) -> Void = { _ in }) throws {
            old = try HTTPTestServer { _ in .init(status: 503) }
            new = try HTTPTestServer { _ in .init(status: 200) }
            settings = NotifyTests.settings([old.url("/old")]) {
                $0.firstRetryDelaySeconds = 30
                $0.checkIntervalSeconds = 0
                configure(&$0)
            }
            sink = try NotifyTests.sink(settings, reports)
        }

        func stop() {
            sink.stop()
            old.stop()
            new.stop()
        }
    }

    @Test("a reload that only moves a failing URL in the list (url 2 of 2 -> alone): one notify_failed under its new name, replacing the old, no notify_recovered (trial 17 L3)")
    func renamedFailingURL() throws {
        let accepting = try HTTPTestServer { _ in .init(status: 200) }
        defer { accepting.stop() }
        let refusing = try HTTPTestServer { _ in .init(status: 503) }
        defer { refusing.stop() }
        let reports = NotifyTests.Reports()
        let settings = NotifyTests.settings([accepting.url("/a"), refusing.url("/b")]) {
            $0.retries = 0
            $0.checkIntervalSeconds = 0
        }
        let sink = try NotifyTests.sink(settings, reports)
        defer { sink.stop() }
        sink.deliver(RoutedOutput(output: .health(Self.live), time: NotifyTests.time))
        #expect(TestWait.until(seconds: 20) { reports.healthEvents.count == 1 })
        let before = "\(refusing.url("/b")) (url 2 of 2)"
        #expect(sink.failingURLs == [before])
        var changed = settings
        changed.urls = [refusing.url("/b")]
        sink.apply(try sink.prepare(changed))
        #expect(TestWait.until(seconds: 20) { reports.healthEvents.count == 2 })
        let renamed = try #require(reports.healthEvents.last)
        #expect(reports.healthEvents.map(\.state) == [.notifyFailed, .notifyFailed])
        #expect(renamed.message == "notifications to \(refusing.url("/b")) are failing (as before the reload, as \(before)); detection goes on, and further failures are counted until one gets through")
        #expect(renamed.details["url"] == .string(refusing.url("/b")))
        #expect(renamed.details["replaces"] == .string(before))
        #expect(sink.failingURLs == [refusing.url("/b")])
    }

    @Test("a reload that replaces a URL: the notification waiting for its retry there goes to the new URL (same id), one journal line says so")
    func reloadHandsOverWaiting() throws {
        let replacement = try Replacement()
        defer { replacement.stop() }
        let (old, new, reports, settings, sink) = (replacement.old, replacement.new, replacement.reports, replacement.settings, replacement.sink)
        sink.deliver(RoutedOutput(output: .health(Self.live), time: NotifyTests.time))
        #expect(old.waitForRequests(1, timeout: 10).count == 1)
        #expect(TestWait.until(seconds: 10) { sink.statistics.retrying == 1 })
        var changed = settings
        changed.urls = [new.url("/new")]
        sink.apply(try sink.prepare(changed))
        let requests = new.waitForRequests(1, timeout: 10)
        try #require(requests.count == 1)
        #expect(requests[0].body.contains(#""state":"capture_live""#))
        #expect(requests[0].header("X-Earshot-Notification-Id") == old.requests[0].header("X-Earshot-Notification-Id"))
        #expect(reports.logLines == ["notify: the reload removed \(old.url("/old")) from [notify]: 1 notification waiting for it is handed to \(new.url("/new"))"])
        #expect(sink.settings.urls == [new.url("/new")])
        #expect(sink.testAlertDestinations.map(\.target) == [new.url("/new")])
        #expect(old.requests.count == 1)
    }

    @Test("trial 15 L2: a smoke alarm's onset goes at once, not behind an attempt to the same URL the server has not answered (its answer 8 s away)")
    func alarmDoesNotWaitBehindAnUnansweredAttempt() throws {
        let server = try HTTPTestServer { index in .init(status: 200, delaySeconds: index == 0 ? 8 : 0) }
        defer { server.stop() }
        let reports = NotifyTests.Reports()
        let sink = try NotifyTests.sink(NotifyTests.settings([server.url("/p")]) { $0.checkIntervalSeconds = 0 }, reports)
        defer { sink.stop() }
        sink.deliver(RoutedOutput(output: .health(Self.live), time: NotifyTests.time))
        #expect(server.waitForRequests(1, timeout: 10).count == 1)
        sink.deliver(RoutedOutput(output: NotifyTests.onset(), time: NotifyTests.time))
        let requests = server.waitForRequests(2, timeout: 20)
        try #require(requests.count == 2)
        #expect(requests.map { $0.body.contains(#""group":"smoke_alarm""#) } == [false, true])
        // Before the first one's answer: the alarm did not wait for it (on one queue per URL it waited the 8 s).
        let waited = requests[1].receivedAt - requests[0].receivedAt
        #expect(waited < 8, "the alarm arrived \(waited) s after the unanswered notification")
        print("L2: the smoke alarm arrived \(waited) s after the notification whose answer was 8 s away")
        #expect(server.waitForRequests(3, timeout: 1).count == 2)
        #expect(reports.healthEvents.isEmpty)
    }

    // MARK: A URL added while an alarm sounds (trial 16 M2)

    @Test("a reload that adds a URL while the smoke alarm sounds: the added server gets its onset, 'sounding since' its start, saying the reload added it, then its end as usual; the URL kept gets nothing new; one journal line",
          .needsEarshotdBuilt, .needsShared)
    func addedURLIsToldWhatSounds() throws {
        let kept = try HTTPTestServer { _ in .init(status: 200) }
        defer { kept.stop() }
        let added = try HTTPTestServer { _ in .init(status: 200) }
        defer { added.stop() }
        let scratch = try StopAndPathTests.Scratch()
        defer { scratch.remove() }
        let config = scratch.path("earshotd.conf"), socket = scratch.path("e.sock")
        func write(urls: [String]) throws {
            try """
                [detection]
                watch = smoke_alarm | baby_cry
                [output]
                socket = \(socket)
                journal = false
                [history]
                enabled = false
                [mqtt]
                node = kitchen
                [notify]
                url = \(urls.joined(separator: " "))
                format = ntfy
                on_end = true
                health = false
                check_interval = 0

                """.write(toFile: config, atomically: true, encoding: .utf8)
        }
        try write(urls: [kept.url("/kept")])
        let daemon = try DaemonProcess(["--config", config, "--foreground", "--input", "-", "--input-speed", "max"], standardInput: true)
        defer { daemon.signal(SIGKILL) }
        let control = try UnmuteTests.Control(socket: socket)

        // The alarm sounds from 6.0 s (decided at 9.94 s); the reload comes at 15 s of it.
        let alarm = TestPaths.sharedFile("audio/alarm-firealarm-detector/Alarm_0.wav")
        daemon.input.fileHandleForWriting.write(try UnmuteTests.pcm(alarm, to: 15))
        #expect(try control.status(after: 14.88)["active"] as? [String] == ["smoke_alarm"])
        #expect(kept.waitForRequests(1, timeout: 20).count == 1, "\(daemon.errorText)")
        try write(urls: [kept.url("/kept"), added.url("/added")])
        let before = Date()
        daemon.signal(SIGHUP)
        #expect(TestWait.until(seconds: 20) { daemon.errorText.contains("earshotd: configuration reloaded") }, "\(daemon.errorText)")
        let after = Date()
        #expect(added.waitForRequests(1, timeout: 20).count == 1, "\(daemon.errorText)")
        // The rest of the alarm and 10 s of quiet: its pattern stops, then the input ends.
        daemon.input.fileHandleForWriting.write(try UnmuteTests.pcm(alarm, from: 15) + Data(count: 10 * 16_000 * 2))
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 90) == 0, "\(daemon.errorText)")

        let smoke = daemon.objects.filter { $0["group"] as? String == "smoke_alarm" }
        try #require(smoke.map { $0["type"] as? String ?? "" } == ["detection", "detection_end"], "\(smoke)")
        let started = try #require(EventTextFormat.date(fromTimestamp: smoke[0]["time"] as? String ?? ""))
        let ended = try #require(EventTextFormat.date(fromTimestamp: smoke[1]["time"] as? String ?? ""))
        let duration = JSONValue.format(try #require(smoke[1]["duration"] as? Double), decimals: 1)
        #expect(smoke[1]["reason"] as? String == "pattern_stopped")
        let end = "Smoke alarm in kitchen ended at \(NotificationMessage.clock(ended)), after \(duration) s\nT3 pattern at 3132 Hz"

        // The URL kept: the onset and the end, nothing more.
        let keptRequests = kept.waitForRequests(3, timeout: 2)
        #expect(keptRequests.map { $0.header("Title") ?? "" } == ["kitchen: Smoke alarm", "kitchen: Smoke alarm ended"])
        let onsetLines = keptRequests.first?.body.split(separator: "\n").map(String.init) ?? []
        #expect(onsetLines.first == "Smoke alarm sounding in kitchen at \(NotificationMessage.clock(started))")
        #expect(keptRequests.last?.body == end)
        // The URL added: told of the alarm sounding since its start, why now, at the onset's priority; then its end.
        let addedRequests = added.waitForRequests(3, timeout: 2)
        #expect(addedRequests.map { $0.header("Title") ?? "" } == ["kitchen: Smoke alarm", "kitchen: Smoke alarm ended"])
        let told = Set([before, after].map {
            "Smoke alarm sounding in kitchen since \(NotificationMessage.clock(started)) (this URL was added by a reload at \(NotificationMessage.clock($0)))"
        })
        let toldLines = addedRequests.first?.body.split(separator: "\n").map(String.init) ?? []
        #expect(told.contains(toldLines.first ?? ""), "\(toldLines)")
        // The same evidence as the onset's (the fusion with the classifier may vary between runs, not within one).
        #expect(toldLines.dropFirst() == onsetLines.dropFirst())
        #expect(addedRequests.first?.header("Priority") == "5")
        #expect(addedRequests.first?.header("Tags") == "rotating_light,smoke_alarm")
        #expect(addedRequests.last?.body == end)
        #expect(addedRequests.first?.path == "/added")
        let journal = daemon.errorText.split(separator: "\n").map(String.init)
        #expect(journal.filter { $0.contains("added by the reload") }
            == ["earshotd: notify: \(NotifySettings.shownURL(added.url("/added"), index: 1, count: 2)), added by the reload, is sent the onset of what is going on: smoke_alarm since \(NotificationMessage.clock(started))"])
    }

    @Test("a reload that replaces a URL whose smoke onset waits for a retry: the new URL is told of the alarm once (the reload's onset, not also the handed-over one), in JSON with url_added_at; its end then reads as usual")
    func addedURLIsToldOnce() throws {
        let replacement = try Replacement { $0.onEnd = true }
        defer { replacement.stop() }
        let (old, new, reports, settings, sink) = (replacement.old, replacement.new, replacement.reports, replacement.settings, replacement.sink)
        let onsetTime = NotifyTests.now()
        sink.deliver(RoutedOutput(output: NotifyTests.onset(), time: onsetTime))
        #expect(old.waitForRequests(1, timeout: 10).count == 1)
        #expect(TestWait.until(seconds: 10) { sink.statistics.retrying == 1 })
        var changed = settings
        changed.urls = [new.url("/new")]
        let before = Date()
        sink.apply(try sink.prepare(changed))
        let after = Date()
        let requests = new.waitForRequests(2, timeout: 3)
        try #require(requests.count == 1, "\(requests.map(\.body))")
        let body = try #require(try JSONSerialization.jsonObject(with: Data(requests[0].body.utf8)) as? [String: Any])
        #expect(body["type"] as? String == "detection")
        #expect(body["time"] as? String == EventJSON.timestamp(onsetTime))
        let addedAt = try #require(EventTextFormat.date(fromTimestamp: body["url_added_at"] as? String ?? ""))
        #expect(addedAt.timeIntervalSince(before) >= -0.001 && after.timeIntervalSince(addedAt) >= -0.001)
        #expect(requests[0].header("X-Earshot-Notification-Id") != old.requests[0].header("X-Earshot-Notification-Id"))
        // The two lines come from two queues: in either order.
        #expect(TestWait.until(seconds: 10) { reports.logLines.count == 2 })
        let (shownNew, shownOld) = (NotifySettings.shownURL(new.url("/new"), index: 0, count: 1), NotifySettings.shownURL(old.url("/old"), index: 0, count: 1))
        #expect(Set(reports.logLines) == [
            "notify: \(shownNew), added by the reload, is sent the onset of what is going on: smoke_alarm since \(NotificationMessage.clock(onsetTime))",
            "notify: the reload removed \(shownOld) from [notify]: 1 notification waiting for it is handed to \(shownNew)",
        ])
        // Its end goes to the new URL as for any event whose onset it accepted.
        sink.deliver(RoutedOutput(output: NotifyTests.end(), time: onsetTime.addingTimeInterval(5)))
        let withEnd = new.waitForRequests(2, timeout: 10)
        try #require(withEnd.count == 2)
        #expect(withEnd[1].body.hasPrefix(#"{"type":"detection_end","group":"smoke_alarm","#))
        #expect(!withEnd[1].body.contains("onset_delivered"))
        #expect(old.requests.count == 1)
    }
}
