import Foundation
import Synchronization
import Testing
import Earshot
import EarshotDetection
import EarshotOutputs

/// The output router: values in from any thread, each sink on its own bounded queue, stop in reverse order.
@Suite("OutputRouter: a slow sink never delays analysis or another sink")
struct OutputRouterTests {
    /// A sink that records what it got (`deliver`/`stop`), optionally blocking in `deliver` until released.
    final class RecordingSink: OutputSink, @unchecked Sendable {
        let name: String
        let log: Mutex<[String]>
        let stops: Journal
        let gate: DispatchSemaphore?

        final class Journal: Sendable {
            let entries = Mutex<[String]>([])
            func add(_ entry: String) { entries.withLock { $0.append(entry) } }
            var all: [String] { entries.withLock { $0 } }
        }

        let wantsWindows: Bool

        init(name: String, stops: Journal, blocked: Bool = false, wantsWindows: Bool = false) {
            self.wantsWindows = wantsWindows
            self.name = name
            self.stops = stops
            log = Mutex([])
            gate = blocked ? DispatchSemaphore(value: 0) : nil
        }

        func accepts(_ output: DaemonOutput) -> Bool {
            if case .window = output { return wantsWindows }
            return true
        }

        func start(reportHealth: @escaping @Sendable (HealthEvent) -> Void) { stops.add("start \(name)") }

        func deliver(_ output: RoutedOutput) {
            gate?.wait()
            let text: String = switch output.output {
            case .detection(let event): "\(event.group) \({ if case .onset = event { "onset" } else { "end" } }())"
            case .health(let health): "health \(health.state.rawValue) \(health.details["output"]?.stringValue ?? "")"
            case .window(let result): "window \(result.timeRange.start)"
            default: "other"
            }
            log.withLock { $0.append(text) }
        }

        func stop() { stops.add("stop \(name)") }

        var delivered: [String] { log.withLock { $0 } }
    }

    static func onset(_ group: String) -> DaemonOutput {
        .detection(.onset(.init(group: group, classLabel: "x", confidence: 0.9, start: 1, decisionTime: 1.5)))
    }

    @Test("a blocked sink loses what exceeds its queue (counted, said once); the other sink gets everything in order")
    func slowSink() throws {
        let journal = RecordingSink.Journal()
        let slow = RecordingSink(name: "slow", stops: journal, blocked: true)
        let fast = RecordingSink(name: "fast", stops: journal)
        var settings = OutputRouter.Settings()
        settings.queueLimit = 4
        let router = OutputRouter(sinks: [slow, fast], settings: settings)
        router.start()
        // Routing returns at once although `slow` is stuck in its first delivery: done on another thread, waited
        // for with a deadline, so a router that blocked would fail here instead of hanging. Each output is routed
        // once `fast` has the one before, so only `slow` falls behind.
        let routed = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            for index in 1...10 {
                router.route(Self.onset("g\(index)"))
                _ = TestWait.until(seconds: 5) { fast.delivered.last == "g\(index) onset" }
            }
            routed.signal()
        }
        #expect(routed.wait(timeout: .now() + 30) == .success)
        #expect(TestWait.until(seconds: 5) { fast.delivered.count == 11 })
        #expect(fast.delivered == ["g1 onset", "g2 onset", "g3 onset", "g4 onset", "health output_behind slow",
                                   "g5 onset", "g6 onset", "g7 onset", "g8 onset", "g9 onset", "g10 onset"])
        #expect(slow.delivered.isEmpty)
        for _ in 0..<4 { slow.gate?.signal() }
        router.stop()
        #expect(slow.delivered == ["g1 onset", "g2 onset", "g3 onset", "g4 onset"])
        #expect(router.statistics == [
            .init(name: "slow", delivered: 4, dropped: 7),  // g5...g10 and the health event about itself
            .init(name: "fast", delivered: 11, dropped: 0),
        ])
        // Started in order, stopped in reverse; nothing is routed after stop.
        #expect(journal.all == ["start slow", "start fast", "stop fast", "stop slow"])
        router.route(Self.onset("late"))
        router.flush()
        #expect(fast.delivered.count == 11)
    }

    @Test("stop delivers everything routed before it, then stops each sink once")
    func stopDrains() {
        let journal = RecordingSink.Journal()
        let sink = RecordingSink(name: "only", stops: journal)
        let router = OutputRouter(sinks: [sink])
        router.start()
        for index in 1...500 { router.route(Self.onset("g\(index)")) }
        router.stop()
        router.stop()
        #expect(sink.delivered.count == 500)
        #expect(sink.delivered.last == "g500 onset")
        #expect(journal.all == ["start only", "stop only"])
    }
}

extension OutputRouterTests {
    static func window(_ start: Double) -> DaemonOutput {
        .window(ClassificationResult(
            timeRange: TimeRange(start: start, duration: 0.96), classifications: [], scores: [], levelDBFS: -40,
            isGated: true))
    }

