import Foundation
import Testing
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// Collects what an analyzer reports (a small real observer, as an app would write).
final class CollectingObserver: ResultsObserving {
    var results: [ClassificationResult] = []
    var errors: [EarshotError] = []
    var completions = 0

    func request(_ request: ClassifySoundRequest, didProduce result: ClassificationResult) { results.append(result) }
    func request(_ request: ClassifySoundRequest, didFailWithError error: EarshotError) { errors.append(error) }
    func requestDidComplete(_ request: ClassifySoundRequest) { completions += 1 }
}

enum AnalysisTestSupport {
    /// Writes `samples` as a mono 32-bit float WAV at `sampleRate`.
    static func writeFloatWAV(_ samples: [Float], sampleRate: Int, to url: URL) throws {
        try AudioTestFiles.write(AudioTestFiles.wav(formatTag: 3, channels: 1, sampleRate: sampleRate, bitsPerSample: 32,
                                                    data: AudioTestFiles.littleEndian(samples)), to: url)
    }

    /// A sine of `frequency` Hz with RMS level `dbfs` (amplitude = sqrt(2) * 10^(dbfs / 20)).
    static func sine(frequency: Double, dbfs: Double, sampleRate: Double, count: Int, phase: Int = 0) -> [Float] {
        let amplitude = 2.0.squareRoot() * pow(10, dbfs / 20)
        return (0..<count).map { Float(amplitude * sin(2 * Double.pi * frequency * Double($0 + phase) / sampleRate)) }
    }

    static func fileResults(_ url: URL, request: ClassifySoundRequest, threads: Int = 2, windowsPerRound: Int = 256) throws -> CollectingObserver {
        let analyzer = try AudioFileAnalyzer(url: url)
        analyzer.maximumThreads = threads
        analyzer.windowsPerRound = windowsPerRound
        let observer = CollectingObserver()
        try analyzer.add(request, withObserver: observer)
        analyzer.analyze()
        return observer
    }

    /// YAMNet's scores `[521]` of one 0.96 s patch (15600 samples at 16 kHz), scored alone.
    static func patchScores(_ samples: [Float]) throws -> [Float] {
        precondition(samples.count == LogMelSpectrogram.patchSamples)
        let scorer = WindowScorer(
            geometry: try ClassifySoundRequest().geometry, session: try BuiltInClassifier.shared().makeSession(),
            frontEnd: LogMelSpectrogram())
        return samples.withUnsafeBufferPointer { scorer.score(window: $0).scores }
    }

    /// The mean scores of every patch of one window of `geometry` holding `samples` then zeros, padding included.
    static func paddedMeanScores(_ samples: [Float], geometry: WindowGeometry) throws -> [Float] {
        precondition(samples.count <= geometry.windowSamples)
        let window = samples + [Float](repeating: 0, count: geometry.windowSamples - samples.count)
        let scorer = WindowScorer(
            geometry: geometry, session: try BuiltInClassifier.shared().makeSession(), frontEnd: LogMelSpectrogram())
        return window.withUnsafeBufferPointer { scorer.score(window: $0).scores }
    }

    static func maxDifference(_ a: [Float], _ b: ArraySlice<Float>) -> Float {
        zip(a, b).reduce(0) { max($0, abs($1.0 - $1.1)) }
    }
}

@Suite("Analysis")
struct AnalysisTests {
    // MARK: Requests

    @Test("request values are validated with exact messages")
    func requestValidation() throws {
        func message(_ window: Double, _ overlap: Double) -> String? {
            AudioTestFiles.error { () throws(EarshotError) in try ClassifySoundRequest(windowDuration: window, overlapFactor: overlap) }?.message
        }
        #expect(message(0.5, 0.5) == "windowDuration 0.5 s is out of range (allowed: 0.96 to 3600 seconds)")
        #expect(message(4_000, 0.5) == "windowDuration 4000.0 s is out of range (allowed: 0.96 to 3600 seconds)")
        #expect(message(.nan, 0.5) == "windowDuration nan s is out of range (allowed: 0.96 to 3600 seconds)")
        #expect(message(0.96, 1.2) == "overlapFactor 1.2 is out of range (allowed: 0 <= overlapFactor < 1)")
        #expect(message(0.96, 1) == "overlapFactor 1.0 is out of range (allowed: 0 <= overlapFactor < 1)")
        #expect(message(0.96, -0.1) == "overlapFactor -0.1 is out of range (allowed: 0 <= overlapFactor < 1)")
        let error = AudioTestFiles.error { () throws(EarshotError) in try ClassifySoundRequest(windowDuration: 0.5) }
        #expect(error?.code == .usage)
        #expect(error?.exitStatus == 64)
        #expect(message(0.96, 0) == nil)
        #expect(message(3_600, 0.99) == nil)
        // Windows start on the 10 ms log-mel hop: a hop that rounds to no frame is refused (0.994 rounds to one).
        #expect(message(0.96, 0.994) == nil)
        #expect(message(0.96, 0.995) == "overlap 0.995 on a 0.96 s window leaves windows 4.8 ms apart, under the 10 ms step windows start on: use an overlap of at most 0.994 for this window")
        #expect(message(0.96, 0.999) == "overlap 0.999 on a 0.96 s window leaves windows 0.96 ms apart, under the 10 ms step windows start on: use an overlap of at most 0.994 for this window")
    }

