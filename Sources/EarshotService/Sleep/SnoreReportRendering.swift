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

extension SnoreReport {
    /// The report as one JSON object (`"type":"snore_report"`), for other tools.
    ///
    /// Fields: `source`, `start`/`end` (ISO 8601 UTC, or null for a recording), `duration_seconds`,
    /// `audio_seconds` (a session's only: the audio heard, which the share and the rates are over),
    /// `snoring_minutes`, `snoring_percent`, `events`, `events_per_hour`, `snores`, `snores_per_hour`,
    /// `episodes` (`start`, `end` in seconds from the start, `minutes`, `events`, `snores`, `level_dbfs`,
    /// `peak_level_dbfs`), `loudest` (`time` in seconds, `level_dbfs`), `bin_seconds`, `bins` (`start`,
    /// `snoring_seconds`), and `snore_events` (`start`, `end`, `snores`, `peak_evidence`, `level_dbfs`,
    /// `peak_level_dbfs`, `peak_level_time`). Seconds have 2 decimals, levels 1, rates 2.
    package var json: JSONObject {
        func date(_ seconds: Double?) -> JSONValue {
            guard let startDate, let seconds else { return .null }
            // To the millisecond as the history stores its times (rounded), so the same event reads the same.
            let milliseconds = HistoryEvent.milliseconds(startDate.addingTimeInterval(seconds))
            return .string(EventJSON.timestamp(HistoryEvent.millisecondDate(milliseconds)))
        }
        func seconds(_ value: Double) -> JSONValue { .number(value, decimals: 2) }
        func level(_ value: Float) -> JSONValue { .number(Double(value), decimals: 1) }
        var object: JSONObject = [
            "type": "snore_report",
            "source": .string(source),
            "start": date(0),
            "end": date(duration),
            "duration_seconds": seconds(duration),
            "audio_seconds": seconds(audioSeconds),
            "snoring_minutes": .number(snoringMinutes, decimals: 2),
            "snoring_percent": .number(snoringPercent, decimals: 2),
            "events": .int(events.count),
            "events_per_hour": .number(eventsPerHour, decimals: 2),
            "snores": .int(snores),
            "snores_per_hour": .number(snoresPerHour, decimals: 2),
            "episodes": .array(episodes.map { episode in
                .object([
                    "start": seconds(episode.start), "end": seconds(episode.end),
                    "start_time": date(episode.start), "end_time": date(episode.end),
                    "minutes": .number(episode.snoringSeconds / 60, decimals: 2), "events": .int(episode.events),
                    "snores": .int(episode.snores), "level_dbfs": level(episode.levelDBFS),
                    "peak_level_dbfs": level(episode.peakLevelDBFS),
                ])
            }),
            "loudest": .array(loudest.map { moment in
                .object(["time": seconds(moment.time), "clock": date(moment.time), "level_dbfs": level(moment.levelDBFS)])
            }),
            "bin_seconds": seconds(binSeconds),
            "bins": .array(bins.map { bin in
                .object(["start": seconds(bin.start), "snoring_seconds": seconds(bin.snoringSeconds)])
            }),
            "snore_events": .array(events.map { event in
                .object([
                    "start": seconds(event.start), "end": seconds(event.end), "snores": .int(event.snores),
                    "peak_evidence": .number(Double(event.peakEvidence), decimals: 3),
                    "level_dbfs": level(event.levelDBFS), "peak_level_dbfs": level(event.peakLevelDBFS),
                    "peak_level_time": seconds(event.peakLevelTime),
                ])
            }),
        ]
        if startDate == nil { object["audio_seconds"] = nil }
        return object
    }

    /// A time in the report: the local clock time (`HH:MM:SS`) when the session has a wall-clock start, else the
    /// offset into the recording (`H:MM:SS`).
    package func timeText(_ seconds: Double, timeZone: TimeZone = LocalTime.zone()) -> String {
        timeText(seconds, zoneAt: { _ in timeZone })
    }

    /// As ``timeText(_:timeZone:)``, each clock time in the zone `zoneAt` gives for that instant (its own UTC
    /// offset, right across a daylight-saving change).
    package func timeText(_ seconds: Double, zoneAt: (Date) -> TimeZone) -> String {
        if let startDate {
            let date = startDate.addingTimeInterval(seconds)
            return Self.clock(date, timeZone: zoneAt(date), withSeconds: true)
        }
        return Self.offset(seconds)
    }

