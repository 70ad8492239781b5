import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot subscribe [--socket PATH | --config FILE] [--group G]... [--format json|text]`: prints the daemon's events as they arrive.
///
/// Ends with status 0 after the daemon's `{"type":"shutdown"}` line (a clean stop); a connection that ends without
/// it was dropped (earshotd crashed or was killed): one stderr line and status 69 (EX_UNAVAILABLE).
enum SubscribeCommand: EarshotCommand {
    static let usage = "usage: earshot subscribe [--socket PATH | --config FILE] [--group G]... [--format json|text]"
    static let help = """
        \(usage)

        Prints the daemon's events as they arrive, one line each, until the daemon stops.
          --socket PATH   the daemon's socket (default: the [output] socket /etc/earshot/earshotd.conf sets,
                          else \(EventServer.defaultPath))
          --config FILE   the socket of the earshotd that runs with FILE: /etc/earshot/NAME.conf is instance
                          earshotd@NAME's, /run/earshot/NAME/earshot.sock; another file's [output] socket
          --group G       only detections of label group G (repeat, or separate with commas); health lines
                          always come
          --format F      json: the daemon's JSON lines as they are (default); text: one readable line per event

        Exit status: 0 when the daemon stopped cleanly (its last line is {"type":"shutdown"}); 69 when the
        connection cannot be made or ends without that notice (earshotd crashed or was killed); 77 permission
        denied; 64 bad usage.
        """

    struct Options {
        var socket = DaemonSocket.defaultPath
        var groups: [String] = []
        var text = false
    }

    static let name = "subscribe"
    static let flags = ["--socket", "--config", "--group", "--format"]

    enum Format: String {
        case json, text
    }

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options {
        var options = Options()
        var choice = DaemonRequest.SocketChoice()
        while let item = try parser.next() {
            switch item {
            case .positional(let text):
                throw parser.unexpected(text)
            case .flag(let flag, let inline) where DaemonRequest.SocketChoice.flags.contains(flag):
                try choice.take(flag, inline, &parser)
            case .flag("--group", let inline):
                let allowed = "a label group name, e.g. smoke_alarm"
                let names = try parser.value(of: "--group", inline, allowed: allowed).split(separator: ",")
                    .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
                guard !names.isEmpty else { throw EarshotError(.usage, "--group needs a value (\(allowed))") }
                options.groups += names
            case .flag("--format", let inline):
                let format: Format = try parser.choice(of: "--format", inline, kind: "a format", allowed: "json or text")
                options.text = format == .text
            case .flag(let flag, _):
                throw parser.unknown(flag)
            }
        }
        options.socket = try choice.resolve()
        return options
    }

    static func execute(_ options: Options) -> Int32 {
        let subscriber: EventSubscriber
        do {
            subscriber = try EventSubscriber(path: options.socket)
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
        var awaitingReply = !options.groups.isEmpty
        // Until the daemon has the filter (its `subscribed` reply), it sends every group's events: those of other
        // groups are dropped here (audit 13 F8). `*` asks for every group.
        let wanted = Set(options.groups)
        let filtering = !wanted.isEmpty && !wanted.contains("*")
        var lastWasError = false
        do {
            if awaitingReply { try subscriber.subscribe(groups: options.groups, id: DaemonRequest.requestID) }
            while true {
                guard case .line(let line) = try subscriber.readLine() else {
                    // No shutdown notice: the daemon died (or refused us with the error line just printed).
                    if !lastWasError { reportError(droppedMessage(path: options.socket)) }
                    return 69
                }
                let parsed = object(line)
                let kind = parsed?["type"] as? String
                lastWasError = kind == "error"
                if kind == "shutdown" {
                    if let output = options.text ? EventTextFormat.format(line: line) : line { writeOut(output + "\n") }
                    return 0
                }
                if kind == "subscribed", let parsed, DaemonRequest.answers(parsed, isError: false) {
                    awaitingReply = false
                    continue
                }
                if kind == "error" {
                    if awaitingReply, let parsed, DaemonRequest.answers(parsed, isError: true) {
                        // The daemon refused the group filter: its reason is the whole story (which group, the fix).
                        reportError(errorMessage(line) ?? line)
                        return 64
                    }
                    // A notice the daemon sent of itself (e.g. a reload stopped watching a group of the filter).
                    reportError(EventTextFormat.format(line: line) ?? line)
                    continue
                }
                if awaitingReply, filtering, let group = parsed?["group"] as? String, !wanted.contains(group) { continue }
                let output = options.text ? EventTextFormat.format(line: line) : line
                if let output { writeOut(output + "\n") }
            }
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
    }

    /// The line for a connection that ended without the daemon's shutdown notice.
    static func droppedMessage(path: String) -> String {
        "connection to \(path) closed without a shutdown notice (did earshotd stop or crash? see systemctl status earshotd)"
    }

    /// The `"type"` of a line the daemon sent (its encoder writes `type` first).
    static func lineType(_ line: String) -> String? {
        object(line)?["type"] as? String
    }

    /// A line the daemon sent, parsed; nil when it is no JSON object.
    static func object(_ line: String) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
    }

    /// The `"message"` of an error line the daemon sent.
    static func errorMessage(_ line: String) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
        return object["message"] as? String
    }

    /// One write(2) per line so that a pipe reader sees each event at once (stdout is not line-buffered into pipes).
    static func writeOut(_ text: String) {
        StandardOutput.write(text)
    }
}
