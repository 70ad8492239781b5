import Foundation
import Testing
import Synchronization

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// Trial 9's edges of sleep sessions: a report directory that takes no files, a session started while snoring goes
/// on, the schedule's closing minute and a session started by hand, a daemon restart during a session, and the
/// `[sleep]`/`[history]` paths and schedule refused with their reason.
@Suite("Sleep: unwritable reports, sessions started mid-event, the schedule's end, restarts (trial 9)", .serialized)
struct SleepEdgeTests {
    // MARK: #3 a session started while snoring goes on

    @Test("a session that starts while a snoring event is open counts only the snores it heard: 5 of 10, loudest -31.0 dBFS at 12.0 s, not the -20.0 dBFS snore before it")
    func snoresFromSessionStart() throws {
        // Ten one-window snores every 2.88 s from 4.8 s (evidence 0.9, a snore each): the first five at -20 ... -24
        // dBFS, the last five at -35 ... -31 dBFS; quiet windows at -70 dBFS. The session's first window starts at
        // 18.72 s, just before the sixth snore (19.2 s).
        var detector = try SnoreDetector(classLabels: ["Snoring"])
        let queue = DispatchQueue(label: "test.analysis")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-sleep-edge-\(getpid())")
        defer { try? FileManager.default.removeItem(at: directory) }
        var settings = DaemonConfiguration.Sleep()
        settings.reportDirectory = directory.path
        let published = Mutex<[JSONObject]>([])
        let service = SleepService(
            analysisQueue: queue, settings: settings, timeZone: try #require(TimeZone(identifier: "UTC")),
            publishReport: { object in published.withLock { $0.append(object) } }, log: { _, _ in })
        let cut = Mutex<Double?>(nil)
        queue.sync { service.sessionAudioStarts = { time in cut.withLock { $0 = time } } }
        var snoreWindows: [Int: Float] = [:]
        for index in 0..<10 {
            let level: Int = index < 5 ? -20 - index : -40 + index
            snoreWindows[6 * index + 10] = Float(level)
        }
        var offsets: [SnoreEvent] = []
        queue.sync {
            for k in 0...100 {
                let start = Double(k) * 0.48
                if k == 39 { service.start(at: Date(timeIntervalSince1970: 1_772_402_400), scheduled: false) }
                let level = snoreWindows[k] ?? -70
                service.observe(window: ClassificationResult(
                    timeRange: TimeRange(start: start, duration: 0.96), classifications: [], scores: [],
                    levelDBFS: level, isGated: false))
                // What the pipeline does with the service's hook: the stage's detector counts from there.
                if let time = cut.withLock({ $0 }), detector.summaryStart == nil { detector.countSnores(from: time) }
                for decision in detector.process(
                    windowStart: start, windowDuration: 0.96, levelDBFS: level, evidence: snoreWindows[k] == nil ? 0 : 0.9) {
                    if case .offset(_, let event) = decision { offsets.append(event) }
                    // Live audio: the latest window (k * 0.48 + 0.96 s) ends now; stream 18.72 s is 22:00:00.
                    let now = Date(timeIntervalSince1970: 1_772_402_400 + start + 0.96 - 18.72)
                    service.observe(decision, published: true, now: now)
                }
            }
            service.stop(at: Date(timeIntervalSince1970: 1_772_402_430))
        }
        service.flushReports()
        #expect(cut.withLock { $0 } == 18.72)
        // The detector's event: 4.8-31.68 s, its summary from 18.72 s on.
        let event = try #require(offsets.first)
        #expect(offsets.count == 1)
        #expect(event.start == 4.8)
        #expect(abs(event.end - 31.68) < 1e-9)
        #expect(event.snores == 5)
        #expect(event.peakLevelDBFS == -31)
        #expect(abs(event.peakLevelTime - 30.72) < 1e-9)
        #expect(abs(event.levelDBFS - -32.772332) < 1e-4)
        let report = try #require(published.withLock { $0 }.first)
        #expect(report["snores"] == 5)
        #expect(report["events"] == 1)
        #expect(report["loudest"]?.encoded == #"[{"time":12.0,"clock":"2026-03-01T22:00:12.000Z","level_dbfs":-31.0}]"#)
        #expect(report["episodes"]?.encoded == #"[{"start":0.0,"end":12.96,"start_time":"2026-03-01T22:00:00.000Z","end_time":"2026-03-01T22:00:12.960Z","minutes":0.22,"events":1,"snores":5,"level_dbfs":-32.8,"peak_level_dbfs":-31.0}]"#)
    }

