import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// The command-line parser of every `earshot` command: walks `--flag value`, `--flag=value` and positional
/// arguments, reads and checks values, and words the usage errors (all `EarshotError(.usage)`, exit status 64).
///
/// Conventions, the same for every command:
/// - `--help` or `-h` anywhere before `--` shows the command's help on standard output, status 0, whatever else is
///   on the line (``asksForHelp(_:)``; ``EarshotCommand/run(_:)`` checks it before parsing).
/// - A value follows its flag (`--top 3`) or is joined with `=` (`--top=3`). A separate value starting with `--` is a
///   forgotten value, never the value itself (`--output --seed 3`: `--output needs a value`); give such a value
///   inline (`--output=--odd-name`). One leading dash is a value: `-40`, and `-` for standard input.
/// - `--` ends the options: every argument after it is positional, even one starting with `-`.
/// - A flag without a value given one inline (`--summary=yes`) is an error.
///
/// The wording of the errors (tests pin the commands' texts):
/// - missing value: `--format needs a value (text, jsonl or csv)`
/// - bad value: `--top "many" is not an integer (allowed: an integer from 1 to 521)`,
///   `--top "0" is out of range (allowed: ...)`, `--format "xml" is not a format (allowed: text, jsonl or csv)`
/// - unknown flag: `unknown option "--bogus" for analyze (allowed: --model, --format, ...)`
/// - missing argument: `train needs a DATA_DIR (usage: earshot train ...)`
/// - stray argument: `classes takes no arguments, not "extra" (usage: earshot classes)`;
///   `bench takes options only, not "extra" (usage: ...)`
struct ArgumentParser {
    /// The command's name, as typed after `earshot` (e.g. `analyze`).
    let command: String
    /// The command's usage line (`usage: earshot ...`), quoted in errors about missing or stray arguments.
    let usage: String
    /// The command's flags (without `--help`), listed in the error for an unknown one.
    let flags: [String]
    private let arguments: [String]
    private var index = 0
    private var onlyPositional = false

    init(command: String, usage: String, flags: [String], arguments: [String]) {
        self.command = command
        self.usage = usage
        self.flags = flags
        self.arguments = arguments
    }

    enum Item: Equatable {
        /// A flag (`--top`, `-o`) and the value joined to it with `=`, if any.
        case flag(String, inline: String?)
        case positional(String)

        /// The argument as it was typed.
        var text: String {
            switch self {
            case .flag(let flag, let inline): inline.map { flag + "=" + $0 } ?? flag
            case .positional(let text): text
            }
        }
    }

    /// True when `arguments` hold `--help` or `-h` before any `--`.
    static func asksForHelp(_ arguments: [String]) -> Bool {
        for argument in arguments {
            if argument == "--" { return false }
            if argument == "--help" || argument == "-h" { return true }
        }
        return false
    }

