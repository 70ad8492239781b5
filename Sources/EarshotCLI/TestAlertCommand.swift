import Earshot
import EarshotOutputs
import EarshotTools
import Foundation

/// `earshot test-alert [--socket PATH] [--json]`: asks the daemon for a test alert (`{"cmd":"test"}`) and prints
/// what it sent and where. Exit status: 0, 64 usage, 69 daemon unreachable or no reply or the MQTT broker
/// disconnected (`not_reached`), 75 refused because one was
/// sent less than 10 s ago, 77 no permission (the socket, or not in `[output] control_users`).
enum TestAlertCommand: EarshotCommand {
    static let usage = "usage: earshot test-alert [--socket PATH] [--json]"
    static let help = """
        \(usage)

        Asks earshotd for a test alert, to check the way from the daemon to a phone and to Home Assistant without
        playing an alarm: the socket's subscribers get {"type":"test_alert",...}, the journal a line, MQTT its event
        topic (event_type test_alert), and each [notify] url "Test alert from NODE: Earshot can reach this phone".
        Prints what was sent and to which outputs; "not reached now: mqtt: ..." when the MQTT broker is disconnected
        (the alert waits in the outbox; exit 69), and a line naming the [notify] URLs that were failing until now
        (the alert is tried on them all the same). Whether a phone got it, the phone says. At most one per 10 s.
          --socket PATH   the daemon's socket (default \(EventServer.defaultPath))
          --json          print the daemon's reply as JSON

        Exit status: 0; 64 usage; 69 when the daemon cannot be reached or does not answer within 10 s, or the MQTT
        broker is disconnected (not reached now); 75 when a
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
            },
            replyStatus: { reply in (reply["not_reached"] as? [String: Any])?.isEmpty == false ? 69 : 0 })
    }

    /// The lines for a `{"type":"test_alert_sent",...}` reply: when, from which node, to which outputs, what is known
    /// not to reach its destination now (`not_reached`: an MQTT broker disconnected; the command then exits 69), the
    /// `[notify]` URLs failing until now (`notify_failing`), and the notification's words, or that no phone is told
    /// without `[notify] url`.
    static func describe(_ reply: [String: Any]) -> String {
        let node = reply["node"] as? String ?? "?"
        let outputs = (reply["outputs"] as? [String] ?? []).joined(separator: ", ")
        var lines = ["test alert sent from \(node) at \(reply["time"] as? String ?? "?") to: \(outputs)"]
        if let notReached = reply["not_reached"] as? [String: Any] {
            for (output, why) in notReached.sorted(by: { $0.key < $1.key }) {
                lines.append("not reached now: \(output): \(why as? String ?? "?")")
            }
        }
        if let failing = reply["notify_failing"] as? [String], !failing.isEmpty {
            lines.append("notify: notifications to \(failing.joined(separator: ", ")) were failing until now (notify_failed); this alert is tried all the same: notify_recovered in the journal says it got through")
        }
        if let message = reply["message"] as? String {
            lines.append("notification: \(message)")
        } else {
            lines.append("no notification: [notify] url is not set, so no phone is told")
        }
        return lines.joined(separator: "\n")
    }
}