    @Test("windows reach a sink that reads them in order with the events, held back until an event or 32 windows")
    func windowsAreHeldBack() {
        let journal = RecordingSink.Journal()
        let history = RecordingSink(name: "history", stops: journal, wantsWindows: true)
        let socket = RecordingSink(name: "socket", stops: journal)
        let router = OutputRouter(sinks: [socket, history])
        router.start()
        router.route(Self.window(0))
        router.route(Self.window(0.48))
        usleep(50_000)
        #expect(history.delivered.isEmpty)  // held: nothing woke the history's queue yet
        router.route(Self.onset("baby_cry"))
        router.route(Self.window(0.96))
        router.flush()
        #expect(history.delivered == ["window 0.0", "window 0.48", "baby_cry onset", "window 0.96"])
        #expect(socket.delivered == ["baby_cry onset"])
        for index in 0..<OutputRouter.windowBatch { router.route(Self.window(10 + Double(index))) }
        #expect(TestWait.until(seconds: 5) { history.delivered.count == 4 + OutputRouter.windowBatch })
        router.stop()
    }
}

enum TestWait {
    static func until(seconds: Double, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            usleep(2_000)
        }
        return condition()
    }
}

/// A local sink that does not finish must not hold the others' stop (audit 13 #3), and standard output that nobody
/// reads must not hold anything.
extension OutputRouterTests {
    @Test("a local sink stuck in a delivery is left behind after its patience: the others get everything and stop in reverse order, stop returns its name, and its own stop runs once it is released")
    func stuckSinkLeftBehind() throws {
        let journal = RecordingSink.Journal()
        let socket = RecordingSink(name: "socket", stops: journal)
        let stuck = RecordingSink(name: "stuck", stops: journal, blocked: true)
        let history = RecordingSink(name: "history", stops: journal)
        let router = OutputRouter(sinks: [socket, stuck, history])
        router.start()
        router.route(Self.onset("g1"))
        router.route(Self.onset("g2"))
        // On another thread, waited for with a deadline: a stop that waited for `stuck` fails here instead of hanging.
        let leftBehind = Mutex<[String]?>(nil)
        let stopped = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let names = router.stop(localPatience: .milliseconds(200))
            leftBehind.withLock { $0 = names }
            stopped.signal()
        }
        #expect(stopped.wait(timeout: .now() + 30) == .success)
        #expect(leftBehind.withLock { $0 } == ["stuck"])
        #expect(socket.delivered == ["g1 onset", "g2 onset"])
        #expect(history.delivered == ["g1 onset", "g2 onset"])
        #expect(journal.all == ["start socket", "start stuck", "start history", "stop history", "stop socket"])
        // Released, it delivers what it had and then stops, once.
        stuck.gate?.signal()
        stuck.gate?.signal()
        #expect(TestWait.until(seconds: 10) { journal.all.count == 6 })
        #expect(journal.all.last == "stop stuck")
        #expect(stuck.delivered == ["g1 onset", "g2 onset"])
        #expect(router.stop(localPatience: .milliseconds(200)) == [])  // idempotent
    }

    @Test("standard output nobody reads (a 4 KiB pipe): deliver never waits; lines beyond 16 KiB waiting are dropped, said once (output_behind, output stdout, dropped 1); stop returns; the pipe holds whole lines, in order")
    func stuckStandardOutput() throws {
        // A write into the pipe once its reader is gone fails with EPIPE instead of killing the test process.
        signal(SIGPIPE, SIG_IGN)
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        #expect(fcntl(ends[1], 1031 /* F_SETPIPE_SZ */, 4096) == 4096)
        // The write end is left open: the sink's writer may still be inside write(2) on it after the test, and a
        // closed number could be reused by another test's file.
        defer { close(ends[0]) }
        let sink = StandardOutputSink(descriptor: ends[1])
        let reports = Mutex<[HealthEvent]>([])
        sink.start { health in reports.withLock { $0.append(health) } }
        let delivered = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            for index in 1...200 {
                sink.deliver(RoutedOutput(output: Self.onset("g\(index)"), time: Date(timeIntervalSince1970: 0)))
            }
            delivered.signal()
        }
        #expect(delivered.wait(timeout: .now() + 30) == .success)
        #expect(TestWait.until(seconds: 10) { !reports.withLock { $0 }.isEmpty })
        let stopped = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            sink.stop()
            stopped.signal()
        }
        #expect(stopped.wait(timeout: .now() + 30) == .success)
        #expect(reports.withLock { $0 } == [StandardOutputSink.behindEvent(dropped: 1)])
        #expect(StandardOutputSink.behindEvent(dropped: 1).message == "the stdout output is behind: 16384 bytes of lines wait for standard output, which does not take them (is anyone reading it?); further lines are dropped for it (1 so far) while the analysis and the other outputs go on")
        var bytes = [UInt8](repeating: 0, count: 8192)
        let count = read(ends[0], &bytes, bytes.count)
        #expect(count > 3000 && count <= 4096, "\(count)")
        let text = String(decoding: bytes[0..<max(0, count)], as: UTF8.self)
        #expect(text.hasSuffix("}\n"))
        let lines = text.split(separator: "\n")
        for (index, line) in lines.enumerated() {
            #expect(line.hasPrefix("{\"type\":\"detection\",\"group\":\"g\(index + 1)\","), "\(line)")
        }
    }
}
