import FoundationEssentials
import EarshotSupport
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs

/// Which groups exist and how they are detected, decided in one place from a configuration and the running custom
/// models: the daemon's start and reload, and `earshot detect`, all build one of these.
///
/// - `groups`: the watched label groups, resolved against YAMNet's labels and the heads' `MODEL:LABEL` labels.
/// - `engine`: the debouncer over them, without `smoke_alarm`/`co_alarm` when the pattern detector decides those,
///   and without `snoring`, which the snore detector decides (`SnoreDetector`, settings from `[sleep]`).
/// - `subscribable`: what a socket client may subscribe to: the watched groups, `snoring` (sleep sessions) and
///   `alarm_chirp` where the pattern detector adds it.
/// - `unwatched`: presets and `[group.NAME]` sections not watched, with the advice a subscriber gets.
package struct DetectionPlan {
    package let groups: [LabelGroup]
    package let engine: DetectionEngine
    package let stageSettings: DetectionStage.Settings
    package let subscribable: [String]
    package let unwatched: EventServer.UnwatchedGroups
    package let classLabels: [String]
    /// The groups whose events are published with an on/off state (MQTT's binary sensors and mute switches): the
    /// watched groups, with `fire_alarm` shown as `smoke_alarm` when the pattern detector folds it in.
    package let stateGroups: [String]
    /// Every group that publishes events: ``stateGroups``, `snoring` (sleep sessions), `alarm_chirp` with patterns.
    package let eventGroups: [String]
    /// Whether `snoring` is watched: the snore detector's events go out always then, else only during a sleep
    /// session.
    package let snoringWatched: Bool

    /// - Parameters:
    ///   - yamnetLabels: the built-in classifier's 521 class labels.
    ///   - heads: the custom models running (their labels follow YAMNet's).
    ///   - configPath: the `--config` file (nil: the default path), for the advice to unwatched subscribers.
    /// - Throws: `EarshotError(.config)` for unknown class names or a bad group.
    package init(configuration: DaemonConfiguration, yamnetLabels: [String], heads: HeadModelSet, configPath: String?)
        throws(EarshotError)
    {
        classLabels = yamnetLabels + heads.classLabels
        groups = try configuration.resolvedGroups(classLabels: classLabels)
        let names = groups.map(\.name)
        let patterns = configuration.alarms.patternDetection
        snoringWatched = names.contains(SnoreDetector.groupName)
        engine = try DetectionEngine(
            groups: groups,
            watchList: AlarmDetector.engineWatchList(names, patternDetection: patterns).filter { $0 != SnoreDetector.groupName },
            classLabels: classLabels)
        var settings = DetectionStage.Settings()
        settings.windowDuration = configuration.analysis.windowDuration
        settings.overlapFactor = configuration.analysis.overlapFactor
        settings.gateThresholdDBFS = configuration.analysis.gateThresholdDBFS
        settings.silenceSeconds = configuration.analysis.silenceSeconds
        settings.alarmPatternDetection = patterns
        settings.watch = configuration.detection.watch
        settings.snore = configuration.sleep.detectorConfiguration
        stageSettings = settings
        subscribable = names + [SnoreDetector.groupName]
            + AlarmDetector.extraGroups(watch: names, patternDetection: patterns)
        unwatched = configuration.unwatchedGroups(subscribable: subscribable, configPath: configPath)
        var shown = names
        if patterns, let fire = shown.firstIndex(of: AlarmDetector.fireAlarm) {
            // fire_alarm is folded into smoke_alarm: its events are smoke_alarm's.
            shown.remove(at: fire)
            if !shown.contains(AlarmEvent.smokeAlarm) { shown.insert(AlarmEvent.smokeAlarm, at: fire) }
        }
        stateGroups = shown
        eventGroups = uniqued(shown + subscribable.filter { !(patterns && $0 == AlarmDetector.fireAlarm) })
    }
}
