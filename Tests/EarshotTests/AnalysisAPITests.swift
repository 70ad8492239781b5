import Foundation
import Synchronization
import Testing
import Earshot

/// The Sound Analysis API as its users know it (issue 16): classifier identifiers, the window constraint,
/// `knownClassifications`, async analysis with `results` streams, and `cancelAnalysis()`.
@Suite("Analysis API")
struct AnalysisAPITests {
    // MARK: Requests

    @Test("ClassifySoundRequest(classifierIdentifier: .version1) is the built-in request; unknown identifiers are refused")
    func classifierIdentifier() throws {
        let apple = try ClassifySoundRequest(classifierIdentifier: .version1)
        let ours = try ClassifySoundRequest(classifier: .builtIn)
        #expect(apple.classifier == ours.classifier)
        #expect(apple.classifier == .builtIn)
        #expect(apple.classifierIdentifier == .version1 && ours.classifierIdentifier == .version1)
        #expect(apple.windowDuration == 0.96 && apple.overlapFactor == 0.5)
        #expect(apple.geometry == ours.geometry)
        let longer = try ClassifySoundRequest(classifierIdentifier: .version1, windowDuration: 1.44, overlapFactor: 0.75)
        #expect(longer.windowDuration == 1.44 && longer.overlapFactor == 0.75)
        #expect(ClassifierIdentifier.version1.rawValue == "version1")
        let unknown = AudioTestFiles.error { () throws(EarshotError) in
            try ClassifySoundRequest(classifierIdentifier: ClassifierIdentifier(rawValue: "version2"))
        }
        #expect(unknown?.code == .usage)
        #expect(unknown?.message == "unknown classifier identifier \"version2\" (built in: \"version1\", YAMNet)")
    }

    @Test("knownClassifications: Apple's property (521 AudioSet labels) and the throwing call give the same labels")
    func knownClassifications() throws {
        let request = try ClassifySoundRequest(classifierIdentifier: .version1)
        let labels: KnownClassifications = request.knownClassifications
        #expect(labels.count == 521)
        #expect(labels.first == "Speech")
        #expect(labels[494] == "Silence")
        #expect(Array(labels) == (try request.knownClassifications()))
        #expect(labels.contains("Laughter"))
    }

    @Test("the window constraint is a 0.96-3600 s range and every initialiser refuses what it refuses, with the exact error")
    func windowDurationConstraint() throws {
        let constraint = ClassifySoundRequest.windowDurationConstraint
        #expect(constraint.type == .durationRange(0.96...3_600))
        #expect(constraint.durationRange == 0.96...3_600)
        #expect(constraint.enumeratedDurations.isEmpty)
        #expect(try ClassifySoundRequest().windowDurationConstraint == constraint)
        for allowed in [0.96, 0.96 - 1e-10, 1.0, 1.44, 10, 3_600] {
            #expect(constraint.allows(allowed), "\(allowed)")
            #expect(throws: Never.self) { try ClassifySoundRequest(classifierIdentifier: .version1, windowDuration: allowed) }
        }
        let refused: [(Double, String)] = [
            (0.5, "windowDuration 0.5 s is out of range (allowed: 0.96 to 3600 seconds)"),
            (0.959, "windowDuration 0.959 s is out of range (allowed: 0.96 to 3600 seconds)"),
            (3_600.5, "windowDuration 3600.5 s is out of range (allowed: 0.96 to 3600 seconds)"),
            (-1, "windowDuration -1.0 s is out of range (allowed: 0.96 to 3600 seconds)"),
            (.infinity, "windowDuration inf s is out of range (allowed: 0.96 to 3600 seconds)"),
            (.nan, "windowDuration nan s is out of range (allowed: 0.96 to 3600 seconds)"),
        ]
        for (duration, message) in refused {
            #expect(!constraint.allows(duration), "\(duration)")
            let checked = AudioTestFiles.error { () throws(EarshotError) in try constraint.check(windowDuration: duration) }
            #expect(checked?.message == message)
            #expect(checked?.code == .usage)
            let apple = AudioTestFiles.error { () throws(EarshotError) in
                try ClassifySoundRequest(classifierIdentifier: .version1, windowDuration: duration)
            }
            #expect(apple?.message == message)
            let ours = AudioTestFiles.error { () throws(EarshotError) in try ClassifySoundRequest(windowDuration: duration) }
            #expect(ours?.message == message)
        }
        let enumerated = TimeDurationConstraint(.enumeratedDurations([0.96, 1.44]))
        #expect(enumerated.enumeratedDurations == [0.96, 1.44] && enumerated.durationRange == nil)
        #expect(enumerated.allows(1.44) && !enumerated.allows(1.2))
        let notListed = AudioTestFiles.error { () throws(EarshotError) in try enumerated.check(windowDuration: 1.0) }
        #expect(notListed?.message == "windowDuration 1.0 s is not allowed (allowed: 0.96, 1.44 seconds)")
    }

