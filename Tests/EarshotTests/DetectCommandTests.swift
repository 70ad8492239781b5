import Foundation
import Testing
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// `earshot detect` runs the daemon's detection stage over files at full speed: its events are the ones
/// `earshotd --input` publishes for the same file and configuration (same groups and classes, stream times within
/// one hop, the same confidences).
@Suite("earshot detect: the daemon's events from files at full speed")
struct DetectCommandTests {
    /// Watches every group the demo and the alarm recordings hold; no history, so the daemon writes nothing.
    static let configText = """
        [detection]
        watch = smoke_alarm | co_alarm | baby_cry | glass_break | snoring | doorbell_knock
        [history]
        enabled = false
        """

    static let demo = TestPaths.packageRoot.appendingPathComponent("samples/demo.flac").path

    final class Scratch {
        let directory: URL
        init() throws {
            directory = FileManager.default.temporaryDirectory
                .appendingPathComponent("earshot-detect-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        }
        func file(_ name: String) -> String { directory.appendingPathComponent(name).path }
        deinit { try? FileManager.default.removeItem(at: directory) }
    }

    /// An event line reduced to what must agree between the two programs.
    struct Event: Equatable, CustomStringConvertible {
        var type: String
        var group: String
        var label: String
        /// Onset: `stream_time`; end: `start`.
        var start: Double
        /// End only: `end`.
        var end: Double?
        /// Onset: `confidence` (alarms: `classifier_score` or nil); end: `peak_confidence`.
        var confidence: String?
        var description: String { "\(type) \(group) \"\(label)\" \(start)-\(end.map { "\($0)" } ?? "") \(confidence ?? "-")" }

        init?(line: String) {
            guard let object = try? JSONValue.parse(line), let type = object["type"]?.stringValue,
                  type == "detection" || type == "detection_end" else { return nil }
            self.type = type
            group = object["group"]?.stringValue ?? ""
            label = object["class"]?.stringValue ?? ""
            start = (type == "detection" ? object["stream_time"] : object["start"])?.doubleValue ?? -1
            end = type == "detection_end" ? object["end"]?.doubleValue : nil
            confidence = (type == "detection" ? object["confidence"] : object["peak_confidence"])?.encoded
        }

        /// Same event, times within `tolerance` seconds.
        func matches(_ other: Event, tolerance: Double) -> Bool {
            type == other.type && group == other.group && label == other.label && confidence == other.confidence
                && abs(start - other.start) <= tolerance + 1e-9
                && ((end == nil && other.end == nil) || (end.map { a in other.end.map { abs(a - $0) <= tolerance + 1e-9 } ?? false } ?? false))
        }
    }

    /// `earshotd --foreground --input FILE` (real time) to its end: its stdout event lines.
    static func daemonEvents(file: String, config: String, scratch: Scratch) throws -> [Event] {
        let daemon = Process()
        daemon.executableURL = try #require(EarshotdRun.executable)
        daemon.arguments = ["--config", config, "--foreground", "--input", file, "--socket", scratch.file("d.sock"), "--no-journal"]
        daemon.environment = DaemonEndToEndTests.environment(home: scratch.directory)
        let output = Pipe()
        daemon.standardOutput = output
        daemon.standardError = FileHandle.nullDevice
        try daemon.run()
        let watchdog = DispatchWorkItem { if daemon.isRunning { daemon.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + 120, execute: watchdog)
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        daemon.waitUntilExit()
        watchdog.cancel()
        #expect(daemon.terminationStatus == 0)
        return text.split(separator: "\n").compactMap { Event(line: String($0)) }
    }

    static func detectEvents(file: String, config: String, scratch: Scratch) throws -> [Event] {
        let outcome = try #require(try EarshotCLI.run(["detect", file, "--config", config], in: scratch.directory))
        #expect(outcome.status == 0, "\(outcome.standardError)")
        #expect(outcome.standardError.isEmpty)
        return outcome.outputLines.compactMap { Event(line: $0) }
    }

    static func expectSame(_ detected: [Event], _ daemon: [Event], file: String) {
        #expect(detected.count == daemon.count, "\(file): detect \(detected) vs earshotd \(daemon)")
        for (a, b) in zip(detected, daemon) {
            #expect(a.matches(b, tolerance: 0.48), "\(file): detect \(a) vs earshotd \(b)")
        }
    }

    @Test("samples/demo.flac: the events earshotd --input publishes, with the README's times and confidences",
          .needsEarshotBuilt, .needsEarshotdBuilt)
    func demoEqualsTheDaemon() throws {
        let scratch = try Scratch()
        let config = scratch.file("earshotd.conf")
        try Self.configText.write(toFile: config, atomically: true, encoding: .utf8)
        let detected = try Self.detectEvents(file: Self.demo, config: config, scratch: scratch)
        #expect(detected.filter { $0.type == "detection" }.map(\.description) == [
            "detection baby_cry \"builtin_baby_cry:baby_cry\" 2.4- 0.9958",
            "detection snoring \"Snoring\" 11.52- 1.0",
            "detection glass_break \"Shatter\" 24.0- 0.909",
            "detection doorbell_knock \"Knock\" 26.88- 0.9112",
        ])
        #expect(detected.first { $0.type == "detection_end" && $0.group == "baby_cry" }?.end == 9.6)
        let daemon = try Self.daemonEvents(file: Self.demo, config: config, scratch: scratch)
        Self.expectSame(detected, daemon, file: "demo.flac")
    }

