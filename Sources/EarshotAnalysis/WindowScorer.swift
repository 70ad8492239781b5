import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio
import EarshotModel

/// Scores one analysis window of 16 kHz samples: log-mel frames, YAMNet on each 0.96 s patch, mean over patches (over
/// the patches of real audio when the window ends in zero padding).
///
/// The log-mel frames of a window are the same numbers as the matching frames of the whole waveform's spectrogram
/// (each frame depends only on its own 400 samples), so a window scored here equals the file analyzer's.
///
/// - Important: Not thread-safe (scratch buffers, the session and the front end are reused).
package final class WindowScorer {
    package let geometry: WindowGeometry
    package let labels: [String]
    private let session: YAMNetSession
    private let frontEnd: LogMelSpectrogram
    /// [windowFrames, 64]
    private var logMel: [Float]
    /// [patchesPerWindow, 521]
    private var patchScores: [Float]
    /// [patchesPerWindow, 1024]
    private var patchEmbeddings: [Float]

    package init(geometry: WindowGeometry, session: YAMNetSession, frontEnd: LogMelSpectrogram) {
        self.geometry = geometry
        self.session = session
        self.frontEnd = frontEnd
        labels = session.model.classLabels
        logMel = [Float](repeating: 0, count: geometry.windowFrames * YAMNet.melBands)
        patchScores = [Float](repeating: 0, count: geometry.patchesPerWindow * YAMNet.classCount)
        patchEmbeddings = [Float](repeating: 0, count: geometry.patchesPerWindow * YAMNet.embeddingSize)
    }

    /// Mean scores `[521]` over the window's patches.
    /// - Precondition: `samples.count == geometry.windowSamples`.
    package func scores(ofWindow samples: UnsafeBufferPointer<Float>) -> [Float] {
        score(window: samples).scores
    }

    /// Mean scores `[521]` and mean embedding `[1024]` over the window's patches (the embedding is what classifier
    /// heads take).
    ///
    /// `realSamples`: how many of the window's samples are audio, the rest being zero padding (the last window of
    /// a file or a stream that ended); the mean is then over the patches of real audio only,
    /// ``WindowGeometry/patchStartFrames(realSamples:)``. Default: the whole window.
    /// - Precondition: `samples.count == geometry.windowSamples`.
    package func score(
        window samples: UnsafeBufferPointer<Float>, realSamples: Int = .max
    ) -> (scores: [Float], embedding: [Float]) {
        precondition(samples.count == geometry.windowSamples)
        let frames = geometry.windowFrames
        let patches = geometry.patchesPerWindow
        logMel.withUnsafeMutableBufferPointer { logMel in
            frontEnd.compute(samples, frames: frames, into: logMel.baseAddress!)
        }
        // The patches on the 48-frame grid are read in place, as one spectrogram's windows; in a window cut short,
        // the last patch may be off the grid (it ends with the audio) and is classified on its own after them.
        let starts = realSamples >= geometry.windowSamples ? nil : geometry.patchStartFrames(realSamples: realSamples)
        let used = starts?.count ?? patches
        let offGrid = starts.map { $0[$0.count - 1] != ($0.count - 1) * YAMNet.patchHopFrames } ?? false
        let onGrid = offGrid ? used - 1 : used
        logMel.withUnsafeBufferPointer { logMel in
            patchScores.withUnsafeMutableBufferPointer { scores in
                patchEmbeddings.withUnsafeMutableBufferPointer { embeddings in
                    session.classify(patches: logMel.baseAddress!, patchStride: YAMNet.patchHopFrames * YAMNet.melBands,
                                     count: onGrid, scores: scores.baseAddress!, embeddings: embeddings.baseAddress!)
                    if offGrid, let last = starts?.last {
                        session.classify(
                            patches: logMel.baseAddress! + last * YAMNet.melBands,
                            patchStride: YAMNet.patchFrames * YAMNet.melBands, count: 1,
                            scores: scores.baseAddress! + onGrid * YAMNet.classCount,
                            embeddings: embeddings.baseAddress! + onGrid * YAMNet.embeddingSize)
                    }
                }
            }
        }
        return (Self.mean(patchScores, rows: used), Self.mean(patchEmbeddings, rows: used, columns: YAMNet.embeddingSize))
    }

    /// The mean of `rows` rows of `columns` values (521 scores by default; the row itself when there is one).
    package static func mean(_ scores: [Float], rows: Int, columns: Int = YAMNet.classCount) -> [Float] {
        let classes = columns
        if rows == 1 { return Array(scores[0..<classes]) }
        var result = [Float](repeating: 0, count: classes)
        for row in 0..<rows {
            for index in 0..<classes { result[index] += scores[row * classes + index] }
        }
        let divisor = Float(rows)
        for index in 0..<classes { result[index] /= divisor }
        return result
    }
}
