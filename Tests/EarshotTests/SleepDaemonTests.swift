import Foundation
import Testing
import RegexBuilder
import Synchronization

#if canImport(FoundationXML)
import FoundationXML
#endif

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("Sleep: sessions in the daemon", .serialized)
struct SleepDaemonTests {
    @Test("snore events go out while snoring is watched or a session runs; an end goes out exactly when its onset did; stop without a session is refused")
    func service() throws {
        let queue = DispatchQueue(label: "test.analysis")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-sleep-\(getpid())")
        defer { try? FileManager.default.removeItem(at: directory) }
        var settings = DaemonConfiguration.Sleep()
        settings.reportDirectory = directory.appendingPathComponent("reports").path
        let utc = try #require(TimeZone(identifier: "UTC"))
        let service = SleepService(
            analysisQueue: queue, settings: settings, timeZone: utc, publishReport: { _ in }, log: { _, _ in })
        let onset = SnoreDetector.Decision.onset(.init(group: "snoring", classLabel: "Snoring", confidence: 0.5, start: 1, decisionTime: 2))
        let summary = SnoreEvent(start: 1, end: 3, peakEvidence: 0.5, meanEvidence: 0.5, snores: 2, levelDBFS: -40,
                                 peakLevelDBFS: -38, peakLevelTime: 1)
        let offset = SnoreDetector.Decision.offset(.init(group: "snoring", classLabel: "Snoring", start: 1, end: 3, peakConfidence: 0.5,
                                                         meanConfidence: 0.5, positiveWindows: 2, reason: .holdElapsed), summary)
        #expect(service.handle(command: "sleep_stop")
            == ["type": "error", "message": "no sleep session is running (start one with `earshot sleep start`)"])
        #expect(service.handle(command: "sleep_status") == ["type": "sleep", "state": "idle"])
        var unwatched = SnorePublication(watched: false)
        // Not watched, no session: neither the onset nor its end goes out.
        #expect([unwatched.admits(onset, sessionActive: false), unwatched.admits(offset, sessionActive: false)] == [false, false])
        // An onset during a session goes out, and so does its end after the session stopped.
        #expect([unwatched.admits(onset, sessionActive: true), unwatched.admits(offset, sessionActive: false)] == [true, true])
        // An onset before the session: its end stays back too, so that no subscriber sees an end without a start.
        #expect([unwatched.admits(onset, sessionActive: false), unwatched.admits(offset, sessionActive: true)] == [false, false])
        var watched = SnorePublication(watched: true)
        #expect([watched.admits(onset, sessionActive: false), watched.admits(offset, sessionActive: false)] == [true, true])
        let started = Date(timeIntervalSince1970: 1_772_402_400)
        let (reply, again, stopped): (JSONObject, JSONObject, JSONObject) = queue.sync {
            let reply = service.start(at: started, scheduled: false)
            let again = service.start(at: started.addingTimeInterval(5), scheduled: false)
            service.observe(window: Self.quietWindow(at: 0))
            service.observe(window: Self.quietWindow(at: 3.36))
            // Not published (an onset before the session, snoring unwatched): not counted.
            service.observe(onset, published: false)
            service.observe(offset, published: false)
            service.observe(onset, published: true)
            // Live audio: the latest window (3.36-4.32 s) ends now, 4.32 s after the start.
            service.observe(offset, published: true, now: started.addingTimeInterval(4.32))
            return (reply, again, service.stop(at: started.addingTimeInterval(60)))
        }
        #expect(reply == ["type": "sleep", "state": "started", "start": "2026-03-01T22:00:00.000Z"])
        #expect(again == ["type": "sleep", "state": "already_running", "start": "2026-03-01T22:00:00.000Z"])
        // The stage's event, 1-3 s of 4.32 s monitored: 2 s snoring, 46.3 %.
        #expect(stopped["snoring_minutes"] == .number(2.0 / 60, decimals: 2))
        #expect(stopped["events"] == 1)
        #expect(stopped["audio_seconds"] == .number(4.32, decimals: 1))
        service.flushReports()
        let written = try FileManager.default.contentsOfDirectory(atPath: settings.reportDirectory).sorted()
        #expect(written == ["snore-20260301-2200.json", "snore-20260301-2200.svg"])
        // The directory the service made is for root (and the service's user) alone, as the clips directory is.
        let mode = try FileManager.default.attributesOfItem(atPath: settings.reportDirectory)[.posixPermissions] as? Int
        #expect(mode == 0o700)
    }

    /// A gated window of quiet at `start` seconds of stream time (0.96 s long).
    static func quietWindow(at start: Double) -> ClassificationResult {
        ClassificationResult(
            timeRange: TimeRange(start: start, duration: 0.96), classifications: [], scores: [], levelDBFS: -80, isGated: true)
    }

    @Test("sleep service: sessions of one minute get their own reports (-2, -3); a session with no audio writes none and says so")
    func reportNames() throws {
        let queue = DispatchQueue(label: "test.analysis")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-sleep-names-\(getpid())")
        defer { try? FileManager.default.removeItem(at: directory) }
        var settings = DaemonConfiguration.Sleep()
        settings.reportDirectory = directory.path
        let utc = try #require(TimeZone(identifier: "UTC"))
        let published = Mutex<Int>(0)
        let service = SleepService(
            analysisQueue: queue, settings: settings, timeZone: utc,
            publishReport: { _ in published.withLock { $0 += 1 } }, log: { _, _ in })
        let started = Date(timeIntervalSince1970: 1_772_402_400)  // 2026-03-01 22:00:00 UTC
        let replies: [JSONObject] = queue.sync {
            var replies: [JSONObject] = []
            for index in 0..<3 {
                service.start(at: started.addingTimeInterval(Double(index)), scheduled: false)
                service.observe(window: Self.quietWindow(at: 0))
                service.observe(window: Self.quietWindow(at: 0.48))
                replies.append(service.stop(at: started.addingTimeInterval(Double(index) + 0.5)))
            }
            // Started and stopped with no window in between: nothing heard.
            service.start(at: started.addingTimeInterval(10), scheduled: false)
            replies.append(service.stop(at: started.addingTimeInterval(10.1)))
            return replies
        }
        service.flushReports()
        #expect(replies.prefix(3).map { $0["report_json"]?.stringValue } == [
            directory.path + "/snore-20260301-2200.json", directory.path + "/snore-20260301-2200-2.json",
            directory.path + "/snore-20260301-2200-3.json",
        ])
        #expect(replies[0]["audio_seconds"] == .number(1.44, decimals: 1))
        #expect(replies[3] == [
            "type": "sleep", "state": "stopped", "start": "2026-03-01T22:00:10.000Z", "end": "2026-03-01T22:00:10.100Z",
            "audio_seconds": 0,
            "message": "sleep session from 2026-03-01T22:00:10.000Z to 2026-03-01T22:00:10.100Z heard no audio: no report written",
        ])
        let written = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        #expect(written == [
            "snore-20260301-2200-2.json", "snore-20260301-2200-2.svg", "snore-20260301-2200-3.json",
            "snore-20260301-2200-3.svg", "snore-20260301-2200.json", "snore-20260301-2200.svg",
        ])
        #expect(published.withLock { $0 } == 3)
    }

    /// A real event socket in a directory anyone may enter (mode 0666, only root a control user) answering the sleep
    /// commands with a real ``SleepService``, and a runner of `earshot sleep ARGUMENTS --socket` on it.
    static func sleepSocket(_ body: (_ socket: String, _ reportDirectory: String,
                                     _ run: ([String]) throws -> EarshotCLI.Outcome) throws -> Void) throws {
        try sleepSocket(audioProblem: nil) { socket, reportDirectory, run, _, _ in try body(socket, reportDirectory, run) }
    }

    /// As ``sleepSocket(_:)``, with the service's `audioProblem` at the start, and the service and its analysis queue handed to
    /// `body` (to feed it windows and an open snoring event).
    static func sleepSocket(
        audioProblem: String?,
        _ body: (_ socket: String, _ reportDirectory: String, _ run: @escaping ([String]) throws -> EarshotCLI.Outcome,
                 _ service: SleepService, _ queue: DispatchQueue) throws -> Void
    ) throws {
        let directory = try TemporarySocketDirectory()
        chmod(directory.path, 0o777)
        let path = directory.file("e.sock")
        var settings = DaemonConfiguration.Sleep()
        settings.reportDirectory = directory.file("sleep")
        let queue = DispatchQueue(label: "test.analysis")
        let service = SleepService(analysisQueue: queue, settings: settings, timeZone: .current,
                                   publishReport: { _ in }, log: { _, _ in }, audioProblem: audioProblem)
        let server = try EventServer(
            configuration: .init(path: path, mode: 0o666, clientQueueLimitBytes: 256 * 1024, maxClients: 64,
                                 maxClientsPerUser: 16, stalledClientSeconds: 60, controlUsers: [0]),
            status: SocketTestSupport.status)
        defer { server.stop() }
        server.register(commands: SleepService.commands) { command, _, _, reply in reply(service.handle(command: command)) }
        try body(path, settings.reportDirectory, { arguments in
            try #require(try EarshotCLI.run(["sleep"] + arguments + ["--socket", path],
                                            in: URL(fileURLWithPath: directory.path), timeout: 20))
        }, service, queue)
    }

    @Test("earshot sleep status counts the snoring event open now (minutes, events, snoring now)", .needsEarshotBuilt)
    func statusCountsOpenEvent() throws {
        try Self.sleepSocket(audioProblem: nil) { _, _, run, service, queue in
            #expect(try run(["start"]).status == 0)
            let finished = SnoreEvent(start: 1, end: 31, peakEvidence: 0.5, meanEvidence: 0.5, snores: 9, levelDBFS: -30,
                                      peakLevelDBFS: -25, peakLevelTime: 2)
            let offset = SnoreDetector.Decision.offset(.init(
                group: "snoring", classLabel: "Snoring", start: 1, end: 31, peakConfidence: 0.5, meanConfidence: 0.5,
                positiveWindows: 60, reason: .holdElapsed), finished)
            queue.sync {
                service.observe(window: Self.quietWindow(at: 0))
                service.observe(window: Self.quietWindow(at: 119.04))  // 120 s monitored
                service.observe(offset, published: true)
            }
            // No open event: the finished one only.
            let before = try run(["status", "--json"])
            #expect(before.outputLines.count == 1)
            #expect(before.outputLines.first?.contains(#""minutes":2.0,"snoring_minutes":0.5,"events":1,"snoring_now":false"#) == true, "\(before.outputLines)")
            // Snoring since 60 s, released up to 108 s: 48 s more, a second event, going on now.
            queue.sync {
                service.openSnoreEvent = {
                    SnoreEvent(start: 60, end: 108, peakEvidence: 0.6, meanEvidence: 0.5, snores: 14, levelDBFS: -28,
                               peakLevelDBFS: -20, peakLevelTime: 70, endReason: .streamEnd)
                }
            }
            let json = try run(["status", "--json"])
            #expect(json.outputLines.first?.contains(#""minutes":2.0,"snoring_minutes":1.3,"events":2,"snoring_now":true"#) == true, "\(json.outputLines)")
            let text = try run(["status"])
            #expect(text.status == 0)
            #expect(text.standardError.isEmpty)
            #expect(text.outputLines.count == 1)
            #expect(text.outputLines.first?.hasSuffix(" (2.0 min, 1.3 min snoring so far, snoring now)") == true, "\(text.outputLines)")
        }
    }

    @Test("earshot sleep start and status with no audio arriving: the session starts (exit 0) and stderr says why", .needsEarshotBuilt)
    func startWarnsWithoutAudio() throws {
        let problem = #"no audio is arriving (capture unavailable: cannot open capture device "hw:9,0": No such file or directory (no such device; list devices with `earshot devices` or `arecord -L`) (retrying in 2 s, then twice as long each time, up to every 4 s))"#
        try Self.sleepSocket(audioProblem: problem) { _, _, run, service, _ in
            let started = try run(["start"])
            #expect(started.status == 0)
            #expect(started.outputLines.count == 1)
            #expect(started.outputLines.first?.hasPrefix("sleep session started at ") == true)
            let warning = "earshot: warning: \(problem); the session counts only audio it hears (earshot status shows the capture)"
            #expect(started.errorLines == [warning])
            let status = try run(["status"])
            #expect(status.status == 0)
            #expect(status.errorLines == [warning])
            let json = try run(["start", "--json"])
            #expect(json.outputLines.first?.contains(#""state":"already_running""#) == true)
            // The daemon hands in each change of the capture: a stall, then audio again.
            let stalled = "no audio is arriving (capture stalled: no audio from standard input for 5 s)"
            service.captureChanged(audioProblem: stalled)
            #expect(try run(["status"]).errorLines == ["earshot: warning: \(stalled); the session counts only audio it hears (earshot status shows the capture)"])
            service.captureChanged(audioProblem: nil)
            let live = try run(["status"])
            #expect(live.status == 0)
            #expect(live.standardError.isEmpty, "\(live.errorLines)")
        }
        // Audio arriving: no warning.
        try Self.sleepSocket(audioProblem: nil) { _, _, run, _, _ in
            let started = try run(["start"])
            #expect(started.status == 0)
            #expect(started.standardError.isEmpty)
        }
    }

    @Test("earshot sleep: stop with no session running exits 1 (the daemon answered); a user not in control_users exits 77 (permission), not 69", .needsEarshotBuilt)
    func sleepCommandStatuses() throws {
        try Self.sleepSocket { socket, _, run in
            let stopWithout = try run(["stop"])
            #expect(stopWithout.status == 1)
            #expect(stopWithout.errorLines == ["earshot: no sleep session is running (start one with `earshot sleep start`)"])
            #expect(stopWithout.standardOutput.isEmpty)

            guard getuid() == 0, let earshot = EarshotCLI.executable else { return }  // setpriv needs root
            let nobody = try EarshotCLI.runProcess(
                URL(fileURLWithPath: "/usr/bin/setpriv"),
                ["--reuid=65534", "--regid=65534", "--clear-groups", earshot.path, "sleep", "start", "--socket", socket],
                timeout: 20)
            #expect(nobody.status == 77)
            #expect(nobody.errorLines == [
                "earshot: sleep_start is refused: uid 65534 may not change the daemon's state (control users: uid 0; add the user to [output] control_users and restart earshotd)",
            ])
        }
    }

    @Test("earshot sleep stop after a session that heard no audio prints the daemon's message, not \"report: ? and ?\"", .needsEarshotBuilt)
    func sleepStopWithoutAudio() throws {
        try Self.sleepSocket { _, reportDirectory, run in
            #expect(try run(["start"]).status == 0)
            // No window reached the service: nothing was heard, no report was written, and the line says so.
            let stopped = try run(["stop"])
            #expect(stopped.status == 0)
            #expect(stopped.standardError.isEmpty)
            let time = #/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/#
            let line = Regex {
                "sleep session from "; time; " to "; time; " heard no audio: no report written"
            }
            #expect(stopped.outputLines.count == 1)
            #expect(try stopped.outputLines.first.flatMap { try line.wholeMatch(in: $0) } != nil, "\(stopped.outputLines)")
            // The session made the directory for its marker (``SleepService/markerName``); the stop left it empty.
            #expect(try FileManager.default.contentsOfDirectory(atPath: reportDirectory) == [])
        }
    }

    @Test("earshotd: sleep start, snoring from a real recording read in real time, sleep stop writes the report and the history", .needsShared)
    func daemonSession() throws {
        let sandbox = try DaemonEndToEndTests.Sandbox()
        defer { sandbox.remove() }
        let historyPath = sandbox.directory.appendingPathComponent("history.sqlite3").path
        let reportDirectory = sandbox.directory.appendingPathComponent("sleep").path
        let config = sandbox.directory.appendingPathComponent("earshotd.conf")
        try "[detection]\nwatch = smoke_alarm\n[history]\npath = \(historyPath)\n[sleep]\nreport_dir = \(reportDirectory)\n"
            .write(to: config, atomically: true, encoding: .utf8)

        // 3 s of quiet, six snoring clips, each followed by 2 s of quiet (snores every 3 s), and 18 s of quiet (the
        // event ends), read in real time as a device is: the session's times are the wall clock (the history's),
        // which a capture without a clock (the ALSA file plugin's null slave) would squeeze into a moment.
        let quiet = Data(count: 16_000 * 2 * 3)
        let raw = quiet + (try Self.snoringRaw()) + quiet + quiet + quiet + quiet + quiet + quiet
        let input = sandbox.directory.appendingPathComponent("night.wav")
        try Self.pcm16WAV(raw, sampleRate: 16_000).write(to: input)

        let daemon = Process()
        daemon.executableURL = DaemonEndToEndTests.buildDirectory.appendingPathComponent("earshotd")
        daemon.arguments = ["--config", config.path, "--input", input.path, "--socket", sandbox.socket, "--no-journal"]
        daemon.environment = DaemonEndToEndTests.environment(home: sandbox.home)
        let errors = Pipe()
        daemon.standardError = errors
        try daemon.run()
        defer { if daemon.isRunning { daemon.terminate() } }

        var subscriber: EventSubscriber?
        for _ in 0..<100 where subscriber == nil {
            subscriber = try? EventSubscriber(path: sandbox.socket)
            if subscriber == nil { Thread.sleep(forTimeInterval: 0.05) }
        }
        let client = try #require(subscriber, "earshotd did not create its socket")
        func next(type wanted: String) throws -> [String: Any]? {
            while case .line(let line) = try client.readLine(timeoutSeconds: 40) {
                let object = DaemonEndToEndTests.parse(line)
                if object["type"] as? String == wanted { return object }
            }
            return nil
        }
        // Sleep sessions publish group "snoring" even when the watch list leaves it out.
        try client.subscribe(groups: ["snoring"])
        let subscribed = try #require(try next(type: "subscribed"))
        #expect(subscribed["groups"] as? [String] == ["snoring"])
        try client.send(line: #"{"cmd":"sleep_start"}"#)
        let started = try #require(try next(type: "sleep"))
        #expect(started["state"] as? String == "started")

        let end = try #require(try next(type: "detection_end"))
        #expect(end["group"] as? String == "snoring")
        #expect(end["class"] as? String == "Snoring")

        // `earshot sleep stop` asks over the socket and prints where the report went.
        let cli = Process()
        cli.executableURL = DaemonEndToEndTests.buildDirectory.appendingPathComponent("earshot")
        cli.arguments = ["sleep", "stop", "--socket", sandbox.socket]
        let out = Pipe()
        cli.standardOutput = out
        try cli.run()
        cli.waitUntilExit()
        if cli.terminationStatus != 0 {
            daemon.terminate()
            daemon.waitUntilExit()
            let log = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            Issue.record("earshot sleep stop exited \(cli.terminationStatus); earshotd status \(daemon.terminationStatus) reason \(daemon.terminationReason.rawValue), its log: \(log)")
        }
        let printed = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(printed.contains("report: \(reportDirectory)/snore-"), "\(printed)")
        let report = try #require(try next(type: "snore_report"))
        #expect(report["source"] as? String == "sleep session")
        let events = try #require(report["events"] as? Int)
        #expect(events >= 1)
        let minutes = try #require(report["snoring_minutes"] as? Double)
        #expect(minutes > 0)
        // What `earshot sleep stop` printed is this report's: its minutes and episodes, and its two files.
        let episodes = try #require(report["episodes"] as? [Any]).count
        #expect(printed.contains(": \(JSONValue.format(minutes, decimals: 1)) min snoring ("), "\(printed)")
        #expect(printed.contains(" %), \(episodes) episode\(episodes == 1 ? "" : "s")\n"), "\(printed)")

        daemon.terminate()
        daemon.waitUntilExit()
        #expect(daemon.terminationStatus == 0)

        // The files: JSON equal to the line sent, SVG well-formed.
        let names = try FileManager.default.contentsOfDirectory(atPath: reportDirectory).sorted()
        #expect(names.count == 2)
        let jsonName = try #require(names.first { $0.hasSuffix(".json") })
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: reportDirectory + "/" + jsonName)))
        #expect((json as? NSDictionary) == (report as NSDictionary))
        #expect(((json as? [String: Any])?["snore_events"] as? [Any])?.count == events)
        let svgPath = reportDirectory + "/" + (names.first { $0.hasSuffix(".svg") } ?? "")
        #expect(printed.hasSuffix("report: \(svgPath) and \(reportDirectory)/\(jsonName)\n"), "\(printed)")
        let svgName = try #require(names.first { $0.hasSuffix(".svg") })
        let parser = XMLParser(data: try Data(contentsOf: URL(fileURLWithPath: reportDirectory + "/" + svgName)))
        #expect(parser.parse())

        // The history holds the snoring events with their loudness.
        let stored = try EventHistory(path: historyPath, access: .readOnly).events()
        #expect(stored.count == events)
        #expect(stored.allSatisfy { $0.group == "snoring" && $0.classLabel == "Snoring" })
        #expect(stored.allSatisfy { $0.levelDBFS > -60 && $0.peakLevelDBFS >= $0.levelDBFS })
        let log = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(!log.contains("history_unavailable"), "\(log)")

        // One snore detector: `earshot report --snore` on the same audio finds the session's events (times within
        // one hop, as `earshot detect` and earshotd agree), with the same snores.
        let wav = input
        let reporter = Process()
        reporter.executableURL = DaemonEndToEndTests.buildDirectory.appendingPathComponent("earshot")
        reporter.arguments = ["report", "--snore", wav.path, "--json", "-", "--quiet", "--config", config.path]
        reporter.environment = DaemonEndToEndTests.environment(home: sandbox.home)
        let reported = Pipe()
        reporter.standardOutput = reported
        try reporter.run()
        let fileReport = try #require(
            try JSONSerialization.jsonObject(with: reported.fileHandleForReading.readDataToEndOfFile()) as? [String: Any])
        reporter.waitUntilExit()
        #expect(reporter.terminationStatus == 0)
        func spans(_ object: [String: Any]) -> [(start: Double, end: Double, snores: Int)] {
            ((object["snore_events"] as? [[String: Any]]) ?? []).map {
                (($0["start"] as? Double) ?? -1, ($0["end"] as? Double) ?? -1, ($0["snores"] as? Int) ?? -1)
            }
        }
        let session = spans(report), file = spans(fileReport)
        #expect(session.count == file.count && !file.isEmpty, "session \(session) vs report --snore \(file)")
        // The same events with the same snores. Their times are not compared: the file plugin has no clock (it is
        // read as fast as it goes), so the session's times, on the wall clock as the history's, squeeze the 18 s of
        // audio into a moment; they are the history's to the millisecond.
        #expect(session.map(\.snores) == file.map(\.snores), "session \(session) vs report --snore \(file)")
        let spansOfEpisodes = try #require(report["episodes"] as? [[String: Any]])
        let first = try #require(stored.min { $0.start < $1.start }), last = try #require(stored.max { $0.end < $1.end })
        #expect(spansOfEpisodes.first?["start_time"] as? String == EventJSON.timestamp(first.start), "\(spansOfEpisodes) vs \(stored)")
        #expect(spansOfEpisodes.last?["end_time"] as? String == EventJSON.timestamp(last.end), "\(spansOfEpisodes) vs \(stored)")
    }

    /// Six snoring clips of `snoring-khan/1`, each followed by 2 s of quiet (snores every 3 s), as 16 kHz S16_LE.
    static func snoringRaw() throws -> Data {
        let clips = try FileManager.default.contentsOfDirectory(atPath: TestPaths.sharedFile("audio/snoring-khan/1").path)
            .sorted().prefix(6)
        var raw = Data()
        for name in clips {
            let samples = try decodeMono16k(TestPaths.sharedFile("audio/snoring-khan/1/\(name)"))
            for value in samples + [Float](repeating: 0, count: 32_000) {
                let sample = Int16(max(-32768, min(32767, (value * 32768).rounded())))
                withUnsafeBytes(of: sample.littleEndian) { raw.append(contentsOf: $0) }
            }
        }
        return raw
    }

    @Test("SIGHUP that changes only [sleep] threshold during a snoring event: the event goes on (no reason reload); a new gate still ends it",
          .needsShared, arguments: [false, true])
    func reloadOfSleepThresholdKeepsSnoringEvent(changeGate: Bool) throws {
        let sandbox = try DaemonEndToEndTests.Sandbox()
        defer { sandbox.remove() }
        let wav = sandbox.directory.appendingPathComponent("snoring.wav")
        try Self.pcm16WAV(try Self.snoringRaw(), sampleRate: 16_000).write(to: wav)
        let config = sandbox.directory.appendingPathComponent("earshotd.conf")
        let base = "[detection]\nwatch = snoring\n[history]\nenabled = false\n"
        try base.write(to: config, atomically: true, encoding: .utf8)
        let daemon = Process()
        daemon.executableURL = DaemonEndToEndTests.buildDirectory.appendingPathComponent("earshotd")
        daemon.arguments = ["--config", config.path, "--input", wav.path, "--socket", sandbox.socket, "--foreground"]
        daemon.environment = DaemonEndToEndTests.environment(home: sandbox.home)
        let out = Pipe(), err = Pipe()
        daemon.standardOutput = out
        daemon.standardError = err
        try daemon.run()
        let watchdog = DispatchWorkItem { if daemon.isRunning { daemon.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + 90, execute: watchdog)
        var collected = ""
        #expect(DaemonEndToEndTests.waitForLine(#""type":"detection","group":"snoring""#, in: out.fileHandleForReading, seconds: 40, collected: &collected))
        try (base + (changeGate ? "[analysis]\ngate_dbfs = -60\n" : "[sleep]\nthreshold = 0.35\n"))
            .write(to: config, atomically: true, encoding: .utf8)
        kill(daemon.processIdentifier, SIGHUP)
        daemon.waitUntilExit()
        watchdog.cancel()
        #expect(daemon.terminationStatus == 0)
        collected += String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let log = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(log.contains("earshotd: configuration reloaded: watching snoring"), "\(log)")
        let events = collected.split(separator: "\n").map { DaemonEndToEndTests.parse(String($0)) }
            .filter { $0["group"] as? String == "snoring" }
        let onset = try #require(events.first { $0["type"] as? String == "detection" }, "\(collected)")
        let first = try #require(events.first { $0["type"] as? String == "detection_end" }, "\(collected)")
        #expect(first["start"] as? Double == onset["stream_time"] as? Double)
        if changeGate {
            #expect(first["reason"] as? String == "reload")
        } else {
            // One event from the first snores to the end of the input, as without the reload.
            #expect(events.map { $0["type"] as? String ?? "" } == ["detection", "detection_end"], "\(collected)")
            #expect(first["reason"] as? String != "reload", "\(collected)")
        }
    }

    /// `raw` (16-bit little-endian mono samples) as a WAV file.
    static func pcm16WAV(_ raw: Data, sampleRate: Int) -> Data {
        var data = Data()
        func u32(_ value: Int) { withUnsafeBytes(of: UInt32(value).littleEndian) { data.append(contentsOf: $0) } }
        func u16(_ value: Int) { withUnsafeBytes(of: UInt16(value).littleEndian) { data.append(contentsOf: $0) } }
        data.append(contentsOf: Array("RIFF".utf8))
        u32(36 + raw.count)
        data.append(contentsOf: Array("WAVEfmt ".utf8))
        u32(16)
        u16(1)
        u16(1)
        u32(sampleRate)
        u32(sampleRate * 2)
        u16(2)
        u16(16)
        data.append(contentsOf: Array("data".utf8))
        u32(raw.count)
        return data + raw
    }
}
