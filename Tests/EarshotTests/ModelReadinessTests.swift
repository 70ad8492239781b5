import Foundation
import Testing

import EarshotModel
import EarshotTools

/// `earshot enroll` and `earshot train` say plainly when their own check finds the model poor, instead of handing out
/// a ready-to-paste configuration (trial 4 #11); `--from` names a take twice: a warning.
@Suite("Training: a model its own check finds poor is not handed out as ready")
struct ModelReadinessTests {
    /// A head trained on two labels of 16-column Gaussian embeddings 8 apart (seed 1), `perClass` windows each.
    static func trainGaussian(labels: [String], perClass: Int) throws -> TrainingReport {
        try HeadTraining.train(
            perFile: HeadTrainingTests.gaussianFiles(perClass: perClass, columns: 16, distance: 8, seed: 1),
            labels: labels, backbone: HeadTrainingTests.backbone16,
            configuration: HeadTrainingTests.configuration(), method: "train")
    }

    @Test("train: a separable model with enough windows is ready; 10 windows of a label are too few; a label lost in the background fails its validation")
    func trainingReadiness() throws {
        let ready = try Self.trainGaussian(labels: ["background", "tone"], perClass: 200)
        #expect(ready.readinessProblems == [])

        let few = try Self.trainGaussian(labels: ["background", "tone"], perClass: 10)
        #expect(few.windowsPerLabel == [10, 10])
        // 5 held-out windows per label: one missed window costs a fifth of the recall.
        #expect(few.readinessProblems == [
            "tone has 10 windows, fewer than 20 (about 10 s of the sound): add recordings of it",
            "tone: validation precision 1.000, recall 0.400 (below 0.5): it would miss the sound or fire on others",
        ])

        // The tone's windows are drawn like the background's, and there are five times fewer of them.
        var files = HeadTrainingTests.gaussianFiles(perClass: 500, columns: 16, distance: 0, seed: 3)
        var toneFiles = 0
        files = files.filter { file in
            guard file.label == 1 else { return true }
            toneFiles += 1
            return toneFiles <= 100
        }
        let lost = try HeadTraining.train(
            perFile: files, labels: ["background", "tone"], backbone: HeadTrainingTests.backbone16,
            configuration: HeadTrainingTests.configuration(), method: "train")
        let problems = lost.readinessProblems
        #expect(problems.count == 1, "\(problems)")
        #expect(problems.first?.hasPrefix("tone: validation precision ") == true, "\(problems)")
        #expect(problems.first?.hasSuffix(" (below 0.5): it would miss the sound or fire on others") == true, "\(problems)")
    }

    @Test("train without a background label: not ready, however well its labels separate (trial 5 #4)")
    func trainingWithoutBackground() throws {
        let report = try Self.trainGaussian(labels: ["hum", "tone"], perClass: 200)
        #expect(report.head.metadata.backgroundLabel == nil)
        #expect(report.readinessProblems == [
            "no background folder: every sound would be scored as one of hum, tone, so it would fire on any sound (add a folder named background with the room's usual sounds)",
        ])
    }

    @Test("earshot train with no background folder: NOT READY and why instead of the configuration; the model is still written",
          .needsEarshotBuilt)
    func trainWithoutBackgroundNotReady() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        try TrainCommandTests.writeTrainingData(directory.appendingPathComponent("data"), labels: ["hum", "tone"])
        let run = try #require(try EarshotCLI.run(["train", "data", "--output", "m.earshot"], in: directory, timeout: 300))
        #expect(run.status == 0, "\(run.standardError)")
        #expect(run.outputLines.first == "data: hum 8 files/64 windows, tone 8 files/64 windows")
        let start = try #require(run.outputLines.firstIndex(of: "wrote m.earshot (kept to inspect it, not to use)"), "\(run.outputLines)")
        #expect(Array(run.outputLines[start...]) == [
            "wrote m.earshot (kept to inspect it, not to use)",
            "NOT READY for earshotd, do not add it to the configuration:",
            "  - no background folder: every sound would be scored as one of hum, tone, so it would fire on any sound (add a folder named background with the room's usual sounds)",
            "what to do: add recordings (more files per label, and background with the room's usual sounds) and train again",
            "inspect it: earshot analyze --model m.earshot FILE",
        ])
        #expect(FileManager.default.fileExists(atPath: directory.appendingPathComponent("m.earshot").path))
    }

    @Test("enroll --from: a file named twice (also as ./FILE) is reported once, by the name given the second time")
    func duplicateTakes() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        for name in ["a.wav", "b.wav"] { try Data([0]).write(to: directory.appendingPathComponent(name)) }
        let a = directory.appendingPathComponent("a.wav").path
        let b = directory.appendingPathComponent("b.wav").path
        let again = directory.path + "/./a.wav"
        #expect(EnrollmentReport.duplicateTakes([a, b]) == [])
        #expect(EnrollmentReport.duplicateTakes([a, b, again, a]) == [again])
    }

    @Test("earshot enroll with takes that are the background: NOT READY and why instead of the configuration; the model is still written; a take given twice is warned about",
          .needsEarshotBuilt)
    func enrollNotReady() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { AudioTestFiles.remove(directory) }
        let room = directory.appendingPathComponent("room.wav")
        try AnalysisTestSupport.writeFloatWAV(EnrollmentTests.beeps(seconds: 6, offset: 0, seed: 7), sampleRate: 16_000, to: room)
        let take = directory.appendingPathComponent("take.wav")
        try AnalysisTestSupport.writeFloatWAV(EnrollmentTests.beeps(seconds: 2, offset: 0, seed: 8), sampleRate: 16_000, to: take)
        let model = directory.appendingPathComponent("m.earshot")
        let run = try #require(try EarshotCLI.run(
            ["enroll", "--label", "beeper", "--from", take.path, take.path, "--background", room.path, "--output", model.path],
            in: directory, timeout: 120))
        #expect(run.status == 0, "\(run.standardError)")
        #expect(run.errorLines.contains("earshot: warning: --from names \(take.path) more than once: a take given twice counts twice and makes the separation check look better than it is (give each recording once)"), "\(run.errorLines)")
        #expect(run.outputLines.contains("wrote \(model.path) (kept to inspect it, not to use)"), "\(run.outputLines)")
        let start = try #require(run.outputLines.firstIndex(of: "NOT READY for earshotd, do not add it to the configuration:"), "\(run.outputLines)")
        #expect(run.outputLines[start + 1].hasPrefix("  - the takes are not separated from the background (lowest take "))
        #expect(run.outputLines[start + 1].hasSuffix("): it would fire on the room's usual sounds"))
        #expect(Array(run.outputLines[(start + 2)...]) == [
            "what to do: record more takes of the beeper, and the background with the room's usual sounds (--background), and enroll again",
            "inspect it: earshot analyze --model \(model.path) FILE",
        ])
        #expect(!run.outputLines.contains { $0.contains("[models]") })
        #expect(FileManager.default.fileExists(atPath: model.path))
    }
}
