import Foundation
import Testing
import EarshotSupport
import EarshotDetection
import EarshotOutputs

/// `[notify] health`: the phone is told once when monitoring stops working and once when it works again, and when
/// the daemon stops; a message sent late says so. Checked on a real HTTP server on 127.0.0.1.
@Suite("Notify: monitoring health and late delivery")
struct NotifyHealthTests {
    static let unavailable = HealthEvent(
        state: .captureUnavailable, message: #"cannot open capture device "hw:9,0": No such file or directory"#)
    static let live = HealthEvent(state: .captureLive, message: "capturing from hw:1,0: S16_LE, 1 channel, 16000 Hz")

    @Test("capture lost twice, then back, then stopping: one message each for start, loss, recovery and stop")
    func lossAndRecovery() throws {
        let receiver = try NotifyTests.NtfyReceiver(path: "/health")
        defer { receiver.stop() }
        let (server, sink) = (receiver.server, receiver.sink)
        #expect(sink.accepts(.health(Self.unavailable)))
        #expect(sink.accepts(.health(HealthEvent(state: .inputStalled, message: "x"))))
        #expect(!sink.accepts(.health(HealthEvent(state: .overrun, message: "x"))))
        #expect(!sink.accepts(.health(HealthEvent(state: .inputSilent, message: "x"))))
        #expect(!sink.accepts(.health(HealthEvent(state: .notifyFailed, message: "x"))))
        for health in [Self.live, Self.unavailable, Self.unavailable, HealthEvent(state: .inputStalled, message: "x"), Self.live, Self.live] {
            receiver.deliver(.health(health))
        }
        let requests = server.waitForRequests(3, timeout: 10)
        sink.stop()
        let all = server.requests
        try #require(requests.count == 3)
        let at = receiver.heard
        #expect(Array(all.map(\.body).prefix(3)) == [
            "Listening in kitchen since \(at) (earshotd started)\ncapturing from hw:1,0: S16_LE, 1 channel, 16000 Hz",
            "Not listening in kitchen since \(at): the audio capture is unavailable\ncannot open capture device \"hw:9,0\": No such file or directory",
            "Listening again in kitchen since \(at)\ncapturing from hw:1,0: S16_LE, 1 channel, 16000 Hz",
        ])
        try #require(all.count == 4)
        // The stop's own time is the clock's: only its words are pinned.
        #expect(all[3].body.hasPrefix("Not listening in kitchen since "))
        #expect(all[3].body.hasSuffix(": earshotd stopped (or its input ended)"))
        #expect(all.map { $0.header("Title") ?? "" } == [
            "kitchen: listening", "kitchen: not listening", "kitchen: listening again", "kitchen: monitoring stopped",
        ])
        #expect(all.map { $0.header("Priority") ?? "" } == ["2", "4", "3", "4"])
        #expect(all.map { $0.header("Tags") ?? "" } == ["white_check_mark", "warning", "white_check_mark", "warning"])
    }

    @Test("input stalled while no event is open, as JSON with the node; health = false sends none, and no stop message")
    func stalledJSONAndOff() throws {
        let server = try HTTPTestServer { _ in .init(status: 200) }
        defer { server.stop() }
        let sink = try NotifyTests.sink(NotifyTests.settings([server.url("/hook")]) { $0.node = "bedroom" }, NotifyTests.Reports())
        let stalled = HealthEvent(state: .inputStalled, message: "no audio from standard input for 5 s")
        sink.deliver(RoutedOutput(output: .health(stalled), time: NotifyTests.time))
        let requests = server.waitForRequests(1, timeout: 10)
        // Down already: the phone was told; stopping adds nothing.
        sink.stop()
        try #require(requests.count == 1)
        #expect(requests[0].body == #"{"type":"health","state":"input_stalled","monitoring":false,"message":"no audio from standard input for 5 s","time":"2027-01-15T08:00:00.000Z","node":"bedroom"}"#)
        #expect(server.requests.count == 1)

        let off = try NotifyTests.sink(NotifyTests.settings([server.url("/off")]) { $0.health = false }, NotifyTests.Reports())
        #expect(!off.accepts(.health(Self.unavailable)))
        #expect(!off.accepts(.health(Self.live)))
        off.deliver(RoutedOutput(output: .health(Self.live), time: NotifyTests.time))
        off.stop()
        #expect(server.requests.count == 1)
    }

    static let reportLost = HealthEvent(
        state: .sleepReportUnavailable,
        message: "the sleep report of the session from 2026-12-07T01:40:04.914Z to 2026-12-07T07:00:00.000Z was not written: cannot write the sleep report /srv/sleep/snore-20261207-0140.json: Operation not permitted (check free space and that [sleep] report_dir is writable)")
    static let reportSaved = HealthEvent(
        state: .sleepReportSaved,
        message: "the sleep report of the session from 2026-12-07T01:40:04.914Z to 2026-12-07T07:00:00.000Z is written after all: /srv/sleep/snore-20261207-0140.json and /srv/sleep/snore-20261207-0140.svg",
        details: ["report_json": "/srv/sleep/snore-20261207-0140.json"])
    static let resumed = HealthEvent(
        state: .sleepSessionResumed,
        message: "sleep session resumed after earshotd restarted: the session from 2026-12-07T01:34:18.074Z ended when earshotd stopped at 2026-12-07T02:10:05.120Z; its report is /srv/sleep/snore-20261207-0134.json; a new session runs from 2026-12-07T02:10:07.480Z")

    @Test("a sleep report not saved and a session resumed after a restart reach the phone, each as it comes, while listening goes on (ntfy and JSON); health = false sends neither")
    func sleepStates() throws {
        let receiver = try NotifyTests.NtfyReceiver(path: "/sleep")
        defer { receiver.stop() }
        #expect(receiver.sink.accepts(.health(Self.reportLost)))
        #expect(receiver.sink.accepts(.health(Self.resumed)))
        #expect(receiver.sink.accepts(.health(Self.reportSaved)))
        for health in [Self.live, Self.resumed, Self.reportLost, Self.reportLost, Self.reportSaved] { receiver.deliver(.health(health)) }
        let requests = receiver.server.waitForRequests(5, timeout: 10)
        try #require(requests.count == 5)
        let at = receiver.heard
        #expect(requests.dropFirst().map(\.body) == [
            "Sleep session resumed in kitchen at \(at) after earshotd restarted\n\(Self.resumed.message)",
            "Sleep report not saved in kitchen at \(at)\n\(Self.reportLost.message)",
            "Sleep report not saved in kitchen at \(at)\n\(Self.reportLost.message)",
            "Sleep report saved in kitchen at \(at), after it could not be written\n\(Self.reportSaved.message)",
        ])
        #expect(requests.dropFirst().map { $0.header("Title") ?? "" } == [
            "kitchen: sleep session resumed", "kitchen: sleep report not saved", "kitchen: sleep report not saved",
            "kitchen: sleep report saved",
        ])
        #expect(requests.dropFirst().map { $0.header("Priority") ?? "" } == ["3", "4", "4", "3"])
        #expect(requests.dropFirst().map { $0.header("Tags") ?? "" } == ["zzz", "warning", "warning", "white_check_mark"])

        let server = try HTTPTestServer { _ in .init(status: 200) }
        defer { server.stop() }
        let sink = try NotifyTests.sink(NotifyTests.settings([server.url("/hook")]) { $0.node = "bedroom" }, NotifyTests.Reports())
        sink.deliver(RoutedOutput(output: .health(Self.reportLost), time: NotifyTests.time))
        let json = server.waitForRequests(1, timeout: 10)
        sink.stop()
        try #require(json.count == 1)
        #expect(json[0].body == #"{"type":"health","state":"sleep_report_unavailable","monitoring":true,"message":"\#(Self.reportLost.message)","time":"2027-01-15T08:00:00.000Z","node":"bedroom"}"#)

        let off = try NotifyTests.sink(NotifyTests.settings([server.url("/off")]) { $0.health = false }, NotifyTests.Reports())
        #expect(!off.accepts(.health(Self.reportLost)))
        #expect(!off.accepts(.health(Self.resumed)))
        #expect(!off.accepts(.health(Self.reportSaved)))
        off.stop()
    }

    @Test("a message sent more than 10 s after the event says how late: 25 s, 15 min; 10 s is not late")
    func lateMarker() throws {
        let alarm = AlarmEvent(
            kind: .onset, group: "smoke_alarm", source: .pattern, pattern: .t3, cycles: 1, toneHz: 3056.2,
            toneLevelDBFS: -8, classifierScore: nil, classifierClass: nil, start: 5.18, time: 9.34)
        let object = EventLines.object(for: RoutedOutput(output: .alarm(alarm), time: NotifyTests.time))!
        let message = NotificationMessage(
            object: object, group: "smoke_alarm", kind: .onset, format: .ntfy, node: "kitchen", time: NotifyTests.time)
        let at = NotificationMessage.clock(NotifyTests.time)
        func body(after seconds: Double) -> String {
            String(decoding: message.sending(at: NotifyTests.time + seconds).body, as: UTF8.self)
        }
        #expect(body(after: 10) == "Smoke alarm sounding in kitchen at \(at)\nT3 pattern at 3056 Hz (confidence 0.8)")
        #expect(body(after: 25) == "Smoke alarm sounding in kitchen at \(at)\nT3 pattern at 3056 Hz (confidence 0.8)\n(delivered 25 s late)")
        #expect(body(after: 900) == "Smoke alarm sounding in kitchen at \(at)\nT3 pattern at 3056 Hz (confidence 0.8)\n(delivered 15 min late)")

        // Through a real sink: an onset heard 10 minutes before it is handed over.
        let receiver = try NotifyTests.NtfyReceiver(path: "/late")
        defer { receiver.stop() }
        let heard = NotifyTests.now() - 600
        receiver.sink.deliver(RoutedOutput(output: .alarm(alarm), time: heard))
        let requests = receiver.server.waitForRequests(1, timeout: 10)
        try #require(requests.count == 1)
        #expect(requests[0].body == "Smoke alarm sounding in kitchen at \(NotificationMessage.clock(heard))\nT3 pattern at 3056 Hz (confidence 0.8)\n(delivered 10 min late)")
    }

    @Test("the time is local HH:MM:SS, as Foundation's formatter in the current time zone writes it")
    func clock() {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone.current
        formatter.dateFormat = "HH:mm:ss"
        for date in [NotifyTests.time, NotifyTests.time + 3_600 * 5 + 61.9, Date(timeIntervalSince1970: 0)] {
            #expect(NotificationMessage.clock(date) == formatter.string(from: date))
        }
    }
}
