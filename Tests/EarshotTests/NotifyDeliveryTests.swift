import Foundation
import Synchronization
import Testing
import EarshotSupport
import EarshotDetection
import EarshotOutputs

/// Trial 6: an alarm's onset is not lost to a rate limit (`Retry-After` honoured, urgent onsets retried for
/// minutes), the phone never reads "ended" about an event it was not told of, and an end that the sound did not
/// cause (a reload, a capture outage, stopping) says what happened. Against real HTTP servers on 127.0.0.1.
@Suite("Notify: delivery of alarm onsets and what ends say")
struct NotifyDeliveryTests {
    static func end(
        _ group: String = "smoke_alarm", label: String = "Smoke detector, smoke alarm", reason: DetectionEvent.EndReason
    ) -> DaemonOutput {
        .detection(.offset(.init(
            group: group, classLabel: label, start: 12.48, end: 24.96, peakConfidence: 0.93, meanConfidence: 0.7,
            positiveWindows: 20, reason: reason)))
    }

    @Test("429 with Retry-After: 1 three times, then 200: the smoke onset arrives, each retry waits the second asked, the end follows it")
    func rateLimitedSmokeOnset() throws {
        let receiver = try NotifyTests.NtfyReceiver(path: "/phone?auth=secret", answer: { index in
            index < 3 ? .init(status: 429, headers: ["Retry-After: 1"]) : .init(status: 200)
        }, configure: {
            // The default 3 would end at 0.05 + 0.1 + 0.2 s without Retry-After; one retry, then the urgent rule.
            $0.retries = 1
            $0.firstRetryDelaySeconds = 0.05
            $0.urgentRetrySeconds = 30
        })
        defer { receiver.stop() }
        let (server, reports, sink) = (receiver.server, receiver.reports, receiver.sink)
        receiver.deliver(NotifyTests.onset())
        receiver.deliver(Self.end(reason: .holdElapsed))
        let requests = server.waitForRequests(5, timeout: 15)
        sink.stop()
        try #require(requests.count == 5)
        #expect(requests.map(\.body) == [
            "Smoke alarm sounding in kitchen at \(receiver.heard)\nSmoke detector, smoke alarm (confidence 0.81)", "Smoke alarm sounding in kitchen at \(receiver.heard)\nSmoke detector, smoke alarm (confidence 0.81)",
            "Smoke alarm sounding in kitchen at \(receiver.heard)\nSmoke detector, smoke alarm (confidence 0.81)", "Smoke alarm sounding in kitchen at \(receiver.heard)\nSmoke detector, smoke alarm (confidence 0.81)",
            "Smoke alarm in kitchen ended at \(receiver.heard), after 12.5 s\nSmoke detector, smoke alarm",
        ])
        // Each retry waited for Retry-After (1 s), not the 0.05 s back-off.
        let gaps = (1..<4).map { requests[$0].receivedAt - requests[$0 - 1].receivedAt }
        #expect(gaps.allSatisfy { $0 >= 0.95 }, "gaps \(gaps)")
        #expect(sink.statistics.sent == 2)
        #expect(sink.statistics.failed == 0)
        // Said once, at its first failed attempt (a smoke alarm's), while it went on being tried; the query is never
        // shown (it is part of what the fingerprint, #1a, is taken of).
        #expect(reports.healthEvents.map(\.message) == [
            "notifications to http://127.0.0.1:\(server.port)/phon…?…#1a are failing: HTTP 429 after 1 attempt; this smoke_alarm notification is tried again for up to 30 s; detection goes on, and further failures are counted until one gets through",
            "notifications to http://127.0.0.1:\(server.port)/phon…?…#1a are accepted again (none was lost)",
        ])
    }

    @Test("a baby_cry onset refused past its retries is tried on within onsetRetrySeconds (2 min; shortened here): delivered once the receiver takes it; refused throughout, given up when the window closes and its end says so")
    func nonUrgentOnsetRetried() throws {
        // Trial 7 #13: a receiver away for 19 s lost a baby cry (retries 3: 1 + 2 + 4 s).
        // One retry 0.2 s after a refusal, then waits of 0.3 s at most within `window` seconds.
        func makeReceiver(window: Double, answer: @escaping @Sendable (Int) -> HTTPTestServer.Answer) throws -> NotifyTests.NtfyReceiver {
            try NotifyTests.NtfyReceiver(path: "/phone", answer: answer, configure: {
                $0.retries = 1
                $0.firstRetryDelaySeconds = 0.2
                $0.urgentMaximumRetryDelaySeconds = 0.3
                $0.onsetRetrySeconds = window
            })
        }
        let receiver = try makeReceiver(window: 5) { index in .init(status: index < 5 ? 503 : 200) }
        defer { receiver.stop() }
        receiver.deliver(NotifyTests.onset("baby_cry", label: "Baby cry, infant cry"))
        receiver.deliver(Self.end("baby_cry", label: "Baby cry, infant cry", reason: .holdElapsed))
        let requests = receiver.server.waitForRequests(7, timeout: 15)
        receiver.sink.stop()
        try #require(requests.count == 7)
        // Six attempts of the onset (two would be all that retries = 1 allows), then its end.
        #expect(requests.prefix(6).allSatisfy { $0.body == "Baby cry heard in kitchen at \(receiver.heard)\nBaby cry, infant cry (confidence 0.81)" })
        #expect(requests[6].body == "Baby cry in kitchen ended at \(receiver.heard), after 12.5 s\nBaby cry, infant cry")
        #expect(receiver.sink.statistics.sent == 2)
        #expect(receiver.sink.statistics.failed == 0)
        #expect(receiver.reports.healthEvents.map(\.message) == [
            "notifications to http://127.0.0.1:\(receiver.server.port)/phon… are failing: HTTP 503 after 2 attempts; this baby_cry notification is tried again for up to 5 s; detection goes on, and further failures are counted until one gets through",
            "notifications to http://127.0.0.1:\(receiver.server.port)/phon… are accepted again (none was lost)",
        ])

        // Refused throughout: given up when the 1 s window closes (not after 15 minutes, as a smoke alarm would be).
        let refusing = try makeReceiver(window: 1) { _ in .init(status: 503) }
        defer { refusing.stop() }
        refusing.deliver(NotifyTests.onset("baby_cry", label: "Baby cry, infant cry"))
        refusing.deliver(Self.end("baby_cry", label: "Baby cry, infant cry", reason: .holdElapsed))
        #expect(TestWait.until(seconds: 15) { refusing.sink.statistics.failed == 2 })
        let tried = refusing.server.requests
        refusing.sink.stop()
        let onsetAttempts = tried.filter { $0.body.hasPrefix("Baby cry heard") }
        #expect(onsetAttempts.count > 2, "\(onsetAttempts.count) attempts")
        let span = (onsetAttempts.last?.receivedAt ?? 0) - (onsetAttempts.first?.receivedAt ?? 0)
        #expect(span >= 0.95 && span < 3, "onset tried for \(span) s")
        #expect(tried.last?.body == "Baby cry in kitchen ended at \(refusing.heard), after 12.5 s; its start could not be delivered\nBaby cry, infant cry")
    }

    @Test("a URL refusing one group's notifications does not hold another group's: its onsets go out while the refused one is still retried (default retry schedule)",
          arguments: [("loud", "dog_bark", "2 min", "4 attempts"), ("smoke_alarm", "baby_cry", "15 min", "1 attempt")])
    func refusedGroupHoldsNoOther(_ refused: String, _ accepted: String, _ window: String, _ attempts: String) throws {
        // Audit 13 F4: a webhook whose template fails for one group; the other group's onset came 111 s late.
        let server = try HTTPTestServer(answerRequest: { _, request in
            .init(status: request.body.contains(#""group":"\#(refused)""#) ? 500 : 200)
        })
        defer { server.stop() }
        let reports = NotifyTests.Reports()
        // The defaults: retries 3 after 1, 2, 4 s, then every 10 s for 2 minutes (15 for smoke, CO and fire).
        let sink = try NotifyTests.sink(NotifyTests.settings([server.url("/hook")]), reports)
        #expect(sink.settings.onsetRetrySeconds == 120 && sink.settings.urgentRetrySeconds == 900 && sink.settings.retries == 3)
        func groups() -> [String] {
            server.requests.map { $0.body.contains(#""group":"\#(refused)""#) ? refused : $0.body.contains(#""stream_time":30.24"#) ? "second" : accepted }
        }
        sink.deliver(RoutedOutput(output: NotifyTests.onset(refused, label: "Refused"), time: NotifyTests.time))
        sink.deliver(RoutedOutput(output: NotifyTests.onset(accepted, label: "Accepted"), time: NotifyTests.time))
        // The refused onset's retries used up (4 attempts): said, and tried on.
        #expect(TestWait.until(seconds: 20) { groups().filter { $0 == refused }.count >= 4 }, "\(groups())")
        // A new onset of the other group, while the refused one waits for its next retry.
        sink.deliver(RoutedOutput(output: NotifyTests.onset(accepted, label: "Accepted", start: 30.24), time: NotifyTests.time))
        #expect(TestWait.until(seconds: 20) { groups().contains("second") }, "\(groups())")
        // The refused onset is still being tried after it: it did not hold the other.
        #expect(sink.statistics.failed == 0)
        #expect(TestWait.until(seconds: 20) { groups().drop { $0 != "second" }.contains(refused) }, "\(groups())")
        let seen = groups()
        // Smoke, CO and fire go on a channel of their own per URL (trial 15 L2): between the channels the first
        // two may come in either order; within one, in the order delivered.
        if NotificationMessage.urgentGroups.contains(refused) != NotificationMessage.urgentGroups.contains(accepted) {
            #expect(Set(seen.prefix(2)) == [refused, accepted], "\(seen)")
        } else {
            #expect(Array(seen.prefix(2)) == [refused, accepted], "\(seen)")
        }
        #expect(seen.filter { $0 == accepted }.count == 1 && seen.filter { $0 == "second" }.count == 1, "\(seen)")
        sink.stop()
        #expect(sink.statistics.sent == 2)
        #expect(sink.statistics.failed == 1)
        #expect(reports.healthEvents.map(\.message) == [
            "notifications to http://127.0.0.1:\(server.port)/hook are failing: HTTP 500 after \(attempts); this \(refused) notification is tried again for up to \(window); detection goes on, and further failures are counted until one gets through",
            "notifications to http://127.0.0.1:\(server.port)/hook are accepted again (none was lost)",
        ])
        // Stopping: no more retries; the refused onset is given up and counted.
        #expect(reports.logLines == ["notify: 1 notification was not delivered before stopping"])
    }

    @Test("an onset given up: its end says the start could not be delivered (ntfy at the onset's priority; JSON onset_delivered false)")
    func endOfUndeliveredOnset() throws {
        let recent = NotifyTests.now()
        let heard = NotificationMessage.clock(recent)
        let refusing = try HTTPTestServer { index in .init(status: index == 0 ? 503 : 200) }
        let accepting = try HTTPTestServer { _ in .init(status: 200) }
        defer {
            refusing.stop()
            accepting.stop()
        }
        let reports = NotifyTests.Reports()
        let sink = try NotifyTests.sink(NotifyTests.settings([refusing.url("/a"), accepting.url("/b")]) {
            $0.format = .ntfy
            $0.onEnd = true
            $0.retries = 0
            $0.onsetRetrySeconds = 0
        }, reports)
        // /a refuses the onset (given up: retries = 0, no onset window), /b takes it; then the end to both.
        sink.deliver(RoutedOutput(output: NotifyTests.onset("baby_cry", label: "Baby cry, infant cry"), time: recent))
        sink.deliver(RoutedOutput(output: Self.end("baby_cry", label: "Baby cry, infant cry", reason: .holdElapsed), time: recent))
        let toA = refusing.waitForRequests(2, timeout: 10)
        let toB = accepting.waitForRequests(2, timeout: 10)
        sink.stop()
        try #require(toA.count == 2 && toB.count == 2)
        #expect(toA[1].body == "Baby cry in kitchen ended at \(heard), after 12.5 s; its start could not be delivered\nBaby cry, infant cry")
        #expect(toA[1].header("Priority") == "3")
        #expect(toB[1].body == "Baby cry in kitchen ended at \(heard), after 12.5 s\nBaby cry, infant cry")
        #expect(toB[1].header("Priority") == "2")
        #expect(reports.healthEvents.map(\.message) == [
            "notifications to http://127.0.0.1:\(refusing.port)/a (url 1 of 2) are failing: HTTP 503 after 1 attempt; detection goes on, and further failures are counted until one gets through",
            "notifications to http://127.0.0.1:\(refusing.port)/a (url 1 of 2) are accepted again (1 failed before)",
        ])

        let object = EventJSON.object(for: .offset(.init(
            group: "baby_cry", classLabel: "Baby cry", start: 1, end: 3, peakConfidence: 0.9, meanConfidence: 0.8,
            positiveWindows: 3, reason: .holdElapsed)), time: NotifyTests.time)
        let json = NotificationMessage(object: object, group: "baby_cry", kind: .end, format: .json, node: "kitchen", time: NotifyTests.time).missedOnset()
        #expect(String(decoding: json.body, as: UTF8.self) == #"{"type":"detection_end","group":"baby_cry","class":"Baby cry","start":1.0,"end":3.0,"duration":2.0,"peak_confidence":0.9,"mean_confidence":0.8,"windows":3,"reason":"hold_elapsed","time":"2027-01-15T08:00:00.000Z","onset_delivered":false,"node":"kitchen"}"#)
    }

    @Test("the ntfy text of an end says what ended it: the sound, a reload, the capture, stopping")
    func endTexts() {
        func message(_ reason: DetectionEvent.EndReason) -> (String, [String]) {
            let alarm = AlarmEvent(
                kind: .end, group: "smoke_alarm", source: .pattern, pattern: .t3, cycles: 2, toneHz: 3056.2,
                toneLevelDBFS: -20, classifierScore: nil, classifierClass: nil, start: 3.18, time: 14.4, reason: reason)
            let routed = RoutedOutput(output: .alarm(alarm), time: NotifyTests.time)
            let object = EventLines.object(for: routed)!
            let message = NotificationMessage(object: object, group: "smoke_alarm", kind: .end, format: .ntfy, node: "kitchen", time: NotifyTests.time)
            return (String(decoding: message.body, as: UTF8.self), message.headers)
        }
        let at = NotificationMessage.clock(NotifyTests.time)
        #expect(message(.patternStopped).0 == "Smoke alarm in kitchen ended at \(at), after 11.2 s\nT3 pattern at 3056 Hz")
        #expect(message(.patternStopped).1 == ["Title: kitchen: Smoke alarm ended", "Priority: 2", "Tags: white_check_mark,smoke_alarm", "Content-Type: text/plain; charset=utf-8"])
        #expect(message(.reload).0 == "Smoke alarm in kitchen ended at \(at), after 11.2 s: not heard again after a configuration reload\nT3 pattern at 3056 Hz")
        #expect(message(.streamGap).0 == "Smoke alarm heard in kitchen for 11.2 s, then the audio capture was lost at \(at)\nT3 pattern at 3056 Hz")
        #expect(message(.streamGap).1 == ["Title: kitchen: Smoke alarm: capture lost", "Priority: 4", "Tags: warning,smoke_alarm", "Content-Type: text/plain; charset=utf-8"])
        #expect(message(.streamEnd).0 == "Smoke alarm heard in kitchen for 11.2 s, then monitoring stopped at \(at) (earshotd stopped or its input ended)\nT3 pattern at 3056 Hz")
        #expect(message(.streamEnd).1 == ["Title: kitchen: Smoke alarm: monitoring stopped", "Priority: 4", "Tags: warning,smoke_alarm", "Content-Type: text/plain; charset=utf-8"])
    }

    @Test("an end by reload or gap is held: the group's next onset drops it (one story); without one it goes out; stop sends what is held")
    func heldEnds() throws {
        let receiver = try NotifyTests.NtfyReceiver(path: "/h", configure: {
            $0.repeatAfterSeconds = 300
            $0.continuationSeconds = 0.5
        })
        defer { receiver.stop() }
        let (server, sink) = (receiver.server, receiver.sink)
        let deliver = receiver.deliver
        // Reload mid-alarm, the alarm still heard: one onset, no end until the sound stops.
        deliver(NotifyTests.onset())
        deliver(Self.end(reason: .reload))
        deliver(NotifyTests.onset())
        deliver(Self.end(reason: .holdElapsed))
        // The capture lost mid-alarm and not back within 0.5 s: the capture-lost message.
        deliver(NotifyTests.onset())
        deliver(Self.end(reason: .streamGap))
        let requests = server.waitForRequests(4, timeout: 10)
        // A reload end held when stopping: sent by stop, as the reload end it is.
        deliver(NotifyTests.onset())
        deliver(Self.end(reason: .reload))
        sink.stop()
        let all = server.requests
        try #require(requests.count == 4)
        #expect(all.map(\.body) == [
            "Smoke alarm sounding in kitchen at \(receiver.heard)\nSmoke detector, smoke alarm (confidence 0.81)",
            "Smoke alarm in kitchen ended at \(receiver.heard), after 12.5 s\nSmoke detector, smoke alarm",
            "Smoke alarm sounding in kitchen at \(receiver.heard)\nSmoke detector, smoke alarm (confidence 0.81)",
            "Smoke alarm heard in kitchen for 12.5 s, then the audio capture was lost at \(receiver.heard)\nSmoke detector, smoke alarm",
            "Smoke alarm sounding in kitchen at \(receiver.heard)\nSmoke detector, smoke alarm (confidence 0.81)",
            "Smoke alarm in kitchen ended at \(receiver.heard), after 12.5 s: not heard again after a configuration reload\nSmoke detector, smoke alarm",
        ])
        #expect(sink.statistics.suppressed == 0)
    }
}
