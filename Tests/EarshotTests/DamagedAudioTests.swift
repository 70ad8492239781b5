import CSndFile
import Foundation
import Testing
import EarshotAnalysis
import EarshotAudio
import EarshotSupport

/// Damaged and truncated audio through the real `earshot` binary (a child process): each file gets Earshot's one
/// line on stderr naming the file and the cause, and nothing else (no line from libmpg123 or libsndfile).
@Suite("damaged audio files")
struct DamagedAudioTests {
    /// babycry-esc10/.../1-60997-B.mp3: 81546 bytes, 44.1 kHz mono, 128 kb/s, an ID3v2 tag (45 bytes) and an Info
    /// frame stating 221504 frames (5.02 s); its frames are 417 or 418 bytes.
    static func sharedMP3() throws -> Data {
        let data = try Data(contentsOf: TestPaths.sharedFile("audio/babycry-esc10/testing-data/004-Baby_cry/1-60997-B.mp3"))
        #expect(data.count == 81_546)
        return data
    }

    @Test("a truncated MP3: 'truncated' is the cause, stderr holds only Earshot's line", .needsEarshotBuilt, .needsShared,
          arguments: [
            // Cut inside the Info frame and inside the first audio frame: nothing decodes, status 65.
            (100, 65, 0, "earshot: cut.mp3: truncated: the MP3 ends inside its first audio frame (100 bytes; the copy or recording was cut short; copy it again)"),
            (463, 65, 0, "earshot: cut.mp3: truncated: the MP3 ends inside its first audio frame (463 bytes; the copy or recording was cut short; copy it again)"),
            // Cut inside the ID3v2 tag's 10-byte header, and inside the tag.
            (5, 65, 0, "earshot: cut.mp3: truncated: the file ends inside its ID3 tag (5 bytes; the copy or recording was cut short; copy it again)"),
            (12, 65, 0, "earshot: cut.mp3: truncated: the file ends inside its ID3 tag (12 of the 45 bytes it declares; the copy or recording was cut short; copy it again)"),
            // Half the file: shorter than the Info header states; analysed as far as it goes, status 0.
            (40_773, 0, 5, "earshot: cut.mp3: truncated: the MP3 ends early (decoded 2.48 of 5.02 s); the analysis covers what was decoded"),
            // 100 bytes short: within one MPEG frame of the stated length, told by the frame it ends inside.
            (81_446, 0, 10, "earshot: cut.mp3: truncated: the MP3 ends inside an audio frame after 5.02 s; the analysis covers what was decoded"),
          ])
    func truncatedMP3(length: Int, status: Int32, windows: Int, line: String) throws {
        let original = try Self.sharedMP3()
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        try original.prefix(length).write(to: directory.appendingPathComponent("cut.mp3"))
        let outcome = try #require(try EarshotCLI.run(["analyze", "cut.mp3", "--top", "1"], in: directory))
        #expect(outcome.status == status)
        #expect(outcome.outputLines.count == windows)
        #expect(outcome.errorLines == [line])
        // detect reads through the same decoder: the same line, alone on stderr.
        let detect = try #require(try EarshotCLI.run(["detect", "cut.mp3", "--config", "earshotd.conf"], in: directory.creatingEmptyConfig()))
        #expect(detect.status == status)
        #expect(detect.errorLines == [line])
    }

