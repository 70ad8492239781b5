@preconcurrency import Glibc
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// Standard output for the commands. A failed write (a full disk, `> /dev/full`, a closed pipe) is never silent:
/// one stderr line `earshot: cannot write to standard output: REASON` (strerror) and status 74 (EX_IOERR).
enum StandardOutput {
    /// The status for a failed write to standard output (EX_IOERR).
    static let failureStatus: Int32 = 74

    /// C's `stdout`, the stream `print` writes into (read once; the pointer never changes).
    nonisolated(unsafe) static let stream: UnsafeMutablePointer<FILE> = stdout

    /// True when a write to standard output has failed (the stream's error flag).
    static var hasFailed: Bool { ferror(stream) != 0 }

    /// Writes `text` after whatever `print` buffered, so the order holds; on failure reports it and exits 74.
    static func write(_ text: String) {
        if fflush(stream) != 0 { fail(errno) }
        if let code = OutputFile.writeAll(Data(text.utf8), to: STDOUT_FILENO) { fail(code) }
    }

    /// Flushes what `print` buffered; on failure (now or earlier) reports it and exits 74. Called before exiting.
    /// - Parameter earlier: the `errno` to report when an earlier automatic flush failed and this one has nothing
    ///   left to write (stdio drops the bytes it could not write); EIO when unknown.
    static func finish(earlier: Int32 = EIO) {
        let failedBefore = ferror(stream) != 0
        let flushed = fflush(stream)
        let code = errno
        if flushed != 0 { fail(code) }
        if failedBefore || ferror(stream) != 0 { fail(earlier) }
    }

    /// Reports the failure on stderr and exits with status 74.
    static func fail(_ code: Int32) -> Never {
        let line = "earshot: cannot write to standard output: \(String(cString: strerror(code)))\n"
        _ = OutputFile.writeAll(Data(line.utf8), to: STDERR_FILENO)
        // The buffered bytes cannot be written either: drop them so exit does not try again.
        _exit(failureStatus)
    }
}
