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

@Suite("ReportCommand: a recording cut short and the output paths checked first")
struct ReportTruncatedAndOutputTests {
    /// samples/demo.flac (31.91 s at 16 kHz, snoring at 11-15 s) as a 16-bit WAV padded with silence to 400 s, the
    /// header saying so, cut after its first 20 s of samples (a copy interrupted): 44 + 640000 bytes. Also the same
    /// 20 s as a whole WAV.
    static func writeRecordings(in directory: URL) throws {
        let decoder = try AudioFileDecoder(url: TestPaths.packageRoot.appendingPathComponent("samples/demo.flac"))
        let samples = try decoder.readAllMono()
        #expect(samples.count == 510_495)
        let values = samples.map { min(32_767, max(-32_768, Int64(($0 * 32_768).rounded()))) }
        let padded = values + [Int64](repeating: 0, count: 400 * 16_000 - values.count)
        let long = AudioTestFiles.wav(formatTag: 1, channels: 1, sampleRate: 16_000, bitsPerSample: 16,
                                      data: AudioTestFiles.littleEndian(padded, width: 2))
        #expect(long.count == 44 + 12_800_000)
        try AudioTestFiles.write(Array(long.prefix(44 + 2 * 320_000)), to: directory.appendingPathComponent("cut.wav"))
        let whole = AudioTestFiles.wav(formatTag: 1, channels: 1, sampleRate: 16_000, bitsPerSample: 16,
                                       data: AudioTestFiles.littleEndian(Array(values.prefix(320_000)), width: 2))
        try AudioTestFiles.write(whole, to: directory.appendingPathComponent("first20.wav"))
    }

