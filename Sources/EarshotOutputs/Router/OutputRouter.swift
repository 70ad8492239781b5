import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotAnalysis
import EarshotDetection

/// Everything the daemon tells the world, as values: what the detection stage produced, what the clip writer
/// saved, what a sleep session reported.
package enum DaemonOutput: Sendable {
    /// An analysis window (time range, RMS level in dBFS, scores): the history's level meter reads it.
    case window(ClassificationResult)
    /// A classifier-group onset or end.
    case detection(DetectionEvent)
    /// A smoke/CO alarm onset or end, or a low-battery chirp, from the pattern detector.
    case alarm(AlarmEvent)
    /// A health change (capture, silence, gaps, an output failing).
    case health(HealthEvent)
    /// A clip file is complete on disk.
    case clip(SavedClip)
    /// A sleep session's summary (`{"type":"sleep_report",...}`), for the socket.
    case sleepReport(JSONObject)
    /// What can be switched at run time and how it is set now (watched groups, muted groups, the sleep session):
    /// routed at start and whenever it changes, for outputs that show it (MQTT's switches and discovery).
    case controls(ControlState)
    /// The daemon's counters that no other output carries (capture xruns, audio lost, socket clients, history
    /// write errors, MQTT figures): routed once a second while `[metrics]` is on, for the metrics sink.
    case statistics(RuntimeStatistics)
    /// A test of the alert chain (`{"cmd":"test"}`, `earshot test-alert`, Home Assistant's `Test alert` button):
    /// the socket (`{"type":"test_alert","time":...}`), the journal, MQTT and the notifications carry it as they
    /// carry an event, so that one press shows whether a phone and Home Assistant hear from the daemon. No group:
    /// no detection is involved, and the history does not store it.
    case testAlert(TestAlert)
    /// A group muted or unmuted at run time (a command, or its mute ending by itself): the notifications tell the
    /// phone of a life-safety group's (``MuteChange``). The switches' state travels in ``controls(_:)``.
    case mute(MuteChange)

    /// The group whose socket subscribers get it; nil for every subscriber (health, sleep reports) and for windows.
    package var group: String? {
        switch self {
        case .detection(let event): event.group
        case .alarm(let alarm): alarm.group
        case .clip(let clip): clip.group
        case .window, .health, .sleepReport, .controls, .statistics, .testAlert, .mute: nil
        }
    }

    /// The stage's values as daemon outputs.
    package init(_ output: DetectionStage.Output) {
        switch output {
        case .window(let result): self = .window(result)
        case .detection(let event): self = .detection(event)
        case .alarm(let alarm): self = .alarm(alarm)
        case .snore(let decision): self = .detection(decision.event)
        case .health(let health): self = .health(health)
        }
    }
}

/// A test alert (``DaemonOutput/testAlert(_:)``), who asked for it, and where the network outputs report what they
/// did with it.
package struct TestAlert: Sendable, Equatable {
    /// `the event socket`, `an MQTT command`: said in the journal line.
    package var requestedBy: String
    /// Collects each `[notify]` URL's first attempt and the MQTT broker's acknowledgement for the one who asked
    /// (`earshot test-alert`); nil when nobody waits for them (Home Assistant's button).
    package var receipt: TestAlertReceipt?

    package init(requestedBy: String, receipt: TestAlertReceipt? = nil) {
        self.requestedBy = requestedBy
        self.receipt = receipt
    }

    /// The same request and the same receipt (by identity).
    package static func == (lhs: TestAlert, rhs: TestAlert) -> Bool {
        lhs.requestedBy == rhs.requestedBy && lhs.receipt === rhs.receipt
    }

    /// The `type` of its JSON object (`{"type":"test_alert","time":...}`) and its MQTT `event_type`.
    package static let type = "test_alert"
}

/// A group muted or unmuted at run time (``DaemonOutput/mute(_:)``).
package struct MuteChange: Sendable, Equatable {
    package enum Kind: Sendable, Equatable {
        /// Muted (or a mute renewed) for `minutes`, until `until` (wall-clock time).
        case muted(minutes: Int, until: Date)
        /// Unmuted by a command before its mute ended.
        case unmuted
        /// Its mute of `minutes` ended by itself.
        case ended(minutes: Int)
        /// Its mute until `until` (wall-clock time), in force when earshotd last stopped (or crashed), ended by the
        /// restart: said once at the next start (``DaemonOutput/mute(_:)``, trial 16 L2).
        case endedByRestart(until: Date)
    }

    package var group: String
    package var kind: Kind
    /// Who asked (`the event socket`, `an MQTT command`); nil for ``Kind/ended(minutes:)`` and
    /// ``Kind/endedByRestart(until:)``.
    package var requestedBy: String?

    package init(group: String, kind: Kind, requestedBy: String? = nil) {
        self.group = group
        self.kind = kind
        self.requestedBy = requestedBy
    }
}

