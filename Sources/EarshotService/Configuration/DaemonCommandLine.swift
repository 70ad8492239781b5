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

/// The command line of `earshotd`, parsed: what to do, which configuration file, and the flags that override it.
///
/// Flags take their value as the next argument or after `=` (`--device hw:1,0`, `--device=hw:1,0`). A separate
/// value may start with one `-` (`--gate-dbfs -40`, `--input -`) but not with `--`: `--device --check-config` is a
/// forgotten value, not a device named `--check-config` (such a name can still be given as `--device=--name`).
package struct DaemonCommandLine: Sendable, Equatable {
    /// What the daemon is asked to do.
    package enum Action: Sendable, Equatable {
        /// Run until SIGTERM or SIGINT.
        case run
        /// Print ``helpText`` on standard output and exit 0.
        case help
        /// Print "earshotd VERSION" (``earshotVersion``) on standard output and exit 0.
        case version
        /// Check the configuration as ``DaemonConfiguration/check(commandLine:serviceUsers:warn:)`` does (settings, class names, the
        /// input file), print its one-line result or the first error, and exit (0 or the error's status).
        case checkConfig
    }

    package var action: Action = .run
    /// `--config FILE`; nil means ``DaemonConfiguration/defaultPath``, missing or not.
    package var configPath: String?
    /// Flags that override the file's settings; kept so that a reload (SIGHUP) applies them again.
    package var overrides = DaemonConfiguration.Overrides()
    /// `--foreground`: the daemon is run from a terminal: log lines and events go to standard error and standard
    /// output instead of the journal. `earshotd` never forks, with or without it.
    package var foreground = false
    /// `--fallback-input FILE`: when the capture device cannot be opened at start, say so and stream FILE in real
    /// time through the same pipeline instead of retrying (the README's first command uses it on machines with no
    /// microphone). Never used after the device has worked once.
    package var fallbackInput: String?
    /// `--input-speed X|max`: how an `--input` file or stdin is paced. Default real time (`.clock(speed: 1)`); `X`
    /// (a number in (0, 100000]) replays X times faster, at most as fast as the analysis reads; `max` as fast as the
    /// analysis reads (``CapturePacing/consumer``). Nothing is dropped at any speed, and the events are the same.
    /// For soak runs and benchmarks (`scripts/soak`).
    package var inputPacing: CapturePacing = .realTime

    package init(action: Action = .run, configPath: String? = nil, overrides: DaemonConfiguration.Overrides = .init(),
                foreground: Bool = false) {
        self.action = action
        self.configPath = configPath
        self.overrides = overrides
        self.foreground = foreground
    }

    /// The text of `earshotd --help`. Defaults shown are the built-in ones (`DaemonConfiguration()`).
    package static let helpText: String = {
        let defaults = DaemonConfiguration()
        return """
            usage: earshotd [options]

            Listens to a capture device, classifies its sound with YAMNet and reports sound events (smoke alarm,
            baby crying, glass breaking, ...) on a Unix socket and in the journal. Settings come from the
            configuration file; options override it.

            options:
              --config FILE       configuration file (default \(DaemonConfiguration.defaultPath); when that file
                                  is missing, the built-in defaults)
              --device PCM        ALSA capture device: default, hw:1,0, plughw:CARD=Mic,DEV=0, a dsnoop device,
                                  pulse (default \(defaults.capture.device))
              --input FILE|-      stream a sound file, or raw S16_LE mono from standard input (-), in real time
                                  instead of capturing
              --input-rate HZ     sample rate of raw standard input (default \(defaults.capture.inputSampleRate))
              --input-speed X|max
                                  replay --input X times faster than real time, or as fast as the analysis
                                  reads it (max); for soak runs and benchmarks (default 1)
              --socket PATH       Unix socket for subscribers (default \(defaults.output.socketPath))
              --watch G,G...      groups that emit events (default \(defaults.detection.watch.joined(separator: ",")))
              --gate-dbfs DBFS    windows whose RMS level is below this are not classified (default \(SettingRules.format(defaults.analysis.gateThresholdDBFS)))
              --window S          analysis window in seconds, at least 0.96 (default \(SettingRules.format(defaults.analysis.windowDuration)))
              --overlap F         overlap of successive windows, in [0, 1) (default \(SettingRules.format(defaults.analysis.overlapFactor)))
              --no-journal        write detections to standard error instead of the systemd journal
              --foreground        running in a terminal: log to standard error, print events on standard output
              --fallback-input FILE
                                  if the capture device cannot be opened at start, stream FILE instead
              --check-config      check the configuration, its class names and the input file, print one
                                  line, then exit
              --version           print the version, then exit
              -h, --help          show this text

            SIGTERM or SIGINT stops the daemon; SIGHUP reloads the configuration file.
            Exit status: 0 done, 64 bad option, 65 input file not audio, 66 input file missing, 69 device
            unavailable, 71 system failure, 73 socket cannot be created, 78 bad configuration.
            """
    }()

    /// Parses the arguments after the program name (`CommandLine.arguments.dropFirst()`).
    ///
    /// Values are checked here with the same rules as the configuration file; `--watch` names are checked against
    /// the groups when the overrides are applied (the file may define groups).
    ///
    /// - Throws: `EarshotError(.usage)` (exit 64) naming the flag: an unknown option, a missing or bad value, a
    ///   positional argument, a separate value starting with `--`, `--device` with `--input`, `--input-rate` with
    ///   `--input FILE`, e.g.
    ///   `--overlap 1.5: must be in [0, 1)` or `unknown option --devise (did you mean --device? see earshotd --help)`.
    package static func parse<Arguments: Collection>(_ arguments: Arguments) throws(EarshotError) -> DaemonCommandLine
    where Arguments.Element == String {
        var result = DaemonCommandLine()
        var remaining = Array(arguments)[...]
        var seen = Set<String>()
        while let argument = remaining.popFirst() {
            guard argument.hasPrefix("-"), argument != "-" else {
                throw EarshotError(
                    .usage, "unexpected argument \"\(argument)\" (earshotd takes options only; see earshotd --help)")
            }
            var flag = argument
            var inlineValue: String?
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                flag = String(argument[..<equals])
                inlineValue = String(argument[argument.index(after: equals)...])
            }
            func value(_ what: String) throws(EarshotError) -> String {
                if let inlineValue { return inlineValue }
                // The next option is not a value: `--device --check-config` forgot the device.
                guard let next = remaining.first, !next.hasPrefix("--") else {
                    throw EarshotError(.usage, "\(flag) needs a value (\(what))")
                }
                remaining.removeFirst()
                return next
            }
            func noValue() throws(EarshotError) {
                if inlineValue != nil { throw EarshotError(.usage, "\(flag) takes no value") }
            }
            func parsed<T>(_ rule: SettingRule<T>, _ what: String) throws(EarshotError) -> T {
                let text = try value(what)
                guard let parsed = rule.parse(text) else {
                    throw EarshotError(.usage, "\(flag) \(text): \(rule.requirement(for: text))")
                }
                return parsed
            }
            let canonical = flag == "-h" ? "--help" : flag
            if seen.contains(canonical) && canonical != "--help" {
                throw EarshotError(.usage, "\(flag) given twice; keep one")
            }
            seen.insert(canonical)
            switch canonical {
            case "--help":
                try noValue()
                result.action = .help
            case "--check-config":
                try noValue()
                if result.action == .run { result.action = .checkConfig }
            case "--version":
                try noValue()
                if result.action != .help { result.action = .version }
            case "--foreground":
                try noValue()
                result.foreground = true
            case "--no-journal":
                try noValue()
                result.overrides.journal = false
            case "--config":
                let path = try value("a configuration file")
                guard !path.isEmpty else { throw EarshotError(.usage, "--config needs a file name") }
                result.configPath = path
            case "--device":
                result.overrides.device = try parsed(SettingRules.device, "an ALSA PCM name, e.g. default or hw:1,0")
            case "--input":
                let input = try value("a sound file, or - for raw S16_LE on standard input")
                guard !input.isEmpty else {
                    throw EarshotError(.usage, "--input needs a sound file, or - for raw S16_LE on standard input")
                }
                result.overrides.input = input == "-" ? .standardInput : .file(path: input)
            case "--fallback-input":
                let path = try value("a sound file")
                guard !path.isEmpty else { throw EarshotError(.usage, "--fallback-input needs a sound file") }
                result.fallbackInput = path
            case "--input-speed":
                let text = try value("a speed factor, e.g. 100, or max")
                if text == "max" {
                    result.inputPacing = .consumer
                } else if let speed = Double(text), speed > 0, speed <= 100_000 {
                    result.inputPacing = .clock(speed: speed)
                } else {
                    throw EarshotError(.usage, "--input-speed \(text): must be a number in (0, 100000] or max, e.g. 100")
                }
            case "--input-rate":
                result.overrides.inputSampleRate = try parsed(SettingRules.inputSampleRate, "a sample rate in Hz")
            case "--socket":
                result.overrides.socketPath = try parsed(SettingRules.socketPath, "a socket path")
            case "--watch":
                let text = try value("group names separated by commas")
                let names = SettingRules.listItems(text, separators: SettingRules.groupSeparators)
                guard !names.isEmpty else {
                    throw EarshotError(.usage, "--watch needs group names separated by commas, e.g. smoke_alarm,baby_cry")
                }
                result.overrides.watch = names
            case "--gate-dbfs":
                result.overrides.gateThresholdDBFS = try parsed(SettingRules.gateThresholdDBFS, "a level in dBFS, e.g. -50")
            case "--window":
                result.overrides.windowDuration = try parsed(SettingRules.windowDuration, "seconds, e.g. 0.96")
            case "--overlap":
                result.overrides.overlapFactor = try parsed(SettingRules.overlapFactor, "a fraction in [0, 1), e.g. 0.5")
            default:
                let typo = NameSuggestion.likelyTypo(of: flag, among: knownFlags).map { "did you mean \($0)? " } ?? ""
                throw EarshotError(.usage, "unknown option \(flag) (\(typo)see earshotd --help)")
            }
        }
        if result.overrides.device != nil && result.overrides.input != nil {
            throw EarshotError(.usage, "--device and --input exclude each other: capture from a device or stream an input, not both")
        }
        if result.inputPacing != .realTime && result.overrides.input == nil {
            throw EarshotError(.usage, "--input-speed applies to --input (a file or -), not to a capture device: a device keeps its own clock")
        }
        if result.overrides.inputSampleRate != nil, case .file = result.overrides.input {
            throw EarshotError(.usage, "--input-rate applies to raw standard input (--input -), not to a file: files carry their own rate")
        }
        return result
    }

    package static let knownFlags = [
        "--config", "--device", "--input", "--input-rate", "--input-speed", "--socket", "--watch", "--gate-dbfs", "--window",
        "--overlap", "--no-journal", "--foreground", "--fallback-input", "--check-config", "--version", "--help",
    ]
}
