import Foundation
import Synchronization
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// A temporary directory removed at the end of a test.
struct ClipScratch {
    let directory: URL
    var path: String { directory.path }

    init() throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("earshot-clips-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    func remove() { try? FileManager.default.removeItem(at: directory) }

    /// Names in the directory (hidden ones too), sorted.
    func names(_ subdirectory: String? = nil) -> [String] {
        let path = subdirectory.map { directory.appendingPathComponent($0).path } ?? self.path
        return ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
    }
}

/// Collects what a clip writer says (called on its queue).
final class ClipWriterLog: Sendable {
    private let state = Mutex<(reports: [ClipWriter.Report], saved: [SavedClip])>(([], []))
    var reports: [ClipWriter.Report] { state.withLock { $0.reports } }
    var saved: [SavedClip] { state.withLock { $0.saved } }
    func report(_ report: ClipWriter.Report) { state.withLock { $0.reports.append(report) } }
    func save(_ clip: SavedClip) { state.withLock { $0.saved.append(clip) } }
}

@Suite("Clips: saving the audio around events")
struct ClipTests {
    /// 2026-11-30T21:15:03Z.
    static let evening = Date(timeIntervalSince1970: 1_796_073_303)

    // MARK: Configuration

    @Test("[clips]: defaults, every key read, the default directory is under the unit's StateDirectory")
    func configuration() throws {
        let defaults = DaemonConfiguration().clips
        #expect(!defaults.enabled)
        #expect(defaults.directory == "/var/lib/earshot/clips")
        #expect(defaults.preSeconds == 5 && defaults.postSeconds == 5)
        #expect(defaults.maxClips == 200 && defaults.retentionDays == 7)
        #expect(defaults.groups.isEmpty && defaults.saves(group: "anything"))

        let configuration = try DaemonConfiguration.parse(
            "[clips]\nenabled = yes\ndirectory = /srv/clips\npre_seconds = 2.5\npost_seconds = 0\nmax_clips = 10\nretention_days = 3650\ngroups = smoke_alarm | alarm_chirp, baby_cry\n",
            source: "t.conf")
        var expected = DaemonConfiguration()
        expected.clips.enabled = true
        expected.clips.directory = "/srv/clips"
        expected.clips.preSeconds = 2.5
        expected.clips.postSeconds = 0
        expected.clips.maxClips = 10
        expected.clips.retentionDays = 3650
        expected.clips.groups = ["smoke_alarm", "alarm_chirp", "baby_cry"]
        #expect(configuration == expected)
        #expect(configuration.clips.saves(group: "alarm_chirp") && !configuration.clips.saves(group: "snoring"))

        // Clips sit beside the event history, in the directory systemd gives the service.
        let unit = try LifecycleServiceFileTests.serviceSettings()
        let stateDirectory = try #require(unit["StateDirectory"]?.first)
        #expect(defaults.directory == "/var/lib/\(stateDirectory)/clips")
        #expect((DaemonConfiguration().history.path as NSString).deletingLastPathComponent
            == (defaults.directory as NSString).deletingLastPathComponent)
    }

