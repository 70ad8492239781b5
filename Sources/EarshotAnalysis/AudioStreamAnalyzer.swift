import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio
import EarshotModel

/// The sample format of the buffers an ``AudioStreamAnalyzer`` receives (Sound Analysis takes an `AVAudioFormat`;
/// here interleaved 32-bit float samples at any rate).
public struct AudioStreamFormat: Sendable, Equatable, Hashable {
    /// Frames per second in Hz (> 0), e.g. 48000 (`AVAudioFormat.sampleRate`).
    public var sampleRate: Double
    /// Interleaved channels per frame (>= 1); the analyzer mixes them to mono (their mean) (`AVAudioFormat.channelCount`).
    public var channelCount: Int

    /// A format of `channelCount` interleaved channels at `sampleRate` Hz (checked by ``AudioStreamAnalyzer/init(format:)``).
    public init(sampleRate: Double, channelCount: Int) {
        self.sampleRate = sampleRate
        self.channelCount = channelCount
    }
}

/// Classifies a live stream of audio buffers (Sound Analysis' `SNAudioStreamAnalyzer`).
///
/// Each buffer is mixed to mono, resampled to 16 kHz (``Resampler``, soxr HQ) and appended to a sliding window;
/// every request gets one ``ClassificationResult`` per hop once its window is full (the first after 0.975 s of audio
/// for the default 0.96 s window, then one every 0.48 s).
///
/// Time: a result's `timeRange.start` is `segmentStart / sampleRate + windowIndex * hop`, where `segmentStart` is
/// the frame position of the first buffer after the last discontinuity. A buffer whose frame position does not
/// continue the previous one (an xrun, dropped data, or a jump back) starts a new segment: the resampler and the
/// windows are reset, the audio since the last full window is dropped, and no window ever joins audio across the gap.
///
/// Gate: with ``gateThresholdDBFS`` set, a window whose RMS level is below it gets a result with `isGated == true`
/// and no inference (no classifications), which saves the model's time on quiet input.
///
/// ``completeAnalysis()`` ends the stream: it flushes the resampler, scores the remaining audio in windows padded
/// with zeros exactly as ``AudioFileAnalyzer`` pads a file's end (a window longer than 0.96 s averages only its
/// patches of audio there, not the padding; so a whole file streamed through this class gives the file analyzer's
/// results), then calls `requestDidComplete`. The analyzer can then take a new stream.
///
/// Results go to each request's observer (``add(_:withObserver:)``) and to the ``results`` streams, which another
/// task may consume (`for try await result in analyzer.results`): the tutorial's Combine subject, in Swift's own
/// form.
///
/// Cost: one YAMNet session and one log-mel front end per analyzer; buffers are reused, so after warm-up a window
/// allocates only its result (the sorted classifications).
///
/// - Important: Not thread-safe: call it from one thread or serial queue (the capture's consumer). Observers are
///   called on that thread, synchronously, from ``analyze(_:atAudioFramePosition:)`` and ``completeAnalysis()``,
///   and must not call back into the analyzer. The ``results`` streams are `Sendable`: hand them to any task.
public final class AudioStreamAnalyzer {
    /// The input format given at creation (Sound Analysis gives it to `SNAudioStreamAnalyzer(format:)` too).
    public let format: AudioStreamFormat
    /// Windows whose RMS level in dBFS is below this get a gated result without inference; nil (default) = no gate.
    /// (Earshot's own: the Create ML story gates buffers below -40 dB before `analyze`; this gates windows.)
    public var gateThresholdDBFS: Float?
    /// Called with the 16 kHz mono samples the windows are cut from, as soon as the resampler produces them (before
    /// the windows they complete are scored), with the index of the first one on the stream's 16 kHz timeline:
    /// `round(segmentStart * 16000 / sampleRate)` plus its offset in the segment, so sample `i` is at stream time
    /// `i / 16000` s, within half a sample of the results' `timeRange`. Consecutive calls continue each other
    /// except after a discontinuity (a new segment). At ``completeAnalysis()`` the resampler's tail comes too, cut to
    /// the file analyzer's length. Nil (default): nothing is called.
    ///
    /// The buffer is valid only during the call; called on the analyzer's thread, it must return at once. (The
    /// daemon's clip saving keeps these samples: they are exactly what the classifier hears.) Earshot's own; no Sound
    /// Analysis counterpart.
    public var onResampledAudio: ((_ samples: UnsafeBufferPointer<Float>, _ firstSampleIndex: Int64) -> Void)?

