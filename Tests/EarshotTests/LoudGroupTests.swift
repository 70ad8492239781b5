import Foundation
import Testing
import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

/// The `loud` preset: events from the level alone (RMS dBFS at or above `level_dbfs` for `min_seconds`).
@Suite("Loudness events: the loud preset group")
struct LoudGroupTests {
    @Test("min_seconds becomes consecutive windows on the window grid")
    func windowsForMinimumTime() {
        #expect(LabelGroup.levelWindows(minSeconds: 2, windowDuration: 0.96, hopSeconds: 0.48) == 4)
        #expect(LabelGroup.levelWindows(minSeconds: 1.92, windowDuration: 0.96, hopSeconds: 0.48) == 3)
        #expect(LabelGroup.levelWindows(minSeconds: 0.96, windowDuration: 0.96, hopSeconds: 0.48) == 1)
        #expect(LabelGroup.levelWindows(minSeconds: 0, windowDuration: 0.96, hopSeconds: 0.48) == 1)
        #expect(LabelGroup.levelWindows(minSeconds: 5, windowDuration: 2, hopSeconds: 1) == 4)
        // The preset's values are the defaults on the default grid.
        #expect(DaemonConfiguration().mergedGroup(named: "loud") == LabelGroup.loudPreset)
        #expect(LabelGroup.loudPreset.onsetWindows == 4 && LabelGroup.loudPreset.onsetOf == 4)
        #expect(!LabelGroup.defaultWatchList.contains("loud"))
    }

