import Synchronization
import EarshotDetection

/// Groups muted at run time (MQTT's switches, the socket's `mute`): their events are not published (socket, journal,
/// history, MQTT, clips) until they are unmuted or the daemon restarts. An event open when its group is muted still
/// ends as usual; one whose onset was held back has its end held back too, so that no subscriber sees an end without
/// its onset. An event still open when its group is unmuted is announced then: its held-back onset, taken out with
/// ``takeHeldOnset(of:)``, goes out late (marked `unmuted`), and its end follows as usual.
package final class GroupMutes: Sendable {
    private struct State {
        var muted: Set<String> = []
        /// Per group, the onset held back while it was muted, for as long as its event is open (its end takes it
        /// out): what is announced when the group is unmuted before the event ends.
        var heldOnsets: [String: DetectionStage.Output] = [:]
    }

    private let state = Mutex(State())

    package init() {}

    /// The muted groups now.
    package var muted: Set<String> { state.withLock { $0.muted } }

    /// Mutes or unmutes `group`; true when that changed something.
    package func set(_ group: String, muted: Bool) -> Bool {
        state.withLock { state in
            muted ? state.muted.insert(group).inserted : state.muted.remove(group) != nil
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
            guard state.muted.contains(group) else { return true }
            if holds { state.heldOnsets[group] = output }
            return false
        }
    }

    /// The onset of `group` held back while it was muted, when its event is still open and the group is no longer
    /// muted; it is then no longer held (its end will be published). Nil otherwise.
    package func takeHeldOnset(of group: String) -> DetectionStage.Output? {
        state.withLock { state in
            guard !state.muted.contains(group) else { return nil }
            return state.heldOnsets.removeValue(forKey: group)
        }
    }
}
