import Foundation
import Testing

import Earshot
import EarshotTools

/// `earshotd --input -` reads raw S16_LE; a container piped to it is refused (trial 5 #13), and `earshot analyze -`
/// says standard input is not supported.
@Suite("Standard input containers", .timeLimit(.minutes(1)))
struct StandardInputContainerTests {
    private let queue = DispatchQueue(label: "stdin-container-tests")

    /// Two MPEG-1 Layer III frame headers, 64 kbit/s at 44100 Hz (208 bytes a frame), as an encoder writes them.
    private static let twoMP3Frames: [UInt8] = {
        var bytes = [UInt8](repeating: 0, count: 212)
        bytes.replaceSubrange(0..<4, with: [0xFF, 0xFB, 0x50, 0xC4])
        bytes.replaceSubrange(208..<212, with: [0xFF, 0xFB, 0x50, 0xC4])
        return bytes
    }()

    @Test func signaturesOfContainersAndOfRawSamples() {
        #expect(ContainerSignature.identify(Array("RIFF\u{24}\0\0\0WAVE".utf8)) == .container("a WAV file"))
        #expect(ContainerSignature.identify(Array("RF64".utf8)) == .container("a WAV file"))
        #expect(ContainerSignature.identify(Array("fLaC\0\0\0\u{22}".utf8)) == .container("a FLAC file"))
        #expect(ContainerSignature.identify(Array("OggS\0\u{2}".utf8)) == .container("an Ogg file"))
        #expect(ContainerSignature.identify(Array("FORM\0\0\0\0AIFF".utf8)) == .container("an AIFF file"))
        #expect(ContainerSignature.identify(Array("ID3\u{4}\0\0".utf8)) == .container("an MP3 file"))
        #expect(ContainerSignature.identify(Self.twoMP3Frames) == .container("an MP3 stream"))
        // Three bytes cannot be told apart; one MP3-like header waits for its successor, and without it is raw.
        #expect(ContainerSignature.identify(Array("RIF".utf8)) == .undecided)
        #expect(ContainerSignature.identify(Array(Self.twoMP3Frames.prefix(100))) == .undecided)
        var lone = Self.twoMP3Frames
        lone[208] = 0
        #expect(ContainerSignature.identify(lone) == .raw)
        #expect(ContainerSignature.identify([UInt8](repeating: 0, count: 4)) == .raw)
        #expect(ContainerSignature.identify([0xEF, 0x1E, 0xDE, 0x3D]) == .raw)
    }

    /// Writes `parts` to a pipe 50 ms apart, then closes it; replays the pipe as raw input; the end and samples.
    private func replay(_ parts: [[UInt8]], frames: Int) throws -> (end: [CaptureEnd], samples: [Float]) {
        var descriptors: [Int32] = [0, 0]
        #expect(pipe(&descriptors) == 0)
        let (readEnd, writeEnd) = (descriptors[0], descriptors[1])
        defer { close(readEnd) }
        let source = try RealtimeFileSource(rawDescriptor: readEnd, sampleRate: 16_000, pacing: .clock(speed: 100))
        let ring = SampleRingBuffer(minimumCapacity: 1 << 16)
        let ends = CaptureRecorder<CaptureEnd>()
        try source.start(into: ring, queue: queue) { ends.append($0) }
        // The source is running before any byte arrives (as the daemon starts on an idle pipe).
        usleep(150_000)
        #expect(source.isRunning)
        for part in parts {
            _ = part.withUnsafeBytes { write(writeEnd, $0.baseAddress, part.count) }
            usleep(50_000)
        }
        close(writeEnd)
        let (samples, _) = frames > 0 ? CaptureFixtures.read(ring, frames: frames) : ([], [])
        #expect(CaptureFixtures.wait(timeout: 5) { !ends.values.isEmpty })
        return (ends.values, samples)
    }

    @Test func aWAVPipedAsRawIsRefusedWithTheFix() throws {
        let header = Array("RIFF\u{24}\u{7D}\0\0WAVEfmt ".utf8) + [UInt8](repeating: 0, count: 500)
        let (ends, _) = try replay([Array(header.prefix(2)), Array(header.dropFirst(2))], frames: 0)
        #expect(ends == [.failed(EarshotError(
            .data,
            "standard input holds a WAV file, but --input - reads raw S16_LE mono samples at 16000 Hz (give the file's path: --input FILE; or decode it: ffmpeg -i FILE -f s16le -ac 1 -ar 16000 - | earshotd --input -)"))])
    }

    @Test func rawSamplesThatLookLikeOneMP3HeaderArriveExactly() throws {
        var bytes = Self.twoMP3Frames + [UInt8](repeating: 0x11, count: 1_000)
        bytes[208] = 0x12  // no second frame header: raw
        let values = stride(from: 0, to: bytes.count, by: 2).map {
            Float(Int16(bitPattern: UInt16(bytes[$0]) | UInt16(bytes[$0 + 1]) << 8)) / 32_768
        }
        let (ends, samples) = try replay([[0xFF], Array(bytes[1..<3]), Array(bytes[3...])], frames: values.count)
        #expect(ends == [.finished])
        #expect(samples == values)
    }

    @Test(.needsEarshotdBuilt) func theDaemonExitsWithTheLineWhenAWAVArrivesOnStandardInput() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("stdin-wav-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = directory.appendingPathComponent("d.conf")
        try "[output]\nsocket = \(directory.path)/e.sock\n[history]\nenabled = false\n".write(to: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(
            ["--config", config.path, "--foreground", "--input", "-", "--input-speed", "max"], standardInput: true)
        usleep(500_000)
        #expect(daemon.process.isRunning)
        let wav = Array("RIFF".utf8) + [UInt8](repeating: 0, count: 4_000)
        daemon.input.fileHandleForWriting.write(Data(wav))
        try daemon.input.fileHandleForWriting.close()
        #expect(daemon.wait(seconds: 20) == 65)
        #expect(daemon.errorText.split(separator: "\n").last.map(String.init) ==
            "earshotd: standard input holds a WAV file, but --input - reads raw S16_LE mono samples at 16000 Hz (give the file's path: --input FILE; or decode it: ffmpeg -i FILE -f s16le -ac 1 -ar 16000 - | earshotd --input -)")
    }

    @Test(.needsEarshotBuilt) func analyzeOfStandardInputSaysItIsNotSupported() throws {
        let outcome = try #require(try EarshotCLI.run(["analyze", "-"], in: FileManager.default.temporaryDirectory))
        #expect(outcome.status == 64)
        #expect(outcome.errorLines == [
            "earshot: -: reading audio from standard input is not supported (save it to a file and give the file's path, e.g. ffmpeg -i IN -f wav /tmp/in.wav; a file named - is ./-)"
        ])
    }
}
