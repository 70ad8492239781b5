import FoundationEssentials
import Glibc
import EarshotSupport

/// The event history: `[history]`.
package struct HistorySettings: Sendable, Equatable {
    /// Whether finished detections are stored. Key `enabled`, default true.
    package var enabled: Bool = true
    /// The SQLite database file. Key `path`, default `history.sqlite3` in ``StateDirectory`` (systemd's
    /// `StateDirectory=earshot`: /var/lib/earshot/history.sqlite3); its directory must exist and be writable by
    /// the daemon's user.
    package var path: String = StateDirectory.path + "/history.sqlite3"
    /// Days a finished event is kept. Key `retention_days`, default 30, allowed 0...36500; 0 keeps everything.
    package var retentionDays: Int = 30

    package init() {}

    /// The environment variable that sets ``checkIntervalSeconds``, for tests only.
    package static let checkIntervalVariable = "EARSHOT_HISTORY_CHECK_SECONDS"

    /// Seconds between the daemon's full checks of the file (`PRAGMA quick_check`, ``EventHistoryWriter``): an hour
    /// (``EventHistoryWriter/defaultCheckInterval``), or for tests `EARSHOT_HISTORY_CHECK_SECONDS` (a number in
    /// 1...86400; anything else is ignored). Not a configuration key: an hour costs about 30 ms for 100,000 events,
    /// and every write is read back at once anyway.
    package static var checkIntervalSeconds: Double {
        guard let text = getenv(checkIntervalVariable).map({ String(cString: $0) }), let seconds = Double(text),
              seconds >= 1, seconds <= 86_400 else { return EventHistoryWriter.defaultCheckInterval }
        return seconds
    }
}
