import Foundation
import Glibc
import Testing
import EarshotOutputs
import EarshotSupport
import EarshotService
import EarshotTools

/// earshotd's log lines on a standard error nobody reads (no journal, `--no-journal`, `--foreground`): before, each
/// was a blocking write(2) on the thread that said it, and a `mute` over the socket held the socket's queue, with
/// every status reply, command and event behind it, until standard error took the line. Now they go through a
/// `LineWriter` of their own (as standard output's lines): at most 16 KiB wait, a line that does not fit is dropped
/// whole and counted, and once standard error has taken what waited one line says how many were lost.
@Suite("StuckStandardError: a standard error nobody reads never holds the daemon", .serialized)
struct StuckStandardErrorTests {
    /// Writes samples/demo.flac's 32 s (16 kHz S16_LE) to `input` and reads `subscriber` until the daemon says the
    /// input stalled, 5 s after the audio stops: the lines without their wall-clock times (``demoUntilStallLines``
    /// with a working output; HungJournalTests expects the same with a hung journal).
    static func demoUntilStall(input: Pipe, subscriber: EventSubscriber) throws -> [String] {
        let demo = TestPaths.packageRoot.appendingPathComponent("samples/demo.flac")
        input.fileHandleForWriting.write(try UnmuteTests.pcm(demo))
        var received: [String] = []
        while let line = try subscriber.nextLine(timeoutSeconds: 60, where: { _ in true }) {
            received.append(UnmuteTests.timeless(line))
            if line.contains(#""state":"input_stalled""#) { break }
        }
        return received
    }

    /// What ``demoUntilStall(input:subscriber:)`` reads from earshotd `--input - --input-speed max` in these tests'
    /// configurations: the same lines, at the same stream times, as DaemonEndToEnd's.
    static let demoUntilStallLines = [
        #"{"type":"health","state":"capture_live","message":"capturing from -: S16_LE, 1 channel, 16000 Hz, period 3200 frames, buffer 3200 frames","source":"-"}"#,
        #"{"type":"detection","group":"baby_cry","class":"builtin_baby_cry:baby_cry","confidence":0.9958,"stream_time":2.4}"#,
        #"{"type":"detection_end","group":"baby_cry","class":"builtin_baby_cry:baby_cry","start":2.4,"end":9.6,"duration":7.2,"peak_confidence":0.9983,"mean_confidence":0.9874,"windows":9,"reason":"hold_elapsed"}"#,
        #"{"type":"detection","group":"glass_break","class":"Shatter","confidence":0.909,"stream_time":24.0}"#,
        #"{"type":"detection_end","group":"glass_break","class":"Shatter","start":24.0,"end":24.96,"duration":0.96,"peak_confidence":0.909,"mean_confidence":0.909,"windows":1,"reason":"hold_elapsed"}"#,
        #"{"type":"health","state":"input_stalled","message":"no audio from standard input for 5 s (has the program writing to it hung or paused?); waiting for it, and saying so when audio comes back","source":"-"}"#,
    ]

    /// A pipe of 4 KiB whose buffer holds 4 KiB of the test's own (`filler`): full, no line of the daemon fits.
    static func fullPipe() throws -> (read: Int32, write: Int32) {
        var fds: [Int32] = [0, 0]
        try #require(pipe(&fds) == 0)
        #expect(fcntl(fds[1], 1031 /* F_SETPIPE_SZ */, 4096) == 4096)
        let written = filler.withCString { write(fds[1], $0, 4096) }
        #expect(written == 4096)
        return (fds[0], fds[1])
    }

    /// 4095 `#` and a newline.
    static let filler = String(repeating: "#", count: 4095) + "\n"

    /// Reads `descriptor` until what was read ends with `suffix` (or 30 s pass without a byte: then what came).
    static func drained(_ descriptor: Int32, until suffix: String) -> String {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while !String(decoding: bytes, as: UTF8.self).hasSuffix(suffix) {
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 30_000) == 1 else { break }
            let count = Glibc.read(descriptor, &chunk, chunk.count)
            guard count > 0 else { break }
            bytes += chunk[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The lines a ``LineWriter`` of `limit` bytes that never gets to write takes of `lines`, in order, and how many
    /// it drops: a line is taken when nothing waits or it fits under the limit.
    static func taken(_ lines: [String], waiting: Int = 0, limit: Int) -> (taken: [String], dropped: Int) {
        var pending = waiting, taken: [String] = [], dropped = 0
        for line in lines {
            if pending == 0 || pending + line.utf8.count <= limit {
                pending += line.utf8.count
                taken.append(line)
            } else {
                dropped += 1
            }
        }
        return (taken, dropped)
    }

    @Test("the dropped-lines line: singular and plural")
    func droppedLine() {
        #expect(JournalSink.droppedLine(1, identifier: "earshotd") == "earshotd: 1 log line was dropped: standard error did not take it (is anyone reading it?)\n")
        #expect(JournalSink.droppedLine(37, identifier: "earshotd") == "earshotd: 37 log lines were dropped: standard error did not take them (is anyone reading it?)\n")
    }

    @Test("JournalSink on a full pipe: 200 lines of 100 bytes return at once; once the pipe is read, the 163 that fit in 16 KiB, whole and in order, then one line saying 37 were dropped, then the next line")
    func fallbackOnFullPipe() throws {
        let (readEnd, writeEnd) = try Self.fullPipe()
        defer {
            close(readEnd)
            close(writeEnd)
        }
        let sink = JournalSink(identifier: "earshotd", journalSocketPath: "/nonexistent/journal/socket", fallbackDescriptor: writeEnd)
        // "earshotd: line 000 " (19 bytes) + 80 dots + newline: 100 bytes a line.
        let messages = (0..<200).map { "line \(String(format: "%03d", $0)) " + String(repeating: ".", count: 80) }
        for message in messages { sink.log(message) }
        #expect(sink.droppedLines == 37)
        let lines = messages.map { "earshotd: \($0)\n" }
        #expect(lines.allSatisfy { $0.utf8.count == 100 })
        let dropped = JournalSink.droppedLine(37, identifier: "earshotd")
        #expect(Self.drained(readEnd, until: dropped) == Self.filler + lines.prefix(163).joined() + dropped)
        sink.log("after")
        #expect(sink.flush(patience: .seconds(10)))
        #expect(Self.drained(readEnd, until: "earshotd: after\n") == "earshotd: after\n")
        #expect(sink.droppedLines == 37)
    }

    /// The log line of `{"cmd":"mute","group":"baby_cry","minutes":1440}`, from its reply's `until`: `baby_cry muted
    /// over the event socket for 24 h, until 19:15 tomorrow: its events are not published until then`.
    static func dayMuteLine(_ reply: [String: Any]) throws -> String {
        let until = try #require((reply["until"] as? String).flatMap(EventTextFormat.date(fromTimestamp:)), "\(reply)")
        return "baby_cry muted over the event socket for 24 h, until \(MuteText.clock(until)) tomorrow: its events are not published until then"
    }

    @Test("earshotd, stderr a full pipe nobody reads: a subscriber gets samples/demo.flac's events, status answers, 240 mute/unmute commands are answered; once stderr is read, the lines that fit, whole, then the exact dropped line; SIGTERM: stopped (signal 15), exit 0",
          .needsEarshotdBuilt)
    func daemonOnFullStandardError() throws {
        // Writing audio to a daemon that has exited fails with EPIPE instead of killing the test process.
        signal(SIGPIPE, SIG_IGN)
        let scratch = try DaemonScratch([])  // journal = false: the log lines go to stderr
        defer { scratch.remove() }
        let (readEnd, writeEnd) = try Self.fullPipe()
        defer { close(readEnd) }
        let input = Pipe()
        let daemon = Process()
        daemon.executableURL = try #require(EarshotdRun.executable)
        daemon.arguments = ["--config", scratch.config.path, "--input", "-", "--input-speed", "max"]
        daemon.environment = DaemonEndToEndTests.environment(home: scratch.directory)
        daemon.standardInput = input
        daemon.standardOutput = FileHandle.nullDevice
        daemon.standardError = FileHandle(fileDescriptor: writeEnd, closeOnDealloc: false)
        try daemon.run()
        close(writeEnd)
        defer { if daemon.isRunning { kill(daemon.processIdentifier, SIGKILL) } }
        #expect(TestWait.until(seconds: 30) { FileManager.default.fileExists(atPath: scratch.socket) })
        let subscriber = try EventSubscriber(path: scratch.socket)
        let control = try UnmuteTests.Control(socket: scratch.socket)

        // The demo's 32 s, then nothing: the daemon says the input stalled 5 s later.
        #expect(try Self.demoUntilStall(input: input, subscriber: subscriber) == Self.demoUntilStallLines)
        let status = try control.ask(#"{"status":true}"#)
        #expect(status["type"] as? String == "status")
        #expect(status["capture"] as? String == "stalled")

        // Each mute and unmute is a log line (119 and 49 bytes): 120 of each pass the 16 KiB that may wait. A day's
        // mute ends at the same time tomorrow: its line's length does not depend on the time of day.
        var commandLines: [String] = []
        for _ in 0..<120 {
            for muted in [true, false] {
                let reply = try control.ask(muted ? #"{"cmd":"mute","group":"baby_cry","minutes":1440}"# : #"{"cmd":"unmute","group":"baby_cry"}"#)
                #expect(reply["type"] as? String == "mute")
                #expect(reply["muted"] as? Bool == muted)
                #expect(reply["changed"] as? Bool == true)
                commandLines.append(muted
                    ? "earshotd: \(try Self.dayMuteLine(reply))\n"
                    : "earshotd: baby_cry unmuted over the event socket\n")
            }
        }
        let after = try control.ask(#"{"status":true}"#)
        #expect(after["type"] as? String == "status")
        #expect(after["muted"] as? [String] == [])

        let audioLines = [
            "earshotd: health capture_live: capturing from -: S16_LE, 1 channel, 16000 Hz, period 3200 frames, buffer 3200 frames\n",
            "earshotd: baby_cry detected: \"Baby cry\" (confidence 1.00) at stream time 2.40 s\n",
            "earshotd: baby_cry ended: \"Baby cry\" from 2.40 s to 9.60 s (7.20 s, peak confidence 1.00, mean 0.99)\n",
            "earshotd: glass_break detected: \"Shatter\" (confidence 0.91) at stream time 24.00 s\n",
            "earshotd: glass_break ended: \"Shatter\" from 24.00 s to 24.96 s (0.96 s, peak confidence 0.91, mean 0.91)\n",
            "earshotd: health input_stalled: no audio from standard input for 5 s (has the program writing to it hung or paused?); waiting for it, and saying so when audio comes back\n",
        ]
        let (taken, dropped) = Self.taken(
            commandLines, waiting: audioLines.joined().utf8.count, limit: JournalSink.fallbackPendingLimitBytes)
        #expect(dropped == 52)
        let droppedLine = JournalSink.droppedLine(dropped, identifier: "earshotd")
        #expect(Self.drained(readEnd, until: droppedLine) == Self.filler + audioLines.joined() + taken.joined() + droppedLine)

        kill(daemon.processIdentifier, SIGTERM)
        #expect(Self.drained(readEnd, until: "earshotd: stopped (signal 15)\n") == "earshotd: stopped (signal 15)\n")
        daemon.waitUntilExit()
        #expect(daemon.terminationStatus == 0)
        try? input.fileHandleForWriting.close()
    }
}
