import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot analyze FILE... [--model FILE] [--format text|jsonl|csv] [--top K] [--window S] [--overlap F] [--summary]`:
/// classifies each file's windows and prints them; a bad file gets one stderr line and the others are still analysed.
/// Exit status (``exitStatus(failures:)``), the same whatever the order of the files: 0 when every file was analysed;
/// otherwise the most serious failure: another failure (e.g. 71, 74) before 66 (a file missing or unreadable) before
/// 65 (bad audio data). 64 (usage) ends before any file is read.
enum AnalyzeCommand {
    static let usage = "usage: earshot analyze FILE... [--model FILE] [--format text|jsonl|csv] [--top K] [--window S] [--overlap F] [--summary]"

    static let help = """
    \(usage)

    Classifies the sounds in each FILE (WAV, FLAC, Ogg Vorbis/Opus, MP3, AIFF) with the built-in YAMNet classifier.
      --model FILE  use a custom classifier made by `earshot train` or `earshot enroll` instead: its labels and
                    probabilities (window and overlap default to the ones it was trained with)
      --format F    text (default): "FILE START-ENDs  Label 93.1%  ..." per window
                    jsonl: {"file":...,"start":...,"duration":...,"classifications":[{"label":...,"confidence":...}]}
                    csv: file,start,duration,rank,label,confidence (one row per window per class)
      --top K       classes per window, 1 to 521 (default 3)
      --window S    window length in seconds, 0.96 to 3600 (default 0.96); a longer window averages the 0.96 s
                    patches inside it. A window reaching past the end of a file is padded with silence, as the
                    reference model pads, and printed with its whole length: --window 100 on a 5 s file gives
                    one window, 0.00-100.00s
      --overlap F   fraction shared by successive windows, 0 <= F < 1 (default 0.5: a 0.48 s hop); windows
                    start on a 10 ms step, so at most 0.994 for a 0.96 s window
      --summary     after each file, each label's share of the windows where it is the top class
                    (csv: rows with empty start and duration, the share in the confidence column)

    A bad FILE gets one line on standard error; the other files are still analysed. An MP3 that ends before the
    length its header states is analysed as far as it goes, with a warning line on standard error.
    Exit status: 0 every file analysed; otherwise, whatever the order of the files, 66 if a file is missing or
    unreadable, else 65 if a file is not usable audio (other failures, e.g. 71, come first); 64 bad usage.
    """

    struct Options {
        var files: [String] = []
        var format: AnalysisOutputFormat = .text
        var top = 3
        var window = ClassifySoundRequest.minimumWindowDuration
        var overlap = 0.5
        var summary = false
        var helpRequested = false
        var model: String?
        var windowGiven = false
        var overlapGiven = false
    }

    static func run(_ arguments: [String]) -> Int32 {
        let options: Options
        do {
            options = try parse(arguments)
        } catch {
            printError(error.message)
            return error.exitStatus
        }
        if options.helpRequested {
            print(help)
            return 0
        }

        let request: ClassifySoundRequest
        do {
            if let model = options.model {
                request = try ClassifySoundRequest(
                    model: URL(fileURLWithPath: model), windowDuration: options.windowGiven ? options.window : nil,
                    overlapFactor: options.overlapGiven ? options.overlap : nil)
            } else {
                request = try ClassifySoundRequest(windowDuration: options.window, overlapFactor: options.overlap)
            }
            _ = try BuiltInClassifier.shared()
        } catch {
            printError(error.message)
            return error.exitStatus
        }

        let formatter = AnalysisReportFormatter(format: options.format, top: options.top)
        if let header = formatter.header { print(header) }
        var failures: [Int32] = []
        for file in options.files {
            let observer = PrintingObserver(file: file, formatter: formatter, summary: options.summary)
            do {
                let analyzer = try AudioFileAnalyzer(url: URL(fileURLWithPath: file))
                try analyzer.add(request, withObserver: observer)
                analyzer.analyze()
                if let warning = analyzer.decodingWarning { printError(warning) }
            } catch {
                observer.failure = error
            }
            if let failure = observer.failure {
                printError(failure.message)
                failures.append(failure.exitStatus)
            }
        }
        fflush(nil)
        return exitStatus(failures: failures)
    }

    /// The status for the files' failure statuses, independent of their order: 0 for none; else the most serious:
    /// any status other than 65 and 66 (an OS or I/O failure: 71, 74, ...) first, then 66 (EX_NOINPUT: a file
    /// missing or unreadable), then 65 (EX_DATAERR: not usable audio). A missing file outranks bad data because
    /// it usually means a wrong command line, which the caller should hear about first.
    static func exitStatus(failures: [Int32]) -> Int32 {
        func rank(_ status: Int32) -> Int {
            switch status {
            case 65: 1
            case 66: 2
            default: 3
            }
        }
        return failures.max { rank($0) < rank($1) } ?? 0
    }

    /// Parses the arguments after `analyze`.
    /// - Throws: ``EarshotError`` `.usage` naming the flag and its allowed values.
    static func parse(_ arguments: [String]) throws(EarshotError) -> Options {
        var options = Options()
        var index = 0
        var onlyFiles = false
        func value(_ flag: String, _ inline: String?, allowed: String) throws(EarshotError) -> String {
            if let inline { return inline }
            index += 1
            guard index < arguments.count else {
                throw EarshotError(.usage, "\(flag) needs a value (\(allowed))")
            }
            return arguments[index]
        }
        while index < arguments.count {
            let argument = arguments[index]
            if onlyFiles || !argument.hasPrefix("-") || argument == "-" {
                options.files.append(argument)
                index += 1
                continue
            }
            var flag = argument
            var inline: String?
            if let equals = argument.firstIndex(of: "="), argument.hasPrefix("--") {
                flag = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            }
            switch flag {
            case "--":
                onlyFiles = true
            case "--help", "-h":
                options.helpRequested = true
            case "--summary":
                options.summary = true
            case "--model":
                options.model = try value(flag, inline, allowed: "a model file made by earshot train or earshot enroll")
            case "--format":
                let allowed = "text, jsonl or csv"
                let text = try value(flag, inline, allowed: allowed)
                guard let format = AnalysisOutputFormat(rawValue: text) else {
                    throw EarshotError(.usage, "--format \"\(text)\" is not a format (allowed: \(allowed))")
                }
                options.format = format
            case "--top":
                let allowed = "an integer from 1 to \(YAMNet.classCount)"
                let text = try value(flag, inline, allowed: allowed)
                guard let top = Int(text) else {
                    throw EarshotError(.usage, "--top \"\(text)\" is not an integer (allowed: \(allowed))")
                }
                guard top >= 1, top <= YAMNet.classCount else {
                    throw EarshotError(.usage, "--top \"\(text)\" is out of range (allowed: \(allowed))")
                }
                options.top = top
            case "--window":
                let allowed = "seconds, 0.96 to 3600"
                let text = try value(flag, inline, allowed: allowed)
                guard let seconds = Double(text), seconds.isFinite,
                      seconds >= ClassifySoundRequest.minimumWindowDuration,
                      seconds <= ClassifySoundRequest.maximumWindowDuration else {
                    throw EarshotError(.usage, "--window \"\(text)\" is out of range (allowed: \(allowed))")
                }
                options.window = seconds
                options.windowGiven = true
            case "--overlap":
                let allowed = "a fraction, 0 <= F < 1"
                let text = try value(flag, inline, allowed: allowed)
                guard let overlap = Double(text), overlap.isFinite, overlap >= 0, overlap < 1 else {
                    throw EarshotError(.usage, "--overlap \"\(text)\" is out of range (allowed: \(allowed))")
                }
                options.overlap = overlap
                options.overlapGiven = true
            default:
                throw EarshotError(.usage, "unknown option \"\(argument)\" for analyze (allowed: --model, --format, --top, --window, --overlap, --summary)")
            }
            index += 1
        }
        if options.files.isEmpty && !options.helpRequested {
            throw EarshotError(.usage, "analyze needs at least one FILE (\(usage))")
        }
        return options
    }

    /// Writes `earshot: MESSAGE` as one line (control characters of a file name in it are escaped).
    static func printError(_ message: String) {
        fflush(nil)
        FileHandle.standardError.write(Data("earshot: \(AnalysisReportFormatter.singleLine(message))\n".utf8))
    }
}

/// Prints each window as it is produced, then the summary; keeps the failure for the caller.
private final class PrintingObserver: ResultsObserving {
    let file: String
    let formatter: AnalysisReportFormatter
    let summary: Bool
    var tally = TopClassTally()
    var failure: EarshotError?

    init(file: String, formatter: AnalysisReportFormatter, summary: Bool) {
        self.file = file
        self.formatter = formatter
        self.summary = summary
    }

    func request(_ request: ClassifySoundRequest, didProduce result: ClassificationResult) {
        tally.add(result)
        for line in formatter.lines(file: file, result: result) {
            print(line)
            // Standard output failed (a full disk, > /dev/full): stop now rather than analyse the rest for nothing.
            if StandardOutput.hasFailed { StandardOutput.finish(earlier: errno) }
        }
    }

    func request(_ request: ClassifySoundRequest, didFailWithError error: EarshotError) {
        failure = error
    }

    func requestDidComplete(_ request: ClassifySoundRequest) {
        guard summary else { return }
        for line in formatter.summaryLines(file: file, tally: tally) { print(line) }
    }
}
