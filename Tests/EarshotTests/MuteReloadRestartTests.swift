import Foundation
import Glibc
import Testing
import Synchronization
import EarshotSupport
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// Trial 16 L1 and L2: a mute does not outlive its group's watch (a reload that stops watching a muted group drops
/// its mute), and a restart that ends a smoke, CO or fire mute tells the phone, which was told "No smoke alarm alerts
/// until 20:59", that the group listens again. Real earshotd processes, real Unix sockets, a real HTTP receiver.
@Suite("Mutes across a reload that stops watching the group, and across a restart", .serialized)
struct MuteReloadRestartTests {
    /// `watch` (the default groups when nil), ntfy to `url` from node `kitchen` without reachability checks, and
    /// `notify`'s further `[notify]` lines (no health messages by default); the socket `e.sock` and the history (and
    /// so the state directory) in `directory`.
    @discardableResult
    static func writeConfig(in directory: URL, watch: String?, url: String, notify: [String] = ["health = false"]) throws -> URL {
        let config = directory.appendingPathComponent("earshotd.conf")
        let lines = (watch.map { ["[detection]", "watch = \($0)"] } ?? []) + [
            "[output]", "socket = \(directory.appendingPathComponent("e.sock").path)", "journal = false",
            "[history]", "path = \(directory.appendingPathComponent("history.sqlite3").path)",
            "[mqtt]", "node = kitchen",
            "[notify]", "url = \(url)", "format = ntfy", "check_interval = 0",
        ] + notify
        try (lines.joined(separator: "\n") + "\n").write(to: config, atomically: true, encoding: .utf8)
        return config
    }

    /// A phone (a real HTTP receiver answering 200), a scratch directory with ``writeConfig(in:watch:url:notify:)``'s
    /// file watching smoke_alarm and baby_cry, its socket and where the mute record goes.
    struct Setup {
        let phone: HTTPTestServer
        let directory: URL
        let config: URL
        var socket: String { directory.appendingPathComponent("e.sock").path }
        var record: String { directory.appendingPathComponent(MuteRecord.fileName).path }

        init() throws {
            phone = try HTTPTestServer { _ in .init(status: 200) }
            directory = try NotifyBodyTextTests.temporaryDirectory()
            config = try MuteReloadRestartTests.writeConfig(in: directory, watch: "smoke_alarm | baby_cry", url: phone.url("/phone"))
        }

        func remove() {
            phone.stop()
            try? FileManager.default.removeItem(at: directory)
        }
    }

    static func journal(_ daemon: DaemonProcess) -> [String] {
        daemon.errorText.split(separator: "\n").map(String.init)
    }

    @Test("a mutes.json whose unix_until is out of range is one journal line and no mute (trial 18 M1: 1e300 stopped earshotd); a group named twice is one mute, its latest end (L1)")
    func takeLeftChecksTheFile() throws {
        let directory = try NotifyBodyTextTests.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent(MuteRecord.fileName).path
        let lines = Mutex<[String]>([])
        let record = MuteRecord(path: path) { line, _ in lines.withLock { $0.append(line) } }
        for value in ["1e300", "-5", "4102444800"] {
            try #"{"mutes":[{"group":"smoke_alarm","unix_until":\#(value)}]}"#.write(toFile: path, atomically: false, encoding: .utf8)
            #expect(record.takeLeft().isEmpty)
            #expect(access(path, F_OK) != 0)
            #expect(lines.withLock { $0.last } == "the mutes recorded by the last run in \(path) cannot be read (mute 1's unix_until is not a time from 1970 to 1440 minutes from now); starting without them")
        }
        let soon = (Date().timeIntervalSince1970 + 600).rounded(.down)
        try #"{"mutes":[{"group":"smoke_alarm","unix_until":\#(Int(soon) - 60)},{"group":"co_alarm","unix_until":\#(Int(soon))},{"group":"smoke_alarm","unix_until":\#(Int(soon))},{"group":"smoke_alarm","unix_until":\#(Int(soon) - 120)}]}"#
            .write(toFile: path, atomically: false, encoding: .utf8)
        let left = record.takeLeft()
        #expect(left.map(\.group) == ["co_alarm", "smoke_alarm"])
        #expect(left.map(\.until.timeIntervalSince1970) == [soon, soon])
        #expect(lines.withLock { $0.count } == 3)
    }

