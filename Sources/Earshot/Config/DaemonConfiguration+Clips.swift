import FoundationEssentials
import Glibc
import Dispatch

extension DaemonConfiguration {
    /// Saving the audio around each detection: `[clips]`. Off by default: clips are recordings of the home.
    public struct Clips: Sendable, Equatable {
        /// Whether a clip is saved for each detection event. Key `enabled`, default false.
        public var enabled: Bool = false
        /// Where clips are written (`2026-11-30T21-15-03Z_smoke_alarm.wav`). Key `directory`, default
        /// `clips` in ``StateDirectory`` (/var/lib/earshot/clips under systemd's `StateDirectory=earshot`, beside the
        /// event history); an absolute path. The directory itself is created (mode 0700) when missing; its parent
        /// must exist.
        public var directory: String = StateDirectory.path + "/clips"
        /// Seconds of audio kept before an event's start. Key `pre_seconds`, default 5, allowed 0...30.
        public var preSeconds: Double = 5
        /// Seconds of audio kept after an event's end. Key `post_seconds`, default 5, allowed 0...30.
        public var postSeconds: Double = 5
        /// The most clips kept in ``directory``; after each save the oldest beyond it are deleted. Key `max_clips`,
        /// default 200, allowed 1...100000.
        public var maxClips: Int = 200
        /// Days a clip is kept (by its modification time). Key `retention_days`, default 7, allowed 1...3650.
        public var retentionDays: Int = 7
        /// The groups whose events are saved. Key `groups`, a list separated by `|` (or `,`); empty (the default)
        /// means every group that emits events (the watched groups, alarm_chirp with pattern detection, snoring
        /// during sleep sessions).
        public var groups: [String] = []

        public init() {}

        /// Whether events of `group` are saved.
        public func saves(group: String) -> Bool {
            groups.isEmpty || groups.contains(group)
        }
    }

    /// The keys of `[clips]`, in the order `config/earshotd.conf` documents them.
    static let clipsKeys = ["enabled", "directory", "pre_seconds", "post_seconds", "max_clips", "retention_days", "groups"]

    /// Sets one `[clips]` key; returns what is allowed ("must be ...") when `value` is bad.
    mutating func setClipsKey(key: String, value: String) -> String? {
        switch key {
        case "enabled":
            guard let flag = SettingRules.flag.parse(value) else { return SettingRules.flag.requirement }
            clips.enabled = flag
        case "directory":
            guard value.hasPrefix("/") else { return "must be an absolute directory path, e.g. /var/lib/earshot/clips" }
            clips.directory = value
        case "pre_seconds":
            guard let seconds = SettingRules.clipSeconds.parse(value) else { return SettingRules.clipSeconds.requirement }
            clips.preSeconds = seconds
        case "post_seconds":
            guard let seconds = SettingRules.clipSeconds.parse(value) else { return SettingRules.clipSeconds.requirement }
            clips.postSeconds = seconds
        case "max_clips":
            guard let count = SettingRules.maxClips.parse(value) else { return SettingRules.maxClips.requirement }
            clips.maxClips = count
        case "retention_days":
            guard let days = SettingRules.clipRetentionDays.parse(value) else {
                return SettingRules.clipRetentionDays.requirement
            }
            clips.retentionDays = days
        case "groups":
            let names = SettingRules.listItems(value, separators: SettingRules.groupSeparators)
            if let bad = names.first(where: { !SettingRules.isValidGroupName($0) }) {
                return "\"\(bad)\" is not a group name (1 to 64 lowercase letters, digits and _; separate names with |)"
            }
            clips.groups = uniqued(names)
        default:
            return "is not a known key (report this as a bug)"
        }
        return nil
    }

    /// A description of the first `[clips] groups` name that is no group this configuration can emit, or nil.
    /// Known: the presets, the `[group.NAME]` sections and `alarm_chirp` (the pattern detector's chirp events).
    func unknownClipGroup() -> String? {
        let names = (groupNames + [AlarmEvent.alarmChirp]).sorted()
        for name in clips.groups where !names.contains(name) {
            let guess = NameSuggestion.likelyTypo(of: name, among: names).map { "did you mean \($0)? " } ?? ""
            return "\"\(name)\" is not a group (\(guess)groups: \(names.joined(separator: ", ")))"
        }
        return nil
    }
}
