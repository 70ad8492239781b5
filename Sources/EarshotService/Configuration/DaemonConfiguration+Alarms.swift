import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs
extension DaemonConfiguration {
    /// Smoke and CO alarm patterns: `[alarms]`.
    package struct Alarms: Sendable, Equatable {
        /// Whether smoke_alarm and co_alarm come from the pattern detector fused with the classifier
        /// (`AlarmDetector`: T3 and T4 tone patterns, low-battery chirps as alarm_chirp) instead of the classifier
        /// groups alone. Key `pattern_detection`, default true.
        package var patternDetection: Bool = true

        package init() {}
    }

    /// The keys of `[alarms]`, in the order `config/earshotd.conf` documents them.
    package static let alarmKeys = ["pattern_detection"]
}
