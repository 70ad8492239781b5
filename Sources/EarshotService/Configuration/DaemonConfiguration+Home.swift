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
    /// `[history]`: see ``HistorySettings`` (the settings belong to the component that uses them).
    package typealias History = HistorySettings

    /// Sleep sessions and the snore report: `[sleep]`.
    package struct Sleep: Sendable, Equatable {
        /// Daily local-time window during which a sleep session runs by itself, e.g. `22:30-07:00`. Key `schedule`,
        /// default none (sessions start and stop with `earshot sleep start|stop`).
        package var schedule: SleepSchedule? = nil
        /// Directory where each session's report is written (`snore-YYYYMMDD-HHMM.json` and `.svg`). Key
        /// `report_dir`, default `sleep` in ``StateDirectory`` (/var/lib/earshot/sleep under systemd's
        /// `StateDirectory=earshot`), created when missing.
        package var reportDirectory: String = StateDirectory.path + "/sleep"
        /// Snore evidence (0...1) at which one window counts as a snore on its own. Key `threshold`, default 0.3
        /// (see `SnoreDetector.Configuration`), allowed 0...1.
        package var threshold: Float = SnoreDetector.Configuration().strongThreshold
        /// Lower snore evidence that counts when snores recur in a breathing rhythm (every 2-6 s). Key
        /// `rhythm_threshold`, default 0.2, allowed 0...1 and at most `threshold`.
        package var rhythmThreshold: Float = SnoreDetector.Configuration().weakThreshold
        /// A custom head (`earshot train` on folders `snoring` and `background`) whose snoring probability adds to
        /// the evidence. Key `model`, default none. Read at start and on reload (``loadSnoreHead()``); one that
        /// cannot be loaded stops the start, or the reload, with the reason.
        package var modelPath: String? = nil

        package init() {}

        /// The snore detector's settings these keys give (`threshold`, `rhythm_threshold`): the detector that
        /// decides group `snoring` in the daemon, its sleep sessions, `earshot detect` and `earshot report --snore`.
        package var detectorConfiguration: SnoreDetector.Configuration {
            var configuration = SnoreDetector.Configuration()
            configuration.strongThreshold = threshold
            configuration.weakThreshold = rhythmThreshold
            return configuration
        }
    }

    /// Whether this configuration sets up sleep reports: `[sleep] schedule` is set (sessions start by themselves)
    /// or `[sleep] report_dir` is set (in the file or on the command line). Only then do the start and
    /// `--check-config` refuse a report directory with a symbolic link in it or one that is not a directory
    /// (``checkStoragePaths()``, audit 15 F3): a daemon whose sleep sessions nobody set up does not stop over the
    /// default directory. A session started by hand (`earshot sleep start`) is still never written through a link:
    /// its marker and report writes refuse one (`SleepService`).
    package var sleepReportsExpected: Bool {
        sleep.schedule != nil || locations["sleep.report_dir"] != nil
    }

    /// `[sleep] model` as snore evidence; nil when none is set.
    /// - Throws: `EarshotError` beginning with where the key was set (`FILE:LINE: [sleep] model: `) and naming the
    ///   file: `.noInput` when it is missing, `.data` when it is not a head model, `.config` when it has no label
    ///   `snoring`.
    package func loadSnoreHead() throws(EarshotError) -> SnoreDetector.HeadEvidence? {
        guard let path = sleep.modelPath else { return nil }
        do throws(EarshotError) {
            return try SnoreDetector.HeadEvidence(head: try ClassifierHead(contentsOf: URL(fileURLWithPath: path)))
        } catch {
            // Set by a command's `--model` flag, or by a line of the file.
            let location = locations["sleep.model"]
            let prefix = location == "--model" ? "--model: " : (location.map { "\($0): " } ?? "") + "[sleep] model: "
            throw EarshotError(error.code, prefix + error.message, cause: error.cause)
        }
    }

    /// The keys of `[history]` and `[sleep]`, in the order `config/earshotd.conf` documents them.
    package static let historyKeys = ["enabled", "path", "retention_days"]
    package static let sleepKeys = ["schedule", "report_dir", "threshold", "rhythm_threshold", "model"]

    /// Sets one `[history]` or `[sleep]` key; returns what is allowed ("must be ...") when `value` is bad.
    package mutating func setHomeKey(section: String, key: String, value: String) -> String? {
        switch (section, key) {
        case ("history", "enabled"):
            guard let flag = SettingRules.flag.parse(value) else { return SettingRules.flag.requirement(for: value) }
            history.enabled = flag
        case ("history", "path"):
            guard !value.isEmpty else { return "must be the path of the database file" }
            // Relative to the working directory (`/` under systemd) would be a surprise: as [clips] directory.
            guard value.hasPrefix("/") else { return "must be an absolute file path, e.g. \(EventHistory.defaultPath)" }
            history.path = value
        case ("history", "retention_days"):
            let rule = SettingRules.wholeNumber(in: 0...36_500, unit: "days (0 keeps everything)")
            guard let days = rule.parse(value) else { return rule.requirement(for: value) }
            history.retentionDays = days
        case ("sleep", "schedule"):
            if value.isEmpty {
                sleep.schedule = nil
            } else {
                guard let schedule = SleepSchedule(value) else {
                    if SleepSchedule.isEmptyWindow(value) {
                        return "the start and the end are the same minute, an empty window (give the minute the session should stop, e.g. 22:30-07:00; empty: no schedule)"
                    }
                    return "must be a daily time window HH:MM-HH:MM in local time, e.g. 22:30-07:00 (empty: no schedule)"
                }
                sleep.schedule = schedule
            }
        case ("sleep", "report_dir"):
            guard value.hasPrefix("/") else { return "must be an absolute directory path, e.g. /var/lib/earshot/sleep" }
            sleep.reportDirectory = value
        case ("sleep", "threshold"):
            guard let threshold = SettingRules.threshold.parse(value) else { return SettingRules.threshold.requirement(for: value) }
            sleep.threshold = threshold
        case ("sleep", "model"):
            sleep.modelPath = value.isEmpty ? nil : value
        case ("sleep", "rhythm_threshold"):
            guard let threshold = SettingRules.threshold.parse(value) else { return SettingRules.threshold.requirement(for: value) }
            sleep.rhythmThreshold = threshold
        default:
            return "is not a known key (report this as a bug)"
        }
        return nil
    }

    /// Checks what spans keys of `[sleep]`: the rhythm threshold may not exceed the threshold.
    /// - Parameter rhythmThresholdWritten: whether the file sets `rhythm_threshold`. When it does, that key is
    ///   blamed (`[sleep] rhythm_threshold = 0.25: must be at most threshold (0.2)`); when only `threshold` is set,
    ///   below the default rhythm threshold, `threshold` is (`[sleep] threshold = 0.1: below rhythm_threshold
    ///   (default 0.2); set rhythm_threshold too, at most 0.1`).
    /// - Returns: the problem and the key it names; nil when there is none.
    package func homeConsistencyProblem(rhythmThresholdWritten: Bool = true) -> (key: String, problem: String)? {
        guard sleep.rhythmThreshold <= sleep.threshold else {
            if !rhythmThresholdWritten {
                return ("threshold", "[sleep] threshold = \(sleep.threshold): below rhythm_threshold (default \(sleep.rhythmThreshold)); set rhythm_threshold too, at most \(sleep.threshold)")
            }
            return ("rhythm_threshold", "[sleep] rhythm_threshold = \(sleep.rhythmThreshold): must be at most threshold (\(sleep.threshold))")
        }
        return nil
    }
}

