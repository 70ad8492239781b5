import Foundation
import Synchronization
import Testing
import EarshotSupport
import EarshotDetection
import EarshotOutputs
import EarshotService

/// `[notify]`: webhooks and ntfy over libcurl, against real HTTP servers on 127.0.0.1 (one that answers, one that
/// answers slowly, one that fails).
@Suite("Notify: HTTP notifications of events")
struct NotifyTests {
    /// 2027-01-15T08:00:00.000Z.
    static let time = Date(timeIntervalSince1970: 1_800_000_000)
    /// Now in whole seconds: ntfy tests deliver events at it, so that no message is late (a message sent more than
    /// 10 s after its event says so).
    static func now() -> Date { Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)) }

    static func onset(_ group: String = "smoke_alarm", label: String = "Smoke detector, smoke alarm", start: Double = 12.48) -> DaemonOutput {
        .detection(.onset(.init(group: group, classLabel: label, confidence: 0.81, start: start, decisionTime: start + 1.44)))
    }

    static func end(_ group: String = "smoke_alarm", label: String = "Smoke detector, smoke alarm") -> DaemonOutput {
        .detection(.offset(.init(
            group: group, classLabel: label, start: 12.48, end: 24.96, peakConfidence: 0.93, meanConfidence: 0.7,
            positiveWindows: 20, reason: .holdElapsed)))
    }

    /// Health events and log lines the sink reported.
    final class Reports: Sendable {
        let health = Mutex<[HealthEvent]>([])
        let lines = Mutex<[String]>([])
        var healthEvents: [HealthEvent] { health.withLock { $0 } }
        var logLines: [String] { lines.withLock { $0 } }
    }

    static func sink(_ settings: NotifySettings, _ reports: Reports) throws -> NotifySink {
        let sink = try NotifySink(settings: settings, log: { line, _ in reports.lines.withLock { $0.append(line) } })
        sink.start(reportHealth: { health in reports.health.withLock { $0.append(health) } })
        return sink
    }

    static func settings(_ urls: [String], configure: (inout NotifySettings) -> Void = { _ in }) -> NotifySettings {
        var settings = NotifySettings()
        settings.urls = urls
        settings.repeatAfterSeconds = 0
        settings.node = "kitchen"
        configure(&settings)
        return settings
    }

    /// A real HTTP receiver on 127.0.0.1 (an ``HTTPTestServer`` answering as `answer` says for each request's index)
    /// and a started sink posting every onset and end to `path` on it in ntfy's format, further set by `configure`;
    /// what the sink reports goes to `reports`.
    struct NtfyReceiver {
        let server: HTTPTestServer
        let reports = Reports()
        let sink: NotifySink
        /// When ``deliver(_:)`` says its outputs happened (the receiver's creation, in whole seconds).
        let time = NotifyTests.now()
        /// ``time`` as ntfy texts show it (local `HH:MM:SS`).
        var heard: String { NotificationMessage.clock(time) }

        init(
            path: String, answer: @escaping @Sendable (Int) -> HTTPTestServer.Answer = { _ in .init(status: 200) },
            configure: (inout NotifySettings) -> Void = { _ in }
        ) throws {
            server = try HTTPTestServer(answer: answer)
            sink = try NotifyTests.sink(NotifyTests.settings([server.url(path)]) {
                $0.format = .ntfy
                $0.onEnd = true
                $0.node = "kitchen"
                configure(&$0)
            }, reports)
        }

        /// Hands `output` to the sink at ``time``.
        func deliver(_ output: DaemonOutput) { sink.deliver(RoutedOutput(output: output, time: time)) }

        /// Stops the sink (again, if a test stopped it already: harmless) and the server.
        func stop() {
            sink.stop()
            server.stop()
        }
    }

    @Test("json: an onset and its end are POSTed as the socket's JSON objects")
    func jsonBodies() throws {
        let server = try HTTPTestServer { _ in .init(status: 200) }
        defer { server.stop() }
        let reports = Reports()
        let sink = try Self.sink(Self.settings([server.url("/hook?token=abc")]) { $0.onEnd = true }, reports)
        sink.deliver(RoutedOutput(output: Self.onset(), time: Self.time))
        sink.deliver(RoutedOutput(output: Self.end(), time: Self.time.addingTimeInterval(12.5)))
        let requests = server.waitForRequests(2, timeout: 10)
        sink.stop()
        try #require(requests.count == 2)
        #expect(requests[0].method == "POST")
        #expect(requests[0].path == "/hook?token=abc")
        #expect(requests[0].header("Content-Type") == "application/json")
        #expect(requests[0].header("User-Agent") == "earshotd/\(earshotVersion)")
        #expect(requests[0].header("Expect") == nil)
        #expect(requests[0].body == #"{"type":"detection","group":"smoke_alarm","class":"Smoke detector, smoke alarm","confidence":0.81,"stream_time":12.48,"time":"2027-01-15T08:00:00.000Z","node":"kitchen"}"#)
        #expect(requests[1].body == #"{"type":"detection_end","group":"smoke_alarm","class":"Smoke detector, smoke alarm","start":12.48,"end":24.96,"duration":12.48,"peak_confidence":0.93,"mean_confidence":0.7,"windows":20,"reason":"hold_elapsed","time":"2027-01-15T08:00:12.500Z","node":"kitchen"}"#)
        #expect(sink.statistics.sent == 2)
        #expect(sink.statistics.failed == 0)
        #expect(reports.healthEvents.isEmpty)
    }

    @Test("ntfy: plain-text message with Title, Priority and Tags; only the groups listed; no end without on_end")
    func ntfyFormat() throws {
        let recent = Self.now()
        let heard = NotificationMessage.clock(recent)
        let server = try HTTPTestServer { _ in .init(status: 200) }
        defer { server.stop() }
        let reports = Reports()
        let sink = try Self.sink(Self.settings([server.url("/earshot-test")]) {
            $0.format = .ntfy
            $0.node = "kitchen"
            $0.groups = ["smoke_alarm", "baby_cry"]
        }, reports)
        #expect(!sink.accepts(Self.onset("glass_break", label: "Glass")))
        #expect(!sink.accepts(.health(HealthEvent(state: .overrun, message: "x"))))
        #expect(sink.accepts(Self.onset()))
        sink.deliver(RoutedOutput(output: Self.onset(), time: recent))
        sink.deliver(RoutedOutput(output: Self.end(), time: recent))
        sink.deliver(RoutedOutput(output: Self.onset("baby_cry", label: "Baby cry, infant cry"), time: recent))
        // Smoke, CO and fire go on a channel of their own (trial 15 L2): the two may arrive in either order.
        let requests = server.waitForRequests(2, timeout: 10).sorted { ($0.header("Priority") ?? "") > ($1.header("Priority") ?? "") }
        sink.stop()
        try #require(requests.count == 2)
        #expect(requests[0].body == "Smoke alarm sounding in kitchen at \(heard)\nSmoke detector, smoke alarm (confidence 0.81)")
        #expect(requests[0].header("Title") == "kitchen: Smoke alarm")
        #expect(requests[0].header("Priority") == "5")
        #expect(requests[0].header("Tags") == "rotating_light,smoke_alarm")
        #expect(requests[0].header("Content-Type") == "text/plain; charset=utf-8")
        #expect(requests[1].body == "Baby cry heard in kitchen at \(heard)\nBaby cry, infant cry (confidence 0.81)")
        #expect(requests[1].header("Title") == "kitchen: Baby cry")
        #expect(requests[1].header("Priority") == "3")
        #expect(requests[1].header("Tags") == "loud_sound,baby_cry")
        #expect(server.requests.count == 2)
    }

    @Test("a test alert: notified whatever groups says; ntfy 'Test alert from kitchen: Earshot can reach this phone', JSON type test_alert")
    func testAlert() throws {
        let recent = Self.now()
        let server = try HTTPTestServer { _ in .init(status: 200) }
        defer { server.stop() }
        let alert = DaemonOutput.testAlert(TestAlert(requestedBy: "the event socket"))
        let ntfy = try Self.sink(Self.settings([server.url("/phone")]) {
            $0.format = .ntfy
            $0.groups = ["smoke_alarm"]
        }, Reports())
        let json = try Self.sink(Self.settings([server.url("/hook")]) { $0.groups = ["smoke_alarm"] }, Reports())
        #expect(ntfy.accepts(alert))
        ntfy.deliver(RoutedOutput(output: alert, time: recent))
        #expect(server.waitForRequests(1, timeout: 10).count == 1)
        json.deliver(RoutedOutput(output: alert, time: Self.time))
        let requests = server.waitForRequests(2, timeout: 10)
        ntfy.stop()
        json.stop()
        try #require(requests.count == 2)
        #expect(requests[0].body == "Test alert from kitchen: Earshot can reach this phone")
        #expect(requests[0].headers.filter { ["title", "priority", "tags"].contains($0.name) }.map { "\($0.name): \($0.value)" }
            == ["title: kitchen: test alert", "priority: 3", "tags: bell,test_alert"])
        #expect(requests[1].body == #"{"type":"test_alert","time":"2027-01-15T08:00:00.000Z","node":"kitchen"}"#)
        #expect(requests[1].header("Content-Type") == "application/json")
        #expect(ntfy.statistics.sent == 1)
        #expect(NotificationMessage.testAlertText(node: "") == "Test alert: Earshot can reach this phone")
    }

    @Test("ntfy end and reminder messages")
    func ntfyEndAndReminder() {
        let end = NotificationMessage(
            object: EventJSON.object(for: .offset(.init(
                group: "co_alarm", classLabel: "Carbon monoxide detector, CO detector", start: 1, end: 13.5,
                peakConfidence: 0.9, meanConfidence: 0.8, positiveWindows: 9, reason: .holdElapsed)), time: Self.time),
            group: "co_alarm", kind: .end, format: .ntfy, node: "kitchen", time: Self.time)
        #expect(String(decoding: end.body, as: UTF8.self) == "CO alarm in kitchen ended at \(NotificationMessage.clock(Self.time)), after 12.5 s\nCarbon monoxide detector, CO detector")
        #expect(end.headers == ["Title: kitchen: CO alarm ended", "Priority: 2", "Tags: white_check_mark,co_alarm", "Content-Type: text/plain; charset=utf-8"])
        var object = EventJSON.object(for: .onset(.init(group: "glass_break", classLabel: "Glass", confidence: 0.5, start: 0, decisionTime: 1)), time: Self.time)
        object["ongoing_seconds"] = .int(300)
        let reminder = NotificationMessage(object: object, group: "glass_break", kind: .reminder, format: .ntfy, node: "kitchen", time: Self.time)
        #expect(String(decoding: reminder.body, as: UTF8.self) == "Glass break still heard in kitchen at \(NotificationMessage.clock(Self.time)), 5 min after it started\nGlass")
        #expect(reminder.headers == ["Title: kitchen: Glass break still heard", "Priority: 4", "Tags: warning,glass_break", "Content-Type: text/plain; charset=utf-8"])
    }

    @Test("a failing server: retried after 0.2 s then 0.4 s, given up, said once as notify_failed, counted; recovery said as notify_recovered")
    func failingServer() throws {
        // Requests 0...5 (two notifications and two retries of each) fail; then 200.
        let server = try HTTPTestServer { index in .init(status: index < 6 ? 503 : 200) }
        defer { server.stop() }
        let reports = Reports()
        let sink = try Self.sink(Self.settings([server.url("/fail")]) {
            $0.retries = 2
            $0.firstRetryDelaySeconds = 0.2
            // Not this test's subject (NotifyDeliveryTests): every onset gets its retries like any other message.
            $0.urgentRetrySeconds = 0
            $0.onsetRetrySeconds = 0
        }, reports)
        sink.deliver(RoutedOutput(output: Self.onset(), time: Self.time))
        sink.deliver(RoutedOutput(output: Self.onset("baby_cry", label: "Baby cry, infant cry"), time: Self.time))
        #expect(TestWait.until(seconds: 20) { sink.statistics.failed == 2 })
        // Both given up: the next one is accepted.
        sink.deliver(RoutedOutput(output: Self.onset("glass_break", label: "Glass"), time: Self.time))
        let requests = server.waitForRequests(7, timeout: 20)
        sink.stop()
        try #require(requests.count == 7)
        // Neither waits for the other's retries (audit 13 F4; the smoke alarm on a channel of its own since trial 15
        // L2, so the two interleave in any order): three attempts each, the same body on every attempt.
        let smoke = requests.filter { $0.body.contains(#""group":"smoke_alarm""#) }
        let baby = requests.filter { $0.body.contains(#""group":"baby_cry""#) }
        try #require(smoke.count == 3 && baby.count == 3, "\(requests.map(\.body))")
        #expect(smoke.allSatisfy { $0.body == smoke[0].body })
        #expect(baby.allSatisfy { $0.body == baby[0].body })
        #expect(requests[6].body.contains(#""group":"glass_break""#))
        // Back-off: 0.2 s, then 0.4 s (a local server answers within milliseconds; 0.15 s of slack).
        let gaps = [smoke[1].receivedAt - smoke[0].receivedAt, smoke[2].receivedAt - smoke[1].receivedAt,
                    baby[1].receivedAt - baby[0].receivedAt, baby[2].receivedAt - baby[1].receivedAt]
        let timeline = requests.map { String(format: "%.3f", $0.receivedAt - requests[0].receivedAt) }
        print("notify: a failing server's requests at \(timeline.joined(separator: ", ")) s (503 x 6, then 200)")
        for (gap, expected) in zip(gaps, [0.2, 0.4, 0.2, 0.4]) {
            #expect(abs(gap - expected) < 0.15, "retry after \(gap) s, not \(expected) s (\(timeline))")
        }
        #expect(sink.statistics.failed == 2)
        #expect(sink.statistics.sent == 1)
        let health = reports.healthEvents
        #expect(health.map(\.state) == [.notifyFailed, .notifyRecovered])
        #expect(health.first?.message == "notifications to http://127.0.0.1:\(server.port)/fail are failing: HTTP 503 after 3 attempts; detection goes on, and further failures are counted until one gets through")
        #expect(health.first?.details["url"]?.stringValue == "http://127.0.0.1:\(server.port)/fail")
        #expect(health.last?.message == "notifications to http://127.0.0.1:\(server.port)/fail are accepted again (2 failed before)")
        #expect(health.last?.details == ["url": .string("http://127.0.0.1:\(server.port)/fail"), "failed": .int(2)])
        #expect(reports.logLines.isEmpty)
    }

    @Test("a 404 is not retried; it names the key to check")
    func notFoundIsNotRetried() throws {
        let server = try HTTPTestServer { _ in .init(status: 404) }
        defer { server.stop() }
        let reports = Reports()
        let sink = try Self.sink(Self.settings([server.url("/missing")]) { $0.firstRetryDelaySeconds = 0.05 }, reports)
        sink.deliver(RoutedOutput(output: Self.onset(), time: Self.time))
        // Given up before the stop (a failure found by the stop's own attempt ends "; earshotd is stopping").
        #expect(TestWait.until(seconds: 10) { reports.healthEvents.count == 1 })
        sink.stop()
        #expect(server.requests.count == 1)
        #expect(reports.healthEvents.map(\.message) == ["notifications to http://127.0.0.1:\(server.port)/miss… are failing: HTTP 404 after 1 attempt (check [notify] url); detection goes on, and further failures are counted until one gets through"])
    }

    @Test("a slow server: deliver returns before the answer, the attempt times out, another URL is not held back")
    func slowServer() throws {
        let slow = try HTTPTestServer { _ in .init(status: 200, delaySeconds: 4) }
        defer { slow.stop() }
        let fast = try HTTPTestServer { _ in .init(status: 200) }
        defer { fast.stop() }
        let reports = Reports()
        let sink = try Self.sink(Self.settings([slow.url("/slow"), fast.url("/fast")]) {
            $0.timeoutSeconds = 1
            $0.urgentRetrySeconds = 0
            $0.retries = 0
        }, reports)
        sink.deliver(RoutedOutput(output: Self.onset(), time: Self.time))
        // deliver only queued: the slow server has not answered anything yet.
        #expect(slow.answeredCount == 0)
        let fastRequests = fast.waitForRequests(1, timeout: 5)
        #expect(fastRequests.count == 1)
        #expect(slow.answeredCount == 0, "the fast URL was served while the slow one was still waiting")
        // The slow attempt times out after 1 s and is given up (retries = 0).
        let deadline = Date().addingTimeInterval(8)
        while reports.healthEvents.isEmpty && Date() < deadline { usleep(20_000) }
        sink.stop()
        #expect(reports.healthEvents.map(\.message) == ["notifications to http://127.0.0.1:\(slow.port)/slow (url 1 of 2) are failing: Timeout was reached after 1 attempt, sent and not answered (the server may have received it); detection goes on, and further failures are counted until one gets through"])
        #expect(sink.statistics.sent == 1)
        #expect(sink.statistics.failed == 1)
    }

    @Test("repeat_after: a repeating onset within it is not notified; a lasting event gets reminders")
    func repeatAfter() throws {
        let server = try HTTPTestServer { _ in .init(status: 200) }
        defer { server.stop() }
        let reports = Reports()
        let sink = try Self.sink(Self.settings([server.url("/r")]) { $0.repeatAfterSeconds = 1 }, reports)
        sink.deliver(RoutedOutput(output: Self.onset(), time: Self.time))
        sink.deliver(RoutedOutput(output: Self.end(), time: Self.time))
        // Starts again at once: suppressed, but the alarm is still going, so a reminder comes 1 s after the first.
        sink.deliver(RoutedOutput(output: Self.onset(), time: Self.time))
        let requests = server.waitForRequests(3, timeout: 6)
        sink.deliver(RoutedOutput(output: Self.end(), time: Self.time))
        try #require(requests.count == 3)
        let kinds = requests.map { request -> String in
            if request.body.contains(#""reminder":true"#) { return "reminder" }
            return request.body.contains(#""type":"detection_end""#) ? "end" : "onset"
        }
        #expect(kinds == ["onset", "reminder", "reminder"])
        let gaps = [requests[1].receivedAt - requests[0].receivedAt, requests[2].receivedAt - requests[1].receivedAt]
        #expect(abs(gaps[0] - 1) < 0.3, "first reminder after \(gaps[0]) s")
        #expect(abs(gaps[1] - 1) < 0.3, "second reminder after \(gaps[1]) s")
        #expect(requests[1].body.contains(#""since":"2027-01-15T08:00:00.000Z""#))
        // No reminders after the end, and no end without on_end.
        usleep(1_300_000)
        sink.stop()
        #expect(server.requests.count == 3)
        #expect(sink.statistics.suppressed == 1)
        #expect(sink.statistics.reminders == 2)
    }

    @Test("on_end: after a notified end the next onset is notified within repeat_after; a lasting one gets reminders and its end")
    func onsetAfterNotifiedEnd() throws {
        let recent = Self.now()
        let heard = NotificationMessage.clock(recent)
        let server = try HTTPTestServer { _ in .init(status: 200) }
        defer { server.stop() }
        let reports = Reports()
        let sink = try Self.sink(Self.settings([server.url("/nt-topic")]) {
            $0.format = .ntfy
            $0.node = "kitchen"
            $0.onEnd = true
            $0.repeatAfterSeconds = 300
        }, reports)
        // The trial's night: a cry, its end, and two more cries 30 s apart, all within repeat_after.
        for index in 0..<3 {
            let start = 29.28 + 35.0 * Double(index)
            sink.deliver(RoutedOutput(output: Self.onset("baby_cry", label: "builtin_baby_cry:baby_cry", start: start), time: recent))
            sink.deliver(RoutedOutput(output: Self.end("baby_cry", label: "builtin_baby_cry:baby_cry"), time: recent))
        }
        let requests = server.waitForRequests(6, timeout: 10)
        try #require(requests.count == 6)
        #expect(requests.map(\.body) == [
            "Baby cry heard in kitchen at \(heard)\nconfidence 0.81", "Baby cry in kitchen ended at \(heard), after 12.5 s",
            "Baby cry heard in kitchen at \(heard)\nconfidence 0.81", "Baby cry in kitchen ended at \(heard), after 12.5 s",
            "Baby cry heard in kitchen at \(heard)\nconfidence 0.81", "Baby cry in kitchen ended at \(heard), after 12.5 s",
        ])
        #expect(requests.map { $0.header("Title") ?? "" } == [
            "kitchen: Baby cry", "kitchen: Baby cry ended", "kitchen: Baby cry", "kitchen: Baby cry ended",
            "kitchen: Baby cry", "kitchen: Baby cry ended",
        ])
        #expect(sink.statistics.suppressed == 0)
        sink.stop()

        // repeat_after still spaces reminders: an onset right after a notified end gets reminders 1 s and 2 s
        // after it, then its end.
        let short = try Self.sink(Self.settings([server.url("/r")]) {
            $0.onEnd = true
            $0.repeatAfterSeconds = 1
        }, reports)
        short.deliver(RoutedOutput(output: Self.onset(), time: Self.time))
        short.deliver(RoutedOutput(output: Self.end(), time: Self.time))
        short.deliver(RoutedOutput(output: Self.onset(), time: Self.time))
        let withReminders = server.waitForRequests(11, timeout: 6)
        short.deliver(RoutedOutput(output: Self.end(), time: Self.time))
        let all = server.waitForRequests(12, timeout: 5)
        short.stop()
        try #require(withReminders.count == 11)
        try #require(all.count == 12)
        let kinds = all[6...].map { request -> String in
            if request.body.contains(#""reminder":true"#) { return "reminder" }
            return request.body.contains(#""type":"detection_end""#) ? "end" : "onset"
        }
        #expect(kinds == ["onset", "end", "onset", "reminder", "reminder", "end"])
        let gap = all[9].receivedAt - all[8].receivedAt
        #expect(abs(gap - 1) < 0.3, "first reminder after \(gap) s")
        #expect(short.statistics.suppressed == 0)
        #expect(short.statistics.reminders == 2)
    }

    @Test("[notify] keys are read; bad values are one line with file:line and the fix")
    func configuration() throws {
        let configuration = try DaemonConfiguration.parse("""
            [notify]
            url = https://ntfy.sh/earshot-kitchen  http://192.168.1.5:8080/hook
            groups = smoke_alarm co_alarm
            format = ntfy
            on_end = yes
            health = no
            repeat_after = 120
            timeout = 5
            retries = 0
            [mqtt]
            node = kitchen
            """, source: "test.conf")
        var expected = NotifySettings()
        expected.urls = ["https://ntfy.sh/earshot-kitchen", "http://192.168.1.5:8080/hook"]
        expected.groups = ["smoke_alarm", "co_alarm"]
        expected.format = .ntfy
        expected.onEnd = true
        expected.health = false
        // The name MQTT knows the daemon by, passed on although MQTT is off.
        expected.node = "kitchen"
        expected.repeatAfterSeconds = 120
        expected.timeoutSeconds = 5
        expected.retries = 0
        #expect(configuration.notify == expected)
        #expect(DaemonConfiguration().notify.enabled == false)
        #expect(DaemonConfiguration().notify.repeatAfterSeconds == 300)
        #expect(DaemonConfiguration().notify.health == true)
        // No [mqtt] node: the host name, as MQTT's default.
        #expect(try DaemonConfiguration.parse("[notify]\nurl = http://127.0.0.1/x\n", source: "t.conf").notify.node == MQTTSettings.defaultNode)

        let cases: [(String, String)] = [
            ("url = ftp://example.com/x", #"test.conf:2: [notify] url: "ftp://example.com/x" is not an http:// or https:// URL; separate several URLs with spaces, e.g. https://ntfy.sh/my-earshot-alerts"#),
            ("url = https:///topic", #"test.conf:2: [notify] url: "https:///topi…" has no host name; separate several URLs with spaces, e.g. https://ntfy.sh/my-earshot-alerts"#),
            ("format = xml", "test.conf:2: [notify] format = xml: must be json or ntfy"),
            ("repeat_after = -1", "test.conf:2: [notify] repeat_after = -1: must be a number in [0, 86400] seconds (0: notify every onset, no reminders)"),
            ("timeout = 0", "test.conf:2: [notify] timeout = 0: must be a number in [1, 300] seconds"),
            ("retries = 11", "test.conf:2: [notify] retries = 11: must be a whole number in [0, 10]"),
            ("health = maybe", "test.conf:2: [notify] health = maybe: \(SettingRules.flag.requirement)"),
            ("groups = smoke_alarm kettle", #"test.conf:2: [notify] groups: "kettle" is not a group (groups: alarm_chirp, baby_cry, co_alarm, dog_bark, doorbell_knock, fire_alarm, glass_break, loud, smoke_alarm, snoring, speech)"#),
        ]
        for (line, message) in cases {
            #expect(throws: EarshotError(.config, message)) {
                _ = try DaemonConfiguration.parse("[notify]\n\(line)\n", source: "test.conf")
            }
        }
    }

    @Test("earshotd --check-config refuses a bad [notify] url with exit status 78", .needsEarshotdBuilt)
    func checkConfigExitStatus() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-notify-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = directory.appendingPathComponent("earshotd.conf")
        try "[notify]\nurl = ntfy.sh/topic\n".write(to: config, atomically: true, encoding: .utf8)
        let run = try #require(try EarshotdRun.run(["--check-config", "--config", config.path]))
        #expect(run.status == 78)
        #expect(run.error == "earshotd: \(config.path):2: [notify] url: \"ntfy.sh/topi…\" is not an http:// or https:// URL; separate several URLs with spaces, e.g. https://ntfy.sh/my-earshot-alerts\n")
    }
}
