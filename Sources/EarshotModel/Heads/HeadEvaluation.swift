import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport

/// Counts of (true label, predicted label) pairs: rows are the true labels, columns the predictions, both in the
/// order of ``labels``.
public struct ConfusionMatrix: Sendable, Equatable, Codable {
    /// The class labels, index = row and column.
    public let labels: [String]
    /// `[labels.count][labels.count]` counts; `counts[t][p]` = items of true label `t` predicted as `p`.
    public private(set) var counts: [[Int]]

    /// An empty matrix over `labels`.
    public init(labels: [String]) {
        self.labels = labels
        counts = Array(repeating: Array(repeating: 0, count: labels.count), count: labels.count)
    }

    /// Adds one item (indices into ``labels``).
    public mutating func add(truth: Int, predicted: Int) {
        counts[truth][predicted] += 1
    }

    /// Adds every count of `other` (same labels).
    public mutating func merge(_ other: ConfusionMatrix) {
        for row in counts.indices {
            for column in counts.indices { counts[row][column] += other.counts[row][column] }
        }
    }

    /// Items counted.
    public var total: Int { counts.reduce(0) { $0 + $1.reduce(0, +) } }
    /// Items on the diagonal.
    public var correct: Int { counts.indices.reduce(0) { $0 + counts[$1][$1] } }
    /// Fraction of items predicted right, 0...1 (0 when empty).
    public var accuracy: Double { total == 0 ? 0 : Double(correct) / Double(total) }
    /// Items whose true label is `index`.
    public func support(_ index: Int) -> Int { counts[index].reduce(0, +) }

    /// Precision of label `index`: right predictions of it / all predictions of it (0 when never predicted).
    public func precision(_ index: Int) -> Double {
        let predicted = counts.reduce(0) { $0 + $1[index] }
        return predicted == 0 ? 0 : Double(counts[index][index]) / Double(predicted)
    }

    /// Recall of label `index`: right predictions of it / items that are it (0 when none are).
    public func recall(_ index: Int) -> Double {
        let support = support(index)
        return support == 0 ? 0 : Double(counts[index][index]) / Double(support)
    }

    /// F1 of label `index`: the harmonic mean of precision and recall (0 when both are 0).
    public func f1(_ index: Int) -> Double {
        let p = precision(index), r = recall(index)
        return p + r == 0 ? 0 : 2 * p * r / (p + r)
    }

    /// Per-label precision, recall, F1 and support.
    public var perLabel: [LabelMetrics] {
        labels.indices.map {
            LabelMetrics(label: labels[$0], precision: precision($0), recall: recall($0), f1: f1($0), support: support($0))
        }
    }

    /// The matrix as aligned text: a header row of predicted labels, then one row per true label.
    public func formatted(indent: String = "  ") -> [String] {
        let width = max(8, (labels.map(\.count).max() ?? 0) + 2)
        func pad(_ text: String) -> String { text.count >= width ? text + " " : text + String(repeating: " ", count: width - text.count) }
        var lines = [indent + pad("true \\ predicted") + labels.map(pad).joined()]
        for (row, label) in labels.enumerated() {
            lines.append(indent + pad(label) + counts[row].map { pad(String($0)) }.joined())
        }
        return lines
    }
}

/// One label's figures in an evaluation.
public struct LabelMetrics: Sendable, Equatable, Codable {
    public var label: String
    /// 0...1
    public var precision: Double
    /// 0...1
    public var recall: Double
    /// 0...1
    public var f1: Double
    /// Items (windows) whose true label this is.
    public var support: Int
}

/// The figures of one evaluation (a validation split, or K folds pooled), per window and per file.
///
/// A file's prediction is the label with the highest mean probability over the file's windows.
public struct EvaluationSummary: Sendable, Equatable, Codable {
    /// Fraction of windows predicted right, 0...1.
    public var windowAccuracy: Double
    /// Fraction of files predicted right, 0...1.
    public var fileAccuracy: Double
    /// Windows evaluated.
    public var windowCount: Int
    /// Files evaluated.
    public var fileCount: Int
    /// Per-label figures over windows.
    public var perLabel: [LabelMetrics]
    /// The window confusion matrix.
    public var windows: ConfusionMatrix
    /// The file confusion matrix.
    public var files: ConfusionMatrix
    /// Folds pooled (nil for a single validation split).
    public var folds: Int?

    public init(windows: ConfusionMatrix, files: ConfusionMatrix, folds: Int? = nil) {
        windowAccuracy = windows.accuracy
        fileAccuracy = files.accuracy
        windowCount = windows.total
        fileCount = files.total
        perLabel = windows.perLabel
        self.windows = windows
        self.files = files
        self.folds = folds
    }

    package enum CodingKeys: String, CodingKey {
        case windowAccuracy = "window_accuracy"
        case fileAccuracy = "file_accuracy"
        case windowCount = "window_count"
        case fileCount = "file_count"
        case perLabel = "per_label"
        case windows = "window_confusion"
        case files = "file_confusion"
        case folds
    }

    /// The report a person reads: per-label precision, recall and F1, the window confusion matrix, and the
    /// accuracies.
    public func formatted() -> [String] {
        let width = max(10, (perLabel.map(\.label.count).max() ?? 0) + 2)
        func pad(_ text: String, _ size: Int) -> String {
            text.count >= size ? text + " " : text + String(repeating: " ", count: size - text.count)
        }
        func number(_ value: Double) -> String { String(cFormat: "%.3f", value) }
        var lines = ["  " + pad("label", width) + pad("precision", 11) + pad("recall", 8) + pad("f1", 7) + "windows"]
        for metric in perLabel {
            lines.append("  " + pad(metric.label, width) + pad(number(metric.precision), 11) + pad(number(metric.recall), 8)
                         + pad(number(metric.f1), 7) + String(metric.support))
        }
        lines.append("  confusion matrix (windows; rows: true label, columns: predicted):")
        lines += windows.formatted(indent: "    ")
        lines.append("  accuracy: " + Self.percent(windowAccuracy) + " of \(windowCount) windows, "
                     + Self.percent(fileAccuracy) + " of \(fileCount) files")
        return lines
    }

    /// `97.4%`
    package static func percent(_ fraction: Double) -> String { String(cFormat: "%.1f%%", fraction * 100) }
}
