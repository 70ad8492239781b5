import Foundation
import Glibc
import Testing
import EarshotOutputs
import EarshotService
import EarshotTools

/// earshotd's journal entries when systemd-journald does not read its socket (hung, stopped with SIGSTOP,
/// overloaded): libsystemd's sd_journal_sendv is a blocking sendmsg(2) on an AF_UNIX datagram socket, which waits
/// once journald's receive queue is full. Before, it ran on the thread that said the line, and a `mute` over the
/// socket held the socket's queue (no reply) while the stop's last line held the exit. Now entries go through a
/// writer of their own: at most 16 KiB wait, an entry that does not fit is dropped whole and counted, and once the
/// journal has taken what waited one entry says how many were lost.
///
/// The daemon runs in a mount namespace of its own (`unshare --mount`, a tmpfs on /run there), in which the test's
/// directory is /run/systemd/journal: its `socket` is a datagram socket the test bound and reads only when it
/// chooses, its queue filled with datagrams of the test's own (as a hung journald's is).
@Suite("HungJournal: a journal that does not read its socket never holds the daemon", .serialized)
struct HungJournalTests {
    /// Why a daemon cannot be given a journal socket of the test's own here (nil: it can): it needs root and a
    /// private mount namespace (`unshare --mount`, `mount -t tmpfs`, `mount --bind`).
    static let namespaceProblem: String? = {
        let probe = Process()
        probe.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        probe.arguments = ["--mount", "/bin/sh", "-c", "mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/journal"]
        let error = Pipe()
        probe.standardOutput = FileHandle.nullDevice
        probe.standardError = error
        do { try probe.run() } catch {
            return "needs unshare(1) to start earshotd in a mount namespace with a journal socket of the test's own: \(error)"
        }
        let said = String(decoding: error.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        probe.waitUntilExit()
        guard probe.terminationStatus == 0 else {
            return "needs root and a private mount namespace (unshare --mount, mount -t tmpfs /run) to give earshotd a journal socket of the test's own at /run/systemd/journal/socket: \(said.trimmingCharacters(in: .whitespacesAndNewlines))"
        }
        return nil
    }()

    /// A datagram socket bound at `<directory>/socket`, the journal socket of a daemon started with ``command(_:)``.
    final class JournalSocket {
        let directory: URL
        let descriptor: Int32

        init() throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-journal-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            try #require(descriptor >= 0)
            var address = Self.address(directory.appendingPathComponent("socket").path)
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            try #require(bound == 0, "bind: \(String(cString: strerror(errno)))")
        }

        deinit {
            close(descriptor)
            try? FileManager.default.removeItem(at: directory)
        }

        static func address(_ path: String) -> sockaddr_un {
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
            }
            return address
        }

        /// Sends `FILLER=<n>` datagrams from a socket of the test's own until the socket's queue takes no more
        /// (`net.unix.max_dgram_qlen` + 1 of them): a journal that does not read. Returns them, in order.
        func fill() throws -> [[JournalSink.Field]] {
            let sender = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            try #require(sender >= 0)
            defer { close(sender) }
            var address = Self.address(directory.appendingPathComponent("socket").path)
            var sent: [[JournalSink.Field]] = []
            while true {
                let text = "FILLER=\(sent.count)\n"
                let result = text.withCString { bytes in
                    withUnsafePointer(to: &address) {
                        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                            sendto(sender, bytes, strlen(bytes), Int32(MSG_DONTWAIT), $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                        }
                    }
                }
                if result < 0 {
                    #expect(errno == EAGAIN)
                    return sent
                }
                sent.append([JournalSink.Field("FILLER", String(sent.count))])
            }
        }

