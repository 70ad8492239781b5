import Foundation
import Testing
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("Enrollment", .timeLimit(.minutes(5)))
struct EnrollmentTests {
    @Test("takes are checked: silent and clipped ones are refused with the reason and the fix")
    func takeChecks() {
        let silent = Enrollment.check([Float](repeating: 0, count: 16_000))
        #expect(silent == .tooQuiet(peakDBFS: -120))
        #expect(silent.description == "too quiet (peak -120.0 dBFS, below -45 dBFS; make the sound closer to the microphone or raise the capture level in alsamixer)")
        #expect(!silent.isGood)
        #expect(Enrollment.check([]) == .tooQuiet(peakDBFS: -120))

        let faint = AnalysisTestSupport.sine(frequency: 1_000, dbfs: -50, sampleRate: 16_000, count: 16_000)
        guard case .tooQuiet(let peak) = Enrollment.check(faint) else {
            Issue.record("a -50 dBFS tone passed")
            return
        }
        #expect(abs(peak + 50) < 0.05)

        var clipped = AnalysisTestSupport.sine(frequency: 1_000, dbfs: -20, sampleRate: 16_000, count: 16_000)
        for index in 0..<160 { clipped[index * 100] = index % 2 == 0 ? 1 : -1 }
        #expect(Enrollment.check(clipped) == .clipped(fraction: 0.01))
        #expect(Enrollment.check(clipped).description == "clipped (1.00% of samples at full scale; move the microphone away or lower the capture level in alsamixer)")

        let good = Enrollment.check(AnalysisTestSupport.sine(frequency: 1_000, dbfs: -20, sampleRate: 16_000, count: 16_000))
        #expect(good.description == "ok (peak -20.0 dBFS)")
        #expect(good.isGood)
    }

    @Test("a label that cannot be one, or too few takes, are usage errors")
    func enrollmentUsage() {
        func message(_ label: String, takes: Int) -> String? {
            AudioTestFiles.error { () throws(EarshotError) in
                _ = try Enrollment.train(takes: Array(repeating: [0], count: takes), background: [],
                                         configuration: EnrollmentConfiguration(label: label))
            }?.message
        }
        #expect(message("background", takes: 3) == "--label background is the name of the negative class; name the sound itself")
        #expect(message("door|bell", takes: 3) == "--label: \"door|bell\" cannot be a label: ':' and '|' separate model and class names in the daemon's configuration")
        #expect(message("doorbell", takes: 1) == "enroll needs at least 2 takes of the sound, got 1")
    }

    /// A beeper: 0.25 s bursts of 3.2 kHz every 0.5 s, at -20 dBFS, in faint pink noise; `seconds` long.
    static func beeps(seconds: Double, offset: Double, seed: UInt64) -> [Float] {
        var random = SeededRandom(seed: seed)
        var samples = Enrollment.noise(seconds: seconds, levelDBFS: -55, pink: true, random: &random)
        let tone = AnalysisTestSupport.sine(frequency: 3_200, dbfs: -20, sampleRate: 16_000, count: samples.count)
        for index in samples.indices {
            let time = Double(index) / 16_000 + offset
            if time.truncatingRemainder(dividingBy: 0.5) < 0.25 { samples[index] += tone[index] }
        }
        return samples
    }

    /// A room: pink noise at -40 dBFS with a 120 Hz hum at -30 dBFS.
    static func room(seconds: Double, seed: UInt64) -> [Float] {
        var random = SeededRandom(seed: seed)
        let noise = Enrollment.noise(seconds: seconds, levelDBFS: -40, pink: true, random: &random)
        let hum = AnalysisTestSupport.sine(frequency: 120, dbfs: -30, sampleRate: 16_000, count: noise.count)
        return zip(noise, hum).map { $0 + $1 }
    }

