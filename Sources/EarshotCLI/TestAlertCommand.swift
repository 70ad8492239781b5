import Earshot
import EarshotOutputs
import EarshotTools
import Foundation

/// `earshot test-alert [--socket PATH | --config FILE] [--json]`: asks the daemon for a test alert (`{"cmd":"test"}`) and prints
/// where it went and, for each output that reaches over the network, what became of it: each `[notify]` URL's first
/// attempt, the MQTT broker's acknowledgement (the daemon replies once it has them, or 10 s after sending). Exit
/// status: 0, 64 usage, 69 daemon unreachable or no reply, or a network output not reached (`not_reached`), 75
/// refused because one was sent less than 10 s ago, 77 no permission (the socket, or not in `[output]
/// control_users`).
enum TestAlertCommand: EarshotCommand {
    static let usage = "usage: earshot test-alert [--socket PATH | --config FILE] [--json]"
    static let help = """
        \(usage)

        Asks earshotd for a test alert, to check the way from the daemon to a phone and to Home Assistant without
        playing an alarm: the socket's subscribers get {"type":"test_alert",...}, the journal a line, MQTT its event
        topic (event_type test_alert), and each [notify] url "Test alert from NODE: Earshot can reach this phone".
        Prints what was sent and to which outputs, then a line per [notify] URL (its first attempt: delivered with
        the HTTP status, or failed and how many retries follow) and for the MQTT broker (acknowledged, or not
        reached: disconnected, the alert waiting in the outbox). The daemon answers once every one has a result,
        or 10 s after sending. Whether a phone showed it, the phone says. At most one per 10 s.
          --socket PATH   the daemon's socket (default: the [output] socket /etc/earshot/earshotd.conf sets,
                          else \(EventServer.defaultPath))
          --config FILE   the socket of the earshotd that runs with FILE: /etc/earshot/NAME.conf is instance
                          earshotd@NAME's, /run/earshot/NAME/earshot.sock; another file's [output] socket
          --json          print the daemon's reply as JSON

        Exit status: 0; 64 usage; 69 when the daemon cannot be reached or does not answer within \(Int(replySeconds)) s, or
        a [notify] URL did not accept the first attempt or the MQTT broker did not acknowledge the alert within
        10 s (not reached); 75 when a test alert went out less than 10 s ago (try again later); 77 permission denied
        (the socket's, or a user not in [output] control_users).
        """

    static let name = "test-alert"
    static let flags = ["--socket", "--config", "--json"]

    /// Seconds the reply is waited for: the daemon's 10 s for the outputs' results
    /// (``TestAlertReceipt/deadlineSeconds``) and 5 s for a busy machine.
    static let replySeconds = TestAlertReceipt.deadlineSeconds + 5

    typealias Options = DaemonRequest.SocketOptions

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options {
        try Options.parse(&parser)
    }

    static func execute(_ options: Options) -> Int32 {
        DaemonRequest.command(
            ["cmd": "test"], replyType: "test_alert_sent", socket: options.socket, json: options.json,
            timeoutSeconds: replySeconds,
            show: { print(describe($0)) },
            errorStatus: { message in
                if message.contains(EventServer.controlRefusal) { return 77 }
                return message.hasPrefix("test alert refused") ? 75 : 69
            },
            replyStatus: { reply in (reply["not_reached"] as? [String: Any])?.isEmpty == false ? 69 : 0 })
    }

