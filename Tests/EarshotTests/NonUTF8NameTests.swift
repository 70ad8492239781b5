import Foundation
import Testing

import Earshot
import EarshotTools

/// File names that are not UTF-8 (trial 5 #3): Swift hands them over with U+FFFD in place of their bytes; the decoder
/// opens the one file whose name reads so by its own bytes, and says why when two names read the same.
@Suite("Non-UTF-8 file names", .timeLimit(.minutes(1)))
struct NonUTF8NameTests {
    /// 0.5 s of a 1 kHz sine at -20 dBFS, 16 kHz.
    static let tone = AnalysisTestSupport.sine(frequency: 1_000, dbfs: -20, sampleRate: 16_000, count: 8_000)

    /// Writes `tone` as a WAV to `directory/knock/` under the name `prefix` + `byte` + `.wav`, `byte` not UTF-8.
    private static func writeLatin1(_ directory: URL, byte: UInt8) throws {
        let staging = directory.appendingPathComponent("staging.wav")
        try AnalysisTestSupport.writeFloatWAV(tone, sampleRate: 16_000, to: staging)
        let target = Array((directory.path + "/knock/caf").utf8) + [byte] + Array(".wav".utf8) + [0]
        let renamed = target.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { rename(staging.path, $0.baseAddress!) }
        }
        #expect(renamed == 0)
    }

    /// A scratch folder holding `knock/café.wav` named in Latin-1 (`caf\xe9.wav`) beside `knock/ok.wav`, both the tone.
    private static func makeFolder() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("latin1-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("knock"), withIntermediateDirectories: true)
        try AnalysisTestSupport.writeFloatWAV(tone, sampleRate: 16_000, to: directory.appendingPathComponent("knock/ok.wav"))
        try writeLatin1(directory, byte: 0xE9)
        return directory
    }

    @Test func theDecoderOpensTheFileByItsBytesAndRefusesANameTwoFilesShare() throws {
        let directory = try Self.makeFolder()
        defer { try? FileManager.default.removeItem(at: directory) }
        let found = LabelledFolders.regularFiles(under: directory.appendingPathComponent("knock"))
            .map(\.lastPathComponent).sorted()
        #expect(found == ["caf\u{FFFD}.wav", "ok.wav"])
        #expect(AudioFileDecoder.rawPath(repairing: directory.path + "/knock/caf\u{FFFD}.wav")
            == .found((Array((directory.path + "/knock/caf").utf8) + [0xE9] + Array(".wav".utf8) + [0]).map { CChar(bitPattern: $0) }))
        let base = URL(fileURLWithPath: directory.path, isDirectory: true)
        let relative = URL(fileURLWithPath: "knock/caf\u{FFFD}.wav", relativeTo: base)
        let decoder = try AudioFileDecoder(url: relative)
        #expect(decoder.displayPath == "knock/caf\u{FFFD}.wav")
        #expect(try decoder.readAllMono() == Self.tone)

        #expect(throws: EarshotError(.noInput, "knock/nope\u{FFFD}.wav: no such file (check the path)", cause: "No such file or directory")) {
            _ = try AudioFileDecoder(url: URL(fileURLWithPath: "knock/nope\u{FFFD}.wav", relativeTo: base))
        }
        // caf\xe8.wav reads as caf\u{FFFD}.wav too: which one was meant cannot be told.
        try Self.writeLatin1(directory, byte: 0xE8)
        #expect(AudioFileDecoder.rawPath(repairing: relative.path) == .ambiguous)
        #expect(throws: EarshotError(
            .noInput,
            "knock/caf\u{FFFD}.wav: the file name is not valid UTF-8, and more than one file's name reads as it, so earshot cannot tell which to open (rename them, e.g. convmv -f latin1 -t utf8 --notest FILE)",
            cause: "No such file or directory")) {
            _ = try AudioFileDecoder(url: relative)
        }
    }

    @Test(.needsEarshotBuilt) func analyzeReadsTheFileAndNamesAnAmbiguousOne() throws {
        let directory = try Self.makeFolder()
        defer { try? FileManager.default.removeItem(at: directory) }
        let earshot = try #require(EarshotCLI.executable)
        // The shell expands the glob to the raw bytes; Swift's command line repairs them to U+FFFD.
        let outcome = try EarshotCLI.runProcess(
            URL(fileURLWithPath: "/bin/sh"), ["-c", "\"$0\" analyze --format csv knock/*.wav", earshot.path], in: directory, timeout: 60)
        #expect(outcome.status == 0, "\(outcome.standardError)")
        let rows = outcome.outputLines.dropFirst()
        let latin = rows.filter { $0.hasPrefix("knock/caf\u{FFFD}.wav,") }
        let ok = rows.filter { $0.hasPrefix("knock/ok.wav,") }
        #expect(!latin.isEmpty)
        #expect(latin.map { $0.dropFirst("knock/caf\u{FFFD}.wav".count) } == ok.map { $0.dropFirst("knock/ok.wav".count) })

        try Self.writeLatin1(directory, byte: 0xE8)
        let ambiguous = try EarshotCLI.runProcess(
            URL(fileURLWithPath: "/bin/sh"), ["-c", "\"$0\" analyze knock/*.wav", earshot.path], in: directory, timeout: 60)
        #expect(ambiguous.status == 66)
        #expect(ambiguous.errorLines.first ==
            "earshot: knock/caf\u{FFFD}.wav: the file name is not valid UTF-8, and more than one file's name reads as it, so earshot cannot tell which to open (rename them, e.g. convmv -f latin1 -t utf8 --notest FILE)")
    }
}