/// The daemon's switchable state: which groups it watches, which of them are muted, whether a sleep session runs.
package struct ControlState: Sendable, Equatable {
    /// The watched label groups (and the alarm groups), in watch-list order: each has an on/off state.
    package var groups: [String]
    /// Every group whose events may be published (``groups``, `snoring` for sleep sessions, `alarm_chirp` with
    /// pattern detection): the event types an event entity lists.
    package var eventGroups: [String]
    /// Groups muted at run time: their events are not published until unmuted (or the daemon restarts).
    package var muted: Set<String>
    package var sleepActive: Bool

    package init(groups: [String], eventGroups: [String], muted: Set<String> = [], sleepActive: Bool = false) {
        self.groups = groups
        self.eventGroups = eventGroups
        self.muted = muted
        self.sleepActive = sleepActive
    }
}

/// Counters of the daemon's components at one moment, as values (see ``DaemonOutput/statistics(_:)``).
package struct RuntimeStatistics: Sendable, Equatable {
    /// Seconds of audio the detection stage has analysed since start (samples / sample rate).
    package var audioProcessedSeconds: Double = 0
    /// Capture overruns (xruns) since start.
    package var captureXruns = 0
    /// Seconds of audio lost in gaps (xruns, a reopened device) since start.
    package var audioLostSeconds: Double = 0
    /// Clients connected to the event socket now, and lines dropped for slow ones since start.
    package var socketClients = 0
    package var socketDroppedLines = 0
    /// Failed writes to the event history since start.
    package var historyWriteErrors = 0
    /// The MQTT client's figures, with `[mqtt] enabled`.
    package var mqtt: MQTTFigures?
    /// Whether audio arrives now: the capture is live (not opening, unavailable or stalled).
    package var captureLive = false
    /// The notification counters, with `[notify] url` set.
    package var notify: NotifyFigures?

    /// Notifications since start, counted per URL: accepted (HTTP 2xx), given up, dropped from a full queue.
    package struct NotifyFigures: Sendable, Equatable {
        package var sent: Int
        package var failed: Int
        package var dropped: Int

        package init(sent: Int, failed: Int, dropped: Int) {
            self.sent = sent
            self.failed = failed
            self.dropped = dropped
        }
    }

    package struct MQTTFigures: Sendable, Equatable {
        package var connected: Bool
        package var published: Int
        package var dropped: Int
        package var waiting: Int

        package init(connected: Bool, published: Int, dropped: Int, waiting: Int) {
            self.connected = connected
            self.published = published
            self.dropped = dropped
            self.waiting = waiting
        }
    }

    package init() {}
}

/// An output with the wall-clock time the router took it at: every sink writes the same `time` for it.
package struct RoutedOutput: Sendable {
    package let output: DaemonOutput
    package let time: Date
    /// True for an onset published late because its group was unmuted while the event was going on (its onset had
    /// been held back while the group was muted): its stream times are the original ones, `time` is when it went
    /// out. The socket's JSON says `"reason":"unmuted"`.
    package let announcedOnUnmute: Bool

    package init(output: DaemonOutput, time: Date, announcedOnUnmute: Bool = false) {
        self.output = output
        self.time = time
        self.announcedOnUnmute = announcedOnUnmute
    }
}

