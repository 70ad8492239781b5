import Testing
import Earshot
import EarshotDetection
import EarshotSupport
import EarshotOutputs
import EarshotService
import EarshotTools

/// Consecutive patches of one spectrogram share rows of YAMNet's early layers (`EarlyLayers`): the shared rows must
/// be exactly the ones free of padding in both patches, and sharing must change no bit of any result.
@Suite struct EarlyLayersTests {
    static let model: YAMNet? = try? YAMNet.builtIn()

    @Test func reusePlanAtTheReferenceHop() {
        let plan = EarlyLayers.reusePlan(hopFrames: 48, blocks: YAMNetSession.firstBatchedBlock)
        // Stages: first conv (48 rows), then per block depthwise and pointwise: 48, 24, 24, 12, 12 rows.
        // First conv: row r reads frames 2r...2r+2 (no padding before, one after): rows 0...46 are free of padding;
        // shifted by 24, rows 0...22 of patch n are rows 24...46 of patch n - 1.
        #expect(plan.map(\.rows) == [0..<23, 1..<22, 1..<22, 1..<10, 1..<10, 2..<9, 2..<9, 1..<4, 1..<4, 2..<3, 2..<3])
        #expect(plan.map(\.offset) == [24, 24, 24, 12, 12, 12, 12, 6, 6, 6, 6])
        // Copied: only the rows the next layer's computed rows read (none after a depthwise layer: the pointwise
        // layer computes the same rows), and every shared row of the last output (the batched layers read them all).
        #expect(plan.map(\.copies) == [
            [0..<2, 21..<23], [], [1..<3, 20..<22], [], [1..<3, 8..<10], [], [2..<3, 8..<9], [], [1..<4], [], [2..<3],
        ])
    }

    @Test func reusePlanAtOtherHops() {
        let blocks = YAMNetSession.firstBatchedBlock
        let none = Array(repeating: 0..<0, count: 1 + 2 * blocks)
        // A patch or more apart, no hop, or an odd hop (the first layer has stride 2): nothing is shared.
        for hop in [0, 47, 95, 96, 200, -48] {
            #expect(EarlyLayers.reusePlan(hopFrames: hop, blocks: blocks).map(\.rows) == none, "hop \(hop)")
        }
        // A hop of 2 frames shifts the first layer's rows by 1 and stops dividing at the second block (stride 2).
        let two = EarlyLayers.reusePlan(hopFrames: 2, blocks: blocks)
        #expect(two.map(\.rows) == [0..<46, 1..<45, 1..<45] + Array(repeating: 0..<0, count: 8))
        #expect(two.prefix(3).map(\.offset) == [1, 1, 1])
        // The first block's depthwise layer recomputes rows 0 and 45...47, reading first-layer rows 0, 1, 44, 45;
        // with a shift of 1, row 0 of patch n is row 1 of patch n - 1, itself shared (row 2 of patch n - 2), and so
        // on up to the first row computed (46): the copies chain over every shared row.
        #expect(two[0].copies == [0..<46])
        // The second block's depthwise layer shares nothing (stride 2 does not divide a shift of 1): it reads all.
        #expect(two[2].copies == [1..<45])
        // 24 frames: the shift halves at each stride-2 layer (12, 6, 3), and the rows shared grow.
        let quarter = EarlyLayers.reusePlan(hopFrames: 24, blocks: blocks)
        #expect(quarter.map(\.rows) == [0..<35, 1..<34, 1..<34, 1..<16, 1..<16, 2..<15, 2..<15, 1..<7, 1..<7, 2..<6, 2..<6])
        #expect(quarter.map(\.offset) == [12, 12, 12, 6, 6, 6, 6, 3, 3, 3, 3])
    }

    /// A spectrogram of `frames` frames with log-mel-like values (natural logs of mel energies, about -7...+3).
    static func spectrogram(frames: Int, seed: UInt64) -> [Float] {
        var generator = SplitMix64(seed: seed)
        return (0..<(frames * YAMNet.melBands)).map { _ in Float(generator.next() >> 40) / Float(1 << 24) * 10 - 7 }
    }

    @Test(arguments: [48, 24, 8, 2, 50, 17, 94, 96])
    func sharingChangesNoResult(hop: Int) throws {
        let model = try #require(Self.model, "the built-in model (Models/) must load")
        let count = 21  // one batch of 16 and one of 5: sharing restarts at each batch
        let frames = (count - 1) * hop + YAMNet.patchFrames
        let values = Self.spectrogram(frames: frames, seed: UInt64(hop))
        let stride = hop * YAMNet.melBands
        var scores = [Float](repeating: 0, count: count * YAMNet.classCount)
        var embeddings = [Float](repeating: 0, count: count * YAMNet.embeddingSize)
        values.withUnsafeBufferPointer { input in
            scores.withUnsafeMutableBufferPointer { s in
                embeddings.withUnsafeMutableBufferPointer { e in
                    model.makeSession().classify(
                        patches: input.baseAddress!, patchStride: stride, count: count, scores: s.baseAddress!,
                        embeddings: e.baseAddress!)
                }
            }
        }
        // Each patch alone (a batch of one: no early-layer buffers, nothing shared).
        let alone = model.makeSession()
        var mismatches = 0
        for index in 0..<count {
            let patch = Array(values[(index * stride)..<(index * stride + YAMNet.patchFrames * YAMNet.melBands)])
            let one = alone.classify(patches: patch, count: 1)
            if Array(scores[(index * YAMNet.classCount)..<((index + 1) * YAMNet.classCount)]) != one.scores
                || Array(embeddings[(index * YAMNet.embeddingSize)..<((index + 1) * YAMNet.embeddingSize)]) != one.embeddings {
                mismatches += 1
            }
        }
        #expect(mismatches == 0, "hop \(hop): \(mismatches) of \(count) patches differ from the patch computed alone")
        // The scores are real ones, not zeros left in place.
        #expect(scores.contains { $0 > 0.01 })
    }

}

/// The log-mel FFT plan never depends on timing (see `LogMelSpectrogram.makePlan`).
@Suite struct FFTPlanTests {
    /// The stored wisdom holds the plan of an x86-64 CPU with AVX2 and FMA (the build machine's).
    static var storedPlanApplies: Bool {
        #if arch(x86_64)
        X86Features.hasAVX2AndFMA
        #else
        false
        #endif
    }

    @Test(.enabled(if: storedPlanApplies, "not an x86-64 CPU with AVX2 and FMA: the estimated FFT plan is used, nothing to check"))
    func storedWisdomGivesTheMeasuredPlan() throws {
        // Debian 12's FFTW 3.3.10 (the build machine's): the stored plan applies; its 64-point AVX codelet is in it.
        let plan = LogMelSpectrogram().planDescription
        #expect(plan.contains("n2fv_64_avx"), "\(plan)")
        #expect(plan.hasPrefix("(rdft2-ct-dit/8"), "\(plan)")
        // Forgotten after use: a second front end gets the same plan, from the same stored wisdom.
        #expect(LogMelSpectrogram().planDescription == plan)
    }
}

