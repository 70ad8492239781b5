import Dispatch
import Synchronization
import EarshotSupport

/// Hands items (log lines, journal entries) to one writer on a serial queue of its own, so that whoever hands one
/// over never waits for where they go: a pipe nobody reads, a terminal stopped with Ctrl-S, a journal that does not
/// read its socket hold only the writer.
///
/// At most ``pendingLimitBytes`` of items wait for the writer (the item being written counts until it is written); an
/// item that does not fit is dropped whole and counted (an item larger than the limit is taken when nothing waits).
/// Items are written in the order they were handed over, each by one call of `deliver`. The writer is *behind* from
/// the first drop until it has written everything waiting; with `caughtUp`, it then writes that item, made from the
/// number of items dropped since the last such item, once.
///
/// - Important: Thread-safe: ``write(_:bytes:)`` takes a lock and returns at once, from any thread. `deliver` runs
///   on the writer's queue only, one item at a time.
package final class BoundedWriter<Item: Sendable>: Sendable {
    /// What became of an item handed to ``write(_:bytes:)``.
    package enum Outcome: Sendable, Equatable {
        case queued
        /// Dropped while the writer was behind already.
        case dropped
        /// The first item dropped since the writer was last caught up; `total`: items dropped since start.
        case droppedFirst(total: Int)
    }

    private struct State {
        /// Bytes of items handed to the writer's queue and not written yet.
        var pendingBytes = 0
        /// Items dropped since start.
        var dropped = 0
        /// Items dropped since `caughtUp` last said how many.
        var droppedUnsaid = 0
        /// Set at the first drop; cleared when the writer has written everything waiting.
        var behind = false
    }

    /// Bytes of items that may wait before further items are dropped.
    package let pendingLimitBytes: Int
    private let queue: DispatchQueue
    private let state = Mutex(State())
    private let deliver: @Sendable (Item) -> Void
    private let caughtUp: (@Sendable (_ dropped: Int) -> Item)?

    /// - Parameters:
    ///   - label: the writer queue's label (`earshot.journal.writer`).
    ///   - pendingLimitBytes: bytes that may wait.
    ///   - caughtUp: the item to write once the writer has caught up after drops, given how many were dropped since
    ///     it last said so (nil: nothing is written).
    ///   - deliver: writes one item; may block (that is what the writer is for).
    package init(
        label: String, pendingLimitBytes: Int, caughtUp: (@Sendable (_ dropped: Int) -> Item)? = nil,
        deliver: @escaping @Sendable (Item) -> Void
    ) {
        self.pendingLimitBytes = pendingLimitBytes
        self.caughtUp = caughtUp
        self.deliver = deliver
        queue = DispatchQueue(label: label)
    }

    /// Queues `item`, of `size` bytes, for the writer, or drops it when ``pendingLimitBytes`` would be passed;
    /// returns at once.
    @discardableResult
    package func write(_ item: Item, bytes size: Int) -> Outcome {
        let outcome = state.withLock { state -> Outcome in
            guard state.pendingBytes > 0, state.pendingBytes + size > pendingLimitBytes else {
                state.pendingBytes += size
                return .queued
            }
            state.dropped += 1
            state.droppedUnsaid += 1
            if state.behind { return .dropped }
            state.behind = true
            return .droppedFirst(total: state.dropped)
        }
        guard outcome == .queued else { return outcome }
        queue.async { [self] in
            deliver(item)
            let note = state.withLock { state -> Item? in
                state.pendingBytes -= size
                guard state.pendingBytes == 0 else { return nil }
                state.behind = false
                guard let caughtUp, state.droppedUnsaid > 0 else { return nil }
                defer { state.droppedUnsaid = 0 }
                return caughtUp(state.droppedUnsaid)
            }
            if let note { deliver(note) }
        }
        return outcome
    }

    /// Items dropped since start.
    package var dropped: Int { state.withLock { $0.dropped } }

    /// Waits until the items handed over before have been written, at most `patience`; returns whether they were.
    @discardableResult
    package func flush(patience: DispatchTimeInterval) -> Bool {
        let written = DispatchSemaphore(value: 0)
        queue.async { written.signal() }
        return written.wait(timeout: .now() + patience) == .success
    }
}

/// Writes whole lines to a descriptor (standard output, standard error) on a queue of its own (a ``BoundedWriter``),
/// so that whoever hands it a line never waits for the descriptor: a pipe nobody reads, a terminal stopped with
/// Ctrl-S, a log collector that hangs hold only the writer.
///
/// At most ``pendingLimitBytes`` of lines wait for the descriptor; a line that does not fit is dropped whole and
/// counted (a line longer than the limit is taken when nothing waits). Lines are written in the order they were
/// handed over, each whole: a line is either queued and written to its end (the writer loops over partial writes,
/// retrying `EINTR`) or dropped, never cut. The writer is *behind* from the first drop until it has written everything
/// waiting; with `caughtUpLine`, it then writes that line, given the number of lines dropped since the last such
/// line, once (`earshotd: 12 log lines were dropped: ...`).
///
/// - Important: Thread-safe: ``write(_:)`` takes a lock and returns at once, from any thread.
package final class LineWriter: Sendable {
    /// What became of a line handed to ``write(_:)``.
    package typealias Outcome = BoundedWriter<String>.Outcome

    private let writer: BoundedWriter<String>

    /// Bytes of lines that may wait before further lines are dropped.
    package var pendingLimitBytes: Int { writer.pendingLimitBytes }

    /// - Parameters:
    ///   - descriptor: where the lines go; the caller keeps it open.
    ///   - label: the writer queue's label (`earshot.stdout.writer`).
    ///   - pendingLimitBytes: bytes that may wait (``StandardOutputSink/pendingLimitBytes``, 16 KiB).
    ///   - caughtUpLine: the line to write once the writer has caught up after drops, given how many were dropped
    ///     since it last said so (nil: nothing is written; standard output's drops go out as `output_behind`).
    package init(
        descriptor: Int32, label: String, pendingLimitBytes: Int,
        caughtUpLine: (@Sendable (_ dropped: Int) -> String)? = nil
    ) {
        writer = BoundedWriter(label: label, pendingLimitBytes: pendingLimitBytes, caughtUp: caughtUpLine) { line in
            _ = writeAll(descriptor, line)  // closed (EPIPE, EBADF): nobody to tell
        }
    }

    /// Queues `line` (which ends with its newline) for the descriptor, or drops it when ``pendingLimitBytes`` would be
    /// passed; returns at once.
    @discardableResult
    package func write(_ line: String) -> Outcome {
        writer.write(line, bytes: line.utf8.count)
    }

    /// Lines dropped since start.
    package var droppedLines: Int { writer.dropped }

    /// Waits until the lines handed over before have been written, at most `patience`; returns whether they were.
    @discardableResult
    package func flush(patience: DispatchTimeInterval) -> Bool {
        writer.flush(patience: patience)
    }
}
