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

extension Trait where Self == ConditionTrait {
    /// Skips a test (reported as skipped, with the reason) when the `earshot` executable is not built beside the
    /// test bundle, as for a test run that built only the test target.
    static var needsEarshotBuilt: Self {
        .enabled(if: EarshotCLI.executable != nil, Comment(rawValue: EarshotCLI.missingMessage))
    }

    /// Skips a test when `earshotd` is not built beside the test bundle.
    static var needsEarshotdBuilt: Self {
        .enabled(if: EarshotdRun.executable != nil, "earshotd is not built beside the test bundle")
    }

    /// Skips a test when it runs as root, whom file modes do not stop, so a permission error cannot be provoked.
    static var notRoot: Self {
        .enabled(if: geteuid() != 0, "running as root: root bypasses file modes, so no permission error can be provoked")
    }
}
