import Foundation

/// The human form of the event socket's JSON lines (`earshot subscribe --format text`).
///
/// ```
/// 2026-11-30 17:45:12  smoke_alarm started: "Smoke detector, smoke alarm" 81% (stream 12.48 s)
/// 2026-11-30 17:45:20  smoke_alarm ended after 5.76 s: "Smoke detector, smoke alarm" peak 91%, mean 72% (stream 12.48-18.24 s)
/// 2026-11-30 17:45:20  health overrun: capture buffer overran; 3 xruns so far
/// 2026-11-30 17:45:25  smoke_alarm clip saved: /var/lib/earshot/clips/2026-11-30T16-45-12Z_smoke_alarm.wav (16.76 s, stream 7.48-24.24 s)
/// ```
public enum EventTextFormat {
    /// Formats one line received from the daemon.
    ///
    /// - Parameters:
    ///   - line: one JSON line as the socket sends it.
    ///   - timeZone: the zone the wall-clock `time` is shown in (the local zone by default).
    /// - Returns: the text line; nil for a `subscribed` acknowledgement (not an event); the line itself when it is
    ///   not a known object.
    public static func format(line: String, timeZone: TimeZone = .current) -> String? {
        guard let value = try? JSONSerialization.jsonObject(with: Data(line.utf8)),
            let object = value as? [String: Any], let type = object["type"] as? String
        else { return line }
        let when = (object["time"] as? String).flatMap { localTime($0, timeZone: timeZone) }.map { $0 + "  " } ?? ""
        let group = object["group"] as? String ?? "?"
        let label = object["class"] as? String ?? "?"
        switch type {
        case "detection":
            return "\(when)\(group) started: \"\(label)\" \(percent(object["confidence"]))"
                + " (stream \(seconds(object["stream_time"])) s)"
        case "detection_end":
            return "\(when)\(group) ended after \(seconds(object["duration"])) s: \"\(label)\""
                + " peak \(percent(object["peak_confidence"])), mean \(percent(object["mean_confidence"]))"
                + " (stream \(seconds(object["start"]))-\(seconds(object["end"])) s)"
        case "health":
            let state = object["state"] as? String ?? "?"
            let message = object["message"] as? String ?? ""
            return message.isEmpty ? "\(when)health \(state)" : "\(when)health \(state): \(message)"
        case "clip_saved":
            let capped = object["capped"] as? Bool == true ? ", event cut at 60 s" : ""
            return "\(when)\(group) clip saved: \(object["path"] as? String ?? "?") (\(seconds(object["duration"])) s,"
                + " stream \(seconds(object["start"]))-\(seconds(object["end"])) s\(capped))"
        case "dropped":
            let count = (object["count"] as? NSNumber)?.intValue ?? 0
            return "(\(count) event\(count == 1 ? "" : "s") dropped: this subscriber fell behind)"
        case "error":
            return "daemon error: \(object["message"] as? String ?? line)"
        case "shutdown":
            return "earshotd stopped (shutdown notice)"
        case "subscribed":
            return nil
        default:
            return line
        }
    }

    private static func percent(_ value: Any?) -> String {
        guard let number = value as? NSNumber else { return "?%" }
        return "\(Int((number.doubleValue * 100).rounded()))%"
    }

    private static func seconds(_ value: Any?) -> String {
        guard let number = value as? NSNumber, number.doubleValue.isFinite else { return "?" }
        return String(format: "%.2f", number.doubleValue)
    }

    /// `2026-11-30T16:45:12.345Z` shown as `2026-11-30 17:45:12` in `timeZone`.
    static func localTime(_ text: String, timeZone: TimeZone) -> String? {
        let parser = ISO8601DateFormatter()
        parser.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        guard let date = parser.date(from: text) else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        guard let year = parts.year, let month = parts.month, let day = parts.day, let hour = parts.hour,
            let minute = parts.minute, let second = parts.second
        else { return nil }
        return String(format: "%04d-%02d-%02d %02d:%02d:%02d", year, month, day, hour, minute, second)
    }
}
