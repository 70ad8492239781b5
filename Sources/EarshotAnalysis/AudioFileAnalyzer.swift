import Dispatch
import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotAudio
import EarshotModel

/// Classifies the sounds in an audio file (Sound Analysis' `SNAudioFileAnalyzer`).
///
/// The file is decoded with libsndfile, mixed to mono and resampled to 16 kHz exactly as
/// ``decodeMono16k(_:)-(URL)`` does (`round(frames * 16000 / rate)` samples), padded at the end with zeros as the
/// reference's `pad_waveform` pads it (at least one window, then whole hops until the last sample is inside a window),
/// and scored with YAMNet on its log-mel spectrogram. Each window's scores are YAMNet's scores of the 0.96 s patches
/// inside it (their mean when there are several). With the default request (0.96 s, overlap 0.5) the results are the
/// reference model's per-patch outputs: window `i` starts at `0.48 * i` s and covers 16 kHz samples
/// `[7680 i, 7680 i + 15600)`.
///
/// Memory stays bounded whatever the file's length: the file is decoded in chunks and scored in rounds of
/// ``windowsPerRound`` windows (the log-mel frames of a round are computed once; each frame depends only on its own
/// 400 samples, so this equals one spectrogram of the whole padded waveform). Results are delivered after each round.
///
/// Errors found when the file is opened (missing, not audio, ...) are thrown by ``init(url:)``. Errors found while
/// decoding (a truncated FLAC, a decoding failure) go to each observer's `request(_:didFailWithError:)`, after the
/// results of the windows decoded before the failure; no completion follows.
///
/// - Important: Not thread-safe; ``analyze()`` is synchronous and calls the observers on the calling thread, in time
///   order per request. Inference runs on up to ``maximumThreads`` cores meanwhile. Observers must not call back
///   into the analyzer.
public final class AudioFileAnalyzer {
    /// The file being analyzed.
    public let url: URL
    /// Cores used for inference during ``analyze()`` (default: the active processor count). Above 1, OpenBLAS is
    /// set to one thread (`BLASThreads.set(1)`) so the workers do not oversubscribe the cores.
    public var maximumThreads: Int = ProcessInfo.processInfo.activeProcessorCount

    /// Windows scored per round, >= 1 (default 256, about 2 minutes of audio with the default request): a round's
    /// samples, log-mel frames, patches and scores are held in memory together, and its results are delivered
    /// together.
    public var windowsPerRound = 256

    /// After ``analyze()``: what the decoder warned of without failing, e.g. an MP3 that ends before the length its
    /// header states (``AudioFileDecoder/truncationWarning``); nil when nothing.
    public private(set) var decodingWarning: String?

    private var decoder: AudioFileDecoder?
    private var entries: [(request: ClassifySoundRequest, observer: any ResultsObserving)] = []

    /// Opens `url` and reads its header.
    /// - Throws: ``EarshotError`` as ``AudioFileDecoder/init(url:)``: `.noInput` for a missing file, a directory or
    ///   no permission; `.data` for an empty file, a file that is not audio, MP3 data in a WAV container or a WAV
    ///   shorter than its header says.
    public init(url: URL) throws(EarshotError) {
        self.url = url
        decoder = try AudioFileDecoder(url: url)
    }

    /// Adds a request whose results go to `observer` (kept with a strong reference).
    /// - Throws: ``EarshotError`` when the request's model cannot be loaded, or `.usage` when the request was
    ///   already added.
    public func add(_ request: ClassifySoundRequest, withObserver observer: any ResultsObserving) throws(EarshotError) {
        guard !entries.contains(where: { $0.request === request }) else {
            throw EarshotError(.usage, "this request was already added to the analyzer (create another request)")
        }
        _ = try request.model()
        entries.append((request, observer))
    }

    /// Removes a request; its observer gets no more calls.
    public func removeRequest(_ request: ClassifySoundRequest) {
        entries.removeAll { $0.request === request }
    }

    /// Removes every request.
    public func removeAllRequests() {
        entries.removeAll()
    }