    @Test("real smoke alarms (T3, 48 kHz mono and 44.1 kHz stereo): the daemon's smoke_alarm events",
          .needsShared, .needsEarshotBuilt, .needsEarshotdBuilt,
          arguments: [
              "audio/alarm-ml-audio-classifier-example-for-pico/ALRMElec_Smoke_detector_alarm_(ID_0800)_BSB.wav",
              "audio/alarm-ml-audio-classifier-example-for-pico/325367__moonlightshadow__fire-house-alarm.wav",
          ])
    func alarmsEqualTheDaemon(relative: String) throws {
        let scratch = try Scratch()
        let config = scratch.file("earshotd.conf")
        try Self.configText.write(toFile: config, atomically: true, encoding: .utf8)
        let file = TestPaths.sharedFile(relative).path
        let detected = try Self.detectEvents(file: file, config: config, scratch: scratch)
        #expect(detected.contains { $0.type == "detection" && $0.group == "smoke_alarm" }, "\(detected)")
        let daemon = try Self.daemonEvents(file: file, config: config, scratch: scratch)
        Self.expectSame(detected, daemon, file: relative)
    }

    @Test("jsonl: every time counts seconds into the file, time included, so two runs print the same lines",
          .needsEarshotBuilt)
    func reproducibleLines() throws {
        let scratch = try Scratch()
        let config = scratch.file("earshotd.conf")
        try Self.configText.write(toFile: config, atomically: true, encoding: .utf8)
        let first = try #require(try EarshotCLI.run(["detect", Self.demo, "--config", config], in: scratch.directory))
        #expect(first.status == 0)
        // `time`: when earshotd --input would send the line, the end of the 0.2 s period that produced it.
        let file = AnalysisReportFormatter.jsonString(Self.demo)
        #expect(first.outputLines == [
            #"{"type":"detection","group":"baby_cry","class":"builtin_baby_cry:baby_cry","confidence":0.9958,"stream_time":2.4,"sent_stream_time":4.0,"file":"# + file + "}",
            #"{"type":"detection_end","group":"baby_cry","class":"builtin_baby_cry:baby_cry","start":2.4,"end":9.6,"duration":7.2,"peak_confidence":0.9983,"mean_confidence":0.9874,"windows":9,"reason":"hold_elapsed","sent_stream_time":13.0,"file":"# + file + "}",
            #"{"type":"detection","group":"snoring","class":"Snoring","confidence":1.0,"stream_time":11.52,"sent_stream_time":16.4,"file":"# + file + "}",
            #"{"type":"detection_end","group":"snoring","class":"Snoring","start":11.52,"end":15.84,"duration":4.32,"peak_confidence":1.0,"mean_confidence":1.0,"windows":8,"reason":"hold_elapsed","sent_stream_time":24.2,"file":"# + file + "}",
            #"{"type":"detection","group":"glass_break","class":"Shatter","confidence":0.909,"stream_time":24.0,"sent_stream_time":25.0,"file":"# + file + "}",
            #"{"type":"detection_end","group":"glass_break","class":"Shatter","start":24.0,"end":24.96,"duration":0.96,"peak_confidence":0.909,"mean_confidence":0.909,"windows":1,"reason":"hold_elapsed","sent_stream_time":26.6,"file":"# + file + "}",
            #"{"type":"detection","group":"doorbell_knock","class":"Knock","confidence":0.9112,"stream_time":26.88,"sent_stream_time":28.0,"file":"# + file + "}",
            #"{"type":"detection_end","group":"doorbell_knock","class":"Knock","start":26.88,"end":28.32,"duration":1.44,"peak_confidence":0.9639,"mean_confidence":0.9376,"windows":2,"reason":"hold_elapsed","sent_stream_time":30.8,"file":"# + file + "}",
        ])
        let second = try #require(try EarshotCLI.run(["detect", Self.demo, "--config", config], in: scratch.directory))
        #expect(second.standardOutput == first.standardOutput)