    @Test("enrolling two takes of a beeper separates them from the room, and the model finds a new beep")
    func enrollSynthetic() throws {
        var configuration = EnrollmentConfiguration(label: "beeper")
        configuration.threads = 2
        var lines: [String] = []
        let report = try Enrollment.train(
            takes: [Self.beeps(seconds: 1.2, offset: 0, seed: 1), Self.beeps(seconds: 1.2, offset: 0.1, seed: 2)],
            background: [Self.room(seconds: 3, seed: 3)], configuration: configuration, progress: { lines.append($0) })
        // 2 takes with 7 variants each, 2 background parts at 3 gains, 10 synthetic noises and digital silence.
        #expect(lines.first == "embeddings of 33 recordings (takes, augmented takes, background)")
        #expect(report.head.labels == ["background", "beeper"])
        #expect(report.isSeparated)
        #expect(report.takeScores.count == 2)
        #expect(report.takeScores.allSatisfy { $0 > 0.9 }, "\(report.takeScores)")
        #expect(report.backgroundHighest < 0.5)
        #expect(report.head.parameters.prototypeCount == 4)  // 2 windows of each take
        #expect(report.gateThreshold == min(report.takeSimilarity, report.noisyTakeSimilarity) - 0.15)
        #expect((0.3...0.9).contains(report.threshold))
        #expect(report.head.metadata.suggestedThresholds == ["beeper": report.threshold])
        #expect(report.head.metadata.training.method == "enroll")
        #expect(report.head.metadata.metrics.crossValidation?.folds == 2)
        let text = report.formatted(takeNames: ["a.wav", "b.wav"])
        #expect(text.first == "separation (each take left out of training in turn, with a part of the background):")
        #expect(text.last?.hasPrefix("  separated: lowest take ") == true)

        // A new beep (another phase) and the room, through the file analyzer with the saved model.
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let model = directory.appendingPathComponent("beeper.earshot")
        try report.head.write(to: model)
        let recording = directory.appendingPathComponent("new.wav")
        try AnalysisTestSupport.writeFloatWAV(Self.room(seconds: 1, seed: 9) + Self.beeps(seconds: 1, offset: 0.2, seed: 8),
                                              sampleRate: 16_000, to: recording)
        let results = try AnalysisTestSupport.fileResults(recording, request: try ClassifySoundRequest(model: model)).results
        #expect(results.first?.classifications.first?.identifier == "background")
        #expect(results.last?.classifications.first?.identifier == "beeper")
    }

    @Test("a take recorded from a real ALSA PCM is the device's audio resampled to 16 kHz, sample for sample", .needsShared)
    func microphoneRecorder() throws {
        let mono = try #require(CaptureFixtures.alarmClockMono)
        let path = CaptureFixtures.writeRaw(CaptureFixtures.bytes(of: mono), name: "enroll-alarm-mono.raw")
        let recorder = MicrophoneRecorder(configuration: CaptureConfiguration(
            device: "earshot_enroll", sampleRate: CaptureFixtures.alarmClockRate,
            alsaConfiguration: CaptureFixtures.filePCM("earshot_enroll", infile: path)))
        var meter: [(level: Float, seconds: Double)] = []
        let take = try recorder.record(seconds: 1.0) { level, seconds in meter.append((level, seconds)) }
        #expect(take.count == 16_000)
        let resampler = try Resampler(inputRate: 48_000, outputRate: 16_000)
        var expected: [Float] = []
        try resampler.process(mono[0..<48_000].map { Float($0) / 32_768 }, appendingTo: &expected)
        try resampler.flush(appendingTo: &expected)
        #expect(take == Array(expected.prefix(16_000)))
        // The meter: the seconds recorded so far, rising to the whole second, and each time the RMS level of the
        // device's samples since the previous call.
        #expect(meter.last?.seconds == 1.0)
        #expect(zip(meter, meter.dropFirst()).allSatisfy { $0.seconds < $1.seconds })
        var start = 0
        for (level, seconds) in meter {
            let end = Int((seconds * 48_000).rounded())
            let power = mono[start..<end].reduce(0.0) { $0 + Double(Float($1) / 32_768) * Double(Float($1) / 32_768) } / Double(end - start)
            let expectedLevel = max(-120, Float(20 * log10(power.squareRoot())))
            #expect(abs(level - expectedLevel) < 1e-3, "\(start)..<\(end): \(level) dBFS, expected \(expectedLevel)")
            start = end
        }
        #expect(Enrollment.check(take).isGood)

        let missing = AudioTestFiles.error { () throws(EarshotError) in
            _ = try MicrophoneRecorder(configuration: CaptureConfiguration(device: "hw:99,0")).record(seconds: 1)
        }
        #expect(missing?.code == .unavailable)
        #expect(missing?.message.hasPrefix("cannot open capture device \"hw:99,0\"") == true)
    }
}
