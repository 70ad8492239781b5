import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotAudio
import EarshotModel

/// A request to classify sounds in windows of audio (Sound Analysis' `SNClassifySoundRequest`).
///
/// The built-in classifier is YAMNet (521 AudioSet classes). YAMNet scores 0.96 s log-mel patches; a window of
/// ``windowDuration`` seconds is scored as the mean of the 0.96 s patches that fit inside it at 0.48 s steps
/// (`1 + floor((windowDuration - 0.96) / 0.48)` patches; one patch for the default 0.96 s, two for 1.44 s). A longer
/// window that reaches past the end of the audio (a file's, or a stream's at `completeAnalysis()`) is padded with
/// zeros but averages only its patches of audio, the last one ending with the audio, not the padding.
/// Windows start every `windowDuration * (1 - overlapFactor)` seconds, rounded to the 10 ms log-mel hop (a hop that
/// rounds to none is refused). The defaults, 0.96 s and 0.5 (a 0.48 s hop), are exactly the reference model's patches.
///
/// A window needs `(frames - 1) * 160 + 400` samples at 16 kHz, where `frames = 96 + 48 * (patches - 1)` log-mel
/// frames: 15600 samples (0.975 s) for the default window.
///
/// Requests are immutable; invalid values are refused at creation.
public final class ClassifySoundRequest: Sendable {
    /// Which classifier scores the windows (Sound Analysis chooses with the initialiser:
    /// `classifierIdentifier:` for the built-in one, `mlModel:` for a custom one).
    public enum Classifier: Sendable, Equatable {
        /// YAMNet (TF Hub google/yamnet/1), loaded once per process from the installed `Models/` directory
        /// (``ClassifierIdentifier/version1``, Apple's `SNClassifierIdentifier.version1`).
        case builtIn
        /// A custom classifier head (``ClassifierHead``, made by `earshot train` or `earshot enroll`) on YAMNet's
        /// embeddings; results carry the head's labels and its probabilities (Apple's `mlModel:`, a Core ML model).
        case custom(ClassifierHead)

        /// The same classifier: both built in, or the same head object.
        public static func == (lhs: Classifier, rhs: Classifier) -> Bool {
            switch (lhs, rhs) {
            case (.builtIn, .builtIn): true
            case (.custom(let a), .custom(let b)): a === b
            default: false
            }
        }
    }

    /// The shortest window in seconds: one YAMNet patch (96 frames of 10 ms); the lower bound of
    /// ``windowDurationConstraint``.
    public static let minimumWindowDuration = 0.96
    /// The longest window in seconds (one hour; a bound that keeps buffers and counts finite); the upper bound of
    /// ``windowDurationConstraint``.
    public static let maximumWindowDuration = 3_600.0

    /// The classifier (Sound Analysis fixes it at creation too).
    public let classifier: Classifier
    /// Window length in seconds, within ``windowDurationConstraint`` (0.96...3600) (Sound Analysis'
    /// `windowDuration`, a settable `CMTime` there).
    public let windowDuration: Double
    /// Fraction of a window shared with the next one, 0 <= overlapFactor < 1 (Sound Analysis' `overlapFactor`,
    /// settable there).
    public let overlapFactor: Double
    /// Patch and hop sizes derived from the two values above.
    package let geometry: WindowGeometry

