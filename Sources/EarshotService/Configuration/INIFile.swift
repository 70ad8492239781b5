internal import CINIH
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

/// One `key = value` line of an INI file, as libinih reports it, with its line number.
package struct INIEntry: Equatable, Sendable {
    /// The section name between `[` and `]`, or "" before the first section header.
    package var section: String
    package var key: String
    /// The value with surrounding whitespace and any inline ` ;` comment removed.
    package var value: String
    /// 1-based line number in the file.
    package var line: Int
    /// True for an indented line that libinih reads as a continuation of the previous key's value.
    package var isContinuation: Bool
}

/// A file that libinih could not read as `key = value` lines.
package enum INIProblem: Equatable, Sendable {
    /// A line that is neither `key = value`, `[section]` nor a comment (libinih's error line), with its text.
    case syntax(line: Int, text: String)
    /// A line longer than libinih's line buffer, which would be cut silently.
    case tooLong(line: Int, limitBytes: Int)
    /// `ini_parse_stream` itself failed (-2: no memory for its line buffer).
    case failed(status: Int)

    package var line: Int {
        switch self {
        case .syntax(let line, _), .tooLong(let line, _): line
        case .failed: 0
        }
    }
}

/// The entries of an INI text, read with libinih (Debian's build: `;` and `#` start comment lines, ` ;` starts an
/// inline comment while `#` after a value is kept, indented lines continue the previous value; its 200-byte line
/// buffer holds a line of at most 198 bytes, not counting the line end, "\n" or "\r\n"; checked by `ConfigTests`).
///
/// libinih reads through a reader callback fed from memory so that line numbers are known for every entry and
/// over-long lines are reported instead of being split into two lines.
package struct INIFile: Sendable {
    package var entries: [INIEntry]
    /// The first line libinih could not read, if any. Entries after it were still read.
    package var problem: INIProblem?

    /// Reads `bytes` (the whole file). The corresponding C function is `ini_parse_stream`.
    package init(bytes: [UInt8]) {
        let context = INIParseContext(bytes: bytes)
        let status = withExtendedLifetime(context) {
            ini_parse_stream(iniReadLine, Unmanaged.passUnretained(context).toOpaque(), iniHandleEntry,
                             Unmanaged.passUnretained(context).toOpaque())
        }
        entries = context.entries
        // ini_parse_stream returns 0, or the first error line (our handler never fails, so a syntax error), or -2
        // when its line buffer cannot be allocated (heap builds only).
        var problems: [INIProblem] = context.overlong.map { [$0] } ?? []
        if status > 0 {
            problems.append(.syntax(line: Int(status), text: context.text(ofLine: Int(status))))
        } else if status < 0 {
            problems.append(.failed(status: Int(status)))
        }
        problem = problems.min { $0.line < $1.line }
    }
}

/// State shared with the C callbacks through libinih's user pointer.
private final class INIParseContext {
    /// Byte ranges of the lines, each including its line end.
    private let bytes: [UInt8]
    private var lineRanges: [Range<Int>] = []
    private var nextLine = 0
    /// 1-based number of the line libinih is working on.
    private(set) var currentLine = 0
    var entries: [INIEntry] = []
    var overlong: INIProblem?

    init(bytes: [UInt8]) {
        self.bytes = bytes
        var start = 0
        for (index, byte) in bytes.enumerated() where byte == UInt8(ascii: "\n") {
            lineRanges.append(start..<(index + 1))
            start = index + 1
        }
        if start < bytes.count { lineRanges.append(start..<bytes.count) }
    }

    /// The text of a 1-based line without its line end, for messages.
    func text(ofLine line: Int) -> String {
        guard line >= 1 && line <= lineRanges.count else { return "" }
        var slice = bytes[lineRanges[line - 1]]
        while let last = slice.last, last == UInt8(ascii: "\n") || last == UInt8(ascii: "\r") { slice.removeLast() }
        return String(decoding: slice, as: UTF8.self)
    }

    /// fgets-style: copies the next whole line into `buffer`: its text without the line end, then "\n" and a NUL,
    /// so a line of at most `capacity - 2` bytes fits whether it ended in "\n" or "\r\n" (libinih strips trailing
    /// white space either way). A line that does not fit is cut, recorded as `.tooLong`, and its rest skipped, so
    /// that line numbers stay right.
    func readLine(into buffer: UnsafeMutablePointer<CChar>, capacity: Int) -> UnsafeMutablePointer<CChar>? {
        guard nextLine < lineRanges.count, capacity >= 2 else { return nil }
        let range = lineRanges[nextLine]
        nextLine += 1
        currentLine = nextLine
        var end = range.upperBound
        if end > range.lowerBound, bytes[end - 1] == UInt8(ascii: "\n") { end -= 1 }
        if end > range.lowerBound, bytes[end - 1] == UInt8(ascii: "\r") { end -= 1 }
        var count = end - range.lowerBound
        let limit = capacity - 2  // room for "\n" and the NUL
        if count > limit {
            if overlong == nil { overlong = .tooLong(line: currentLine, limitBytes: limit) }
            count = limit
        }
        bytes.withUnsafeBufferPointer { source in
            guard let base = source.baseAddress else { return }
            UnsafeMutableRawPointer(buffer).copyMemory(from: base + range.lowerBound, byteCount: count)
        }
        // A NUL inside the line would end it early for libinih; the rest of that line is then not seen, which is
        // what a C string reader does anyway.
        buffer[count] = CChar(UInt8(ascii: "\n"))
        buffer[count + 1] = 0
        return buffer
    }

    func add(section: String, key: String, value: String) {
        let raw = text(ofLine: currentLine)
        let indented = raw.first == " " || raw.first == "\t"
        // libinih passes an indented line after a key as a continuation of that key (the whole line is the value).
        // An indented line that itself reads `key = value` or `key: value` is an ordinary entry (libinih does that
        // right after a section header).
        var isContinuation = false
        if indented {
            let stripped = raw.drop { $0 == " " || $0 == "\t" }
            if stripped.hasPrefix(key) {
                let rest = stripped.dropFirst(key.count).drop { $0 == " " || $0 == "\t" }
                isContinuation = !(rest.first == "=" || rest.first == ":")
            } else {
                isContinuation = true
            }
        }
        // Debian's libinih strips an inline " ;" comment from ordinary lines but not from continuation lines; strip
        // it here too, so that comments work the same on every line.
        var value = value
        if isContinuation, let comment = value.firstRange(of: #/[ \t];/#) {
            value = String(value[..<comment.lowerBound]).trimmingSpaces()
        }
        entries.append(INIEntry(section: section, key: key, value: value, line: currentLine,
                                isContinuation: isContinuation))
    }
}

private let iniReadLine: @convention(c) (UnsafeMutablePointer<CChar>?, Int32, UnsafeMutableRawPointer?)
    -> UnsafeMutablePointer<CChar>? = { buffer, capacity, stream in
        guard let buffer, let stream else { return nil }
        let context = Unmanaged<INIParseContext>.fromOpaque(stream).takeUnretainedValue()
        return context.readLine(into: buffer, capacity: Int(capacity))
    }

private let iniHandleEntry: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>?, UnsafePointer<CChar>?,
                                            UnsafePointer<CChar>?) -> Int32 = { user, section, name, value in
    guard let user, let name else { return 1 }
    let context = Unmanaged<INIParseContext>.fromOpaque(user).takeUnretainedValue()
    context.add(section: section.map { String(cString: $0) } ?? "", key: String(cString: name),
                value: value.map { String(cString: $0) } ?? "")
    return 1
}
