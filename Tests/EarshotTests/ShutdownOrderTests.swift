import Foundation
import Testing
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// The daemon's ordered stop, and what it links.
@Suite("earshotd stop order and link", .serialized)
struct ShutdownOrderTests {
    static let demo = TestPaths.packageRoot.appendingPathComponent("samples/demo.flac").path

    @Test("SIGTERM during an open event: the event ends (stream_end), and every event the socket showed is in the history",
          .needsEarshotdBuilt)
    func sigtermDuringAnOpenEvent() throws {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("earshot-stop-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let socket = directory.appendingPathComponent("s.sock").path
        let daemon = Process()
        daemon.executableURL = try #require(EarshotdRun.executable)
        daemon.arguments = ["--input", Self.demo, "--socket", socket, "--no-journal", "--watch", "baby_cry,snoring"]
        daemon.environment = DaemonEndToEndTests.environment(home: directory)
        let errors = Pipe()
        daemon.standardOutput = FileHandle.nullDevice
        daemon.standardError = errors
        try daemon.run()
        let watchdog = DispatchWorkItem { if daemon.isRunning { daemon.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + 60, execute: watchdog)
        defer {
            watchdog.cancel()
            if daemon.isRunning { daemon.terminate() }
        }

        #expect(TestWait.until(seconds: 10) { FileManager.default.fileExists(atPath: socket) })
        let client = try EventSubscriber(path: socket)
        try client.subscribe(groups: [])
        // The subscribe reply may come after the first health line: keep every line, and go on once it is in.
        var lines: [String] = []
        while !lines.contains(where: { $0.hasPrefix("{\"type\":\"subscribed\"") }) {
            guard case .line(let line) = try client.readLine(timeoutSeconds: 20) else { break }
            lines.append(line)
        }
        // The baby cry starts at 2.40 s of the demo and lasts to 9.6 s: stop while it is open.
        while !lines.contains(where: { $0.hasPrefix("{\"type\":\"detection\",\"group\":\"baby_cry\"") }) {
            guard case .line(let line) = try client.readLine(timeoutSeconds: 20) else { break }
            lines.append(line)
        }
        #expect(lines.last?.hasPrefix("{\"type\":\"detection\",\"group\":\"baby_cry\"") == true, "\(lines)")
        kill(daemon.processIdentifier, SIGTERM)
        while true {
            guard case .line(let line) = try client.readLine(timeoutSeconds: 10) else { break }
            lines.append(line)
        }
        let log = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        daemon.waitUntilExit()
        #expect(daemon.terminationStatus == 0, "\(log)")
        #expect(lines.last == #"{"type":"shutdown"}"#, "\(lines)")
        #expect(log.hasSuffix("earshotd: stopped (signal 15)\n"), "\(log)")
        #expect(!FileManager.default.fileExists(atPath: socket))

        let ends = lines.compactMap { line -> (group: String, reason: String, windows: Int)? in
            guard let object = try? JSONValue.parse(line), object["type"]?.stringValue == "detection_end" else { return nil }
            return (object["group"]?.stringValue ?? "", object["reason"]?.stringValue ?? "", object["windows"]?.intValue ?? -1)
        }
        #expect(ends.map(\.group) == ["baby_cry"], "\(lines)")
        #expect(ends.map(\.reason) == ["stream_end"])
        let history = try EventHistory(path: directory.appendingPathComponent("state/history.sqlite3").path, access: .readOnly)
        let stored = try history.events()
        #expect(stored.map(\.group) == ends.map(\.group))
        #expect(stored.map(\.endReason) == ends.map(\.reason))
        #expect(stored.map(\.windows) == ends.map(\.windows))

        // The readable lines say the daemon stopped, not the cry (trial 11 #2): its log line, the text form of the
        // socket's line (`earshot subscribe --format text`) and `earshot history`.
        let endLine = try #require(lines.first { $0.hasPrefix(#"{"type":"detection_end""#) })
        let end = try JSONValue.parse(endLine)
        let number = { (key: String, format: String) in String(cFormat: format, end[key]?.doubleValue ?? -1) }
        #expect(log.contains("earshotd: baby_cry ended (monitoring stopped: earshotd stopped or its input ended):"
            + " \"Baby cry\" from 2.40 s to \(number("end", "%.2f")) s (\(number("duration", "%.2f")) s, peak confidence"
            + " \(number("peak_confidence", "%.2f")), mean \(number("mean_confidence", "%.2f")))\n"), "\(log)")
        #expect(EventTextFormat.format(line: endLine, timeZone: TimeZone(identifier: "UTC")!)?
            .hasSuffix("  baby_cry ended after \(number("duration", "%.2f")) s (monitoring stopped: earshotd stopped or its"
                + " input ended): \"Baby cry\" peak \(Int((end["peak_confidence"]?.doubleValue ?? -1) * 100 + 0.5))%,"
                + " mean \(Int((end["mean_confidence"]?.doubleValue ?? -1) * 100 + 0.5))% (stream 2.40-\(number("end", "%.2f")) s)")
            == true, "\(endLine)")
        let listed = try #require(try EarshotCLI.run(
            ["history", "--db", directory.appendingPathComponent("state/history.sqlite3").path], in: directory))
        #expect(listed.status == 0)
        #expect(listed.outputLines.count == 1)
        #expect(listed.outputLines.first?.hasSuffix("  ended by monitoring stopped") == true, "\(listed.outputLines)")
    }

    @Test("earshotd links no command-line-only module (EarshotTools, EarshotPNG): none of their symbols",
          .needsEarshotdBuilt, .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/nm"), "nm (binutils) is not installed"))
    func daemonLinksNoTools() throws {
        let daemon = try #require(EarshotdRun.executable)
        let (status, symbols) = try Self.output(of: "/usr/bin/nm", ["--defined-only", daemon.path])
        #expect(status == 0)
        // Swift mangles a module's name into its symbols as <length><name>: 12EarshotTools, 10EarshotPNG.
        #expect(symbols.contains("14EarshotService"), "the check itself: earshotd's own modules must show")
        let tools = symbols.split(separator: "\n").filter { $0.contains("12EarshotTools") || $0.contains("10EarshotPNG") }
        #expect(tools.isEmpty, "\(tools.prefix(5))")
    }

    @Test("earshotd does not link the libraries it opens only where configured (libcurl, libmicrohttpd, OpenBLAS)",
          .needsEarshotdBuilt, .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/readelf"), "readelf (binutils) is not installed"))
    func daemonOpensOptionalLibrariesLate() throws {
        let daemon = try #require(EarshotdRun.executable)
        let (status, text) = try Self.output(of: "/usr/bin/readelf", ["--dynamic", daemon.path])
        #expect(status == 0)
        // Lines like ` 0x0000000000000001 (NEEDED)             Shared library: [libasound.so.2]`.
        let needed = text.split(separator: "\n").filter { $0.contains("(NEEDED)") }
            .compactMap { $0.split(separator: "[").last?.split(separator: "]").first.map(String.init) }
        #expect(needed.contains("libasound.so.2"), "the check itself: \(needed)")
        let late = needed.filter { $0.hasPrefix("libcurl") || $0.hasPrefix("libmicrohttpd") || $0.hasPrefix("libopenblas") }
        #expect(late.isEmpty, "\(late)")
    }

    /// Runs `tool` with `arguments`; its exit status and standard output (standard error discarded).
    static func output(of tool: String, _ arguments: [String]) throws -> (status: Int32, text: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, text)
    }
}
