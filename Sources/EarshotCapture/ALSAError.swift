internal import CALSA
import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio

/// A failed ALSA call: the C function, the negative error code it returned, and what that code means.
///
/// ALSA functions return `-errno` on failure. ``Kind`` names the codes capture has to tell apart; every other code
/// is kept in ``code`` (``Kind/other``), never dropped. ``detail`` holds the last message alsa-lib logged during the
/// call (e.g. `Cannot get card index for 99`), which alsa-lib would otherwise print to stderr.
public struct ALSAError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What a negative ALSA return code means for capture.
    public enum Kind: Equatable, Sendable {
        /// `-EPIPE`: capture overrun (xrun): the application read too late and the device buffer filled.
        case overrun
        /// `-ESTRPIPE`: the device was suspended (system sleep).
        case suspended
        /// `-EBUSY`: another program holds the device.
        case busy
        /// `-ENOENT`, `-ENODEV`, `-ENXIO`: no such PCM, card or device (or it was unplugged).
        case missing
        /// `-EACCES`, `-EPERM`: no permission to open the device node.
        case permission
        /// `-EINTR`: interrupted by a signal.
        case interrupted
        /// `-EAGAIN`: no data yet on a non-blocking PCM.
        case wouldBlock
        /// `-EIO`: the device or its driver failed.
        case ioError
        /// `-EBADFD`: the PCM is in the wrong state for the call.
        case badState
        /// `-EINVAL`: ALSA rejected a parameter or name.
        case invalidArgument
        /// Any other code (see ``ALSAError/code``).
        case other
    }

    /// The C function that failed, e.g. `snd_pcm_open`.
    public var function: String
    /// The negative error code it returned (`-errno`).
    public var code: Int32
    /// What `code` means.
    public var kind: Kind
    /// The last message alsa-lib logged during the call, if any.
    public var detail: String?

    /// Wraps the negative return code `code` of `function`.
    public init(function: String, code: Int32, detail: String? = nil) {
        self.function = function
        self.code = code
        self.kind = Self.kind(of: code)
        self.detail = detail
    }

    /// ALSA's text for ``code``, e.g. `Device or resource busy`. The corresponding C function is `snd_strerror`.
    public var text: String { String(cString: snd_strerror(code)) }

    /// `snd_pcm_open: Device or resource busy`, plus alsa-lib's own message when it logged one.
    public var description: String {
        if let detail, !detail.isEmpty { return "\(function): \(text) (ALSA: \(detail))" }
        return "\(function): \(text)"
    }

    /// The ``Kind`` of a negative ALSA return code.
    public static func kind(of code: Int32) -> Kind {
        switch -code {
        case EPIPE: .overrun
        case ESTRPIPE: .suspended
        case EBUSY: .busy
        case ENOENT, ENODEV, ENXIO: .missing
        case EACCES, EPERM: .permission
        case EINTR: .interrupted
        case EAGAIN: .wouldBlock
        case EIO: .ioError
        case EBADFD: .badState
        case EINVAL: .invalidArgument
        default: .other
        }
    }
}

extension ALSAError {
    /// The line a user sees when a capture device cannot be opened, with the likely fix for busy, missing and
    /// permission failures, e.g. `cannot open capture device "hw:2,0": Device or resource busy (another program is
    /// recording; try a dsnoop device or stop the other program)`. Code `.unavailable` (exit 69).
    package func openFailure(device: String) -> EarshotError {
        let head = "cannot open capture device \"\(device)\""
        let message: String
        switch kind {
        case .busy:
            message = "\(head): \(text) (another program is recording; try a dsnoop device or stop the other program)"
        case .missing:
            // A card index that does not exist comes back from alsa-lib as -EINVAL (e.g. hw:99,0); say what it means.
            let shown = [ENOENT, ENODEV, ENXIO].contains(-code) ? text : String(cString: snd_strerror(-ENOENT))
            message = "\(head): \(shown) (no such device; list devices with `earshot devices` or `arecord -L`)"
        case .permission:
            message = "\(head): \(text) (add the user to the \"audio\" group)"
        default:
            message = "\(head): \(text) (\(function) failed; check the device name and its ALSA configuration)"
        }
        return EarshotError(.unavailable, message, cause: description)
    }
}

/// Runs ALSA calls with alsa-lib's error log redirected into a per-thread buffer instead of stderr.
///
/// alsa-lib prints its own diagnostics (`ALSA lib confmisc.c:165:(snd_config_get_card) Cannot get card index for
/// 99`) through its error handler. A daemon should put that text into its error line, not on stderr at random. The
/// thread-local handler (`snd_lib_error_set_local`, alsa-lib >= 1.1.6) writes each message into a fixed 512-byte
/// buffer owned by the calling thread; the capture thread installs it once so logging there never allocates.
package enum ALSADiagnostics {
    package static let messageCapacity = 512

    /// Thread-specific key holding the calling thread's message buffer (`UnsafeMutablePointer<CChar>`).
    static let bufferKey: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key, nil)
        precondition(status == 0, "pthread_key_create failed: \(status)")
        return key
    }()

    /// alsa-lib calls this instead of printing; it formats into the thread's buffer when there is one.
    static let handler: snd_local_error_handler_t = { _, _, _, _, format, arguments in
        guard let format, let arguments, let raw = pthread_getspecific(ALSADiagnostics.bufferKey) else { return }
        let buffer = raw.assumingMemoryBound(to: CChar.self)
        _ = vsnprintf(buffer, ALSADiagnostics.messageCapacity, format, arguments)
    }

    /// Calls `body` with alsa-lib's messages captured; returns its result and the last message logged (if any).
    package static func capturing<T>(_ body: () -> T) -> (result: T, message: String?) {
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: messageCapacity)
        buffer.initialize(repeating: 0, count: messageCapacity)
        defer { buffer.deallocate() }
        let previousBuffer = pthread_getspecific(bufferKey)
        // pthread_setspecific fails only for a bad key or no memory; then the handler finds no buffer and drops
        // the message, which costs only detail in an error line.
        _ = pthread_setspecific(bufferKey, buffer)
        let previousHandler = snd_lib_error_set_local(handler)
        let result = body()
        snd_lib_error_set_local(previousHandler)
        _ = pthread_setspecific(bufferKey, previousBuffer)
        let message = String(cString: buffer).trimmingWhitespace()
        return (result, message.isEmpty ? nil : message)
    }

    /// Installs the handler for the rest of the calling thread's life with `buffer` (owned by the caller, at least
    /// ``messageCapacity`` bytes, alive while the thread runs ALSA calls). Used by the capture thread.
    package static func install(buffer: UnsafeMutablePointer<CChar>) {
        _ = pthread_setspecific(bufferKey, buffer)
        _ = snd_lib_error_set_local(handler)
    }

    /// Removes what ``install(buffer:)`` set on the calling thread.
    package static func uninstall() {
        _ = snd_lib_error_set_local(nil)
        _ = pthread_setspecific(bufferKey, nil)
    }
}
