import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotModel
import EarshotAnalysis
import EarshotDetection

/// A request line a client sends to the event socket.
package enum EventRequest: Equatable {
    /// `{"subscribe":[...]}` (a single string is accepted as a one-name list).
    case subscribe([String])
    /// `{"status":true}` or `{"cmd":"status"}`.
    case status
    /// `{"cmd":"listen"}`: from now on the client also gets a `{"type":"window",...}` line per analysis window
    /// (level, gate, top classes: `EventLines.windowObject`), until it disconnects.
    case listen
    /// `{"cmd":"NAME"}` for a command registered with `EventServer.register(commands:handler:)`, with the
    /// request's `"group"` string when it has one (`{"cmd":"mute","group":"baby_cry"}`) and its other members
    /// (not `cmd`, `group` or `id`) as `options` (`{"cmd":"mute","group":"smoke_alarm","minutes":15}`), which the
    /// command's handler checks.
    case command(String, group: String? = nil, options: JSONObject = [:])

    package enum Parsed: Equatable {
        /// A blank line: ignored.
        case empty
        /// The error message to reply with.
        case failure(String)
        case request(EventRequest)
    }

    /// Deeper nesting than this is refused before parsing (requests are flat objects).
    package static let maxNesting = 16

    /// The longest `"id"` string a request may carry, in bytes.
    package static let maxIDBytes = 64

    /// Parses one line (without its newline; a trailing `\r` and surrounding whitespace are ignored).
    /// `commands` are the registered command names accepted besides "status".
    package static func parse(_ bytes: [UInt8], commands: [String] = []) -> Parsed {
        parseLine(bytes, commands: commands).parsed
    }

    /// ``parse(_:commands:)``, and the request's `"id"`: a string of 1 to ``maxIDBytes`` bytes or an integer, which
    /// the reply to the request carries too (`EventServer`), so that a client tells its answer from a notice the
    /// daemon sends of itself (an unsolicited error line carries none). Nil without one, or when the line is no JSON
    /// object; any other `"id"` is refused, as malformed.
    package static func parseLine(_ bytes: [UInt8], commands: [String] = []) -> (parsed: Parsed, id: JSONValue?) {
        let hint = EventServer.requestHint
        var start = 0
        var end = bytes.count
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0D || byte == 0x0A }
        while start < end, isSpace(bytes[start]) { start += 1 }
        while end > start, isSpace(bytes[end - 1]) { end -= 1 }
        guard start < end else { return (.empty, nil) }
        let line = bytes[start..<end]
        guard nesting(of: line) <= maxNesting else {
            return (.failure("malformed request: nested more than \(maxNesting) levels deep (\(hint))"), nil)
        }
        guard let object = try? JSONValue.parse(line) else {
            return (.failure("malformed request: not valid JSON (\(hint))"), nil)
        }
        guard object.objectValue != nil else {
            return (.failure("malformed request: expected a JSON object (\(hint))"), nil)
        }
        var id: JSONValue?
        if let value = object["id"] {
            let valid: Bool = switch value {
            case .int: true
            case .string(let text): !text.isEmpty && text.utf8.count <= maxIDBytes
            default: false
            }
            guard valid else {
                return (.failure("malformed request: \"id\" must be a string of 1 to \(maxIDBytes) bytes or an integer (the reply carries it back)"), nil)
            }
            id = value
        }
        return (request(in: object, commands: commands), id)
    }

    /// The request a parsed JSON object makes.
    private static func request(in object: JSONValue, commands: [String]) -> Parsed {
        let hint = EventServer.requestHint
        if let subscribe = object["subscribe"] {
            if let name = subscribe.stringValue { return .request(.subscribe([name])) }
            guard let list = subscribe.arrayValue else {
                return .failure("malformed request: \"subscribe\" must be a list of group names")
            }
            var names: [String] = []
            for item in list {
                guard let name = item.stringValue else {
                    return .failure("malformed request: \"subscribe\" must be a list of group names")
                }
                names.append(name)
            }
            return .request(.subscribe(names))
        }
        if let command = object["cmd"] {
            if command.stringValue == "listen" { return .request(.listen) }
            if let name = command.stringValue, commands.contains(name), name != "status" {
                let options = JSONObject(uniqueEntries: (object.objectValue?.entries ?? [])
                    .filter { !["cmd", "group", "id"].contains($0.key) }.map { ($0.key, $0.value) })
                guard let group = object["group"] else { return .request(.command(name, options: options)) }
                guard let text = group.stringValue else {
                    return .failure("malformed request: \"group\" must be a group name (a string)")
                }
                return .request(.command(name, group: text, options: options))
            }
            guard let name = command.stringValue, name == "status" else {
                let shown = command.stringValue.map { "\"\($0)\"" } ?? command.encoded
                let supported = (["status", "listen"] + commands.filter { $0 != "status" && $0 != "listen" }).map { "\"\($0)\"" }
                return .failure("unknown command \(shown) (supported: \(supported.joined(separator: ", ")))")
            }
            return .request(.status)
        }
        if object["status"]?.boolValue == true {
            return .request(.status)
        }
        return .failure("unknown request (\(hint))")
    }

    /// The deepest bracket nesting outside strings.
    private static func nesting(of bytes: ArraySlice<UInt8>) -> Int {
        var depth = 0
        var deepest = 0
        var inString = false
        var escaped = false
        for byte in bytes {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "["), UInt8(ascii: "{"):
                depth += 1
                deepest = max(deepest, depth)
            case UInt8(ascii: "]"), UInt8(ascii: "}"): depth -= 1
            default: break
            }
        }
        return deepest
    }
}
