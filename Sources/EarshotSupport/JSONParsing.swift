import FoundationEssentials

/// Why a text is not JSON: what was wrong and at which byte (0-based).
package struct JSONParseError: Error, Equatable, CustomStringConvertible {
    package var reason: String
    package var offset: Int
    package var description: String { "\(reason) at byte \(offset)" }

    package init(reason: String, offset: Int) {
        self.reason = reason
        self.offset = offset
    }
}

extension JSONValue {
    /// The deepest nesting of arrays and objects `parse` accepts: client requests and file headers are flat, and a
    /// bound keeps a hostile line from exhausting the stack.
    package static let maximumParseDepth = 64

    /// Parses one JSON text (RFC 8259) in UTF-8: an integer without fraction or exponent that fits `Int` becomes
    /// `.int`, any other number `.number(_, decimals: nil)`; object keys keep their order (a repeated key keeps its
    /// last value). Whitespace may surround the value; nothing else may follow it.
    /// - Throws: ``JSONParseError`` naming the first problem and its byte offset (invalid syntax or UTF-8, a lone
    ///   surrogate escape, nesting deeper than ``maximumParseDepth``).
    package static func parse<Bytes: Collection<UInt8>>(_ bytes: Bytes) throws(JSONParseError) -> JSONValue {
        let array = Array(bytes)
        var parser = JSONParser(bytes: array)
        parser.skipWhitespace()
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.position == array.count else { throw parser.error("unexpected text after the value") }
        return value
    }

    /// Parses `text` as ``parse(_:)`` does.
    package static func parse(_ text: String) throws(JSONParseError) -> JSONValue { try parse(Array(text.utf8)) }

    /// The value for `key` when this is an object.
    package subscript(key: String) -> JSONValue? {
        if case .object(let object) = self { object[key] } else { nil }
    }

    package var stringValue: String? { if case .string(let value) = self { value } else { nil } }
    package var boolValue: Bool? { if case .bool(let value) = self { value } else { nil } }
    package var arrayValue: [JSONValue]? { if case .array(let value) = self { value } else { nil } }
    package var objectValue: JSONObject? { if case .object(let value) = self { value } else { nil } }
    package var isNull: Bool { self == .null }

    /// Any number as a `Double`.
    package var doubleValue: Double? {
        switch self {
        case .int(let value): Double(value)
        case .number(let value, _): value
        default: nil
        }
    }

    /// An integer, or a number with no fractional part that fits `Int`.
    package var intValue: Int? {
        switch self {
        case .int(let value): value
        case .number(let value, _): value == value.rounded() ? Int(exactly: value) : nil
        default: nil
        }
    }

    /// An array whose elements are all integers (`intValue`).
    package var intArrayValue: [Int]? {
        guard let array = arrayValue else { return nil }
        var result: [Int] = []
        result.reserveCapacity(array.count)
        for element in array {
            guard let value = element.intValue else { return nil }
            result.append(value)
        }
        return result
    }
}

/// A recursive-descent JSON reader over UTF-8 bytes.
private struct JSONParser {
    let bytes: [UInt8]
    var position = 0

    func error(_ reason: String) -> JSONParseError { JSONParseError(reason: reason, offset: position) }

