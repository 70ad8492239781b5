import Dispatch
import FoundationEssentials
import Glibc
import Dispatch

/// Scores a long 16 kHz waveform that arrives in pieces, typically a file being decoded, with inference running on
/// `threads` worker threads while the caller goes on decoding: decoding, resampling and the front end (on the
/// caller's thread) overlap with the network (on the workers).
///
/// The results are those of `YAMNetSession.analyze(waveform:)` on the whole waveform: the same reference padding
/// at the end (`LogMelSpectrogram.referencePaddedLength`), the same log-mel frames (each depends only on its own 400
/// samples), a patch every 48 frames, and per-patch arithmetic that does not depend on how patches are batched.
///
/// Memory stays bounded: samples and frames are dropped once every patch that needs them has been queued, and at
/// most `2 * threads` batches of `YAMNetSession.maximumBatch` patches wait for a worker (`append` blocks until one
/// is free). Only the results (2 KB of scores and 4 KB of embeddings per 0.48 s) grow with the length.
///
/// - Important: `append` and `finish` must be called from one thread (or serial queue) at a time.
public final class YAMNetPipeline {
    public let model: YAMNet
    public let threads: Int

    private let frontEnd = LogMelSpectrogram()
    private let queue = DispatchQueue(label: "earshot.yamnet-pipeline", attributes: .concurrent)
    private let group = DispatchGroup()
    private let slots: DispatchSemaphore
    private let shared: WorkerState

    /// Samples from index `sampleStart` (in the whole waveform) on.
    private var samples: [Float] = []
    private var sampleStart = 0
    /// Log-mel frames from frame `frameStart` on, `[frames, 64]`.
    private var logMel: [Float] = []
    private var frameStart = 0
    /// The next frame to compute and the next patch to queue.
    private var nextFrame = 0
    private var nextPatch = 0
    private var totalSamples = 0

    /// - Parameters:
    ///   - threads: inference threads, >= 1 (e.g. `ProcessInfo.processInfo.activeProcessorCount`); OpenBLAS is set
    ///     to one thread so the workers do not oversubscribe the cores.
    public init(model: YAMNet, threads: Int) {
        self.model = model
        self.threads = max(1, threads)
        slots = DispatchSemaphore(value: 2 * self.threads)
        shared = WorkerState(sessions: (0..<self.threads).map { _ in model.makeSession() })
        BLASThreads.set(1)
    }

    /// Appends mono 16 kHz samples (full scale ±1) and queues every batch of patches they complete.
    public func append(_ samples16k: UnsafeBufferPointer<Float>) {
        samples.append(contentsOf: samples16k)
        totalSamples += samples16k.count
        computeFrames(upTo: LogMelSpectrogram.frameCount(sampleCount: totalSamples))
        // Patches whose 96 frames are all computed, queued in full batches only (the end is handled by `finish`).
        let batch = YAMNetSession.maximumBatch
        while nextFrame >= (nextPatch + batch - 1) * YAMNet.patchHopFrames + YAMNet.patchFrames {
            submit(first: nextPatch, count: batch)
        }
        discardConsumed()
    }

    /// Appends mono 16 kHz samples; see ``append(_:)-(UnsafeBufferPointer<Float>)``.
    public func append(_ samples16k: [Float]) {
        samples16k.withUnsafeBufferPointer { append($0) }
    }

    /// Pads the waveform as the reference does, scores the remaining patches and waits for every worker.
    /// - Returns: `scores` `[patches, 521]`, `embeddings` `[patches, 1024]`, and the number of patches (>= 1; the
    ///   waveform's length in samples is `samples` before padding).
    public func finish() -> (scores: [Float], embeddings: [Float], patches: Int, samples: Int) {
        let padded = LogMelSpectrogram.referencePaddedLength(sampleCount: totalSamples)
        samples.append(contentsOf: repeatElement(0, count: padded - totalSamples))
        let frames = LogMelSpectrogram.frameCount(sampleCount: padded)
        computeFrames(upTo: frames)
        let patches = 1 + (frames - YAMNet.patchFrames) / YAMNet.patchHopFrames
        while nextPatch < patches {
            submit(first: nextPatch, count: min(YAMNet.maximumPipelineBatch, patches - nextPatch))
        }
        group.wait()
        var scores = [Float](repeating: 0, count: patches * YAMNet.classCount)
        var embeddings = [Float](repeating: 0, count: patches * YAMNet.embeddingSize)
        for (first, result) in shared.takeResults() {
            let count = result.scores.count / YAMNet.classCount
            scores.replaceSubrange((first * YAMNet.classCount)..<((first + count) * YAMNet.classCount), with: result.scores)
            embeddings.replaceSubrange((first * YAMNet.embeddingSize)..<((first + count) * YAMNet.embeddingSize), with: result.embeddings)
        }
        return (scores, embeddings, patches, totalSamples)
    }

