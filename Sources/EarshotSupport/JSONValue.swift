import FoundationEssentials
import Glibc
import Dispatch

/// A JSON value with ordered object keys and explicit number rounding, encoded to one line of text.
///
/// Used for the event socket's JSON lines and the daemon's status reply. Strings are escaped per RFC 8259
/// (`"`, `\`, and control characters below U+0020); non-finite numbers encode as `null`.
public indirect enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int)
    /// A number; `decimals` rounds it to that many fractional digits (then trailing zeros are trimmed, keeping one:
    /// `0.8123`, `12.48`, `1.0`); nil writes the shortest text that reads back the same `Double`.
    case number(Double, decimals: Int?)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    /// The compact JSON text (no newline).
    public var encoded: String {
        var out = ""
        encode(into: &out)
        return out
    }

    package func encode(into out: inout String) {
        switch self {
        case .null: out += "null"
        case .bool(let value): out += value ? "true" : "false"
        case .int(let value): out += String(value)
        case .number(let value, let decimals): out += JSONValue.format(value, decimals: decimals)
        case .string(let value): JSONValue.appendQuoted(value, to: &out)
        case .array(let values):
            out += "["
            for (index, value) in values.enumerated() {
                if index > 0 { out += "," }
                value.encode(into: &out)
            }
            out += "]"
        case .object(let object):
            out += "{"
            for (index, entry) in object.entries.enumerated() {
                if index > 0 { out += "," }
                JSONValue.appendQuoted(entry.key, to: &out)
                out += ":"
                entry.value.encode(into: &out)
            }
            out += "}"
        }
    }

    /// A number as JSON text: rounded to `decimals` digits with trailing zeros trimmed (one kept), or the shortest
    /// round-trip text when `decimals` is nil; `null` for NaN and infinities.
    public static func format(_ value: Double, decimals: Int?) -> String {
        guard value.isFinite else { return "null" }
        guard let decimals else {
            if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) + ".0" }
            return "\(value)"  // Swift's shortest round-trip form, e.g. 0.1, 1e-05, 1e+20: all valid JSON
        }
        var text = String(cFormat: "%.\(max(0, min(decimals, 17)))f", value)
        if text.contains(".") {
            while text.hasSuffix("0") { text.removeLast() }
            if text.hasSuffix(".") { text += "0" }
        } else {
            text += ".0"
        }
        if text.hasPrefix("-"), text.dropFirst().allSatisfy({ $0 == "0" || $0 == "." }) { text.removeFirst() }
        return text
    }

    /// Appends `text` as a quoted, escaped JSON string.
    public static func appendQuoted(_ text: String, to out: inout String) {
        out += "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{08}": out += "\\b"
            case "\u{0C}": out += "\\f"
            case let control where control.value < 0x20:
                let hex = String(control.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByFloatLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(floatLiteral value: Double) { self = .number(value, decimals: nil) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) { self = .object(JSONObject(elements)) }
    public init(nilLiteral: ()) { self = .null }
}

/// A JSON object whose keys keep the order they were added in (a later value for the same key replaces the earlier
/// one in place).
public struct JSONObject: Sendable, Equatable, ExpressibleByDictionaryLiteral {
    public struct Entry: Sendable, Equatable {
        public var key: String
        public var value: JSONValue
    }

    public private(set) var entries: [Entry] = []

    public init() {}

    public init(_ pairs: [(String, JSONValue)]) {
        for (key, value) in pairs { self[key] = value }
    }

    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self.init(elements)
    }

    /// An object with these entries, in order. - Precondition: the keys are distinct.
    package init(uniqueEntries pairs: [(String, JSONValue)]) {
        entries = pairs.map { Entry(key: $0.0, value: $0.1) }
    }

    /// The value for `key`; setting nil removes the key.
    public subscript(key: String) -> JSONValue? {
        get { entries.first { $0.key == key }?.value }
        set {
            if let index = entries.firstIndex(where: { $0.key == key }) {
                if let newValue { entries[index].value = newValue } else { entries.remove(at: index) }
            } else if let newValue {
                entries.append(Entry(key: key, value: newValue))
            }
        }
    }

    /// Appends the entries of `other` (replacing keys already present, in place).
    public mutating func merge(_ other: JSONObject) {
        for entry in other.entries { self[entry.key] = entry.value }
    }

    /// The compact JSON text (no newline).
    public var encoded: String { JSONValue.object(self).encoded }
}
