import FoundationEssentials
import Glibc

// The few things the Earshot module took from full Foundation (swift-corelibs-foundation), written over
// FoundationEssentials, Glibc and the standard library instead.
//
// Why: earshotd links Earshot, and full Foundation brings CoreFoundation and ICU with it (their start-up code, their
// tables, ICU's data); in the daemon that was about 3 MB of resident memory for string trimming, `String(cFormat:)`,
// a lock and a thread. The command line (EarshotCLI) still imports full Foundation where it wants it.

// MARK: Strings

extension StringProtocol {
    /// The text without leading and trailing spaces and tabs (Unicode whitespace other than line breaks), as
    /// Foundation's `trimmingCharacters(in: .whitespaces)`.
    package func trimmingSpaces() -> String {
        trimming { $0.isWhitespace && !$0.isNewline }
    }

    /// The text without leading and trailing whitespace and line breaks, as Foundation's
    /// `trimmingCharacters(in: .whitespacesAndNewlines)`.
    package func trimmingWhitespace() -> String {
        trimming { $0.isWhitespace }
    }

    /// The text without the leading and trailing characters for which `drop` is true.
    package func trimming(while drop: (Character) -> Bool) -> String {
        guard let first = firstIndex(where: { !drop($0) }), let last = lastIndex(where: { !drop($0) }) else { return "" }
        return String(self[first...last])
    }
}

extension String {
    /// Text formatted by C's `vsnprintf` (the C locale's conventions: `.` as the decimal point), for the numeric
    /// conversions Earshot uses (`%.2f`, `%02d`, `%x`, `%%`). Pass `Int32`/`Int`/`UInt32`/`Double` arguments that
    /// match the conversions, as with `printf`.
    package init(cFormat format: String, _ arguments: CVarArg...) {
        self = withVaList(arguments) { list in
            var buffer = [CChar](repeating: 0, count: 128)
            let needed = Int(vsnprintf(&buffer, buffer.count, format, list))
            guard needed >= buffer.count else { return Self.text(buffer, count: needed) }
            return withVaList(arguments) { again in
                buffer = [CChar](repeating: 0, count: needed + 1)
                _ = vsnprintf(&buffer, buffer.count, format, again)
                return Self.text(buffer, count: needed)
            }
        }
    }
}