    private final class Entry {
        let request: ClassifySoundRequest
        let observer: (any ResultsObserving)?
        let scorer: WindowScorer
        /// Start of the next window, in 16 kHz samples from the segment start.
        var nextWindowStart = 0

        init(request: ClassifySoundRequest, observer: (any ResultsObserving)?, scorer: WindowScorer) {
            self.request = request
            self.observer = observer
            self.scorer = scorer
        }
    }

    private var entries: [Entry] = []
    private let streams = ResultStreams()
    private let resampler: Resampler
    private var session: YAMNetSession?
    private let frontEnd = LogMelSpectrogram()
    /// Mono input of one buffer (reused).
    private var mono: [Float] = []
    /// 16 kHz samples of the current segment from `bufferStart` on.
    private var samples: [Float] = []
    /// Index (in 16 kHz samples from the segment start) of `samples[0]`.
    private var bufferStart = 0
    /// Frame position (input rate) where the current segment starts; nil before the first buffer.
    private var segmentStartPosition: Int64?
    /// Input frames received in the current segment.
    private var segmentInputFrames: Int64 = 0
    /// Zero-padded window for the end of the stream (reused).
    private var paddedWindow: [Float] = []
    /// Index (in 16 kHz samples from the segment start) of the first sample not yet given to ``onResampledAudio``.
    private var deliveredSamples = 0

    /// Creates an analyzer for buffers in `format` (Sound Analysis' `SNAudioStreamAnalyzer(format:)`).
    /// - Throws: ``EarshotError`` `.usage` when the sample rate is not in (0, 10000000) Hz (the bound keeps buffers
    ///   sized from the rate small) or the channel count is not in 1...1024.
    public init(format: AudioStreamFormat) throws(EarshotError) {
        guard format.sampleRate.isFinite, format.sampleRate > 0, format.sampleRate < 10_000_000 else {
            throw EarshotError(.usage, "stream sample rate \(format.sampleRate) Hz is out of range (allowed: above 0 and below 10000000 Hz)")
        }
        guard format.channelCount >= 1, format.channelCount <= 1_024 else {
            throw EarshotError(.usage, "stream channel count \(format.channelCount) is out of range (allowed: 1 to 1024)")
        }
        self.format = format
        resampler = try Resampler(inputRate: format.sampleRate, outputRate: Double(YAMNet.sampleRate))
        samples.reserveCapacity(Int(format.sampleRate) * 2)
    }

    /// Adds a request whose results go to `observer` (kept with a strong reference) and to the ``results`` streams
    /// (Sound Analysis' `SNAudioStreamAnalyzer.add(_:withObserver:)`).
    /// - Throws: ``EarshotError`` when the request's model cannot be loaded, or `.usage` when the request was
    ///   already added.
    public func add(_ request: ClassifySoundRequest, withObserver observer: any ResultsObserving) throws(EarshotError) {
        try add(request, observer: observer)
    }

    /// Adds a request whose results go only to the ``results`` streams (no observer; Apple's analyzers always
    /// take one).
    /// - Throws: as ``add(_:withObserver:)``.
    public func add(_ request: ClassifySoundRequest) throws(EarshotError) {
        try add(request, observer: nil)
    }

    /// The results of every request from now until the end of the stream (Sound Analysis has only observers; this
    /// is the tutorial's subject in Swift's own form): each access makes a new stream (one consumer each), which
    /// ends normally at ``completeAnalysis()``, or throws the error observers get with
    /// `request(_:didFailWithError:)` (a buffer that is not whole frames, a resampler failure) and ends there,
    /// while the analyzer goes on. A stream made after ``completeAnalysis()`` gets the next stream's results. With
    /// several requests, ``results(for:)`` keeps them apart. A stream buffers what its consumer has not taken yet,
    /// without limit (about 20 KB per result), so that the analysis never waits for it: consume every stream you make.
    public var results: AsyncThrowingStream<ClassificationResult, any Error> {
        streams.stream(for: nil)
    }

    /// The results of `request` alone, as ``results``.
    public func results(for request: ClassifySoundRequest) -> AsyncThrowingStream<ClassificationResult, any Error> {
        streams.stream(for: request)
    }

    private func add(_ request: ClassifySoundRequest, observer: (any ResultsObserving)?) throws(EarshotError) {
        guard !entries.contains(where: { $0.request === request }) else {
            throw EarshotError(.usage, "this request was already added to the analyzer (create another request)")
        }
        let model = try request.model()
        if session == nil || session?.model !== model {
            session = model.makeSession()
        }
        guard let session else { return }
        let entry = Entry(request: request, observer: observer,
                          scorer: WindowScorer(geometry: request.geometry, session: session, frontEnd: frontEnd))
        // A request joining mid-segment starts with the next hop boundary of the audio still buffered.
        entry.nextWindowStart = bufferStart
        entries.append(entry)
        let longest = entries.map { $0.request.geometry.windowSamples }.max() ?? 0
        samples.reserveCapacity(longest + Int(format.sampleRate))
    }

