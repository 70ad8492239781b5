import Foundation
import Testing
import Glibc
import EarshotSupport
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("earshot enroll and train check --label and --output first")
struct EnrollChecksFirstTests {
    @Test("enroll: an empty label, background, and an output that cannot be written are refused before any take is read", .needsEarshotBuilt)
    func enrollRefusesFirst() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-enroll-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // Takes that do not exist: a check that came after reading them would say so instead.
        let takes = ["--from", "missing-1.wav", "--from", "missing-2.wav"]
        func enroll(_ label: String, _ output: String) throws -> EarshotCLI.Outcome {
            try #require(try EarshotCLI.run(["enroll", "--label", label] + takes + ["--output", output], in: directory))
        }
        let empty = try enroll("", "e.earshot")
        #expect(empty.status == 64)
        #expect(empty.standardError == "earshot: --label: a label cannot be empty (name the sound, e.g. doorbell)\n")
        let background = try enroll("background", "e.earshot")
        #expect(background.status == 64)
        #expect(background.standardError == "earshot: --label background is the name of the negative class; name the sound itself\n")
        let output = try enroll("doorbell", "/nonexistent/dir/x.earshot")
        #expect(output.status == 73)
        #expect(output.standardError == "earshot: cannot write head model /nonexistent/dir/x.earshot: No such file or directory (check that the directory exists and is writable)\n")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == [])
    }

    @Test("train: an output that cannot be written is refused before any embedding is computed", .needsEarshotBuilt)
    func trainRefusesFirst() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-train-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let started = Date()
        let result = try #require(try EarshotCLI.run(["train", TestPaths.packageRoot.appendingPathComponent("samples").path, "--output", "/nonexistent/dir/x.earshot"], in: directory))
        #expect(result.status == 73)
        #expect(result.standardError == "earshot: cannot write head model /nonexistent/dir/x.earshot: No such file or directory (check that the directory exists and is writable)\n")
        #expect(Date().timeIntervalSince(started) < 10)
    }
}