/// A daily window of local time, `HH:MM-HH:MM`; it may cross midnight (`22:30-07:00`).
package struct SleepSchedule: Sendable, Equatable, CustomStringConvertible {
    /// Minutes after local midnight the window opens, 0...1439.
    package var startMinute: Int
    /// Minutes after local midnight the window closes, 0...1439 (before `startMinute` when it crosses midnight).
    package var endMinute: Int

    /// Parses `HH:MM-HH:MM` (24-hour clock); nil for anything else or an empty window (start equal to end).
    package init?(_ text: String) {
        let parts = text.split(separator: "-").map { $0.trimmingSpaces() }
        guard parts.count == 2, let start = Self.minute(parts[0]), let end = Self.minute(parts[1]), start != end else {
            return nil
        }
        startMinute = start
        endMinute = end
    }

    /// Whether `text` is `HH:MM-HH:MM` with the start and the end the same minute (``init(_:)`` refuses it).
    package static func isEmptyWindow(_ text: String) -> Bool {
        let parts = text.split(separator: "-").map { $0.trimmingSpaces() }
        guard parts.count == 2, let start = minute(parts[0]), let end = minute(parts[1]) else { return false }
        return start == end
    }

    package init(startMinute: Int, endMinute: Int) {
        self.startMinute = startMinute
        self.endMinute = endMinute
    }

    private static func minute(_ text: String) -> Int? {
        let fields = text.split(separator: ":", omittingEmptySubsequences: false)
        guard fields.count == 2, fields[0].count <= 2, fields[1].count == 2,
              let hour = Int(fields[0]), let minute = Int(fields[1]), (0..<24).contains(hour), (0..<60).contains(minute)
        else { return nil }
        return hour * 60 + minute
    }

    /// Whether `date` (in `timeZone`) falls inside the window.
    package func contains(_ date: Date, timeZone: TimeZone? = nil) -> Bool {
        let timeZone = timeZone ?? LocalTime.zone(at: date)
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        let parts = calendar.dateComponents([.hour, .minute], from: date)
        let minute = (parts.hour ?? 0) * 60 + (parts.minute ?? 0)
        return startMinute < endMinute
            ? minute >= startMinute && minute < endMinute
            : minute >= startMinute || minute < endMinute
    }

    /// `HH:MM-HH:MM`.
    package var description: String {
        func clock(_ minute: Int) -> String {
            (minute / 60 < 10 ? "0" : "") + "\(minute / 60):" + (minute % 60 < 10 ? "0" : "") + "\(minute % 60)"
        }
        return "\(clock(startMinute))-\(clock(endMinute))"
    }
}
