import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotAnalysis
import EarshotDetection

// The daemon's sinks: each turns outputs into what its medium carries, on its own queue (see `OutputSink`).

/// Subscribers on the Unix socket (`EventServer`): detections, alarms and clips to the clients of their group,
/// sleep reports to the clients of group `snoring`, health to every client. Stopping sends `{"type":"shutdown"}`, flushes the clients (bounded)
/// and removes the socket file.
package final class SocketSink: OutputSink {
    package let name = "socket"
    /// `EventServer.publish` queues the line for the server's queue and each client's bounded queue, and returns.
    package let deliversWithoutWaiting = true
    private let server: EventServer

    package init(server: EventServer) { self.server = server }

    package func accepts(_ output: DaemonOutput) -> Bool {
        switch output {
        case .window: server.hasListeners  // a line per window only while someone listens
        case .controls, .statistics, .mute: false
        case .detection, .alarm, .health, .clip, .sleepReport, .testAlert: true
        }
    }

    package func start(reportHealth: @escaping @Sendable (HealthEvent) -> Void) {}

    package func deliver(_ routed: RoutedOutput) {
        if case .window(let result) = routed.output {
            server.publish(window: EventLines.windowObject(for: result, time: routed.time))
            return
        }
        guard let object = EventLines.object(for: routed) else { return }
        // A sleep session's report is about snoring: it goes to the clients of group `snoring` (and to those
        // with no filter), not to one that asked for `baby_cry` only.
        let group = if case .sleepReport = routed.output { SnoreDetector.groupName } else { routed.output.group }
        server.publish(object: object, group: group)
    }

    package func stop() { server.stop() }
}

/// The systemd journal (or standard error without one): one structured entry per detection, alarm, health change
/// and clip (`EARSHOT_*` fields).
package final class JournalOutputSink: OutputSink {
    package let name = "journal"
    private let journal: JournalSink

    package init(journal: JournalSink) { self.journal = journal }

    package func accepts(_ output: DaemonOutput) -> Bool {
        switch output {
        case .window, .sleepReport, .controls, .statistics, .mute: false
        case .detection, .alarm, .health, .clip, .testAlert: true
        }
    }

    package func start(reportHealth: @escaping @Sendable (HealthEvent) -> Void) {}

    package func deliver(_ routed: RoutedOutput) {
        switch routed.output {
        case .window, .sleepReport, .controls, .statistics, .mute: break
        case .testAlert(let alert): journal.record(fields: JournalSink.fields(for: alert, identifier: journal.identifier))
        case .detection(let event) where routed.announcedOnUnmute:
            journal.record(fields: JournalSink.announcedOnUnmute(JournalSink.fields(for: event, identifier: journal.identifier)))
        case .detection(let event): journal.record(event)
        case .alarm(let alarm) where routed.announcedOnUnmute:
            journal.record(fields: JournalSink.announcedOnUnmute(alarm.journalFields(identifier: journal.identifier)))
        case .alarm(let alarm): journal.record(fields: alarm.journalFields(identifier: journal.identifier))
        case .health(let health): journal.record(health)
        case .clip(let clip): journal.record(fields: clip.journalFields(identifier: journal.identifier))
        }
    }

    package func stop() {}
}

