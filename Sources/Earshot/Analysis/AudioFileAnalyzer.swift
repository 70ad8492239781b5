import Dispatch
import Foundation

/// Classifies the sounds in an audio file (Sound Analysis' `SNAudioFileAnalyzer`).
///
/// The file is decoded with libsndfile, mixed to mono and resampled to 16 kHz (``decodeMono16k(_:)-(AudioFileDecoder)``),
/// padded at the end with zeros as the reference's `pad_waveform` pads it (at least one window, then whole hops until
/// the last sample is inside a window), and turned into one log-mel spectrogram. Each window's scores are YAMNet's
/// scores of the 0.96 s patches inside it (their mean when there are several). With the default request (0.96 s,
/// overlap 0.5) the results are the reference model's per-patch outputs: window `i` starts at `0.48 * i` s and
/// covers 16 kHz samples `[7680 i, 7680 i + 15600)`.
///
/// Errors found when the file is opened (missing, not audio, ...) are thrown by ``init(url:)``; errors found while
/// decoding (a truncated FLAC, a decoding failure) go to each observer's `request(_:didFailWithError:)`.
///
/// - Important: Not thread-safe; ``analyze()`` is synchronous and calls the observers on the calling thread, in time
///   order per request. Inference runs on up to ``maximumThreads`` cores meanwhile.
public final class AudioFileAnalyzer {
    /// The file being analyzed.
    public let url: URL
    /// Cores used for inference during ``analyze()`` (default: the active processor count). Above 1, OpenBLAS is
    /// set to one thread (`BLASThreads.set(1)`) so the workers do not oversubscribe the cores.
    public var maximumThreads: Int = ProcessInfo.processInfo.activeProcessorCount

    private var decoder: AudioFileDecoder?
    private var entries: [(request: ClassifySoundRequest, observer: any ResultsObserving)] = []

    /// Opens `url` and reads its header.
    /// - Throws: ``EarshotError`` as ``AudioFileDecoder/init(url:)``: `.noInput` for a missing file, a directory or
    ///   no permission; `.data` for an empty file, a file that is not audio, MP3 data in a WAV container or a WAV
    ///   shorter than its header says.
    public init(url: URL) throws(EarshotError) {
        self.url = url
        decoder = try AudioFileDecoder(url: url)
    }

    /// Adds a request whose results go to `observer` (kept with a strong reference).
    /// - Throws: ``EarshotError`` when the request's model cannot be loaded, or `.usage` when the request was
    ///   already added.
    public func add(_ request: ClassifySoundRequest, withObserver observer: any ResultsObserving) throws(EarshotError) {
        guard !entries.contains(where: { $0.request === request }) else {
            throw EarshotError(.usage, "this request was already added to the analyzer (create another request)")
        }
        _ = try request.model()
        entries.append((request, observer))
    }

    /// Removes a request; its observer gets no more calls.
    public func removeRequest(_ request: ClassifySoundRequest) {
        entries.removeAll { $0.request === request }
    }

    /// Removes every request.
    public func removeAllRequests() {
        entries.removeAll()
    }

    /// Decodes the file and delivers every window's result of every request, then `requestDidComplete`; on a
    /// decoding error, `request(_:didFailWithError:)` instead. May be called again (the file is read again).
    public func analyze() {
        guard !entries.isEmpty else { return }
        let waveform: [Float]
        do {
            let opened: AudioFileDecoder
            if let decoder {
                opened = decoder
            } else {
                opened = try AudioFileDecoder(url: url)
            }
            decoder = nil
            waveform = try decodeMono16k(opened)
        } catch {
            for entry in entries { entry.observer.request(entry.request, didFailWithError: error) }
            return
        }
        let frontEnd = LogMelSpectrogram()
        for entry in entries {
            let model: YAMNet
            do {
                model = try entry.request.model()
            } catch {
                entry.observer.request(entry.request, didFailWithError: error)
                continue
            }
            Self.analyze(waveform: waveform, geometry: entry.request.geometry, duration: entry.request.windowDuration,
                         model: model, frontEnd: frontEnd, threads: maximumThreads) { result in
                entry.observer.request(entry.request, didProduce: result)
            }
            entry.observer.requestDidComplete(entry.request)
        }
    }

    /// Windows scored per round: results are delivered after each round, so a long file shows progress.
    static let windowsPerRound = 256

