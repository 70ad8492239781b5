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
/// Every output path is checked before the analysis (a directory, or one that cannot be created, is refused at once).
/// Exit status: 0, 64 usage (also an output path that is a directory), 65 bad audio or SVG, 66 missing file, 73 an
/// output cannot be written, 74 writing into an existing device or FIFO (or standard output) failed.
enum ReportCommand: EarshotCommand {
    static let usage =
        "usage: earshot report --snore FILE [--json OUT|-] [--svg OUT] [--png OUT] [--png-scale N] [--config FILE] [--model HEAD] [--threshold X] [--rhythm-threshold Y] [--progress|--quiet]"
    static let fromSVGUsage = "usage: earshot report --from-svg SVG --png OUT [--png-scale N]"
    static let help = """
        \(usage)
        \(fromSVGUsage)

        Finds snoring in a recording (e.g. a night) and reports minutes snoring, episodes (events less than 2 minutes
        apart merge), events per hour, loudness per episode and the loudest moments, with a timeline in 5-minute bins.
        The snoring is the daemon's: the same detection stage and snore detector as earshotd's snoring group and
        its sleep sessions, with the daemon's [analysis] and [sleep] settings.
          --snore FILE         the recording to analyse (any format earshot analyze reads)
          --json OUT           write the report as JSON to OUT (- for standard output instead of the summary)
          --svg OUT            write the timeline chart as SVG to OUT
          --png OUT            write the timeline chart as PNG to OUT (rendered from the SVG with librsvg)
          --png-scale N        PNG pixels per SVG pixel, 1 to 4 (default 2: 1920 x 700 pixels)
          --config FILE        the daemon's configuration file (default /etc/earshot/earshotd.conf when it
                               exists, else the built-in defaults): its [analysis] and [sleep] keys apply
          --model HEAD         a snore model made with earshot train (folders snoring and background): its
                               snoring probability adds to the evidence (instead of [sleep] model)
          --threshold X        snore evidence that counts on its own, 0 to 1 (default [sleep] threshold, 0.3)
          --rhythm-threshold Y lower evidence that counts when snores recur every 2-6 s (default [sleep]
                               rhythm_threshold, 0.2)
          --progress, --quiet  force or hide the progress bar (default: shown when stderr is a terminal)
          --from-svg SVG       render a chart written earlier (--svg, or the daemon's snore-*.svg) as PNG
                               instead of analysing a recording
        The output paths are checked before the analysis (a directory, or a file that cannot be created, is refused
        at once). A recording cut short is reported over the audio decoded, not the length its header promised.
        """

    /// Allowed `--png-scale` values.
    static let pngScales: ClosedRange<Double> = 1...4

    static let name = "report"
    static let flags = ["--snore", "--json", "--svg", "--png", "--png-scale", "--config", "--model", "--threshold", "--rhythm-threshold",
                        "--progress", "--quiet", "--from-svg"]

    /// What to do: analyse a recording, or render a chart written earlier.
    enum Options {
        case analyze(Analysis)
        case renderSVG(svg: String, png: String, scale: Double)
    }

    struct Analysis {
        var file = ""
        var jsonPath: String?
        var svgPath: String?
        var pngPath: String?
        var pngScale = PNGRenderer.defaultScale
        var configPath: String?
        /// `--threshold` and `--rhythm-threshold` (nil: the configuration's `[sleep]` keys).
        var threshold: Float?
        var rhythmThreshold: Float?
        var modelPath: String?
        var showProgress = standardErrorIsTerminal
    }

