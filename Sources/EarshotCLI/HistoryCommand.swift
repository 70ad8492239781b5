import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot history [--since WHEN] [--until WHEN] [--group G]... [--format text|jsonl|csv] [--limit N] [--db PATH]
/// [--config FILE]`: prints the detections stored by earshotd, in local time as earshotd reads it (glibc's `TZ`).
/// Exit status: 0 (also when nothing matched), 64 usage (also a --db that is a directory, --since later than
/// --until, a --group that is no group), 66 no database (or a --db that is a FIFO, device or socket), 65 not a
/// history, 69 locked, 78 a configuration file that cannot be read.
enum HistoryCommand: EarshotCommand {
    static let name = "history"
    static let usage = HistoryListing.usage
    static let help = HistoryListing.help
    static let flags = ["--since", "--until", "--group", "--format", "--limit", "--db", "--config"]

    /// The same options and errors as `HistoryListing.parse`, whose wording HistoryTests pins (durations back from
    /// now, local dates in local time as earshotd reads it: `LocalTime`, not Foundation's `TimeZone.current`, which
    /// takes no POSIX `TZ` rule such as `CET-1CEST,M3.5.0,M10.5.0/3`).
    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> HistoryListing {
        var listing = HistoryListing()
        let now = Date()
        var since: (text: String, date: Date)?
        var until: (text: String, date: Date)?
        while let item = try parser.next() {
            switch item {
            case .positional(let text):
                throw parser.unexpected(text)
            case .flag(let flag, let inline):
                switch flag {
                case "--since", "--until":
                    let text = try parser.value(of: flag, inline, allowed: usage)
                    guard let date = HistoryListing.parseTime(text, now: now) else {
                        throw HistoryListing.timeError(option: flag, text)
                    }
                    if flag == "--since" {
                        listing.since = date
                        since = (text, date)
                    } else {
                        listing.until = date
                        until = (text, date)
                    }
                case "--group":
                    let names = try parser.value(of: flag, inline, allowed: usage).split(separator: ",")
                        .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
                    guard !names.isEmpty else { throw EarshotError(.usage, "--group needs a group name, e.g. --group snoring") }
                    listing.groups += names
                case "--format":
                    let text = try parser.value(of: flag, inline, allowed: usage)
                    guard let format = HistoryListing.Format(rawValue: text) else {
                        throw EarshotError(.usage, "--format \"\(text)\": expected text, jsonl or csv")
                    }
                    listing.format = format
                case "--limit":
                    let text = try parser.value(of: flag, inline, allowed: usage)
                    guard let limit = Int(text), limit > 0 else {
                        throw EarshotError(.usage, "--limit \"\(text)\": expected a whole number of events, 1 or more")
                    }
                    listing.limit = limit
                case "--db":
                    let text = try parser.value(of: flag, inline, allowed: usage)
                    guard !text.isEmpty else { throw EarshotError(.usage, "--db needs a path") }
                    listing.databasePath = text
                case "--config":
                    let text = try parser.value(of: flag, inline, allowed: usage)
                    guard !text.isEmpty else { throw EarshotError(.usage, "--config needs a path") }
                    listing.configPath = text
                default:
                    // HistoryTests pins this wording (HistoryListing.parse's), not the other commands' list.
                    throw EarshotError(.usage, "unknown option \"\(flag)\" (\(usage))")
                }
            }
        }
        try HistoryListing.checkOrder(since: since, until: until)
        return listing
    }

    static func execute(_ listing: HistoryListing) -> Int32 {
        do {
            let (database, configuration) = try listing.database()
            let history = try HistoryListing.openHistory(database)
            try listing.checkGroups(configuration: configuration, history: history)
            let events = try history.events(matching: listing.query)
            var out = listing.format == .csv ? HistoryListing.csvHeader + "\n" : ""
            for event in events { out += HistoryListing.line(for: event, format: listing.format) + "\n" }
            StandardOutput.write(out)
            if events.isEmpty, listing.format == .text {
                reportError("no events in \(database.path) match")
            }
            return 0
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
    }
}