    /// Creates a request: Earshot's initialiser, with the classifier as a value; Apple's spellings are
    /// ``init(classifierIdentifier:windowDuration:overlapFactor:)`` and ``init(model:windowDuration:overlapFactor:)``.
    /// - Parameters:
    ///   - classifier: the classifier (default: the built-in YAMNet).
    ///   - windowDuration: window length in seconds, 0.96...3600 (default 0.96).
    ///   - overlapFactor: overlap between successive windows, 0 <= value < 1 (default 0.5, a 0.48 s hop).
    /// - Throws: ``EarshotError`` `.usage` naming the value and the allowed range, also when the two leave windows
    ///   less than 5 ms apart (they start on the 10 ms log-mel hop; at most 0.994 overlap for a 0.96 s window).
    public init(classifier: Classifier = .builtIn, windowDuration: Double = 0.96, overlapFactor: Double = 0.5) throws(EarshotError) {
        try Self.windowDurationConstraint.check(windowDuration: windowDuration)
        guard overlapFactor.isFinite, overlapFactor >= 0, overlapFactor < 1 else {
            throw EarshotError(.usage, "overlapFactor \(overlapFactor) is out of range (allowed: 0 <= overlapFactor < 1)")
        }
        // Windows start on the 10 ms log-mel hop: a hop under 5 ms would round to none (it used to become 10 ms
        // silently, 100 windows a second).
        let hop = windowDuration * (1 - overlapFactor)
        guard (hop * Double(YAMNet.sampleRate) / Double(LogMelSpectrogram.hopSamples)).rounded() >= 1 else {
            let largest = ((1 - 0.005 / windowDuration) * 1000).rounded(.down) / 1000
            throw EarshotError(.usage, "overlap \(SettingRules.format(overlapFactor)) on a \(SettingRules.format(windowDuration)) s window leaves windows \(SettingRules.format((hop * 100_000).rounded() / 100)) ms apart, under the 10 ms step windows start on: use an overlap of at most \(SettingRules.format(largest)) for this window")
        }
        self.classifier = classifier
        self.windowDuration = windowDuration
        self.overlapFactor = overlapFactor
        geometry = WindowGeometry(windowDuration: windowDuration, overlapFactor: overlapFactor)
    }

    /// A request for a custom model file (Sound Analysis' `SNClassifySoundRequest(mlModel:)`): reads the head model
    /// at `model` and checks it was made for the built-in backbone installed here.
    /// - Parameters:
    ///   - model: a head model file written by `earshot train` or `earshot enroll`.
    ///   - windowDuration: window length in seconds, 0.96...3600; nil (default) = the window the head was trained on.
    ///   - overlapFactor: 0 <= value < 1; nil (default) = the overlap the head was trained with.
    /// - Throws: ``EarshotError`` as ``ClassifierHead/init(contentsOf:)`` (missing, damaged, another backbone), or
    ///   `.usage` for a window or overlap out of range.
    public convenience init(model: URL, windowDuration: Double? = nil, overlapFactor: Double? = nil) throws(EarshotError) {
        let head = try ClassifierHead(contentsOf: model)
        try self.init(
            classifier: .custom(head), windowDuration: windowDuration ?? head.metadata.windowDuration,
            overlapFactor: overlapFactor ?? head.metadata.overlapFactor)
    }

    /// A request for a built-in classifier named by its identifier (Sound Analysis'
    /// `SNClassifySoundRequest(classifierIdentifier:)`): `ClassifySoundRequest(classifierIdentifier: .version1)` is
    /// the same request as `ClassifySoundRequest(classifier: .builtIn)`.
    ///
    /// Apple's request takes `windowDuration` and `overlapFactor` as settable properties; here a request is
    /// immutable (it is `Sendable` and may be shared by analyzers on several threads), so they are passed here.
    /// - Parameters:
    ///   - classifierIdentifier: the built-in classifier, ``ClassifierIdentifier/version1`` (YAMNet).
    ///   - windowDuration: window length in seconds, within ``windowDurationConstraint`` (default 0.96).
    ///   - overlapFactor: overlap between successive windows, 0 <= value < 1 (default 0.5, a 0.48 s hop).
    /// - Throws: ``EarshotError`` `.usage` for an identifier that names no built-in classifier here, and as
    ///   ``init(classifier:windowDuration:overlapFactor:)`` for the window and the overlap.
    public convenience init(
        classifierIdentifier: ClassifierIdentifier, windowDuration: Double = 0.96, overlapFactor: Double = 0.5
    ) throws(EarshotError) {
        guard classifierIdentifier == .version1 else {
            throw EarshotError(.usage, "unknown classifier identifier \"\(classifierIdentifier.rawValue)\" (built in: \"\(ClassifierIdentifier.version1.rawValue)\", YAMNet)")
        }
        try self.init(classifier: .builtIn, windowDuration: windowDuration, overlapFactor: overlapFactor)
    }

