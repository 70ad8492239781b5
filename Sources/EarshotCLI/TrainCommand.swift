import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotSupport
import EarshotTools
import Foundation
import Synchronization

/// `earshot train DATA_DIR --output FILE [...]`: trains a classifier head on YAMNet embeddings from a folder of
/// labelled recordings, prints the evaluation and writes the model.
/// Exit status: 0, 64 usage, 65 bad data, 66 missing folder, 73 cannot write the model.
enum TrainCommand: EarshotCommand {
    static let usage = "usage: earshot train DATA_DIR --output FILE [--classifier logistic|mlp] [--validation F] [--seed N] [--folds K]"

    static let help = """
    \(usage)
                         [--hidden N] [--l2 X] [--epochs N] [--window S] [--overlap F] [--gate-dbfs X]

    Trains a custom sound classifier on the built-in YAMNet's 1024-d embeddings. DATA_DIR holds one sub-folder of
    recordings per label (any audio format earshot reads; long files are cut into windows); a sub-folder named
    background is the negative class: sounds that are none of the others.
      --output FILE       the model file to write (safetensors with JSON metadata), e.g. doorbell.earshot
      --classifier K      logistic (default: multinomial logistic regression) or mlp (one hidden layer)
      --validation F      fraction of each label's files held out for early stopping and the report, split by
                          file, 0 to 0.9 (default 0.2)
      --seed N            seed for the splits, shuffling and initial weights (default 1)
      --folds K           also run K-fold cross-validation (2 to 50) and report it
      --hidden N          hidden units of the mlp, 1 to 4096 (default 128)
      --l2 X              L2 penalty on the weights, 0 to 10 (default 0.01)
      --epochs N          most epochs, 1 to 100000 (default 300; training stops early when the validation loss
                          has not improved for 20 epochs)
      --window S          window length in seconds, 0.96 to 10 (default 0.96)
      --overlap F         window overlap, 0 <= F < 1 (default 0.5: a 0.48 s hop)
      --gate-dbfs X       leave out windows quieter than X dBFS, -120 to 0 (default: keep every window; -50 is
                          the daemon's level gate, which never classifies quieter windows)
    Progress goes to standard error; the report (per-label precision, recall, F1, the confusion matrix and the
    accuracy) to standard output.
    """

    struct Options {
        var folder = ""
        var output = ""
        var configuration = TrainingConfiguration()
    }

    static let name = "train"
    static let flags = ["--output", "--classifier", "--validation", "--seed", "--folds", "--hidden", "--l2", "--epochs",
                        "--window", "--overlap", "--gate-dbfs"]

    static func execute(_ options: Options) -> Int32 {
        let progress = ProgressPrinter()
        let report: TrainingReport
        do {
            // Before every embedding is computed: the model could not be written at the end.
            try OutputFile.checkWritable(options.output, what: "head model", hint: "check that the directory exists and is writable")
            report = try HeadTraining.train(
                folder: URL(fileURLWithPath: options.folder), configuration: options.configuration,
                progress: { progress.show($0) })
            try report.head.write(to: URL(fileURLWithPath: options.output))
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
        for line in report.formatted() { print(line) }
        let problems = report.readinessProblems
        print("wrote \(options.output)\(problems.isEmpty ? "" : " (kept to inspect it, not to use)")")
        let advice = "add recordings (more files per label, and background with the room's usual sounds) and train again"
        for line in problems.isEmpty
            ? UsageSnippet.lines(modelPath: options.output, head: report.head)
            : UsageSnippet.notReady(modelPath: options.output, problems: problems, advice: advice) { print(line) }
        fflush(nil)
        return 0
    }

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options {
        var options = Options()
        var folder: String?
        var output: String?
        while let item = try parser.next() {
            switch item {
            case .positional(let text):
                if let folder {
                    throw EarshotError(.usage, "train takes one DATA_DIR, got \"\(folder)\" and \"\(text)\" (\(usage))")
                }
                folder = text
            case .flag(let flag, let inline):
                switch flag {
                case "--output", "-o": output = try parser.value(of: flag, inline, allowed: "a file name")
                case "--classifier":
                    options.configuration.options.classifier = try parser.choice(
                        of: flag, inline, kind: "a classifier", allowed: "logistic or mlp")
                case "--validation":
                    options.configuration.validationFraction = try parser.number(of: flag, inline, in: 0.0...0.9, allowed: "0 to 0.9")
                case "--seed":
                    options.configuration.options.seed = try parser.number(of: flag, inline, in: 0...UInt64.max, allowed: "an integer >= 0")
                case "--folds":
                    options.configuration.folds = try parser.number(of: flag, inline, in: 2...50, allowed: "2 to 50")
                case "--hidden":
                    options.configuration.options.hiddenUnits = try parser.number(of: flag, inline, in: 1...4096, allowed: "1 to 4096")
                case "--l2":
                    options.configuration.options.l2 = try parser.number(of: flag, inline, in: 0.0...10, allowed: "0 to 10")
                case "--epochs":
                    options.configuration.options.maximumEpochs = try parser.number(of: flag, inline, in: 1...100_000, allowed: "1 to 100000")
                case "--window":
                    options.configuration.windowDuration = try parser.number(of: flag, inline, in: 0.96...10, allowed: "seconds, 0.96 to 10")
                case "--overlap":
                    options.configuration.overlapFactor = try parser.number(of: flag, inline, in: 0.0...0.99, allowed: "a fraction, 0 <= F < 1")
                case "--gate-dbfs":
                    options.configuration.minimumLevelDBFS = try parser.number(of: flag, inline, in: -120.0...0, allowed: "dBFS, -120 to 0")
                default:
                    throw parser.unknown(flag)
                }
            }
        }
        guard let folder else { throw parser.missing("a DATA_DIR") }
        guard let output else { throw parser.missing("--output FILE for the model") }
        options.folder = folder
        options.output = output
        return options
    }
}

/// Prints training progress on standard error: file counts while embeddings are computed, some epochs, and where
/// each run stopped.
final class ProgressPrinter: Sendable {
    private let lastShown = Mutex<Int>(-1)