    /// The lines for a `{"type":"test_alert_sent",...}` reply: when, from which node, to which outputs; a line per
    /// network destination of `results` (``resultLine(_:)``), or, from a daemon without them, what it knew not to
    /// reach (`not_reached`) and the `[notify]` URLs failing until then (`notify_failing`); then the notification's
    /// words (`notification: ...`; when a URL did not accept it, `notification not delivered to every URL (see
    /// above); the text sent: "..."`), or that no phone is told without `[notify] url`.
    static func describe(_ reply: [String: Any]) -> String {
        let node = reply["node"] as? String ?? "?"
        let outputs = (reply["outputs"] as? [String] ?? []).joined(separator: ", ")
        var lines = ["test alert sent from \(node) at \(reply["time"] as? String ?? "?") to: \(outputs)"]
        if let results = reply["results"] as? [[String: Any]] {
            lines += results.map(resultLine)
        } else {
            if let notReached = reply["not_reached"] as? [String: Any] {
                for (output, why) in notReached.sorted(by: { $0.key < $1.key }) {
                    lines.append("not reached now: \(output): \(why as? String ?? "?")")
                }
            }
            if let failing = reply["notify_failing"] as? [String], !failing.isEmpty {
                lines.append("notify: notifications to \(failing.joined(separator: ", ")) were failing until now (notify_failed); this alert is tried all the same: notify_recovered in the journal says it got through")
            }
        }
        let notifyResults = (reply["results"] as? [[String: Any]] ?? []).filter { $0["output"] as? String == "notify" }
        let notDelivered = notifyResults.contains { $0["result"] as? String != "delivered" }
            || (reply["not_reached"] as? [String: Any])?["notify"] != nil
        if let message = reply["message"] as? String, notDelivered {
            // Trial 15 L4: the words alone read like a verdict when the phone was not reached.
            lines.append("notification not delivered to every URL (see above); the text sent: \"\(message)\"")
        } else if let message = reply["message"] as? String {
            lines.append("notification: \(message)")
        } else {
            lines.append("no notification: [notify] url is not set, so no phone is told")
        }
        return lines.joined(separator: "\n")
    }

    /// One destination's line: `notify URL: delivered (HTTP 200) in 0.12 s`, `notify URL: failed: HTTP 500
    /// (retrying: 3 more attempts)`, `notify URL: no answer within 10 s (still trying; notify_failed in the journal
    /// says if it fails)`, `mqtt broker HOST:PORT: acknowledged in 0.03 s`, `mqtt broker HOST:PORT: not reached:
    /// disconnected; the alert waits in the outbox (3 messages waiting) and goes out when it connects`.
    static func resultLine(_ result: [String: Any]) -> String {
        let output = result["output"] as? String ?? "?"
        let target = result["target"] as? String ?? "?"
        let seconds = (result["seconds"] as? NSNumber)?.doubleValue ?? 0
        let took = String(format: "%.2f", seconds)
        let within = Int(seconds.rounded())
        let problem = result["problem"] as? String ?? "?"
        let head = output == "mqtt" ? "mqtt broker \(target)" : "\(output) \(target)"
        let waiting = (result["waiting"] as? NSNumber)?.intValue ?? 0
        let messages = "\(waiting) message\(waiting == 1 ? "" : "s") waiting"
        let what: String
        switch result["result"] as? String {
        case "delivered":
            what = "delivered (HTTP \((result["http_status"] as? NSNumber)?.intValue ?? 0)) in \(took) s"
        case "failed":
            let retries = (result["retries_left"] as? NSNumber)?.intValue ?? 0
            what = "failed: \(problem) (\(retries > 0 ? "retrying: \(retries) more attempt\(retries == 1 ? "" : "s")" : "not retried"))"
        case "no_answer":
            what = "no answer within \(within) s (still trying; notify_failed in the journal says if it fails)"
        case "acknowledged":
            what = "acknowledged in \(took) s"
        case "not_acknowledged" where result["connected"] as? Bool == false:
            what = "not reached: disconnected; the alert waits in the outbox (\(messages)) and goes out when it connects"
        case "not_acknowledged":
            what = "not reached: no acknowledgement within \(within) s; the alert waits in the outbox (\(messages))"
        case "not_sent":
            what = output == "mqtt" ? "not reached: not sent: \(problem)" : "not sent: \(problem)"
        case let other:
            what = other ?? "?"
        }
        return "\(head): \(what)"
    }
}