    /// Removes a request; its observer gets no more calls (Sound Analysis' `removeRequest(_:)`).
    public func removeRequest(_ request: ClassifySoundRequest) {
        entries.removeAll { $0.request === request }
    }

    /// Removes every request (Sound Analysis' `removeAllRequests()`).
    public func removeAllRequests() {
        entries.removeAll()
    }

    /// Analyzes a buffer of interleaved samples (`[frames, channelCount]`, full scale ±1) that starts at frame
    /// `position` of the stream (in frames at the input sample rate; Sound Analysis'
    /// `analyze(_:atAudioFramePosition:)`, which takes an `AVAudioPCMBuffer`). Samples are sanitized first
    /// (``SampleSanitizer``: NaN -> 0, beyond ±1000 including ±inf -> ±1000).
    ///
    /// Results of the windows this buffer completes go to the observers before the call returns. A `position` other
    /// than the end of the previous buffer starts a new segment (see the type's documentation). A buffer whose
    /// sample count is not a multiple of the channel count is refused: each observer gets
    /// `request(_:didFailWithError:)` with a `.usage` error and the buffer is ignored.
    public func analyze(_ buffer: [Float], atAudioFramePosition position: Int64) {
        buffer.withUnsafeBufferPointer { analyze($0, atAudioFramePosition: position) }
    }

    /// Analyzes a buffer of interleaved samples without copying it (Sound Analysis'
    /// `analyze(_:atAudioFramePosition:)`); see ``analyze(_:atAudioFramePosition:)-([Float],_)``.
    public func analyze(_ buffer: UnsafeBufferPointer<Float>, atAudioFramePosition position: Int64) {
        let channels = format.channelCount
        guard buffer.count % channels == 0 else {
            fail(EarshotError(.usage, "an audio buffer of \(buffer.count) samples is not a whole number of \(channels)-channel frames (buffer ignored)"))
            return
        }
        let frames = buffer.count / channels
        guard frames > 0 else { return }
        if let start = segmentStartPosition {
            if position != start + segmentInputFrames {
                startSegment(at: position)
            }
        } else {
            segmentStartPosition = position
        }
        segmentInputFrames += Int64(frames)

        do {
            // Sanitized here too (files and capture already are): a caller's NaN would spoil every window it
            // touches, and the resampler would spread it to its neighbours.
            mono.removeAll(keepingCapacity: true)
            if channels == 1 {
                mono.append(contentsOf: buffer)
                mono.withUnsafeMutableBufferPointer { SampleSanitizer.sanitize($0.baseAddress!, count: $0.count) }
            } else {
                let divisor = Float(channels)
                for frame in 0..<frames {
                    var sum: Float = 0
                    for channel in 0..<channels { sum += SampleSanitizer.sanitized(buffer[frame * channels + channel]) }
                    mono.append(sum / divisor)
                }
            }
            try mono.withUnsafeBufferPointer { (mono) throws(EarshotError) in
                try resampler.process(mono, appendingTo: &samples)
            }
        } catch {
            fail(error)
            startSegment(at: position + Int64(frames))
            return
        }
        deliverResampledAudio()
        emitFullWindows()
        discardConsumedSamples()
    }

    /// Ends the stream (Sound Analysis' `completeAnalysis()`): flushes the resampler, scores the remaining audio in
    /// zero-padded windows (as the file analyzer pads a file's end), calls `requestDidComplete` on each observer,
    /// ends the ``results`` streams, and resets for a new stream.
    public func completeAnalysis() {
        if segmentStartPosition != nil {
            do {
                try resampler.flush(appendingTo: &samples)
            } catch {
                fail(error)
            }
            // The file analyzer's length: round(frames * 16000 / rate).
            let expected = Int((Double(segmentInputFrames) * Double(YAMNet.sampleRate) / format.sampleRate).rounded(.toNearestOrAwayFromZero))
            let have = bufferStart + samples.count
            if have > expected {
                samples.removeLast(min(samples.count, have - expected))
            }
            deliverResampledAudio()
            let total = expected
            for entry in entries {
                let geometry = entry.request.geometry
                let windows = geometry.windowCount(sampleCount: total)
                while entry.nextWindowStart < windows * geometry.hopSamples {
                    emitPaddedWindow(entry, streamLength: total)
                    entry.nextWindowStart += geometry.hopSamples
                }
            }
        }
        for entry in entries {
            entry.observer?.requestDidComplete(entry.request)
        }
        streams.finishAll()
        startSegment(at: nil)
    }

