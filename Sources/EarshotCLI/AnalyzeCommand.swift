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
enum AnalyzeCommand: EarshotCommand {
    static let usage = "usage: earshot analyze FILE... [--model FILE] [--format text|jsonl|csv] [--top K] [--window S] [--overlap F] [--summary]"

    static let help = """
    \(usage)

    Classifies the sounds in each FILE (WAV, FLAC, Ogg Vorbis/Opus, MP3, AIFF) with the built-in YAMNet classifier.
      --model FILE  use a custom classifier made by `earshot train` or `earshot enroll` instead: its labels and
                    probabilities (window and overlap default to the ones it was trained with)
      --format F    text (default): "FILE START-ENDs  Label 93.1%  ..." per window
                    jsonl: {"file":...,"start":...,"duration":...,"classes":[{"class":...,"confidence":...}]}
                    csv: file,start,duration,rank,label,confidence (one row per window per class)
      --top K       classes per window, 1 to 521 (default 3)
      --window S    window length in seconds, 0.96 to 3600 (default 0.96); a longer window averages the 0.96 s
                    patches inside it. A window reaching past the end of a file is padded with silence, as the
                    reference model pads, and printed with its whole length: --window 100 on a 5 s file gives
                    one window, 0.00-100.00s; a longer window averages only its patches of audio there (the
                    last one ending with the file), not the padding
      --overlap F   fraction shared by successive windows, 0 <= F < 1 (default 0.5: a 0.48 s hop); windows
                    start on a 10 ms step, so at most 0.994 for a 0.96 s window
      --summary     after each file, each label's share of the windows where it is the top class
                    (csv: rows with empty start and duration, the share in the confidence column; jsonl: one
                    line {"file":...,"windows":N,"summary":[{"label":...,"share":...,"windows":N},...]})

    A bad FILE gets one line on standard error; the other files are still analysed. A file cut short (FLAC, Ogg
    Vorbis/Opus, MP3) is analysed as far as it goes, with one line on standard error ("FILE: truncated: ...");
    one damaged part-way prints the windows decoded before the damage, then its line.
    Exit status: 0 every file analysed (a file cut short included); otherwise, whatever the order of the files, 66 if a file is missing or
    unreadable, else 65 if a file is not usable audio (other failures, e.g. 71, come first); 64 bad usage.
    """

    struct Options {
        var files: [String] = []
        var format: AnalysisOutputFormat = .text
        var top = 3
        var window = ClassifySoundRequest.minimumWindowDuration
        var overlap = 0.5
        var summary = false
        var model: String?
        var windowGiven = false
        var overlapGiven = false
    }

    static let name = "analyze"
    static let flags = ["--model", "--format", "--top", "--window", "--overlap", "--summary"]

    static func execute(_ options: Options) -> Int32 {
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
            if case .custom(let head) = request.classifier, let model = options.model,
               HeadModelSet.windowMismatch(trained: head.metadata.windowDuration, analysed: request.windowDuration) != nil {
                let trained = SettingRules.format(head.metadata.windowDuration)
                reportError("warning: model \(model) was trained on \(trained) s windows; with --window \(SettingRules.format(request.windowDuration)) its scores may be less reliable (leave --window out to analyse \(trained) s windows)")
            }
        } catch {
            reportError(error.message)
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
                if let warning = analyzer.decodingWarning { reportError(warning) }
            } catch {
                observer.failure = error
            }
            if let failure = observer.failure {
                reportError(failure.message)
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

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options {
        var options = Options()
        while let item = try parser.next() {
            switch item {
            case .positional(let file):
                options.files.append(file)
            case .flag("--summary", let inline):
                try parser.noValue(of: "--summary", inline)
                options.summary = true
            case .flag("--model", let inline):
                options.model = try parser.value(of: "--model", inline, allowed: "a model file made by earshot train or earshot enroll")
            case .flag("--format", let inline):
                options.format = try parser.choice(of: "--format", inline, kind: "a format", allowed: "text, jsonl or csv")
            case .flag("--top", let inline):
                options.top = try parser.number(of: "--top", inline, in: 1...YAMNet.classCount, allowed: "an integer from 1 to \(YAMNet.classCount)")
            case .flag("--window", let inline):
                options.window = try parser.number(
                    of: "--window", inline,
                    in: ClassifySoundRequest.minimumWindowDuration...ClassifySoundRequest.maximumWindowDuration,
                    allowed: "seconds, 0.96 to 3600")
                options.windowGiven = true
            case .flag("--overlap", let inline):
                options.overlap = try parser.number(of: "--overlap", inline, in: 0.0..<1, allowed: "a fraction, 0 <= F < 1")
                options.overlapGiven = true
            case .flag(let flag, _):
                throw parser.unknown(flag)
            }
        }
        if options.files.isEmpty { throw parser.missing("at least one FILE") }
        return options
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
