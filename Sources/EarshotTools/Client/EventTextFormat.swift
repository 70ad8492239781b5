import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs
import EarshotService

/// The human form of the event socket's JSON lines (`earshot subscribe --format text`).
///
/// ```
/// 2026-11-30 17:45:12  smoke_alarm started: T3 pattern, 1 cycle at 3150 Hz, confidence 96%, classifier "Smoke detector, smoke alarm" 81% (stream 12.48 s)
/// 2026-11-30 17:45:31  baby_cry started: "Baby cry, infant cry" 99% (stream 2.40 s, announced on unmute)
/// 2026-11-30 17:45:20  baby_cry ended after 5.76 s: "Baby cry, infant cry" peak 91%, mean 72% (stream 12.48-18.24 s)
/// 2026-11-30 17:45:40  smoke_alarm ended after 28.01 s: T3 pattern, 7 cycles at 3150 Hz, confidence 99%, classifier "Smoke detector, smoke alarm" 93% (stream 12.01-40.02 s)
/// 2026-11-30 17:46:02  smoke_alarm ended after 9.96 s (capture lost: the sound may still be going on): T3 pattern, 2 cycles at 3150 Hz, confidence 100% (stream 50.00-59.96 s)
/// 2026-11-30 17:45:20  health overrun: capture buffer overran; 3 xruns so far
/// 2026-11-30 17:45:25  smoke_alarm clip saved: /var/lib/earshot/clips/2026-11-30T16-45-12Z_smoke_alarm.wav (16.76 s, stream 7.48-24.24 s)
/// ```
package enum EventTextFormat {
    /// Formats one line received from the daemon.
    ///
    /// - Parameters:
    ///   - line: one JSON line as the socket sends it.
    ///   - timeZone: the zone the wall-clock `time` is shown in (default nil: local time at that instant as
    ///     earshotd reads it, ``LocalTime/zone(at:)``, which takes any `TZ` glibc takes).
    /// - Returns: the text line; nil for a `subscribed` acknowledgement (not an event); the line itself when it is
    ///   not a known object. Control characters from the line (a class name, a health message or a path holding an
    ///   escape sequence or a line break) come out as `\xNN` (``DisplayText/escaped(_:limit:)``): whatever the
    ///   socket sends cannot move the terminal's cursor, change its title or colours, or forge a line.
    package static func format(line: String, timeZone: TimeZone? = nil) -> String? {
        formatted(line: line, timeZone: timeZone).map { DisplayText.escaped($0) }
    }

    private static func formatted(line: String, timeZone: TimeZone?) -> String? {
        guard let object = try? JSONValue.parse(line), let type = object["type"]?.stringValue else { return line }
        func text(_ key: String) -> String? { object[key]?.stringValue }
        let when = text("time").flatMap { localTime($0, timeZone: timeZone) }.map { $0 + "  " } ?? ""
        let group = text("group") ?? "?"
        // A model's class in words (`Baby cry`, not `builtin_baby_cry:baby_cry`); scripts read the JSON's `class`.
        let label = text("class").map(GroupTitle.ofClass) ?? "?"
        // A smoke/CO alarm or a chirp (a `source`, no peak and mean) is told by its evidence and its one confidence,
        // then the classifier's own score where a window was classified (trial 8 #7: a T3 heard with no window
        // classified read `"?" 80%`, and a chirp `"Fire alarm" 90%` where that class scored 0.0002).
        let alarm = object["source"] != nil && object["peak_confidence"] == nil
        switch type {
        case "detection":
            let late = text("reason") == EventLines.unmutedReason ? ", announced on unmute" : ""
            guard alarm else {
                return "\(when)\(group) started: \"\(label)\" \(percent(object["confidence"]))"
                    + " (stream \(seconds(object["stream_time"])) s\(late))"
            }
            // A chirp series has no end: it is heard, not started.
            let verb = object["pattern"]?.stringValue == "chirp" ? "heard" : "started"
            return "\(when)\(group) \(verb): \(alarmScores(object)) (stream \(seconds(object["stream_time"])) s\(late))"
        case "detection_end":
            // What ended it when the sound did not (trial 11 #2: a lost capture read like an alarm that stopped).
            let why = text("reason").flatMap(DetectionEvent.EndReason.init(rawValue:))?.parenthesized ?? ""
            guard alarm else {
                return "\(when)\(group) ended after \(seconds(object["duration"])) s\(why): \"\(label)\" peak"
                    + " \(percent(object["peak_confidence"])), mean \(percent(object["mean_confidence"]))"
                    + " (stream \(seconds(object["start"]))-\(seconds(object["end"])) s)"
            }
            return "\(when)\(group) ended after \(seconds(object["duration"])) s\(why): \(alarmScores(object))"
                + " (stream \(seconds(object["start"]))-\(seconds(object["end"])) s)"
        case "health":
            let state = text("state") ?? "?"
            let message = text("message") ?? ""
            return message.isEmpty ? "\(when)health \(state)" : "\(when)health \(state): \(message)"
        case "clip_saved":
            let capped = object["capped"]?.boolValue == true ? ", event cut at 60 s" : ""
            return "\(when)\(group) clip saved: \(text("path") ?? "?") (\(seconds(object["duration"])) s,"
                + " stream \(seconds(object["start"]))-\(seconds(object["end"])) s\(capped))"
        case "dropped":
            let count = object["count"]?.intValue ?? 0
            return "(\(count) event\(count == 1 ? "" : "s") dropped: this subscriber fell behind)"
        case "snore_report":
            let minutes = String(cFormat: "%.1f", object["snoring_minutes"]?.doubleValue ?? 0)
            let share = String(cFormat: "%.1f", object["snoring_percent"]?.doubleValue ?? 0)
            let episodes = object["episodes"]?.arrayValue?.count ?? 0
            let events = object["events"]?.intValue ?? 0
            return "\(when)snore report (\(text("source") ?? "?")): \(minutes) min snoring (\(share) %),"
                + " \(episodes) episode\(episodes == 1 ? "" : "s"), \(events) event\(events == 1 ? "" : "s")"
        case "error":
            return "daemon error: \(text("message") ?? line)"
        case "shutdown":
            return "earshotd stopped (shutdown notice)"
        case "test_alert":
            return "\(when)test alert (earshot test-alert, or Home Assistant's Test alert button)"
        case "subscribed":
            return nil
        default:
            return line
        }
    }

    /// An alarm event's evidence, confidence and classifier score: `T3 pattern, 2 cycles at 3057 Hz, confidence
    /// 100%, classifier "Smoke detector, smoke alarm" 95%` (no classifier part when no window was classified).
    private static func alarmScores(_ object: JSONValue) -> String {
        var text = "\(alarmEvidence(object)), confidence \(percent(object["confidence"]))"
        if let label = object["class"]?.stringValue, let score = object["classifier_score"] {
            text += ", classifier \"\(GroupTitle.ofClass(label))\" \(percent(score))"
        }
        return text
    }

    /// An alarm event's evidence: `T3 pattern, 10 cycles at 3132 Hz` (`alarm tone at 3132 Hz` without a pattern).
    private static func alarmEvidence(_ object: JSONValue) -> String {
        let hertz = object["tone_hz"]?.intValue.map { " at \($0) Hz" } ?? ""
        guard let pattern = object["pattern"]?.stringValue else { return "alarm tone\(hertz)" }
        let cycles = object["cycles"]?.intValue ?? 0
        let unit = pattern == "chirp" ? "chirp" : "cycle"
        return "\(pattern) pattern, \(cycles) \(unit)\(cycles == 1 ? "" : "s")\(hertz)"
    }

    private static func percent(_ value: JSONValue?) -> String {
        guard let number = value?.doubleValue, number.isFinite else { return "?%" }
        return "\(Int((number * 100).rounded()))%"
    }

    private static func seconds(_ value: JSONValue?) -> String {
        guard let number = value?.doubleValue, number.isFinite else { return "?" }
        return String(cFormat: "%.2f", number)
    }

    /// `2026-11-30T16:45:12.345Z` shown as `2026-11-30 17:45:12` in `timeZone` (nil: local time at that instant).
    package static func localTime(_ text: String, timeZone: TimeZone?) -> String? {
        guard let date = date(fromTimestamp: text) else { return nil }
        return LocalTime.dateTimeText(date, timeZone: timeZone ?? LocalTime.zone(at: date))
    }

    /// The date of an event timestamp, `2026-11-30T16:45:12.345Z` (``EventJSON/timestamp(_:)``); nil for other text.
    package static func date(fromTimestamp text: String) -> Date? {
        try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}
