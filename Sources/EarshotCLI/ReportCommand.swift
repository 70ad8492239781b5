import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import EarshotPNG
import Foundation

/// `earshot report --snore FILE [--json OUT] [--svg OUT] [--png OUT] [--png-scale N] [--threshold X] [--rhythm-threshold Y]
/// [--progress|--quiet]`: the snore report of a recording. Prints the summary on stdout (or the JSON with `--json -`),
/// writes the JSON, the SVG timeline and its PNG rendering where asked, and shows a progress bar on stderr when it is
/// a terminal. `earshot report --from-svg SVG --png OUT [--png-scale N]` renders a chart written earlier (e.g. the
/// daemon's `snore-*.svg`, which stays SVG: the daemon does not link librsvg) as PNG.
/// Exit status: 0, 64 usage, 65 bad audio or SVG, 66 missing file, 73 an output cannot be written, 74 writing into an
/// existing device or FIFO (or standard output) failed.
enum ReportCommand {
    static let usage =
        "usage: earshot report --snore FILE [--json OUT|-] [--svg OUT] [--png OUT] [--png-scale N] [--model HEAD] [--threshold X] [--rhythm-threshold Y] [--progress|--quiet]"
    static let fromSVGUsage = "usage: earshot report --from-svg SVG --png OUT [--png-scale N]"
    static let help = """
        \(usage)
        \(fromSVGUsage)

        Finds snoring in a recording (e.g. a night) and reports minutes snoring, episodes (events less than 2 minutes
        apart merge), events per hour, loudness per episode and the loudest moments, with a timeline in 5-minute bins.
          --json OUT           write the report as JSON to OUT (- for standard output instead of the summary)
          --svg OUT            write the timeline chart as SVG to OUT
          --png OUT            write the timeline chart as PNG to OUT (rendered from the SVG with librsvg)
          --png-scale N        PNG pixels per SVG pixel, 1 to 4 (default 2: 1920 x 700 pixels)
          --model HEAD         a snore model made with earshot train (folders snoring and background): its
                               snoring probability adds to the evidence
          --threshold X        snore evidence that counts on its own, 0 to 1 (default 0.3)
          --rhythm-threshold Y lower evidence that counts when snores recur every 2-6 s (default 0.1)
          --progress, --quiet  force or hide the progress bar (default: shown when stderr is a terminal)
          --from-svg SVG       render a chart written earlier (--svg, or the daemon's snore-*.svg) as PNG
                               instead of analysing a recording
        """

    /// Allowed `--png-scale` values.
    static let pngScales: ClosedRange<Double> = 1...4

    static func run(_ arguments: [String]) -> Int32 {
        var file: String?
        var jsonPath: String?
        var svgPath: String?
        var pngPath: String?
        var pngScale: Double?
        var fromSVG: String?
        var analysisOptions: [String] = []
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
                analysisOptions.append(argument)
            case "--json":
                guard let path = value(argument) else { return usageError("--json needs an output path (or -)") }
                jsonPath = path
                analysisOptions.append(argument)
            case "--svg":
                guard let path = value(argument) else { return usageError("--svg needs an output path") }
                svgPath = path
                analysisOptions.append(argument)
            case "--png":
                guard let path = value(argument) else { return usageError("--png needs an output path") }
                pngPath = path
            case "--png-scale":
                guard let text = value(argument), let number = Double(text), pngScales.contains(number) else {
                    return usageError("--png-scale needs a number from 1 to 4")
                }
                pngScale = number
            case "--from-svg":
                guard let path = value(argument) else { return usageError("--from-svg needs an SVG file", usage: fromSVGUsage) }
                fromSVG = path
            case "--model":
                guard let path = value(argument) else { return usageError("--model needs a head model file") }
                modelPath = path
                analysisOptions.append(argument)
            case "--threshold", "--rhythm-threshold":
                guard let text = value(argument), let number = Float(text), number >= 0, number <= 1 else {
                    return usageError("\(argument) needs a number from 0 to 1")
                }
                analysisOptions.append(argument)
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
        if let fromSVG {
            guard analysisOptions.isEmpty else {
                return usageError("--from-svg takes only --png and --png-scale, not \(analysisOptions[0])", usage: fromSVGUsage)
            }
            guard let pngPath else { return usageError("--from-svg needs --png OUT", usage: fromSVGUsage) }
            return renderSVGFile(fromSVG, to: pngPath, scale: pngScale ?? PNGRenderer.defaultScale)
        }
        guard let file else { return usageError("name the recording with --snore FILE") }
        guard pngScale == nil || pngPath != nil else { return usageError("--png-scale needs --png OUT") }
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
            if let svgPath { try write(report.svg(timeZone: .current), to: svgPath) }
            if let pngPath { try report.png(scale: pngScale ?? PNGRenderer.defaultScale).write(to: pngPath) }
            if let jsonPath {
                let json = JSONValue.object(report.json).encoded + "\n"
                if jsonPath == "-" {
                    StandardOutput.write(json)
                } else {
                    try write(json, to: jsonPath)
                }
            }
        } catch {
            printError(error.message)
            return error.exitStatus
        }
        if jsonPath != "-" { StandardOutput.write(report.text(timeZone: .current)) }
        return 0
    }

    static func write(_ text: String, to path: String) throws(EarshotError) {
        try OutputFile.write(Data(text.utf8), to: path)
    }

    /// `--from-svg SVG --png OUT`: reads the SVG file and writes its PNG rendering.
    static func renderSVGFile(_ svgPath: String, to pngPath: String, scale: Double) -> Int32 {
        do {
            try PNGRenderer(scale: scale).render(contentsOf: svgPath).write(to: pngPath)
        } catch {
            printError(error.message)
            return error.exitStatus
        }
        return 0
    }

    static func usageError(_ message: String, usage: String = usage) -> Int32 {
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
