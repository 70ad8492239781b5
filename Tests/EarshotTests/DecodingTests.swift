import CSndFile
import Foundation
import Testing
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// Helpers shared by the decoding and analysis tests: temp directories, hand-made WAV files, float32 files.
enum AudioTestFiles {
    /// A fresh empty directory under the system temp dir; removed by the caller with `remove`.
    static func makeTemporaryDirectory() throws -> URL {
        let url = FileManager.default.temporaryDirectory
            .appendingPathComponent("earshot-analysis-tests-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    static func remove(_ url: URL) {
        try? FileManager.default.removeItem(at: url)
    }

    /// A canonical WAV file: RIFF header, `fmt ` chunk (PCM tag 1, IEEE float tag 3, or WAVE_FORMAT_EXTENSIBLE
    /// 0xFFFE with the PCM sub-format GUID), `data` chunk holding `data` as given (already in the sample encoding).
    static func wav(formatTag: UInt16, channels: Int, sampleRate: Int, bitsPerSample: Int, data: [UInt8],
                    extensible: Bool = false, declaredDataBytes: Int? = nil) -> [UInt8] {
        var bytes: [UInt8] = []
        func u16(_ v: UInt16) { bytes += [UInt8(v & 0xFF), UInt8(v >> 8)] }
        func u32(_ v: UInt32) { bytes += [UInt8(v & 0xFF), UInt8((v >> 8) & 0xFF), UInt8((v >> 16) & 0xFF), UInt8(v >> 24)] }
        let blockAlign = channels * bitsPerSample / 8
        let fmtSize = extensible ? 40 : 16
        let dataSize = declaredDataBytes ?? data.count
        bytes += Array("RIFF".utf8); u32(UInt32(4 + 8 + fmtSize + 8 + dataSize))
        bytes += Array("WAVE".utf8)
        bytes += Array("fmt ".utf8); u32(UInt32(fmtSize))
        u16(extensible ? 0xFFFE : formatTag); u16(UInt16(channels)); u32(UInt32(sampleRate))
        u32(UInt32(sampleRate * blockAlign)); u16(UInt16(blockAlign)); u16(UInt16(bitsPerSample))
        if extensible {
            u16(22); u16(UInt16(bitsPerSample)); u32(channels == 2 ? 0x3 : 0x4)
            // KSDATAFORMAT_SUBTYPE_PCM / _IEEE_FLOAT: {0000000X-0000-0010-8000-00AA00389B71}
            u32(UInt32(formatTag)); u16(0x0000); u16(0x0010)
            bytes += [0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71]
        }
        bytes += Array("data".utf8); u32(UInt32(dataSize))
        bytes += data
        if data.count % 2 == 1 { bytes.append(0) }
        return bytes
    }

    /// Little-endian bytes of integers of `width` bytes (two's complement).
    static func littleEndian(_ values: [Int64], width: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        for value in values {
            let bits = UInt64(bitPattern: value)
            for byte in 0..<width { bytes.append(UInt8((bits >> (8 * UInt64(byte))) & 0xFF)) }
        }
        return bytes
    }

    static func littleEndian(_ values: [Float]) -> [UInt8] {
        littleEndian(values.map { Int64($0.bitPattern) }, width: 4)
    }

    static func write(_ bytes: [UInt8], to url: URL) throws {
        try Data(bytes).write(to: url)
    }

    /// A raw little-endian float32 file (the goldens' `.f32`).
    static func readFloat32(_ url: URL) throws -> [Float] {
        let data = try Data(contentsOf: url)
        return data.withUnsafeBytes { raw in
            (0..<(data.count / 4)).map { Float(bitPattern: UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: $0 * 4, as: UInt32.self))) }
        }
    }

    /// The goldens in ../shared/golden: (stem, source path relative to ../shared/audio).
    static func goldens() throws -> [(stem: String, source: String)] {
        let directory = TestPaths.sharedFile("golden")
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".json") }.sorted()
        return try names.map { name in
            let data = try Data(contentsOf: directory.appendingPathComponent(name))
            let object = try JSONSerialization.jsonObject(with: data) as? [String: Any]
            return (String(name.dropLast(5)), object?["source"] as? String ?? "")
        }
    }

    /// The error a throwing call raised, as EarshotError (nil when it did not throw).
    static func error<T>(_ body: () throws(EarshotError) -> T) -> EarshotError? {
        do {
            _ = try body()
            return nil
        } catch {
            return error
        }
    }
}

