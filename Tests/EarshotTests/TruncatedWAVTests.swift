import Foundation
import Testing
import EarshotSupport
import EarshotAudio

extension DamagedAudioTests {
    @Test("a WAV cut short (head -c): analysed as far as it goes, the FLAC's 'truncated' line, status 0; earshotd too",
          .needsEarshotBuilt)
    func cutWAV() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        // samples/demo.flac as a 16-bit WAV (510495 frames, 31.91 s at 16 kHz), cut after 192512 frames as the
        // FLAC test's half file is: 44 header bytes + 385024 bytes of samples.
        let decoder = try AudioFileDecoder(url: TestPaths.packageRoot.appendingPathComponent("samples/demo.flac"))
        let samples = try decoder.readAllMono()
        #expect(samples.count == 510_495)
        let pcm = AudioTestFiles.littleEndian(samples.map { min(32_767, max(-32_768, Int64(($0 * 32_768).rounded()))) }, width: 2)
        let wav = AudioTestFiles.wav(formatTag: 1, channels: 1, sampleRate: 16_000, bitsPerSample: 16, data: pcm)
        #expect(wav.count == 44 + 1_020_990)
        try AudioTestFiles.write(Array(wav.prefix(44 + 2 * 192_512)), to: directory.appendingPathComponent("cut.wav"))

        let line = "earshot: cut.wav: truncated: decoded 192512 of 510495 frames the header promises; results cover only the first 12.03 s"
        let analyze = try #require(try EarshotCLI.run(["analyze", "cut.wav", "--top", "1"], in: directory))
        #expect(analyze.status == 0)
        #expect(analyze.outputLines.count == Self.defaultWindows(frames: 192_512))
        #expect(analyze.outputLines.last?.hasPrefix("cut.wav 11.52-12.48s  ") == true)
        #expect(analyze.errorLines == [line])
        try Data().write(to: directory.appendingPathComponent("earshotd.conf"))  // the built-in defaults
        let detect = try #require(try EarshotCLI.run(["detect", "cut.wav", "--config", "earshotd.conf"], in: directory))
        #expect(detect.status == 0)
        #expect(detect.errorLines == [line])
        #expect(detect.outputLines.contains { $0.contains(#""type":"detection_end","group":"baby_cry""#) }, "\(detect.outputLines)")

        let state = directory.appendingPathComponent("state")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        var environment = ProcessInfo.processInfo.environment
        for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] { environment[name] = nil }
        environment["STATE_DIRECTORY"] = state.path
        let daemon = try EarshotCLI.runProcess(
            DaemonEndToEndTests.buildDirectory.appendingPathComponent("earshotd"),
            ["--input", "cut.wav", "--input-speed", "max", "--socket", directory.appendingPathComponent("e.sock").path,
             "--no-journal", "--watch", "baby_cry", "--config", "earshotd.conf"],
            in: directory, environment: environment, timeout: 120)
        #expect(daemon.status == 0)
        #expect(daemon.standardError.hasSuffix("""
            earshotd: cut.wav: truncated: decoded 192512 of 510495 frames the header promises; results cover only the first 12.03 s
            earshotd: stopped (end of input)

            """), "\(daemon.standardError)")
    }
}
