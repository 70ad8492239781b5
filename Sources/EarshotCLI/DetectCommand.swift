import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot detect FILE... [--config FILE] [--format jsonl|text|csv]`: the daemon's detection stage (gate,
/// groups, debouncer, alarm patterns, heads, the same configuration file) over sound files at full speed, printing
/// the events `earshotd --input FILE` would publish.
enum DetectCommand: EarshotCommand {
    static let usage = "usage: earshot detect FILE... [--config FILE] [--format jsonl|text|csv]"

    static let help = """
    \(usage)

    Runs earshotd's detection (RMS gate, YAMNet windows, custom heads, groups and debouncing, smoke/CO alarm
    patterns) over each FILE as fast as the CPU allows and prints the events the daemon's socket would carry for
    `earshotd --input FILE`: detections, detection ends (at the end of a file: "reason":"stream_end"), alarms
    and health events, with the same stream times and confidences.
      --config FILE  the daemon's configuration file (default /etc/earshot/earshotd.conf when it exists, else the
                     built-in defaults); its [detection], [group.NAME], [analysis], [alarms], [models] and
                     [sleep] (the snore detector's threshold, rhythm_threshold and model) apply
      --format F     jsonl (default): the socket's JSON lines, each with "file" added and, instead of the
                     wall-clock "time", "sent_stream_time": seconds into the file when earshotd --input
                     would send the line
                     text: one readable line per event, as `earshot subscribe --format text` prints them
                     (without "time": stream times say when in the file)
                     csv: file,type,group,class,start,end,confidence (start/end in stream seconds;
                     a health row has its state in class and the stream time it was said at in start)

    A bad FILE gets one line on standard error; the other files are still analysed. A file cut short (FLAC, Ogg
    Vorbis/Opus, MP3) is analysed as far as it goes, with one line on standard error ("FILE: truncated: ...").
    Exit status: 0 every file analysed (a file cut short included); 66 a file missing or unreadable, 65 not usable audio; 64 bad usage;
    78 a bad configuration file.
    """

    enum Format: String { case jsonl, text, csv }

    struct Options {
        var files: [String] = []
        var configPath: String?
        var format = Format.jsonl
    }

    static let name = "detect"
    static let flags = ["--config", "--format"]

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options {
        var options = Options()
        while let item = try parser.next() {
            switch item {
            case .positional(let file):
                options.files.append(file)
            case .flag("--config", let inline):
                options.configPath = try parser.value(of: "--config", inline, allowed: "a configuration file", allowEmpty: false)
            case .flag("--format", let inline):
                options.format = try parser.choice(of: "--format", inline, kind: "a format", allowed: "jsonl, text or csv")
            case .flag(let flag, _):
                throw parser.unknown(flag)
            }
        }
        if options.files.isEmpty { throw parser.missing("at least one FILE") }
        return options
    }

    static func execute(_ options: Options) -> Int32 {
        let files = options.files, configPath = options.configPath, format = options.format
        let detection: FileDetection
        do {
            let configuration = try DaemonConfiguration.load(path: configPath, overrides: .init())
            detection = try FileDetection(configuration: configuration, configPath: configPath)
            for line in detection.heads.windowMismatches(windowDuration: configuration.analysis.windowDuration) {
                reportError("warning: \(line)")
            }
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
        if format == .csv { print("file,type,group,class,start,end,confidence") }
        var failures: [Int32] = []
        for file in files {
            do {
                try detection.run(url: URL(fileURLWithPath: file), warning: { reportError($0) }) { output, streamSeconds in
                    emit(output, streamSeconds: streamSeconds, file: file, format: format)
                }
            } catch {
                reportError(error.message)
                failures.append(error.exitStatus)
            }
        }
        return AnalyzeCommand.exitStatus(failures: failures)
    }

    /// Prints one output. The daemon's wall-clock `time` is replaced by `sent_stream_time`: `streamSeconds`, when
    /// `earshotd --input` would publish the line, in seconds into the file, so runs over the same file print the same.
    private static func emit(_ output: DetectionStage.Output, streamSeconds: Double, file: String, format: Format) {
        if case .window = output { return }
        guard var object = EventLines.object(for: RoutedOutput(output: DaemonOutput(output), time: Date())) else { return }
        if object["time"] != nil {
            // Not under "time": the daemon's "time" is a wall-clock string, and one key must keep one type.
            object["time"] = nil
            object["sent_stream_time"] = .number(streamSeconds, decimals: EventJSON.timeDecimals)
        }
        switch format {
        case .jsonl:
            object["file"] = .string(file)
            print(JSONValue.object(object).encoded)
        case .text:
            object["time"] = nil  // the moment of analysis, not of the sound: stream times say when
            if let line = EventTextFormat.format(line: JSONValue.object(object).encoded) {
                print("\(file): \(line)")
            }
        case .csv:
            func field(_ key: String) -> String { object[key].map(csvText) ?? "" }
            // A health line has no group, class or event times: its state goes in `class`, and `start` is the
            // stream time it was said at (its `sent_stream_time`).
            let isHealth = object["type"]?.stringValue == "health"
            let name = isHealth ? field("state") : field("class")
            let start = isHealth ? field("sent_stream_time")
                : object["stream_time"] != nil ? field("stream_time") : field("start")
            let confidence = object["confidence"] != nil ? field("confidence") : field("peak_confidence")
            let row = [csvQuoted(file), field("type"), field("group"), csvQuoted(name), start, field("end"), confidence]
            print(row.joined(separator: ","))
        }
    }

    private static func csvText(_ value: JSONValue) -> String {
        value.stringValue ?? value.encoded
    }

    private static func csvQuoted(_ text: String) -> String {
        text.contains(",") || text.contains("\"") ? "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\"" : text
    }
}
