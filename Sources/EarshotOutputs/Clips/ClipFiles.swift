import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotModel
import EarshotAnalysis
import EarshotDetection

/// The names of clip files, and retention: which of them to delete.
///
/// A clip is `YYYY-MM-DDTHH-MM-SSZ_GROUP.wav`, the UTC wall-clock second its event started and its group (group
/// names are 1 to 64 of `a-z 0-9 _`), e.g. `2026-11-30T21-15-03Z_smoke_alarm.wav`; a second clip of the same group
/// in the same second gets `-2` (then `-3`, ...) before `.wav`. While it is written it is `.NAME.partial`. Retention
/// and clean-up touch only names of exactly these forms, so other files in the directory are never deleted.
package enum ClipFiles {
    /// The extension of finished clips.
    package static let fileExtension = ".wav"
    /// Prefix and suffix of a clip being written.
    package static let partialPrefix = "."
    package static let partialSuffix = ".partial"

    /// `YYYY-MM-DDTHH-MM-SSZ_GROUP`, the UTC second of `start` (rounded down).
    package static func stem(start: Date, group: String) -> String {
        var seconds = time_t(start.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        if gmtime_r(&seconds, &parts) == nil { parts = tm() }
        func pad(_ value: Int32, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        let date = "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))"
        let time = "\(pad(parts.tm_hour, 2))-\(pad(parts.tm_min, 2))-\(pad(parts.tm_sec, 2))"
        return "\(date)T\(time)Z_\(group)"
    }

    /// The file name for `stem` and the `number`th clip with that stem (1: no suffix).
    package static func name(stem: String, number: Int = 1) -> String {
        number <= 1 ? stem + fileExtension : "\(stem)-\(number)\(fileExtension)"
    }

    /// The name a clip has while it is written.
    package static func partialName(for name: String) -> String {
        partialPrefix + name + partialSuffix
    }

    /// Whether `name` is a finished clip's name (see the type's documentation).
    package static func isClipName(_ name: String) -> Bool {
        guard name.hasSuffix(fileExtension) else { return false }
        let bytes = Array(name.utf8.dropLast(fileExtension.utf8.count))
        // "YYYY-MM-DDTHH-MM-SSZ_" is 21 bytes.
        let template = Array("0000-00-00T00-00-00Z_".utf8)
        guard bytes.count > template.count else { return false }
        for (byte, expected) in zip(bytes, template) {
            if expected == UInt8(ascii: "0") {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return false }
            } else if byte != expected {
                return false
            }
        }
        var rest = bytes[template.count...]
        if let dash = rest.lastIndex(of: UInt8(ascii: "-")) {
            let digits = rest[(dash + 1)...]
            guard (1...6).contains(digits.count), digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) })
            else { return false }
            rest = rest[..<dash]
        }
        return SettingRules.isValidGroupName(String(decoding: rest, as: UTF8.self))
    }

    /// Whether `name` is a clip left half-written (`.NAME.partial`, e.g. by a crash or a full disk).
    package static func isPartialName(_ name: String) -> Bool {
        name.hasPrefix(partialPrefix) && name.hasSuffix(partialSuffix)
            && isClipName(String(name.dropFirst(partialPrefix.count).dropLast(partialSuffix.count)))
    }

    /// What ``prune(directory:maxClips:retentionDays:now:)`` deleted, by name.
    package struct Pruned: Sendable, Equatable {
        /// Clips older than the retention.
        package var expired: [String] = []
        /// The oldest clips beyond the maximum count.
        package var excess: [String] = []
        /// Half-written clips (`.NAME.partial`) older than a minute.
        package var partial: [String] = []

        package var count: Int { expired.count + excess.count + partial.count }

        package init(expired: [String] = [], excess: [String] = [], partial: [String] = []) {
            self.expired = expired
            self.excess = excess
            self.partial = partial
        }
    }

    /// Applies retention to `directory`: deletes the clips whose modification time is more than `retentionDays`
    /// days before `now`, then the oldest clips (by modification time, then name) beyond `maxClips`, and
    /// half-written ones older than a minute (a writer never takes that long; they are left by a crash).
    ///
    /// Only regular files whose names are clip names count and are deleted (``isClipName(_:)``); other files,
    /// directories and symbolic links are left alone. A file that vanishes meanwhile is skipped.
    ///
    /// The directory is opened once without following a symbolic link at its name or above it
    /// (``SymbolicLinks/openDirectory(_:)``), and listed, looked at and deleted in through that descriptor
    /// (`fdopendir`, `fstatat`, `unlinkat`): a link there, or one swapped in meanwhile, never has its target's
    /// clip-named files deleted (audit 14 F1, audit 15 F1). Such a directory is not pruned, and not an error here:
    /// the writes say why no clip is saved.
    ///
    /// - Returns: the names deleted, each list oldest first.
    /// - Throws: ``EarshotError`` `.io` when the directory cannot be listed (not an error for a missing directory:
    ///   nothing to prune), e.g. `cannot list clips in /srv/clips: Not a directory (set [clips] directory to a
    ///   directory)`, or a clip cannot be deleted.
    /// The corresponding C functions are `openat`, `fdopendir`, `readdir`, `fstatat` and `unlinkat`.
    @discardableResult
    package static func prune(directory: String, maxClips: Int, retentionDays: Int, now: Date = Date())
        throws(EarshotError) -> Pruned
    {
        let descriptor = SymbolicLinks.openDirectory(directory)
        guard descriptor >= 0 else {
            let code = errno
            // Missing, a link (at it or above it), or under a parent that is not a directory (the writer reports
            // those): nothing to prune.
            var status = stat()
            if code == ENOENT || code == ELOOP || SymbolicLinks.first(in: directory) != nil
                || (code == ENOTDIR && stat(directory, &status) != 0) { return Pruned() }
            throw listingFailure(directory, code)
        }
        guard let stream = fdopendir(descriptor) else {
            let code = errno
            close(descriptor)
            throw listingFailure(directory, code)
        }
        defer { closedir(stream) }
        let listing = DirectoryNames.read(stream)
        if listing.error != 0 { throw listingFailure(directory, listing.error) }
        let names = listing.names
        struct Clip {
            var name: String
            var modified: Double
        }
        var clips: [Clip] = []
        var partials: [Clip] = []
        for name in names {
            let clip = isClipName(name)
            guard clip || isPartialName(name) else { continue }
            var status = stat()
            guard fstatat(descriptor, name, &status, AT_SYMLINK_NOFOLLOW) == 0, (status.st_mode & S_IFMT) == S_IFREG else { continue }
            let modified = Double(status.st_mtim.tv_sec) + Double(status.st_mtim.tv_nsec) / 1e9
            if clip { clips.append(Clip(name: name, modified: modified)) } else { partials.append(Clip(name: name, modified: modified)) }
        }
        clips.sort { ($0.modified, $0.name) < ($1.modified, $1.name) }
        partials.sort { ($0.modified, $0.name) < ($1.modified, $1.name) }
        let nowSeconds = now.timeIntervalSince1970
        let cutoff = nowSeconds - Double(retentionDays) * 86_400
        var pruned = Pruned()
        let expired = clips.prefix { $0.modified < cutoff }
        pruned.expired = expired.map(\.name)
        let kept = clips.dropFirst(expired.count)
        pruned.excess = kept.prefix(max(0, kept.count - max(0, maxClips))).map(\.name)
        pruned.partial = partials.filter { $0.modified < nowSeconds - 60 }.map(\.name)
        for name in pruned.expired + pruned.excess + pruned.partial {
            guard unlinkat(descriptor, name, 0) == 0 || errno == ENOENT else {
                let text = String(cString: strerror(errno))
                throw EarshotError(.io, "cannot delete the clip \(directory)/\(name): \(text)", cause: text)
            }
        }
        return pruned
    }

    private static func listingFailure(_ directory: String, _ code: Int32) -> EarshotError {
        let text = String(cString: strerror(code))
        let hint: String = switch code {
        case ENOTDIR: "set [clips] directory to a directory"
        case EACCES, EPERM: "make it readable by the daemon's user"
        default: "check the disk and [clips] directory"
        }
        return EarshotError(.io, "cannot list clips in \(directory): \(text) (\(hint))", cause: text)
    }
}