        /// The next datagram, its fields in order and its size; nil when none comes within `timeoutSeconds` (0: none
        /// is waiting).
        func receive(timeoutSeconds: Int32) -> (fields: [JournalSink.Field], bytes: Int)? {
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, timeoutSeconds * 1000) == 1 else { return nil }
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            let count = recv(descriptor, &buffer, buffer.count, 0)
            guard count >= 0 else { return nil }
            return (Self.fields(Array(buffer[0..<count])), count)
        }

        /// Reads datagrams until one is `last` (or 30 s pass without one: then what came).
        func receive(until last: [JournalSink.Field]) -> [[JournalSink.Field]] {
            var received: [[JournalSink.Field]] = []
            while let datagram = receive(timeoutSeconds: 30) {
                received.append(datagram.fields)
                if datagram.fields == last { break }
            }
            return received
        }

        /// The fields of a datagram in journald's native protocol: `NAME=value\n`, or `NAME\n`, a 64-bit
        /// little-endian length, the value and `\n` for a value that holds a newline.
        static func fields(_ bytes: [UInt8]) -> [JournalSink.Field] {
            var fields: [JournalSink.Field] = []
            var index = 0
            while index < bytes.count {
                let end = bytes[index...].firstIndex(of: UInt8(ascii: "\n")) ?? bytes.count
                let line = bytes[index..<end]
                if let equals = line.firstIndex(of: UInt8(ascii: "=")) {
                    fields.append(.init(String(decoding: line[..<equals], as: UTF8.self), String(decoding: line[(equals + 1)...], as: UTF8.self)))
                    index = end + 1
                } else {
                    guard end + 9 <= bytes.count else { break }
                    let length = bytes[(end + 1)..<(end + 9)].reversed().reduce(0) { $0 << 8 | Int($1) }
                    let start = end + 9
                    guard start + length <= bytes.count else { break }
                    fields.append(.init(String(decoding: line, as: UTF8.self), String(decoding: bytes[start..<(start + length)], as: UTF8.self)))
                    index = start + length + 1
                }
            }
            return fields
        }
    }

    /// `unshare` arguments that start `arguments` (earshotd and its own) with a tmpfs on /run and `journal`'s directory
    /// bound at /run/systemd/journal, in a mount namespace of their own (the bindings are private to it).
    static func command(_ arguments: [String], journal: JournalSocket) -> [String] {
        ["--mount", "/bin/sh", "-c",
         #"mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/journal && mount --bind "$0" /run/systemd/journal && exec "$@""#,
         journal.directory.path] + arguments
    }

    /// The entries of the commands (`MESSAGE`, `PRIORITY=6`, `SYSLOG_IDENTIFIER`), as `JournalSink.log` makes them.
    static func logEntry(_ message: String, priority: Int = 6) -> [JournalSink.Field] {
        [.init("MESSAGE", message), .init("PRIORITY", String(priority)), .init("SYSLOG_IDENTIFIER", "earshotd")]
    }

    @Test("the dropped-entries entry: singular and plural, priority 4; entryBytes counts the datagram's bytes")
    func droppedEntry() {
        #expect(JournalSink.droppedEntryMessage(1) == "1 journal entry was dropped: the journal did not take it (is systemd-journald running?)")
        #expect(JournalSink.droppedEntryMessage(37) == "37 journal entries were dropped: the journal did not take them (is systemd-journald running?)")
        #expect(JournalSink.droppedEntryFields(2, identifier: "earshotd") == Self.logEntry(
            "2 journal entries were dropped: the journal did not take them (is systemd-journald running?)", priority: 4))
        #expect(JournalSink.journalPendingLimitBytes == 16_384)
        // "MESSAGE=a b\n" (12) + "PRIORITY=6\n" (11); "A\n" + 8 length bytes + "x\ny" + "\n" (14).
        #expect(JournalSink.entryBytes([.init("MESSAGE", "a b"), .init("PRIORITY", "6")]) == 23)
        #expect(JournalSink.entryBytes([.init("A", "x\ny")]) == 14)
        #expect(JournalSocket.fields(Array("MESSAGE=a b\nA\n".utf8) + [3, 0, 0, 0, 0, 0, 0, 0] + Array("x\ny\n".utf8))
            == [.init("MESSAGE", "a b"), .init("A", "x\ny")])
    }

    @Test("earshotd, its journal's socket full and not read: a subscriber gets samples/demo.flac's events at their times, status answers, 200 mute/unmute commands are answered; once the journal reads, the entries that fit in 16 KiB, exact, then the exact dropped-entries entry; SIGTERM with the journal full again: exit 0 within the stop's bound",
          .needsEarshotdBuilt, .enabled(if: namespaceProblem == nil, Comment(rawValue: namespaceProblem ?? "")))
    func daemonOnHungJournal() throws {
        // Writing audio to a daemon that has exited fails with EPIPE instead of killing the test process.
        signal(SIGPIPE, SIG_IGN)
        let scratch = try DaemonScratch([])
        defer { scratch.remove() }
        let config = ["[output]", "socket = \(scratch.socket)", "[history]", "enabled = false"]  // journal = true
        try (config.joined(separator: "\n") + "\n").write(to: scratch.config, atomically: true, encoding: .utf8)
        let journal = try JournalSocket()
        let fillers = try journal.fill()
        #expect(fillers.count >= 2)

        let input = Pipe()
        let errors = Pipe()
        let daemon = Process()
        daemon.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        daemon.arguments = Self.command(
            [try #require(EarshotdRun.executable).path, "--config", scratch.config.path, "--input", "-", "--input-speed", "max"],
            journal: journal)
        daemon.environment = DaemonEndToEndTests.environment(home: scratch.directory)
        daemon.standardInput = input
        daemon.standardOutput = FileHandle.nullDevice
        daemon.standardError = errors
        try daemon.run()
        defer { if daemon.isRunning { kill(daemon.processIdentifier, SIGKILL) } }
        #expect(TestWait.until(seconds: 30) { FileManager.default.fileExists(atPath: scratch.socket) })
        let subscriber = try EventSubscriber(path: scratch.socket)
        let control = try UnmuteTests.Control(socket: scratch.socket)

        // The demo's 32 s, then nothing: the daemon says the input stalled 5 s later. The same lines, at the same
        // stream times, as with a journal that reads (DaemonEndToEnd) or none (StuckStandardError).
        #expect(try StuckStandardErrorTests.demoUntilStall(input: input, subscriber: subscriber)
                == StuckStandardErrorTests.demoUntilStallLines)
        let status = try control.ask(#"{"status":true}"#)
        #expect(status["type"] as? String == "status")
        #expect(status["capture"] as? String == "stalled")

        // Each mute and unmute is a journal entry (155 and 85 bytes; a day's mute, whose line's length does not depend on the time of day): 24,000 bytes, past the 16 KiB that may wait.
        var commandEntries: [[JournalSink.Field]] = []
        for _ in 0..<100 {
            for muted in [true, false] {
                let reply = try control.ask(muted ? #"{"cmd":"mute","group":"baby_cry","minutes":1440}"# : #"{"cmd":"unmute","group":"baby_cry"}"#)
                #expect(reply["type"] as? String == "mute")
                #expect(reply["muted"] as? Bool == muted)
                #expect(reply["changed"] as? Bool == true)
                commandEntries.append(Self.logEntry(muted
                    ? try StuckStandardErrorTests.dayMuteLine(reply)
                    : "baby_cry unmuted over the event socket"))
            }
        }
        let after = try control.ask(#"{"status":true}"#)
        #expect(after["type"] as? String == "status")
        #expect(after["muted"] as? [String] == [])

        let audioEntries: [[JournalSink.Field]] = [
            [.init("MESSAGE", "health capture_live: capturing from -: S16_LE, 1 channel, 16000 Hz, period 3200 frames, buffer 3200 frames"),
             .init("PRIORITY", "6"), .init("SYSLOG_IDENTIFIER", "earshotd"), .init("EARSHOT_EVENT", "health"),
             .init("EARSHOT_HEALTH", "capture_live"), .init("EARSHOT_SOURCE", "-")],
            [.init("MESSAGE", #"baby_cry detected: "Baby cry" (confidence 1.00) at stream time 2.40 s"#),
             .init("PRIORITY", "5"), .init("SYSLOG_IDENTIFIER", "earshotd"), .init("EARSHOT_EVENT", "onset"),
             .init("EARSHOT_GROUP", "baby_cry"), .init("EARSHOT_CLASS", "builtin_baby_cry:baby_cry"),
             .init("EARSHOT_CONFIDENCE", "0.9958"), .init("EARSHOT_STREAM_TIME", "2.4")],
            [.init("MESSAGE", #"baby_cry ended: "Baby cry" from 2.40 s to 9.60 s (7.20 s, peak confidence 1.00, mean 0.99)"#),
             .init("PRIORITY", "6"), .init("SYSLOG_IDENTIFIER", "earshotd"), .init("EARSHOT_EVENT", "end"),
             .init("EARSHOT_GROUP", "baby_cry"), .init("EARSHOT_CLASS", "builtin_baby_cry:baby_cry"),
             .init("EARSHOT_CONFIDENCE", "0.9983"), .init("EARSHOT_STREAM_TIME", "2.4"), .init("EARSHOT_END_TIME", "9.6"),
             .init("EARSHOT_DURATION", "7.2"), .init("EARSHOT_PEAK_CONFIDENCE", "0.9983"),
             .init("EARSHOT_MEAN_CONFIDENCE", "0.9874"), .init("EARSHOT_END_REASON", "hold_elapsed")],
            [.init("MESSAGE", #"glass_break detected: "Shatter" (confidence 0.91) at stream time 24.00 s"#),
             .init("PRIORITY", "5"), .init("SYSLOG_IDENTIFIER", "earshotd"), .init("EARSHOT_EVENT", "onset"),
             .init("EARSHOT_GROUP", "glass_break"), .init("EARSHOT_CLASS", "Shatter"),
             .init("EARSHOT_CONFIDENCE", "0.909"), .init("EARSHOT_STREAM_TIME", "24.0")],
            [.init("MESSAGE", #"glass_break ended: "Shatter" from 24.00 s to 24.96 s (0.96 s, peak confidence 0.91, mean 0.91)"#),
             .init("PRIORITY", "6"), .init("SYSLOG_IDENTIFIER", "earshotd"), .init("EARSHOT_EVENT", "end"),
             .init("EARSHOT_GROUP", "glass_break"), .init("EARSHOT_CLASS", "Shatter"),
             .init("EARSHOT_CONFIDENCE", "0.909"), .init("EARSHOT_STREAM_TIME", "24.0"), .init("EARSHOT_END_TIME", "24.96"),
             .init("EARSHOT_DURATION", "0.96"), .init("EARSHOT_PEAK_CONFIDENCE", "0.909"),
             .init("EARSHOT_MEAN_CONFIDENCE", "0.909"), .init("EARSHOT_END_REASON", "hold_elapsed")],
            [.init("MESSAGE", "health input_stalled: no audio from standard input for 5 s (has the program writing to it hung or paused?); waiting for it, and saying so when audio comes back"),
             .init("PRIORITY", "4"), .init("SYSLOG_IDENTIFIER", "earshotd"), .init("EARSHOT_EVENT", "health"),
             .init("EARSHOT_HEALTH", "input_stalled"), .init("EARSHOT_SOURCE", "-")],
        ]
        // The journal took none: the first entry waits in sendmsg, the others behind it, as far as 16 KiB go.
        let (taken, dropped) = StuckStandardErrorTests.taken(
            (audioEntries + commandEntries).map(Self.line), limit: JournalSink.journalPendingLimitBytes)
        #expect(taken.count == 127)
        #expect(dropped == 79)
        let droppedEntry = Self.logEntry(JournalSink.droppedEntryMessage(dropped), priority: 4)
        let arrived = journal.receive(until: droppedEntry)
        #expect(arrived == fillers + taken.map(Self.entry) + [droppedEntry])

        // A stop while the journal takes nothing: the entries that wait are given 0.25 s, then earshotd exits.
        let fillersAtStop = try journal.fill()
        kill(daemon.processIdentifier, SIGTERM)
        #expect(TestWait.until(seconds: 30) { !daemon.isRunning })
        daemon.waitUntilExit()
        #expect(daemon.terminationStatus == 0)
        var left: [[JournalSink.Field]] = []
        while let datagram = journal.receive(timeoutSeconds: 0) { left.append(datagram.fields) }
        #expect(left == fillersAtStop)
        // Every entry went to the journal or was dropped: nothing on stderr.
        #expect(String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) == "")
        try? input.fileHandleForWriting.close()
    }

    /// An entry as one string of the size of its datagram (``StuckStandardErrorTests/taken(_:waiting:limit:)`` counts
    /// UTF-8 bytes): its fields, `NAME=value\n` each.
    static func line(_ entry: [JournalSink.Field]) -> String {
        entry.map { "\($0.name)=\($0.value)\n" }.joined()
    }

    /// The fields of ``line(_:)``.
    static func entry(_ line: String) -> [JournalSink.Field] {
        JournalSocket.fields(Array(line.utf8))
    }
}