    /// A usage error in report's own wording, which ReportCommandTests pins for `--png`, `--png-scale` and
    /// `--from-svg`: `--png needs an output path (usage: ...)`.
    static func usageError(_ message: String, usage: String = usage) -> EarshotError {
        EarshotError(.usage, "\(message) (\(usage))")
    }

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options {
        var analysis = Analysis()
        var file: String?
        var pngScale: Double?
        var fromSVG: String?
        /// The flags given that only apply to an analysis (refused with --from-svg).
        var analysisFlags: [String] = []
        /// `--png` and `--from-svg` word a missing path as ReportCommandTests pins it.
        func path(_ flag: String, _ inline: String?, _ what: String, usage: String = usage) throws(EarshotError) -> String {
            guard let path = parser.takeValue(inline), !path.isEmpty else { throw usageError("\(flag) needs \(what)", usage: usage) }
            return path
        }
        while let item = try parser.next() {
            guard case .flag(let flag, let inline) = item else { throw parser.unexpected(item.text) }
            switch flag {
            case "--snore": file = try parser.value(of: flag, inline, allowed: "a sound file", allowEmpty: false)
            case "--json": analysis.jsonPath = try parser.value(of: flag, inline, allowed: "an output path, or - for standard output", allowEmpty: false)
            case "--svg": analysis.svgPath = try parser.value(of: flag, inline, allowed: "an output path", allowEmpty: false)
            case "--config": analysis.configPath = try parser.value(of: flag, inline, allowed: "a configuration file", allowEmpty: false)
            case "--model": analysis.modelPath = try parser.value(of: flag, inline, allowed: "a head model file made by earshot train", allowEmpty: false)
            case "--png": analysis.pngPath = try path(flag, inline, "an output path")
            case "--from-svg": fromSVG = try path(flag, inline, "an SVG file", usage: fromSVGUsage)
            case "--png-scale":
                guard let text = parser.takeValue(inline), let number = Double(text), pngScales.contains(number) else {
                    throw usageError("--png-scale needs a number from 1 to 4")
                }
                pngScale = number
            case "--threshold":
                analysis.threshold = try parser.number(of: flag, inline, in: 0...1, allowed: "0 to 1")
            case "--rhythm-threshold":
                analysis.rhythmThreshold = try parser.number(of: flag, inline, in: 0...1, allowed: "0 to 1")
            case "--progress", "--quiet":
                try parser.noValue(of: flag, inline)
                analysis.showProgress = flag == "--progress"
            default:
                throw parser.unknown(flag)
            }
            if !["--png", "--png-scale", "--from-svg", "--progress", "--quiet"].contains(flag) { analysisFlags.append(flag) }
        }
        if let fromSVG {
            guard analysisFlags.isEmpty else {
                throw usageError("--from-svg takes only --png and --png-scale, not \(analysisFlags[0])", usage: fromSVGUsage)
            }
            guard let pngPath = analysis.pngPath else { throw usageError("--from-svg needs --png OUT", usage: fromSVGUsage) }
            return .renderSVG(svg: fromSVG, png: pngPath, scale: pngScale ?? PNGRenderer.defaultScale)
        }
        guard let file else { throw parser.missing("--snore FILE") }
        analysis.file = file
        guard pngScale == nil || analysis.pngPath != nil else { throw usageError("--png-scale needs --png OUT") }
        analysis.pngScale = pngScale ?? PNGRenderer.defaultScale
        if let weak = analysis.rhythmThreshold, let strong = analysis.threshold, weak > strong {
            throw usageError("--rhythm-threshold \(weak) must be at most --threshold \(strong)")
        }
        return .analyze(analysis)
    }

    static func execute(_ options: Options) -> Int32 {
        switch options {
        case .renderSVG(let svg, let png, let scale): renderSVGFile(svg, to: png, scale: scale)
        case .analyze(let analysis): analyze(analysis)
        }
    }

