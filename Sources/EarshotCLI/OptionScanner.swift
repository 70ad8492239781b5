import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// Walks `--flag value`, `--flag=value` and positional arguments for the `train` and `enroll` commands.
struct OptionScanner {
    let command: String
    private let arguments: [String]
    private var index = 0
    private var onlyPositional = false

    init(command: String, arguments: [String]) {
        self.command = command
        self.arguments = arguments
    }

    enum Item {
        case flag(String, inline: String?)
        case positional(String)
    }

    /// The next flag or positional argument, or nil at the end.
    mutating func next() -> Item? {
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if !onlyPositional && argument == "--" {
                onlyPositional = true
                continue
            }
            if onlyPositional || !argument.hasPrefix("-") || argument == "-" { return .positional(argument) }
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                return .flag(String(argument[..<equals]), inline: String(argument[argument.index(after: equals)...]))
            }
            return .flag(argument, inline: nil)
        }
        return nil
    }

    /// True when the next argument exists and is not a flag (for flags taking several values).
    var nextIsValue: Bool {
        index < arguments.count && (!arguments[index].hasPrefix("-") || arguments[index] == "-")
    }

    /// The flag's value.
    /// - Throws: `EarshotError(.usage)` when it is missing.
    mutating func value(of flag: String, _ inline: String?, allowed: String) throws(EarshotError) -> String {
        if let inline { return inline }
        guard index < arguments.count else { throw EarshotError(.usage, "\(flag) needs a value (\(allowed))") }
        index += 1
        return arguments[index - 1]
    }

    /// The flag's value as a number within `range`.
    mutating func number<T: LosslessStringConvertible & Comparable>(
        of flag: String, _ inline: String?, in range: ClosedRange<T>, allowed: String
    ) throws(EarshotError) -> T {
        let text = try value(of: flag, inline, allowed: allowed)
        guard let number = T(text) else {
            let kind = T.self is any BinaryInteger.Type ? "an integer" : "a number"
            throw EarshotError(.usage, "\(flag) \"\(text)\" is not \(kind) (allowed: \(allowed))")
        }
        guard range.contains(number) else {
            throw EarshotError(.usage, "\(flag) \"\(text)\" is out of range (allowed: \(allowed))")
        }
        return number
    }

    /// The error for an unknown flag.
    func unknown(_ flag: String, allowed: [String]) -> EarshotError {
        EarshotError(.usage, "unknown option \"\(flag)\" for \(command) (allowed: \(allowed.joined(separator: ", ")))")
    }
}

/// Writes a line to standard error at once (progress and errors).
func writeError(_ line: String) {
    fflush(nil)
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

/// True when standard error is a terminal (progress may then redraw one line with `\r`).
let standardErrorIsTerminal = isatty(STDERR_FILENO) == 1
