import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotModel
import EarshotAnalysis

/// The JSON objects the event socket sends, one per line. Confidences are rounded to 4 decimals, stream times
/// and durations to 3 (milliseconds), and `time` is the wall clock in ISO 8601 UTC with milliseconds.
///
/// ```
/// {"type":"detection","group":"smoke_alarm","class":"Smoke detector, smoke alarm","confidence":0.8123,
///  "stream_time":12.48,"time":"2026-11-30T16:45:12.345Z"}
/// {"type":"detection_end","group":"smoke_alarm","class":"Smoke detector, smoke alarm","start":12.48,"end":18.24,
///  "duration":5.76,"peak_confidence":0.91,"mean_confidence":0.72,"windows":11,"reason":"hold_elapsed",
///  "time":"2026-11-30T16:45:20.345Z"}
/// {"type":"health","state":"overrun","message":"...","xruns":3,"time":"2026-11-30T16:45:20.345Z"}
/// ```
package enum EventJSON {
    /// Decimals of confidences (scores in 0...1).
    package static let confidenceDecimals = 4
    /// Decimals of stream times and durations (seconds).
    package static let timeDecimals = 3

    /// The object for a detection event: `"detection"` for an onset (`stream_time` is the onset's `start`),
    /// `"detection_end"` for an offset.
    package static func object(for event: DetectionEvent, time: Date) -> JSONObject {
        switch event {
        case .onset(let onset):
            return [
                "type": "detection",
                "group": .string(onset.group),
                "class": .string(onset.classLabel),
                "confidence": .number(Double(onset.confidence), decimals: confidenceDecimals),
                "stream_time": .number(onset.start, decimals: timeDecimals),
                "time": .string(timestamp(time)),
            ]
        case .offset(let offset):
            return [
                "type": "detection_end",
                "group": .string(offset.group),
                "class": .string(offset.classLabel),
                "start": .number(offset.start, decimals: timeDecimals),
                "end": .number(offset.end, decimals: timeDecimals),
                "duration": .number(offset.duration, decimals: timeDecimals),
                "peak_confidence": .number(Double(offset.peakConfidence), decimals: confidenceDecimals),
                "mean_confidence": .number(Double(offset.meanConfidence), decimals: confidenceDecimals),
                "windows": .int(offset.positiveWindows),
                "reason": .string(offset.reason.rawValue),
                "time": .string(timestamp(time)),
            ]
        }
    }

    /// The object for a health change: `type`, `state`, `message`, then `details` in order, then `time`
    /// (a detail named like one of those is ignored).
    package static func object(for health: HealthEvent, time: Date) -> JSONObject {
        var object: JSONObject = ["type": "health", "state": .string(health.state.rawValue), "message": .string(health.message)]
        for entry in health.details.entries where object[entry.key] == nil && entry.key != "time" {
            object[entry.key] = entry.value
        }
        object["time"] = .string(timestamp(time))
        return object
    }

    /// `date` as ISO 8601 in UTC with milliseconds (truncated, not rounded), e.g. `2026-11-30T16:45:12.345Z`.
    package static func timestamp(_ date: Date) -> String {
        let totalMilliseconds = (date.timeIntervalSince1970 * 1000).rounded(.down)
        guard totalMilliseconds.isFinite, abs(totalMilliseconds) < 1e17 else { return "1970-01-01T00:00:00.000Z" }
        let milliseconds = Int64(totalMilliseconds)
        var seconds = time_t(milliseconds / 1000)
        var fraction = Int(milliseconds % 1000)
        if fraction < 0 {
            fraction += 1000
            seconds -= 1
        }
        var parts = tm()
        guard gmtime_r(&seconds, &parts) != nil else { return "1970-01-01T00:00:00.000Z" }
        func pad(_ value: Int32, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(fraction), 3))Z"
    }
}
