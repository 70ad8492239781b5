import Foundation
import Glibc
import Testing

import Earshot
import EarshotService
import EarshotSupport

/// The daemon's own files in `[sleep] report_dir` (audit 14 F5, F7): a FIFO at the marker's name never holds the
/// report queue, and the staging files of writes cut short are removed at the next start.
@Suite("Private files: no wait on a FIFO at the daemon's own file names, leftover staging files removed (audit 14 F5, F7)", .serialized)
struct PrivateFileTests {
    static func scratch() throws -> String {
        let path = FileManager.default.temporaryDirectory
            .appendingPathComponent("earshot-private-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        return path
    }

    static let marker = Data(#"{"start":"x"}"#.utf8 + [UInt8(ascii: "\n")])

    // MARK: F5: a FIFO of this user at the file's name

    @Test("writePrivate into this user's FIFO: with no reader it fails at once with one line; a reader with room gets the bytes in place; a reader that takes nothing fails after the patience given; the FIFO stays")
    func fifoIsNeverWaitedFor() throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let fifo = directory + "/" + SleepService.markerName
        #expect(mkfifo(fifo, 0o600) == 0)

        #expect(throws: EarshotError(.io, "cannot write the sleep session marker \(fifo): it is a FIFO that no process reads (remove it; earshotd writes its own file there)", cause: "no reader")) {
            try OutputFile.writePrivate(Self.marker, to: fifo, what: "the sleep session marker")
        }
        #expect(SymbolicLinkTests.mode(fifo) == S_IFIFO | 0o600)

        let reader = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        try #require(reader >= 0)
        defer { close(reader) }
        try OutputFile.writePrivate(Self.marker, to: fifo, what: "the sleep session marker")
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = read(reader, &buffer, buffer.count)
        #expect(count == Self.marker.count && Data(buffer[0..<max(0, count)]) == Self.marker)

        // The pipe filled through a second descriptor: no room until the reader reads.
        let filler = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
        try #require(filler >= 0)
        defer { close(filler) }
        let block = [UInt8](repeating: 0, count: 4096)
        while write(filler, block, block.count) > 0 {}
        #expect(errno == EAGAIN)
        #expect(throws: EarshotError(.io, "cannot write the sleep session marker \(fifo): it is a FIFO whose reader did not take the 14 bytes within 0.2 s (remove it; earshotd writes its own file there)", cause: "timed out")) {
            try OutputFile.writePrivate(Self.marker, to: fifo, what: "the sleep session marker", readerPatience: 0.2)
        }
        #expect(SymbolicLinkTests.mode(fifo) == S_IFIFO | 0o600)
        #expect(SymbolicLinkTests.names(directory) == [SleepService.markerName])
    }

    // MARK: F7: staging files of writes cut short

    /// Creates a regular file `name` in `directory`, mode 0600.
    static func file(_ directory: String, _ name: String) throws {
        try "half a report\n".write(toFile: directory + "/" + name, atomically: false, encoding: .utf8)
        #expect(chmod(directory + "/" + name, 0o600) == 0)
    }

    @Test("the start removes the report and marker staging files (.NAME.tmp- and 16 hex digits) of this user, regular files only, with one line; other names, links (their targets untouched), directories and a linked report directory are left alone")
    func leftoverStagingRemoved() throws {
        let scratch = try SymbolicLinkTests.Scratch()
        defer { scratch.remove() }
        let reports = try scratch.directory("sleep", mode: 0o700)
        let ours = [".snore-20261207-1004.json.tmp-0123456789abcdef", ".snore-20261207-1004-2.svg.tmp-00000000000000ff",
                    "..earshot-sleep-session.tmp-fedcba9876543210"]
        let kept = [
            ".snore-20261207-1004.svg.tmp-4242",  // the PID names used before 2ebbeec: not this pattern
            ".notes.txt.tmp-0123456789abcdef",  // not a report's name
            ".snore-20261207-1004.json.tmp-0123456789ABCDEF",  // not lowercase hex: not ours
            ".snore-20261207-1004.json.tmp-0123456789abcde",  // 15 digits
            "snore-20261207-1004.json",  // a report
            SleepService.markerName,
        ]
        for name in ours + kept { try Self.file(reports, name) }
        let link = ".snore-20261207-1005.json.tmp-1111111111111111"
        #expect(symlink(scratch.victim, reports + "/" + link) == 0)
        let directory = ".snore-20261207-1006.json.tmp-2222222222222222"
        #expect(mkdir(reports + "/" + directory, 0o700) == 0)

        // Through a link to the directory, or below one: nothing.
        let linked = scratch.path + "/linked-sleep"
        #expect(symlink(reports, linked) == 0)
        let linkedState = scratch.path + "/linked-scratch"
        #expect(symlink(scratch.path, linkedState) == 0)
        var lines: [String] = []
        SleepService.removeLeftoverStaging(in: linked) { line, priority in lines.append("\(priority) \(line)") }
        SleepService.removeLeftoverStaging(in: linkedState + "/sleep") { line, priority in lines.append("\(priority) \(line)") }
        #expect(lines.isEmpty)
        #expect(SymbolicLinkTests.names(reports) == (ours + kept + [link, directory]).sorted())

        SleepService.removeLeftoverStaging(in: reports) { line, priority in lines.append("\(priority) \(line)") }
        #expect(lines == ["5 removed 3 files in \(reports) that a write cut short by an earlier stop left behind: ..earshot-sleep-session.tmp-fedcba9876543210, .snore-20261207-1004-2.svg.tmp-00000000000000ff, .snore-20261207-1004.json.tmp-0123456789abcdef"])
        #expect(SymbolicLinkTests.names(reports) == (kept + [link, directory]).sorted())
        #expect(SymbolicLinkTests.mode(reports + "/" + link).map { $0 & S_IFMT } == S_IFLNK)
        scratch.expectVictimsUntouched()

        // Nothing left: nothing said; a missing directory: nothing either.
        lines = []
        SleepService.removeLeftoverStaging(in: reports) { line, priority in lines.append("\(priority) \(line)") }
        SleepService.removeLeftoverStaging(in: scratch.path + "/missing") { line, priority in lines.append("\(priority) \(line)") }
        #expect(lines.isEmpty)
    }

    @Test("another user's file of a staging name is left alone",
          .enabled(if: getuid() == 0, "needs root to give a file to another user"))
    func otherUsersStagingKept() throws {
        let reports = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: reports) }
        let name = ".snore-20261207-1004.json.tmp-0123456789abcdef"
        try Self.file(reports, name)
        #expect(chown(reports + "/" + name, 65534, 65534) == 0)
        var lines: [String] = []
        SleepService.removeLeftoverStaging(in: reports) { line, _ in lines.append(line) }
        #expect(lines.isEmpty)
        #expect(SymbolicLinkTests.names(reports) == [name])
    }

    @Test("earshotd removes leftover staging files from [sleep] report_dir at its start and says so once",
          .needsEarshotdBuilt)
    func daemonRemovesLeftoversAtStart() throws {
        let directory = try StartStopOrderTests.scratch()
        defer { try? FileManager.default.removeItem(at: directory) }
        let reports = directory.appendingPathComponent("sleep").path
        try FileManager.default.createDirectory(atPath: reports, withIntermediateDirectories: false)
        let leftover = ".snore-20261207-1004.svg.tmp-0123456789abcdef"
        try Self.file(reports, leftover)
        try Self.file(reports, "snore-20261207-1004.json")
        let (daemon, errors, _, started) = try StartStopOrderTests.startSleepDaemon(in: directory)
        defer { if daemon.isRunning { kill(daemon.processIdentifier, SIGKILL) } }
        #expect(started == reports)
        kill(daemon.processIdentifier, SIGTERM)
        #expect(TestWait.until(seconds: 20) { !daemon.isRunning })
        daemon.waitUntilExit()
        let log = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(daemon.terminationStatus == 0, "\(log)")
        #expect(log.split(separator: "\n").filter { $0.contains("removed") } == [
            "earshotd: removed 1 file in \(reports) that a write cut short by an earlier stop left behind: \(leftover)",
        ], "\(log)")
        #expect(SymbolicLinkTests.names(reports) == ["snore-20261207-1004.json"])
    }
}