    @Test("GroupMutes.forget: the mutes of groups no longer watched go, with an onset held for them; the others stay")
    func forget() {
        let mutes = GroupMutes()
        #expect(mutes.mute("smoke_alarm", until: 900, minutes: 15))
        #expect(mutes.mute("baby_cry", until: 900, minutes: 15))
        #expect(!mutes.admits(UnmuteTests.onset("smoke_alarm", start: 3)))
        #expect(mutes.forget(groupsNotIn: ["baby_cry", "loud"]) == ["smoke_alarm"])
        #expect(mutes.muted == ["baby_cry"])
        #expect(mutes.forget(groupsNotIn: ["baby_cry"]) == [])
        // Watched and muted again later: nothing of the earlier event is left to announce.
        #expect(mutes.mute("smoke_alarm", until: 1800, minutes: 15))
        #expect(mutes.unmute("smoke_alarm"))
        #expect(UnmuteTests.key(mutes.takeHeldOnset(of: "smoke_alarm")) == "nil")
    }

    @Test("L1: a reload that stops watching a muted smoke_alarm drops its mute: one journal line, status and earshot status list no mute, the phone gets nothing more, the mute record is gone; watched again, it is not muted",
          .needsEarshotdBuilt, .needsEarshotBuilt)
    func reloadDropsMute() throws {
        let setup = try Setup()
        defer { setup.remove() }
        let (phone, directory, config, socket, record) = (setup.phone, setup.directory, setup.config, setup.socket, setup.record)
        let daemon = try DaemonProcess(["--config", config.path, "--foreground", "--input", "-"], standardInput: true)
        defer { daemon.signal(SIGKILL) }
        let control = try UnmuteTests.Control(socket: socket)
        #expect(try control.ask(#"{"cmd":"mute","group":"smoke_alarm","minutes":30}"#)["muted"] as? Bool == true)
        #expect(try control.ask(#"{"cmd":"mute","group":"baby_cry","minutes":30}"#)["muted"] as? Bool == true)
        #expect(phone.waitForRequests(1, timeout: 10).map { $0.header("Title") } == ["kitchen: Smoke alarm muted"])
        #expect(TestWait.until(seconds: 10) { FileManager.default.fileExists(atPath: record) })

        try Self.writeConfig(in: directory, watch: "baby_cry", url: phone.url("/phone"))
        daemon.signal(SIGHUP)
        #expect(TestWait.until(seconds: 20) { daemon.errorText.contains("earshotd: configuration reloaded") }, "\(daemon.errorText)")
        let status = try control.ask(#"{"status":true}"#)
        #expect(status["muted"] as? [String] == ["baby_cry"])
        #expect((status["muted_until"] as? [String: String])?.keys.sorted() == ["baby_cry"])
        let text = try #require(try EarshotCLI.run(["status", "--socket", socket], in: directory, timeout: 30))
        #expect(!text.standardOutput.contains("smoke_alarm"), "\(text.standardOutput)")
        #expect(try control.ask(#"{"cmd":"unmute","group":"smoke_alarm"}"#)["message"] as? String
                == #"unmute: "smoke_alarm" is not a watched group (watched: baby_cry)"#)
        #expect(Self.journal(daemon).filter { $0.contains("smoke_alarm") && !$0.contains("muted over the event socket") }
                == ["earshotd: smoke_alarm is no longer muted: the reload stopped watching it"])
        // Nothing told the phone: the group is not heard either way. The record has no mute left (baby_cry's is
        // not a life-safety group's): it is removed.
        #expect(TestWait.until(seconds: 10) { !FileManager.default.fileExists(atPath: record) })

        try Self.writeConfig(in: directory, watch: "smoke_alarm | baby_cry", url: phone.url("/phone"))
        daemon.signal(SIGHUP)
        #expect(TestWait.until(seconds: 20) { Self.journal(daemon).filter { $0.hasPrefix("earshotd: configuration reloaded") }.count == 2 })
        #expect(try control.ask(#"{"status":true}"#)["muted"] as? [String] == ["baby_cry"])
        daemon.signal(SIGTERM)
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
        #expect(phone.requests.count == 1)
    }

