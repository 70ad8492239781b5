import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs

extension DaemonConfiguration {
    /// `[clips]`: see ``ClipSettings`` (the settings belong to the component that uses them).
    package typealias Clips = ClipSettings

    /// The keys of `[clips]`, in the order `config/earshotd.conf` documents them.
    package static let clipsKeys = ["enabled", "directory", "pre_seconds", "post_seconds", "max_clips", "retention_days", "groups"]

    /// Sets one `[clips]` key; returns what is allowed ("must be ...") when `value` is bad.
    package mutating func setClipsKey(key: String, value: String) -> String? {
        switch key {
        case "enabled":
            guard let flag = SettingRules.flag.parse(value) else { return SettingRules.flag.requirement(for: value) }
            clips.enabled = flag
        case "directory":
            guard value.hasPrefix("/") else { return "must be an absolute directory path, e.g. /var/lib/earshot/clips" }
            clips.directory = value
        case "pre_seconds":
            guard let seconds = SettingRules.clipSeconds.parse(value) else { return SettingRules.clipSeconds.requirement(for: value) }
            clips.preSeconds = seconds
        case "post_seconds":
            guard let seconds = SettingRules.clipSeconds.parse(value) else { return SettingRules.clipSeconds.requirement(for: value) }
            clips.postSeconds = seconds
        case "max_clips":
            guard let count = SettingRules.maxClips.parse(value) else { return SettingRules.maxClips.requirement(for: value) }
            clips.maxClips = count
        case "retention_days":
            guard let days = SettingRules.clipRetentionDays.parse(value) else {
                return SettingRules.clipRetentionDays.requirement(for: value)
            }
            clips.retentionDays = days
        case "groups":
            let names = SettingRules.listItems(value, separators: SettingRules.groupSeparators)
            if let bad = names.first(where: { !SettingRules.isValidGroupName($0) }) {
                return "\"\(bad)\" is not a group name (1 to 64 lowercase letters, digits and _; separate names with |, commas or spaces)"
            }
            clips.groups = uniqued(names)
        default:
            return "is not a known key (report this as a bug)"
        }
        return nil
    }

    /// A description of the first `[clips] groups` name that is no group this configuration can emit, or nil.
    /// Known: the presets, the `[group.NAME]` sections and `alarm_chirp` (the pattern detector's chirp events).
    package func unknownClipGroup() -> String? {
        let names = (groupNames + [AlarmEvent.alarmChirp]).sorted()
        for name in clips.groups where !names.contains(name) {
            let guess = NameSuggestion.likelyTypo(of: name, among: names).map { "did you mean \($0)? " } ?? ""
            return "\"\(name)\" is not a group (\(guess)groups: \(names.joined(separator: ", ")))"
        }
        return nil
    }
}
