import Dispatch
import FoundationEssentials
import Glibc
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
/// inside it (their mean when there are several; in a window longer than 0.96 s that reaches into the end's padding,
/// the mean of its patches of real audio only, ``WindowGeometry/patchStartFrames(realSamples:)``). With the default
/// request (0.96 s, overlap 0.5) the results are the reference model's per-patch outputs: window `i` starts at
/// `0.48 * i` s and covers 16 kHz samples `[7680 i, 7680 i + 15600)`.
///
/// Memory stays bounded whatever the file's length: the file is decoded in chunks and scored in rounds of
/// ``windowsPerRound`` windows (the log-mel frames of a round are computed once; each frame depends only on its own
/// 400 samples, so this equals one spectrogram of the whole padded waveform). Results are delivered after each round.
///
/// Results go to each request's observer (``add(_:withObserver:)``, Apple's `SNResultsObserving`) and to the
/// ``results`` streams, in time order per request. Three ways to run the analysis, as Apple's analyzer has:
/// the blocking `analyze()` blocks the calling thread; `try await analyze()` runs it on a thread of its own and
/// throws `CancellationError` when cancelled; ``analyze(completionHandler:)`` runs it on a thread of its own and
/// then calls the handler. ``cancelAnalysis()`` stops it from any thread (or from an observer) within one round of
/// windows: no result and no completion follow the cancel (Apple: no `requestDidComplete` after a cancel).
///
/// Errors found when the file is opened (missing, not audio, ...) are thrown by ``init(url:)``. An error found while
/// decoding (damage inside the file: `x.flac: decoding failed after 229376 frames (flac decoder lost sync; the file
/// is damaged)`) goes to each observer's `request(_:didFailWithError:)`, after the results of every window wholly
/// inside the audio decoded before the failure, and ends the ``results`` streams; no completion follows. A file cut
/// short (WAV, FLAC, Ogg, MP3) is not an error: it is analysed as far as it goes and completes, and
/// ``decodingWarning`` names the truncation afterwards (as it names Ogg pages skipped as damaged).
///
/// At the top level of a `main.swift`, `try await analyzer.analyze()` resolves to the blocking `analyze()` (the
/// compiler warns that no async operation occurs within `await`): it blocks the main thread and never throws, so a
/// cancel gives `false` rather than `CancellationError`. Apple's `SNAudioFileAnalyzer` has the same pair. Call it
/// from an `async` function or a `Task { try await analyzer.analyze() }` to get the async form.
///
/// - Important: `Sendable`: share it across tasks and threads. Analyses of one analyzer run one at a time (a second
///   `analyze` waits for the first). Observers are called on the thread that runs the analysis: the caller's for
///   the blocking the blocking `analyze()`, the analyzer's own thread otherwise; they must not call back into the analyzer,
///   except ``cancelAnalysis()``. Inference runs on up to ``maximumThreads`` cores meanwhile.
public final class AudioFileAnalyzer: Sendable {
    /// The file being analyzed (Apple's analyzer keeps it privately).
    public let url: URL

    /// Cores used for inference during an analysis (default: the active processor count). Above 1, OpenBLAS is
    /// set to one thread (`BLASThreads.set(1)`) so the workers do not oversubscribe the cores. Read when an analysis
    /// starts. (Earshot's own.)
    public var maximumThreads: Int {
        get { shared.withLock { $0.maximumThreads } }
        set { shared.withLock { $0.maximumThreads = newValue } }
    }

    /// Windows scored per round, >= 1 (default 128, about 1 minute of audio with the default request): a round's
    /// samples, log-mel frames, patches and scores are held in memory together, and its results are delivered
    /// together; ``cancelAnalysis()`` takes effect within a round. A request whose hop is longer than the default
    /// 0.48 s gets proportionally fewer windows per round (at least 1), so that a round holds no more audio beyond
    /// its one window than a default round. Read when an analysis starts. (Earshot's own.)
    ///
    /// Memory: with the default request and 2 threads, `earshot analyze` peaks at about 90 MB whatever the file's
    /// length (8 hours measured by `scripts/memory-figures`); 128 rather than 256 windows saved 13 MB at the same
    /// speed.
    public var windowsPerRound: Int {
        get { shared.withLock { $0.windowsPerRound } }
        set { shared.withLock { $0.windowsPerRound = newValue } }
    }

