import Foundation
import Testing
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// Runs the built `earshot` executable (beside the test bundle in the build directory).
enum EarshotCLI {
    /// The `earshot` binary next to the running test bundle, or nil when it was not built.
    static var executable: URL? {
        guard let bundle = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else { return nil }
        let url = URL(fileURLWithPath: bundle).deletingLastPathComponent().appendingPathComponent("earshot")
        return FileManager.default.isExecutableFile(atPath: url.path) ? url : nil
    }

    static let missingMessage = "the earshot executable is not built beside the test bundle (swift build builds it)"

    struct Outcome {
        var status: Int32
        var standardOutput: String
        var standardError: String
        var outputLines: [String] { standardOutput.split(separator: "\n", omittingEmptySubsequences: false).map(String.init).filter { !$0.isEmpty } }
        var errorLines: [String] { standardError.split(separator: "\n").map(String.init) }
    }

    /// Runs `earshot ARGUMENTS` in `directory`; kills it after `timeout` seconds.
    static func run(_ arguments: [String], in directory: URL, timeout: Double = 120) throws -> Outcome? {
        guard let executable else { return nil }
        return try runProcess(executable, arguments, in: directory, timeout: timeout)
    }

    /// Runs any `executable ARGUMENTS` (in `directory` when given, with `environment` when given, else this
    /// process's), both streams read to their end; terminates it after `timeout` seconds.
    static func runProcess(
        _ executable: URL, _ arguments: [String], in directory: URL? = nil, environment: [String: String]? = nil,
        timeout: Double
    ) throws -> Outcome {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = directory }
        if let environment { process.environment = environment }
        let output = Pipe(), error = Pipe()
        process.standardOutput = output
        process.standardError = error
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let group = DispatchGroup()
        let collected = CollectedOutput()
        for (pipe, isError) in [(output, false), (error, true)] {
            group.enter()
            DispatchQueue.global().async {
                let data = pipe.fileHandleForReading.readDataToEndOfFile()
                collected.set(data, isError: isError)
                group.leave()
            }
        }
        let watchdog = DispatchWorkItem { if process.isRunning { process.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: watchdog)
        process.waitUntilExit()
        watchdog.cancel()
        _ = group.wait(timeout: .now() + 30)
        return Outcome(status: process.terminationStatus, standardOutput: collected.text(isError: false),
                       standardError: collected.text(isError: true))
    }

    private final class CollectedOutput: @unchecked Sendable {
        private let lock = NSLock()
        private var output = Data(), error = Data()
        func set(_ data: Data, isError: Bool) {
            lock.lock()
            defer { lock.unlock() }
            if isError { error = data } else { output = data }
        }
        func text(isError: Bool) -> String {
            lock.lock()
            defer { lock.unlock() }
            return String(decoding: isError ? error : output, as: UTF8.self)
        }
    }
}