    /// A human summary, several lines, ending with a newline.
    package func text(timeZone: TimeZone = LocalTime.zone()) -> String {
        var lines: [String] = []
        let span = startDate.map { start in
            "\(Self.clock(start, timeZone: timeZone, withSeconds: false))-\(Self.clock(start.addingTimeInterval(duration), timeZone: timeZone, withSeconds: false)), "
        } ?? ""
        lines.append("snore report: \(source)")
        lines.append("  session      \(span)\(Self.minutesText(duration))")
        lines.append("  snoring      \(Self.minutesText(snoringSeconds)) (\(JSONValue.format(snoringPercent, decimals: 1)) % of the session)")
        lines.append("  events       \(events.count) (\(JSONValue.format(eventsPerHour, decimals: 1)) per hour), \(snores) snores (\(JSONValue.format(snoresPerHour, decimals: 1)) per hour)")
        lines.append("  episodes     \(episodes.count) (events less than \(Int(Self.defaultMergeGapSeconds / 60)) minutes apart merge)")
        for episode in episodes {
            lines.append("    \(timeText(episode.start, timeZone: timeZone))-\(timeText(episode.end, timeZone: timeZone))  \(Self.minutesText(episode.snoringSeconds)) snoring, \(episode.snores) snores, \(JSONValue.format(Double(episode.levelDBFS), decimals: 1)) dBFS (peak \(JSONValue.format(Double(episode.peakLevelDBFS), decimals: 1)))")
        }
        if !loudest.isEmpty {
            lines.append("  loudest      " + loudest.map {
                "\(timeText($0.time, timeZone: timeZone)) \(JSONValue.format(Double($0.levelDBFS), decimals: 1)) dBFS"
            }.joined(separator: ", ") + " (of the windows counted as snores)")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    package static func minutesText(_ seconds: Double) -> String {
        let minutes = Int((seconds / 60).rounded())
        return minutes >= 60 ? "\(minutes / 60) h \(minutes % 60) min" : "\(JSONValue.format(seconds / 60, decimals: 1)) min"
    }

    /// `H:MM:SS` of a non-negative number of seconds (rounded down to the second).
    package static func offset(_ seconds: Double) -> String {
        let total = seconds.isFinite ? max(0, Int(seconds.rounded(.down))) : 0
        let minutes = (total / 60) % 60, secs = total % 60
        return "\(total / 3600):" + (minutes < 10 ? "0" : "") + "\(minutes):" + (secs < 10 ? "0" : "") + "\(secs)"
    }

    /// `HH:MM` or `HH:MM:SS` of `date` in `timeZone`.
    package static func clock(_ date: Date, timeZone: TimeZone, withSeconds: Bool) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        let parts = calendar.dateComponents([.hour, .minute, .second], from: date)
        func two(_ value: Int?) -> String { let v = value ?? 0; return (v < 10 ? "0" : "") + "\(v)" }
        return "\(two(parts.hour)):\(two(parts.minute))" + (withSeconds ? ":\(two(parts.second))" : "")
    }

    // MARK: SVG

    /// Geometry of the SVG chart, in SVG user units (pixels).
    package struct ChartLayout: Sendable, Equatable {
        package var width = 960.0
        package var height = 350.0
        package var left = 72.0
        package var right = 16.0
        package var top = 56.0
        /// Height of the bar area.
        package var plotHeight = 190.0

        package init() {}
    }

    /// The timeline as a standalone SVG document: one bar per bin (`<rect class="bar">`, `snoringSeconds / length`
    /// of the plot height, zero-height bars included so that bar `i` is bin `i`), the episodes as a strip below
    /// (`<rect class="episode">`), the loudest moments as markers (`<circle class="loudest">`), hour ticks (clock
    /// time or offset), and a title line. Every bar and marker has a `<title>` tooltip.
    ///
    /// - Parameter timeZone: the zone of every clock time (one that knows its rules, such as Foundation's
    ///   `TimeZone.current`, or a fixed offset for tests).
    package func svg(timeZone: TimeZone, layout: ChartLayout = ChartLayout()) -> String {
        svg(zoneAt: { _ in timeZone }, layout: layout)
    }

    /// As ``svg(timeZone:layout:)``, each clock time (subtitle, ticks, tooltips) in the zone `zoneAt` gives for
    /// that instant: by default ``LocalTime/zone(at:)``, the C library's offset in force then, so that a night across
    /// a daylight-saving change shows `01:59-03:00`, not `01:59-02:00`.
    package func svg(zoneAt: (Date) -> TimeZone = { LocalTime.zone(at: $0) }, layout: ChartLayout = ChartLayout()) -> String {
        func clock(_ date: Date, withSeconds: Bool) -> String {
            Self.clock(date, timeZone: zoneAt(date), withSeconds: withSeconds)
        }
        func timeText(_ seconds: Double) -> String { self.timeText(seconds, zoneAt: zoneAt) }
        let plotWidth = layout.width - layout.left - layout.right
        let baseline = layout.top + layout.plotHeight
        let span = max(duration, 1)
        func x(_ seconds: Double) -> Double { layout.left + plotWidth * min(max(seconds, 0), span) / span }
        func n(_ value: Double) -> String { JSONValue.format(value, decimals: 1) }
        func escape(_ text: String) -> String {
            text.replacing("&", with: "&amp;").replacing("<", with: "&lt;")
                .replacing(">", with: "&gt;").replacing("\"", with: "&quot;")
        }
        var out = """
            <?xml version="1.0" encoding="UTF-8"?>
            <svg xmlns="http://www.w3.org/2000/svg" width="\(n(layout.width))" height="\(n(layout.height))" viewBox="0 0 \(n(layout.width)) \(n(layout.height))" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">
            <style>.bar{fill:#3b6fb6}.episode{fill:#e3a33b}.loudest{fill:#c0392b}.grid{stroke:#ddd;stroke-width:1}.axis{stroke:#444;stroke-width:1}</style>
            <rect x="0" y="0" width="\(n(layout.width))" height="\(n(layout.height))" fill="#fff"/>

            """
        let headline = "Snoring \(Self.minutesText(snoringSeconds)) (\(JSONValue.format(snoringPercent, decimals: 1)) %) of \(Self.minutesText(duration)), \(episodes.count) episode\(episodes.count == 1 ? "" : "s"), \(JSONValue.format(eventsPerHour, decimals: 1)) events/h"
        out += "<text x=\"\(n(layout.left))\" y=\"22\" font-size=\"15\" font-weight=\"bold\">\(escape(headline))</text>\n"
        let subtitle = startDate.map { start in
            "\(escape(source)): \(clock(start, withSeconds: false))-\(clock(start.addingTimeInterval(duration), withSeconds: false)), snoring per \(Int(binSeconds / 60))-minute bin"
        } ?? "\(escape(source)): snoring per \(Int(binSeconds / 60))-minute bin"
        out += "<text x=\"\(n(layout.left))\" y=\"40\" fill=\"#555\">\(subtitle)</text>\n"

        // Percent grid and labels.
        for percent in stride(from: 0, through: 100, by: 25) {
            let y = baseline - layout.plotHeight * Double(percent) / 100
            out += "<line class=\"grid\" x1=\"\(n(layout.left))\" y1=\"\(n(y))\" x2=\"\(n(layout.left + plotWidth))\" y2=\"\(n(y))\"/>\n"
            out += "<text x=\"\(n(layout.left - 6))\" y=\"\(n(y + 4))\" text-anchor=\"end\">\(percent) %</text>\n"
        }

        // Bars.
        for bin in bins {
            let x0 = x(bin.start), x1 = x(bin.start + bin.length)
            let height = layout.plotHeight * min(1, bin.fraction)
            let gap = min(1.0, (x1 - x0) * 0.15)
            let tip = "\(timeText(bin.start)): \(JSONValue.format(bin.snoringSeconds / 60, decimals: 1)) min snoring"
            out += "<rect class=\"bar\" x=\"\(n(x0 + gap / 2))\" y=\"\(n(baseline - height))\" width=\"\(n(max(0, x1 - x0 - gap)))\" height=\"\(n(height))\"><title>\(escape(tip))</title></rect>\n"
        }

        // Loudest moments, above the plot.
        for moment in loudest {
            let tip = "loudest snore: \(timeText(moment.time)), \(JSONValue.format(Double(moment.levelDBFS), decimals: 1)) dBFS"
            out += "<circle class=\"loudest\" cx=\"\(n(x(moment.time)))\" cy=\"\(n(layout.top - 6))\" r=\"4\"><title>\(escape(tip))</title></circle>\n"
        }

        // Axis and hour ticks.
        out += "<line class=\"axis\" x1=\"\(n(layout.left))\" y1=\"\(n(baseline))\" x2=\"\(n(layout.left + plotWidth))\" y2=\"\(n(baseline))\"/>\n"
        let tickStep: Double = duration > 4 * 3600 ? 3600 : duration > 3600 ? 1800 : duration > 1200 ? 600 : 300
        var tick = 0.0
        if let startDate {
            // Ticks on whole clock hours (or half hours...) of the local time.
            let offset = Double(zoneAt(startDate).secondsFromGMT(for: startDate))
            let local = startDate.timeIntervalSince1970 + offset
            tick = (local / tickStep).rounded(.up) * tickStep - local
        }
        while tick <= duration + 1e-9 {
            let label = startDate.map { clock($0.addingTimeInterval(tick), withSeconds: false) }
                ?? String(Self.offset(tick).dropLast(3))
            out += "<line class=\"axis\" x1=\"\(n(x(tick)))\" y1=\"\(n(baseline))\" x2=\"\(n(x(tick)))\" y2=\"\(n(baseline + 5))\"/>\n"
            out += "<text x=\"\(n(x(tick)))\" y=\"\(n(baseline + 18))\" text-anchor=\"middle\">\(label)</text>\n"
            tick += tickStep
        }

        // Episodes strip.
        let stripY = baseline + 30
        out += "<text x=\"\(n(layout.left - 6))\" y=\"\(n(stripY + 10))\" text-anchor=\"end\">episodes</text>\n"
        out += "<rect x=\"\(n(layout.left))\" y=\"\(n(stripY))\" width=\"\(n(plotWidth))\" height=\"14\" fill=\"#f3f3f3\"/>\n"
        let centers = episodes.map { (x($0.start) + x($0.end)) / 2 }
        for (index, episode) in episodes.enumerated() {
            let x0 = x(episode.start)
            let width = max(1.5, x(episode.end) - x0)
            // Room for a loudness label: no other episode's centre within 60 units.
            let roomy = centers.enumerated().allSatisfy { $0.offset == index || abs($0.element - centers[index]) >= 60 }
            let tip = "\(timeText(episode.start))-\(timeText(episode.end)): \(JSONValue.format(episode.snoringSeconds / 60, decimals: 1)) min snoring, \(episode.snores) snores, \(JSONValue.format(Double(episode.levelDBFS), decimals: 1)) dBFS"
            out += "<rect class=\"episode\" x=\"\(n(x0))\" y=\"\(n(stripY))\" width=\"\(n(width))\" height=\"14\"><title>\(escape(tip))</title></rect>\n"
            if roomy {
                // Loudness under each episode that has room for it.
                out += "<text x=\"\(n(x0 + width / 2))\" y=\"\(n(stripY + 27))\" text-anchor=\"middle\" font-size=\"10\" fill=\"#555\">\(JSONValue.format(Double(episode.levelDBFS), decimals: 1)) dBFS</text>\n"
            }
        }
        let legendY = stripY + 50
        out += "<rect class=\"bar\" x=\"\(n(layout.left))\" y=\"\(n(legendY - 10))\" width=\"12\" height=\"12\"/><text x=\"\(n(layout.left + 18))\" y=\"\(n(legendY))\">share of each bin spent snoring</text>\n"
        out += "<rect class=\"episode\" x=\"\(n(layout.left + 230))\" y=\"\(n(legendY - 10))\" width=\"12\" height=\"12\"/><text x=\"\(n(layout.left + 248))\" y=\"\(n(legendY))\">episode</text>\n"
        out += "<circle class=\"loudest\" cx=\"\(n(layout.left + 326))\" cy=\"\(n(legendY - 4))\" r=\"4\"/><text x=\"\(n(layout.left + 336))\" y=\"\(n(legendY))\">loudest snores</text>\n"
        out += "</svg>\n"
        return out
    }
}
