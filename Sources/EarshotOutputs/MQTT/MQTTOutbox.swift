/// One MQTT PUBLISH: topic, payload, QoS, retain flag, and whether it may be dropped when the outbox is full.
package struct MQTTMessage: Sendable, Equatable {
    package var topic: String
    package var payload: [UInt8]
    /// 0 (at most once) or 1 (at least once).
    package var qos: Int32
    package var retain: Bool
    /// A smoke or CO event: never the one dropped from a full outbox.
    package var critical: Bool
    /// Seconds the message may wait in the outbox before it is sent (``MQTTOutbox/dropExpired(now:)``); nil: as long
    /// as it takes. `P/detected` has ``MQTTOutbox/detectedMaximumAgeSeconds``: it triggers automations when it
    /// arrives.
    package var maximumAgeSeconds: Double?

    package init(
        topic: String, payload: [UInt8], qos: Int32, retain: Bool, critical: Bool = false, maximumAgeSeconds: Double? = nil
    ) {
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.critical = critical
        self.maximumAgeSeconds = maximumAgeSeconds
    }

    package init(
        topic: String, text: String, qos: Int32, retain: Bool, critical: Bool = false, maximumAgeSeconds: Double? = nil
    ) {
        self.init(
            topic: topic, payload: Array(text.utf8), qos: qos, retain: retain, critical: critical,
            maximumAgeSeconds: maximumAgeSeconds)
    }
}

/// The messages not yet acknowledged by the broker, in the order they were queued: what an outage holds back and
/// a reconnect delivers, in order.
///
/// - QoS 1 messages stay until the broker's PUBACK (``acknowledge(mid:)``); after a lost connection every one not
///   acknowledged is sent again (at least once, in order) on the next (``connectionLost()``).
/// - QoS 0 messages (the level) are dropped when the connection is lost: they are only worth sending live.
/// - A retained message replaces a not-yet-sent one of the same topic (the broker would keep only the last).
/// - Bounded by `limit`: when full, the oldest message that is not ``MQTTMessage/critical`` is dropped (counted in
///   ``dropped``); critical ones (smoke and CO events) are kept even above the limit.
/// - A message with ``MQTTMessage/maximumAgeSeconds`` that has waited longer than that without being sent on the
///   current connection is dropped before the next send (``dropExpired(now:)``, counted in ``expired``): the
///   `P/detected` onsets, which fire Home Assistant's automations when they arrive, not at their `time` (audit 13
///   F6: after an outage of hours, a morning's events fired the phone automations at once). `P/event` and the
///   retained states keep the record and are delivered however late.
///
/// A plain value: the owner keeps it behind its lock.
package struct MQTTOutbox: Sendable {
    package struct Entry: Sendable, Equatable {
        package var sequence: UInt64
        package var message: MQTTMessage
        /// The message id libmosquitto gave it on this connection; nil while not sent on it.
        package var mid: Int32?
        /// When it was queued (``append(_:at:)``), in the owner's seconds.
        package var queuedAt: Double = 0
    }

    /// How long a `P/detected` message may wait for the broker, in seconds: 300 (5 minutes). An onset that reaches
    /// Home Assistant's event entity within it still means "now" to a person reading the phone; one held longer
    /// (a broker or network outage) is dropped, and `P/event` carries it with its `time`.
    package static let detectedMaximumAgeSeconds: Double = 300

    package let limit: Int
    package private(set) var entries: [Entry] = []
    /// Messages dropped because the outbox was full, since it was made.
    package private(set) var dropped = 0
    /// Messages dropped because they waited longer than their ``MQTTMessage/maximumAgeSeconds``, since it was made.
    package private(set) var expired = 0
    private var nextSequence: UInt64 = 0

    /// - Parameter limit: messages held at most (1,000 by default: hours of events, minutes of state changes).
    package init(limit: Int = 1_000) {
        self.limit = max(1, limit)
    }

    package var count: Int { entries.count }

    /// Queues `message` at the end, queued at `now` (the clock ``dropExpired(now:)`` is given; only messages with
    /// ``MQTTMessage/maximumAgeSeconds`` use it); returns its sequence number (``Entry/sequence``).
    @discardableResult
    package mutating func append(_ message: MQTTMessage, at now: Double = 0) -> UInt64 {
        if message.retain, let index = entries.firstIndex(where: { $0.mid == nil && $0.message.retain && $0.message.topic == message.topic }) {
            entries.remove(at: index)
        }
        entries.append(Entry(sequence: nextSequence, message: message, mid: nil, queuedAt: now))
        nextSequence &+= 1
        while entries.count > limit, let index = entries.firstIndex(where: { !$0.message.critical }) {
            entries.remove(at: index)
            dropped += 1
        }
        return nextSequence &- 1
    }

    /// Whether the entry `sequence` is still held (not acknowledged, not dropped).
    package func holds(sequence: UInt64) -> Bool {
        entries.contains { $0.sequence == sequence }
    }

    /// The entries not yet sent on this connection, in order.
    package var unsent: [Entry] { entries.filter { $0.mid == nil } }

    /// Notes that the entry `sequence` was handed to libmosquitto as `mid`. A QoS 0 message is done then: nothing
    /// acknowledges it, and libmosquitto's publish callback for it runs inside `mosquitto_publish` when the packet
    /// is written at once, before its mid is known here (trial 6: such entries stayed for ever, `waiting` climbed
    /// to the limit and every later message counted one as dropped); a QoS 0 message lost with the connection is
    /// not sent again anyway.
    package mutating func markSent(sequence: UInt64, mid: Int32) {
        guard let index = entries.firstIndex(where: { $0.sequence == sequence }) else { return }
        if entries[index].message.qos == 0 {
            entries.remove(at: index)
        } else {
            entries[index].mid = mid
        }
    }

    /// The broker acknowledged `mid` (QoS 1): the entry is done (a QoS 0 entry is gone already, ``markSent``).
    /// Returns its sequence number, nil when no entry was sent as `mid`.
    @discardableResult
    package mutating func acknowledge(mid: Int32) -> UInt64? {
        guard let index = entries.firstIndex(where: { $0.mid == mid }) else { return nil }
        return entries.remove(at: index).sequence
    }

    /// Drops the messages not sent on this connection that have waited longer than their
    /// ``MQTTMessage/maximumAgeSeconds`` at `now` (counted in ``expired``); returns how many. One already handed to
    /// libmosquitto stays until acknowledged (or until the connection is lost: then it is judged again).
    @discardableResult
    package mutating func dropExpired(now: Double) -> Int {
        let before = entries.count
        entries.removeAll { entry in
            guard entry.mid == nil, let age = entry.message.maximumAgeSeconds else { return false }
            return now - entry.queuedAt > age
        }
        expired += before - entries.count
        return before - entries.count
    }

    /// The connection is gone: QoS 0 messages are dropped, the rest will be sent again on the next one.
    package mutating func connectionLost() {
        entries.removeAll { $0.message.qos == 0 }
        for index in entries.indices { entries[index].mid = nil }
    }
}
