import FoundationEssentials

/// Where earshotd keeps its state (event history, saved clips, sleep reports) unless the configuration names a path.
///
/// systemd's `StateDirectory=earshot` (systemd/earshotd.service) creates /var/lib/earshot and passes it to the service
/// as `$STATE_DIRECTORY` (a colon-separated list when the unit names several; the first is ours). earshotd takes that
/// variable when it holds an absolute path, else /var/lib/earshot. Tests and the benchmark set it to a scratch
/// directory so that a daemon they start never writes into the machine's real history.
public enum StateDirectory {
    /// The default without `$STATE_DIRECTORY`.
    public static let fallback = "/var/lib/earshot"

    /// `$STATE_DIRECTORY`'s first entry when absolute, else ``fallback``; without a trailing slash.
    public static var path: String {
        let entry = ProcessInfo.processInfo.environment["STATE_DIRECTORY"]?.split(separator: ":").first.map(String.init)
        guard let entry, entry.hasPrefix("/"), entry.count > 1 else { return fallback }
        return entry.hasSuffix("/") ? String(entry.dropLast()) : entry
    }
}

extension StateDirectory {
    /// The file `name` beside `historyPath` (`[history] path`, /var/lib/earshot/history.sqlite3 by default, or
    /// /var/lib/earshot/NAME/... for `earshotd@NAME`): in the daemon's state directory, where it keeps what must
    /// outlive a restart (`notify-outbox.json`, `mutes.json`).
    public static func file(_ name: String, besideHistory historyPath: String) -> String {
        guard let slash = historyPath.lastIndex(of: "/") else { return name }
        return historyPath[..<slash].isEmpty ? "/" + name : historyPath[..<slash] + "/" + name
    }

    /// The directory of earshotd's configuration files; `earshotd@NAME` reads NAME.conf in it.
    public static let configurationDirectory = "/etc/earshot"

    /// The instance of systemd/earshotd@.service whose configuration file `configurationFile` is, and the state
    /// directory that instance runs with: the unit starts `earshotd --config /etc/earshot/NAME.conf` with
    /// `StateDirectory=earshot/NAME`, so its `$STATE_DIRECTORY` is /var/lib/earshot/NAME. nil for any other file,
    /// /etc/earshot/earshotd.conf (earshotd.service's) included. A relative path is taken from
    /// `currentDirectory`; `.` and `..` are resolved, symbolic links are not (the unit names the file itself).
    ///
    /// `earshot history --config /etc/earshot/garage.conf` reads the history earshotd@garage writes through this
    /// (trial 14 D3).
    public static func instance(configurationFile: String, currentDirectory: String) -> (name: String, directory: String)? {
        let absolute = configurationFile.hasPrefix("/") ? configurationFile : currentDirectory + "/" + configurationFile
        var parts: [Substring] = []
        for part in absolute.split(separator: "/") {
            switch part {
            case ".": continue
            case "..": if !parts.isEmpty { parts.removeLast() }
            default: parts.append(part)
            }
        }
        guard let file = parts.popLast(), "/" + parts.joined(separator: "/") == configurationDirectory,
              file.hasSuffix(".conf") else { return nil }
        let name = String(file.dropLast(".conf".count))
        guard !name.isEmpty, name != "earshotd" else { return nil }
        return (name, fallback + "/" + name)
    }
}
