import Foundation
import Synchronization

/// Directories a test process creates once and shares between its tests (fixtures made lazily by a `static let`),
/// removed when the process exits: Swift Testing has no hook after the last test, so an `atexit` handler does it.
/// Without it every `swift test` run left them in the temporary directory (3 MB of capture fixtures per run).
enum ProcessScratch {
    private static let paths = Mutex<[String]>([])
    private static let registered = Mutex(false)

    /// Removes `url` (and everything under it) when the process exits normally.
    static func removeAtExit(_ url: URL) {
        paths.withLock { $0.append(url.path) }
        let first = registered.withLock { done in
            defer { done = true }
            return !done
        }
        if first {
            atexit {
                for path in ProcessScratch.paths.withLock({ $0 }) {
                    try? FileManager.default.removeItem(atPath: path)
                }
            }
        }
    }
}
