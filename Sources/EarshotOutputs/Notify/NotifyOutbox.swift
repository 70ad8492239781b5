import FoundationEssentials
import Glibc
import EarshotSupport
import EarshotDetection

/// The event notifications a stopping earshotd could not deliver (the server away, a retry pending), kept in a file
/// of its state directory for the next start (trial 15 H1: a smoke alarm being retried when the daemon restarted
/// never reached the phone).
///
/// What is kept: each URL's undelivered onset or reminder, one per group (the first: an onset before its reminder),
/// of every group that notifies onsets (smoke, CO and fire, and the others too: a baby cry heard seconds before an
/// upgrade's restart is still news after it); not ends, health messages or test alerts. What is sent at the next
/// start: what is younger than ``maximumAgeSeconds(group:settings:)`` (24 h for smoke, CO and fire; the group's
/// retry window, 2 minutes by default, for the others: after that the alert is stale, as when the daemon keeps
/// running).
///
/// The file, `notify-outbox.json` beside the event history (``fileName``), is JSON:
/// `{"notifications":[{"group":"smoke_alarm","kind":"onset","time":"2026-12-07T15:45:16.000Z","unix_time":1796658316.0,
/// "urls":["http://..."],"event":{...}}]}`, written atomically with mode 0600, following no link
/// (``OutputFile/writePrivate(_:to:mode:what:hint:readerPatience:)``): a URL can be a secret (an ntfy topic).
package enum NotifyOutbox {
    /// One notification kept.
    package struct Entry: Sendable, Equatable {
        package var group: String
        /// `onset` or `reminder`.
        package var kind: NotificationMessage.Kind
        /// When the event (or reminder) happened.
        package var time: Date
        /// The URLs that did not get it.
        package var urls: [String]
        /// The event's JSON as the socket carried it.
        package var event: JSONObject

        package init(group: String, kind: NotificationMessage.Kind, time: Date, urls: [String], event: JSONObject) {
            (self.group, self.kind, self.time, self.urls, self.event) = (group, kind, time, urls, event)
        }
    }

    /// The file's name in the state directory.
    package static let fileName = "notify-outbox.json"

    /// The largest file read, in bytes: a full queue of every URL is far less.
    package static let maximumBytes = 4 << 20

    /// The outbox beside `historyPath` (`[history] path`, /var/lib/earshot/history.sqlite3 by default, or
    /// /var/lib/earshot/NAME/... for `earshotd@NAME`): the daemon's state directory.
    package static func path(besideHistory historyPath: String) -> String {
        StateDirectory.file(fileName, besideHistory: historyPath)
    }

    /// How old a kept notification of `group` may be and still be sent: 24 h for an urgent group (smoke, CO, fire:
    /// the user must learn of it whenever the daemon runs again), else ``NotifySettings/onsetRetrySeconds``.
    package static func maximumAgeSeconds(group: String, settings: NotifySettings) -> Double {
        NotificationMessage.urgentGroups.contains(group) ? 86_400 : settings.onsetRetrySeconds
    }

    /// The file's bytes for `entries`.
    package static func encoded(_ entries: [Entry]) -> Data {
        let items: [JSONValue] = entries.map { entry in
            .object([
                "group": .string(entry.group), "kind": .string(entry.kind == .reminder ? "reminder" : "onset"),
                "time": .string(EventJSON.timestamp(entry.time)),
                "unix_time": .number(entry.time.timeIntervalSince1970, decimals: 3),
                "urls": .array(entry.urls.map { .string($0) }), "event": .object(entry.event),
            ])
        }
        return Data((JSONValue.object(["notifications": .array(items)]).encoded + "\n").utf8)
    }

    /// The entries of the file's bytes.
    /// - Throws: `EarshotError(.data)` saying what is wrong (not JSON, or an entry without a field it needs).
    package static func decode(_ bytes: [UInt8]) throws(EarshotError) -> [Entry] {
        let value: JSONValue
        do throws(JSONParseError) {
            value = try JSONValue.parse(bytes)
        } catch {
            throw EarshotError(.data, "not JSON: \(error.description)")
        }
        guard let items = value["notifications"]?.arrayValue else {
            throw EarshotError(.data, "no \"notifications\" list")
        }
        var entries: [Entry] = []
        for (index, item) in items.enumerated() {
            guard let group = item["group"]?.stringValue, SettingRules.isValidGroupName(group),
                  let kind = item["kind"]?.stringValue, kind == "onset" || kind == "reminder",
                  let seconds = item["unix_time"]?.doubleValue, seconds.isFinite,
                  let urls = item["urls"]?.arrayValue?.compactMap(\.stringValue),
                  let event = item["event"]?.objectValue
            else { throw EarshotError(.data, "notification \(index + 1) lacks group, kind, unix_time, urls or event") }
            entries.append(Entry(
                group: group, kind: kind == "reminder" ? .reminder : .onset,
                time: Date(timeIntervalSince1970: seconds), urls: urls, event: event))
        }
        return entries
    }

    /// What reading the outbox found.
    package enum Contents: Sendable, Equatable {
        /// No file.
        case none
        case entries([Entry])
        /// The file cannot be used: why (one phrase).
        case unreadable(String)
    }

    /// Reads the outbox at `path`, following no symbolic link, reading no FIFO or device.
    package static func read(_ path: String) -> Contents {
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else {
            let code = errno
            if code == ENOENT { return .none }
            return .unreadable(code == ELOOP ? "it is a symbolic link" : String(cString: strerror(code)))
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return .unreadable(String(cString: strerror(errno))) }
        guard status.st_mode & S_IFMT == S_IFREG else { return .unreadable("it is not a regular file") }
        guard status.st_size <= maximumBytes else { return .unreadable("it is larger than \(maximumBytes) bytes") }
        var bytes = [UInt8](repeating: 0, count: Int(status.st_size))
        var filled = 0
        while filled < bytes.count {
            let count = bytes.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress! + filled, $0.count - filled) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else {
                if count < 0 { return .unreadable(String(cString: strerror(errno))) }
                break
            }
            filled += count
        }
        do throws(EarshotError) {
            return .entries(try decode(Array(bytes[..<filled])))
        } catch {
            return .unreadable(error.message)
        }
    }
}