    /// Decodes the file and delivers every window's result of every request, then `requestDidComplete`; on a
    /// decoding error, `request(_:didFailWithError:)` instead of the completion. May be called again (the file is
    /// read again).
    public func analyze() {
        guard !entries.isEmpty else { return }
        decodingWarning = nil
        var requests: [RequestState] = []
        var sessionsByModel: [ObjectIdentifier: [YAMNetSession]] = [:]
        let workers = max(1, min(maximumThreads, 64))
        for entry in entries {
            do {
                let model = try entry.request.model()
                let sessions = sessionsByModel[ObjectIdentifier(model)] ?? (0..<workers).map { _ in model.makeSession() }
                sessionsByModel[ObjectIdentifier(model)] = sessions
                requests.append(RequestState(request: entry.request, observer: entry.observer, model: model, sessions: sessions))
            } catch {
                entry.observer.request(entry.request, didFailWithError: error)
            }
        }
        guard !requests.isEmpty else { return }
        if workers > 1 { BLASThreads.set(1) }

        var stream = WaveformBuffer()
        let opened: AudioFileDecoder
        do {
            if let decoder {
                opened = decoder
            } else {
                opened = try AudioFileDecoder(url: url)
            }
        } catch {
            for state in requests { state.observer.request(state.request, didFailWithError: error) }
            return
        }
        decoder = nil
        // With more than one core, a thread decodes and resamples ahead (at most one round of audio) while this
        // one scores: decoding no longer waits for inference, nor inference for decoding. With one, inline.
        var decodingThread = workers > 1
            ? DecodedAudio(limit: windowsPerRound * 7_680 + 15_600) : nil
        if let ahead = decodingThread {
            let box = UncheckedBox(opened)
            do {
                try startThread(named: "earshot-decode") {
                    do {
                        let expected = try Self.decode(box.value) { chunk in ahead.put(.samples(chunk)) }
                        ahead.put(.end(expectedLength: expected))
                    } catch let error as EarshotError {
                        ahead.put(.failure(error))
                    } catch {
                        ahead.put(.failure(EarshotError(.data, "\(error)")))
                    }
                    ahead.finished()
                }
            } catch {
                decodingThread = nil  // no thread to spare: decode inline, as with one core
            }
        }
        let ahead = decodingThread
        defer { ahead?.waitUntilFinished() }
        /// Takes decoded 16 kHz audio: scores every round it completes.
        func consume(_ chunk: [Float]) {
            stream.samples.append(contentsOf: chunk)
            for state in requests {
                scoreReadyRounds(state, stream: stream, onlyFullRounds: true)
            }
            stream.discard(before: requests.map(\.nextWindowStart).min() ?? stream.end)
        }
        do throws(EarshotError) {
            if let ahead {
                loop: while true {
                    switch ahead.take() {
                    case .samples(let chunk): consume(chunk)
                    case .end(let expected):
                        stream.setEnd(expected)
                        break loop
                    case .failure(let error): throw error
                    }
                }
            } else {
                stream.setEnd(try Self.decode(opened, deliver: consume))
            }
        } catch {
            for state in requests {
                state.pending?.wait()  // its workers hold the sessions; its results are not delivered
                state.pending = nil
                state.observer.request(state.request, didFailWithError: error)
            }
            return
        }
        // The decoding thread (if any) has delivered `.end`, through the handoff's lock: its writes are visible.
        decodingWarning = opened.truncationWarning
        let total = stream.end
        for state in requests {
            let geometry = state.request.geometry
            let windows = geometry.windowCount(sampleCount: total)
            stream.padWithZeros(to: (windows - 1) * geometry.hopSamples + geometry.windowSamples)
            state.windowLimit = windows
            scoreReadyRounds(state, stream: stream, onlyFullRounds: false)
            deliverPending(state)
            state.observer.requestDidComplete(state.request)
        }
    }

    /// Decodes `opened` to 16 kHz mono in chunks handed to `deliver` (about 1.4 s of input each: memory must not
    /// follow the rate a header claims) and returns the waveform's length as the reference computes it,
    /// `round(frames * 16000 / rate)` (as `decodeMono16k`; soxr's flush may give one sample more or fewer).
    /// - Throws: the decoder's and the resampler's ``EarshotError``s.
    private static func decode(_ opened: AudioFileDecoder, deliver: ([Float]) -> Void) throws(EarshotError) -> Int {
        let resampler = try Resampler(inputRate: Double(opened.sampleRate), outputRate: Double(YAMNet.sampleRate))
        var mono: [Float] = []
        let chunk = 65_536
        mono.reserveCapacity(chunk)
        var output: [Float] = []
        while true {
            mono.removeAll(keepingCapacity: true)
            guard try opened.readMono(maxFrames: chunk, appendingTo: &mono) > 0 else { break }
            output.removeAll(keepingCapacity: true)
            try resampler.process(mono, appendingTo: &output)
            if !output.isEmpty { deliver(output) }
        }
        output.removeAll(keepingCapacity: true)
        try resampler.flush(appendingTo: &output)
        if !output.isEmpty { deliver(output) }
        return resampler.isPassthrough ? Int(opened.framesRead)
            : Int((Double(opened.framesRead) * Double(YAMNet.sampleRate) / Double(opened.sampleRate)).rounded(.toNearestOrAwayFromZero))
    }