    func show(_ progress: TrainingProgress) {
        switch progress {
        case .features(let done, let total):
            // Called from worker threads: print each 10% (every file on a terminal).
            let step = standardErrorIsTerminal ? 1 : max(1, total / 10)
            let show = lastShown.withLock { last -> Bool in
                guard done == total || done / step != last / step else { return false }
                last = done
                return true
            }
            guard show else { return }
            if standardErrorIsTerminal {
                FileHandle.standardError.write(Data("\rembeddings: \(done)/\(total) files\(done == total ? "\n" : "")".utf8))
            } else {
                writeError("embeddings: \(done)/\(total) files")
            }
        case .skipped(let error):
            reportError("skipped: \(error.message)")
        case .fold(let index, let count):
            writeError("cross-validation fold \(index)/\(count)")
        case .finalModel:
            writeError("training the model")
        case .epoch(let report):
            guard report.epoch == 1 || report.epoch % 10 == 0 else { return }
            writeError(Self.describe(report))
        case .stopped(let epochs, let best):
            writeError("stopped after \(epochs) epochs; kept the weights of epoch \(best)")
        }
    }

    static func describe(_ report: EpochReport) -> String {
        var line = "epoch \(report.epoch): loss " + String(format: "%.4f", report.trainingLoss)
        if let loss = report.validationLoss { line += ", validation loss " + String(format: "%.4f", loss) }
        if let accuracy = report.validationAccuracy { line += ", validation accuracy " + String(format: "%.1f%%", accuracy * 100) }
        return line
    }
}

/// How to use a model file: `earshot analyze --model` and the daemon configuration lines.
enum UsageSnippet {
    /// Instead of the configuration lines, for a model its own check found poor: why, and what to do.
    static func notReady(modelPath: String, problems: [String], advice: String) -> [String] {
        ["NOT READY for earshotd, do not add it to the configuration:"] + problems.map { "  - " + $0 }
            + ["what to do: \(advice)", "inspect it: earshot analyze --model \(DisplayText.shellWord(modelPath)) FILE"]
    }

    /// The lines for a ready model: how to try it, and the configuration for earshotd, with `[analysis] window`
    /// when the head was trained on another window than the daemon's default 0.96 s (trial 5 #14).
    static func lines(modelPath: String, head: ClassifierHead) -> [String] {
        let absolute = URL(fileURLWithPath: modelPath).standardizedFileURL.path
        let name = HeadModelSet.modelName(forPath: absolute)
        let background = head.metadata.backgroundLabel
        let targets = head.labels.filter { $0 != background }
        var lines = [
            "try it: earshot analyze --model \(DisplayText.shellWord(modelPath)) FILE",
            "use it in earshotd (/etc/earshot/earshotd.conf; the daemon reads the model at start and on SIGHUP):",
            "  [models]",
            "  files = \(absolute)",
        ]
        // The daemon runs every head on its one [analysis] window; a head trained on another window needs it set.
        let window = head.metadata.windowDuration
        let trainedOnOtherWindow = abs(window - DaemonConfiguration.Analysis().windowDuration) > 1e-6
        if trainedOnOtherWindow { lines += ["  [analysis]", "  window = \(SettingRules.format(window))"] }
        var groups: [String] = []
        for label in targets {
            let group = HeadModelSet.suggestedGroupName(model: name, label: label)
            groups.append(group)
            let threshold = head.metadata.suggestedThresholds[label] ?? 0.5
            lines += ["  [group.\(group)]", "  classes = \(name):\(label)", "  threshold = " + String(format: "%.2f", threshold)]
        }
        lines.append("  and add \(groups.joined(separator: " | ")) to watch in [detection]")
        if trainedOnOtherWindow {
            lines.append("  (window = \(SettingRules.format(window)): the model was trained on \(SettingRules.format(window)) s windows; the daemon analyses every group on one window)")
            lines.append("  (the built-in groups were set on 0.96 s windows: check the sounds you rely on with earshot detect FILE --config YOUR.conf)")
        }
        return lines
    }
}
