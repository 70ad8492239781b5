import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot bench [--quick] [--no-daemon] [--layers] [--json] [--audio FILE] [--daemon PATH]`: performance figures
/// for this machine (see `Benchmark` and `DaemonBenchmark`). Prints figures; asserts nothing.
enum BenchCommand: EarshotCommand {
    static let usage = "usage: earshot bench [--quick] [--no-daemon | --daemon-only] [--layers] [--json] [--audio FILE] [--daemon PATH]"

    static let help = """
    \(usage)

    Measures on this machine (release builds only give meaningful figures):
      model load        weights file to first result
      patch latency     one 96x64 log-mel patch to 521 scores, 1 thread (median and p95)
      waveform patch    15600 samples to 521 scores (front end + network), as one TFLite invoke
      front end         log-mel spectrogram, ms per second of audio
      inference         front end + network on a 5-minute 16 kHz WAV (no resampling), as `earshot analyze` runs
                        it (AudioFileAnalyzer), 1 thread and all cores
      file analysis     a 10-minute 44.1 kHz stereo FLAC made by looping FILE: decode + resample + front end +
                        network, on 1 thread and on all cores, as `earshot analyze` runs it (AudioFileAnalyzer)
      daemon            earshotd --input on 60 s of real-time audio: CPU share of one core, peak RSS, its
                        anonymous part and wake-ups per second with the gate open (loud input) and closed
                        (noise at -60 dBFS), and the time to READY=1; compare builds on the anonymous RSS
                        and the wake-ups, which hardly depend on the page cache and the machine's load
      --quick           fewer runs: 200 latency runs, a 2-minute file, 20 s per daemon run
      --no-daemon       skip the daemon runs
      --daemon-only     only the daemon runs
      --layers          add each layer's share of one patch (thread CPU time)
      --json            print the figures as one JSON object instead of text
      --audio FILE      the recording to loop (default: samples/demo.flac beside the Models directory)
      --daemon PATH     the earshotd to measure (default: the one next to this executable)
    """

    struct Options {
        var quick = false
        var daemon = true
        var daemonOnly = false
        var layers = false
        var json = false
        var audio: String?
        var daemonPath: String?
    }

    static let name = "bench"
    static let flags = ["--quick", "--no-daemon", "--daemon-only", "--layers", "--json", "--audio", "--daemon"]

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options {
        var options = Options()
        while let item = try parser.next() {
            switch item {
            case .positional(let text):
                throw parser.unexpected(text)
            case .flag(let flag, let inline):
                switch flag {
                case "--quick", "--no-daemon", "--daemon-only", "--layers", "--json":
                    try parser.noValue(of: flag, inline)
                    switch flag {
                    case "--quick": options.quick = true
                    case "--no-daemon": options.daemon = false
                    case "--daemon-only": options.daemonOnly = true
                    case "--layers": options.layers = true
                    default: options.json = true
                    }
                case "--audio": options.audio = try parser.value(of: flag, inline, allowed: "a recording to loop")
                case "--daemon": options.daemonPath = try parser.value(of: flag, inline, allowed: "the earshotd to measure")
                default: throw parser.unknown(flag)
                }
            }
        }
        if !options.daemon && options.daemonOnly {
            throw ArgumentParser.exclusive("--no-daemon", "--daemon-only", "give one: skip the daemon runs, or run only them")
        }
        return options
    }

    static func execute(_ options: Options) -> Int32 {
        do {
            try measure(options)
            return 0
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
    }

    private static func measure(_ options: Options) throws(EarshotError) {
        var report = Report(json: options.json)
        let cores = ProcessInfo.processInfo.activeProcessorCount
        report.note("cpu", Benchmark.cpuModel)
        report.note("cores", cores)
        report.note("kernel", Benchmark.kernelDescription)

        let modelDirectory = try ModelLocator.builtInDirectory()
        let source = options.audio.map { URL(fileURLWithPath: $0) }
            ?? modelDirectory.deletingLastPathComponent().appendingPathComponent("samples/demo.flac")
        let temporary = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-bench-\(getpid())")
        do {
            try FileManager.default.createDirectory(at: temporary, withIntermediateDirectories: true)
        } catch {
            throw EarshotError(.cannotCreate, "cannot create \(temporary.path): \(error.localizedDescription) (set TMPDIR to a writable directory)")
        }
        defer { try? FileManager.default.removeItem(at: temporary) }
        if !options.daemonOnly {
            try measureInference(options, modelDirectory: modelDirectory, source: source, temporary: temporary, report: &report)
        }
        if options.daemon || options.daemonOnly {
            try measureDaemon(options, source: source, temporary: temporary, report: &report)
        }
        report.finish()
    }

    private static func measureInference(
        _ options: Options, modelDirectory: URL, source: URL, temporary: URL, report: inout Report
    ) throws(EarshotError) {
        let cores = ProcessInfo.processInfo.activeProcessorCount
        let loadMillis = try Benchmark.modelLoadMillis(directory: modelDirectory)
        report.figure("model_load_ms", loadMillis, "model load (file to first result)", unit: "ms")
        let model = try YAMNet(directory: modelDirectory)

        let runs = options.quick ? 200 : 1000
        let latency = Benchmark.patchLatency(model: model, runs: runs)
        report.figure("patch_ms_median", latency.wall.median, "patch latency, 1 thread: median", unit: "ms")
        report.figure("patch_ms_p95", latency.wall.p95, "patch latency, 1 thread: p95", unit: "ms")
        report.figure("patch_cpu_ms_median", latency.cpu.median, "patch latency, 1 thread: thread CPU time, median", unit: "ms")
        report.note("patch_runs", runs)
        let waveform = Benchmark.waveformPatchLatency(model: model, runs: runs)
        report.figure("waveform_patch_ms_median", waveform.median, "waveform patch (15600 samples: front end + network): median", unit: "ms")
        report.figure("waveform_patch_ms_p95", waveform.p95, "waveform patch: p95", unit: "ms")
        let batched = Benchmark.batchedPatchMillis(model: model, count: 64, runs: options.quick ? 5 : 20)
        report.figure("batched_patch_ms", batched, "patch latency in batches of \(YAMNetSession.maximumBatch), 1 thread, per patch (best run)", unit: "ms")
        let windows = Benchmark.batchedPatchMillis(model: model, count: 64, runs: options.quick ? 5 : 20, overlapping: true)
        report.figure("batched_window_patch_ms", windows, "  the same, patches 0.48 s apart in one spectrogram (rows shared)", unit: "ms")
        report.figure("front_end_ms_per_s", Benchmark.frontEndMillisPerSecond(seconds: 60, runs: options.quick ? 3 : 10),
                      "front end (log-mel)", unit: "ms per s of audio")
        if options.layers {
            for (stage, millis, minimum) in Benchmark.stageProfile(model: model, runs: runs) {
                report.figure("stage \(stage)", millis * 1000, "  \(stage) (minimum \(Int(minimum * 1000)) us), median", unit: "us")
            }
            let batch = YAMNetSession.maximumBatch
            for (stage, millis, minimum) in Benchmark.stageProfile(model: model, runs: max(10, runs / batch), batch: batch) {
                report.figure("stage \(stage) batch", millis * 1000, "  batch of \(batch), per patch: \(stage) (minimum \(Int(minimum * 1000)) us), median", unit: "us")
            }
            for (stage, millis, minimum) in Benchmark.stageProfile(model: model, runs: max(10, runs / batch), batch: batch, overlapping: true) {
                report.figure("stage \(stage) windows", millis * 1000, "  batch of \(batch) patches 0.48 s apart, per patch: \(stage) (minimum \(Int(minimum * 1000)) us), median", unit: "us")
            }
        }

        for threads in Set([1, cores]).sorted() {
            let factor = try Benchmark.inferenceRealtimeFactor(seconds: options.quick ? 60 : 300, threads: threads, directory: temporary)
            report.figure("inference_x_realtime_\(threads)t", factor,
                          "inference (16 kHz WAV, no resampling: front end + network), \(threads) thread\(threads == 1 ? "" : "s")", unit: "x realtime")
        }
        let minutes = options.quick ? 2.0 : 10.0
        let recording = temporary.appendingPathComponent("recording.flac")
        try BenchmarkRecording.writeLooped(
            source: source, seconds: minutes * 60, sampleRate: 44_100, channels: 2, encoding: .flac16, to: recording)
        report.note("file", "\(Int(minutes)) min, 44.1 kHz stereo FLAC looping \(source.lastPathComponent)")
        let decode = try Benchmark.decodeSeconds(url: recording)
        report.figure("decode_x_realtime", minutes * 60 / decode.seconds, "decode + resample only", unit: "x realtime")
        for threads in Set([1, cores]).sorted() {
            let figures = try Benchmark.analyzeFile(url: recording, threads: threads)
            report.figure("analyze_x_realtime_\(threads)t", figures.realtimeFactor,
                          "file analysis (earshot analyze), \(threads) thread\(threads == 1 ? "" : "s")", unit: "x realtime")
        }
    }

    private static func measureDaemon(_ options: Options, source: URL, temporary: URL, report: inout Report) throws(EarshotError) {
        do {
            let daemon = options.daemonPath.map { URL(fileURLWithPath: $0) } ?? siblingDaemon()
            let seconds = options.quick ? 20.0 : 60.0
            let loud = temporary.appendingPathComponent("loud.wav")
            let quiet = temporary.appendingPathComponent("quiet.wav")
            try BenchmarkRecording.writeLooped(source: source, seconds: seconds + 10, sampleRate: 16_000, channels: 1, encoding: .wav16, to: loud)
            try BenchmarkRecording.writeNoise(levelDBFS: -60, seconds: seconds + 10, sampleRate: 16_000, to: quiet)
            let open = try DaemonBenchmark.measure(daemon: daemon, input: loud, seconds: seconds, extraArguments: ["--gate-dbfs", "-120"])
            report.figure("daemon_ready_ms", open.readyMillis, "daemon: start to READY=1", unit: "ms")
            report.figure("daemon_open_cpu_percent", open.cpuPercent, "daemon, gate open (\(Int(seconds)) s, \(open.windows.map(String.init) ?? "?") windows): CPU of one core", unit: "%")
            report.figure("daemon_open_peak_rss_mb", open.peakRSSMegabytes, "daemon, gate open: peak RSS", unit: "MB")
            report.figure("daemon_open_anon_rss_mb", open.anonymousRSSMegabytes, "daemon, gate open: anonymous RSS at the end (heap, stacks, weights)", unit: "MB")
            report.figure("daemon_open_wakeups_per_s", open.wakeupsPerSecond, "daemon, gate open: wake-ups (voluntary context switches)", unit: "per s")
            let gated = try DaemonBenchmark.measure(daemon: daemon, input: quiet, seconds: seconds)
            report.figure("daemon_gated_cpu_percent", gated.cpuPercent, "daemon, gate closed (-60 dBFS noise, \(gated.gatedWindows.map(String.init) ?? "?") gated windows): CPU of one core", unit: "%")
            report.figure("daemon_gated_peak_rss_mb", gated.peakRSSMegabytes, "daemon, gate closed: peak RSS", unit: "MB")
            report.figure("daemon_gated_anon_rss_mb", gated.anonymousRSSMegabytes, "daemon, gate closed: anonymous RSS at the end (heap, stacks, weights)", unit: "MB")
            report.figure("daemon_gated_wakeups_per_s", gated.wakeupsPerSecond, "daemon, gate closed: wake-ups (voluntary context switches)", unit: "per s")
            report.figure("daemon_gated_ready_ms", gated.readyMillis, "daemon: start to READY=1 (second run)", unit: "ms")
        }
    }

    /// `earshotd` in the directory of this executable.
    private static func siblingDaemon() -> URL {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent("earshotd")
    }

    /// Prints figures as they come (text), or collects them into one JSON object printed at the end.
    struct Report {
        let json: Bool
        private var object: [String: Any] = [:]

        init(json: Bool) { self.json = json }

        mutating func note(_ key: String, _ value: Any) {
            if json { object[key] = value } else { write("\(key): \(value)") }
        }

        mutating func figure(_ key: String, _ value: Double, _ label: String, unit: String) {
            if json {
                object[key] = (value * 1000).rounded() / 1000
            } else {
                let shown = value >= 100 ? String(format: "%.0f", value) : value >= 10 ? String(format: "%.1f", value) : String(format: "%.3f", value)
                write("\(label.padding(toLength: max(label.count, 64), withPad: " ", startingAt: 0)) \(shown) \(unit)")
            }
        }

        /// Unbuffered, so each figure shows as soon as it is measured.
        private func write(_ line: String) {
            StandardOutput.write(line + "\n")
        }

        func finish() {
            guard json else { return }
            if let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) {
                write(String(decoding: data, as: UTF8.self))
            }
        }
    }
}
