import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs
import EarshotService

/// `earshot eval --groups`: the daemon's whole detection (`FileDetection`, the code `earshot detect` runs) over a
/// labelled manifest and over a long negative stream, with recall, duplicate alerts, false events per hour and
/// time to detection for every preset group.
package enum GroupEvaluation {
    /// Every preset group, in the order of the tables.
    package static let groups = ["smoke_alarm", "fire_alarm", "co_alarm", "alarm_chirp", "baby_cry", "glass_break",
                                 "snoring", "dog_bark", "doorbell_knock", "speech"]

    /// The alarm family: one real alarm should give one event among these.
    package static let alarmFamily: Set<String> = ["smoke_alarm", "fire_alarm", "co_alarm"]

    /// One labelled file.
    package struct Item: Sendable {
        package var path: String
        package var label: String
        /// The group that must be detected (nil: a negative for every group).
        package var group: String?
        /// Seconds into the file where the sound to detect starts (0 when the manifest does not say).
        package var onset: Double
    }

    /// The group a `../shared/audio` label stands for, when the manifest has no `group` column.
    package static func group(forLabel label: String) -> String? {
        switch label {
        case "smoke_alarm", "smoke_alarm_t3", "smoke_alarm_other": "smoke_alarm"
        case "baby_crying": "baby_cry"
        case "glass_breaking": "glass_break"
        case "snoring": "snoring"
        case "dog_barking": "dog_bark"
        case "door_knock", "doorbell": "doorbell_knock"
        case "speech", "speech_babble", "speech_babble_crowd": "speech"
        default: nil
        }
    }

    /// Reads a MANIFEST.tsv: path, source, license, label, ... and, when present, `group` (`-` for none) and
    /// `onset` columns (as `scripts/make-detection-set` writes them).
    /// - Throws: as ``Manifest/read(_:)``: `.noInput` when it cannot be read, `.data` when it is not a manifest.
    package static func items(manifest: URL) throws(EarshotError) -> [Item] {
        let (header, rows) = try Manifest.read(manifest)
        let groupColumn = header.firstIndex(of: "group"), onsetColumn = header.firstIndex(of: "onset")
        let root = manifest.deletingLastPathComponent()
        return rows.compactMap { columns in
            guard columns.count >= 4 else { return nil }
            var group = group(forLabel: columns[3])
            if let groupColumn, groupColumn < columns.count { group = columns[groupColumn] == "-" ? nil : columns[groupColumn] }
            let onset = onsetColumn.flatMap { $0 < columns.count ? Double(columns[$0]) : nil } ?? 0
            return Item(path: root.appendingPathComponent(columns[0]).path, label: columns[3], group: group, onset: onset)
        }
    }

    /// An onset of some group.
    package struct Onset: Sendable {
        package var group: String
        /// Stream time the decision was made (s).
        package var decisionTime: Double
        /// Stream time the event starts (s).
        package var start: Double
        /// For an alarm: its source, pattern and tone (for the problem lists).
        package var detail = ""
    }

    /// What happened on one file.
    package struct FileOutcome: Sendable {
        package var item: Item
        package var seconds: Double
        package var onsets: [Onset]
    }

    /// Onsets in a stage's outputs (classifier groups and alarms), chirps included.
    package static func onset(of output: DetectionStage.Output) -> Onset? {
        switch output {
        case .detection(.onset(let onset)), .snore(.onset(let onset)):
            Onset(group: onset.group, decisionTime: onset.decisionTime, start: onset.start)
        case .alarm(let alarm) where alarm.kind == .onset:
            Onset(group: alarm.group, decisionTime: alarm.time, start: alarm.start,
                  detail: " (\(alarm.source.rawValue)\(alarm.pattern.map { " " + $0.rawValue } ?? "") \(Int(alarm.toneHz.rounded())) Hz, classifier \(alarm.classifierScore.map { JSONValue.format(Double($0), decimals: 2) } ?? "-"), decided at \(JSONValue.format(alarm.time, decimals: 1)))")
        default: nil
        }
    }

    /// Runs the detection over each item (files that cannot be decoded are listed in `skipped`).
    package static func run(_ items: [Item], detection: FileDetection, skipped: inout [String],
                            progress: (Int) -> Void = { _ in }) -> [FileOutcome] {
        var outcomes: [FileOutcome] = []
        for (number, item) in items.enumerated() {
            progress(number)
            var onsets: [Onset] = []
            do {
                let seconds = try detection.run(url: URL(fileURLWithPath: item.path)) { output in
                    if let onset = onset(of: output) { onsets.append(onset) }
                }
                outcomes.append(FileOutcome(item: item, seconds: seconds, onsets: onsets))
            } catch {
                skipped.append("\(item.path): \(error.message)")
            }
        }
        return outcomes
    }

    // MARK: The negative stream

    /// Labels of `../shared/audio` that make up the household negative stream: speech, TV-like babble, music,
    /// household and appliance noise, quiet rooms and their doors and clocks (no alarms, cries, snores, glass,
    /// barks, knocks or bells: those are some group's positives or its confusers, evaluated as labelled files).
    package static func isStreamLabel(_ label: String) -> Bool {
        label.hasPrefix("speech") || label.hasPrefix("music") || label.hasPrefix("household_noise")
            || ["background", "quiet_room", "noise_vinyl_hiss", "field_recording_insects", "door_close", "door_creak",
                "clock"].contains(label)
    }

    /// The clips of the negative stream, decoded to 16 kHz mono.
    package static func streamClips(_ items: [Item]) -> [(label: String, path: String, samples: [Float])] {
        var clips: [(label: String, path: String, samples: [Float])] = []
        for item in items where isStreamLabel(item.label) {
            guard let decoder = try? AudioFileDecoder(url: URL(fileURLWithPath: item.path)),
                  var samples = try? decoder.readAllMono() else { continue }
            if decoder.sampleRate != 16_000, let resampler = try? Resampler(inputRate: Double(decoder.sampleRate)) {
                var converted: [Float] = []
                try? resampler.process(samples, appendingTo: &converted)
                try? resampler.flush(appendingTo: &converted)
                samples = converted
            }
            if samples.count >= 16_000 { clips.append((item.label, item.path, samples)) }
        }
        return clips
    }

    /// A long negative stream at 16 kHz assembled from `clips`, never one clip looped: excerpts of 3-60 s of a
    /// random clip from a random offset at a random gain (-14...+4 dB), a third of them with a second clip mixed
    /// under (speech over music or appliance noise, as a TV or a kitchen), joined by 0-4 s of quiet room tone.
    /// Seeded: the same seed gives the same stream.
    package struct Stream {
        let clips: [[Float]]
        var random: SeededRandom
        var remaining: Int
        /// Where each piece starts (stream sample), how many samples of it are the excerpt (the rest is quiet room
        /// tone) and which clips it holds (indices into `clips`).
        package private(set) var pieces: [(start: Int, count: Int, clip: Int, under: Int?)] = []
        private var position = 0

        package init(clips: [[Float]], seconds: Double, seed: UInt64) {
            self.clips = clips
            random = SeededRandom(seed: seed)
            remaining = Int(seconds * 16_000)
        }

        private mutating func excerpt(maxCount: Int) -> (Int, [Float]) {
            let index = Int.random(in: 0..<clips.count, using: &random)
            let clip = clips[index]
            let count = min(clip.count, maxCount)
            let start = clip.count > count ? Int.random(in: 0...(clip.count - count), using: &random) : 0
            return (index, Array(clip[start..<(start + count)]))
        }

        /// The next piece of the stream; false at its end.
        package mutating func next(_ out: inout [Float]) -> Bool {
            guard remaining > 0, !clips.isEmpty else { return false }
            let length = Int.random(in: 48_000...960_000, using: &random)
            var (clip, piece) = excerpt(maxCount: length)
            var underClip: Int?
            let gain = Float(pow(10, Double.random(in: -14...4, using: &random) / 20))
            for index in piece.indices { piece[index] *= gain }
            if Double.random(in: 0..<1, using: &random) < 0.33 {
                let (index, under) = excerpt(maxCount: piece.count)
                underClip = index
                let underGain = Float(pow(10, Double.random(in: -20 ... -4, using: &random) / 20))
                for index in under.indices { piece[index] += under[index] * underGain }
            }
            let quiet = Int.random(in: 0...64_000, using: &random)
            var room = SeededRandom(seed: random.next())
            let take = min(remaining, piece.count + quiet)
            out.reserveCapacity(take)
            out += piece.prefix(take)
            while out.count < take { out.append(Float.random(in: -0.0005...0.0005, using: &room)) }
            remaining -= take
            pieces.append((position, min(piece.count, take), clip, underClip))
            position += take
            return remaining > 0
        }
    }

    /// The longest part of the negative stream (s): a stream of `seconds` is `ceil(seconds / 12 h)` equal parts,
    /// part `k` seeded `13 + k` (24 h: two 12-hour halves, seeds 13 and 14), whatever the number of threads.
    package static let streamPartSeconds = 12.0 * 3600

    /// The number of parts of a negative stream of `seconds` (see ``streamPartSeconds``), at least 1.
    package static func streamParts(seconds: Double) -> Int {
        max(1, Int((seconds / streamPartSeconds - 1e-9).rounded(.up)))
    }

    /// Runs the stream through the detection, each part (``streamParts(seconds:)``) with its own stage and seed,
    /// `threads` parts at once: the stream, and so every figure, is the same for any number of threads.
    /// `names` (one per clip) name the clips playing at each onset in `sources`.
    package static func runStream(clips: [[Float]], names: [String], seconds: Double, threads: Int, detection: FileDetection)
        -> (onsets: [Onset], seconds: Double, sources: [String])
    {
        let parts = streamParts(seconds: seconds)
        let workers = min(parts, max(1, threads))
        let results = Mutex<[[Onset]]>(Array(repeating: [], count: parts))
        let sources = Mutex<[[String]]>(Array(repeating: [], count: parts))
        DispatchQueue.concurrentPerform(iterations: workers) { worker in
            for part in stride(from: worker, to: parts, by: workers) {
                var stream = Stream(clips: clips, seconds: seconds / Double(parts), seed: 13 + UInt64(part))
                var onsets: [Onset] = []
                _ = try? detection.run(sampleRate: 16_000, next: { stream.next(&$0) }) { output in
                    if let onset = onset(of: output) { onsets.append(onset) }
                }
                results.withLock { $0[part] = onsets }
                var lines: [String] = []
                for onset in onsets {
                    let sample = Int(onset.start * 16_000)
                    guard let index = stream.pieces.lastIndex(where: { $0.start <= sample }) else { continue }
                    let piece = stream.pieces[index]
                    func seconds(_ samples: Int) -> String { JSONValue.format(Double(samples) / 16_000, decimals: 1) }
                    var line = "part \(part) \(onset.group)@\(JSONValue.format(onset.start, decimals: 1))\(onset.detail) (\(seconds(sample - piece.start)) s into the piece of \(seconds(piece.count)) s): \(names[piece.clip])"
                        + (piece.under.map { " + " + names[$0] } ?? "")
                    // The window that decided may reach into the next piece (which starts cut, after the quiet).
                    if index + 1 < stream.pieces.count, stream.pieces[index + 1].start - sample < 16_000 {
                        let next = stream.pieces[index + 1]
                        line += "; the next piece starts \(seconds(next.start - sample)) s later: \(names[next.clip])"
                            + (next.under.map { " + " + names[$0] } ?? "")
                    }
                    lines.append(line)
                }
                sources.withLock { $0[part] = lines }
            }
        }
        return (results.withLock { $0 }.flatMap { $0 }, seconds, sources.withLock { $0 }.flatMap { $0 })
    }

    // MARK: Report

    private static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text + " " : text + String(repeating: " ", count: width - text.count)
    }

    private static func fixed(_ value: Double, _ decimals: Int = 2) -> String { JSONValue.format(value, decimals: decimals) }

    /// The per-group table: positives detected, alerts per detected positive (the group and, for alarms, the
    /// other alarm groups on the same file), median / max time to detection (decision minus the labelled onset),
    /// false events on the labelled negatives and per 24 h of the stream.
    package static func report(_ outcomes: [FileOutcome], stream: (onsets: [Onset], seconds: Double, sources: [String])?, title: String) -> String {
        var lines = [title]
        let negativeSeconds = outcomes.filter { $0.item.group == nil }.reduce(0) { $0 + $1.seconds }
        lines.append(pad("group", 16) + pad("recall", 12) + pad("alerts/pos", 12) + pad("TTD med/max s", 16)
            + pad("false (labelled neg.)", 22) + (stream != nil ? "false per 24 h (stream)" : ""))
        for group in groups {
            let positives = outcomes.filter { $0.item.group == group }
            let detected = positives.filter { outcome in outcome.onsets.contains { $0.group == group } }
            var latencies = detected.compactMap { outcome in
                outcome.onsets.first { $0.group == group }.map { $0.decisionTime - outcome.item.onset }
            }.sorted()
            if latencies.isEmpty { latencies = [] }
            let family: Set<String> = alarmFamily.contains(group) ? alarmFamily : [group]
            let alerts = detected.reduce(0) { sum, outcome in sum + outcome.onsets.filter { family.contains($0.group) }.count }
            let falseEvents = outcomes.filter { $0.item.group != group && !(alarmFamily.contains(group) && $0.item.group.map(alarmFamily.contains) == true) }
                .reduce(0) { sum, outcome in sum + outcome.onsets.filter { $0.group == group }.count }
            let recall = positives.isEmpty ? "-" : "\(detected.count)/\(positives.count)"
            let perPositive = detected.isEmpty ? "-" : fixed(Double(alerts) / Double(detected.count))
            let ttd = latencies.isEmpty ? "-" : "\(fixed(latencies[latencies.count / 2], 1)) / \(fixed(latencies.last!, 1))"
            let negatives = "\(falseEvents) (\(fixed(Double(falseEvents) / max(negativeSeconds, 1) * 3600, 1))/h)"
            var row = pad(group, 16) + pad(recall, 12) + pad(perPositive, 12) + pad(ttd, 16) + pad(negatives, 22)
            if let stream {
                let count = stream.onsets.filter { $0.group == group }.count
                row += group == "speech" ? "(speech is in the stream)" : "\(fixed(Double(count) / stream.seconds * 86_400, 1)) (\(count) in \(fixed(stream.seconds / 3600, 1)) h)"
            }
            lines.append(row)
        }
        lines.append("labelled: \(outcomes.count) files, \(outcomes.filter { $0.item.group != nil }.count) positives, "
            + "\(fixed(negativeSeconds / 3600, 2)) h of negatives")
        return lines.joined(separator: "\n")
    }

    /// One line per file with an unexpected outcome: a missed positive, more than one alert for one positive, or
    /// any event on a negative.
    package static func problemLines(_ outcomes: [FileOutcome]) -> String {
        var lines: [String] = []
        for outcome in outcomes {
            let name = URL(fileURLWithPath: outcome.item.path).lastPathComponent
            let events = outcome.onsets.map { "\($0.group)@\(fixed($0.decisionTime, 1))" }.joined(separator: " ")
            if let group = outcome.item.group {
                let family: Set<String> = alarmFamily.contains(group) ? alarmFamily : [group]
                let mine = outcome.onsets.filter { family.contains($0.group) }
                if !outcome.onsets.contains(where: { $0.group == group }) {
                    lines.append("MISSED \(group): \(name) [\(events)]")
                } else if mine.count > 1 || outcome.onsets.count > mine.count {
                    lines.append("EXTRA  \(group): \(name) [\(events)]")
                }
            } else if !outcome.onsets.isEmpty {
                lines.append("FALSE  \(outcome.item.label): \(name) [\(events)]")
            }
        }
        return lines.joined(separator: "\n")
    }
}

