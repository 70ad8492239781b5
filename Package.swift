// swift-tools-version:6.0
// Earshot: sound-event detection daemon for Linux. One system-library target per C library (Debian -dev packages),
// the `Earshot` library with the whole pipeline, and two thin executables. `EarshotPNG` (librsvg + cairo: glib, pango)
// renders the report charts as PNG for the command line only, so that the daemon never loads those libraries.
import PackageDescription

// EarshotKernels holds the inner loops of the network (matrix products, convolutions). On x86-64 it is compiled
// for Haswell (x86-64-v3: AVX2, FMA, BMI1/2, F16C, MOVBE, LZCNT) while everything else keeps the baseline target;
// Earshot calls its x86 entry points only on CPUs that have those instructions (checked at run time, see
// Sources/Earshot/Model/PackedGEMM.swift), so one build runs on every x86-64 CPU. Its generic loops are compiled
// into each caller (`@_alwaysEmitIntoClient`), with the caller's flags. On other hosts it is built normally.
#if arch(x86_64)
let kernelSettings: [SwiftSetting] = [.unsafeFlags(["-target-cpu", "haswell"])]
#else
let kernelSettings: [SwiftSetting] = []
#endif

let package = Package(
    name: "Earshot",
    products: [
        .library(name: "Earshot", targets: ["Earshot"]),
        .library(name: "EarshotPNG", targets: ["EarshotPNG"]),
        .executable(name: "earshotd", targets: ["EarshotDaemon"]),
        .executable(name: "earshot", targets: ["EarshotCLI"]),
    ],
    targets: [
        .systemLibrary(name: "CALSA", pkgConfig: "alsa", providers: [.apt(["libasound2-dev"])]),
        .systemLibrary(name: "CFFTW", pkgConfig: "fftw3f", providers: [.apt(["libfftw3-dev"])]),
        .systemLibrary(name: "CBLAS", pkgConfig: "openblas", providers: [.apt(["libopenblas-dev"])]),
        .systemLibrary(name: "CSndFile", pkgConfig: "sndfile", providers: [.apt(["libsndfile1-dev"])]),
        .systemLibrary(name: "CSoxr", pkgConfig: "soxr", providers: [.apt(["libsoxr-dev"])]),
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd", providers: [.apt(["libsystemd-dev"])]),
        .systemLibrary(name: "CINIH", pkgConfig: "inih", providers: [.apt(["libinih-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CRSVG", pkgConfig: "librsvg-2.0", providers: [.apt(["librsvg2-dev"])]),
        .target(name: "EarshotKernels", swiftSettings: kernelSettings),
        .target(
            name: "Earshot",
            dependencies: ["EarshotKernels", "CALSA", "CFFTW", "CBLAS", "CSndFile", "CSoxr", "CSystemd", "CINIH", "CSQLite"]
        ),
        .target(name: "EarshotPNG", dependencies: ["Earshot", "CRSVG"]),
        .executableTarget(name: "EarshotDaemon", dependencies: ["Earshot"]),
        .executableTarget(name: "EarshotCLI", dependencies: ["Earshot", "EarshotPNG"]),
        .testTarget(name: "EarshotTests", dependencies: ["Earshot", "EarshotPNG", "CRSVG"]),
    ]
)