@Suite("Decoding")
struct DecodingTests {
    // MARK: Formats, full scale, downmix (hand-made WAV files)

    @Test("8-bit unsigned WAV reads at full scale")
    func unsigned8Bit() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let url = directory.appendingPathComponent("u8.wav")
        try AudioTestFiles.write(AudioTestFiles.wav(formatTag: 1, channels: 1, sampleRate: 8_000, bitsPerSample: 8,
                                                    data: [0x80, 0xFF, 0x00, 0xC0, 0x40]), to: url)
        let decoder = try AudioFileDecoder(url: url)
        #expect(decoder.sampleRate == 8_000)
        #expect(decoder.channelCount == 1)
        #expect(decoder.declaredFrameCount == 5)
        #expect(decoder.formatDescription == "WAV (Microsoft), Unsigned 8 bit PCM")
        #expect(try decoder.readAllMono() == [0, 127.0 / 128, -1, 0.5, -0.5])
    }

    @Test("16-, 24- and 32-bit integer and 32-bit float WAV read at full scale")
    func integerAndFloatWidths() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let cases: [(name: String, tag: UInt16, bits: Int, data: [UInt8], expected: [Float], format: String)] = [
            ("s16", 1, 16, AudioTestFiles.littleEndian([0, 16_384, -32_768, 32_767], width: 2),
             [0, 0.5, -1, 32_767.0 / 32_768], "WAV (Microsoft), Signed 16 bit PCM"),
            ("s24", 1, 24, AudioTestFiles.littleEndian([0, 0x40_0000, -0x80_0000, 0x7F_FFFF, -1], width: 3),
             [0, 0.5, -1, 8_388_607.0 / 8_388_608, -1.0 / 8_388_608], "WAV (Microsoft), Signed 24 bit PCM"),
            ("s32", 1, 32, AudioTestFiles.littleEndian([0, 1 << 30, Int64(Int32.min), -(1 << 29)], width: 4),
             [0, 0.5, -1, -0.25], "WAV (Microsoft), Signed 32 bit PCM"),
            ("f32", 3, 32, AudioTestFiles.littleEndian([0.25, -0.75, 1.5, 0]),
             [0.25, -0.75, 1.5, 0], "WAV (Microsoft), 32 bit float"),
        ]
        for item in cases {
            let url = directory.appendingPathComponent("\(item.name).wav")
            try AudioTestFiles.write(AudioTestFiles.wav(formatTag: item.tag, channels: 1, sampleRate: 44_100,
                                                        bitsPerSample: item.bits, data: item.data), to: url)
            let decoder = try AudioFileDecoder(url: url)
            #expect(decoder.formatDescription == item.format, "\(item.name)")
            #expect(try decoder.readAllMono() == item.expected, "\(item.name)")
        }
    }

    @Test("WAVE_FORMAT_EXTENSIBLE 24-bit stereo mixes to the mean of the channels")
    func extensibleStereoDownmix() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let url = directory.appendingPathComponent("ext.wav")
        // Frames (L, R): (0.5, 0), (-1, -0.5), (0.25, 0.25)
        let samples: [Int64] = [0x40_0000, 0, -0x80_0000, -0x40_0000, 0x20_0000, 0x20_0000]
        try AudioTestFiles.write(AudioTestFiles.wav(formatTag: 1, channels: 2, sampleRate: 48_000, bitsPerSample: 24,
                                                    data: AudioTestFiles.littleEndian(samples, width: 3), extensible: true), to: url)
        let decoder = try AudioFileDecoder(url: url)
        #expect(decoder.formatDescription == "WAVEX (Microsoft), Signed 24 bit PCM")
        #expect(decoder.channelCount == 2)
        var interleaved: [Float] = []
        #expect(try decoder.read(maxFrames: 2, appendingTo: &interleaved) == 2)
        #expect(interleaved == [0.5, 0, -1, -0.5])
        var mono: [Float] = []
        #expect(try decoder.readMono(maxFrames: 10, appendingTo: &mono) == 1)
        #expect(mono == [0.25])
        #expect(try decoder.readMono(maxFrames: 10, appendingTo: &mono) == 0)
        #expect(decoder.isAtEnd)
        #expect(decoder.framesRead == 3)
    }

    @Test("three channels mix to (a + b + c) / 3")
    func threeChannelDownmix() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let url = directory.appendingPathComponent("three.wav")
        try AudioTestFiles.write(AudioTestFiles.wav(formatTag: 3, channels: 3, sampleRate: 16_000, bitsPerSample: 32,
                                                    data: AudioTestFiles.littleEndian([0.1, 0.2, 0.4, -0.3, 0, 0.9])), to: url)
        let mono = try AudioFileDecoder(url: url).readAllMono()
        #expect(mono == [(Float(0.1) + 0.2 + 0.4) / 3, (Float(-0.3) + 0 + 0.9) / 3])
    }

    @Test("float WAV: NaN reads as 0, ±inf and ±1e30 as ±1000, over-full-scale 1.5 unchanged (mono, interleaved, mixed)")
    func nonFiniteFloatSamplesAreSanitized() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let values: [Float] = [.nan, .infinity, -.infinity, 1e30, -1e30, 1.5, -0.25, 0]
        let url = directory.appendingPathComponent("nonfinite.wav")
        try AudioTestFiles.write(AudioTestFiles.wav(formatTag: 3, channels: 1, sampleRate: 16_000, bitsPerSample: 32,
                                                    data: AudioTestFiles.littleEndian(values)), to: url)
        #expect(try AudioFileDecoder(url: url).readAllMono() == [0, 1000, -1000, 1000, -1000, 1.5, -0.25, 0])

        // Stereo: each channel is sanitized before the mix, so (inf, -inf) is 0, not NaN.
        let stereoURL = directory.appendingPathComponent("nonfinite-stereo.wav")
        try AudioTestFiles.write(AudioTestFiles.wav(formatTag: 3, channels: 2, sampleRate: 16_000, bitsPerSample: 32,
                                                    data: AudioTestFiles.littleEndian(values)), to: stereoURL)
        var interleaved: [Float] = []
        #expect(try AudioFileDecoder(url: stereoURL).read(maxFrames: 4, appendingTo: &interleaved) == 4)
        #expect(interleaved == [0, 1000, -1000, 1000, -1000, 1.5, -0.25, 0])
        #expect(try AudioFileDecoder(url: stereoURL).readAllMono() == [500, 0, -499.25, -0.125])
    }

    // MARK: Real recordings in ../shared/audio

    @Test("formats in ../shared/audio: rate, channels, frames and sample values (reference: python soundfile)", .needsShared,
          arguments: [
            ("debian-alsa-utils/sounds/alsa/Front_Center.wav", 48_000, 1, Int64(68_545), "WAV (Microsoft), Signed 16 bit PCM",
             [(10_000, Float(-0.0633544921875)), (20_000, 0.01641845703125)]),
            ("debian-etw-data/games/etw/snd/dog.wav", 22_050, 1, 4_058, "WAV (Microsoft), Unsigned 8 bit PCM",
             [(1_000, -0.8203125), (1_882, -0.875), (1_883, -0.8671875)]),
            ("knock-alarm-course/A2/holdout_dataset/knock/file3.wav", 48_000, 1, 990_990, "WAV (Microsoft), Signed 24 bit PCM",
             [(328_412, 1_706_558.0 / 8_388_608), (328_413, 1_703_669.0 / 8_388_608)]),
            ("snoring-khan/1/1_10.flac", 48_000, 1, 48_000, "FLAC (Free Lossless Audio Codec), Signed 16 bit PCM",
             [(1_000, 0.050323486328125), (30_000, 0.002777099609375)]),
            ("debian-lomiri-sounds/sounds/lomiri/ringtones/Alarm_clock.ogg", 44_100, 2, 705_600, "OGG (OGG Container format), Vorbis",
             [(100_000, (0.13564881682395935 + 0.11894523352384567) / 2)]),
            ("babycry-esc10/training-data/004-Baby_cry/2-107351-A.mp3", 44_100, 1, 218_880, "MPEG-1/2 Audio, MPEG Layer III",
             [(50_000, -0.09828554093837738), (100_000, -0.0011112469946965575)]),
          ] as [(String, Int, Int, Int64, String, [(Int, Float)])])
    func sharedRecording(_ path: String, _ rate: Int, _ channels: Int, _ frames: Int64, _ format: String, _ samples: [(Int, Float)]) throws {
        let decoder = try AudioFileDecoder(url: TestPaths.sharedFile("audio/" + path))
        #expect(decoder.sampleRate == rate)
        #expect(decoder.channelCount == channels)
        #expect(decoder.declaredFrameCount == frames)
        #expect(decoder.formatDescription == format)
        let mono = try decoder.readAllMono()
        #expect(Int64(mono.count) == frames)
        for (index, value) in samples {
            // PCM is bit-exact; Vorbis and MP3 decoders agree with the reference's libsndfile 1.2.2 to float rounding.
            #expect(abs(mono[index] - value) <= 1e-6, "sample \(index)")
        }
    }

    @Test("decode + downmix + 16 kHz resampling reproduces each golden's .wave16k.f32 input", .needsShared)
    func goldenWaveforms() throws {
        let goldens = try AudioTestFiles.goldens()
        #expect(goldens.count >= 10)
        for golden in goldens {
            let reference = try AudioTestFiles.readFloat32(TestPaths.sharedFile("golden/\(golden.stem).wave16k.f32"))
            let ours = try decodeMono16k(TestPaths.sharedFile("audio/" + golden.source))
            #expect(ours.count == reference.count, "\(golden.stem)")
            var maxDifference: Float = 0
            for index in 0..<min(ours.count, reference.count) {
                maxDifference = max(maxDifference, abs(ours[index] - reference[index]))
            }
            print("golden \(golden.stem): \(ours.count) samples, max |ours - reference| = \(maxDifference)")
            // Measured: 0 (bit-exact) for WAV, FLAC and MP3 sources; 3.6e-7 for Ogg Vorbis (libvorbis float rounding).
            #expect(maxDifference <= 1e-6, "\(golden.stem)")
        }
    }

    // MARK: Resampler

    @Test("streaming in small chunks gives the same samples as one call; flush completes the length")
    func resamplerStreamingEqualsOneShot() throws {
        let input = (0..<48_000).map { Float(sin(Double($0) * 2 * Double.pi * 440 / 48_000)) * 0.5 }
        let oneShot = try Resampler(inputRate: 48_000)
        var whole: [Float] = []
        try oneShot.process(input, appendingTo: &whole)
        try oneShot.flush(appendingTo: &whole)

        let streaming = try Resampler(inputRate: 48_000)
        var chunked: [Float] = []
        chunked.reserveCapacity(20_000)
        var start = 0
        let sizes = [1, 7, 160, 441, 1_024, 3]
        var turn = 0
        while start < input.count {
            let end = min(input.count, start + sizes[turn % sizes.count])
            try input[start..<end].withUnsafeBufferPointer { try streaming.process($0, appendingTo: &chunked) }
            start = end
            turn += 1
        }
        try streaming.flush(appendingTo: &chunked)
        #expect(whole.count == 16_000)
        #expect(chunked == whole)

        // A 440 Hz sine of amplitude 0.5 stays one: compare with the analytic signal away from the edges.
        var maxError: Float = 0
        for index in 1_000..<15_000 {
            let expected = Float(sin(Double(index) * 2 * Double.pi * 440 / 16_000)) * 0.5
            maxError = max(maxError, abs(whole[index] - expected))
        }
        #expect(maxError < 1e-4)
    }

    @Test("reset forgets the previous signal; equal rates pass through")
    func resamplerResetAndPassthrough() throws {
        let noise = (0..<4_410).map { Float(($0 * 7_919) % 1_000) / 1_000 - 0.5 }
        let tone = (0..<44_100).map { Float(sin(Double($0) * 0.05)) }
        let fresh = try Resampler(inputRate: 44_100)
        var expected: [Float] = []
        try fresh.process(tone, appendingTo: &expected)
        try fresh.flush(appendingTo: &expected)

        let reused = try Resampler(inputRate: 44_100)
        var discarded: [Float] = []
        try reused.process(noise, appendingTo: &discarded)
        try reused.reset()
        var output: [Float] = []
        try reused.process(tone, appendingTo: &output)
        try reused.flush(appendingTo: &output)
        #expect(output == expected)
        #expect(output.count == 16_000)

        let same = try Resampler(inputRate: 16_000)
        #expect(same.isPassthrough)
        var copy: [Float] = []
        try same.process(noise, appendingTo: &copy)
        #expect(copy == noise)

        #expect(AudioTestFiles.error { () throws(EarshotError) in try Resampler(inputRate: 0) }?.message
                == "cannot resample from 0.0 Hz to 16000.0 Hz (sample rates must be > 0)")
    }

    // MARK: Bad input: exact error lines

    @Test("missing file, directory, FIFO, empty file: exact lines and codes")
    func missingDirectoryFifoEmpty() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let d = directory.path

        let missing = AudioTestFiles.error { () throws(EarshotError) in try AudioFileDecoder(url: directory.appendingPathComponent("missing.wav")) }
        #expect(missing?.message == "\(d)/missing.wav: no such file (check the path)")
        #expect(missing?.code == .noInput)
        #expect(missing?.exitStatus == 66)

        let folder = AudioTestFiles.error { () throws(EarshotError) in try AudioFileDecoder(url: directory) }
        #expect(folder?.message == "\(d): is a directory, not an audio file (name the audio files inside it)")
        #expect(folder?.code == .noInput)

        let fifo = directory.appendingPathComponent("fifo.wav")
        #expect(mkfifo(fifo.path, 0o600) == 0)
        let pipe = AudioTestFiles.error { () throws(EarshotError) in try AudioFileDecoder(url: fifo) }
        #expect(pipe?.message == "\(d)/fifo.wav: not a regular file (give an audio file, not a device, pipe or socket)")
        #expect(pipe?.code == .noInput)

        let emptyURL = directory.appendingPathComponent("empty.wav")
        try AudioTestFiles.write([], to: emptyURL)
        let empty = AudioTestFiles.error { () throws(EarshotError) in try AudioFileDecoder(url: emptyURL) }
        #expect(empty?.message == "\(d)/empty.wav: empty file (0 bytes; there is no audio in it)")
        #expect(empty?.code == .data)
        #expect(empty?.exitStatus == 65)
    }

    @Test("relative paths are named as given")
    func relativeDisplayPath() throws {
        let url = URL(fileURLWithPath: "no-such-dir-earshot/x.wav")
        let missing = AudioTestFiles.error { () throws(EarshotError) in try AudioFileDecoder(url: url) }
        #expect(missing?.message == "no-such-dir-earshot/x.wav: no such file (check the path)")
    }

    @Test("unreadable file: permission denied", .notRoot)
    func permissionDenied() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let url = directory.appendingPathComponent("secret.wav")
        try AudioTestFiles.write(AudioTestFiles.wav(formatTag: 1, channels: 1, sampleRate: 8_000, bitsPerSample: 8, data: [0x80]), to: url)
        #expect(chmod(url.path, 0) == 0)
        let denied = AudioTestFiles.error { () throws(EarshotError) in try AudioFileDecoder(url: url) }
        #expect(denied?.message == "\(directory.path)/secret.wav: permission denied (make the file readable for this user, e.g. chmod a+r)")
        #expect(denied?.code == .noInput)
    }

    @Test("a truncated Ogg Vorbis (cut inside its headers): damaged or truncated, not \"use WAV, FLAC, Ogg or MP3\"", .needsEarshotBuilt)
    func truncatedOgg() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let whole = directory.appendingPathComponent("whole.ogg")
        let tone = (0..<16_000).map { Float(0.3 * sin(Double($0) * 2 * Double.pi * 440 / 16_000)) }
        try LibsndfileWriter.write(tone, channels: 1, sampleRate: 16_000, format: Int32(SF_FORMAT_OGG | SF_FORMAT_VORBIS), to: whole)
        let cut = directory.appendingPathComponent("trunc.ogg")
        try AudioTestFiles.write(Array(try Data(contentsOf: whole).prefix(1_000)), to: cut)
        let error = AudioTestFiles.error { () throws(EarshotError) in try AudioFileDecoder(url: cut) }
        #expect(error?.message == "\(directory.path)/trunc.ogg: damaged or truncated audio file (libsndfile: Supported file format but file is malformed; re-export or re-copy it)")
        #expect(error?.code == .data)
        #expect(error?.cause == "Supported file format but file is malformed")

        let outcome = try #require(try EarshotCLI.run(["analyze", "trunc.ogg"], in: directory))
        #expect(outcome.status == 65)
        #expect(outcome.errorLines == ["earshot: trunc.ogg: damaged or truncated audio file (libsndfile: Supported file format but file is malformed; re-export or re-copy it)"])
    }

    @Test("not audio, header only, no frames: exact lines")
    func notAudio() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let d = directory.path

        let textURL = directory.appendingPathComponent("notes.wav")
        try AudioTestFiles.write(Array("hello, this is text and not audio\n".utf8), to: textURL)
        let text = AudioTestFiles.error { () throws(EarshotError) in try AudioFileDecoder(url: textURL) }
        #expect(text?.message == "\(d)/notes.wav: not an audio file libsndfile can read (Format not recognised; use WAV, FLAC, Ogg or MP3)")
        #expect(text?.code == .data)
        #expect(text?.cause == "Format not recognised")

        // The first 30 bytes of a WAV: RIFF header and part of the fmt chunk, no data chunk.
        let full = AudioTestFiles.wav(formatTag: 1, channels: 1, sampleRate: 8_000, bitsPerSample: 16,
                                      data: AudioTestFiles.littleEndian([1, 2, 3], width: 2))
        let headerURL = directory.appendingPathComponent("header.wav")
        try AudioTestFiles.write(Array(full.prefix(30)), to: headerURL)
        let header = AudioTestFiles.error { () throws(EarshotError) in try AudioFileDecoder(url: headerURL) }
        #expect(header?.message == "\(d)/header.wav: damaged or truncated audio file (libsndfile: Error in WAV file. No 'data' chunk marker; re-export or re-copy it)")
        #expect(header?.code == .data)

        let noFramesURL = directory.appendingPathComponent("silent-header.wav")
        try AudioTestFiles.write(AudioTestFiles.wav(formatTag: 1, channels: 1, sampleRate: 8_000, bitsPerSample: 16, data: []), to: noFramesURL)
        let noFrames = AudioTestFiles.error { () throws(EarshotError) in try decodeMono16k(noFramesURL) }
        #expect(noFrames?.message == "\(d)/silent-header.wav: no audio frames (the file holds a header but no samples)")
        #expect(noFrames?.code == .data)
    }

    @Test("a header claiming 2147483647 Hz or 1 Hz is refused with one line, before any buffer is sized by it")
    func sampleRateOutOfRange() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let d = directory.path
        for (rate, name) in [(2_147_483_647, "huge.wav"), (1, "slow.wav"), (999, "below.wav"), (768_001, "above.wav")] {
            let url = directory.appendingPathComponent(name)
            try AudioTestFiles.write(Self.floatWAV(frames: 32_000, claimedRate: UInt32(rate)), to: url)
            let error = AudioTestFiles.error { () throws(EarshotError) in try AudioFileDecoder(url: url) }
            #expect(error?.message == "\(d)/\(name): sample rate \(rate) Hz is out of range (audio files must be 1000 to 768000 Hz; the header is damaged or the file is not really audio)")
            #expect(error?.code == .data)
        }
        for rate in [1_000, 768_000] {
            let url = directory.appendingPathComponent("edge-\(rate).wav")
            try AudioTestFiles.write(Self.floatWAV(frames: 32_000, claimedRate: UInt32(rate)), to: url)
            let decoder = try AudioFileDecoder(url: url)
            #expect(decoder.sampleRate == rate)
            #expect(try decoder.readAllMono().count == 32_000)
        }
    }

    /// A mono float WAV of `frames` zeros whose header claims `claimedRate` Hz (byte rate written as the low 32 bits
    /// of rate * 4, as a hand-made or hostile file might).
    static func floatWAV(frames: Int, claimedRate: UInt32) -> [UInt8] {
        var bytes = AudioTestFiles.wav(formatTag: 3, channels: 1, sampleRate: 16_000, bitsPerSample: 32,
                                       data: [UInt8](repeating: 0, count: frames * 4))
        let byteRate = claimedRate &* 4
        for index in 0..<4 {
            bytes[24 + index] = UInt8((claimedRate >> (8 * UInt32(index))) & 0xFF)
            bytes[28 + index] = UInt8((byteRate >> (8 * UInt32(index))) & 0xFF)
        }
        return bytes
    }

    @Test("truncated WAV: the frames there, and the exact warning line; cut before its first frame: exact error line")
    func truncated() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let d = directory.path

        // A WAV declaring 2000 data bytes (1000 frames) that holds only 600 (300 frames).
        let samples = AudioTestFiles.littleEndian((0..<300).map { Int64($0 * 50) }, width: 2)
        let cut = AudioTestFiles.wav(formatTag: 1, channels: 1, sampleRate: 8_000, bitsPerSample: 16, data: samples,
                                     declaredDataBytes: 2_000)
        let wavURL = directory.appendingPathComponent("cut.wav")
        try AudioTestFiles.write(cut, to: wavURL)
        let decoder = try AudioFileDecoder(url: wavURL)
        #expect(decoder.declaredFrameCount == 1_000)
        let decoded = try decoder.readAllMono()
        #expect(decoded == (0..<300).map { Float($0 * 50) / 32_768 })
        #expect(decoder.truncationWarning == "\(d)/cut.wav: truncated: decoded 300 of 1000 frames the header promises; results cover only the first 0.04 s")

        // One byte of data (the helper's pad byte dropped): not one frame to decode.
        let stub = AudioTestFiles.wav(formatTag: 1, channels: 1, sampleRate: 8_000, bitsPerSample: 16, data: [7],
                                      declaredDataBytes: 2_000).dropLast()
        let stubURL = directory.appendingPathComponent("stub.wav")
        try AudioTestFiles.write(Array(stub), to: stubURL)
        let wav = AudioTestFiles.error { () throws(EarshotError) in try AudioFileDecoder(url: stubURL) }
        #expect(wav?.message == "\(d)/stub.wav: truncated: the header declares 2000 bytes of audio data but the file holds 1 (the copy or recording was cut short; copy it again)")
        #expect(wav?.code == .data)
    }

    @Test("the frames a cut WAV or AIFF promises: the COMM/fact count libsndfile logs, else the declared bytes per frame")
    func promisedFrames() {
        #expect(AudioFileDecoder.promisedFrameCount(declaredBytes: 1_020_990, presentBytes: 299_957, frames: 149_978, log: "data : 1020990 (should be 299957)\n") == 510_495)
        #expect(AudioFileDecoder.promisedFrameCount(declaredBytes: 1_020_998, presentBytes: 299_920, frames: 149_956, log: " COMM : 18\n  Frames      : 510495\n SSND : 1020998 (should be 299920)\n") == 510_495)
        #expect(AudioFileDecoder.promisedFrameCount(declaredBytes: 258_816, presentBytes: 99_940, frames: 197_455, log: "fact : 4\n  frames  : 510495\ndata : 258816 (should be 99940)\n") == 510_495)
        #expect(AudioFileDecoder.promisedFrameCount(declaredBytes: 2_000, presentBytes: 1, frames: 0, log: "") == nil)
    }

    @Test("truncated FLAC: the frames there, and the exact warning line", .needsShared)
    func truncatedFLAC() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let d = directory.path
        // The first 20000 of 36712 bytes of a 48000-frame FLAC.
        let flac = try Data(contentsOf: TestPaths.sharedFile("audio/snoring-khan/1/1_10.flac"))
        let flacURL = directory.appendingPathComponent("cut.flac")
        try flac.prefix(20_000).write(to: flacURL)
        let decoder = try AudioFileDecoder(url: flacURL)
        #expect(decoder.declaredFrameCount == 48_000)
        #expect(try decoder.readAllMono().count == 16_384)
        #expect(decoder.truncationWarning == "\(d)/cut.flac: truncated: decoded 16384 of 48000 frames the header promises; results cover only the first 0.34 s")
        #expect(decoder.isAtEnd)
        // Cut inside the first audio frame: nothing decodes, which stays an error.
        let early = directory.appendingPathComponent("early.flac")
        try flac.prefix(1_000).write(to: early)
        let earlyDecoder = try AudioFileDecoder(url: early)
        let earlyError = AudioTestFiles.error { () throws(EarshotError) in try earlyDecoder.readAllMono() }
        #expect(earlyError?.code == .data)
        #expect(earlyError?.message == "\(d)/early.flac: truncated: the header declares 48000 frames but the data ends after 0 (flac decoder lost sync; the copy or recording was cut short; copy it again)")
        #expect(earlyDecoder.truncationWarning == nil)
    }

    @Test("MP3 data in a WAV (RIFF) container is named as such", .needsShared)
    func mp3InWav() throws {
        let url = TestPaths.sharedFile("audio/debian-qgo/qgo/sounds/doorbell.wav")
        let error = AudioTestFiles.error { () throws(EarshotError) in try decodeMono16k(url) }
        #expect(error?.message == "\(url.path): MP3 data in a WAV (RIFF) container, which libsndfile cannot decode reliably (convert it to PCM: ffmpeg -i IN.wav -c:a pcm_s16le OUT.wav)")
        #expect(error?.code == .data)
    }

    @Test("the WAV data-chunk log parser ignores streaming placeholders and RIFF size mismatches")
    func dataChunkLogParser() {
        #expect(AudioFileDecoder.shortDataChunk(log: "RIFF : 137126 (should be 59992)\ndata : 137090 (should be 59956)\n")! == (137_090, 59_956))
        #expect(AudioFileDecoder.shortDataChunk(log: "RIFF : 46758 (should be 46750)\ndata : 46714\n") == nil)
        #expect(AudioFileDecoder.shortDataChunk(log: "data : 0 (should be 96000)\n") == nil)
        #expect(AudioFileDecoder.shortDataChunk(log: "data : 2147479552 (should be 96000)\n") == nil)
        #expect(AudioFileDecoder.shortDataChunk(log: "data : 4294967295 (should be 96000)\n") == nil)
    }
}