    /// After an analysis: what the decoder warned of without failing, e.g. an MP3 that ends before the length its
    /// header states, or a damaged Ogg page that was skipped (``AudioFileDecoder/truncationWarning``); nil when
    /// nothing. A truncated file is reported here, not to `request(_:didFailWithError:)`. (Earshot's own.)
    public var decodingWarning: String? { shared.withLock { $0.decodingWarning } }

    /// A request and where its results go besides the streams.
    private struct Entry: Sendable {
        let request: ClassifySoundRequest
        let observer: ObserverBox?
    }

    private struct State: Sendable {
        var maximumThreads = ProcessInfo.processInfo.activeProcessorCount
        var windowsPerRound = 128
        var decodingWarning: String?
        /// The decoder opened by `init(url:)`, used by the first analysis (later ones open the file again).
        var decoder: UncheckedBox<AudioFileDecoder>?
        var entries: [Entry] = []
        /// The analysis running, if any.
        var currentRun: AnalysisRun?
        var lastStatistics = AnalysisStatistics()
    }

    private let shared: Mutex<State>
    private let streams = ResultStreams()
    /// Held by the analysis running: analyses of one analyzer run one at a time.
    private let analysisGate = DispatchSemaphore(value: 1)

    /// Opens `url` and reads its header (Sound Analysis' `SNAudioFileAnalyzer(url:)`).
    /// - Throws: ``EarshotError`` as ``AudioFileDecoder/init(url:)``: `.noInput` for a missing file, a directory or
    ///   no permission; `.data` for an empty file, a file that is not audio, MP3 data in a WAV container or a WAV
    ///   cut short before its first frame (one cut later is analysed as far as it goes, with a decoding warning).
    public init(url: URL) throws(EarshotError) {
        self.url = url
        var state = State()
        state.decoder = UncheckedBox(try AudioFileDecoder(url: url))
        shared = Mutex(state)
    }

    /// Adds a request whose results go to `observer` (kept with a strong reference) and to the ``results`` streams
    /// (Sound Analysis' `SNAudioFileAnalyzer.add(_:withObserver:)`).
    /// - Throws: ``EarshotError`` when the request's model cannot be loaded, or `.usage` when the request was
    ///   already added.
    public func add(_ request: ClassifySoundRequest, withObserver observer: any ResultsObserving) throws(EarshotError) {
        try add(Entry(request: request, observer: ObserverBox(observer)))
    }

    /// Adds a request whose results go only to the ``results`` streams (no observer; Apple's analyzers always
    /// take one).
    /// - Throws: as ``add(_:withObserver:)``.
    public func add(_ request: ClassifySoundRequest) throws(EarshotError) {
        try add(Entry(request: request, observer: nil))
    }

    private func add(_ entry: Entry) throws(EarshotError) {
        _ = try entry.request.model()
        try shared.withLock { (state: inout State) throws(EarshotError) in
            guard !state.entries.contains(where: { $0.request === entry.request }) else {
                throw EarshotError(.usage, "this request was already added to the analyzer (create another request)")
            }
            state.entries.append(entry)
        }
    }

    /// Removes a request; its observer gets no more calls, from the next analysis on (Sound Analysis'
    /// `removeRequest(_:)`).
    public func removeRequest(_ request: ClassifySoundRequest) {
        shared.withLock { $0.entries.removeAll { $0.request === request } }
    }

    /// Removes every request (Sound Analysis' `removeAllRequests()`).
    public func removeAllRequests() {
        shared.withLock { $0.entries.removeAll() }
    }

