import FoundationEssentials
import EarshotSupport

/// `[notify]`: HTTP notifications (webhooks, ntfy) of events, as ``NotifySink`` sends them.
package struct NotifySettings: Sendable, Equatable {
    /// What a notification's body and headers look like.
    package enum Format: String, Sendable, Equatable, CaseIterable {
        /// `Content-Type: application/json`, the event's JSON object as the socket carries it.
        case json
        /// ntfy's publish format (https://docs.ntfy.sh/publish/): a plain-text message as the body and the
        /// `Title`, `Priority` (1 to 5) and `Tags` headers.
        case ntfy
    }

    /// Where each notification is POSTed: http:// or https:// URLs, each tried on its own (one that fails does not
    /// hold back the others). Key `url`, URLs separated by spaces; empty (the default) turns notifications off.
    package var urls: [String] = []
    /// The groups whose events are notified. Key `groups`, names separated by spaces, `|` or `,`; empty (the
    /// default) notifies every group that publishes events (the watched groups, `alarm_chirp`, `snoring`).
    package var groups: [String] = []
    /// Key `format`, `json` (the default) or `ntfy`.
    package var format: Format = .json
    /// Whether an event's end is notified too (only for an onset that was). Key `on_end`, default false.
    package var onEnd = false
    /// Whether the phone is told when monitoring stops working (the capture is unavailable or lost, the input
    /// stalled, the daemon stops) and when it works again (and when the daemon starts listening), whatever
    /// ``groups`` says. Key `health`, default true: a smoke or CO monitor that cannot hear must say so.
    package var health = true
    /// This daemon's name, said in every notification (`kitchen: Smoke alarm`; the JSON's `node`). Not a key of
    /// `[notify]`: the daemon passes the name it has on MQTT (`[mqtt] node`, whether or not MQTT is enabled), and
    /// the default is the same (``MQTTSettings/defaultNode``: NAME under `earshotd@NAME`, else the host name).
    /// Empty leaves it out.
    package var node = MQTTSettings.defaultNode
    /// Seconds, 0...86400: while a group's event lasts, it is notified again once per this (a reminder), and a new
    /// onset of the group less than this after its last notification is not notified (a repeating alarm that
    /// pauses and starts again is one notification per `repeat_after`), unless that last notification was the
    /// group's end (with ``onEnd``): after "ended", the next onset is always notified. 0 notifies every onset and
    /// sends no reminders. Key `repeat_after`, default 300 (5 minutes).
    package var repeatAfterSeconds: Double = 300
    /// Seconds one HTTP attempt may take, connecting included, 1...300. Key `timeout`, default 10.
    package var timeoutSeconds: Double = 10
    /// Attempts after the first when one fails (no answer, HTTP 408, 429 or 5xx), 0...10; the waits between them
    /// double from ``firstRetryDelaySeconds`` up to ``maximumRetryDelaySeconds``. Key `retries`, default 3.
    package var retries = 3
    /// The wait before the first retry, in seconds (not a key; tests shorten it). Default 1: 1, 2, 4 s ...
    package var firstRetryDelaySeconds: Double = 1
    /// The longest wait between two attempts, in seconds (not a key). Default 60.
    package var maximumRetryDelaySeconds: Double = 60
    /// How long an onset or reminder of an urgent group (``NotificationMessage/urgentGroups``: smoke, CO, fire) is
    /// retried while the answer is worth retrying (no answer, 408, 429, 5xx), in seconds (not a key). Default 900
    /// (15 minutes): a rate limit (ntfy.sh answers 429 once a visitor's burst is used; it refills in seconds to
    /// minutes) or a home server's restart (an update of Home Assistant or of a self-hosted ntfy: a minute or two)
    /// must not cost the one message that matters, and an alarm told 15 minutes late still matters to someone away
    /// from home; beyond that, a URL that still refuses is down, and the queue behind it (the end, reminders,
    /// other groups) must move on.
    package var urgentRetrySeconds: Double = 900
    /// How long an onset or reminder of any other group (a baby cry, breaking glass, a low-battery chirp) is retried
    /// in the same way, in seconds (not a key). Default 120: `retries` alone (1 + 2 + 4 s by default) lost a baby
    /// cry to a receiver away for 19 s (trial 7 #13), and a home server's or ntfy's restart takes a minute or two;
    /// after 2 minutes the alert is stale (the cry has been heard, or has stopped: its end is the news then), so it
    /// is given up as before and the queue behind it moves on. Ends, health messages and test alerts keep `retries`.
    package var onsetRetrySeconds: Double = 120
    /// The longest wait between two attempts of an onset or reminder retried past `retries` (not a key), in seconds,
    /// default 10, unless the server's `Retry-After` asks for longer: once the server is back, the alert arrives
    /// within this.
    package var urgentMaximumRetryDelaySeconds: Double = 10
    /// The longest `Retry-After` (HTTP 429 or 503, seconds or a date) honoured, in seconds (not a key), default 60:
    /// a server asking for an hour must not hold a smoke alarm for an hour.
    package var maximumRetryAfterSeconds: Double = 60
    /// How long an end caused by a reload or a gap in the audio (reasons `reload`, `stream_gap`) is held before it
    /// is notified, in seconds (not a key), default 30: a new event of the group within it is the same sound
    /// still going (a reload restarts the window grid, a short outage ends open events), so the end is dropped and
    /// the new event carries on the notified one (no second onset message, its end notified).
    package var continuationSeconds: Double = 30
    /// Notifications waiting per URL before further ones are dropped for it (counted), not a key. Default 256.
    package var queueLimit = 256

    package init() {}

    /// Whether any URL is set.
    package var enabled: Bool { !urls.isEmpty }

    /// The keys of `[notify]`, in the order `config/earshotd.conf` documents them.
    package static let keys = ["url", "groups", "format", "on_end", "health", "repeat_after", "timeout", "retries"]

    /// The wait before retry `attempt` (1 for the first retry), in seconds.
    package func retryDelay(beforeRetry attempt: Int) -> Double {
        min(maximumRetryDelaySeconds, firstRetryDelaySeconds * Double(1 << min(max(0, attempt - 1), 20)))
    }

    /// Sets one `[notify]` key; returns what is allowed ("must be ...") when `value` is bad.
    package mutating func set(key: String, value: String) -> String? {
        switch key {
        case "url":
            let items = value.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            if let bad = items.first(where: { Self.urlProblem($0) != nil }) {
                return "\"\(bad)\" \(Self.urlProblem(bad)!); separate several URLs with spaces, e.g. https://ntfy.sh/my-earshot-alerts"
            }
            // `url = A, B` would POST to "A," (another ntfy topic, another path): a list written with commas.
            if let bad = items.first(where: { $0.hasSuffix(",") || $0.hasSuffix(";") }) {
                return "\"\(bad)\" ends with \"\(bad.last!)\"; separate several URLs with spaces, not commas, e.g. url = https://ntfy.sh/topic-a https://ntfy.sh/topic-b"
            }
            urls = items
        case "groups":
            let names = SettingRules.listItems(value, separators: SettingRules.groupSeparators)
            if let bad = names.first(where: { !SettingRules.isValidGroupName($0) }) {
                return "\"\(bad)\" is not a group name (1 to 64 lowercase letters, digits and _; separate names with |, commas or spaces)"
            }
            var seen = Set<String>()
            groups = names.filter { seen.insert($0).inserted }
        case "format":
            guard let format = Format(rawValue: value) else { return "must be json or ntfy" }
            self.format = format
        case "on_end":
            guard let flag = SettingRules.flag.parse(value) else { return SettingRules.flag.requirement }
            onEnd = flag
        case "health":
            guard let flag = SettingRules.flag.parse(value) else { return SettingRules.flag.requirement }
            health = flag
        case "repeat_after":
            guard let seconds = Double(value), seconds.isFinite, (0...86_400).contains(seconds) else {
                return "must be a number in [0, 86400] seconds (0: notify every onset, no reminders)"
            }
            repeatAfterSeconds = seconds
        case "timeout":
            guard let seconds = Double(value), seconds.isFinite, (1...300).contains(seconds) else {
                return "must be a number in [1, 300] seconds"
            }
            timeoutSeconds = seconds
        case "retries":
            guard let count = Int(value), (0...10).contains(count) else { return "must be a whole number in [0, 10]" }
            retries = count
        default:
            return "is not a known key (report this as a bug)"
        }
        return nil
    }

    /// Why `url` cannot be notified, or nil: it must be `http://` or `https://` followed by a host, with no
    /// spaces or control characters.
    package static func urlProblem(_ url: String) -> String? {
        let lowered = url.lowercased()
        guard let scheme = ["http://", "https://"].first(where: { lowered.hasPrefix($0) }) else {
            return "is not an http:// or https:// URL"
        }
        let rest = url.dropFirst(scheme.count)
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        let host = authority.split(separator: "@").last.map(String.init) ?? ""
        guard !host.isEmpty, !host.hasPrefix(":") else { return "has no host name" }
        guard url.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7F }) else {
            return "contains spaces or control characters"
        }
        return nil
    }

    /// `url` as health events and logs show it: `scheme://host[:port]`, then each segment of its path cut to
    /// its first 4 characters (`…` marks a cut), never its user, password, query or fragment (a ntfy topic or a
    /// webhook token is a secret, and 4 characters do not give it away), and, with several URLs, its position in
    /// `[notify] url`: `https://ntfy.sh/kitc… (url 2 of 3)`. Two URLs on one server are told apart by the
    /// position even when their paths begin alike.
    package static func shownURL(_ url: String, index: Int, count: Int) -> String {
        var shown = shownOrigin(url)
        if let range = url.firstRange(of: "://") {
            let rest = url[range.upperBound...]
            let path = rest.drop { $0 != "/" && $0 != "?" && $0 != "#" }.prefix { $0 != "?" && $0 != "#" }
            for segment in path.split(separator: "/", omittingEmptySubsequences: false).dropFirst() {
                shown += "/" + segment.prefix(4) + (segment.count > 4 ? "…" : "")
            }
        }
        return count > 1 ? "\(shown) (url \(index + 1) of \(count))" : shown
    }

    /// `scheme://host[:port]` of `url`, without user, path or query (a ntfy topic or a webhook token in the path
    /// is a secret).
    package static func shownOrigin(_ url: String) -> String {
        guard let range = url.firstRange(of: "://") else { return url }
        let scheme = url[..<range.lowerBound].lowercased()
        let authority = url[range.upperBound...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        let host = authority.split(separator: "@").last.map(String.init) ?? ""
        return "\(scheme)://\(host)"
    }
}
