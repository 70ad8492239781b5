import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio
import EarshotModel

/// A span of audio in seconds, from the start of the file or stream (Sound Analysis' `CMTimeRange`, in seconds).
public struct TimeRange: Sendable, Equatable, Hashable {
    /// Start in seconds (>= 0 for files; for streams, frame position / sample rate of the first frame)
    /// (`CMTimeRange.start`).
    public var start: Double
    /// Duration in seconds (> 0) (`CMTimeRange.duration`).
    public var duration: Double
    /// `start + duration`, in seconds (`CMTimeRange.end`).
    public var end: Double { start + duration }

    /// A range of `duration` seconds from `start` (`CMTimeRange(start:duration:)`).
    public init(start: Double, duration: Double) {
        self.start = start
        self.duration = duration
    }
}

/// One class and the classifier's confidence in it (Sound Analysis' `SNClassification`).
public struct Classification: Sendable, Equatable, Hashable {
    /// The class label: for the built-in classifier, the AudioSet display name (e.g. `Speech`,
    /// `Smoke detector, smoke alarm`), as in YAMNet's `yamnet_class_map.csv` (`SNClassification.identifier`).
    public let identifier: String
    /// The score in 0...1 (YAMNet's sigmoid output; classes are independent, so scores do not sum to 1)
    /// (`SNClassification.confidence`).
    public let confidence: Double

    /// A class and its confidence (e.g. for a custom classifier's results).
    public init(identifier: String, confidence: Double) {
        self.identifier = identifier
        self.confidence = confidence
    }
}

/// The classifier's output for one analysis window (Sound Analysis' `SNClassificationResult`).
public struct ClassificationResult: Sendable, Equatable {
    /// The window's time range, in seconds; `duration` is the request's `windowDuration`
    /// (`SNClassificationResult.timeRange`).
    public let timeRange: TimeRange
    /// Every class with its confidence, highest first (ties: lower class index first); empty when ``isGated``
    /// (`SNClassificationResult.classifications`).
    public let classifications: [Classification]
    /// Scores by class index (`[521]` for the built-in classifier, index order of `YAMNet.classLabels`; for a custom
    /// model, the head's probabilities in the order of ``ClassifierHead/labels``, summing to 1); empty when
    /// ``isGated``. The same numbers as ``classifications``, for code that works with class indices. (Earshot's own.)
    public let scores: [Float]
    /// The window's level: RMS of its 16 kHz samples in dBFS, `20 * log10(rms)` (a full-scale sine reads
    /// -3.01 dBFS, digital silence reads the floor, ``ClassificationResult/levelFloorDBFS``). (Earshot's own.)
    public let levelDBFS: Float
    /// True when an ``AudioStreamAnalyzer``'s gate was closed (``levelDBFS`` below its threshold): no inference ran
    /// and ``classifications`` is empty. (Earshot's own.)
    public let isGated: Bool
    /// The window's YAMNet embedding `[1024]`: the mean over its 0.96 s patches of the 1024-d output of the last
    /// block (values >= 0). Classifier heads (``ClassifierHead``) take it, so one backbone pass serves every head.
    /// Empty when ``isGated``. (Earshot's own; Sound Analysis does not expose its embeddings.)
    public let embedding: [Float]
    /// Seconds the classifier took over this window (the model and a custom head; monotonic clock), or nil when
    /// ``isGated`` or for a result made with ``init(timeRange:classifications:scores:levelDBFS:isGated:embedding:)``.
    /// ``AudioStreamAnalyzer`` times each window alone; ``AudioFileAnalyzer`` scores rounds of windows in batches on
    /// several cores, so its results carry their round's mean: the inference time of the round's patches, summed
    /// over the cores, divided by the round's windows.
    /// Not part of equality: two results of the same audio are equal however long each took. (Earshot's own.)
    public var inferenceDuration: Double?

    /// Equal time range, classifications, scores, level, gate and embedding (``inferenceDuration`` is ignored).
    public static func == (lhs: ClassificationResult, rhs: ClassificationResult) -> Bool {
        lhs.timeRange == rhs.timeRange && lhs.classifications == rhs.classifications && lhs.scores == rhs.scores
            && lhs.levelDBFS == rhs.levelDBFS && lhs.isGated == rhs.isGated && lhs.embedding == rhs.embedding
    }

    /// The lowest level reported, in dBFS (for digital silence, where `log10(0)` is minus infinity). (Earshot's own.)
    public static let levelFloorDBFS: Float = -120

    /// A result made of its parts (for a custom classifier's results, or tests; the analyzers make their own).
    public init(
        timeRange: TimeRange, classifications: [Classification], scores: [Float], levelDBFS: Float, isGated: Bool,
        embedding: [Float] = []
    ) {
        self.timeRange = timeRange
        self.classifications = classifications
        self.scores = scores
        self.levelDBFS = levelDBFS
        self.isGated = isGated
        self.embedding = embedding
    }

    /// The classification for a class label, or nil when the label is unknown (or the window was gated)
    /// (`SNClassificationResult.classification(forIdentifier:)`).
    public func classification(forIdentifier identifier: String) -> Classification? {
        classifications.first { $0.identifier == identifier }
    }

