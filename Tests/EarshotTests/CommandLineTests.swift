import Foundation
import Testing
import Earshot
import EarshotTools

/// What every `earshot` command shares (Sources/EarshotCLI/ArgumentParser.swift): the shape of `--help`, the wording
/// and status of usage errors, `--flag=value` and `--`.
@Suite("CommandLine: one parser for every earshot command")
struct CommandLineTests {
    static let commands = ["analyze", "detect", "train", "enroll", "subscribe", "classes", "devices", "eval", "bench", "history",
                           "report", "sleep", "test-alert", "mqtt-retire", "eval-snore", "help", "version"]

    static func run(_ arguments: [String]) throws -> EarshotCLI.Outcome {
        try #require(try EarshotCLI.run(arguments, in: FileManager.default.temporaryDirectory, timeout: 30))
    }

    @Test("--help: status 0, nothing on stderr; usage line(s), a blank line, then what the command does",
          .needsEarshotBuilt, arguments: commands)
    func helpShape(_ command: String) throws {
        let help = try Self.run([command, "--help"])
        #expect(help.status == 0)
        #expect(help.standardError == "")
        let lines = help.standardOutput.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let usageWord = command == "version" ? "--version" : command
        #expect(lines.first?.hasPrefix("usage: earshot \(usageWord)") == true, "\(lines.first ?? "")")
        // The usage may go on over indented lines (train, enroll) or a second usage line (report).
        let blank = try #require(lines.firstIndex(of: ""), "no blank line after the usage")
        #expect(lines[1..<blank].allSatisfy { $0.hasPrefix(" ") || $0.hasPrefix("usage: earshot \(command)") })
        let description = try #require(lines.dropFirst(blank + 1).first)
        #expect(!description.isEmpty && !description.hasPrefix(" "), "\(description)")

        // -h is the same; help wins over anything else on the line, even a bad option; `earshot help COMMAND` too.
        for arguments in [[command, "-h"], [command, "--no-such-option", "--help"], ["help", command]] {
            let again = try Self.run(arguments)
            #expect(again.status == 0, "\(arguments)")
            #expect(again.standardOutput == help.standardOutput, "\(arguments)")
        }
    }

