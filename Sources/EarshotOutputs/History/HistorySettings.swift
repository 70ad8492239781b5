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
}