    @Test("an intact MP3 through libmpg123: the frames and format libsndfile gave, nothing on stderr", .needsEarshotBuilt, .needsShared)
    func intactMP3() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let url = directory.appendingPathComponent("whole.mp3")
        try Self.sharedMP3().write(to: url)
        let decoder = try AudioFileDecoder(url: url)
        #expect(decoder.formatDescription == "MPEG-1/2 Audio, MPEG Layer III")
        #expect(decoder.sampleRate == 44_100 && decoder.channelCount == 1)
        #expect(decoder.declaredFrameCount == 221_504)
        #expect(try decoder.readAllMono().count == 221_504)
        #expect(decoder.truncationWarning == nil)
        let outcome = try #require(try EarshotCLI.run(["analyze", "whole.mp3", "--top", "1"], in: directory))
        #expect(outcome.status == 0)
        #expect(outcome.outputLines.count == 10)
        #expect(outcome.standardError.isEmpty)
    }

    @Test("MP3 frame headers: lengths, rates and reserved values")
    func mpegHeaders() {
        // MPEG-1 layer III, 128 kb/s, 44.1 kHz, padded: 418 bytes; unpadded 417.
        #expect(MPEGAudioHeader([0xFF, 0xFB, 0x92, 0x64])?.frameLength == 418)
        #expect(MPEGAudioHeader([0xFF, 0xFB, 0x90, 0x64])?.frameLength == 417)
        // MPEG-2 layer III, 64 kb/s, 22.05 kHz: 72 * 64000 / 22050 = 208.
        let mpeg2 = MPEGAudioHeader([0xFF, 0xF3, 0x80, 0xC4])
        #expect(mpeg2?.version == 2 && mpeg2?.sampleRate == 22_050 && mpeg2?.frameLength == 208)
        // MPEG-1 layer II, 192 kb/s, 48 kHz: 144 * 192000 / 48000 = 576.
        #expect(MPEGAudioHeader([0xFF, 0xFD, 0xA4, 0x00])?.frameLength == 576)
        // Free format has no length; bitrate index 15, rate index 3, version 01 and layer 00 are not headers.
        #expect(MPEGAudioHeader([0xFF, 0xFB, 0x00, 0x00])?.frameLength == nil)
        #expect(MPEGAudioHeader([0xFF, 0xFB, 0xF0, 0x00]) == nil)
        #expect(MPEGAudioHeader([0xFF, 0xFB, 0x9C, 0x00]) == nil)
        #expect(MPEGAudioHeader([0xFF, 0xEB, 0x90, 0x00]) == nil)
        #expect(MPEGAudioHeader([0xFF, 0xF9, 0x90, 0x00]) == nil)
        #expect(MPEGAudioHeader([0xFF, 0xFB, 0x90]) == nil)
        // ID3v2: 10 + syncsafe size (+ 10 with a footer).
        #expect(MPEGAudioHeader.id3v2Length([0x49, 0x44, 0x33, 4, 0, 0, 0, 0, 0x01, 0x7F]) == 10 + 255)
        #expect(MPEGAudioHeader.id3v2Length([0x49, 0x44, 0x33, 4, 0, 0x10, 0, 0, 0, 0x23]) == 10 + 35 + 10)
        #expect(MPEGAudioHeader.id3v2Length([0x52, 0x49, 0x46, 0x46, 0, 0, 0, 0, 0, 0]) == nil)
    }

    @Test("truncated WAV, and a WAV header declaring ~4 GB: one line each, only Earshot's", .needsEarshotBuilt)
    func otherDamagedInputs() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        // 3 s of a 440 Hz tone, 16 kHz mono 16-bit: 96000 bytes of data after a 44-byte header.
        let tone = AnalysisTestSupport.sine(frequency: 440, dbfs: -6, sampleRate: 16_000, count: 48_000)
        let pcm = AudioTestFiles.littleEndian(tone.map { Int64(($0 * 32_767).rounded()) }, width: 2)
        let wav = Data(AudioTestFiles.wav(formatTag: 1, channels: 1, sampleRate: 16_000, bitsPerSample: 16, data: pcm))
        #expect(wav.count == 96_044)
        try wav.prefix(48_022).write(to: directory.appendingPathComponent("cut.wav"))
        // The RIFF and data sizes of a streaming writer that never finished (0xFFFFFF00, 0x7FFFFF00).
        var huge = wav
        huge.replaceSubrange(4..<8, with: [0x00, 0xFF, 0xFF, 0xFF])
        huge.replaceSubrange(40..<44, with: [0x00, 0xFF, 0xFF, 0x7F])
        try huge.write(to: directory.appendingPathComponent("huge.wav"))

        // Cut after 23989 of its 48000 frames: analysed as far as it goes (3 windows), one line, status 0.
        let cutWAV = try #require(try EarshotCLI.run(["analyze", "cut.wav", "--top", "1"], in: directory))
        #expect(cutWAV.status == 0)
        #expect(cutWAV.outputLines.count == Self.defaultWindows(frames: 23_989))
        #expect(cutWAV.errorLines == ["earshot: cut.wav: truncated: decoded 23989 of 48000 frames the header promises; results cover only the first 1.50 s"])
        // A placeholder size is not truncation: the 3 s that are there are analysed (6 windows), silently.
        let hugeWAV = try #require(try EarshotCLI.run(["analyze", "huge.wav", "--top", "1"], in: directory))
        #expect(hugeWAV.status == 0)
        #expect(hugeWAV.outputLines.count == 6)
        #expect(hugeWAV.standardError.isEmpty)
    }
}

