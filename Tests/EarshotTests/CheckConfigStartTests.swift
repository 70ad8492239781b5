import Foundation
import Testing
import Glibc
import EarshotSupport
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// A temp directory with an `earshotd` configuration file of the test's text (`DIR` replaced by the directory).
struct CheckScratch {
    let directory: URL
    var config: String { directory.appendingPathComponent("c.conf").path }

    init(_ text: String) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-check-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try text.replacingOccurrences(of: "DIR", with: directory.path).write(toFile: config, atomically: true, encoding: .utf8)
    }

    func check() throws -> (status: Int32, output: String, error: String) {
        try #require(try EarshotdRun.run(["--config", config, "--check-config"]))
    }

    func remove() { try? FileManager.default.removeItem(at: directory) }
}

@Suite("earshotd --check-config: what the start would refuse or lose")
struct CheckConfigStartTests {
    @Test("[metrics] listen on a port in use: the start's line and status 78, from --check-config", .needsEarshotdBuilt)
    func metricsPortInUse() throws {
        var descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { if descriptor >= 0 { close(descriptor) } }
        let port = try #require(FreePort.bindLoopback(descriptor))
        #expect(listen(descriptor, 1) == 0)
        let scratch = try CheckScratch("[metrics]\nenabled = true\nlisten = 127.0.0.1:\(port)\n[output]\nsocket = DIR/m.sock\n")
        defer { scratch.remove() }
        let result = try scratch.check()
        #expect(result.status == 78)
        #expect(result.error == "earshotd: \(scratch.config):3: [metrics] listen = 127.0.0.1:\(port): Address already in use (another program, or another earshotd, listens there; choose another port)\n")
        #expect(result.output == "")
        // The port is released again: a free one passes. Closed once: by the end of the test its number may be
        // another test's pipe or socket, and a second close would end, say, a daemon's standard input early.
        close(descriptor)
        descriptor = -1
        let free = try FreePort.pick()
        let fine = try CheckScratch("[metrics]\nenabled = true\nlisten = 127.0.0.1:\(free)\n[output]\nsocket = DIR/m.sock\n")
        defer { fine.remove() }
        #expect(try fine.check().status == 0)
        #expect(!FreePort.accepts(free))
    }

    @Test("[output] socket in a directory that does not exist: the start's line and status 73 (trial 5 #6); under /run/earshot systemd makes it", .needsEarshotdBuilt)
    func socketDirectoryMissing() throws {
        let scratch = try CheckScratch("[output]\nsocket = DIR/nodir/e.sock\n[history]\nenabled = false\n")
        defer { scratch.remove() }
        let result = try scratch.check()
        #expect(result.status == 73)
        #expect(result.error == "earshotd: cannot create socket \(scratch.directory.path)/nodir/e.sock: No such file or directory (create the directory, run under systemd with RuntimeDirectory=earshot, or choose another --socket)\n")
        #expect(result.output == "")
        let start = try #require(try EarshotdRun.run(["--config", scratch.config, "--foreground", "--input", TestPaths.packageRoot.appendingPathComponent("samples/demo.flac").path]))
        #expect(start.status == 73)
        #expect(start.error == result.error)
        let systemd = try CheckScratch("[output]\nsocket = /run/earshot/nodir-\(getpid())/e.sock\n[history]\nenabled = false\n")
        defer { systemd.remove() }
        #expect(try systemd.check().status == 0)
    }

    @Test("[history] path and [clips] directory whose parent is missing: a warning line each, naming file, line and fix", .needsEarshotdBuilt)
    func missingStorageParents() throws {
        let scratch = try CheckScratch("[output]\nsocket = DIR/h.sock\n[history]\npath = DIR/nodir/h.sqlite3\n[clips]\nenabled = true\ndirectory = DIR/nodir2/x/clips\n")
        defer { scratch.remove() }
        let result = try scratch.check()
        let directory = scratch.directory.path
        #expect(result.status == 0)
        #expect(result.error == """
            earshotd: warning: \(scratch.config):4: [history] path = \(directory)/nodir/h.sqlite3: its directory \(directory)/nodir does not exist, so no event would be stored (create it, or set [history] path)
            earshotd: warning: \(scratch.config):7: [clips] directory = \(directory)/nodir2/x/clips: its parent directory \(directory)/nodir2/x does not exist, so no clip would be saved (create it, or set [clips] directory)

            """)
        #expect(result.output.hasPrefix("earshotd: configuration OK (watching "))
        // A clips directory whose parent exists is created at start: nothing to say.
        let fine = try CheckScratch("[output]\nsocket = DIR/h.sock\n[history]\npath = DIR/h.sqlite3\n[clips]\nenabled = true\ndirectory = DIR/clips\n")
        defer { fine.remove() }
        #expect(try fine.check().error == "")
    }
}

