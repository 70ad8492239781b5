import FoundationEssentials
import Glibc
import Dispatch

/// Writes a whole output file the user named (a report, a chart, a head model) without ever replacing something that
/// is not a regular file.
///
/// - A new path or an existing regular file is written atomically: into a new file `.NAME.tmp-XXXXXXXXXXXXXXXX` beside
///   it (16 random hex digits, created with `O_CREAT | O_EXCL | O_NOFOLLOW`: never a file or a symbolic link someone
///   put there), then renamed over it, so that no reader sees half a file.
/// - A symbolic link is followed (to its final target, even a dangling one): the target is written, the link stays.
/// - An existing file that is not a regular file (a device such as `/dev/stdout` or `/dev/full`, a FIFO) is opened and
///   written in place; it is never truncated nor replaced.
///
/// The daemon's own files (sleep reports, the session marker) are written by ``writePrivate(_:to:mode:what:hint:)``,
/// which follows no link and writes into no file of another user.
///
/// The corresponding C functions are `lstat`, `readlink`, `open`, `write`, `close` and `rename`.
public enum OutputFile {
    /// Why a write failed.
    public struct Failure: Error, Sendable, Equatable {
        public enum Stage: Sendable, Equatable {
            /// The file (or its temporary sibling) could not be created or opened.
            case open
            /// Writing the bytes into a regular file's temporary sibling, or renaming it, failed.
            case write
            /// Writing in place into an existing non-regular file (a device, a FIFO) failed.
            case writeInPlace
        }

        public var stage: Stage
        /// The `errno` value.
        public var code: Int32
        /// `strerror(code)`.
        public var reason: String { String(cString: strerror(code)) }
    }

    /// Writes `data` to `path` (see ``OutputFile``), reporting a failure as its stage and `errno`.
    /// - Throws: ``Failure`` with the stage and `errno`.
    public static func attemptWrite(_ data: Data, to path: String) throws(Failure) {
        // stat follows links the way open does, /proc magic links included (/dev/stdout into a pipe names
        // "pipe:[N]", which no path lookup would find): a device or FIFO is opened through the path as given.
        var status = stat()
        if stat(path, &status) == 0, status.st_mode & S_IFMT != S_IFREG, status.st_mode & S_IFMT != S_IFDIR {
            try writeInPlace(data, to: path)
            return
        }
        let target = resolvingSymbolicLinks(path)
        let (descriptor, temporary) = try createStaging(besides: target, mode: 0o644)
        if stat(target, &status) == 0, status.st_mode & S_IFMT == S_IFREG {
            _ = fchmod(descriptor, status.st_mode & 0o7777)  // keep the replaced file's permissions
        }
        try finish(data, descriptor: descriptor, temporary: temporary, target: target)
    }

