import Dispatch
import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs
import EarshotService

/// Figures for `earshot bench`: measured on this machine, printed, never asserted by tests.
package enum Benchmark {
    /// Median and 95th percentile of a set of durations, in milliseconds.
    package struct Percentiles: Sendable {
        package var median: Double
        package var p95: Double
        package var minimum: Double
        package var runs: Int

        package init(_ millis: [Double]) {
            let sorted = millis.sorted()
            runs = sorted.count
            median = sorted.isEmpty ? 0 : sorted[sorted.count / 2]
            p95 = sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * 0.95))]
            minimum = sorted.first ?? 0
        }
    }

    /// The CPU model name from `/proc/cpuinfo` ("model name", or "Model"/"Hardware" on ARM boards), or "unknown".
    package static var cpuModel: String {
        guard let text = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return "unknown" }
        for key in ["model name", "Model", "Hardware"] {
            for line in text.split(separator: "\n") where line.hasPrefix(key) {
                if let colon = line.firstIndex(of: ":") {
                    return line[line.index(after: colon)...].trimmingSpaces()
                }
            }
        }
        return "unknown"
    }

    /// Which code computes the matrix products in this process (`GEMMKernel.current`) and the vector width of the
    /// convolutions.
    package static var kernelDescription: String {
        let lanes = ConvolutionKernels.lanes(GEMMKernel.current)
        switch GEMMKernel.current {
        case .avx2:
            return "packed GEMM, AVX2+FMA 6x16 register tile (EarshotKernels, chosen at run time); \(lanes)-float vectors in the convolutions"
        case .avx512:
            return "packed GEMM, AVX-512 6x64 register tile (EarshotKernelsAVX512, chosen at run time; EARSHOT_KERNEL=avx2 for the AVX2 one); \(lanes)-float vectors in the convolutions"
        case .wide:
            return "packed SIMD GEMM, \(PackedWeights.tileRows)x\(PackedWeights.panelWidth(.wide)) register tile; \(lanes)-float vectors in the convolutions"
        case .openBLAS:
            return "OpenBLAS sgemm (this CPU lacks AVX2/FMA, or EARSHOT_KERNEL=baseline)"
        }
    }

    /// Seconds on a monotonic clock.
    package static func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    /// A log-mel patch with realistic values (natural logs of mel energies lie in about -7...+3).
    package static func syntheticPatch() -> [Float] {
        (0..<(YAMNet.patchFrames * YAMNet.melBands)).map { Float(sin(Double($0) * 0.37)) * 3 - 3 }
    }

    /// Latency of one 96 x 64 patch through YAMNet (521 scores out) on one thread, after 20 warm-up runs: wall time
    /// and thread CPU time (the latter is not inflated when other processes take the core).
    package static func patchLatency(model: YAMNet, runs: Int) -> (wall: Percentiles, cpu: Percentiles) {
        BLASThreads.set(1)
        let session = model.makeSession()
        let patch = syntheticPatch()
        var scores = [Float](repeating: 0, count: YAMNet.classCount)
        var embeddings = [Float](repeating: 0, count: YAMNet.embeddingSize)
        func run() {
            patch.withUnsafeBufferPointer { patch in
                scores.withUnsafeMutableBufferPointer { scores in
                    embeddings.withUnsafeMutableBufferPointer { embeddings in
                        session.classify(patches: patch.baseAddress!, patchStride: patch.count, count: 1,
                                         scores: scores.baseAddress!, embeddings: embeddings.baseAddress!)
                    }
                }
            }
        }
        for _ in 0..<20 { run() }
        var wall: [Double] = [], cpu: [Double] = []
        wall.reserveCapacity(runs)
        cpu.reserveCapacity(runs)
        for _ in 0..<runs {
            let start = now(), startCPU = StageProfile.threadTime()
            run()
            cpu.append((StageProfile.threadTime() - startCPU) * 1000)
            wall.append((now() - start) * 1000)
        }
        return (Percentiles(wall), Percentiles(cpu))
    }

    /// Latency of one 0.975 s waveform (15600 samples at 16 kHz) to 521 scores: the front end's 96 frames plus the
    /// network, on one thread. This is what one TFLite `invoke` of the reference's 15600-sample model does.
    package static func waveformPatchLatency(model: YAMNet, runs: Int) -> Percentiles {
        BLASThreads.set(1)
        let session = model.makeSession()
        let frontEnd = LogMelSpectrogram()
        let samples: [Float] = (0..<LogMelSpectrogram.patchSamples).map { (index: Int) -> Float in
            let t = Double(index)
            return Float(0.3 * sin(t * 0.05) + 0.05 * sin(t * 0.71))
        }
        var logMel = [Float](repeating: 0, count: YAMNet.patchFrames * YAMNet.melBands)
        var scores = [Float](repeating: 0, count: YAMNet.classCount)
        var embeddings = [Float](repeating: 0, count: YAMNet.embeddingSize)
        func run() {
            samples.withUnsafeBufferPointer { samples in
                logMel.withUnsafeMutableBufferPointer { logMel in
                    frontEnd.compute(samples, frames: YAMNet.patchFrames, into: logMel.baseAddress!)
                }
            }
            logMel.withUnsafeBufferPointer { patch in
                scores.withUnsafeMutableBufferPointer { scores in
                    embeddings.withUnsafeMutableBufferPointer { embeddings in
                        session.classify(patches: patch.baseAddress!, patchStride: patch.count, count: 1,
                                         scores: scores.baseAddress!, embeddings: embeddings.baseAddress!)
                    }
                }
            }
        }
        for _ in 0..<20 { run() }
        var millis: [Double] = []
        for _ in 0..<runs {
            let start = now()
            run()
            millis.append((now() - start) * 1000)
        }
        return Percentiles(millis)
    }

    /// Milliseconds the log-mel front end takes per second of 16 kHz audio (median of `runs` passes over `seconds`).
    package static func frontEndMillisPerSecond(seconds: Double, runs: Int) -> Double {
        let frontEnd = LogMelSpectrogram()
        let samples = (0..<Int(seconds * 16_000)).map { Float(sin(Double($0) * 0.05)) * 0.3 }
        _ = frontEnd.compute(samples)
        var millis: [Double] = []
        for _ in 0..<runs {
            let start = now()
            _ = frontEnd.compute(samples)
            millis.append((now() - start) * 1000)
        }
        return Percentiles(millis).median / seconds
    }

    /// Milliseconds from nothing to the first result: map the weights file, fold and pack the weights, read the
    /// class map, classify one patch. The first call in a process also pays for loading Foundation's JSON parser.
    package static func modelLoadMillis(directory: URL) throws(EarshotError) -> Double {
        let start = now()
        let model = try YAMNet(directory: directory)
        _ = model.makeSession().classify(patches: [Float](repeating: -3, count: YAMNet.patchFrames * YAMNet.melBands), count: 1)
        return (now() - start) * 1000
    }

    /// `count` synthetic patches for the batched figures: separate `[96, 64]` patches side by side (`patchStride`
    /// 96 * 64), or, when `overlapping`, windows of one synthetic spectrogram 48 frames (0.48 s) apart, the way file
    /// analysis runs them (consecutive patches then share rows of the early layers, see `EarlyLayers`).
    package static func syntheticBatch(count: Int, overlapping: Bool) -> (values: [Float], patchStride: Int) {
        let one = syntheticPatch()
        var values: [Float] = []
        if overlapping {
            let frames = (count - 1) * YAMNet.patchHopFrames + YAMNet.patchFrames
            for frame in 0..<frames {
                let offset = Float(frame / YAMNet.patchFrames) * 0.01
                values += one[(frame % YAMNet.patchFrames) * YAMNet.melBands..<(frame % YAMNet.patchFrames + 1) * YAMNet.melBands]
                    .map { $0 + offset }
            }
            return (values, YAMNet.patchHopFrames * YAMNet.melBands)
        }
        for index in 0..<count { values += one.map { $0 + Float(index) * 0.01 } }
        return (values, one.count)
    }

    /// Runs `count` patches of `batch` through `session`, results dropped.
    package static func classify(_ batch: (values: [Float], patchStride: Int), count: Int, session: YAMNetSession) {
        var scores = [Float](repeating: 0, count: count * YAMNet.classCount)
        var embeddings = [Float](repeating: 0, count: count * YAMNet.embeddingSize)
        batch.values.withUnsafeBufferPointer { input in
            scores.withUnsafeMutableBufferPointer { s in
                embeddings.withUnsafeMutableBufferPointer { e in
                    session.classify(patches: input.baseAddress!, patchStride: batch.patchStride, count: count,
                                     scores: s.baseAddress!, embeddings: e.baseAddress!)
                }
            }
        }
    }

    /// Thread CPU time per stage and per patch when `batch` patches run together (1 thread), over `runs` runs after
    /// 10 warm-up runs: `(stage name, median ms, minimum ms)` in execution order. The minimum is the figure least
    /// disturbed by other processes on a shared machine. `overlapping`: as `syntheticBatch`.
    package static func stageProfile(model: YAMNet, runs: Int, batch: Int = 1, overlapping: Bool = false) -> [(stage: String, millis: Double, minimum: Double)] {
        BLASThreads.set(1)
        let session = model.makeSession()
        let patches = syntheticBatch(count: batch, overlapping: overlapping)
        for _ in 0..<10 { classify(patches, count: batch, session: session) }
        var names: [String] = []
        var samples: [String: [Double]] = [:]
        for _ in 0..<runs {
            let profile = StageProfile()
            session.profile = profile
            classify(patches, count: batch, session: session)
            if names.isEmpty { names = profile.names }
            for name in profile.names { samples[name, default: []].append((profile.seconds[name] ?? 0) * 1000 / Double(batch)) }
        }
        session.profile = nil
        return names.map { name in
            let values = samples[name] ?? []
            return (name, Percentiles(values).median, values.min() ?? 0)
        }
    }

    /// Per-patch time of batched inference: `count` patches through one session (batches of
    /// `YAMNetSession.maximumBatch`), on one thread, in milliseconds per patch: the best of `runs` runs (a run takes
    /// long enough that other processes on a shared machine often interrupt it; the best run is the one they did not).
    /// `overlapping`: as `syntheticBatch`.
    package static func batchedPatchMillis(model: YAMNet, count: Int, runs: Int, overlapping: Bool = false) -> Double {
        BLASThreads.set(1)
        let session = model.makeSession()
        let patches = syntheticBatch(count: count, overlapping: overlapping)
        classify(patches, count: count, session: session)
        var best = Double.infinity
        for _ in 0..<max(1, runs) {
            let start = now()
            classify(patches, count: count, session: session)
            best = min(best, (now() - start) * 1000 / Double(count))
        }
        return best
    }

    /// Seconds of audio per second of wall time for inference alone: `seconds` of noise at -20 dBFS written as a
    /// 16 kHz 16-bit WAV in `directory` (so nothing is resampled and decoding is a copy), analysed by
    /// ``analyzeFile(url:threads:)`` (`earshot analyze`'s `AudioFileAnalyzer`: front end + network) on `threads`
    /// threads. A short warm-up analysis runs first.
    /// - Throws: ``EarshotError`` when the file cannot be written or read.
    package static func inferenceRealtimeFactor(seconds: Double, threads: Int, directory: URL) throws(EarshotError) -> Double {
        let url = directory.appendingPathComponent("inference-\(Int(seconds))s.wav")
        if !FileManager.default.fileExists(atPath: url.path) {
            try BenchmarkRecording.writeNoise(levelDBFS: -20, seconds: seconds, sampleRate: 16_000, to: url)
        }
        _ = try analyzeFile(url: url, threads: threads)
        return try analyzeFile(url: url, threads: threads).realtimeFactor
    }

    // MARK: - File analysis

    /// Wall time of one file analysis and what it produced.
    package struct FileAnalysisFigures: Sendable {
        /// Seconds of audio in the file.
        package var audioSeconds: Double
        /// Wall-clock seconds the analysis took.
        package var wallSeconds: Double
        /// Windows delivered.
        package var windows: Int
        /// Seconds of audio per second of wall time.
        package var realtimeFactor: Double { audioSeconds / max(wallSeconds, 1e-9) }
    }

    /// Seconds to decode `url`, mix it to mono and resample it to 16 kHz (`decodeMono16k`), and the 16 kHz samples.
    package static func decodeSeconds(url: URL) throws(EarshotError) -> (seconds: Double, samples: Int) {
        let start = now()
        let samples = try decodeMono16k(url)
        return (now() - start, samples.count)
    }

    /// `earshot analyze`'s path: an `AudioFileAnalyzer` with the default request (0.96 s windows, 0.48 s hop) and
    /// `threads` inference threads, results counted and dropped. Decoding, resampling, the front end and the
    /// network are all inside the measured time.
    /// - Throws: ``EarshotError`` when the file cannot be opened or fails to decode.
    package static func analyzeFile(url: URL, threads: Int) throws(EarshotError) -> FileAnalysisFigures {
        final class Counter: ResultsObserving {
            var windows = 0
            var lastEnd = 0.0
            var failure: EarshotError?
            func request(_ request: ClassifySoundRequest, didProduce result: ClassificationResult) {
                windows += 1
                lastEnd = result.timeRange.start + result.timeRange.duration
            }
            func request(_ request: ClassifySoundRequest, didFailWithError error: EarshotError) { failure = error }
            func requestDidComplete(_ request: ClassifySoundRequest) {}
        }
        let decoder = try AudioFileDecoder(url: url)
        let audioSeconds = Double(decoder.declaredFrameCount ?? 0) / Double(decoder.sampleRate)
        let counter = Counter()
        let start = now()
        let analyzer = try AudioFileAnalyzer(url: url)
        analyzer.maximumThreads = threads
        try analyzer.add(ClassifySoundRequest(), withObserver: counter)
        analyzer.analyze()
        let wall = now() - start
        if let failure = counter.failure { throw failure }
        return FileAnalysisFigures(audioSeconds: audioSeconds, wallSeconds: wall, windows: counter.windows)
    }

}
