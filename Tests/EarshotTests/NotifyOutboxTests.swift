import Foundation
import Glibc
import Synchronization
import Testing
import EarshotSupport
import EarshotDetection
import EarshotOutputs

/// Trial 15 H1 and M6: a smoke alarm still being retried when earshotd stops is kept in the state directory and sent
/// by the next daemon; an onset given up after its retry window is said, and the next message that gets through says
/// since when the alarm sounds. Real earshotd processes and real HTTP receivers on 127.0.0.1.
@Suite("Notify: the outbox over a restart, and onsets given up", .serialized)
struct NotifyOutboxTests {
    /// Smoke alarms only, ntfy, the history (and so the outbox) in `directory`.
    static func config(in directory: URL, url: String) throws -> URL {
        let config = directory.appendingPathComponent("earshotd.conf")
        let lines = [
            "[output]", "socket = \(directory.appendingPathComponent("e.sock").path)", "journal = false",
            "[history]", "path = \(directory.appendingPathComponent("history.sqlite3").path)",
            "[detection]", "watch = smoke_alarm",
            "[notify]", "url = \(url)", "format = ntfy",
            "[mqtt]", "node = kitchen",
        ]
        try (lines.joined(separator: "\n") + "\n").write(to: config, atomically: true, encoding: .utf8)
        return config
    }

    /// Local clock times and the seconds of lateness vary from run to run.
    static func texts(_ requests: [HTTPTestServer.Request]) -> [String] {
        requests.map {
            $0.body.replacing(/[0-9]{2}:[0-9]{2}:[0-9]{2}/, with: "HH:MM:SS").replacing(/delivered [0-9]+ s late/, with: "delivered N s late")
        }
    }

    @Test("a smoke alarm refused until SIGTERM is kept (mode 0600) and delivered once by the next earshotd, saying it is late because earshotd restarted; the outbox is removed then",
          .needsEarshotdBuilt, .needsShared)
    func keptOverRestart() throws {
        // "Down" is a 503 here (a free port reused later could be taken meanwhile); both are retried alike.
        let up = Atomic<Bool>(false)
        let server = try HTTPTestServer { _ in .init(status: up.load(ordering: .relaxed) ? 200 : 503) }
        defer { server.stop() }
        let directory = try NotifyBodyTextTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = try Self.config(in: directory, url: server.url("/alarm"))
        let outbox = directory.appendingPathComponent(NotifyOutbox.fileName).path

        let first = try DaemonProcess(["--config", config.path, "--foreground", "--input", TestPaths.sharedFile(MQTTBrokerTests.alarm).path])
        // The alarm's onset refused at least once: it waits for its next retry when the stop comes.
        let refused = TestWait.until(seconds: 60) { server.requests.contains { $0.body.hasPrefix("Smoke alarm sounding") } }
        try #require(refused, "\(first.errorText)")
        first.signal(SIGTERM)
        #expect(first.wait(seconds: 30) == 0, "\(first.errorText)")
        let log = first.errorText.split(separator: "\n").map(String.init)
        #expect(log.contains("earshotd: notify: kept 1 undelivered notification (smoke_alarm) in \(outbox), to send when earshotd starts again"),
                "\(first.errorText)")
        var status = stat()
        try #require(lstat(outbox, &status) == 0)
        #expect(status.st_mode & 0o777 == 0o600)
        #expect(status.st_mode & S_IFMT == S_IFREG)