    static let badValues: [ConfigFileTests.BadValue] = [
        .init(text: "[clips]\nenabled = sometimes",
              message: "t.conf:2: [clips] enabled = sometimes: must be true or false (or yes/no, on/off, 1/0)"),
        .init(text: "[clips]\npre_seconds = 31",
              message: "t.conf:2: [clips] pre_seconds = 31: must be in [0, 30] seconds"),
        .init(text: "[clips]\npre_seconds = -1",
              message: "t.conf:2: [clips] pre_seconds = -1: must be in [0, 30] seconds"),
        .init(text: "[clips]\npost_seconds = 30.5",
              message: "t.conf:2: [clips] post_seconds = 30.5: must be in [0, 30] seconds"),
        .init(text: "[clips]\npost_seconds = five",
              message: "t.conf:2: [clips] post_seconds = five: must be in [0, 30] seconds"),
        .init(text: "[clips]\nmax_clips = 0",
              message: "t.conf:2: [clips] max_clips = 0: must be a whole number in [1, 100000]"),
        .init(text: "[clips]\nmax_clips = 100001",
              message: "t.conf:2: [clips] max_clips = 100001: must be a whole number in [1, 100000]"),
        .init(text: "[clips]\nretention_days = 0",
              message: "t.conf:2: [clips] retention_days = 0: must be a whole number in [1, 3650] days"),
        .init(text: "[clips]\nretention_days = 3651",
              message: "t.conf:2: [clips] retention_days = 3651: must be a whole number in [1, 3650] days"),
        .init(text: "[clips]\ndirectory = clips",
              message: "t.conf:2: [clips] directory = clips: must be an absolute directory path, e.g. /var/lib/earshot/clips"),
        .init(text: "[clips]\ndirectory =",
              message: "t.conf:2: [clips] directory = : must be an absolute directory path, e.g. /var/lib/earshot/clips"),
        .init(text: "[clips]\ngroups = Smoke",
              message: "t.conf:2: [clips] groups = Smoke: \"Smoke\" is not a group name (1 to 64 lowercase letters, digits and _; separate names with |, commas or spaces)"),
        .init(text: "[clips]\nenabled = true\n\ngroups = smoke_alrm",
              message: "t.conf:4: [clips] groups: \"smoke_alrm\" is not a group (did you mean smoke_alarm? groups: alarm_chirp, baby_cry, co_alarm, dog_bark, doorbell_knock, fire_alarm, glass_break, loud, smoke_alarm, snoring, speech)"),
        .init(text: "[clips]\nmax_clip = 3",
              message: "t.conf:2: [clips] max_clip: unknown key (did you mean max_clips? keys: enabled, directory, pre_seconds, post_seconds, max_clips, retention_days, groups)"),
        .init(text: "[clip]\nenabled = true",
              message: "t.conf:2: [clip]: unknown section (did you mean [clips]? sections: capture, analysis, models, detection, output, daemon, alarms, history, clips, sleep, mqtt, metrics, notify, group.NAME)"),
    ]

    @Test("[clips] errors name the file, line, key, value and what is allowed; exit status 78", arguments: badValues)
    func badValue(_ bad: ConfigFileTests.BadValue) {
        #expect(throws: EarshotError(.config, bad.message)) { _ = try DaemonConfiguration.parse(bad.text, source: "t.conf") }
    }

    @Test("a group of one's own may save clips")
    func ownGroup() throws {
        let configuration = try DaemonConfiguration.parse(
            "[clips]\ngroups = kettle\n[group.kettle]\nclasses = Whistle\nthreshold = 0.4\n", source: "t.conf")
        #expect(configuration.clips.groups == ["kettle"])
    }

    // MARK: The ring

    @Test("the ring keeps the newest samples across its wrap, quantized as 16-bit PCM, and forgets at a restart")
    func ring() {
        var ring = ClipRing(capacity: 10)
        #expect(ring.storageBytes == 20)
        let values: [Float] = (0..<25).map { Float($0) / 32_768 }
        values.withUnsafeBufferPointer { all in
            ring.append(UnsafeBufferPointer(rebasing: all[0..<7]))
            ring.append(UnsafeBufferPointer(rebasing: all[7..<25]))
        }
        #expect(ring.startIndex == 15 && ring.endIndex == 25)
        #expect(ring.copy(from: 0, to: 100).first == 15)
        #expect(ring.copy(from: 0, to: 100).samples == Array(15..<25).map(Int16.init))
        #expect(ring.copy(from: 17, to: 21).samples == [17, 18, 19, 20])
        #expect(ring.copy(from: 30, to: 40).samples.isEmpty)
        ring.appendSilence(3)
        #expect(ring.copy(from: 24, to: 28).samples == [24, 0, 0, 0])
        ring.restart(at: 1_000)
        #expect(ring.copy(from: 0, to: 2_000).samples.isEmpty)
        [Float(0.5), -1, 1, 2, -3, .nan, 1.0 / 65_536].withUnsafeBufferPointer { ring.append($0) }
        #expect(ring.copy(from: 1_000, to: 1_007).samples == [16_384, -32_768, 32_767, 32_767, -32_768, 0, 1])
    }

    // MARK: The recorder

    /// Sample `i` of the test timeline: distinct 16-bit values, so a clip's samples say where they came from.
    static func rampValue(_ index: Int64) -> Int16 { Int16(index % 20_000 - 10_000) }

    static func ramp(_ range: Range<Int64>) -> [Int16] { range.map(rampValue) }

    /// Whether `samples` are the ramp over `range` (a Bool, so that a failure does not print a million samples).
    static func isRamp(_ samples: [Int16], _ range: Range<Int64>) -> Bool { samples == ramp(range) }