/// JSON lines on standard output (`earshotd --foreground`): the same objects the socket carries for detections,
/// alarms, health changes, clips and test alerts.
///
/// Standard output may be a pipe nobody reads (a pager, a terminal stopped with Ctrl-S, a log collector that hangs):
/// the lines are written on a queue of the sink's own (a ``LineWriter``), and ``deliver(_:)`` never waits for it. At most
/// ``pendingLimitBytes`` wait there; a line that does not fit is dropped and counted, said once as an
/// `output_behind` health event to the other outputs (again after standard output has taken everything and falls
/// behind anew). ``stop()`` waits for the lines still waiting at most ``stopPatienceMilliseconds``: a stop is never
/// held by standard output (audit 13 #3: it held the socket's `shutdown` line, MQTT's `offline` and the
/// notifications' `stopping`).
package final class StandardOutputSink: OutputSink {
    package let name = "stdout"
    /// ``deliver(_:)`` only hands the line to the writer's bounded queue.
    package let deliversWithoutWaiting = true
    private let writer: LineWriter
    private let reportHealth = Mutex<(@Sendable (HealthEvent) -> Void)?>(nil)

    /// Bytes of lines that may wait for standard output before further lines are dropped: 16 KiB, about 50 lines
    /// (an onset is about 250 bytes, an end 400), on top of what the pipe or terminal itself holds (64 KiB for a
    /// pipe).
    package static let pendingLimitBytes = 16_384
    /// How long ``stop()`` waits for the lines still waiting: 250 ms.
    package static let stopPatienceMilliseconds = 250

    package init(descriptor: Int32 = STDOUT_FILENO) {
        writer = LineWriter(descriptor: descriptor, label: "earshot.stdout.writer", pendingLimitBytes: Self.pendingLimitBytes)
    }

    package func accepts(_ output: DaemonOutput) -> Bool {
        switch output {
        case .window, .sleepReport, .controls, .statistics, .mute: false
        case .detection, .alarm, .health, .clip, .testAlert: true
        }
    }

    package func start(reportHealth: @escaping @Sendable (HealthEvent) -> Void) {
        self.reportHealth.withLock { $0 = reportHealth }
    }

    /// The `output_behind` health event said when a line is first dropped.
    package static func behindEvent(dropped: Int) -> HealthEvent {
        HealthEvent(
            state: .outputBehind,
            message: "the stdout output is behind: \(pendingLimitBytes) bytes of lines wait for standard output, which does not take them (is anyone reading it?); further lines are dropped for it (\(dropped) so far) while the analysis and the other outputs go on",
            details: ["output": .string("stdout"), "dropped": .int(dropped)])
    }

    /// Runs on the routing thread under the router's lock: queues the line, or drops it, and returns at once.
    package func deliver(_ routed: RoutedOutput) {
        guard let object = EventLines.object(for: routed) else { return }
        // Not reported here: routing it now would take the router's lock, which is held.
        guard case .droppedFirst(let dropped) = writer.write(JSONValue.object(object).encoded + "\n"),
              let report = reportHealth.withLock({ $0 }) else { return }
        DispatchQueue.global().async { report(Self.behindEvent(dropped: dropped)) }
    }

    /// Waits for the lines still waiting, at most ``stopPatienceMilliseconds``; what standard output has not taken by
    /// then is left.
    package func stop() {
        writer.flush(patience: .milliseconds(Self.stopPatienceMilliseconds))
    }
}

/// The JSON object of an output as the socket and standard output write it (nil for windows and control states).
package enum EventLines {
    /// The line a listening client gets per window (`{"cmd":"listen"}`): stream times in seconds, the RMS level
    /// in dBFS, whether the gate let it through to the classifier, and its top classes (at most 5, highest first;
    /// empty when gated), e.g. `{"type":"window","start":12.48,"end":13.44,"level_dbfs":-23.4,"gate_open":true,
    /// "classes":[{"class":"Speech","confidence":0.9123},...],"time":"2026-12-02T20:15:03.120+00:00"}`.
    package static func windowObject(for result: ClassificationResult, time: Date) -> JSONObject {
        [
            "type": "window",
            "start": .number(result.timeRange.start, decimals: 3),
            "end": .number(result.timeRange.end, decimals: 3),
            "level_dbfs": .number(Double(result.levelDBFS), decimals: 1),
            "gate_open": .bool(!result.isGated),
            "classes": classesArray(result.classifications.prefix(5)),
            "time": .string(EventJSON.timestamp(time)),
        ]
    }

    /// `[{"class":"Speech","confidence":0.9123},...]`, 4 decimals as events carry them: the shape
    /// `earshot analyze --format jsonl` prints too (``AnalysisReportFormatter/classesJSON(_:)``).
    package static func classesArray(_ classes: some Sequence<Classification>) -> JSONValue {
        AnalysisReportFormatter.classesJSON(classes)
    }

    /// An onset announced on unmute (``RoutedOutput/announcedOnUnmute``) carries `"reason":"unmuted"` before its
    /// `time`; a test alert is `{"type":"test_alert","time":...}`.
    package static func object(for routed: RoutedOutput) -> JSONObject? {
        var object: JSONObject? = switch routed.output {
        case .window, .controls, .statistics, .mute: nil
        case .detection(let event): EventJSON.object(for: event, time: routed.time)
        case .alarm(let alarm): alarm.object(wallClock: routed.time)
        case .health(let health): EventJSON.object(for: health, time: routed.time)
        case .clip(let clip): clip.object(time: routed.time)
        case .sleepReport(let object): object
        case .testAlert: ["type": .string(TestAlert.type), "time": .string(EventJSON.timestamp(routed.time))]
        }
        if routed.announcedOnUnmute, object?["type"]?.stringValue == "detection", let time = object?["time"] {
            object?["time"] = nil
            object?["reason"] = .string(unmutedReason)
            object?["time"] = time
        }
        return object
    }

    /// The `reason` of an onset announced when its group was unmuted while the event was going on.
    package static let unmutedReason = "unmuted"

}

