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
