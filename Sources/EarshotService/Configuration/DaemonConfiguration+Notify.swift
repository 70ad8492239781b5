import EarshotSupport
import EarshotDetection
import EarshotOutputs

extension DaemonConfiguration {
    /// `[notify]`: see ``NotifySettings`` (the settings belong to the component that uses them).
    package typealias Notify = NotifySettings

    /// A description of the first `[notify] groups` name that is no group this configuration can emit, or nil.
    /// Known: the presets, the `[group.NAME]` sections and `alarm_chirp`.
    package func unknownNotifyGroup() -> String? {
        let names = (groupNames + [AlarmEvent.alarmChirp]).sorted()
        for name in notify.groups where !names.contains(name) {
            let guess = NameSuggestion.likelyTypo(of: name, among: names).map { "did you mean \($0)? " } ?? ""
            return "\"\(name)\" is not a group (\(guess)groups: \(names.joined(separator: ", ")))"
        }
        return nil
    }
}
