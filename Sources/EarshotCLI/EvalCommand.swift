import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot eval`: runs the smoke/CO alarm detector over labelled recordings and synthetic alarms and prints recall,
/// false events per file class, time to detection and CPU cost.
enum EvalCommand {
    static let usage = "usage: earshot eval [--manifest FILE] [--no-synthetic] [--no-classifier] [--only TEXT] [--cases] [--segments [--segment-hz HZ]] [--rate-factor F]"

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
      --rate-factor F   a stress test: every case is read as if recorded at F times its sample rate (pitch and
                        tempo scaled by F, e.g. 0.9 or 1.1), so that other tones and rhythms line up (alarm start
                        and deadline scale by 1/F); cases that fall below 8 kHz are left out
    """

    static func run(_ arguments: [String]) -> Int32 {
        var manifest = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
            .deletingLastPathComponent().appendingPathComponent("shared/audio/MANIFEST.tsv")
        var synthetic = true
        var classifier = true
        var only: String?
        var printSegments = false
        var printCases = false
        var segmentHz: Double?
        var rateFactor: Double?
        var index = 0
        func fail(_ message: String) -> Int32 {
            FileHandle.standardError.write(Data("earshot: \(message) (\(usage))\n".utf8))
            return 64
        }
        while index < arguments.count {
            let argument = arguments[index]
            switch argument {
            case "--help", "-h":
                print(help)
                return 0
            case "--rate-factor":
                guard index + 1 < arguments.count, let factor = Double(arguments[index + 1]), factor > 0 else {
                    return fail("--rate-factor needs a positive number")
                }
                rateFactor = factor
                index += 1
            case "--segment-hz":
                guard index + 1 < arguments.count, let hz = Double(arguments[index + 1]), hz > 0 else {
                    return fail("--segment-hz needs a frequency in Hz")
                }
                segmentHz = hz
                index += 1
            case "--manifest", "--only":
                guard index + 1 < arguments.count else { return fail("\(argument) needs a value") }
                if argument == "--manifest" {
                    manifest = URL(fileURLWithPath: arguments[index + 1])
                } else {
                    only = arguments[index + 1]
                }
                index += 1
            case "--no-synthetic": synthetic = false
            case "--no-classifier": classifier = false
            case "--segments": printSegments = true
            case "--cases": printCases = true
            default: return fail("eval: unknown option \"\(argument)\"")
            }
            index += 1
        }
        do {
            var skipped: [String] = []
            let recordings = try AlarmEvaluation.manifestCases(manifest: manifest, skipped: &skipped)
            var cases = recordings
            if synthetic {
                let beds = AlarmEvaluation.noiseBeds(from: recordings)
                cases += AlarmEvaluation.syntheticCases(household: beds.household, speech: beds.speech)
            }
            if let only { cases = cases.filter { $0.name.contains(only) || $0.fileClass.contains(only) } }
            if let factor = rateFactor {
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
                    FileHandle.standardError.write(Data("eval: \(number)/\(cases.count)\n".utf8))
                }
                outcomes.append(try AlarmEvaluation.run(item, classifier: classifier))
                if printSegments {
                    print("== \(item.name)")
                    var segments = try AlarmEvaluation.toneSegments(item)
                    if segmentHz == nil, let hz = item.toneHz, let start = item.alarmStart {
                        segments = segments.filter { abs($0.frequencyHz - hz) <= 0.05 * hz && $0.start <= start + 20 }
                    }
                    if let hz = segmentHz {
                        segments = segments.filter { abs($0.frequencyHz - hz) <= 0.05 * hz }
                    }
                    for segment in segments {
                        print(String(format: "  %7.2f  %5.2f s  %6.0f Hz +- %4.1f  %6.1f dBFS  peak %6.1f dBFS  %4.1f dB above the floor",
                                     segment.start, segment.duration + 0.01, segment.frequencyHz, segment.frequencySpreadHz,
                                     segment.levelDBFS, segment.peakLevelDBFS, segment.peakSNRDB))
                    }
                }
            }
            if printCases { print(AlarmEvaluation.caseLines(outcomes) + "\n") }
            print(AlarmEvaluation.report(outcomes))
            if !skipped.isEmpty {
                print("\nSkipped (cannot decode): \(skipped.count)")
                for line in skipped { print("  \(line)") }
            }
            return 0
        } catch {
            FileHandle.standardError.write(Data("earshot: \(error.message)\n".utf8))
            return error.exitStatus
        }
    }
}