extension String {
    /// The first `count` bytes of a C buffer (clamped to 0...its size), as UTF-8 text.
    fileprivate static func text(_ buffer: [CChar], count: Int) -> String {
        String(decoding: buffer.prefix(Swift.max(0, Swift.min(count, buffer.count))).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

// MARK: Local time

/// The system's local time zone as the C library sees it (`TZ`, else /etc/localtime).
///
/// FoundationEssentials alone knows only GMT (`TimeZone.current` is GMT, named zones are nil: zone rules come from
/// ICU in FoundationInternationalization, which the daemon does not link), so local wall-clock time comes from glibc:
/// ``zone(at:)`` is a fixed-offset zone with the offset in force at that instant, correct across daylight-saving
/// changes as long as it is asked again for each instant.
public enum LocalTime {
    /// The local zone's offset at `date`, as a fixed-offset `TimeZone` (the corresponding C function is `localtime_r`).
    public static func zone(at date: Date = Date()) -> TimeZone {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        guard localtime_r(&seconds, &parts) != nil else { return TimeZone(secondsFromGMT: 0)! }
        return TimeZone(secondsFromGMT: parts.tm_gmtoff) ?? TimeZone(secondsFromGMT: 0)!
    }

    /// The instant a local wall-clock time names, as the C library reads local time (`TZ` in any form glibc takes:
    /// `Europe/Berlin`, `:Europe/Berlin`, `CET-1CEST,M3.5.0,M10.5.0/3`, else /etc/localtime); nil when the date does
    /// not exist (31 April). A time a daylight-saving change skips or repeats is the instant `mktime` gives it, as
    /// for any C program. The corresponding C function is `mktime`.
    public static func date(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) -> Date? {
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        parts.tm_isdst = -1  // let the zone's rules say whether daylight-saving time is in force
        let seconds = mktime(&parts)
        // mktime normalizes 31 April to 1 May: a different day is a date that does not exist.
        guard seconds != -1 || parts.tm_year == 69,
              parts.tm_year == Int32(year - 1900), parts.tm_mon == Int32(month - 1), parts.tm_mday == Int32(day)
        else { return nil }
        return Date(timeIntervalSince1970: Double(seconds))
    }

    /// `date` as wall-clock `YYYY-MM-DD HH:MM:SS` in `timeZone` (the history's and `subscribe`'s text lines).
    package static func dateTimeText(_ date: Date, timeZone: TimeZone) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        let p = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        return String(cFormat: "%04d-%02d-%02d %02d:%02d:%02d", p.year ?? 1970, p.month ?? 1, p.day ?? 1, p.hour ?? 0,
                      p.minute ?? 0, p.second ?? 0)
    }
}

// MARK: Errors

/// One line describing `error` for a message: an ``EarshotError``'s message, `strerror` for a POSIX error, the
/// underlying POSIX error of a FoundationEssentials `CocoaError` (file operations) or its code when it has none,
/// else Swift's description.
package func errorText(_ error: any Error) -> String {
    if let error = error as? EarshotError { return error.message }
    if let error = error as? POSIXError { return String(cString: strerror(error.code.rawValue)) }
    if let error = error as? CocoaError {
        if let underlying = error.underlying as? POSIXError { return String(cString: strerror(underlying.code.rawValue)) }
        return "file operation failed (Foundation error \(error.code.rawValue))"
    }
    return String(describing: error)
}

// MARK: Paths

/// The directory part of `path` (`/a/b` for `/a/b/c`, `/` for `/c`, `.` for `c`), as NSString's
/// `deletingLastPathComponent` for the paths Earshot builds.
package func parentDirectory(of path: String) -> String {
    var trimmed = Substring(path)
    while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed.removeLast() }
    guard let slash = trimmed.lastIndex(of: "/") else { return "." }
    return slash == trimmed.startIndex ? "/" : String(trimmed[..<slash])
}

/// `directory` and `name` joined with one `/`.
package func joinedPath(_ directory: String, _ name: String) -> String {
    directory.isEmpty ? name : directory.hasSuffix("/") ? directory + name : directory + "/" + name
}

/// What is at a path: nothing (or nothing `stat` may see), a directory, a regular file, or something else (a
/// device, a FIFO, a socket). Follows symbolic links. The corresponding C function is `stat`.
package enum PathKind: Equatable, Sendable {
    case missing
    case directory
    case regularFile
    /// A named pipe: open(2) for reading waits for a writer, and reads wait for data.
    case fifo
    case socket
    case characterDevice
    case blockDevice
    case other

    /// What `stat(2)` (following symbolic links) says `path` is; `.missing` when it cannot be stat'ed.
    package init(path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else {
            self = .missing
            return
        }
        self.init(mode: info.st_mode)
    }

    /// The kind an `st_mode` gives.
    package init(mode: mode_t) {
        switch mode & S_IFMT {
        case S_IFDIR: self = .directory
        case S_IFREG: self = .regularFile
        case S_IFIFO: self = .fifo
        case S_IFSOCK: self = .socket
        case S_IFCHR: self = .characterDevice
        case S_IFBLK: self = .blockDevice
        default: self = .other
        }
    }

    /// The kind in words, for errors: "a directory", "a FIFO (named pipe)", "a character device", ...
    package var phrase: String {
        switch self {
        case .missing: "missing"
        case .directory: "a directory"
        case .regularFile: "a regular file"
        case .fifo: "a FIFO (named pipe)"
        case .socket: "a socket"
        case .characterDevice: "a character device"
        case .blockDevice: "a block device"
        case .other: "not a regular file"
        }
    }
}

/// Reading files named by a configuration or a flag without ever waiting on something that is not a file: a FIFO
/// given as a model path would make open(2) wait for a writer forever (and a reload or `--check-config` with it).
///
/// ``open(_:)`` opens with `O_NONBLOCK` (open(2) of a FIFO returns at once), checks the kind with fstat(2) on the
/// descriptor (no race with a swapped path) and refuses anything but a regular file.
/// The corresponding C functions are `open`, `fstat` and `read`.
package enum RegularFile {
    /// Why a file could not be read.
    package enum Failure: Error, Equatable {
        /// open(2) failed with this errno (ENOENT, EACCES, ...).
        case cannotOpen(errno: Int32)
        /// The path is of this kind, not a regular file.
        case notRegularFile(PathKind)
        /// The file holds more than the limit, in bytes.
        case tooLarge(bytes: Int)
        /// fstat(2) or read(2) failed with this errno.
        case readFailed(errno: Int32)

        /// "no such file", "is a FIFO (named pipe), not a regular file", "is 3 GiB, more than ...": what follows
        /// the path in an error line (no fix; the caller adds it).
        package var reason: String {
            switch self {
            case .cannotOpen(let code) where code == ENOENT: "no such file"
            case .cannotOpen(let code), .readFailed(let code): String(cString: strerror(code))
            case .notRegularFile(let kind): "is \(kind.phrase), not a regular file"
            case .tooLarge(let bytes): "is \(bytes) bytes, too large"
            }
        }

        /// The errno closest to the failure (for `EarshotError.posix`).
        package var errno: Int32 {
            switch self {
            case .cannotOpen(let code), .readFailed(let code): code
            case .notRegularFile(let kind): kind == .directory ? EISDIR : EINVAL
            case .tooLarge: EFBIG
            }
        }
    }

    /// Opens `path` read-only for a regular file only; the caller closes the descriptor (blocking mode restored).
    /// - Parameter followingLinks: false opens a symbolic link at `path` not at all (`O_NOFOLLOW`: `ELOOP`).
    package static func open(_ path: String, followingLinks: Bool = true) throws(Failure) -> Int32 {
        var descriptor: Int32
        let openFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (followingLinks ? 0 : O_NOFOLLOW)
        repeat {
            descriptor = Glibc.open(path, openFlags)
        } while descriptor < 0 && errno == EINTR
        guard descriptor >= 0 else { throw .cannotOpen(errno: errno) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            let code = errno
            close(descriptor)
            throw .readFailed(errno: code)
        }
        let kind = PathKind(mode: info.st_mode)
        guard kind == .regularFile else {
            close(descriptor)
            throw .notRegularFile(kind)
        }
        let flags = fcntl(descriptor, F_GETFL)
        if flags >= 0 { _ = fcntl(descriptor, F_SETFL, flags & ~O_NONBLOCK) }
        return descriptor
    }

    /// The whole content of the regular file at `path`, at most `limit` bytes (a longer file is `.tooLarge`).
    /// - Parameter followingLinks: as for ``open(_:followingLinks:)``.
    package static func read(_ path: String, limit: Int, followingLinks: Bool = true) throws(Failure) -> [UInt8] {
        let descriptor = try open(path, followingLinks: followingLinks)
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw .readFailed(errno: errno) }
        guard Int(info.st_size) <= limit else { throw .tooLarge(bytes: Int(info.st_size)) }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        var filled = 0
        while filled < bytes.count {
            let count = bytes.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress! + filled, $0.count - filled) }
            if count < 0 {
                if errno == EINTR { continue }
                throw .readFailed(errno: errno)
            }
            if count == 0 { break }
            filled += count
        }
        return filled == bytes.count ? bytes : Array(bytes[0..<filled])
    }
}

