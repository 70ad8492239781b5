import Foundation
import Testing

import Earshot
import EarshotDetection
import EarshotSupport
import EarshotOutputs
import EarshotService
import EarshotTools

/// The subscriber side (`earshot subscribe`): connection errors and the text form.
@Suite("EventServer client")
struct EventServerClientTests {
    typealias S = SocketTestSupport

    @Test("A missing socket: exact line naming the path and the fix, exit status 69")
    func missingSocket() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("missing.sock")
        do {
            _ = try EventSubscriber(path: path)
            Issue.record("connected to a missing socket")
        } catch {
            #expect(error.message == "cannot connect to \(path): No such file or directory (is earshotd running? see systemctl status earshotd)")
            #expect(error.exitStatus == 69)
            #expect(error.errnoValue == ENOENT)
        }
        #expect(EventSubscriber.ConnectError(path: EventServer.defaultPath, errnoValue: ENOENT).message
            == "cannot connect to /run/earshot/earshot.sock: No such file or directory (is earshotd running? see systemctl status earshotd)")
    }

    @Test("A socket nobody listens on: connection refused, exit status 69")
    func refused() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("stale.sock")
        try S.makeStaleSocket(at: path)
        do {
            _ = try EventSubscriber(path: path)
            Issue.record("connected to a stale socket")
        } catch {
            #expect(error.message == "cannot connect to \(path): Connection refused (is earshotd running? see systemctl status earshotd)")
            #expect(error.exitStatus == 69)
        }
    }

    @Test("A path that is a file or a folder, not a socket: said so, not \"Connection refused\" (trial 5 #15)")
    func notASocket() throws {
        let directory = try TemporarySocketDirectory()
        let file = directory.file("dk.conf")
        try Data("[detection]\n".utf8).write(to: URL(fileURLWithPath: file))
        for (path, kind) in [(file, "a file"), (directory.path, "a directory")] {
            do {
                _ = try EventSubscriber(path: path)
                Issue.record("connected to \(path)")
            } catch {
                #expect(error.message == "cannot connect to \(path): it is \(kind), not a socket (give earshotd's socket, the [output] socket of its configuration, by default /run/earshot/earshot.sock)")
                #expect(error.exitStatus == 69)
            }
        }
    }

    @Test("earshot sleep on a full socket prints the daemon's refusal every time, never \"Broken pipe\" (trial 5 #15)",
          .enabled(if: EarshotCLI.executable != nil, Comment(rawValue: EarshotCLI.missingMessage)))
    func sleepOnAFullSocket() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path, maxClients: 1)
        defer { server.stop() }
        let first = try S.subscriber(path)
        for _ in 0..<10 {
            let outcome = try #require(try EarshotCLI.run(["sleep", "status", "--socket", path], in: URL(fileURLWithPath: directory.path), timeout: 30))
            #expect(outcome.errorLines == ["earshot: too many subscribers (1 connected, at most 1); try again later, or raise [output] max_clients"])
            #expect(outcome.status == 69)
        }
        withExtendedLifetime(first) {}
    }

    @Test("Permission denied: the hint names the group owning the socket, exit status 77")
    func permissionDenied() throws {
        let directory = try TemporarySocketDirectory()
        #expect(chmod(directory.path, 0o755) == 0)
        let path = directory.file("e.sock")
        let server = try S.server(path)
        defer { server.stop() }
        var info = stat()
        #expect(stat(path, &info) == 0)
        let groupName = try #require(EventSubscriber.ConnectError.owningGroup(of: path))
        // Never "join the group root": a socket of group root (the tests run as root) gets sudo or socket_mode.
        let expected = groupName == "root"
            ? "cannot connect to \(path): Permission denied (the socket's group is root, which no user should join: use sudo, or run earshotd as its service (user and group earshot, as systemctl start earshotd does) and join the group earshot: sudo usermod -aG earshot $USER, then log in again)"
            : "cannot connect to \(path): Permission denied (join the group \"\(groupName)\" that owns the socket: sudo usermod -aG \(groupName) $USER, then log in again)"

        if geteuid() == 0 {
            // Root passes every permission check: connect from a child that became nobody. Mode 0660 (owner root)
            // must refuse it; mode 0666 must let it in, which shows the mode bits (not the directory) decide.
            #expect(Self.connectErrnoAsNobody(path) == EACCES)
            #expect(chmod(path, 0o666) == 0)
            #expect(Self.connectErrnoAsNobody(path) == 0)
            #expect(chmod(path, 0o660) == 0)
            let error = EventSubscriber.ConnectError(path: path, errnoValue: EACCES)
            #expect(error.message == expected)
            #expect(error.exitStatus == 77)
        } else {
            #expect(chmod(path, 0) == 0)
            do {
                _ = try EventSubscriber(path: path)
                Issue.record("connected to a mode-0 socket")
            } catch {
                #expect(error.message == expected)
                #expect(error.exitStatus == 77)
            }
        }
        #expect(EventSubscriber.ConnectError(path: "/run/earshot/earshot.sock", errnoValue: EACCES, ownerGroup: "earshot").message
            == "cannot connect to /run/earshot/earshot.sock: Permission denied (join the group \"earshot\" that owns the socket: sudo usermod -aG earshot $USER, then log in again)")
    }

    @Test("Permission denied on a socket of group root (a daemon run as root): never advise joining group root", .needsEarshotBuilt,
          .enabled(if: geteuid() == 0, "needs root, to make a root:root socket and connect as the user nobody through setpriv"))
    func permissionDeniedRootGroup() throws {
        let directory = try TemporarySocketDirectory()
        #expect(chmod(directory.path, 0o755) == 0)
        let path = directory.file("e.sock")
        let server = try S.server(path)  // root:root, mode 0660
        defer { server.stop() }
        #expect(EventSubscriber.ConnectError.owningGroup(of: path) == "root")
        let expected = "cannot connect to \(path): Permission denied (the socket's group is root, which no user should join: use sudo, or run earshotd as its service (user and group earshot, as systemctl start earshotd does) and join the group earshot: sudo usermod -aG earshot $USER, then log in again)"
        let earshot = try #require(EarshotCLI.executable)
        for command in [["status"], ["subscribe"]] {
            let outcome = try EarshotCLI.runProcess(
                URL(fileURLWithPath: "/usr/bin/setpriv"),
                ["--reuid=65534", "--regid=65534", "--clear-groups", earshot.path] + command + ["--socket", path], timeout: 20)
            #expect(outcome.status == 77, "\(command)")
            #expect(outcome.errorLines == ["earshot: " + expected], "\(command)")
        }
    }

    /// Connects to `path` from a forked child running as uid/gid 65534 (nobody); returns the connect errno
    /// (0 when it connected). The child calls only async-signal-safe functions.
    static func connectErrnoAsNobody(_ path: String) -> Int32 {
        guard let address = try? UnixSocketAddress(path: path) else { return -1 }
        let length = address.length
        let raw = UnsafeMutableRawPointer.allocate(byteCount: MemoryLayout<sockaddr_un>.size, alignment: 8)
        defer { raw.deallocate() }
        address.withSockaddr { pointer, count in raw.copyMemory(from: pointer, byteCount: Int(count)) }
        let socketAddress = raw.assumingMemoryBound(to: sockaddr.self)
        let pid = fork()
        if pid == 0 {
            if setgroups(0, nil) != 0 || setgid(65534) != 0 || setuid(65534) != 0 { _exit(100) }
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            if fd < 0 { _exit(101) }
            _exit(connect(fd, socketAddress, length) == 0 ? 0 : errno)
        }
        guard pid > 0 else { return -2 }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return (status >> 8) & 0xFF
    }

    @Test("readLine times out without data and returns the end of the stream when the server stops")
    func readTimeoutAndEnd() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path)
        let client = try S.subscriber(path)
        #expect(try client.readLine(timeoutSeconds: 0.05) == .timedOut)
        server.stop()
        #expect(try client.readLine(timeoutSeconds: S.timeout) == .line(#"{"type":"shutdown"}"#))
        #expect(try client.readLine(timeoutSeconds: S.timeout) == .endOfStream)
    }

    @Test("earshot subscribe exits 0 after the daemon's shutdown notice", .needsEarshotBuilt)
    func subscribeEndsCleanlyOnShutdown() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path)
        defer { server.stop() }
        let run = Self.runInBackground(["subscribe", "--socket", path])
        try #require(run.started)
        #expect(S.eventually { server.statistics.subscribers == 1 })
        server.publish(HealthEvent(state: .captureLive, message: "capturing"), time: S.wallClock)
        server.stop()
        let outcome = try #require(run.wait())
        #expect(outcome.status == 0)
        #expect(outcome.errorLines.isEmpty)
        #expect(outcome.outputLines.count == 2)
        #expect(outcome.outputLines.first?.hasPrefix(#"{"type":"health","state":"capture_live""#) == true)
        #expect(outcome.outputLines.last == #"{"type":"shutdown"}"#)
    }

    @Test("earshot subscribe --format text: a model's class in words (JSON keeps the identifier)", .needsEarshotBuilt)
    func subscribeTextNamesModelClassesInWords() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        let server = try S.server(path)
        defer { server.stop() }
        let text = Self.runInBackground(["subscribe", "--socket", path, "--format", "text"])
        let json = Self.runInBackground(["subscribe", "--socket", path])
        try #require(text.started && json.started)
        #expect(S.eventually { server.statistics.subscribers == 2 })
        server.publish(S.onset("baby_cry", "builtin_baby_cry:baby_cry", 0.99, 29.28), time: S.wallClock)
        server.publish(S.offset("baby_cry", "builtin_baby_cry:baby_cry", 29.28, 35.52), time: S.wallClock)
        server.publish(S.onset("ourbaby", "ourbaby:ourbaby", 0.7, 40), time: S.wallClock)
        server.stop()
        let textOutcome = try #require(text.wait())
        let jsonOutcome = try #require(json.wait())
        #expect(textOutcome.status == 0)
        let local = LocalTime.dateTimeText(S.wallClock, timeZone: LocalTime.zone())
        #expect(textOutcome.outputLines == [
            #"\#(local)  baby_cry started: "Baby cry" 99% (stream 29.28 s)"#,
            #"\#(local)  baby_cry ended after 6.24 s: "Baby cry" peak 91%, mean 72% (stream 29.28-35.52 s)"#,
            #"\#(local)  ourbaby started: "Ourbaby" 70% (stream 40.00 s)"#,
            "earshotd stopped (shutdown notice)",
        ])
        #expect(jsonOutcome.outputLines.first?.hasPrefix(#"{"type":"detection","group":"baby_cry","class":"builtin_baby_cry:baby_cry","#) == true)
    }

    @Test("earshot subscribe: a connection that ends without the shutdown notice is one stderr line and status 69", .needsEarshotBuilt)
    func subscribeReportsADroppedConnection() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        // A listener that sends one event and closes, as a daemon killed with SIGKILL would.
        let address = try UnixSocketAddress(path: path)
        let listener = SocketCall.makeStreamSocket(nonBlocking: false)
        defer { SocketCall.close(listener) }
        #expect(address.withSockaddr { bind(listener, $0, $1) } == 0)
        #expect(listen(listener, 1) == 0)
        let run = Self.runInBackground(["subscribe", "--socket", path, "--format", "text"])
        try #require(run.started)
        var poller = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
        #expect(poll(&poller, 1, Int32(S.timeout * 1000)) == 1)
        let connection = accept(listener, nil, nil)
        #expect(connection >= 0)
        let line = Array(#"{"type":"dropped","count":2}"#.utf8) + [0x0A]
        #expect(line.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == line.count)
        SocketCall.close(connection)
        let outcome = try #require(run.wait())
        #expect(outcome.status == 69)
        #expect(outcome.outputLines == ["(2 events dropped: this subscriber fell behind)"])
        #expect(outcome.errorLines == ["earshot: connection to \(path) closed without a shutdown notice (did earshotd stop or crash? see systemctl status earshotd)"])
    }

    @Test("earshot subscribe --group: a preset the daemon does not watch says how to watch it; an unknown name gets a suggestion; status 64", .needsEarshotBuilt)
    func subscribeToUnwatchedGroup() throws {
        let directory = try TemporarySocketDirectory()
        let path = directory.file("e.sock")
        // As the daemon with the default configuration: the default watch list, plus snoring (sleep sessions).
        let subscribable = LabelGroup.defaultWatchList + [SnoreDetector.groupName]
        let unwatched = DaemonConfiguration().unwatchedGroups(subscribable: subscribable, configPath: nil)
        #expect(unwatched == EventServer.UnwatchedGroups(
            names: ["dog_bark", "doorbell_knock", "loud", "speech"],
            advice: "[detection] watch in /etc/earshot/earshotd.conf, then reload earshotd (systemctl reload earshotd)",
            alsoSubscribable: ["snoring": "sleep sessions"]))
        let server = try EventServer(
            configuration: .init(path: path, knownGroups: subscribable, unwatchedGroups: unwatched), status: S.status)
        defer { server.stop() }
        // The watched groups as the status reply lists them; snoring apart (trial 10 #8).
        let watched = "baby_cry, co_alarm, fire_alarm, glass_break, smoke_alarm; also snoring (sleep sessions)"
        let cases: [(String, String)] = [
            ("dog_bark", #"earshot: the daemon does not watch group "dog_bark": add it to [detection] watch in /etc/earshot/earshotd.conf, then reload earshotd (systemctl reload earshotd)"#),
            ("dgo_bark", #"earshot: unknown group "dgo_bark" in subscribe (did you mean dog_bark? watched groups: "# + watched + ")"),
            ("kettle", #"earshot: unknown group "kettle" in subscribe (watched groups: "# + watched + ")"),
        ]
        for (group, line) in cases {
            let run = Self.runInBackground(["subscribe", "--socket", path, "--group", group])
            try #require(run.started)
            let outcome = try #require(run.wait())
            #expect(outcome.status == 64, "\(group)")
            #expect(outcome.standardOutput.isEmpty, "\(group)")
            #expect(outcome.errorLines == [line], "\(group)")
        }
        // A watch list from --watch: a reload keeps the command line, so the advice is a restart.
        var overrides = DaemonConfiguration.Overrides()
        overrides.watch = ["smoke_alarm"]
        let flagged = try DaemonConfiguration().applying(overrides)
        #expect(flagged.unwatchedGroups(subscribable: ["smoke_alarm"], configPath: "/srv/e.conf").advice
            == "earshotd's --watch list, then restart earshotd")
        #expect(try DaemonConfiguration.parse("[detection]\nwatch = speech\n", source: "/srv/e.conf")
            .unwatchedGroups(subscribable: ["speech"], configPath: "/srv/e.conf").advice
            == "[detection] watch in /srv/e.conf, then reload earshotd (systemctl reload earshotd)")
    }

    /// `earshot ARGUMENTS` running on another thread; `wait()` returns its outcome (nil when not built).
    static func runInBackground(_ arguments: [String]) -> (started: Bool, wait: () -> EarshotCLI.Outcome?) {
        guard EarshotCLI.executable != nil else { return (false, { nil }) }
        let box = OutcomeBox()
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            box.outcome = try? EarshotCLI.run(arguments, in: FileManager.default.temporaryDirectory, timeout: 20)
            done.signal()
        }
        return (true, {
            _ = done.wait(timeout: .now() + 30)
            return box.outcome
        })
    }

    private final class OutcomeBox: @unchecked Sendable {
        var outcome: EarshotCLI.Outcome?
    }

    @Test("The text form of each line kind")
    func textForm() throws {
        let utc = try #require(TimeZone(identifier: "UTC"))
        let onset = S.line(S.onset("smoke_alarm", "Smoke detector, smoke alarm", 0.81234, 12.48))
        #expect(EventTextFormat.format(line: onset, timeZone: utc)
            == #"2026-11-30 16:45:12  smoke_alarm started: "Smoke detector, smoke alarm" 81% (stream 12.48 s)"#)
        let offset = S.line(S.offset("smoke_alarm", "Smoke detector, smoke alarm", 12.48, 18.24))
        #expect(EventTextFormat.format(line: offset, timeZone: utc)
            == #"2026-11-30 16:45:12  smoke_alarm ended after 5.76 s: "Smoke detector, smoke alarm" peak 91%, mean 72% (stream 12.48-18.24 s)"#)
        let health = EventJSON.object(
            for: HealthEvent(state: .inputSilent, message: "no sound for 10 minutes"), time: S.wallClock).encoded
        #expect(EventTextFormat.format(line: health, timeZone: utc)
            == "2026-11-30 16:45:12  health input_silent: no sound for 10 minutes")
        #expect(EventTextFormat.format(line: #"{"type":"dropped","count":12}"#, timeZone: utc)
            == "(12 events dropped: this subscriber fell behind)")
        #expect(EventTextFormat.format(line: #"{"type":"error","message":"bad"}"#, timeZone: utc) == "daemon error: bad")
        let report = #"{"type":"snore_report","source":"sleep session","snoring_minutes":12.345,"snoring_percent":2.5,"events":7,"episodes":[{"start":1},{"start":2}]}"#
        #expect(EventTextFormat.format(line: report, timeZone: utc)
            == "snore report (sleep session): 12.3 min snoring (2.5 %), 2 episodes, 7 events")
        #expect(EventTextFormat.format(line: #"{"type":"subscribed","groups":"all"}"#, timeZone: utc) == nil)
        #expect(EventTextFormat.format(line: #"{"type":"shutdown"}"#, timeZone: utc) == "earshotd stopped (shutdown notice)")
        #expect(EventTextFormat.format(line: "garbage", timeZone: utc) == "garbage")
        let berlin = try #require(TimeZone(identifier: "Europe/Berlin"))
        #expect(EventTextFormat.format(line: onset, timeZone: berlin)?.hasPrefix("2026-11-30 17:45:12  ") == true)
    }
}