    @Test("without a session start the detector's summary counts the whole event: 10 snores, peak -20 dBFS at 4.8 s")
    func wholeEventWithoutCut() throws {
        var detector = try SnoreDetector(classLabels: ["Snoring"])
        var offsets: [SnoreEvent] = []
        for k in 0...100 {
            let snore = k >= 10 && (k - 10) % 6 == 0 && k <= 64
            let index = (k - 10) / 6
            let snoreLevel: Int = index < 5 ? -20 - index : -40 + index
            let level: Float = snore ? Float(snoreLevel) : -70
            for decision in detector.process(windowStart: Double(k) * 0.48, windowDuration: 0.96, levelDBFS: level, evidence: snore ? 0.9 : 0) {
                if case .offset(_, let event) = decision { offsets.append(event) }
            }
        }
        #expect(offsets.map(\.snores) == [10])
        #expect(offsets.map(\.peakLevelDBFS) == [-20])
        #expect(offsets.map(\.peakLevelTime) == [4.8])
    }

    // MARK: #5 the schedule's closing minute

    @Test("the schedule's closing minute stops a session started by hand before the window opened (18:58-19:00: stopped at 19:00:00)")
    func scheduleStopsManualSession() throws {
        let base = Mutex((fake: try SleepScheduleTests.date("2026-12-06T13:27:58.500Z"), real: Date()))
        let clock: @Sendable () -> Date = { base.withLock { $0.fake.addingTimeInterval(Date().timeIntervalSince($0.real)) } }
        let lines = Mutex<[String]>([])
        let queue = DispatchQueue(label: "test.analysis")
        let service = try SleepScheduleTests.service(
            "18:58-19:00", zone: "Asia/Kolkata", queue: queue, clock: clock, log: { line, _ in lines.withLock { $0.append(line) } })
        // 18:57:58.5 local: started by hand, before the window.
        let started = service.handle(command: "sleep_start")
        #expect(started["state"]?.stringValue == "started")
        let start = started["start"]?.stringValue ?? "?"
        service.startSchedule()
        // The window opens at 18:58 with the session running: it goes on (no second session, no stop).
        Thread.sleep(forTimeInterval: 2)
        let running = service.handle(command: "sleep_status")
        #expect(running["state"]?.stringValue == "running")
        #expect(running["start"]?.stringValue == start)
        // The clock is stepped to 18:59:58.5; the reload with the same schedule keeps what it knew of the window.
        base.withLock { $0 = (try! SleepScheduleTests.date("2026-12-06T13:29:58.500Z"), Date()) }
        let settings = try SleepScheduleTests.settings("18:58-19:00")
        queue.sync { service.reconfigure(settings) }
        Thread.sleep(forTimeInterval: 2)
        #expect(service.handle(command: "sleep_status")["state"]?.stringValue == "idle")
        let logged = lines.withLock { $0 }
        #expect(logged.contains("sleep session stopped by the schedule 18:58-19:00 (it was started by hand)"), "\(logged)")
        let stopped = logged.first { $0.hasPrefix("sleep session from ") } ?? "?"
        #expect(stopped.hasPrefix("sleep session from \(start) to 2026-12-06T13:30:00.0"), "\(logged)")
        #expect(!logged.contains { $0.hasPrefix("sleep session started by the schedule") }, "\(logged)")
    }

    // MARK: Daemons

    /// A running `earshotd --foreground` on a WAV of quiet noise, with its stdout and stderr collected.
    final class Daemon {
        let process = Process()
        let out = Pipe(), err = Pipe()
        var collected = ""

        init(config: String, input: String, socket: String, home: URL) throws {
            process.executableURL = DaemonEndToEndTests.buildDirectory.appendingPathComponent("earshotd")
            process.arguments = ["--config", config, "--input", input, "--socket", socket, "--foreground", "--input-speed", "4"]
            process.environment = DaemonEndToEndTests.environment(home: home)
            process.standardOutput = out
            process.standardError = err
            process.standardInput = FileHandle.nullDevice
            try process.run()
        }

        /// Waits for `text` on stdout (60 s at most).
        func waitFor(_ text: String) -> Bool {
            DaemonEndToEndTests.waitForLine(text, in: out.fileHandleForReading, seconds: 60, collected: &collected)
        }

        /// Sends `signal`, waits for the exit; the status and the rest of stdout and stderr.
        func stop(_ signal: Int32 = SIGTERM) -> (status: Int32, out: String, err: String) {
            if process.isRunning { kill(process.processIdentifier, signal) }
            process.waitUntilExit()
            collected += String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            return (process.terminationStatus, collected,
                    String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))
        }

