import Foundation
import Glibc
import Synchronization
import Testing
import EarshotOutputs
import EarshotService
import EarshotTools

/// `earshotd --foreground` whose standard output nobody reads (a pager, a terminal stopped with Ctrl-S, a log
/// collector that hangs; audit 13 #3): before the fix the stop waited for it without end, and the socket's
/// `shutdown` line, MQTT's `offline` and the notifications' `stopping` never went out. A real earshotd, its stdout a
/// pipe the test never reads.
@Suite("StuckStandardOutput: a standard output nobody reads never holds the stop", .serialized)
struct StuckStandardOutputTests {
    /// `cycles` of 1 s of a 1 kHz sine at half scale (-9 dBFS) and 3 s of silence: one `loud` event each, 16 kHz
    /// S16_LE.
    static func loudBursts(cycles: Int) -> Data {
        let cycle = SyntheticAudio.pcm(SyntheticAudio.sine(seconds: 1, amplitude: 0.5) + SyntheticAudio.silence(seconds: 3))
        var data = Data(capacity: cycle.count * cycles)
        for _ in 0..<cycles { data.append(cycle) }
        return data
    }

    @Test("earshotd --foreground, stdout a 4 KiB pipe nobody reads: stdout's lines beyond 16 KiB waiting are dropped and said once to the socket (output_behind, output stdout, dropped 1); SIGTERM: the subscriber's last line is {\"type\":\"shutdown\"}, exit 0, the socket file removed, no stop deadline",
          .needsEarshotdBuilt)
    func stuckStandardOutput() throws {
        // Writing audio to a daemon that has exited fails with EPIPE instead of killing the test process.
        signal(SIGPIPE, SIG_IGN)
        let scratch = try DaemonScratch(
            ["[detection]", "watch = loud", "[group.loud]", "level_dbfs = -30", "min_seconds = 0", "hold_seconds = 1"])
        defer { scratch.remove() }
        var output: [Int32] = [0, 0]
        try #require(pipe(&output) == 0)
        defer { close(output[0]) }  // never read
        #expect(fcntl(output[1], 1031 /* F_SETPIPE_SZ */, 4096) == 4096)
        let errors = scratch.directory.appendingPathComponent("stderr.txt")
        _ = FileManager.default.createFile(atPath: errors.path, contents: nil)
        let errorHandle = try FileHandle(forWritingTo: errors)
        let input = Pipe()
        let daemon = Process()
        daemon.executableURL = try #require(EarshotdRun.executable)
        daemon.arguments = ["--config", scratch.config.path, "--input", "-", "--input-speed", "max", "--foreground"]
        daemon.environment = DaemonEndToEndTests.environment(home: scratch.directory)
        daemon.standardInput = input
        daemon.standardOutput = FileHandle(fileDescriptor: output[1], closeOnDealloc: false)
        daemon.standardError = errorHandle
        try daemon.run()
        close(output[1])
        try errorHandle.close()
        defer { if daemon.isRunning { kill(daemon.processIdentifier, SIGKILL) } }
        func errorText() -> String { (try? String(contentsOf: errors, encoding: .utf8)) ?? "" }
        #expect(TestWait.until(seconds: 30) { FileManager.default.fileExists(atPath: scratch.socket) }, "\(errorText())")
        let client = try EventSubscriber(path: scratch.socket)

        // Audio on a thread of its own, as fast as the daemon takes it, until the daemon has said that stdout is
        // behind: an event every 4 s of audio, two lines (about 360 bytes) each, so about 60 events fill the pipe's
        // 4 KiB and the 16 KiB waiting.
        let feeding = Atomic<Bool>(true)
        let fed = DispatchSemaphore(value: 0)
        let writeEnd = input.fileHandleForWriting.fileDescriptor
        let bursts = Self.loudBursts(cycles: 10)
        Thread.detachNewThread {
            defer { fed.signal() }
            for _ in 0..<30 where feeding.load(ordering: .relaxed) {
                let complete = bursts.withUnsafeBytes { raw -> Bool in
                    var offset = 0
                    while offset < raw.count {
                        let written = write(writeEnd, raw.baseAddress! + offset, raw.count - offset)
                        if written < 0, errno == EINTR { continue }
                        guard written > 0 else { return false }
                        offset += written
                    }
                    return true
                }
                if !complete { return }
            }
        }
        // The health line about stdout, skipping the detections and the other health lines (300 events at most).
        let behind = try client.nextLine(timeoutSeconds: 120) { line in
            let object = DaemonEndToEndTests.parse(line)
            return object["state"] as? String == "output_behind" && object["output"] as? String == "stdout"
        }
        feeding.store(false, ordering: .relaxed)
        let object = DaemonEndToEndTests.parse(behind ?? "")
        #expect(object["type"] as? String == "health")
        #expect(object["message"] as? String == StandardOutputSink.behindEvent(dropped: 1).message, "\(behind ?? "none")")
        #expect(object["dropped"] as? Int == 1)
        #expect(fed.wait(timeout: .now() + 60) == .success)

        kill(daemon.processIdentifier, SIGTERM)
        #expect(TestWait.until(seconds: 30) { !daemon.isRunning }, "\(errorText())")
        daemon.waitUntilExit()
        var last: String?
        while case .line(let line) = try client.readLine(timeoutSeconds: 10) { last = line }
        #expect(last == #"{"type":"shutdown"}"#, "\(errorText())")
        #expect(daemon.terminationStatus == 0, "\(errorText())")
        #expect(!FileManager.default.fileExists(atPath: scratch.socket), "\(errorText())")
        #expect(!errorText().contains("stop did not finish"), "\(errorText())")
        #expect(errorText().hasSuffix("earshotd: stopped (signal 15)\n"), "\(errorText())")
        try? input.fileHandleForWriting.close()
    }

    @Test("the journal line for local sinks the stop did not wait for names them and the patience")
    func leftBehindLine() {
        #expect(EarshotDaemon.leftBehindLine(["journal"]) == "the stop did not wait for the journal output: it was still busy after 1 s (writing to a journal or a disk that does not take it?)")
        #expect(EarshotDaemon.leftBehindLine(["history", "journal"]) == "the stop did not wait for the history, journal outputs: they were still busy after 1 s (writing to a journal or a disk that does not take it?)")
    }
}
