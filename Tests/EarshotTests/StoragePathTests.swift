import Foundation
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// Runs the built `earshotd` (beside the test bundle) with a 30 s guard; nil when it is not built.
enum EarshotdRun {
    static var executable: URL? {
        let url = URL(fileURLWithPath: ModelLocatorTestSupport.executablePath()).deletingLastPathComponent()
            .appendingPathComponent("earshotd")
        return FileManager.default.isExecutableFile(atPath: url.path) ? url : nil
    }

    /// Runs earshotd with `arguments`, its environment this process's with `environment` on top.
    static func run(_ arguments: [String], environment: [String: String] = [:]) throws -> (status: Int32, output: String, error: String)? {
        guard let executable else { return nil }
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let output = Pipe(), error = Pipe()
        process.standardOutput = output
        process.standardError = error
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let watchdog = DispatchWorkItem { if process.isRunning { process.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + 30, execute: watchdog)
        let errorText = String(decoding: error.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let outputText = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        watchdog.cancel()
        return (process.terminationStatus, outputText, errorText)
    }
}

@Suite("Storage paths: a history database or clips directory of the wrong kind is one clear line")
struct StoragePathTests {
    @Test("earshot history --db DIR: one line naming the path and the fix, status 64", .needsEarshotBuilt)
    func historyDatabaseIsADirectory() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        let directory = scratch.directory.path
        let outcome = try #require(try EarshotCLI.run(["history", "--db", directory], in: scratch.directory))
        #expect(outcome.status == 64)
        #expect(outcome.standardOutput.isEmpty)
        #expect(outcome.errorLines == [
            "earshot: --db \(directory) is a directory: give the history database file (e.g. /var/lib/earshot/history.sqlite3)",
        ])
        // The library says so too (the daemon's writer, should the directory appear after start), not "disk I/O error".
        #expect(throws: EarshotError(
            .cannotCreate,
            "event history \(directory) is a directory, not a database file (set [history] path to a file, e.g. /var/lib/earshot/history.sqlite3)")) {
            _ = try EventHistory(path: directory)
        }
    }

    @Test("earshot history --db FIFO: refused at once as not a regular file, status 66 (as analyze), not a hang", .needsEarshotBuilt)
    func historyDatabaseIsAFIFO() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        let fifo = scratch.directory.appendingPathComponent("h.sqlite3").path
        #expect(mkfifo(fifo, 0o600) == 0)
        let outcome = try #require(try EarshotCLI.run(["history", "--db", fifo], in: scratch.directory, timeout: 10))
        #expect(outcome.status == 66)
        #expect(outcome.standardOutput.isEmpty)
        #expect(outcome.errorLines == [
            "earshot: --db \(fifo): is a FIFO (named pipe), not a regular file (give the history database file, e.g. /var/lib/earshot/history.sqlite3)",
        ])
    }

    /// `earshotd --check-config` and a real start with `config` both print exactly `line` and exit 78 (the tests
    /// calling it need `.needsEarshotdBuilt`).
    static func expectRefused(config: String, socket: String, line: String) throws {
        for arguments in [["--check-config", "--config", config], ["--config", config, "--socket", socket]] {
            let run = try #require(try EarshotdRun.run(arguments))
            #expect(run.status == 78, "\(arguments)")
            #expect(run.output.isEmpty, "\(arguments)")
            #expect(run.error == line, "\(arguments)")
        }
    }

    @Test("[history] path naming a directory: --check-config and start-up say so with the file and line, status 78", .needsEarshotdBuilt)
    func historyPathIsADirectory() throws {
        let scratch = try HistoryScratch()
        defer { scratch.remove() }
        let directory = scratch.directory.path
        let expected = "t.conf:3: [history] path = \(directory): is a directory, not a database file (set [history] path to a file, e.g. /var/lib/earshot/history.sqlite3)"
        let configuration = try DaemonConfiguration.parse("[history]\nenabled = true\npath = \(directory)\n", source: "t.conf")
        #expect(throws: EarshotError(.config, expected)) { try configuration.checkStoragePaths() }
        // Disabled, or a file that does not exist yet: nothing to say.
        try DaemonConfiguration.parse("[history]\nenabled = false\npath = \(directory)\n", source: "t.conf").checkStoragePaths()
        try DaemonConfiguration.parse("[history]\npath = \(directory)/h.sqlite3\n", source: "t.conf").checkStoragePaths()

        let config = scratch.directory.appendingPathComponent("earshotd.conf").path
        try "[detection]\nwatch = smoke_alarm\n[history]\npath = \(directory)\n".write(toFile: config, atomically: true, encoding: .utf8)
        let line = "earshotd: \(config):4: [history] path = \(directory): is a directory, not a database file (set [history] path to a file, e.g. /var/lib/earshot/history.sqlite3)\n"
        try Self.expectRefused(config: config, socket: scratch.directory.appendingPathComponent("s.sock").path, line: line)
    }

    @Test("[clips] directory naming a regular file: --check-config and start-up say so with the file and line, status 78", .needsEarshotdBuilt)
    func clipsDirectoryIsAFile() throws {
        let scratch = try ClipScratch()
        defer { scratch.remove() }
        let file = scratch.directory.appendingPathComponent("clips").path
        try Data("not a directory\n".utf8).write(to: URL(fileURLWithPath: file))
        let configuration = try DaemonConfiguration.parse("[clips]\nenabled = true\ndirectory = \(file)\n", source: "t.conf")
        #expect(throws: EarshotError(
            .config,
            "t.conf:3: [clips] directory = \(file): is a regular file, not a directory (move the file aside, or set [clips] directory to a directory, e.g. /var/lib/earshot/clips)")) {
            try configuration.checkStoragePaths()
        }
        // Off (the default): not checked. A directory that does not exist yet: the writer makes it.
        try DaemonConfiguration.parse("[clips]\ndirectory = \(file)\n", source: "t.conf").checkStoragePaths()
        try DaemonConfiguration.parse("[clips]\nenabled = true\ndirectory = \(file)-new\n", source: "t.conf").checkStoragePaths()

        let config = scratch.directory.appendingPathComponent("earshotd.conf").path
        try "[clips]\nenabled = yes\ndirectory = \(file)\n".write(toFile: config, atomically: true, encoding: .utf8)
        let line = "earshotd: \(config):3: [clips] directory = \(file): is a regular file, not a directory (move the file aside, or set [clips] directory to a directory, e.g. /var/lib/earshot/clips)\n"
        try Self.expectRefused(config: config, socket: scratch.directory.appendingPathComponent("s.sock").path, line: line)
    }

    @Test("clip retention on a regular file: errno's text and the fix, no Foundation error text")
    func retentionOnAFile() throws {
        let scratch = try ClipScratch()
        defer { scratch.remove() }
        let file = scratch.directory.appendingPathComponent("clips").path
        try Data("x".utf8).write(to: URL(fileURLWithPath: file))
        #expect(throws: EarshotError(
            .io, "cannot list clips in \(file): Not a directory (set [clips] directory to a directory)", cause: "Not a directory")) {
            try ClipFiles.prune(directory: file, maxClips: 10, retentionDays: 7)
        }
        // A missing directory is nothing to prune.
        #expect(try ClipFiles.prune(directory: file + "-missing", maxClips: 10, retentionDays: 7) == ClipFiles.Pruned())

        // The writer (the directory turned into a file after start): the probe and retention lines.
        var settings = DaemonConfiguration.Clips()
        settings.enabled = true
        settings.directory = file
        let log = ClipWriterLog()
        let writer = ClipWriter(settings: settings, report: { log.report($0) }, saved: { log.save($0) })
        writer.flush()
        writer.close()
        #expect(log.reports == [
            .failing("clips cannot be saved: \(file) is not a directory (set [clips] directory to a directory); detection goes on without clips, and clips are tried as they come"),
            .warning("clip retention: cannot list clips in \(file): Not a directory (set [clips] directory to a directory)"),
        ])
    }
}