    /// The identifier of the built-in classifier this request uses, or nil for a custom model (Sound Analysis
    /// names no identifier for `SNClassifySoundRequest(mlModel:)` either).
    public var classifierIdentifier: ClassifierIdentifier? {
        classifier == .builtIn ? .version1 : nil
    }

    /// The window durations this request's classifier accepts (Sound Analysis'
    /// `SNClassifySoundRequest.windowDurationConstraint`): the same for every request, see the static
    /// ``ClassifySoundRequest/windowDurationConstraint``.
    public var windowDurationConstraint: TimeDurationConstraint { Self.windowDurationConstraint }

    /// The window durations Earshot's classifiers accept: 0.96 to 3600 seconds (a range, Sound Analysis'
    /// `SNTimeDurationConstraint` of type `.range`).
    ///
    /// Why: YAMNet, the built-in classifier and the backbone of every custom head, scores 0.96 s log-mel patches
    /// (96 frames of 10 ms), so no window can be shorter than one patch. A longer window is scored as the mean of
    /// the patches that fit inside it at 0.48 s steps, `1 + floor((windowDuration - 0.96) / 0.48)` of them: the
    /// durations 0.96 + 0.48 k s (0.96, 1.44, 1.92, ...) are covered exactly; for any other duration the last
    /// `(windowDuration - 0.96) mod 0.48` seconds of each window are outside its patches (they are still inside the
    /// next window's). The upper bound keeps buffers and counts finite. A duration outside the range is refused by
    /// every initialiser with ``TimeDurationConstraint/check(windowDuration:)``'s message, e.g.
    /// `windowDuration 0.5 s is out of range (allowed: 0.96 to 3600 seconds)`.
    public static let windowDurationConstraint = TimeDurationConstraint(
        .durationRange(minimumWindowDuration...maximumWindowDuration))

    /// The labels this request can produce, index = class index (Sound Analysis'
    /// `SNClassifySoundRequest.knownClassifications`): 521 AudioSet display names for the built-in classifier, the
    /// head's labels for a custom model.
    ///
    /// Spelt as Apple's property, `request.knownClassifications` (a collection of `String`), and callable as before,
    /// `try request.knownClassifications()`, which also says why the labels are missing: the built-in labels come
    /// with the model, which is loaded (once per process) on first use and may be absent. Through the property, a
    /// model that cannot be loaded gives an empty collection.
    public var knownClassifications: KnownClassifications {
        if let head { return KnownClassifications(.success(head.labels)) }
        do throws(EarshotError) {
            return KnownClassifications(.success(try model().classLabels))
        } catch {
            return KnownClassifications(.failure(error))
        }
    }

    /// The custom head, or nil for the built-in classifier.
    package var head: ClassifierHead? {
        if case .custom(let head) = classifier { return head }
        return nil
    }

    /// The backbone for ``classifier``: YAMNet in every case (a custom head runs on its embeddings).
    package func model() throws(EarshotError) -> YAMNet {
        try BuiltInClassifier.shared()
    }
}

/// Names a built-in sound classifier (Sound Analysis' `SNClassifierIdentifier`).
public struct ClassifierIdentifier: RawRepresentable, Sendable, Hashable {
    /// The identifier's name.
    public let rawValue: String

    /// An identifier by name (`SNClassifierIdentifier(rawValue:)`); only ``version1`` names a classifier here.
    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    /// The first built-in classifier (Sound Analysis' `SNClassifierIdentifier.version1`): here YAMNet, TF Hub
    /// google/yamnet/1 (521 AudioSet classes, 0.96 s patches), where Apple's is its own classifier of about 300
    /// classes. The same as ``ClassifySoundRequest/Classifier/builtIn``.
    public static let version1 = ClassifierIdentifier(rawValue: "version1")
}

