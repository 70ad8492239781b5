import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot sleep start|stop|status [--socket PATH] [--json]`: starts, stops or shows the daemon's sleep session
/// (snore monitoring). Exit status: 0, 64 usage, 69 daemon unreachable or the command refused, 77 no permission.
enum SleepCommand: EarshotCommand {
    static let usage = "usage: earshot sleep start|stop|status [--socket PATH] [--json]"
    static let help = """
        \(usage)

        Controls earshotd's sleep session: while it runs, snoring is detected and aggregated; `stop` writes the
        snore report (JSON and SVG) to the daemon's [sleep] report_dir and prints where (make a PNG of the chart with
        earshot report --from-svg SVG --png OUT).
          --socket PATH   the daemon's socket (default \(EventServer.defaultPath))
          --json          print the daemon's reply as JSON
        """

    static let name = "sleep"
    static let flags = ["--socket", "--json"]

    enum Action: String {
        case start, stop, status
    }

    struct Options {
        var action = Action.status
        var socket = EventServer.defaultPath
        var json = false
    }

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options {
        var options = Options()
        var action: String?
        while let item = try parser.next() {
            switch item {
            case .positional(let text):
                if let action {
                    throw EarshotError(.usage, "sleep takes one of start, stop or status, got \"\(action)\" and \"\(text)\" (\(usage))")
                }
                action = text
            case .flag("--json", let inline):
                try parser.noValue(of: "--json", inline)
                options.json = true
            case .flag("--socket", let inline):
                options.socket = try parser.value(of: "--socket", inline, allowed: "the daemon's socket path", allowEmpty: false)
            case .flag(let flag, _):
                throw parser.unknown(flag)
            }
        }
        guard let action else { throw parser.missing("start, stop or status") }
        guard let known = Action(rawValue: action) else {
            throw EarshotError(.usage, "sleep \"\(action)\" is not an action (allowed: start, stop or status)")
        }
        options.action = known
        return options
    }

    static func execute(_ options: Options) -> Int32 {
        let client: EventSubscriber
        do {
            client = try EventSubscriber(path: options.socket)
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
        do {
            try client.send(line: "{\"cmd\":\"sleep_\(options.action.rawValue)\"}")
            // Events may arrive before the reply: skip them. The analysis queue answers within a window's time.
            while true {
                guard case .line(let line) = try client.readLine(timeoutSeconds: 10) else {
                    reportError("no reply from earshotd on \(options.socket) within 10 s (is it stuck? see journalctl -u earshotd)")
                    return 69
                }
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                      let type = object["type"] as? String, type == "sleep" || type == "error"
                else { continue }
                if options.json {
                    print(line)
                } else if type == "error" {
                    reportError(object["message"] as? String ?? line)
                } else {
                    print(describe(object))
                }
                return type == "error" ? 69 : 0
            }
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
    }

    /// A readable line for a `{"type":"sleep",...}` reply.
    static func describe(_ reply: [String: Any]) -> String {
        let state = reply["state"] as? String ?? ""
        let start = reply["start"] as? String ?? "?"
        switch state {
        case "started": return "sleep session started at \(start)"
        case "already_running": return "a sleep session is already running (since \(start))"
        case "stopped":
            let minutes = reply["snoring_minutes"] as? Double ?? 0
            let percent = reply["snoring_percent"] as? Double ?? 0
            let episodes = reply["episodes"] as? Int ?? 0
            return """
                sleep session \(start) to \(reply["end"] as? String ?? "?"): \(JSONValue.format(minutes, decimals: 1)) min snoring (\(JSONValue.format(percent, decimals: 1)) %), \(episodes) episode\(episodes == 1 ? "" : "s")
                report: \(reply["report_svg"] as? String ?? "?") and \(reply["report_json"] as? String ?? "?")
                """
        case "running":
            let minutes = reply["minutes"] as? Double ?? 0
            let snoring = reply["snoring_minutes"] as? Double ?? 0
            return "sleep session running since \(start) (\(JSONValue.format(minutes, decimals: 1)) min, \(JSONValue.format(snoring, decimals: 1)) min snoring so far)"
        default:
            let schedule = (reply["schedule"] as? String).map { " (schedule \($0))" } ?? ""
            return "no sleep session is running\(schedule)"
        }
    }

}