    @Test("[group.loud] settings: level_dbfs and min_seconds set the group; classifier keys and level keys elsewhere are one line")
    func settings() throws {
        let configuration = try DaemonConfiguration.parse(
            "[analysis]\nwindow = 2\noverlap = 0.5\n[group.loud]\nlevel_dbfs = -20\nmin_seconds = 5\nhold_seconds = 1\n", source: "e.conf")
        let group = try #require(configuration.mergedGroup(named: "loud"))
        #expect(group.levelThresholdDBFS == -20)
        #expect(group.onsetWindows == 4 && group.onsetOf == 4)  // 2 s windows every 1 s: 4 of them span 5 s
        #expect(group.holdSeconds == 1)
        #expect(throws: EarshotError(.config, "e.conf:2: [group.loud] threshold: the loud group is driven by the level alone, not the classifier (set level_dbfs and min_seconds instead)")) {
            try DaemonConfiguration.parse("[group.loud]\nthreshold = 0.5\n", source: "e.conf")
        }
        #expect(throws: EarshotError(.config, "e.conf:2: [group.loud] classes: the loud group is driven by the level alone, not the classifier (set level_dbfs and min_seconds instead)")) {
            try DaemonConfiguration.parse("[group.loud]\nclasses = Speech\n", source: "e.conf")
        }
        #expect(throws: EarshotError(.config, "e.conf:2: [group.speech] level_dbfs: only the loud group is driven by level (use [group.loud] and add loud to [detection] watch)")) {
            try DaemonConfiguration.parse("[group.speech]\nlevel_dbfs = -20\n", source: "e.conf")
        }
        #expect(throws: EarshotError(.config, "e.conf:2: [group.loud] level_dbfs = 3: must be in [-120, 0] dBFS")) {
            try DaemonConfiguration.parse("[group.loud]\nlevel_dbfs = 3\n", source: "e.conf")
        }
        #expect(throws: EarshotError(.config, "e.conf:2: [group.loud] min_seconds = 601: must be in [0, 600] seconds")) {
            try DaemonConfiguration.parse("[group.loud]\nmin_seconds = 601\n", source: "e.conf")
        }
    }

    @Test("the engine: windows at or above the level for 4 windows raise the event; its peak is the loudest window; gated windows count by level")
    func engine() throws {
        var engine = try DetectionEngine(groups: [LabelGroup.loudPreset], watchList: ["loud"], classLabels: ["Speech"])
        let levels: [Float] = [-60, -29, -20, -10, -25, -40, -40, -40, -40, -40, -40, -40, -40]
        var events: [(Double, DetectionEvent)] = []
        for (index, level) in levels.enumerated() {
            let start = Double(index) * 0.48
            // Scores nil: the classifier did not run (a gate above the level); the level alone decides.
            for event in engine.process(windowStart: start, windowDuration: 0.96, scores: nil, levelDBFS: level) {
                events.append((start, event))
            }
        }
        #expect(events.count == 2)
        func near(_ a: Double?, _ b: Double) -> Bool { a.map { abs($0 - b) < 1e-9 } ?? false }
        #expect(near(events.first?.0, 1.92))
        guard case .onset(let onset) = events.first?.1 else { Issue.record("no onset"); return }
        #expect(onset.group == "loud")
        #expect(onset.classLabel == "-10.0 dBFS")  // the loudest window of the run
        #expect(onset.confidence == Float(0.5 + 0.5 * (20.0 / 30)))  // 0.5 at -30 dBFS, 1 at 0 dBFS
        #expect(near(onset.start, 0.48))
        #expect(near(onset.decisionTime, 2.88))
        // The last loud window (1.92-2.88 s) ends the event once 3 s passed without one: at the window 5.28-6.24 s.
        #expect(near(events.last?.0, 5.28))
        guard case .offset(let offset) = events.last?.1 else { Issue.record("no end"); return }
        #expect(near(offset.start, 0.48))
        #expect(near(offset.end, 2.88))
        #expect(offset.positiveWindows == 4)
        #expect(offset.reason == .holdElapsed)
        #expect(offset.classLabel == "-10.0 dBFS")
    }

    @Test("earshot detect on a synthetic file: 3 s silence, 4 s of a sine at -13.5 dBFS, 5 s silence; exact onset and end times",
          .needsEarshotBuilt)
    func detectOnFile() throws {
        let scratch = try DaemonScratch([])
        defer { scratch.remove() }
        let audio = scratch.directory.appendingPathComponent("loud.wav")
        try SyntheticAudio.writeWAV(
            SyntheticAudio.silence(seconds: 3) + SyntheticAudio.sine(seconds: 4, amplitude: 0.3) + SyntheticAudio.silence(seconds: 5),
            to: audio)
        let config = scratch.directory.appendingPathComponent("loud.conf")
        try "[detection]\nwatch = loud\n[history]\nenabled = false\n".write(to: config, atomically: true, encoding: .utf8)
        let outcome = try #require(try EarshotCLI.run(["detect", audio.path, "--config", config.path, "--format", "text"], in: scratch.directory))
        #expect(outcome.status == 0, "\(outcome.standardError)")
        // The first window reaching into the sine starts at 2.40 s (0.6 of it is silence: -17.7 dBFS); four in a
        // row decide at 4.80 s; the last one reaching into it starts at 6.72 s and ends at 7.68 s. The class is the
        // loudest window's level (a full window of the sine), the confidence 0.5 + 0.5 * 16.5 / 30 = 78 %; the mean
        // over the 10 windows with their partial ones is 76 %.
        #expect(outcome.outputLines == [
            "\(audio.path): loud started: \"-13.5 dBFS\" 78% (stream 2.40 s)",
            "\(audio.path): loud ended after 5.28 s: \"-13.5 dBFS\" peak 78%, mean 76% (stream 2.40-7.68 s)",
        ], "\(outcome.standardOutput)")
        // Above the sine's level, nothing.
        try "[detection]\nwatch = loud\n[group.loud]\nlevel_dbfs = -12\n[history]\nenabled = false\n".write(to: config, atomically: true, encoding: .utf8)
        let quiet = try #require(try EarshotCLI.run(["detect", audio.path, "--config", config.path, "--format", "text"], in: scratch.directory))
        #expect(quiet.status == 0, "\(quiet.standardError)")
        #expect(quiet.outputLines.isEmpty, "\(quiet.standardOutput)")
    }
}