/// Which window durations a classifier accepts (Sound Analysis' `SNTimeDurationConstraint`), in seconds.
public struct TimeDurationConstraint: Sendable, Equatable {
    /// The kind of constraint (Sound Analysis' `SNTimeDurationConstraintType`, with its values attached).
    public enum ConstraintType: Sendable, Equatable {
        /// Only these durations, in seconds (Apple's `.enumerated` with `enumeratedDurations`).
        case enumeratedDurations([Double])
        /// Any duration in this closed range, in seconds (Apple's `.range` with `durationRange`).
        case durationRange(ClosedRange<Double>)
    }

    /// The constraint (Apple's `type`).
    public let type: ConstraintType

    /// A constraint of `type`.
    public init(_ type: ConstraintType) {
        self.type = type
    }

    /// The allowed durations for an enumerated constraint, else empty (Apple's `enumeratedDurations`).
    public var enumeratedDurations: [Double] {
        if case .enumeratedDurations(let durations) = type { return durations }
        return []
    }

    /// The allowed range for a range constraint, else nil (Apple's `durationRange`).
    public var durationRange: ClosedRange<Double>? {
        if case .durationRange(let range) = type { return range }
        return nil
    }

    /// Whether a window of `seconds` is allowed (within a nanosecond of an allowed value or bound). (Earshot's own.)
    public func allows(_ seconds: Double) -> Bool {
        guard seconds.isFinite else { return false }
        switch type {
        case .enumeratedDurations(let durations):
            return durations.contains { abs($0 - seconds) <= 1e-9 }
        case .durationRange(let range):
            return seconds >= range.lowerBound - 1e-9 && seconds <= range.upperBound + 1e-9
        }
    }

    /// Refuses a window duration the constraint does not allow (Earshot's own: Apple's request raises an exception
    /// when `windowDuration` is set outside its constraint).
    /// - Throws: ``EarshotError`` `.usage`: for a range, `windowDuration 0.5 s is out of range (allowed: 0.96 to
    ///   3600 seconds)`; for enumerated durations, `windowDuration 1.0 s is not allowed (allowed: 0.96, 1.44 seconds)`.
    public func check(windowDuration seconds: Double) throws(EarshotError) {
        guard !allows(seconds) else { return }
        switch type {
        case .enumeratedDurations(let durations):
            let list = durations.map { SettingRules.format($0) }.joined(separator: ", ")
            throw EarshotError(.usage, "windowDuration \(seconds) s is not allowed (allowed: \(list) seconds)")
        case .durationRange(let range):
            throw EarshotError(.usage, "windowDuration \(seconds) s is out of range (allowed: \(SettingRules.format(range.lowerBound)) to \(SettingRules.format(range.upperBound)) seconds)")
        }
    }
}

/// A request's class labels (``ClassifySoundRequest/knownClassifications``): a collection of the labels, index =
/// class index, which can also be called, `try request.knownClassifications()`, to get them as an array or the
/// reason they are missing (the built-in model could not be loaded).
public struct KnownClassifications: RandomAccessCollection, Sendable, Equatable {
    private let outcome: Result<[String], EarshotError>
    private let labels: [String]

    init(_ outcome: Result<[String], EarshotError>) {
        self.outcome = outcome
        labels = (try? outcome.get()) ?? []
    }

    /// The first label's index, 0.
    public var startIndex: Int { labels.startIndex }
    /// The number of labels.
    public var endIndex: Int { labels.endIndex }
    /// The label of class `position`.
    public subscript(position: Int) -> String { labels[position] }

    /// The labels as an array.
    /// - Throws: ``EarshotError`` when the built-in model cannot be loaded (see `YAMNet.builtIn()`).
    public func callAsFunction() throws(EarshotError) -> [String] {
        try outcome.get()
    }
}

/// The built-in YAMNet, loaded once per process and shared (a `YAMNet` is immutable and thread-safe). Earshot's own
/// (Sound Analysis loads its classifier behind `SNClassifySoundRequest`).
public enum BuiltInClassifier {
    private static let loaded = Mutex<YAMNet?>(nil)