    @Test("window geometry: patches per window, samples and hop")
    func geometry() throws {
        let standard = try ClassifySoundRequest().geometry
        #expect(standard == WindowGeometry(windowDuration: 0.96, overlapFactor: 0.5))
        #expect([standard.patchesPerWindow, standard.windowFrames, standard.windowSamples, standard.hopFrames, standard.hopSamples] as [Int]
                == [1, 96, 15_600, 48, 7_680])
        let longer = try ClassifySoundRequest(windowDuration: 1.5, overlapFactor: 0.5).geometry
        #expect([longer.patchesPerWindow, longer.windowFrames, longer.windowSamples, longer.hopFrames, longer.hopSamples] as [Int]
                == [2, 144, 23_280, 75, 12_000])
        let three = try ClassifySoundRequest(windowDuration: 1.92, overlapFactor: 0).geometry
        #expect([three.patchesPerWindow, three.windowFrames, three.windowSamples, three.hopFrames] as [Int] == [3, 192, 30_960, 192])
        // The reference's padding: 1 window up to 15600 samples, then one more per started 7680.
        #expect(standard.windowCount(sampleCount: 0) == 1)
        #expect(standard.windowCount(sampleCount: 15_600) == 1)
        #expect(standard.windowCount(sampleCount: 15_601) == 2)
        #expect(standard.windowCount(sampleCount: 98_043) == 12)
        for count in [0, 1, 15_600, 15_601, 23_280, 23_281, 98_043, 960_000] {
            #expect(standard.windowCount(sampleCount: count) * LogMelSpectrogram.patchHopSamples + 15_600 - 7_680
                    == LogMelSpectrogram.referencePaddedLength(sampleCount: count))
        }
    }

    // MARK: Results

    @Test("results sort classes, find them by identifier, and measure level in dBFS")
    func resultBasics() {
        let scores: [Float] = [0.2, 0.9, 0.2, 0.05]
        let result = ClassificationResult.scored(timeRange: TimeRange(start: 0.48, duration: 0.96), scores: scores,
                                                 labels: ["Speech", "Music", "Dog", "Cat"], levelDBFS: -12)
        #expect(result.classifications.map(\.identifier) == ["Music", "Speech", "Dog", "Cat"])
        // Highest first, equal scores by lower index (-0 equals 0), negatives below 0, NaN last.
        #expect(ClassificationResult.rankOrder([0.5, -1, 0, .nan, 0.5, -0.0, .infinity, -.infinity, 1e-30])
                == [6, 0, 4, 8, 2, 5, 1, 7, 3])
        #expect(ClassificationResult.rankOrder([]) == [])
        #expect(result.classification(forIdentifier: "Dog")?.confidence == Double(Float(0.2)))
        #expect(result.classification(forIdentifier: "Bird") == nil)
        #expect(result.timeRange.end == 1.44)
        #expect(!result.isGated)

        let fullScale = AnalysisTestSupport.sine(frequency: 1_000, dbfs: -3.0103, sampleRate: 16_000, count: 16_000)
        let level = fullScale.withUnsafeBufferPointer { ClassificationResult.level(of: $0) }
        #expect(abs(level - -3.0103) < 0.001)
        #expect(fullScale.map { abs($0) }.max()! > 0.9999)
        let silence = [Float](repeating: 0, count: 100)
        #expect(silence.withUnsafeBufferPointer { ClassificationResult.level(of: $0) } == -120)
    }

    // MARK: File analyzer against the reference

    @Test("file analysis of each golden's source file matches the reference scores within 0.02", .needsShared)
    func goldenSources() throws {
        let request = try ClassifySoundRequest()
        for golden in try AudioTestFiles.goldens() {
            let reference = try AudioTestFiles.readFloat32(TestPaths.sharedFile("golden/\(golden.stem).scores.f32"))
            let observer = try AnalysisTestSupport.fileResults(TestPaths.sharedFile("audio/" + golden.source), request: request)
            #expect(observer.errors.isEmpty)
            #expect(observer.completions == 1)
            #expect(observer.results.count * YAMNet.classCount == reference.count, "\(golden.stem)")
            var worst: Float = 0
            var sameTop = 0
            for (index, result) in observer.results.enumerated() where (index + 1) * 521 <= reference.count {
                #expect(result.timeRange == TimeRange(start: Double(index * 7_680) / 16_000, duration: 0.96))
                let row = reference[(index * 521)..<((index + 1) * 521)]
                worst = max(worst, AnalysisTestSupport.maxDifference(result.scores, row))
                let referenceTop = row.indices.max { row[$0] < row[$1] }! - index * 521
                if result.scores.indices.max(by: { result.scores[$0] < result.scores[$1] }) == referenceTop { sameTop += 1 }
            }
            print("golden source \(golden.stem): \(observer.results.count) windows, max |score - reference| = \(worst), same top-1 on \(sameTop)")
            #expect(worst <= 0.02, "\(golden.stem)")
        }
    }

    @Test("the golden 16 kHz input gives the reference scores within 1e-3; a 1.44 s window is the mean of its two patches", .needsShared)
    func goldenInputAndLongWindow() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let stem = "alarm-clock-elapsed"
        let waveform = try AudioTestFiles.readFloat32(TestPaths.sharedFile("golden/\(stem).wave16k.f32"))
        let reference = try AudioTestFiles.readFloat32(TestPaths.sharedFile("golden/\(stem).scores.f32"))
        let url = directory.appendingPathComponent("\(stem).wav")
        try AnalysisTestSupport.writeFloatWAV(waveform, sampleRate: 16_000, to: url)

        let standard = try AnalysisTestSupport.fileResults(url, request: ClassifySoundRequest())
        #expect(standard.results.count == 12)
        var worst: Float = 0
        for (index, result) in standard.results.enumerated() {
            worst = max(worst, AnalysisTestSupport.maxDifference(result.scores, reference[(index * 521)..<((index + 1) * 521)]))
        }
        print("golden input \(stem): max |score - reference| = \(worst)")
        #expect(worst <= 1e-3)

        // 1.44 s windows with overlap 2/3: hop 0.48 s, each window = mean of reference patches i and i + 1, except
        // the last, which the file's end cuts short: 98043 - 76800 = 21243 samples of audio, so its second patch is
        // not the reference's padded patch 11 but the one ending with the audio, frame 35 of the window
        // ((21243 - 15600) / 160), samples 82400..<98000 of the file.
        let long = try AnalysisTestSupport.fileResults(url, request: ClassifySoundRequest(windowDuration: 1.44, overlapFactor: 2.0 / 3))
        #expect(waveform.count == 98_043)
        #expect(long.results.count == 11)
        let request = try ClassifySoundRequest(windowDuration: 1.44, overlapFactor: 2.0 / 3)
        #expect(request.geometry.patchStartFrames(realSamples: 21_243) == [0, 35])
        let lastPatch = try AnalysisTestSupport.patchScores(Array(waveform[82_400..<98_000]))
        var worstMean: Float = 0
        for (index, result) in long.results.enumerated() {
            #expect(result.timeRange == TimeRange(start: Double(index * 7_680) / 16_000, duration: 1.44))
            let second = index == 10 ? lastPatch[...] : reference[((index + 1) * 521)..<((index + 2) * 521)]
            let mean = (0..<521).map { (reference[index * 521 + $0] + second[second.startIndex + $0]) / 2 }
            worstMean = max(worstMean, AnalysisTestSupport.maxDifference(result.scores, mean[...]))
        }
        #expect(worstMean <= 1e-3)
    }

    @Test("a window longer than 0.96 s cut short by the end of the audio averages only its patches of audio")
    func longWindowAtTheEnd() throws {
        // Patch starts (frames from the window's start) for 3 s windows: 5 patches, 46320 samples.
        let three = try ClassifySoundRequest(windowDuration: 3, overlapFactor: 0.5).geometry
        #expect([three.patchesPerWindow, three.windowSamples] as [Int] == [5, 46_320])
        #expect(three.patchStartFrames(realSamples: 46_320) == [0, 48, 96, 144, 192])
        #expect(three.patchStartFrames(realSamples: .max) == [0, 48, 96, 144, 192])
        #expect(three.patchStartFrames(realSamples: 46_319) == [0, 48, 96, 144, 191])
        #expect(three.patchStartFrames(realSamples: 30_000) == [0, 48, 90])
        #expect(three.patchStartFrames(realSamples: 23_281) == [0, 48])
        #expect(three.patchStartFrames(realSamples: 23_280) == [0, 48])
        #expect(three.patchStartFrames(realSamples: 19_200) == [0, 22])
        #expect(three.patchStartFrames(realSamples: 15_760) == [0, 1])
        #expect(three.patchStartFrames(realSamples: 15_759) == [0])
        #expect(three.patchStartFrames(realSamples: 15_600) == [0])
        #expect(three.patchStartFrames(realSamples: 1) == [0])
        // The default window is its one patch, padded or not (the reference's own padding).
        let standard = try ClassifySoundRequest().geometry
        for real in [0, 1, 15_599, 15_600, Int.max] { #expect(standard.patchStartFrames(realSamples: real) == [0]) }

        // 1.2 s of samples/demo.flac (a baby crying and speech, 1.9 s in) as a whole file, with 3 s windows: one
        // window, 19200 samples of audio then 27120 of zeros. Its scores are the mean of the two 0.96 s patches of
        // audio, samples 0..<15600 and 3520..<19120 (frame 22), the last ending with the audio.
        let demo = try decodeMono16k(TestPaths.packageRoot.appendingPathComponent("samples/demo.flac"))
        let clip = Array(demo[30_400..<49_600])
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let url = directory.appendingPathComponent("clip.wav")
        try AnalysisTestSupport.writeFloatWAV(clip, sampleRate: 16_000, to: url)
        let first = try AnalysisTestSupport.patchScores(Array(clip[0..<15_600]))
        let last = try AnalysisTestSupport.patchScores(Array(clip[3_520..<19_120]))
        let expected = (0..<521).map { (first[$0] + last[$0]) / 2 }

        let request = try ClassifySoundRequest(windowDuration: 3, overlapFactor: 0.5)
        let file = try AnalysisTestSupport.fileResults(url, request: request)
        try #require(file.results.count == 1)
        let fileWorst = AnalysisTestSupport.maxDifference(file.results[0].scores, expected[...])
        print("3 s window on 1.2 s of audio: file analyzer max |score - mean of the two patches| = \(fileWorst)")
        #expect(fileWorst <= 1e-5)

        let stream = try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: 16_000, channelCount: 1))
        let observer = CollectingObserver()
        try stream.add(request, withObserver: observer)
        stream.analyze(clip, atAudioFramePosition: 0)
        #expect(observer.results.isEmpty)
        stream.completeAnalysis()
        try #require(observer.results.count == 1)
        // The stream scores each patch alone, as the expected values were scored: exactly their mean.
        #expect(observer.results[0].scores == expected)
        #expect(observer.results[0].timeRange == TimeRange(start: 0, duration: 3))

        let top = observer.results[0].classifications.prefix(3).map { "\($0.identifier) \(String(format: "%.4f", $0.confidence))" }
        #expect(top == ["Crying, sobbing 0.3206", "Speech 0.2553", "Baby cry, infant cry 0.2131"])
        // The mean of all five patches, three of them more than three quarters zeros (what was scored before),
        // said "Silence".
        let padded = try AnalysisTestSupport.paddedMeanScores(clip, geometry: three)
        let paddedTop = padded.indices.max { padded[$0] < padded[$1] }!
        #expect(try request.knownClassifications()[paddedTop] == "Silence")
        #expect(String(format: "%.4f", padded[paddedTop]) == "0.4000")

        // `earshot train --window 3` embeds the same window the same way: the mean of the two patches of audio
        // (exactly the scorer's embedding for 19200 samples of audio), not of the five padded patches.
        let extractor = try EmbeddingExtractor(windowDuration: 3, overlapFactor: 0.5)
        let scorer = extractor.makeScorer()
        let trained = extractor.embeddings(of: clip, scorer: scorer)
        let window = clip + [Float](repeating: 0, count: 46_320 - clip.count)
        let (realScores, realEmbedding) = window.withUnsafeBufferPointer { scorer.score(window: $0, realSamples: 19_200) }
        let paddedEmbedding = window.withUnsafeBufferPointer { scorer.score(window: $0).embedding }
        #expect(trained == realEmbedding)
        #expect(AnalysisTestSupport.maxDifference(realScores, expected[...]) <= 1e-5)
        let change = AnalysisTestSupport.maxDifference(trained, paddedEmbedding[...])
        print("3 s training window on 1.2 s of audio: max |embedding - padded mean| = \(change)")
        #expect(change > 0.1)
    }

    @Test("scoring in rounds of a few windows while decoding gives the same results as one round", .needsShared)
    func rounds() throws {
        let url = TestPaths.sharedFile("audio/debian-sound-theme-freedesktop/sounds/freedesktop/stereo/alarm-clock-elapsed.oga")
        for request in [try ClassifySoundRequest(), try ClassifySoundRequest(windowDuration: 1.5, overlapFactor: 0.3)] {
            let whole = try AnalysisTestSupport.fileResults(url, request: request, threads: 1)
            let rounds = try AnalysisTestSupport.fileResults(url, request: request, threads: 2, windowsPerRound: 2)
            #expect(rounds.results.count == whole.results.count)
            #expect(rounds.completions == 1)
            var worst: Float = 0
            for (a, b) in zip(rounds.results, whole.results) {
                #expect(a.timeRange == b.timeRange)
                #expect(a.levelDBFS == b.levelDBFS)
                worst = max(worst, AnalysisTestSupport.maxDifference(a.scores, b.scores[...]))
            }
            #expect(worst <= 1e-6)
        }
        // 1.5 s windows, overlap 0.3: hop 1.05 s; 98043 samples -> 1 + ceil((98043 - 23280) / 16800) = 6 windows.
        let long = try AnalysisTestSupport.fileResults(url, request: ClassifySoundRequest(windowDuration: 1.5, overlapFactor: 0.3))
        #expect(long.results.map(\.timeRange.start) == [0, 1.05, 2.1, 3.15, 4.2, 5.25])
    }

    // MARK: Stream analyzer

    @Test("a whole file streamed in uneven buffers gives the file analyzer's results", .needsShared)
    func streamEqualsFile() throws {
        // 48 kHz stereo Ogg Vorbis, 6.1 s: exercises downmix, resampling and the padded end.
        let url = TestPaths.sharedFile("audio/debian-sound-theme-freedesktop/sounds/freedesktop/stereo/alarm-clock-elapsed.oga")
        let request = try ClassifySoundRequest()
        let file = try AnalysisTestSupport.fileResults(url, request: request)

        let decoder = try AudioFileDecoder(url: url)
        let stream = try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: Double(decoder.sampleRate), channelCount: decoder.channelCount))
        let observer = CollectingObserver()
        try stream.add(request, withObserver: observer)
        var position: Int64 = 0
        let sizes = [4_800, 1_000, 333, 8_192, 1]
        var turn = 0
        var buffer: [Float] = []
        while true {
            buffer.removeAll(keepingCapacity: true)
            let frames = try decoder.read(maxFrames: sizes[turn % sizes.count], appendingTo: &buffer)
            if frames == 0 { break }
            stream.analyze(buffer, atAudioFramePosition: position)
            position += Int64(frames)
            turn += 1
        }
        let beforeEnd = observer.results.count
        stream.completeAnalysis()
        #expect(observer.errors.isEmpty)
        #expect(observer.completions == 1)
        #expect(file.results.count == 12)
        #expect(beforeEnd == 11)  // the 12th window needs the zero padding added at the end
        #expect(observer.results.count == file.results.count)
        var worst: Float = 0
        for (streamed, whole) in zip(observer.results, file.results) {
            #expect(streamed.timeRange == whole.timeRange)
            #expect(abs(streamed.levelDBFS - whole.levelDBFS) < 1e-4)
            worst = max(worst, AnalysisTestSupport.maxDifference(streamed.scores, whole.scores[...]))
        }
        print("stream vs file: max |difference| = \(worst)")
        #expect(worst <= 1e-6)
    }

    @Test("a frame-position gap resets the window and the resampler: no window spans it")
    func gapHandling() throws {
        let request = try ClassifySoundRequest()
        let stream = try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: 48_000, channelCount: 1))
        let observer = CollectingObserver()
        try stream.add(request, withObserver: observer)
        // 1.25 s of a 1 kHz tone at frames 0..<60000, then the same 1.25 s again at frames 120000..<180000 (a 1.25 s gap).
        let tone = AnalysisTestSupport.sine(frequency: 1_000, dbfs: -20, sampleRate: 48_000, count: 60_000)
        for start in stride(from: 0, to: 60_000, by: 6_000) {
            stream.analyze(Array(tone[start..<(start + 6_000)]), atAudioFramePosition: Int64(start))
        }
        #expect(observer.results.map(\.timeRange.start) == [0])
        for start in stride(from: 0, to: 60_000, by: 6_000) {
            stream.analyze(Array(tone[start..<(start + 6_000)]), atAudioFramePosition: Int64(120_000 + start))
        }
        #expect(observer.results.map(\.timeRange.start) == [0, 2.5])
        stream.completeAnalysis()
        // Segment 2 holds 20000 samples at 16 kHz: windows at +0 and +0.48 s (the second padded with zeros).
        #expect(observer.results.map(\.timeRange.start) == [0, 2.5, 2.98])
        // The resampler was reset: the first window after the gap sees exactly what the first window saw.
        try #require(observer.results.count == 3)
        #expect(observer.results[1].scores == observer.results[0].scores)
        #expect(observer.results[1].levelDBFS == observer.results[0].levelDBFS)
        #expect(observer.completions == 1)

        // A jump backwards is a discontinuity too.
        let again = CollectingObserver()
        let second = try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: 48_000, channelCount: 1))
        second.gateThresholdDBFS = 0  // everything gated: only the window times matter here
        try second.add(request, withObserver: again)
        second.analyze(Array(tone[0..<48_000]), atAudioFramePosition: 96_000)
        second.analyze(Array(tone[0..<48_000]), atAudioFramePosition: 48_000)
        #expect(again.results.map(\.timeRange.start) == [2, 1])
        second.completeAnalysis()
        #expect(again.results.map(\.timeRange.start) == [2, 1, 1.48])
    }

    @Test("the RMS gate: silence is gated without inference; a -20 dBFS sine reads -20 dBFS and is classified")
    func gate() throws {
        let request = try ClassifySoundRequest()
        let quiet = try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: 16_000, channelCount: 1))
        quiet.gateThresholdDBFS = -50
        let silentObserver = CollectingObserver()
        try quiet.add(request, withObserver: silentObserver)
        quiet.analyze([Float](repeating: 0, count: 32_000), atAudioFramePosition: 0)
        #expect(silentObserver.results.map(\.timeRange.start) == [0, 0.48, 0.96])
        for result in silentObserver.results {
            #expect(result.isGated)
            #expect(result.levelDBFS == -120)
            #expect(result.levelDBFS < -50)
            #expect(result.classifications.isEmpty)
            #expect(result.scores.isEmpty)
        }

        // Stereo 48 kHz, both channels the same -20 dBFS-RMS 440 Hz sine: downmix and resampling keep the level.
        let loud = try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: 48_000, channelCount: 2))
        loud.gateThresholdDBFS = -50
        let loudObserver = CollectingObserver()
        try loud.add(request, withObserver: loudObserver)
        let sine = AnalysisTestSupport.sine(frequency: 440, dbfs: -20, sampleRate: 48_000, count: 96_000)
        var interleaved: [Float] = []
        for value in sine { interleaved += [value, value] }
        loud.analyze(interleaved, atAudioFramePosition: 0)
        #expect(loudObserver.results.count == 3)
        for result in loudObserver.results {
            #expect(!result.isGated)
            #expect(abs(result.levelDBFS - -20) <= 0.1, "level \(result.levelDBFS)")
            #expect(result.classifications.count == 521)
        }
    }

    @Test("invalid stream formats and buffers are refused with exact messages")
    func streamErrors() throws {
        let zero = AudioTestFiles.error { () throws(EarshotError) in try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: 0, channelCount: 1)) }
        #expect(zero?.message == "stream sample rate 0.0 Hz is out of range (allowed: above 0 and below 10000000 Hz)")
        let huge = AudioTestFiles.error { () throws(EarshotError) in try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: 10_000_000, channelCount: 1)) }
        #expect(huge?.message == "stream sample rate 10000000.0 Hz is out of range (allowed: above 0 and below 10000000 Hz)")
        let channels = AudioTestFiles.error { () throws(EarshotError) in try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: 16_000, channelCount: 0)) }
        #expect(channels?.message == "stream channel count 0 is out of range (allowed: 1 to 1024)")

        let stream = try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: 16_000, channelCount: 2))
        let observer = CollectingObserver()
        let request = try ClassifySoundRequest()
        try stream.add(request, withObserver: observer)
        stream.analyze([0, 0, 0], atAudioFramePosition: 0)
        #expect(observer.errors.map(\.message) == ["an audio buffer of 3 samples is not a whole number of 2-channel frames (buffer ignored)"])
        let twice = AudioTestFiles.error { () throws(EarshotError) in try stream.add(request, withObserver: observer) }
        #expect(twice?.message == "this request was already added to the analyzer (create another request)")
    }

    @Test("a NaN in a stream gives the results of a 0 there; ±inf gives finite scores and levels")
    func nonFiniteStreamSamples() throws {
        let request = try ClassifySoundRequest()
        func results(_ samples: [Float]) throws -> [ClassificationResult] {
            let stream = try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: 16_000, channelCount: 1))
            let observer = CollectingObserver()
            try stream.add(request, withObserver: observer)
            stream.analyze(samples, atAudioFramePosition: 0)
            stream.completeAnalysis()
            #expect(observer.errors.isEmpty)
            return observer.results
        }
        var clean = AnalysisTestSupport.sine(frequency: 440, dbfs: -20, sampleRate: 16_000, count: 32_000)
        clean[8_000] = 0
        var withNaN = clean
        withNaN[8_000] = .nan
        let expected = try results(clean)
        let got = try results(withNaN)
        #expect(got.count == 4)
        #expect(got.map(\.scores) == expected.map(\.scores))
        #expect(got.map(\.levelDBFS) == expected.map(\.levelDBFS))

        var withInfinity = clean
        withInfinity[8_000] = .infinity
        withInfinity[20_000] = -.infinity
        for result in try results(withInfinity) {
            #expect(result.levelDBFS.isFinite)
            #expect(result.scores.allSatisfy { $0.isFinite })
        }
    }

    @Test("file analyzer: an error at open is thrown")
    func fileAnalyzerErrors() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let missing = AudioTestFiles.error { () throws(EarshotError) in try AudioFileAnalyzer(url: directory.appendingPathComponent("none.wav")) }
        #expect(missing?.message == "\(directory.path)/none.wav: no such file (check the path)")
    }

    @Test("file analyzer: every result carries inferenceDuration, its round's mean (one value per round of windows)")
    func fileAnalyzerInferenceDuration() throws {
        // samples/demo.flac: 66 windows; rounds of 20: 20, 20, 20 and 6 windows.
        let observer = try AnalysisTestSupport.fileResults(
            TestPaths.packageRoot.appendingPathComponent("samples/demo.flac"), request: ClassifySoundRequest(),
            threads: 2, windowsPerRound: 20)
        #expect(observer.results.count == 66)
        let durations = observer.results.map(\.inferenceDuration)
        #expect(durations.allSatisfy { ($0 ?? 0) > 0 }, "\(durations)")
        for round in stride(from: 0, to: 66, by: 20) {
            #expect(Set(durations[round..<min(66, round + 20)]).count == 1, "round from window \(round)")
        }
    }

    @Test("file analyzer: a FLAC cut short is analysed as far as it goes, and decodingWarning names it", .needsShared)
    func fileAnalyzerCutShort() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let flac = try Data(contentsOf: TestPaths.sharedFile("audio/snoring-khan/1/1_10.flac"))
        let cut = directory.appendingPathComponent("cut.flac")
        try flac.prefix(20_000).write(to: cut)
        let analyzer = try AudioFileAnalyzer(url: cut)
        let observer = CollectingObserver()
        try analyzer.add(ClassifySoundRequest(), withObserver: observer)
        analyzer.analyze()
        // 16384 frames at 48 kHz: 0.34 s, one window padded with silence.
        #expect(observer.results.map(\.timeRange.start) == [0])
        #expect(observer.completions == 1)
        #expect(observer.errors.isEmpty)
        #expect(analyzer.decodingWarning == "\(directory.path)/cut.flac: truncated: decoded 16384 of 48000 frames the header promises; results cover only the first 0.34 s")
    }

    // MARK: Report formatting

    @Test("text, jsonl and csv lines and summaries are exact")
    func formatting() {
        let result = ClassificationResult.scored(
            timeRange: TimeRange(start: 0.48, duration: 0.96), scores: [0.931, 0.052, 0.00004, 0.5],
            labels: ["Speech", "Music", "Smoke detector, smoke alarm", "Say \"hi\""], levelDBFS: -20)
        let text = AnalysisReportFormatter(format: .text, top: 3)
        #expect(text.header == nil)
        #expect(text.lines(file: "x.wav", result: result) == ["x.wav 0.48-1.44s  Speech 93.1%  Say \"hi\" 50.0%  Music 5.2%"])
        let json = AnalysisReportFormatter(format: .jsonl, top: 2)
        #expect(json.lines(file: "x.wav", result: result)
                == [#"{"file":"x.wav","start":0.48,"duration":0.96,"classes":[{"class":"Speech","confidence":0.931},{"class":"Say \"hi\"","confidence":0.5}]}"#])
        // One shape for a window's classes: analyze's jsonl line and the socket's window line (`{"cmd":"listen"}`,
        // `earshot listen --json`) carry the same array, confidences written alike (`0.0`, not `0`).
        let window = EventLines.windowObject(for: result, time: Date(timeIntervalSince1970: 1_796_242_503.12))
        #expect(JSONValue.object(window).encoded
                == #"{"type":"window","start":0.48,"end":1.44,"level_dbfs":-20.0,"gate_open":true,"classes":[{"class":"Speech","confidence":0.931},{"class":"Say \"hi\"","confidence":0.5},{"class":"Music","confidence":0.052},{"class":"Smoke detector, smoke alarm","confidence":0.0}],"time":"2026-12-02T20:15:03.120Z"}"#)
        #expect(AnalysisReportFormatter(format: .jsonl, top: 5).lines(file: "x.wav", result: result)
                == [#"{"file":"x.wav","start":0.48,"duration":0.96,"classes":"# + window["classes"]!.encoded + "}"])
        #expect(AnalysisReportFormatter(format: .jsonl, top: 1).lines(file: "one.wav", result: .scored(
            timeRange: TimeRange(start: 0, duration: 0.96), scores: [1, 0], labels: ["Silence", "Speech"], levelDBFS: -20))
                == [#"{"file":"one.wav","start":0,"duration":0.96,"classes":[{"class":"Silence","confidence":1.0}]}"#])
        let csv = AnalysisReportFormatter(format: .csv, top: 4)
        #expect(csv.header == "file,start,duration,rank,label,confidence")
        #expect(csv.lines(file: "a,b.wav", result: result) == [
            "\"a,b.wav\",0.48,0.96,1,Speech,0.931",
            "\"a,b.wav\",0.48,0.96,2,\"Say \"\"hi\"\"\",0.5",
            "\"a,b.wav\",0.48,0.96,3,Music,0.052",
            "\"a,b.wav\",0.48,0.96,4,\"Smoke detector, smoke alarm\",0",
        ])
        let gated = ClassificationResult.gated(timeRange: TimeRange(start: 0, duration: 0.96), levelDBFS: -63.25)
        #expect(text.lines(file: "q.wav", result: gated) == ["q.wav 0.00-0.96s  (quiet: -63.2 dBFS)"])
        #expect(json.lines(file: "q.wav", result: gated) == [#"{"file":"q.wav","start":0,"duration":0.96,"classes":[]}"#])

        var tally = TopClassTally()
        let labels = ["Speech", "Music"]
        for top in [0, 1, 0, 0, 1, 0, 0, 0] {
            tally.add(.scored(timeRange: TimeRange(start: 0, duration: 0.96), scores: top == 0 ? [0.9, 0.1] : [0.1, 0.9],
                              labels: labels, levelDBFS: -20))
        }
        tally.add(gated)
        #expect(tally.windowCount == 8)
        #expect(text.summaryLines(file: "x.wav", tally: tally)
                == ["x.wav summary  Speech 75.0% (6 of 8 windows)", "x.wav summary  Music 25.0% (2 of 8 windows)"])
        #expect(json.summaryLines(file: "x.wav", tally: tally)
                == [#"{"file":"x.wav","windows":8,"summary":[{"label":"Speech","share":0.75,"windows":6},{"label":"Music","share":0.25,"windows":2}]}"#])
        #expect(csv.summaryLines(file: "x.wav", tally: tally) == ["x.wav,,,1,Speech,0.75", "x.wav,,,2,Music,0.25"])
        #expect(AnalysisReportFormatter.jsonString("a\u{1}\\\n") == "\"a\\u0001\\\\\\n\"")

        // A confidence that is not a number never prints as nan: JSON null, an empty CSV field, n/a in text.
        let broken = ClassificationResult.scored(timeRange: TimeRange(start: 0, duration: 0.96), scores: [.nan],
                                                 labels: ["Speech"], levelDBFS: -20)
        #expect(text.lines(file: "n.wav", result: broken) == ["n.wav 0.00-0.96s  Speech n/a"])
        #expect(json.lines(file: "n.wav", result: broken)
                == [#"{"file":"n.wav","start":0,"duration":0.96,"classes":[{"class":"Speech","confidence":null}]}"#])
        #expect(csv.lines(file: "n.wav", result: broken) == ["n.wav,0,0.96,1,Speech,"])
    }
}
