import Synchronization
import EarshotSupport

/// The analyzers' `results` streams: hands each result to every stream made for it, and ends the streams when the
/// analysis ends (normally, with a request's failure, or with `CancellationError` on a cancel).
///
/// A stream made while no analysis runs belongs to the next one; one made during an analysis gets that analysis's
/// results from then on. Each stream buffers what its consumer has not taken yet (results are delivered after
/// each round of windows, at most a few hundred at a time); on a cancel, what is buffered is dropped: the consumer
/// gets `CancellationError` at its next `next()`, never a result the analyzer made before it was cancelled.
///
/// - Important: Thread-safe: the analysis thread yields, any thread makes streams and cancels. The subscribers sit in
///   a `Mutex`; continuations are resumed under it, which never blocks (they buffer without limit).
package final class ResultStreams: Sendable {
    private struct Subscriber {
        /// Only this request's results, or every request's when nil.
        let request: ObjectIdentifier?
        let continuation: AsyncThrowingStream<ClassificationResult, any Error>.Continuation
        let cancelled: CancelFlag
    }

    private struct State {
        var subscribers: [Int: Subscriber] = [:]
        var nextID = 0
    }

    private let state = Mutex(State())

    package init() {}

    /// Set when the analysis a stream belongs to was cancelled: the stream then drops the results it buffered.
    private final class CancelFlag: Sendable {
        private let value = Atomic<Bool>(false)
        var isSet: Bool { value.load(ordering: .acquiring) }
        func set() { value.store(true, ordering: .releasing) }
    }

    /// The iterator of a stream's buffer, used by one consumer at a time (the outer stream's `next()` calls are
    /// serial: an `AsyncThrowingStream` built with `unfolding` has a single consumer).
    private final class Source: @unchecked Sendable {
        var iterator: AsyncThrowingStream<ClassificationResult, any Error>.AsyncIterator
        init(_ stream: AsyncThrowingStream<ClassificationResult, any Error>) { iterator = stream.makeAsyncIterator() }
    }

    /// A new stream of the results of `request` (every request's when nil).
    package func stream(for request: ClassifySoundRequest?) -> AsyncThrowingStream<ClassificationResult, any Error> {
        let (buffer, continuation) = AsyncThrowingStream<ClassificationResult, any Error>.makeStream()
        let cancelled = CancelFlag()
        let id = state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            state.subscribers[id] = Subscriber(
                request: request.map(ObjectIdentifier.init), continuation: continuation, cancelled: cancelled)
            return id
        }
        // The consumer stopped (its task was cancelled, or it dropped the stream): forget it.
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        let source = Source(buffer)
        return AsyncThrowingStream(unfolding: {
            if cancelled.isSet { throw CancellationError() }
            let result = try await source.iterator.next()
            if cancelled.isSet { throw CancellationError() }
            return result
        })
    }

    /// Gives `result` of `request` to the streams that want it.
    package func yield(_ result: ClassificationResult, of request: ClassifySoundRequest) {
        let id = ObjectIdentifier(request)
        state.withLock { state in
            for subscriber in state.subscribers.values where subscriber.request == nil || subscriber.request == id {
                subscriber.continuation.yield(result)
            }
        }
    }

    /// `request` failed: its streams and the streams of every request end with `error`.
    package func fail(_ request: ClassifySoundRequest, with error: EarshotError) {
        let id = ObjectIdentifier(request)
        end { $0.request == nil || $0.request == id } with: { $0.continuation.finish(throwing: error) }
    }

    /// Every request failed (or the stream analyzer reported an error): every stream ends with `error`.
    package func failAll(with error: EarshotError) {
        end { _ in true } with: { $0.continuation.finish(throwing: error) }
    }

    /// The analysis ended: every stream ends normally.
    package func finishAll() {
        end { _ in true } with: { $0.continuation.finish() }
    }

    /// The analysis was cancelled: every stream drops what it buffered and throws `CancellationError`.
    package func cancelAll() {
        end { _ in true } with: {
            $0.cancelled.set()
            $0.continuation.finish(throwing: CancellationError())
        }
    }

    private func end(_ which: (Subscriber) -> Bool, with action: (Subscriber) -> Void) {
        let ended = state.withLock { state in
            let ended = state.subscribers.filter { which($0.value) }
            for id in ended.keys { state.subscribers.removeValue(forKey: id) }
            return Array(ended.values)
        }
        // Outside the lock: `finish` runs `onTermination`, which takes it.
        for subscriber in ended { action(subscriber) }
    }
}
