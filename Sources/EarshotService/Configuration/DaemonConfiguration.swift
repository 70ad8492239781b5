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

/// Every setting of the daemon `earshotd`, with its built-in default.
///
/// The properties mirror the INI file `config/earshotd.conf` section by section (`[capture]`, `[analysis]`,
/// `[detection]` with `[group.NAME]` sections, `[output]`, `[daemon]`, `[alarms]`, `[history]`, `[clips]`, `[sleep]`,
/// `[mqtt]`, `[notify]`).
/// `DaemonConfiguration()` is the configuration with no file at all; ``load(path:overrides:)`` reads a file and
/// applies command-line overrides;
/// ``resolvedGroups(classLabels:)`` turns the detection settings into the label groups to watch.
///
/// Equality compares settings only, not the file lines they came from.
package struct DaemonConfiguration: Sendable, Equatable {
    /// Where a configuration file is looked for when `--config` is not given. A missing file at this path means
    /// "built-in defaults"; a missing file named with `--config` is an error.
    package static let defaultPath = "/etc/earshot/earshotd.conf"

    /// Where the audio comes from: `[capture]`.
    package struct Capture: Sendable, Equatable {
        /// The ALSA PCM name to capture from (`default`, `hw:1,0`, `plughw:CARD=Mic,DEV=0`, a `dsnoop` device,
        /// `pulse`). Key `device`, default `default`. Not used when ``input`` is set.
        package var device: String = "default"
        /// A file or standard input to stream in real time instead of the capture device. Key `input`: empty (the
        /// default) means capture from ``device``, `-` means raw audio on standard input, anything else is a file.
        package var input: InputSource? = nil
        /// Sample rate in Hz of raw standard input (`input = -`: signed 16-bit little-endian mono, S16_LE). Key
        /// `input_rate`, default 16000 (YAMNet's rate, so no resampling), allowed 8000...192000. Files carry their own rate.
        package var inputSampleRate: Int = 16_000

        package init() {}
    }

    /// A source that replaces the capture device: `[capture] input` or `--input`.
    package enum InputSource: Sendable, Equatable {
        /// A sound file (any format libsndfile reads), streamed at its own pace in real time.
        case file(path: String)
        /// Raw S16_LE mono samples at ``Capture/inputSampleRate`` on standard input (`-`).
        case standardInput
    }

    /// How audio is cut into windows and gated: `[analysis]`.
    package struct Analysis: Sendable, Equatable {
        /// Window duration in seconds. Key `window`, default 0.96 (one YAMNet patch: 96 frames of 10 ms), allowed
        /// 0.96...10.
        package var windowDuration: Double = 0.96
        /// Fraction of a window shared with the next, in [0, 1). Key `overlap`, default 0.5 (hop 0.48 s, the
        /// reference model's patch hop). The hop is `windowDuration * (1 - overlapFactor)`.
        package var overlapFactor: Double = 0.5
        /// RMS level in dBFS (`20 * log10(rms)` of samples in -1...1: a full-scale square wave is 0 dBFS, a
        /// full-scale sine -3 dBFS) below which a window counts as quiet and is not classified. Key `gate_dbfs`,
        /// default -50 (the level the project's issue suggests: far below speech or an alarm at a few metres, above
        /// a quiet room's microphone hiss), allowed -120...0.
        package var gateThresholdDBFS: Double = -50
        /// Minutes of uninterrupted digital silence (every sample exactly 0) before an `input_silent` health event.
        /// Key `silence_minutes`, default 10, allowed 0...1440; 0 turns the event off.
        package var silenceMinutes: Double = 10

        /// ``silenceMinutes`` in seconds.
        package var silenceSeconds: Double { silenceMinutes * 60 }
        /// Hop between window starts in seconds: `windowDuration * (1 - overlapFactor)`.
        package var hopSeconds: Double { windowDuration * (1 - overlapFactor) }

        package init() {}
    }

    /// Which label groups emit events and how they are tuned: `[detection]` and `[group.NAME]`.
    package struct Detection: Sendable, Equatable {
        /// Names of the groups that emit events, in order. Key `watch`, a list separated by `|` (or `,`); default
        /// `LabelGroup.defaultWatchList`. Each name is a preset (`LabelGroup.presets`) or a `[group.NAME]` section.
        package var watch: [String] = LabelGroup.defaultWatchList
        /// Settings from `[group.NAME]` sections, by group name: overrides of a preset's fields, or a new group.
        package var groups: [String: GroupSettings] = [:]
        package init() {}
    }

    /// How long a mute lasts when the command gives no duration (MQTT's switch, `{"cmd":"mute"}` without
    /// `minutes`, `earshot mute` without `--minutes`): keys in `[detection]`, kept apart from ``Detection`` because
    /// they shape no event (a reload that changes them ends none). A reload applies them to later mutes; mutes
    /// running keep their ends.
    package struct Mutes: Sendable, Equatable {
        /// For a life-safety group (`smoke_alarm`, `co_alarm`, `fire_alarm`: ``GroupMutes/lifeSafetyGroups``), in
        /// minutes. Key `alarm_mute_minutes`, default 15 (like a smoke alarm's own hush button, which re-arms it
        /// by itself after minutes: 8 to 10 in Kidde's manuals), allowed 1...1440.
        package var alarmMinutes: Int = 15
        /// For every other group, in minutes. Key `mute_minutes`, default 480 (8 hours: a night), allowed 1...1440.
        package var minutes: Int = 480

        /// The default duration of a mute of `group`, in minutes.
        package func defaultMinutes(of group: String) -> Int {
            GroupMutes.lifeSafetyGroups.contains(group) ? alarmMinutes : minutes
        }

        package init() {}
    }

    /// The keys of one `[group.NAME]` section; `nil` means "not set" (the preset's value, if NAME is a preset).
    /// A group that is not a preset needs ``classLabels`` and ``threshold``.
    package struct GroupSettings: Sendable, Equatable {
        /// Key `classes`: AudioSet display names separated by `|` (the names contain commas).
        package var classLabels: [String]?
        /// Key `threshold`: group score in 0...1 at or above which a window is positive.
        package var threshold: Float?
        /// Key `onset_windows`: k of the k-of-n onset rule, 1...100 and at most `onset_of`.
        package var onsetWindows: Int?
        /// Key `onset_of`: n of the k-of-n onset rule, 1...100.
        package var onsetOf: Int?
        /// Key `hold_seconds`: seconds without a positive window before the event ends, 0...3600.
        package var holdSeconds: Double?
        /// Key `min_interval_seconds`: seconds after an event's end before the group may start another, 0...86400.
        package var minIntervalSeconds: Double?
        /// Key `level_dbfs` (`[group.loud]` only): the RMS level in dBFS at or above which a window is loud,
        /// -120...0; default -30 (``LabelGroup/loudDefaultThresholdDBFS``).
        package var levelDBFS: Double?
        /// Key `min_seconds` (`[group.loud]` only): how long the level must stay at or above `level_dbfs` before
        /// an event starts, 0...600 seconds; default 2 (``LabelGroup/loudDefaultMinSeconds``). It sets the onset
        /// rule: that many consecutive windows (``LabelGroup/levelWindows(minSeconds:windowDuration:hopSeconds:)``).
        package var minSeconds: Double?

        package init(
            classLabels: [String]? = nil, threshold: Float? = nil, onsetWindows: Int? = nil, onsetOf: Int? = nil,
            holdSeconds: Double? = nil, minIntervalSeconds: Double? = nil, levelDBFS: Double? = nil,
            minSeconds: Double? = nil
        ) {
            self.levelDBFS = levelDBFS
            self.minSeconds = minSeconds
            self.classLabels = classLabels
            self.threshold = threshold
            self.onsetWindows = onsetWindows
            self.onsetOf = onsetOf
            self.holdSeconds = holdSeconds
            self.minIntervalSeconds = minIntervalSeconds
        }
    }

    /// Where events go: `[output]`.
    package struct Output: Sendable, Equatable {
        /// Path of the Unix stream socket that subscribers connect to. Key `socket`, default
        /// `/run/earshot/earshot.sock` (systemd's `RuntimeDirectory=earshot`); at most 107 bytes (`sun_path`).
        package var socketPath: String = "/run/earshot/earshot.sock"
        /// Permission bits of the socket file (`chmod` after `bind`). Key `socket_mode`, octal, default 0660: the
        /// daemon's user and group may connect, others may not. Allowed 0000...0777.
        package var socketMode: UInt32 = 0o660
        /// Bound of each subscriber's queue of unsent event lines in KiB; a client that falls this far behind loses
        /// lines (counted) instead of slowing the analysis. Key `client_queue_kib`, default 256, allowed 16...65536.
        package var clientQueueKiB: Int = 256
        /// The most subscribers connected at once; one more gets an error line (`too many subscribers`) and is
        /// disconnected. Key `max_clients`, default 64, allowed 1...4096 (each costs a descriptor and up to
        /// ``clientQueueKiB`` of memory).
        package var maxClients: Int = 64
        /// The most connections one user (the peer's uid, `SO_PEERCRED`) may hold at once, so that one member of the
        /// socket's group cannot lock the others out. Key `max_clients_per_user`, default 16, allowed 1...4096.
        package var maxClientsPerUser: Int = 16
        /// Seconds a subscriber's queue may stay full (lines dropped for it, the client not reading) before it is
        /// disconnected and its slot freed. Key `stalled_client_seconds`, default 60, allowed 1...86400.
        package var stalledClientSeconds: Int = 60
        /// The users whose connections may change the daemon's state over the socket (the commands
        /// `EventServer.Configuration.controlCommands`: `sleep_start`, `sleep_stop`, `mute`, `unmute`, `test`), as uids (names are looked up when the file is read). Key `control_users`, names or uids separated by
        /// commas or spaces; default empty: root and the daemon's own user.
        package var controlUsers: [UInt32] = []
        /// Whether each detection is also written to the systemd journal (structured fields `EARSHOT_*`); when false,
        /// or when there is no journal, the same line goes to standard error. Key `journal`, default true.
        package var journal: Bool = true

        /// ``clientQueueKiB`` in bytes.
        package var clientQueueBytes: Int { clientQueueKiB * 1024 }

        package init() {}
    }

    /// Custom classifiers run next to the built-in one: `[models]`.
    package struct Models: Sendable, Equatable {
        /// Head model files (`earshot train`, `earshot enroll`), absolute paths. Key `files`, a list separated by
        /// `|`; default empty. Each model is named after its file without the extension (`doorbell.earshot` is
        /// `doorbell`) and its classes are `MODEL:LABEL` in groups (e.g. `classes = doorbell:doorbell`).
        package var files: [String] = []

        package init() {}
    }

    /// Process supervision: `[daemon]`.
    package struct Daemon: Sendable, Equatable {
        /// Whether to send systemd watchdog pings (`WATCHDOG=1`) while the analysis is healthy, when the unit sets
        /// `WatchdogSec=`. Key `watchdog`, default true.
        package var watchdog: Bool = true

        package init() {}
    }

    package var capture = Capture()
    package var analysis = Analysis()
    package var detection = Detection()
    package var output = Output()
    package var daemon = Daemon()
    /// `[detection] alarm_mute_minutes` and `mute_minutes`: see ``Mutes``.
    package var mutes = Mutes()
    /// `[alarms]`: see ``Alarms``.
    package var alarms = Alarms()
    /// `[history]`: see ``History``.
    package var history = History()
    /// `[clips]`: see ``Clips``.
    package var clips = Clips()
    /// `[sleep]`: see ``Sleep``.
    package var sleep = Sleep()
    /// `[models]`: see ``Models``.
    package var models = Models()
    /// `[mqtt]`: see ``MQTT``.
    package var mqtt = MQTT()
    /// `[metrics]`: see ``Metrics``.
    package var metrics = Metrics()
    /// `[notify]`: see ``Notify``.
    package var notify = Notify()

    /// Where each file-set list came from ("path:line"), for error messages that are raised after parsing
    /// (unknown class names, an input file that cannot be opened, a storage path of the wrong kind). Keys:
    /// `group.NAME.classes`, `detection.watch`, `capture.input` (`--input` when the flag set it), `history.path`,
    /// `clips.directory`. Not part of equality.
    package var locations = SourceLocations()

    /// The built-in defaults (no configuration file).
    package init() {}
}

/// "path:line" notes kept beside the settings. Always equal, so that two configurations with the same settings
/// compare equal wherever their values were written.
extension DaemonConfiguration {
    /// The `locations` key of a `[models] files` entry.
    package static func modelLocationKey(_ path: String) -> String { "models.files:\(path)" }

    /// Where each `[models] files` entry was named (`FILE:LINE`), by path, for the errors of loading them.
    package var modelLocations: [String: String] {
        var result: [String: String] = [:]
        for path in models.files { result[path] = locations[Self.modelLocationKey(path)] }
        return result
    }
}

package struct SourceLocations: Sendable, Equatable {
    package var byKey: [String: String] = [:]

    package subscript(key: String) -> String? {
        get { byKey[key] }
        set { byKey[key] = newValue }
    }

    package static func == (lhs: SourceLocations, rhs: SourceLocations) -> Bool { true }
}
