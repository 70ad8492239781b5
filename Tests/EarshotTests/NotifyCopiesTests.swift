import Foundation
import Synchronization
import Testing
import EarshotSupport
import EarshotDetection
import EarshotOutputs

/// Trial 15 M1 and M3: a server that reads a notification and closes, or answers later than `timeout`, got the same
/// smoke alarm 4-6 times, each copy worded differently, and a rate-limited alarm showed no trouble for minutes.
/// Against real HTTP servers on 127.0.0.1.
@Suite("Notify: copies of one notification, and its trouble said at once")
struct NotifyCopiesTests {
    /// The first line of a request's body.
    static func firstLine(_ request: HTTPTestServer.Request) -> String {
        String(request.body.split(separator: "\n", omittingEmptySubsequences: false).first ?? "")
    }

    @Test("a server that keeps the connection alive, then reads each request and closes: each attempt arrives once (libcurl resent on the reused connection), with the same title, first line and id")
    func closedWithoutAnswer() throws {
        // Request 0 (a baby cry) is answered and the connection kept; every later one is read and dropped.
        let receiver = try NotifyTests.NtfyReceiver(path: "/phone", answer: { index in
            index == 0 ? .init(status: 200, keepAlive: true) : .init(status: 200, closeWithoutAnswer: true)
        }, configure: {
            $0.retries = 2
            $0.firstRetryDelaySeconds = 0.05
            // `retries` alone, so that the count is exact.
            $0.onsetRetrySeconds = 0
            $0.urgentRetrySeconds = 0
        })
        defer { receiver.stop() }
        receiver.deliver(NotifyTests.onset("baby_cry", label: "Baby cry, infant cry"))
        #expect(TestWait.until(seconds: 10) { receiver.sink.statistics.sent == 1 })
        receiver.deliver(NotifyTests.onset())
        #expect(TestWait.until(seconds: 15) { receiver.sink.statistics.failed == 1 })
        let requests = receiver.server.requests
        receiver.sink.stop()
        // One request for the baby cry, then the smoke alarm's 3 attempts (1 + retries 2), each once: before, the
        // first attempt, on the kept connection, arrived twice.
        #expect(requests.count == 4)
        let smoke = Array(requests.dropFirst())
        #expect(smoke.map(Self.firstLine) == Array(repeating: "Smoke alarm sounding in kitchen at \(receiver.heard)", count: 3))
        #expect(smoke.map { $0.header("Title") } == Array(repeating: "kitchen: Smoke alarm", count: 3))
        let id = try #require(smoke.first?.header("X-Earshot-Notification-Id"))
        #expect(try #/[0-9a-z]+-2/#.wholeMatch(in: id) != nil, "\(id)")
        #expect(smoke.map { $0.header("X-Earshot-Notification-Id") } == [id, id, id])
        #expect(smoke.map { $0.header("X-Sequence-ID") } == [id, id, id])
        #expect(requests[0].header("X-Earshot-Notification-Id") != id)
        #expect(receiver.reports.healthEvents.map(\.message) == [
            "notifications to http://127.0.0.1:\(receiver.server.port)/phon… are failing: Server returned nothing (no headers, no data) after 3 attempts, all sent and not answered (the server may have received them); detection goes on, and further failures are counted until one gets through",
        ])
    }

    @Test("a server answering 1.5 s after each request, timeout 1 s: the first attempt times out, the second waits 2 s and gets the answer; the next notification waits 2 s at once: 3 requests for 2 notifications (4 each before)")
    func slowServer() throws {
        let receiver = try NotifyTests.NtfyReceiver(path: "/slow", answer: { _ in .init(status: 200, delaySeconds: 1.5) }, configure: {
            $0.timeoutSeconds = 1
            $0.retries = 3
            $0.firstRetryDelaySeconds = 0.05
            $0.onsetRetrySeconds = 0
            $0.urgentRetrySeconds = 0
        })
        defer { receiver.stop() }
        #expect(receiver.sink.settings.maximumAnswerWaitSeconds == 60)
        receiver.deliver(NotifyTests.onset())
        #expect(TestWait.until(seconds: 20) { receiver.sink.statistics.sent == 1 })
        receiver.deliver(NotifyTests.onset("baby_cry", label: "Baby cry, infant cry"))
        #expect(TestWait.until(seconds: 20) { receiver.sink.statistics.sent == 2 })
        let requests = receiver.server.requests
        receiver.sink.stop()
        #expect(requests.map(Self.firstLine) == [
            "Smoke alarm sounding in kitchen at \(receiver.heard)", "Smoke alarm sounding in kitchen at \(receiver.heard)",
            "Baby cry heard in kitchen at \(receiver.heard)",
        ])
        #expect(requests[0].header("X-Earshot-Notification-Id") == requests[1].header("X-Earshot-Notification-Id"))
        #expect(receiver.sink.statistics.failed == 0)
        // Delivered on the second attempt: no outage to say (the smoke alarm's window is 0 here).
        #expect(receiver.reports.healthEvents.isEmpty)
    }

    @Test("a server that never answers, timeout 0.3 s, longest wait 0.6 s: attempts wait 0.3, 0.6, 0.6 s; the give-up line counts them as sent and not answered")
    func hangingServer() throws {
        let receiver = try NotifyTests.NtfyReceiver(path: "/hang", answer: { _ in .init(status: 200, delaySeconds: 600) }, configure: {
            $0.timeoutSeconds = 0.3
            $0.maximumAnswerWaitSeconds = 0.6
            $0.retries = 2
            $0.firstRetryDelaySeconds = 0.05
            $0.onsetRetrySeconds = 0
        })
        defer { receiver.stop() }
        receiver.deliver(NotifyTests.onset("baby_cry", label: "Baby cry, infant cry"))
        #expect(TestWait.until(seconds: 20) { receiver.sink.statistics.failed == 1 })
        let requests = receiver.server.requests
        receiver.sink.stop()
        #expect(requests.count == 3)
        // Each wait at least its timeout: 0.3 s, then twice that, then the longest (0.6 s).
        let gaps = (1..<requests.count).map { requests[$0].receivedAt - requests[$0 - 1].receivedAt }
        #expect(gaps.count == 2 && gaps[0] >= 0.3 && gaps[1] >= 0.6, "\(gaps)")
        #expect(receiver.reports.healthEvents.map(\.message) == [
            "notifications to http://127.0.0.1:\(receiver.server.port)/hang are failing: Timeout was reached after 3 attempts, all sent and not answered (the server may have received them); detection goes on, and further failures are counted until one gets through",
        ])
    }

    @Test("429 with Retry-After: a smoke alarm's notify_failed is said at its first failed attempt (before its retry), counted as retrying, and notify_recovered once it gets through")
    func rateLimitedSaidAtOnce() throws {
        let server = try HTTPTestServer { index in
            index == 0 ? .init(status: 429, headers: ["Retry-After: 2"]) : .init(status: 200)
        }
        defer { server.stop() }
        // What the server had when each health event was said.
        let said = Mutex<[(message: String, requests: Int)]>([])
        var settings = NotifyTests.settings([server.url("/phone")])
        settings.format = .ntfy
        let sink = try NotifySink(settings: settings, log: { _, _ in })
        sink.start(reportHealth: { health in said.withLock { $0.append((health.message, server.requests.count)) } })
        #expect(sink.settings.retries == 3 && sink.settings.urgentRetrySeconds == 900)
        sink.deliver(RoutedOutput(output: NotifyTests.onset(), time: NotifyTests.now()))
        // Waiting for its retry (Retry-After: 2 s): counted as retrying in the status reply.
        #expect(TestWait.until(seconds: 10) { sink.statistics.retrying == 1 })
        #expect(TestWait.until(seconds: 10) { sink.statistics.sent == 1 })
        sink.stop()
        #expect(server.requests.count == 2)
        #expect(sink.statistics.retrying == 0)
        let events = said.withLock { $0 }
        #expect(events.map(\.message) == [
            "notifications to http://127.0.0.1:\(server.port)/phon… are failing: HTTP 429 after 1 attempt; this smoke_alarm notification is tried again for up to 15 min; detection goes on, and further failures are counted until one gets through",
            "notifications to http://127.0.0.1:\(server.port)/phon… are accepted again (none was lost)",
        ])
        // Said after the first attempt and before the second.
        #expect(events.first?.requests == 1)
    }
}
