import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio
import EarshotModel

/// How `earshot analyze` prints results (Earshot's own; Sound Analysis has no output formats).
public enum AnalysisOutputFormat: String, CaseIterable, Sendable {
    /// One line per window: `x.wav 0.48-1.44s  Speech 93.1%  Music 5.2%`.
    case text
    /// One JSON object per line: `{"file":"x.wav","start":0.48,"duration":0.96,"classes":[{"class":"Speech","confidence":0.931},...]}`
    /// (the classes as the daemon's window lines carry them, ``AnalysisReportFormatter/classesJSON(_:)``).
    case jsonl
    /// A header, then one row per window per class: `file,start,duration,rank,label,confidence`.
    case csv
}

/// Formats window results and per-file summaries as text, JSON lines or CSV (RFC 4180 quoting): `earshot analyze`'s
/// output (Earshot's own; no Sound Analysis counterpart).
///
/// One result is one physical line whatever the file is called: in text, control characters of the file name are
/// escaped (``singleLine(_:)``: a newline prints as `\n`); in JSON they are escaped as JSON requires; in CSV a name
/// holding a comma, quote or line break is quoted (RFC 4180, so a CSV reader gets the name back exactly, though the
/// quoted field spans lines).
///
/// Numbers: times in seconds with up to 3 decimals in JSON/CSV (2 in text), confidences with 4 decimals in
/// JSON/CSV (trailing zeros dropped, e.g. `0.93`; a class's confidence in JSON keeps one, `1.0`, as the daemon
/// writes it), percentages with 1 decimal in text. A number that is not finite (which sanitized input never
/// produces) is written `null` in JSON, an empty field in CSV and `n/a` in text, never `nan`, so the output stays
/// valid JSON and CSV.
public struct AnalysisReportFormatter: Sendable {
    /// The output format.
    public let format: AnalysisOutputFormat
    /// Classes per window, highest first (>= 1).
    public let top: Int

    /// A formatter for `format` printing the `top` classes of each window (at least 1).
    public init(format: AnalysisOutputFormat, top: Int) {
        self.format = format
        self.top = max(1, top)
    }

    /// The line printed once before any result (CSV header), or nil.
    public var header: String? {
        format == .csv ? "file,start,duration,rank,label,confidence" : nil
    }

    /// The output for one window: one line (text, JSON) or `top` lines (CSV), without trailing newline.
    /// A gated result (no classifications) prints its level instead of classes in text and an empty list in JSON.
    public func lines(file: String, result: ClassificationResult) -> [String] {
        let best = result.classifications.prefix(top)
        let start = result.timeRange.start, duration = result.timeRange.duration
        switch format {
        case .text:
            var line = "\(Self.singleLine(file)) \(Self.fixed(start, 2))-\(Self.fixed(start + duration, 2))s"
            if result.isGated {
                line += "  (quiet: \(Self.fixed(Double(result.levelDBFS), 1)) dBFS)"
            }
            for item in best {
                let percent = item.confidence * 100
                line += "  \(item.identifier) \(percent.isFinite ? Self.fixed(percent, 1) + "%" : "n/a")"
            }
            return [line]
        case .jsonl:
            let classes = Self.classesJSON(best).encoded
            return ["{\"file\":\(Self.jsonString(file)),\"start\":\(Self.number(start, 3)),\"duration\":\(Self.number(duration, 3)),\"classes\":\(classes)}"]
        case .csv:
            return best.enumerated().map { rank, item in
                [Self.csvField(file), Self.csvNumber(start, 3), Self.csvNumber(duration, 3), String(rank + 1),
                 Self.csvField(item.identifier), Self.csvNumber(item.confidence, 4)].joined(separator: ",")
            }
        }
    }

