import Foundation
import Testing

#if canImport(FoundationXML)
import FoundationXML
#endif

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("Sleep: snore detector and report")
struct SnoreTests {
    // MARK: Report

    static func event(
        _ start: Double, _ end: Double, level: Float, peak: Float, at peakTime: Double, snores: Int
    ) -> SnoreEvent {
        SnoreEvent(start: start, end: end, peakEvidence: 0.9, meanEvidence: 0.5, snores: snores, levelDBFS: level,
                   peakLevelDBFS: peak, peakLevelTime: peakTime)
    }

    /// One hour: A and B 119 s apart (merge), C 120 s after B (a new episode), D cut by the session's end.
    static let hour = SnoreReport(
        events: [
            event(459, 489, level: -20, peak: -18, at: 470, snores: 5),
            event(100, 160, level: -30, peak: -24, at: 130, snores: 10),
            event(279, 339, level: -40, peak: -35, at: 300, snores: 12),
            event(3590, 3620, level: -30, peak: -25, at: 3615, snores: 3),
        ],
        duration: 3600, source: "night.flac")

    @Test("episodes merge events less than 2 minutes apart; minutes, percent, rates and loudest are exact")
    func reportFigures() {
        let report = Self.hour
        #expect(report.events.map(\.start) == [100, 279, 459, 3590])
        #expect(report.events.last?.end == 3600)
        #expect(report.snoringSeconds == 160)
        #expect(abs(report.snoringPercent - 160.0 / 36) < 1e-12)
        #expect(report.eventsPerHour == 4)
        #expect(report.snores == 30)
        #expect(report.snoresPerHour == 30)
        let abLevel = Float(10 * log10((60 * 1e-3 + 60 * 1e-4) / 120))
        let expected = [
            SnoreReport.Episode(start: 100, end: 339, events: 2, snores: 22, snoringSeconds: 120, levelDBFS: abLevel, peakLevelDBFS: -24),
            SnoreReport.Episode(start: 459, end: 489, events: 1, snores: 5, snoringSeconds: 30, levelDBFS: -20, peakLevelDBFS: -18),
            SnoreReport.Episode(start: 3590, end: 3600, events: 1, snores: 3, snoringSeconds: 10, levelDBFS: -30, peakLevelDBFS: -25),
        ]
        #expect(report.episodes.count == 3)
        for (episode, wanted) in zip(report.episodes, expected) {
            var same = episode
            same.levelDBFS = wanted.levelDBFS
            #expect(same == wanted)
            #expect(abs(episode.levelDBFS - wanted.levelDBFS) < 1e-4)
        }
        #expect(report.loudest == [
            .init(time: 470, levelDBFS: -18), .init(time: 130, levelDBFS: -24), .init(time: 3600, levelDBFS: -25),
            .init(time: 300, levelDBFS: -35),
        ])
        #expect(report.bins.count == 12)
        #expect(report.bins.map(\.snoringSeconds) == [81, 69, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10])
        #expect(report.bins.map(\.start) == (0..<12).map { Double($0) * 300 })
        #expect(report.bins.allSatisfy { $0.length == 300 })
    }

    @Test("a session of 12.5 minutes has three bins, the last one short; an empty session has one")
    func partialBins() {
        let report = SnoreReport(events: [Self.event(640, 700, level: -30, peak: -30, at: 650, snores: 2)],
                                 duration: 750, source: "x")
        #expect(report.bins == [
            .init(start: 0, length: 300, snoringSeconds: 0), .init(start: 300, length: 300, snoringSeconds: 0),
            .init(start: 600, length: 150, snoringSeconds: 60),
        ])
        #expect(report.bins[2].fraction == 0.4)
        let empty = SnoreReport(events: [], duration: 0, source: "x")
        #expect(empty.bins == [.init(start: 0, length: 0, snoringSeconds: 0)])
        #expect(empty.episodes == [])
        #expect(empty.snoringPercent == 0)
    }

    /// Counts elements and collects attributes of an SVG document.
    final class SVGReader: NSObject, XMLParserDelegate {
        var elements: [(name: String, attributes: [String: String])] = []
        func parser(_ parser: XMLParser, didStartElement name: String, namespaceURI: String?, qualifiedName: String?,
                    attributes: [String: String] = [:]) {
            elements.append((name, attributes))
        }
        func count(_ name: String, class value: String) -> Int {
            elements.filter { $0.name == name && $0.attributes["class"] == value }.count
        }
    }

    @Test("the SVG timeline is well-formed XML with one bar per 5-minute bin, one strip per episode")
    func svgChart() throws {
        let utc = try #require(TimeZone(identifier: "UTC"))
        var report = Self.hour
        report.source = "R&D <night>"
        let svg = report.svg(timeZone: utc)
        let parser = XMLParser(data: Data(svg.utf8))
        let reader = SVGReader()
        parser.delegate = reader
        #expect(parser.parse(), "\(parser.parserError.map { "\($0)" } ?? "")")
        #expect(reader.elements.first?.name == "svg")
        #expect(reader.count("rect", class: "bar") == 12 + 1)  // + the legend's swatch
        #expect(reader.count("rect", class: "episode") == 3 + 1)
        #expect(reader.count("circle", class: "loudest") == 4 + 1)
        // Bin 0 holds 81 s of 300: 27 % of the 190-unit plot, on the baseline at 56 + 190.
        let firstBar = try #require(reader.elements.first { $0.attributes["class"] == "bar" })
        #expect(firstBar.attributes["height"] == "51.3")
        #expect(firstBar.attributes["y"] == "194.7")
        #expect(svg.contains("R&amp;D &lt;night&gt;"))

        // With a wall-clock start the ticks are clock times.
        report.startDate = Date(timeIntervalSince1970: 1_772_402_400)  // 22:00 UTC
        let clocked = report.svg(timeZone: utc)
        #expect(clocked.contains(">22:00</text>"))
        #expect(clocked.contains(">22:50</text>"))
    }

    @Test("the SVG's clock times each use their own UTC offset: a night across the spring-forward change (Berlin, 2026-03-29)")
    func svgAcrossDaylightSavingChange() throws {
        var report = Self.hour
        report.source = "sleep session"
        report.startDate = Date(timeIntervalSince1970: 1_774_744_200)  // 2026-03-29T00:30:00Z, 01:30 CET
        // As LocalTime.zone(at:) gives it in TZ=Europe/Berlin: +01:00 before 01:00Z, +02:00 from then on.
        let change = Date(timeIntervalSince1970: 1_774_746_000)  // 2026-03-29T01:00:00Z, 02:00 CET -> 03:00 CEST
        let perInstant = { (date: Date) in TimeZone(secondsFromGMT: date < change ? 3600 : 7200)! }
        let svg = report.svg(zoneAt: perInstant)
        #expect(svg.contains(">sleep session: 01:30-03:30, snoring per 5-minute bin</text>"))
        // Ticks every 10 minutes: 01:50, then 03:00 (02:00 does not exist that day).
        #expect(svg.contains(">01:50</text>"))
        #expect(svg.contains(">03:00</text>"))
        #expect(!svg.contains(">02:00</text>"))
        // The last event (3590-3620 s, cut at the report's end, 3600 s) and its loudest moment are after the change.
        #expect(svg.contains("<title>loudest snore: 03:30:00, -25.0 dBFS</title>"))
        #expect(svg.contains("<title>03:29:50-03:30:00: 0.2 min snoring, 3 snores, -30.0 dBFS</title>"))
        #expect(svg.contains("<title>01:55:00: 0.0 min snoring</title>"))
        #expect(svg.contains("<title>03:00:00: 0.0 min snoring</title>"))
        // The same document as with the zone's rules themselves.
        let berlin = try #require(TimeZone(identifier: "Europe/Berlin"))
        #expect(svg == report.svg(timeZone: berlin))
    }

    @Test("the JSON report has every figure, and times as clock times when the session has a start")
    func jsonReport() {
        let report = SnoreReport(
            events: [Self.event(10, 70.5, level: -31.25, peak: -22.5, at: 40, snores: 14)], duration: 600,
            source: "sleep session", startDate: Date(timeIntervalSince1970: 1_772_402_400))
        #expect(JSONValue.object(report.json).encoded == #"{"type":"snore_report","source":"sleep session","start":"2026-03-01T22:00:00.000Z","end":"2026-03-01T22:10:00.000Z","duration_seconds":600.0,"audio_seconds":600.0,"snoring_minutes":1.01,"snoring_percent":10.08,"events":1,"events_per_hour":6.0,"snores":14,"snores_per_hour":84.0,"episodes":[{"start":10.0,"end":70.5,"start_time":"2026-03-01T22:00:10.000Z","end_time":"2026-03-01T22:01:10.500Z","minutes":1.01,"events":1,"snores":14,"level_dbfs":-31.2,"peak_level_dbfs":-22.5}],"loudest":[{"time":40.0,"clock":"2026-03-01T22:00:40.000Z","level_dbfs":-22.5}],"bin_seconds":300.0,"bins":[{"start":0.0,"snoring_seconds":60.5},{"start":300.0,"snoring_seconds":0.0}],"snore_events":[{"start":10.0,"end":70.5,"snores":14,"peak_evidence":0.9,"level_dbfs":-31.2,"peak_level_dbfs":-22.5,"peak_level_time":40.0}]}"#)
    }

    // MARK: Detector

    /// Runs the detector over windows at the 0.48 s hop with the given evidence (default 0) and levels (default
    /// -60 dBFS), `count` windows, then finishes.
    static func detect(
        count: Int, evidence: [Int: Float], levels: [Int: Float] = [:], startOffset: [Int: Double] = [:],
        minimumSnores: Int = 2
    ) throws -> [SnoreDetector.Decision] {
        var configuration = SnoreDetector.Configuration()
        configuration.minimumSnores = minimumSnores
        var detector = try SnoreDetector(classLabels: ClassMapFixture.labels, configuration: configuration)
        var decisions: [SnoreDetector.Decision] = []
        var shift = 0.0
        for index in 0..<count {
            shift += startOffset[index] ?? 0
            decisions += detector.process(
                windowStart: 0.48 * Double(index) + shift, windowDuration: 0.96, levelDBFS: levels[index] ?? -60,
                evidence: evidence[index] ?? 0)
        }
        return decisions + detector.finish()
    }

    @Test("one strong burst alone is no snoring; counted alone (minimumSnores 1): exact onset, offset after the hold, level")
    func strongBurst() throws {
        #expect(try Self.detect(count: 60, evidence: [10: 0.5, 11: 0.4]) == [])
        let decisions = try Self.detect(count: 60, evidence: [10: 0.5, 11: 0.4], levels: [10: -20, 11: -26], minimumSnores: 1)
        let level = Float(10 * log10((pow(10, -2.0) + pow(10, -2.6)) / 2))
        #expect(decisions.count == 2)
        #expect(decisions.first == .onset(.init(group: "snoring", classLabel: "Snoring", confidence: 0.5, start: 4.8, decisionTime: 5.76)))
        guard case .offset(let offset, let event)? = decisions.last else {
            Issue.record("no offset: \(decisions)")
            return
        }
        // The end is window 11's: 11 * 0.48 + 0.96 (6.24 up to rounding of the sum).
        let end = 0.48 * 11 + 0.96
        #expect(offset == .init(group: "snoring", classLabel: "Snoring", start: 4.8, end: end, peakConfidence: 0.5,
                                meanConfidence: 0.45, positiveWindows: 2, reason: .holdElapsed))
        #expect(abs(end - 6.24) < 1e-12)
        #expect(event.snores == 1)
        #expect(event.start == 4.8 && event.end == end)
        #expect(abs(event.levelDBFS - level) < 1e-5)
        #expect(event.peakLevelDBFS == -20 && event.peakLevelTime == 4.8)
    }

    @Test("weak bursts in a breathing rhythm (every 3.36 s) are snores; an isolated weak burst is not")
    func rhythm() throws {
        let decisions = try Self.detect(count: 90, evidence: [10: 0.2, 17: 0.2, 24: 0.2, 60: 0.2])
        #expect(decisions.map(\.event) == [
            .onset(.init(group: "snoring", classLabel: "Snoring", confidence: 0.2, start: 4.8, decisionTime: 5.76)),
            .offset(.init(group: "snoring", classLabel: "Snoring", start: 4.8, end: 0.48 * 24 + 0.96, peakConfidence: 0.2,
                          meanConfidence: 0.2, positiveWindows: 3, reason: .holdElapsed)),
        ])
        if case .offset(_, let event)? = decisions.last { #expect(event.snores == 3) }
    }

    @Test("weak bursts 8 s apart, or a weak sound longer than 4 s, are not snores")
    func noRhythm() throws {
        #expect(try Self.detect(count: 80, evidence: [10: 0.2, 27: 0.2, 44: 0.2]) == [])
        var long: [Int: Float] = [22: 0.2]
        for index in 10...20 { long[index] = 0.25 }
        #expect(try Self.detect(count: 60, evidence: long) == [])
        // Below the rhythm threshold nothing counts, however regular.
        #expect(try Self.detect(count: 80, evidence: [10: 0.09, 17: 0.09, 24: 0.09]) == [])
    }

    @Test("two strong snores 7.2 s apart make one event; 9.6 s apart (a pause over the 8 s hold) none")
    func twoSnores() throws {
        let decisions = try Self.detect(count: 60, evidence: [10: 0.5, 25: 0.6])
        #expect(decisions.map(\.event) == [
            .onset(.init(group: "snoring", classLabel: "Snoring", confidence: 0.5, start: 4.8, decisionTime: 5.76)),
            .offset(.init(group: "snoring", classLabel: "Snoring", start: 4.8, end: 0.48 * 25 + 0.96, peakConfidence: 0.6,
                          meanConfidence: 0.55, positiveWindows: 2, reason: .holdElapsed)),
        ])
        if case .offset(_, let event)? = decisions.last { #expect(event.snores == 2) }
        #expect(try Self.detect(count: 70, evidence: [10: 0.5, 30: 0.6]) == [])
        // The default needs three: the pair alone raises nothing, a third snore 7.2 s later makes the event.
        let three = SnoreDetector.Configuration().minimumSnores
        #expect(three == 3)
        #expect(try Self.detect(count: 60, evidence: [10: 0.5, 25: 0.6], minimumSnores: three) == [])
        let decided = try Self.detect(count: 80, evidence: [10: 0.5, 25: 0.6, 40: 0.4], minimumSnores: three)
        #expect(decided.map(\.event) == [
            .onset(.init(group: "snoring", classLabel: "Snoring", confidence: 0.5, start: 4.8, decisionTime: 5.76)),
            .offset(.init(group: "snoring", classLabel: "Snoring", start: 4.8, end: 0.48 * 40 + 0.96, peakConfidence: 0.6,
                          meanConfidence: 0.5, positiveWindows: 3, reason: .holdElapsed)),
        ])
    }

    @Test("a gap in the stream ends snoring at its last positive window")
    func gap() throws {
        let decisions = try Self.detect(count: 40, evidence: [10: 0.6, 11: 0.6], startOffset: [14: 100], minimumSnores: 1)
        guard case .offset(let offset, _)? = decisions.last else {
            Issue.record("no offset: \(decisions)")
            return
        }
        #expect(decisions.count == 2)
        #expect(offset.end == 0.48 * 11 + 0.96)
        #expect(offset.reason == .streamGap)
    }

    @Test("evidence: Snoring plus breathing sounds minus crying and speech, clamped to 0...1")
    func evidence() throws {
        let labels = ClassMapFixture.labels
        let detector = try SnoreDetector(classLabels: labels)
        func scores(_ values: [String: Float]) throws -> [Float] {
            var scores = [Float](repeating: 0, count: labels.count)
            for (label, value) in values { scores[try #require(labels.firstIndex(of: label))] = value }
            return scores
        }
        #expect(abs(detector.evidence(scores: try scores(["Snoring": 0.2, "Breathing": 0.15, "Snort": 0.05, "Speech": 0.1])) - 0.3) < 1e-6)
        #expect(detector.evidence(scores: try scores(["Snoring": 0.9, "Breathing": 0.9])) == 1)
        #expect(detector.evidence(scores: try scores(["Snoring": 0.3, "Baby cry, infant cry": 0.9])) == 0)
        #expect(detector.evidence(scores: [0.5]) == 0)
        #expect(throws: EarshotError(
            .config,
            "the snore detector needs the built-in classifier's \"Snoring\" class, which this model's labels lack (use the built-in model)")) {
            _ = try SnoreDetector(classLabels: ["background", "kettle"])
        }
    }

    @Test("a custom head adds its snoring probability less 0.6 to the evidence; a head without that label is refused")
    func headEvidence() throws {
        let labels = ClassMapFixture.labels
        let head = HeadFixtures.head(labels: ["background", "snoring"])
        let detector = try SnoreDetector(classLabels: labels, head: try SnoreDetector.HeadEvidence(head: head))
        let silence = [Float](repeating: 0, count: labels.count)
        var snoringScores = silence
        snoringScores[try #require(labels.firstIndex(of: "Snoring"))] = 0.35
        for seed in UInt64(1)...20 {
            let embedding = HeadFixtures.embeddings(rows: 1, columns: 8, seed: seed)
            let p = head.probabilities(embedding: embedding)[1]
            #expect(detector.evidence(scores: silence, embedding: embedding) == min(1, max(0, p - 0.6)))
            #expect(detector.evidence(scores: snoringScores, embedding: embedding) == max(0.35, min(1, max(0, p - 0.6))))
        }
        // A gated window has no embedding: the built-in evidence alone.
        #expect(detector.evidence(scores: snoringScores, embedding: []) == 0.35)
        #expect(throws: EarshotError(
            .config,
            "head model (in memory) has no label \"snoring\" (its labels: background, doorbell); train it from a folder with a snoring sub-folder")) {
            _ = try SnoreDetector.HeadEvidence(head: HeadFixtures.head())
        }
    }

    @Test("a sleep session reports the stage's snoring in session time; an event open at the stop counts as far as it is known")
    func session() throws {
        let labels = ClassMapFixture.labels
        let snoring = try #require(labels.firstIndex(of: "Snoring"))
        let start = Date(timeIntervalSince1970: 1_772_402_400)
        var detector = try SnoreDetector(classLabels: labels)
        var session = SleepSession(startDate: start)
        var decisions: [SnoreDetector.Decision] = []
        // The daemon's stream is at 1000 s when the session starts; windows arrive as their audio ends.
        for index in 0..<100 {
            let windowStart = 1000 + 0.48 * Double(index)
            var scores = [Float](repeating: 0, count: labels.count)
            if [20, 21, 28, 29, 36, 37, 90, 91].contains(index) { scores[snoring] = 0.7 }
            session.observe(window: TimeRange(start: windowStart, duration: 0.96))
            let made = detector.process(
                windowStart: windowStart, windowDuration: 0.96, levelDBFS: index == 20 ? -25 : -50,
                scores: index % 10 == 5 ? nil : scores)
            // Stream 1000 s is the session's start on the daemon's clock.
            for decision in made { session.observe(decision, wallClock: { start.addingTimeInterval($0 - 1000) }) }
            decisions += made
        }
        #expect(decisions.map(\.event.group) == ["snoring", "snoring"])
        #expect(session.finishedEvents.count == 1)
        // Windows 90-91 (1043.2 s) wait for a second snore: nothing of them is open yet.
        #expect(detector.openEventSummary(reason: .streamEnd) == nil)
        let report = session.stop(
            openEvent: detector.openEventSummary(reason: .streamEnd), end: start.addingTimeInterval(0.48 * 99 + 0.96),
            wallClock: { start.addingTimeInterval($0 - 1000) })
        // Session times go through the daemon's clock (dates): equal to within 1 µs.
        #expect(abs(report.duration - (0.48 * 99 + 0.96)) < 1e-6)
        #expect(report.startDate == start)
        #expect(report.events.count == 1)
        let event = try #require(report.events.first)
        #expect(abs(event.start - 9.6) < 1e-6 && abs(event.end - 18.72) < 1e-6, "\(event)")
        #expect(event.snores == 3)
        #expect(abs(event.peakLevelTime - 9.6) < 1e-6 && event.peakLevelDBFS == -25, "\(event)")
        #expect(abs(report.snoringSeconds - 9.12) < 1e-6)

        // A session that starts mid-event counts it from its own time 0, and one that stops while the event is open
        // counts it to its last released positive window.
        var late = SleepSession(startDate: start)
        late.observe(window: TimeRange(start: 1012, duration: 0.96))
        late.observe(window: TimeRange(start: 1020, duration: 0.96))
        let open = SnoreEvent(start: 1009.6, end: 1014.88, peakEvidence: 0.7, meanEvidence: 0.7, snores: 2,
                              levelDBFS: -40, peakLevelDBFS: -25, peakLevelTime: 1009.6)
        let cut = try #require(late.stop(
            openEvent: open, end: start.addingTimeInterval(8.96), wallClock: { start.addingTimeInterval($0 - 1012) }).events.first)
        #expect(abs(cut.start - 0) < 1e-6 && abs(cut.end - 2.88) < 1e-6 && abs(cut.peakLevelTime - 0) < 1e-6, "\(cut)")
    }

    @Test("a strong burst counts one snore per 1.44 s: 4.32 s of snoring is an event on its own, 3.36 s is not")
    func sustainedBurst() throws {
        let labels = ClassMapFixture.labels
        let snoring = try #require(labels.firstIndex(of: "Snoring"))
        func run(windows: Int) throws -> [SnoreDetector.Decision] {
            var detector = try SnoreDetector(classLabels: labels)
            var decisions: [SnoreDetector.Decision] = []
            for index in 0..<60 {
                var scores = [Float](repeating: 0, count: labels.count)
                if (10..<(10 + windows)).contains(index) { scores[snoring] = 0.8 }
                decisions += detector.process(windowStart: 0.48 * Double(index), windowDuration: 0.96, levelDBFS: -30, scores: scores)
            }
            return decisions + detector.finish()
        }
        // 8 windows at 0.48 s hops: 0.96 + 7 x 0.48 = 4.32 s, three snores.
        let long = try run(windows: 8)
        #expect(long.count == 2)
        guard case .offset(let offset, let event)? = long.last else {
            Issue.record("no offset: \(long)")
            return
        }
        #expect(abs(offset.start - 4.8) < 1e-9 && abs(offset.end - 9.12) < 1e-9, "\(offset)")
        #expect(event.snores == 3 && offset.reason == .holdElapsed)
        // 6 windows: 3.36 s, two snores, and no other within the hold.
        #expect(try run(windows: 6).isEmpty)
    }

    // MARK: Real recordings

    @Test("on real clips: snoring in a breathing sequence is found, non-snoring clips raise nothing", .needsShared)
    func realClips() throws {
        func clips(_ folder: String) throws -> [URL] {
            let directory = TestPaths.sharedFile("audio/snoring-khan/\(folder)")
            return try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
                .prefix(8).map { directory.appendingPathComponent($0) }
        }
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-snore-\(getpid()).wav").path
        let snoring = try SnoreEvaluation.measure(files: try clips("1"), sequencePath: scratch)
        let other = try SnoreEvaluation.measure(files: try clips("0"), sequencePath: scratch)
        #expect(snoring.clips == 8 && other.clips == 8)
        #expect(snoring.snoringClassFlagged == SnoreTests.realFigures.snoringClass)
        #expect(snoring.evidenceFlagged == SnoreTests.realFigures.evidence)
        #expect(snoring.sequenceFlagged == SnoreTests.realFigures.sequence)
        #expect(snoring.sequenceEvents == 1)
        #expect(other.snoringClassFlagged == 0 && other.evidenceFlagged == 0 && other.sequenceFlagged == 0)
        #expect(other.sequenceEvents == 0)
        #expect(!FileManager.default.fileExists(atPath: scratch))
    }

    /// Flagged clips among the first 8 of snoring-khan/1 (by name), measured with the reference-equal model.
    static let realFigures = (snoringClass: 5, evidence: 6, sequence: 6)
}
