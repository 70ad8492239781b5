import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotAnalysis
import EarshotDetection

/// The daemon's outputs on an MQTT broker, with Home Assistant discovery (``HomeAssistantDiscovery``): events,
/// per-group states and attributes, the level, the capture's health, the sleep session and a smoke alarm's low
/// battery (``MQTTTopics/batteryLowState``), under
/// ``MQTTTopics`` (`topic_prefix/node/...`), and the commands that mute a group or start a sleep session.
///
/// Analysis never waits for the broker: ``deliver(_:)`` turns an output into messages and queues them in the
/// connection's bounded outbox (``MQTTConnection``), on the routing thread. A broker that is down, restarts or
/// refuses the credentials is said once as an `mqtt_unavailable` health event (the broker and the cause), and
/// `mqtt_connected` when it is back; what happened meanwhile is delivered then, in order.
///
/// Commands (`P/GROUP/set`, `P/sleep/set`, payload `ON` or `OFF`; `P/test_alert/set`, payload `PRESS`; not retained)
/// go to `commands`; anything else on those topics is ignored with a log line (at most 20 a minute; the rest are
/// counted in the next line).
package final class MQTTSink: OutputSink, MQTTConnectionDelegate {
    /// A validated command from the broker.
    package enum Command: Sendable, Equatable {
        /// Publish (`true`) or mute (`false`) a group's events.
        case setGroup(String, enabled: Bool)
        /// Start (`true`) or stop (`false`) a sleep session.
        case setSleep(Bool)
        /// Send a test alert (Home Assistant's `Test alert` button: `PRESS` on `P/test_alert/set`).
        case testAlert
    }

    package let name = "mqtt"
    /// ``deliver(_:)`` only queues messages in the connection's outbox (under a lock) and wakes its thread.
    package let deliversWithoutWaiting = true
    package let settings: MQTTSettings
    package let topics: MQTTTopics
    package let discovery: HomeAssistantDiscovery
    /// Whether `[notify] url` is set: the `Notifications failing` sensor (``MQTTTopics/notifyState``) exists.
    package let notifying: Bool
    /// Groups whose events must survive a full outbox.
    package static let criticalGroups: Set<String> = ["smoke_alarm", "co_alarm", "fire_alarm"]
    /// Ignored commands get a log line each, up to `ignoredLogLimit` per `ignoredLogWindow` seconds; the rest are
    /// counted in the next line.
    package static let ignoredLogLimit = 20
    package static let ignoredLogWindow = 60.0
    /// The payload of the `Test alert` button's command (Home Assistant's default `payload_press`).
    package static let pressPayload = "PRESS"
    /// Seconds between level messages at least (a level that moves by a step, or the gate opening or closing).
    package static let levelMinimumInterval = 1.0

    private let commands: @Sendable (Command) -> Void
    private let log: @Sendable (String, Int) -> Void
    private let connection: MQTTConnection

    private struct State {
        var reportHealth: (@Sendable (HealthEvent) -> Void)?
        var controls: ControlState?
        var active: [String: Bool] = [:]
        var attributes: [String: JSONObject] = [:]
        /// The wall clock each open event started at, as its onset said (see ``latestWindowEnd``).
        var startedAt: [String: Date] = [:]
        /// Stream time (s) of the end of the latest analysis window routed: "now" in stream time when an event is
        /// routed, so a stream time `t` is the wall clock `routed.time - (latestWindowEnd - t)`, as the history
        /// stores it (``EventLevelMeter``). (An onset's own decision time is not "now": the snore detector releases
        /// its onsets seconds after deciding them, and an onset announced on unmute goes out later still.)
        var latestWindowEnd: Double?
        var captureProblem = false
        var captureAttributes: JSONObject = [:]
        /// The `[notify]` URLs (as health events show them) said `notify_failed` and not `notify_recovered` since.
        var notifyFailing: [String] = []
        var notifyAttributes: JSONObject = [:]
        /// The level last published: when (uptime, s), its dBFS (to 0.1) and gate; nil until the first, and again
        /// after each connect (so a new connection gets the level at once).
        var lastLevel: (time: Double, dbfs: Double, gateOpen: Bool)?
        var publishedConfigs: Set<String> = []
        /// Retained topics of this node found on the broker before the first controls said what is watched:
        /// judged when they come (``staleRetainedTopics(_:)``).
        var unjudgedRetained: [String] = []
        var saidUnavailable = false
        var connectedOnce = false
        /// The last `mqtt_unavailable` said that another client seems to use the client id: quick drops and
        /// reconnects are not said until a connection lasts ``MQTTSettings/clientIDConflictStableSeconds``.
        var clientIDConflict = false
        /// Counts the connections accepted: a stability check of an earlier one does nothing.
        var connectGeneration = 0
        var ignoredWindowStart = -Double.infinity
        var ignoredLogged = 0
        var ignoredUnsaid = 0
        var lastReport: JSONObject?
        /// The `Smoke alarm battery` sensor (``MQTTTopics/batteryLowState``): true from an `alarm_chirp` onset until
        /// none for ``MQTTSettings/batteryLowHoldSeconds``, false once that long has passed since the start without
        /// one; nil before either (what the broker retains from an earlier run stands: a restart keeps a low battery).
        var batteryLow: Bool?
        /// Counts the chirps: the hold of an earlier one does nothing.
        var batteryGeneration = 0
        var stopped = false
    }

    private let state = Mutex(State())
    /// Where the low-battery hold runs out (``MQTTSettings/batteryLowHoldSeconds``), and where a connection is
    /// found stable after a client-id conflict (``MQTTSettings/clientIDConflictStableSeconds``).
    private let batteryQueue = DispatchQueue(label: "earshot.mqtt.battery")

    /// - Parameters:
    ///   - settings: `[mqtt]`, with ``MQTTSettings/password`` read.
    ///   - notifying: whether `[notify] url` is set (the `Notifications failing` sensor, fed by the notify sink's
    ///     `notify_failed` and `notify_recovered` health events, which the router brings like any other).
    ///   - commands: applies a command (called on the connection's thread: hop to your own queue).
    ///   - log: a journal line and its syslog priority.
    /// - Throws: `EarshotError(.system)` when libmosquitto cannot start.
    package init(
        settings: MQTTSettings, notifying: Bool = false, commands: @escaping @Sendable (Command) -> Void,
        log: @escaping @Sendable (String, Int) -> Void
    ) throws(EarshotError) {
        self.settings = settings
        self.notifying = notifying
        topics = MQTTTopics(base: settings.baseTopic)
        discovery = HomeAssistantDiscovery(
            discoveryPrefix: settings.discoveryPrefix, node: settings.node, topics: topics, level: settings.levelIntervalSeconds != nil,
            area: settings.area, notify: notifying)
        self.commands = commands
        self.log = log
        connection = try MQTTConnection(
            endpoint: Self.endpoint(settings, will: MQTTMessage(topic: topics.availability, text: "offline", qos: 1, retain: true)))
    }

    /// Where and how to connect for `settings` (the probe of `--check-config` uses it too).
    package static func endpoint(_ settings: MQTTSettings, clientID: String? = nil, will: MQTTMessage?) -> MQTTConnection.Endpoint {
        MQTTConnection.Endpoint(
            host: settings.host, port: settings.port, clientID: clientID ?? settings.clientID,
            keepaliveSeconds: settings.keepaliveSeconds,
            username: settings.username.isEmpty ? nil : settings.username, password: settings.password,
            tls: settings.tls ? .init(
                caFile: settings.caFile.isEmpty ? nil : settings.caFile,
                certFile: settings.certFile.isEmpty ? nil : settings.certFile,
                keyFile: settings.keyFile.isEmpty ? nil : settings.keyFile) : nil,
            will: will)
    }

    /// The connection (for its counters).
    package var client: MQTTConnection { connection }

    /// Where a test alert goes, as its receipt names it: the broker's `host:port`.
    package var testAlertDestination: TestAlertReceipt.Destination {
        TestAlertReceipt.Destination(output: name, target: connection.endpoint.description)
    }

    // MARK: OutputSink

    package func accepts(_ output: DaemonOutput) -> Bool {
        switch output {
        // The switch's state goes with `.controls`.
        case .statistics, .mute: return false
        default: return true
        }
    }

    package func start(reportHealth: @escaping @Sendable (HealthEvent) -> Void) {
        state.withLock { $0.reportHealth = reportHealth }
        scheduleBatteryClear(generation: 0)
        do {
            try connection.start(delegate: self)
        } catch {
            reportHealth(HealthEvent(state: .mqttUnavailable, message: "MQTT: \(error.message)"))
        }
    }

    package func deliver(_ routed: RoutedOutput) {
        switch routed.output {
        case .window(let result):
            let now = Self.uptime()
            let dbfs = (Double(result.levelDBFS) * 10).rounded() / 10
            let gateOpen = !result.isGated
            let (due, clearSilence) = state.withLock { state -> (Bool, Bool) in
                state.latestWindowEnd = max(state.latestWindowEnd ?? -Double.infinity, result.timeRange.end)
                let due = Self.levelIsDue(
                    last: state.lastLevel, now: now, dbfs: dbfs, gateOpen: gateOpen,
                    interval: settings.levelIntervalSeconds, step: settings.levelStepDB)
                if due { state.lastLevel = (now, dbfs, gateOpen) }
                // Sound again after digital silence: the capture problem it raised is over.
                let clear = state.captureProblem && state.captureAttributes["state"]?.stringValue == HealthEvent.State.inputSilent.rawValue
                    && result.levelDBFS > ClassificationResult.levelFloorDBFS
                if clear { state.captureProblem = false }
                return (due, clear)
            }
            if clearSilence { publishCapture() }
            if due {
                // No time: the payload (the sensor's state and attributes) stays the same while the room does, so
                // Home Assistant records nothing new.
                let level: JSONObject = ["dbfs": .number(dbfs, decimals: 1), "gate_open": .bool(gateOpen)]
                connection.enqueue(MQTTMessage(topic: topics.level, text: level.encoded, qos: 0, retain: false))
            }
        case .detection, .alarm:
            publishEvent(routed)
        case .health(let health):
            publishEvent(routed)
            let problem: Bool? = switch health.state {
            case .captureUnavailable, .inputSilent, .inputStalled: true
            case .captureLive: false
            default: nil
            }
            if let problem {
                state.withLock { state in
                    state.captureProblem = problem
                    state.captureAttributes = [
                        "state": .string(health.state.rawValue), "message": .string(health.message),
                        "time": .string(EventJSON.timestamp(routed.time)),
                    ]
                }
                publishCapture()
            }
            if notifying, health.state == .notifyFailed || health.state == .notifyRecovered {
                let url = health.details["url"]?.stringValue ?? ""
                state.withLock { state in
                    // A failing URL renamed by a reload (its position in the list changed) names its old name.
                    let replaced = health.details["replaces"]?.stringValue
                    state.notifyFailing.removeAll { $0 == url || $0 == replaced }
                    if health.state == .notifyFailed { state.notifyFailing.append(url) }
                    state.notifyAttributes = [
                        "state": .string(health.state.rawValue), "message": .string(health.message),
                        "failing": .array(state.notifyFailing.map { .string($0) }),
                        "time": .string(EventJSON.timestamp(routed.time)),
                    ]
                }
                publishNotify()
            }
        case .clip, .testAlert:
            publishEvent(routed)
        case .sleepReport(let object):
            state.withLock { $0.lastReport = object }
            connection.enqueue(MQTTMessage(topic: topics.sleepReport, text: object.encoded, qos: 1, retain: true))
        case .statistics, .mute:
            break
        case .controls(let controls):
            let (previous, unjudged) = state.withLock { state -> (ControlState?, [String]) in
                defer {
                    state.controls = controls
                    state.unjudgedRetained = []
                }
                return (state.controls, state.unjudgedRetained)
            }
            // Not connected: the next connection's birth publishes the configs and states (read from `state`), and
            // the broker sends its retained topics again on that connection.
            guard connection.isConnected else { return }
            if settings.discovery, previous?.groups != controls.groups || previous?.eventGroups != controls.eventGroups {
                for message in configMessages(for: controls, deletingOthers: true) { connection.enqueue(message) }
            }
            let added = controls.groups.filter { !(previous?.groups.contains($0) ?? false) }
            let removed = (previous?.groups ?? []).filter { !controls.groups.contains($0) }
            for group in added {
                let on = state.withLock { $0.active[group] == true }
                connection.enqueue(MQTTMessage(topic: topics.state(group), text: on ? "ON" : "OFF", qos: 1, retain: true))
            }
            // A group no longer watched leaves no retained topics behind.
            for group in removed {
                for topic in [topics.state(group), topics.attributes(group), topics.enabled(group)] {
                    connection.enqueue(MQTTMessage(topic: topic, payload: [], qos: 1, retain: true))
                }
            }
            for message in controlStateMessages(controls) { connection.enqueue(message) }
            for topic in staleRetainedTopics(unjudged) {
                connection.enqueue(MQTTMessage(topic: topic, payload: [], qos: 1, retain: true))
            }
            // The battery sensor comes and goes with alarm_chirp (smoke or CO watched, with pattern detection).
            let chirpBefore = previous?.eventGroups.contains(AlarmEvent.alarmChirp) ?? false
            let chirpNow = controls.eventGroups.contains(AlarmEvent.alarmChirp)
            if chirpNow, !chirpBefore, let low = state.withLock({ $0.batteryLow }) {
                connection.enqueue(batteryMessage(low: low))
            } else if chirpBefore, !chirpNow {
                connection.enqueue(MQTTMessage(topic: topics.batteryLowState, payload: [], qos: 1, retain: true))
            }
        }
    }

    package var reachesOverNetwork: Bool { true }

    package func stop() { stop(deadline: .now() + .seconds(3)) }

    /// Publishes `offline` and waits for the broker's acknowledgements until `deadline` (at most 3 s).
    package func stop(deadline: DispatchTime) {
        state.withLock { $0.stopped = true }
        let seconds = Double(Int64(deadline.uptimeNanoseconds) - Int64(DispatchTime.now().uptimeNanoseconds)) / 1e9
        let left = connection.stop(
            finally: [MQTTMessage(topic: topics.availability, text: "offline", qos: 1, retain: true)],
            timeout: min(3, max(0.1, seconds)))
        if left > 0 {
            log("MQTT: \(left) message\(left == 1 ? " was" : "s were") not delivered to \(connection.endpoint.description) before stopping (the broker did not acknowledge \(left == 1 ? "it" : "them"))", 4)
        }
    }

    // MARK: Messages

    private func publishEvent(_ routed: RoutedOutput) {
        guard var object = EventLines.object(for: routed) else { return }
        object["node"] = .string(settings.node)
        let group = routed.output.group
        let critical = group.map { Self.criticalGroups.contains($0) } ?? false
        let event = MQTTMessage(topic: topics.event, text: object.encoded, qos: 1, retain: false, critical: critical)
        if case .testAlert(let alert) = routed.output {
            // The event entity's too, so that an automation on it is part of what the test tries.
            var detected: JSONObject = ["event_type": .string(TestAlert.type)]
            for entry in object.entries where entry.key != "type" { detected[entry.key] = entry.value }
            let messages = [event, MQTTMessage(
                topic: topics.detected, text: detected.encoded, qos: 1, retain: false,
                maximumAgeSeconds: MQTTOutbox.detectedMaximumAgeSeconds)]
            guard let receipt = alert.receipt else {
                for message in messages { connection.enqueue(message) }
                return
            }
            // Acknowledged (PUBACK) once the broker has both; what is still in the outbox at the receipt's deadline
            // is what it says was not reached.
            let destination = testAlertDestination
            let queued = connection.enqueue(messages) { receipt.report(.acknowledged, for: destination) }
            if !queued { receipt.report(.notSent("the daemon is stopping"), for: destination) }
            return
        }
        connection.enqueue(event)
        guard let group else { return }
        let type = object["type"]?.stringValue
        let isPoint = group == AlarmEvent.alarmChirp
        if isPoint, type == "detection" { noteLowBatteryChirp() }
        if type == "detection" {
            var detected: JSONObject = ["event_type": .string(group)]
            for entry in object.entries where entry.key != "type" && entry.key != "group" { detected[entry.key] = entry.value }
            // Held at most 5 minutes (``MQTTOutbox/detectedMaximumAgeSeconds``): Home Assistant's event entity fires
            // automations when it arrives. `P/event`, queued above, keeps the record however late.
            connection.enqueue(MQTTMessage(
                topic: topics.detected, text: detected.encoded, qos: 1, retain: false, critical: critical,
                maximumAgeSeconds: MQTTOutbox.detectedMaximumAgeSeconds))
        }
        guard !isPoint, type == "detection" || type == "detection_end" else { return }
        let on = type == "detection"
        let attributes = state.withLock { state -> JSONObject in
            // Stream times on the wall clock as the history has them; before any window, "now" is the decision.
            let now = state.latestWindowEnd ?? (object["decision_time"] ?? object["stream_time"] ?? object["end"])?.doubleValue ?? 0
            func wallClock(_ key: String) -> Date? {
                object[key]?.doubleValue.map { routed.time.addingTimeInterval($0 - now) }
            }
            // An end keeps its onset's start (without one, e.g. after a mute: as the history has it).
            let started = on ? wallClock("stream_time") ?? routed.time
                : state.startedAt[group].flatMap { state.active[group] == true ? $0 : nil }
                    ?? wallClock("start") ?? routed.time
            let attributes = Self.attributes(of: object, onset: on, started: started)
            state.active[group] = on
            state.startedAt[group] = on ? started : nil
            state.attributes[group] = attributes
            return attributes
        }
        connection.enqueue(MQTTMessage(topic: topics.attributes(group), text: attributes.encoded, qos: 1, retain: true, critical: critical))
        connection.enqueue(MQTTMessage(topic: topics.state(group), text: on ? "ON" : "OFF", qos: 1, retain: true, critical: critical))
    }

    /// A group's attributes from its event's JSON: class, confidence, when it started (wall clock, `started`), and
    /// for alarms their evidence; at an end also when it ended (`started` plus the duration), its duration, peak
    /// confidence and reason.
    package static func attributes(of object: JSONObject, onset: Bool, started: Date) -> JSONObject {
        var attributes: JSONObject = [:]
        let keys = ["class", "confidence", "classifier_score", "source", "pattern", "cycles", "tone_hz", "tone_dbfs",
                    "peak_confidence", "mean_confidence", "duration", "reason"]
        for key in keys { if let value = object[key] { attributes[key] = value } }
        if attributes["confidence"] == nil, let score = object["peak_confidence"] ?? object["classifier_score"] {
            attributes["confidence"] = score
        }
        attributes["started"] = .string(EventJSON.timestamp(started))
        if onset {
            if let start = object["stream_time"] { attributes["stream_time"] = start }
        } else {
            let duration = object["duration"]?.doubleValue ?? 0
            attributes["ended"] = .string(EventJSON.timestamp(started.addingTimeInterval(duration)))
        }
        return attributes
    }

    /// An `alarm_chirp` onset: the battery sensor `ON`, for ``MQTTSettings/batteryLowHoldSeconds`` from now.
    private func noteLowBatteryChirp() {
        let generation = state.withLock { state -> Int in
            state.batteryGeneration += 1
            state.batteryLow = true
            return state.batteryGeneration
        }
        connection.enqueue(batteryMessage(low: true))
        scheduleBatteryClear(generation: generation)
    }

    /// In ``MQTTSettings/batteryLowHoldSeconds``: the battery sensor `OFF` unless a chirp came meanwhile (its
    /// generation is newer), published while `alarm_chirp` publishes.
    private func scheduleBatteryClear(generation: Int) {
        batteryQueue.asyncAfter(deadline: .now() + settings.batteryLowHoldSeconds) { [weak self] in
            guard let self else { return }
            let publish = state.withLock { state -> Bool in
                guard !state.stopped, state.batteryGeneration == generation else { return false }
                state.batteryLow = false
                return state.controls?.eventGroups.contains(AlarmEvent.alarmChirp) == true
            }
            if publish { connection.enqueue(batteryMessage(low: false)) }
        }
    }

    private func batteryMessage(low: Bool) -> MQTTMessage {
        MQTTMessage(topic: topics.batteryLowState, text: low ? "ON" : "OFF", qos: 1, retain: true)
    }

    private func publishCapture() {
        let (problem, attributes) = state.withLock { ($0.captureProblem, $0.captureAttributes) }
        connection.enqueue(MQTTMessage(topic: topics.captureAttributes, text: attributes.encoded, qos: 1, retain: true))
        connection.enqueue(MQTTMessage(topic: topics.captureState, text: problem ? "ON" : "OFF", qos: 1, retain: true))
    }

    private func publishNotify() {
        for message in notifyMessages(state.withLock { $0 }) { connection.enqueue(message) }
    }

    /// The `Notifications failing` sensor's attributes and state (none without `[notify] url`).
    private func notifyMessages(_ snapshot: State) -> [MQTTMessage] {
        guard notifying else { return [] }
        return [
            MQTTMessage(topic: topics.notifyAttributes, text: snapshot.notifyAttributes.encoded, qos: 1, retain: true),
            MQTTMessage(topic: topics.notifyState, text: snapshot.notifyFailing.isEmpty ? "OFF" : "ON", qos: 1, retain: true),
        ]
    }

    /// The discovery configs for `controls`; with `deletingOthers`, an empty retained message first for each
    /// config this sink published before that `controls` no longer has.
    private func configMessages(for controls: ControlState, deletingOthers: Bool) -> [MQTTMessage] {
        let configs = discovery.configs(for: controls)
        let topics = Set(configs.map(\.topic))
        let stale = state.withLock { state -> [String] in
            defer { state.publishedConfigs = topics }
            return deletingOthers ? state.publishedConfigs.subtracting(topics).sorted() : []
        }
        return stale.map { MQTTMessage(topic: $0, payload: [], qos: 1, retain: true) }
            + configs.map { MQTTMessage(topic: $0.topic, text: $0.payload.encoded, qos: 1, retain: true) }
    }

    /// Those of `retained` (topics the broker holds for this node) that the current controls do not have: a
    /// discovery config this sink has not published, or a state topic (``MQTTTopics/stateOwner(_:)``) of a group
    /// that neither has a state (``ControlState/groups``) nor publishes events (``ControlState/eventGroups``); the
    /// capture's and the sleep session's stay, and the notifications' with `[notify] url` set. Empty before the first
    /// controls.
    private func staleRetainedTopics(_ retained: [String]) -> [String] {
        state.withLock { state -> [String] in
            guard let controls = state.controls else { return [] }
            let kept = MQTTTopics.fixedStateNames.union(controls.groups + controls.eventGroups + (notifying ? ["notify"] : []))
            return retained.filter { topic in
                if let owner = topics.stateOwner(topic) { return !kept.contains(owner) }
                return !state.publishedConfigs.contains(topic)
            }
        }
    }

    /// The switches' states (each group's `enabled`, the sleep session).
    private func controlStateMessages(_ controls: ControlState) -> [MQTTMessage] {
        controls.groups.map {
            MQTTMessage(topic: topics.enabled($0), text: controls.muted.contains($0) ? "OFF" : "ON", qos: 1, retain: true)
        } + [MQTTMessage(topic: topics.sleepState, text: controls.sleepActive ? "ON" : "OFF", qos: 1, retain: true)]
    }

    /// Queues every retained state as it is now (after a connect, the broker may have lost them; after Home
    /// Assistant's `online`, it may have missed them), read and queued under the lock their changes take: a state
    /// the router changes meanwhile is queued after this copy, never before it. (A copy read before a
    /// `notify_failed` and queued after its `ON` left the `Notifications failing` sensor `OFF` while they failed.)
    private func enqueueCurrentStates() {
        state.withLock { snapshot in
            for message in currentStates(snapshot) { connection.enqueue(message) }
        }
    }

    /// Every retained state as `snapshot` has it.
    private func currentStates(_ snapshot: State) -> [MQTTMessage] {
        var messages: [MQTTMessage] = []
        for group in snapshot.controls?.groups ?? [] {
            if let attributes = snapshot.attributes[group] {
                messages.append(MQTTMessage(topic: topics.attributes(group), text: attributes.encoded, qos: 1, retain: true))
            }
            messages.append(MQTTMessage(topic: topics.state(group), text: snapshot.active[group] == true ? "ON" : "OFF", qos: 1, retain: true))
        }
        if let controls = snapshot.controls { messages += controlStateMessages(controls) }
        messages.append(MQTTMessage(topic: topics.captureAttributes, text: snapshot.captureAttributes.encoded, qos: 1, retain: true))
        messages.append(MQTTMessage(topic: topics.captureState, text: snapshot.captureProblem ? "ON" : "OFF", qos: 1, retain: true))
        messages += notifyMessages(snapshot)
        if let report = snapshot.lastReport {
            messages.append(MQTTMessage(topic: topics.sleepReport, text: report.encoded, qos: 1, retain: true))
        }
        // Unknown (nil): the state an earlier run left on the broker stands.
        if let low = snapshot.batteryLow, snapshot.controls?.eventGroups.contains(AlarmEvent.alarmChirp) == true {
            messages.append(batteryMessage(low: low))
        }
        return messages
    }

    /// Whether a window's level is published: never with `interval` nil (`level_interval = off`); the first one;
    /// one `step` dB or more from the last published, or with the gate changed, at least
    /// ``levelMinimumInterval`` after it; anything `interval` seconds after it.
    package static func levelIsDue(
        last: (time: Double, dbfs: Double, gateOpen: Bool)?, now: Double, dbfs: Double, gateOpen: Bool,
        interval: Int?, step: Double
    ) -> Bool {
        guard let interval else { return false }
        guard let last else { return true }
        let elapsed = now - last.time
        if elapsed >= Double(interval) { return true }
        return elapsed >= levelMinimumInterval && (abs(dbfs - last.dbfs) >= step - 1e-9 || gateOpen != last.gateOpen)
    }

    private static func uptime() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    // MARK: MQTTConnectionDelegate (the connection's thread)

    package func connectionDidConnect(_ connection: MQTTConnection) -> MQTTConnection.Birth {
        let (report, controls, first, quiet, generation) = state.withLock {
            state -> ((@Sendable (HealthEvent) -> Void)?, ControlState?, Bool, Bool, Int) in
            state.connectGeneration += 1
            defer {
                // After a client-id conflict, the outage said stands until a connection lasts (checkStable).
                if !state.clientIDConflict { state.saidUnavailable = false }
                state.connectedOnce = true
                state.unjudgedRetained = []  // this connection's subscriptions bring them again
                state.lastLevel = nil  // the level is not retained: a new connection gets it with the next window
            }
            return (state.reportHealth, state.controls, !state.connectedOnce || state.saidUnavailable, state.clientIDConflict,
                    state.connectGeneration)
        }
        if quiet {
            let seconds = settings.clientIDConflictStableSeconds
            batteryQueue.asyncAfter(deadline: .now() + seconds) { [weak self] in
                self?.checkStable(generation: generation, seconds: seconds)
            }
        } else if first {
            report?(HealthEvent(
                state: .mqttConnected,
                message: "connected to the MQTT broker \(connection.endpoint.description) as \(connection.endpoint.clientID), publishing under \(topics.base)",
                details: ["broker": .string(connection.endpoint.description)]))
        }
        var birth = MQTTConnection.Birth()
        birth.first = [MQTTMessage(topic: topics.availability, text: "online", qos: 1, retain: true)]
        if settings.discovery, let controls { birth.first += configMessages(for: controls, deletingOthers: true) }
        birth.subscriptions = [topics.commandFilter] + topics.retainedStateFilters
            + (settings.discovery ? [discovery.statusTopic, discovery.configFilter] : [])
        enqueueCurrentStates()  // sent after the messages held
        return birth
    }

    package func connection(_ connection: MQTTConnection, didFail cause: String, retryIn: Double?) {
        let quickDrops = connection.quickDropsInARow
        let (report, conflict) = state.withLock { state -> ((@Sendable (HealthEvent) -> Void)?, Bool) in
            guard retryIn != nil else { return (nil, false) }
            if state.clientIDConflict {
                // Another quick drop of the same fight: said already. Anything else (never accepted, or a
                // connection that lasted) is news.
                guard quickDrops == 0 else { return (nil, false) }
                state.clientIDConflict = false
                state.saidUnavailable = false
            }
            guard !state.saidUnavailable else { return (nil, false) }
            state.saidUnavailable = true
            state.clientIDConflict = quickDrops >= MQTTConnection.quickDropsForClientIDHint
            return (state.reportHealth, state.clientIDConflict)
        }
        guard let report, let retryIn else { return }
        let (waiting, _) = connection.backlog
        let quiet = conflict
            ? "; until a connection lasts \(Int(settings.clientIDConflictStableSeconds)) s, its drops and reconnects are not said again"
            : ""
        report(HealthEvent(
            state: .mqttUnavailable,
            message: "MQTT broker \(connection.endpoint.description): \(cause); retrying in \(Int(retryIn.rounded())) s (then twice as long each time, up to every \(Int(MQTTConnection.maximumBackoff)) s); detection goes on and messages wait (\(waiting) now, up to 1000)\(quiet)",
            details: ["broker": .string(connection.endpoint.description), "cause": .string(cause)]))
    }

    /// `seconds` after the connection `generation` was accepted during a client-id conflict: still connected on
    /// it, the conflict is over, said as `mqtt_connected`.
    private func checkStable(generation: Int, seconds: Double) {
        let connected = connection.isConnected
        let report = state.withLock { state -> (@Sendable (HealthEvent) -> Void)? in
            guard connected, !state.stopped, state.clientIDConflict, state.connectGeneration == generation else { return nil }
            state.clientIDConflict = false
            state.saidUnavailable = false
            return state.reportHealth
        }
        report?(HealthEvent(
            state: .mqttConnected,
            message: "connected to the MQTT broker \(connection.endpoint.description) as \(connection.endpoint.clientID), publishing under \(topics.base), and the connection has lasted \(Int(seconds)) s: no other client takes the client id now",
            details: ["broker": .string(connection.endpoint.description)]))
    }

    package func connection(_ connection: MQTTConnection, didReceive topic: String, payload: [UInt8], retained: Bool) {
        if topic == discovery.statusTopic {
            guard settings.discovery, payload == Array("online".utf8),
                  let controls = state.withLock({ $0.controls }) else { return }
            for message in configMessages(for: controls, deletingOthers: false) { connection.enqueue(message) }
            enqueueCurrentStates()
            return
        }
        let isConfig = topic.hasPrefix(settings.discoveryPrefix + "/") && topic.hasSuffix("/config")
        if isConfig || topics.stateOwner(topic) != nil {
            // A config of this node's device, or a group's state, attributes or enabled topic, left by an earlier
            // run (or before a reload) for a group this run does not have. What this run publishes comes back too:
            // a config as published, a state topic without the retain flag (MQTT 3.1.1), which is not judged.
            guard !payload.isEmpty, isConfig ? settings.discovery : retained else { return }
            let known = state.withLock { state -> Bool in
                if state.controls == nil { state.unjudgedRetained.append(topic) }
                return state.controls != nil
            }
            for stale in known ? staleRetainedTopics([topic]) : [] {
                connection.enqueue(MQTTMessage(topic: stale, payload: [], qos: 1, retain: true))
            }
            return
        }
        guard let command = parseCommand(topic: topic, payload: payload, retained: retained) else { return }
        commands(command)
    }

    /// The command on `topic`, or nil (and a log line, rate-limited) when it is not one.
    package func parseCommand(topic: String, payload: [UInt8], retained: Bool) -> Command? {
        let prefix = topics.base + "/"
        let suffix = "/set"
        func ignore(_ why: String) -> Command? {
            let now = Self.uptime()
            let unsaid = state.withLock { state -> Int? in
                if now - state.ignoredWindowStart >= Self.ignoredLogWindow {
                    state.ignoredWindowStart = now
                    state.ignoredLogged = 0
                }
                guard state.ignoredLogged < Self.ignoredLogLimit else {
                    state.ignoredUnsaid += 1
                    return nil
                }
                state.ignoredLogged += 1
                defer { state.ignoredUnsaid = 0 }
                return state.ignoredUnsaid
            }
            if let unsaid {
                let logged = state.withLock { $0.ignoredLogged }
                var more = unsaid > 0 ? " (and \(unsaid) more ignored without a line)" : ""
                if logged == Self.ignoredLogLimit { more += "; further ones this minute are counted, not logged" }
                log("MQTT: ignored a message on \(DisplayText.escaped(topic, limit: 80)): \(why)\(more)", 4)
            }
            return nil
        }
        guard topic.hasPrefix(prefix), topic.hasSuffix(suffix), topic.utf8.count > prefix.utf8.count + suffix.utf8.count else {
            return ignore("not a command topic")
        }
        let name = String(topic.dropFirst(prefix.count).dropLast(suffix.count))
        guard !retained else { return ignore("a retained command is not applied (publish it without the retain flag)") }
        if name == TestAlert.type {
            return payload == Array(Self.pressPayload.utf8) ? .testAlert : ignore("the payload must be \(Self.pressPayload)")
        }
        let on: Bool
        switch payload {
        case Array("ON".utf8): on = true
        case Array("OFF".utf8): on = false
        default: return ignore("the payload must be ON or OFF")
        }
        if name == "sleep" { return .setSleep(on) }
        guard let controls = state.withLock({ $0.controls }), controls.groups.contains(name) else {
            return ignore("\"\(DisplayText.escaped(name, limit: 80))\" is not a watched group")
        }
        return .setGroup(name, enabled: on)
    }
}
