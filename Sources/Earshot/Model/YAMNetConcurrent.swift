import Dispatch
import FoundationEssentials
import Glibc
import Dispatch

extension YAMNet {
    /// `YAMNetSession.analyze(waveform:)` spread over `threads` cores: the log-mel frames and then the patches are
    /// split into contiguous ranges, each range run by its own single-threaded session (OpenBLAS is set to 1 thread,
    /// so cores are not oversubscribed). Results are identical to the single-session analysis (same arithmetic per
    /// patch).
    /// - Parameters:
    ///   - samples16k: mono samples at 16 kHz, full scale ±1.
    ///   - threads: worker count, >= 1 (e.g. `ProcessInfo.processInfo.activeProcessorCount`).
    /// - Returns: as `YAMNetSession.analyze(waveform:)`.
    public func analyzeConcurrently(waveform samples16k: [Float], threads: Int)
        -> (logMel: [Float], frames: Int, scores: [Float], embeddings: [Float], patches: Int)
    {
        BLASThreads.set(1)
        let workers = max(1, threads)
        var padded = samples16k
        padded.append(contentsOf: repeatElement(0, count: LogMelSpectrogram.referencePaddedLength(sampleCount: samples16k.count) - samples16k.count))
        let frames = LogMelSpectrogram.frameCount(sampleCount: padded.count)
        let patches = 1 + (frames - Self.patchFrames) / Self.patchHopFrames
        var logMel = [Float](repeating: 0, count: frames * Self.melBands)
        var scores = [Float](repeating: 0, count: patches * Self.classCount)
        var embeddings = [Float](repeating: 0, count: patches * Self.embeddingSize)
        padded.withUnsafeBufferPointer { samples in
            logMel.withUnsafeMutableBufferPointer { logMel in
                let samples = UncheckedSendable(samples), out = UncheckedSendable(logMel)
                DispatchQueue.concurrentPerform(iterations: workers) { worker in
                    let range = Self.share(of: frames, worker: worker, workers: workers)
                    guard !range.isEmpty else { return }
                    let start = range.lowerBound * LogMelSpectrogram.hopSamples
                    let slice = UnsafeBufferPointer(rebasing: samples.value[start...])
                    LogMelSpectrogram().compute(slice, frames: range.count, into: out.value.baseAddress! + range.lowerBound * Self.melBands)
                }
            }
        }
        logMel.withUnsafeBufferPointer { logMel in
            scores.withUnsafeMutableBufferPointer { scores in
                embeddings.withUnsafeMutableBufferPointer { embeddings in
                    let input = UncheckedSendable(logMel), s = UncheckedSendable(scores), e = UncheckedSendable(embeddings)
                    DispatchQueue.concurrentPerform(iterations: workers) { worker in
                        let range = Self.share(of: patches, worker: worker, workers: workers)
                        guard !range.isEmpty else { return }
                        let stride = Self.patchHopFrames * Self.melBands
                        makeSession().classify(
                            patches: input.value.baseAddress! + range.lowerBound * stride, patchStride: stride,
                            count: range.count, scores: s.value.baseAddress! + range.lowerBound * Self.classCount,
                            embeddings: e.value.baseAddress! + range.lowerBound * Self.embeddingSize)
                    }
                }
            }
        }
        return (logMel, frames, scores, embeddings, patches)
    }

    /// The contiguous range of `count` items worker `worker` of `workers` takes.
    static func share(of count: Int, worker: Int, workers: Int) -> Range<Int> {
        (count * worker / workers)..<(count * (worker + 1) / workers)
    }
}

/// Hands a buffer pointer to `concurrentPerform` workers that write disjoint ranges of it.
struct UncheckedSendable<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
