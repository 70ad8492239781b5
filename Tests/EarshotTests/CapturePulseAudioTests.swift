import Foundation
import Testing
import Earshot
import EarshotService

/// `earshotd` capturing from a real clocked device that vanishes mid-stream: a PulseAudio server of the test's own
/// (``PulseAudioServer``), its null sink's monitor captured through ALSA's `pulse` plugin, `samples/demo.flac`
/// played into the sink with `paplay`. The server is killed (SIGKILL) while the recording plays, stays away 8 s and
/// is started again on the same socket.
///
/// What the daemon must do, from its own event lines (standard output, `--foreground`), timed by their arrival:
/// `capture_unavailable` within 1 s of the kill, said once for the whole outage (the retries fail another way:
/// "Connection refused"); `capture_live` within 5 s of the server's return (8 s away outlasts the first retries,
/// 1 + 2 + 4 s, so this needs the back-off's 4 s cap); the outage reported as one gap (`overrun`, `lost_seconds`
/// between the server's absence and the daemon's); the same recording detected again after the return, at a
/// stream time that counts the gap; and a clean exit on SIGINT at the end.
@Suite("earshotd on a PulseAudio device that vanishes mid-stream", .serialized)
struct CapturePulseAudioTests {
    typealias Line = (object: [String: Any], arrival: Date)

    static func lines(_ daemon: DaemonProcess) -> [Line] {
        daemon.lines.compactMap { line in
            ((try? JSONSerialization.jsonObject(with: Data(line.line.utf8))) as? [String: Any]).map { ($0, line.arrival) }
        }
    }

    static func health(_ state: String, _ daemon: DaemonProcess) -> [Line] {
        lines(daemon).filter { $0.object["type"] as? String == "health" && $0.object["state"] as? String == state }
    }

    static func onsets(_ group: String, _ daemon: DaemonProcess) -> [Line] {
        lines(daemon).filter { $0.object["type"] as? String == "detection" && $0.object["group"] as? String == group }
    }

    static func ends(_ group: String, _ daemon: DaemonProcess) -> [Line] {
        lines(daemon).filter { $0.object["type"] as? String == "detection_end" && $0.object["group"] as? String == group }
    }