    /// The summary of one file: each label's share of the windows where it was the top class, largest first.
    /// Text: `x.wav summary  Speech 62.5% (5 of 8 windows)` per label; JSON: one
    /// `{"file":"x.wav","windows":8,"summary":[{"label":"Speech","share":0.625,"windows":5},...]}` line (`windows`:
    /// the windows counted, then each label's); CSV: one row per label with empty
    /// start and duration, the rank, the label and the share in the confidence column.
    public func summaryLines(file: String, tally: TopClassTally) -> [String] {
        let shares = tally.shares
        switch format {
        case .text:
            let file = Self.singleLine(file)
            if shares.isEmpty { return ["\(file) summary  no classified windows"] }
            let windows = tally.windowCount == 1 ? "window" : "windows"
            return shares.map { "\(file) summary  \($0.label) \(Self.fixed($0.share * 100, 1))% (\($0.windows) of \(tally.windowCount) \(windows))" }
        case .jsonl:
            let items = shares.map {
                "{\"label\":\(Self.jsonString($0.label)),\"share\":\(Self.number($0.share, 4)),\"windows\":\($0.windows)}"
            }
            return ["{\"file\":\(Self.jsonString(file)),\"windows\":\(tally.windowCount),\"summary\":[\(items.joined(separator: ","))]}"]
        case .csv:
            return shares.enumerated().map { rank, item in
                [Self.csvField(file), "", "", String(rank + 1), Self.csvField(item.label), Self.csvNumber(item.share, 4)].joined(separator: ",")
            }
        }
    }

    /// A window's classes, highest first, in the one shape every JSON line of Earshot carries them (`earshot
    /// analyze --format jsonl`, the daemon's socket window lines and status reply, `earshot listen --json`):
    /// `[{"class":"Speech","confidence":0.9123},...]`, confidences to 4 decimals as ``JSONValue/format(_:decimals:)``
    /// writes them (`0.931`, `1.0`; `null` when not finite).
    package static func classesJSON(_ classes: some Sequence<Classification>) -> JSONValue {
        .array(classes.map { .object(["class": .string($0.identifier), "confidence": .number($0.confidence, decimals: 4)]) })
    }

    /// `value` with exactly `decimals` decimals (`%.*f`); `n/a` when it is not finite.
    package static func fixed(_ value: Double, _ decimals: Int) -> String {
        value.isFinite ? String(cFormat: "%.\(decimals)f", value) : "n/a"
    }

    /// `value` rounded to `decimals` decimals, trailing zeros (and a bare point) dropped: `0.93`, `1`, `0`; JSON's
    /// `null` when it is not finite.
    package static func number(_ value: Double, _ decimals: Int) -> String {
        guard value.isFinite else { return "null" }
        var text = fixed(value, decimals)
        if text.contains(".") {
            while text.hasSuffix("0") { text.removeLast() }
            if text.hasSuffix(".") { text.removeLast() }
        }
        return text == "-0" ? "0" : text
    }

    /// ``number(_:_:)`` for a CSV field: empty when the value is not finite.
    package static func csvNumber(_ value: Double, _ decimals: Int) -> String {
        value.isFinite ? number(value, decimals) : ""
    }

    /// A JSON string literal (quotes, backslashes and control characters escaped as `JSONValue` escapes them).
    package static func jsonString(_ text: String) -> String {
        var result = ""
        JSONValue.appendQuoted(text, to: &result)
        return result
    }

    /// `text` on one line for a terminal: control characters (U+0000-U+001F, U+007F-U+009F) become escapes,
    /// `\n`, `\r`, `\t` or `\xHH` (e.g. ESC is `\x1B`); everything else is unchanged.
    public static func singleLine(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isControl) else { return text }
        var result = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            case _ where isControl(scalar): result += String(cFormat: "\\x%02X", scalar.value)
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    /// A CSV field, quoted when it holds a comma, a quote or a line break (AudioSet labels hold commas).
    package static func csvField(_ text: String) -> String {
        guard text.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return text }
        return "\"" + text.replacing("\"", with: "\"\"") + "\""
    }
}

/// Counts, per label, the windows where it is the top class: the "percentage of the recording" summary of the
/// Sound Analysis genre-detector story (count of windows per top label / all classified windows), which computes it in
/// its observer's `requestDidComplete`; Sound Analysis itself has no such type.
public struct TopClassTally: Sendable {
    /// Windows counted per label.
    public private(set) var counts: [String: Int] = [:]
    /// Windows with a top class (gated windows are not counted).
    public private(set) var windowCount = 0

    /// An empty tally.
    public init() {}

    /// Counts `result`'s top class (ignored when the window was gated).
    public mutating func add(_ result: ClassificationResult) {
        guard let first = result.classifications.first else { return }
        counts[first.identifier, default: 0] += 1
        windowCount += 1
    }

    /// Each label's share of the counted windows (0...1), largest first (ties by label).
    public var shares: [(label: String, share: Double, windows: Int)] {
        guard windowCount > 0 else { return [] }
        return counts.map { (label: $0.key, share: Double($0.value) / Double(windowCount), windows: $0.value) }
            .sorted { $0.windows != $1.windows ? $0.windows > $1.windows : $0.label < $1.label }
    }
}