        deinit { if process.isRunning { process.terminate() } }
    }

    /// 120 s of quiet noise (-50 dBFS) as a 16 kHz WAV.
    static func quietWAV(at url: URL) throws {
        var raw = Data()
        var state: UInt32 = 12345
        for _ in 0..<(16_000 * 120) {
            state = state &* 1_664_525 &+ 1_013_904_223
            let sample = Int16(Int32(state >> 16) % 200 - 100)
            withUnsafeBytes(of: sample.littleEndian) { raw.append(contentsOf: $0) }
        }
        try SleepDaemonTests.pcm16WAV(raw, sampleRate: 16_000).write(to: url)
    }

    /// `earshot sleep ARGUMENTS --socket SOCKET`.
    /// For a daemon watching snoring alone, without history, in `sandbox`: the report directory `sleep/` (made),
    /// a quiet recording to feed it and its configuration file.
    static func snoringDaemonFiles(in sandbox: DaemonEndToEndTests.Sandbox) throws -> (reports: String, config: String, wav: URL) {
        let reports = sandbox.directory.appendingPathComponent("sleep").path
        try FileManager.default.createDirectory(atPath: reports, withIntermediateDirectories: false)
        let wav = sandbox.directory.appendingPathComponent("quiet.wav")
        try quietWAV(at: wav)
        let config = sandbox.directory.appendingPathComponent("earshotd.conf").path
        try "[detection]\nwatch = snoring\n[history]\nenabled = false\n[sleep]\nreport_dir = \(reports)\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        return (reports, config, wav)
    }

    /// `chattr FLAG DIRECTORY` (`+i`: the directory takes no new files, even from root; `-i` undoes it).
    static func chattr(_ flag: String, _ directory: String) throws {
        let outcome = try EarshotCLI.runProcess(URL(fileURLWithPath: "/usr/bin/chattr"), [flag, directory], timeout: 10)
        try #require(outcome.status == 0, "chattr \(flag) failed: \(outcome.standardError)")
    }

    static func sleep(_ arguments: [String], socket: String) throws -> EarshotCLI.Outcome {
        try #require(try EarshotCLI.run(["sleep"] + arguments + ["--socket", socket], in: FileManager.default.temporaryDirectory, timeout: 30))
    }

    /// Waits until the running session has monitored audio (its status says at least 0.1 min).
    static func waitForSessionAudio(socket: String) throws {
        for _ in 0..<100 {
            let line = try sleep(["status", "--json"], socket: socket).outputLines.first ?? ""
            if !line.contains(#""minutes":0.0,"#), line.contains(#""state":"running""#) { return }
            Thread.sleep(forTimeInterval: 0.2)
        }
        Issue.record("the session heard no audio within 20 s")
    }

    /// The time in a line `sleep session started at TIME` or `sleep session running since TIME (...)`.
    static func time(in line: String) -> String {
        String(line.split(separator: " ").first { $0.hasPrefix("20") && $0.hasSuffix("Z") || $0.hasSuffix("Z:") } ?? "?")
    }

    @Test("[sleep] report_dir that takes no files (chattr +i): --check-config and the start say so; sleep stop exits 73 with the file, why and the fix, --json carries error and the report; one health event each",
          .needsEarshotBuilt, .needsEarshotdBuilt,
          .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/chattr"), "needs root and chattr to make a directory immutable (root writes through file modes)"))
    func reportNotWritable() throws {
        let sandbox = try DaemonEndToEndTests.Sandbox()
        defer { sandbox.remove() }
        let reports = sandbox.directory.appendingPathComponent("sleep").path
        try FileManager.default.createDirectory(atPath: reports, withIntermediateDirectories: false)
        let wav = sandbox.directory.appendingPathComponent("quiet.wav")
        try Self.quietWAV(at: wav)
        let config = sandbox.directory.appendingPathComponent("earshotd.conf").path
        try "[detection]\nwatch = snoring\n[history]\nenabled = false\n[sleep]\nreport_dir = \(reports)\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        try Self.chattr("+i", reports)
        defer { try? Self.chattr("-i", reports) }

        let check = try #require(try EarshotdRun.run(["--config", config, "--check-config"]))
        #expect(check.status == 0)
        #expect(check.error.split(separator: "\n").map(String.init) == [
            "earshotd: warning: \(config):6: [sleep] report_dir = \(reports): cannot create files in \(reports): Operation not permitted, so no sleep report would be written (make it writable by earshotd's user, or set [sleep] report_dir)",
        ])

        let daemon = try Daemon(config: config, input: wav.path, socket: sandbox.socket, home: sandbox.home)
        #expect(daemon.waitFor(#""state":"capture_live""#))
        #expect(daemon.collected.hasPrefix(#"{"type":"health","state":"sleep_report_unavailable","message":"sleep reports cannot be written: cannot create files in "# + reports + #": Operation not permitted (make [sleep] report_dir writable by earshotd's user, or set it to a writable directory); sessions still run, and each report is tried when its session stops","time":""#), "\(daemon.collected)")

        #expect(try Self.sleep(["start"], socket: sandbox.socket).status == 0)
        try Self.waitForSessionAudio(socket: sandbox.socket)
        let stopped = try Self.sleep(["stop"], socket: sandbox.socket)
        #expect(stopped.status == 73)
        #expect(stopped.outputLines.count == 1)
        let summary = try #require(stopped.outputLines.first)
        let times = summary.split(separator: " ").map(String.init)
        #expect(times.count > 5 && summary.hasSuffix(" 0.0 min snoring (0.0 %), 0 episodes"), "\(summary)")
        let (start, end) = (times[2], String(times[4].dropLast()))
        #expect(summary == "sleep session \(start) to \(end): 0.0 min snoring (0.0 %), 0 episodes")
        let file = #/snore-\d{8}-\d{4}\.json/#
        let error = try #require(stopped.errorLines.first)
        #expect(stopped.errorLines.count == 1)
        let name = try #require(try file.firstMatch(in: error)).output
        #expect(error == "earshot: the sleep report was not written: cannot write the sleep report \(reports)/\(name): Operation not permitted (check free space and that [sleep] report_dir is writable)")

        // --json: the error and the report itself, no file names; the same exit status.
        #expect(try Self.sleep(["start"], socket: sandbox.socket).status == 0)
        try Self.waitForSessionAudio(socket: sandbox.socket)
        let json = try Self.sleep(["stop", "--json"], socket: sandbox.socket)
        #expect(json.status == 73)
        let reply = try #require(try JSONSerialization.jsonObject(with: Data(json.standardOutput.utf8)) as? [String: Any])
        #expect(reply["report_json"] == nil && reply["report_svg"] == nil)
        #expect((reply["error"] as? String)?.hasSuffix(": Operation not permitted (check free space and that [sleep] report_dir is writable)") == true, "\(reply)")
        let report = try #require(reply["report"] as? [String: Any])
        #expect(report["type"] as? String == "snore_report")
        #expect(report["start"] as? String == reply["start"] as? String)

        let result = daemon.stop()
        #expect(result.status == 0)
        let health = result.out.split(separator: "\n").filter { $0.contains(#""state":"sleep_report_unavailable""#) }
        #expect(health.count == 3, "\(result.out)")
        #expect(health.dropFirst().first?.hasPrefix(#"{"type":"health","state":"sleep_report_unavailable","message":"the sleep report of the session from \#(start) to \#(end) was not written: cannot write the sleep report \#(reports)/\#(name): Operation not permitted (check free space and that [sleep] report_dir is writable); its content went out as the snore_report line (to the socket's subscribers and MQTT), and earshotd tries to write it again every minute, at the next session's start and when it stops","time":""#) == true, "\(health)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: reports) == [])
        // Still immutable at the stop: each unwritten report is one journal line, as lost.
        let lost = result.err.split(separator: "\n").filter { $0.contains("is lost: \(reports) still cannot be written as earshotd stops") }
        #expect(lost.count == 2, "\(result.err)")
    }

    @Test("a report that could not be written is written after all: at the next session's start and at the daemon's stop, under the name it was given, with one sleep_report_saved each and the stale session marker removed",
          .needsEarshotBuilt, .needsEarshotdBuilt,
          .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/chattr"), "needs root and chattr to make a directory immutable (root writes through file modes)"))
    func reportWrittenLater() throws {
        let sandbox = try DaemonEndToEndTests.Sandbox()
        defer { sandbox.remove() }
        let (reports, config, wav) = try Self.snoringDaemonFiles(in: sandbox)
        func chattr(_ flag: String) throws { try Self.chattr(flag, reports) }
        defer { try? chattr("-i") }
        let file = #/snore-\d{8}-\d{4}(-\d+)?\.json/#
        func failedStop() throws -> String {
            try chattr("+i")
            let stopped = try Self.sleep(["stop"], socket: sandbox.socket)
            #expect(stopped.status == 73, "\(stopped.errorLines)")
            let name = try #require(try file.firstMatch(in: stopped.errorLines.first ?? "")).output.0
            try chattr("-i")
            return String(name)
        }

        let daemon = try Daemon(config: config, input: wav.path, socket: sandbox.socket, home: sandbox.home)
        #expect(daemon.waitFor(#""state":"capture_live""#))
        #expect(try Self.sleep(["start"], socket: sandbox.socket).status == 0)
        try Self.waitForSessionAudio(socket: sandbox.socket)
        let first = try failedStop()
        // The directory takes files again; the next session's start writes the first report.
        #expect(try Self.sleep(["start"], socket: sandbox.socket).status == 0)
        #expect(daemon.waitFor(#""state":"sleep_report_saved""#), "\(daemon.collected)")
        let svg = { (json: String) in String(json.dropLast(5)) + ".svg" }
        #expect(daemon.collected.contains(#"{"type":"health","state":"sleep_report_saved","message":"the sleep report of the session from "#), "\(daemon.collected)")
        #expect(daemon.collected.contains(#" is written after all: \#(reports)/\#(first) and \#(reports)/\#(svg(first))","report_json":"\#(reports)/\#(first)","time":""#), "\(daemon.collected)")
        #expect(FileManager.default.fileExists(atPath: "\(reports)/\(first)"))
        try Self.waitForSessionAudio(socket: sandbox.socket)
        // The second session's report fails too (and so does the removal of its marker); the stop writes both.
        let second = try failedStop()
        #expect(second != first)
        let result = daemon.stop()
        #expect(result.status == 0)
        let saved = result.out.split(separator: "\n").filter { $0.contains(#""state":"sleep_report_saved""#) }
        #expect(saved.count == 2, "\(result.out)")
        #expect(saved.last?.contains(#""report_json":"\#(reports)/\#(second)""#) == true, "\(saved)")
        #expect(result.out.split(separator: "\n").filter { $0.contains(#""state":"sleep_report_unavailable""#) }.count == 2)
        #expect(try FileManager.default.contentsOfDirectory(atPath: reports).sorted() == [first, svg(first), second, svg(second)].sorted())
        let written = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: "\(reports)/\(second)"))) as? [String: Any])
        #expect(written["type"] as? String == "snore_report")
        #expect(!result.err.contains("is lost"), "\(result.err)")
    }

    @Test("a session marker that cannot be written: sleep start exits 0 (the session runs) with one warning (the reply's marker_warning) naming the marker, the reason and the fix (trial 12 #5)",
          .needsEarshotBuilt, .needsEarshotdBuilt,
          .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/chattr"), "needs root and chattr to make a directory immutable (root writes through file modes)"))
    func markerNotWritten() throws {
        let sandbox = try DaemonEndToEndTests.Sandbox()
        defer { sandbox.remove() }
        let (reports, config, wav) = try Self.snoringDaemonFiles(in: sandbox)
        func chattr(_ flag: String) throws { try Self.chattr(flag, reports) }
        defer { try? chattr("-i") }
        let daemon = try Daemon(config: config, input: wav.path, socket: sandbox.socket, home: sandbox.home)
        #expect(daemon.waitFor(#""state":"capture_live""#))
        try chattr("+i")
        let started = try Self.sleep(["start"], socket: sandbox.socket)
        #expect(started.status == 0, "\(started.errorLines)")
        let marker = reports + "/" + SleepService.markerName
        #expect(started.errorLines == ["earshot: warning: cannot write the sleep session marker \(marker): Operation not permitted (a restart of earshotd will not resume this session; make [sleep] report_dir writable)"])
        let json = try Self.sleep(["status", "--json"], socket: sandbox.socket)
        #expect(json.outputLines.first?.contains(#""state":"running""#) == true, "\(json.outputLines)")
        try chattr("-i")
        #expect(daemon.stop().status == 0)
    }

    @Test("a session survives a restart: SIGTERM writes the report and a marker, the next earshotd resumes at once and says where the report is; after SIGKILL it says the part was lost; a bad marker is one line",
          .needsEarshotBuilt, .needsEarshotdBuilt)
    func resumeAfterRestart() throws {
        let sandbox = try DaemonEndToEndTests.Sandbox()
        defer { sandbox.remove() }
        let reports = sandbox.directory.appendingPathComponent("sleep").path
        let marker = reports + "/" + SleepService.markerName
        let wav = sandbox.directory.appendingPathComponent("quiet.wav")
        try Self.quietWAV(at: wav)
        let config = sandbox.directory.appendingPathComponent("earshotd.conf").path
        try "[detection]\nwatch = snoring\n[history]\nenabled = false\n[sleep]\nreport_dir = \(reports)\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        func daemon() throws -> Daemon {
            let daemon = try Daemon(config: config, input: wav.path, socket: sandbox.socket, home: sandbox.home)
            #expect(daemon.waitFor(#""state":"capture_live""#))
            return daemon
        }
        func resumedLine(_ out: String) -> String? {
            out.split(separator: "\n").map(String.init).first { $0.contains(#""state":"sleep_session_resumed""#) }
        }

        // 1. Stopped by SIGTERM during a session: its report, and the marker saying how it ended.
        let first = try daemon()
        let started = try Self.sleep(["start"], socket: sandbox.socket)
        let firstStart = Self.time(in: try #require(started.outputLines.first))
        try Self.waitForSessionAudio(socket: sandbox.socket)
        let firstResult = first.stop()
        #expect(firstResult.status == 0)
        let written = try #require(firstResult.err.split(separator: "\n").first { $0.hasPrefix("earshotd: sleep report written: ") })
        let reportPath = String(written.dropFirst("earshotd: sleep report written: ".count).split(separator: " ").first ?? "")
        let saved = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: marker))) as? [String: Any])
        let firstEnd = try #require(saved["end"] as? String)
        #expect(saved as NSDictionary == ["start": firstStart, "end": firstEnd, "report": reportPath] as NSDictionary)

        // 2. The next daemon resumes at once and says where the earlier part is.
        let second = try daemon()
        let status = try Self.sleep(["status"], socket: sandbox.socket)
        #expect(status.status == 0)
        let secondStart = Self.time(in: try #require(status.outputLines.first))
        #expect(status.outputLines.first?.hasPrefix("sleep session running since \(secondStart) (") == true, "\(status.outputLines)")
        #expect(try String(contentsOfFile: marker, encoding: .utf8) == #"{"start":"\#(secondStart)","scheduled":false}"# + "\n")
        // 3. Killed: the marker still says "running"; the next daemon says that part was lost.
        let secondResult = second.stop(SIGKILL)
        let resumed = try #require(resumedLine(secondResult.out), "\(secondResult.out)")
        #expect(resumed.hasPrefix(#"{"type":"health","state":"sleep_session_resumed","message":"sleep session resumed after earshotd restarted: the session from \#(firstStart) ended when earshotd stopped at \#(firstEnd); its report is \#(reportPath); a new session runs from \#(secondStart)","time":""#), "\(resumed)")

        let third = try daemon()
        let thirdStatus = try Self.sleep(["status"], socket: sandbox.socket)
        let thirdStart = Self.time(in: try #require(thirdStatus.outputLines.first))
        #expect(thirdStatus.outputLines.first?.hasPrefix("sleep session running since \(thirdStart) (") == true, "\(thirdStatus.outputLines)")
        // A stop by hand ends the session for good: no marker, and no resume at the next start.
        #expect(try Self.sleep(["stop"], socket: sandbox.socket).status == 0)
        #expect(!FileManager.default.fileExists(atPath: marker))
        let thirdResult = third.stop()
        #expect(thirdResult.status == 0)
        let lost = try #require(resumedLine(thirdResult.out), "\(thirdResult.out)")
        #expect(lost.hasPrefix(#"{"type":"health","state":"sleep_session_resumed","message":"sleep session resumed after earshotd restarted: the session from \#(secondStart) was running when earshotd was killed (or the machine went down): its part up to the restart is lost, no report was written; a new session runs from \#(thirdStart)","time":""#), "\(lost)")
        #expect(!FileManager.default.fileExists(atPath: marker))

        // 4. A marker that is not one: one line, removed, no session.
        try "garbage\n".write(toFile: marker, atomically: true, encoding: .utf8)
        let fourth = try daemon()
        #expect(try Self.sleep(["status"], socket: sandbox.socket).outputLines == ["no sleep session is running"])
        let fourthResult = fourth.stop()
        #expect(resumedLine(fourthResult.out) == nil)
        #expect(fourthResult.err.split(separator: "\n").filter { $0.contains("marker") } == [
            "earshotd: ignoring the sleep session marker \(marker): it is not one (no JSON object with a session start); no session is resumed",
        ])
        #expect(!FileManager.default.fileExists(atPath: marker))
    }

    // MARK: #7 one clock after an input stall

    @Test("after an input stall (standard input silent 10 s) the session report's times are the history's: the snoring episode starts and ends at the history's first start and last end, to the millisecond, and the stall is in the report's timeline but not in its audio",
          .needsShared, .needsEarshotdBuilt, .needsEarshotBuilt)
    func stallKeepsOneClock() throws {
        let sandbox = try DaemonEndToEndTests.Sandbox()
        defer { sandbox.remove() }
        let reports = sandbox.directory.appendingPathComponent("sleep").path
        let historyPath = sandbox.directory.appendingPathComponent("history.sqlite3").path
        let config = sandbox.directory.appendingPathComponent("earshotd.conf").path
        try "[output]\nsocket = \(sandbox.socket)\njournal = false\n[detection]\nwatch = snoring\n[history]\npath = \(historyPath)\n[sleep]\nreport_dir = \(reports)\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        // 6 s of quiet, then nothing for 10 s (the writer sleeps), then six snores every 3 s written as they would be
        // heard (half a second every half second, as a live writer does: the daemon hears them late by the stall;
        // written at once they would be read at once, the backlog caught up).
        let quiet = sandbox.directory.appendingPathComponent("quiet.raw")
        let snoring = sandbox.directory.appendingPathComponent("snoring.raw")
        try SyntheticAudio.pcm(SyntheticAudio.sine(seconds: 6, amplitude: 0.001)).write(to: quiet)
        try SleepDaemonTests.snoringRaw().write(to: snoring)
        let daemon = try DaemonProcess(["--config", config, "--foreground", "--input", "-"],
                                       environment: DaemonEndToEndTests.environment(home: sandbox.home), standardInput: true)
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: "/bin/sh")
        let chunks = (try Data(contentsOf: snoring).count + 15_999) / 16_000
        writer.arguments = ["-c", #"cat "$1"; sleep 10; i=0; while [ $i -lt $3 ]; do dd if="$2" bs=16000 skip=$i count=1 status=none; sleep 0.5; i=$((i+1)); done"#,
                            "sh", quiet.path, snoring.path, String(chunks)]
        writer.standardOutput = daemon.input.fileHandleForWriting
        try writer.run()
        try daemon.input.fileHandleForWriting.close()
        defer { if writer.isRunning { writer.terminate() } }

        #expect(TestWait.until(seconds: 10) { InputStallTests.health(daemon).contains { $0.object["state"] as? String == "capture_live" } },
                "\(daemon.errorText)")
        let started = try Self.sleep(["start"], socket: sandbox.socket)
        #expect(started.status == 0, "\(started.standardError)")
        let start = Self.time(in: try #require(started.outputLines.first))
        // The session hears the quiet before the stall.
        #expect(!InputStallTests.health(daemon).contains { $0.object["state"] as? String == "input_stalled" },
                "the stall came before the session started; the test proves nothing")
        #expect(TestWait.until(seconds: 30) { InputStallTests.health(daemon).contains { $0.object["state"] as? String == "input_stalled" } },
                "\(daemon.errorText)")
        writer.waitUntilExit()
        // The input's end stops the daemon, and with it the session: its report is written.
        #expect(daemon.wait(seconds: 30) == 0, "\(daemon.errorText)")

        let names = try FileManager.default.contentsOfDirectory(atPath: reports).filter { $0.hasSuffix(".json") }
        #expect(names.count == 1, "\(names)")
        let report = try #require(try JSONSerialization.jsonObject(
            with: Data(contentsOf: URL(fileURLWithPath: reports + "/" + (names.first ?? "")))) as? [String: Any])
        let stored = try EventHistory(path: historyPath, access: .readOnly).events().filter { $0.group == "snoring" }
        #expect(!stored.isEmpty)
        #expect(report["events"] as? Int == stored.count)
        #expect(report["start"] as? String == start)
        let episodes = try #require(report["episodes"] as? [[String: Any]])
        #expect(episodes.count == 1, "\(episodes)")
        // The times as `earshot history` prints them, and as the report has them.
        let first = try #require(stored.min { $0.start < $1.start }), last = try #require(stored.max { $0.end < $1.end })
        #expect(episodes.first?["start_time"] as? String == EventJSON.timestamp(first.start), "\(episodes) vs \(stored)")
        #expect(episodes.first?["end_time"] as? String == EventJSON.timestamp(last.end), "\(episodes) vs \(stored)")
        // The stall (about 8 s: the pipe held 2 s of the quiet when the writer began to sleep) lies in the timeline,
        // between the quiet and the snoring, and not in the audio heard (the writer's half seconds come a little
        // late too).
        let duration = try #require(report["duration_seconds"] as? Double)
        let audio = try #require(report["audio_seconds"] as? Double)
        #expect(duration - audio > 5 && duration - audio < 14, "duration \(duration) s, audio \(audio) s")
        let episodeStart = try #require(episodes.first?["start"] as? Double)
        #expect(episodeStart > 6 + 5, "the snoring starts after the quiet and the stall: \(episodeStart) s")
        let history = try #require(try EarshotCLI.run(["history", "--db", historyPath, "--format", "jsonl"], in: sandbox.directory, timeout: 30))
        #expect(history.outputLines.first { $0.contains(#""start":"\#(EventJSON.timestamp(first.start))""#) } != nil, "\(history.outputLines)")
    }

    // MARK: #8 the stop reply of replayed input

    @Test("at --input-speed 4 the sleep stop reply gives the report's times (the daemon's start plus stream time), text and --json, not the wall clock",
          .needsEarshotBuilt, .needsEarshotdBuilt)
    func replayedStopReplyIsTheReports() throws {
        let sandbox = try DaemonEndToEndTests.Sandbox()
        defer { sandbox.remove() }
        let reports = sandbox.directory.appendingPathComponent("sleep").path
        let wav = sandbox.directory.appendingPathComponent("quiet.wav")
        try Self.quietWAV(at: wav)
        let config = sandbox.directory.appendingPathComponent("earshotd.conf").path
        try "[detection]\nwatch = snoring\n[history]\nenabled = false\n[sleep]\nreport_dir = \(reports)\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try Daemon(config: config, input: wav.path, socket: sandbox.socket, home: sandbox.home)
        defer { _ = daemon.stop() }
        #expect(daemon.waitFor(#""state":"capture_live""#))
        func report(_ reply: [String: Any]) throws -> [String: Any] {
            let path = try #require(reply["report_json"] as? String, "\(reply)")
            return try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
        }

        // --json: the reply's start and end are the report's, and so is the length between them.
        #expect(try Self.sleep(["start"], socket: sandbox.socket).status == 0)
        try Self.waitForSessionAudio(socket: sandbox.socket)
        Thread.sleep(forTimeInterval: 2)  // 8 s of audio at 4 times real time: the two clocks 6 s apart
        let json = try Self.sleep(["stop", "--json"], socket: sandbox.socket)
        #expect(json.status == 0)
        let reply = try #require(try JSONSerialization.jsonObject(with: Data(json.standardOutput.utf8)) as? [String: Any])
        let written = try report(reply)
        #expect(reply["start"] as? String == written["start"] as? String, "\(reply) vs \(written)")
        #expect(reply["end"] as? String == written["end"] as? String, "\(reply) vs \(written)")
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let start = try #require(formatter.date(from: reply["start"] as? String ?? ""))
        let end = try #require(formatter.date(from: reply["end"] as? String ?? ""))
        let duration = try #require(written["duration_seconds"] as? Double)
        #expect(abs(end.timeIntervalSince(start) - duration) < 0.006, "\(reply) vs \(duration) s")

        // Text: the same two times.
        #expect(try Self.sleep(["start"], socket: sandbox.socket).status == 0)
        try Self.waitForSessionAudio(socket: sandbox.socket)
        let text = try Self.sleep(["stop"], socket: sandbox.socket)
        #expect(text.status == 0)
        let summary = try #require(text.outputLines.first)
        // The second line: `report: SVG and JSON`.
        let path = try #require(text.outputLines.last?.split(separator: " ").last.map(String.init), "\(text.outputLines)")
        let second = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
        #expect(summary.hasPrefix("sleep session \(second["start"] as? String ?? "?") to \(second["end"] as? String ?? "?"): "), "\(text.outputLines) vs \(second)")
    }

    // MARK: #11, #14 configuration

    @Test("relative [sleep] report_dir and [history] path are refused as [clips] directory is (78); schedule 22:30-22:30 says why", .needsEarshotdBuilt,
          arguments: [
            ("[sleep]\nreport_dir = sleep\n", "[sleep] report_dir = sleep: must be an absolute directory path, e.g. /var/lib/earshot/sleep"),
            ("[history]\npath = h.sqlite3\n", "[history] path = h.sqlite3: must be an absolute file path, e.g. /var/lib/earshot/history.sqlite3"),
            ("[sleep]\nschedule = 22:30-22:30\n", "[sleep] schedule = 22:30-22:30: the start and the end are the same minute, an empty window (give the minute the session should stop, e.g. 22:30-07:00; empty: no schedule)"),
          ])
    func refusedSettings(text: String, line: String) throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-sleep-conf-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = directory.appendingPathComponent("e.conf").path
        try text.write(toFile: config, atomically: true, encoding: .utf8)
        let result = try #require(try EarshotdRun.run(["--config", config, "--check-config"]))
        #expect(result.status == 78)
        #expect(result.output.isEmpty)
        #expect(result.error == "earshotd: \(config):2: \(line)\n")
    }
}
