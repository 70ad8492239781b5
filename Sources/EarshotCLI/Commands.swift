import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// The `earshot` commands, by the word after `earshot`, and the `earshot help` list.
enum Commands {
    static let all: [any EarshotCommand.Type] = [
        AnalyzeCommand.self, DetectCommand.self, TrainCommand.self, EnrollCommand.self, SubscribeCommand.self, ClassesCommand.self,
        DevicesCommand.self, EvalCommand.self, BenchCommand.self, HistoryCommand.self, ReportCommand.self,
        SleepCommand.self, MuteCommand.self, UnmuteCommand.self, TestAlertCommand.self, MQTTRetireCommand.self, StatusCommand.self, ListenCommand.self, EvalSnoreCommand.self, HelpCommand.self,
        VersionCommand.self,
    ]

    /// The command named `name`; `--help`, `-h` and `--version` name `help` and `version`.
    static func named(_ name: String) -> (any EarshotCommand.Type)? {
        let aliases = ["--help": "help", "-h": "help", "--version": "version"]
        let name = aliases[name] ?? name
        return all.first { $0.name == name }
    }

    /// The error for a word after `earshot` that names no command.
    static func unknown(_ name: String) -> EarshotError {
        EarshotError(.usage, "unknown command \"\(name)\" (run `earshot help` for the list)")
    }

    /// The `earshot help` list: each command's own usage line (without `usage: earshot `), so the two cannot drift,
    /// and what it does.
    static let list: [(usage: String, summary: String)] = [
        (AnalyzeCommand.usage, "classify sound files, one result per window"),
        (DetectCommand.usage, "the daemon's detection events for sound files, at full speed"),
        (TrainCommand.usage, "train a custom classifier from one folder of recordings per label"),
        (EnrollCommand.usage, "teach earshot one sound by recording it a few times (or from files)"),
        (SubscribeCommand.usage, "print the daemon's detection events as they arrive"),
        (StatusCommand.usage, "what the daemon hears now (level, gate, top classes) and how it runs"),
        (ListenCommand.usage, "print what the daemon hears, a line per window, live (for setting thresholds)"),
        (ClassesCommand.usage, "list the built-in classifier's AudioSet class labels"),
        (DevicesCommand.usage, "list ALSA capture devices"),
        (EvalCommand.usage, "measure the smoke/CO alarm detector: recall, false events, time to detection"),
        (BenchCommand.usage, "measure inference, file analysis and the daemon on this machine"),
        (HistoryCommand.usage, "list the detections earshotd stored"),
        (ReportCommand.usage, "snore report of a recording (minutes, episodes, loudness, 5-minute timeline)"),
        (ReportCommand.fromSVGUsage, "render a snore report's SVG chart (e.g. the daemon's) as PNG"),
        (SleepCommand.usage, "control the daemon's sleep session (snore monitoring and report)"),
        (MuteCommand.usage, "mute a group's events for a while (smoke, CO, fire: 15 min; others: 8 h)"),
        (UnmuteCommand.usage, "unmute a group muted at run time"),
        (TestAlertCommand.usage, "send a test alert through the daemon to the phone and Home Assistant"),
        (MQTTRetireCommand.usage, "empty a retired room's retained MQTT topics (its Home Assistant device goes)"),
        (EvalSnoreCommand.usage, "measure the snore detector on labelled clips"),
        (HelpCommand.usage, "show this text, or COMMAND's help (as earshot COMMAND --help)"),
        (VersionCommand.usage, "print the version"),
    ]

    /// One entry of the list: the command on its own line with the summary below it when fewer than two spaces
    /// would part them (wider than 30 columns): help2man, which makes the man page from this text, takes a single
    /// space as part of the command, and runs the entries after it together (trial 14 D4).
    static func listEntry(_ usage: String, _ summary: String) -> String {
        let command = usage.hasPrefix("usage: earshot ") ? String(usage.dropFirst("usage: earshot ".count)) : usage
        let column = 32
        if command.count + 2 <= column {
            return "  " + command + String(repeating: " ", count: column - command.count) + summary
        }
        return "  " + command + "\n" + String(repeating: " ", count: column + 2) + summary
    }

    /// `earshot help`, and what a bare `earshot` prints on standard error.
    static let usage = """
        usage: earshot <command> [options]

        commands:

        """ + list.map { listEntry($0.usage, $0.summary) }.joined(separator: "\n")
}

/// `earshot help [COMMAND]`: the list of commands, or one command's help.
enum HelpCommand: EarshotCommand {
    static let name = "help"
    static let usage = "usage: earshot help [COMMAND]"
    static let help = """
        \(usage)

        Shows the list of commands, or COMMAND's help (the same as earshot COMMAND --help).
        """
    static let flags: [String] = []

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> (any EarshotCommand.Type)? {
        guard let item = try parser.next() else { return nil }
        guard case .positional(let name) = item, let named = Commands.named(name) else {
            throw Commands.unknown(item.text)
        }
        if let extra = try parser.next() {
            throw EarshotError(.usage, "help takes one COMMAND, got \"\(name)\" and \"\(extra.text)\" (\(usage))")
        }
        return named
    }

    static func execute(_ named: (any EarshotCommand.Type)?) -> Int32 {
        print(named?.help ?? Commands.usage)
        return 0
    }
}

/// `earshot --version` (or `earshot version`).
enum VersionCommand: EarshotCommand {
    static let name = "version"
    static let usage = "usage: earshot --version"
    static let help = """
        \(usage)

        Prints earshot's version ("earshot \(earshotVersion)"); `earshot version` is the same.
        """
    static let flags: [String] = []

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) {
        if let item = try parser.next() { throw parser.unexpected(item.text) }
    }

    static func execute(_ options: Void) -> Int32 {
        print("earshot \(earshotVersion)")
        return 0
    }
}
