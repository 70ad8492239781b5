import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot sleep start|stop|status [--socket PATH | --config FILE] [--json]`: starts, stops or shows the daemon's sleep session
/// (snore monitoring). Exit status: 0, 1 stop with no session running, 64 usage, 69 daemon unreachable, no reply
/// or unable to act (stopping), 73 stop could not write the report (the reply's `error`), 77 no permission (the
/// socket, or not in `[output] control_users`).
enum SleepCommand: EarshotCommand {
    static let usage = "usage: earshot sleep start|stop|status [--socket PATH | --config FILE] [--json]"
    static let help = """
        \(usage)

        Controls earshotd's sleep session: while it runs, snoring is detected and aggregated; `stop` writes the
        snore report (JSON and SVG) to the daemon's [sleep] report_dir and prints where (make a PNG of the chart with
        earshot report --from-svg SVG --png OUT).
          --socket PATH   the daemon's socket (default: the [output] socket /etc/earshot/earshotd.conf sets,
                          else \(EventServer.defaultPath))
          --config FILE   the socket of the earshotd that runs with FILE: /etc/earshot/NAME.conf is instance
                          earshotd@NAME's, /run/earshot/NAME/earshot.sock; another file's [output] socket
          --json          print the daemon's reply as JSON

        Exit status: 0; 1 when stop finds no session running; 64 usage; 69 when the daemon cannot be reached or
        does not answer within 10 s; 73 when stop could not write the report (stderr says why; with --json the
        reply has "error" and the report itself as "report"); 77 permission denied (the socket's, or a user not
        in [output] control_users).
        """

    static let name = "sleep"
    static let flags = ["--socket", "--config", "--json"]

    enum Action: String {
        case start, stop, status
    }

    struct Options {
        var action = Action.status
        var socket = DaemonSocket.defaultPath
        var json = false
    }

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options {
        var options = Options()
        var action: String?
        try DaemonRequest.parse(&parser, socket: &options.socket, json: &options.json) { text throws(EarshotError) in
            if let action {
                throw EarshotError(.usage, "sleep takes one of start, stop or status, got \"\(action)\" and \"\(text)\" (\(usage))")
            }
            action = text
        }
        guard let action else { throw parser.missing("start, stop or status") }
        guard let known = Action(rawValue: action) else {
            throw EarshotError(.usage, "sleep \"\(action)\" is not an action (allowed: start, stop or status)")
        }
        options.action = known
        return options
    }

    static func execute(_ options: Options) -> Int32 {
        // The analysis queue answers within a window's time.
        DaemonRequest.command(
            ["cmd": .string("sleep_\(options.action.rawValue)")], replyType: "sleep", socket: options.socket, json: options.json,
            show: { object in
                print(describe(object))
                // No audio arriving: the session would hear nothing; said at bedtime, not in the morning.
                if let warning = object["warning"] as? String {
                    reportError("warning: \(warning); the session counts only audio it hears (earshot status shows the capture)")
                }
                // The session runs; only a restart of the daemon would lose it.
                if let warning = object["marker_warning"] as? String { reportError("warning: \(warning)") }
                if let error = object["error"] as? String { reportError("the sleep report was not written: \(error)") }
            },
            errorStatus: errorStatus,
            replyStatus: { object in object["error"] is String ? 73 : 0 })
    }

    /// The exit status for an error reply: 77 when the user may not change the daemon's state, 1 when `stop`
    /// found no session (the daemon was reached and answered), 69 otherwise (e.g. the daemon is stopping).
    static func errorStatus(_ message: String) -> Int32 {
        if message.contains(EventServer.controlRefusal) { return 77 }
        if message == SleepService.notRunning { return 1 }
        return 69
    }

    /// A readable line for a `{"type":"sleep",...}` reply.
    static func describe(_ reply: [String: Any]) -> String {
        let state = reply["state"] as? String ?? ""
        let start = reply["start"] as? String ?? "?"
        switch state {
        case "started": return "sleep session started at \(start)"
        case "already_running": return "a sleep session is already running (since \(start))"
        case "stopped":
            // A session that heard no audio writes no report; the reply says so in `message` instead of paths.
            if reply["report_svg"] == nil, let message = reply["message"] as? String { return message }
            // A report that could not be written: the figures only (stderr says why).
            let files = reply["report_svg"] == nil ? "" : "\nreport: \(reply["report_svg"] as? String ?? "?") and \(reply["report_json"] as? String ?? "?")"
            let minutes = reply["snoring_minutes"] as? Double ?? 0
            let percent = reply["snoring_percent"] as? Double ?? 0
            let episodes = reply["episodes"] as? Int ?? 0
            return """
                sleep session \(start) to \(reply["end"] as? String ?? "?"): \(JSONValue.format(minutes, decimals: 1)) min snoring (\(JSONValue.format(percent, decimals: 1)) %), \(episodes) episode\(episodes == 1 ? "" : "s")\(files)
                """
        case "running":
            let minutes = reply["minutes"] as? Double ?? 0
            let snoring = reply["snoring_minutes"] as? Double ?? 0
            let now = reply["snoring_now"] as? Bool == true ? ", snoring now" : ""
            return "sleep session running since \(start) (\(JSONValue.format(minutes, decimals: 1)) min, \(JSONValue.format(snoring, decimals: 1)) min snoring so far\(now))"
        default:
            let schedule = (reply["schedule"] as? String).map { " (schedule \($0))" } ?? ""
            return "no sleep session is running\(schedule)"
        }
    }

}