    /// Feeds the ramp from `from` to `to` (timeline indices) in blocks of `block` samples.
    static func feed(_ recorder: ClipRecorder, _ from: Int64, _ to: Int64, block: Int = 320) {
        var index = from
        var buffer = [Float](repeating: 0, count: block)
        while index < to {
            let count = Int(min(Int64(block), to - index))
            for offset in 0..<count { buffer[offset] = Float(rampValue(index + Int64(offset))) / 32_768 }
            buffer.withUnsafeBufferPointer { recorder.append(UnsafeBufferPointer(rebasing: $0[0..<count]), at: index) }
            index += Int64(count)
        }
    }

    final class Clips {
        var all: [ClipAudio] = []
    }

    static func recorder(pre: Double = 1, post: Double = 2, groups: [String] = [], into clips: Clips) -> ClipRecorder {
        var settings = DaemonConfiguration.Clips()
        settings.enabled = true
        settings.preSeconds = pre
        settings.postSeconds = post
        settings.groups = groups
        return ClipRecorder(settings: settings, now: { ClipTests.evening }) { clips.all.append($0) }
    }

    /// Trial 9 #8: with input replayed at another speed the history stores an event at the daemon's start plus its
    /// stream time; its clip is named by the same second, not by the wall clock (which runs at another pace).
    @Test("input replayed at another speed: the clip's start is the origin plus the event's stream time, as the history's")
    func replayedTimeLine() throws {
        let clips = Clips()
        var settings = DaemonConfiguration.Clips()
        settings.enabled = true
        let origin = Self.evening.addingTimeInterval(-3600)
        let recorder = ClipRecorder(settings: settings, now: { ClipTests.evening }, timeLine: .stream(origin: origin)) {
            clips.all.append($0)
        }
        Self.feed(recorder, 0, 16_000 * 62)
        recorder.observe(.onset(.init(group: "baby_cry", classLabel: "Baby cry, infant cry", confidence: 0.9, start: 60, decisionTime: 61)))
        recorder.observe(.offset(.init(group: "baby_cry", classLabel: "Baby cry, infant cry", start: 60, end: 61.5,
                                       peakConfidence: 0.9, meanConfidence: 0.8, positiveWindows: 4, reason: .holdElapsed)))
        Self.feed(recorder, 16_000 * 62, 16_000 * 70)
        let clip = try #require(clips.all.first)
        #expect(clip.wallClockStart == origin.addingTimeInterval(60))
        #expect(ClipFiles.stem(start: clip.wallClockStart, group: clip.group) == "2026-11-30T20-16-03Z_baby_cry")
    }

    @Test("a clip runs from pre_seconds before the start to post_seconds after the end, cut at the stream's start and end")
    func recorderRanges() throws {
        let clips = Clips()
        let recorder = Self.recorder(into: clips)
        // Ring: 1 s + 60 s + 2 s + 1 s of 16-bit samples.
        #expect(recorder.ringBytes == 64 * 16_000 * 2)
        Self.feed(recorder, 0, 16_000 * 3)  // 3 s
        recorder.observe(.onset(.init(group: "baby_cry", classLabel: "Baby cry, infant cry", confidence: 0.9, start: 0.48, decisionTime: 1.92)))
        Self.feed(recorder, 16_000 * 3, 16_000 * 4)
        recorder.observe(.offset(.init(group: "baby_cry", classLabel: "Baby cry, infant cry", start: 0.48, end: 2.4,
                                       peakConfidence: 0.9, meanConfidence: 0.8, positiveWindows: 4, reason: .holdElapsed)))
        #expect(clips.all.isEmpty, "the post-roll is not there yet")
        Self.feed(recorder, 16_000 * 4, 16_000 * 10)
        let first = try #require(clips.all.first)
        // The pre-roll stops at the stream's start: [0, 2.4 + 2 s).
        #expect(first.startIndex == 0 && Self.isRamp(first.samples, 0..<70_400))
        #expect(first.group == "baby_cry" && first.eventStart == 0.48 && first.eventEnd == 2.4 && !first.capped)
        #expect(first.start == 0 && first.end == 4.4)
        // The event started 0.48 s into the stream, which ended 5 s before "now" when the onset came.
        #expect(first.wallClockStart == Self.evening.addingTimeInterval(0.48 - 3))

        recorder.observe(.onset(.init(group: "glass_break", classLabel: "Shatter", confidence: 0.9, start: 8.5, decisionTime: 9)))
        recorder.observe(.offset(.init(group: "glass_break", classLabel: "Shatter", start: 8.5, end: 9.46,
                                       peakConfidence: 0.9, meanConfidence: 0.9, positiveWindows: 1, reason: .holdElapsed)))
        Self.feed(recorder, 16_000 * 10, 16_000 * 10 + 1_234)
        #expect(clips.all.count == 1)
        recorder.finish()
        // The stream ends 10.077 s in: the post-roll is cut there.
        let last = try #require(clips.all.last)
        #expect(clips.all.count == 2)
        #expect(last.startIndex == 120_000 && Self.isRamp(last.samples, 120_000..<161_234))
        #expect(recorder.pendingCount == 0)
    }