    /// Writes `data` as `path`, a file of the daemon's own in a directory another user may be able to write (the
    /// sleep reports and the session marker in `[sleep] report_dir`), following no symbolic link and writing into no
    /// file of another user (trial 13 D1):
    /// - the bytes go into a new file beside `path` (as ``write(_:to:what:hint:)``'s: a random name, created with
    ///   `O_CREAT | O_EXCL | O_NOFOLLOW`), given `mode` whatever the umask, which is then renamed over `path`:
    ///   rename(2) replaces what is there, a symbolic link itself, never its target;
    /// - a FIFO or device at `path` that belongs to this process's user (no other user can have made it there) is
    ///   written in place, as ``write(_:to:what:hint:)`` does; one of another user is replaced.
    /// - Throws: `EarshotError` as ``write(_:to:what:hint:)``.
    public static func writePrivate(
        _ data: Data, to path: String, mode: mode_t = 0o600, what: String = "",
        hint: String = "check the directory and free space"
    ) throws(EarshotError) {
        do throws(Failure) {
            var status = stat()
            if lstat(path, &status) == 0, status.st_uid == geteuid(), isDeviceOrFIFO(status.st_mode) {
                // open(2) of a FIFO waits for a reader; what it opened is checked before a byte is written (the
                // path may name another file by then).
                let descriptor = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)
                if descriptor >= 0 {
                    var opened = stat()
                    if fstat(descriptor, &opened) == 0, opened.st_uid == geteuid(), isDeviceOrFIFO(opened.st_mode) {
                        let writeError = writeAll(data, to: descriptor)
                        let closeError: Int32? = close(descriptor) == 0 ? nil : errno
                        if let code = writeError ?? closeError { throw Failure(stage: .writeInPlace, code: code) }
                        return
                    }
                    close(descriptor)
                }
            }
            let (descriptor, temporary) = try createStaging(besides: path, mode: 0o600)
            _ = fchmod(descriptor, mode)
            try finish(data, descriptor: descriptor, temporary: temporary, target: path)
        } catch {
            throw described(error, path, what, hint)
        }
    }

    private static func isDeviceOrFIFO(_ mode: mode_t) -> Bool {
        let kind = mode & S_IFMT
        return kind == S_IFIFO || kind == S_IFCHR || kind == S_IFBLK
    }

    /// A new file beside `target` to stage a write in, `.NAME.tmp-` and 16 random hex digits, created with
    /// `O_CREAT | O_EXCL | O_NOFOLLOW` and `mode` (less the umask): never an existing file, nor a symbolic link
    /// someone put at a name they could guess.
    /// - Throws: ``Failure`` (`.open`) with EISDIR when `target` is a directory, else the `errno` of open(2)
    ///   (ENOENT for a missing directory, EACCES...).
    private static func createStaging(besides target: String, mode: mode_t) throws(Failure) -> (descriptor: Int32, path: String) {
        var code = EEXIST
        for _ in 0..<16 {
            let suffix = String(UInt64.random(in: 0...UInt64.max), radix: 16)
            let temporary = sibling(of: target, suffix: "tmp-" + String(repeating: "0", count: 16 - suffix.count) + suffix)
            let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
            if descriptor >= 0 { return (descriptor, temporary) }
            code = errno
            guard code == EEXIST || code == EINTR else { break }
        }
        // Report the user's path: EISDIR for a directory, ENOENT for a missing directory, EACCES...
        var existing = stat()
        if stat(target, &existing) == 0, existing.st_mode & S_IFMT == S_IFDIR { throw Failure(stage: .open, code: EISDIR) }
        throw Failure(stage: .open, code: code)
    }

    /// Writes `data` to the staged file `descriptor` (at `temporary`), closes it and renames it to `target`;
    /// removes it on failure.
    private static func finish(_ data: Data, descriptor: Int32, temporary: String, target: String) throws(Failure) {
        let writeError = writeAll(data, to: descriptor)
        // close can report a delayed write error (NFS, a full disk): it counts as a failure too.
        let closeError: Int32? = close(descriptor) == 0 ? nil : errno
        if let code = writeError ?? closeError {
            unlink(temporary)
            throw Failure(stage: .write, code: code)
        }
        guard rename(temporary, target) == 0 else {
            let code = errno
            unlink(temporary)
            throw Failure(stage: code == EISDIR ? .open : .write, code: code)
        }
    }

    /// Checks that ``write(_:to:what:hint:)`` could write `path` later, before long work whose result would be
    /// lost (recording, training): creates and removes the temporary sibling the write would create (nothing for a
    /// device or FIFO, which is written in place). The same line and status as ``write(_:to:what:hint:)``.
    /// - Throws: `EarshotError(.cannotCreate)` (73): `cannot write PATH: REASON (HINT)`.
    public static func checkWritable(_ path: String, what: String = "", hint: String = "check the directory and free space")
        throws(EarshotError)
    {
        var status = stat()
        if stat(path, &status) == 0 {
            if status.st_mode & S_IFMT == S_IFDIR { throw described(Failure(stage: .open, code: EISDIR), path, what, hint) }
            if status.st_mode & S_IFMT != S_IFREG { return }
        }
        let probe = sibling(of: resolvingSymbolicLinks(path), suffix: "check-\(getpid())")
        let descriptor = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw described(Failure(stage: .open, code: errno), path, what, hint) }
        close(descriptor)
        unlink(probe)
    }

    /// Writes `data` to `path` and describes a failure as one line:
    /// `cannot write PATH: REASON (HINT)` with `.cannotCreate` (73) when the file cannot be created or written, and
    /// `cannot write PATH: REASON` with `.io` (74) when writing into a device or FIFO fails (e.g. `/dev/full`).
    public static func write(_ data: Data, to path: String, what: String = "", hint: String = "check the directory and free space")
        throws(EarshotError)
    {
        do {
            try attemptWrite(data, to: path)
        } catch {
            throw described(error, path, what, hint)
        }
    }

    /// The one line of a failure to write `path` (see ``write(_:to:what:hint:)``).
    private static func described(_ failure: Failure, _ path: String, _ what: String, _ hint: String) -> EarshotError {
        let name = what.isEmpty ? path : "\(what) \(path)"
        switch failure.stage {
        case .open, .write:
            return EarshotError(.cannotCreate, "cannot write \(name): \(failure.reason) (\(hint))", cause: failure.reason)
        case .writeInPlace:
            return EarshotError(.io, "cannot write \(name): \(failure.reason)", cause: failure.reason)
        }
    }

    /// `.NAME.SUFFIX` beside `target` (a path with links resolved): where a write stages its file, or the probe of
    /// ``checkWritable(_:what:hint:)`` (`check-PID`).
    private static func sibling(of target: String, suffix: String) -> String {
        let url = URL(fileURLWithPath: target)
        return url.deletingLastPathComponent().appendingPathComponent(".\(url.lastPathComponent).\(suffix)").path
    }

    /// `path` with symbolic links followed to the final target (relative targets resolved against the link's
    /// directory); `path` itself when it is not a link. Gives up after 40 links (a loop), leaving the open to fail.
    package static func resolvingSymbolicLinks(_ path: String) -> String {
        var current = path
        for _ in 0..<40 {
            var status = stat()
            guard lstat(current, &status) == 0, status.st_mode & S_IFMT == S_IFLNK else { return current }
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let count = readlink(current, &buffer, buffer.count - 1)
            guard count > 0 else { return current }
            let destination = String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if destination.hasPrefix("/") {
                current = destination
            } else {
                current = URL(fileURLWithPath: current).deletingLastPathComponent().appendingPathComponent(destination).path
            }
        }
        return path
    }

    private static func writeInPlace(_ data: Data, to path: String) throws(Failure) {
        // No O_TRUNC: it means nothing to a device or FIFO, and the file is not regular.
        let descriptor = open(path, O_WRONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw Failure(stage: .open, code: errno) }
        let writeError = writeAll(data, to: descriptor)
        let closeError: Int32? = close(descriptor) == 0 ? nil : errno
        if let code = writeError ?? closeError { throw Failure(stage: .writeInPlace, code: code) }
    }

    /// Writes all of `data` to `descriptor`, retrying short writes and EINTR; the `errno` of a failure, or nil.
    public static func writeAll(_ data: Data, to descriptor: Int32) -> Int32? {
        data.withUnsafeBytes { buffer in
            guard var pointer = buffer.baseAddress else { return nil }
            var remaining = buffer.count
            while remaining > 0 {
                let count = Glibc.write(descriptor, pointer, remaining)
                if count < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                if count == 0 { return EIO }
                pointer += count
                remaining -= count
            }
            return nil
        }
    }
}