    @Test("L2: smoke_alarm muted when earshotd stops: recorded (0600), and the next start tells the phone once that it listens again, with a journal line; a record whose end passed, or of a group no longer watched, says so",
          .needsEarshotdBuilt)
    func restartEndsMute() throws {
        let setup = try Setup()
        defer { setup.remove() }
        let (phone, config, socket, record) = (setup.phone, setup.config, setup.socket, setup.record)
        func run(_ body: (DaemonProcess) throws -> Void) throws -> DaemonProcess {
            let daemon = try DaemonProcess(["--config", config.path, "--foreground", "--input", "-"], standardInput: true)
            defer { daemon.signal(SIGKILL) }
            _ = try UnmuteTests.Control(socket: socket)
            try body(daemon)
            daemon.signal(SIGTERM)
            #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
            return daemon
        }

        // The first run: smoke_alarm muted for 30 min, baby_cry for 30 (not recorded: the phone is not told of it).
        var until = Date()
        var untilText = ""
        _ = try run { _ throws in
            let control = try UnmuteTests.Control(socket: socket)
            let reply = try control.ask(#"{"cmd":"mute","group":"smoke_alarm","minutes":30}"#)
            untilText = reply["until"] as? String ?? ""
            until = try #require(EventTextFormat.date(fromTimestamp: untilText))
            _ = try control.ask(#"{"cmd":"mute","group":"baby_cry","minutes":30}"#)
            #expect(phone.waitForRequests(1, timeout: 10).count == 1)
        }
        var status = stat()
        try #require(lstat(record, &status) == 0)
        #expect(status.st_mode & 0o777 == 0o600)
        let recorded = try String(contentsOfFile: record, encoding: .utf8)
        // The reply's own text: formatting the Date parsed from it again can give 1 ms less (binary fractions).
        #expect(recorded == #"{"mutes":[{"group":"smoke_alarm","until":"\#(untilText)","unix_until":\#(JSONValue.format((until.timeIntervalSince1970 * 1000).rounded() / 1000, decimals: 3))}]}"# + "\n",
                "\(recorded)")

        // The second: told once, then nothing is recorded (no mute).
        let second = try run { daemon throws in
            #expect(phone.waitForRequests(2, timeout: 10).count == 2, "\(daemon.errorText)")
            let muted = try UnmuteTests.Control(socket: socket).ask(#"{"status":true}"#)["muted"] as? [String]
            #expect(muted == [])
        }
        let told = try #require(phone.requests.last)
        let started = Self.journal(second).first { $0.contains("earshotd last stopped") }
        #expect(started == "earshotd: smoke_alarm was muted when earshotd last stopped (until \(MuteText.clock(until, now: Date())), and this start ended it): its events are published")
        #expect(told.header("Title") == "kitchen: Smoke alarm listening again")
        #expect(told.header("Priority") == "2")
        #expect(told.header("Tags") == "white_check_mark,smoke_alarm")
        let since = told.body.split(separator: "\n").first.map(String.init) ?? ""
        #expect(since.hasPrefix("Smoke alarm listening again in kitchen since "), "\(told.body)")
        #expect(told.body.split(separator: "\n").dropFirst() == ["earshotd restarted, which ended its mute (it was muted until \(MuteText.clock(until, now: Date())))"])
        #expect(!FileManager.default.fileExists(atPath: record))

        // A third run with a record the user's last run left: smoke_alarm's end passed while earshotd was stopped,
        // co_alarm is not watched (told only in the journal).
        let past = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 / 60).rounded(.down) * 60 - 600)
        let co = Date().addingTimeInterval(600)
        try #"{"mutes":[{"group":"co_alarm","until":"x","unix_until":\#(co.timeIntervalSince1970)},{"group":"smoke_alarm","until":"x","unix_until":\#(past.timeIntervalSince1970)}]}"#
            .write(toFile: record, atomically: true, encoding: .utf8)
        let third = try run { _ in #expect(phone.waitForRequests(3, timeout: 10).count == 3) }
        #expect(phone.requests.last?.body.split(separator: "\n").dropFirst() == ["its mute ended at \(MuteText.clock(past)), while earshotd was stopped"])
        #expect(Self.journal(third).filter { $0.contains("earshotd last stopped") } == [
            "earshotd: co_alarm was muted when earshotd last stopped (until \(MuteText.clock(co, now: Date())), and this start ended it); it is no longer watched",
            "earshotd: smoke_alarm was muted when earshotd last stopped (until \(MuteText.clock(past)), which passed while earshotd was stopped): its events are published",
        ])
        #expect(!FileManager.default.fileExists(atPath: record))

        // A record that is not JSON: one line, the daemon runs, nothing told.
        try "{".write(toFile: record, atomically: true, encoding: .utf8)
        let fourth = try run { _ in }
        #expect(Self.journal(fourth).filter { $0.contains(record) }.count == 1)
        #expect(Self.journal(fourth).first { $0.contains(record) }?.hasPrefix("earshotd: the mutes recorded by the last run in \(record) cannot be read (not JSON: ") == true)
        #expect(phone.waitForRequests(4, timeout: 2).count == 3)
        #expect(!FileManager.default.fileExists(atPath: record))
    }
}