    @Test("an event longer than 60 s is cut 60 s after its start plus the post-roll; its end later changes nothing")
    func recorderCap() throws {
        let clips = Clips()
        let recorder = Self.recorder(pre: 1, post: 2, into: clips)
        Self.feed(recorder, 0, 16_000 * 2)
        recorder.eventStarted(group: "smoke_alarm", start: 1)
        // One block of 70 s at once: the recorder stops at the clip's end, so its start is still in the ring.
        Self.feed(recorder, 16_000 * 2, 16_000 * 72, block: 16_000 * 70)
        let clip = try #require(clips.all.first)
        #expect(clip.startIndex == 0 && Self.isRamp(clip.samples, 0..<(16_000 * 63)))
        #expect(clip.capped && clip.eventEnd == nil)
        recorder.eventEnded(group: "smoke_alarm", end: 80)
        recorder.finish()
        #expect(clips.all.count == 1)
    }

    @Test("a gap ends waiting clips with the audio before it; a clip after it starts no earlier than the gap")
    func recorderGap() throws {
        let clips = Clips()
        let recorder = Self.recorder(pre: 1, post: 2, into: clips)
        Self.feed(recorder, 0, 16_000 * 4)
        recorder.eventStarted(group: "dog_bark", start: 3)
        recorder.eventEnded(group: "dog_bark", end: 3.96)
        Self.feed(recorder, 16_000 * 4, 16_000 * 5)
        // The capture lost 3 s.
        Self.feed(recorder, 16_000 * 8, 16_000 * 9)
        #expect(clips.all.count == 1)
        #expect(clips.all[0].startIndex == 32_000 && Self.isRamp(clips.all[0].samples, 32_000..<80_000))
        recorder.eventStarted(group: "dog_bark", start: 8.5)
        recorder.eventEnded(group: "dog_bark", end: 8.6)
        Self.feed(recorder, 16_000 * 9, 16_000 * 11)
        #expect(clips.all.count == 2)
        #expect(clips.all[1].startIndex == 128_000 && Self.isRamp(clips.all[1].samples, 128_000..<169_600))
    }

    @Test("a hole of up to 50 ms (a resampler restarted at a reload) is filled with silence instead")
    func recorderBridge() throws {
        let clips = Clips()
        let recorder = Self.recorder(pre: 0, post: 0, into: clips)
        Self.feed(recorder, 0, 1_000)
        recorder.eventStarted(group: "speech", start: 0)
        Self.feed(recorder, 1_400, 2_000)
        recorder.eventEnded(group: "speech", end: 0.125)
        let clip = try #require(clips.all.first)
        #expect(clip.samples.count == 2_000 && clip.samples[1_000..<1_400].allSatisfy { $0 == 0 })
        #expect(Self.isRamp(Array(clip.samples[0..<1_000]), 0..<1_000) && Self.isRamp(Array(clip.samples[1_400...]), 1_400..<2_000))
    }