    /// Scores every window of `waveform` (16 kHz mono) and hands the results to `deliver` in time order.
    static func analyze(
        waveform: [Float], geometry: WindowGeometry, duration: Double, model: YAMNet, frontEnd: LogMelSpectrogram,
        threads: Int, deliver: (ClassificationResult) -> Void
    ) {
        let windows = geometry.windowCount(sampleCount: waveform.count)
        let paddedLength = geometry.windowSamples + (windows - 1) * geometry.hopSamples
        var padded = waveform
        padded.append(contentsOf: repeatElement(0, count: max(0, paddedLength - waveform.count)))
        let logMel = frontEnd.compute(padded)
        let labels = model.classLabels
        let workers = max(1, min(threads, 64))
        if workers > 1 { BLASThreads.set(1) }
        let sessions = (0..<workers).map { _ in model.makeSession() }
        let patchValues = YAMNet.patchFrames * YAMNet.melBands

        var firstWindow = 0
        while firstWindow < windows {
            let lastWindow = min(windows, firstWindow + windowsPerRound)
            // The distinct patch start frames of this round's windows, in order.
            var candidates: [Int] = []
            for window in firstWindow..<lastWindow {
                for patch in 0..<geometry.patchesPerWindow {
                    candidates.append(window * geometry.hopFrames + patch * YAMNet.patchHopFrames)
                }
            }
            let starts = Array(Set(candidates)).sorted()
            var row: [Int: Int] = [:]
            for (index, start) in starts.enumerated() { row[start] = index }

            var scores = [Float](repeating: 0, count: starts.count * YAMNet.classCount)
            logMel.withUnsafeBufferPointer { logMel in
                scores.withUnsafeMutableBufferPointer { scores in
                    let shared = SharedBuffers(logMel: logMel, scores: scores, starts: starts, sessions: sessions)
                    let work: @Sendable (Int) -> Void = { worker in
                        let count = shared.starts.count
                        let range = (count * worker / workers)..<(count * (worker + 1) / workers)
                        guard !range.isEmpty else { return }
                        var patches = [Float](repeating: 0, count: range.count * patchValues)
                        var embeddings = [Float](repeating: 0, count: range.count * YAMNet.embeddingSize)
                        patches.withUnsafeMutableBufferPointer { patches in
                            for (offset, index) in range.enumerated() {
                                let source = shared.logMel.baseAddress! + shared.starts[index] * YAMNet.melBands
                                (patches.baseAddress! + offset * patchValues).update(from: source, count: patchValues)
                            }
                        }
                        patches.withUnsafeBufferPointer { patches in
                            embeddings.withUnsafeMutableBufferPointer { embeddings in
                                shared.sessions[worker].classify(
                                    patches: patches.baseAddress!, patchStride: patchValues, count: range.count,
                                    scores: shared.scores.baseAddress! + range.lowerBound * YAMNet.classCount,
                                    embeddings: embeddings.baseAddress!)
                            }
                        }
                    }
                    if workers == 1 {
                        work(0)
                    } else {
                        DispatchQueue.concurrentPerform(iterations: workers, execute: work)
                    }
                }
            }

            for window in firstWindow..<lastWindow {
                var windowScores = [Float](repeating: 0, count: YAMNet.classCount)
                for patch in 0..<geometry.patchesPerWindow {
                    let base = (row[window * geometry.hopFrames + patch * YAMNet.patchHopFrames] ?? 0) * YAMNet.classCount
                    for index in 0..<YAMNet.classCount { windowScores[index] += scores[base + index] }
                }
                if geometry.patchesPerWindow > 1 {
                    let divisor = Float(geometry.patchesPerWindow)
                    for index in 0..<YAMNet.classCount { windowScores[index] /= divisor }
                }
                let firstSample = window * geometry.hopSamples
                let level = padded.withUnsafeBufferPointer {
                    ClassificationResult.level(of: UnsafeBufferPointer(rebasing: $0[firstSample..<(firstSample + geometry.windowSamples)]))
                }
                let range = TimeRange(start: Double(firstSample) / Double(YAMNet.sampleRate), duration: duration)
                deliver(.scored(timeRange: range, scores: windowScores, labels: labels, levelDBFS: level))
            }
            firstWindow = lastWindow
        }
    }
}

/// What the inference workers of one round share: read-only log-mel and starts, disjoint score rows, one session
/// per worker. The pointers live only during the round (`concurrentPerform` returns before they are released).
private struct SharedBuffers: @unchecked Sendable {
    let logMel: UnsafeBufferPointer<Float>
    let scores: UnsafeMutableBufferPointer<Float>
    let starts: [Int]
    let sessions: [YAMNetSession]
}
