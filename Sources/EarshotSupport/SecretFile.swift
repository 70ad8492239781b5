import Glibc

/// Who may read a file that holds a secret (`[mqtt] password_file`, `[notify] url_file`), judged from the owner,
/// group and permission bits of the file and of the directories above it, as the kernel does without ACLs (access
/// control lists are not read: a file they open to more users is not seen as such).
/// The corresponding C functions are `stat`, `realpath`, `getpwnam_r` and `getgrouplist`.
package enum SecretFile {
    /// The permission bits of `path` (`0644`) when every local user may read it: the others' read bit (`S_IROTH`)
    /// on the file, and the others' search bit (`S_IXOTH`) on each directory above it (a 0644 file in a
    /// `root:earshot` 0750 directory is read by root and the group alone). Nil when others may not, or when it
    /// cannot be resolved or stat'ed (reading it says why).
    package static func readableByEveryone(_ path: String) -> mode_t? {
        guard let (file, directories) = resolved(path),
              directories.allSatisfy({ $0.info.st_mode & S_IXOTH != 0 }) else { return nil }
        var info = stat()
        guard stat(file, &info) == 0, info.st_mode & S_IROTH != 0 else { return nil }
        return info.st_mode & 0o7777
    }

    /// Why the user `name` could not read `path`, or nil when it could, when no such user exists, or when `path`
    /// cannot be resolved (reading it says why). The reason names what is in the way, e.g. `owner root, group
    /// root, mode 0600`, or for a directory above it `the directory /srv/x (owner root, group root, mode 0700) does
    /// not let it through`.
    package static func unreadableReason(_ path: String, user name: String) -> String? {
        guard let user = Account(name: name), user.uid != 0, let (file, directories) = resolved(path) else { return nil }
        if let closed = directories.first(where: { !user.may(S_IXUSR, S_IXGRP, S_IXOTH, $0.info) }) {
            return "the directory \(closed.path) (\(describe(closed.info))) does not let it through"
        }
        var info = stat()
        guard stat(file, &info) == 0 else { return nil }
        return user.may(S_IRUSR, S_IRGRP, S_IROTH, info) ? nil : describe(info)
    }

    /// `path` with every link resolved (`realpath`), and the directories above it from `/` down with their
    /// `stat`; nil when it cannot be resolved or a directory cannot be stat'ed.
    private static func resolved(_ path: String) -> (file: String, directories: [(path: String, info: stat)])? {
        guard let resolved = realpath(path, nil) else { return nil }
        let file = String(cString: resolved)
        free(resolved)
        var directories: [(path: String, info: stat)] = []
        var prefix = ""
        for component in file.split(separator: "/").dropLast() {
            prefix += "/" + component
            var info = stat()
            guard stat(prefix, &info) == 0 else { return nil }
            directories.append((prefix, info))
        }
        return (file, directories)
    }

    /// The name of the primary group of the user `name` (`earshot` for `earshot`, `nogroup` for Debian's
    /// `nobody`), or nil when no such user exists.
    package static func primaryGroup(ofUser name: String) -> String? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16_384)
        guard getpwnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return Account.groupName(entry.pw_gid)
    }

    /// The name of group `gid` (getgrgid_r), or nil when it has none.
    package static func groupName(_ gid: gid_t) -> String? {
        var entry = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 16_384)
        guard getgrgid_r(gid, &entry, &buffer, buffer.count, &result) == 0, result != nil, let name = entry.gr_name
        else { return nil }
        return String(cString: name)
    }

    /// `owner root, group earshot, mode 0640`.
    static func describe(_ info: stat) -> String {
        "owner \(Account.userName(info.st_uid)), group \(Account.groupName(info.st_gid)), mode \(octal(info.st_mode & 0o7777))"
    }

    /// `mode` as 4 octal digits: `0644`.
    package static func octal(_ mode: mode_t) -> String {
        let digits = String(mode, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    /// A user's uid and groups (its primary group and the supplementary ones).
    private struct Account {
        var uid: uid_t
        var groups: Set<gid_t>

        init?(name: String) {
            var entry = passwd()
            var result: UnsafeMutablePointer<passwd>?
            var buffer = [CChar](repeating: 0, count: 16_384)
            guard getpwnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
            uid = entry.pw_uid
            var count: Int32 = 64
            var list = [gid_t](repeating: 0, count: Int(count))
            if getgrouplist(name, entry.pw_gid, &list, &count) < 0 {
                list = [gid_t](repeating: 0, count: Int(count))
                _ = getgrouplist(name, entry.pw_gid, &list, &count)
            }
            groups = Set(list.prefix(Int(max(0, count)))).union([entry.pw_gid])
        }

        /// Whether the bits for this user's class (owner, group or others, the first that applies) allow it.
        func may(_ owner: mode_t, _ group: mode_t, _ others: mode_t, _ info: stat) -> Bool {
            if info.st_uid == uid { return info.st_mode & owner != 0 }
            if groups.contains(info.st_gid) { return info.st_mode & group != 0 }
            return info.st_mode & others != 0
        }

        static func userName(_ uid: uid_t) -> String {
            var entry = passwd()
            var result: UnsafeMutablePointer<passwd>?
            var buffer = [CChar](repeating: 0, count: 16_384)
            guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil, let name = entry.pw_name
            else { return String(uid) }
            return String(cString: name)
        }

        static func groupName(_ gid: gid_t) -> String {
            SecretFile.groupName(gid) ?? String(gid)
        }
    }
}
