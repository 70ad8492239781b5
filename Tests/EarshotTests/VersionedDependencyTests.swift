import Foundation
import Testing
import Earshot

/// Earshot used the way another package uses it: `.package(url:from:)` on a tagged version. SwiftPM refuses a
/// versioned dependency whose products' targets have unsafe build flags ("the target 'EarshotKernels' in product
/// 'Earshot' contains unsafe build flags"), which a build of this package itself never shows; so the test builds a
/// small consumer package in a temporary directory against a copy of this repository's HEAD tagged 0.1.0, runs it on
/// samples/demo.flac through the public API only (`import Earshot`), and checks its results against
/// `AudioFileAnalyzer` in this process.
///
/// Only committed work is tested: the copy is fetched from HEAD (nothing is committed or tagged in this repository).
/// Everything the build writes (clone, checkouts, caches, SwiftPM's configuration and security directories, HOME,
/// TMPDIR) stays under the temporary directory, which is removed afterwards. The consumer is a debug build of Earshot from
/// scratch: a few minutes on two cores.
@Suite("Earshot as a versioned SwiftPM dependency")
struct VersionedDependencyTests {
    @Test(
        "A consumer package depending on a tagged Earshot builds and classifies as Earshot does in-process",
        .enabled(if: ConsumerBuild.gitAndSwift != nil, Comment(rawValue: ConsumerBuild.toolsMissingMessage)),
        .enabled(if: ConsumerBuild.isGitCheckout, Comment(rawValue: ConsumerBuild.notACheckoutMessage)),
        .timeLimit(.minutes(45))
    )
    func consumerPackageBuildsAndAnalyzes() async throws {
        let (git, swift) = try #require(ConsumerBuild.gitAndSwift)
        let root = TestPaths.packageRoot
        let demo = root.appendingPathComponent("samples/demo.flac")
        let temporary = FileManager.default.temporaryDirectory
            .appendingPathComponent("earshot-consumer-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: temporary, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: temporary) }

        let clone = try ConsumerBuild.tagHEAD(git: git, in: temporary)

        let consumer = temporary.appendingPathComponent("consumer")
        let sources = consumer.appendingPathComponent("Sources/Consumer")
        try FileManager.default.createDirectory(at: sources, withIntermediateDirectories: true)
        try ConsumerBuild.manifest(dependencyURL: "file://" + clone.path)
            .write(to: consumer.appendingPathComponent("Package.swift"), atomically: true, encoding: .utf8)
        try ConsumerBuild.main.write(to: sources.appendingPathComponent("main.swift"), atomically: true, encoding: .utf8)

        let swiftPM = try ConsumerBuild.IsolatedSwiftPM(swift: swift, package: consumer, in: temporary)
        let started = Date()
        let build = try await swiftPM.build()
        print("consumer build: status \(build.status) after \(Int(Date().timeIntervalSince(started))) s")
        #expect(!build.output.contains("unsafe build flags"), "\(build.tail)")
        try #require(build.status == 0, "the consumer package did not build: \(build.tail)")
        let executable = try await swiftPM.binPath().appendingPathComponent("Consumer")
        var environment = swiftPM.environment

        // The model from this checkout (the consumer would also find it in its checkout of the dependency).
        environment["EARSHOT_MODELS_DIR"] = root.appendingPathComponent("Models").path
        let run = try await ConsumerBuild.runOffThePool(executable, [demo.path], environment: environment, timeout: 10 * 60)
        try #require(run.status == 0, "the consumer failed: \(run.tail)")
        let theirs = run.standardOutput.split(separator: "\n").compactMap { ConsumerBuild.Window($0) }

        let ours = try ConsumerBuild.analyzeInProcess(demo)
        try #require(!ours.isEmpty)
        #expect(theirs.count == ours.count, "consumer printed \(theirs.count) windows, in-process \(ours.count)")
        let first = try #require(theirs.first)
        #expect(first.start == 0 && first.identifier == ours[0].identifier,
                "first window: consumer \(first.identifier), in-process \(ours[0].identifier)")
        var largestDifference = 0.0
        for (index, (mine, other)) in zip(ours, theirs).enumerated() {
            #expect(mine.start == other.start && mine.identifier == other.identifier,
                    "window \(index): consumer \(other.start) s \(other.identifier), in-process \(mine.start) s \(mine.identifier)")
            largestDifference = max(largestDifference, abs(mine.confidence - other.confidence))
        }
        // The same code built without and with optimisation, neither allowed to reassociate or contract: the same
        // numbers in practice; the tolerance only leaves room for a library call computed differently.
        #expect(largestDifference <= 1e-6, "top-class confidences differ by up to \(largestDifference)")
        print("consumer: \(theirs.count) windows, first \(first.identifier) \(first.confidence); "
              + "largest top-class confidence difference from in-process \(largestDifference)")
    }
}

