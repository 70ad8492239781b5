import Foundation
import Testing
import Synchronization

import Earshot
import EarshotOutputs
import EarshotService
import EarshotTools

/// The daemon's start and stop in order (audit 12 #5, #6, #7, #10): a SIGTERM during the start stops every sink,
/// `sleep_stop` does not hold the socket's queue while its report is written, a slow disk does not hold the stop, and
/// the sleep service starts no session once the stop has stopped it. Real earshotd processes where the race can be
/// reached from outside; the components themselves where it cannot.
@Suite("earshotd start and stop order", .serialized)
struct StartStopOrderTests {
    static let demo = TestPaths.packageRoot.appendingPathComponent("samples/demo.flac").path

    static func scratch() throws -> URL {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("earshot-order-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    /// An earshotd on the demo in real time with `[sleep] report_dir` in `directory`, once its socket exists.
    static func startSleepDaemon(in directory: URL) throws -> (daemon: Process, errors: Pipe, socket: String, reports: String) {
        let socket = directory.appendingPathComponent("s.sock").path
        let reports = directory.appendingPathComponent("sleep").path
        let config = directory.appendingPathComponent("c.conf").path
        try "[sleep]\nreport_dir = \(reports)\n".write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = Process()
        daemon.executableURL = try #require(EarshotdRun.executable)
        daemon.arguments = ["--config", config, "--input", Self.demo, "--socket", socket, "--no-journal"]
        daemon.environment = DaemonEndToEndTests.environment(home: directory)
        let errors = Pipe()
        daemon.standardOutput = FileHandle.nullDevice
        daemon.standardError = errors
        try daemon.run()
        #expect(TestWait.until(seconds: 20) { FileManager.default.fileExists(atPath: socket) })
        return (daemon, errors, socket, reports)
    }

    /// Asks for the running session's status until it has heard audio (a report needs some: the status counts it
    /// in tenths of a minute); false when it has not after 100 tries.
    static func sessionHeardAudio(_ client: EventSubscriber) throws -> Bool {
        for _ in 0..<100 {
            try client.send(line: #"{"cmd":"sleep_status"}"#)
            guard let line = try client.nextLine(timeoutSeconds: 20, where: { $0.hasPrefix(#"{"type":"sleep","#) }) else { return false }
            if line.hasPrefix(#"{"type":"sleep","state":"running""#) && !line.contains(#""minutes":0.0,"#) { return true }
            usleep(200_000)
        }
        return false
    }

    /// Asks for the daemon's status until it has analysed a window (its start has then looked for a session marker,
    /// on the analysis queue before the first window, and removed a FIFO there); false when it has not after 100 tries.
    static func analysing(_ client: EventSubscriber) throws -> Bool {
        let statusReply: @Sendable (String) -> Bool = { $0.hasPrefix(#"{"type":"status","#) }
        for _ in 0..<100 {
            try client.send(line: #"{"status":true}"#)
            guard let line = try client.nextLine(timeoutSeconds: 20, where: statusReply) else { return false }
            if ((try? JSONValue.parse(line))?["windows"]?.intValue ?? 0) > 0 { return true }
            usleep(100_000)
        }
        return false
    }

    /// A FIFO made at `path` and held open for reading and writing by the test, its pipe filled: a reader that takes
    /// nothing yet, so that a write into it waits for room (as on a disk that does not answer), for at most
    /// `OutputFile.writePrivate`'s reader patience (5 s). Returns the descriptor and the bytes filled in.
    static func heldFullFIFO(_ path: String) throws -> (descriptor: Int32, filled: Int) {
        #expect(mkfifo(path, 0o600) == 0)
        let descriptor = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC)
        try #require(descriptor >= 0)
        let block = [UInt8](repeating: UInt8(ascii: "x"), count: 4096)
        var filled = 0
        while true {
            let count = write(descriptor, block, block.count)
            guard count > 0 else { break }
            filled += count
        }
        #expect(errno == EAGAIN)
        return (descriptor, filled)
    }

    // The signal lands in the start: it is held (blocked) until the daemon's signal sources are registered at the top
    // of `run()`, and the rest of the start runs after that. Before the fix the stop raced it and often found the
    // outputs not started yet: the socket file stayed behind (8 of 10 runs on the build machine).
    @Test("SIGTERM the moment the socket appears, 10 times: each run stops every sink (socket file removed), logs stopped (signal 15) last, exits 0",
          .needsEarshotdBuilt)
    func sigtermDuringTheStart() throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        for run in 1...10 {
            let socket = directory.appendingPathComponent("s\(run).sock").path
            let daemon = Process()
            daemon.executableURL = try #require(EarshotdRun.executable)
            daemon.arguments = ["--input", "-", "--socket", socket, "--no-journal"]
            daemon.environment = DaemonEndToEndTests.environment(home: directory)
            let input = Pipe()
            let errors = Pipe()
            daemon.standardInput = input
            daemon.standardOutput = FileHandle.nullDevice
            daemon.standardError = errors
            try daemon.run()
            #expect(TestWait.until(seconds: 20) { FileManager.default.fileExists(atPath: socket) }, "run \(run)")
            kill(daemon.processIdentifier, SIGTERM)
            let ended = TestWait.until(seconds: 20) { !daemon.isRunning }
            if !ended { kill(daemon.processIdentifier, SIGKILL) }
            daemon.waitUntilExit()
            let log = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            #expect(ended, "run \(run): \(log)")
            #expect(daemon.terminationStatus == 0, "run \(run): \(log)")
            #expect(log.hasSuffix("earshotd: stopped (signal 15)\n"), "run \(run): \(log)")
            #expect(!FileManager.default.fileExists(atPath: socket), "run \(run): the socket file was left: \(log)")
            try? input.fileHandleForWriting.close()
        }
    }

    // The report queue is held by a FIFO at the session marker's name whose pipe is full: `sleep_start` queues the
    // marker's write, which waits for room until the test reads, and `sleep_start`'s reply (given once the marker is
    // written) with it. Before the fix the socket's queue waited for such writes (sleep_stop's report), and no other
    // client was answered.
    @Test("sleep_start while its marker cannot be written yet: another client's status is answered meanwhile; the start's reply comes once the marker is written, the stop's once the report is, naming its files",
          .needsEarshotdBuilt)
    func sleepCommandsDoNotHoldTheSocket() throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (daemon, errors, socket, reports) = try Self.startSleepDaemon(in: directory)
        defer { if daemon.isRunning { kill(daemon.processIdentifier, SIGKILL) } }
        // Both also get the daemon's events and health lines: each reply is picked out by its type.
        let stopper = try EventSubscriber(path: socket)
        let other = try EventSubscriber(path: socket)
        let sleepReply: @Sendable (String) -> Bool = { $0.hasPrefix(#"{"type":"sleep","#) }
        let statusReply: @Sendable (String) -> Bool = { $0.hasPrefix(#"{"type":"status","#) }
        // The FIFO only once the daemon has analysed audio: its start looks for a marker (and removes a FIFO there),
        // on the analysis queue before the first window.
        try #require(try Self.analysing(other))
        try FileManager.default.createDirectory(atPath: reports, withIntermediateDirectories: true)
        let marker = reports + "/" + SleepService.markerName
        let (held, filled) = try Self.heldFullFIFO(marker)
        defer { close(held) }

        // sleep_start replies once its marker is written (its reply would carry `marker_warning` otherwise): the
        // write waits for room in the FIFO (up to 5 s), and the socket answers the other client meanwhile.
        try stopper.send(line: #"{"cmd":"sleep_start"}"#)
        try other.send(line: #"{"status":true}"#)
        guard let status = try other.nextLine(timeoutSeconds: 20, where: statusReply) else {
            Issue.record("the status request was not answered while sleep_start waited for its marker")
            return
        }
        #expect(status.contains(#""capture":"live""#), "\(status)")
        // The marker is still waiting for room in the FIFO: no reply yet (only events and health lines).
        var early: [String] = []
        while case .line(let line) = try stopper.readLine(timeoutSeconds: 0) { early.append(line) }
        #expect(!early.contains(where: sleepReply), "\(early)")

        // The test reads what it filled in, and the marker's line after it.
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !received.dropFirst(filled).contains(UInt8(ascii: "\n")) {
            var poller = pollfd(fd: held, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 20_000) == 1 else { break }
            let count = read(held, &buffer, buffer.count)
            if count < 0, errno == EAGAIN { continue }
            guard count > 0 else { break }
            received += buffer[0..<count]
        }
        let markerText = String(decoding: received.dropFirst(filled), as: UTF8.self)
        #expect(markerText.hasPrefix(#"{"start":""#) && markerText.hasSuffix("\"scheduled\":false}\n"), "\(markerText)")
        guard let started = try stopper.nextLine(timeoutSeconds: 20, where: sleepReply) else {
            Issue.record("no reply to sleep_start once its marker was read")
            return
        }
        #expect(started.hasPrefix(#"{"type":"sleep","state":"started","start":""#), "\(started)")
        #expect(!started.contains("marker_warning"), "\(started)")

        try #require(try Self.sessionHeardAudio(other))

        // sleep_stop's reply comes from the same report queue once the report is written, and names its files.
        try stopper.send(line: #"{"cmd":"sleep_stop"}"#)
        guard let stopped = try stopper.nextLine(timeoutSeconds: 20, where: sleepReply) else {
            Issue.record("no reply to sleep_stop")
            return
        }
        let reply = try JSONValue.parse(stopped)
        #expect(reply["state"]?.stringValue == "stopped", "\(stopped)")
        let json = try #require(reply["report_json"]?.stringValue, "\(stopped)")
        let svg = try #require(reply["report_svg"]?.stringValue, "\(stopped)")
        #expect(json.hasPrefix(reports + "/snore-") && json.hasSuffix(".json"))
        #expect(svg == String(json.dropLast(5)) + ".svg")
        #expect(FileManager.default.fileExists(atPath: json) && FileManager.default.fileExists(atPath: svg))
        // A stop by command removes the marker (here the FIFO).
        #expect(!FileManager.default.fileExists(atPath: marker))

        kill(daemon.processIdentifier, SIGTERM)
        #expect(TestWait.until(seconds: 20) { !daemon.isRunning })
        daemon.waitUntilExit()
        let log = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(daemon.terminationStatus == 0, "\(log)")
        #expect(log.hasSuffix("earshotd: stopped (signal 15)\n"), "\(log)")
    }

    // A disk that does not answer, made by a full FIFO at the session marker's name once the session has started: the
    // stop's report is written and its marker's write waits for room (5 s, past the stop's 3.75 s). Before the fix
    // the stop waited for the report queue until the 4 s deadline, and the socket's goodbye never went out.
    @Test("SIGTERM while a sleep session's marker cannot be written: the snore_report line and the socket's shutdown line still go out, the stop names the directory at 3.75 s and ends with stopped (signal 15), exit 0",
          .needsEarshotdBuilt)
    func aStuckSleepReportDoesNotHoldTheStop() throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (daemon, errors, socket, reports) = try Self.startSleepDaemon(in: directory)
        defer { if daemon.isRunning { kill(daemon.processIdentifier, SIGKILL) } }
        let client = try EventSubscriber(path: socket)
        let sleepReply: @Sendable (String) -> Bool = { $0.hasPrefix(#"{"type":"sleep","#) }
        try client.send(line: #"{"cmd":"sleep_start"}"#)
        let started = try client.nextLine(timeoutSeconds: 20, where: sleepReply)
        #expect(started?.hasPrefix(#"{"type":"sleep","state":"started","#) == true, "\(started ?? "no reply")")
        try #require(try Self.sessionHeardAudio(client))
        let marker = reports + "/" + SleepService.markerName
        #expect(unlink(marker) == 0)
        let (held, _) = try Self.heldFullFIFO(marker)
        defer { close(held) }

        kill(daemon.processIdentifier, SIGTERM)
        var lines: [String] = []
        while case .line(let line) = try client.readLine(timeoutSeconds: 20) {
            lines.append(line)
            if line == #"{"type":"shutdown"}"# { break }
        }
        #expect(lines.last == #"{"type":"shutdown"}"#, "\(lines)")
        #expect(lines.contains { $0.hasPrefix(#"{"type":"snore_report","#) }, "\(lines)")
        #expect(TestWait.until(seconds: 20) { !daemon.isRunning })
        daemon.waitUntilExit()
        let log = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(daemon.terminationStatus == 0, "\(log)")
        #expect(log.contains("earshotd: \(reports) had not taken the sleep report and session marker 3.75 s into the stop (the report's content went out as the snore_report line); check that disk\n"), "\(log)")
        #expect(!log.contains("stop did not finish"), "\(log)")
        #expect(log.hasSuffix("earshotd: stopped (signal 15)\n"), "\(log)")
        // The report's own files were written before the marker's write stuck.
        let written = try FileManager.default.contentsOfDirectory(atPath: reports).filter { $0.hasPrefix("snore-") }.sorted()
        #expect(written.count == 2 && written.allSatisfy { $0.hasSuffix(".json") || $0.hasSuffix(".svg") }, "\(written)")
    }

    // Audit 14 F5: a FIFO that no process reads, put at the marker's name while the daemon runs, held the report queue
    // for good: open(2) waited for a reader, and no sleep command was answered again.
    @Test("a FIFO no process reads at the session marker's name: sleep_start is answered at once with marker_warning naming it, sleep_stop with the report's files; the stop does not wait for it",
          .needsEarshotdBuilt)
    func aFIFOWithoutReaderHoldsNothing() throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (daemon, errors, socket, reports) = try Self.startSleepDaemon(in: directory)
        defer { if daemon.isRunning { kill(daemon.processIdentifier, SIGKILL) } }
        let client = try EventSubscriber(path: socket)
        let sleepReply: @Sendable (String) -> Bool = { $0.hasPrefix(#"{"type":"sleep","#) }
        try #require(try Self.analysing(client))
        try FileManager.default.createDirectory(atPath: reports, withIntermediateDirectories: true)
        let marker = reports + "/" + SleepService.markerName
        #expect(mkfifo(marker, 0o600) == 0)
        let warning = "cannot write the sleep session marker \(marker): it is a FIFO that no process reads (remove it; earshotd writes its own file there)"

        try client.send(line: #"{"cmd":"sleep_start"}"#)
        let started = try #require(try client.nextLine(timeoutSeconds: 20, where: sleepReply))
        let startReply = try JSONValue.parse(started)
        #expect(startReply["state"]?.stringValue == "started", "\(started)")
        #expect(startReply["marker_warning"]?.stringValue == warning, "\(started)")
        try #require(try Self.sessionHeardAudio(client))
        try client.send(line: #"{"cmd":"sleep_stop"}"#)
        let stopped = try #require(try client.nextLine(timeoutSeconds: 20, where: sleepReply))
        let stopReply = try JSONValue.parse(stopped)
        #expect(stopReply["state"]?.stringValue == "stopped", "\(stopped)")
        let json = try #require(stopReply["report_json"]?.stringValue, "\(stopped)")
        #expect(FileManager.default.fileExists(atPath: json))
        // A stop by command removes the marker (here the FIFO); a second session writes a regular one.
        #expect(SymbolicLinkTests.mode(marker) == nil)
        try client.send(line: #"{"cmd":"sleep_start"}"#)
        let again = try #require(try client.nextLine(timeoutSeconds: 20, where: sleepReply))
        #expect(again.hasPrefix(#"{"type":"sleep","state":"started","start":""#) && !again.contains("marker_warning"), "\(again)")
        #expect(SymbolicLinkTests.mode(marker) == S_IFREG | 0o600)

        kill(daemon.processIdentifier, SIGTERM)
        #expect(TestWait.until(seconds: 20) { !daemon.isRunning })
        daemon.waitUntilExit()
        let log = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(daemon.terminationStatus == 0, "\(log)")
        #expect(log.split(separator: "\n").filter { $0.contains("marker") } == ["earshotd: \(warning)"], "\(log)")
        #expect(!log.contains("had not taken"), "\(log)")
        #expect(log.hasSuffix("earshotd: stopped (signal 15)\n"), "\(log)")
    }

    // A disk that does not keep up, made by the writer's own `saved` callback, which runs on its queue after each
    // clip: while it waits, the queue is as busy as on a disk that takes that long.
    @Test("clips at the stop on a slow disk: finishWrites waits only until its deadline, the clips held then are written by close(deadline:), and those still not written by its deadline are named, oldest first")
    func clipsOnASlowDisk() throws {
        let scratch = try ClipScratch()
        defer { scratch.remove() }
        var settings = DaemonConfiguration.Clips()
        settings.directory = scratch.path + "/clips"
        let log = ClipWriterLog()
        let entered = DispatchSemaphore(value: 0)
        let release = [DispatchSemaphore(value: 0), DispatchSemaphore(value: 0)]
        let writer = ClipWriter(settings: settings, now: { ClipTests.evening }, report: log.report, saved: { clip in
            log.save(clip)
            entered.signal()
            // smoke_alarm's (stream time 2 s) and baby_cry's (3 s) wait for the test.
            if clip.eventStart < 3.5 { release[Int(clip.eventStart) - 2].wait() }
        })
        writer.flush()
        writer.save(ClipTests.clip("smoke_alarm", seconds: 1, first: 16_000))
        writer.save(ClipTests.clip("baby_cry", seconds: 1, first: 32_000))
        writer.save(ClipTests.clip("glass_break", seconds: 1, first: 48_000))
        entered.wait()
        // smoke_alarm's is written and its callback waits: the deadline passes.
        #expect(writer.finishWrites(until: .now() + .milliseconds(20)) == false)
        release[0].signal()
        // baby_cry's is written once close lets the held clips go, and its callback waits past close's deadline:
        // it and glass_break's (not begun) are not saved by then.
        let unsaved = writer.close(deadline: .now() + .milliseconds(200))
        #expect(unsaved == ["baby_cry at stream time 3.00 s", "glass_break at stream time 4.00 s"])
        entered.wait()
        release[1].signal()
        writer.flush()
        // glass_break's was never begun.
        #expect(log.saved.map(\.group) == ["smoke_alarm", "baby_cry"])
        #expect(log.reports.isEmpty)
        #expect(EarshotDaemon.unsavedClipsLine(unsaved, directory: settings.directory)
            == "2 clips were not saved: \(settings.directory) had not taken them 3.75 s into the stop (baby_cry at stream time 3.00 s, glass_break at stream time 4.00 s); check that disk")
        #expect(EarshotDaemon.unsavedClipsLine(["smoke_alarm at stream time 12.30 s"], directory: "/var/lib/earshot/clips")
            == "1 clip was not saved: /var/lib/earshot/clips had not taken it 3.75 s into the stop (smoke_alarm at stream time 12.30 s); check that disk")

        // A disk that keeps up: everything is written within the first deadline, nothing is named.
        let quick = ClipWriterLog()
        let second = ClipWriter(settings: settings, now: { ClipTests.evening }, report: quick.report, saved: quick.save)
        second.save(ClipTests.clip("co_alarm", seconds: 1, first: 64_000))
        #expect(second.finishWrites(until: .now() + .seconds(20)))
        #expect(second.close(deadline: .now() + .seconds(20)) == [])
        #expect(quick.saved.map(\.group) == ["co_alarm"])
    }

    @Test("the stop is final for sleep sessions: after shutDown neither the schedule's check nor a reload's reconfigure starts one, and the marker keeps the stopped session's end")
    func sleepStopIsFinal() throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        // A window that is open all day but a minute: the test's instant is inside it.
        var settings = try SleepScheduleTests.settings("00:00-23:59")
        settings.reportDirectory = directory.appendingPathComponent("sleep").path
        let queue = DispatchQueue(label: "test.analysis")
        let now = try SleepScheduleTests.date("2026-12-06T12:00:00Z")
        let service = SleepService(analysisQueue: queue, settings: settings, timeZone: try #require(TimeZone(identifier: "UTC")),
                                   publishReport: { _ in }, log: { _, _ in }, clock: { now })
        // Started by hand inside the window, stopped by the daemon's stop (no audio: no report, the marker says so).
        queue.sync {
            #expect(service.start(at: now, scheduled: false)["state"]?.stringValue == "started")
            service.stop(at: now.addingTimeInterval(60), reason: .shutdown)
            service.shutDown()
            service.checkSchedule(now: now.addingTimeInterval(61))
            service.reconfigure(settings)
            #expect(!service.isActive)
            #expect(service.start(at: now.addingTimeInterval(62), scheduled: false)
                == ["type": "error", "message": .string(SleepService.shutDownMessage)])
        }
        service.flushReports()
        let marker = try String(contentsOfFile: settings.reportDirectory + "/" + SleepService.markerName, encoding: .utf8)
        #expect(marker == #"{"start":"2026-12-06T12:00:00.000Z","end":"2026-12-06T12:01:00.000Z","report_error":"it heard no audio"}"# + "\n")
        #expect(SleepService.shutDownMessage == "the daemon is stopping")
    }
}
