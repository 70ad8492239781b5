import Earshot
import Foundation

/// `earshot report --snore FILE [--json OUT] [--svg OUT] [--threshold X] [--rhythm-threshold Y] [--progress|--quiet]`:
/// the snore report of a recording. Prints the summary on stdout (or the JSON with `--json -`), writes the JSON and
/// the SVG timeline where asked, and shows a progress bar on stderr when it is a terminal.
/// Exit status: 0, 64 usage, 65 bad audio, 66 missing file, 73 an output cannot be written.
enum ReportCommand {
    static let usage =
        "usage: earshot report --snore FILE [--json OUT|-] [--svg OUT] [--model HEAD] [--threshold X] [--rhythm-threshold Y] [--progress|--quiet]"
    static let help = """
        \(usage)

        Finds snoring in a recording (e.g. a night) and reports minutes snoring, episodes (events less than 2 minutes
        apart merge), events per hour, loudness per episode and the loudest moments, with a timeline in 5-minute bins.
          --json OUT           write the report as JSON to OUT (- for standard output instead of the summary)
          --svg OUT            write the timeline chart as SVG to OUT
          --model HEAD         a snore model made with earshot train (folders snoring and background): its
                               snoring probability adds to the evidence
          --threshold X        snore evidence that counts on its own, 0 to 1 (default 0.3)
          --rhythm-threshold Y lower evidence that counts when snores recur every 2-6 s (default 0.1)
          --progress, --quiet  force or hide the progress bar (default: shown when stderr is a terminal)
        """

    static func run(_ arguments: [String]) -> Int32 {
        var file: String?
        var jsonPath: String?
        var svgPath: String?
        var configuration = SnoreDetector.Configuration()
        var modelPath: String?
        var showProgress = isatty(STDERR_FILENO) == 1
        var index = 0
        func value(_ name: String) -> String? {
            index += 1
            return index < arguments.count ? arguments[index] : nil
        }
        while index < arguments.count {
            let argument = arguments[index]
            switch argument {
            case "--help", "-h":
                print(help)
                return 0
            case "--snore":
                guard let path = value(argument) else { return usageError("--snore needs a sound file") }
                file = path
            case "--json":
                guard let path = value(argument) else { return usageError("--json needs an output path (or -)") }
                jsonPath = path
            case "--svg":
                guard let path = value(argument) else { return usageError("--svg needs an output path") }
                svgPath = path
            case "--model":
                guard let path = value(argument) else { return usageError("--model needs a head model file") }
                modelPath = path
            case "--threshold", "--rhythm-threshold":
                guard let text = value(argument), let number = Float(text), number >= 0, number <= 1 else {
                    return usageError("\(argument) needs a number from 0 to 1")
                }
                if argument == "--threshold" {
                    configuration.strongThreshold = number
                } else {
                    configuration.weakThreshold = number
                }
            case "--progress": showProgress = true
            case "--quiet": showProgress = false
            default:
                return usageError("unknown argument \"\(argument)\"")
            }
            index += 1
        }
        guard let file else { return usageError("name the recording with --snore FILE") }
        guard configuration.weakThreshold <= configuration.strongThreshold else {
            return usageError("--rhythm-threshold must be at most --threshold")
        }

        let bar = ProgressBar(enabled: showProgress)
        let result: SnoreFileAnalysis.Result
        do {
            let head = try modelPath.map { path throws(EarshotError) in
                try SnoreDetector.HeadEvidence(head: try ClassifierHead(contentsOf: URL(fileURLWithPath: path)))
            }
            result = try SnoreFileAnalysis.analyze(
                url: URL(fileURLWithPath: file), configuration: configuration, head: head,
                progress: { done, total in bar.update(done: done, total: total) })
        } catch {
            bar.finish()
            printError(error.message)
            return error.exitStatus
        }
        bar.finish()
        let report = result.report
        do {
            if let svgPath { try write(report.svg(), to: svgPath) }
            if let jsonPath {
                let json = JSONValue.object(report.json).encoded + "\n"
                if jsonPath == "-" {
                    FileHandle.standardOutput.write(Data(json.utf8))
                } else {
                    try write(json, to: jsonPath)
                }
            }
        } catch {
            printError(error.message)
            return error.exitStatus
        }
        if jsonPath != "-" { FileHandle.standardOutput.write(Data(report.text().utf8)) }
        return 0
    }

    static func write(_ text: String, to path: String) throws(EarshotError) {
        do {
            try Data(text.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            throw EarshotError(.cannotCreate, "cannot write \(path): \(error.localizedDescription) (check the directory and free space)")
        }
    }

    static func usageError(_ message: String) -> Int32 {
        printError("\(message) (\(usage))")
        return 64
    }

    static func printError(_ message: String) {
        FileHandle.standardError.write(Data("earshot: \(message)\n".utf8))
    }
}

/// A one-line progress bar on stderr, redrawn in place: `[#########-----------]  45%  3:36:00 of 8:00:00, 95x real time`.
final class ProgressBar {
    private let enabled: Bool
    private let started = Date()
    private var drawn = false

    init(enabled: Bool) {
        self.enabled = enabled
    }

    func update(done: Double, total: Double?) {
        guard enabled else { return }
        let elapsed = max(Date().timeIntervalSince(started), 1e-3)
        let speed = "\(Int(done / elapsed))x real time"
        var line: String
        if let total, total > 0 {
            let fraction = min(1, max(0, done / total))
            let filled = Int((fraction * 30).rounded(.down))
            line = "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: 30 - filled) + "] "
            line += "\(Int((fraction * 100).rounded(.down)))%  \(clock(done)) of \(clock(total)), \(speed)"
        } else {
            line = "\(clock(done)) analysed, \(speed)"
        }
        FileHandle.standardError.write(Data(("\r" + line + "\u{1B}[K").utf8))
        drawn = true
    }

    func finish() {
        guard enabled, drawn else { return }
        FileHandle.standardError.write(Data("\n".utf8))
        drawn = false
    }

    private func clock(_ seconds: Double) -> String {
        let total = Int(seconds)
        let m = (total / 60) % 60, s = total % 60
        return "\(total / 3600):" + (m < 10 ? "0" : "") + "\(m):" + (s < 10 ? "0" : "") + "\(s)"
    }
}
