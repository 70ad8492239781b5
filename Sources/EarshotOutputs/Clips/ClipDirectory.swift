import FoundationEssentials
import Glibc
import EarshotSupport
import EarshotModel
import EarshotAnalysis
import EarshotDetection

/// The clips directory, opened once without following a symbolic link at its name or in a directory above it
/// (``SymbolicLinks/openDirectory(_:creatingWithMode:parents:)``), and made (mode 0700, not its parents) when
/// missing. A clip is written through this handle only: its name is looked at (`fstatat`), its partial file created
/// (`openat` with `O_CREAT | O_EXCL | O_NOFOLLOW`), renamed (`renameat`) or removed (`unlinkat`) and the directory
/// flushed (`fsync`) relative to the descriptor, never by path. A link swapped in for the directory after the open
/// (by whoever may write in its parent) is therefore never written through: the clip lands in the directory that
/// was opened (audit 15 F1). The lookups by path (`lstat`) only word the refusal.
///
/// - Important: Not thread-safe; ``ClipWriter`` opens one per write, on its queue. The class owns the descriptor,
///   closed in `deinit`.
package final class ClipDirectory {
    /// The directory as configured (`[clips] directory`), for the lines.
    package let path: String
    /// The open directory (`O_RDONLY | O_DIRECTORY`).
    package let descriptor: Int32

    /// Opens `path`, making it (mode 0700 whatever the umask) when it is missing.
    /// - Throws: `EarshotError(.cannotCreate)`, one line with the fix: `cannot use the clips directory PATH: it is
    ///   a symbolic link, which earshotd does not follow (...)` (or `...: /srv is a symbolic link, ...` for one
    ///   above it), `PATH is not a directory (set [clips] directory to a directory)`, `cannot create the clips
    ///   directory PATH: No such file or directory (its parent directory does not exist: ...)`, `cannot use the clips
    ///   directory PATH: Not a directory (a part of the path is not a directory: ...)`.
    package init(opening path: String) throws(EarshotError) {
        self.path = path
        let (descriptor, creating) = SymbolicLinks.openDirectory(path, creatingWithMode: 0o700)
        guard descriptor >= 0 else {
            let code = errno
            // Nothing is written, listed or chmod-ed through a link there (audit 14 F1); the start and
            // --check-config refuse one too (DaemonConfiguration.checkStoragePaths).
            if let refusal = SymbolicLinks.directoryRefusal(
                path, doing: "cannot use the clips directory", setting: "[clips] directory", contents: "clips") {
                throw refusal
            }
            var status = stat()
            if code == ENOTDIR, lstat(path, &status) == 0, status.st_mode & S_IFMT != S_IFDIR {
                throw EarshotError(.cannotCreate, "\(path) is not a directory (set [clips] directory to a directory)")
            }
            throw Self.failure(creating ? "cannot create the clips directory \(path)" : "cannot use the clips directory \(path)", code)
        }
        self.descriptor = descriptor
    }

    deinit {
        close(descriptor)
    }

    /// Writes `clip` under a fresh name (``ClipFiles``: `.NAME.partial`, mode 0600, flushed, then renamed to its
    /// name); returns its path, `PATH/NAME`.
    /// - Throws: `EarshotError` naming the file, why and the fix (`cannot create PATH/.NAME.partial: No space left
    ///   on device (the disk is full: ...)`); the partial file is removed.
    package func write(_ clip: ClipAudio) throws(EarshotError) -> String {
        let stem = ClipFiles.stem(start: clip.wallClockStart, group: clip.group)
        var number = 1
        var name = ClipFiles.name(stem: stem)
        while exists(name) || exists(ClipFiles.partialName(for: name)) {
            number += 1
            guard number < 1_000 else {
                throw EarshotError(.cannotCreate, "cannot name a clip in \(path): \(stem) is taken 1000 times over")
            }
            name = ClipFiles.name(stem: stem, number: number)
        }
        let partialName = ClipFiles.partialName(for: name)
        let partial = path + "/" + partialName
        var file: Int32
        repeat {
            file = openat(descriptor, partialName, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        } while file < 0 && errno == EINTR
        guard file >= 0 else { throw Self.failure("cannot create \(partial)", errno) }
        var closed = false
        var renamed = false
        defer {
            if !closed { close(file) }
            if !renamed { unlinkat(descriptor, partialName, 0) }
        }
        // Whatever the umask: clips are recordings of the home, readable by the daemon's user only.
        guard fchmod(file, 0o600) == 0 else { throw Self.failure("cannot set the mode of \(partial)", errno) }
        let writer = try WaveFileWriter(descriptor: file, sampleRate: ClipAudio.sampleRate, path: partial)
        do throws(EarshotError) {
            try clip.samples.withUnsafeBufferPointer { (samples) throws(EarshotError) in try writer.write(samples) }
            try writer.finish()
        } catch {
            // libsndfile lets go of the descriptor before the `defer` above closes it (its number could be reused).
            let code = writer.failureErrno
            try? writer.finish()
            // A full disk says ENOSPC here: the same hint as for open and fsync.
            guard code != 0 else { throw error }
            throw Self.failure("cannot write \(partial)", code)
        }
        guard fsync(file) == 0 else { throw Self.failure("cannot flush \(partial)", errno) }
        closed = true
        guard close(file) == 0 else { throw Self.failure("cannot close \(partial)", errno) }
        guard renameat(descriptor, partialName, descriptor, name) == 0 else {
            throw Self.failure("cannot rename \(partial) to \(name)", errno)
        }
        renamed = true
        // The rename itself on disk (a crash right after leaves the clip, not its partial file).
        _ = fsync(descriptor)
        return path + "/" + name
    }

    private func exists(_ name: String) -> Bool {
        var status = stat()
        return fstatat(descriptor, name, &status, AT_SYMLINK_NOFOLLOW) == 0
    }

    /// `what: strerror (what to do)`.
    package static func failure(_ what: String, _ code: Int32) -> EarshotError {
        let text = String(cString: strerror(code))
        let hint: String = switch code {
        case ENOSPC, EDQUOT: "the disk is full: free space, or lower [clips] max_clips or retention_days"
        case EROFS: "a read-only file system: set [clips] directory to a writable place"
        case EACCES, EPERM: "not writable by the daemon's user: under systemd keep it under StateDirectory, /var/lib/earshot"
        case ENOENT: "its parent directory does not exist: create it, or set [clips] directory"
        case ENOTDIR: "a part of the path is not a directory: set [clips] directory"
        default: "check the disk and [clips] directory"
        }
        return EarshotError(code == ENOSPC || code == EIO ? .io : .cannotCreate, "\(what): \(text) (\(hint))", cause: text)
    }
}