    // MARK: - Internals

    /// A discontinuity (or the end of a stream, `position == nil`): drop the partial audio, reset the resampler and
    /// count time from `position`.
    private func startSegment(at position: Int64?) {
        segmentStartPosition = position
        segmentInputFrames = 0
        samples.removeAll(keepingCapacity: true)
        bufferStart = 0
        deliveredSamples = 0
        for entry in entries { entry.nextWindowStart = 0 }
        do {
            try resampler.reset()
        } catch {
            fail(error)
        }
    }

    /// Gives ``onResampledAudio`` the samples it has not had yet.
    private func deliverResampledAudio() {
        guard let onResampledAudio else { return }
        let end = bufferStart + samples.count
        guard end > deliveredSamples, let segmentStart = segmentStartPosition else { return }
        let first = max(deliveredSamples, bufferStart)
        let segmentIndex = Int64((Double(segmentStart) * Double(YAMNet.sampleRate) / format.sampleRate)
            .rounded(.toNearestOrAwayFromZero))
        samples.withUnsafeBufferPointer { all in
            onResampledAudio(UnsafeBufferPointer(rebasing: all[(first - bufferStart)...]), segmentIndex + Int64(first))
        }
        deliveredSamples = end
    }

    private func emitFullWindows() {
        let available = bufferStart + samples.count
        for entry in entries {
            let geometry = entry.request.geometry
            while entry.nextWindowStart + geometry.windowSamples <= available {
                let offset = entry.nextWindowStart - bufferStart
                samples.withUnsafeBufferPointer { all in
                    let window = UnsafeBufferPointer(rebasing: all[offset..<(offset + geometry.windowSamples)])
                    deliver(entry, window: window)
                }
                entry.nextWindowStart += geometry.hopSamples
            }
        }
    }

    /// The window at `entry.nextWindowStart`, zeros after the end of the buffered audio; `streamLength` (16 kHz
    /// samples of the segment, the file analyzer's length) is where the audio ends: a longer window's score averages
    /// only its patches before it, as the file analyzer's last window does.
    private func emitPaddedWindow(_ entry: Entry, streamLength: Int) {
        let length = entry.request.geometry.windowSamples
        if paddedWindow.count != length {
            paddedWindow = [Float](repeating: 0, count: length)
        }
        let offset = entry.nextWindowStart - bufferStart
        for index in 0..<length {
            let source = offset + index
            paddedWindow[index] = source >= 0 && source < samples.count ? samples[source] : 0
        }
        let realSamples = max(0, streamLength - entry.nextWindowStart)
        paddedWindow.withUnsafeBufferPointer { deliver(entry, window: $0, realSamples: realSamples) }
    }

    private func deliver(_ entry: Entry, window: UnsafeBufferPointer<Float>, realSamples: Int = .max) {
        let start = Double(segmentStartPosition ?? 0) / format.sampleRate
            + Double(entry.nextWindowStart) / Double(YAMNet.sampleRate)
        let range = TimeRange(start: start, duration: entry.request.windowDuration)
        let level = ClassificationResult.level(of: window)
        let result: ClassificationResult
        if let gate = gateThresholdDBFS, level < gate {
            result = .gated(timeRange: range, levelDBFS: level)
        } else {
            let began = DispatchTime.now().uptimeNanoseconds
            let scored = entry.scorer.score(window: window, realSamples: realSamples)
            var classified = ClassificationResult.scored(
                by: entry.request, timeRange: range, yamnetScores: scored.scores, embedding: scored.embedding,
                yamnetLabels: entry.scorer.labels, levelDBFS: level)
            classified.inferenceDuration = Double(DispatchTime.now().uptimeNanoseconds - began) / 1e9
            result = classified
        }
        entry.observer?.request(entry.request, didProduce: result)
        streams.yield(result, of: entry.request)
    }

    /// Drops samples no request needs any more (before the earliest next window start).
    private func discardConsumedSamples() {
        let needed = entries.map(\.nextWindowStart).min() ?? (bufferStart + samples.count)
        let drop = min(samples.count, needed - bufferStart)
        if drop > 0 {
            samples.removeFirst(drop)
            bufferStart += drop
        }
    }

    private func fail(_ error: EarshotError) {
        for entry in entries {
            entry.observer?.request(entry.request, didFailWithError: error)
        }
        streams.failAll(with: error)
    }
}
