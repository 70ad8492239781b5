import FoundationEssentials
import Glibc
import EarshotSupport
import EarshotAudio
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs
import EarshotService

/// Snoring in a recording (`earshot report --snore`): the daemon's detection stage over the file
/// (``FileDetection``, watching `snoring` only), whose snore detector decides group `snoring` exactly as in
/// `earshotd` and its sleep sessions, and a ``SnoreReport`` of the events it found.
///
/// Speed: one core, as `earshot detect`; about 0.4 % of a core per second of audio on a 2-core x86 VM (an 8-hour
/// night in about two minutes); memory bounded by the window, not by the file.
package enum SnoreFileAnalysis {
    /// What one analysis found.
    package struct Result: Sendable {
        package var report: SnoreReport
        /// What the decoder warned of without failing (a truncated MP3), one line; nil when nothing.
        package var decodingWarning: String?
    }

    /// `configuration` watching `snoring` alone, without the alarm pattern detector: the stage as it decides
    /// snoring, with nothing else to compute.
    package static func snoringOnly(_ configuration: DaemonConfiguration) -> DaemonConfiguration {
        var settings = configuration
        settings.detection.watch = [SnoreDetector.groupName]
        settings.alarms.patternDetection = false
        return settings
    }

    /// Analyses `url`. The report's length (session, share of snoring, per-hour rates, timeline bins) is the audio
    /// decoded, not the length the header declares: a file cut short (a copy interrupted, a recorder that died) is
    /// reported over the audio it holds, as the decoder's warning says (trial 9 #2).
    ///
    /// - Parameters:
    ///   - configuration: the daemon's configuration: its `[analysis]` (window, gate) and `[sleep]` (the snore
    ///     detector's thresholds and model) apply; the watch list is replaced by `snoring` alone.
    ///   - progress: called after each analysed minute of audio with the seconds analysed so far and the file's
    ///     length in seconds (nil when the container does not say), and once at the end.
    /// - Throws: ``EarshotError`` as ``FileDetection`` (a bad configuration or `[sleep] model`) and
    ///   ``AudioFileDecoder/init(url:)`` (missing, not audio: `.noInput`, `.data`), a decoding failure mid-file
    ///   (`.data`/`.io`).
    package static func analyze(
        url: URL, configuration: DaemonConfiguration, configPath: String? = nil,
        progress: ((_ seconds: Double, _ total: Double?) -> Void)? = nil
    ) throws(EarshotError) -> Result {
        let header = try AudioFileDecoder(url: url)
        let total = header.declaredFrameCount.map { Double($0) / Double(header.sampleRate) }
        let detection = try FileDetection(configuration: snoringOnly(configuration), configPath: configPath)
        var events: [SnoreEvent] = []
        var warning: String?
        var reported = 0.0
        let seconds = try detection.run(url: url, warning: { warning = $0 }) { output in
            switch output {
            case .snore(.offset(_, let event)):
                events.append(event)
            case .window(let result):
                if let progress, result.timeRange.end - reported >= 60 {
                    reported = result.timeRange.end
                    progress(min(reported, total ?? .infinity), total)
                }
            default:
                break
            }
        }
        progress?(seconds, total)
        let report = SnoreReport(events: events, duration: seconds, source: url.relativePath)
        return Result(report: report, decodingWarning: warning)
    }
}
