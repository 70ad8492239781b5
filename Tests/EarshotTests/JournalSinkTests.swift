import Foundation
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("JournalSink")
struct JournalSinkTests {
    static let onset = DetectionEvent.onset(.init(
        group: "smoke_alarm", classLabel: "Smoke detector, smoke alarm", confidence: 0.81234, start: 12.48,
        decisionTime: 13.92))
    static let offset = DetectionEvent.offset(.init(
        group: "smoke_alarm", classLabel: "Smoke detector, smoke alarm", start: 12.48, end: 18.24,
        peakConfidence: 0.91, meanConfidence: 0.72, positiveWindows: 11, reason: .holdElapsed))
    static let health = HealthEvent(
        state: .captureUnavailable, message: "cannot open capture device \"hw:2,0\": Device or resource busy",
        details: ["device": "hw:2,0", "retry-seconds": .number(4, decimals: 1)])

    /// The journal is usable when journald's socket exists and journalctl can read.
    static let journalAvailable: Bool = {
        guard FileManager.default.fileExists(atPath: JournalSink.defaultJournalSocketPath) else { return false }
        return (try? run(["journalctl", "-n", "0", "--no-pager"]))?.status == 0
    }()

    static func run(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    @Test("A model's class is in words in MESSAGE (the stderr line too); EARSHOT_CLASS keeps the identifier")
    func modelClassInWords() {
        let onset = DetectionEvent.onset(.init(
            group: "baby_cry", classLabel: "builtin_baby_cry:baby_cry", confidence: 0.99, start: 29.28, decisionTime: 30.72))
        let offset = DetectionEvent.offset(.init(
            group: "baby_cry", classLabel: "builtin_baby_cry:baby_cry", start: 29.28, end: 35.52,
            peakConfidence: 1, meanConfidence: 0.99, positiveWindows: 11, reason: .holdElapsed))
        #expect(JournalSink.message(for: onset) == #"baby_cry detected: "Baby cry" (confidence 0.99) at stream time 29.28 s"#)
        #expect(JournalSink.message(for: offset) == #"baby_cry ended: "Baby cry" from 29.28 s to 35.52 s (6.24 s, peak confidence 1.00, mean 0.99)"#)
        #expect(JournalSink.fields(for: onset, identifier: "earshotd").first { $0.name == "EARSHOT_CLASS" }?.value == "builtin_baby_cry:baby_cry")
        #expect(GroupTitle.ofClass("ourbaby:our baby") == "Our baby")
        #expect(GroupTitle.ofClass("Smoke detector, smoke alarm") == "Smoke detector, smoke alarm")
    }

    @Test("The journal fields of an onset, an end and a health change, exactly")
    func fields() {
        typealias F = JournalSink.Field
        #expect(JournalSink.fields(for: Self.onset, identifier: "earshotd") == [
            F("MESSAGE", #"smoke_alarm detected: "Smoke detector, smoke alarm" (confidence 0.81) at stream time 12.48 s"#),
            F("PRIORITY", "5"),
            F("SYSLOG_IDENTIFIER", "earshotd"),
            F("EARSHOT_EVENT", "onset"),
            F("EARSHOT_GROUP", "smoke_alarm"),
            F("EARSHOT_CLASS", "Smoke detector, smoke alarm"),
            F("EARSHOT_CONFIDENCE", "0.8123"),
            F("EARSHOT_STREAM_TIME", "12.48"),
        ])
        #expect(JournalSink.fields(for: Self.offset, identifier: "earshotd") == [
            F("MESSAGE", #"smoke_alarm ended: "Smoke detector, smoke alarm" from 12.48 s to 18.24 s (5.76 s, peak confidence 0.91, mean 0.72)"#),
            F("PRIORITY", "6"),
            F("SYSLOG_IDENTIFIER", "earshotd"),
            F("EARSHOT_EVENT", "end"),
            F("EARSHOT_GROUP", "smoke_alarm"),
            F("EARSHOT_CLASS", "Smoke detector, smoke alarm"),
            F("EARSHOT_CONFIDENCE", "0.91"),
            F("EARSHOT_STREAM_TIME", "12.48"),
            F("EARSHOT_END_TIME", "18.24"),
            F("EARSHOT_DURATION", "5.76"),
            F("EARSHOT_PEAK_CONFIDENCE", "0.91"),
            F("EARSHOT_MEAN_CONFIDENCE", "0.72"),
            F("EARSHOT_END_REASON", "hold_elapsed"),
        ])
        #expect(JournalSink.fields(for: Self.health, identifier: "earshotd") == [
            F("MESSAGE", #"health capture_unavailable: cannot open capture device "hw:2,0": Device or resource busy"#),
            F("PRIORITY", "3"),
            F("SYSLOG_IDENTIFIER", "earshotd"),
            F("EARSHOT_EVENT", "health"),
            F("EARSHOT_HEALTH", "capture_unavailable"),
            F("EARSHOT_DEVICE", "hw:2,0"),
            F("EARSHOT_RETRY_SECONDS", "4.0"),
        ])
        // Every name is a valid user field name: [A-Z0-9_], not starting with "_".
        let all = JournalSink.fields(for: Self.onset, identifier: "x") + JournalSink.fields(for: Self.offset, identifier: "x")
            + JournalSink.fields(for: Self.health, identifier: "x")
        for field in all {
            #expect(!field.name.hasPrefix("_"))
            #expect(field.name.unicodeScalars.allSatisfy { ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "_" })
        }
    }

    @Test("Without a journal the MESSAGE line goes to the fallback descriptor, prefixed with the identifier")
    func fallbackLine() throws {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer {
            close(fds[0])
            close(fds[1])
        }
        let sink = JournalSink(identifier: "earshotd", journalSocketPath: "/nonexistent/journal/socket", fallbackDescriptor: fds[1])
        #expect(sink.destination == .standardError)
        sink.record(Self.onset)
        sink.record(Self.offset)
        sink.record(Self.health)

        var buffer = [UInt8](repeating: 0, count: 4096)
        var text = ""
        while text.filter({ $0 == "\n" }).count < 3 {
            let count = read(fds[0], &buffer, buffer.count)
            guard count > 0 else { break }
            text += String(decoding: buffer[0..<count], as: UTF8.self)
        }
        #expect(text == """
            earshotd: smoke_alarm detected: "Smoke detector, smoke alarm" (confidence 0.81) at stream time 12.48 s
            earshotd: smoke_alarm ended: "Smoke detector, smoke alarm" from 12.48 s to 18.24 s (5.76 s, peak confidence 0.91, mean 0.72)
            earshotd: health capture_unavailable: cannot open capture device "hw:2,0": Device or resource busy

            """)
    }

    @Test(
        "With a journal, the entry carries the structured fields (read back with journalctl)",
        .enabled(if: JournalSinkTests.journalAvailable, "no journal here (journald socket missing or journalctl cannot read)"))
    func journalEntry() throws {
        let identifier = "earshot-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let sink = JournalSink(identifier: identifier)
        #expect(sink.destination == .journal)
        sink.record(Self.onset)
        var entry: [String: Any]?
        for _ in 0..<50 where entry == nil {
            let result = try Self.run(["journalctl", "--no-pager", "-o", "json", "-t", identifier])
            if let line = result.output.split(separator: "\n").first,
                let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            {
                entry = object
            } else {
                usleep(100_000)
            }
        }
        let found = try #require(entry, "the entry did not show up in journalctl within 5 s")
        #expect(found["MESSAGE"] as? String == #"smoke_alarm detected: "Smoke detector, smoke alarm" (confidence 0.81) at stream time 12.48 s"#)
        #expect(found["EARSHOT_EVENT"] as? String == "onset")
        #expect(found["EARSHOT_GROUP"] as? String == "smoke_alarm")
        #expect(found["EARSHOT_CLASS"] as? String == "Smoke detector, smoke alarm")
        #expect(found["EARSHOT_CONFIDENCE"] as? String == "0.8123")
        #expect(found["EARSHOT_STREAM_TIME"] as? String == "12.48")
        #expect(found["PRIORITY"] as? String == "5")
    }
}
