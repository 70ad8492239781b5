import Synchronization
import EarshotDetection

/// Groups muted at run time (MQTT's switches, the socket's `mute`, `earshot mute`), each until an end: their events
/// are not published (socket, journal, history, MQTT, clips) until the end passes (``expire(at:)``), they are
/// unmuted, or the daemon restarts. An event open when its group is muted still ends as usual; one whose onset was
/// held back has its end held back too, so that no subscriber sees an end without its onset. An event still open
/// when its group is unmuted (or its mute ends) is announced then: its held-back onset, taken out with
/// ``takeHeldOnset(of:)``, goes out late (marked `unmuted`), and its end follows as usual.
///
/// Ends are readings of the daemon's mute clock, in seconds (``EarshotDaemon``: the boot clock, which a step of the
/// wall clock does not move and which counts a suspend; or the stream's time for input replayed faster or slower
/// than real time); this type only compares them.
package final class GroupMutes: Sendable {
    /// One group's mute: when it ends (mute-clock seconds) and how long it was asked for (minutes).
    package struct Mute: Sendable, Equatable {
        package var end: Double
        package var minutes: Int

        package init(end: Double, minutes: Int) {
            self.end = end
            self.minutes = minutes
        }
    }

    private struct State {
        /// The muted groups and their mutes.
        var ends: [String: Mute] = [:]
        /// Per group, the onset held back while it was muted, for as long as its event is open (its end takes it
        /// out): what is announced when the group is unmuted before the event ends.
        var heldOnsets: [String: DetectionStage.Output] = [:]
    }

    private let state = Mutex(State())

    /// The life-safety groups: a mute of theirs lasts ``DaemonConfiguration/Detection/alarmMuteMinutes`` by default
    /// (like a smoke alarm's own hush button, which re-arms it after minutes) and is told to the phone.
    package static let lifeSafetyGroups: Set<String> = ["smoke_alarm", "co_alarm", "fire_alarm"]

    /// The longest mute, in minutes: 1440 (a day). A longer absence is better served by taking the group out of
    /// `[detection] watch`, which the configuration file shows.
    package static let maximumMinutes = 1440

    package init() {}

    /// The muted groups now.
    package var muted: Set<String> { state.withLock { Set($0.ends.keys) } }

    /// The muted groups and their mutes, by name.
    package var mutes: [String: Mute] { state.withLock { $0.ends } }

    /// Mutes `group` for `minutes`, until `end` (mute-clock seconds); a group muted already gets the new end (a
    /// renewal).
    /// - Returns: true when the group was not muted before.
    package func mute(_ group: String, until end: Double, minutes: Int) -> Bool {
        state.withLock { $0.ends.updateValue(Mute(end: end, minutes: minutes), forKey: group) == nil }
    }

    /// Unmutes `group`; true when it was muted.
    package func unmute(_ group: String) -> Bool {
        state.withLock { $0.ends.removeValue(forKey: group) != nil }
    }

    /// Forgets the mutes of the groups not in `watched` (a reload stopped watching them), and an onset still held
    /// back for them (their events ended at that reload), without unmuting anything; returns them, by name.
    package func forget(groupsNotIn watched: Set<String>) -> [String] {
        state.withLock { state in
            let gone = state.ends.keys.filter { !watched.contains($0) }.sorted()
            for group in gone {
                state.ends[group] = nil
                state.heldOnsets[group] = nil
            }
            return gone
        }
    }

    /// Unmutes the groups whose end is at or before `now` (mute-clock seconds) and returns them, by name, with
    /// their mutes.
    package func expire(at now: Double) -> [(group: String, mute: Mute)] {
        state.withLock { state in
            let ended = state.ends.filter { $0.value.end <= now }.sorted { $0.key < $1.key }
            for (group, _) in ended { state.ends[group] = nil }
            return ended.map { (group: $0.key, mute: $0.value) }
        }
    }

    /// Whether an event of the detection stage is published now: an onset unless its group is muted (then it is
    /// held back, see ``takeHeldOnset(of:)``); an end unless its onset was held back. Other outputs: always.
    /// A point event (an `alarm_chirp`, which has no end) of a muted group is dropped, never held.
    package func admits(_ output: DetectionStage.Output) -> Bool {
        let group: String, isOnset: Bool, holds: Bool
        switch output {
        case .detection(.onset(let onset)): (group, isOnset, holds) = (onset.group, true, true)
        case .detection(.offset(let offset)): (group, isOnset, holds) = (offset.group, false, true)
        case .snore(.onset(let onset)): (group, isOnset, holds) = (onset.group, true, true)
        case .snore(.offset(let offset, _)): (group, isOnset, holds) = (offset.group, false, true)
        case .alarm(let alarm): (group, isOnset, holds) = (alarm.group, alarm.kind == .onset, alarm.group != AlarmEvent.alarmChirp)
        case .window, .health: return true
        }
        return state.withLock { state in
            guard isOnset else { return state.heldOnsets.removeValue(forKey: group) == nil }
            guard state.ends[group] != nil else { return true }
            if holds { state.heldOnsets[group] = output }
            return false
        }
    }

    /// The onset of `group` held back while it was muted, when its event is still open and the group is no longer
    /// muted; it is then no longer held (its end will be published). Nil otherwise.
    package func takeHeldOnset(of group: String) -> DetectionStage.Output? {
        state.withLock { state in
            guard state.ends[group] == nil else { return nil }
            return state.heldOnsets.removeValue(forKey: group)
        }
    }
}