/// The SQLite event history (`HistoryRecorder`): reads every window for the events' levels and stores finished
/// events (classifier ends, alarm ends and chirps). A database that cannot be written is one
/// `history_unavailable` health event, and its recovery one `history_recovered`; stopping stores what is pending
/// and closes the database.
package final class HistorySink: OutputSink {
    package let name = "history"
    package let recorder: HistoryRecorder

    /// - Parameters:
    ///   - settings: `[history]` path and retention.
    ///   - timeLine: how stream times become wall-clock times (`.stream(origin:)` for input replayed at another speed).
    package init(settings: HistorySettings, timeLine: EventLevelMeter.TimeLine = .live) {
        let reporter = HealthRelay()
        recorder = HistoryRecorder(settings: settings, timeLine: timeLine) { report in
            switch report {
            case .failing(let line): reporter.report(HealthEvent(state: .historyUnavailable, message: line))
            case .recovered(let line): reporter.report(HealthEvent(state: .historyRecovered, message: line))
            case .replaced(let line): reporter.report(HealthEvent(state: .historyUnavailable, message: line))
            }
        }
        relay = reporter
    }

    private let relay: HealthRelay

    package func accepts(_ output: DaemonOutput) -> Bool {
        switch output {
        case .window, .detection, .alarm: true
        // A step of the daemon's clock moves the events stamped before it.
        case .health(let health): health.clockStepSeconds != nil
        case .clip, .sleepReport, .controls, .statistics, .testAlert, .mute: false
        }
    }

    package func start(reportHealth: @escaping @Sendable (HealthEvent) -> Void) { relay.set(reportHealth) }

    package func deliver(_ routed: RoutedOutput) {
        switch routed.output {
        case .window(let result): recorder.observe(result)
        case .detection(let event): recorder.record(event, now: routed.time)
        case .alarm(let alarm):
            // The history stores finished events: an alarm's end, or a chirp (a point event with no end).
            if alarm.kind == .end || alarm.group == AlarmEvent.alarmChirp, case .offset(let finished) = alarm.finishedEvent {
                recorder.recordFinished(
                    group: finished.group, classLabel: finished.classLabel, start: finished.start, end: finished.end,
                    peakConfidence: finished.peakConfidence, meanConfidence: finished.meanConfidence,
                    windows: finished.positiveWindows, endReason: finished.reason, now: routed.time)
            }
        case .health(let health):
            if let step = health.clockStepSeconds { recorder.clockStepped(by: step) }
        case .clip, .sleepReport, .controls, .statistics, .testAlert, .mute: break
        }
    }

    package func stop() { recorder.close() }
}

/// Holds the router's health reporter for a component made before the router started.
///
/// One lock over the reporter and the reports made before it was set: a report made while ``set(_:)`` runs is either
/// in the reports it hands on or sees the reporter, never appended after they were handed on (audit 13 #7).
final class HealthRelay: Sendable {
    private struct State {
        var target: (@Sendable (HealthEvent) -> Void)?
        var early: [HealthEvent] = []
    }

    private let state = Mutex(State())

    /// Sets the reporter and hands it the reports made before, in order, under the lock (a report made meanwhile
    /// waits for them, and comes after).
    func set(_ report: @escaping @Sendable (HealthEvent) -> Void) {
        state.withLock { state in
            state.target = report
            for health in state.early { report(health) }
            state.early.removeAll()
        }
    }

    func report(_ health: HealthEvent) {
        let target = state.withLock { state -> (@Sendable (HealthEvent) -> Void)? in
            if let target = state.target { return target }
            state.early.append(health)
            return nil
        }
        target?(health)
    }
}
