import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs
import EarshotService

/// `earshot history`: its options, parsed, and the formats it prints stored events in.
package struct HistoryListing: Sendable, Equatable {
    /// How events are printed.
    package enum Format: String, Sendable, Equatable {
        /// One readable line per event, local time.
        case text
        /// One JSON object per line (times ISO 8601 UTC).
        case jsonl
        /// A header row, then one row per event (RFC 4180 quoting; times ISO 8601 UTC).
        case csv
    }

    /// `--db`: the database file. nil: `[history] path` of the configuration (``configPath``, or
    /// `DaemonConfiguration.defaultPath` when that file exists), else its default, `history.sqlite3` in
    /// ``StateDirectory`` (where earshotd writes it: `$STATE_DIRECTORY`, else /var/lib/earshot).
    package var databasePath: String?
    /// `--config`: the daemon's configuration file, read for `[history] path` (unless `--db` is given) and its
    /// `[group.NAME]` sections; nil: `DaemonConfiguration.defaultPath` when it exists.
    package var configPath: String?
    /// `--since`: a duration back from now (`90s`, `30m`, `8h`, `2d`, `1w`), a date (`2026-05-01`,
    /// `2026-05-01T22:00`, local time, or ISO 8601 with `Z`/offset, seconds optional), or a local time (`22:30`:
    /// the latest 22:30 at or before now).
    package var since: Date?
    /// `--until`: as `since`.
    package var until: Date?
    package var groups: [String] = []
    package var format = Format.text
    package var limit: Int?
    package var helpRequested = false
    /// `--since` and `--until` as given, for ``checkOrder()``'s message.
    package var sinceText: String?
    package var untilText: String?

    package init() {}

    package static let usage =
        "usage: earshot history [--since WHEN] [--until WHEN] [--group G]... [--format text|jsonl|csv] [--limit N] [--db PATH] [--config FILE]"

    package static let help = """
        \(usage)

        Lists the detections earshotd stored in its event history (oldest first).
          --since WHEN   events that ended after WHEN: a duration back from now (90s, 30m, 8h, 2d, 1w), a date
                         (2026-05-01, 2026-05-01T22:30 in local time, or ISO 8601 with Z or an offset:
                         2026-05-01T22:30Z, 2026-05-01T22:30+02:00), or a local time (22:30: the last 22:30)
          --until WHEN   events that started before WHEN (same forms)
                         (--since later than --until is refused)
          --group G      only label group G (repeat, or separate with commas), e.g. snoring; a name that is
                         no group is refused with the groups there are
          --format F     text (default), jsonl, or csv
          --limit N      only the newest N events
          --db PATH      the database (default: [history] path of the configuration file, else
                         \(EventHistory.defaultPath), or history.sqlite3 in $STATE_DIRECTORY when that is set,
                         as for earshotd; under systemd it is readable by root: sudo earshot history)
          --config FILE  the daemon's configuration file, for its [history] path (default
                         \(DaemonConfiguration.defaultPath) when it exists; --db wins over it); without one,
                         /etc/earshot/NAME.conf reads earshotd@NAME's history, /var/lib/earshot/NAME/history.sqlite3
        Times are local time as earshotd reads it (TZ in any form the C library takes, else /etc/localtime).
        """

    /// The database to list and where its path comes from.
    package struct Database: Sendable, Equatable {
        package enum Origin: Sendable, Equatable {
            /// `--db`.
            case flag
            /// `[history] path` in this configuration file.
            case configuration(file: String)
            /// The history of the instance `earshotd@name`, whose configuration file (`--config
            /// /etc/earshot/NAME.conf`) sets no `[history] path`: history.sqlite3 in /var/lib/earshot/NAME, the
            /// instance's state directory (``StateDirectory/instance(configurationFile:currentDirectory:)``).
            case instance(name: String)
            /// The default (no `--db`, no `[history] path`).
            case builtIn
        }

        package var path: String
        package var origin: Origin
    }

    /// Where the database is (``databasePath``, else `[history] path` of the configuration, else the default) and
    /// the configuration read for it (nil when `--db` alone was given: no file is read then).
    /// - Throws: the errors of `DaemonConfiguration.load(path:overrides:)` (78 for a file that cannot be read or
    ///   has a bad line; a missing `--config` file too).
    package func database() throws(EarshotError) -> (database: Database, configuration: DaemonConfiguration?) {
        if let databasePath, configPath == nil { return (Database(path: databasePath, origin: .flag), nil) }
        let configuration = try DaemonConfiguration.load(path: configPath)
        if let databasePath { return (Database(path: databasePath, origin: .flag), configuration) }
        if configuration.locations["history.path"] != nil {
            return (Database(path: configuration.history.path, origin: .configuration(file: configPath ?? DaemonConfiguration.defaultPath)),
                    configuration)
        }
        // An instance's file: its daemon writes where systemd's StateDirectory= puts it, whatever this shell's
        // $STATE_DIRECTORY says.
        if let configPath,
           let instance = StateDirectory.instance(configurationFile: configPath, currentDirectory: FileManager.default.currentDirectoryPath) {
            return (Database(path: instance.directory + "/history.sqlite3", origin: .instance(name: instance.name)), configuration)
        }
        return (Database(path: configuration.history.path, origin: .builtIn), configuration)
    }

    /// Opens the event history to list, read only.
    /// - Throws: `EarshotError(.usage)` when the path is a directory, naming it and the fix, e.g.
    ///   `--db /tmp/x is a directory: give the history database file (e.g. /var/lib/earshot/history.sqlite3)`;
    ///   `.noInput` when it is a FIFO, device or socket (`--db f: is a FIFO (named pipe), not a regular file (...)`);
    ///   otherwise the errors of ``EventHistory/init(path:access:busyTimeoutMilliseconds:)`` (66 no file, 65 not
    ///   a history, 69 locked).
    package static func openHistory(_ database: Database) throws(EarshotError) -> EventHistory {
        let path = database.path
        let named: String
        switch database.origin {
        case .flag: named = "--db \(path)"
        case .configuration(let file): named = "[history] path \(path) in \(file)"
        case .instance(let name): named = "earshotd@\(name)'s history \(path)"
        case .builtIn: named = path
        }
        // Before the kind, which follows links: a link to a directory is a link (trial 13 D1).
        if let link = SymbolicLinks.first(in: path) {
            throw EventHistory.symbolicLinkError(path: path, link: link, access: .readOnly)
        }
        let kind = PathKind(path: path)
        if kind == .directory {
            let fix = database.origin == .flag
                ? "\(named) is a directory: give the history database file (e.g. \(EventHistory.defaultPath))"
                : "\(named) is a directory: name the history database file with --db"
            throw EarshotError(.usage, fix)
        }
        // SQLite's open(2) of a FIFO would wait for a writer forever (and a device is no database either).
        if kind != .missing, kind != .regularFile {
            throw EarshotError(
                .noInput,
                "\(named): is \(kind.phrase), not a regular file (give the history database file, e.g. \(EventHistory.defaultPath))")
        }
        return try EventHistory(path: path, access: .readOnly)
    }

    /// Refuses a `--group` name that is no group: not a preset, not a `[group.NAME]` section of `configuration`,
    /// not an alarm pattern's group and not stored in `history`.
    /// - Throws: `EarshotError(.usage)`, e.g. `--group "snorring" is not a group (did you mean snoring? groups:
    ///   alarm_chirp, baby_cry, ...)`, as earshotd answers a misspelt `[detection] watch`.
    package func checkGroups(configuration: DaemonConfiguration?, history: EventHistory) throws(EarshotError) {
        guard !groups.isEmpty else { return }
        let stored = try history.groups()
        let known = Set((configuration ?? DaemonConfiguration()).groupNames + [AlarmEvent.alarmChirp] + stored).sorted()
        for name in groups where !known.contains(name) {
            let guess = NameSuggestion.likelyTypo(of: name, among: known).map { "did you mean \($0)? " } ?? ""
            throw EarshotError(.usage, "--group \"\(name)\" is not a group (\(guess)groups: \(known.joined(separator: ", ")))")
        }
    }

    /// Refuses `--since` later than `--until`, quoting both as given.
    /// - Throws: `EarshotError(.usage)`: `--since "1h" is later than --until "2h" (give the earlier time to
    ///   --since, e.g. --since 2h --until 1h)`.
    package func checkOrder() throws(EarshotError) {
        guard let since, let until, since > until, let sinceText, let untilText else { return }
        throw EarshotError(
            .usage,
            "--since \"\(sinceText)\" is later than --until \"\(untilText)\" (give the earlier time to --since, e.g. --since \(untilText) --until \(sinceText))")
    }

    /// The options that take a value, as both parsers (``parse(_:now:timeZone:)`` and the `earshot` command line's)
    /// know them.
    package static let valueOptions: Set<String> = ["--since", "--until", "--group", "--format", "--limit", "--db", "--config"]

    /// Sets one option of ``valueOptions`` from its value: the one place both parsers read the options' values.
    /// - Parameters:
    ///   - now: the time durations count back from.
    ///   - timeZone: the zone of local dates and times; nil: local time as the C library reads it (``LocalTime``).
    /// - Throws: `EarshotError(.usage)` naming the option and what it takes, e.g. `--since "yesterday": expected a
    ///   duration (90s, 30m, 8h, 2d, 1w), a local date or time ...`.
    package mutating func set(_ option: String, _ text: String, now: Date, timeZone: TimeZone? = nil) throws(EarshotError) {
        switch option {
        case "--since", "--until":
            guard let date = Self.parseTime(text, now: now, timeZone: timeZone) else {
                throw Self.timeError(option: option, text)
            }
            if option == "--since" {
                since = date
                sinceText = text
            } else {
                until = date
                untilText = text
            }
        case "--group":
            let names = text.split(separator: ",").map { $0.trimmingSpaces() }.filter { !$0.isEmpty }
            guard !names.isEmpty else { throw EarshotError(.usage, "--group needs a group name, e.g. --group snoring") }
            groups += names
        case "--format":
            guard let format = Format(rawValue: text) else {
                throw EarshotError(.usage, "--format \"\(text)\": expected text, jsonl or csv")
            }
            self.format = format
        case "--limit":
            guard let limit = Int(text), limit > 0 else {
                throw EarshotError(.usage, "--limit \"\(text)\": expected a whole number of events, 1 or more")
            }
            self.limit = limit
        case "--db":
            guard !text.isEmpty else { throw EarshotError(.usage, "--db needs a path") }
            databasePath = text
        case "--config":
            guard !text.isEmpty else { throw EarshotError(.usage, "--config needs a path") }
            configPath = text
        default:
            throw EarshotError(.usage, "unknown option \"\(option)\" (\(Self.usage))")
        }
    }

    /// Parses the arguments after `history`.
    /// - Parameter now: the time durations count back from.
    /// - Throws: `EarshotError(.usage)` naming the option and what it takes (``set(_:_:now:timeZone:)``), an
    ///   unknown option, or `--since` later than `--until` (``checkOrder()``).
    /// - Parameter timeZone: the zone of local dates and times; nil (the default): local time as the C library
    ///   reads it, as earshotd does (``LocalTime``).
    package static func parse(_ arguments: [String], now: Date = Date(), timeZone: TimeZone? = nil)
        throws(EarshotError) -> HistoryListing
    {
        var listing = HistoryListing()
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            var name = argument
            var inline: String?
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            }
            if name == "--help" || name == "-h" {
                listing.helpRequested = true
            } else if valueOptions.contains(name) {
                var text = inline
                if text == nil {
                    index += 1
                    guard index < arguments.count else { throw EarshotError(.usage, "\(name) needs a value (\(usage))") }
                    text = arguments[index]
                }
                try listing.set(name, text ?? "", now: now, timeZone: timeZone)
            } else {
                throw EarshotError(.usage, "unknown option \"\(argument)\" (\(usage))")
            }
            index += 1
        }
        try listing.checkOrder()
        return listing
    }

    /// The query these options make.
    package var query: HistoryQuery {
        HistoryQuery(since: since, until: until, groups: groups, limit: limit)
    }

    /// The usage error of a `--since`/`--until` value ``parseTime(_:now:timeZone:)`` refused, naming the forms it takes.
    package static func timeError(option: String, _ text: String) -> EarshotError {
        EarshotError(
            .usage,
            "\(option) \"\(text)\": expected a duration (90s, 30m, 8h, 2d, 1w), a local date or time (2026-05-01, 2026-05-01T22:30, 22:30) or ISO 8601 with Z or an offset (2026-05-01T22:30Z, 2026-05-01T22:30+02:00)")
    }

    /// A time given on the command line: `N` + `s|m|h|d|w` back from `now`, a date (ISO 8601, seconds optional
    /// with `Z` or an offset; without, local time in `timeZone`), or a local time of day (``clockTime(_:now:timeZone:)``).
    /// A nil `timeZone` is local time as earshotd reads it: glibc's `TZ` (any form it takes, such as
    /// `CET-1CEST,M3.5.0,M10.5.0/3` or `:Europe/Berlin`, which Foundation's `TimeZone.current` does not), else
    /// /etc/localtime (``LocalTime``).
    package static func parseTime(_ text: String, now: Date, timeZone: TimeZone? = nil) -> Date? {
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800]
        if let unit = text.last, let scale = units[unit], let amount = Double(text.dropLast()), amount.isFinite,
           amount >= 0
        {
            return now.addingTimeInterval(-amount * scale)
        }
        for fractional in [true, false] {
            if let date = try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: fractional)) {
                return date
            }
        }
        if let date = zonedDate(text) { return date }
        if let date = localDate(text, timeZone: timeZone) { return date }
        return clockTime(text, now: now, timeZone: timeZone)
    }

    /// ISO 8601 with `Z` or an offset and the seconds left out (`2026-12-06T13:00Z`, `2026-12-06T13:00+05:30`,
    /// `+0530`, `-05`), which Foundation's parser refuses; nil for anything else.
    package static func zonedDate(_ text: String) -> Date? {
        guard text.utf8.count > 16 else { return nil }
        let wallClock = String(text.prefix(16))
        let zone = String(text.dropFirst(16))
        guard wallClock.dropFirst(10).first == "T",
              let utc = TimeZone(identifier: "UTC"), let date = localDate(wallClock, timeZone: utc) else { return nil }
        if zone == "Z" || zone == "z" { return date }
        // +HH, +HHMM or +HH:MM (or -).
        guard let sign = zone.first, sign == "+" || sign == "-" else { return nil }
        var digits = Array(zone.dropFirst())
        if digits.count == 5, digits[2] == ":" { digits.remove(at: 2) }
        guard digits.count == 2 || digits.count == 4, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber),
              let hours = Int(String(digits[0..<2])), let minutes = digits.count == 4 ? Int(String(digits[2..<4])) : 0,
              hours <= 23, minutes <= 59 else { return nil }
        let offset = (sign == "+" ? 1.0 : -1.0) * Double(hours * 3600 + minutes * 60)
        return date.addingTimeInterval(-offset)
    }

    /// `HH:MM` or `HH:MM:SS` alone: the latest such local time in `timeZone` at or before `now` (at 07:00,
    /// `22:30` is yesterday's); nil for anything else.
    package static func clockTime(_ text: String, now: Date, timeZone: TimeZone? = nil) -> Date? {
        guard [5, 8].contains(text.utf8.count) else { return nil }
        // Today's date where `now` is; the day before is counted on the calendar in UTC (dates alone, so that a
        // 23- or 25-hour day does not move it).
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone ?? LocalTime.zone(at: now)
        let today = calendar.dateComponents([.year, .month, .day], from: now)
        guard let year = today.year, let month = today.month, let day = today.day,
              let utc = TimeZone(identifier: "UTC") else { return nil }
        func on(_ year: Int, _ month: Int, _ day: Int) -> Date? {
            localDate(String(cFormat: "%04d-%02d-%02dT", year, month, day) + text, timeZone: timeZone)
        }
        guard let todays = on(year, month, day) else { return nil }
        if todays <= now { return todays }
        calendar.timeZone = utc
        guard let noon = calendar.date(from: DateComponents(year: year, month: month, day: day, hour: 12)) else { return nil }
        let previous = calendar.dateComponents([.year, .month, .day], from: noon.addingTimeInterval(-86_400))
        guard let pYear = previous.year, let pMonth = previous.month, let pDay = previous.day else { return nil }
        return on(pYear, pMonth, pDay)
    }

    /// `YYYY-MM-DD`, optionally followed by `T` or a space and `HH:MM` or `HH:MM:SS`, as wall-clock time in
    /// `timeZone` (nil: local time as earshotd reads it, ``LocalTime/date(year:month:day:hour:minute:second:)``);
    /// nil for anything else or an impossible date.
    package static func localDate(_ text: String, timeZone: TimeZone? = nil) -> Date? {
        let bytes = Array(text.utf8)
        func number(_ from: Int, _ count: Int) -> Int? {
            guard from + count <= bytes.count else { return nil }
            var value = 0
            for byte in bytes[from..<(from + count)] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard [10, 16, 19].contains(bytes.count), let year = number(0, 4), bytes[4] == UInt8(ascii: "-"),
              let month = number(5, 2), bytes[7] == UInt8(ascii: "-"), let day = number(8, 2) else { return nil }
        var components = DateComponents(year: year, month: month, day: day, hour: 0, minute: 0, second: 0)
        if bytes.count > 10 {
            guard bytes[10] == UInt8(ascii: "T") || bytes[10] == UInt8(ascii: " "), let hour = number(11, 2),
                  bytes[13] == UInt8(ascii: ":"), let minute = number(14, 2) else { return nil }
            components.hour = hour
            components.minute = minute
            if bytes.count == 19 {
                guard bytes[16] == UInt8(ascii: ":"), let second = number(17, 2) else { return nil }
                components.second = second
            }
        }
        guard (1...12).contains(month), (1...31).contains(day), (0...23).contains(components.hour ?? 0),
              (0...59).contains(components.minute ?? 0), (0...59).contains(components.second ?? 0) else { return nil }
        guard let timeZone else {
            return LocalTime.date(year: year, month: month, day: day, hour: components.hour ?? 0,
                                  minute: components.minute ?? 0, second: components.second ?? 0)
        }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        guard let date = calendar.date(from: components),
              calendar.dateComponents([.day], from: date).day == day else { return nil }  // no 31 April
        return date
    }

    // MARK: Formats

    /// The CSV header row (`--format csv`).
    package static let csvHeader =
        "id,start,end,duration,group,class,peak_confidence,mean_confidence,level_dbfs,peak_level_dbfs,windows,reason"

    /// One event in `format`, without a newline. Text uses `timeZone` (nil: local time at the event's start as
    /// earshotd reads it, ``LocalTime/zone(at:)``); JSONL and CSV use UTC ISO 8601.
    ///
    /// Text: `2026-05-01 23:14:05  12.5 s  snoring  Snoring  peak 0.81 mean 0.52  -32.1 dBFS (peak -25.0)`, with
    /// `  ended by capture lost` (`monitoring stopped`, `configuration reloaded`) when the sound did not end it.
    package static func line(for event: HistoryEvent, format: Format, timeZone: TimeZone? = nil) -> String {
        let duration = JSONValue.format(event.duration, decimals: 1)
        let level = JSONValue.format(Double(event.levelDBFS), decimals: 1)
        let peakLevel = JSONValue.format(Double(event.peakLevelDBFS), decimals: 1)
        switch format {
        case .text:
            // Both decimals kept (peak 0.94 mean 0.70), so that rows line up.
            let peak = String(cFormat: "%.2f", Double(event.peakConfidence))
            let mean = String(cFormat: "%.2f", Double(event.meanConfidence))
            // What ended it, when the sound did not (trial 11 #2): `  ended by capture lost`.
            let why = DetectionEvent.EndReason(rawValue: event.endReason)?.words.map { "  ended by \($0)" } ?? ""
            return "\(localTime(event.start, timeZone: timeZone))  \(duration) s  \(event.group)  \(GroupTitle.ofClass(event.classLabel))  peak \(peak) mean \(mean)  \(level) dBFS (peak \(peakLevel))\(why)"
        case .jsonl:
            let object: JSONObject = [
                "id": .int(Int(event.id)),
                "start": .string(EventJSON.timestamp(event.start)),
                "end": .string(EventJSON.timestamp(event.end)),
                "duration": .number(event.duration, decimals: 3),
                "group": .string(event.group),
                "class": .string(event.classLabel),
                "peak_confidence": .number(Double(event.peakConfidence), decimals: 4),
                "mean_confidence": .number(Double(event.meanConfidence), decimals: 4),
                "level_dbfs": .number(Double(event.levelDBFS), decimals: 1),
                "peak_level_dbfs": .number(Double(event.peakLevelDBFS), decimals: 1),
                "windows": .int(event.windows),
                "reason": .string(event.endReason),
            ]
            return JSONValue.object(object).encoded
        case .csv:
            let fields = [
                String(event.id), EventJSON.timestamp(event.start), EventJSON.timestamp(event.end),
                JSONValue.format(event.duration, decimals: 3), event.group, event.classLabel,
                JSONValue.format(Double(event.peakConfidence), decimals: 4),
                JSONValue.format(Double(event.meanConfidence), decimals: 4), level, peakLevel, String(event.windows),
                event.endReason,
            ]
            return fields.map(csvField).joined(separator: ",")
        }
    }

    /// A CSV field, quoted when it holds a comma, a quote or a line break (AudioSet labels hold commas).
    package static func csvField(_ text: String) -> String {
        guard text.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return text }
        return "\"" + text.replacing("\"", with: "\"\"") + "\""
    }

    /// `YYYY-MM-DD HH:MM:SS` in `timeZone` (nil: local time at `date`, ``LocalTime/zone(at:)``).
    package static func localTime(_ date: Date, timeZone: TimeZone?) -> String {
        LocalTime.dateTimeText(date, timeZone: timeZone ?? LocalTime.zone(at: date))
    }
}
