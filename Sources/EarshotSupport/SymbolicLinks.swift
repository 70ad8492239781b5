import Glibc

/// Paths the daemon writes without following a symbolic link: the event history's, whose directory another user may
/// be able to write (`/var/lib/earshot` belongs to the service's user, and a daemon run by hand as root writes there
/// too). A link planted there would make the daemon create or overwrite a file wherever it may write (trial 13 D1).
///
/// The corresponding C functions are `lstat`, `openat` and `close`.
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

    /// Creates `path` as a new empty file with `mode` (less the umask) and closes it, following no symbolic link on
    /// the way: each directory from the root (or the working directory) is opened with `O_NOFOLLOW`, and the file with
    /// `O_CREAT | O_EXCL`, which never follows a link at its name.
    /// - Returns: 0, or the `errno`: `EEXIST` when something is at `path` already (a symbolic link too), `ENOTDIR`
    ///   when a directory on the way is a symbolic link (or not a directory), `ENOENT` when one is missing.
    package static func createFile(_ path: String, mode: mode_t) -> Int32 {
        var components = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard let name = components.popLast() else { return EISDIR }
        var directory = open(path.hasPrefix("/") ? "/" : ".", openDirectory)
        guard directory >= 0 else { return errno }
        defer { close(directory) }
        for component in components {
            let next = openat(directory, component, openDirectory | O_NOFOLLOW)
            guard next >= 0 else { return errno }
            close(directory)
            directory = next
        }
        var descriptor: Int32
        repeat {
            descriptor = openat(directory, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        } while descriptor < 0 && errno == EINTR
        guard descriptor >= 0 else { return errno }
        close(descriptor)
        return 0
    }

    /// `O_PATH | O_DIRECTORY | O_CLOEXEC`: a directory to look up names in, needing no permission to read it. With
    /// `O_NOFOLLOW` a symbolic link is opened as itself, which `O_DIRECTORY` then refuses (`ENOTDIR`). `O_PATH` is a
    /// macro Swift does not import: `__O_PATH`, 0o10000000 on x86-64 and arm64.
    private static let openDirectory: Int32 = 0o10_000_000 | O_DIRECTORY | O_CLOEXEC
}
