import FoundationEssentials
import Glibc
import EarshotSupport
import EarshotDetection

/// The human form of "what the daemon hears now": `earshot status` (the socket's status reply) and `earshot
/// listen` (one `{"type":"window",...}` line per analysis window), for setting thresholds.
///
/// ```
/// $ earshot status
/// earshotd: capture live from input file samples/demo.flac (16000 Hz, 1 channel), up 12.3 s
/// level: -23.4 dBFS, gate open (gate -50.0 dBFS)
/// hears: Baby cry, infant cry 0.94, Crying, sobbing 0.51, Speech 0.08, Music 0.02, Inside, small room 0.01
/// watching: baby_cry, loud; active: baby_cry
/// muted: smoke_alarm until 19:15 (no events until then)
/// windows: 24 (7 gated), detections: 2, xruns: 0, clients: 1
/// audio lost: 23.0 s in 1 gap (capture outages, stalls and xruns)
/// mqtt: connected to 192.168.1.10:1883 as node kitchen (42 messages published)
/// $ earshot listen
///    12.48 s   -23.4 dBFS  open   Baby cry, infant cry 0.94, Crying, sobbing 0.51, Speech 0.08, ...
///    12.96 s   -61.0 dBFS  gated
/// ```
package enum HearingTextFormat {
    /// The lines of `earshot status` for a status reply (JSON text); nil when it is not one.
    package static func status(line: String, timeZone: TimeZone? = nil) -> String? {
        guard let object = try? JSONValue.parse(line), object["type"]?.stringValue == "status" else { return nil }
        func text(_ key: String) -> String { object[key]?.stringValue ?? "?" }
        func list(_ key: String) -> [String] { object[key]?.arrayValue?.compactMap(\.stringValue) ?? [] }
        func int(_ key: String) -> Int { object[key]?.intValue ?? 0 }
        let source = text("source")
        // While the device is away its stream is closed: the format shown is the last one (trial 11 #5).
        let shown = object["capture"]?.stringValue == "unavailable" && source.hasSuffix(")")
            ? source.replacing(" (", with: " (last format ", maxReplacements: 1) : source
        let from = source.isEmpty ? "" : " from \(shown)"
        let uptime = String(cFormat: "%.1f", object["uptime"]?.doubleValue ?? 0)
        let gateOpen = object["gate_open"]?.boolValue == true
        let gate = decibels(object["gate_dbfs"])
        let active = list("active")
        var lines = ["earshotd: capture \(text("capture"))\(from), up \(uptime) s"]
        let classes = classList(object["classes"])
        let capture = object["capture"]?.stringValue
        if let capture, capture != "live" {
            // No audio arrives: the last level (-120 dBFS before any window) would describe a quiet room.
            let reason = object["capture_error"]?.stringValue.map { ": \($0)" } ?? ""
            lines.append("level: no audio (capture \(capture)\(reason))")
            lines.append("hears: nothing (no audio arrives while capture is \(capture))")
        } else if gateOpen {
            lines.append("level: \(decibels(object["level_dbfs"])) dBFS, gate open (gate \(gate) dBFS)")
            lines.append("hears: \(classes.isEmpty ? "(no classes)" : classes)")
        } else {
            lines.append("level: \(decibels(object["level_dbfs"])) dBFS, gate closed (gate \(gate) dBFS)")
            lines.append("hears: nothing classified (the level is below the gate)")
        }
        // A muted group is still analysed, but its events go nowhere: it is listed apart, not as "watching".
        let muted = list("muted")
        let watching = list("watch").filter { !muted.contains($0) }
        let heard = active.filter { !muted.contains($0) }
        let heardMuted = active.filter { muted.contains($0) }
        lines.append("watching: \(watching.isEmpty ? "nothing (every group is muted)" : watching.joined(separator: ", "))"
            + (heard.isEmpty ? "" : "; active: \(heard.joined(separator: ", "))"))
        if !muted.isEmpty {
            // Each mute's end, in local time (a daemon from before mutes ended has no `muted_until`).
            let now = object["time"]?.stringValue.flatMap(EventTextFormat.date(fromTimestamp:)) ?? Date()
            let ends = muted.map { group in
                object["muted_until"]?[group]?.stringValue.flatMap(EventTextFormat.date(fromTimestamp:))
                    .map { "\(group) until \(MuteText.clock($0, now: now))" }
            }
            let named = ends.allSatisfy { $0 != nil }
                ? "\(ends.compactMap { $0 }.joined(separator: ", ")) (no events until then)"
                : "\(muted.joined(separator: ", ")) (no events until unmuted or the daemon restarts)"
            lines.append("muted: \(named)"
                + (heardMuted.isEmpty ? "" : "; active: \(heardMuted.joined(separator: ", ")) (not reported)"))
        }
        lines.append("windows: \(int("windows")) (\(int("gated_windows")) gated), detections: \(int("detections")), xruns: \(int("xruns")), clients: \(int("subscribers"))")
        // Audio not heard (outages, stalls, xruns): the JSON's `gaps` and `lost_seconds`, when there were any.
        let gaps = int("gaps")
        if gaps > 0 {
            let lost = String(cFormat: "%.1f", object["lost_seconds"]?.doubleValue ?? 0)
            lines.append("audio lost: \(lost) s in \(gaps) gap\(gaps == 1 ? "" : "s") (capture outages, stalls and xruns)")
        }
        // The broker, connected (with the node: with several rooms, the quickest check of which is which) or not;
        // the notification URLs, and which fail.
        if let mqtt = object["mqtt"] {
            let broker = mqtt["broker"]?.stringValue ?? "?"
            if mqtt["connected"]?.boolValue == false {
                let waiting = mqtt["waiting"]?.intValue ?? 0
                lines.append("mqtt: disconnected from \(broker) (\(waiting) message\(waiting == 1 ? "" : "s") waiting)")
            } else {
                let node = mqtt["node"]?.stringValue.map { " as node \($0)" } ?? ""
                let published = mqtt["published"]?.intValue ?? 0
                lines.append("mqtt: connected to \(broker)\(node) (\(published) message\(published == 1 ? "" : "s") published)")
            }
        }
        if let notify = object["notify"], case .array(let failing)? = notify["failing"], !failing.isEmpty {
            let urls = failing.compactMap(\.stringValue).joined(separator: ", ")
            // An alarm not delivered yet but still tried shows as well as one given up (trial 15 M3).
            let retrying = notify["retrying"]?.intValue ?? 0
            let waiting = retrying > 0 ? "\(retrying) being retried, " : ""
            lines.append("notify: failing to \(urls) (\(waiting)\(notify["failed"]?.intValue ?? 0) given up since start; see notify_failed in the journal)")
        } else if let notify = object["notify"], case .array(let urls)? = notify["urls"], !urls.isEmpty {
            // Which URLs a reload left in use, without a test alert to the phone (trial 17 M1).
            let sent = notify["sent"]?.intValue ?? 0
            lines.append("notify: \(urls.compactMap(\.stringValue).joined(separator: ", ")) (\(sent) sent since start)")
        }
        // The file was changed and reloaded, but the daemon still runs what it had (until a reload succeeds).
        if let failure = object["reload_error"], let message = failure["message"]?.stringValue {
            let time = failure["time"]?.stringValue.flatMap { EventTextFormat.localTime($0, timeZone: timeZone) }
            lines.append("reload failed at \(time.map { String($0.suffix(8)) } ?? "?"): \(message)")
        }
        return lines.joined(separator: "\n")
    }

    /// The health states about the capture itself that `earshot listen` shows between its windows.
    package static let captureStates: Set<String> = Set(
        [HealthEvent.State.captureUnavailable, .captureLive, .inputStalled, .overrun].map(\.rawValue))

    /// The `earshot listen` line of a health line about the capture (``captureStates``), nil for any other line:
    /// ` capture unavailable: <message>`, ` capture live again: <message>`, ` input stalled: <message>`,
    /// ` audio lost: <message>` (the overrun's message without its own `audio lost: `). One leading space, so
    /// that the lines stand apart from the windows' stream times.
    package static func captureHealth(line: String) -> String? {
        guard let object = try? JSONValue.parse(line), object["type"]?.stringValue == "health",
              let state = object["state"]?.stringValue, captureStates.contains(state) else { return nil }
        let message = object["message"]?.stringValue ?? ""
        let what = switch HealthEvent.State(rawValue: state) {
        case .captureUnavailable?: "capture unavailable"
        case .captureLive?: "capture live again"
        case .inputStalled?: "input stalled"
        default: "audio lost"
        }
        let said = state == HealthEvent.State.overrun.rawValue && message.hasPrefix("audio lost: ") ? String(message.dropFirst(12)) : message
        return said.isEmpty ? " \(what)" : " \(what): \(said)"
    }

    /// The `earshot listen` line of one `{"type":"window",...}` line: stream time of the window's start, its
    /// level, `open` or `gated`, and its top classes with scores; nil for any other line.
    package static func window(line: String) -> String? {
        guard let object = try? JSONValue.parse(line), object["type"]?.stringValue == "window" else { return nil }
        let start = String(cFormat: "%8.2f", object["start"]?.doubleValue ?? 0)
        let level = decibels(object["level_dbfs"])
        let paddedLevel = String(repeating: " ", count: max(0, 6 - level.count)) + level
        guard object["gate_open"]?.boolValue == true else { return "\(start) s  \(paddedLevel) dBFS  gated" }
        return "\(start) s  \(paddedLevel) dBFS  open   \(classList(object["classes"]))"
    }

    /// `Speech 0.91, Music 0.05` from `[{"class":"Speech","confidence":0.9123},...]`.
    static func classList(_ value: JSONValue?) -> String {
        let entries = value?.arrayValue ?? []
        return entries.compactMap { entry -> String? in
            guard let name = entry["class"]?.stringValue else { return nil }
            return "\(name) \(String(cFormat: "%.2f", entry["confidence"]?.doubleValue ?? 0))"
        }.joined(separator: ", ")
    }

    private static func decibels(_ value: JSONValue?) -> String {
        guard let number = value?.doubleValue, number.isFinite else { return "?" }
        return String(cFormat: "%.1f", number)
    }
}