/// Where outputs go: the socket, the journal, standard output, the history (and the sinks to come).
///
/// The router calls ``deliver(_:)`` on the sink's own serial queue, one output at a time and in the order they were
/// routed, and only for outputs ``accepts(_:)`` said yes to. A sink may block or be slow there: only its own queue
/// waits (up to ``OutputRouter/Settings/queueLimit`` outputs, then they are dropped for it and counted).
package protocol OutputSink: AnyObject, Sendable {
    /// A short name for logs and drop reports (`socket`, `journal`, `history`).
    var name: String { get }
    /// Whether the sink wants `output` (analysis windows are many: only sinks that read them say yes). Called on
    /// the router's queue; must return at once.
    func accepts(_ output: DaemonOutput) -> Bool
    /// Called once, in the order the sinks were given, before any delivery. `reportHealth` routes a health event to
    /// every sink (e.g. the history cannot be written); it may be called from any thread.
    func start(reportHealth: @escaping @Sendable (HealthEvent) -> Void)
    /// One output, on the sink's queue.
    func deliver(_ output: RoutedOutput)
    /// Called once after the last delivery, in reverse order of the sinks, on the sink's queue: flush and close.
    func stop()
    /// ``stop()`` for a sink that reaches over the network (``reachesOverNetwork``), given the uptime by which it
    /// must return (``OutputRouter/stop(networkDeadline:localPatience:)``): what it cannot deliver by then it counts,
    /// logs and leaves. Default: ``stop()``.
    func stop(deadline: DispatchTime)
    /// True for a sink that delivers to another machine (HTTP notifications, an MQTT broker): a slow or silent
    /// server must not hold up the local sinks' stop (the socket's `shutdown` line). Default false.
    var reachesOverNetwork: Bool { get }
    /// True for a sink whose ``deliver(_:)`` only hands the output to a bounded queue of its own and returns at once
    /// (the event server's per-client queues): the router calls it on the routing thread, in order, sparing a
    /// queue hop and a thread wake-up per output. Default false.
    var deliversWithoutWaiting: Bool { get }
}

extension OutputSink {
    package var deliversWithoutWaiting: Bool { false }
    package var reachesOverNetwork: Bool { false }
    package func stop(deadline: DispatchTime) { stop() }
}