// MARK: Threads (locks: Synchronization.Mutex and Atomic)

/// Starts `body` on a new detached POSIX thread named `name` (at most 15 bytes show in `top -H` and `ps -L`).
/// - Throws: ``EarshotError`` `.system` naming the thread when `pthread_create` fails (out of threads or memory).
/// - Parameter stackSize: bytes of stack (nil: the system default, 8 MB on Debian).
package func startThread(named name: String, stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) throws(EarshotError) {
    final class Box: @unchecked Sendable {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }
    let box = Unmanaged.passRetained(Box(name: name, body: body))
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    defer { pthread_attr_destroy(&attributes) }
    pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
    if let stackSize { pthread_attr_setstacksize(&attributes, stackSize) }
    var thread = pthread_t()
    let status = pthread_create(&thread, &attributes, { context in
        let box = Unmanaged<AnyObject>.fromOpaque(context!).takeRetainedValue() as! Box
        nameCurrentThread(box.name)
        box.body()
        return nil
    }, box.toOpaque())
    guard status == 0 else {
        box.release()
        throw EarshotError.posix(.system, "cannot start the \(name) thread", errno: status)
    }
}

/// Names the calling thread (the first 15 bytes of `name`), as `pthread_setname_np` does, through
/// /proc/thread-self/comm (Linux 3.17 and later); best effort.
package func nameCurrentThread(_ name: String) {
    let descriptor = open("/proc/thread-self/comm", O_WRONLY | O_CLOEXEC)
    guard descriptor >= 0 else { return }
    let bytes = Array(name.utf8.prefix(15))
    _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
    close(descriptor)
}