    /// `--snore FILE`: analyses the recording, writes the files asked for and prints the summary (or the JSON).
    static func analyze(_ options: Analysis) -> Int32 {
        let bar = ProgressBar(enabled: options.showProgress)
        let result: SnoreFileAnalysis.Result
        do throws(EarshotError) {
            // Before the analysis (two minutes for a night): its results would be lost with no file to hold them.
            try checkOutput(options.jsonPath == "-" ? nil : options.jsonPath, format: "JSON")
            try checkOutput(options.svgPath, format: "SVG")
            try checkOutput(options.pngPath, format: "PNG")
            var configuration = try DaemonConfiguration.load(path: options.configPath, overrides: .init())
            if let threshold = options.threshold { configuration.sleep.threshold = threshold }
            if let rhythm = options.rhythmThreshold { configuration.sleep.rhythmThreshold = rhythm }
            if let model = options.modelPath {
                configuration.sleep.modelPath = model
                configuration.locations["sleep.model"] = "--model"  // the flag's file, not the configuration's
            }
            let sleep = configuration.sleep
            guard sleep.rhythmThreshold <= sleep.threshold else {
                // One flag against the other's [sleep] value (both flags are checked when parsed).
                let message = options.threshold != nil
                    ? "--threshold \(sleep.threshold) is below the rhythm threshold \(sleep.rhythmThreshold) ([sleep] rhythm_threshold); give a lower --rhythm-threshold too"
                    : "--rhythm-threshold \(sleep.rhythmThreshold) is above the threshold \(sleep.threshold) ([sleep] threshold); give a higher --threshold too"
                throw usageError(message)
            }
            result = try SnoreFileAnalysis.analyze(
                url: URL(fileURLWithPath: options.file), configuration: configuration, configPath: options.configPath,
                progress: { done, total in bar.update(done: done, total: total) })
        } catch {
            bar.finish()
            reportError(error.message)
            return error.exitStatus
        }
        bar.finish()
        if let warning = result.decodingWarning { reportError(warning) }
        let report = result.report
        do {
            // Clock times in local time as earshotd reads it; the PNG is the SVG written beside it, rendered.
            let svg = report.svg()
            if let svgPath = options.svgPath { try write(svg, to: svgPath) }
            if let pngPath = options.pngPath { try PNGRenderer(scale: options.pngScale).render(svg: svg).write(to: pngPath) }
            if let jsonPath = options.jsonPath {
                let json = JSONValue.object(report.json).encoded + "\n"
                if jsonPath == "-" {
                    StandardOutput.write(json)
                } else {
                    try write(json, to: jsonPath)
                }
            }
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
        if options.jsonPath != "-" { StandardOutput.write(report.text()) }
        return 0
    }

    /// Refuses an output path before any work: a directory (or a path ending in `/`) with the file name to give, e.g.
    /// `tmp/rep/ is a directory: give the SVG file's name, e.g. tmp/rep/night.svg` (64), and a file that cannot be
    /// created, e.g. in a missing or read-only directory, as ``OutputFile/checkWritable(_:what:hint:)`` (73). A
    /// device or FIFO is written in place later and not probed.
    /// - Parameter format: `JSON`, `SVG` or `PNG`; its lowercase is the example's extension.
    static func checkOutput(_ path: String?, format: String) throws(EarshotError) {
        guard let path else { return }
        let kind = PathKind(path: path)
        if kind == .directory || path.hasSuffix("/") {
            let example = joinedPath(path, "night.\(format.lowercased())")
            let what = kind == .directory ? "is a directory" : "names a directory"
            throw EarshotError(.usage, "\(path) \(what): give the \(format) file's name, e.g. \(example)")
        }
        try OutputFile.checkWritable(path)
    }

    static func write(_ text: String, to path: String) throws(EarshotError) {
        try OutputFile.write(Data(text.utf8), to: path)
    }

    /// `--from-svg SVG --png OUT`: reads the SVG file and writes its PNG rendering.
    static func renderSVGFile(_ svgPath: String, to pngPath: String, scale: Double) -> Int32 {
        do {
            try checkOutput(pngPath, format: "PNG")
            try PNGRenderer(scale: scale).render(contentsOf: svgPath).write(to: pngPath)
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
        return 0
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
