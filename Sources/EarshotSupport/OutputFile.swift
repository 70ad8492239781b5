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
/// The daemon's own files (sleep reports, the session marker) are written by
/// ``writePrivate(_:to:mode:what:hint:readerPatience:)``, which follows no link, writes into no file of another user
/// and waits for no FIFO; ``removeLeftoverStaging(in:for:)`` removes the staging files of writes cut short.
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
    ///   written in place, as ``write(_:to:what:hint:)`` does, but never waited for long (audit 14 F5: the caller is
    ///   the sleep report queue, which `sleep start` and `sleep stop` wait for): it is opened non-blocking, so a FIFO
    ///   that no process reads fails at once, and its reader is given `readerPatience` seconds to take the bytes;
    ///   one of another user is replaced.
    /// - Throws: `EarshotError` as ``write(_:to:what:hint:)``; `.io` (74) for this user's FIFO with no reader,
    ///   `cannot write NAME PATH: it is a FIFO that no process reads (remove it; earshotd writes its own file
    ///   there)`, or whose reader does not take the bytes in time, `...: it is a FIFO whose reader did not take the
    ///   62 bytes within 5 s (...)` (`a device` for a device).
    /// The directory of `path` is looked up as given (a link above the name is followed; the daemon's writers open
    /// their directory without following one and call ``writePrivate(_:in:name:path:mode:what:hint:readerPatience:)``).
    public static func writePrivate(
        _ data: Data, to path: String, mode: mode_t = 0o600, what: String = "",
        hint: String = "check the directory and free space", readerPatience: Double = 5
    ) throws(EarshotError) {
        let url = URL(fileURLWithPath: path)
        let directory = open(url.deletingLastPathComponent().path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else { throw described(Failure(stage: .open, code: errno), path, what, hint) }
        defer { close(directory) }
        try writePrivate(
            data, in: directory, name: url.lastPathComponent, path: path, mode: mode, what: what, hint: hint,
            readerPatience: readerPatience)
    }

    /// ``writePrivate(_:to:mode:what:hint:readerPatience:)`` into the directory open as `directory`: `name` is
    /// looked at, staged, renamed and removed relative to it (`fstatat`, `openat`, `renameat`, `unlinkat`), so that
    /// nothing is written where a link swapped in for the directory after it was opened points (audit 15 F1).
    /// - Parameters:
    ///   - name: the file's name in the directory (no `/`).
    ///   - path: the directory's path and `name`, for the lines.
    public static func writePrivate(
        _ data: Data, in directory: Int32, name: String, path: String, mode: mode_t = 0o600, what: String = "",
        hint: String = "check the directory and free space", readerPatience: Double = 5
    ) throws(EarshotError) {
        var status = stat()
        if fstatat(directory, name, &status, AT_SYMLINK_NOFOLLOW) == 0, status.st_uid == geteuid(),
           isDeviceOrFIFO(status.st_mode),
           try writeOwnInPlace(data, in: directory, name: name, path: path, what: what, patience: readerPatience)
        {
            return
        }
        do throws(Failure) {
            let (descriptor, temporary) = try createStaging(in: directory, besides: name, mode: 0o600)
            _ = fchmod(descriptor, mode)
            try finish(data, descriptor: descriptor, in: directory, temporary: temporary, target: name)
        } catch {
            throw described(error, path, what, hint)
        }
    }

    /// ``writePrivate(_:to:mode:what:hint:readerPatience:)``'s write into this user's FIFO or device at `path`:
    /// opened with `O_NONBLOCK` (open(2) of a FIFO would wait for a reader; ENXIO says there is none), checked to be
    /// this user's FIFO or device once opened (the path may name another file by then), and written as the reader
    /// takes the bytes (`poll`), for at most `patience` seconds.
    /// - Returns: true when written; false when `path` is something else by the time it is opened (it is replaced
    ///   then, as any other file).
    /// - Throws: `EarshotError(.io)` naming the FIFO or device, why, and the fix.
    private static func writeOwnInPlace(
        _ data: Data, in directory: Int32, name file: String, path: String, what: String, patience: Double
    ) throws(EarshotError) -> Bool {
        let name = what.isEmpty ? path : "\(what) \(path)"
        let fix = "remove it; earshotd writes its own file there"
        let descriptor = openat(directory, file, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else {
            // ENXIO: a FIFO no process has open for reading (for a device, no driver: replaced as any file).
            var status = stat()
            guard errno == ENXIO, fstatat(directory, file, &status, AT_SYMLINK_NOFOLLOW) == 0,
                  status.st_mode & S_IFMT == S_IFIFO else { return false }
            throw EarshotError(.io, "cannot write \(name): it is a FIFO that no process reads (\(fix))", cause: "no reader")
        }
        var opened = stat()
        guard fstat(descriptor, &opened) == 0, opened.st_uid == geteuid(), isDeviceOrFIFO(opened.st_mode) else {
            close(descriptor)
            return false
        }
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(0, patience) * 1e9)
        let writeError: Int32? = data.withUnsafeBytes { buffer in
            guard let base = buffer.baseAddress else { return nil }
            var offset = 0
            while offset < buffer.count {
                let count = Glibc.write(descriptor, base + offset, buffer.count - offset)
                if count > 0 {
                    offset += count
                    continue
                }
                let code = count < 0 ? errno : EIO
                if code == EINTR { continue }
                guard code == EAGAIN else { return code }
                let now = DispatchTime.now().uptimeNanoseconds
                guard now < deadline else { return ETIMEDOUT }
                var poller = pollfd(fd: descriptor, events: Int16(POLLOUT), revents: 0)
                _ = poll(&poller, 1, Int32(min((deadline - now) / 1_000_000 + 1, 60_000)))
            }
            return nil
        }
        let closeError: Int32? = close(descriptor) == 0 ? nil : errno
        if writeError == ETIMEDOUT {
            let kind = opened.st_mode & S_IFMT == S_IFIFO ? "a FIFO whose reader" : "a device that"
            throw EarshotError(
                .io,
                "cannot write \(name): it is \(kind) did not take the \(data.count) bytes within \(String(cFormat: "%g", patience)) s (\(fix))",
                cause: "timed out")
        }
        if let code = writeError ?? closeError {
            let reason = String(cString: strerror(code))
            throw EarshotError(.io, "cannot write \(name): \(reason)", cause: reason)
        }
        return true
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
    private static func createStaging(in directory: Int32, besides target: String, mode: mode_t) throws(Failure) -> (descriptor: Int32, name: String) {
        var code = EEXIST
        for _ in 0..<16 {
            let suffix = String(UInt64.random(in: 0...UInt64.max), radix: 16)
            let temporary = ".\(target).tmp-" + String(repeating: "0", count: 16 - suffix.count) + suffix
            let descriptor = openat(directory, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
            if descriptor >= 0 { return (descriptor, temporary) }
            code = errno
            guard code == EEXIST || code == EINTR else { break }
        }
        var existing = stat()
        if fstatat(directory, target, &existing, 0) == 0, existing.st_mode & S_IFMT == S_IFDIR { throw Failure(stage: .open, code: EISDIR) }
        throw Failure(stage: .open, code: code)
    }

    /// ``createStaging(in:besides:mode:)`` by path, beside `target`.
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

    /// Removes the staging files that writes into `directory` cut short left behind (the process ended between the
    /// staging file's creation and its rename: the daemon's stop deadline, a kill, a power cut; audit 14 F7):
    /// `.NAME.tmp-` and 16 hex digits (``createStaging(besides:mode:)``'s names) for a `NAME` that `isOurs`
    /// accepts, and only regular files of this process's user. The directory is opened without following a link
    /// (``SymbolicLinks/openDirectory(_:)``), and each name looked at and removed through it (`fstatat` with
    /// `AT_SYMLINK_NOFOLLOW`, `unlinkat`): nothing outside it is touched. Nothing is removed when it is missing, a
    /// link, or cannot be read.
    /// - Important: Call it before any write into `directory` begins: a write under way has such a file.
    /// - Returns: the names removed, sorted.
    /// The corresponding C functions are `fdopendir`, `readdir`, `fstatat` and `unlinkat`.
    package static func removeLeftoverStaging(in directory: String, for isOurs: (String) -> Bool) -> [String] {
        let descriptor = SymbolicLinks.openDirectory(directory)
        guard descriptor >= 0 else { return [] }
        guard let stream = fdopendir(descriptor) else {
            close(descriptor)
            return []
        }
        defer { closedir(stream) }
        let names = DirectoryNames.read(stream).names.filter { isStaging($0, isOurs) }
        let owner = geteuid()
        return names.sorted().filter { name in
            var status = stat()
            guard fstatat(descriptor, name, &status, AT_SYMLINK_NOFOLLOW) == 0, status.st_mode & S_IFMT == S_IFREG,
                  status.st_uid == owner else { return false }
            return unlinkat(descriptor, name, 0) == 0
        }
    }

    /// Whether `name` is `.TARGET.tmp-` and 16 lowercase hex digits, for a `TARGET` that `isOurs` accepts.
    private static func isStaging(_ name: String, _ isOurs: (String) -> Bool) -> Bool {
        let marker = ".tmp-"
        let bytes = Array(name.utf8)
        let digits = bytes.suffix(16)
        guard bytes.count > 1 + marker.utf8.count + 16, bytes.first == UInt8(ascii: "."),
              digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }),
              Array(bytes.dropLast(16).suffix(marker.utf8.count)) == Array(marker.utf8) else { return false }
        return isOurs(String(decoding: bytes.dropFirst().dropLast(16 + marker.utf8.count), as: UTF8.self))
    }

    /// ``finish(_:descriptor:temporary:target:)`` with both names relative to the directory open as `directory`.
    private static func finish(_ data: Data, descriptor: Int32, in directory: Int32, temporary: String, target: String) throws(Failure) {
        let writeError = writeAll(data, to: descriptor)
        let closeError: Int32? = close(descriptor) == 0 ? nil : errno
        if let code = writeError ?? closeError {
            unlinkat(directory, temporary, 0)
            throw Failure(stage: .write, code: code)
        }
        guard renameat(directory, temporary, directory, target) == 0 else {
            let code = errno
            unlinkat(directory, temporary, 0)
            throw Failure(stage: code == EISDIR ? .open : .write, code: code)
        }
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
