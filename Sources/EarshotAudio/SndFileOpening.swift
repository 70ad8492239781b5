internal import CSndFile
import Glibc
import Synchronization

/// Opens files with libsndfile under one process-wide lock, and reads why an open failed before releasing it.
///
/// libsndfile keeps the error of an open in one variable for the whole process (`sf_error(NULL)`,
/// `sf_strerror(NULL)`), and every open sets it, a successful one to "No Error": another thread's open between a
/// failure and the reading of its error would put that thread's words, or "No Error", into the error line. Every
/// libsndfile open in Earshot (decoding, clips, benchmark recordings) goes through ``open(_:)``.
///
/// libsndfile 1.2.0 (Debian 12) also closes the descriptor of a failed `sf_open_fd` when told not to
/// (`close_desc = 0` takes effect only once the open succeeded): the caller's own `close` was then a second close,
/// which in a process with other threads can close a file another thread has just opened under the same number.
/// ``open(duplicating:_:)`` hands libsndfile a duplicate it always owns instead.
package enum SndFileOpening {
    /// Why an open failed.
    package struct Failure: Error, Sendable, Equatable {
        /// libsndfile's error code (`sf_error(NULL)`, e.g. `SF_ERR_UNRECOGNISED_FORMAT`), or
        /// ``noDuplicate`` when the descriptor could not be duplicated (``text`` is then `strerror`'s).
        package var code: Int32
        /// libsndfile's words for it (`sf_strerror(NULL)`), as it gives them.
        package var text: String
        /// `errno` right after the call (0 when the system did not say).
        package var systemErrno: Int32
    }

    /// ``Failure/code`` when `dup` failed (e.g. `Too many open files`): libsndfile was not called.
    package static let noDuplicate: Int32 = -1

    private static let lock = Mutex(())

    /// ``open(_:)`` for `sf_open_fd`: `open` gets a duplicate of `descriptor` (close-on-exec, sharing its file
    /// offset) and must pass it with `close_desc = SF_TRUE`, so that libsndfile closes it in every outcome (on a
    /// failed open, or in `sf_close`); `descriptor` stays open and the caller's to close.
    package static func open(duplicating descriptor: Int32, _ open: (Int32) -> OpaquePointer?) -> Result<OpaquePointer, Failure> {
        let duplicate = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
        guard duplicate >= 0 else {
            let number = errno
            return .failure(Failure(code: noDuplicate, text: String(cString: strerror(number)), systemErrno: number))
        }
        return self.open { open(duplicate) }
    }

    /// Runs `open` (one `sf_open`, `sf_open_fd` or `sf_open_virtual` call, nothing slow besides) under the lock, with
    /// `errno` cleared first.
    ///
    /// - Returns: the handle, which the caller owns (`sf_close`), or why the open failed.
    /// - Important: Any thread; opens wait for each other, reads and writes on open handles do not.
    package static func open(_ open: () -> OpaquePointer?) -> Result<OpaquePointer, Failure> {
        var handle: OpaquePointer?
        var failure = Failure(code: 0, text: "", systemErrno: 0)
        lock.withLock { _ in
            errno = 0
            handle = open()
            guard handle == nil else { return }
            failure.systemErrno = errno
            failure.code = sf_error(nil)
            failure.text = String(cString: sf_strerror(nil))
        }
        if let handle { return .success(handle) }
        return .failure(failure)
    }
}