    /// The process-wide built-in model; the first call loads it (`YAMNet.builtIn()`), later calls return the same
    /// instance. Thread-safe. (Earshot's own.)
    /// - Throws: as `YAMNet.builtIn()` (the model files cannot be found or read); a later call tries again.
    public static func shared() throws(EarshotError) -> YAMNet {
        try loaded.withLock { (model: inout YAMNet?) throws(EarshotError) -> YAMNet in
            if let model { return model }
            let fresh = try YAMNet.builtIn()
            model = fresh
            return fresh
        }
    }
}

/// How a request's windows map onto the 16 kHz samples and the 10 ms log-mel frames.
package struct WindowGeometry: Sendable, Equatable {
    /// 0.96 s patches averaged per window.
    package let patchesPerWindow: Int
    /// Log-mel frames a window covers: 96 + 48 * (patches - 1).
    package let windowFrames: Int
    /// 16 kHz samples a window covers: (windowFrames - 1) * 160 + 400.
    package let windowSamples: Int
    /// Log-mel frames (10 ms) between window starts, >= 1.
    package let hopFrames: Int
    /// 16 kHz samples between window starts: hopFrames * 160.
    package let hopSamples: Int

    package init(windowDuration: Double, overlapFactor: Double) {
        let extraPatches = Int(((windowDuration - YAMNet.patchDuration) / YAMNet.patchHopDuration + 1e-9).rounded(.down))
        patchesPerWindow = 1 + max(0, extraPatches)
        windowFrames = YAMNet.patchFrames + YAMNet.patchHopFrames * (patchesPerWindow - 1)
        windowSamples = (windowFrames - 1) * LogMelSpectrogram.hopSamples + LogMelSpectrogram.windowSamples
        let hopSeconds = windowDuration * (1 - overlapFactor)
        hopFrames = max(1, Int((hopSeconds * Double(YAMNet.sampleRate) / Double(LogMelSpectrogram.hopSamples)).rounded()))
        hopSamples = hopFrames * LogMelSpectrogram.hopSamples
    }

    /// Start frames, counted from the window's start, of the patches whose mean scores a window that holds
    /// `realSamples` samples of audio followed by zero padding (the last window of a file or of a stream that
    /// ended), in order.
    ///
    /// A full window (`realSamples >= windowSamples`) or a one-patch window: every patch, `0, 48, 96, ...` (the
    /// default 0.96 s window is its one patch, padded at the end as the reference pads it). A longer window that the
    /// end of the audio cuts short averages only patches of real audio: the patches on the 48-frame grid that end
    /// within the audio, then, when audio is left after the last of them, one more that ends with the audio (on the
    /// 10 ms frame grid, within 160 samples of the end), overlapping the one before. With less than one patch of
    /// audio (15600 samples), its first patch alone, padded as the default window's. E.g. 3 s windows (5 patches,
    /// 46320 samples) on 1.2 s of audio (19200 samples): frames `[0, 22]`, not `[0, 48, 96, 144, 192]` (three of
    /// those five patches would be more than three quarters zeros).
    package func patchStartFrames(realSamples: Int) -> [Int] {
        let grid = (0..<patchesPerWindow).map { $0 * YAMNet.patchHopFrames }
        guard patchesPerWindow > 1, realSamples < windowSamples else { return grid }
        let patchSamples = LogMelSpectrogram.patchSamples
        guard realSamples > patchSamples else { return [0] }
        let gridPatches = 1 + (realSamples - patchSamples) / LogMelSpectrogram.patchHopSamples
        var starts = Array(grid.prefix(gridPatches))
        let lastStart = (realSamples - patchSamples) / LogMelSpectrogram.hopSamples
        if lastStart > starts[starts.count - 1] { starts.append(lastStart) }
        return starts
    }

    /// Windows needed to cover `sampleCount` samples, padding the end with zeros as the reference's `pad_waveform`
    /// does: at least one, then one per hop until the last sample is inside a window.
    package func windowCount(sampleCount: Int) -> Int {
        let beyondFirst = max(0, sampleCount - windowSamples)
        return 1 + (beyondFirst + hopSamples - 1) / hopSamples
    }
}
