import FoundationEssentials
import Glibc
import EarshotSupport

/// Saving the audio around each detection: `[clips]`. Off by default: clips are recordings of the home.
package struct ClipSettings: Sendable, Equatable {
    /// Whether a clip is saved for each detection event. Key `enabled`, default false.
    package var enabled: Bool = false
    /// Where clips are written (`2026-11-30T21-15-03Z_smoke_alarm.wav`). Key `directory`, default
    /// `clips` in ``StateDirectory`` (/var/lib/earshot/clips under systemd's `StateDirectory=earshot`, beside the
    /// event history); an absolute path. The directory itself is created (mode 0700) when missing; its parent
    /// must exist.
    package var directory: String = StateDirectory.path + "/clips"
    /// Seconds of audio kept before an event's start. Key `pre_seconds`, default 5, allowed 0...30.
    package var preSeconds: Double = 5
    /// Seconds of audio kept after an event's end. Key `post_seconds`, default 5, allowed 0...30.
    package var postSeconds: Double = 5
    /// The most clips kept in ``directory``; after each save the oldest beyond it are deleted. Key `max_clips`,
    /// default 200, allowed 1...100000.
    package var maxClips: Int = 200
    /// Days a clip is kept (by its modification time). Key `retention_days`, default 7, allowed 1...3650.
    package var retentionDays: Int = 7
    /// The groups whose events are saved. Key `groups`, a list separated by `|` (or `,`); empty (the default)
    /// means every group that emits events (the watched groups, alarm_chirp with pattern detection, snoring
    /// during sleep sessions).
    package var groups: [String] = []

    package init() {}

    /// Whether events of `group` are saved.
    package func saves(group: String) -> Bool {
        groups.isEmpty || groups.contains(group)
    }
}