    @Test("groups: only the listed ones are saved; a chirp is a point event; pattern alarms start and end clips")
    func recorderGroupsAndAlarms() throws {
        let clips = Clips()
        let recorder = Self.recorder(pre: 1, post: 1, groups: ["alarm_chirp", "smoke_alarm"], into: clips)
        Self.feed(recorder, 0, 16_000 * 3)
        recorder.observe(.onset(.init(group: "baby_cry", classLabel: "Baby cry, infant cry", confidence: 0.9, start: 1, decisionTime: 2)))
        let chirp = AlarmEvent(kind: .onset, group: "alarm_chirp", source: .pattern, pattern: .chirp, cycles: 1,
                               toneHz: 3_100, toneLevelDBFS: -20, classifierScore: nil, classifierClass: nil, start: 2, time: 2.1)
        recorder.observe(chirp)
        var smoke = AlarmEvent(kind: .onset, group: "smoke_alarm", source: .pattern, pattern: .t3, cycles: 1,
                               toneHz: 3_100, toneLevelDBFS: -20, classifierScore: 0.9, classifierClass: nil, start: 2.5, time: 6.5)
        recorder.observe(smoke)
        Self.feed(recorder, 16_000 * 3, 16_000 * 8)
        smoke.kind = .end
        smoke.time = 7.5
        recorder.observe(smoke)
        recorder.observe(.offset(.init(group: "baby_cry", classLabel: "Baby cry, infant cry", start: 1, end: 4,
                                       peakConfidence: 0.9, meanConfidence: 0.9, positiveWindows: 3, reason: .holdElapsed)))
        Self.feed(recorder, 16_000 * 8, 16_000 * 9)
        #expect(clips.all.map(\.group) == ["alarm_chirp", "smoke_alarm"])
        #expect(clips.all[0].startIndex == 16_000 && clips.all[0].samples.count == 32_000)
        #expect(clips.all[0].eventEnd == 2)
        #expect(clips.all[1].startIndex == 24_000 && Self.isRamp(clips.all[1].samples, 24_000..<136_000))
        #expect(clips.all[1].eventEnd == 7.5)
    }

    // MARK: The analyzer's samples

