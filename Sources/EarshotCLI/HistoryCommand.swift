import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot history [--since WHEN] [--until WHEN] [--group G]... [--format text|jsonl|csv] [--limit N] [--db PATH]`:
/// prints the detections stored by earshotd. Exit status: 0 (also when nothing matched), 64 usage (also a --db that
/// is a directory), 66 no database, 65 not a history, 69 locked.
enum HistoryCommand {
    static func run(_ arguments: [String]) -> Int32 {
        do {
            let listing = try HistoryListing.parse(arguments, timeZone: .current)
            if listing.helpRequested {
                print(HistoryListing.help)
                return 0
            }
            let history = try listing.openHistory()
            let events = try history.events(matching: listing.query)
            var out = listing.format == .csv ? HistoryListing.csvHeader + "\n" : ""
            for event in events { out += HistoryListing.line(for: event, format: listing.format, timeZone: .current) + "\n" }
            StandardOutput.write(out)
            if events.isEmpty, listing.format == .text {
                FileHandle.standardError.write(Data("earshot: no events in \(listing.databasePath) match\n".utf8))
            }
            return 0
        } catch {
            FileHandle.standardError.write(Data("earshot: \(error.message)\n".utf8))
            return error.exitStatus
        }
    }
}