extension GroupEvaluation {
    /// What each issue-13 rule costs in CPU, measured back to back in this process on `seconds` of the negative
    /// stream (16 kHz, and resampled to 48 kHz for the tone detector), alternating `rounds` times: thread CPU time
    /// per second of audio of the whole detection stage, of the alarm detector with and without the new rules
    /// (rejoined second T3 matcher, persistent-tone rule, continuation; the dominance and music checks), and of the
    /// shatter onset finder.
    package static func costReport(clips: [[Float]], seconds: Double, rounds: Int, detection: FileDetection) -> String {
        var stream = Stream(clips: clips, seconds: seconds, seed: 99)
        var audio: [Float] = []
        var chunk: [Float] = []
        while true {
            chunk.removeAll(keepingCapacity: true)
            let more = stream.next(&chunk)
            audio += chunk
            if !more { break }
        }
        var audio48: [Float] = []
        if let resampler = try? Resampler(inputRate: 16_000, outputRate: 48_000) {
            try? resampler.process(audio, appendingTo: &audio48)
            try? resampler.flush(appendingTo: &audio48)
        }
        var without = AlarmDetector.Configuration()
        without.rejoinGapSeconds = 0
        without.t3RejoinGapSeconds = 0
        without.persistentToneDetection = false
        without.dominanceDB = .infinity
        without.musicScore = .infinity
        func cpu(_ body: () -> Void) -> Double {
            let before = AlarmEvaluation.threadCPUSeconds()
            body()
            return AlarmEvaluation.threadCPUSeconds() - before
        }
        func alarms(_ samples: [Float], rate: Int, _ configuration: AlarmDetector.Configuration) -> Double {
            cpu {
                let detector = AlarmDetector(configuration: configuration)
                let block = rate / 5
                samples.withUnsafeBufferPointer { all in
                    var position = 0
                    while position < all.count {
                        let count = min(block, all.count - position)
                        _ = detector.process(samples: UnsafeBufferPointer(rebasing: all[position..<(position + count)]),
                                             sampleRate: rate, framePosition: Int64(position))
                        position += count
                    }
                }
                _ = detector.finish()
            }
        }
        func stage(_ settings: DetectionStage.Settings) -> Double {
            cpu {
                var offset = 0
                _ = try? detection.run(sampleRate: 16_000, settings: settings, next: { out in
                    let end = min(audio.count, offset + 3_200)
                    out += audio[offset..<end]
                    offset = end
                    return offset < audio.count
                }) { _ in }
            }
        }
        var noGate = detection.plan.stageSettings
        noGate.glassOnsetGate = false
        // The stage's windows once, for the snore detector alone (it reads only their scores and levels).
        var windows: [ClassificationResult] = []
        var offset = 0
        _ = try? detection.run(sampleRate: 16_000, next: { out in
            let end = min(audio.count, offset + 3_200)
            out += audio[offset..<end]
            offset = end
            return offset < audio.count
        }) { output in
            if case .window(let result) = output { windows.append(result) }
        }
        let snoreLabels = Array(detection.plan.classLabels.prefix(YAMNet.classCount))
        let snoreSettings = detection.plan.stageSettings.snore ?? SnoreDetector.Configuration()
        var totals: [String: Double] = [:]
        for _ in 0..<max(1, rounds) {
            totals["snore", default: 0] += cpu {
                guard var detector = try? SnoreDetector(
                    classLabels: snoreLabels, configuration: snoreSettings, head: detection.snoreHead) else { return }
                for result in windows { _ = detector.process(result) }
                _ = detector.finish()
            }
            totals["stage", default: 0] += stage(detection.plan.stageSettings)
            totals["stage-no-gate", default: 0] += stage(noGate)
            totals["alarms16", default: 0] += alarms(audio, rate: 16_000, AlarmDetector.Configuration())
            totals["alarms16-without", default: 0] += alarms(audio, rate: 16_000, without)
            totals["alarms48", default: 0] += alarms(audio48, rate: 48_000, AlarmDetector.Configuration())
            totals["alarms48-without", default: 0] += alarms(audio48, rate: 48_000, without)
            totals["shatter", default: 0] += cpu {
                let finder = ShatterOnsets()
                audio.withUnsafeBufferPointer { all in
                    var position = 0
                    while position < all.count {
                        let count = min(3_200, all.count - position)
                        finder.feed(UnsafeBufferPointer(rebasing: all[position..<(position + count)]), firstIndex: Int64(position))
                        position += count
                    }
                }
            }
        }
        let audioSeconds = Double(audio.count) / 16_000 * Double(max(1, rounds))
        func perSecond(_ key: String) -> Double { (totals[key] ?? 0) / audioSeconds * 1e6 }
        func line(_ name: String, _ key: String) -> String {
            let us = perSecond(key)
            return "  \(name): \(fixed(us, 0)) us per second of audio (\(fixed(us / 1e4, 4)) % of a core; \(fixed(us / max(perSecond("stage"), 1) * 100, 2)) % of the stage)"
        }
        return ["CPU cost per rule (thread CPU time, \(fixed(audioSeconds / Double(max(1, rounds)), 0)) s of the negative stream x \(max(1, rounds)) rounds, back to back in one process)",
                line("whole detection stage at 16 kHz (gate, YAMNet, groups, alarms, shatter)", "stage"),
                line("alarm detector at 16 kHz, with the issue-13 rules", "alarms16"),
                line("alarm detector at 16 kHz, without them", "alarms16-without"),
                line("alarm detector at 48 kHz, with the issue-13 rules", "alarms48"),
                line("alarm detector at 48 kHz, without them", "alarms48-without"),
                line("whole detection stage without the shatter gate (glass_break)", "stage-no-gate"),
                line("shatter onsets over all the audio (what the gate would cost if every window scored as glass)", "shatter"),
                line("snore detector over the stage's \(windows.count) windows (group snoring and sleep sessions; part of the stage)", "snore"),
                "  stage with/without the shatter gate: \(fixed(perSecond("stage") / max(perSecond("stage-no-gate"), 1e-9), 3)); alarm detector with/without the rules: 16 kHz \(fixed(perSecond("alarms16") / max(perSecond("alarms16-without"), 1e-9), 3)), 48 kHz \(fixed(perSecond("alarms48") / max(perSecond("alarms48-without"), 1e-9), 3))",
        ].joined(separator: "\n")
    }
}