    /// One request during ``analyze()``: its next window and its sessions.
    private final class RequestState {
        let request: ClassifySoundRequest
        let observer: any ResultsObserving
        let model: YAMNet
        let sessions: [YAMNetSession]
        let frontEnd = LogMelSpectrogram()
        /// Index of the next window to score.
        var nextWindow = 0
        /// Windows in the file, once known (at the end of decoding).
        var windowLimit = Int.max
        /// The round whose inference is running (or done) and whose results are not delivered yet.
        var pending: Round?
        var nextWindowStart: Int { nextWindow * request.geometry.hopSamples }

        init(request: ClassifySoundRequest, observer: any ResultsObserving, model: YAMNet, sessions: [YAMNetSession]) {
            self.request = request
            self.observer = observer
            self.model = model
            self.sessions = sessions
        }
    }

    /// Scores the windows of `state` that `stream` holds completely, in rounds of ``windowsPerRound``
    /// (`onlyFullRounds`: leave a partial round for later, while the file is still being decoded).
    private func scoreReadyRounds(_ state: RequestState, stream: WaveformBuffer, onlyFullRounds: Bool) {
        let geometry = state.request.geometry
        while true {
            let available = stream.end >= geometry.windowSamples
                ? (stream.end - geometry.windowSamples) / geometry.hopSamples + 1 : 0
            let roundSize = max(1, windowsPerRound)
            let last = min(available, state.windowLimit, state.nextWindow + roundSize)
            guard last > state.nextWindow else { return }
            if onlyFullRounds && last - state.nextWindow < roundSize { return }
            // Two stages: this round's front end is computed while the previous round's inference runs; then its
            // inference starts and the previous round's results are delivered meanwhile. The workers never wait
            // for the front end or for the observers (with one thread everything runs here, in order).
            let round = stream.samples.withUnsafeBufferPointer { samples in
                Self.prepareRound(windows: state.nextWindow..<last, samples: samples, firstSample: stream.start, state: state)
            }
            let previous = state.pending
            previous?.wait()
            round.start(sessions: state.sessions)
            state.pending = round
            if let previous { deliver(previous, state: state) }
            state.nextWindow = last
        }
    }

    /// Delivers the results of `state`'s pending round, if any, in time order (waiting for its inference).
    private func deliverPending(_ state: RequestState) {
        guard let round = state.pending else { return }
        state.pending = nil
        round.wait()
        deliver(round, state: state)
    }

    /// Averages the patches of each window of `round` (finished) and hands the results to the observer.
    private func deliver(_ round: Round, state: RequestState) {
        let geometry = state.request.geometry
        let labels = state.model.classLabels
        for (index, window) in round.windows.enumerated() {
            var windowScores = [Float](repeating: 0, count: YAMNet.classCount)
            var windowEmbedding = [Float](repeating: 0, count: YAMNet.embeddingSize)
            for patch in 0..<geometry.patchesPerWindow {
                let patchRow = round.row[window * geometry.hopFrames + patch * YAMNet.patchHopFrames - round.firstFrame] ?? 0
                let base = patchRow * YAMNet.classCount
                for index in 0..<YAMNet.classCount { windowScores[index] += round.scores[base + index] }
                let embeddingBase = patchRow * YAMNet.embeddingSize
                for index in 0..<YAMNet.embeddingSize { windowEmbedding[index] += round.embeddings[embeddingBase + index] }
            }
            if geometry.patchesPerWindow > 1 {
                let divisor = Float(geometry.patchesPerWindow)
                for index in 0..<YAMNet.classCount { windowScores[index] /= divisor }
                for index in 0..<YAMNet.embeddingSize { windowEmbedding[index] /= divisor }
            }
            let range = TimeRange(start: Double(window * geometry.hopSamples) / Double(YAMNet.sampleRate),
                                  duration: state.request.windowDuration)
            state.observer.request(state.request, didProduce: .scored(
                by: state.request, timeRange: range, yamnetScores: windowScores, embedding: windowEmbedding,
                yamnetLabels: labels, levelDBFS: round.levels[index]))
        }
    }