    @Test("usage errors: one line on stderr in the shared wording, nothing on stdout, status 64", .needsEarshotBuilt,
          arguments: [
            // An unknown option names the command and its options.
            (["subscribe", "--bogus"], "unknown option \"--bogus\" for subscribe (allowed: --socket, --config, --group, --format)"),
            (["sleep", "status", "--bogus"], "unknown option \"--bogus\" for sleep (allowed: --socket, --config, --json)"),
            (["test-alert", "--bogus"], "unknown option \"--bogus\" for test-alert (allowed: --socket, --config, --json)"),
            (["mqtt-retire", "--bogus"], "unknown option \"--bogus\" for mqtt-retire (allowed: --config, --node, --dry-run)"),
            (["mqtt-retire", "--node"], "--node needs a value (a node name, e.g. garage)"),
            (["mqtt-retire", "--dry-run=yes"], "--dry-run takes no value"),
            (["mqtt-retire", "--node", "Garage!"], "--node \"Garage!\" must be 1 to 64 of a-z, 0-9, _ and -, e.g. kitchen"),
            (["bench", "--bogus"], "unknown option \"--bogus\" for bench (allowed: --quick, --no-daemon, --daemon-only, --layers, --json, --audio, --daemon)"),
            (["eval", "--bogus"], "unknown option \"--bogus\" for eval (allowed: --manifest, --no-synthetic, --no-classifier, --only, --cases, --segments, --onsets, --segment-hz, --rate-factor, --groups, --stream-hours, --stream-manifest, --threads, --config, --problems, --cost)"),
            (["eval-snore", "a", "b", "--bogus"], "unknown option \"--bogus\" for eval-snore (allowed: --model, --threshold, --rhythm-threshold)"),
            (["report", "--bogus"], "unknown option \"--bogus\" for report (allowed: --snore, --json, --svg, --png, --png-scale, --config, --model, --threshold, --rhythm-threshold, --progress, --quiet, --from-svg)"),
            (["enroll", "--bogus"], "unknown option \"--bogus\" for enroll (allowed: --label, --count, --device, --seconds, --background-seconds, --from, --background, --output, --countdown, --seed)"),
            // A missing value says what the value is; a value starting with -- is a forgotten value.
            (["subscribe", "--socket"], "--socket needs a value (the daemon's socket path)"),
            (["subscribe", "--socket="], "--socket needs a value (the daemon's socket path)"),
            (["subscribe", "--group", "--format", "text"], "--group needs a value (a label group name, e.g. smoke_alarm)"),
            (["sleep", "status", "--socket"], "--socket needs a value (the daemon's socket path)"),
            (["status", "--config"], "--config needs a value (the daemon's configuration file, e.g. /etc/earshot/kitchen.conf)"),
            (["status", "--socket", "/tmp/a.sock", "--config", "/tmp/a.conf"], "--socket and --config exclude each other (give the socket, or the configuration file the daemon runs with)"),
            (["subscribe", "--config", "/tmp/a.conf", "--socket=/tmp/a.sock"], "--socket and --config exclude each other (give the socket, or the configuration file the daemon runs with)"),
            (["bench", "--audio"], "--audio needs a value (a recording to loop)"),
            (["eval", "--rate-factor"], "--rate-factor needs a value (a number above 0, e.g. 0.9 or 1.1)"),
            (["report", "--snore"], "--snore needs a value (a sound file)"),
            (["report", "--snore", "a.wav", "--svg", "--quiet"], "--svg needs a value (an output path)"),
            (["analyze", "x.wav", "--model", "--top", "3"], "--model needs a value (a model file made by earshot train or earshot enroll)"),
            // A bad value is quoted, with what is allowed.
            (["subscribe", "--format", "xml"], "--format \"xml\" is not a format (allowed: json or text)"),
            (["eval", "--rate-factor", "0"], "--rate-factor \"0\" is out of range (allowed: a number above 0, e.g. 0.9 or 1.1)"),
            (["eval", "--segment-hz", "loud"], "--segment-hz \"loud\" is not a number (allowed: a frequency in Hz, above 0)"),
            (["eval-snore", "a", "b", "--threshold", "2"], "--threshold \"2\" is out of range (allowed: 0 to 1)"),
            (["report", "--snore", "a.wav", "--threshold=2"], "--threshold \"2\" is out of range (allowed: 0 to 1)"),
            (["analyze", "x.wav", "--window", "long"], "--window \"long\" is not a number (allowed: seconds, 0.96 to 3600)"),
            (["sleep", "nap"], "sleep \"nap\" is not an action (allowed: start, stop or status)"),
            // A flag without a value refuses one given inline.
            (["analyze", "x.wav", "--summary=yes"], "--summary takes no value"),
            (["bench", "--quick=1"], "--quick takes no value"),
            (["sleep", "status", "--json=no"], "--json takes no value"),
            // Something missing: the command's name and its usage line.
            (["sleep"], "sleep needs start, stop or status (usage: earshot sleep start|stop|status [--socket PATH | --config FILE] [--json])"),
            (["eval-snore", "a"], "eval-snore needs SNORING_DIR and NON_SNORING_DIR (usage: earshot eval-snore SNORING_DIR NON_SNORING_DIR [--model HEAD] [--threshold X] [--rhythm-threshold Y])"),
            (["report"], "report needs --snore FILE (usage: earshot report --snore FILE [--json OUT|-] [--svg OUT] [--png OUT] [--png-scale N] [--config FILE] [--model HEAD] [--threshold X] [--rhythm-threshold Y] [--progress|--quiet])"),
            // A stray argument, or one too many.
            (["devices", "extra"], "devices takes no arguments, not \"extra\" (usage: earshot devices)"),
            (["version", "extra"], "version takes no arguments, not \"extra\" (usage: earshot --version)"),
            (["subscribe", "extra"], "subscribe takes options only, not \"extra\" (usage: earshot subscribe [--socket PATH | --config FILE] [--group G]... [--format json|text])"),
            (["bench", "extra"], "bench takes options only, not \"extra\" (usage: earshot bench [--quick] [--no-daemon | --daemon-only] [--layers] [--json] [--audio FILE] [--daemon PATH])"),
            (["history", "extra"], "history takes options only, not \"extra\" (\(HistoryListing.usage))"),
            (["sleep", "start", "stop"], "sleep takes one of start, stop or status, got \"start\" and \"stop\" (usage: earshot sleep start|stop|status [--socket PATH | --config FILE] [--json])"),
            (["eval-snore", "a", "b", "c"], "eval-snore takes two directories, got \"a\", \"b\" and \"c\" (usage: earshot eval-snore SNORING_DIR NON_SNORING_DIR [--model HEAD] [--threshold X] [--rhythm-threshold Y])"),
            (["help", "analyze", "train"], "help takes one COMMAND, got \"analyze\" and \"train\" (usage: earshot help [COMMAND])"),
            // Options that exclude or need each other.
            (["bench", "--no-daemon", "--daemon-only"], "--no-daemon and --daemon-only exclude each other (give one: skip the daemon runs, or run only them)"),
            (["eval", "--segment-hz", "3100"], "--segment-hz needs --segments (usage: earshot eval [--manifest FILE]... [--no-synthetic] [--no-classifier] [--only TEXT] [--cases] [--segments [--segment-hz HZ]] [--onsets] [--rate-factor F] [--groups [--stream-hours H] [--stream-manifest FILE] [--threads N] [--config FILE] [--problems] [--cost S]])"),
            (["eval", "--groups", "--threads", "0"], "--threads \"0\" is out of range (allowed: a count, 1 to 64)"),
            (["eval", "--groups", "--cost", "5"], "--cost \"5\" is out of range (allowed: seconds of audio, 10 to 36000)"),
            (["eval-snore", "a", "b", "--rhythm-threshold", "0.5"], "--rhythm-threshold must be at most --threshold (usage: earshot eval-snore SNORING_DIR NON_SNORING_DIR [--model HEAD] [--threshold X] [--rhythm-threshold Y])"),
            // The command word itself.
            (["bogus"], "unknown command \"bogus\" (run `earshot help` for the list)"),
            (["help", "bogus"], "unknown command \"bogus\" (run `earshot help` for the list)"),
          ] as [([String], String)])
    func usageErrors(_ arguments: [String], _ message: String) throws {
        let outcome = try Self.run(arguments)
        #expect(outcome.status == 64)
        #expect(outcome.errorLines == ["earshot: " + message])
        #expect(outcome.standardOutput == "")
    }

