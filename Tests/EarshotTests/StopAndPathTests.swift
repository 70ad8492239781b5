import Foundation
import Testing

import Earshot
import EarshotOutputs
import EarshotService

/// A pipe whose buffer the test can fill completely without touching the child's end: the filler opens the write
/// end anew (`/proc/self/fd/N`), a file description of its own, so `O_NONBLOCK` on it leaves the child's writes
/// blocking (as they are on a real pipe nobody reads).
final class StuffedPipe {
    let readFD: Int32
    let writeFD: Int32

    init() throws {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw POSIXError(.EMFILE) }
        readFD = fds[0]
        writeFD = fds[1]
        _ = fcntl(readFD, F_SETFD, FD_CLOEXEC)
    }

    /// Writes until the pipe holds all it can; returns the bytes written.
    @discardableResult
    func fill() -> Int {
        let filler = open("/proc/self/fd/\(writeFD)", O_WRONLY | O_NONBLOCK | O_CLOEXEC)
        guard filler >= 0 else { return 0 }
        defer { close(filler) }
        let block = [UInt8](repeating: UInt8(ascii: "#"), count: 4096)
        var total = 0
        while true {
            let count = block.withUnsafeBytes { write(filler, $0.baseAddress, $0.count) }
            if count > 0 { total += count; continue }
            if count < 0, errno == EINTR { continue }
            // A last partial block: single bytes until the pipe takes no more.
            while write(filler, block, 1) == 1 { total += 1 }
            return total
        }
    }

    /// Reads what is there now, without waiting.
    func drain() -> Data {
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            var poller = pollfd(fd: readFD, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 0) == 1, poller.revents & Int16(POLLIN) != 0 else { return data }
            let count = read(readFD, &buffer, buffer.count)
            guard count > 0 else { return data }
            data.append(contentsOf: buffer[0..<count])
        }
    }

    deinit {
        close(readFD)
        close(writeFD)
    }
}

