import EarshotPNG
import Foundation
import Testing
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("ReportCommand: earshot report --png and --from-svg")
struct ReportCommandTests {
    static let usage = "usage: earshot report --snore FILE [--json OUT|-] [--svg OUT] [--png OUT] [--png-scale N] [--config FILE] [--model HEAD] [--threshold X] [--rhythm-threshold Y] [--progress|--quiet]"
    static let fromSVGUsage = "usage: earshot report --from-svg SVG --png OUT [--png-scale N]"

    /// A temporary directory holding `tone.wav` (2 s of 440 Hz at -20 dBFS, 16 kHz: no snoring) and `bad.svg`.
    static func makeDirectory() throws -> URL {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        try AnalysisTestSupport.writeFloatWAV(AnalysisTestSupport.sine(frequency: 440, dbfs: -20, sampleRate: 16_000, count: 32_000),
                                              sampleRate: 16_000, to: directory.appendingPathComponent("tone.wav"))
        try Data("hello\n".utf8).write(to: directory.appendingPathComponent("bad.svg"))
        return directory
    }

    @Test("usage errors and unusable files give one line and the sysexits status", .needsEarshotBuilt)
    func errors() throws {
        let directory = try Self.makeDirectory()
        defer { AudioTestFiles.remove(directory) }
        let cases: [(arguments: [String], status: Int32, line: String)] = [
            (["report", "--snore", "tone.wav", "--png"], 64, "earshot: --png needs an output path (\(Self.usage))"),
            (["report", "--snore", "tone.wav", "--png", "x.png", "--png-scale", "5"], 64, "earshot: --png-scale needs a number from 1 to 4 (\(Self.usage))"),
            (["report", "--snore", "tone.wav", "--png-scale", "0.5"], 64, "earshot: --png-scale needs a number from 1 to 4 (\(Self.usage))"),
            (["report", "--snore", "tone.wav", "--png-scale", "2"], 64, "earshot: --png-scale needs --png OUT (\(Self.usage))"),
            (["report", "--from-svg"], 64, "earshot: --from-svg needs an SVG file (\(Self.fromSVGUsage))"),
            (["report", "--from-svg", "bad.svg"], 64, "earshot: --from-svg needs --png OUT (\(Self.fromSVGUsage))"),
            (["report", "--from-svg", "bad.svg", "--png", "x.png", "--json", "x.json"], 64,
             "earshot: --from-svg takes only --png and --png-scale, not --json (\(Self.fromSVGUsage))"),
            (["report", "--from-svg", "bad.svg", "--png", "x.png"], 65,
             "earshot: cannot render bad.svg as PNG: XML parse error: line 1 column 1: Start tag expected, '<' not found (bad.svg must be an SVG document, such as a snore report's .svg)"),
            (["report", "--from-svg", "gone.svg", "--png", "x.png"], 66, "earshot: cannot read gone.svg: No such file or directory (check the path)"),
            // One threshold flag against the other's [sleep] default (0.2), and both flags against each other.
            (["report", "--snore", "tone.wav", "--threshold", "0.1", "--quiet"], 64,
             "earshot: --threshold 0.1 is below the rhythm threshold 0.2 ([sleep] rhythm_threshold); give a lower --rhythm-threshold too (\(Self.usage))"),
            (["report", "--snore", "tone.wav", "--threshold", "0.2", "--rhythm-threshold", "0.3"], 64,
             "earshot: --rhythm-threshold 0.3 must be at most --threshold 0.2 (\(Self.usage))"),
            (["report", "--snore", "tone.wav", "--model", "bad.svg", "--quiet"], 65,
             "earshot: --model: head model bad.svg is damaged: 6 bytes is too short for a safetensors file (copy it again, or train it again)"),
            (["report", "--snore", "tone.wav", "--png", "no/dir/x.png", "--quiet"], 73,
             "earshot: cannot write no/dir/x.png: No such file or directory (check the directory and free space)"),
        ]
        for (arguments, status, line) in cases {
            let outcome = try #require(try EarshotCLI.run(arguments, in: directory))
            #expect(outcome.status == status, "\(arguments)")
            #expect(outcome.errorLines == [line], "\(arguments)")
        }
        // Nothing was written by the failures.
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == ["bad.svg", "tone.wav"])
    }

    @Test("--from-svg of a FIFO or a directory is refused at once as not a regular file, status 66 (as analyze), not a hang", .needsEarshotBuilt)
    func fromSVGNotARegularFile() throws {
        let directory = try Self.makeDirectory()
        defer { AudioTestFiles.remove(directory) }
        #expect(mkfifo(directory.appendingPathComponent("pipe.svg").path, 0o600) == 0)
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("charts"), withIntermediateDirectories: false)
        let cases: [(svg: String, line: String)] = [
            ("pipe.svg", "earshot: cannot read pipe.svg: is a FIFO (named pipe), not a regular file (give the SVG file, such as a snore report's .svg)"),
            ("charts", "earshot: cannot read charts: is a directory, not a regular file (give the SVG file, such as a snore report's .svg)"),
        ]
        for (svg, line) in cases {
            let outcome = try #require(try EarshotCLI.run(["report", "--from-svg", svg, "--png", "x.png"], in: directory, timeout: 10))
            #expect(outcome.status == 66, "\(svg)")
            #expect(outcome.errorLines == [line], "\(svg)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("x.png").path))
    }

    @Test("--png writes the --svg chart rendered at 2x (or --png-scale); --from-svg renders a written chart the same", .needsEarshotBuilt)
    func png() throws {
        let directory = try Self.makeDirectory()
        defer { AudioTestFiles.remove(directory) }
        let outcome = try #require(try EarshotCLI.run(
            ["report", "--snore", "tone.wav", "--svg", "night.svg", "--png", "night.png", "--quiet"], in: directory))
        #expect(outcome.status == 0)
        #expect(outcome.standardError == "")
        #expect(outcome.outputLines.first == "snore report: tone.wav")
        let png = try Data(contentsOf: directory.appendingPathComponent("night.png"))
        let header = try #require(PNGTestSupport.header(png))
        #expect(header.width == 1920 && header.height == 700)
        // The PNG is exactly the SVG written beside it, rendered here in the test process.
        let svgPath = directory.appendingPathComponent("night.svg").path
        #expect(try PNGRenderer().render(contentsOf: svgPath).data == png)

        let small = try #require(try EarshotCLI.run(
            ["report", "--from-svg", "night.svg", "--png", "small.png", "--png-scale", "1"], in: directory))
        #expect(small.status == 0)
        #expect(small.standardOutput == "" && small.standardError == "")
        let smallPNG = try Data(contentsOf: directory.appendingPathComponent("small.png"))
        let smallHeader = try #require(PNGTestSupport.header(smallPNG))
        #expect(smallHeader.width == 960 && smallHeader.height == 350)
        #expect(try PNGRenderer(scale: 1).render(contentsOf: svgPath).data == smallPNG)
        let pixels = try #require(PNGTestSupport.Pixels(png: smallPNG))
        #expect(pixels[0, 0] == .white)
    }

    @Test("help shows both usages and --png; the command list mentions --png", .needsEarshotBuilt)
    func help() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let outcome = try #require(try EarshotCLI.run(["report", "--help"], in: directory))
        #expect(outcome.status == 0)
        #expect(Array(outcome.outputLines.prefix(2)) == [Self.usage, Self.fromSVGUsage])
        #expect(outcome.outputLines.contains("  --png OUT            write the timeline chart as PNG to OUT (rendered from the SVG with librsvg)"))
        #expect(outcome.outputLines.contains("  --png-scale N        PNG pixels per SVG pixel, 1 to 4 (default 2: 1920 x 700 pixels)"))
        let list = try #require(try EarshotCLI.run(["help"], in: directory))
        #expect(list.outputLines.contains("  " + Self.usage.dropFirst("usage: earshot ".count)))
        #expect(list.outputLines.contains("  " + Self.fromSVGUsage.dropFirst("usage: earshot ".count)))
        #expect(list.outputLines.contains("                                  render a snore report's SVG chart (e.g. the daemon's) as PNG"))
    }
}
