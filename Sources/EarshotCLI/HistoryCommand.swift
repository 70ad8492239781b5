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
    static let flags = Array(HistoryListing.valueOptions).sorted()

    /// The options and errors of `HistoryListing.parse`, whose wording HistoryTests pins: each value is read by
    /// `HistoryListing.set` (local dates in local time as earshotd reads it: `LocalTime`).
    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> HistoryListing {
        var listing = HistoryListing()
        let now = Date()
        while let item = try parser.next() {
            switch item {
            case .positional(let text):
                throw parser.unexpected(text)
            case .flag(let flag, let inline):
                guard HistoryListing.valueOptions.contains(flag) else {
                    // HistoryTests pins this wording (HistoryListing.parse's), not the other commands' list.
                    throw EarshotError(.usage, "unknown option \"\(flag)\" (\(usage))")
                }
                try listing.set(flag, try parser.value(of: flag, inline, allowed: usage), now: now)
            }
        }
        try listing.checkOrder()
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