    // MARK: Async results

    @Test("async analysis: the results stream and the observer get the same results as a blocking analysis, on every golden", .needsShared)
    func asyncResultsOnGoldens() async throws {
        for golden in try AudioTestFiles.goldens() {
            let url = TestPaths.sharedFile("audio/" + golden.source)
            let request = try ClassifySoundRequest(classifierIdentifier: .version1)
            let blocking = try AnalysisTestSupport.fileResults(url, request: request)
            #expect(blocking.errors.isEmpty && blocking.completions == 1)

            let analyzer = try AudioFileAnalyzer(url: url)
            analyzer.maximumThreads = 2
            let observer = CollectingObserver()
            try analyzer.add(request, withObserver: observer)
            let all = analyzer.results, mine = analyzer.results(for: request)
            async let streamed = Self.collect(all)
            async let streamedForRequest = Self.collect(mine)
            try await analyzer.analyze()
            let (results, resultsForRequest) = try await (streamed, streamedForRequest)
            #expect(observer.results.count == blocking.results.count, "\(golden.stem)")
            #expect(observer.results == blocking.results, "\(golden.stem): observer during async analysis")
            #expect(results == observer.results, "\(golden.stem): results stream")
            #expect(resultsForRequest == observer.results, "\(golden.stem): results(for:) stream")
            #expect(observer.completions == 1 && observer.errors.isEmpty)
        }
    }

    @Test("stream analyzer: its results stream equals its observer's results and ends at completeAnalysis()", .needsShared)
    func streamAnalyzerResults() async throws {
        let golden = try #require(try AudioTestFiles.goldens().first)
        let waveform = try AudioTestFiles.readFloat32(TestPaths.sharedFile("golden/\(golden.stem).wave16k.f32"))
        let analyzer = try AudioStreamAnalyzer(format: AudioStreamFormat(sampleRate: 16_000, channelCount: 1))
        let request = try ClassifySoundRequest(classifierIdentifier: .version1)
        let observer = CollectingObserver()
        try analyzer.add(request, withObserver: observer)
        let stream = analyzer.results
        async let streamed = Self.collect(stream)
        var position: Int64 = 0
        for start in stride(from: 0, to: waveform.count, by: 3_200) {
            let buffer = Array(waveform[start..<min(waveform.count, start + 3_200)])
            analyzer.analyze(buffer, atAudioFramePosition: position)
            position += Int64(buffer.count)
        }
        analyzer.completeAnalysis()
        let results = try await streamed
        #expect(!observer.results.isEmpty)
        #expect(results == observer.results)
        #expect(observer.completions == 1)
        // A stream made after the end belongs to the next stream of audio.
        let next = analyzer.results
        async let nextResults = Self.collect(next)
        analyzer.analyze(Array(waveform.prefix(16_000)), atAudioFramePosition: 0)
        analyzer.completeAnalysis()
        #expect(try await nextResults == Array(observer.results.suffix(2)))
    }

    @Test("a request added without an observer gets its results through the stream")
    func requestWithoutObserver() async throws {
        let url = try AnalysisAPIFixtures.toneFile(samples: 48_000)
        defer { try? FileManager.default.removeItem(at: url.deletingLastPathComponent()) }
        let request = try ClassifySoundRequest()
        let analyzer = try AudioFileAnalyzer(url: url)
        try analyzer.add(request)
        let stream = analyzer.results
        async let streamed = Self.collect(stream)
        try await analyzer.analyze()
        let results = try await streamed
        let blocking = try AnalysisTestSupport.fileResults(url, request: try ClassifySoundRequest())
        #expect(results.count == 6)
        #expect(results == blocking.results)
    }

    // MARK: Cancel

