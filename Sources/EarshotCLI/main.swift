import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

// `earshot`: the command line. Argument parsing and wiring only; the work lives in the Earshot library.

/// The `earshot help` list: each command's own usage line (without `usage: earshot `), so the two cannot drift,
/// and what it does.
let commandList: [(usage: String, summary: String)] = [
    (AnalyzeCommand.usage, "classify sound files, one result per window"),
    (DetectCommand.usage, "the daemon's detection events for sound files, at full speed"),
    (TrainCommand.usage, "train a custom classifier from one folder of recordings per label"),
    (EnrollCommand.usage, "teach earshot one sound by recording it a few times (or from files)"),
    (SubscribeCommand.usage, "print the daemon's detection events as they arrive"),
    (ClassesCommand.usage, "list the built-in classifier's AudioSet class labels"),
    (DevicesCommand.usage, "list ALSA capture devices"),
    (EvalCommand.usage, "measure the smoke/CO alarm detector: recall, false events, time to detection"),
    (BenchCommand.usage, "measure inference, file analysis and the daemon on this machine"),
    (HistoryListing.usage, "list the detections earshotd stored"),
    (ReportCommand.usage, "snore report of a recording (minutes, episodes, loudness, 5-minute timeline)"),
    (ReportCommand.fromSVGUsage, "render a snore report's SVG chart (e.g. the daemon's) as PNG"),
    (SleepCommand.usage, "control the daemon's sleep session (snore monitoring and report)"),
    (EvalSnoreCommand.usage, "measure the snore detector on labelled clips"),
    ("usage: earshot help", "show this text"),
    ("usage: earshot --version", "print the version"),
]

/// One entry of the list: the command on its own line with the summary below it when it is wider than 31 columns.
func listEntry(_ usage: String, _ summary: String) -> String {
    let command = usage.hasPrefix("usage: earshot ") ? String(usage.dropFirst("usage: earshot ".count)) : usage
    let column = 32
    if command.count < column {
        return "  " + command + String(repeating: " ", count: column - command.count) + summary
    }
    return "  " + command + "\n" + String(repeating: " ", count: column + 2) + summary
}

let usage = """
    usage: earshot <command> [options]

    commands:

    """ + commandList.map { listEntry($0.usage, $0.summary) }.joined(separator: "\n")

var arguments = Array(CommandLine.arguments.dropFirst())
guard let command = arguments.first else {
    FileHandle.standardError.write(Data((usage + "\n").utf8))
    exit(64)
}
arguments.removeFirst()

let status: Int32
switch command {
case "analyze": status = AnalyzeCommand.run(arguments)
case "detect": status = DetectCommand.run(arguments)
case "train": status = TrainCommand.run(arguments)
case "enroll": status = EnrollCommand.run(arguments)
case "subscribe": status = SubscribeCommand.run(arguments)
case "classes": status = ClassesCommand.run(arguments)
case "devices": status = DevicesCommand.run(arguments)
case "history": status = HistoryCommand.run(arguments)
case "report": status = ReportCommand.run(arguments)
case "sleep": status = SleepCommand.run(arguments)
case "eval-snore": status = EvalSnoreCommand.run(arguments)
case "eval": status = EvalCommand.run(arguments)
case "bench": status = BenchCommand.run(arguments)
case "help", "--help", "-h":
    print(usage)
    status = 0
case "--version", "version":
    print("earshot \(earshotVersion)")
    status = 0
default:
    FileHandle.standardError.write(Data("earshot: unknown command \"\(command)\" (run `earshot help` for the list)\n".utf8))
    status = 64
}
// Output written with print is buffered: a failure to write it (a full disk, > /dev/full) shows only here.
StandardOutput.finish()
exit(status)