    /// The results of every request, as they are produced, for the analysis running when the stream is made or
    /// else the next one to start (the tutorial's Combine subject, in Swift's own form; Apple's analyzers have only
    /// observers). Make the stream before starting the analysis to get all its results.
    ///
    /// The stream ends when the analysis ends: normally once every request has completed; with the error of a
    /// request that failed (a decoding failure fails them all); with `CancellationError` after
    /// ``cancelAnalysis()`` (or when the task running `analyze() async` is cancelled), dropping the results it had
    /// buffered, so that nothing is delivered after the cancel. Each access makes a new stream (one consumer each);
    /// a consumer that stops iterating is forgotten. With several requests, ``results(for:)`` keeps them apart.
    ///
    /// - Important: a stream buffers what its consumer has not taken yet, without limit (about 20 KB per result:
    ///   521 classifications, scores and the embedding), so that the analysis never waits for it: consume every
    ///   stream you make. A consumer that only wants the first results stops with ``cancelAnalysis()``.
    public var results: AsyncThrowingStream<ClassificationResult, any Error> {
        streams.stream(for: nil)
    }

    /// The results of `request` alone, as ``results`` (ends with that request's own failure).
    public func results(for request: ClassifySoundRequest) -> AsyncThrowingStream<ClassificationResult, any Error> {
        streams.stream(for: request)
    }

    /// Decodes the file and delivers every window's result of every request, then `requestDidComplete`, on the
    /// calling thread (Sound Analysis' `SNAudioFileAnalyzer.analyze()`); on a decoding error, the results of the
    /// windows decoded before it, then `request(_:didFailWithError:)` instead of the completion. A file cut short
    /// completes (see ``decodingWarning``). May be called again (the file is read again).
    ///
    /// - Note: at the top level of `main.swift` this overload is also the one `try await analyzer.analyze()` calls
    ///   (see the type's description); use a `Task {}` or an `async` function for `analyze() async throws`.
    /// - Returns: true when every request completed; false when the analysis was cancelled (no completion was
    ///   delivered) or a request failed.
    @discardableResult
    public func analyze() -> Bool {
        perform(AnalysisRun()) == .completed
    }

