import FoundationEssentials
import Glibc
import Dispatch
internal import CSystemd
import EarshotSupport
import EarshotModel
import EarshotAnalysis
import EarshotDetection

/// Logs one structured journal entry per detection event and health change, or the same message line on stderr
/// when there is no journal.
///
/// The journal may not read its socket (systemd-journald hung, stopped with SIGSTOP, or overloaded): libsystemd's
/// `sd_journal_sendv` sends each entry with a blocking `sendmsg` on an `AF_UNIX` datagram socket, which waits once
/// journald's receive queue holds `net.unix.max_dgram_qlen` datagrams (512 under systemd, the kernel's default 10).
/// Entries are therefore sent by a writer of their own (a ``BoundedWriter`` on `earshot.journal.writer`), so a log
/// line never holds the thread that says it (before, a `mute` over the socket held the socket's queue, and with it
/// every status reply and event, and the stop's last line held the exit). At most ``journalPendingLimitBytes`` wait;
/// an entry that does not fit is dropped whole and counted, and once the journal has taken what waited one entry
/// says how many were lost (``droppedEntryMessage(_:)``, priority 4).
///
/// Standard error may be a pipe nobody reads (`earshotd --foreground | less` left at a page, a supervisor that
/// stopped reading): its lines are written by a ``LineWriter`` of their own, as standard output's are, so a log line
/// never holds the thread that says it (a `mute` over the socket held the socket's queue, and with it every status
/// reply and event, until standard error took the line). At most ``fallbackPendingLimitBytes`` wait; a line that
/// does not fit is dropped whole and counted, and once standard error has taken what waited one line says how many
/// were lost (``droppedLine(_:identifier:)``).
///
/// Fields (names are `[A-Z0-9_]`, none starting with `_`, as the journal requires for user fields):
/// - every entry: `MESSAGE`, `PRIORITY` (syslog level), `SYSLOG_IDENTIFIER` (`earshotd`), `EARSHOT_EVENT`
///   (`onset`, `end`, `health`, or `test_alert` for a test alert, priority 5);
/// - onset (priority 5, notice): `EARSHOT_GROUP`, `EARSHOT_CLASS`, `EARSHOT_CONFIDENCE` (4 decimals),
///   `EARSHOT_STREAM_TIME` (s, 3 decimals), and `EARSHOT_ONSET_REASON=unmuted` for one announced late because its
///   group was unmuted while the event was going on;
/// - end (priority 6, info): `EARSHOT_GROUP`, `EARSHOT_CLASS`, `EARSHOT_CONFIDENCE` (the peak),
///   `EARSHOT_STREAM_TIME` (start), `EARSHOT_END_TIME`, `EARSHOT_DURATION`, `EARSHOT_PEAK_CONFIDENCE`,
///   `EARSHOT_MEAN_CONFIDENCE`, `EARSHOT_END_REASON`;
/// - health (priority from `HealthEvent.State.priority`): `EARSHOT_HEALTH` (the state) and one `EARSHOT_<KEY>` per
///   detail (key upper-cased, other characters than `A-Z0-9_` made `_`).
///
/// Query them with e.g. `journalctl -t earshotd EARSHOT_GROUP=smoke_alarm`.
///
/// - Important: Thread-safe (the writers' locks); call from any queue. Entries and fallback lines are written after
///   the call returns: ``flush(patience:)`` before the process exits.
package final class JournalSink: Sendable {
    /// Where entries go.
    package enum Destination: Sendable, Equatable {
        /// The systemd journal, via sd_journal_sendv.
        case journal
        /// `"<identifier>: <MESSAGE>\n"` on the fallback descriptor (stderr).
        case standardError
    }

    /// One journal field.
    package struct Field: Sendable, Equatable {
        package var name: String
        package var value: String

        package init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
    }

    /// journald's native socket; when it is missing there is no journal to write to.
    package static let defaultJournalSocketPath = "/run/systemd/journal/socket"

    /// Chosen at init: `.journal` when the journal socket exists, else `.standardError`.
    package let destination: Destination
    /// `SYSLOG_IDENTIFIER`, and the prefix of fallback lines.
    package let identifier: String
    private let fallback: LineWriter
    /// Sends the entries to the journal (unused with `.standardError`).
    private let entries: BoundedWriter<[Field]>

    /// Bytes of entries that may wait for the journal before further entries are dropped (each counted as the
    /// datagram sd_journal_sendv makes of it, ``entryBytes(_:)``): 16 KiB, the bound of standard error's lines
    /// (``fallbackPendingLimitBytes``), so that a hung journal costs the daemon no more than a stuck standard error;
    /// about 50 entries (an onset is about 300 bytes, a `mute` 150), on top of what journald's socket itself holds
    /// (`net.unix.max_dgram_qlen` datagrams, 512 under systemd).
    package static let journalPendingLimitBytes = fallbackPendingLimitBytes

    /// Bytes of fallback lines that may wait for standard error before further lines are dropped: 16 KiB, as for
    /// standard output (``StandardOutputSink/pendingLimitBytes``), about 100 lines, on top of what the pipe itself
    /// holds (64 KiB).
    package static let fallbackPendingLimitBytes = StandardOutputSink.pendingLimitBytes

    /// - Parameters:
    ///   - identifier: the `SYSLOG_IDENTIFIER` value and fallback-line prefix.
    ///   - journalSocketPath: the socket whose presence means the journal is running (tests pass a missing path to
    ///     force the fallback).
    ///   - fallbackDescriptor: where lines go without a journal (stderr); the caller keeps it open.
    package init(
        identifier: String = "earshotd", journalSocketPath: String = JournalSink.defaultJournalSocketPath,
        fallbackDescriptor: Int32 = STDERR_FILENO
    ) {
        self.identifier = identifier
        let fallback = LineWriter(
            descriptor: fallbackDescriptor, label: "earshot.stderr.writer", pendingLimitBytes: Self.fallbackPendingLimitBytes,
            caughtUpLine: { dropped in Self.droppedLine(dropped, identifier: identifier) })
        self.fallback = fallback
        entries = BoundedWriter(
            label: "earshot.journal.writer", pendingLimitBytes: Self.journalPendingLimitBytes,
            caughtUp: { dropped in Self.droppedEntryFields(dropped, identifier: identifier) }
        ) { fields in
            // The journal refused the entry (its socket there but nobody bound to it): the line still reaches the
            // log via stderr, without waiting for it.
            if Self.send(fields) < 0 { fallback.write(Self.fallbackLine(for: fields, identifier: identifier)) }
        }
        destination = access(journalSocketPath, F_OK) == 0 ? .journal : .standardError
    }

    /// Logs a detection event.
    package func record(_ event: DetectionEvent) {
        write(Self.fields(for: event, identifier: identifier))
    }

    /// Logs a health change.
    package func record(_ health: HealthEvent) {
        write(Self.fields(for: health, identifier: identifier))
    }

    /// Logs an entry whose fields were made elsewhere (e.g. `AlarmEvent.journalFields(identifier:)`), in order.
    package func record(fields: [Field]) {
        write(fields)
    }

    /// Logs a daemon message that is neither a detection nor a health change (start, reload, stop).
    /// - Parameter priority: syslog priority, 0 (emerg) to 7 (debug); default 6 (info).
    package func log(_ message: String, priority: Int = 6) {
        write([Field("MESSAGE", message), Field("PRIORITY", String(priority)), Field("SYSLOG_IDENTIFIER", identifier)])
    }

    /// The `MESSAGE` of a detection event, e.g.
    /// `smoke_alarm detected: "Smoke detector, smoke alarm" (confidence 0.81) at stream time 12.48 s` or
    /// `smoke_alarm ended: "Smoke detector, smoke alarm" from 12.48 s to 18.24 s (5.76 s, peak confidence 0.91, mean 0.72)`
    /// (`ended (capture lost: the sound may still be going on):` and the like when the sound did not end it,
    /// ``DetectionEvent/EndReason/parenthesized``);
    /// a model's class in words (`baby_cry detected: "Baby cry" ...`, ``GroupTitle/ofClass(_:)``; `EARSHOT_CLASS`
    /// keeps `builtin_baby_cry:baby_cry`).
    package static func message(for event: DetectionEvent) -> String {
        switch event {
        case .onset(let onset):
            return "\(onset.group) detected: \"\(GroupTitle.ofClass(onset.classLabel))\" (confidence \(fixed(Double(onset.confidence), 2)))"
                + " at stream time \(fixed(onset.start, 2)) s"
        case .offset(let offset):
            return "\(offset.group) ended\(offset.reason.parenthesized): \"\(GroupTitle.ofClass(offset.classLabel))\" from \(fixed(offset.start, 2)) s to \(fixed(offset.end, 2)) s"
                + " (\(fixed(offset.duration, 2)) s, peak confidence \(fixed(Double(offset.peakConfidence), 2)),"
                + " mean \(fixed(Double(offset.meanConfidence), 2)))"
        }
    }

    /// The `MESSAGE` of a health change: `health <state>: <message>` (or `health <state>` with no message).
    package static func message(for health: HealthEvent) -> String {
        health.message.isEmpty ? "health \(health.state.rawValue)" : "health \(health.state.rawValue): \(health.message)"
    }

    /// The journal fields of a detection event, in the order they are sent.
    package static func fields(for event: DetectionEvent, identifier: String) -> [Field] {
        var fields = [
            Field("MESSAGE", message(for: event)),
            Field("PRIORITY", event.isOnset ? "5" : "6"),
            Field("SYSLOG_IDENTIFIER", identifier),
        ]
        let confidence = { (value: Float) in JSONValue.format(Double(value), decimals: EventJSON.confidenceDecimals) }
        let time = { (value: Double) in JSONValue.format(value, decimals: EventJSON.timeDecimals) }
        switch event {
        case .onset(let onset):
            fields += [
                Field("EARSHOT_EVENT", "onset"),
                Field("EARSHOT_GROUP", onset.group),
                Field("EARSHOT_CLASS", onset.classLabel),
                Field("EARSHOT_CONFIDENCE", confidence(onset.confidence)),
                Field("EARSHOT_STREAM_TIME", time(onset.start)),
            ]
        case .offset(let offset):
            fields += [
                Field("EARSHOT_EVENT", "end"),
                Field("EARSHOT_GROUP", offset.group),
                Field("EARSHOT_CLASS", offset.classLabel),
                Field("EARSHOT_CONFIDENCE", confidence(offset.peakConfidence)),
                Field("EARSHOT_STREAM_TIME", time(offset.start)),
                Field("EARSHOT_END_TIME", time(offset.end)),
                Field("EARSHOT_DURATION", time(offset.duration)),
                Field("EARSHOT_PEAK_CONFIDENCE", confidence(offset.peakConfidence)),
                Field("EARSHOT_MEAN_CONFIDENCE", confidence(offset.meanConfidence)),
                Field("EARSHOT_END_REASON", offset.reason.rawValue),
            ]
        }
        return fields
    }

    /// The fields of an onset announced when its group was unmuted while the event was going on: `MESSAGE` gets
    /// ` (announced on unmute)` and `EARSHOT_ONSET_REASON=unmuted` is added, e.g. `smoke_alarm detected: T3 pattern
    /// at 3150 Hz (1 cycle) at stream time 6.01 s (announced on unmute)`.
    package static func announcedOnUnmute(_ fields: [Field]) -> [Field] {
        fields.map { $0.name == "MESSAGE" ? Field("MESSAGE", $0.value + " (announced on unmute)") : $0 }
            + [Field("EARSHOT_ONSET_REASON", EventLines.unmutedReason)]
    }

    /// The journal fields of a health change, in the order they are sent.
    package static func fields(for health: HealthEvent, identifier: String) -> [Field] {
        var fields = [
            Field("MESSAGE", message(for: health)),
            Field("PRIORITY", String(health.state.priority)),
            Field("SYSLOG_IDENTIFIER", identifier),
            Field("EARSHOT_EVENT", "health"),
            Field("EARSHOT_HEALTH", health.state.rawValue),
        ]
        for entry in health.details.entries {
            let name = "EARSHOT_" + String(
                entry.key.uppercased().unicodeScalars.map { scalar -> Character in
                    ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar) ? Character(scalar) : "_"
                })
            guard !fields.contains(where: { $0.name == name }) else { continue }
            let value: String
            switch entry.value {
            case .string(let text): value = text
            default: value = entry.value.encoded
            }
            fields.append(Field(name, value))
        }
        return fields
    }

    /// The journal fields of a test alert (priority 5, notice, as an onset), e.g. `MESSAGE=test alert (requested
    /// over the event socket): sent to every output that carries alerts`, `EARSHOT_EVENT=test_alert`.
    package static func fields(for alert: TestAlert, identifier: String) -> [Field] {
        [
            Field("MESSAGE", "test alert (requested over \(alert.requestedBy)): sent to every output that carries alerts"),
            Field("PRIORITY", "5"),
            Field("SYSLOG_IDENTIFIER", identifier),
            Field("EARSHOT_EVENT", TestAlert.type),
        ]
    }

    /// The fallback line for `fields`: `"<identifier>: <MESSAGE>\n"`.
    package static func fallbackLine(for fields: [Field], identifier: String) -> String {
        let message = fields.first { $0.name == "MESSAGE" }?.value ?? ""
        return "\(identifier): \(message)\n"
    }

    /// The line written once standard error has taken the lines that waited for it, after `dropped` did not fit:
    /// `earshotd: 12 log lines were dropped: standard error did not take them (is anyone reading it?)`.
    package static func droppedLine(_ dropped: Int, identifier: String) -> String {
        let count = dropped == 1 ? "1 log line was" : "\(dropped) log lines were"
        return "\(identifier): \(count) dropped: standard error did not take \(dropped == 1 ? "it" : "them") (is anyone reading it?)\n"
    }

    /// The `MESSAGE` of the entry sent once the journal has taken the entries that waited for it, after `dropped`
    /// did not fit: `12 journal entries were dropped: the journal did not take them (is systemd-journald running?)`.
    package static func droppedEntryMessage(_ dropped: Int) -> String {
        let count = dropped == 1 ? "1 journal entry was" : "\(dropped) journal entries were"
        return "\(count) dropped: the journal did not take \(dropped == 1 ? "it" : "them") (is systemd-journald running?)"
    }

    /// The fields of that entry: `MESSAGE` (``droppedEntryMessage(_:)``), `PRIORITY=4` (warning), `SYSLOG_IDENTIFIER`.
    package static func droppedEntryFields(_ dropped: Int, identifier: String) -> [Field] {
        [Field("MESSAGE", droppedEntryMessage(dropped)), Field("PRIORITY", "4"), Field("SYSLOG_IDENTIFIER", identifier)]
    }

    /// The bytes of the datagram sd_journal_sendv sends for `fields`: `NAME=value\n` each, and for a value holding a
    /// newline `NAME\n`, its length (8 bytes, little-endian), the value and `\n`.
    package static func entryBytes(_ fields: [Field]) -> Int {
        fields.reduce(0) { total, field in
            let value = field.value.utf8
            return total + field.name.utf8.count + 1 + value.count + 1 + (value.contains(UInt8(ascii: "\n")) ? 8 : 0)
        }
    }

    /// Fallback lines dropped since start because standard error did not take them.
    package var droppedLines: Int { fallback.droppedLines }

    /// Journal entries dropped since start because the journal did not take them.
    package var droppedEntries: Int { entries.dropped }

    /// Waits until the entries and fallback lines logged before have reached the journal and standard error, at most
    /// `patience` in all (for the last words of a process about to `_exit`: a hung journal holds the exit no longer);
    /// returns whether they did.
    @discardableResult
    package func flush(patience: DispatchTimeInterval) -> Bool {
        let deadline = DispatchTime.now() + patience
        let sent = destination == .journal ? entries.flush(patience: patience) : true
        let now = DispatchTime.now()
        let left = deadline > now ? Int(deadline.uptimeNanoseconds - now.uptimeNanoseconds) : 0
        let written = fallback.flush(patience: .nanoseconds(left))
        return sent && written
    }

    private func write(_ fields: [Field]) {
        switch destination {
        case .journal: entries.write(fields, bytes: Self.entryBytes(fields))
        case .standardError: fallback.write(Self.fallbackLine(for: fields, identifier: identifier))
        }
    }

    /// Sends one entry; returns sd_journal_sendv's result (0, or a negative errno).
    /// The corresponding C function is `sd_journal_sendv`.
    private static func send(_ fields: [Field]) -> Int32 {
        var storage: [UInt8] = []
        var ranges: [(start: Int, count: Int)] = []
        for field in fields {
            let start = storage.count
            storage += Array(field.name.utf8)
            storage.append(UInt8(ascii: "="))
            storage += Array(field.value.utf8)
            ranges.append((start, storage.count - start))
        }
        guard !ranges.isEmpty else { return 0 }
        return storage.withUnsafeMutableBytes { raw -> Int32 in
            guard let base = raw.baseAddress else { return -EINVAL }
            let vectors = ranges.map { iovec(iov_base: base + $0.start, iov_len: $0.count) }
            return vectors.withUnsafeBufferPointer { sd_journal_sendv($0.baseAddress, Int32($0.count)) }
        }
    }

    private static func fixed(_ value: Double, _ decimals: Int) -> String {
        value.isFinite ? String(cFormat: "%.\(decimals)f", value) : "n/a"
    }
}