    @Test("the analyzer hands on the 16 kHz samples it classifies: for 48 kHz input in uneven chunks, the file path's samples")
    func analyzerSamples() throws {
        // Three seconds of a 48 kHz chirp with noise, streamed in chunks of 1 to 4000 frames.
        var generator = SeededRandom(seed: 7)
        let input: [Float] = (0..<144_000).map { index in
            let time = Double(index) / 48_000
            return Float(0.4 * sin(2 * Double.pi * (200 + 900 * time) * time)) + Float.random(in: -0.05...0.05, using: &generator)
        }
        let analyzer = try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: 48_000, channelCount: 1))
        var received: [Float] = []
        var indices: [Int64] = []
        analyzer.onResampledAudio = { samples, index in
            indices.append(index)
            #expect(index == Int64(received.count), "consecutive calls continue each other")
            received.append(contentsOf: samples)
        }
        var position = 0
        while position < input.count {
            let count = min(input.count - position, Int.random(in: 1...4_000, using: &generator))
            analyzer.analyze(Array(input[position..<(position + count)]), atAudioFramePosition: Int64(position))
            position += count
        }
        analyzer.completeAnalysis()
        // One resampler call over the whole signal, cut to round(frames * 16000 / 48000), as decodeMono16k does.
        let resampler = try Resampler(inputRate: 48_000)
        var whole: [Float] = []
        try resampler.process(input, appendingTo: &whole)
        try resampler.flush(appendingTo: &whole)
        whole.removeLast(whole.count - 48_000)
        #expect(received.count == 48_000)
        let difference = zip(received, whole).map { abs($0 - $1) }.max() ?? 1
        #expect(difference <= 1e-6, "max difference \(difference)")
        #expect(indices.count > 10)
    }

    // MARK: Files

    @Test("names: UTC second and group; only exact clip names are ours")
    func names() {
        let stem = ClipFiles.stem(start: Self.evening.addingTimeInterval(0.999), group: "smoke_alarm")
        #expect(stem == "2026-11-30T21-15-03Z_smoke_alarm")
        #expect(ClipFiles.name(stem: stem) == "2026-11-30T21-15-03Z_smoke_alarm.wav")
        #expect(ClipFiles.name(stem: stem, number: 2) == "2026-11-30T21-15-03Z_smoke_alarm-2.wav")
        #expect(ClipFiles.partialName(for: "a.wav") == ".a.wav.partial")
        for name in ["2026-11-30T21-15-03Z_smoke_alarm.wav", "2026-11-30T21-15-03Z_smoke_alarm-2.wav",
                     "1999-01-01T00-00-00Z_a.wav", "2026-11-30T21-15-03Z_co_alarm-999999.wav"] {
            #expect(ClipFiles.isClipName(name), "\(name)")
        }
        for name in ["2026-11-30T21-15-03Z_smoke_alarm.flac", "2026-11-30T21-15-03Z_.wav", "2026-11-30T21-15-03Z_Smoke.wav",
                     "2026-11-30T21:15:03Z_smoke_alarm.wav", "x2026-11-30T21-15-03Z_smoke_alarm.wav",
                     "2026-11-30T21-15-03Z_smoke_alarm-.wav", "2026-11-30T21-15-03Z_smoke_alarm-1234567.wav",
                     "2026-11-30T21-15-03Z_smoke alarm.wav", "notes.wav", ".2026-11-30T21-15-03Z_smoke_alarm.wav.partial"] {
            #expect(!ClipFiles.isClipName(name), "\(name)")
        }
        #expect(ClipFiles.isPartialName(".2026-11-30T21-15-03Z_smoke_alarm.wav.partial"))
        #expect(!ClipFiles.isPartialName(".notes.wav.partial"))
    }

    /// Creates `name` in `directory` with modification time `date`.
    static func touch(_ directory: String, _ name: String, _ date: Date) throws {
        let path = directory + "/" + name
        #expect(FileManager.default.createFile(atPath: path, contents: Data("x".utf8)))
        try FileManager.default.setAttributes([.modificationDate: date], ofItemAtPath: path)
    }

    @Test("retention deletes our clips older than retention_days, then the oldest beyond max_clips, and nothing else")
    func retention() throws {
        let scratch = try ClipScratch()
        defer { scratch.remove() }
        let now = Self.evening
        let day = 86_400.0
        // Names deliberately out of time order: retention goes by modification time.
        let clips: [(String, Double)] = [
            ("2026-11-20T10-00-00Z_baby_cry.wav", -10 * day),       // expired
            ("2026-11-23T21-15-02Z_smoke_alarm.wav", -7 * day - 1), // expired by one second
            ("2026-11-23T21-15-04Z_smoke_alarm.wav", -7 * day + 1), // kept by one second
            ("2026-11-29T08-00-00Z_snoring.wav", -2 * day),
            ("2026-11-01T08-00-00Z_snoring-2.wav", -3 * day),
            ("2026-11-30T20-00-00Z_glass_break.wav", -3_600),
            ("2026-11-30T21-00-00Z_dog_bark.wav", -60),
        ]
        for (name, age) in clips { try Self.touch(scratch.path, name, now.addingTimeInterval(age)) }
        // Not ours, however old: left alone.
        let others = ["holiday.wav", "2026-11-20T10-00-00Z_baby_cry.flac", "readme.txt"]
        for name in others { try Self.touch(scratch.path, name, now.addingTimeInterval(-100 * day)) }
        try FileManager.default.createDirectory(atPath: scratch.path + "/2026-01-01T00-00-00Z_old.wav", withIntermediateDirectories: false)
        // Half-written clips: removed after a minute.
        try Self.touch(scratch.path, ".2026-11-30T21-14-00Z_speech.wav.partial", now.addingTimeInterval(-61))
        try Self.touch(scratch.path, ".2026-11-30T21-15-00Z_speech.wav.partial", now.addingTimeInterval(-5))

        let pruned = try ClipFiles.prune(directory: scratch.path, maxClips: 3, retentionDays: 7, now: now)
        #expect(pruned.expired == ["2026-11-20T10-00-00Z_baby_cry.wav", "2026-11-23T21-15-02Z_smoke_alarm.wav"])
        #expect(pruned.excess == ["2026-11-23T21-15-04Z_smoke_alarm.wav", "2026-11-01T08-00-00Z_snoring-2.wav"])
        #expect(pruned.partial == [".2026-11-30T21-14-00Z_speech.wav.partial"])
        #expect(scratch.names() == [
            ".2026-11-30T21-15-00Z_speech.wav.partial", "2026-01-01T00-00-00Z_old.wav", "2026-11-20T10-00-00Z_baby_cry.flac",
            "2026-11-29T08-00-00Z_snoring.wav", "2026-11-30T20-00-00Z_glass_break.wav", "2026-11-30T21-00-00Z_dog_bark.wav",
            "holiday.wav", "readme.txt",
        ])
        // A missing directory has nothing to prune.
        #expect(try ClipFiles.prune(directory: scratch.path + "/none", maxClips: 1, retentionDays: 1, now: now).count == 0)
    }

    static func clip(_ group: String, seconds: Double, at start: Date = ClipTests.evening, first: Int64 = 16_000) -> ClipAudio {
        let count = Int64(seconds * 16_000)
        return ClipAudio(group: group, eventStart: Double(first) / 16_000 + 1, eventEnd: Double(first) / 16_000 + 2,
                         startIndex: first, samples: ramp(first..<(first + count)), capped: false, wallClockStart: start)
    }

    @Test("the writer: a 16-bit 16 kHz WAV that decodes to the same samples, mode 0600 in a 0700 directory, no partial file")
    func writer() throws {
        let scratch = try ClipScratch()
        defer { scratch.remove() }
        var settings = DaemonConfiguration.Clips()
        settings.directory = scratch.path + "/clips"
        settings.maxClips = 2
        let log = ClipWriterLog()
        let writer = ClipWriter(settings: settings, now: { ClipTests.evening }, report: log.report, saved: log.save)
        let clip = Self.clip("smoke_alarm", seconds: 12.5)
        writer.save(clip)
        writer.flush()
        // Modification times are coarse (a clock tick): keep the clips' apart for retention's order below.
        Thread.sleep(forTimeInterval: 0.02)
        writer.save(Self.clip("smoke_alarm", seconds: 1))  // the same second: a second name
        writer.flush()
        #expect(log.reports.isEmpty)
        let names = ["2026-11-30T21-15-03Z_smoke_alarm-2.wav", "2026-11-30T21-15-03Z_smoke_alarm.wav"]
        #expect(scratch.names("clips") == names)
        let path = settings.directory + "/" + names[1]
        #expect(log.saved.first == SavedClip(
            path: path, group: "smoke_alarm", start: 1, end: 13.5, frames: 200_000, eventStart: 2, eventEnd: 3,
            capped: false, bytes: 400_044, writeSeconds: log.saved.first?.writeSeconds ?? -1))
        #expect(log.saved.first.map { JSONValue.object($0.object(time: ClipTests.evening)).encoded }
            == #"{"type":"clip_saved","group":"smoke_alarm","path":"\#(path)","start":1.0,"end":13.5,"duration":12.5,"frames":200000,"sample_rate":16000,"event_start":2.0,"event_end":3.0,"capped":false,"time":"2026-11-30T21:15:03.000Z"}"#)
        #expect(log.saved.first?.message == "clip saved: \(path) (smoke_alarm, 12.50 s: stream time 1.00 s to 13.50 s)")
        #expect(log.saved.first?.journalFields(identifier: "earshotd") == [
            .init("MESSAGE", "clip saved: \(path) (smoke_alarm, 12.50 s: stream time 1.00 s to 13.50 s)"),
            .init("PRIORITY", "6"), .init("SYSLOG_IDENTIFIER", "earshotd"), .init("EARSHOT_EVENT", "clip"),
            .init("EARSHOT_GROUP", "smoke_alarm"), .init("EARSHOT_CLIP", path), .init("EARSHOT_STREAM_TIME", "2.0"),
        ])

        // An event longer than the cap, still going when its clip was cut: no event_end, and the line says so.
        let capped = SavedClip(path: "/c/x.wav", group: "smoke_alarm", start: 7, end: 77.5, frames: 1_128_000,
                               eventStart: 12, eventEnd: nil, capped: true, bytes: 2_256_044, writeSeconds: 0)
        #expect(JSONValue.object(capped.object(time: ClipTests.evening)).encoded
            == #"{"type":"clip_saved","group":"smoke_alarm","path":"/c/x.wav","start":7.0,"end":77.5,"duration":70.5,"frames":1128000,"sample_rate":16000,"event_start":12.0,"capped":true,"time":"2026-11-30T21:15:03.000Z"}"#)
        #expect(capped.message == "clip saved: /c/x.wav (smoke_alarm, 70.50 s: stream time 7.00 s to 77.50 s; event longer than 60 s, cut there)")
        // `earshot subscribe --format text`.
        let utc = try #require(TimeZone(identifier: "UTC"))
        #expect(EventTextFormat.format(line: JSONValue.object(capped.object(time: ClipTests.evening)).encoded, timeZone: utc)
            == "2026-11-30 21:15:03  smoke_alarm clip saved: /c/x.wav (70.50 s, stream 7.00-77.50 s, event cut at 60 s)")
        #expect(log.saved.first.map { EventTextFormat.format(line: JSONValue.object($0.object(time: ClipTests.evening)).encoded, timeZone: utc) }
            == "2026-11-30 21:15:03  smoke_alarm clip saved: \(path) (12.50 s, stream 1.00-13.50 s)")

        let decoder = try AudioFileDecoder(url: URL(fileURLWithPath: path))
        #expect(decoder.sampleRate == 16_000 && decoder.channelCount == 1)
        #expect(decoder.formatDescription == "WAV (Microsoft), Signed 16 bit PCM")
        let decoded = try decoder.readAllMono()
        #expect(decoded == clip.samples.map { Float($0) / 32_768 }, "decoded samples differ")
        var status = stat()
        #expect(stat(path, &status) == 0 && status.st_mode & 0o777 == 0o600 && status.st_size == 400_044)
        #expect(stat(settings.directory, &status) == 0 && status.st_mode & 0o777 == 0o700)

        // Retention runs after each save: a third clip leaves the newest two.
        Thread.sleep(forTimeInterval: 0.02)
        writer.save(Self.clip("glass_break", seconds: 0.5, at: Self.evening.addingTimeInterval(60)))
        writer.close()
        #expect(scratch.names("clips") == ["2026-11-30T21-15-03Z_smoke_alarm-2.wav", "2026-11-30T21-16-03Z_glass_break.wav"])
        #expect(writer.statistics.written == 3 && writer.statistics.pruned == 1 && writer.statistics.lost == 0)
    }

    @Test("a directory that cannot be made is reported once, with the fix; clips are tried again and recovery is said")
    func writerFailure() throws {
        let scratch = try ClipScratch()
        defer { scratch.remove() }
        // The parent is a regular file: even root cannot make a directory there.
        let blocker = scratch.path + "/not-a-directory"
        #expect(FileManager.default.createFile(atPath: blocker, contents: Data()))
        var settings = DaemonConfiguration.Clips()
        settings.directory = blocker + "/clips"
        let log = ClipWriterLog()
        let writer = ClipWriter(settings: settings, report: log.report, saved: log.save)
        writer.save(Self.clip("baby_cry", seconds: 1))
        writer.save(Self.clip("baby_cry", seconds: 1, at: Self.evening.addingTimeInterval(10)))
        writer.flush()
        // Said once, at start, before any clip is lost.
        #expect(log.reports == [.failing(
            "clips cannot be saved: cannot use the clips directory \(blocker)/clips: Not a directory (a part of the path is not a directory: set [clips] directory); detection goes on without clips, and clips are tried as they come")])
        #expect(log.saved.isEmpty)
        #expect(writer.statistics.lost == 2 && writer.statistics.failing)

        try FileManager.default.removeItem(atPath: blocker)
        try FileManager.default.createDirectory(atPath: blocker, withIntermediateDirectories: false)
        writer.save(Self.clip("baby_cry", seconds: 1, at: Self.evening.addingTimeInterval(20)))
        writer.close()
        #expect(log.reports.last == .recovered("clips are saved to \(blocker)/clips again (2 clips were lost)"))
        #expect(log.saved.count == 1 && !writer.statistics.failing)
        #expect(scratch.names("not-a-directory/clips") == ["2026-11-30T21-15-23Z_baby_cry.wav"])

        // A missing parent names that fix.
        var missing = settings
        missing.directory = scratch.path + "/no/clips"
        let missingLog = ClipWriterLog()
        let second = ClipWriter(settings: missing, report: missingLog.report, saved: missingLog.save)
        second.save(Self.clip("baby_cry", seconds: 1))
        second.close()
        #expect(missingLog.reports == [.failing(
            "clips cannot be saved: cannot create the clips directory \(scratch.path)/no/clips: No such file or directory (its parent directory does not exist: create it, or set [clips] directory); detection goes on without clips, and clips are tried as they come")])

        // A directory that appears after a failure at start: the first clip is saved and that is said.
        let late = ClipWriterLog()
        let third = ClipWriter(settings: missing, report: late.report, saved: late.save)
        third.flush()
        try FileManager.default.createDirectory(atPath: scratch.path + "/no", withIntermediateDirectories: false)
        third.save(Self.clip("baby_cry", seconds: 1))
        third.close()
        #expect(late.reports.last == .recovered("clips are saved to \(scratch.path)/no/clips again (no clip was lost)"))
        #expect(late.saved.count == 1)
    }
}
