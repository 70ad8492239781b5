import FoundationEssentials
import Glibc
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
    /// hold back the others). Key `url`, URLs separated by spaces, on one line or more (indented lines go on with
    /// the list); then, once ``readURLFile()`` has run, those of ``urlFile``. Empty (the default) turns
    /// notifications off.
    package var urls: [String] = []
    /// A file holding more URLs, one per line (blank lines and lines starting with `#` skipped), read by
    /// ``readURLFile()`` and added after `url`'s: an ntfy topic or a webhook token is a password, and the
    /// configuration file is often world-readable. Key `url_file`, an absolute path; empty (the default): none.
    package var urlFile = ""
    /// How many of ``urls`` came from ``urlFile`` (the last ones); 0 until ``readURLFile()`` has run.
    package var fileURLCount = 0
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
    /// Seconds between two reachability checks of each URL (``NotifySink``: an HTTP `HEAD`, no notification sent),
    /// 0 (no checks) or 1...86400; the first runs at start. A URL that does not answer a check (its name does not
    /// resolve, the connection is refused or times out, TLS verification fails) is failing (`notify_failed`, the
    /// MQTT sensor ON) before an alarm finds it out, and is then checked every ``failingCheckSeconds`` (or this,
    /// when shorter) until it answers. Key `check_interval`, default 3600 (1 hour: a server that went away is
    /// found within the hour, for one small request an hour per URL).
    package var checkIntervalSeconds: Double = 3600
    /// How often a URL that is failing without an answer is checked (not a key), in seconds, default 60: the
    /// failing state clears within a minute of the server's return, not at the next alarm (trial 15 L3).
    package var failingCheckSeconds: Double = 60
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
    /// The longest an attempt waits for an answer (not a key), in seconds, default 60 (at least ``timeoutSeconds``):
    /// after an attempt whose request was sent and not answered within its time, the URL's next attempts wait
    /// twice as long, up to this, so that a server slower than `timeout` gets one more copy of a notification,
    /// not one per retry (trial 15 M1); an answer within `timeout` brings the wait back to it.
    package var maximumAnswerWaitSeconds: Double = 60
    /// Notifications waiting per URL before further ones are dropped for it (counted), not a key. Default 256.
    package var queueLimit = 256

    package init() {}

    /// Whether any URL is set (those of ``urlFile`` count once ``readURLFile()`` has read them).
    package var enabled: Bool { !urls.isEmpty }

    /// The keys of `[notify]`, in the order `config/earshotd.conf` documents them.
    package static let keys = [
        "url", "url_file", "groups", "format", "on_end", "health", "repeat_after", "timeout", "retries", "check_interval",
    ]

    /// The largest ``urlFile`` read, in bytes: room for hundreds of URLs.
    package static let maximumURLFileBytes = 65_536

    /// The wait before retry `attempt` (1 for the first retry), in seconds.
    package func retryDelay(beforeRetry attempt: Int) -> Double {
        min(maximumRetryDelaySeconds, firstRetryDelaySeconds * Double(1 << min(max(0, attempt - 1), 20)))
    }

    /// Sets one `[notify]` key; returns what is allowed ("must be ...") when `value` is bad.
    package mutating func set(key: String, value: String) -> String? {
        switch key {
        case "url":
            return addURLs(value)
        case "url_file":
            // The keys sit side by side, and the README says to move URLs to url_file: a URL here is a mistake.
            if value.contains("://") {
                return "takes the path of a file holding the URLs, not a URL (write the URL in that file, one per line, or in url)"
            }
            guard value.isEmpty || value.hasPrefix("/") else {
                return "must be an absolute file path, e.g. /etc/earshot/notify-urls"
            }
            urlFile = value
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
        case "check_interval":
            guard let seconds = Double(value), seconds.isFinite, seconds == 0 || (1...86_400).contains(seconds) else {
                return "must be 0 (no reachability checks) or a number in [1, 86400] seconds"
            }
            checkIntervalSeconds = seconds
        default:
            return "is not a known key (report this as a bug)"
        }
        return nil
    }

    /// Adds the URLs of one line of `url` (the key's or an indented line going on with it) to ``urls``; returns
    /// what is wrong with the first bad one instead, the URL shown as ``shownURL(_:)`` shows it (never its user,
    /// password, query or the rest of its path), without the key (the caller adds it).
    package mutating func addURLs(_ value: String) -> String? {
        let items = value.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        for item in items {
            if let problem = Self.listedURLProblem(item) { return problem }
        }
        urls += items
        return nil
    }

    /// Reads ``urlFile`` (when one is named) and adds its URLs after `url`'s in ``urls``: one URL per line, blank
    /// lines and lines starting with `#` skipped, white space around a URL ignored. Run once per configuration
    /// read (the daemon at start and at each reload, `--check-config`), before anything uses ``urls``.
    /// - Throws: `EarshotError(.config)` with a one-line description of why not (missing, unreadable, not a
    ///   regular file, over ``maximumURLFileBytes``, a line that is not a URL, no URL at all), without the path or
    ///   the key's location (the caller adds them), e.g. `line 3: "https://ntfy.sh/kitc…" ends with "," (one URL per
    ///   line, nothing after it)`. A URL is shown as ``shownURL(_:)`` shows it; text without `://` (a password file
    ///   named by mistake, a bare topic) is never quoted: `line 1 is not an http:// or https:// URL (one URL per line)`.
    package mutating func readURLFile() throws(EarshotError) {
        guard !urlFile.isEmpty else { return }
        let bytes: [UInt8]
        do {
            bytes = try RegularFile.read(urlFile, limit: Self.maximumURLFileBytes)
        } catch {
            let why = switch error {
            case .cannotOpen(let code) where code == ENOENT:
                "no such file (create it with one URL per line, readable by the daemon's user alone, e.g. chown root:earshot and chmod 640)"
            case .cannotOpen(let code), .readFailed(let code):
                "cannot read: \(String(cString: strerror(code))) (make it readable by the daemon's user)"
            case .notRegularFile(let kind):
                "is \(kind.phrase), not a regular file (point url_file at a file holding the URLs, one per line)"
            case .tooLarge:
                "is larger than \(Self.maximumURLFileBytes) bytes (it should hold the URLs alone, one per line)"
            }
            throw EarshotError(.config, why)
        }
        var found: [String] = []
        // Split on the bytes: in a String, "\r\n" is one Character, not "\n".
        let lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        for (index, raw) in lines.enumerated() {
            let line = String(decoding: raw, as: UTF8.self).trimmingWhitespace()
            if line.isEmpty || line.hasPrefix("#") { continue }
            let words = line.split { $0 == " " || $0 == "\t" }
            guard words[0].contains("://") else {
                throw EarshotError(.config, "line \(index + 1) is not an http:// or https:// URL (one URL per line)")
            }
            let shown = "line \(index + 1): \"\(Self.shownURL(String(words[0])))\""
            if words.count > 1 {
                let next = words[1].contains("://") ? "\"\(Self.shownURL(String(words[1])))\"" : "more text"
                throw EarshotError(.config, "\(shown) is followed by \(next) on its line (one URL per line)")
            }
            if let problem = Self.urlProblem(line) {
                throw EarshotError(.config, "\(shown) \(problem)\(problem.hasSuffix(")") ? "" : " (one URL per line)")")
            }
            if let last = line.last, last == "," || last == ";" {
                throw EarshotError(.config, "\(shown) ends with \"\(last)\" (one URL per line, nothing after it)")
            }
            found.append(line)
        }
        guard !found.isEmpty else {
            throw EarshotError(.config, "holds no URL (write one URL per line; lines starting with # are comments)")
        }
        urls += found
        fileURLCount = found.count
    }

    /// What is wrong with `url`, one item of a list of URLs, as ``addURLs(_:)`` says it, or nil: ``urlProblem(_:)``,
    /// or a last character `,` or `;` (`url = A, B` would POST to "A,": another ntfy topic, another path).
    private static func listedURLProblem(_ url: String) -> String? {
        let shown = "\"\(shownURL(url))\""
        if let problem = urlProblem(url) {
            // A URL that is not one, or has no host, is often a list gone wrong.
            let listAdvice = problem.hasSuffix(")") ? "" : "; separate several URLs with spaces, e.g. https://ntfy.sh/my-earshot-alerts"
            return "\(shown) \(problem)\(listAdvice)"
        }
        if let last = url.last, last == "," || last == ";" {
            return "\(shown) ends with \"\(last)\"; separate several URLs with spaces, not commas, e.g. url = https://ntfy.sh/topic-a https://ntfy.sh/topic-b"
        }
        return nil
    }

    /// Why `url` cannot be notified, or nil: it must be `http://` or `https://` followed by a host libcurl takes
    /// (a name without the characters libcurl 7.88 refuses in one, or an IPv6 address in brackets), an optional
    /// port from 1 to 65535, and no spaces or control characters. What libcurl would refuse at every attempt
    /// ("URL using bad/illegal format") is refused here, when the configuration is read. The text names only the
    /// parts that are not secret (the host, the port), never the user, password, path or query.
    package static func urlProblem(_ url: String) -> String? {
        let lowered = url.lowercased()
        guard let scheme = ["http://", "https://"].first(where: { lowered.hasPrefix($0) }) else {
            return "is not an http:// or https:// URL"
        }
        let rest = url.dropFirst(scheme.count)
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        let hostAndPort = authority.split(separator: "@", omittingEmptySubsequences: false).last.map(String.init) ?? ""
        guard !hostAndPort.isEmpty, !hostAndPort.hasPrefix(":") else { return "has no host name" }
        guard url.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7F }) else {
            return "contains spaces or control characters"
        }
        if authority.filter({ $0 == "@" }).count > 1 {
            return "has more than one @ before its host (write an @ in the user name or password as %40)"
        }
        // `https://alice:pa/ss@host/x`: the authority ends at the first `/`, so the user and the start of the password
        // would read as host and port; say what is wrong without quoting either.
        let beyondAuthority = rest.dropFirst(authority.count).prefix { $0 != "?" && $0 != "#" }
        if !authority.contains("@"), beyondAuthority.contains("@"), urlProblem(hostPart: hostAndPort) != nil {
            return "has an @ after a / (a / in the user name or password is written %2F, an @ as %40)"
        }
        return urlProblem(hostPart: hostAndPort)
    }

    /// What is wrong with the host and port of a URL (`host:port`, `[v6]:port`), or nil.
    private static func urlProblem(hostPart hostAndPort: String) -> String? {
        let host: Substring
        let port: Substring?
        if hostAndPort.hasPrefix("[") {
            guard let close = hostAndPort.firstIndex(of: "]") else {
                return "has an IPv6 address without its closing ] (e.g. http://[fd00::1]:8080/)"
            }
            host = hostAndPort[hostAndPort.index(after: hostAndPort.startIndex)..<close]
            let after = hostAndPort[hostAndPort.index(after: close)...]
            guard after.isEmpty || after.hasPrefix(":") else {
                return "has \"\(after)\" after its IPv6 address [\(host)] (only :PORT may follow it)"
            }
            port = after.isEmpty ? nil : after.dropFirst()
            // A zone (`%25eth0`, `%eth0`) may follow the address.
            let address = String(host.prefix { $0 != "%" })
            var bytes = in6_addr()
            guard inet_pton(AF_INET6, address, &bytes) == 1 else {
                return "has [\(host)], which is not an IPv6 address (e.g. http://[fd00::1]:8080/)"
            }
        } else {
            let parts = hostAndPort.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            host = parts[0]
            port = parts.count > 1 ? parts[1] : nil
            // libcurl 7.88 refuses these in a host name, also %-encoded (its hostname_check).
            let refused = Set(" /:#?!@{}[]\\$'\"^`*<>=;,+&()%")
            let decoded = percentDecoded(host)
            if decoded == nil || host.contains(where: { refused.contains($0) && $0 != "%" })
                || decoded!.contains(where: { refused.contains($0) })
            {
                return "has the host name \"\(host)\", which holds characters no host name has (letters, digits, - and .; an IPv6 address goes in brackets)"
            }
        }
        // An empty port (`host:/`) is the scheme's; leading zeros are fine (libcurl reads `:0080` as 80).
        if let port, !port.isEmpty {
            let digits = port.drop { $0 == "0" }
            guard port.allSatisfy({ ("0"..."9").contains($0) }), digits.count <= 5, let number = Int(digits),
                  (1...65535).contains(number)
            else {
                return "has the port \"\(port)\" (a port is a number from 1 to 65535)"
            }
        }
        return nil
    }

    /// `text` with its `%XX` escapes decoded, or nil when one is malformed.
    private static func percentDecoded(_ text: Substring) -> String? {
        var bytes: [UInt8] = []
        var index = text.utf8.startIndex
        let utf8 = text.utf8
        while index < utf8.endIndex {
            let byte = utf8[index]
            if byte == UInt8(ascii: "%") {
                let first = utf8.index(after: index)
                guard first < utf8.endIndex, utf8.index(after: first) < utf8.endIndex,
                      let value = UInt8(String(decoding: utf8[first...utf8.index(after: first)], as: UTF8.self), radix: 16)
                else { return nil }
                bytes.append(value)
                index = utf8.index(first, offsetBy: 2)
            } else {
                bytes.append(byte)
                index = utf8.index(after: index)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `url` as health events, logs, test alerts and the status reply show it: `scheme://host[:port]`, then each
    /// segment of its path cut to its first 4 characters (`…` marks a cut), `?…` for a query and `…@` for a user
    /// and password; never its user, password, query or fragment (a ntfy topic or a webhook token is a secret, and
    /// 4 characters do not give it away). When 8 characters or more are left out, `#` and two hex digits of ``fingerprint(_:)`` of all but its
    /// `scheme://host[:port]` (user, password, path, query and fragment as written) follow, so that URLs that begin
    /// alike are told apart (trial 16 M3: `earshot-kitchen-7f3k2q` and `earshot-kitchen-9x2m4p` both showed as
    /// `ears…`, and a user could not see which one a reload or a test alert used). Fewer than 8 left out get no
    /// fingerprint: 8 bits would be most of what is hidden (trial 17 L1: with a 5-character topic, the fingerprint
    /// and the 4 characters shown gave the topic away). With several URLs, its position in `[notify] url`:
    /// `https://ntfy.sh/ears…#64 (url 2 of 3)`.
    package static func shownURL(_ url: String, index: Int, count: Int) -> String {
        let (cut, leftOut) = cutURL(url, markingQuery: true)
        let shown = leftOut >= fingerprintMinimumLeftOut ? cut + "#" + fingerprint(hiddenPart(url)) : cut
        return count > 1 ? "\(shown) (url \(index + 1) of \(count))" : shown
    }

    /// The characters a shown URL must leave out for ``shownURL(_:index:count:)`` to add a fingerprint: 8 of
    /// ntfy's 64-letter topic alphabet hold 48 bits, of which 8 bits leave 2^40 candidates.
    package static let fingerprintMinimumLeftOut = 8

    /// Two lowercase hex digits that tell URLs apart where ``shownURL(_:index:count:)`` cuts them: the 32-bit
    /// FNV-1a hash of `text`'s UTF-8 bytes, its four bytes folded into one by XOR. Two different URLs get the same
    /// digits 1 time in 256.
    package static func fingerprint(_ text: some StringProtocol) -> String {
        var hash: UInt32 = 2_166_136_261  // FNV-1a's 32-bit offset basis
        for byte in text.utf8 {
            hash ^= UInt32(byte)
            hash &*= 16_777_619  // FNV's 32-bit prime
        }
        let folded = UInt8(truncatingIfNeeded: hash ^ (hash >> 8) ^ (hash >> 16) ^ (hash >> 24))
        let digits = String(folded, radix: 16)
        return digits.count == 1 ? "0" + digits : digits
    }

    /// `url` without its `scheme://host[:port]`: its user and password (with their `@`), path, query and fragment,
    /// as written. The whole text when it has no `://`.
    private static func hiddenPart(_ url: String) -> Substring {
        guard let range = url.firstRange(of: "://") else { return Substring(url) }
        let rest = url[range.upperBound...]
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        let user = authority.lastIndex(of: "@").map { authority[...$0] } ?? ""
        return user + rest[authority.endIndex...]
    }

    /// `scheme://host[:port]` and each path segment cut to 4 characters, without user, password, query or fragment
    /// (with `markingQuery`, `?…` where a query was); and how many characters of ``hiddenPart(_:)`` that leaves out.
    private static func cutURL(_ url: String, markingQuery: Bool = false) -> (shown: String, leftOut: Int) {
        var shown = shownOrigin(url)
        var leftOut = 0
        if url.contains("://") {
            let hidden = hiddenPart(url)
            leftOut = hidden.count
            let path = hidden.drop { $0 != "/" && $0 != "?" && $0 != "#" }.prefix { $0 != "?" && $0 != "#" }
            for segment in path.split(separator: "/", omittingEmptySubsequences: false).dropFirst() {
                shown += "/" + cutSegment(segment)
                leftOut -= 1 + min(4, segment.count)
            }
            if markingQuery, hidden.prefix(while: { $0 != "#" }).contains("?") { shown += "?…" }
            // A user and password: `…@` before the host (trial 18 L6: `http://user:pw@h/ok/x` read as a whole URL).
            if markingQuery, hidden.first != "/", let at = hidden.firstIndex(of: "@"),
               !hidden[..<at].contains("/"), let scheme = shown.firstRange(of: "://") {
                shown.insert(contentsOf: "…@", at: scheme.upperBound)
            }
        }
        return (shown, leftOut)
    }

    private static func cutSegment(_ segment: Substring) -> String { segment.prefix(4) + (segment.count > 4 ? "…" : "") }

    /// `url` as configuration errors show it: as ``shownURL(_:index:count:)`` without the position and the
    /// fingerprint (the error names the file and line). Text without
    /// `://` (not a URL: `ntfy.sh/topic`) alike: nothing from `?` or `#` on, nothing up to an `@`, each segment
    /// after the first `/` cut to 4 characters, and the first one too unless it reads as a host (it holds a `.` or
    /// a `:`), since a bare topic name is the secret itself. Everything up to the last `@` before `?` or `#` is
    /// dropped, also past a `/`: in `https://alice:pa/ss@host/x` the `/` is part of a password.
    package static func shownURL(_ url: String) -> String {
        let beforeQuery = url.prefix { $0 != "?" && $0 != "#" }
        if let range = url.firstRange(of: "://") {
            guard let at = beforeQuery.lastIndex(of: "@"), at > range.upperBound else { return cutURL(url).shown }
            return cutURL(String(url[..<range.upperBound]) + url[url.index(after: at)...]).shown
        }
        let segments = beforeQuery.split(separator: "/", omittingEmptySubsequences: false)
        let first = segments[0].split(separator: "@", omittingEmptySubsequences: false).last ?? ""
        var shown = first.contains(".") || first.contains(":") ? String(first) : cutSegment(first)
        for segment in segments.dropFirst() { shown += "/" + cutSegment(segment) }
        return shown
    }

    /// `message`, a configuration error, with every URL it quotes from `source` (the configuration file's text, or
    /// the value quoted) shown as ``shownURL(_:)`` shows it, whatever key, value or line quotes it: a notification
    /// URL is a password, and a failed reload's error goes to the socket's subscribers, MQTT and the status reply.
    /// A word of `message` (split at white space and `"`) is a URL when it holds `://`, or reads as `HOST/PATH`
    /// (`ntfy.sh/topic`: the part before its first `/` holds a `.` or a `:` and does not start with `.`); it is
    /// shown cut when its text (up to an escape's `\`, without a `...` or `…` cut) appears in `source`. A `(`
    /// before it and `:`, `,`, `;`, `.`, `)` and a cut after it stay as they are. The message's own examples
    /// (`e.g. https://ntfy.sh/my-earshot-alerts`) and paths are not in `source`, and stay whole.
    package static func redactingURLs(_ message: String, quoting source: String) -> String {
        guard !source.isEmpty else { return message }
        var out = ""
        var word = ""
        func flush() {
            out += redactedWord(word, quoting: source)
            word = ""
        }
        for character in message {
            if character == " " || character == "\t" || character == "\"" {
                flush()
                out.append(character)
            } else {
                word.append(character)
            }
        }
        flush()
        return out
    }

    private static func redactedWord(_ word: String, quoting source: String) -> String {
        var core = Substring(word)
        var before = "", after = ""
        while core.first == "(" { before.append(core.removeFirst()) }
        while true {
            if core.hasSuffix("...") {
                after = "..." + after
                core = core.dropLast(3)
            } else if let last = core.last, ":,;.)…".contains(last) {
                after = String(last) + after
                core = core.dropLast()
            } else {
                break
            }
        }
        let head = core.prefix { $0 != "/" }
        let looksLikeURL = core.contains("://")
            || (core.contains("/") && !head.isEmpty && !head.hasPrefix(".") && (head.contains(".") || head.contains(":")))
        let probe = core.prefix { $0 != "\\" }
        guard looksLikeURL, !probe.isEmpty, source.contains(probe) else { return word }
        return before + shownURL(String(core)) + after
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