        let before = server.requests.count
        up.store(true, ordering: .relaxed)
        let second = try DaemonProcess(["--config", config.path, "--foreground", "--input-speed", "4", "--input", "samples/demo.flac"])
        #expect(second.wait(seconds: 90) == 0, "\(second.errorText)")
        let after = Array(server.waitForRequests(before + 3, timeout: 10).dropFirst(before))
        let smoke = after.filter { $0.header("Tags")?.hasSuffix("smoke_alarm") == true }
        #expect(Self.texts(smoke) == [
            "Smoke alarm sounding in kitchen at HH:MM:SS (heard before earshotd restarted)\nT3 pattern at 3057 Hz (confidence 1.0)\n(delivered N s late)",
        ], "\(Self.texts(after))")
        #expect(smoke.map { $0.header("Priority") ?? "" } == ["5"])
        // The alarm goes on the URL's channel for smoke, CO and fire (trial 15 L2), alongside the restarted
        // daemon's "Listening", not behind it: the two arrive in either order.
        #expect(Self.texts(after).contains { $0.hasPrefix("Listening in kitchen since HH:MM:SS (earshotd started)") })
        #expect(!FileManager.default.fileExists(atPath: outbox), "\(second.errorText)")
    }

    @Test("a corrupt outbox: one log line, renamed aside, the daemon runs", .needsEarshotdBuilt)
    func corruptOutbox() throws {
        let server = try HTTPTestServer { _ in .init(status: 200) }
        defer { server.stop() }
        let directory = try NotifyBodyTextTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = try Self.config(in: directory, url: server.url("/alarm"))
        let outbox = directory.appendingPathComponent(NotifyOutbox.fileName).path
        try #"{"notifications": 3}"#.write(toFile: outbox, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(["--config", config.path, "--foreground", "--input-speed", "4", "--input", "samples/demo.flac"])
        #expect(daemon.wait(seconds: 90) == 0, "\(daemon.errorText)")
        let log = daemon.errorText.split(separator: "\n").map(String.init)
        #expect(log.filter { $0.contains("outbox") } == [
            "earshotd: notify: the notifications kept at the last stop in \(outbox) cannot be read (no \"notifications\" list); moved aside to \(outbox).corrupt, starting without them",
        ], "\(daemon.errorText)")
        #expect(!FileManager.default.fileExists(atPath: outbox))
        #expect(try String(contentsOfFile: outbox + ".corrupt", encoding: .utf8) == #"{"notifications": 3}"#)
        #expect(Self.texts(server.waitForRequests(2, timeout: 10)).map { $0.split(separator: "\n").first.map(String.init) ?? "" } == [
            "Listening in kitchen since HH:MM:SS (earshotd started)",
            "Not listening in kitchen since HH:MM:SS: earshotd stopped (or its input ended)",
        ])
    }

    @Test("an outbox entry older than 24 h: said in one log line, not sent; the file is removed", .needsEarshotdBuilt)
    func staleEntry() throws {
        let server = try HTTPTestServer { _ in .init(status: 200) }
        defer { server.stop() }
        let directory = try NotifyBodyTextTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = try Self.config(in: directory, url: server.url("/alarm"))
        let outbox = directory.appendingPathComponent(NotifyOutbox.fileName).path
        let old = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 - 2 * 86_400).rounded(.down))
        let entry = NotifyOutbox.Entry(
            group: "smoke_alarm", kind: .onset, time: old, urls: [server.url("/alarm")],
            event: ["type": "alarm", "group": "smoke_alarm", "time": .string(EventJSON.timestamp(old))])
        try NotifyOutbox.encoded([entry]).write(to: URL(fileURLWithPath: outbox))
        let daemon = try DaemonProcess(["--config", config.path, "--foreground", "--input-speed", "4", "--input", "samples/demo.flac"])
        #expect(daemon.wait(seconds: 90) == 0, "\(daemon.errorText)")
        let log = daemon.errorText.split(separator: "\n").map(String.init)
        #expect(log.filter { $0.contains("kept at the last stop") } == [
            "earshotd: notify: 1 notification kept at the last stop is not sent: smoke_alarm of \(EventJSON.timestamp(old)), older than 24 h",
        ], "\(daemon.errorText)")
        #expect(!FileManager.default.fileExists(atPath: outbox))
        #expect(!server.waitForRequests(2, timeout: 10).contains { $0.body.hasPrefix("Smoke alarm") })
    }

    @Test("M6: an urgent onset refused past its retry window (shortened to 3 s) is given up with a log line, and the first message through says since when the alarm sounds")
    func onsetGivenUp() throws {
        let up = Atomic<Bool>(false)
        let receiver = try NotifyTests.NtfyReceiver(path: "/phone", answer: { _ in .init(status: up.load(ordering: .relaxed) ? 200 : 503) }, configure: {
            $0.retries = 1
            $0.firstRetryDelaySeconds = 0.1
            $0.urgentMaximumRetryDelaySeconds = 0.2
            $0.urgentRetrySeconds = 3
            $0.repeatAfterSeconds = 1
        })
        defer { receiver.stop() }
        receiver.deliver(NotifyTests.onset())
        let port = receiver.server.port
        let givenUp = "notify: gave up the smoke_alarm onset of \(receiver.heard) for http://127.0.0.1:\(port)/phon… after trying for 3 s (HTTP 503); the next notification of it that gets through says since when it sounds"
        #expect(TestWait.until(seconds: 20) { receiver.reports.logLines.contains(givenUp) }, "\(receiver.reports.logLines)")
        // Reminders come every second meanwhile; the server returns.
        #expect(TestWait.until(seconds: 20) { receiver.sink.statistics.reminders >= 3 })
        up.store(true, ordering: .relaxed)
        #expect(TestWait.until(seconds: 20) { receiver.sink.statistics.sent >= 1 })
        let accepted = receiver.server.requests.filter { !$0.body.hasPrefix("Smoke alarm sounding in kitchen at") }
        receiver.sink.stop()
        let first = try #require(accepted.first)
        #expect(first.body == "Smoke alarm sounding in kitchen since \(receiver.heard); its start could not be delivered\nSmoke detector, smoke alarm")
        #expect(first.header("Title") == "kitchen: Smoke alarm")
        #expect(first.header("Priority") == "5")
        #expect(receiver.reports.logLines.filter { $0.hasPrefix("notify: gave up") } == [givenUp])
        #expect(receiver.reports.healthEvents.first?.message == "notifications to http://127.0.0.1:\(port)/phon… are failing: HTTP 503 after 1 attempt; this smoke_alarm notification is tried again for up to 3 s; detection goes on, and further failures are counted until one gets through")
    }
}
