/// Text from outside (a configuration line, a path, an MQTT topic) made safe to quote in one line of an error or a
/// log: it must not move the cursor, change a terminal's colours or start a new journal line.
package enum DisplayText {
    /// `text` with control characters (C0, DEL and C1) as `\xNN`, undecodable bytes (U+FFFD) as `?`, and at most
    /// `limit` characters (then `...`), so that a binary file does not fill the terminal with garbage.
    package static func escaped(_ text: String, limit: Int? = nil) -> String {
        var out = ""
        for (count, scalar) in text.unicodeScalars.enumerated() {
            if let limit, count == limit { return out + "..." }
            switch scalar.value {
            case 0xFFFD: out += "?"
            case 0..<0x20, 0x7F...0x9F:
                let digits = String(scalar.value, radix: 16, uppercase: true)
                out += "\\x" + (digits.count < 2 ? "0" + digits : digits)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
