import FoundationEssentials
import EarshotSupport
import EarshotModel
import EarshotAnalysis
/// A change in the daemon's capture health, published to every subscriber and logged to the journal.
package struct HealthEvent: Sendable, Equatable {
    /// The health state names used on the socket (`"state"`) and in the journal (`EARSHOT_HEALTH`).
    package enum State: String, Sendable, Equatable, CaseIterable {
        /// Audio is flowing from the capture device (or input file).
        case captureLive = "capture_live"
        /// The capture device cannot be opened or was lost; the daemon retries with back-off.
        case captureUnavailable = "capture_unavailable"
        /// The capture source delivered audio, then nothing for some seconds (a hung `--input -` writer such as
        /// `arecord`, or a device that stopped delivering); capture goes on waiting. Said once per stall;
        /// ``captureLive`` says when audio arrives again.
        case inputStalled = "input_stalled"
        /// The input has been digital silence (all samples zero) for the configured number of minutes.
        case inputSilent = "input_silent"
        /// The capture buffer overran (xrun); audio was lost and the stream has a gap.
        case overrun = "overrun"
        /// The event history database cannot be written (locked, full disk, read-only); events wait in memory.
        case historyUnavailable = "history_unavailable"
        /// The event history that was unavailable (``historyUnavailable``) is written again; the message says
        /// whether events were lost meanwhile.
        case historyRecovered = "history_recovered"
        /// Clips cannot be saved (missing or read-only directory, full disk); events go on without clips.
        case clipsUnavailable = "clips_unavailable"
        /// A sleep session's report cannot be written to `[sleep] report_dir` (read-only, wrong owner, full disk):
        /// said at start when the directory cannot be written to, and when a stopped session's report fails. The
        /// report still goes to the subscribers (`snore_report`) and to MQTT.
        case sleepReportUnavailable = "sleep_report_unavailable"
        /// A sleep report that could not be written (``sleepReportUnavailable``) was written on a later try; the
        /// message and `report_json` say where.
        case sleepReportSaved = "sleep_report_saved"
        /// A sleep session was running when the previous earshotd stopped: a new one started at once; the message
        /// says where the earlier part's report is, or that it was lost (the daemon was killed).
        case sleepSessionResumed = "sleep_session_resumed"
        /// An output (the socket, the journal, the history, standard output) fell behind and lost events; the
        /// others and the analysis went on. Said once until it catches up.
        case outputBehind = "output_behind"
        /// The MQTT broker cannot be reached or refused the connection; messages wait in a bounded outbox and the
        /// daemon retries with back-off. Said once per outage.
        case mqttUnavailable = "mqtt_unavailable"
        /// The MQTT broker accepted the connection (at start, or again after ``mqttUnavailable``).
        case mqttConnected = "mqtt_connected"
        /// Notifications to a `[notify]` URL are being given up (no answer or an error status after the retries);
        /// detection goes on. Said once per URL until a notification gets through again.
        case notifyFailed = "notify_failed"
        /// A `[notify]` URL that was failing (``notifyFailed``) accepted a notification again.
        case notifyRecovered = "notify_recovered"
        /// A reload (SIGHUP, `systemctl reload`) found the configuration file bad: the message is its one-line error
        /// and "; running the previous configuration". The status reply shows it (`reload_error`) until a reload
        /// succeeds. Said once per failed reload.
        case configReloadFailed = "config_reload_failed"
        /// The system clock stepped (NTP setting a clock that started in 1970 or last month, `date -s`) by
        /// `step_seconds` (positive forward): the daemon's times follow it from then on, and what it stamped before
        /// (this run's history rows, a running sleep session's start) moved with it. Said once per step of 2 s or
        /// more.
        case clockChanged = "clock_changed"

        /// The syslog priority the journal entry gets: 6 (info) for `captureLive` and the recoveries, 5 (notice)
        /// for `clockChanged`, 3 (err) for `captureUnavailable`, 4 (warning) for the others.
        package var priority: Int {
            switch self {
            case .captureLive, .mqttConnected, .notifyRecovered, .historyRecovered, .sleepReportSaved: 6
            case .clockChanged: 5
            case .captureUnavailable: 3
            case .inputSilent, .inputStalled, .overrun, .historyUnavailable, .clipsUnavailable, .outputBehind, .mqttUnavailable, .notifyFailed,
                 .sleepReportUnavailable, .sleepSessionResumed, .configReloadFailed: 4
            }
        }
    }

    package var state: State
    /// One human line saying what happened, e.g. `capture from "default" running: 48000 Hz, 2 channels, S16_LE`.
    package var message: String
    /// Extra fields, in order, copied into the socket line after `state` and `message` (e.g. `"device"`,
    /// `"xruns"`); keys should be `[a-z0-9_]+` so that the journal can carry them as `EARSHOT_<KEY>`.
    package var details: JSONObject

    package init(state: State, message: String, details: JSONObject = [:]) {
        self.state = state
        self.message = message
        self.details = details
    }

    /// A `clock_changed` event: the step of the system clock, `seconds` (positive forward), found between the
    /// daemon's clock reading `before` (the old clock) and the system clock reading `after`.
    package static func clockChanged(seconds: Double, before: Date, after: Date) -> HealthEvent {
        let direction = seconds >= 0 ? "forward" : "back"
        return HealthEvent(
            state: .clockChanged,
            message: "the system clock was set \(direction) by \(clockStepText(abs(seconds))) (from \(EventJSON.timestamp(before)) to \(EventJSON.timestamp(after)); NTP or a manual change): times from now on follow it; the events this earshotd stored before and a running sleep session's start were moved by the step, and durations do not count it",
            details: ["step_seconds": .number(seconds, decimals: 1)])
    }

    /// `20430 d 0 h 4 min` for a step of more than a day, `1 h 0 min 0.0 s`, or `3.2 s`.
    package static func clockStepText(_ seconds: Double) -> String {
        let tenths = Int64((seconds * 10).rounded())
        let whole = tenths / 10
        let days = whole / 86_400, hours = whole % 86_400 / 3600, minutes = whole % 3600 / 60
        let rest = String(cFormat: "%.1f s", Double(whole % 60) + Double(tenths % 10) / 10)
        if days > 0 { return "\(days) d \(hours) h \(minutes) min" }
        if hours > 0 { return "\(hours) h \(minutes) min \(rest)" }
        if minutes > 0 { return "\(minutes) min \(rest)" }
        return rest
    }

    /// The step (s) of a `clock_changed` event; nil for any other.
    package var clockStepSeconds: Double? {
        guard state == .clockChanged, case .number(let seconds, _)? = details["step_seconds"] else { return nil }
        return seconds
    }
}