    @Test("earshot history words its usage errors as HistoryListing.parse does", .needsEarshotBuilt,
          arguments: [["--since", "yesterday"], ["--until=tomorrow"], ["--format", "xml"], ["--limit", "0"], ["--group"],
                      ["--group", ","], ["--db="], ["--verbose"]])
    func historyMatchesTheLibrary(_ arguments: [String]) throws {
        let error = #expect(throws: EarshotError.self) { try HistoryListing.parse(arguments) }
        let outcome = try Self.run(["history"] + arguments)
        #expect(outcome.status == 64)
        #expect(outcome.errorLines == ["earshot: " + (error?.message ?? "")])
    }

    @Test("-- ends the options: what follows is a file, even --help; -h and --help=x before it are not files",
          .needsEarshotBuilt)
    func endOfOptions() throws {
        let file = try Self.run(["analyze", "--", "--help"])
        #expect(file.status == 66)
        #expect(file.errorLines == ["earshot: --help: no such file (check the path)"])
        let inline = try Self.run(["analyze", "x.wav", "--help=x"])
        #expect(inline.status == 64)
        #expect(inline.errorLines == ["earshot: --help takes no value"])
    }

    @Test("a bare earshot prints the list of commands on stderr, status 64; earshot help prints it on stdout",
          .needsEarshotBuilt)
    func bareAndHelp() throws {
        let bare = try Self.run([])
        let help = try Self.run(["help"])
        #expect(bare.status == 64)
        #expect(bare.standardOutput == "")
        #expect(help.status == 0)
        #expect(help.standardError == "")
        #expect(bare.standardError == help.standardOutput)
        #expect(help.outputLines.first == "usage: earshot <command> [options]")
        #expect(help.outputLines.contains("  help [COMMAND]                  show this text, or COMMAND's help (as earshot COMMAND --help)"))
        for flag in ["--help", "-h"] { #expect(try Self.run([flag]).standardOutput == help.standardOutput) }
    }

    @Test("earshot help: two spaces at least between a command and its summary, else the summary on the next line (help2man makes the man page from it; trial 14 D4)",
          .needsEarshotBuilt)
    func helpColumns() throws {
        let help = try Self.run(["help"])
        let lines = help.outputLines
        let status = try #require(lines.firstIndex(of: "  status [--socket PATH | --config FILE] [--json]"), "\(lines)")
        #expect(Array(lines[status...].prefix(6)) == [
            "  status [--socket PATH | --config FILE] [--json]",
            "                                  what the daemon hears now (level, gate, top classes) and how it runs",
            "  listen [--socket PATH | --config FILE] [--json]",
            "                                  print what the daemon hears, a line per window, live (for setting thresholds)",
            "  classes                         list the built-in classifier's AudioSet class labels",
            "  devices                         list ALSA capture devices",
        ])
        // Every entry: a command alone on its line with its summary on the next (34 spaces in), or the command, two
        // spaces or more, and the summary at column 34.
        let indent = String(repeating: " ", count: 34)
        let entries = Array(lines.drop { $0 != "commands:" }.dropFirst())
        #expect(entries.count == 40)
        for (index, line) in entries.enumerated() where !line.hasPrefix(indent) {
            let summaryBelow = index + 1 < entries.count && entries[index + 1].hasPrefix(indent)
            let characters = Array(line)
            #expect(summaryBelow || (characters.count > 34 && String(characters[32..<34]) == "  " && characters[34] != " "), "\(line)")
        }
    }
}
