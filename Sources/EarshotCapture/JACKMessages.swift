internal import CALSA
import Glibc
import Synchronization
import EarshotSupport

/// Keeps libjack's messages out of stderr while a PCM of ALSA's `jack` plugin is opened, and turns them into the
/// reason in the error line.
///
/// The plugin (libasound2-plugins) opens a JACK client inside `snd_pcm_open`; without a JACK server, libjack prints
/// "Cannot connect to server socket err = No such file or directory", "jack server is not running or cannot be
/// started" and three more lines on stderr, on every retry of a daemon waiting for its device, while alsa-lib
/// returns only `-ENOENT` ("No such file or directory", which reads as a missing device). libjack's own hooks,
/// `jack_set_error_function` and `jack_set_info_function`, take those lines instead: set here only when libjack is
/// in the process (no link dependency, found with `dlopen(RTLD_NOLOAD)` and `dlsym`), or when the PCM to be opened
/// is the plugin's (its definition, or one of its `slave.pcm`/`capture.pcm`, has `type jack`), in which case
/// libjack is loaded first so that even the first attempt is quiet (the plugin loads the same library a moment
/// later). While a thread opens a PCM in ``capturing(_:)`` the messages go to that thread's buffer; libjack's
/// messages at other times (from its own threads while a client runs) still go to stderr, as libjack writes them.
///
/// `JACK_NO_START_SERVER` is not the fix: it stops libjack from starting a server, not from printing that there is
/// none.
package enum JACKMessages {
    /// libjack's soname, as the ALSA `jack` plugin links it.
    static let libraryName = "libjack.so.0"
    /// Bytes of messages kept per open (the rest is cut).
    static let capacity = 1_024

    /// Thread-specific key holding the calling thread's buffer (`UnsafeMutablePointer<CChar>`, ``capacity`` bytes).
    private static let bufferKey: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key, nil)
        precondition(status == 0, "pthread_key_create failed: \(status)")
        return key
    }()

    /// libjack calls this instead of printing. Appends to the thread's buffer (`; ` between messages), or, on a
    /// thread that is not opening a PCM, writes the line to stderr as libjack's default does.
    private static let handler: @convention(c) (UnsafePointer<CChar>?) -> Void = { message in
        guard let message else { return }
        guard let raw = pthread_getspecific(JACKMessages.bufferKey) else {
            var newline: UInt8 = 0x0A
            _ = write(STDERR_FILENO, message, strlen(message))
            _ = write(STDERR_FILENO, &newline, 1)
            return
        }
        let buffer = raw.assumingMemoryBound(to: CChar.self)
        let used = strlen(buffer)
        guard used + 3 < JACKMessages.capacity else { return }
        if used > 0 { strcat(buffer, "; ") }
        strncat(buffer, message, JACKMessages.capacity - strlen(buffer) - 1)
    }

    /// Whether libjack's hooks are set (once per process; libjack is never unloaded once loaded).
    private static let installed = Atomic<Bool>(false)

    /// Sets libjack's error and info functions to ``handler`` when libjack is in the process, or when `device`
    /// (a PCM name in `configuration`, a `snd_config_t *`) is the `jack` plugin's and libjack can be loaded.
    /// Returns whether the hooks are set. The corresponding C functions are `dlopen`, `dlsym`,
    /// `jack_set_error_function` and `jack_set_info_function`.
    static func prepare(device: String, configuration: OpaquePointer?) -> Bool {
        if installed.load(ordering: .acquiring) { return true }
        var library = dlopen(libraryName, RTLD_LAZY | RTLD_NOLOAD)
        if library == nil, let configuration, usesJACK(configuration, pcm: device) {
            library = dlopen(libraryName, RTLD_LAZY | RTLD_LOCAL)
        }
        // The handle is not closed: the library stays loaded (the plugin uses it; libjack is not made to unload).
        guard let library, let setError = dlsym(library, "jack_set_error_function"),
              let setInfo = dlsym(library, "jack_set_info_function") else { return false }
        typealias Setter = @convention(c) (@convention(c) (UnsafePointer<CChar>?) -> Void) -> Void
        unsafeBitCast(setError, to: Setter.self)(handler)
        unsafeBitCast(setInfo, to: Setter.self)(handler)
        installed.store(true, ordering: .releasing)
        return true
    }

    /// Runs `body` (an open of a PCM) with libjack's messages on this thread kept; returns its result and the
    /// messages, joined with `; ` (nil when there were none).
    static func capturing<T>(_ body: () -> T) -> (result: T, messages: String?) {
        let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: capacity)
        buffer.initialize(repeating: 0, count: capacity)
        defer { buffer.deallocate() }
        let previous = pthread_getspecific(bufferKey)
        _ = pthread_setspecific(bufferKey, buffer)
        let result = body()
        _ = pthread_setspecific(bufferKey, previous)
        let text = String(cString: buffer)
        return (result, text.isEmpty ? nil : text)
    }

    /// The line for a PCM of the `jack` plugin that could not be opened, when libjack's `messages` say why:
    /// `cannot open capture device "jack": the JACK server is not running (start it, e.g. with qjackctl or jackd,
    /// or choose another device; list devices with `earshot devices`)`. Nil when they do not.
    static func openFailure(device: String, messages: String?, error: ALSAError) -> EarshotError? {
        guard let messages, messages.contains("server is not running") else { return nil }
        return EarshotError(
            .unavailable,
            "cannot open capture device \"\(device)\": the JACK server is not running (start it, e.g. with qjackctl or jackd, or choose another device; list devices with `earshot devices`)",
            cause: "\(error.description); libjack: \(messages)")
    }

    /// Whether PCM `name` in `configuration` is the `jack` plugin's, directly or through `slave.pcm` (plug, rate,
    /// dsnoop, ...) or `capture.pcm` (asym), at most 8 levels down. The corresponding C functions are
    /// `snd_config_search_definition`, `snd_config_search`, `snd_config_get_string` and `snd_config_delete`.
    static func usesJACK(_ configuration: OpaquePointer, pcm name: String, depth: Int = 0) -> Bool {
        guard depth < 8 else { return false }
        var definition: OpaquePointer?
        guard snd_config_search_definition(configuration, "pcm", name, &definition) >= 0, let definition else {
            return false
        }
        defer { _ = snd_config_delete(definition) }  // an expanded copy; deleting it cannot fail
        return nodeUsesJACK(configuration, definition, depth: depth)
    }

    private static func nodeUsesJACK(_ configuration: OpaquePointer, _ node: OpaquePointer, depth: Int) -> Bool {
        guard depth < 8 else { return false }
        if string(node, "type") == "jack" { return true }
        for key in ["slave.pcm", "capture.pcm"] {
            var child: OpaquePointer?
            guard snd_config_search(node, key, &child) >= 0, let child else { continue }
            if snd_config_get_type(child) == SND_CONFIG_TYPE_COMPOUND {
                if nodeUsesJACK(configuration, child, depth: depth + 1) { return true }
            } else if let name = string(node, key), usesJACK(configuration, pcm: name, depth: depth + 1) {
                return true
            }
        }
        return false
    }

    /// The string at `key` under `node`, or nil.
    private static func string(_ node: OpaquePointer, _ key: String) -> String? {
        var child: OpaquePointer?
        var value: UnsafePointer<CChar>?
        guard snd_config_search(node, key, &child) >= 0, let child, snd_config_get_string(child, &value) >= 0,
              let value else { return nil }
        return String(cString: value)
    }
}