    /// The part of a round that needs the samples: the round's log-mel frames (computed once), its distinct patch
    /// start frames, and each window's level (`samples[0]` is sample `firstSample` of the file).
    private static func prepareRound(
        windows: Range<Int>, samples: UnsafeBufferPointer<Float>, firstSample: Int, state: RequestState
    ) -> Round {
        let geometry = state.request.geometry
        let bands = YAMNet.melBands
        let firstFrame = windows.lowerBound * geometry.hopFrames
        let frameCount = (windows.upperBound - 1) * geometry.hopFrames + geometry.windowFrames - firstFrame
        var logMel = [Float](repeating: 0, count: frameCount * bands)
        let offset = firstFrame * LogMelSpectrogram.hopSamples - firstSample
        logMel.withUnsafeMutableBufferPointer { logMel in
            state.frontEnd.compute(UnsafeBufferPointer(rebasing: samples[offset...]), frames: frameCount, into: logMel.baseAddress!)
        }
        // The distinct patch start frames (relative to firstFrame), in order.
        var candidates: [Int] = []
        for window in windows {
            for patch in 0..<geometry.patchesPerWindow {
                candidates.append(window * geometry.hopFrames + patch * YAMNet.patchHopFrames - firstFrame)
            }
        }
        let starts = Array(Set(candidates)).sorted()
        let levels = windows.map { window in
            let first = window * geometry.hopSamples - firstSample
            return ClassificationResult.level(of: UnsafeBufferPointer(rebasing: samples[first..<(first + geometry.windowSamples)]))
        }
        return Round(windows: windows, firstFrame: firstFrame, logMel: logMel, starts: starts, levels: levels)
    }
}

/// The 16 kHz samples of a file still needed: `samples[0]` is sample `start` of the whole waveform.
private struct WaveformBuffer {
    var samples: [Float] = []
    private(set) var start = 0
    /// One past the last sample held (the waveform's length so far).
    var end: Int { start + samples.count }

    /// Forgets the samples before `index`.
    mutating func discard(before index: Int) {
        let drop = min(samples.count, index - start)
        guard drop > 0 else { return }
        samples.removeFirst(drop)
        start += drop
    }

    /// Cuts the waveform to `length` samples (soxr's flush may give one more than the reference's length) or
    /// extends it with zeros.
    mutating func setEnd(_ length: Int) {
        if end > length {
            samples.removeLast(min(samples.count, end - length))
        } else {
            padWithZeros(to: length)
        }
    }

    /// Appends zeros until the waveform is `length` samples long.
    mutating func padWithZeros(to length: Int) {
        if end < length { samples.append(contentsOf: repeatElement(0, count: length - end)) }
    }
}

/// One round of windows between ``AudioFileAnalyzer``'s two stages: its log-mel frames and patch starts (read-only
/// once prepared), the score and embedding rows the workers fill (disjoint batches), and the windows' levels.
/// Workers take batches of 16 patches in turn (rather than one fixed share each): a worker whose core also runs the
/// decoding thread or the delivery then does less, and the round does not wait for it; 16 patches keep the products
/// wide (batched 1.44 ms per patch against 1.91 alone).
private final class Round: @unchecked Sendable {
    static let batch = 16
    let windows: Range<Int>
    let firstFrame: Int
    let logMel: [Float]
    let starts: [Int]
    let levels: [Float]
    /// Row of each patch start in `scores` / `embeddings`.
    let row: [Int: Int]
    let scores: UnsafeMutableBufferPointer<Float>
    let embeddings: UnsafeMutableBufferPointer<Float>
    private let group = DispatchGroup()
    private let next = Atomic<Int>(0)

    init(windows: Range<Int>, firstFrame: Int, logMel: [Float], starts: [Int], levels: [Float]) {
        self.windows = windows
        self.firstFrame = firstFrame
        self.logMel = logMel
        self.starts = starts
        self.levels = levels
        var row: [Int: Int] = [:]
        for (index, start) in starts.enumerated() { row[start] = index }
        self.row = row
        scores = .allocate(capacity: starts.count * YAMNet.classCount)
        scores.initialize(repeating: 0)
        embeddings = .allocate(capacity: starts.count * YAMNet.embeddingSize)
        embeddings.initialize(repeating: 0)
    }

    deinit {
        scores.deallocate()
        embeddings.deallocate()
    }