extension DamagedAudioTests {
    /// The first 10 s of samples/demo.flac (16 kHz mono), to encode as Ogg.
    static func demoSeconds(_ seconds: Int) throws -> [Float] {
        let decoder = try AudioFileDecoder(url: TestPaths.packageRoot.appendingPathComponent("samples/demo.flac"))
        var samples: [Float] = []
        _ = try decoder.readMono(maxFrames: seconds * 16_000, appendingTo: &samples)
        #expect(samples.count == seconds * 16_000)
        return samples
    }

    /// Windows `earshot analyze` prints for `frames` at 16 kHz with the default 0.96 s window and 0.48 s hop.
    static func defaultWindows(frames: Int) -> Int {
        1 + (max(0, frames - 15_360) + 7_679) / 7_680
    }

    @Test("a FLAC cut short: analysed as far as it goes, one 'truncated' line with the frames decoded, status 0", .needsEarshotBuilt)
    func cutFLAC() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        // samples/demo.flac: 510495 frames (31.91 s) at 16 kHz; half of it ends inside a FLAC frame.
        let flac = try Data(contentsOf: TestPaths.packageRoot.appendingPathComponent("samples/demo.flac"))
        try flac.prefix(flac.count / 2).write(to: directory.appendingPathComponent("cut.flac"))
        let line = "earshot: cut.flac: truncated: decoded 192512 of 510495 frames the header promises; results cover only the first 12.03 s"
        let analyze = try #require(try EarshotCLI.run(["analyze", "cut.flac", "--top", "1"], in: directory))
        #expect(analyze.status == 0)
        #expect(analyze.outputLines.count == Self.defaultWindows(frames: 192_512))
        #expect(analyze.outputLines.count == 25)
        #expect(analyze.outputLines.last?.hasPrefix("cut.flac 11.52-12.48s  ") == true)
        #expect(analyze.errorLines == [line])
        let detect = try #require(try EarshotCLI.run(["detect", "cut.flac", "--config", "earshotd.conf"], in: directory.creatingEmptyConfig()))
        #expect(detect.status == 0)
        #expect(detect.errorLines == [line])
        // demo.flac's baby cry (2.40-9.60 s) is inside the part that is there.
        #expect(detect.outputLines.contains { $0.contains(#""type":"detection_end","group":"baby_cry""#) }, "\(detect.outputLines)")