    /// Computes log-mel frames up to (not including) frame `end`.
    private func computeFrames(upTo end: Int) {
        guard end > nextFrame else { return }
        let count = end - nextFrame
        let base = logMel.count
        logMel.append(contentsOf: repeatElement(0, count: count * YAMNet.melBands))
        samples.withUnsafeBufferPointer { samples in
            logMel.withUnsafeMutableBufferPointer { logMel in
                let from = nextFrame * LogMelSpectrogram.hopSamples - sampleStart
                frontEnd.compute(UnsafeBufferPointer(rebasing: samples[from...]), frames: count, into: logMel.baseAddress! + base)
            }
        }
        nextFrame = end
    }

    /// Copies the frames of patches `first ..< first + count` and runs them on a worker (waiting for a free slot).
    private func submit(first: Int, count: Int) {
        let firstFrame = first * YAMNet.patchHopFrames
        let frames = (count - 1) * YAMNet.patchHopFrames + YAMNet.patchFrames
        let offset = (firstFrame - frameStart) * YAMNet.melBands
        let input = Array(logMel[offset..<(offset + frames * YAMNet.melBands)])
        nextPatch = first + count
        slots.wait()
        let model = model
        queue.async(group: group) { [shared, slots] in
            let session = shared.takeSession() ?? model.makeSession()
            var scores = [Float](repeating: 0, count: count * YAMNet.classCount)
            var embeddings = [Float](repeating: 0, count: count * YAMNet.embeddingSize)
            input.withUnsafeBufferPointer { input in
                scores.withUnsafeMutableBufferPointer { s in
                    embeddings.withUnsafeMutableBufferPointer { e in
                        session.classify(
                            patches: input.baseAddress!, patchStride: YAMNet.patchHopFrames * YAMNet.melBands,
                            count: count, scores: s.baseAddress!, embeddings: e.baseAddress!)
                    }
                }
            }
            shared.finished(session: session, first: first, scores: scores, embeddings: embeddings)
            slots.signal()
        }
    }

    /// Drops the samples and frames no queued-later patch needs.
    private func discardConsumed() {
        let neededFrame = nextPatch * YAMNet.patchHopFrames
        let dropFrames = min(neededFrame, nextFrame) - frameStart
        if dropFrames > 0 {
            logMel.removeFirst(dropFrames * YAMNet.melBands)
            frameStart += dropFrames
        }
        let dropSamples = nextFrame * LogMelSpectrogram.hopSamples - sampleStart
        if dropSamples > 0 {
            let drop = min(dropSamples, samples.count)
            samples.removeFirst(drop)
            sampleStart += drop
        }
    }
}

/// What the pipeline's workers share: idle sessions and finished results, behind a lock.
private final class WorkerState: @unchecked Sendable {
    private let lock = Lock()
    private var sessions: [YAMNetSession]
    private var results: [Int: (scores: [Float], embeddings: [Float])] = [:]

    init(sessions: [YAMNetSession]) { self.sessions = sessions }

    func takeSession() -> YAMNetSession? { lock.withLock { sessions.popLast() } }

    func finished(session: YAMNetSession, first: Int, scores: [Float], embeddings: [Float]) {
        lock.withLock {
            sessions.append(session)
            results[first] = (scores, embeddings)
        }
    }

    func takeResults() -> [Int: (scores: [Float], embeddings: [Float])] {
        lock.withLock {
            defer { results.removeAll() }
            return results
        }
    }
}

extension YAMNet {
    /// Patches per job in `YAMNetPipeline`: one session batch.
    static var maximumPipelineBatch: Int { YAMNetSession.maximumBatch }
}