    /// Runs the round's inference: on the calling thread with one session, else one task per session on a
    /// concurrent queue (``wait()`` for them).
    func start(sessions: [YAMNetSession]) {
        if sessions.count == 1 || starts.count < 2 {
            for session in sessions { work(session) }
            return
        }
        for session in sessions {
            let box = UncheckedBox(session)  // each session is used by this one task only
            DispatchQueue.global(qos: .userInitiated).async(group: group) { [self] in work(box.value) }
        }
    }

    /// Waits until the inference has filled every row.
    func wait() { group.wait() }

    private func work(_ session: YAMNetSession) {
        let patchValues = YAMNet.patchFrames * YAMNet.melBands
        var patches: [Float] = []
        while true {
            let first = next.wrappingAdd(Self.batch, ordering: .relaxed).oldValue
            guard first < starts.count else { return }
            let range = first..<min(starts.count, first + Self.batch)
            let scores = scores.baseAddress! + range.lowerBound * YAMNet.classCount
            let embeddings = embeddings.baseAddress! + range.lowerBound * YAMNet.embeddingSize
            logMel.withUnsafeBufferPointer { logMel in
                // Patches evenly spaced in the spectrogram (the usual case: one every 48 frames) are read in place,
                // so the session sees them as windows of one spectrogram and shares their common rows
                // (`EarlyLayers`); others are copied side by side first.
                let hop = range.count > 1 ? starts[range.lowerBound + 1] - starts[range.lowerBound] : 0
                if hop > 0, range.dropFirst().allSatisfy({ starts[$0] - starts[$0 - 1] == hop }) {
                    session.classify(
                        patches: logMel.baseAddress! + starts[range.lowerBound] * YAMNet.melBands,
                        patchStride: hop * YAMNet.melBands, count: range.count, scores: scores, embeddings: embeddings)
                    return
                }
                if patches.isEmpty { patches = [Float](repeating: 0, count: Self.batch * patchValues) }
                patches.withUnsafeMutableBufferPointer { patches in
                    for (slot, index) in range.enumerated() {
                        (patches.baseAddress! + slot * patchValues)
                            .update(from: logMel.baseAddress! + starts[index] * YAMNet.melBands, count: patchValues)
                    }
                    session.classify(
                        patches: patches.baseAddress!, patchStride: patchValues, count: range.count,
                        scores: scores, embeddings: embeddings)
                }
            }
        }
    }
}

/// Decoded 16 kHz audio on its way from the decoding thread to ``AudioFileAnalyzer/analyze()``: a FIFO bounded
/// by samples (the decoder waits while `limit` samples are queued), then the end or a failure.
///
/// One producer (the decoding thread) and one consumer. The queue sits in a `Mutex`; the consumer waits for items
/// on `itemsQueued` (one signal per item), the producer for room on `roomMade` (one signal per item taken; it checks
/// again after each, so surplus signals cost a loop turn, never a lost wake-up).
private final class DecodedAudio: Sendable {
    enum Item {
        case samples([Float])
        case end(expectedLength: Int)
        case failure(EarshotError)
    }

    private struct Queue: ~Copyable {
        var items: [Item] = []
        var head = 0
        var queuedSamples = 0
    }

    private let queue = Mutex(Queue())
    private let itemsQueued = DispatchSemaphore(value: 0)
    private let roomMade = DispatchSemaphore(value: 0)
    private let ended = DispatchSemaphore(value: 0)
    private let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    /// Appends `item`; waits while the queue holds `limit` samples or more.
    func put(_ item: Item) {
        if case .samples = item {
            while queue.withLock({ $0.queuedSamples >= limit }) { roomMade.wait() }
        }
        queue.withLock {
            if case .samples(let chunk) = item { $0.queuedSamples += chunk.count }
            $0.items.append(item)
        }
        itemsQueued.signal()
    }

    /// The oldest item; waits for one.
    func take() -> Item {
        itemsQueued.wait()
        let item = queue.withLock { queue in
            let item = queue.items[queue.head]
            queue.head += 1
            if queue.head == queue.items.count {
                queue.items.removeAll(keepingCapacity: true)
                queue.head = 0
            }
            if case .samples(let chunk) = item { queue.queuedSamples -= chunk.count }
            return item
        }
        roomMade.signal()
        return item
    }

    /// Called by the decoding thread as it ends.
    func finished() {
        ended.signal()
    }

    /// Waits until the decoding thread has ended (it always puts `.end` or `.failure` last, and `take` has taken it,
    /// so this returns at once unless the consumer stopped early).
    func waitUntilFinished() {
        ended.wait()
    }
}

/// Hands a non-Sendable value to one other thread, which alone uses it from then on.
private struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
