internal import CSndFile
import Glibc
import Synchronization

/// Opens files with libsndfile under one process-wide lock, and reads why an open failed before releasing it.
///
/// libsndfile keeps the error of an open in one variable for the whole process (`sf_error(NULL)`,
/// `sf_strerror(NULL)`), and every open sets it, a successful one to "No Error": another thread's open between a
/// failure and the reading of its error would put that thread's words, or "No Error", into the error line. Every
/// libsndfile open in Earshot (decoding, clips, benchmark recordings) goes through ``open(_:)``.
package enum SndFileOpening {
    /// Why an open failed.
    package struct Failure: Error, Sendable, Equatable {
        /// libsndfile's error code (`sf_error(NULL)`, e.g. `SF_ERR_UNRECOGNISED_FORMAT`).
        package var code: Int32
        /// libsndfile's words for it (`sf_strerror(NULL)`), as it gives them.
        package var text: String
        /// `errno` right after the call (0 when the system did not say).
        package var systemErrno: Int32
    }

    private static let lock = Mutex(())

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
