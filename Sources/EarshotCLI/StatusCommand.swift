import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot status [--socket PATH | --config FILE] [--json]`: what the daemon hears now (level, gate, top classes) and how it runs.
/// Exit status: 0, 64 usage, 69 daemon unreachable or no reply, 77 no permission.
enum StatusCommand: EarshotCommand {
    static let usage = "usage: earshot status [--socket PATH | --config FILE] [--json]"
    static let help = """
        \(usage)

        Shows what earshotd hears now: the level of the last window (dBFS), whether the gate let it through to the
        classifier, its top 5 classes with their scores, the watched, muted and active groups, and counters.
          --socket PATH   the daemon's socket (default: the [output] socket /etc/earshot/earshotd.conf sets,
                          else \(EventServer.defaultPath))
          --config FILE   the socket of the earshotd that runs with FILE: /etc/earshot/NAME.conf is instance
                          earshotd@NAME's, /run/earshot/NAME/earshot.sock; another file's [output] socket
          --json          print the daemon's status reply as JSON

        Exit status: 0; 69 when the daemon cannot be reached or does not answer within 10 s; 77 permission
        denied; 64 bad usage.
        """

    static let name = "status"
    static let flags = ["--socket", "--config", "--json"]

    typealias Options = DaemonRequest.SocketOptions

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options {
        try Options.parse(&parser)
    }

    static func execute(_ options: Options) -> Int32 {
        DaemonRequest.run(socket: options.socket) { client throws(EarshotError) in
            guard let reply = try DaemonRequest.reply(to: ["cmd": "status"], on: client, types: ["status", "error"]) else {
                reportError(DaemonRequest.noReply("status reply", socket: options.socket))
                return 69
            }
            if reply.type == "error" {
                reportError(SubscribeCommand.errorMessage(reply.line) ?? reply.line)
                return 69
            }
            print(options.json ? reply.line : HearingTextFormat.status(line: reply.line) ?? reply.line)
            return 0
        }
    }
}

/// `earshot listen [--socket PATH | --config FILE] [--json]`: a line per analysis window (level, gate, top classes), live, until
/// the daemon stops. Exit status: 0 after the daemon's shutdown notice, 69 when the connection is refused or ends
/// without it, 77 no permission, 64 usage.
enum ListenCommand: EarshotCommand {
    static let usage = "usage: earshot listen [--socket PATH | --config FILE] [--json]"
    static let help = """
        \(usage)

        Prints what earshotd hears, one line per analysis window (every 0.48 s by default) until the daemon stops:
        the window's start (stream seconds), its level (dBFS), whether the gate was open, and its top 5 classes
        with their scores. Use it to set [analysis] gate_dbfs, [group.loud] level_dbfs and group thresholds.
          --socket PATH   the daemon's socket (default: the [output] socket /etc/earshot/earshotd.conf sets,
                          else \(EventServer.defaultPath))
          --config FILE   the socket of the earshotd that runs with FILE: /etc/earshot/NAME.conf is instance
                          earshotd@NAME's, /run/earshot/NAME/earshot.sock; another file's [output] socket
          --json          print the daemon's {"type":"window",...} lines (and capture health lines) as they are
        The capture's health changes come between the windows, e.g. " capture unavailable: <why>" and
        " capture live again: <how>", so that a pause in the windows is explained.

        Exit status: 0 when the daemon stopped cleanly; 69 when the connection cannot be made or ends without the
        daemon's shutdown notice; 77 permission denied; 64 bad usage.
        """

    static let name = "listen"
    static let flags = ["--socket", "--config", "--json"]

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> StatusCommand.Options {
        try StatusCommand.parse(&parser)
    }

    static func execute(_ options: StatusCommand.Options) -> Int32 {
        DaemonRequest.run(socket: options.socket) { client throws(EarshotError) in
            try client.send(line: #"{"cmd":"listen"}"#)
            while true {
                guard case .line(let line) = try client.readLine() else {
                    reportError(SubscribeCommand.droppedMessage(path: options.socket))
                    return 69
                }
                switch SubscribeCommand.lineType(line) {
                case "window":
                    let text = options.json ? line : HearingTextFormat.window(line: line)
                    if let text { SubscribeCommand.writeOut(text + "\n") }
                case "health":
                    // Why the windows stop or restart (trial 11 #9: listen went quiet during an outage or stall).
                    guard let text = HearingTextFormat.captureHealth(line: line) else { continue }
                    SubscribeCommand.writeOut((options.json ? line : text) + "\n")
                case "shutdown":
                    return 0
                case "error":
                    // A daemon from before `listen` answers `unknown command "listen"`.
                    reportError(SubscribeCommand.errorMessage(line) ?? line)
                    return 69
                default:
                    continue  // events and other health lines: `earshot subscribe` shows those
                }
            }
        }
    }
}