@Suite("AnalyzeCommand")
struct AnalyzeCommandTests {
    @Test("the same file analysed in three processes prints the same bytes (no timing-dependent FFT plan)", .needsEarshotBuilt)
    func deterministicAcrossRuns() throws {
        let demo = TestPaths.packageRoot.appendingPathComponent("samples/demo.flac").path
        var outputs: [String] = []
        for _ in 0..<3 {
            let outcome = try #require(try EarshotCLI.run(
                ["analyze", demo, "--format", "jsonl", "--top", "521", "--overlap", "0.625"], in: TestPaths.packageRoot))
            #expect(outcome.status == 0)
            outputs.append(outcome.standardOutput)
        }
        #expect(outputs[0].split(separator: "\n").count == 87)
        #expect(outputs[1] == outputs[0])
        #expect(outputs[2] == outputs[0])
    }

    @Test("bad files get one stderr line each, good files are still analysed; 66 outranks 65 in any order", .needsEarshotBuilt)
    func badFilesAmongGoodOnes() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        // good.wav: 1.2 s of a 440 Hz tone at 16 kHz (2 windows).
        try AnalysisTestSupport.writeFloatWAV(AnalysisTestSupport.sine(frequency: 440, dbfs: -20, sampleRate: 16_000, count: 19_200),
                                              sampleRate: 16_000, to: directory.appendingPathComponent("good.wav"))
        try AudioTestFiles.write(Array("not audio at all\n".utf8), to: directory.appendingPathComponent("notes.wav"))
        try AudioTestFiles.write([], to: directory.appendingPathComponent("empty.wav"))
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("folder"), withIntermediateDirectories: false)
        let cut = AudioTestFiles.wav(formatTag: 1, channels: 1, sampleRate: 8_000, bitsPerSample: 16,
                                     data: [1], declaredDataBytes: 800).dropLast()  // 1 byte: the pad byte dropped
        try AudioTestFiles.write(Array(cut), to: directory.appendingPathComponent("cut.wav"))

        let outcome = try #require(try EarshotCLI.run(
            ["analyze", "missing.wav", "notes.wav", "good.wav", "empty.wav", "folder", "cut.wav", "--top", "1"], in: directory))
        #expect(outcome.status == 66)
        #expect(outcome.errorLines == [
            "earshot: missing.wav: no such file (check the path)",
            "earshot: notes.wav: not an audio file libsndfile can read (Format not recognised; use WAV, FLAC, Ogg or MP3)",
            "earshot: empty.wav: empty file (0 bytes; there is no audio in it)",
            "earshot: folder: is a directory, not an audio file (name the audio files inside it)",
            "earshot: cut.wav: truncated: the header declares 800 bytes of audio data but the file holds 1 (the copy or recording was cut short; copy it again)",
        ])
        #expect(outcome.outputLines.count == 2)
        #expect(outcome.outputLines.allSatisfy { $0.hasPrefix("good.wav ") })
        #expect(outcome.outputLines.first?.hasPrefix("good.wav 0.00-0.96s  ") == true)
        #expect(outcome.outputLines.last?.hasPrefix("good.wav 0.48-1.44s  ") == true)

        // The status does not depend on the order of the files: a missing file (66) outranks bad data (65).
        let dataFirst = try #require(try EarshotCLI.run(["analyze", "notes.wav", "missing.wav"], in: directory))
        #expect(dataFirst.status == 66)
        #expect(dataFirst.errorLines == [
            "earshot: notes.wav: not an audio file libsndfile can read (Format not recognised; use WAV, FLAC, Ogg or MP3)",
            "earshot: missing.wav: no such file (check the path)",
        ])
        let onlyData = try #require(try EarshotCLI.run(["analyze", "good.wav", "notes.wav", "cut.wav"], in: directory))
        #expect(onlyData.status == 65)
    }

    @Test("a header claiming 2147483647 Hz: one line and status 65, not a failed allocation", .needsEarshotBuilt)
    func hugeSampleRate() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        try AudioTestFiles.write(DecodingTests.floatWAV(frames: 32_000, claimedRate: 2_147_483_647),
                                 to: directory.appendingPathComponent("huge.wav"))
        let outcome = try #require(try EarshotCLI.run(["analyze", "huge.wav"], in: directory, timeout: 30))
        #expect(outcome.status == 65)
        #expect(outcome.standardOutput.isEmpty)
        #expect(outcome.errorLines == ["earshot: huge.wav: sample rate 2147483647 Hz is out of range (audio files must be 1000 to 768000 Hz; the header is damaged or the file is not really audio)"])
    }

    @Test("a float WAV holding NaN and 1e30: valid JSON lines and no nan in text or CSV", .needsEarshotBuilt)
    func nonFiniteSamples() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        var samples = AnalysisTestSupport.sine(frequency: 440, dbfs: -20, sampleRate: 16_000, count: 19_200)
        samples[100] = .nan
        samples[9_000] = 1e30
        try AnalysisTestSupport.writeFloatWAV(samples, sampleRate: 16_000, to: directory.appendingPathComponent("nan.wav"))
        let json = try #require(try EarshotCLI.run(["analyze", "nan.wav", "--format", "jsonl", "--top", "2"], in: directory))
        #expect(json.status == 0)
        #expect(json.outputLines.count == 2)
        for line in json.outputLines {
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            let classes = object?["classes"] as? [[String: Any]] ?? []
            #expect(classes.count == 2)
            #expect(classes.allSatisfy { ($0["confidence"] as? Double)?.isFinite == true })
        }
        for format in ["text", "csv"] {
            let outcome = try #require(try EarshotCLI.run(["analyze", "nan.wav", "--format", format], in: directory))
            #expect(outcome.status == 0)
            #expect(!outcome.standardOutput.lowercased().contains("nan%"))
            #expect(!outcome.standardOutput.lowercased().contains(",nan") && !outcome.standardOutput.contains("-nan"))
        }
    }

    @Test("a file name with a newline: escaped in text and in the error line, quoted in CSV", .needsEarshotBuilt)
    func controlCharactersInFileNames() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        try AnalysisTestSupport.writeFloatWAV(AnalysisTestSupport.sine(frequency: 440, dbfs: -20, sampleRate: 16_000, count: 8_000),
                                              sampleRate: 16_000, to: directory.appendingPathComponent("a\nb.wav"))
        let text = try #require(try EarshotCLI.run(["analyze", "a\nb.wav", "gone\u{1B}.wav", "--top", "1"], in: directory))
        #expect(text.status == 66)
        #expect(text.outputLines.count == 1)
        #expect(text.outputLines.first?.hasPrefix("a\\nb.wav 0.00-0.96s  ") == true)
        #expect(text.errorLines == ["earshot: gone\\x1B.wav: no such file (check the path)"])
        let csv = try #require(try EarshotCLI.run(["analyze", "a\nb.wav", "--format", "csv", "--top", "1"], in: directory))
        #expect(csv.status == 0)
        #expect(csv.standardOutput.hasPrefix("file,start,duration,rank,label,confidence\n\"a\nb.wav\",0,0.96,1,"))
    }

    @Test("MP3 data in a WAV container: one line, status 65", .needsEarshotBuilt, .needsShared)
    func mp3InWav() throws {
        let directory = TestPaths.sharedFile("audio/debian-qgo/qgo/sounds")
        let outcome = try #require(try EarshotCLI.run(["analyze", "doorbell.wav"], in: directory))
        #expect(outcome.status == 65)
        #expect(outcome.standardOutput.isEmpty)
        #expect(outcome.errorLines == ["earshot: doorbell.wav: MP3 data in a WAV (RIFF) container, which libsndfile cannot decode reliably (convert it to PCM: ffmpeg -i IN.wav -c:a pcm_s16le OUT.wav)"])
    }

    @Test("a truncated MP3 (Xing/Info header): results for what decoded and one warning line, status 0", .needsEarshotBuilt, .needsShared)
    func truncatedMP3() throws {
        // The first MP3 of the manifest: babycry-esc10/.../1-60997-B.mp3, 44.1 kHz mono, an Info header that states
        // 221504 frames (5.02 s).
        let manifest = try String(contentsOf: TestPaths.sharedFile("audio/MANIFEST.tsv"), encoding: .utf8)
        let relative = try #require(manifest.split(separator: "\n").lazy
            .map { String($0.split(separator: "\t", omittingEmptySubsequences: false).first ?? "") }
            .first { $0.hasSuffix(".mp3") })
        #expect(relative == "babycry-esc10/testing-data/004-Baby_cry/1-60997-B.mp3")
        let original = try Data(contentsOf: TestPaths.sharedFile("audio/" + relative))
        #expect(AudioFileDecoder.statesMP3Length(Array(original.prefix(16_384))))
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        try original.write(to: directory.appendingPathComponent("whole.mp3"))
        try original.prefix(original.count / 2).write(to: directory.appendingPathComponent("cut.mp3"))

        let cut = try #require(try EarshotCLI.run(["analyze", "cut.mp3", "--top", "1"], in: directory))
        #expect(cut.status == 0)
        // 109487 of 221504 frames decoded: 2.48 s, five windows.
        #expect(cut.outputLines.count == 5)
        #expect(cut.outputLines.last?.hasPrefix("cut.mp3 1.92-2.88s  ") == true)
        // Earshot's line is all of stderr: libmpg123 is quiet (it used to add "Xing stream size off by more than 1%").
        #expect(cut.errorLines == [
            "earshot: cut.mp3: truncated: the MP3 ends early (decoded 2.48 of 5.02 s); the analysis covers what was decoded",
        ])
        let whole = try #require(try EarshotCLI.run(["analyze", "whole.mp3", "--top", "1"], in: directory))
        #expect(whole.status == 0)
        #expect(whole.errorLines.isEmpty)
        #expect(whole.outputLines.last?.hasPrefix("whole.mp3 4.32-5.28s  ") == true)
    }

    @Test("usage errors name the flag and the allowed values, status 64", .needsEarshotBuilt,
          arguments: [
            (["analyze", "x.wav", "--top", "0"], "earshot: --top \"0\" is out of range (allowed: an integer from 1 to 521)"),
            (["analyze", "x.wav", "--top", "many"], "earshot: --top \"many\" is not an integer (allowed: an integer from 1 to 521)"),
            (["analyze", "x.wav", "--top", "1e3"], "earshot: --top \"1e3\" is not an integer (allowed: an integer from 1 to 521)"),
            (["analyze", "x.wav", "--top", "1000"], "earshot: --top \"1000\" is out of range (allowed: an integer from 1 to 521)"),
            (["analyze", "x.wav", "--overlap", "1.2"], "earshot: --overlap \"1.2\" is out of range (allowed: a fraction, 0 <= F < 1)"),
            (["analyze", "x.wav", "--window=0.5"], "earshot: --window \"0.5\" is out of range (allowed: seconds, 0.96 to 3600)"),
            (["analyze", "x.wav", "--format", "xml"], "earshot: --format \"xml\" is not a format (allowed: text, jsonl or csv)"),
            (["analyze", "x.wav", "--format"], "earshot: --format needs a value (text, jsonl or csv)"),
            (["analyze", "--bogus", "x.wav"], "earshot: unknown option \"--bogus\" for analyze (allowed: --model, --format, --top, --window, --overlap, --summary)"),
            (["analyze"], "earshot: analyze needs at least one FILE (usage: earshot analyze FILE... [--model FILE] [--format text|jsonl|csv] [--top K] [--window S] [--overlap F] [--summary])"),
            (["classes", "extra"], "earshot: classes takes no arguments, not \"extra\" (usage: earshot classes)"),
          ] as [([String], String)])
    func usageErrors(_ arguments: [String], _ line: String) throws {
        let outcome = try #require(try EarshotCLI.run(arguments, in: FileManager.default.temporaryDirectory))
        #expect(outcome.status == 64)
        #expect(outcome.errorLines == [line])
        #expect(outcome.standardOutput.isEmpty)
    }

    @Test("jsonl windows and summary for a golden source match the reference's top classes", .needsEarshotBuilt, .needsShared)
    func jsonLines() throws {
        let directory = TestPaths.sharedFile("audio/debian-alsa-utils/sounds/alsa")
        let outcome = try #require(try EarshotCLI.run(["analyze", "Front_Center.wav", "--format", "jsonl", "--top", "1", "--summary"], in: directory))
        #expect(outcome.status == 0)
        #expect(outcome.standardError.isEmpty)
        // Reference (golden Front_Center.json): Speech 0.999512 at 0 s, Speech 0.918587 at 0.48 s.
        #expect(outcome.outputLines == [
            #"{"file":"Front_Center.wav","start":0,"duration":0.96,"classes":[{"class":"Speech","confidence":0.9995}]}"#,
            #"{"file":"Front_Center.wav","start":0.48,"duration":0.96,"classes":[{"class":"Speech","confidence":0.9186}]}"#,
            #"{"file":"Front_Center.wav","windows":2,"summary":[{"label":"Speech","share":1,"windows":2}]}"#,
        ])
    }

    @Test("classes lists the 521 labels with their index", .needsEarshotBuilt)
    func classes() throws {
        let outcome = try #require(try EarshotCLI.run(["classes"], in: FileManager.default.temporaryDirectory))
        #expect(outcome.status == 0)
        let lines = outcome.outputLines
        #expect(lines.count == 521)
        #expect(lines.first == "0\tSpeech")
        #expect(lines.contains("393\tSmoke detector, smoke alarm"))
        #expect(lines.last == "520\tField recording")
    }
}
