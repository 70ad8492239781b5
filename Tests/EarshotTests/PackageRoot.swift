import Foundation

/// Paths tests read from: the package root (found from this file's path) and `../shared` beside it.
enum TestPaths {
    static let packageRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let shared: URL = packageRoot.deletingLastPathComponent().appendingPathComponent("shared")
    static var sharedAvailable: Bool { FileManager.default.fileExists(atPath: shared.appendingPathComponent("audio/MANIFEST.tsv").path) }
    static let sharedMissingMessage = "../shared is absent (a user's clone): skipping tests that read its recordings and goldens"
    static func sharedFile(_ relative: String) -> URL { shared.appendingPathComponent(relative) }
}

import Testing

extension Trait where Self == ConditionTrait {
    /// Skips a test (reported as skipped, with the reason) when `../shared` is absent, as in a user's clone.
    static var needsShared: Self {
        .enabled(if: TestPaths.sharedAvailable, Comment(rawValue: TestPaths.sharedMissingMessage))
    }
}