    /// The next flag or positional argument, or nil at the end. `--help` and `-h` are passed over (see
    /// ``asksForHelp(_:)``).
    /// - Throws: `EarshotError(.usage)` for `--help=...`.
    mutating func next() throws(EarshotError) -> Item? {
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if onlyPositional || !argument.hasPrefix("-") || argument == "-" { return .positional(argument) }
            if argument == "--" {
                onlyPositional = true
                continue
            }
            if argument == "--help" || argument == "-h" { continue }
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                let flag = String(argument[..<equals])
                let inline = String(argument[argument.index(after: equals)...])
                if flag == "--help" { try noValue(of: flag, inline) }
                return .flag(flag, inline: inline)
            }
            return .flag(argument, inline: nil)
        }
        return nil
    }

    /// True when the next argument exists and is a value, not a flag (for flags taking several values).
    var nextIsValue: Bool {
        index < arguments.count && (!arguments[index].hasPrefix("-") || arguments[index] == "-")
    }

    /// Checks that a flag which takes no value was given none.
    /// - Throws: `EarshotError(.usage)`: `--summary takes no value`.
    func noValue(of flag: String, _ inline: String?) throws(EarshotError) {
        if inline != nil { throw EarshotError(.usage, "\(flag) takes no value") }
    }

    /// The flag's value: `inline`, else the next argument.
    /// - Parameters:
    ///   - allowed: what the value may be, for the error (`text, jsonl or csv`).
    ///   - allowEmpty: false to refuse an empty value with the same error.
    /// - Throws: `EarshotError(.usage)` when it is missing: `--format needs a value (text, jsonl or csv)`.
    mutating func value(of flag: String, _ inline: String?, allowed: String, allowEmpty: Bool = true)
        throws(EarshotError) -> String
    {
        guard let text = takeValue(inline), allowEmpty || !text.isEmpty else {
            throw EarshotError(.usage, "\(flag) needs a value (\(allowed))")
        }
        return text
    }

    /// The flag's value, or nil when it is missing (for a command that words that error itself).
    mutating func takeValue(_ inline: String?) -> String? {
        if let inline { return inline }
        // The next option is not a value: `--output --seed 3` forgot the output.
        guard index < arguments.count, !arguments[index].hasPrefix("--") else { return nil }
        index += 1
        return arguments[index - 1]
    }

    /// The flag's values up to the next flag (`--from a.wav b.wav`), the inline one first; may be empty.
    mutating func values(_ inline: String?) -> [String] {
        var values = inline.map { [$0] } ?? []
        while nextIsValue {
            values.append(arguments[index])
            index += 1
        }
        return values
    }

    /// The flag's value as a number within `range` (NaN is within none).
    /// - Throws: `EarshotError(.usage)`: `--top needs a value (an integer from 1 to 521)`,
    ///   `--top "many" is not an integer (allowed: ...)`, `--top "0" is out of range (allowed: ...)`.
    mutating func number<T: LosslessStringConvertible & Comparable, R: RangeExpression<T>>(
        of flag: String, _ inline: String?, in range: R, allowed: String
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

    /// The flag's value as one of `T`'s raw values.
    /// - Parameters:
    ///   - kind: what a value is, for the error: `a format`.
    ///   - allowed: the values: `text, jsonl or csv`.
    /// - Throws: `EarshotError(.usage)`: `--format "xml" is not a format (allowed: text, jsonl or csv)`.
    mutating func choice<T: RawRepresentable>(of flag: String, _ inline: String?, kind: String, allowed: String)
        throws(EarshotError) -> T where T.RawValue == String
    {
        let text = try value(of: flag, inline, allowed: allowed)
        guard let value = T(rawValue: text) else {
            throw EarshotError(.usage, "\(flag) \"\(text)\" is not \(kind) (allowed: \(allowed))")
        }
        return value
    }

    /// The error for an unknown flag: `unknown option "--bogus" for analyze (allowed: --model, --format, ...)`; for a
    /// command without options the same as for a stray argument.
    func unknown(_ flag: String) -> EarshotError {
        guard !flags.isEmpty else { return unexpected(flag) }
        return EarshotError(.usage, "unknown option \"\(flag)\" for \(command) (allowed: \(flags.joined(separator: ", ")))")
    }

    /// The error for a positional argument the command does not take: `classes takes no arguments, not "extra"
    /// (usage: earshot classes)`, or `bench takes options only, not "extra" (...)` for a command with options.
    func unexpected(_ argument: String) -> EarshotError {
        let takes = flags.isEmpty ? "takes no arguments" : "takes options only"
        return EarshotError(.usage, "\(command) \(takes), not \"\(argument)\" (\(usage))")
    }

    /// The error for something the command needs: `train needs a DATA_DIR (usage: earshot train ...)`.
    func missing(_ what: String) -> EarshotError {
        EarshotError(.usage, "\(command) needs \(what) (\(usage))")
    }

    /// The error for two flags that cannot be given together, and what to do instead.
    static func exclusive(_ first: String, _ second: String, _ advice: String) -> EarshotError {
        EarshotError(.usage, "\(first) and \(second) exclude each other (\(advice))")
    }
}

/// An `earshot` command: its name, usage line and help, how its arguments parse and what it then does.
/// ``run(_:)`` gives every command the same `--help` and the same usage errors.
protocol EarshotCommand: Sendable {
    associatedtype Options
    /// The word after `earshot`.
    static var name: String { get }
    /// `usage: earshot NAME ...`: the first line of the help, quoted in usage errors, listed by `earshot help`.
    static var usage: String { get }
    /// The `--help` text: the usage line(s), a blank line, what the command does, then its options.
    static var help: String { get }
    /// The command's flags (without `--help`), named in the error for an unknown one.
    static var flags: [String] { get }
    /// Reads the arguments after the command's name (`--help` is handled before).
    /// - Throws: ``EarshotError`` `.usage` naming the argument and what is allowed.
    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options
    /// Does the work; returns the exit status.
    static func execute(_ options: Options) -> Int32
}

extension EarshotCommand {
    /// `--help` (status 0), else parses the arguments (a usage error: one stderr line, status 64), then executes.
    static func run(_ arguments: [String]) -> Int32 {
        if ArgumentParser.asksForHelp(arguments) {
            print(help)
            return 0
        }
        let options: Options
        do {
            options = try parse(arguments)
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
        return execute(options)
    }

    /// Parses `arguments` (the ones after the command's name).
    static func parse(_ arguments: [String]) throws(EarshotError) -> Options {
        var parser = ArgumentParser(command: name, usage: usage, flags: flags, arguments: arguments)
        return try parse(&parser)
    }
}

/// Writes `earshot: MESSAGE` as one line on standard error (control characters in it, e.g. of a file name, escaped).
func reportError(_ message: String) {
    writeError("earshot: \(AnalysisReportFormatter.singleLine(message))")
}

/// Writes a line to standard error at once (progress and errors), after what standard output buffered.
func writeError(_ line: String) {
    fflush(nil)
    FileHandle.standardError.write(Data((line + "\n").utf8))
}

/// True when standard error is a terminal (progress may then redraw one line with `\r`).
let standardErrorIsTerminal = isatty(STDERR_FILENO) == 1