    @Test("cancelAnalysis() from an observer on a 10-minute file: nothing after it, no completion, within one round")
    func cancelFromObserver() throws {
        let file = try AnalysisAPIFixtures.tenMinuteFile()
        let analyzer = try AudioFileAnalyzer(url: file)
        analyzer.maximumThreads = 2
        let observer = CancellingObserver(analyzer: analyzer, cancelAt: 300)
        try analyzer.add(try ClassifySoundRequest(classifierIdentifier: .version1), withObserver: observer)
        let started = Date()
        let completed = analyzer.analyze()
        let cancelToReturn = Date().timeIntervalSince(observer.cancelledAt ?? started)
        #expect(!completed)
        #expect(observer.results == 300)
        #expect(observer.completions == 0 && observer.errors == 0)
        // 1249 windows in 10 rounds of 128: window 300 is delivered in round 2 while round 3 is being scored; rounds
        // 4 to 9 are never started.
        let statistics = analyzer.lastAnalysisStatistics
        #expect(statistics.windowsDelivered == 300)
        #expect(statistics.roundsStarted <= 4, "\(statistics)")
        #expect(statistics.windowsStarted <= 4 * 128, "\(statistics)")
        print("cancel from an observer at window 300 of 1249: \(statistics); analyze returned \(Int(cancelToReturn * 1000)) ms after cancelAnalysis()")

        // The analyzer can analyze again, completely.
        let again = CollectingObserver()
        analyzer.removeAllRequests()
        try analyzer.add(try ClassifySoundRequest(), withObserver: again)
        #expect(analyzer.analyze())
        #expect(again.results.count == 1_249 && again.completions == 1)
    }

    @Test("cancelAnalysis() from another task mid-file: analyze() throws CancellationError and the stream delivers nothing after")
    func cancelFromAnotherTask() async throws {
        let file = try AnalysisAPIFixtures.tenMinuteFile()
        let analyzer = try AudioFileAnalyzer(url: file)
        analyzer.maximumThreads = 2
        // The observer holds the analysis at window 300 until the cancel has returned, so that the cancel lands mid-file
        // whatever the machine's speed.
        let gate = HoldingObserver(holdAt: 300)
        try analyzer.add(try ClassifySoundRequest(classifierIdentifier: .version1), withObserver: gate)
        let stream = analyzer.results
        let cancelReturned = Atomic<Bool>(false)
        let consumer = Task {
            var received = 0, afterCancel = 0
            do {
                for try await _ in stream {
                    received += 1
                    if cancelReturned.load(ordering: .acquiring) { afterCancel += 1 }
                }
                return (received, afterCancel, "finished without an error")
            } catch is CancellationError {
                return (received, afterCancel, "CancellationError")
            } catch {
                return (received, afterCancel, "\(error)")
            }
        }
        let analysis = Task { try await analyzer.analyze() }
        await gate.waitUntilHeld()
        analyzer.cancelAnalysis()
        cancelReturned.store(true, ordering: .releasing)
        let cancelled = Date()
        gate.release()
        let outcome = await analysis.result
        let cancelToReturn = Date().timeIntervalSince(cancelled)
        #expect(throws: CancellationError.self) { try outcome.get() }
        let (received, afterCancel, ending) = await consumer.value
        #expect(ending == "CancellationError")
        #expect(afterCancel == 0, "results delivered after cancelAnalysis() returned")
        #expect(received <= 300)
        // The held call returns; no further observer call follows the cancel.
        #expect(gate.results == 300 && gate.completions == 0)
        let statistics = analyzer.lastAnalysisStatistics
        #expect(statistics.windowsDelivered == 300)
        #expect(statistics.roundsStarted <= 4, "\(statistics)")
        print("cancel from another task at window 300 of 1249: \(statistics); analyze returned \(Int(cancelToReturn * 1000)) ms after the observer was released")
    }

    @Test("cancelling the task that runs analyze() cancels the analysis")
    func taskCancellation() async throws {
        let file = try AnalysisAPIFixtures.tenMinuteFile()
        let analyzer = try AudioFileAnalyzer(url: file)
        let gate = HoldingObserver(holdAt: 50)
        try analyzer.add(try ClassifySoundRequest(), withObserver: gate)
        let analysis = Task { try await analyzer.analyze() }
        await gate.waitUntilHeld()
        analysis.cancel()
        gate.release()
        await #expect(throws: CancellationError.self) { try await analysis.value }
        #expect(gate.results == 50 && gate.completions == 0)
        #expect(analyzer.lastAnalysisStatistics.roundsStarted <= 2)
    }