/// One router for every output: values in from any thread, fanned out under one lock (which keeps their order) to
/// each sink's own serial queue. The fan-out runs on the caller's thread and never waits: a router queue of its
/// own cost a thread wake-up per output, measurable in the gated daemon's CPU.
///
/// A slow or failing sink never delays analysis or another sink: each sink has a bounded queue
/// (``Settings/queueLimit`` outputs); what does not fit is dropped for that sink, counted, and said once as an
/// `output_behind` health event to the other sinks (again after it has caught up and fallen behind anew).
///
/// Order: ``start()`` starts the sinks in the order given; ``stop(networkDeadline:localPatience:)`` waits until every
/// output routed before it has been delivered, then stops the sinks that reach over the network together, for at
/// most until the deadline, and then the local ones in reverse order (so the socket, given first, closes last, after
/// the history has committed, whatever a webhook or a broker does), waiting for each local one at most its patience.
package final class OutputRouter: Sendable {
    package struct Settings: Sendable {
        /// Outputs waiting for one sink before further ones are dropped for it. 4096: about 30 minutes of windows
        /// at the default 0.48 s hop, far more events than a house makes.
        package var queueLimit: Int = 4096

        package init() {}
    }

    /// Counters of one sink.
    package struct SinkStatistics: Sendable, Equatable {
        package var name: String
        package var delivered: Int
        package var dropped: Int

        package init(name: String, delivered: Int, dropped: Int) {
            self.name = name
            self.delivered = delivered
            self.dropped = dropped
        }
    }

    private final class Lane: Sendable {
        let sink: any OutputSink
        let queue: DispatchQueue
        let pending = Atomic<Int>(0)
        let delivered = Atomic<Int>(0)
        let dropped = Atomic<Int>(0)
        /// Set while the sink is behind and that has been reported; cleared when its queue has emptied.
        let behind = Atomic<Bool>(false)
        /// Set once the sink has stopped, or the stop has left it behind: nothing more is handed to it.
        let stopped = Atomic<Bool>(false)

        init(sink: any OutputSink) {
            self.sink = sink
            queue = DispatchQueue(label: "earshot.output.\(sink.name)")
        }
    }

    private let lanes: [Lane]
    private let settings: Settings
    private let shared: Mutex<Shared>

    private enum State { case idle, running, stopping, stopped }

    /// What `route` changes, under one lock (which also keeps the order of outputs routed from several threads).
    private struct Shared {
        var state = State.idle
        /// Per lane: analysis windows held back until the next other output for that sink, or `windowBatch` of
        /// them (a window every 0.48 s must not wake a sink's thread each time: the history reads them only when an
        /// event ends).
        var heldWindows: [[RoutedOutput]]
    }

    /// Windows held for a sink at most (about 15 s at the default hop).
    package static let windowBatch = 32

    package init(sinks: [any OutputSink], settings: Settings = Settings()) {
        lanes = sinks.map(Lane.init)
        self.settings = settings
        shared = Mutex(Shared(heldWindows: Array(repeating: [], count: sinks.count)))
    }

    /// Starts every sink, in order.
    package func start() {
        guard shared.withLock({ shared in
            guard shared.state == .idle else { return false }
            shared.state = .running
            return true
        }) else { return }
        for lane in lanes {
            lane.queue.sync { lane.sink.start(reportHealth: { [weak self] health in self?.route(.health(health)) }) }
        }
    }

    /// Hands `output` to every sink that accepts it: on the caller's thread, a few atomic operations and one
    /// `async` per sink (analysis windows are held back, see `Shared`). Any thread; never waits for a sink.
    /// Ignored after ``stop()``: then returns false. `announcedOnUnmute`: an onset held back while its group was
    /// muted, going out now (``RoutedOutput/announcedOnUnmute``). `time`: the wall clock every sink writes for it
    /// (default now).
    @discardableResult
    package func route(_ output: DaemonOutput, announcedOnUnmute: Bool = false, at time: Date = Date()) -> Bool {
        let routed = RoutedOutput(output: output, time: time, announcedOnUnmute: announcedOnUnmute)
        return shared.withLock { shared in
            guard shared.state != .stopped else { return false }
            fanOut(routed, &shared)
            return true
        }
    }

    /// Routes several outputs, in order.
    package func route(_ outputs: some Sequence<DaemonOutput>) {
        for output in outputs { route(output) }
    }

    private func fanOut(_ routed: RoutedOutput, _ shared: inout Shared) {
        let isWindow = if case .window = routed.output { true } else { false }
        for (index, lane) in lanes.enumerated()
        where !lane.stopped.load(ordering: .relaxed) && lane.sink.accepts(routed.output) {
            if lane.pending.load(ordering: .relaxed) >= settings.queueLimit {
                let dropped = lane.dropped.wrappingAdd(1, ordering: .relaxed).newValue
                if !lane.behind.exchange(true, ordering: .relaxed) {
                    let health = HealthEvent(
                        state: .outputBehind,
                        message: "the \(lane.sink.name) output is behind: \(settings.queueLimit) outputs wait for it; further ones are dropped for it (\(dropped) so far) while the analysis and the other outputs go on",
                        details: ["output": .string(lane.sink.name), "dropped": .int(dropped)])
                    fanOut(RoutedOutput(output: .health(health), time: routed.time), &shared)
                }
                continue
            }
            if lane.sink.deliversWithoutWaiting {
                lane.sink.deliver(routed)
                lane.delivered.wrappingAdd(1, ordering: .relaxed)
                continue
            }
            lane.pending.wrappingAdd(1, ordering: .relaxed)
            shared.heldWindows[index].append(routed)
            if !isWindow || shared.heldWindows[index].count >= Self.windowBatch { dispatch(index, &shared) }
        }
    }

    /// Hands the outputs held for lane `index` to its queue, in order.
    private func dispatch(_ index: Int, _ shared: inout Shared) {
        guard !shared.heldWindows[index].isEmpty else { return }
        let batch = shared.heldWindows[index]
        shared.heldWindows[index].removeAll(keepingCapacity: true)
        let lane = lanes[index]
        lane.queue.async {
            for routed in batch {
                lane.sink.deliver(routed)
                lane.delivered.wrappingAdd(1, ordering: .relaxed)
                if lane.pending.wrappingSubtract(1, ordering: .relaxed).newValue == 0 {
                    lane.behind.store(false, ordering: .relaxed)
                }
            }
        }
    }

    /// The names of the sinks that take `output` (``OutputSink/accepts(_:)``), in start order: where it goes.
    package func sinkNames(accepting output: DaemonOutput) -> [String] {
        lanes.filter { $0.sink.accepts(output) }.map(\.sink.name)
    }

    /// Each sink's deliveries and drops so far.
    package var statistics: [SinkStatistics] {
        lanes.map {
            SinkStatistics(name: $0.sink.name, delivered: $0.delivered.load(ordering: .relaxed),
                           dropped: $0.dropped.load(ordering: .relaxed))
        }
    }

    /// Waits until everything routed so far has been delivered (held windows too, and what sinks reported while
    /// delivering it). Stopped sinks are not waited for (one that reaches over the network may still be stopping).
    /// With `patience`, each sink is waited for at most that long (all of them at once, not one after the other);
    /// returns the names of the sinks that had not delivered by then, in start order (they go on on their queues).
    @discardableResult
    package func flush(patience: DispatchTimeInterval? = nil) -> [String] {
        drain(patience: patience).map(\.sink.name)
    }

    /// ``flush(patience:)``'s work: the lanes that had not delivered within `patience`.
    private func drain(patience: DispatchTimeInterval?) -> [Lane] {
        var late: [Lane] = []
        for _ in 0..<2 {
            shared.withLock { shared in
                for index in lanes.indices { dispatch(index, &shared) }
            }
            let waited = lanes.filter { lane in !lane.stopped.load(ordering: .relaxed) && !late.contains { $0 === lane } }
            guard let patience else {
                for lane in waited { lane.queue.sync {} }
                continue
            }
            let deadline = DispatchTime.now() + patience
            let markers = waited.map { lane in
                let reached = DispatchSemaphore(value: 0)
                lane.queue.async { reached.signal() }
                return (lane, reached)
            }
            for (lane, reached) in markers where reached.wait(timeout: deadline) == .timedOut { late.append(lane) }
        }
        return late
    }

    /// Delivers what was routed before, then stops the sinks that reach over the network
    /// (``OutputSink/reachesOverNetwork``) at once, each on its queue with ``OutputSink/stop(deadline:)``, and
    /// waits for them until `networkDeadline` (a little longer: they return by it themselves); one not back by
    /// then is left to finish on its own. Then the local sinks stop in reverse order. What a sink reports while it
    /// stops (the history that cannot store its last events) still reaches the local sinks not yet stopped; after
    /// the last one, routes are ignored. Without a deadline every sink is waited for, in reverse order.
    ///
    /// With `localPatience`, each local sink is waited for at most that long each time: for what was routed to it
    /// (all sinks at once), then for its ``OutputSink/stop()``. One that has not finished by then (stuck writing to
    /// a pipe nobody reads, or to a disk that does not answer) is left behind: nothing more is routed to it, its
    /// stop is queued after what holds it, and the next sink stops, so that it cannot hold the others' stop (the
    /// socket's `shutdown` line). Returns the names of the sinks left behind, in the order they were.
    /// Idempotent; waits.
    @discardableResult
    package func stop(networkDeadline: DispatchTime? = nil, localPatience: DispatchTimeInterval? = nil) -> [String] {
        let wasRunning = shared.withLock { shared -> Bool in
            defer { if shared.state == .running { shared.state = .stopping } }
            return shared.state == .running
        }
        guard wasRunning else { return [] }
        var leftBehind: [Lane] = []
        // A local sink that has not delivered within its patience: its stop waits behind what holds it, unwaited.
        func leaveBehind(_ late: [Lane]) {
            for lane in late where networkDeadline == nil || !lane.sink.reachesOverNetwork {
                shared.withLock { _ in lane.stopped.store(true, ordering: .relaxed) }
                lane.queue.async { lane.sink.stop() }
                leftBehind.append(lane)
            }
        }
        leaveBehind(drain(patience: localPatience))
        var local = Array(lanes.reversed()).filter { lane in !leftBehind.contains { $0 === lane } }
        if let networkDeadline {
            let remote = local.filter { $0.sink.reachesOverNetwork }
            local.removeAll { $0.sink.reachesOverNetwork }
            let stopped = DispatchGroup()
            for lane in remote {
                stopped.enter()
                lane.queue.async {
                    lane.sink.stop(deadline: networkDeadline)
                    stopped.leave()
                }
            }
            _ = stopped.wait(timeout: networkDeadline + .milliseconds(Self.networkStopGraceMilliseconds))
            for lane in remote { shared.withLock { _ in lane.stopped.store(true, ordering: .relaxed) } }
            leaveBehind(drain(patience: localPatience))
        }
        for lane in local where !leftBehind.contains(where: { $0 === lane }) {
            if let localPatience {
                let returned = DispatchSemaphore(value: 0)
                lane.queue.async {
                    lane.sink.stop()
                    returned.signal()
                }
                let late = returned.wait(timeout: .now() + localPatience) == .timedOut
                shared.withLock { _ in lane.stopped.store(true, ordering: .relaxed) }
                if late { leftBehind.append(lane) }
            } else {
                lane.queue.sync { lane.sink.stop() }
                shared.withLock { _ in lane.stopped.store(true, ordering: .relaxed) }
            }
            leaveBehind(drain(patience: localPatience))
        }
        shared.withLock { $0.state = .stopped }
        return leftBehind.map(\.sink.name)
    }

    /// How long past its deadline a network sink's stop is waited for: 100 ms, for the count and the log line it
    /// writes as its deadline passes.
    package static let networkStopGraceMilliseconds = 100
}
