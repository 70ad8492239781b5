import Foundation
import Testing
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// Runs the built `earshot` with standard output on a given file (e.g. /dev/full); collects standard error.
enum EarshotCLIToFile {
    static func run(_ arguments: [String], in directory: URL, standardOutput path: String) throws -> EarshotCLI.Outcome? {
        guard let executable = EarshotCLI.executable else { return nil }
        let output = try #require(FileHandle(forWritingAtPath: path))
        defer { try? output.close() }
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.currentDirectoryURL = directory
        let error = Pipe()
        process.standardOutput = output
        process.standardError = error
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let text = error.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return EarshotCLI.Outcome(status: process.terminationStatus, standardOutput: "",
                                  standardError: String(decoding: text, as: UTF8.self))
    }
}

@Suite("OutputFailure: standard output and output files that cannot be written")
struct OutputFailureTests {
    static let fullLine = "earshot: cannot write to standard output: No space left on device"

    @Test("stdout on /dev/full: one line and status 74 for classes, analyze, help and report --json -", .needsEarshotBuilt)
    func standardOutputFull() throws {
        let directory = try ReportCommandTests.makeDirectory()
        defer { AudioTestFiles.remove(directory) }
        let demo = TestPaths.packageRoot.appendingPathComponent("samples/demo.flac").path
        for arguments in [["classes"], ["analyze", demo], ["help"], ["devices"], ["report", "--snore", "tone.wav", "--json", "-", "--quiet"],
                          ["report", "--snore", "tone.wav", "--quiet"]] {
            let outcome = try #require(try EarshotCLIToFile.run(arguments, in: directory, standardOutput: "/dev/full"))
            if arguments == ["devices"] && outcome.status != 74 { continue }  // no ALSA here: its own error first
            #expect(outcome.status == 74, "\(arguments)")
            #expect(outcome.errorLines == [Self.fullLine], "\(arguments)")
        }
        // /dev/null still works: status 0, nothing on stderr.
        let fine = try #require(try EarshotCLIToFile.run(["classes"], in: directory, standardOutput: "/dev/null"))
        #expect(fine.status == 0)
        #expect(fine.standardError.isEmpty)
    }

    @Test("report --json/--svg/--png into /dev/full: one line, status 74, and /dev/full stays a character device", .needsEarshotBuilt)
    func reportIntoDevice() throws {
        let directory = try ReportCommandTests.makeDirectory()
        defer { AudioTestFiles.remove(directory) }
        for flag in ["--json", "--svg", "--png"] {
            let outcome = try #require(try EarshotCLI.run(["report", "--snore", "tone.wav", flag, "/dev/full", "--quiet"], in: directory))
            #expect(outcome.status == 74, "\(flag)")
            #expect(outcome.errorLines == ["earshot: cannot write /dev/full: No space left on device"], "\(flag)")
            let type = try FileManager.default.attributesOfItem(atPath: "/dev/full")[.type] as? FileAttributeType
            #expect(type == .typeCharacterSpecial)
        }
        // Into /dev/null: accepted, and /dev/null is still a device.
        let null = try #require(try EarshotCLI.run(["report", "--snore", "tone.wav", "--json", "/dev/null", "--png", "/dev/null", "--quiet"], in: directory))
        #expect(null.status == 0)
        // /dev/stdout (a link to /proc/self/fd/1, itself a link to "pipe:[N]" here): the JSON arrives on the pipe.
        let stdoutPath = try #require(try EarshotCLI.run(["report", "--snore", "tone.wav", "--json", "/dev/stdout", "--quiet"], in: directory))
        #expect(stdoutPath.status == 0)
        #expect(stdoutPath.standardError.isEmpty)
        // The JSON report, as `--json -` prints it, then the summary printed when the JSON is not on standard output.
        let dash = try #require(try EarshotCLI.run(["report", "--snore", "tone.wav", "--json", "-", "--quiet"], in: directory))
        #expect(dash.status == 0)
        let summary = try #require(try EarshotCLI.run(["report", "--snore", "tone.wav", "--quiet"], in: directory))
        #expect(dash.standardOutput.hasPrefix(#"{"type":"snore_report","source":"tone.wav","#), "\(dash.standardOutput)")
        #expect(summary.outputLines.first == "snore report: tone.wav")
        #expect(stdoutPath.standardOutput == dash.standardOutput + summary.standardOutput)
        #expect(try FileManager.default.attributesOfItem(atPath: "/dev/null")[.type] as? FileAttributeType == .typeCharacterSpecial)
    }