    @Test("analyses of one analyzer run one at a time; one cancelled while it waits delivers nothing")
    func queuedAnalysisCancelled() async throws {
        let url = try AnalysisAPIFixtures.toneFile(samples: 48_000)
        defer { try? FileManager.default.removeItem(at: url.deletingLastPathComponent()) }
        let analyzer = try AudioFileAnalyzer(url: url)
        let gate = HoldingObserver(holdAt: 2)
        try analyzer.add(try ClassifySoundRequest(), withObserver: gate)
        let first = Task { try await analyzer.analyze() }
        await gate.waitUntilHeld()
        // The second waits for the first; its task is cancelled meanwhile, so it never starts.
        let second = Task { try await analyzer.analyze() }
        try await Task.sleep(for: .milliseconds(50))
        second.cancel()
        gate.release()
        try await first.value
        await #expect(throws: CancellationError.self) { try await second.value }
        #expect(gate.results == 6 && gate.completions == 1)
    }

    @Test("cancelAnalysis() with no analysis running has no effect; analyze(completionHandler:) reports completion")
    func cancelWhenIdleAndCompletionHandler() async throws {
        let url = try AnalysisAPIFixtures.toneFile(samples: 32_000)
        defer { try? FileManager.default.removeItem(at: url.deletingLastPathComponent()) }
        let analyzer = try AudioFileAnalyzer(url: url)
        let observer = CollectingObserver()
        try analyzer.add(try ClassifySoundRequest(), withObserver: observer)
        analyzer.cancelAnalysis()
        let reached = await withCheckedContinuation { continuation in
            analyzer.analyze { didReachEndOfFile in continuation.resume(returning: didReachEndOfFile) }
        }
        #expect(reached)
        #expect(observer.results.count == 4 && observer.completions == 1)
    }

    static func collect(_ stream: AsyncThrowingStream<ClassificationResult, any Error>) async throws -> [ClassificationResult] {
        var all: [ClassificationResult] = []
        for try await result in stream { all.append(result) }
        return all
    }
}

/// Cancels its analyzer from inside `request(_:didProduce:)` at its `cancelAt`-th result (on the analysis thread).
final class CancellingObserver: ResultsObserving {
    let analyzer: AudioFileAnalyzer
    let cancelAt: Int
    var results = 0, completions = 0, errors = 0
    var cancelledAt: Date?

    init(analyzer: AudioFileAnalyzer, cancelAt: Int) {
        self.analyzer = analyzer
        self.cancelAt = cancelAt
    }

    func request(_ request: ClassifySoundRequest, didProduce result: ClassificationResult) {
        results += 1
        if results == cancelAt {
            cancelledAt = Date()
            analyzer.cancelAnalysis()
        }
    }
    func request(_ request: ClassifySoundRequest, didFailWithError error: EarshotError) { errors += 1 }
    func requestDidComplete(_ request: ClassifySoundRequest) { completions += 1 }
}

/// Holds the analysis thread inside its `holdAt`-th result until ``release()``; counts calls.
final class HoldingObserver: ResultsObserving, Sendable {
    private struct Counts {
        var results = 0, completions = 0
    }
    private let counts = Mutex(Counts())
    private let held = DispatchSemaphore(value: 0), released = DispatchSemaphore(value: 0)
    let holdAt: Int

    init(holdAt: Int) { self.holdAt = holdAt }

    var results: Int { counts.withLock { $0.results } }
    var completions: Int { counts.withLock { $0.completions } }

    func request(_ request: ClassifySoundRequest, didProduce result: ClassificationResult) {
        let count = counts.withLock { counts in
            counts.results += 1
            return counts.results
        }
        if count == holdAt {
            held.signal()
            released.wait()
        }
    }
    func requestDidComplete(_ request: ClassifySoundRequest) { counts.withLock { $0.completions += 1 } }

    /// Waits (off the cooperative pool) until the analysis is held.
    func waitUntilHeld() async {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                self.held.wait()
                continuation.resume()
            }
        }
    }

    func release() { released.signal() }
}

