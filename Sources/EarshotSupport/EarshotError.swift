import FoundationEssentials
import Glibc
import Dispatch

/// An error a user can act on: what went wrong, with what, and how to fix it, in one line.
///
/// `message` is the whole line a user sees (no program-name prefix; the executables add `earshot:` or `earshotd:`).
/// `cause` keeps the underlying library or system text (e.g. `strerror(errno)`, `snd_strerror`, `sf_strerror`) so
/// nothing is dropped. `exitStatus` maps `code` to the BSD sysexits value the executables exit with.
public struct EarshotError: Error, CustomStringConvertible, Equatable, Sendable {
    /// The class of failure; decides the exit status.
    public enum Code: String, Sendable {
        /// Bad command-line usage (EX_USAGE, 64).
        case usage
        /// Input data that cannot be used: not audio, truncated, empty (EX_DATAERR, 65).
        case data
        /// An input file that does not exist or cannot be opened (EX_NOINPUT, 66).
        case noInput
        /// A device or service that is not available: busy, missing, no permission (EX_UNAVAILABLE, 69).
        case unavailable
        /// An operating-system failure: socket, thread, memory map (EX_OSERR, 71).
        case system
        /// A file that could not be written (EX_CANTCREAT, 73).
        case cannotCreate
        /// An I/O error while reading or writing (EX_IOERR, 74).
        case io
        /// A bad configuration value (EX_CONFIG, 78).
        case config
    }

    public var code: Code
    /// One line naming the thing and the fix.
    public var message: String
    /// The underlying library or system text, when there is one.
    public var cause: String?

    public init(_ code: Code, _ message: String, cause: String? = nil) {
        self.code = code
        self.message = message
        self.cause = cause
    }

    /// The sysexits(3) status for `code`.
    public var exitStatus: Int32 {
        switch code {
        case .usage: 64
        case .data: 65
        case .noInput: 66
        case .unavailable: 69
        case .system: 71
        case .cannotCreate: 73
        case .io: 74
        case .config: 78
        }
    }

    public var description: String { message }
}

extension EarshotError {
    /// An error from a failed POSIX call: `message` is followed by `strerror(errnoValue)`.
    package static func posix(_ code: Code, _ what: String, errno errnoValue: Int32) -> EarshotError {
        let text = String(cString: strerror(errnoValue))
        return EarshotError(code, "\(what): \(text)", cause: text)
    }
}