    mutating func skipWhitespace() {
        while position < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[position]) { position += 1 }
    }

    mutating func value(depth: Int) throws(JSONParseError) -> JSONValue {
        guard position < bytes.count else { throw error("unexpected end of the text") }
        switch bytes[position] {
        case UInt8(ascii: "{"): return try object(depth: depth + 1)
        case UInt8(ascii: "["): return try array(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw error("unexpected character")
        }
    }

    mutating func literal(_ word: StaticString) throws(JSONParseError) {
        let count = word.utf8CodeUnitCount
        guard position + count <= bytes.count else { throw error("unexpected end of the text") }
        for offset in 0..<count where bytes[position + offset] != word.utf8Start[offset] {
            throw error("unexpected character")
        }
        position += count
    }

    mutating func object(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= JSONValue.maximumParseDepth else { throw error("nesting deeper than \(JSONValue.maximumParseDepth)") }
        position += 1
        var entries: [(String, JSONValue)] = []
        var index: [String: Int] = [:]
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
            position += 1
            return .object(JSONObject())
        }
        while true {
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { throw error("expected a key") }
            let key = try string()
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else { throw error("expected ':'") }
            position += 1
            skipWhitespace()
            let element = try value(depth: depth)
            if let existing = index[key] { entries[existing].1 = element } else {
                index[key] = entries.count
                entries.append((key, element))
            }
            skipWhitespace()
            guard position < bytes.count else { throw error("unexpected end of the text") }
            if bytes[position] == UInt8(ascii: ",") { position += 1; continue }
            if bytes[position] == UInt8(ascii: "}") { position += 1; break }
            throw error("expected ',' or '}'")
        }
        return .object(JSONObject(uniqueEntries: entries))
    }

    mutating func array(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= JSONValue.maximumParseDepth else { throw error("nesting deeper than \(JSONValue.maximumParseDepth)") }
        position += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
            position += 1
            return .array([])
        }
        while true {
            skipWhitespace()
            elements.append(try value(depth: depth))
            skipWhitespace()
            guard position < bytes.count else { throw error("unexpected end of the text") }
            if bytes[position] == UInt8(ascii: ",") { position += 1; continue }
            if bytes[position] == UInt8(ascii: "]") { position += 1; break }
            throw error("expected ',' or ']'")
        }
        return .array(elements)
    }

    mutating func hexQuad() throws(JSONParseError) -> UInt32 {
        guard position + 4 <= bytes.count else { throw error("unexpected end of the text") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[position]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw error("bad \\u escape")
            }
            value = value * 16 + digit
            position += 1
        }
        return value
    }

    mutating func string() throws(JSONParseError) -> String {
        position += 1
        var utf8: [UInt8] = []
        while true {
            guard position < bytes.count else { throw error("unterminated string") }
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") { position += 1; break }
            if byte < 0x20 { throw error("control character in a string") }
            if byte != UInt8(ascii: "\\") {
                utf8.append(byte)
                position += 1
                continue
            }
            position += 1
            guard position < bytes.count else { throw error("unterminated string") }
            let escape = bytes[position]
            position += 1
            switch escape {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(escape)
            case UInt8(ascii: "b"): utf8.append(0x08)
            case UInt8(ascii: "f"): utf8.append(0x0C)
            case UInt8(ascii: "n"): utf8.append(0x0A)
            case UInt8(ascii: "r"): utf8.append(0x0D)
            case UInt8(ascii: "t"): utf8.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hexQuad()
                if (0xD800...0xDBFF).contains(scalar) {
                    guard position + 1 < bytes.count, bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u") else {
                        throw error("lone surrogate escape")
                    }
                    position += 2
                    let low = try hexQuad()
                    guard (0xDC00...0xDFFF).contains(low) else { throw error("lone surrogate escape") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(scalar) {
                    throw error("lone surrogate escape")
                }
                guard let unicode = Unicode.Scalar(scalar) else { throw error("bad \\u escape") }
                utf8.append(contentsOf: Array(String(Character(unicode)).utf8))
            default: throw error("bad escape")
            }
        }
        guard let text = String(validating: utf8, as: UTF8.self) else { throw error("invalid UTF-8 in a string") }
        return text
    }

    mutating func number() throws(JSONParseError) -> JSONValue {
        let start = position
        var isInteger = true
        if bytes[position] == UInt8(ascii: "-") { position += 1 }
        func digits(_ parser: inout JSONParser) -> Int {
            let from = parser.position
            while parser.position < parser.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(parser.bytes[parser.position]) {
                parser.position += 1
            }
            return parser.position - from
        }
        guard position < bytes.count else { throw error("unexpected end of the text") }
        if bytes[position] == UInt8(ascii: "0") {
            position += 1
        } else if digits(&self) == 0 {
            throw error("bad number")
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            isInteger = false
            position += 1
            guard digits(&self) > 0 else { throw error("bad number") }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
            isInteger = false
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") { position += 1 }
            guard digits(&self) > 0 else { throw error("bad number") }
        }
        let text = String(decoding: bytes[start..<position], as: UTF8.self)
        if isInteger, let value = Int(text) { return .int(value) }
        guard let value = Double(text) else { throw JSONParseError(reason: "bad number", offset: start) }
        return .number(value, decimals: nil)
    }
}