    @Test(.needsPulseAudio, .needsEarshotdBuilt, .timeLimit(.minutes(2)))
    func pulseAudioKilledMidStreamIsReportedRetriedAndCapturedAgain() throws {
        let server = try PulseAudioServer()
        defer { server.remove() }
        try server.start()

        // The daemon's HOME holds the .asoundrc that defines the PCM; its state (history) stays in the temp dir.
        let daemonSandbox = try server.daemonSandbox()
        let sandbox = daemonSandbox.directory, home = daemonSandbox.home
        try server.alsaPCM("earshot_pulse").write(
            to: home.appendingPathComponent(".asoundrc"), atomically: true, encoding: .utf8)
        let environment = daemonSandbox.environment
        let daemon = try DaemonProcess(
            ["--device", "earshot_pulse", "--socket", sandbox.appendingPathComponent("e.sock").path, "--foreground",
             "--no-journal", "--watch", "baby_cry,glass_break"],
            environment: environment)

        try #require(TestWait.until(seconds: 20) { !Self.health("capture_live", daemon).isEmpty },
                     "no capture_live: \(daemon.errorText)")
        let firstLive = Self.health("capture_live", daemon)[0].object
        #expect(firstLive["message"] as? String
                == "capturing from earshot_pulse: S16_LE, 1 channel, 16000 Hz, period 3200 frames, buffer 25600 frames")

        // demo.flac: a baby cry from 2.40 s (earshot detect on the file), then more cries, snores, the alarm clock,
        // glass and a knock until 31.9 s.
        let demo = TestPaths.packageRoot.appendingPathComponent("samples/demo.flac")
        let firstPlay = Date()
        try server.play(demo)
        try #require(TestWait.until(seconds: 15) { !Self.onsets("baby_cry", daemon).isEmpty },
                     "no baby_cry before the kill: \(daemon.errorText)")
        let firstOnset = try #require(Self.onsets("baby_cry", daemon).first?.object["stream_time"] as? Double)

        // `earshot listen` says why its windows pause (trial 11 #9).
        let listen = try DaemonProcess(["listen", "--socket", sandbox.appendingPathComponent("e.sock").path],
                                       environment: environment, program: EarshotCLI.executable)
        try #require(TestWait.until(seconds: 5) { listen.lines.contains { $0.line.hasSuffix("dBFS  gated") || $0.line.contains("dBFS  open") } },
                     "earshot listen printed no window: \(listen.errorText)")

        // Mid-stream: some 25 s of the recording are still to play.
        let killedAt = Date()
        server.kill()
        try #require(TestWait.until(seconds: 5) { !Self.health("capture_unavailable", daemon).isEmpty },
                     "no capture_unavailable: \(daemon.errorText)")
        let unavailable = Self.health("capture_unavailable", daemon)[0]
        let reportDelay = unavailable.arrival.timeIntervalSince(killedAt)
        #expect(reportDelay < 1.0, "capture_unavailable \(reportDelay) s after the kill")
        let message = unavailable.object["message"] as? String ?? ""
        #expect(message.hasPrefix("capture device \"earshot_pulse\" stopped: "), "\(message)")
        #expect(message.hasSuffix(
            "(the device was unplugged or failed; check it with `earshot devices`) (retrying in 1 s, then twice as long each time, up to every 4 s)"), "\(message)")
        // The cry open at the kill ends now, while the device is away (trial 6 #5), not when it returns.
        try #require(TestWait.until(seconds: 3) { !Self.ends("baby_cry", daemon).isEmpty },
                     "the open baby_cry did not end while capture was unavailable: \(daemon.errorText)")
        let outageEnds = Self.ends("baby_cry", daemon)
        #expect(outageEnds.count == 1)
        #expect(outageEnds.first?.object["reason"] as? String == "stream_gap")
        #expect(outageEnds.first?.object["start"] as? Double == firstOnset)

        // While the device is away, `earshot status` names the closed stream's format as the last one (trial 11 #5).
        let away = try #require(try EarshotCLI.run(
            ["status", "--socket", sandbox.appendingPathComponent("e.sock").path], in: sandbox))
        #expect(away.outputLines.first?.hasPrefix(
            "earshotd: capture unavailable from earshot_pulse (last format S16_LE, 1 channel, 16000 Hz, period 3200 frames, buffer 25600 frames), up ")
            == true, "\(away.outputLines)")

        Thread.sleep(until: killedAt.addingTimeInterval(8))
        try server.start()
        let returnedAt = Date()
        try #require(TestWait.until(seconds: 10) { Self.health("capture_live", daemon).count == 2 },
                     "no capture_live after the return: \(daemon.errorText)")
        let live = Self.health("capture_live", daemon)[1]
        let liveDelay = live.arrival.timeIntervalSince(returnedAt)
        #expect(liveDelay < 5, "capture_live \(liveDelay) s after PulseAudio returned")
        // The failed retries in between ("Connection refused") were journal lines, not more health events.
        #expect(Self.health("capture_unavailable", daemon).count == 1)
        #expect(daemon.errorText.contains(
            "earshotd: capture still unavailable: cannot open capture device \"earshot_pulse\": Connection refused"),
                "\(daemon.errorText)")

        // The outage is one gap in the stream, as long as the daemon was without audio.
        try #require(TestWait.until(seconds: 5) { !Self.health("overrun", daemon).isEmpty },
                     "no gap reported: \(daemon.errorText)")
        let gap = Self.health("overrun", daemon)[0].object
        let lost = try #require(gap["lost_seconds"] as? Double)
        let awaySeconds = returnedAt.timeIntervalSince(killedAt)
        let withoutAudio = live.arrival.timeIntervalSince(killedAt)
        #expect(lost >= awaySeconds - 0.5 && lost <= withoutAudio + 0.5,
                "lost \(lost) s; PulseAudio away \(awaySeconds) s, the daemon without audio \(withoutAudio) s")
        #expect(gap["gaps"] as? Int == 1)
        // The outage's gap is the outage's, not blamed on xruns or the analysis (trial 11 #5).
        let gapText = "1 gap, \(JSONValue.format(lost, decimals: 3)) s in all, while the capture device was unavailable; windows restart after the gap"
        #expect(gap["message"] as? String == "audio lost: " + gapText)
        #expect(gap["cause"] as? String == "capture_unavailable")
        // `earshot status` shows the gap and the seconds lost, which only its JSON had (its counts are copied once a
        // second: asked until they are).
        let statusLost = String(cFormat: "%.1f", Double(JSONValue.format(lost, decimals: 1)) ?? -1)
        var after = try #require(try EarshotCLI.run(
            ["status", "--socket", sandbox.appendingPathComponent("e.sock").path], in: sandbox))
        _ = TestWait.until(seconds: 5) {
            if let next = try? EarshotCLI.run(["status", "--socket", sandbox.appendingPathComponent("e.sock").path], in: sandbox) {
                after = next
            }
            return after.outputLines.count == 6
        }
        #expect(after.outputLines.last == "audio lost: \(statusLost) s in 1 gap (capture outages, stalls and xruns)",
                "\(after.outputLines)")
        #expect(after.outputLines.first?.hasPrefix(
            "earshotd: capture live from earshot_pulse (S16_LE, 1 channel, 16000 Hz, period 3200 frames, buffer 25600 frames), up ")
            == true, "\(after.outputLines)")
        // `earshot listen` said the outage, the return and the gap between its windows, in that order (trial 11 #9).
        let said = listen.lines.map(\.line).filter { $0.hasPrefix(" ") && !$0.hasPrefix("  ") }
        #expect(said == [
            " capture unavailable: \(message)",
            " capture live again: \(live.object["message"] as? String ?? "?")",
            " audio lost: " + gapText,
        ], "\(listen.lines.map(\.line))")

        // Detections continue: the same cry, at a stream time that counts the outage (stream time follows the
        // clock across the gap; each opening of the pulse PCM adds up to about 2 s of start-up latency).
        let secondPlay = Date()
        try server.play(demo)
        try #require(TestWait.until(seconds: 15) {
            Self.onsets("baby_cry", daemon).contains { ($0.arrival > secondPlay) }
        }, "no baby_cry after the return: \(daemon.errorText)")
        let secondOnset = try #require(
            Self.onsets("baby_cry", daemon).first { $0.arrival > secondPlay }?.object["stream_time"] as? Double)
        let playedApart = secondPlay.timeIntervalSince(firstPlay)
        #expect(secondOnset > firstOnset + lost, "onsets at \(firstOnset) s and \(secondOnset) s, gap \(lost) s")
        #expect(abs((secondOnset - firstOnset) - playedApart) < 4,
                "onsets \(secondOnset - firstOnset) s apart in stream time, played \(playedApart) s apart")

        print("PulseAudio outage: capture_unavailable \(JSONValue.format(reportDelay, decimals: 3)) s after the kill, "
              + "capture_live \(JSONValue.format(liveDelay, decimals: 3)) s after the return (away "
              + "\(JSONValue.format(awaySeconds, decimals: 3)) s), gap \(lost) s; baby_cry onsets at \(firstOnset) s and "
              + "\(secondOnset) s (played \(JSONValue.format(playedApart, decimals: 3)) s apart)")

        // Nothing crashed: the daemon is still capturing and stops cleanly.
        #expect(daemon.process.isRunning)
        daemon.signal(SIGINT)
        #expect(daemon.wait(seconds: 6) == 0, "\(daemon.errorText)")
        #expect(listen.wait(seconds: 5) == 0, "\(listen.errorText)")
    }

    /// earshotd itself stopped (SIGSTOP) for 12 s while its device delivers: said as the daemon not being scheduled,
    /// with a duration of at least the stop, not as the device stalling (trial 11 #3).
    @Test(.needsPulseAudio, .needsEarshotdBuilt, .timeLimit(.minutes(2)))
    func stoppedDaemonSaysItWasNotScheduled() throws {
        let server = try PulseAudioServer()
        defer { server.remove() }
        try server.start()
        let daemonSandbox = try server.daemonSandbox()
        let sandbox = daemonSandbox.directory, home = daemonSandbox.home
        try server.alsaPCM("earshot_pulse").write(
            to: home.appendingPathComponent(".asoundrc"), atomically: true, encoding: .utf8)
        let environment = daemonSandbox.environment
        let daemon = try DaemonProcess(
            ["--device", "earshot_pulse", "--socket", sandbox.appendingPathComponent("e.sock").path, "--foreground",
             "--no-journal", "--watch", "baby_cry"],
            environment: environment)
        try #require(TestWait.until(seconds: 20) { !Self.health("capture_live", daemon).isEmpty },
                     "no capture_live: \(daemon.errorText)")

        let stoppedAt = Date()
        daemon.signal(SIGSTOP)
        Thread.sleep(forTimeInterval: 12)
        daemon.signal(SIGCONT)
        let stopped = Date().timeIntervalSince(stoppedAt)
        try #require(TestWait.until(seconds: 10) {
            Self.health("overrun", daemon).contains { $0.object["cause"] as? String == "not_scheduled" }
        }, "no not_scheduled overrun: \(daemon.errorText)")
        let said = try #require(Self.health("overrun", daemon).first { $0.object["cause"] as? String == "not_scheduled" })
        let seconds = try #require(said.object["seconds"] as? Double)
        #expect(seconds >= 11, "not scheduled for \(seconds) s; stopped \(stopped) s")
        #expect(said.object["message"] as? String
                == "earshotd was not scheduled for \(Int(seconds.rounded())) s (CPU starvation or a stopped process); audio of that time may be lost")
        // The device delivered all along: no stall is blamed on it, then or once the capture thread has read again
        // (the stall check, overdue at SIGCONT, runs within its 0.5 s leeway; 3 s more see it through).
        Thread.sleep(forTimeInterval: 3)
        #expect(Self.health("input_stalled", daemon).isEmpty, "\(daemon.lines.map(\.line))")
        // A gap the freeze left (an xrun of the device's buffer), if any, is worded as the freeze's, or as an xrun
        // when the capture read it before the watch's tick: never as an outage.
        for gap in Self.health("overrun", daemon) where gap.object["cause"] as? String != "not_scheduled" {
            let text = gap.object["message"] as? String ?? ""
            #expect(text.hasSuffix("while earshotd was not scheduled (CPU starvation or a stopped process); windows restart after the gap")
                    || text.hasSuffix("(xrun or the analysis fell behind); windows restart after each gap"), "\(text)")
        }
        #expect(daemon.process.isRunning)
        daemon.signal(SIGINT)
        #expect(daemon.wait(seconds: 6) == 0, "\(daemon.errorText)")
    }
}