/// Helpers of `VersionedDependencyTests`.
enum ConsumerBuild {
    /// `git` and `swift` from PATH, or nil when either is missing.
    static let gitAndSwift: (git: URL, swift: URL)? = {
        guard let git = onPath("git"), let swift = onPath("swift") else { return nil }
        return (git, swift)
    }()
    static let toolsMissingMessage = "git or swift is not on PATH: cannot build a consumer package of Earshot"

    /// Whether the package root is a git checkout (a source archive is not: nothing to tag and depend on).
    static var isGitCheckout: Bool {
        FileManager.default.fileExists(atPath: TestPaths.packageRoot.appendingPathComponent(".git").path)
    }
    static let notACheckoutMessage = "the package root is not a git checkout: no HEAD to depend on by version"

    static func onPath(_ name: String) -> URL? {
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let candidate = URL(fileURLWithPath: String(directory)).appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        return nil
    }

    /// A bare repository `earshot.git` in `temporary` holding HEAD's history and one tag, 0.1.0, on HEAD (no other
    /// tags, so `from: "0.1.0"` resolves to exactly this commit).
    static func tagHEAD(git: URL, in temporary: URL) throws -> URL {
        let clone = temporary.appendingPathComponent("earshot.git")
        for arguments in [
            ["init", "--quiet", "--bare", clone.path],
            ["-C", clone.path, "fetch", "--quiet", "--no-tags", TestPaths.packageRoot.path, "HEAD"],
            ["-C", clone.path, "tag", "0.1.0", "FETCH_HEAD"],
        ] {
            let step = try run(git, arguments, timeout: 300)
            try #require(step.status == 0, "git \(arguments.joined(separator: " ")) failed: \(step.tail)")
        }
        return clone
    }

    /// `swift build` of one package with everything SwiftPM writes kept under `temporary`: it keeps caches and
    /// fingerprints under HOME and ~/.cache by default, and lock files (and the compiler its scratch directories) in
    /// TMPDIR.
    struct IsolatedSwiftPM {
        let swift: URL
        /// This process's environment with HOME, TMPDIR and the XDG directories in `temporary`; add to it.
        var environment: [String: String]
        /// `--package-path` and the scratch, cache, configuration and security paths.
        let options: [String]

        init(swift: URL, package: URL, in temporary: URL) throws {
            self.swift = swift
            let home = temporary.appendingPathComponent("home"), scratchTemporary = temporary.appendingPathComponent("tmp")
            for directory in [home, scratchTemporary] {
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            }
            environment = ProcessInfo.processInfo.environment
            environment["HOME"] = home.path
            environment["TMPDIR"] = scratchTemporary.path
            environment["XDG_CACHE_HOME"] = home.appendingPathComponent(".cache").path
            environment["XDG_CONFIG_HOME"] = home.appendingPathComponent(".config").path
            options = [
                "--package-path", package.path, "--scratch-path", temporary.appendingPathComponent("build").path,
                "--cache-path", temporary.appendingPathComponent("cache").path,
                "--config-path", temporary.appendingPathComponent("config").path,
                "--security-path", temporary.appendingPathComponent("security").path,
                "--manifest-cache", "local", "--disable-dependency-cache",
            ]
        }

        /// `swift build` (debug), terminated after 40 minutes.
        func build() async throws -> Outcome {
            try await runOffThePool(swift, ["build"] + options, environment: environment, timeout: 40 * 60)
        }

