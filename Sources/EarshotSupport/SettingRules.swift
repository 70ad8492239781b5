import FoundationEssentials
import Glibc
import Dispatch

/// How one setting's text becomes a value, and what is allowed, shared by the configuration file and the command
/// line so that both say the same thing about the same value.
package struct SettingRule<Value>: Sendable {
    /// Completes "must be ...": what is allowed, with the unit (e.g. "in [0, 1)", "in [0.96, 10] seconds").
    package let allowed: String
    package let convert: @Sendable (String) -> Value?
    package let isValid: @Sendable (Value) -> Bool

    /// The value of `text`, or nil when it does not convert or is out of range.
    package func parse(_ text: String) -> Value? {
        guard let value = convert(text), isValid(value) else { return nil }
        return value
    }

    /// "must be ..." for a message.
    package var requirement: String { "must be \(allowed)" }

    /// "must be ..." for `text`, saying what is wrong when `text` is a valid value followed by more words: a unit
    /// (`-50 dB`) or a `#` comment, which the configuration file keeps as part of the value.
    package func requirement(for text: String) -> String {
        guard let space = text.firstIndex(where: { $0 == " " || $0 == "\t" }) else { return requirement }
        let first = String(text[..<space])
        let rest = text[space...].trimmingSpaces()
        guard convert(first) != nil, !rest.isEmpty else { return requirement }
        if rest.hasPrefix("#") {
            return "\(requirement); '#' after a value is not a comment (write \(first), and put the comment on a line of its own or after \" ;\")"
        }
        return "\(requirement), as a plain number without a unit or other text after it (write \(first))"
    }
}

/// The rules of every setting. Ranges are sanity bounds: they keep a typo from allocating gigabytes or making the
/// daemon useless, and are documented with each key in `config/earshotd.conf`.
package enum SettingRules {
    package static func finiteNumber(_ text: String) -> Double? {
        guard let value = Double(text), value.isFinite else { return nil }
        return value
    }

    package static func number(in range: ClosedRange<Double>, _ allowed: String) -> SettingRule<Double> {
        SettingRule(allowed: allowed, convert: finiteNumber, isValid: { range.contains($0) })
    }

    package static func wholeNumber(in range: ClosedRange<Int>, unit: String = "") -> SettingRule<Int> {
        let suffix = unit.isEmpty ? "" : " \(unit)"
        return SettingRule(
            allowed: "a whole number in [\(range.lowerBound), \(range.upperBound)]\(suffix)",
            convert: { Int($0) }, isValid: { range.contains($0) })
    }

    // [capture]
    package static let device = SettingRule<String>(
        allowed: "an ALSA PCM name such as default, hw:1,0 or plughw:CARD=Mic,DEV=0", convert: { $0 },
        isValid: { !$0.isEmpty })
    package static let inputSampleRate = wholeNumber(in: 8_000...192_000, unit: "Hz")

    // [analysis]
    package static let windowDuration = number(in: 0.96...10, "in [0.96, 10] seconds")
    package static let overlapFactor = SettingRule<Double>(
        allowed: "in [0, 1)", convert: finiteNumber, isValid: { $0 >= 0 && $0 < 1 })
    package static let gateThresholdDBFS = number(in: -120...0, "in [-120, 0] dBFS")
    package static let silenceMinutes = number(in: 0...1440, "in [0, 1440] minutes (0 turns the event off)")

    // [detection]
    /// `alarm_mute_minutes`, `mute_minutes`, and the socket's `{"cmd":"mute","minutes":N}`: 1 to 1440 (a day).
    package static let muteMinutes = wholeNumber(in: 1...1440, unit: "minutes")

    // [group.NAME]
    package static let threshold = SettingRule<Float>(
        allowed: "in [0, 1]", convert: { finiteNumber($0).map(Float.init) }, isValid: { (0...1).contains($0) })
    package static let onsetCount = wholeNumber(in: 1...100)
    package static let holdSeconds = number(in: 0...3600, "in [0, 3600] seconds")
    package static let minIntervalSeconds = number(in: 0...86_400, "in [0, 86400] seconds")
    /// `[group.loud] level_dbfs` and `min_seconds`.
    package static let levelDBFS = number(in: -120...0, "in [-120, 0] dBFS")
    package static let loudMinSeconds = number(in: 0...600, "in [0, 600] seconds")

    // [output]
    /// `sun_path` holds 108 bytes including the terminating NUL.
    package static let maximumSocketPathBytes = 107
    package static let socketPath = SettingRule<String>(
        allowed: "a path of 1 to \(maximumSocketPathBytes) bytes (the limit of a Unix socket address)",
        convert: { $0 }, isValid: { !$0.isEmpty && $0.utf8.count <= maximumSocketPathBytes })
    package static let socketMode = SettingRule<UInt32>(
        allowed: "an octal mode from 0000 to 0777, e.g. 0660",
        convert: { text in
            guard (3...4).contains(text.count), text.allSatisfy({ ("0"..."7").contains($0) }) else { return nil }
            return UInt32(text, radix: 8)
        },
        isValid: { $0 <= 0o777 })
    package static let clientQueueKiB = wholeNumber(in: 16...65_536, unit: "KiB")
    package static let maxClients = wholeNumber(in: 1...4_096)
    package static let stalledClientSeconds = wholeNumber(in: 1...86_400, unit: "seconds")

    /// The uid of a user name or a decimal uid (`getpwnam`), nil for an unknown name.
    package static func userID(_ text: String) -> UInt32? {
        if let uid = UInt32(text) { return uid }
        guard let entry = getpwnam(text) else { return nil }
        return entry.pointee.pw_uid
    }

    // [clips]
    package static let clipSeconds = number(in: 0...30, "in [0, 30] seconds")
    package static let maxClips = wholeNumber(in: 1...100_000)
    package static let clipRetentionDays = wholeNumber(in: 1...3_650, unit: "days")

    // booleans
    package static let flag = SettingRule<Bool>(
        allowed: "true or false (or yes/no, on/off, 1/0)",
        convert: { text in
            switch text.lowercased() {
            case "true", "yes", "on", "1": true
            case "false", "no", "off", "0": false
            default: nil
            }
        },
        isValid: { _ in true })

    /// A group name: what events, config sections and socket filters call a group.
    package static func isValidGroupName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 64
            && name.utf8.allSatisfy { (0x61...0x7a).contains($0) || (0x30...0x39).contains($0) || $0 == 0x5f }
    }

    /// Splits a list value. Class labels contain commas, so `classes` uses `|` only; group names cannot contain
    /// either, so `watch` and `--watch` accept `|` and `,`. Items are trimmed; empty items are dropped.
    package static func listItems(_ text: String, separators: Set<Character>) -> [String] {
        text.split(whereSeparator: { separators.contains($0) })
            .map { $0.trimmingSpaces() }
            .filter { !$0.isEmpty }
    }

    package static let classSeparators: Set<Character> = ["|"]
    /// Separators of group-name lists (`[detection] watch`, `[notify] groups`, `[clips] groups`, `--watch`): `|`,
    /// `,` or spaces, all alike (a group name holds only lowercase letters, digits and `_`).
    package static let groupSeparators: Set<Character> = ["|", ",", " ", "\t"]

    /// Formats a value the way the configuration file writes it (for messages and the shipped file's test).
    package static func format(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int(value)) : String(value)
    }
}
