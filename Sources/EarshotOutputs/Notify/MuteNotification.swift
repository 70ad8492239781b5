import FoundationEssentials
import EarshotSupport
import EarshotDetection

/// The notification of a life-safety group muted or unmuted at run time (``DaemonOutput/mute(_:)``): the phone of
/// someone who relies on it for the smoke alarm learns that it is off, for how long, and when it listens again.
extension NotificationMessage {
    /// The `reason` of a mute that a restart ended (``MuteChange/Kind/endedByRestart(until:)``).
    package static let restartedReason = "restarted"

    /// Whether `[notify]` tells the phone of `group`'s mutes: a life-safety group (``urgentGroups``: smoke, CO,
    /// fire) whose events it notifies (`[notify] groups`). Other groups' mutes are not notified.
    static func notifiesMuteOf(_ group: String, groups: [String]) -> Bool {
        urgentGroups.contains(group) && (groups.isEmpty || groups.contains(group))
    }

    /// ``Kind/mute``'s message. JSON: `{"type":"mute","group":"smoke_alarm","muted":true,"minutes":15,
    /// "until":"2026-12-06T19:15:00.000Z","by":"over the event socket","time":...}`; unmuted `"muted":false` with
    /// `"reason"` `unmuted` (and `"by"`), `mute_ended` (and `"minutes"`) or `restarted` (and `"until"`, the mute's
    /// end: ``MuteChange/Kind/endedByRestart(until:)``). ntfy: see ``muteText(_:node:time:)``.
    package static func mute(_ change: MuteChange, node: String, time: Date, format: NotifySettings.Format) -> NotificationMessage {
        var object: JSONObject = ["type": "mute", "group": .string(change.group)]
        switch change.kind {
        case .muted(let minutes, let until):
            object["muted"] = .bool(true)
            object["minutes"] = .int(minutes)
            object["until"] = .string(EventJSON.timestamp(until))
        case .unmuted:
            object["muted"] = .bool(false)
            object["reason"] = "unmuted"
        case .ended(let minutes):
            object["muted"] = .bool(false)
            object["reason"] = "mute_ended"
            object["minutes"] = .int(minutes)
        case .endedByRestart(let until):
            object["muted"] = .bool(false)
            object["reason"] = .string(Self.restartedReason)
            object["until"] = .string(EventJSON.timestamp(until))
        }
        if let by = change.requestedBy { object["by"] = .string(by) }
        object["time"] = .string(EventJSON.timestamp(time))
        return NotificationMessage(object: object, group: change.group, kind: .mute, format: format, node: node, time: time)
    }

    /// The ntfy title, lines, priority and tags of a ``mute(_:node:time:format:)`` object (`time` local):
    /// - muted: `kitchen: Smoke alarm muted` / `Smoke alarm muted in kitchen at 19:00 for 15 min, until 19:15` /
    ///   `No smoke alarm alerts until then (muted over the event socket)`, priority 3 (the default: not an alarm's
    ///   5), tags `mute,smoke_alarm`;
    /// - unmuted: `kitchen: Smoke alarm listening again` / `Smoke alarm listening again in kitchen since 19:05` /
    ///   `unmuted over the event socket` (`its 15 min mute ended`), priority 2, tags `white_check_mark,smoke_alarm`;
    ///   after a restart that ended a mute (``MuteChange/Kind/endedByRestart(until:)``) the second line is `earshotd
    ///   restarted, which ended its mute (it was muted until 19:15)`, or `its mute ended at 19:15, while earshotd was
    ///   stopped` when that time had passed.
    static func muteText(_ object: JSONObject, node: String, time: Date)
        -> (title: String, line: String, details: String?, priority: Int, tags: [String]) {
        let group = object["group"]?.stringValue ?? ""
        let subject = subject(group)
        let place = node.isEmpty ? "" : " in \(node)"
        let prefix = node.isEmpty ? "" : "\(node): "
        let by = object["by"]?.stringValue
        let minutes = object["minutes"]?.intValue ?? 0
        if object["muted"]?.boolValue == true {
            let until = object["until"]?.stringValue.flatMap(utcDate) ?? time
            return (
                "\(prefix)\(subject) muted",
                "\(subject) muted\(place) at \(MuteText.clock(time)) for \(MuteText.duration(minutes: minutes)), until \(MuteText.clock(until, now: time))",
                "No \(subject.lowercased()) alerts until then\(by.map { " (muted \($0))" } ?? "")",
                3, ["mute", group])
        }
        let why: String
        switch object["reason"]?.stringValue {
        case "mute_ended"?: why = "its \(MuteText.duration(minutes: minutes)) mute ended"
        case restartedReason?:
            let until = object["until"]?.stringValue.flatMap(utcDate) ?? time
            why = until > time
                ? "earshotd restarted, which ended its mute (it was muted until \(MuteText.clock(until, now: time)))"
                : "its mute ended at \(MuteText.clock(until)), while earshotd was stopped"
        default: why = "unmuted\(by.map { " \($0)" } ?? "")"
        }
        return ("\(prefix)\(subject) listening again", "\(subject) listening again\(place) since \(MuteText.clock(time))",
                why, 2, ["white_check_mark", group])
    }
}