        /// The directory of the built executables.
        func binPath() async throws -> URL {
            let binPath = try await runOffThePool(
                swift, ["build", "--show-bin-path"] + options, environment: environment, timeout: 300)
            try #require(binPath.status == 0, "swift build --show-bin-path failed: \(binPath.tail)")
            return URL(fileURLWithPath: binPath.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines))
        }
    }

    /// The consumer's manifest: Earshot by version from `dependencyURL`, as a user's package would have it.
    static func manifest(dependencyURL: String) -> String {
        """
        // swift-tools-version:6.0
        import PackageDescription

        let package = Package(
            name: "EarshotConsumer",
            dependencies: [.package(url: "\(dependencyURL)", from: "0.1.0")],
            targets: [.executableTarget(name: "Consumer", dependencies: [.product(name: "Earshot", package: "earshot")])]
        )

        """
    }

    /// The consumer: the README's library example, printing each window's top class as
    /// `window<TAB>start<TAB>label<TAB>confidence`.
    static let main = """
        import Earshot
        import Foundation

        final class Printer: ResultsObserving {
            func request(_ request: ClassifySoundRequest, didProduce result: ClassificationResult) {
                guard let best = result.classifications.first else { return }
                print("window\\t\\(result.timeRange.start)\\t\\(best.identifier)\\t\\(best.confidence)")
            }

            func request(_ request: ClassifySoundRequest, didFailWithError error: EarshotError) {
                FileHandle.standardError.write(Data("consumer: \\(error)\\n".utf8))
                exit(1)
            }
        }

        do {
            let request = try ClassifySoundRequest(windowDuration: 0.96, overlapFactor: 0.5)
            let analyzer = try AudioFileAnalyzer(url: URL(fileURLWithPath: CommandLine.arguments[1]))
            let printer = Printer()
            try analyzer.add(request, withObserver: printer)
            analyzer.analyze()
        } catch {
            FileHandle.standardError.write(Data("consumer: \\(error)\\n".utf8))
            exit(1)
        }

        """

    /// One window's top class.
    struct Window {
        var start: Double
        var identifier: String
        var confidence: Double

        init(start: Double, identifier: String, confidence: Double) {
            self.start = start
            self.identifier = identifier
            self.confidence = confidence
        }

        /// A `window` line the consumer printed.
        init?(_ line: Substring) {
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            guard fields.count == 4, fields[0] == "window", let start = Double(fields[1]),
                  let confidence = Double(fields[3]) else { return nil }
            self.init(start: start, identifier: String(fields[2]), confidence: confidence)
        }
    }

    /// What the consumer computes, computed here: each window's top class with the same request.
    static func analyzeInProcess(_ file: URL) throws -> [Window] {
        final class Collector: ResultsObserving {
            var windows: [Window] = []
            var failure: EarshotError?
            func request(_ request: ClassifySoundRequest, didProduce result: ClassificationResult) {
                guard let best = result.classifications.first else { return }
                windows.append(Window(start: result.timeRange.start, identifier: best.identifier,
                                      confidence: best.confidence))
            }
            func request(_ request: ClassifySoundRequest, didFailWithError error: EarshotError) { failure = error }
        }
        let request = try ClassifySoundRequest(windowDuration: 0.96, overlapFactor: 0.5)
        let analyzer = try AudioFileAnalyzer(url: file)
        let collector = Collector()
        try analyzer.add(request, withObserver: collector)
        analyzer.analyze()
        if let failure = collector.failure { throw failure }
        return collector.windows
    }

    typealias Outcome = EarshotCLI.Outcome

    /// ``run(_:_:environment:timeout:)`` on a thread of its own, so that a build of minutes does not hold one of the
    /// test run's few cooperative threads (two on a 2-core machine: two such tests would stall every other test, and
    /// their time limits would expire).
    static func runOffThePool(
        _ executable: URL, _ arguments: [String], environment: [String: String]? = nil, timeout: TimeInterval
    ) async throws -> Outcome {
        try await withCheckedThrowingContinuation { continuation in
            Thread {
                continuation.resume(with: Result { try run(executable, arguments, environment: environment, timeout: timeout) })
            }.start()
        }
    }

    /// Runs `executable ARGUMENTS` with `environment` (this process's when nil); terminates it after `timeout`
    /// seconds.
    static func run(
        _ executable: URL, _ arguments: [String], environment: [String: String]? = nil, timeout: TimeInterval
    ) throws -> Outcome {
        try EarshotCLI.runProcess(executable, arguments, environment: environment, timeout: timeout)
    }
}

extension EarshotCLI.Outcome {
    /// Both streams, output first.
    var output: String { standardOutput + standardError }
    /// The last lines of both streams, for a failure message.
    var tail: String {
        let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
        return "status \(status):\n" + lines.suffix(40).joined(separator: "\n")
    }
}
