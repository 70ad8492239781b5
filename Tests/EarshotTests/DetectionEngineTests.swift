import Foundation
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// The engine against YAMNet's real class map (`Models/yamnet_class_map.csv`, part of the package).
@Suite("DetectionEngine")
struct DetectionEngineTests {
    /// The 521 display names of `Models/yamnet_class_map.csv` (`index,mid,display_name`; names with commas are
    /// quoted).
    static let yamnetLabels: [String] = {
        let url = TestPaths.packageRoot.appendingPathComponent("Models/yamnet_class_map.csv")
        guard let text = try? String(contentsOf: url, encoding: .utf8) else { return [] }
        return text.split(whereSeparator: \.isNewline).dropFirst().compactMap { line -> String? in
            let parts = line.split(separator: ",", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3 else { return nil }
            var name = String(parts[2]).trimmingCharacters(in: .whitespacesAndNewlines)
            if name.hasPrefix("\""), name.hasSuffix("\""), name.count >= 2 {
                name = String(name.dropFirst().dropLast()).replacingOccurrences(of: "\"\"", with: "\"")
            }
            return name
        }
    }()

    static func scores(_ values: [String: Float]) -> [Float] {
        var scores = [Float](repeating: 0.01, count: yamnetLabels.count)
        for (label, value) in values {
            if let index = yamnetLabels.firstIndex(of: label) { scores[index] = value }
        }
        return scores
    }

    @Test("The class map has 521 labels and every preset resolves against it")
    func presetsResolve() throws {
        #expect(Self.yamnetLabels.count == 521)
        #expect(Self.yamnetLabels[393] == "Smoke detector, smoke alarm")
        let all = Array(LabelGroup.presets.values)
        // baby_cry's class is the built-in head's label, appended after YAMNet's 521 as the daemon appends it.
        let engine = try DetectionEngine(
            groups: all, watchList: LabelGroup.presets.keys.sorted(),
            classLabels: Self.yamnetLabels + [LabelGroup.builtInBabyCryLabel])
        #expect(engine.watched.count == 10)  // the nine classifier presets and loud
        let baby = try #require(engine.watched.first { $0.group.name == "baby_cry" })
        #expect(baby.classIndices == [521])
        #expect(baby.supportIndices.map { Self.yamnetLabels[$0] } == ["Baby cry, infant cry", "Crying, sobbing", "Whimper"])
        #expect(baby.vetoIndices.map { Self.yamnetLabels[$0] } == ["Snoring", "Breathing", "Snort"])
        #expect(throws: EarshotError(.config, "group \"baby_cry\": unknown class label \"builtin_baby_cry:baby_cry\" (run `earshot classes` for the list)")) {
            try DetectionEngine(groups: all, watchList: ["baby_cry"], classLabels: Self.yamnetLabels)
        }
        let smoke = try #require(engine.watched.first { $0.group.name == "smoke_alarm" })
        #expect(smoke.classIndices == [393])
        let co = try #require(engine.watched.first { $0.group.name == "co_alarm" })
        #expect(co.classIndices == [382, 475, 392])
    }