    @Test("report --snore on a WAV cut short: session, share, rates and bins over the 20 s decoded, as the same 20 s in a whole file (text, JSON, SVG, PNG; trial 9 #2)",
          .needsEarshotBuilt)
    func truncatedWAV() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        try Self.writeRecordings(in: directory)
        let cut = try #require(try EarshotCLI.run(
            ["report", "--snore", "cut.wav", "--quiet", "--json", "cut.json", "--svg", "cut.svg", "--png", "cut.png"], in: directory))
        #expect(cut.status == 0)
        #expect(cut.errorLines == [
            "earshot: cut.wav: truncated: decoded 320000 of 6400000 frames the header promises; results cover only the first 20.00 s",
        ])
        #expect(cut.outputLines == [
            "snore report: cut.wav",
            "  session      0.3 min",
            "  snoring      0.1 min (21.6 % of the session)",
            "  events       1 (180.0 per hour), 3 snores (540.0 per hour)",
            "  episodes     1 (events less than 2 minutes apart merge)",
            "    0:00:11-0:00:15  0.1 min snoring, 3 snores, -36.6 dBFS (peak -34.5)",
            "  loudest      0:00:12 -34.5 dBFS (of the windows counted as snores)",
        ])
        let json = try String(contentsOf: directory.appendingPathComponent("cut.json"), encoding: .utf8)
        #expect(json.contains(#""duration_seconds":20.0,"#), "\(json)")
        #expect(json.contains(#""bins":[{"start":0.0,"snoring_seconds":4.32}]"#), "\(json)")

        // The same audio in a whole file gives the same report, file name aside.
        let whole = try #require(try EarshotCLI.run(
            ["report", "--snore", "first20.wav", "--quiet", "--json", "first20.json", "--svg", "first20.svg"], in: directory))
        #expect(whole.status == 0)
        #expect(whole.standardError == "")
        #expect(whole.standardOutput.replacing("first20.wav", with: "cut.wav") == cut.standardOutput)
        let wholeJSON = try String(contentsOf: directory.appendingPathComponent("first20.json"), encoding: .utf8)
        #expect(wholeJSON.replacing("first20.wav", with: "cut.wav") == json)
        let svg = try String(contentsOf: directory.appendingPathComponent("cut.svg"), encoding: .utf8)
        let wholeSVG = try String(contentsOf: directory.appendingPathComponent("first20.svg"), encoding: .utf8)
        #expect(wholeSVG.replacing("first20.wav", with: "cut.wav") == svg)
        // The PNG is that chart.
        let png = try Data(contentsOf: directory.appendingPathComponent("cut.png"))
        #expect(try PNGRenderer().render(svg: svg).data == png)
    }

    @Test("report --snore on a FLAC cut short (its first 80 % of bytes) reports the 19.46 s decoded, not the header's 31.91 s (trial 9 #2)",
          .needsEarshotBuilt)
    func truncatedFLAC() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let flac = try Data(contentsOf: TestPaths.packageRoot.appendingPathComponent("samples/demo.flac"))
        try flac.prefix(flac.count * 8 / 10).write(to: directory.appendingPathComponent("cut.flac"))
        let line = "earshot: cut.flac: truncated: decoded 311296 of 510495 frames the header promises; results cover only the first 19.46 s"
        let text = try #require(try EarshotCLI.run(["report", "--snore", "cut.flac", "--quiet"], in: directory))
        #expect(text.status == 0)
        #expect(text.errorLines == [line])
        // 4.32 s of snoring in 19.456 s: 22.2 %; one event and three snores in 19.456 s: 185.0 and 555.1 per hour.
        #expect(text.outputLines == [
            "snore report: cut.flac",
            "  session      0.3 min",
            "  snoring      0.1 min (22.2 % of the session)",
            "  events       1 (185.0 per hour), 3 snores (555.1 per hour)",
            "  episodes     1 (events less than 2 minutes apart merge)",
            "    0:00:11-0:00:15  0.1 min snoring, 3 snores, -36.6 dBFS (peak -34.5)",
            "  loudest      0:00:12 -34.5 dBFS (of the windows counted as snores)",
        ])
        let json = try #require(try EarshotCLI.run(["report", "--snore", "cut.flac", "--quiet", "--json", "-"], in: directory))
        #expect(json.status == 0)
        #expect(json.errorLines == [line])
        #expect(json.standardOutput.hasPrefix(
            #"{"type":"snore_report","source":"cut.flac","start":null,"end":null,"duration_seconds":19.46,"snoring_minutes":0.07,"snoring_percent":22.2,"events":1,"events_per_hour":185.03,"snores":3,"snores_per_hour":555.1,"#),
            "\(json.standardOutput)")
        #expect(json.standardOutput.contains(#""bins":[{"start":0.0,"snoring_seconds":4.32}]"#), "\(json.standardOutput)")
    }

    @Test("every output path is checked before the analysis: a directory names the file to give (64), a missing directory is 73; nothing is written (trial 9 #9, #10)",
          .needsEarshotBuilt)
    func outputsCheckedFirst() throws {
        let directory = try ReportCommandTests.makeDirectory()
        defer { AudioTestFiles.remove(directory) }
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("rep"), withIntermediateDirectories: false)
        // notes.wav is no audio: an analysis would end in 65, so a 64 or 73 here was decided before it.
        try Data("not audio at all\n".utf8).write(to: directory.appendingPathComponent("notes.wav"))
        let cases: [(arguments: [String], status: Int32, line: String)] = [
            (["--svg", "rep/"], 64, "earshot: rep/ is a directory: give the SVG file's name, e.g. rep/night.svg"),
            (["--svg", "rep"], 64, "earshot: rep is a directory: give the SVG file's name, e.g. rep/night.svg"),
            (["--json", "rep"], 64, "earshot: rep is a directory: give the JSON file's name, e.g. rep/night.json"),
            (["--json", "ok.json", "--png", "rep/"], 64, "earshot: rep/ is a directory: give the PNG file's name, e.g. rep/night.png"),
            (["--svg", "new/"], 64, "earshot: new/ names a directory: give the SVG file's name, e.g. new/night.svg"),
            (["--json", "ok.json", "--png", "no/dir/x.png"], 73,
             "earshot: cannot write no/dir/x.png: No such file or directory (check the directory and free space)"),
        ]
        for (outputs, status, line) in cases {
            for file in ["tone.wav", "notes.wav"] {
                let arguments = ["report", "--snore", file, "--progress"] + outputs
                let outcome = try #require(try EarshotCLI.run(arguments, in: directory))
                #expect(outcome.status == status, "\(arguments)")
                // One line: no progress bar was drawn, no analysis began.
                #expect(outcome.standardError == line + "\n", "\(arguments)")
                #expect(outcome.standardOutput == "", "\(arguments)")
            }
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == ["bad.svg", "notes.wav", "rep", "tone.wav"])
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.appendingPathComponent("rep").path) == [])
        // --from-svg --png DIR too.
        let render = try #require(try EarshotCLI.run(["report", "--from-svg", "bad.svg", "--png", "rep"], in: directory))
        #expect(render.status == 64)
        #expect(render.errorLines == ["earshot: rep is a directory: give the PNG file's name, e.g. rep/night.png"])
    }
}