    /// Analyzes the file on a thread of its own and returns when every request has completed (Sound Analysis'
    /// `analyze() async`, which returns false when cancelled; here a cancel throws). Observers are called on that
    /// thread; ``results`` streams get the same results. Cancelling the calling task cancels the analysis.
    /// - Throws: `CancellationError` after ``cancelAnalysis()`` or when the task is cancelled; the first request's
    ///   ``EarshotError`` when the file turned out damaged part-way (after the results of the windows decoded before
    ///   the damage; a file cut short is not an error, ``decodingWarning`` names it) or a model could not be loaded;
    ///   `.system` when no thread could be started.
    public func analyze() async throws {
        let run = AnalysisRun()
        let outcome = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Outcome, any Error>) in
                do {
                    try startThread(named: "earshot-analyze") { continuation.resume(returning: self.perform(run)) }
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        } onCancel: {
            cancel(run)
        }
        switch outcome {
        case .completed: return
        case .cancelled: throw CancellationError()
        case .failed(let error): throw error
        }
    }

    /// Analyzes the file on a thread of its own, then calls `completionHandler` there (Sound Analysis'
    /// `analyze(completionHandler:)`).
    /// - Parameter completionHandler: gets true when every request completed, false when the analysis was
    ///   cancelled, a request failed, or no thread could be started (the observers then get that `.system` error).
    public func analyze(completionHandler: @escaping @Sendable (_ didReachEndOfFile: Bool) -> Void) {
        let run = AnalysisRun()
        do {
            try startThread(named: "earshot-analyze") { completionHandler(self.perform(run) == .completed) }
        } catch {
            for entry in shared.withLock({ $0.entries }) {
                entry.observer?.value.request(entry.request, didFailWithError: error)
                streams.fail(entry.request, with: error)
            }
            completionHandler(false)
        }
    }

    /// Stops the analysis in progress (Sound Analysis' `cancelAnalysis()`), from any thread or task, or from an
    /// observer: the windows being scored are abandoned within one round (the inference workers stop at their next
    /// batch of 16 patches, the decoder at its next chunk); no further result, failure or completion reaches the
    /// observers, the ``results`` streams throw `CancellationError` at their next element (what they had buffered
    /// is dropped), and `analyze() async` throws `CancellationError` (the blocking `analyze()` returns false). No effect
    /// when no analysis runs, or once it has completed.
    ///
    /// - Important: called from another thread while an observer is being called, that one call may still
    ///   finish after this returns; no call starts after it.
    public func cancelAnalysis() {
        shared.withLock { state in
            guard let run = state.currentRun, run.cancel() else { return }
            streams.cancelAll()
        }
    }

    /// Figures of the last analysis, for tests and benchmarks.
    package var lastAnalysisStatistics: AnalysisStatistics { shared.withLock { $0.lastStatistics } }

    /// Cancels `run` (the task running it was cancelled): its streams too once it has started.
    private func cancel(_ run: AnalysisRun) {
        shared.withLock { state in
            guard run.cancel(), state.currentRun === run else { return }
            streams.cancelAll()
        }
    }

    /// How an analysis ended.
    private enum Outcome: Sendable, Equatable {
        case completed
        case cancelled
        case failed(EarshotError)
    }

    /// Runs `run` (after any analysis running on this analyzer), then ends the streams.
    private func perform(_ run: AnalysisRun) -> Outcome {
        analysisGate.wait()
        defer { analysisGate.signal() }
        let (entries, threads, roundSize, decoder) = shared.withLock { state in
            state.currentRun = run
            state.decodingWarning = nil
            if run.isCancelled { streams.cancelAll() }
            let decoder = state.entries.isEmpty ? nil : state.decoder
            if !state.entries.isEmpty { state.decoder = nil }
            return (state.entries, state.maximumThreads, state.windowsPerRound, decoder)
        }
        let statistics = RunCounters()
        let outcome = analyzeFile(
            entries: entries, threads: threads, windowsPerRound: max(1, roundSize), decoder: decoder?.value, run: run,
            statistics: statistics)
        if outcome == .cancelled {
            streams.cancelAll()
        } else {
            streams.finishAll()
        }
        shared.withLock { state in
            state.currentRun = nil
            state.lastStatistics = statistics.snapshot()
        }
        return outcome
    }

    /// The analysis itself: decoding, rounds of windows, delivery, completion.
    private func analyzeFile(
        entries: [Entry], threads: Int, windowsPerRound: Int, decoder: AudioFileDecoder?, run: AnalysisRun,
        statistics: RunCounters
    ) -> Outcome {
        guard !entries.isEmpty else { return run.end() ? .completed : .cancelled }
        // Cancelled while it waited for the analysis before it (or its task was cancelled before it started).
        guard !run.isCancelled else { return .cancelled }
        var failure: EarshotError?
        var requests: [RequestState] = []
        var sessionsByModel: [ObjectIdentifier: [YAMNetSession]] = [:]
        let workers = max(1, min(threads, 64))
        for entry in entries {
            do {
                let model = try entry.request.model()
                let sessions = sessionsByModel[ObjectIdentifier(model)] ?? (0..<workers).map { _ in model.makeSession() }
                sessionsByModel[ObjectIdentifier(model)] = sessions
                requests.append(RequestState(
                    request: entry.request, observer: entry.observer?.value, model: model, sessions: sessions, run: run,
                    windowsPerRound: windowsPerRound, streams: streams, statistics: statistics))
            } catch {
                guard !run.isCancelled else { return .cancelled }
                entry.observer?.value.request(entry.request, didFailWithError: error)
                streams.fail(entry.request, with: error)
                failure = failure ?? error
            }
        }
        guard !requests.isEmpty else { return .failed(failure ?? EarshotError(.usage, "no request could run")) }
        if workers > 1 { BLASThreads.set(1) }

        var stream = WaveformBuffer()
        // Room for the largest round of any request plus two decoded chunks, reserved once: appending never
        // reallocates (a growing array would double its capacity, and its resident memory, on the way).
        let roundSamples = requests.map { state in
            (state.windowsPerRound - 1) * state.request.geometry.hopSamples + state.request.geometry.windowSamples
        }.max() ?? 0
        stream.samples.reserveCapacity(roundSamples + 2 * Self.chunkSamples)
        let opened: AudioFileDecoder
        do {
            if let decoder {
                opened = decoder
            } else {
                opened = try AudioFileDecoder(url: url)
            }
        } catch {
            for state in requests { state.fail(error) }
            return run.isCancelled ? .cancelled : .failed(error)
        }
        // With more than one core, a thread decodes and resamples ahead (at most one round of audio) while this
        // one scores: decoding no longer waits for inference, nor inference for decoding. With one, inline.
        var decodingThread = workers > 1
            ? DecodedAudio(limit: windowsPerRound * 7_680 + 15_600) : nil
        if let ahead = decodingThread {
            let box = UncheckedBox(opened)
            do {
                try startThread(named: "earshot-decode") {
                    do {
                        let expected = try decodeMono16kBlocks(box.value, isCancelled: { ahead.isCancelled }) { chunk in
                            ahead.put(.samples(chunk))
                        }
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
        defer {
            // After a cancel the decoding thread may be waiting for room: it stops at its next chunk.
            ahead?.cancel()
            ahead?.waitUntilFinished()
        }
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
                loop: while !run.isCancelled {
                    switch ahead.take() {
                    case .samples(let chunk): consume(chunk)
                    case .end(let expected):
                        stream.setEnd(expected)
                        break loop
                    case .failure(let error): throw error
                    }
                }
            } else {
                stream.setEnd(try decodeMono16kBlocks(opened, isCancelled: { run.isCancelled }, deliver: consume))
            }
        } catch {
            // Every window whose audio decoded before the failure is scored and delivered (the round waiting for
            // its results, the rounds held back until full, the last partial one), then the failure: no padding,
            // only windows wholly inside the decoded audio.
            for state in requests {
                scoreReadyRounds(state, stream: stream, onlyFullRounds: false)
                deliverPending(state)
            }
            guard !run.isCancelled else {
                for state in requests { state.abandonPending() }
                return .cancelled
            }
            for state in requests { state.fail(error) }
            return .failed(error)
        }
        guard !run.isCancelled else {
            for state in requests { state.abandonPending() }
            return .cancelled
        }
        // The decoding thread (if any) has delivered `.end`, through the handoff's lock: its writes are visible.
        shared.withLock { $0.decodingWarning = opened.truncationWarning }
        let total = stream.end
        for state in requests {
            let geometry = state.request.geometry
            let windows = geometry.windowCount(sampleCount: total)
            stream.padWithZeros(to: (windows - 1) * geometry.hopSamples + geometry.windowSamples)
            state.windowLimit = windows
            state.sampleCount = total
            scoreReadyRounds(state, stream: stream, onlyFullRounds: false)
            deliverPending(state)
            guard !run.isCancelled else {
                for state in requests { state.abandonPending() }
                return .cancelled
            }
            state.observer?.requestDidComplete(state.request)
        }
        guard run.end() else { return .cancelled }
        return failure.map { .failed($0) } ?? .completed
    }

    /// The most 16 kHz samples one decoded chunk holds (``decodeMono16kBlocks(_:maxBlockSamples:isCancelled:deliver:)``).
    private static let chunkSamples = mono16kBlockSamples

    /// One request during ``analyze()``: its next window and its sessions.
    private final class RequestState {
        let request: ClassifySoundRequest
        let observer: (any ResultsObserving)?
        let model: YAMNet
        let sessions: [YAMNetSession]
        let frontEnd = LogMelSpectrogram()
        let run: AnalysisRun
        let windowsPerRound: Int
        let streams: ResultStreams
        let statistics: RunCounters
        /// Index of the next window to score.
        var nextWindow = 0
        /// Windows in the file, once known (at the end of decoding).
        var windowLimit = Int.max
        /// 16 kHz samples in the file, once known (at the end of decoding): where the zero padding starts.
        var sampleCount = Int.max
        /// The round whose inference is running (or done) and whose results are not delivered yet.
        var pending: Round?
        var nextWindowStart: Int { nextWindow * request.geometry.hopSamples }

        init(
            request: ClassifySoundRequest, observer: (any ResultsObserving)?, model: YAMNet, sessions: [YAMNetSession],
            run: AnalysisRun, windowsPerRound: Int, streams: ResultStreams, statistics: RunCounters
        ) {
            self.request = request
            self.observer = observer
            self.model = model
            self.sessions = sessions
            self.run = run
            // A round holds (windows - 1) hops plus one window of samples: for hops longer than the default
            // request's (0.48 s), fewer windows, so that a round never holds more audio than a default round
            // beyond its one window (--window 3600 --overlap 0 would otherwise hold 256 hours).
            self.windowsPerRound = max(1, min(windowsPerRound, windowsPerRound * 7_680 / request.geometry.hopSamples))
            self.streams = streams
            self.statistics = statistics
        }

        /// Waits for the pending round's workers (they hold the sessions; after a cancel they stop at their next
        /// batch) and drops its results.
        func abandonPending() {
            pending?.wait()
            pending = nil
        }

        /// Reports `error` to the observer and the streams, unless the analysis was cancelled.
        func fail(_ error: EarshotError) {
            guard !run.isCancelled else { return }
            observer?.request(request, didFailWithError: error)
            streams.fail(request, with: error)
        }
    }

    /// Scores the windows of `state` that `stream` holds completely, in rounds of ``windowsPerRound``
    /// (`onlyFullRounds`: leave a partial round for later, while the file is still being decoded). Starts no round
    /// once the analysis is cancelled.
    private func scoreReadyRounds(_ state: RequestState, stream: WaveformBuffer, onlyFullRounds: Bool) {
        let geometry = state.request.geometry
        while !state.run.isCancelled {
            let available = stream.end >= geometry.windowSamples
                ? (stream.end - geometry.windowSamples) / geometry.hopSamples + 1 : 0
            let roundSize = state.windowsPerRound
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
            state.statistics.roundStarted(round.windows.count)
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

    /// Averages the patches of each window of `round` (finished) and hands the results to the observer and the
    /// streams, in time order; stops as soon as the analysis is cancelled (also by the observer itself).
    private func deliver(_ round: Round, state: RequestState) {
        let geometry = state.request.geometry
        let labels = state.model.classLabels
        for (index, window) in round.windows.enumerated() {
            guard !state.run.isCancelled else { return }
            var windowScores = [Float](repeating: 0, count: YAMNet.classCount)
            var windowEmbedding = [Float](repeating: 0, count: YAMNet.embeddingSize)
            let patches = Self.patchStartFrames(window: window, geometry: geometry, state: state)
            for patch in patches {
                let patchRow = round.row[window * geometry.hopFrames + patch - round.firstFrame] ?? 0
                let base = patchRow * YAMNet.classCount
                for index in 0..<YAMNet.classCount { windowScores[index] += round.scores[base + index] }
                let embeddingBase = patchRow * YAMNet.embeddingSize
                for index in 0..<YAMNet.embeddingSize { windowEmbedding[index] += round.embeddings[embeddingBase + index] }
            }
            if patches.count > 1 {
                let divisor = Float(patches.count)
                for index in 0..<YAMNet.classCount { windowScores[index] /= divisor }
                for index in 0..<YAMNet.embeddingSize { windowEmbedding[index] /= divisor }
            }
            let range = TimeRange(start: Double(window * geometry.hopSamples) / Double(YAMNet.sampleRate),
                                  duration: state.request.windowDuration)
            var result = ClassificationResult.scored(
                by: state.request, timeRange: range, yamnetScores: windowScores, embedding: windowEmbedding,
                yamnetLabels: labels, levelDBFS: round.levels[index])
            result.inferenceDuration = round.inferenceSecondsPerWindow
            state.observer?.request(state.request, didProduce: result)
            state.streams.yield(result, of: state.request)
            state.statistics.windowDelivered()
        }
    }

    /// Start frames (from the window's start) of the patches window `window` averages: all of them, except in a
    /// last window that reaches into the end's zero padding, where only those of real audio
    /// (``WindowGeometry/patchStartFrames(realSamples:)``).
    private static func patchStartFrames(window: Int, geometry: WindowGeometry, state: RequestState) -> [Int] {
        geometry.patchStartFrames(realSamples: state.sampleCount - window * geometry.hopSamples)
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
            for patch in patchStartFrames(window: window, geometry: geometry, state: state) {
                candidates.append(window * geometry.hopFrames + patch - firstFrame)
            }
        }
        let starts = Array(Set(candidates)).sorted()
        let levels = windows.map { window in
            let first = window * geometry.hopSamples - firstSample
            return ClassificationResult.level(of: UnsafeBufferPointer(rebasing: samples[first..<(first + geometry.windowSamples)]))
        }
        return Round(windows: windows, firstFrame: firstFrame, logMel: logMel, starts: starts, levels: levels,
                     run: state.run, statistics: state.statistics)
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
    /// Nanoseconds the workers spent classifying this round's batches, summed over the workers.
    private let inferenceNanoseconds = Atomic<UInt64>(0)
    /// Checked before each batch: a cancelled analysis abandons the rest of the round.
    private let run: AnalysisRun
    private let statistics: RunCounters

    init(
        windows: Range<Int>, firstFrame: Int, logMel: [Float], starts: [Int], levels: [Float], run: AnalysisRun,
        statistics: RunCounters
    ) {
        self.run = run
        self.statistics = statistics
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

    /// Seconds of inference per window of this round (after ``wait()``): the workers' time over its batches, summed,
    /// divided by its windows (windows share patches, so this is the round's mean).
    var inferenceSecondsPerWindow: Double {
        Double(inferenceNanoseconds.load(ordering: .relaxed)) / 1e9 / Double(max(1, windows.count))
    }

    private func work(_ session: YAMNetSession) {
        let patchValues = YAMNet.patchFrames * YAMNet.melBands
        var patches: [Float] = []
        while !run.isCancelled {
            let first = next.wrappingAdd(Self.batch, ordering: .relaxed).oldValue
            guard first < starts.count else { return }
            let range = first..<min(starts.count, first + Self.batch)
            statistics.patchesScored(range.count)
            let scores = scores.baseAddress! + range.lowerBound * YAMNet.classCount
            let embeddings = embeddings.baseAddress! + range.lowerBound * YAMNet.embeddingSize
            let began = DispatchTime.now().uptimeNanoseconds
            defer { inferenceNanoseconds.wrappingAdd(DispatchTime.now().uptimeNanoseconds - began, ordering: .relaxed) }
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
        /// The consumer stopped (a cancelled analysis): `put` no longer waits, the decoder stops.
        var cancelled = false
    }

    private let queue = Mutex(Queue())
    private let itemsQueued = DispatchSemaphore(value: 0)
    private let roomMade = DispatchSemaphore(value: 0)
    private let ended = DispatchSemaphore(value: 0)
    private let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    /// Appends `item`; waits while the queue holds `limit` samples or more. Drops it once cancelled.
    func put(_ item: Item) {
        if case .samples = item {
            while queue.withLock({ !$0.cancelled && $0.queuedSamples >= limit }) { roomMade.wait() }
        }
        let dropped = queue.withLock { queue in
            guard !queue.cancelled else { return true }
            if case .samples(let chunk) = item { queue.queuedSamples += chunk.count }
            queue.items.append(item)
            return false
        }
        if !dropped { itemsQueued.signal() }
    }

    /// The consumer takes nothing more: a producer waiting for room goes on, and stops at its next chunk.
    func cancel() {
        queue.withLock { $0.cancelled = true }
        roomMade.signal()
    }

    /// Whether ``cancel()`` was called.
    var isCancelled: Bool { queue.withLock { $0.cancelled } }

    /// The oldest item; waits for one.
    func take() -> Item {
        itemsQueued.wait()
        let item = queue.withLock { queue in
            let item = queue.items[queue.head]
            // The slot lets go of its chunk now: while the decoder stays ahead the queue is never empty, and the
            // taken chunks would otherwise stay referenced until it is (the whole file, 605 MB for 8 hours).
            queue.items[queue.head] = .end(expectedLength: 0)
            queue.head += 1
            if queue.head == queue.items.count {
                queue.items.removeAll(keepingCapacity: true)
                queue.head = 0
            } else if queue.head >= 64 {
                queue.items.removeFirst(queue.head)
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

/// An observer kept by a `Sendable` analyzer: called only on the thread running an analysis (one at a time), as
/// ``ResultsObserving`` documents.
private struct ObserverBox: @unchecked Sendable {
    let value: any ResultsObserving
    init(_ value: any ResultsObserving) { self.value = value }
}

/// One analysis of an ``AudioFileAnalyzer``: running, then cancelled or ended, never both.
private final class AnalysisRun: Sendable {
    private static let running = 0, cancelled = 1, ended = 2
    private let phase = Atomic<Int>(running)

    /// True once ``cancel()`` succeeded. Read on the analysis thread and by the inference workers.
    var isCancelled: Bool { phase.load(ordering: .acquiring) == Self.cancelled }

    /// Running -> cancelled; false when it had already ended or been cancelled.
    func cancel() -> Bool {
        phase.compareExchange(expected: Self.running, desired: Self.cancelled, ordering: .acquiringAndReleasing).exchanged
    }

    /// Running -> ended (every completion delivered); false when it was cancelled first.
    func end() -> Bool {
        phase.compareExchange(expected: Self.running, desired: Self.ended, ordering: .acquiringAndReleasing).exchanged
    }
}

/// What an analysis did, for tests and benchmarks (``AudioFileAnalyzer/lastAnalysisStatistics``).
package struct AnalysisStatistics: Sendable, Equatable {
    /// Rounds whose inference started (all requests).
    package var roundsStarted = 0
    /// Windows in those rounds.
    package var windowsStarted = 0
    /// Patches the inference workers took up (in batches of 16; a cancelled round leaves the rest).
    package var patchesScored = 0
    /// Results delivered (to observers and streams).
    package var windowsDelivered = 0
}

/// ``AnalysisStatistics`` counted during an analysis (the workers count patches concurrently).
private final class RunCounters: Sendable {
    private let rounds = Atomic<Int>(0), windows = Atomic<Int>(0), patches = Atomic<Int>(0)
    private let delivered = Atomic<Int>(0)

    func roundStarted(_ windowCount: Int) {
        rounds.wrappingAdd(1, ordering: .relaxed)
        windows.wrappingAdd(windowCount, ordering: .relaxed)
    }
    func patchesScored(_ count: Int) { patches.wrappingAdd(count, ordering: .relaxed) }
    func windowDelivered() { delivered.wrappingAdd(1, ordering: .relaxed) }

    func snapshot() -> AnalysisStatistics {
        AnalysisStatistics(
            roundsStarted: rounds.load(ordering: .relaxed), windowsStarted: windows.load(ordering: .relaxed),
            patchesScored: patches.load(ordering: .relaxed), windowsDelivered: delivered.load(ordering: .relaxed))
    }
}