@Suite("Stopping and paths: a FIFO never hangs a check or a reload, SIGTERM always ends the daemon within 5 s", .serialized)
struct StopAndPathTests {
    struct Scratch {
        let directory: URL
        init() throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-stop-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        }
        func path(_ name: String) -> String { directory.appendingPathComponent(name).path }
        func remove() { try? FileManager.default.removeItem(at: directory) }
    }

    /// Runs earshotd with `arguments`, killed (SIGKILL) after `seconds`: its status, stderr and whether it was killed.
    static func runDaemon(_ arguments: [String], seconds: Double) throws -> (status: Int32, error: String, killed: Bool) {
        let process = Process()
        process.executableURL = try #require(EarshotdRun.executable)
        process.arguments = arguments
        let error = Pipe()
        process.standardOutput = FileHandle.nullDevice
        process.standardError = error
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let ended = TestWait.until(seconds: seconds) { !process.isRunning }
        if !ended { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        let text = String(decoding: error.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        return (process.terminationStatus, text, !ended)
    }

    @Test("paths of the wrong kind: each key is one line with file:line, its kind and the fix (78); a FIFO model is refused at once", .needsEarshotdBuilt)
    func wrongKinds() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let fifo = scratch.path("model.earshot")
        #expect(mkfifo(fifo, 0o600) == 0)
        let cases: [(String, Int32, String)] = [
            ("[models]\nfiles = \(fifo)\n", 66,
             "c.conf:2: [models] files: cannot open head model \(fifo): is a FIFO (named pipe), not a regular file (check the path, or remove it from [models] files)"),
            ("[sleep]\nmodel = /dev/zero\n", 78,
             "c.conf:2: [sleep] model = /dev/zero: is a character device, not a regular file (name a head model file made by earshot train)"),
            ("[sleep]\nmodel = \(scratch.path("none.earshot"))\n", 78,
             "c.conf:2: [sleep] model = \(scratch.path("none.earshot")): no such file (check the path, or leave [sleep] model empty for the built-in scores)"),
            ("[history]\npath = \(fifo)\n", 78,
             "c.conf:2: [history] path = \(fifo): is a FIFO (named pipe), not a database file (set [history] path to a regular file, e.g. /var/lib/earshot/history.sqlite3)"),
            ("[sleep]\nreport_dir = /dev/null\n", 78,
             "c.conf:2: [sleep] report_dir = /dev/null: is a character device, not a directory (set [sleep] report_dir to a directory, e.g. /var/lib/earshot/sleep)"),
            ("[output]\nsocket = \(scratch.directory.path)\n", 78,
             "c.conf:2: [output] socket = \(scratch.directory.path): is a directory, not a socket (remove it, or choose another socket path)"),
            // Control characters from the file are escaped in the line (no terminal codes reach the screen or the log).
            ("[capture]\nbogus\u{1B}[31m = 1\n", 78,
             "c.conf:2: [capture] bogus\\x1B[31m: unknown key (keys: device, input, input_rate)"),
        ]
        let config = scratch.path("c.conf")
        for (text, status, line) in cases {
            try text.write(toFile: config, atomically: true, encoding: .utf8)
            let run = try Self.runDaemon(["--check-config", "--config", config], seconds: 10)
            #expect(!run.killed, "\(text)")
            #expect(run.status == status, "\(text)")
            #expect(run.error == "earshotd: \(line.replacingOccurrences(of: "c.conf", with: config))\n", "\(text)")
        }
        // The reader refuses a FIFO without waiting for a writer.
        #expect(throws: RegularFile.Failure.notRegularFile(.fifo)) { _ = try RegularFile.read(fifo, limit: 100) }
        #expect(throws: RegularFile.Failure.notRegularFile(.characterDevice)) { _ = try RegularFile.read("/dev/zero", limit: 100) }
    }

    /// A daemon on standard input (it waits for audio and runs until stopped) with `--foreground`.
    static func foregroundDaemon(config: String, socket: String, standardOutput: FileHandle, standardError: FileHandle)
        throws -> (process: Process, input: Pipe)
    {
        let process = Process()
        process.executableURL = try #require(EarshotdRun.executable)
        process.arguments = ["--config", config, "--input", "-", "--socket", socket, "--foreground", "--no-journal"]
        process.environment = DaemonEndToEndTests.environment(home: URL(fileURLWithPath: (socket as NSString).deletingLastPathComponent))
        let input = Pipe()
        process.standardInput = input
        process.standardOutput = standardOutput
        process.standardError = standardError
        try process.run()
        return (process, input)
    }

    /// Sends SIGTERM; the seconds until the process ended (SIGKILL after 15 s: then more than 15).
    static func secondsToStop(_ process: Process) -> Double {
        let sent = Date()
        kill(process.processIdentifier, SIGTERM)
        if !TestWait.until(seconds: 15, { !process.isRunning }) {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            return 99
        }
        process.waitUntilExit()
        return Date().timeIntervalSince(sent)
    }

    @Test("SIGHUP with a FIFO in [models] files: the reload fails at once with its line, and SIGTERM stops the daemon (status 0)", .needsEarshotdBuilt)
    func reloadWithAFIFO() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let fifo = scratch.path("model.earshot")
        #expect(mkfifo(fifo, 0o600) == 0)
        let config = scratch.path("earshotd.conf")
        try "[detection]\nwatch = smoke_alarm\n[history]\nenabled = false\n".write(toFile: config, atomically: true, encoding: .utf8)
        let errors = Pipe()
        let (process, input) = try Self.foregroundDaemon(
            config: config, socket: scratch.path("e.sock"), standardOutput: FileHandle.nullDevice,
            standardError: errors.fileHandleForWriting)
        defer { try? input.fileHandleForWriting.close() }
        let log = LineCollector(errors.fileHandleForReading)
        #expect(TestWait.until(seconds: 20) { FileManager.default.fileExists(atPath: scratch.path("e.sock")) })
        try "[detection]\nwatch = smoke_alarm\n[history]\nenabled = false\n[models]\nfiles = \(fifo)\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        kill(process.processIdentifier, SIGHUP)
        let failure = "earshotd: health config_reload_failed: \(config):6: [models] files: cannot open head model \(fifo): is a FIFO (named pipe), not a regular file (check the path, or remove it from [models] files); running the previous configuration"
        #expect(TestWait.until(seconds: 10) { log.lines.contains(failure) }, "\(log.lines)")
        let seconds = Self.secondsToStop(process)
        #expect(seconds < 5, "stopped after \(seconds) s")
        #expect(process.terminationStatus == 0)
        #expect(TestWait.until(seconds: 2) { log.lines.last == "earshotd: stopped (signal 15)" }, "\(log.lines)")
    }

    // Before audit 13 #3 the stdout sink blocked in write(2) and the stop ran into its 4 s deadline ("still delivering
    // outputs to the sinks"); the sink now writes on a queue of its own, and the router never waits for it.
    @Test("stdout a full pipe nobody reads: SIGTERM still stops the daemon in order before the 4 s stop deadline, exit 0, stopped (signal 15) last", .needsEarshotdBuilt)
    func blockedSink() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let config = scratch.path("earshotd.conf")
        try "[detection]\nwatch = smoke_alarm\n[history]\nenabled = false\n".write(toFile: config, atomically: true, encoding: .utf8)
        let output = try StuffedPipe()
        #expect(output.fill() >= 4096)
        let errors = Pipe()
        let (process, input) = try Self.foregroundDaemon(
            config: config, socket: scratch.path("e.sock"),
            standardOutput: FileHandle(fileDescriptor: output.writeFD, closeOnDealloc: false),
            standardError: errors.fileHandleForWriting)
        defer { try? input.fileHandleForWriting.close() }
        let log = LineCollector(errors.fileHandleForReading)
        // Standard input gives audio: the first health line (capture_live) blocks the stdout sink for good.
        #expect(TestWait.until(seconds: 20) { FileManager.default.fileExists(atPath: scratch.path("e.sock")) })
        input.fileHandleForWriting.write(Data(count: 32_000))
        Thread.sleep(forTimeInterval: 1)
        let seconds = Self.secondsToStop(process)
        #expect(seconds < 3.9, "stopped after \(seconds) s")
        #expect(process.terminationStatus == 0)
        #expect(TestWait.until(seconds: 2) { log.lines.last == "earshotd: stopped (signal 15)" }, "\(log.lines)")
        #expect(!log.lines.contains { $0.contains("stop did not finish") }, "\(log.lines)")
    }

    @Test("a reload that cannot finish (its log line waits on a full stderr): SIGTERM still ends the daemon within 5 s", .needsEarshotdBuilt)
    func blockedReload() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let config = scratch.path("earshotd.conf")
        try "[detection]\nwatch = smoke_alarm\n[history]\nenabled = false\n".write(toFile: config, atomically: true, encoding: .utf8)
        let errors = try StuffedPipe()
        let (process, input) = try Self.foregroundDaemon(
            config: config, socket: scratch.path("e.sock"), standardOutput: FileHandle.nullDevice,
            standardError: FileHandle(fileDescriptor: errors.writeFD, closeOnDealloc: false))
        defer { try? input.fileHandleForWriting.close() }
        #expect(TestWait.until(seconds: 20) { FileManager.default.fileExists(atPath: scratch.path("e.sock")) })
        Thread.sleep(forTimeInterval: 0.5)
        _ = errors.drain()
        #expect(errors.fill() > 0)
        kill(process.processIdentifier, SIGHUP)  // the reload's "configuration reloaded" line now waits forever
        Thread.sleep(forTimeInterval: 1)
        #expect(process.isRunning)
        let seconds = Self.secondsToStop(process)
        #expect(seconds < 5, "stopped after \(seconds) s")
        #expect(process.terminationStatus == 0)
    }
}

/// Collects the lines a pipe's reader gets, as they arrive.
final class LineCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var pending = Data()
    private var collected: [String] = []

    init(_ handle: FileHandle) {
        handle.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            guard let self, !data.isEmpty else { return }
            self.lock.lock()
            self.pending.append(data)
            while let newline = self.pending.firstIndex(of: 0x0A) {
                self.collected.append(String(decoding: self.pending[self.pending.startIndex..<newline], as: UTF8.self))
                self.pending.removeSubrange(self.pending.startIndex...newline)
            }
            self.lock.unlock()
        }
    }

    var lines: [String] {
        lock.lock()
        defer { lock.unlock() }
        return collected
    }
}
