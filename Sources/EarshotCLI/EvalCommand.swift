import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot eval`: runs the smoke/CO alarm detector over labelled recordings and synthetic alarms and prints recall,
/// false events per file class, time to detection and CPU cost.
enum EvalCommand: EarshotCommand {
    static let usage = "usage: earshot eval [--manifest FILE]... [--no-synthetic] [--no-classifier] [--only TEXT] [--cases] [--segments [--segment-hz HZ]] [--onsets] [--rate-factor F] [--groups [--stream-hours H] [--stream-manifest FILE] [--threads N] [--config FILE] [--problems] [--cost S]]"

    static let help = """
    \(usage)

    Evaluates the smoke/CO alarm pattern detector (T3, T4, low-battery chirp) fused with the built-in classifier.
      --manifest FILE   labelled recordings: a MANIFEST.tsv (path, source, license, label, ...; paths relative to it);
                        default ../shared/audio/MANIFEST.tsv beside the current directory. Label smoke_alarm_t3 must
                        give smoke_alarm; other smoke_alarm* labels are reported; every other label is a negative.
      --no-synthetic    skip the synthetic T3/T4 alarms and confusers mixed with the manifest's household noise and
                        speech at 0, +10 and +20 dB SNR
      --no-classifier   pattern detector alone (no fusion; much faster)
      --only TEXT       only cases whose name or label contains TEXT
      --cases           also print one line per alarm case: latency against its deadline, or missed
      --segments        also print the tone segments the tracker found in each case (for tuning); for a synthetic
                        alarm only those within 5 % of its tone, up to 20 s after it starts
      --segment-hz HZ   with --segments: only the segments within 5 % of HZ, in every case
      --onsets          instead of evaluating, print every candidate onset the glass_break shatter gate measured in
                        each manifest file (with --only, the matching ones): time, rise, onset flatness and
                        share above 2 kHz, tail flatness, sustain, first-half drop, decay, and whether it passed
      --rate-factor F   a stress test: every case is read as if recorded at F times its sample rate (pitch and
                        tempo scaled by F, e.g. 0.9 or 1.1), so that other tones and rhythms line up (alarm start
                        and deadline scale by 1/F); cases that fall below 8 kHz are left out

    With --groups: every preset group through the daemon's whole detection (the code `earshot detect` runs,
    watching every preset), over each labelled manifest (repeat --manifest; a `group` column, `-` for a
    negative, and an `onset` column are used when present, else the label says the group) and over a negative
    stream of household, speech, TV-like, music and appliance audio assembled from --stream-manifest (default
    ../shared/audio/MANIFEST.tsv): per group recall, alerts per detected positive (for alarms: smoke, fire and
    CO events on the same file), time to detection, false events on the labelled negatives and per 24 h.
      --stream-hours H  length of the negative stream (default 24; 0: none)
      --threads N       how many of the stream's parts (ceil(H / 12), equal) run at once (default 2;
                        the figures do not depend on it)
      --config FILE     a daemon configuration file (its groups and alarm settings; the watch list is every preset)
      --problems        also list each missed positive, duplicate alert and false event
      --cost S          also measure what each issue-13 rule costs in CPU on S seconds of the stream's audio
                        (the stage, the alarm detector with and without the rules, the shatter finder; 3 rounds)
    """

    struct Options {
        /// Default: ../shared/audio/MANIFEST.tsv beside the current directory.
        var manifest = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
            .deletingLastPathComponent().appendingPathComponent("shared/audio/MANIFEST.tsv")
        var synthetic = true
        var classifier = true
        var only: String?
        var printSegments = false
        var printOnsets = false
        var printCases = false
        var segmentHz: Double?
        var rateFactor: Double?
        var groups = false
        var manifests: [URL] = []
        var streamHours = 24.0
        var streamManifest: URL?
        var threads = 2
        var configPath: String?
        var problems = false
        var costSeconds = 0.0
    }

    static let name = "eval"
    static let flags = ["--manifest", "--no-synthetic", "--no-classifier", "--only", "--cases", "--segments", "--onsets",
                        "--segment-hz", "--rate-factor", "--groups", "--stream-hours", "--stream-manifest", "--threads",
                        "--config", "--problems", "--cost"]

    /// Numbers above 0.
    static let positive = Double.leastNonzeroMagnitude...Double.greatestFiniteMagnitude

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options {
        var options = Options()
        while let item = try parser.next() {
            switch item {
            case .positional(let text):
                throw parser.unexpected(text)
            case .flag(let flag, let inline):
                switch flag {
                case "--manifest":
                    options.manifest = URL(fileURLWithPath: try parser.value(of: flag, inline, allowed: "a MANIFEST.tsv file"))
                    options.manifests.append(options.manifest)
                case "--stream-manifest":
                    options.streamManifest = URL(fileURLWithPath: try parser.value(of: flag, inline, allowed: "a MANIFEST.tsv file"))
                case "--cost":
                    options.costSeconds = try parser.number(of: flag, inline, in: 10...36_000, allowed: "seconds of audio, 10 to 36000")
                case "--stream-hours":
                    options.streamHours = try parser.number(of: flag, inline, in: 0...1000, allowed: "hours, 0 to 1000")
                case "--threads":
                    options.threads = Int(try parser.number(of: flag, inline, in: 1...64, allowed: "a count, 1 to 64"))
                case "--config":
                    options.configPath = try parser.value(of: flag, inline, allowed: "a configuration file", allowEmpty: false)
                case "--groups", "--problems":
                    try parser.noValue(of: flag, inline)
                    if flag == "--groups" { options.groups = true } else { options.problems = true }
                case "--only": options.only = try parser.value(of: flag, inline, allowed: "text in the cases' names or labels")
                case "--segment-hz":
                    options.segmentHz = try parser.number(of: flag, inline, in: positive, allowed: "a frequency in Hz, above 0")
                case "--rate-factor":
                    options.rateFactor = try parser.number(of: flag, inline, in: positive, allowed: "a number above 0, e.g. 0.9 or 1.1")
                case "--no-synthetic", "--no-classifier", "--segments", "--cases", "--onsets":
                    try parser.noValue(of: flag, inline)
                    switch flag {
                    case "--onsets": options.printOnsets = true
                    case "--no-synthetic": options.synthetic = false
                    case "--no-classifier": options.classifier = false
                    case "--segments": options.printSegments = true
                    default: options.printCases = true
                    }
                default:
                    throw parser.unknown(flag)
                }
            }
        }
        if options.segmentHz != nil && !options.printSegments {
            throw EarshotError(.usage, "--segment-hz needs --segments (\(usage))")
        }
        return options
    }

    /// `--onsets`: the shatter gate's measured candidates in each manifest file.
    static func executeOnsets(_ options: Options) -> Int32 {
        do {
            var skipped: [String] = []
            for manifest in options.manifests.isEmpty ? [options.manifest] : options.manifests {
                for (path, url) in try ShatterProbe.files(manifest: manifest, only: options.only) {
                    do {
                        print("== \(path)")
                        for line in ShatterProbe.lines(samples: try decodeMono16k(url)) { print("  " + line) }
                    } catch {
                        skipped.append("\(path): \(error.message)")
                    }
                }
            }
            return finish(skipped: skipped)
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
    }

    static func execute(_ options: Options) -> Int32 {
        if options.groups { return executeGroups(options) }
        if options.printOnsets { return executeOnsets(options) }
        do {
            var skipped: [String] = []
            let recordings = try AlarmEvaluation.manifestCases(manifest: options.manifest, skipped: &skipped)
            var cases = recordings
            if options.synthetic {
                let beds = AlarmEvaluation.noiseBeds(from: recordings)
                cases += AlarmEvaluation.syntheticCases(household: beds.household, speech: beds.speech)
            }
            if let only = options.only { cases = cases.filter { $0.name.contains(only) || $0.fileClass.contains(only) } }
            if let factor = options.rateFactor {
                cases = cases.compactMap { item in
                    var item = item
                    item.sampleRate = Int(Double(item.sampleRate) * factor)
                    // Times stretch by 1 / F: the alarm starts later and its cycle (hence the deadline) is longer.
                    item.alarmStart = item.alarmStart.map { $0 / factor }
                    item.deadlineSeconds = item.deadlineSeconds.map { $0 / factor }
                    item.toneHz = item.toneHz.map { $0 * factor }
                    return item.sampleRate >= 8000 ? item : nil
                }
            }
            var outcomes: [AlarmEvaluation.Outcome] = []
            for (number, item) in cases.enumerated() {
                if number % 50 == 0 {
                    writeError("eval: \(number)/\(cases.count)")
                }
                outcomes.append(try AlarmEvaluation.run(item, classifier: options.classifier))
                if options.printSegments {
                    print("== \(item.name)")
                    var segments = try AlarmEvaluation.toneSegments(item)
                    if options.segmentHz == nil, let hz = item.toneHz, let start = item.alarmStart {
                        segments = segments.filter { abs($0.frequencyHz - hz) <= 0.05 * hz && $0.start <= start + 20 }
                    }
                    if let hz = options.segmentHz {
                        segments = segments.filter { abs($0.frequencyHz - hz) <= 0.05 * hz }
                    }
                    for segment in segments { print(AlarmEvaluation.segmentLine(segment)) }
                }
            }
            if options.printCases { print(AlarmEvaluation.caseLines(outcomes) + "\n") }
            print(AlarmEvaluation.report(outcomes))
            return finish(skipped: skipped)
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
    }

    /// `--groups`: every preset group over the labelled manifests and the negative stream.
    static func executeGroups(_ options: Options) -> Int32 {
        do throws(EarshotError) {
            var configuration = try DaemonConfiguration.load(path: options.configPath, overrides: .init())
            configuration.detection.watch = GroupEvaluation.groups.filter { LabelGroup.presets[$0] != nil }
            let detection = try FileDetection(configuration: configuration, configPath: options.configPath)
            let manifests = options.manifests.isEmpty ? [options.manifest] : options.manifests
            var skipped: [String] = []
            for manifest in manifests {
                let items = try GroupEvaluation.items(manifest: manifest)
                let outcomes = GroupEvaluation.run(items, detection: detection, skipped: &skipped) { number in
                    if number % 100 == 0 { writeError("eval: \(manifest.lastPathComponent) \(number)/\(items.count)") }
                }
                print(GroupEvaluation.report(outcomes, stream: nil, title: "Labelled files: \(manifest.path)"))
                if options.problems { print(GroupEvaluation.problemLines(outcomes)) }
                print("")
            }
            if options.streamHours > 0 || options.costSeconds > 0 {
                let streamManifest = options.streamManifest ?? EvalCommand.Options().manifest
                let clips = GroupEvaluation.streamClips(try GroupEvaluation.items(manifest: streamManifest))
                guard !clips.isEmpty else {
                    throw EarshotError(.noInput, "no household, speech or music recordings in \(streamManifest.path) for the negative stream")
                }
                if options.costSeconds > 0 {
                    print(GroupEvaluation.costReport(clips: clips.map(\.samples), seconds: options.costSeconds, rounds: 3, detection: detection))
                    print("")
                }
                guard options.streamHours > 0 else { return 0 }
                writeError("eval: a \(JSONValue.format(options.streamHours, decimals: 1)) h negative stream from \(clips.count) recordings")
                let started = Date()
                let stream = GroupEvaluation.runStream(
                    clips: clips.map(\.samples), names: clips.map { URL(fileURLWithPath: $0.path).lastPathComponent }, seconds: options.streamHours * 3600, threads: options.threads, detection: detection)
                let elapsed = Date().timeIntervalSince(started)
                print("Negative stream: \(JSONValue.format(options.streamHours, decimals: 1)) h assembled from \(clips.count) recordings of \(streamManifest.path) (\(Set(clips.map(\.label)).count) labels), in \(JSONValue.format(elapsed, decimals: 0)) s")
                print(GroupEvaluation.report([], stream: stream, title: "False events in the negative stream"))
                if options.problems { print(stream.sources.filter { !$0.contains(" speech@") }.joined(separator: "\n")) }
            }
            return finish(skipped: skipped)
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
    }

    /// Lists the files that could not be decoded (after the report) and gives the exit status 0.
    private static func finish(skipped: [String]) -> Int32 {
        if !skipped.isEmpty {
            print("\nSkipped (cannot decode): \(skipped.count)")
            for line in skipped { print("  \(line)") }
        }
        return 0
    }
}
