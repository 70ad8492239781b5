import FoundationEssentials
import Glibc
import Dispatch
import Synchronization
import EarshotSupport
import EarshotDetection

/// The life-safety mutes in force (smoke, CO, fire: the ones `[notify]` tells the phone of), kept in a file of the
/// daemon's state directory, so that the next start can tell the phone that the mute it was told of no longer holds
/// (trial 16 L2: a restart ended the mute, and the phone's last word stayed `No smoke alarm alerts until 20:59`).
/// Written at each change, not at the stop, so that a crash or a power cut during a mute is told too.
///
/// The file, `mutes.json` beside the event history (``StateDirectory/file(_:besideHistory:)``), is JSON:
/// `{"mutes":[{"group":"smoke_alarm","until":"2026-12-07T20:59:00.000Z","unix_until":1796677140.0}]}`, written
/// atomically with mode 0600, following no link (``OutputFile/writePrivate(_:to:mode:what:hint:readerPatience:)``),
/// on a queue of its own (a disk that stalls never holds the analysis queue, where mutes end); removed when no such
/// mute is left. ``takeLeft()`` reads and removes it at start. A file that cannot be written is said once in the
/// journal (and again once it can): the next start then cannot tell the phone.
package final class MuteRecord: Sendable {
    /// The file's name in the state directory.
    package static let fileName = "mutes.json"

    /// The largest file read, in bytes: three mutes take under 300.
    static let maximumBytes = 64 << 10

    package let path: String
    /// The mutes recorded: each group's end (wall clock).
    private let ends = Mutex<[String: Date]>([:])
    private let queue = DispatchQueue(label: "earshot.mutes.record")
    /// Whether the last write failed (said once).
    private let failing = Atomic<Bool>(false)
    private let log: @Sendable (String, Int) -> Void

    /// - Parameters:
    ///   - path: the file (``fileName`` in the state directory).
    ///   - log: a journal line and its syslog priority.
    package init(path: String, log: @escaping @Sendable (String, Int) -> Void) {
        self.path = path
        self.log = log
    }

    /// `group` muted (or its mute renewed) until `until`.
    package func muted(_ group: String, until: Date) {
        ends.withLock { $0[group] = until }
        save()
    }

    /// `group`'s mute is over (unmuted, ended by itself, or its group no longer watched); nothing when none was
    /// recorded.
    package func unmuted(_ group: String) {
        guard ends.withLock({ $0.removeValue(forKey: group) != nil }) else { return }
        save()
    }

    /// Writes the mutes as they are when its turn comes (the last change wins), or removes the file when none is left.
    private func save() {
        queue.async { [self] in
            let current = ends.withLock { $0 }
            do throws(EarshotError) {
                if current.isEmpty {
                    // No file (never written, or its directory missing): nothing to remove, and nothing recovered.
                    if unlink(path) != 0 {
                        guard errno == ENOENT || errno == ENOTDIR else {
                            throw EarshotError(.io, "cannot remove \(path): \(String(cString: strerror(errno)))")
                        }
                        return
                    }
                } else {
                    try OutputFile.writePrivate(Self.encoded(current), to: path, what: "mute record",
                                                hint: "check the state directory and free space")
                }
                if failing.exchange(false, ordering: .relaxed) {
                    log("the smoke, CO and fire mutes are recorded again in \(path)", 6)
                }
            } catch {
                guard !failing.exchange(true, ordering: .relaxed) else { return }
                log("\(error.message); a restart during a smoke, CO or fire alarm mute will not tell the phone that the mute ended", 4)
            }
        }
    }

    /// Waits for the writes asked for so far, until `deadline` at most; true when they are done.
    package func finishWrites(until deadline: DispatchTime) -> Bool {
        let done = DispatchGroup()
        queue.async(group: done) {}
        return done.wait(timeout: deadline) == .success
    }

    /// The file's bytes for `ends`, by group name.
    static func encoded(_ ends: [String: Date]) -> Data {
        let items: [JSONValue] = ends.sorted { $0.key < $1.key }.map { group, until in
            .object([
                "group": .string(group), "until": .string(EventJSON.timestamp(until)),
                // Whole milliseconds down, as `until` says it.
                "unix_until": .number((until.timeIntervalSince1970 * 1000).rounded(.down) / 1000, decimals: 3),
            ])
        }
        return Data((JSONValue.object(["mutes": .array(items)]).encoded + "\n").utf8)
    }

    /// The mutes of the file's bytes, by group name, one per group (the latest end where a group is named twice:
    /// earshotd never writes that, a hand-edited file may; trial 18 L1: each entry was told to the phone).
    /// - Parameter now: the time of reading; an end more than ``GroupMutes/maximumMinutes`` (plus a minute) after
    ///   it, or before 1970, is not one earshotd wrote (a mute lasts at most that long).
    /// - Throws: `EarshotError(.data)` saying what is wrong (not JSON, an entry without a group or end, or an end
    ///   out of that range: trial 18 M1, `1e300` stopped the daemon when it was shown as a clock time).
    static func decode(_ bytes: [UInt8], now: Date) throws(EarshotError) -> [(group: String, until: Date)] {
        let value: JSONValue
        do throws(JSONParseError) {
            value = try JSONValue.parse(bytes)
        } catch {
            throw EarshotError(.data, "not JSON: \(error.description)")
        }
        guard let items = value["mutes"]?.arrayValue else { throw EarshotError(.data, "no \"mutes\" list") }
        let latest = now.timeIntervalSince1970 + Double(GroupMutes.maximumMinutes + 1) * 60
        var mutes: [String: Date] = [:]
        for (index, item) in items.enumerated() {
            guard let group = item["group"]?.stringValue, SettingRules.isValidGroupName(group),
                  let seconds = item["unix_until"]?.doubleValue, seconds.isFinite
            else { throw EarshotError(.data, "mute \(index + 1) lacks group or unix_until") }
            guard seconds >= 0, seconds <= latest else {
                throw EarshotError(.data, "mute \(index + 1)'s unix_until is not a time from 1970 to \(GroupMutes.maximumMinutes) minutes from now")
            }
            let until = Date(timeIntervalSince1970: seconds)
            mutes[group] = max(until, mutes[group] ?? until)
        }
        return mutes.sorted { $0.key < $1.key }.map { (group: $0.key, until: $0.value) }
    }

    /// What the last run left (its life-safety mutes still in force when it stopped, crashed or lost power), by
    /// group name; the file is removed. A missing file is none; one that cannot be read is said in one journal line
    /// (and removed), and is none.
    package func takeLeft() -> [(group: String, until: Date)] {
        let bytes: [UInt8]
        do throws(RegularFile.Failure) {
            bytes = try RegularFile.read(path, limit: Self.maximumBytes, followingLinks: false)
        } catch {
            if error == .cannotOpen(errno: ENOENT) { return [] }
            log("the mutes recorded by the last run in \(path) cannot be read (\(error.reason)); starting without them", 4)
            _ = unlink(path)
            return []
        }
        // Told once: a file that cannot be removed (a read-only state directory) would be told at every start
        // (trial 18 L2), so it is not told at all, and the journal says why.
        if unlink(path) != 0, errno != ENOENT {
            log("the mutes recorded by the last run in \(path) cannot be removed (\(String(cString: strerror(errno)))); the phone is not told that they ended, since it would be told again at every start (check the state directory)", 4)
            return []
        }
        do throws(EarshotError) {
            return try Self.decode(bytes, now: Date())
        } catch {
            log("the mutes recorded by the last run in \(path) cannot be read (\(error.message)); starting without them", 4)
            return []
        }
    }
}