    /// A result from per-class scores: sorts the classes by confidence.
    package static func scored(
        timeRange: TimeRange, scores: [Float], labels: [String], levelDBFS: Float, embedding: [Float] = []
    ) -> ClassificationResult {
        let classifications = rankOrder(scores).map {
            Classification(identifier: $0 < labels.count ? labels[$0] : "class \($0)", confidence: Double(scores[$0]))
        }
        return ClassificationResult(timeRange: timeRange, classifications: classifications, scores: scores,
                                    levelDBFS: levelDBFS, isGated: false, embedding: embedding)
    }

    /// Class indices of `scores`, highest score first, ties by lower index (the order of ``classifications``).
    ///
    /// Each score is packed with its index into one `UInt64` key (the float's bits mapped to an unsigned integer in
    /// the same order, inverted for a descending sort, above the index), so that one sort of plain integers replaces
    /// a sort through a comparison closure: about 4,700 comparisons for 521 classes, once per window. NaN sorts
    /// after every number.
    package static func rankOrder(_ scores: [Float]) -> [Int] {
        precondition(scores.count <= Int(UInt32.max), "at most 2^32 - 1 classes")
        var keys = [UInt64](repeating: 0, count: scores.count)
        scores.withUnsafeBufferPointer { scores in
            keys.withUnsafeMutableBufferPointer { keys in
                for index in 0..<scores.count {
                    let value = scores[index]
                    // Order-preserving: negative floats have every bit flipped, non-negative ones the sign bit set;
                    // -0 counts as +0 (equal scores tie by index) and NaN as below every number.
                    let bits = value == 0 ? 0 : value.bitPattern
                    let ordered: UInt32 = value.isNaN ? 0 : bits & 0x8000_0000 != 0 ? ~bits : bits | 0x8000_0000
                    keys[index] = UInt64(~ordered) << 32 | UInt64(index)
                }
                keys.sort()
            }
        }
        return keys.map { Int($0 & 0xFFFF_FFFF) }
    }

    /// The result of a window scored by `request`: YAMNet's scores, or with a custom model the head's probabilities
    /// of the window's embedding (labels: the head's).
    package static func scored(
        by request: ClassifySoundRequest, timeRange: TimeRange, yamnetScores: [Float], embedding: [Float],
        yamnetLabels: [String], levelDBFS: Float
    ) -> ClassificationResult {
        if let head = request.head {
            return scored(timeRange: timeRange, scores: head.probabilities(embedding: embedding), labels: head.labels,
                          levelDBFS: levelDBFS, embedding: embedding)
        }
        return scored(timeRange: timeRange, scores: yamnetScores, labels: yamnetLabels, levelDBFS: levelDBFS,
                      embedding: embedding)
    }

    /// A gated result: no inference, level only.
    package static func gated(timeRange: TimeRange, levelDBFS: Float) -> ClassificationResult {
        ClassificationResult(timeRange: timeRange, classifications: [], scores: [], levelDBFS: levelDBFS, isGated: true)
    }

    /// RMS level in dBFS of `samples`, floored at ``levelFloorDBFS`` (sums in Double).
    package static func level(of samples: UnsafeBufferPointer<Float>) -> Float {
        guard !samples.isEmpty else { return levelFloorDBFS }
        // Four running sums, so that the loop runs in vector registers; their order of addition is fixed.
        var sums = SIMD4<Double>()
        let base = samples.baseAddress!, whole = samples.count & ~3
        var index = 0
        while index < whole {
            let values = SIMD4<Double>(SIMD4<Float>(base[index], base[index + 1], base[index + 2], base[index + 3]))
            sums += values * values
            index += 4
        }
        var sum = (sums[0] + sums[1]) + (sums[2] + sums[3])
        while index < samples.count {
            sum += Double(base[index]) * Double(base[index])
            index += 1
        }
        let rms = (sum / Double(samples.count)).squareRoot()
        guard rms > 0 else { return levelFloorDBFS }
        return max(levelFloorDBFS, Float(20 * log10(rms)))
    }
}

/// Receives an analyzer's results (Sound Analysis' `SNResultsObserving`).
///
/// Analyzers call these methods on the thread that called `analyze` / `completeAnalysis`, in time order per request.
/// An analyzer keeps a strong reference to each observer until the request is removed or the analyzer is released
/// (Apple's analyzers do not; here an observer cannot vanish mid-analysis).
public protocol ResultsObserving: AnyObject {
    /// A window's result (`request(_:didProduce:)`).
    func request(_ request: ClassifySoundRequest, didProduce result: ClassificationResult)
    /// The request failed (e.g. the file turned out damaged part-way, after the results of the windows decoded
    /// before the damage; a file cut short is not a failure: it completes, and ``AudioFileAnalyzer/decodingWarning``
    /// names it); no more results or completion follow for it (`request(_:didFailWithError:)`). Not called after a
    /// cancel.
    func request(_ request: ClassifySoundRequest, didFailWithError error: EarshotError)
    /// The request finished: every window has been delivered (`requestDidComplete(_:)`). Not called after a cancel.
    func requestDidComplete(_ request: ClassifySoundRequest)
}

extension ResultsObserving {
    /// Default: ignore the failure.
    public func request(_ request: ClassifySoundRequest, didFailWithError error: EarshotError) {}
    /// Default: nothing to do at completion.
    public func requestDidComplete(_ request: ClassifySoundRequest) {}
}
