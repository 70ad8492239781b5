import Earshot
import EarshotOutputs
import EarshotService
import EarshotSupport
import EarshotTools
import Foundation

/// `earshot mute GROUP [--minutes N] [--socket PATH | --config FILE] [--json]`: mutes a watched group for a while
/// (`{"cmd":"mute","group":GROUP,"minutes":N}`), and prints until when. Exit status: 0, 64 usage or a group the
/// daemon does not watch, 69 daemon unreachable, no reply or stopping, 77 no permission (the socket, or not in
/// `[output] control_users`).
enum MuteCommand: EarshotCommand {
    static let usage = "usage: earshot mute GROUP [--minutes N] [--socket PATH | --config FILE] [--json]"
    static let help = """
        \(usage)

        Mutes GROUP in earshotd for N minutes: its events are not published (socket, journal, history, MQTT,
        notifications) until then, when it is unmuted by itself. Without --minutes, [detection] alarm_mute_minutes
        for smoke_alarm, co_alarm and fire_alarm (default 15, like a smoke alarm's hush button) and mute_minutes for
        the others (default 480). A group muted already gets the new end. With [notify] url set, the phone is told
        when a smoke, CO or fire alarm group is muted and when it listens again. Prints e.g.
        "smoke_alarm muted until 19:15 (15 min)".
          --minutes N     how long, 1 to \(GroupMutes.maximumMinutes) minutes
          --socket PATH   the daemon's socket (default: the [output] socket /etc/earshot/earshotd.conf sets,
                          else \(EventServer.defaultPath))
          --config FILE   the socket of the earshotd that runs with FILE: /etc/earshot/NAME.conf is instance
                          earshotd@NAME's, /run/earshot/NAME/earshot.sock; another file's [output] socket
          --json          print the daemon's reply as JSON

        Exit status: 0; 64 usage, or a GROUP the daemon does not watch (the message names those it does); 69 when
        the daemon cannot be reached or does not answer within 10 s; 77 permission denied (the socket's, or a user
        not in [output] control_users).
        """

    static let name = "mute"
    static let flags = ["--minutes", "--socket", "--config", "--json"]

    struct Options {
        var group = ""
        var minutes: Int?
        var socket = DaemonSocket.defaultPath
        var json = false
    }

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options {
        var options = Options()
        // Not `options.minutes` in the closure: `options` is being changed through `socket` and `json` meanwhile.
        var minutes: Int?
        options.group = try parseGroup(&parser, socket: &options.socket, json: &options.json) { flag, inline, parser throws(EarshotError) in
            guard flag == "--minutes" else { return false }
            let text = try parser.value(of: flag, inline, allowed: SettingRules.muteMinutes.allowed)
            guard let value = SettingRules.muteMinutes.parse(text) else {
                throw EarshotError(.usage, "--minutes \(SettingRules.muteMinutes.requirement(for: text)), not \"\(DisplayText.escaped(text, limit: 40))\"")
            }
            minutes = value
            return true
        }
        options.minutes = minutes
        return options
    }

    /// The one GROUP of `mute` or `unmute` and the socket options (``DaemonRequest/parse(_:socket:json:positional:flag:)``).
    static func parseGroup(
        _ parser: inout ArgumentParser, socket: inout String, json: inout Bool,
        flag: ((String, String?, inout ArgumentParser) throws(EarshotError) -> Bool)? = nil
    ) throws(EarshotError) -> String {
        var group: String?
        let command = parser.command
        try DaemonRequest.parse(&parser, socket: &socket, json: &json, positional: { text throws(EarshotError) in
            if let group {
                throw EarshotError(.usage, "\(command) takes one GROUP, got \"\(DisplayText.escaped(group, limit: 80))\" and \"\(DisplayText.escaped(text, limit: 80))\"")
            }
            group = text
        }, flag: flag)
        guard let group else { throw parser.missing("a GROUP (earshot status lists the watched groups)") }
        return group
    }

    static func execute(_ options: Options) -> Int32 {
        var request: JSONObject = ["cmd": "mute", "group": .string(options.group)]
        if let minutes = options.minutes { request["minutes"] = .int(minutes) }
        return DaemonRequest.command(
            request, replyType: "mute", socket: options.socket, json: options.json,
            show: { print(describe($0)) }, errorStatus: errorStatus)
    }

    /// 77 when the user may not change the daemon's state, 64 for what the command line gave (a group the daemon
    /// does not watch), 69 otherwise (the daemon starting or stopping).
    static func errorStatus(_ message: String) -> Int32 {
        if message.contains(EventServer.controlRefusal) { return 77 }
        if message.hasPrefix("mute:") || message.hasPrefix("unmute:") { return 64 }
        return 69
    }

    /// The line for a `{"type":"mute",...}` reply: `smoke_alarm muted until 19:15 (15 min)` (`, renewed` when it
    /// was muted already; `19:15 tomorrow` past midnight), `smoke_alarm unmuted`, `smoke_alarm was not muted`.
    static func describe(_ reply: [String: Any], now: Date = Date()) -> String {
        let group = reply["group"] as? String ?? "?"
        let changed = reply["changed"] as? Bool ?? false
        guard reply["muted"] as? Bool == true else { return changed ? "\(group) unmuted" : "\(group) was not muted" }
        let minutes = (reply["minutes"] as? NSNumber)?.intValue ?? 0
        let until = (reply["until"] as? String).flatMap(EventTextFormat.date(fromTimestamp:))
        let end = until.map { MuteText.clock($0, now: now) } ?? "?"
        return "\(group) muted until \(end) (\(MuteText.duration(minutes: minutes))\(changed ? "" : ", renewed"))"
    }
}

/// `earshot unmute GROUP [--socket PATH | --config FILE] [--json]`: unmutes a group muted at run time
/// (`{"cmd":"unmute","group":GROUP}`). Exit status as ``MuteCommand``'s.
enum UnmuteCommand: EarshotCommand {
    static let usage = "usage: earshot unmute GROUP [--socket PATH | --config FILE] [--json]"
    static let help = """
        \(usage)

        Unmutes GROUP in earshotd before its mute ends: its events are published again, and an event of it still
        going on (the alarm still sounding) is announced now. Prints "smoke_alarm unmuted", or "smoke_alarm was not
        muted".
          --socket PATH   the daemon's socket (default: the [output] socket /etc/earshot/earshotd.conf sets,
                          else \(EventServer.defaultPath))
          --config FILE   the socket of the earshotd that runs with FILE: /etc/earshot/NAME.conf is instance
                          earshotd@NAME's, /run/earshot/NAME/earshot.sock; another file's [output] socket
          --json          print the daemon's reply as JSON

        Exit status: 0; 64 usage, or a GROUP the daemon does not watch; 69 when the daemon cannot be reached or
        does not answer within 10 s; 77 permission denied (the socket's, or a user not in [output] control_users).
        """

    static let name = "unmute"
    static let flags = ["--socket", "--config", "--json"]

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> MuteCommand.Options {
        var options = MuteCommand.Options()
        options.group = try MuteCommand.parseGroup(&parser, socket: &options.socket, json: &options.json)
        return options
    }

    static func execute(_ options: MuteCommand.Options) -> Int32 {
        DaemonRequest.command(
            ["cmd": "unmute", "group": .string(options.group)], replyType: "mute", socket: options.socket,
            json: options.json, show: { print(MuteCommand.describe($0)) }, errorStatus: MuteCommand.errorStatus)
    }
}