    @Test("report --json through a symbolic link writes its target and keeps the link; a FIFO gets the bytes", .needsEarshotBuilt)
    func symlinkAndFIFO() throws {
        let directory = try ReportCommandTests.makeDirectory()
        defer { AudioTestFiles.remove(directory) }
        let manager = FileManager.default
        try manager.createDirectory(at: directory.appendingPathComponent("real"), withIntermediateDirectories: false)
        try manager.createSymbolicLink(atPath: directory.appendingPathComponent("night.json").path, withDestinationPath: "real/night.json")
        try manager.createSymbolicLink(atPath: directory.appendingPathComponent("night.png").path, withDestinationPath: "real/night.png")
        try Data("old\n".utf8).write(to: directory.appendingPathComponent("real/night.png"))
        let outcome = try #require(try EarshotCLI.run(
            ["report", "--snore", "tone.wav", "--json", "night.json", "--png", "night.png", "--quiet"], in: directory))
        #expect(outcome.status == 0)
        #expect(outcome.standardError.isEmpty)
        for name in ["night.json", "night.png"] {
            let link = directory.appendingPathComponent(name).path
            #expect(try manager.attributesOfItem(atPath: link)[.type] as? FileAttributeType == .typeSymbolicLink)
            #expect(try manager.destinationOfSymbolicLink(atPath: link) == "real/\(name)")
        }
        let json = try Data(contentsOf: directory.appendingPathComponent("real/night.json"))
        // The report `--json -` prints.
        let dash = try #require(try EarshotCLI.run(["report", "--snore", "tone.wav", "--json", "-", "--quiet"], in: directory))
        #expect(dash.status == 0)
        #expect(String(decoding: json, as: UTF8.self) == dash.standardOutput)
        let png = try Data(contentsOf: directory.appendingPathComponent("real/night.png"))
        #expect(Array(png.prefix(4)) == [0x89, 0x50, 0x4E, 0x47])
        // No temporary files left beside the targets.
        #expect(try manager.contentsOfDirectory(atPath: directory.appendingPathComponent("real").path).sorted() == ["night.json", "night.png"])

        // A FIFO: the report arrives through it and it stays a FIFO.
        let fifo = directory.appendingPathComponent("pipe.json").path
        #expect(mkfifo(fifo, 0o600) == 0)
        let received = ReceivedBytes()
        let reader = Thread {
            if let handle = FileHandle(forReadingAtPath: fifo) {
                received.set(handle.readDataToEndOfFile())
                try? handle.close()
            }
            received.done.signal()
        }
        reader.start()
        let piped = try #require(try EarshotCLI.run(["report", "--snore", "tone.wav", "--json", "pipe.json", "--quiet"], in: directory, timeout: 60))
        #expect(received.done.wait(timeout: .now() + 30) == .success)
        #expect(piped.status == 0)
        #expect(piped.standardError.isEmpty)
        #expect(received.text.hasPrefix("{") && received.text.hasSuffix("}\n"))
        #expect(received.text == String(decoding: json, as: UTF8.self))
        var status = stat()
        #expect(lstat(fifo, &status) == 0 && status.st_mode & S_IFMT == S_IFIFO)
    }

    @Test("OutputFile: a regular file is replaced atomically keeping its mode; a dangling link's target is created")
    func outputFileLibrary() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let file = directory.appendingPathComponent("a.txt").path
        try Data("old".utf8).write(to: URL(fileURLWithPath: file))
        #expect(chmod(file, 0o600) == 0)
        try OutputFile.write(Data("new".utf8), to: file, hint: "h")
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "new")
        #expect((try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int) == 0o600)
        let link = directory.appendingPathComponent("link.txt").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: "made.txt")
        try OutputFile.write(Data("x".utf8), to: link, hint: "h")
        #expect(try String(contentsOfFile: directory.appendingPathComponent("made.txt").path, encoding: .utf8) == "x")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: link) == "made.txt")
        #expect(throws: EarshotError(.io, "cannot write /dev/full: No space left on device", cause: "No space left on device")) {
            try OutputFile.write(Data("x".utf8), to: "/dev/full", hint: "h")
        }
        #expect(throws: EarshotError(.cannotCreate, "cannot write head model \(directory.path)/no/x.head: No such file or directory (fix it)",
                                     cause: "No such file or directory")) {
            try OutputFile.write(Data("x".utf8), to: "\(directory.path)/no/x.head", what: "head model", hint: "fix it")
        }
    }

    private final class ReceivedBytes: @unchecked Sendable {
        let done = DispatchSemaphore(value: 0)
        private let lock = NSLock()
        private var data = Data()
        func set(_ value: Data) { lock.lock(); data = value; lock.unlock() }
        var text: String { lock.lock(); defer { lock.unlock() }; return String(decoding: data, as: UTF8.self) }
    }
}

@Suite("HelpList: earshot help lists each command's own usage line")
struct HelpListTests {
    @Test("every command's --help usage line appears in earshot help", .needsEarshotBuilt)
    func matchesCommands() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let list = try #require(try EarshotCLI.run(["help"], in: directory))
        #expect(list.status == 0)
        #expect(list.outputLines.contains("  subscribe [--socket PATH | --config FILE] [--group G]... [--format json|text]"))
        #expect(list.outputLines.contains("  bench [--quick] [--no-daemon | --daemon-only] [--layers] [--json] [--audio FILE] [--daemon PATH]"))
        #expect(list.outputLines.contains("  classes                         list the built-in classifier's AudioSet class labels"))
        for command in ["analyze", "train", "enroll", "subscribe", "classes", "devices", "eval", "bench", "history", "report", "sleep", "mqtt-retire", "eval-snore"] {
            let own = try #require(try EarshotCLI.run([command, "--help"], in: directory, timeout: 30))
            let usage = try #require(own.outputLines.first { $0.hasPrefix("usage: earshot \(command)") }, "\(command)")
            let entry = "  " + usage.dropFirst("usage: earshot ".count)
            #expect(list.outputLines.contains { $0 == entry || $0.hasPrefix(entry + " ") }, "\(command): \(usage)")
        }
    }

    @Test("earshot --version and earshot version print the version on standard output", .needsEarshotBuilt)
    func version() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        for argument in ["--version", "version"] {
            let outcome = try #require(try EarshotCLI.run([argument], in: directory))
            #expect(outcome.status == 0)
            #expect(outcome.standardOutput == "earshot \(earshotVersion)\n")
            #expect(outcome.standardError == "")
        }
        #expect(earshotVersion == "0.1.0")
    }
}