    @Test("baby_cry: a head window (>= 0.95) counts only with YAMNet's cry classes at 0.01 and snoring/breathing below 0.5")
    func babyCrySupportAndVeto() throws {
        let labels = Self.yamnetLabels + [LabelGroup.builtInBabyCryLabel]
        func window(head: Float, cry: Float, crying: Float = 0, snoring: Float = 0, breathing: Float = 0) -> [Float] {
            Self.scores(["Baby cry, infant cry": cry, "Crying, sobbing": crying, "Whimper": 0, "Snoring": snoring,
                         "Breathing": breathing, "Snort": 0]) + [head]
        }
        func onsets(_ windows: [[Float]]) throws -> [DetectionEvent] {
            var engine = try DetectionEngine(
                groups: [LabelGroup.presets["baby_cry"]!], watchList: ["baby_cry"], classLabels: labels)
            var events: [DetectionEvent] = []
            for (index, scores) in windows.enumerated() {
                events += engine.process(windowStart: Double(index) * 0.48, windowDuration: 0.96, scores: scores)
            }
            return events.filter { if case .onset = $0 { true } else { false } }
        }
        // The head alone, sure of a cry, with YAMNet's cry classes at 0.008 in all: no event.
        #expect(try onsets(Array(repeating: window(head: 0.99, cry: 0.005, crying: 0.003), count: 4)).isEmpty)
        // 0.01 of support: the second of two windows decides, with the head's label and score.
        #expect(try onsets(Array(repeating: window(head: 0.96, cry: 0.005, crying: 0.005), count: 4)) == [
            .onset(.init(group: "baby_cry", classLabel: "builtin_baby_cry:baby_cry", confidence: 0.96, start: 0,
                         decisionTime: 1.44)),
        ])
        // Snoring and breathing at 0.5 together veto a window whatever the cry classes say; at 0.49 they do not.
        #expect(try onsets(Array(repeating: window(head: 0.99, cry: 0.5, snoring: 0.3, breathing: 0.2), count: 4)).isEmpty)
        #expect(try onsets(Array(repeating: window(head: 0.99, cry: 0.5, snoring: 0.3, breathing: 0.19), count: 4)).count == 1)
        // The head below 0.95: no event, whatever YAMNet hears.
        #expect(try onsets(Array(repeating: window(head: 0.94, cry: 0.9), count: 4)).isEmpty)
    }

    @Test("Group score is the max over its classes and the top class is the argmax; events follow the watch list")
    func groupScoreAndOrder() throws {
        let groups = [LabelGroup.presets["co_alarm"]!, LabelGroup.presets["smoke_alarm"]!]
        var engine = try DetectionEngine(
            groups: groups, watchList: ["smoke_alarm", "co_alarm"], classLabels: Self.yamnetLabels)
        let window = Self.scores([
            "Alarm": 0.2, "Beep, bleep": 0.7, "Buzzer": 0.5, "Smoke detector, smoke alarm": 0.6,
        ])
        #expect(engine.process(windowStart: 0, windowDuration: 0.96, scores: window).isEmpty)
        let events = engine.process(windowStart: 0.48, windowDuration: 0.96, scores: window)
        #expect(
            events == [
                .onset(.init(group: "smoke_alarm", classLabel: "Smoke detector, smoke alarm", confidence: 0.6,
                             start: 0, decisionTime: 1.44)),
                .onset(.init(group: "co_alarm", classLabel: "Beep, bleep", confidence: 0.7, start: 0,
                             decisionTime: 1.44)),
            ])
        #expect(engine.activeGroups == ["smoke_alarm", "co_alarm"])

        // A gated window (nil) and a malformed scores vector are both quiet windows.
        #expect(engine.process(windowStart: 0.96, windowDuration: 0.96, scores: nil).isEmpty)
        #expect(engine.process(windowStart: 1.44, windowDuration: 0.96, scores: [0.9, 0.9]).isEmpty)
        let ended = engine.finish()
        try #require(ended.map(\.group) == ["smoke_alarm", "co_alarm"])
        if case .offset(let offset) = ended[1] {
            #expect(offset.peakConfidence == 0.7)
            #expect(offset.classLabel == "Beep, bleep")
            #expect(abs(offset.end - 1.44) < 1e-9)
        } else {
            Issue.record("expected an offset, got \(ended[1])")
        }
    }

    @Test("Only watched groups emit events")
    func unwatchedGroupsAreSilent() throws {
        var engine = try DetectionEngine(
            groups: Array(LabelGroup.presets.values), watchList: ["dog_bark"],
            classLabels: Self.yamnetLabels + [LabelGroup.builtInBabyCryLabel])
        let window = Self.scores(["Smoke detector, smoke alarm": 0.9, "Bark": 0.8]) + [0.9]  // the head's cry
        let events = engine.process(windowStart: 0, windowDuration: 0.96, scores: window)
        #expect(events.map(\.group) == ["dog_bark"])
    }

    @Test("An unknown class label is a config error naming the group and the label, with the closest labels")
    func unknownClass() {
        let group = LabelGroup(name: "smoke_alarm", classLabels: ["Smoke alarm"], threshold: 0.3)
        #expect(throws: EarshotError(
            .config,
            "group \"smoke_alarm\": unknown class label \"Smoke alarm\" (closest: \"Smoke detector, smoke alarm\", "
                + "\"Alarm\", \"Fire alarm\"; run `earshot classes` for the list)")
        ) {
            try DetectionEngine(groups: [group], watchList: ["smoke_alarm"], classLabels: Self.yamnetLabels)
        }
        let typo = LabelGroup(name: "snore", classLabels: ["Snorring"], threshold: 0.3)
        #expect(throws: EarshotError(
            .config,
            "group \"snore\": unknown class label \"Snorring\" (closest: \"Snoring\", \"Singing\", \"Snort\"; "
                + "run `earshot classes` for the list)")
        ) {
            try DetectionEngine(groups: [typo], watchList: [], classLabels: Self.yamnetLabels)
        }
        let nothingClose = LabelGroup(name: "x", classLabels: ["qqqqqqqqqqqqqqqq"], threshold: 0.3)
        #expect(throws: EarshotError(
            .config, "group \"x\": unknown class label \"qqqqqqqqqqqqqqqq\" (run `earshot classes` for the list)")
        ) {
            try DetectionEngine(groups: [nothingClose], watchList: [], classLabels: Self.yamnetLabels)
        }
    }

    @Test("Bad group values and watch lists are config errors with exact messages")
    func validation() {
        func message(_ groups: [LabelGroup], _ watch: [String]) -> String? {
            do {
                _ = try DetectionEngine(groups: groups, watchList: watch, classLabels: Self.yamnetLabels)
                return nil
            } catch {
                #expect(error.code == .config)
                #expect(error.exitStatus == 78)
                return error.message
            }
        }
        let speech = LabelGroup.presets["speech"]!
        #expect(message([speech], ["smoke_alarm"])
            == "watch list names unknown group \"smoke_alarm\" (known groups: speech)")
        #expect(message([speech, speech], []) == "group \"speech\" is defined twice (each group name must be unique)")
        #expect(message([LabelGroup(name: "Speech!", classLabels: ["Speech"], threshold: 0.5)], [])
            == "group name \"Speech!\" is invalid (use lowercase letters, digits and _)")
        #expect(message([LabelGroup(name: "empty", classLabels: [], threshold: 0.5)], [])
            == "group \"empty\" has no class labels (list at least one AudioSet class label)")
        #expect(message([LabelGroup(name: "s", classLabels: ["Speech"], threshold: 1.5)], [])
            == "group \"s\": threshold 1.5 is out of range (use a value in 0...1)")
        #expect(message([LabelGroup(name: "s", classLabels: ["Speech"], threshold: 0.5, onsetWindows: 4, onsetOf: 3)], [])
            == "group \"s\": onset rule 4 of 3 windows is invalid (need 1 <= k <= n)")
        #expect(message([LabelGroup(name: "s", classLabels: ["Speech"], threshold: 0.5, holdSeconds: -1)], [])
            == "group \"s\": hold time -1.0 s is invalid (use 0 or more seconds)")
        #expect(message([LabelGroup(name: "s", classLabels: ["Speech"], threshold: 0.5, minIntervalSeconds: .nan)], [])
            == "group \"s\": minimum interval nan s is invalid (use 0 or more seconds)")
        // Duplicates in the watch list are ignored.
        #expect(message([speech], ["speech", "speech"]) == nil)
    }

    @Test("closestLabels ranks equal-ignoring-case, then containing, then contained, then edit distance")
    func closest() {
        let labels = Self.yamnetLabels
        #expect(DetectionEngine.closestLabels(to: "speech", in: labels, limit: 3)
            == ["Speech", "Speech synthesizer", "Child speech, kid speaking"])
        #expect(DetectionEngine.closestLabels(to: "Doorbel", in: labels, limit: 2) == ["Doorbell", "Door"])
        #expect(DetectionEngine.closestLabels(to: "", in: labels, limit: 3).isEmpty)
    }
}
