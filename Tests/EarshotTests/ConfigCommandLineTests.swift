import Foundation
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("Config: earshotd command line")
struct ConfigCommandLineTests {
    @Test("no arguments: run with the default configuration file and no overrides")
    func empty() throws {
        #expect(try DaemonCommandLine.parse([String]()) == DaemonCommandLine())
    }

    @Test("every flag, in both --flag value and --flag=value forms")
    func everyFlag() throws {
        let parsed = try DaemonCommandLine.parse([
            "--config", "/etc/earshot/test.conf", "--device=hw:1,0", "--socket", "/tmp/e.sock",
            "--watch", "smoke_alarm,baby_cry", "--gate-dbfs", "-40", "--window=1.92", "--overlap", "0.25",
            "--no-journal", "--foreground",
        ])
        #expect(parsed == DaemonCommandLine(
            action: .run, configPath: "/etc/earshot/test.conf",
            overrides: .init(device: "hw:1,0", socketPath: "/tmp/e.sock", windowDuration: 1.92, overlapFactor: 0.25,
                             gateThresholdDBFS: -40, watch: ["smoke_alarm", "baby_cry"], journal: false),
            foreground: true))

        let stdin = try DaemonCommandLine.parse(["--input", "-", "--input-rate", "48000"])
        #expect(stdin.overrides.input == .standardInput)
        #expect(stdin.overrides.inputSampleRate == 48_000)
        #expect(stdin.inputPacing == .realTime)
        #expect(try DaemonCommandLine.parse(["--input", "-", "--input-speed", "max"]).inputPacing == .consumer)
        #expect(try DaemonCommandLine.parse(["--input=a.wav", "--input-speed=250"]).inputPacing == .clock(speed: 250))
        #expect(try DaemonCommandLine.parse(["--input", "alarm.flac"]).overrides.input == .file(path: "alarm.flac"))
        #expect(try DaemonCommandLine.parse(["--check-config"]).action == .checkConfig)
        #expect(try DaemonCommandLine.parse(["--check-config", "-h"]).action == .help)
        #expect(try DaemonCommandLine.parse(["--version"]).action == .version)
        #expect(try DaemonCommandLine.parse(["--version", "--check-config"]).action == .version)
        #expect(try DaemonCommandLine.parse(["--version", "--help"]).action == .help)
        // One leading dash is a value: a negative number, standard input; `--` only inline.
        #expect(try DaemonCommandLine.parse(["--gate-dbfs", "-40"]).overrides.gateThresholdDBFS == -40)
        #expect(try DaemonCommandLine.parse(["--device=--odd-name"]).overrides.device == "--odd-name")
    }

    @Test("the overrides reach the configuration")
    func overridesApply() throws {
        let commandLine = try DaemonCommandLine.parse(["--device", "plughw:0", "--gate-dbfs", "-70", "--watch", "snoring"])
        let configuration = try DaemonConfiguration().applying(commandLine.overrides)
        var expected = DaemonConfiguration()
        expected.capture.device = "plughw:0"
        expected.analysis.gateThresholdDBFS = -70
        expected.detection.watch = ["snoring"]
        #expect(configuration == expected)
    }

    static let usageErrors: [(arguments: [String], message: String)] = [
        (["--devise", "hw:0"], "unknown option --devise (did you mean --device? see earshotd --help)"),
        (["-x"], "unknown option -x (see earshotd --help)"),
        (["hw:0"], "unexpected argument \"hw:0\" (earshotd takes options only; see earshotd --help)"),
        (["-"], "unexpected argument \"-\" (earshotd takes options only; see earshotd --help)"),
        (["--device"], "--device needs a value (an ALSA PCM name, e.g. default or hw:1,0)"),
        (["--config"], "--config needs a value (a configuration file)"),
        // A following option is a forgotten value, never the value itself.
        (["--device", "--check-config"], "--device needs a value (an ALSA PCM name, e.g. default or hw:1,0)"),
        (["--config", "--foreground"], "--config needs a value (a configuration file)"),
        (["--input", "--no-journal"], "--input needs a value (a sound file, or - for raw S16_LE on standard input)"),
        (["--gate-dbfs", "--window", "1"], "--gate-dbfs needs a value (a level in dBFS, e.g. -50)"),
        (["--config="], "--config needs a file name"),
        (["--gate-dbfs", "-200"], "--gate-dbfs -200: must be in [-120, 0] dBFS"),
        (["--gate-dbfs", "loud"], "--gate-dbfs loud: must be in [-120, 0] dBFS"),
        (["--overlap=1.5"], "--overlap 1.5: must be in [0, 1)"),
        (["--window", "0.5"], "--window 0.5: must be in [0.96, 10] seconds"),
        (["--input-rate", "44k", "--input", "-"], "--input-rate 44k: must be a whole number in [8000, 192000] Hz"),
        (["--socket", ""], "--socket : must be a path of 1 to 107 bytes (the limit of a Unix socket address)"),
        (["--watch", ","], "--watch needs group names separated by commas, e.g. smoke_alarm,baby_cry"),
        (["--foreground=yes"], "--foreground takes no value"),
        (["--device", "hw:0", "--device", "hw:1"], "--device given twice; keep one"),
        (["--device", "hw:0", "--input", "a.wav"],
         "--device and --input exclude each other: capture from a device or stream an input, not both"),
        (["--input", "a.wav", "--input-rate", "8000"],
         "--input-rate applies to raw standard input (--input -), not to a file: files carry their own rate"),
        (["--input", ""], "--input needs a sound file, or - for raw S16_LE on standard input"),
        (["--input", "-", "--input-speed", "0"], "--input-speed 0: must be a number in (0, 100000] or max, e.g. 100"),
        (["--input", "-", "--input-speed", "fast"], "--input-speed fast: must be a number in (0, 100000] or max, e.g. 100"),
        (["--input-speed", "max"],
         "--input-speed applies to --input (a file or -), not to a capture device: a device keeps its own clock"),
    ]

    @Test("usage errors name the flag and exit 64", arguments: usageErrors)
    func usageError(_ arguments: [String], _ message: String) {
        let error = #expect(throws: EarshotError.self) {
            try DaemonCommandLine.parse(arguments)
        }
        #expect(error == EarshotError(.usage, message))
        // The status earshotd exits with for it (main prints the message and exits with the error's status).
        #expect(error?.exitStatus == 64)
    }

    @Test("earshotd --version prints the version on standard output and exits 0", .needsEarshotdBuilt)
    func versionRun() throws {
        let outcome = try #require(try EarshotdRun.run(["--version"]))
        #expect(outcome.status == 0)
        #expect(outcome.output == "earshotd \(earshotVersion)\n")
        #expect(outcome.error == "")
    }

    @Test("--help text")
    func helpText() {
        #expect(DaemonCommandLine.helpText == """
            usage: earshotd [options]

            Listens to a capture device, classifies its sound with YAMNet and reports sound events (smoke alarm,
            baby crying, glass breaking, ...) on a Unix socket and in the journal. Settings come from the
            configuration file; options override it.

            options:
              --config FILE       configuration file (default /etc/earshot/earshotd.conf; when that file
                                  is missing, the built-in defaults)
              --device PCM        ALSA capture device: default, hw:1,0, plughw:CARD=Mic,DEV=0, a dsnoop device,
                                  pulse (default default)
              --input FILE|-      stream a sound file, or raw S16_LE mono from standard input (-), in real time
                                  instead of capturing
              --input-rate HZ     sample rate of raw standard input (default 16000)
              --input-speed X|max
                                  replay --input X times faster than real time, or as fast as the analysis
                                  reads it (max); for soak runs and benchmarks (default 1)
              --socket PATH       Unix socket for subscribers (default /run/earshot/earshot.sock)
              --watch G,G...      groups that emit events (default smoke_alarm,fire_alarm,co_alarm,baby_cry,glass_break)
              --gate-dbfs DBFS    windows whose RMS level is below this are not classified (default -50)
              --window S          analysis window in seconds, at least 0.96 (default 0.96)
              --overlap F         overlap of successive windows, in [0, 1) (default 0.5)
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
            """)
    }
}
