// swift-tools-version:6.0
// Earshot's example programs: the Sound Analysis tutorials' three programs, written against the `Earshot` library
// product only (`import Earshot`), in one package that depends on Earshot by version as any other package would.
//
// The dependency's URL is Earshot's published repository; set EARSHOT_URL to use another clone that carries a
// version tag (`git tag 0.1.0` in a clone, then EARSHOT_URL=file:///path/to/clone): the test suite builds this
// package that way against the commit under test (Tests/EarshotTests/ExamplesTests.swift).
import PackageDescription

let earshotURL = Context.environment["EARSHOT_URL"] ?? "https://example.org/earshot.git"
// SwiftPM names a dependency after its URL's last path component, lowercased, without `.git` ("earshot").
let earshotIdentity = earshotURL.split(separator: "/").last.map { name in
    (name.hasSuffix(".git") ? String(name.dropLast(4)) : String(name)).lowercased()
} ?? "earshot"
let earshot = Target.Dependency.product(name: "Earshot", package: earshotIdentity)

let package = Package(
    name: "EarshotExamples",
    dependencies: [.package(url: earshotURL, from: "0.1.0")],
    targets: [
        // Live buffers from a capture device (or a file standing in for it), top classes as they arrive.
        .executableTarget(name: "classify-live", dependencies: [earshot]),
        // A file's sounds with timestamps: "jump to the moment of laughter".
        .executableTarget(name: "classify-file", dependencies: [earshot]),
        // A custom classifier trained from labelled folders, an RMS gate, and each label's share of a recording.
        .executableTarget(name: "classify-custom", dependencies: [earshot]),
    ]
)
