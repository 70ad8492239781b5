import Foundation
import Testing
import Glibc

/// A writer on `earshotd --input -` that stops sending: one `input_stalled` health event after 5 s without audio,
/// the status says `stalled`, and audio coming back is one `capture_live`. The writer is a real child process
/// (`sh` running `cat`, `sleep`, `cat`) whose stdout is the daemon's stdin.
@Suite("Capture: a stalled standard input")
struct InputStallTests {
    static let stallMessage = "no audio from standard input for 5 s (has the program writing to it hung or paused?); waiting for it, and saying so when audio comes back"

    static func health(_ daemon: DaemonProcess) -> [(object: [String: Any], arrival: Date)] {
        daemon.lines.compactMap { entry in
            guard let object = (try? JSONSerialization.jsonObject(with: Data(entry.line.utf8))) as? [String: Any],
                  object["type"] as? String == "health" else { return nil }
            return (object, entry.arrival)
        }
    }

    @Test("3 s of audio, 10 s of nothing, 2 s of audio: input_stalled 5 s after the last audio, said once; status shows it; audio again is capture_live",
          .needsEarshotdBuilt, .needsEarshotBuilt)
    func stalledWriter() throws {
        let scratch = try DaemonScratch([])
        defer { scratch.remove() }
        let first = scratch.directory.appendingPathComponent("first.raw")
        let second = scratch.directory.appendingPathComponent("second.raw")
        try SyntheticAudio.pcm(SyntheticAudio.sine(seconds: 3, amplitude: 0.1)).write(to: first)
        try SyntheticAudio.pcm(SyntheticAudio.sine(seconds: 2, amplitude: 0.1)).write(to: second)
        let daemon = try DaemonProcess(["--config", scratch.config.path, "--foreground", "--input", "-"], standardInput: true)
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: "/bin/sh")
        writer.arguments = ["-c", #"cat "$1"; sleep 10; cat "$2""#, "sh", first.path, second.path]
        writer.standardOutput = daemon.input.fileHandleForWriting
        try writer.run()
        // The child is the only writer now: its end is the end of the input.
        try daemon.input.fileHandleForWriting.close()

        #expect(TestWait.until(seconds: 30) { Self.health(daemon).contains { $0.object["state"] as? String == "input_stalled" } },
                "\(daemon.errorText)")
        // During the stall: the status reply and earshot status say so, not the last level.
        let status = try #require(try MQTTBrokerTests.status(socket: scratch.socket, timeout: 5))
        #expect(status["capture"] as? String == "stalled")
        #expect(status["capture_error"] as? String == Self.stallMessage)
        let text = try #require(try EarshotCLI.run(["status", "--socket", scratch.socket], in: scratch.directory, timeout: 30))
        #expect(text.outputLines.first?.hasPrefix("earshotd: capture stalled from -") == true, "\(text.outputLines)")
        #expect(text.outputLines.dropFirst().first == "level: no audio (capture stalled: \(Self.stallMessage))")

        writer.waitUntilExit()
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
        let events = Self.health(daemon)
        #expect(events.map { $0.object["state"] as? String ?? "?" } == ["capture_live", "input_stalled", "capture_live"],
                "\(events.map(\.object))")
        guard events.count == 3 else { return }
        #expect(events[0].object["message"] as? String
                == "capturing from -: S16_LE, 1 channel, 16000 Hz, period 3200 frames, buffer 3200 frames")
        #expect(events[1].object["message"] as? String == Self.stallMessage)
        #expect(events[1].object["source"] as? String == "-")
        // Audio flows for 3 s (paced in real time), then 5 s without any: the stall is said 8-8.5 s after the start
        // (checked every 0.5 s), plus scheduling slack.
        let stalledAfter = events[1].arrival.timeIntervalSince(events[0].arrival)
        #expect(stalledAfter >= 7.9 && stalledAfter <= 9.3, "\(stalledAfter)")
        // `cat` wrote the first file into the 64 KB pipe by about 1 s, then slept 10 s: audio again at about 11 s,
        // 8 s after the last audio.
        let recovery = try #require(events[2].object["message"] as? String)
        let seconds = recovery.split(separator: " ").compactMap { Int($0) }.first ?? -1
        #expect(recovery == "audio from standard input again after about \(seconds) s without any")
        #expect((7...9).contains(seconds), "\(recovery)")
        #expect(events[2].object["source"] as? String == "-")
    }

    static let waitingMessage = "nothing from standard input yet (is the program writing to it running?)"

    /// Trial 9 #6: standard input opens at once, whether or not its writer writes. Until the first audio the daemon
    /// is `waiting`, not live: no `capture_live` (so no "Listening" on the phone), and `earshot status` says why
    /// instead of a level of -120 dBFS.
    @Test("a writer that waits 4 s before its first audio: status 'waiting' with the reason, no capture_live until the audio comes, then one",
          .needsEarshotdBuilt, .needsEarshotBuilt)
    func writerNotWritingYet() throws {
        let scratch = try DaemonScratch([])
        defer { scratch.remove() }
        let audio = scratch.directory.appendingPathComponent("audio.raw")
        try SyntheticAudio.pcm(SyntheticAudio.sine(seconds: 2, amplitude: 0.1)).write(to: audio)
        let daemon = try DaemonProcess(["--config", scratch.config.path, "--foreground", "--input", "-"], standardInput: true)
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: "/bin/sh")
        writer.arguments = ["-c", #"sleep 4; cat "$1""#, "sh", audio.path]
        writer.standardOutput = daemon.input.fileHandleForWriting
        try writer.run()
        try daemon.input.fileHandleForWriting.close()

        // Before the first audio: the socket answers, the capture is waiting, and no health event went out.
        #expect(TestWait.until(seconds: 3) { FileManager.default.fileExists(atPath: scratch.socket) }, "\(daemon.errorText)")
        // The capture opens just after the daemon starts answering (`opening` until then).
        var status: [String: Any] = [:]
        #expect(TestWait.until(seconds: 3) {
            status = (try? MQTTBrokerTests.status(socket: scratch.socket, timeout: 5)) ?? [:]
            return status["capture"] as? String != nil && status["capture"] as? String != "opening"
        }, "\(status)")
        #expect(writer.isRunning, "the writer wrote before the status was read; the test proves nothing")
        #expect(status["capture"] as? String == "waiting")
        #expect(status["capture_error"] as? String == Self.waitingMessage)
        let text = try #require(try EarshotCLI.run(["status", "--socket", scratch.socket], in: scratch.directory, timeout: 30))
        #expect(text.outputLines.first?.hasPrefix("earshotd: capture waiting from -") == true, "\(text.outputLines)")
        #expect(text.outputLines.dropFirst().first == "level: no audio (capture waiting: \(Self.waitingMessage))")
        #expect(Self.health(daemon).isEmpty, "\(Self.health(daemon).map(\.object))")

        writer.waitUntilExit()
        #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
        let events = Self.health(daemon)
        #expect(events.map { $0.object["state"] as? String ?? "?" } == ["capture_live"], "\(events.map(\.object))")
        #expect(events.first?.object["message"] as? String
                == "capturing from -: S16_LE, 1 channel, 16000 Hz, period 3200 frames, buffer 3200 frames")
    }
}
