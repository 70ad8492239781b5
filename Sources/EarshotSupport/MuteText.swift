import FoundationEssentials
import Glibc

/// The words of a run-time mute that the journal, the notifications and `earshot` share.
package enum MuteText {
    /// `15 min`, `8 h`, `90 min`: whole hours as hours, anything else in minutes.
    package static func duration(minutes: Int) -> String {
        minutes >= 60 && minutes % 60 == 0 ? "\(minutes / 60) h" : "\(minutes) min"
    }

    /// `19:15`, local time, rounded down to the minute; `19:15 tomorrow` when it falls on the local day after `now`'s
    /// (a mute lasts at most a day). The corresponding C function is `localtime_r`.
    package static func clock(_ date: Date, now: Date? = nil) -> String {
        let end = localParts(date)
        let time = "\(two(end.tm_hour)):\(two(end.tm_min))"
        guard let now else { return time }
        let today = localParts(now)
        return end.tm_yday != today.tm_yday || end.tm_year != today.tm_year ? "\(time) tomorrow" : time
    }

    private static func localParts(_ date: Date) -> tm {
        // A time_t holds any date a mute can have; one beyond ±10^15 s (not a mute's) is shown as 1970's, never a trap.
        let wall = date.timeIntervalSince1970.rounded(.down)
        var seconds = wall.isFinite && abs(wall) < 1e15 ? time_t(wall) : 0
        var parts = tm()
        localtime_r(&seconds, &parts)
        return parts
    }

    private static func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
}
