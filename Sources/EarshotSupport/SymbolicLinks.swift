import Glibc

/// Paths the daemon writes without following a symbolic link: the event history, the clips directory and the sleep
/// report directory, whose parent another user may be able to write (`/var/lib/earshot` belongs to the service's
/// user, and a daemon run by hand as root writes there too). A link planted there would make the daemon create,
/// overwrite or chmod a file wherever it may (trial 13 D1, audit 14 F1).
///
/// The corresponding C functions are `lstat`, `open`, `openat` and `close`.
package enum SymbolicLinks {
    /// The first part of `path` that is a symbolic link, as written (`/srv/earshot` of `/srv/earshot/h.sqlite3` when
    /// `/srv/earshot` is a link, or `path` itself); nil when none is, or when a part is missing or cannot be looked at
    /// (opening the path says why then). A relative path is looked at from the working directory.
    package static func first(in path: String) -> String? {
        let absolute = path.hasPrefix("/")
        var prefix = ""
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            let component = String(part)
            prefix = prefix.isEmpty ? (absolute ? "/" : "") + component : prefix + "/" + component
            var status = stat()
            guard lstat(prefix, &status) == 0 else { return nil }
            if status.st_mode & S_IFMT == S_IFLNK { return prefix }
        }
        return nil
    }

    /// Why earshotd does not use `path`, whose first symbolic link is `link` (``first(in:)``), and the fix, for a
    /// setting the daemon writes in (`[history] path`, `[clips] directory`, `[sleep] report_dir`), e.g.
    /// `("is a symbolic link, which earshotd does not follow", "delete the link, which whoever may write in
    /// /var/lib/earshot could have planted; to keep the clips elsewhere, set [clips] directory to the real directory")`,
    /// or for a directory above it `("/srv is a symbolic link, which earshotd does not follow", "set [clips] directory
    /// to the path without links: realpath /srv shows where it leads")`.
    /// - Parameters:
    ///   - setting: the key as written in the file, `[clips] directory`.
    ///   - contents: what is kept there, `clips`.
    ///   - kind: `file` or `directory`.
    package static func refusal(path: String, link: String, setting: String, contents: String, kind: String)
        -> (what: String, fix: String)
    {
        guard link == path else {
            return ("\(link) is a symbolic link, which earshotd does not follow",
                    "set \(setting) to the path without links: realpath \(link) shows where it leads")
        }
        return ("is a symbolic link, which earshotd does not follow",
                "delete the link, which whoever may write in \(parentDirectory(of: path)) could have planted; to keep the \(contents) elsewhere, set \(setting) to the real \(kind)")
    }

    /// A writer's refusal of a directory with a symbolic link in it (at its name or above it) found while the daemon
    /// runs, after the start's check (``refusal(path:link:setting:contents:kind:)``, the directory's link first
    /// found by ``first(in:)``): `EarshotError(.cannotCreate)` with `"\(doing) \(directory): it is a symbolic
    /// link, which earshotd does not follow (delete the link, ...)"`, or `"...: /srv is a symbolic link, ..."` for a
    /// directory above it; nil when `directory` has no link.
    /// - Parameters:
    ///   - doing: the writer's words before the path, `cannot use the clips directory`.
    ///   - setting, contents: as for ``refusal(path:link:setting:contents:kind:)``.
    package static func directoryRefusal(_ directory: String, doing: String, setting: String, contents: String) -> EarshotError? {
        guard let link = first(in: directory) else { return nil }
        let refusal = Self.refusal(path: directory, link: link, setting: setting, contents: contents, kind: "directory")
        return EarshotError(
            .cannotCreate, "\(doing) \(directory): \(link == directory ? "it " : "")\(refusal.what) (\(refusal.fix))",
            cause: "symbolic link")
    }

    /// Creates `path` as a new empty file with `mode` (less the umask) and closes it, following no symbolic link on
    /// the way: each directory from the root (or the working directory) is opened with `O_NOFOLLOW`, and the file with
    /// `O_CREAT | O_EXCL`, which never follows a link at its name.
    /// - Returns: 0, or the `errno`: `EEXIST` when something is at `path` already (a symbolic link too), `ENOTDIR`
    ///   when a directory on the way is a symbolic link (or not a directory), `ENOENT` when one is missing.
    package static func createFile(_ path: String, mode: mode_t) -> Int32 {
        var components = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard let name = components.popLast() else { return EISDIR }
        let directory = walk(components, absolute: path.hasPrefix("/"))
        guard directory >= 0 else { return errno }
        defer { close(directory) }
        var descriptor: Int32
        repeat {
            descriptor = openat(directory, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        } while descriptor < 0 && errno == EINTR
        guard descriptor >= 0 else { return errno }
        close(descriptor)
        return 0
    }

    /// Opens the directory `path` to read its names or change it (`fchmod`, `fstatat`, `unlinkat`), following no
    /// symbolic link on the way: each directory from the root (or the working directory) is opened with
    /// `O_NOFOLLOW`, `path` itself too (`O_RDONLY | O_DIRECTORY`).
    /// - Returns: the descriptor, which the caller closes; or -1 with `errno` set: `ELOOP` when `path` is a symbolic
    ///   link, `ENOTDIR` when a directory above it is (or a part is not a directory), `ENOENT` when one is missing...
    package static func openDirectory(_ path: String) -> Int32 {
        var components = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard let name = components.popLast() else { return open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        let parent = walk(components, absolute: path.hasPrefix("/"))
        guard parent >= 0 else { return -1 }
        let descriptor = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        let code = errno
        close(parent)
        errno = code
        return descriptor
    }

    /// Opens the directory `path` as ``openDirectory(_:)`` does, making it first when it is missing (`mkdirat` with
    /// `mode`, set on it whatever the umask), and with `parents` the missing directories above it too (mode 0700 less
    /// the umask); each is made in its parent opened without following a link, so that nothing is made where a link
    /// swapped in meanwhile points (audit 15 F1). The caller works relative to the descriptor (`openat`,
    /// `renameat`, `unlinkat`): the path is not looked up again.
    /// - Returns: the descriptor, which the caller closes; or -1 with `errno` set, and `creating` true when a
    ///   directory was missing and could not be made (`ENOENT` for a missing parent without `parents`, `EACCES`...).
    package static func openDirectory(_ path: String, creatingWithMode mode: mode_t, parents: Bool = false)
        -> (descriptor: Int32, creating: Bool)
    {
        var components = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard let name = components.popLast() else { return (open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC), false) }
        var directory = open(path.hasPrefix("/") ? "/" : ".", directoryPath)
        guard directory >= 0 else { return (-1, false) }
        func step(_ component: String, _ flags: Int32, _ componentMode: mode_t, create: Bool) -> (Int32, Bool) {
            var next = openat(directory, component, flags | O_NOFOLLOW)
            var creating = false
            if next < 0, errno == ENOENT, create {
                creating = true
                if mkdirat(directory, component, componentMode) == 0 || errno == EEXIST {
                    next = openat(directory, component, flags | O_NOFOLLOW)
                }
            } else if next < 0, errno == ENOENT {
                creating = true
            }
            let code = errno
            close(directory)
            errno = code
            return (next, creating)
        }
        for component in components {
            let (next, creating) = step(component, directoryPath, 0o700, create: parents)
            guard next >= 0 else { return (-1, creating) }
            directory = next
        }
        var made = false
        var status = stat()
        if fstatat(directory, name, &status, AT_SYMLINK_NOFOLLOW) != 0, errno == ENOENT { made = true }
        let (descriptor, creating) = step(name, O_RDONLY | O_DIRECTORY | O_CLOEXEC, mode, create: true)
        guard descriptor >= 0 else { return (-1, creating) }
        if made { _ = fchmod(descriptor, mode) }
        return (descriptor, false)
    }

    /// The directory `components` lead to from the root (`absolute`) or the working directory, each opened with
    /// ``directoryPath`` and `O_NOFOLLOW`; -1 with `errno` set when one cannot be.
    private static func walk(_ components: [String], absolute: Bool) -> Int32 {
        var directory = open(absolute ? "/" : ".", directoryPath)
        guard directory >= 0 else { return -1 }
        for component in components {
            let next = openat(directory, component, directoryPath | O_NOFOLLOW)
            let code = errno
            close(directory)
            guard next >= 0 else {
                errno = code
                return -1
            }
            directory = next
        }
        return directory
    }

    /// `O_PATH | O_DIRECTORY | O_CLOEXEC`: a directory to look up names in, needing no permission to read it. With
    /// `O_NOFOLLOW` a symbolic link is opened as itself, which `O_DIRECTORY` then refuses (`ENOTDIR`). `O_PATH` is a
    /// macro Swift does not import: `__O_PATH`, 0o10000000 on x86-64 and arm64.
    private static let directoryPath: Int32 = 0o10_000_000 | O_DIRECTORY | O_CLOEXEC
}