/// Files written with the system libsndfile itself (formats no shared recording has).
enum LibsndfileWriter {
    /// Writes mono or interleaved `samples` with libsndfile in `format` (e.g. `SF_FORMAT_OGG | SF_FORMAT_OPUS`).
    static func write(_ samples: [Float], channels: Int, sampleRate: Int, format: Int32, to url: URL) throws {
        var info = SF_INFO()
        info.samplerate = Int32(sampleRate)
        info.channels = Int32(channels)
        info.format = format
        guard let file = sf_open(url.path, Int32(SFM_WRITE), &info) else {
            throw EarshotError(.cannotCreate, "cannot write \(url.path): \(String(cString: sf_strerror(nil)))")
        }
        defer { sf_close(file) }
        let frames = samples.count / channels
        let written = samples.withUnsafeBufferPointer { sf_writef_float(file, $0.baseAddress, sf_count_t(frames)) }
        guard written == frames else {
            throw EarshotError(.io, "wrote \(written) of \(frames) frames to \(url.path): \(String(cString: sf_strerror(file)))")
        }
    }
}

@Suite("DecodingOpus")
struct DecodingOpusTests {
    @Test("Ogg Opus (written by libsndfile): 48 kHz stereo, frame count, level and pitch survive decoding")
    func opus() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let url = directory.appendingPathComponent("tone.opus")
        // 2 s, 440 Hz at -20 dBFS RMS in both channels.
        let mono = AnalysisTestSupport.sine(frequency: 440, dbfs: -20, sampleRate: 48_000, count: 96_000)
        var stereo: [Float] = []
        for value in mono { stereo += [value, value] }
        try LibsndfileWriter.write(stereo, channels: 2, sampleRate: 48_000, format: Int32(SF_FORMAT_OGG | SF_FORMAT_OPUS), to: url)

        let decoder = try AudioFileDecoder(url: url)
        #expect(decoder.formatDescription == "OGG (OGG Container format), Opus")
        #expect(decoder.sampleRate == 48_000)
        #expect(decoder.channelCount == 2)
        let decoded = try decoder.readAllMono()
        #expect(decoded.count == 96_000)
        // Lossy: compare the level (RMS over the middle second) with the input's, and the waveform loosely.
        let middle = decoded[24_000..<72_000]
        let level = middle.withUnsafeBufferPointer { ClassificationResult.level(of: $0) }
        #expect(abs(level - -20) < 0.5, "level \(level)")
        // The tone's pitch: 440 Hz has 880 zero crossings per second.
        let crossings = zip(middle.dropFirst(), middle).filter { ($0 >= 0) != ($1 >= 0) }.count
        #expect(abs(crossings - 880) <= 2, "crossings \(crossings)")
        let resampled = try decodeMono16k(url)
        #expect(resampled.count == 32_000)
    }
}