enum AnalysisAPIFixtures {
    /// `tone.wav` in a new temporary directory (the caller removes it): `samples` of a 440 Hz sine at -20 dBFS, 16 kHz.
    static func toneFile(samples: Int) throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-api-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let url = directory.appendingPathComponent("tone.wav")
        try AnalysisTestSupport.writeFloatWAV(
            AnalysisTestSupport.sine(frequency: 440, dbfs: -20, sampleRate: 16_000, count: samples), sampleRate: 16_000,
            to: url)
        return url
    }

    /// A 10-minute 16 kHz 16-bit WAV (19.2 MB): a tone whose pitch and level change every second over low noise, so
    /// that windows differ. 1249 windows with the default request. Kept in the temporary directory under one fixed
    /// name and reused by later runs (written beside it and renamed, so that concurrent runs never read half a file).
    static func tenMinuteFile() throws -> URL {
        try made.withLock { (url: inout URL?) throws -> URL in
            if let url { return url }
            let rate = 16_000, seconds = 600
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-api-ten-minutes-v1.wav")
            let size = (try? FileManager.default.attributesOfItem(atPath: path.path)[.size] as? Int) ?? nil
            if size == 44 + rate * seconds * 2 {
                url = path
                return path
            }
            var samples = [Int16](repeating: 0, count: rate * seconds)
            var noise: UInt32 = 12_345
            for second in 0..<seconds {
                let frequency = 200 + Double((second * 37) % 1_800), amplitude = 0.05 + 0.3 * Double((second * 7) % 10) / 10
                for index in 0..<rate {
                    noise = noise &* 1_664_525 &+ 1_013_904_223
                    let hiss = (Double(noise >> 8) / Double(1 << 24) - 0.5) * 0.01
                    let value = amplitude * sin(2 * Double.pi * frequency * Double(index) / Double(rate)) + hiss
                    samples[second * rate + index] = Int16(max(-1, min(1, value)) * 32_767)
                }
            }
            let data = samples.withUnsafeBytes { Array($0) }
            let partial = path.deletingLastPathComponent().appendingPathComponent(".\(path.lastPathComponent).\(getpid())")
            try AudioTestFiles.write(
                AudioTestFiles.wav(formatTag: 1, channels: 1, sampleRate: rate, bitsPerSample: 16, data: data), to: partial)
            guard rename(partial.path, path.path) == 0 else {
                throw EarshotError(.cannotCreate, "cannot rename \(partial.path) to \(path.path): errno \(errno)")
            }
            url = path
            return path
        }
    }
    private static let made = Mutex<URL?>(nil)
}

/// How long `cancelAnalysis()` takes to stop a free-running analysis: not a timed test (nothing is asserted about
/// time); run it by hand, `EARSHOT_MEASURE_CANCEL=1 swift test -c release --filter cancelLatency`, for the figures in
/// README (The Sound Analysis API).
@Suite("Analysis API measurements")
struct AnalysisAPIMeasurements {
    @Test(
        "cancel latency on a 10-minute file: cancelAnalysis() to analyze() returning, cancels at several points",
        .enabled(if: ProcessInfo.processInfo.environment["EARSHOT_MEASURE_CANCEL"] != nil,
                 "a measurement, run by hand with EARSHOT_MEASURE_CANCEL=1")
    )
    func cancelLatency() async throws {
        let file = try AnalysisAPIFixtures.tenMinuteFile()
        for round in 0..<3 {
            for delay in [0.15, 0.4, 0.7, 1.0] {
                let analyzer = try AudioFileAnalyzer(url: file)
                try analyzer.add(try ClassifySoundRequest())
                let analysis = Task { try await analyzer.analyze() }
                try await Task.sleep(for: .seconds(delay))
                let cancelled = ContinuousClock.now
                analyzer.cancelAnalysis()
                let outcome = await analysis.result
                let elapsed = ContinuousClock.now - cancelled
                let statistics = analyzer.lastAnalysisStatistics
                let ending = (try? outcome.get()) != nil ? "completed" : "cancelled"
                print("cancel latency: run \(round), cancel at \(delay) s: \(ending) after \(elapsed) (\(statistics.windowsDelivered) of 1249 windows delivered, \(statistics.roundsStarted) rounds started, \(statistics.patchesScored) of \(statistics.windowsStarted) patches scored)")
            }
        }
    }
}
