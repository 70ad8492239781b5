internal import CSndFile
import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio
import EarshotModel
import EarshotAnalysis
import EarshotDetection

/// Writes 16-bit PCM mono WAV to an open file descriptor with libsndfile.
///
/// The descriptor stays the caller's (libsndfile writes through a duplicate, which it closes), so the caller can
/// `fsync` and `close` it and see `errno` of its own calls. Samples are written as they are (`sf_write_short`: no scaling, no dither).
///
/// - Important: Not thread-safe. The class owns the `SNDFILE*`, closed by ``finish()`` or in `deinit`.
package final class WaveFileWriter {
    private var handle: OpaquePointer?
    /// Named in error lines.
    private let path: String
    /// `errno` of the last failure (0 when the system did not say), for the caller's hint.
    private(set) var failureErrno: Int32 = 0

    /// Starts a WAV file (RIFF header, 16-bit signed PCM, one channel) on `descriptor`, a regular file open for
    /// writing and positioned at its start.
    ///
    /// - Parameters:
    ///   - sampleRate: frames per second in Hz, e.g. 16000.
    ///   - path: the file's name, for error lines.
    /// - Throws: ``EarshotError`` `.cannotCreate` when libsndfile refuses (e.g. the header cannot be written).
    ///   The corresponding C function is `sf_open_fd`.
    package init(descriptor: Int32, sampleRate: Int, path: String) throws(EarshotError) {
        self.path = path
        var info = SF_INFO()
        info.samplerate = Int32(sampleRate)
        info.channels = 1
        info.format = Int32(SF_FORMAT_WAV) | Int32(SF_FORMAT_PCM_16)
        // libsndfile owns a duplicate of the descriptor (it would close the caller's own on a failed open).
        switch SndFileOpening.open(duplicating: descriptor, { sf_open_fd($0, Int32(SFM_WRITE), &info, Int32(SF_TRUE)) }) {
        case .success(let opened):
            handle = opened
        case .failure(let failure):
            let text = Self.systemText(library: failure.text, errno: failure.systemErrno)
            throw EarshotError(.cannotCreate, "cannot write \(path): \(text)", cause: text)
        }
    }

    deinit {
        if let handle { sf_close(handle) }
    }

    /// Appends samples (full scale ±32767).
    ///
    /// - Throws: ``EarshotError`` `.io` when fewer samples were written than given (a full disk: `No space left on
    ///   device`). The corresponding C function is `sf_write_short`.
    package func write(_ samples: UnsafeBufferPointer<Int16>) throws(EarshotError) {
        guard let handle, let base = samples.baseAddress, samples.count > 0 else { return }
        errno = 0
        let written = sf_write_short(handle, base, sf_count_t(samples.count))
        guard written == sf_count_t(samples.count) else {
            failureErrno = errno
            let text = Self.systemText(library: String(cString: sf_strerror(handle)), errno: errno)
            throw EarshotError(.io, "cannot write \(path): \(text) (\(written) of \(samples.count) samples written)", cause: text)
        }
    }

    /// Completes the header (data length) and releases libsndfile's state; the descriptor stays open.
    ///
    /// - Throws: ``EarshotError`` `.io` when the header update fails. The corresponding C function is `sf_close`.
    package func finish() throws(EarshotError) {
        guard let handle else { return }
        self.handle = nil
        errno = 0
        let status = sf_close(handle)
        guard status == 0 else {
            failureErrno = errno
            let text = Self.systemText(library: String(cString: sf_error_number(status)), errno: errno)
            throw EarshotError(.io, "cannot complete \(path): \(text)", cause: text)
        }
    }

    /// The system's words when `errno` says what happened (ENOSPC, EROFS, EIO), else libsndfile's.
    private static func systemText(library: String, errno code: Int32) -> String {
        if code != 0 { return String(cString: strerror(code)) }
        return library.trimmingWhitespace()
    }
}
