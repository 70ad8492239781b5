import Synchronization
import EarshotDetection

/// Groups muted at run time (MQTT's switches): their events are not published (socket, journal, history, MQTT,
/// clips) until they are unmuted or the daemon restarts. An event open when its group is muted still ends as usual;
/// one whose onset was held back has its end held back too, so that no subscriber sees an end without its onset.
final class GroupMutes: Sendable {
    private struct State {
        var muted: Set<String> = []
        /// Groups whose last onset was held back: their next end is held back too.
        var heldOnset: Set<String> = []
    }

    private let state = Mutex(State())

    /// The muted groups now.
    var muted: Set<String> { state.withLock { $0.muted } }

    /// Mutes or unmutes `group`; true when that changed something.
    func set(_ group: String, muted: Bool) -> Bool {
        state.withLock { state in
            muted ? state.muted.insert(group).inserted : state.muted.remove(group) != nil
        }
    }

    /// Whether an onset (`isOnset`) or end of `group` is published.
    func admits(group: String, isOnset: Bool) -> Bool {
        state.withLock { state in
            if isOnset {
                guard state.muted.contains(group) else { return true }
                state.heldOnset.insert(group)
                return false
            }
            return state.heldOnset.remove(group) == nil
        }
    }

    func admits(_ event: DetectionEvent) -> Bool {
        switch event {
        case .onset(let onset): admits(group: onset.group, isOnset: true)
        case .offset(let offset): admits(group: offset.group, isOnset: false)
        }
    }

    func admits(_ alarm: AlarmEvent) -> Bool {
        admits(group: alarm.group, isOnset: alarm.kind == .onset)
    }
}
