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

/// Snoring in a recording: runs the built-in classifier over a whole file (``AudioFileAnalyzer``, all cores), the
/// ``SnoreDetector`` over its windows, and builds a ``SnoreReport``.
///
/// Speed: the analyzer scores every 0.48 s window; an 8-hour 16 kHz recording (60 000 windows) took 142 s of CPU
/// time on a 2-core x86 VM with the model kernels of b3b4877 (273-297 s before them): about 1.2 minutes of
/// wall-clock time when both cores are free; 89 MB peak RSS whatever the length (`scripts/memory-figures`).
package enum SnoreFileAnalysis {
    /// What one analysis found: the report and every window's evidence (for evaluation).
    package struct Result: Sendable {
        package var report: SnoreReport
        /// Per window, in order: start (s), the "Snoring" class score and the snore evidence (both 0...1).
        package var windows: [(start: Double, snoring: Float, evidence: Float)]
        /// Starts (s) of the windows the detector called snoring (those of accepted bursts).
        package var positiveWindowStarts: [Double]
        /// What the decoder warned of without failing (a truncated MP3), one line; nil when nothing.
        package var decodingWarning: String?
    }

    /// Analyses `url`.
    ///
    /// - Parameters:
    ///   - configuration: the detector's thresholds and times.
    ///   - head: a custom head whose snoring probability adds to the evidence (see ``SnoreDetector``).
    ///   - maximumThreads: cores used for inference (default: all).
    ///   - progress: called on the calling thread after each round of windows with the seconds analysed so far
    ///     and the file's length in seconds (nil when the container does not say).
    /// - Throws: ``EarshotError`` as ``AudioFileAnalyzer/init(url:)`` (missing, not audio: `.noInput`, `.data`), a
    ///   decoding failure mid-file (`.data`/`.io`), or a model that cannot be loaded.
    package static func analyze(
        url: URL, configuration: SnoreDetector.Configuration = SnoreDetector.Configuration(),
        head: SnoreDetector.HeadEvidence? = nil, maximumThreads: Int = ProcessInfo.processInfo.activeProcessorCount,
        progress: ((_ seconds: Double, _ total: Double?) -> Void)? = nil
    ) throws(EarshotError) -> Result {
        let header = try AudioFileDecoder(url: url)
        let total = header.declaredFrameCount.map { Double($0) / Double(header.sampleRate) }
        let model = try BuiltInClassifier.shared()
        let analyzer = try AudioFileAnalyzer(url: url)
        analyzer.maximumThreads = maximumThreads
        let request = try ClassifySoundRequest()
        var detector = try SnoreDetector(classLabels: model.classLabels, configuration: configuration, head: head)
        detector.recordsPositiveWindows = true
        let observer = Observer(detector: detector, snoringIndex: model.classLabels.firstIndex(of: SnoreDetector.classLabel) ?? 0,
                                total: total, progress: progress)
        try analyzer.add(request, withObserver: observer)
        analyzer.analyze()
        if let failure = observer.failure { throw failure }
        observer.decisions += observer.detector.finish()
        // The recording's length: as declared, else up to the last window's start plus one hop.
        let duration = total ?? (observer.lastWindowStart + request.windowDuration * (1 - request.overlapFactor))
        let events = observer.decisions.compactMap { decision -> SnoreEvent? in
            if case .offset(_, let event) = decision { return event }
            return nil
        }
        let report = SnoreReport(events: events, duration: duration, source: url.relativePath)
        return Result(report: report, windows: observer.windows,
                      positiveWindowStarts: observer.detector.positiveWindowStarts,
                      decodingWarning: analyzer.decodingWarning)
    }

    private final class Observer: ResultsObserving {
        var detector: SnoreDetector
        let total: Double?
        let progress: ((Double, Double?) -> Void)?
        var decisions: [SnoreDetector.Decision] = []
        var windows: [(start: Double, snoring: Float, evidence: Float)] = []
        var failure: EarshotError?
        var lastWindowStart = 0.0
        private let snoringIndex: Int
        private var lastProgress = -1.0

        init(detector: SnoreDetector, snoringIndex: Int, total: Double?, progress: ((Double, Double?) -> Void)?) {
            self.detector = detector
            self.snoringIndex = snoringIndex
            self.total = total
            self.progress = progress
        }

        func request(_ request: ClassifySoundRequest, didProduce result: ClassificationResult) {
            let start = result.timeRange.start
            lastWindowStart = start
            let value = detector.evidence(scores: result.scores, embedding: result.embedding)
            windows.append((start, snoringIndex < result.scores.count ? result.scores[snoringIndex] : 0, value))
            decisions += detector.process(
                windowStart: start, windowDuration: result.timeRange.duration, levelDBFS: result.levelDBFS,
                evidence: value)
            // Results arrive in rounds; report once per round (a jump of more than 30 s) and at the end.
            let done = min(result.timeRange.end, total ?? .infinity)
            if let progress, done - lastProgress >= 30 {
                lastProgress = done
                progress(done, total)
            }
        }

        func request(_ request: ClassifySoundRequest, didFailWithError error: EarshotError) {
            failure = error
        }

        func requestDidComplete(_ request: ClassifySoundRequest) {
            progress?(total ?? lastWindowStart, total)
        }
    }
}
