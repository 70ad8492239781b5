import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot sleep start|stop|status [--socket PATH] [--json]`: starts, stops or shows the daemon's sleep session
/// (snore monitoring). Exit status: 0, 64 usage, 69 daemon unreachable or the command refused, 77 no permission.
enum SleepCommand {
    static let usage = "usage: earshot sleep start|stop|status [--socket PATH] [--json]"
    static let help = """
        \(usage)

        Controls earshotd's sleep session: while it runs, snoring is detected and aggregated; `stop` writes the
        snore report (JSON and SVG) to the daemon's [sleep] report_dir and prints where (make a PNG of the chart with
        earshot report --from-svg SVG --png OUT).
          --socket PATH   the daemon's socket (default \(EventServer.defaultPath))
          --json          print the daemon's reply as JSON
        """

    static func run(_ arguments: [String]) -> Int32 {
        var action: String?
        var socket = EventServer.defaultPath
        var json = false
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            switch argument {
            case "--help", "-h":
                print(help)
                return 0
            case "--json":
                json = true
            case "--socket":
                index += 1
                guard index < arguments.count else { return usageError("--socket needs a path") }
                socket = arguments[index]
            case "start", "stop", "status":
                guard action == nil else { return usageError("give one of start, stop, status") }
                action = argument
            default:
                if argument.hasPrefix("--socket=") {
                    socket = String(argument.dropFirst("--socket=".count))
                } else {
                    return usageError("unknown argument \"\(argument)\"")
                }
            }
            index += 1
        }
        guard let action else { return usageError("say start, stop or status") }

        let client: EventSubscriber
        do {
            client = try EventSubscriber(path: socket)
        } catch {
            printError(error.message)
            return error.exitStatus
        }
        do {
            try client.send(line: "{\"cmd\":\"sleep_\(action)\"}")
            // Events may arrive before the reply: skip them. The analysis queue answers within a window's time.
            while true {
                guard case .line(let line) = try client.readLine(timeoutSeconds: 10) else {
                    printError("no reply from earshotd on \(socket) within 10 s (is it stuck? see journalctl -u earshotd)")
                    return 69
                }
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                      let type = object["type"] as? String, type == "sleep" || type == "error"
                else { continue }
                if json {
                    print(line)
                } else if type == "error" {
                    printError(object["message"] as? String ?? line)
                } else {
                    print(describe(object))
                }
                return type == "error" ? 69 : 0
            }
        } catch {
            printError(error.message)
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

    static func usageError(_ message: String) -> Int32 {
        printError("\(message) (\(usage))")
        return 64
    }

    static func printError(_ message: String) {
        FileHandle.standardError.write(Data("earshot: \(message)\n".utf8))
    }
}
