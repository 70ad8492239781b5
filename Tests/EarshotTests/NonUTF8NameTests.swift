import Foundation
import Testing

import Earshot
import EarshotTools

/// File names that are not UTF-8 (trial 5 #3): Swift hands them over with U+FFFD, so they cannot be opened; the
/// commands say so, and training names such a file in a `skipped:` line instead of dropping it.
@Suite("Non-UTF-8 file names", .timeLimit(.minutes(1)))
struct NonUTF8NameTests {
    /// A scratch folder holding `knock/café.wav` named in Latin-1 (`caf\xe9.wav`) beside `knock/ok.wav`.
    private static func makeFolder() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("latin1-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("knock"), withIntermediateDirectories: true)
        try Data("RIFF".utf8).write(to: directory.appendingPathComponent("knock/ok.wav"))
        let latin = directory.path + "/knock/caf\u{E9}.wav"
        var bytes = Array(latin.utf8.dropLast(6)) + [0xE9] + Array(".wav".utf8) + [0]
        let descriptor = bytes.withUnsafeMutableBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) { open($0, O_CREAT | O_WRONLY, 0o644) }
        }
        #expect(descriptor >= 0)
        close(descriptor)
        return directory
    }

    @Test func theDecoderSaysTheNameIsNotUTF8AndTrainingListsTheFile() throws {
        let directory = try Self.makeFolder()
        defer { try? FileManager.default.removeItem(at: directory) }
        let found = LabelledFolders.regularFiles(under: directory.appendingPathComponent("knock"))
            .map(\.lastPathComponent).sorted()
        #expect(found == ["caf\u{FFFD}.wav", "ok.wav"])
        let relative = URL(fileURLWithPath: "knock/caf\u{FFFD}.wav", relativeTo: directory)
        #expect(throws: EarshotError(
            .noInput,
            "knock/caf\u{FFFD}.wav: the file name is not valid UTF-8, so earshot cannot open it (rename the file, e.g. convmv -f latin1 -t utf8 --notest FILE)",
            cause: "No such file or directory")) {
            _ = try AudioFileDecoder(url: relative)
        }
    }

    @Test(.needsEarshotBuilt) func analyzeNamesTheFileAsNotUTF8() throws {
        let directory = try Self.makeFolder()
        defer { try? FileManager.default.removeItem(at: directory) }
        let earshot = try #require(EarshotCLI.executable)
        let outcome = try EarshotCLI.runProcess(
            URL(fileURLWithPath: "/bin/sh"), ["-c", "\"$0\" analyze knock/*.wav", earshot.path], in: directory, timeout: 60)
        #expect(outcome.status == 66)
        #expect(outcome.errorLines.first ==
            "earshot: knock/caf\u{FFFD}.wav: the file name is not valid UTF-8, so earshot cannot open it (rename the file, e.g. convmv -f latin1 -t utf8 --notest FILE)")
    }
}