        // Cut 5.05 s in (80800 samples, 25 periods and 800 samples): the event still open ends with the file,
        // sent at its end.
        let samples = try decodeMono16k(URL(fileURLWithPath: Self.demo))
        try AnalysisTestSupport.writeFloatWAV(Array(samples[0..<80_800]), sampleRate: 16_000,
                                              to: URL(fileURLWithPath: scratch.file("cut.wav")))
        let cut = try #require(try EarshotCLI.run(["detect", "cut.wav", "--config", config], in: scratch.directory))
        #expect(cut.status == 0)
        #expect(cut.outputLines.last
                == #"{"type":"detection_end","group":"baby_cry","class":"builtin_baby_cry:baby_cry","start":2.4,"end":4.8,"duration":2.4,"peak_confidence":0.9958,"mean_confidence":0.9865,"windows":4,"reason":"stream_end","sent_stream_time":5.05,"file":"cut.wav"}"#)
    }

    @Test("csv and text formats carry the same events", .needsEarshotBuilt)
    func formats() throws {
        let scratch = try Scratch()
        let config = scratch.file("earshotd.conf")
        try Self.configText.write(toFile: config, atomically: true, encoding: .utf8)
        let csv = try #require(try EarshotCLI.run(["detect", Self.demo, "--config", config, "--format", "csv"], in: scratch.directory))
        #expect(csv.status == 0)
        #expect(Array(csv.outputLines.prefix(3)) == [
            "file,type,group,class,start,end,confidence",
            "\(Self.demo),detection,baby_cry,builtin_baby_cry:baby_cry,2.4,,0.9958",
            "\(Self.demo),detection_end,baby_cry,builtin_baby_cry:baby_cry,2.4,9.6,0.9983",
        ])
        let text = try #require(try EarshotCLI.run(["detect", Self.demo, "--config", config, "--format=text"], in: scratch.directory))
        #expect(text.status == 0)
        #expect(text.outputLines.count == csv.outputLines.count - 1)
        #expect(Array(text.outputLines.prefix(2)) == [
            "\(Self.demo): baby_cry started: \"Baby cry\" 100% (stream 2.40 s)",
            "\(Self.demo): baby_cry ended after 7.20 s: \"Baby cry\" peak 100%, mean 99% (stream 2.40-9.60 s)",
        ])
    }

    @Test("csv: a health row carries its state in class and the stream time it was said at in start", .needsEarshotBuilt)
    func csvHealthRow() throws {
        let scratch = try Scratch()
        let config = scratch.file("silent.conf")
        try "[analysis]\nsilence_minutes = 1\n".write(toFile: config, atomically: true, encoding: .utf8)
        // 62 s of digital silence: input_silent after 60 s.
        try AnalysisTestSupport.writeFloatWAV([Float](repeating: 0, count: 62 * 16_000), sampleRate: 16_000,
                                              to: URL(fileURLWithPath: scratch.file("zero.wav")))
        let csv = try #require(try EarshotCLI.run(["detect", "zero.wav", "--config", config, "--format", "csv"], in: scratch.directory))
        #expect(csv.status == 0)
        #expect(csv.outputLines == ["file,type,group,class,start,end,confidence", "zero.wav,health,,input_silent,60.0,,"])
        let jsonl = try #require(try EarshotCLI.run(["detect", "zero.wav", "--config", config], in: scratch.directory))
        #expect(jsonl.outputLines.count == 1)
        #expect(jsonl.outputLines.first?.contains(#""state":"input_silent""#) == true)
        #expect(jsonl.outputLines.first?.contains(#""sent_stream_time":60.0,"#) == true, "\(jsonl.outputLines)")
    }

    @Test("usage errors and bad files: one line each, the statuses analyze uses", .needsEarshotBuilt)
    func errors() throws {
        let scratch = try Scratch()
        let none = try #require(try EarshotCLI.run(["detect"], in: scratch.directory))
        #expect(none.status == 64)
        #expect(none.errorLines == ["earshot: detect needs at least one FILE (usage: earshot detect FILE... [--config FILE] [--format jsonl|text|csv])"])
        let format = try #require(try EarshotCLI.run(["detect", Self.demo, "--format", "xml"], in: scratch.directory))
        #expect(format.status == 64)
        #expect(format.errorLines == ["earshot: --format \"xml\" is not a format (allowed: jsonl, text or csv)"])
        let missing = try #require(try EarshotCLI.run(["detect", scratch.file("none.wav"), Self.demo], in: scratch.directory))
        #expect(missing.status == 66)
        #expect(missing.errorLines.count == 1)
        #expect(missing.errorLines.first?.hasPrefix("earshot: \(scratch.file("none.wav")): ") == true, "\(missing.errorLines)")
        #expect(missing.outputLines.contains { $0.contains("\"group\":\"baby_cry\"") })
        let badConfig = scratch.file("bad.conf")
        try "[analysis]\noverlap = 1.5\n".write(toFile: badConfig, atomically: true, encoding: .utf8)
        let config = try #require(try EarshotCLI.run(["detect", Self.demo, "--config", badConfig], in: scratch.directory))
        #expect(config.status == 78)
        #expect(config.errorLines == ["earshot: \(badConfig):2: [analysis] overlap = 1.5: must be in [0, 1)"])
    }
}
