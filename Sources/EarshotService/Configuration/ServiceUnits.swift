import FoundationEssentials
import Glibc
import EarshotSupport

/// The users the installed systemd units of earshotd run it as, read from the unit files as systemd reads them:
/// `earshotd.service` and `earshotd@.service` (the units the package ships, `User=earshot`), each the first file of
/// that name in the unit search path, then its drop-ins (`NAME.d/*.conf`, in file-name order; a drop-in of one name
/// in an earlier directory hides the later ones); the last `User=` of `[Service]` wins, and none (or an empty one)
/// is root. A masked unit (a link to /dev/null) or none at all runs no earshotd. Only what `--check-config` needs:
/// specifiers (`%i`), `DynamicUser=` and line continuations are not read.
package enum ServiceUnits {
    /// The units of earshotd the package installs (scripts/build-deb: /lib/systemd/system).
    package static let names = ["earshotd.service", "earshotd@.service"]

    /// systemd's search path for system units, in its order (systemd.unit(5)).
    package static let defaultDirectories = [
        "/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system",
        "/lib/systemd/system",
    ]

    /// The unit search path: `SYSTEMD_UNIT_PATH` when set, as systemd takes it (directories separated by `:`; an
    /// empty item, e.g. a trailing `:`, stands for ``defaultDirectories``), else ``defaultDirectories``.
    package static func directories(unitPath: String? = getenv("SYSTEMD_UNIT_PATH").map { String(cString: $0) }) -> [String] {
        guard let unitPath, !unitPath.isEmpty else { return defaultDirectories }
        return unitPath.split(separator: ":", omittingEmptySubsequences: false)
            .flatMap { $0.isEmpty ? defaultDirectories : [String($0)] }
    }

    /// The users other than root that the installed units of ``names`` run earshotd as, without repeats, in the
    /// order of ``names`` (usually `["earshot"]` on a host with the package, `[]` without it or when the units
    /// were changed to run as root).
    package static func users(in directories: [String] = directories()) -> [String] {
        var users: [String] = []
        for name in names {
            guard let user = user(ofUnit: name, in: directories), !["", "root", "0"].contains(user),
                  !users.contains(user) else { continue }
            users.append(user)
        }
        return users
    }

    /// The `User=` unit `name` runs as ("" when it sets none: root), or nil when no such unit is installed or it is
    /// masked.
    package static func user(ofUnit name: String, in directories: [String]) -> String? {
        guard let unit = directories.lazy.compactMap({ read($0 + "/" + name) }).first else { return nil }
        guard let text = unit else { return nil }  // masked: a link to /dev/null, or empty
        var user = lastUser(in: text) ?? ""
        var dropIns: [String: String] = [:]
        for directory in directories {
            let folder = directory + "/" + name + ".d"
            guard let entries = try? FileManager.default.contentsOfDirectory(atPath: folder) else { continue }
            for entry in entries where entry.hasSuffix(".conf") && dropIns[entry] == nil {
                dropIns[entry] = folder + "/" + entry
            }
        }
        for file in dropIns.keys.sorted() {
            if let text = read(dropIns[file]!) ?? nil, let set = lastUser(in: text) { user = set }
        }
        return user
    }

    /// The text of the unit file at `path`: nil when there is none, `.some(nil)` when it is masked (not a regular
    /// file with something in it: a link to /dev/null, an empty file).
    private static func read(_ path: String) -> String?? {
        guard PathKind(path: path) != .missing else { return nil }
        guard let bytes = try? RegularFile.read(path, limit: 1 << 20), !bytes.isEmpty else { return .some(nil) }
        return .some(String(decoding: bytes, as: UTF8.self))
    }

    /// The value of the last `User=` in the `[Service]` section of `text` (`""` for an empty one), or nil.
    private static func lastUser(in text: String) -> String? {
        var section = ""
        var user: String?
        for raw in text.split(whereSeparator: { $0 == "\n" || $0 == "\r" }) {
            let line = raw.trimmingWhitespace()
            if line.hasPrefix("#") || line.hasPrefix(";") || line.isEmpty { continue }
            if line.hasPrefix("[") {
                section = line
                continue
            }
            guard section == "[Service]", let equals = line.firstIndex(of: "=") else { continue }
            if line[..<equals].trimmingWhitespace() == "User" {
                user = line[line.index(after: equals)...].trimmingWhitespace()
            }
        }
        return user
    }
}
