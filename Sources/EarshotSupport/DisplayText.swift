/// Text from outside (a configuration line, a path, an MQTT topic) made safe to quote in one line of an error or a
/// log: it must not move the cursor, change a terminal's colours or start a new journal line.
package enum DisplayText {
    /// `text` as one shell word, for a command printed to be pasted: as is when it has only safe characters
    /// (letters, digits, `/._-+,:@%=`), else in single quotes (a `'` inside as `'\''`).
    package static func shellWord(_ text: String) -> String {
        let safe = !text.isEmpty && text.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || "/._-+,:@%=".unicodeScalars.contains($0)
        }
        return safe ? text : "'" + text.map { $0 == "'" ? "'\\''" : String($0) }.joined() + "'"
    }

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
