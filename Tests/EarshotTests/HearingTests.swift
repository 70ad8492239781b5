import Foundation
import Testing
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// "What it hears now": the status reply's level, gate and top classes; `{"cmd":"listen"}` window lines;
/// `earshot status` and `earshot listen`.
@Suite("What it hears now: status fields, listen lines, earshot status and earshot listen")
struct HearingTests {
    @Test("the text of a window line and of a status reply, exactly")
    func textFormats() {
        let window = #"{"type":"window","start":12.48,"end":13.44,"level_dbfs":-23.4,"gate_open":true,"classes":[{"class":"Speech","confidence":0.9123},{"class":"Music","confidence":0.0512}],"time":"2026-12-02T20:15:03.120Z"}"#
        #expect(HearingTextFormat.window(line: window) == "   12.48 s   -23.4 dBFS  open   Speech 0.91, Music 0.05")
        let gated = #"{"type":"window","start":0.0,"end":0.96,"level_dbfs":-120.0,"gate_open":false,"classes":[],"time":"2026-12-02T20:15:03.120Z"}"#
        #expect(HearingTextFormat.window(line: gated) == "    0.00 s  -120.0 dBFS  gated")
        #expect(HearingTextFormat.window(line: #"{"type":"health","state":"capture_live"}"#) == nil)
        let status = #"{"type":"status","uptime":8.04,"capture":"live","source":"raw input","xruns":0,"windows":13,"gated_windows":5,"level_dbfs":-21.2,"gate_open":true,"classes":[{"class":"Speech","confidence":0.1712}],"gate_dbfs":-50.0,"watch":["baby_cry","loud"],"active":["loud"],"detections":2,"subscribers":1}"#
        #expect(HearingTextFormat.status(line: status) == """
            earshotd: capture live from raw input, up 8.0 s
            level: -21.2 dBFS, gate open (gate -50.0 dBFS)
            hears: Speech 0.17
            watching: baby_cry, loud; active: loud
            windows: 13 (5 gated), detections: 2, xruns: 0, clients: 1
            """)
        // The broker: connected, with the node (trial 14 D8: with several rooms, which daemon is which), or not.
        let connected = status.replacingOccurrences(
            of: #""subscribers":1}"#,
            with: #""subscribers":1,"mqtt":{"broker":"192.168.1.10:1883","node":"kitchen","connected":true,"waiting":0,"dropped":0,"published":42}}"#)
        #expect(HearingTextFormat.status(line: connected)?.split(separator: "\n").last == "mqtt: connected to 192.168.1.10:1883 as node kitchen (42 messages published)")
        let one = connected.replacingOccurrences(of: #""published":42"#, with: #""published":1"#)
        #expect(HearingTextFormat.status(line: one)?.split(separator: "\n").last == "mqtt: connected to 192.168.1.10:1883 as node kitchen (1 message published)")
        let disconnected = connected.replacingOccurrences(of: #""connected":true,"waiting":0"#, with: #""connected":false,"waiting":14"#)
        #expect(HearingTextFormat.status(line: disconnected)?.split(separator: "\n").last == "mqtt: disconnected from 192.168.1.10:1883 (14 messages waiting)")
        // A daemon before the node was in the reply: the line without it.
        let older = connected.replacingOccurrences(of: #""node":"kitchen","#, with: "")
        #expect(HearingTextFormat.status(line: older)?.split(separator: "\n").last == "mqtt: connected to 192.168.1.10:1883 (42 messages published)")
        let quiet = status.replacingOccurrences(of: #""gate_open":true"#, with: #""gate_open":false"#)
        #expect(HearingTextFormat.status(line: quiet)?.split(separator: "\n")[2] == "hears: nothing classified (the level is below the gate)")
        // Capture down: no audio arrives, so the last (or initial -120 dBFS) level says nothing about the room.
        let reason = #""capture_error":"cannot open capture device \"nonsense\": No such file or directory (no such device; list devices with `earshot devices` or `arecord -L`) (retrying in 2 s, then twice as long each time, up to every 4 s)","#
        let down = #"{"type":"status","uptime":8.04,"capture":"unavailable","#
            + reason + #""source":"","xruns":0,"windows":0,"gated_windows":0,"level_dbfs":null,"gate_open":null,"classes":[],"gate_dbfs":-50.0,"watch":["baby_cry"],"active":[],"detections":0,"subscribers":1}"#
        #expect(HearingTextFormat.status(line: down) == """
            earshotd: capture unavailable, up 8.0 s
            level: no audio (capture unavailable: cannot open capture device "nonsense": No such file or directory (no such device; list devices with `earshot devices` or `arecord -L`) (retrying in 2 s, then twice as long each time, up to every 4 s))
            hears: nothing (no audio arrives while capture is unavailable)
            watching: baby_cry
            windows: 0 (0 gated), detections: 0, xruns: 0, clients: 1
            """)
        // A muted group (trial 7 #4): not under "watching", on a line of its own, also when it is heard now.
        let muted = status.replacingOccurrences(of: #""watch":["baby_cry","loud"],"active":["loud"]"#,
                                                with: #""watch":["smoke_alarm","baby_cry","loud"],"active":["smoke_alarm","loud"],"muted":["smoke_alarm"]"#)
        #expect(HearingTextFormat.status(line: muted) == """
            earshotd: capture live from raw input, up 8.0 s
            level: -21.2 dBFS, gate open (gate -50.0 dBFS)
            hears: Speech 0.17
            watching: baby_cry, loud; active: loud
            muted: smoke_alarm (no events until unmuted or the daemon restarts); active: smoke_alarm (not reported)
            windows: 13 (5 gated), detections: 2, xruns: 0, clients: 1
            """)
        let allMuted = status.replacingOccurrences(of: #""active":["loud"]"#, with: #""active":[],"muted":["baby_cry","loud"]"#)
        #expect(HearingTextFormat.status(line: allMuted)?.split(separator: "\n")[3...4].map(String.init) == [
            "watching: nothing (every group is muted)",
            "muted: baby_cry, loud (no events until unmuted or the daemon restarts)",
        ])
        let opening = down.replacingOccurrences(of: #""capture":"unavailable""#, with: #""capture":"opening""#)
            .replacingOccurrences(of: reason, with: "")
        #expect(HearingTextFormat.status(line: opening)?.split(separator: "\n").dropFirst().prefix(2).map(String.init) == [
            "level: no audio (capture opening)", "hears: nothing (no audio arrives while capture is opening)",
        ])
    }

    @Test("earshot status on a daemon whose capture device cannot be opened: no audio, and why, not a quiet room",
          .needsEarshotdBuilt, .needsEarshotBuilt)
    func captureUnavailable() throws {
        let scratch = try DaemonScratch([])
        defer { scratch.remove() }
        let daemon = try DaemonProcess(["--config", scratch.config.path, "--device", "earshot_no_such_pcm"])
        var status: [String: Any] = [:]
        let down = TestWait.until(seconds: 30) {
            status = (try? MQTTBrokerTests.status(socket: scratch.socket, timeout: 5)) ?? [:]
            return status["capture"] as? String == "unavailable"
        }
        #expect(down, "\(status) \(daemon.errorText)")
        let reason = try #require(status["capture_error"] as? String)
        // Said once per outage, so it names the back-off, not only the next retry (trial 6 #10).
        let expected = "cannot open capture device \"earshot_no_such_pcm\": No such file or directory (no such device; "
            + "list devices with `earshot devices` or `arecord -L`) (retrying in 1 s, then twice as long each time, up to every 4 s)"
        #expect(reason == expected)
        let text = try #require(try EarshotCLI.run(["status", "--socket", scratch.socket], in: scratch.directory, timeout: 30))
        #expect(text.status == 0, "\(text.standardError)")
        #expect(text.outputLines.first?.hasPrefix("earshotd: capture unavailable, up ") == true, "\(text.outputLines)")
        #expect(text.outputLines.dropFirst().first == "level: no audio (capture unavailable: \(expected))", "\(text.outputLines)")
        #expect(text.outputLines.dropFirst(2).first == "hears: nothing (no audio arrives while capture is unavailable)")
        daemon.process.terminate()
        #expect(daemon.wait(seconds: 10) == 0, "\(daemon.errorText)")
    }

    @Test("a running daemon: listen lines per window with exact times and levels; the status reply shows the last window; earshot status and listen print them",
          .needsEarshotdBuilt, .needsEarshotBuilt)
    func liveDaemon() throws {
        let scratch = try DaemonScratch([])
        defer { scratch.remove() }
        let daemon = try DaemonProcess(["--config", scratch.config.path, "--input", "-"], standardInput: true)
        var connected: EventSubscriber?
        #expect(TestWait.until(seconds: 30) { connected = try? EventSubscriber(path: scratch.socket); return connected != nil }, "\(daemon.errorText)")
        let listener = try #require(connected)
        try listener.send(line: #"{"cmd":"listen"}"#)
        #expect(try listener.nextReply(timeoutSeconds: 10) == #"{"type":"listening"}"#)
        // 3 s of digital silence, then 3 s of a 1 kHz sine at amplitude 0.1: RMS 0.0707, -23.0 dBFS.
        daemon.input.fileHandleForWriting.write(SyntheticAudio.pcm(
            SyntheticAudio.silence(seconds: 3) + SyntheticAudio.sine(seconds: 3, amplitude: 0.1)))
        var windows: [[String: Any]] = []
        while windows.count < 11 {
            guard case .line(let line) = try listener.readLine(timeoutSeconds: 30) else { break }
            guard let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any],
                  object["type"] as? String == "window" else { continue }
            windows.append(object)
        }
        // Windows of 0.96 s every 0.48 s: 0, 0.48, ... 4.80.
        let starts: [Double] = windows.map { $0["start"] as? Double ?? -1 }
        let grid: [Double] = (0..<11).map { (Double($0) * 0.48 * 1000).rounded() / 1000 }
        #expect(starts == grid)
        #expect(windows.map { $0["level_dbfs"] as? Double }[0..<5] == [-120, -120, -120, -120, -120])
        #expect(windows.map { $0["gate_open"] as? Bool }[0..<5] == [false, false, false, false, false])
        #expect(windows.prefix(5).allSatisfy { ($0["classes"] as? [Any])?.isEmpty == true })
        // 3.36 s on every window holds the sine alone.
        for window in windows.suffix(4) {
            #expect(window["level_dbfs"] as? Double == -23.0, "\(window)")
            #expect(window["gate_open"] as? Bool == true)
            let classes = window["classes"] as? [[String: Any]] ?? []
            #expect(classes.count == 5)
            let scores = classes.compactMap { $0["confidence"] as? Double }
            #expect(scores == scores.sorted(by: >), "\(classes)")
        }
        // The status reply shows the latest window (4.80-5.76 s: the resampler holds back the last samples until
        // more audio comes) once the daemon's 1 s status copy has caught up.
        var status: [String: Any] = [:]
        let caughtUp = TestWait.until(seconds: 20) {
            status = (try? MQTTBrokerTests.status(socket: scratch.socket, timeout: 5)) ?? [:]
            return status["stream_time"] as? Double == 5.76
        }
        #expect(caughtUp, "\(status)")
        #expect(status["level_dbfs"] as? Double == -23.0)
        #expect(status["gate_open"] as? Bool == true)
        let lastWindow = try #require(windows.last)
        let statusClasses = (status["classes"] as? [[String: Any]] ?? []).map { "\($0["class"] ?? "")=\($0["confidence"] ?? "")" }
        let windowClasses = (lastWindow["classes"] as? [[String: Any]] ?? []).map { "\($0["class"] ?? "")=\($0["confidence"] ?? "")" }
        #expect(statusClasses.count == 5)
        #expect(statusClasses == windowClasses)
        // earshot status: the same, as text.
        let text = try #require(try EarshotCLI.run(["status", "--socket", scratch.socket], in: scratch.directory, timeout: 30))
        #expect(text.status == 0, "\(text.standardError)")
        #expect(text.outputLines.count == 5)
        #expect(text.outputLines.dropFirst().first == "level: -23.0 dBFS, gate open (gate -50.0 dBFS)")
        #expect(text.outputLines.dropFirst(3).first == "watching: smoke_alarm, fire_alarm, co_alarm, baby_cry, glass_break")
        // earshot listen, until the daemon stops: 2 s more of silence after the sine (its first window is 5.28 s, the
        // one the resampler's held-back samples kept waiting).
        let listen = Process()
        listen.executableURL = try #require(EarshotCLI.executable)
        listen.arguments = ["listen", "--socket", scratch.socket]
        let output = Pipe()
        listen.standardOutput = output
        listen.standardError = output
        try listen.run()
        // Connected (with the listener above and the status client itself: 3), then a moment for its request.
        let cliConnected = TestWait.until(seconds: 10) {
            let reply = (try? MQTTBrokerTests.status(socket: scratch.socket, timeout: 5)) ?? [:]
            return (reply["subscribers"] as? Int ?? 0) >= 3
        }
        #expect(cliConnected)
        Thread.sleep(forTimeInterval: 1)
        daemon.input.fileHandleForWriting.write(SyntheticAudio.pcm(SyntheticAudio.silence(seconds: 2)))
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 60) == 0, "\(daemon.errorText)")
        listen.waitUntilExit()
        #expect(listen.terminationStatus == 0)
        let lines = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).split(separator: "\n").map(String.init)
        #expect(lines.contains("    6.24 s  -120.0 dBFS  gated"), "\(lines)")
        // 5.28-6.24 s: three quarters sine, -23.0 + 10 log10(0.75) = -24.3 dBFS.
        #expect(lines.first?.hasPrefix("    5.28 s   -24.3 dBFS  open   ") == true, "\(lines)")
    }

    @Test("{\"cmd\":\"listen\"} parses; unknown commands name it among the supported ones")
    func listenRequest() {
        #expect(EventRequest.parse(Array(#"{"cmd":"listen"}"#.utf8)) == .request(.listen))
        #expect(EventRequest.parse(Array(#"{"cmd":"reboot"}"#.utf8), commands: ["sleep_start"])
            == .failure(#"unknown command "reboot" (supported: "status", "listen", "sleep_start")"#))
    }

    @Test("earshot listen's lines for the capture's health changes, and the status reply's lost audio, exactly (trial 11 #5, #9)")
    func captureHealthLines() {
        #expect(HearingTextFormat.captureHealth(line: #"{"type":"health","state":"capture_unavailable","message":"capture device \"pulse\" stopped: Input/output error","time":"2026-12-07T04:32:26.000Z"}"#)
                == #" capture unavailable: capture device "pulse" stopped: Input/output error"#)
        #expect(HearingTextFormat.captureHealth(line: #"{"type":"health","state":"capture_live","message":"capturing from pulse: S16_LE","source":"pulse"}"#)
                == " capture live again: capturing from pulse: S16_LE")
        #expect(HearingTextFormat.captureHealth(line: #"{"type":"health","state":"overrun","message":"audio lost: 1 gap, 23.021 s in all, while the capture device was unavailable; windows restart after the gap"}"#)
                == " audio lost: 1 gap, 23.021 s in all, while the capture device was unavailable; windows restart after the gap")
        #expect(HearingTextFormat.captureHealth(line: #"{"type":"health","state":"input_stalled","message":"no audio"}"#) == " input stalled: no audio")
        // Other health lines and events are `earshot subscribe`'s.
        #expect(HearingTextFormat.captureHealth(line: #"{"type":"health","state":"mqtt_connected","message":"connected"}"#) == nil)
        #expect(HearingTextFormat.captureHealth(line: #"{"type":"detection","group":"baby_cry"}"#) == nil)

        let status = #"{"type":"status","uptime":39.2,"capture":"unavailable","source":"pulse (S16_LE, 1 channel, 16000 Hz, period 3200 frames, buffer 25600 frames)","capture_error":"gone","xruns":0,"gaps":15,"lost_seconds":412.46,"windows":10,"gated_windows":2,"detections":1,"subscribers":2,"watch":["smoke_alarm"],"active":[],"muted":[]}"#
        #expect(HearingTextFormat.status(line: status) == """
            earshotd: capture unavailable from pulse (last format S16_LE, 1 channel, 16000 Hz, period 3200 frames, buffer 25600 frames), up 39.2 s
            level: no audio (capture unavailable: gone)
            hears: nothing (no audio arrives while capture is unavailable)
            watching: smoke_alarm
            windows: 10 (2 gated), detections: 1, xruns: 0, clients: 2
            audio lost: 412.5 s in 15 gaps (capture outages, stalls and xruns)
            """)
    }
}
