import FoundationEssentials
import Glibc
import Synchronization

/// The daemon's wall clock as a value: the wall-clock time (`wallSeconds`, seconds since 1970) that a reading of the
/// boot clock (`bootNanoseconds`, `CLOCK_BOOTTIME`) stands for. A time read from it is the anchor's wall time plus
/// the boot clock's advance since, so it moves only as the boot clock does: it never steps until it is re-anchored.
///
/// `CLOCK_BOOTTIME` and `CLOCK_REALTIME` advance alike (NTP's slewing speeds both; both count a suspend), so the
/// difference between their advances is a step of the wall clock (`settimeofday`: NTP setting a clock that started in
/// 1970, `date -s`), and nothing else.
package struct ClockAnchor: Sendable, Equatable {
    /// Wall-clock seconds since 1970 at ``bootNanoseconds``.
    package var wallSeconds: Double
    /// The boot clock's reading (ns) the anchor was taken at.
    package var bootNanoseconds: UInt64

    /// A wall-clock step smaller than this (s) is followed without a word (a few of them may add up to one that is
    /// said): 2 s, far above the milliseconds the two clocks' readings lie apart, far below a step worth saying.
    package static let stepThresholdSeconds = 2.0

    package init(wallSeconds: Double, bootNanoseconds: UInt64) {
        self.wallSeconds = wallSeconds
        self.bootNanoseconds = bootNanoseconds
    }

    /// The time at boot-clock reading `boot` (ns): the anchor's wall time plus the boot clock's advance since.
    package func date(atBoot boot: UInt64) -> Date {
        Date(timeIntervalSince1970: wallSeconds + Double(Int64(bitPattern: boot &- bootNanoseconds)) / 1e9)
    }

    /// Re-anchors at a new reading of both clocks and returns the step of the wall clock since the anchor, in
    /// seconds (the wall clock's advance less the boot clock's; positive forward), when its size is at least
    /// ``stepThresholdSeconds``; nil for a smaller one, which is followed all the same.
    package mutating func reanchor(wallSeconds wall: Double, bootNanoseconds boot: UInt64) -> Double? {
        let step = wall - date(atBoot: boot).timeIntervalSince1970
        self = ClockAnchor(wallSeconds: wall, bootNanoseconds: boot)
        return abs(step) >= Self.stepThresholdSeconds ? step : nil
    }
}

/// The daemon's one clock for the times it gives events (the history, clips' names, sleep sessions, the socket's
/// detection lines): the wall clock, re-anchored on the daemon's heartbeat (``checkForStep()``, every second), so
/// that a step of the system clock (a Raspberry Pi without a real-time clock booting in 1970 until NTP sets it) shows
/// at one moment, in order with the events, where the daemon can say it (`clock_changed`) and move what it already
/// stamped. Durations never come from it: ``uptimeSeconds`` and the sleep sessions' lengths count the boot clock.
///
/// - Important: Any thread; ``now()`` takes a lock and reads one clock.
package final class DaemonClock: Sendable {
    /// Both clocks read at one moment: wall-clock seconds since 1970 and the boot clock in nanoseconds.
    package typealias Readings = @Sendable () -> (wallSeconds: Double, bootNanoseconds: UInt64)

    private let anchor: Mutex<ClockAnchor>
    private let readings: Readings
    private let startBoot: UInt64

    /// - Parameter readings: the system's clocks (``systemReadings()``); a test passes its own.
    package init(readings: @escaping Readings = DaemonClock.systemReadings) {
        self.readings = readings
        let first = readings()
        startBoot = first.bootNanoseconds
        anchor = Mutex(ClockAnchor(wallSeconds: first.wallSeconds, bootNanoseconds: first.bootNanoseconds))
    }

    /// The time now on the daemon's clock.
    package func now() -> Date {
        let boot = readings().bootNanoseconds
        return anchor.withLock { $0.date(atBoot: boot) }
    }

    /// Seconds since the clock was made (the daemon's start) on the boot clock: a wall-clock step does not change it.
    package var uptimeSeconds: Double {
        Double(Int64(bitPattern: readings().bootNanoseconds &- startBoot)) / 1e9
    }

    /// A step of the wall clock found by ``checkForStep()``: its size (s, positive forward) and the time just
    /// before (on the old anchor) and after it.
    package struct Step: Sendable, Equatable {
        package var seconds: Double
        package var before: Date
        package var after: Date

        package init(seconds: Double, before: Date, after: Date) {
            self.seconds = seconds
            self.before = before
            self.after = after
        }
    }

    /// Reads both clocks and re-anchors; the step when the wall clock moved ``ClockAnchor/stepThresholdSeconds`` or
    /// more beside the boot clock since the last check (the heartbeat's job).
    package func checkForStep() -> Step? {
        let reading = readings()
        return anchor.withLock { anchor -> Step? in
            let before = anchor.date(atBoot: reading.bootNanoseconds)
            guard let seconds = anchor.reanchor(wallSeconds: reading.wallSeconds, bootNanoseconds: reading.bootNanoseconds)
            else { return nil }
            return Step(seconds: seconds, before: before, after: Date(timeIntervalSince1970: reading.wallSeconds))
        }
    }

    /// `CLOCK_REALTIME` (s since 1970) and `CLOCK_BOOTTIME` (ns). The corresponding C function is `clock_gettime`.
    package static let systemReadings: Readings = {
        let boot = bootNanoseconds()
        var wall = timespec()
        clock_gettime(CLOCK_REALTIME, &wall)
        return (Double(wall.tv_sec) + Double(wall.tv_nsec) / 1e9, boot)
    }

    /// `CLOCK_BOOTTIME` in nanoseconds: like `CLOCK_MONOTONIC`, but it also counts the time the machine was
    /// suspended. For durations that must count a suspend (this clock's advance; how much audio a capture gap lost,
    /// since audio went on in the room while the machine slept). Stall and scheduling checks use `CLOCK_MONOTONIC`:
    /// a suspended machine is not a stalled device.
    package static func bootNanoseconds() -> UInt64 {
        var boot = timespec()
        clock_gettime(CLOCK_BOOTTIME, &boot)
        return UInt64(boot.tv_sec) * 1_000_000_000 + UInt64(boot.tv_nsec)
    }
}
