import Earshot
import EarshotOutputs
import EarshotTools
import Foundation

/// `earshot test-alert [--socket PATH] [--json]`: asks the daemon for a test alert (`{"cmd":"test"}`) and prints
/// what it sent and where. Exit status: 0, 64 usage, 69 daemon unreachable or no reply, 75 refused because one was
/// sent less than 10 s ago, 77 no permission (the socket, or not in `[output] control_users`).
enum TestAlertCommand: EarshotCommand {
    static let usage = "usage: earshot test-alert [--socket PATH] [--json]"
    static let help = """
        \(usage)

        Asks earshotd for a test alert, to check the way from the daemon to a phone and to Home Assistant without
        playing an alarm: the socket's subscribers get {"type":"test_alert",...}, the journal a line, MQTT its event
        topic (event_type test_alert), and each [notify] url "Test alert from NODE: Earshot can reach this phone".
        Prints what was sent and to which outputs; whether a phone got it, the phone says. At most one per 10 s.
          --socket PATH   the daemon's socket (default \(EventServer.defaultPath))
          --json          print the daemon's reply as JSON

        Exit status: 0; 64 usage; 69 when the daemon cannot be reached or does not answer within 10 s; 75 when a
        test alert went out less than 10 s ago (try again later); 77 permission denied (the socket's, or a user not
        in [output] control_users).
        """

    static let name = "test-alert"
    static let flags = ["--socket", "--json"]

    typealias Options = DaemonRequest.SocketOptions

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options {
        try Options.parse(&parser)
    }

    static func execute(_ options: Options) -> Int32 {
        DaemonRequest.command(
            #"{"cmd":"test"}"#, replyType: "test_alert_sent", socket: options.socket, json: options.json,
            show: { print(describe($0)) },
            errorStatus: { message in
                if message.contains(EventServer.controlRefusal) { return 77 }
                return message.hasPrefix("test alert refused") ? 75 : 69
            })
    }

    /// The lines for a `{"type":"test_alert_sent",...}` reply: when, from which node, to which outputs, and the
    /// notification's words, or that no phone is told without `[notify] url`.
    static func describe(_ reply: [String: Any]) -> String {
        let node = reply["node"] as? String ?? "?"
        let outputs = (reply["outputs"] as? [String] ?? []).joined(separator: ", ")
        var lines = ["test alert sent from \(node) at \(reply["time"] as? String ?? "?") to: \(outputs)"]
        if let message = reply["message"] as? String {
            lines.append("notification: \(message)")
        } else {
            lines.append("no notification: [notify] url is not set, so no phone is told")
        }
        return lines.joined(separator: "\n")
    }
}
