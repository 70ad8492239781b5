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
import EarshotService

/// Runs ``AlarmDetector`` (and, optionally, the built-in classifier for fusion) over labelled audio the way the
/// daemon does, and tabulates recall, false events per file class, time to detection and CPU cost. Used by
/// `earshot eval`.
package enum AlarmEvaluation {
    /// One labelled piece of audio.
    package struct Case: Sendable {
        /// A short name for the tables (file name or synthetic description).
        package var name: String
        /// The class of file (MANIFEST label, or e.g. `synthetic_t3`), for the false-event table.
        package var fileClass: String
        /// The group that must be detected (`smoke_alarm`, `co_alarm`), nil for a negative.
        package var expectedGroup: String?
        /// Whether recall on this case counts toward the targets (T3/T4 at >= 0 dB SNR), or is only reported.
        package var isTarget: Bool
        /// Stream time (s) of the alarm's first tone, when known.
        package var alarmStart: Double?
        /// Seconds the detection may take after the alarm starts. Issue 5's target is a decision "within one cycle
        /// (4 s) after its first full repetition": the end of the first cycle plus 4 s (T3: 4 + 4 = 8 s; T4, 5.7 s
        /// cycle: 5.7 + 4 = 9.7 s, the stricter reading for T4, whose cycle is longer than 4 s).
        package var deadlineSeconds: Double?
        /// For a synthetic alarm: the SNR it was mixed at (dB; tone power while on, as heard after the room, over
        /// the mean power of the noise excerpt mixed in).
        package var snrDB: Double?
        /// For a synthetic alarm: the tone frequency (Hz) of its sounder's fundamental.
        package var toneHz: Double?
        /// For a synthetic alarm: the acoustic condition (`dry`, `room`, `phone`) and the noise bed (`household`,
        /// `speech`).
        package var condition: String?
        package var noise: String?
        /// Mono samples.
        package var samples: [Float]
        package var sampleRate: Int

        package init(name: String, fileClass: String, expectedGroup: String?, isTarget: Bool = false,
                    alarmStart: Double? = nil, deadlineSeconds: Double? = nil, snrDB: Double? = nil, toneHz: Double? = nil,
                    condition: String? = nil, noise: String? = nil, samples: [Float], sampleRate: Int) {
            self.name = name
            self.fileClass = fileClass
            self.expectedGroup = expectedGroup
            self.isTarget = isTarget
            self.alarmStart = alarmStart
            self.deadlineSeconds = deadlineSeconds
            self.snrDB = snrDB
            self.toneHz = toneHz
            self.condition = condition
            self.noise = noise
            self.samples = samples
            self.sampleRate = sampleRate
        }

        package var seconds: Double { Double(samples.count) / Double(sampleRate) }
    }

    /// What happened on one case.
    package struct Outcome: Sendable {
        package var testCase: Case
        /// Every onset the detector raised (ends omitted).
        package var onsets: [AlarmEvent]
        /// Seconds of CPU (this thread) spent in the tone detector and matcher, without the classifier.
        package var detectorCPUSeconds: Double

        /// The first onset of the expected group.
        package var detection: AlarmEvent? {
            guard let group = testCase.expectedGroup else { return nil }
            return onsets.first { $0.group == group }
        }
        /// Decision time minus the alarm's start (s), for a detection.
        package var latency: Double? {
            guard let detection, let start = testCase.alarmStart else { return nil }
            return detection.time - start
        }
        /// Whether a positive case was detected in time.
        package var metTarget: Bool {
            guard let latency = latency ?? detection.map({ $0.time }) else { return false }
            return testCase.deadlineSeconds.map { latency <= $0 } ?? true
        }
        /// smoke_alarm and co_alarm onsets that are not the expected group (all of them on a negative).
        package var falseEvents: [AlarmEvent] {
            onsets.filter { ($0.group == AlarmEvent.smokeAlarm || $0.group == AlarmEvent.coAlarm) && $0.group != testCase.expectedGroup }
        }
        package var chirpEvents: Int { onsets.filter { $0.group == AlarmEvent.alarmChirp }.count }
    }

    private final class Collector: ResultsObserving {
        var results: [ClassificationResult] = []
        func request(_ request: ClassifySoundRequest, didProduce result: ClassificationResult) { results.append(result) }
    }

    /// Streams a case through the detector in 40 ms chunks (the daemon's poll), feeding classifier windows to
    /// ``AlarmDetector/observe(classification:)`` as they complete when `classifier` is true (gate -50 dBFS, window
    /// 0.96 s, hop 0.48 s: the daemon's defaults).
    /// - Throws: `EarshotError` when the classifier cannot be loaded.
    package static func run(_ testCase: Case, classifier: Bool,
                           configuration: AlarmDetector.Configuration = AlarmDetector.Configuration()) throws(EarshotError) -> Outcome {
        let detector = AlarmDetector(configuration: configuration)
        var analyzer: AudioStreamAnalyzer?
        let collector = Collector()
        if classifier {
            let streamAnalyzer = try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: Double(testCase.sampleRate), channelCount: 1))
            streamAnalyzer.gateThresholdDBFS = -50
            try streamAnalyzer.add(ClassifySoundRequest(), withObserver: collector)
            analyzer = streamAnalyzer
        }
        var onsets: [AlarmEvent] = []
        var cpu = 0.0
        let chunk = max(1, testCase.sampleRate / 25)
        testCase.samples.withUnsafeBufferPointer { all in
            var position = 0
            while position < all.count {
                let count = min(chunk, all.count - position)
                let slice = UnsafeBufferPointer(rebasing: all[position..<(position + count)])
                let before = threadCPUSeconds()
                let events = detector.process(samples: slice, sampleRate: testCase.sampleRate, framePosition: Int64(position))
                cpu += threadCPUSeconds() - before
                onsets += events.filter { $0.kind == .onset }
                if let analyzer {
                    analyzer.analyze(slice, atAudioFramePosition: Int64(position))
                    for result in collector.results {
                        onsets += detector.observe(classification: result).filter { $0.kind == .onset }
                    }
                    collector.results.removeAll()
                }
                position += count
            }
        }
        if let analyzer {
            analyzer.completeAnalysis()
            for result in collector.results { onsets += detector.observe(classification: result).filter { $0.kind == .onset } }
        }
        onsets += detector.finish().filter { $0.kind == .onset }
        return Outcome(testCase: testCase, onsets: onsets, detectorCPUSeconds: cpu)
    }

    /// One line per synthetic alarm (for `earshot eval --cases`): name, deadline, decision latency or "missed", and
    /// the first event's pattern, cycles and tone.
    package static func caseLines(_ outcomes: [Outcome]) -> String {
        var lines: [String] = []
        for outcome in outcomes where outcome.testCase.expectedGroup != nil {
            let verdict: String
            if let latency = outcome.latency ?? outcome.detection?.time {
                verdict = (outcome.metTarget ? "in time " : "LATE    ") + JSONValue.format(latency, decimals: 2) + " s"
            } else {
                verdict = "MISSED"
            }
            let event = outcome.detection.map {
                " (\($0.source.rawValue)\($0.pattern.map { " " + $0.rawValue } ?? "") \(Int($0.toneHz.rounded())) Hz)"
            } ?? ""
            let deadline = outcome.testCase.deadlineSeconds.map { " [deadline \(JSONValue.format($0, decimals: 1)) s]" } ?? ""
            lines.append("\(verdict)\(deadline): \(outcome.testCase.name)\(event)")
        }
        return lines.joined(separator: "\n")
    }

    /// The tone segments a ``ToneTracker`` finds in a case (for tuning and `earshot eval --segments`).
    /// - Throws: `EarshotError(.usage)` when the case's sample rate cannot hold the tracker's band.
    package static func toneSegments(_ testCase: Case) throws(EarshotError) -> [ToneSegment] {
        let tracker = try ToneTracker(
            sampleRate: testCase.sampleRate, parameters: AlarmDetector.trackerParameters(sampleRate: testCase.sampleRate))
        return tracker.process(testCase.samples, framePosition: 0) + tracker.finish()
    }

    /// One line of `earshot eval --segments`: start (s), audible length (s, one hop added), frequency and its
    /// spread (Hz), mean and peak level (dBFS), the peak above the noise floor (dB), and where the loudest sound of the
    /// second before stands from the peak (``ToneSegment/precedingPeakDBFS``): `29.0 dB above the second before`
    /// when the tone is louder, `23.5 dB below the second before` when it is quieter, `nothing in the second before`
    /// when there was no power (the stream's start, digital silence), e.g.
    /// `     5.00   0.11 s    3150 Hz +-  1.1   -43.3 dBFS  peak  -43.0 dBFS  46.1 dB above the floor   29.0 dB above
    /// the second before`.
    package static func segmentLine(_ segment: ToneSegment) -> String {
        let preceding: String
        if segment.precedingPeakDBFS == -.infinity {
            preceding = "nothing in the second before"
        } else {
            let below = segment.precedingPeakDBFS - segment.peakLevelDBFS
            preceding = String(cFormat: "%5.1f dB ", abs(below)) + (below < 0 ? "above" : "below") + " the second before"
        }
        return String(cFormat: "  %7.2f  %5.2f s  %6.0f Hz +- %4.1f  %6.1f dBFS  peak %6.1f dBFS  %4.1f dB above the floor  ",
                      segment.start, segment.duration + 0.01, segment.frequencyHz, segment.frequencySpreadHz,
                      segment.levelDBFS, segment.peakLevelDBFS, segment.peakSNRDB) + preceding
    }

    /// CPU seconds this thread has used (CLOCK_THREAD_CPUTIME_ID).
    package static func threadCPUSeconds() -> Double {
        var spec = timespec()
        guard clock_gettime(CLOCK_THREAD_CPUTIME_ID, &spec) == 0 else { return 0 }
        return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
    }

    // MARK: Cases

    /// The labelled recordings of a `MANIFEST.tsv` (columns path, source, license, label, ...; paths relative to
    /// the manifest's folder). `smoke_alarm_t3` files must give `smoke_alarm` (a target); other `smoke_alarm*`
    /// labels are reported only; every other label is a negative.
    /// - Throws: as ``Manifest/read(_:)`` (`.noInput` cannot be read, `.data` not a manifest). Files that fail to
    ///   decode are skipped and listed in `skipped`.
    package static func manifestCases(manifest: URL, skipped: inout [String]) throws(EarshotError) -> [Case] {
        let rows = try Manifest.read(manifest).rows
        let root = manifest.deletingLastPathComponent()
        var cases: [Case] = []
        for columns in rows {
            guard columns.count >= 4 else { continue }
            let path = columns[0], label = columns[3]
            let url = root.appendingPathComponent(path)
            do {
                let decoder = try AudioFileDecoder(url: url)
                let samples = try decoder.readAllMono()
                let positive = label.hasPrefix("smoke_alarm")
                cases.append(Case(
                    name: path, fileClass: label, expectedGroup: positive ? AlarmEvent.smokeAlarm : nil,
                    isTarget: label == "smoke_alarm_t3", samples: samples, sampleRate: decoder.sampleRate))
            } catch {
                skipped.append("\(path): \(error.message)")
            }
        }
        return cases
    }

    /// Noise beds from manifest cases: all `household_noise*` and `background` recordings, and all `speech`
    /// recordings, each concatenated at 16 kHz.
    package static func noiseBeds(from cases: [Case]) -> (household: [Float], speech: [Float]) {
        func bed(_ accept: (String) -> Bool) -> [Float] {
            var out: [Float] = []
            for item in cases where accept(item.fileClass) {
                if item.sampleRate == 16_000 {
                    out += item.samples
                } else if let resampler = try? Resampler(inputRate: Double(item.sampleRate)) {
                    var converted: [Float] = []
                    try? resampler.process(item.samples, appendingTo: &converted)
                    try? resampler.flush(appendingTo: &converted)
                    out += converted
                }
            }
            return out
        }
        return (bed { $0.hasPrefix("household_noise") || $0 == "background" }, bed { $0 == "speech" })
    }

    /// Synthetic cases at 16 kHz: T3 (3.1 kHz sine, 520 Hz square) and T4 (3.1 kHz sine, 520 Hz square), dry, in a
    /// reverberant room (RT60 0.6 s) and through a phone channel (reverberant room, 300-3400 Hz, mu-law), each in
    /// household noise and in speech at 0, +10 and +20 dB SNR (tone power while on, as heard after the room, over
    /// the mean power of the noise excerpt mixed into the case), 40 s long
    /// with the alarm from 5 s; plus confusers (truck beeper, chirps, microwave, oven timer, alarm clock, phone
    /// ring, patient monitor medium- and high-priority alarms) in a room, clean and in household noise at +10 dB
    /// (class `synthetic_confuser`), and in household noise and in speech at 0 dB (`synthetic_confuser_0db`).
    package static func syntheticCases(household: [Float], speech: [Float]) -> [Case] {
        let rate = 16_000
        var cases: [Case] = []
        let noises: [(String, [Float])] = [("household", household), ("speech", speech)].filter { !$0.1.isEmpty }
        // `count` samples of a bed from an offset (looped), so that different cases hear different parts of it.
        func noise(_ bed: [Float], offset: Int, count: Int) -> [Float] {
            guard !bed.isEmpty else { return [] }
            let start = (offset * 7919 * 16) % bed.count
            return (0..<count).map { bed[(start + $0) % bed.count] }
        }
        var index = 0
        let alarms: [(String, String, [AlarmSignals.Tone], AlarmSignals.Waveform, Double)] = [
            ("T3 3100 Hz", AlarmEvent.smokeAlarm, AlarmSignals.t3(frequencyHz: 3100, cycles: 8, start: 5), .sine, 8),
            ("T3 520 Hz square", AlarmEvent.smokeAlarm, AlarmSignals.t3(frequencyHz: 520, cycles: 8, start: 5), .square, 8),
            ("T4 3100 Hz", AlarmEvent.coAlarm, AlarmSignals.t4(frequencyHz: 3100, cycles: 6, start: 5), .sine, 9.7),
            ("T4 520 Hz square", AlarmEvent.coAlarm, AlarmSignals.t4(frequencyHz: 520, cycles: 6, start: 5), .square, 9.7),
        ]
        for (name, group, tones, waveform, deadline) in alarms {
            for condition in ["dry", "room", "phone"] {
                for (noiseName, bed) in noises {
                    for snr in [0.0, 10.0, 20.0] {
                        index += 1
                        var samples = AlarmSignals.render(tones, seconds: 40, sampleRate: rate, waveform: waveform, amplitude: 0.3)
                        if condition != "dry" { AlarmSignals.reverberate(&samples, sampleRate: rate, rt60: 0.6) }
                        // SNR: tone power while on, as heard after the room (before the phone channel), over the mean
                        // power of the noise excerpt actually mixed into this case (not of the whole bed, whose level
                        // varies between recordings by more than 10 dB).
                        AlarmSignals.mix(&samples, tones: tones, noise: noise(bed, offset: index, count: samples.count),
                                         snrDB: snr, sampleRate: rate)
                        if condition == "phone" { AlarmSignals.phoneChannel(&samples, sampleRate: rate) }
                        cases.append(Case(
                            name: "\(name), \(condition), \(noiseName) \(Int(snr)) dB",
                            fileClass: "synthetic_\(name.prefix(2).lowercased())_\(Int(snr))db",
                            expectedGroup: group, isTarget: true, alarmStart: 5, deadlineSeconds: deadline, snrDB: snr,
                            toneHz: tones.first?.frequencyHz, condition: condition, noise: noiseName, samples: samples,
                            sampleRate: rate))
                    }
                }
            }
        }
        let confusers: [(String, [AlarmSignals.Tone], Double)] = [
            ("truck beeper", AlarmSignals.truckBeeper(seconds: 40, start: 2), 45),
            ("low-battery chirps", AlarmSignals.chirps(count: 4, interval: 40, start: 3), 130),
            ("microwave", AlarmSignals.microwave(start: 2), 70),
            ("oven timer", AlarmSignals.ovenTimer(seconds: 30, start: 2), 35),
            ("alarm clock", AlarmSignals.alarmClock(seconds: 30, start: 2), 35),
            ("phone ring", AlarmSignals.phoneRing(seconds: 30, start: 2), 35),
            ("monitor, medium priority", AlarmSignals.monitorMedium(seconds: 40, start: 2), 45),
            ("monitor, high priority", AlarmSignals.monitorHigh(seconds: 40, start: 2), 45),
        ]
        // Clean, in household noise at +10 dB, and (a harder set, its own class) in household noise and in speech
        // at 0 dB.
        let mixes: [(String, [Float], Double?, String)] = [
            ("", [], nil, "synthetic_confuser"), (", household 10 dB", household, 10, "synthetic_confuser"),
            (", household 0 dB", household, 0, "synthetic_confuser_0db"), (", speech 0 dB", speech, 0, "synthetic_confuser_0db"),
        ]
        for (name, tones, seconds) in confusers {
            for (suffix, bed, snr, fileClass) in mixes {
                index += 1
                var samples = AlarmSignals.render(tones, seconds: seconds, sampleRate: rate, amplitude: 0.3)
                AlarmSignals.reverberate(&samples, sampleRate: rate, rt60: 0.4, wet: 0.3)
                if let snr {
                    guard !bed.isEmpty else { continue }
                    AlarmSignals.mix(&samples, tones: tones, noise: noise(bed, offset: index, count: samples.count),
                                     snrDB: snr, sampleRate: rate)
                }
                cases.append(Case(
                    name: name + suffix, fileClass: fileClass, expectedGroup: nil, snrDB: snr, noise: snr == nil ? nil : suffix,
                    samples: samples, sampleRate: rate))
            }
        }
        return cases
    }

    // MARK: Tables

    /// The report `earshot eval` prints: recall and time to detection of the synthetic alarms by SNR, detections
    /// on the real alarm recordings, false events per file class, CPU cost.
    package static func report(_ outcomes: [Outcome]) -> String {
        var lines: [String] = []
        func pad(_ text: String, _ width: Int) -> String {
            text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
        }
        func fixed(_ value: Double, _ decimals: Int = 2) -> String { JSONValue.format(value, decimals: decimals) }

        let synthetic = outcomes.filter { $0.testCase.fileClass.hasPrefix("synthetic_t") }
        if !synthetic.isEmpty {
            func deadline(_ prefix: String) -> String {
                synthetic.first { $0.testCase.fileClass.hasPrefix(prefix) }?.testCase.deadlineSeconds.map { fixed($0, 1) + " s" } ?? "-"
            }
            let start = synthetic.first?.testCase.alarmStart.map { fixed($0, 2) + " s" } ?? "-"
            lines.append("Synthetic T3/T4 (alarm from \(start); latency = decision - first tone; deadline = first cycle + 4 s: T3 \(deadline("synthetic_t3")), T4 \(deadline("synthetic_t4")))")
            lines.append(pad("class", 22) + pad("detected", 10) + pad("in time", 9) + pad("latency median", 16) + "max")
            var classes: [String] = []
            for outcome in synthetic where !classes.contains(outcome.testCase.fileClass) { classes.append(outcome.testCase.fileClass) }
            for name in classes {
                let group = synthetic.filter { $0.testCase.fileClass == name }
                let detected = group.filter { $0.detection != nil }.count
                let inTime = group.filter(\.metTarget).count
                let latencies = group.compactMap(\.latency).sorted()
                let median = latencies.isEmpty ? "-" : fixed(latencies[latencies.count / 2])
                let maximum = latencies.last.map { fixed($0) } ?? "-"
                lines.append(pad(name, 22) + pad("\(detected)/\(group.count)", 10) + pad("\(inTime)/\(group.count)", 9)
                    + pad(median, 16) + maximum)
            }
            lines.append("")
            // In time per SNR, by condition and noise (T3 and T4 together).
            let conditions = ["dry", "room", "phone"], noises = ["household", "speech"]
            lines.append("In time by SNR, condition and noise (T3 + T4, of 2 sounders each)")
            lines.append(pad("SNR", 8) + conditions.flatMap { c in noises.map { pad("\(c) \($0)", 17) } }.joined())
            let snrs = Set(synthetic.compactMap(\.testCase.snrDB)).sorted()
            for snr in snrs {
                var row = pad("\(Int(snr)) dB", 8)
                for condition in conditions {
                    for noise in noises {
                        let group = synthetic.filter {
                            $0.testCase.snrDB == snr && $0.testCase.condition == condition && $0.testCase.noise == noise
                        }
                        row += pad("\(group.filter(\.metTarget).count)/\(group.count)", 17)
                    }
                }
                lines.append(row)
            }
            let misses = synthetic.filter { !$0.metTarget }
            for miss in misses {
                let latency = miss.latency.map { "late: \(fixed($0)) s" } ?? "missed"
                lines.append("  \(latency): \(miss.testCase.name)")
            }
            lines.append("")
        }

        let real = outcomes.filter { $0.testCase.expectedGroup != nil && !$0.testCase.fileClass.hasPrefix("synthetic") }
        if !real.isEmpty {
            lines.append("Real alarm recordings (decision time from the file's start)")
            for outcome in real.sorted(by: { ($0.testCase.isTarget ? 0 : 1, $0.testCase.name) < ($1.testCase.isTarget ? 0 : 1, $1.testCase.name) }) {
                let first = outcome.detection.map {
                    "\($0.group) \($0.source.rawValue)\($0.pattern.map { " " + $0.rawValue } ?? "") at \(fixed($0.time)) s, \(Int($0.toneHz.rounded())) Hz"
                        + ($0.classifierScore.map { ", classifier \(fixed(Double($0), 2))" } ?? "")
                } ?? "no event"
                lines.append("  \(outcome.testCase.isTarget ? "[target] " : "")\(outcome.testCase.fileClass) \(outcome.testCase.name) (\(fixed(outcome.testCase.seconds, 1)) s): \(first)")
            }
            let targets = real.filter(\.testCase.isTarget)
            lines.append("  smoke_alarm_t3 recall: \(targets.filter { $0.detection != nil }.count)/\(targets.count);"
                + " other smoke_alarm recordings with an event: \(real.filter { !$0.testCase.isTarget && $0.detection != nil }.count)/\(real.count - targets.count)")
            lines.append("")
        }

        lines.append("False smoke/CO events per file class (negatives; alarm_chirp counted apart)")
        lines.append(pad("class", 34) + pad("files", 7) + pad("seconds", 9) + pad("smoke/CO", 10) + "alarm_chirp")
        let negatives = outcomes.filter { $0.testCase.expectedGroup == nil }
        var classes: [String] = []
        for outcome in negatives where !classes.contains(outcome.testCase.fileClass) { classes.append(outcome.testCase.fileClass) }
        for name in classes.sorted() {
            let group = negatives.filter { $0.testCase.fileClass == name }
            let seconds = group.reduce(0) { $0 + $1.testCase.seconds }
            let falseEvents = group.reduce(0) { $0 + $1.falseEvents.count }
            let chirps = group.reduce(0) { $0 + $1.chirpEvents }
            lines.append(pad(name, 34) + pad(String(group.count), 7) + pad(fixed(seconds, 0), 9) + pad(String(falseEvents), 10) + String(chirps))
        }
        for outcome in negatives where !outcome.falseEvents.isEmpty {
            for event in outcome.falseEvents {
                lines.append("  false \(event.group) (\(event.source.rawValue)\(event.pattern.map { " " + $0.rawValue } ?? "")) at \(fixed(event.time)) s, \(Int(event.toneHz.rounded())) Hz: \(outcome.testCase.name)")
            }
        }
        for outcome in outcomes where outcome.testCase.expectedGroup != nil {
            for event in outcome.falseEvents {
                lines.append("  wrong-group \(event.group) (\(event.source.rawValue)\(event.pattern.map { " " + $0.rawValue } ?? "")) at \(fixed(event.time)) s, \(Int(event.toneHz.rounded())) Hz: \(outcome.testCase.name)")
            }
        }
        for outcome in negatives where !outcome.testCase.name.hasPrefix("low-battery chirps") {
            for event in outcome.onsets where event.group == AlarmEvent.alarmChirp {
                lines.append("  alarm_chirp at \(fixed(event.time)) s, \(Int(event.toneHz.rounded())) Hz, \(fixed(event.toneLevelDBFS, 1)) dBFS: \(outcome.testCase.name)")
            }
        }
        let chirpCases = negatives.filter { $0.testCase.name.hasPrefix("low-battery chirps") }
        if !chirpCases.isEmpty {
            lines.append(
                "  low-battery chirps (4 chirps 40 s apart; one alarm_chirp expected, at the third chirp, 85.5 s):")
            for outcome in chirpCases {
                let chirps = outcome.onsets.filter { $0.group == AlarmEvent.alarmChirp }
                let times = chirps.map { "at \(fixed($0.time)) s (\(Int($0.toneHz.rounded())) Hz)" }.joined(separator: ", ")
                lines.append("    \(outcome.testCase.name): \(chirps.isEmpty ? "no alarm_chirp" : times)")
            }
        }
        let positivesFalse = outcomes.filter { $0.testCase.expectedGroup != nil }.reduce(0) { $0 + $1.falseEvents.count }
        lines.append("  total false smoke/CO events on negatives: \(negatives.reduce(0) { $0 + $1.falseEvents.count });"
            + " wrong-group events on alarms: \(positivesFalse)")
        lines.append("")

        var byRate: [Int: (cpu: Double, seconds: Double)] = [:]
        for outcome in outcomes {
            byRate[outcome.testCase.sampleRate, default: (0, 0)].cpu += outcome.detectorCPUSeconds
            byRate[outcome.testCase.sampleRate, default: (0, 0)].seconds += outcome.testCase.seconds
        }
        lines.append("Tone detector CPU cost (this machine, one core; classifier excluded)")
        for (rate, total) in byRate.sorted(by: { $0.key < $1.key }) where total.seconds > 0 {
            let perSecond = total.cpu / total.seconds * 1e6
            lines.append("  \(rate) Hz: \(fixed(perSecond, 0)) us of CPU per second of audio (\(fixed(perSecond / 1e4, 3)) % of a core) over \(fixed(total.seconds, 0)) s")
        }
        return lines.joined(separator: "\n")
    }
}