/// Writes all of `text` to the file descriptor (retrying short writes and EINTR).
/// - Returns: false when a write failed (errno tells why).
@discardableResult
package func writeAll(_ descriptor: Int32, _ text: String) -> Bool {
    var bytes = Array(text.utf8)
    return bytes.withUnsafeMutableBytes { buffer in
        var offset = 0
        while offset < buffer.count {
            let written = write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            offset += written
        }
        return true
    }
}

/// Sleeps the calling thread for `seconds` (>= 0), resuming after signals.
package func sleepSeconds(_ seconds: Double) {
    guard seconds > 0 else { return }
    var request = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - seconds.rounded(.down)) * 1e9))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}

/// Whether files can be created in a directory, found by creating an unnamed file there (`O_TMPFILE`: nothing is
/// left behind): the clips directory's and the sleep reports' start-up checks.
package enum DirectoryWriteProbe {
    /// Linux's `O_TMPFILE`, a macro Swift does not import: `__O_TMPFILE` (0o20000000 on x86-64 and arm64) with
    /// `O_DIRECTORY`, whose value differs between them (0o200000 on x86-64, 0o40000 on arm64), so it is Glibc's.
    static let openUnnamedFile: Int32 = 0o20_000_000 | O_DIRECTORY

    /// The `errno` of creating an unnamed file in `directory`; nil when it could be created, or when the file system
    /// cannot tell that way (`EOPNOTSUPP`, `EISDIR`, `EINVAL`: no `O_TMPFILE` there). The corresponding C call is
    /// `open(directory, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600)`.
    package static func failure(in directory: String) -> Int32? {
        failure(at: AT_FDCWD, directory)
    }

    /// The `errno` of creating an unnamed file in the directory open as `descriptor` (nothing looked up by path), as
    /// ``failure(in:)``. The corresponding C call is `openat(descriptor, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600)`.
    package static func failure(inDirectory descriptor: Int32) -> Int32? {
        failure(at: descriptor, ".")
    }

    private static func failure(at base: Int32, _ directory: String) -> Int32? {
        let descriptor = openat(base, directory, openUnnamedFile | O_WRONLY | O_CLOEXEC, 0o600)
        let code = errno
        if descriptor >= 0 {
            close(descriptor)
            return nil
        }
        return code == EOPNOTSUPP || code == EISDIR || code == EINVAL ? nil : code
    }
}