        // earshotd --input: the events of the audio there, then the same line, exit 0.
        let state = directory.appendingPathComponent("state")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        var environment = ProcessInfo.processInfo.environment
        for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] { environment[name] = nil }
        environment["STATE_DIRECTORY"] = state.path
        let daemon = try EarshotCLI.runProcess(
            DaemonEndToEndTests.buildDirectory.appendingPathComponent("earshotd"),
            ["--input", "cut.flac", "--input-speed", "max", "--socket", directory.appendingPathComponent("e.sock").path,
             "--no-journal", "--watch", "baby_cry", "--config", "earshotd.conf"],
            in: directory, environment: environment, timeout: 120)
        #expect(daemon.status == 0)
        // The file ends within the cry's hold: the input's end ended it, and the line says so (trial 11 #2).
        #expect(daemon.standardError.hasSuffix("""
            earshotd: baby_cry ended (monitoring stopped: earshotd stopped or its input ended): "Baby cry" from 2.40 s to 9.60 s (7.20 s, peak confidence 1.00, mean 0.99)
            earshotd: cut.flac: truncated: decoded 192512 of 510495 frames the header promises; results cover only the first 12.03 s
            earshotd: stopped (end of input)

            """), "\(daemon.standardError)")
    }

    @Test("a FLAC damaged mid-way: every window decoded before the damage is delivered, then the error (analyze, the library)",
          .needsEarshotBuilt)
    func damagedFLAC() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        // samples/demo.flac with 4096 bytes of 0x5A from byte 200000: libFLAC loses sync after 229376 frames
        // (14.34 s); the windows wholly inside them are 0.00-0.96 s to 12.96-13.92 s, 28 of them.
        let intact = TestPaths.packageRoot.appendingPathComponent("samples/demo.flac")
        var bytes = try Data(contentsOf: intact)
        #expect(bytes.count == 327_080)
        bytes.replaceSubrange(200_000..<204_096, with: [UInt8](repeating: 0x5A, count: 4_096))
        let damaged = directory.appendingPathComponent("damaged.flac")
        try bytes.write(to: damaged)
        let cause = "decoding failed after 229376 frames (flac decoder lost sync; the file is damaged)"

        let analyze = try #require(try EarshotCLI.run(["analyze", "damaged.flac", "--top", "1"], in: directory))
        #expect(analyze.status == 65)
        #expect(analyze.outputLines.count == 28)
        #expect(analyze.outputLines.first?.hasPrefix("damaged.flac 0.00-0.96s  ") == true)
        #expect(analyze.outputLines.last?.hasPrefix("damaged.flac 12.96-13.92s  ") == true, "\(analyze.outputLines)")
        #expect(analyze.errorLines == ["earshot: damaged.flac: " + cause])

        // The library, inline (1 thread) and with the decoding thread (2), in one partial round (128 windows) and
        // in rounds of 5 (the failure comes with a round waiting for delivery and one held back until full): the
        // 28 results, equal to the intact file's first 28, then the error, no completion.
        let reference = try AnalysisTestSupport.fileResults(intact, request: ClassifySoundRequest(), threads: 1)
        for (threads, round) in [(1, 128), (2, 128), (1, 5), (2, 5)] {
            let observer = try AnalysisTestSupport.fileResults(
                damaged, request: ClassifySoundRequest(), threads: threads, windowsPerRound: round)
            #expect(observer.results.map(\.timeRange.start) == (0..<28).map { Double($0 * 7_680) / 16_000 },
                    "\(threads) threads, rounds of \(round)")
            #expect(observer.errors.map(\.message) == ["\(damaged.path): " + cause])
            #expect(observer.completions == 0)
            for (result, expected) in zip(observer.results, reference.results) {
                let difference = zip(result.scores, expected.scores).map { abs($0 - $1) }.max() ?? 1
                #expect(difference < 1e-5, "\(result.timeRange.start) s: \(difference)")
            }
        }
    }

    @Test("Ogg Vorbis and Opus cut inside a page or between pages: analysed as far as they go, one line, status 0",
          .needsEarshotBuilt, arguments: ["vorbis.ogg", "opus.opus"])
    func cutOgg(name: String) throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let whole = directory.appendingPathComponent(name)
        let codec = name.hasPrefix("opus") ? SF_FORMAT_OPUS : SF_FORMAT_VORBIS
        try LibsndfileWriter.write(try Self.demoSeconds(10), channels: 1, sampleRate: 16_000,
                                   format: Int32(SF_FORMAT_OGG | codec), to: whole)
        let bytes = try Data(contentsOf: whole)
        // The intact file: all 160000 frames, no warning.
        let intact = try AudioFileDecoder(url: whole)
        #expect(try intact.readAllMono().count == 160_000)
        #expect(intact.truncationWarning == nil)
        let intactRun = try #require(try EarshotCLI.run(["analyze", name, "--top", "1"], in: directory))
        #expect(intactRun.status == 0 && intactRun.standardError.isEmpty)
        #expect(intactRun.outputLines.count == Self.defaultWindows(frames: 160_000))

        // 60 % of the file (inside a page), and the file up to the first page that starts after 60 % (between
        // pages: the last page is complete but is not the stream's last).
        let cutAt = bytes.count * 6 / 10
        let pageStart = try #require(bytes.indices.first { $0 > cutAt && bytes[$0..<($0 + 4)].elementsEqual("OggS".utf8) })
        for (file, length, how) in [("inside-\(name)", cutAt, "the file ends inside an Ogg page"),
                                    ("between-\(name)", pageStart, "the last Ogg page lacks the end-of-stream flag")] {
            try bytes.prefix(length).write(to: directory.appendingPathComponent(file))
            let decoder = try AudioFileDecoder(url: directory.appendingPathComponent(file))
            let frames = try decoder.readAllMono().count
            #expect(frames > 60_000 && frames < 160_000, "\(file): \(frames) frames")
            let seconds = String(format: "%.2f", Double(frames) / 16_000)
            let line = "\(file): truncated: \(how); results cover only the first \(seconds) s"
            #expect(decoder.truncationWarning == "\(directory.path)/" + line)
            let analyze = try #require(try EarshotCLI.run(["analyze", file, "--top", "1"], in: directory))
            #expect(analyze.status == 0)
            #expect(analyze.errorLines == ["earshot: " + line])
            #expect(analyze.outputLines.count == Self.defaultWindows(frames: frames))
            let detect = try #require(try EarshotCLI.run(["detect", file, "--config", "earshotd.conf"], in: directory.creatingEmptyConfig()))
            #expect(detect.status == 0)
            #expect(detect.errorLines == ["earshot: " + line])
        }
    }
}

extension DamagedAudioTests {
    /// An Ogg Vorbis and an Ogg Opus file of demo.flac's first 10 s with 64 bytes of the first page that starts after
    /// half the file overwritten with 0x5A: that page fails its checksum and libsndfile skips it.
    @Test("a damaged Ogg page mid-file: one line naming the gap's time and length (decoder, analyze, detect, earshotd)",
          .needsEarshotBuilt, arguments: [
            // The lost page's audio: from the previous page's granule position to what the last page's promises
            // beyond the frames decoded.
            ("vorbis.ogg", "2.79 s of audio after 4.41 s is missing (Ogg pages that fail their checksum were skipped); later times are 2.79 s early"),
            ("opus.opus", "1.00 s of audio after 5.97 s is missing (Ogg pages that fail their checksum were skipped); later times are 1.00 s early"),
          ])
    func damagedOggPage(name: String, gap: String) throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let whole = directory.appendingPathComponent("whole-" + name)
        let codec = name.hasPrefix("opus") ? SF_FORMAT_OPUS : SF_FORMAT_VORBIS
        try LibsndfileWriter.write(try Self.demoSeconds(10), channels: 1, sampleRate: 16_000,
                                   format: Int32(SF_FORMAT_OGG | codec), to: whole)
        var bytes = try Data(contentsOf: whole)
        let page = try #require(bytes.indices.first { $0 > bytes.count / 2 && bytes[$0..<($0 + 4)].elementsEqual("OggS".utf8) })
        bytes.replaceSubrange((page + 100)..<(page + 164), with: [UInt8](repeating: 0x5A, count: 64))
        try bytes.write(to: directory.appendingPathComponent(name))
        // The intact file: no warning.
        let intact = try AudioFileDecoder(url: whole)
        #expect(try intact.readAllMono().count == 160_000)
        #expect(intact.truncationWarning == nil)

        let line = "\(name): damaged: \(gap)"
        let decoder = try AudioFileDecoder(url: directory.appendingPathComponent(name))
        _ = try decoder.readAllMono()
        #expect(decoder.truncationWarning == "\(directory.path)/" + line)
        let analyze = try #require(try EarshotCLI.run(["analyze", name, "--top", "1"], in: directory))
        #expect(analyze.status == 0)
        #expect(analyze.errorLines == ["earshot: " + line])
        let detect = try #require(try EarshotCLI.run(["detect", name, "--config", "earshotd.conf"], in: directory.creatingEmptyConfig()))
        #expect(detect.status == 0)
        #expect(detect.errorLines == ["earshot: " + line])
        let state = directory.appendingPathComponent("state")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        var environment = ProcessInfo.processInfo.environment
        for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] { environment[name] = nil }
        environment["STATE_DIRECTORY"] = state.path
        let daemon = try EarshotCLI.runProcess(
            DaemonEndToEndTests.buildDirectory.appendingPathComponent("earshotd"),
            ["--input", name, "--input-speed", "max", "--socket", directory.appendingPathComponent("e.sock").path,
             "--no-journal", "--watch", "baby_cry", "--config", "earshotd.conf"],
            in: directory, environment: environment, timeout: 120)
        #expect(daemon.status == 0)
        #expect(daemon.standardError.hasSuffix("earshotd: \(line)\nearshotd: stopped (end of input)\n"), "\(daemon.standardError)")
    }
}

extension DamagedAudioTests {
    /// ``OggEnding`` over the last pages of an Ogg Vorbis file, after a capture pattern inside packet data ("OggS",
    /// version 0, 255 segments of 255 bytes) that claims more bytes than follow it: libogg would wait at it for
    /// more data, so the pages after it must still be found.
    @Test("OggEnding: the last pages are found after a false capture pattern that claims more bytes than follow")
    func oggEndingAfterFalseCapture() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let url = directory.appendingPathComponent("vorbis.ogg")
        try LibsndfileWriter.write(try Self.demoSeconds(10), channels: 1, sampleRate: 16_000,
                                   format: Int32(SF_FORMAT_OGG | SF_FORMAT_VORBIS), to: url)
        let bytes = [UInt8](try Data(contentsOf: url))
        let starts = bytes.indices.dropLast(4).filter { bytes[$0..<($0 + 4)].elementsEqual("OggS".utf8) }
        let (previous, last) = (starts[starts.count - 2], starts[starts.count - 1])
        let falseCapture = Array("OggS".utf8) + [0] + [UInt8](repeating: 0x11, count: 21) + [255]
            + [UInt8](repeating: 255, count: 255) + [UInt8](repeating: 0x22, count: 100)
        #expect(bytes.count - previous < 255 * 255, "the false page must reach past the end")

        #expect(OggEnding.of(tail: bytes) == .finished)
        #expect(OggEnding.of(tail: falseCapture + bytes[previous...]) == .finished)
        #expect(OggEnding.of(tail: falseCapture + bytes[previous..<(bytes.count - 1)]) == .insidePage)
        #expect(OggEnding.of(tail: falseCapture + bytes[previous..<last]) == .withoutEndOfStream)
        #expect(OggEnding.of(tail: falseCapture + bytes[(previous + 1)..<last]) == nil)
        #expect(OggEnding.of(tail: []) == nil)
    }

    @Test("a WAV written to a pipe (RIFF and data chunk sizes 0): every sample there is decoded and analysed", .needsEarshotBuilt)
    func pipeWrittenWAV() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        // 3 s of a 440 Hz tone, 16 kHz mono 16-bit: 96000 bytes of data after a 44-byte header.
        let tone = AnalysisTestSupport.sine(frequency: 440, dbfs: -6, sampleRate: 16_000, count: 48_000)
        let pcm = AudioTestFiles.littleEndian(tone.map { Int64(($0 * 32_767).rounded()) }, width: 2)
        let wav = Data(AudioTestFiles.wav(formatTag: 1, channels: 1, sampleRate: 16_000, bitsPerSample: 16, data: pcm))
        try wav.write(to: directory.appendingPathComponent("intact.wav"))
        var piped = wav
        piped.replaceSubrange(4..<8, with: [0, 0, 0, 0])
        piped.replaceSubrange(40..<44, with: [0, 0, 0, 0])
        try piped.write(to: directory.appendingPathComponent("piped.wav"))
        var dataOnly = wav  // RIFF size right, data size 0
        dataOnly.replaceSubrange(40..<44, with: [0, 0, 0, 0])
        try dataOnly.write(to: directory.appendingPathComponent("data0.wav"))

        let intact = try AudioFileDecoder(url: directory.appendingPathComponent("intact.wav")).readAllMono()
        #expect(intact.count == 48_000)
        for name in ["piped.wav", "data0.wav"] {
            let decoder = try AudioFileDecoder(url: directory.appendingPathComponent(name))
            #expect(decoder.formatDescription == "WAV (Microsoft), Signed 16 bit PCM")
            #expect(decoder.sampleRate == 16_000 && decoder.channelCount == 1)
            #expect(decoder.declaredFrameCount == 48_000)
            #expect(try decoder.readAllMono() == intact, "\(name)")
            #expect(decoder.truncationWarning == nil)
            let outcome = try #require(try EarshotCLI.run(["analyze", name, "--top", "1"], in: directory))
            #expect(outcome.status == 0)
            #expect(outcome.standardError.isEmpty, "\(outcome.standardError)")
            #expect(outcome.outputLines.count == 6)
            #expect(outcome.outputLines.first?.hasPrefix("\(name) 0.00-0.96s  ") == true)
        }

        // A data chunk that really is empty, followed by a LIST chunk that ends the file: still no audio.
        let empty = AudioTestFiles.wav(formatTag: 1, channels: 1, sampleRate: 16_000, bitsPerSample: 16, data: [])
            + Array("LIST".utf8) + [4, 0, 0, 0] + Array("INFO".utf8)
        try AudioTestFiles.write(empty, to: directory.appendingPathComponent("empty.wav"))
        let outcome = try #require(try EarshotCLI.run(["analyze", "empty.wav"], in: directory))
        #expect(outcome.status == 65)
        #expect(outcome.errorLines == ["earshot: empty.wav: no audio frames (the file holds a header but no samples)"])
    }
}

extension DamagedAudioTests {
    @Test("a WAV header saying 0 Hz or 0 channels: one line naming it and the fix, status 65", .needsEarshotBuilt)
    func zeroRateOrChannels() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let pcm = AudioTestFiles.littleEndian((0..<16_000).map { Int64($0 % 200) }, width: 2)
        var rate0 = AudioTestFiles.wav(formatTag: 1, channels: 1, sampleRate: 16_000, bitsPerSample: 16, data: pcm)
        rate0.replaceSubrange(24..<28, with: [0, 0, 0, 0])
        try AudioTestFiles.write(rate0, to: directory.appendingPathComponent("rate0.wav"))
        var channels0 = AudioTestFiles.wav(formatTag: 1, channels: 1, sampleRate: 16_000, bitsPerSample: 16, data: pcm)
        channels0.replaceSubrange(22..<24, with: [0, 0])
        try AudioTestFiles.write(channels0, to: directory.appendingPathComponent("channels0.wav"))

        let rateLine = "rate0.wav: the header's sample rate is 0: not a playable WAV (re-export the recording, or if you know its rate, rewrite the header: sox -r RATE IN.wav OUT.wav)"
        let channelsLine = "channels0.wav: the header's channel count is 0: not a playable WAV (re-export the recording, or if you know its channel count, rewrite the header: sox -c CHANNELS IN.wav OUT.wav)"
        for (name, line) in [("rate0.wav", rateLine), ("channels0.wav", channelsLine)] {
            let error = AudioTestFiles.error { () throws(EarshotError) in
                try AudioFileDecoder(url: URL(fileURLWithPath: name, relativeTo: directory))
            }
            #expect(error?.message == line)
            #expect(error?.code == .data)
            let analyze = try #require(try EarshotCLI.run(["analyze", name], in: directory))
            #expect(analyze.status == 65)
            #expect(analyze.standardOutput.isEmpty)
            #expect(analyze.errorLines == ["earshot: " + line])
            let detect = try #require(try EarshotCLI.run(["detect", name, "--config", "earshotd.conf"], in: directory.creatingEmptyConfig()))
            #expect(detect.status == 65)
            #expect(detect.errorLines == ["earshot: " + line])
        }
    }
}

private extension URL {
    /// Writes an empty `earshotd.conf` (the built-in defaults) into this directory and returns the directory.
    func creatingEmptyConfig() throws -> URL {
        try Data().write(to: appendingPathComponent("earshotd.conf"))
        return self
    }
}