extension DetectionEvent {
    package var isOnset: Bool {
        if case .onset = self { return true }
        return false
    }
}

extension AlarmEvent {
    /// The journal fields, in the order they are sent: `MESSAGE`, `PRIORITY` (5 onset, 6 end), `SYSLOG_IDENTIFIER`,
    /// `EARSHOT_EVENT` (`onset` or `end`), `EARSHOT_GROUP`, `EARSHOT_SOURCE`, `EARSHOT_PATTERN` (when one),
    /// `EARSHOT_CYCLES`, `EARSHOT_TONE_HZ`, `EARSHOT_CONFIDENCE` (`confidence`), `EARSHOT_CLASSIFIER_SCORE` (when
    /// one), `EARSHOT_STREAM_TIME` (start) and, for an end, `EARSHOT_END_TIME` and `EARSHOT_END_REASON`.
    package func journalFields(identifier: String) -> [JournalSink.Field] {
        var fields: [JournalSink.Field] = [
            .init("MESSAGE", message),
            .init("PRIORITY", kind == .onset ? "5" : "6"),
            .init("SYSLOG_IDENTIFIER", identifier),
            .init("EARSHOT_EVENT", kind == .onset ? "onset" : "end"),
            .init("EARSHOT_GROUP", group),
            .init("EARSHOT_SOURCE", source.rawValue),
        ]
        if let pattern { fields.append(.init("EARSHOT_PATTERN", pattern.rawValue)) }
        fields.append(.init("EARSHOT_CYCLES", String(cycles)))
        fields.append(.init("EARSHOT_TONE_HZ", String(Int(toneHz.rounded()))))
        fields.append(.init("EARSHOT_CONFIDENCE", JSONValue.format(Double(confidence), decimals: EventJSON.confidenceDecimals)))
        if let classifierScore {
            fields.append(.init("EARSHOT_CLASSIFIER_SCORE", JSONValue.format(Double(classifierScore), decimals: EventJSON.confidenceDecimals)))
        }
        fields.append(.init("EARSHOT_STREAM_TIME", JSONValue.format(start, decimals: EventJSON.timeDecimals)))
        if kind == .end {
            fields.append(.init("EARSHOT_END_TIME", JSONValue.format(time, decimals: EventJSON.timeDecimals)))
            fields.append(.init("EARSHOT_END_REASON", reason.rawValue))
        }
        return fields
    }
}
