import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot subscribe [--socket PATH] [--group G]... [--format json|text]`: prints the daemon's events as they arrive.
///
/// Ends with status 0 after the daemon's `{"type":"shutdown"}` line (a clean stop); a connection that ends without
/// it was dropped (earshotd crashed or was killed): one stderr line and status 69 (EX_UNAVAILABLE).
enum SubscribeCommand {
    static let usage = "usage: earshot subscribe [--socket PATH] [--group G]... [--format json|text]"
    static let help = """
        \(usage)

        Prints the daemon's events as they arrive, one line each, until the daemon stops.

          --socket PATH   the daemon's socket (default \(EventServer.defaultPath))
          --group G       only detections of label group G (repeat, or separate with commas); health lines
                          always come
          --format F      json: the daemon's JSON lines as they are (default); text: one readable line per event

        Exit status: 0 when the daemon stopped cleanly (its last line is {"type":"shutdown"}); 69 when the
        connection cannot be made or ends without that notice (earshotd crashed or was killed); 77 permission
        denied; 64 bad usage.
        """

    struct Options {
        var socket = EventServer.defaultPath
        var groups: [String] = []
        var text = false
    }

    static func run(_ arguments: [String]) -> Int32 {
        let options: Options
        switch parse(arguments) {
        case .success(let parsed): options = parsed
        case .failure(let problem):
            if problem.message.isEmpty {
                print(help)
                return 0
            }
            printError("\(problem.message) (run `earshot subscribe --help`)")
            return 64
        }

        let subscriber: EventSubscriber
        do {
            subscriber = try EventSubscriber(path: options.socket)
        } catch {
            printError(error.message)
            return error.exitStatus
        }
        var awaitingReply = !options.groups.isEmpty
        var lastWasError = false
        do {
            if awaitingReply { try subscriber.subscribe(groups: options.groups) }
            while true {
                guard case .line(let line) = try subscriber.readLine() else {
                    // No shutdown notice: the daemon died (or refused us with the error line just printed).
                    if !lastWasError { printError(droppedMessage(path: options.socket)) }
                    return 69
                }
                let kind = lineType(line)
                lastWasError = kind == "error"
                if kind == "shutdown" {
                    if let output = options.text ? EventTextFormat.format(line: line) : line { writeOut(output + "\n") }
                    return 0
                }
                if kind == "subscribed" {
                    awaitingReply = false
                    continue
                }
                if kind == "error" {
                    if awaitingReply {
                        // The daemon refused the group filter: its reason is the whole story (which group, the fix).
                        printError(errorMessage(line) ?? line)
                        return 64
                    }
                    printError(EventTextFormat.format(line: line, timeZone: .current) ?? line)
                    continue
                }
                let output = options.text ? EventTextFormat.format(line: line) : line
                if let output { writeOut(output + "\n") }
            }
        } catch {
            printError(error.message)
            return error.exitStatus
        }
    }

    struct Problem: Error {
        /// Empty for `--help`.
        var message: String
    }

    static func parse(_ arguments: [String]) -> Result<Options, Problem> {
        var options = Options()
        var index = 0
        func value(_ name: String, _ inline: String?) -> String? {
            if let inline { return inline }
            index += 1
            return index < arguments.count ? arguments[index] : nil
        }
        while index < arguments.count {
            let argument = arguments[index]
            let parts = argument.split(separator: "=", maxSplits: 1).map(String.init)
            let name = parts[0]
            let inline = argument.contains("=") && name.hasPrefix("--") ? (parts.count > 1 ? parts[1] : "") : nil
            switch name {
            case "-h", "--help":
                return .failure(Problem(message: ""))
            case "--socket":
                guard let path = value(name, inline), !path.isEmpty else {
                    return .failure(Problem(message: "--socket needs a path"))
                }
                options.socket = path
            case "--group":
                guard let list = value(name, inline), !list.isEmpty else {
                    return .failure(Problem(message: "--group needs a label group name, e.g. smoke_alarm"))
                }
                options.groups += list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
                    .filter { !$0.isEmpty }
            case "--format":
                switch value(name, inline) {
                case "json": options.text = false
                case "text": options.text = true
                case let other:
                    return .failure(Problem(message: "--format must be json or text, not \"\(other ?? "")\""))
                }
            default:
                return .failure(Problem(message: "unknown option \"\(argument)\""))
            }
            index += 1
        }
        return .success(options)
    }

    /// The line for a connection that ended without the daemon's shutdown notice.
    static func droppedMessage(path: String) -> String {
        "connection to \(path) closed without a shutdown notice (did earshotd stop or crash? see systemctl status earshotd)"
    }

    /// The `"type"` of a line the daemon sent (its encoder writes `type` first).
    static func lineType(_ line: String) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
        return object["type"] as? String
    }

    /// The `"message"` of an error line the daemon sent.
    static func errorMessage(_ line: String) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
        return object["message"] as? String
    }

    static func printError(_ message: String) {
        FileHandle.standardError.write(Data("earshot: \(message)\n".utf8))
    }

    /// One write(2) per line so that a pipe reader sees each event at once (stdout is not line-buffered into pipes).
    static func writeOut(_ text: String) {
        StandardOutput.write(text)
    }
}
