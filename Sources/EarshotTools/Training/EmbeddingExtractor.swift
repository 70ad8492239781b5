import Dispatch
import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs
import EarshotService

/// Turns recordings into training windows: YAMNet embeddings `[1024]` of windows cut from the 16 kHz waveform, the
/// same numbers the analyzers hand to a head at detection time (``WindowScorer``: the mean embedding of the 0.96 s
/// patches inside a window).
///
/// Windows start every hop (`windowDuration * (1 - overlapFactor)`, 0.48 s by default) and are kept while at least
/// half of the window holds audio; a recording shorter than that gives one window, padded with zeros (as the
/// reference pads short input).
///
/// Work on many recordings runs on several cores: each worker has its own YAMNet session and front end; OpenBLAS is
/// set to one thread so the workers do not oversubscribe the cores.
package final class EmbeddingExtractor: Sendable {
    /// Window length in seconds.
    package let windowDuration: Double
    /// Overlap of successive windows, in [0, 1).
    package let overlapFactor: Double
    package let geometry: WindowGeometry
    package let model: YAMNet

    /// - Throws: ``EarshotError`` `.usage` for a window or overlap out of range (as ``ClassifySoundRequest``), or as
    ///   `BuiltInClassifier.shared()` when the built-in model cannot be loaded.
    package init(windowDuration: Double = 0.96, overlapFactor: Double = 0.5) throws(EarshotError) {
        let request = try ClassifySoundRequest(windowDuration: windowDuration, overlapFactor: overlapFactor)
        self.windowDuration = windowDuration
        self.overlapFactor = overlapFactor
        geometry = request.geometry
        model = try BuiltInClassifier.shared()
    }

    /// Start samples of the training windows of a waveform of `sampleCount` samples (see the type's description).
    package static func windowStarts(sampleCount: Int, geometry: WindowGeometry) -> [Int] {
        var starts = [0]
        var start = geometry.hopSamples
        while start + geometry.windowSamples / 2 <= sampleCount {
            starts.append(start)
            start += geometry.hopSamples
        }
        return starts
    }

    /// RMS level in dBFS (``ClassificationResult/level(of:)``) of each training window of `samples16k`, the windows
    /// of ``embeddings(of:scorer:)`` (zeros past the end).
    package func windowLevels(of samples16k: [Float]) -> [Float] {
        let length = geometry.windowSamples
        return Self.windowStarts(sampleCount: samples16k.count, geometry: geometry).map { start in
            var window = [Float](repeating: 0, count: length)
            let available = max(0, min(length, samples16k.count - start))
            if available > 0 { window.replaceSubrange(0..<available, with: samples16k[start..<(start + available)]) }
            return window.withUnsafeBufferPointer { ClassificationResult.level(of: $0) }
        }
    }

    /// A scorer for one worker.
    package func makeScorer() -> WindowScorer {
        WindowScorer(geometry: geometry, session: model.makeSession(), frontEnd: LogMelSpectrogram())
    }

    /// Embeddings `[windows, 1024]` of the training windows of `samples16k` (mono, 16 kHz, full scale ±1).
    /// A window longer than 0.96 s that the end of the recording cuts short is the mean of its patches of audio
    /// only (``WindowGeometry/patchStartFrames(realSamples:)``), as `earshot analyze` and the daemon's last window
    /// score it, not of its zero padding. With `minimumLevelDBFS`, windows whose RMS level is below it are left out
    /// (the daemon's level gate never classifies them either).
    package func embeddings(of samples16k: [Float], scorer: WindowScorer, minimumLevelDBFS: Float? = nil) -> [Float] {
        let starts = Self.windowStarts(sampleCount: samples16k.count, geometry: geometry)
        let length = geometry.windowSamples
        var padded = samples16k
        let needed = (starts.last ?? 0) + length
        if padded.count < needed { padded.append(contentsOf: repeatElement(0, count: needed - padded.count)) }
        var result: [Float] = []
        result.reserveCapacity(starts.count * YAMNet.embeddingSize)
        padded.withUnsafeBufferPointer { samples in
            for start in starts {
                let window = UnsafeBufferPointer(rebasing: samples[start..<(start + length)])
                if let minimumLevelDBFS, ClassificationResult.level(of: window) < minimumLevelDBFS { continue }
                result += scorer.score(window: window, realSamples: samples16k.count - start).embedding
            }
        }
        return result
    }

    /// Embeddings of each waveform, computed on `threads` cores.
    /// - Returns: per waveform, `[windows, 1024]`.
    package func embeddings(ofWaveforms waveforms: [[Float]], threads: Int = ProcessInfo.processInfo.activeProcessorCount) -> [[Float]] {
        concurrentMap(count: waveforms.count, threads: threads, progress: nil) { index, scorer in
            self.embeddings(of: waveforms[index], scorer: scorer)
        }
    }

    /// Decodes each file (mono, resampled to 16 kHz) and computes its windows' embeddings, on `threads` cores.
    /// - Parameters:
    ///   - minimumLevelDBFS: leave out windows whose RMS level is below this (nil: keep every window).
    ///   - progress: called after each file with (files done, files in all), from a worker thread.
    /// - Returns: per file, `[windows, 1024]` embeddings, or the decoding error (`.noInput`, `.data`).
    package func embeddings(
        ofFiles urls: [URL], threads: Int = ProcessInfo.processInfo.activeProcessorCount, minimumLevelDBFS: Float? = nil,
        progress: (@Sendable (Int, Int) -> Void)? = nil
    ) -> [Result<[Float], EarshotError>] {
        concurrentMap(count: urls.count, threads: threads, progress: progress) { index, scorer in
            do throws(EarshotError) {
                let samples = try decodeMono16k(urls[index])
                return .success(self.embeddings(of: samples, scorer: scorer, minimumLevelDBFS: minimumLevelDBFS))
            } catch {
                return .failure(error)
            }
        }
    }

    /// `body(index, scorer)` for every index in `0..<count`, spread over `threads` workers that each own a scorer.
    private func concurrentMap<T: Sendable>(
        count: Int, threads: Int, progress: (@Sendable (Int, Int) -> Void)?,
        _ body: @escaping @Sendable (Int, WindowScorer) -> T
    ) -> [T] {
        guard count > 0 else { return [] }
        let workers = max(1, min(threads, count, 64))
        if workers > 1 { BLASThreads.set(1) }
        let next = Atomic<Int>(0)
        let results = Mutex<[T?]>(Array(repeating: nil, count: count))
        let done = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: workers) { _ in
            let scorer = self.makeScorer()
            while true {
                let index = next.wrappingAdd(1, ordering: .relaxed).oldValue
                guard index < count else { break }
                let value = body(index, scorer)
                results.withLock { $0[index] = value }
                let finished = done.wrappingAdd(1, ordering: .relaxed).newValue
                progress?(finished, count)
            }
        }
        return results.withLock { $0.compactMap { $0 } }
    }
}
