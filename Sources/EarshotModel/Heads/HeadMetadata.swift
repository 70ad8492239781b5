import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport

/// The kind of classifier head.
public enum HeadClassifierKind: String, Sendable, Codable, CaseIterable {
    /// Multinomial logistic regression: one dense layer on the standardised embedding, softmax.
    case logistic
    /// A multilayer perceptron with one hidden ReLU layer, then a dense layer and softmax.
    case mlp
}

/// Everything a head model file says about itself besides its weights: stored as JSON in the safetensors header's
/// `__metadata__` under the key `earshot_head`.
public struct HeadMetadata: Sendable, Equatable, Codable {
    /// The version of this layout; files with a larger version are refused.
    public static let currentFormatVersion = 1

    /// Layout version (1).
    public var formatVersion: Int
    /// The class labels, index = output index (e.g. `["background", "doorbell"]`, sorted by name when trained from
    /// folders).
    public var labels: [String]
    /// The label of the negative class (`background`), when there is one.
    public var backgroundLabel: String?
    /// Logistic regression or MLP.
    public var classifier: HeadClassifierKind
    /// Hidden units of an MLP (nil for logistic regression).
    public var hiddenUnits: Int?
    /// The backbone whose embeddings the head takes.
    public var backbone: BackboneIdentity
    /// Window length in seconds the training windows had (0.96 by default: one YAMNet patch).
    public var windowDuration: Double
    /// Overlap of successive training windows, in [0, 1) (0.5 by default).
    public var overlapFactor: Double
    /// When the head was trained, ISO 8601 in UTC (e.g. `2024-05-01T12:00:00Z`).
    public var trainedAt: String
    /// How it was trained.
    public var training: TrainingRecord
    /// How well it did on data it was not trained on.
    public var metrics: HeadMetrics
    /// Per label other than the background, a probability threshold (0...1) suggested for detection groups: the
    /// one that maximised F1 on held-out windows (`earshot train`) or that separated the takes from the background
    /// (`earshot enroll`).
    public var suggestedThresholds: [String: Double]

    public init(
        labels: [String], backgroundLabel: String?, classifier: HeadClassifierKind, hiddenUnits: Int?,
        backbone: BackboneIdentity, windowDuration: Double, overlapFactor: Double, trainedAt: Date,
        training: TrainingRecord, metrics: HeadMetrics, suggestedThresholds: [String: Double]
    ) {
        formatVersion = Self.currentFormatVersion
        self.labels = labels
        self.backgroundLabel = backgroundLabel
        self.classifier = classifier
        self.hiddenUnits = hiddenUnits
        self.backbone = backbone
        self.windowDuration = windowDuration
        self.overlapFactor = overlapFactor
        self.trainedAt = Self.timestamp(trainedAt)
        self.training = training
        self.metrics = metrics
        self.suggestedThresholds = suggestedThresholds
    }

    package enum CodingKeys: String, CodingKey {
        case formatVersion = "format_version"
        case labels
        case backgroundLabel = "background_label"
        case classifier
        case hiddenUnits = "hidden_units"
        case backbone
        case windowDuration = "window_duration"
        case overlapFactor = "overlap_factor"
        case trainedAt = "trained_at"
        case training
        case metrics
        case suggestedThresholds = "suggested_thresholds"
    }

    /// `2024-05-01T12:00:00Z`
    package static func timestamp(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle())
    }
}

/// How a head was trained.
public struct TrainingRecord: Sendable, Equatable, Codable {
    /// `train` (from labelled folders) or `enroll` (from takes of one sound).
    public var method: String
    /// Files per label (takes and background recordings for `enroll`).
    public var filesPerLabel: [String: Int]
    /// Training windows per label (after augmentation for `enroll`).
    public var windowsPerLabel: [String: Int]
    /// Seed of the random number generator (splits, shuffling, initial weights, augmentation).
    public var seed: UInt64
    /// Fraction of each label's files held out for validation and early stopping.
    public var validationFraction: Double
    /// L2 penalty on the weights.
    public var l2: Double
    /// Adam's learning rate.
    public var learningRate: Double
    /// Epochs run before early stopping.
    public var epochs: Int
    /// The epoch whose weights were kept (lowest validation loss), 1-based.
    public var bestEpoch: Int

    public init(
        method: String, filesPerLabel: [String: Int], windowsPerLabel: [String: Int], seed: UInt64,
        validationFraction: Double, l2: Double, learningRate: Double, epochs: Int, bestEpoch: Int
    ) {
        self.method = method
        self.filesPerLabel = filesPerLabel
        self.windowsPerLabel = windowsPerLabel
        self.seed = seed
        self.validationFraction = validationFraction
        self.l2 = l2
        self.learningRate = learningRate
        self.epochs = epochs
        self.bestEpoch = bestEpoch
    }

    package enum CodingKeys: String, CodingKey {
        case method
        case filesPerLabel = "files_per_label"
        case windowsPerLabel = "windows_per_label"
        case seed
        case validationFraction = "validation_fraction"
        case l2
        case learningRate = "learning_rate"
        case epochs
        case bestEpoch = "best_epoch"
    }
}

/// Held-out figures of a head.
public struct HeadMetrics: Sendable, Equatable, Codable {
    /// On the validation split (nil when there was too little data for one).
    public var validation: EvaluationSummary?
    /// K-fold cross-validation, pooled over the folds (nil when not run).
    public var crossValidation: EvaluationSummary?

    public init(validation: EvaluationSummary? = nil, crossValidation: EvaluationSummary? = nil) {
        self.validation = validation
        self.crossValidation = crossValidation
    }

    package enum CodingKeys: String, CodingKey {
        case validation
        case crossValidation = "cross_validation"
    }
}
