// swift-tools-version:6.0
// Earshot: sound-event detection daemon for Linux. One system-library target per C library (Debian -dev packages),
// one module per stage of the pipeline (see README, Layout), the `Earshot` library product, and two thin
// executables. `EarshotPNG` (librsvg + cairo: glib, pango) renders the report charts as PNG for the command line
// only, so that the daemon never loads those libraries.
import PackageDescription

// EarshotKernels holds the inner loops of the network (matrix products, convolutions) for x86-64 CPUs with AVX2 and
// FMA, in C: each function carries `__attribute__((target("avx,avx2,fma,bmi,bmi2,f16c,movbe,lzcnt,...")))`
// (x86-64-v3), so only those functions use the instructions while everything else keeps the baseline target, and no
// target needs a build flag (SwiftPM refuses unsafe flags in a package used as a versioned dependency). Earshot calls
// them only on CPUs that have those instructions (checked at run time, see
// Sources/EarshotModel/YAMNet/PackedGEMM.swift), so one build runs on every x86-64 CPU. EarshotKernelsAVX512 holds
// the 6 x 64 matrix-product tile for CPUs with AVX-512 (F, CD, BW, DQ, VL), likewise compiled per function and
// called only where the CPU has those features. On other hosts both are empty; the generic loops (NEON on aarch64,
// SSE on baseline x86-64) are Swift, in Sources/EarshotModel/YAMNet.

// Linker flags for earshotd's own copy of the Swift runtime and FoundationEssentials (`-static-stdlib`): the linker
// keeps only the code the daemon uses, so far fewer pages of code become resident than with the shared libraries.
// `-static-stdlib` alone does not name the C libraries under FoundationEssentials; they are named here, in a group so
// that their order does not matter. lld with packed relative relocations (glibc >= 2.36) keeps the relocation table
// that is read at every start at 14 KB instead of 1.8 MB; identical code folding drops duplicate specialisations.
// Measured effect on the daemon's peak RSS in README, Performance.
let staticRuntimeFlags = [
    "-static-stdlib", "-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs", "-Xlinker", "--icf=all",
    "-Xlinker", "--start-group", "-Xlinker", "-lFoundationEssentials", "-Xlinker", "-l_FoundationCShims",
    "-Xlinker", "-l_FoundationCollections", "-Xlinker", "--end-group",
]

// The daemon's code in the order it runs: the functions an earshotd run executes (Sources/EarshotDaemon/code-order.txt,
// written by scripts/code-order from valgrind's callgrind) are placed together at the front of its code, so that the
// pages of code it keeps resident are those it runs, not their neighbours (the kernel maps 64 KB around each page of
// code touched). Names not in the binary are skipped without a warning. Measured effect in README, Performance.
let packageDirectory = String(#filePath.dropLast("/Package.swift".count))
let codeOrderFlags = [
    "-Xlinker", "--symbol-ordering-file=\(packageDirectory)/Sources/EarshotDaemon/code-order.txt",
    "-Xlinker", "--no-warn-symbol-ordering",
]

let package = Package(
    name: "Earshot",
    products: [
        .library(name: "Earshot", targets: ["Earshot"]),
        .executable(name: "earshotd", targets: ["EarshotDaemon"]),
        .executable(name: "earshot", targets: ["EarshotCLI"]),
    ],
    targets: [
        .systemLibrary(name: "CALSA", pkgConfig: "alsa", providers: [.apt(["libasound2-dev"])]),
        .systemLibrary(name: "CFFTW", pkgConfig: "fftw3f", providers: [.apt(["libfftw3-dev"])]),
        .systemLibrary(name: "CSndFile", pkgConfig: "sndfile", providers: [.apt(["libsndfile1-dev"])]),
        .systemLibrary(name: "CSoxr", pkgConfig: "soxr", providers: [.apt(["libsoxr-dev"])]),
        .systemLibrary(name: "CMpg123", pkgConfig: "libmpg123", providers: [.apt(["libmpg123-dev"])]),
        .systemLibrary(name: "COgg", pkgConfig: "ogg", providers: [.apt(["libogg-dev"])]),
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd", providers: [.apt(["libsystemd-dev"])]),
        .systemLibrary(name: "CINIH", pkgConfig: "inih", providers: [.apt(["libinih-dev"])]),
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CRSVG", pkgConfig: "librsvg-2.0", providers: [.apt(["librsvg2-dev"])]),
        // libcurl (libcurl4-openssl-dev), libmicrohttpd (libmicrohttpd-dev) and libmosquitto (libmosquitto-dev):
        // their headers only, the libraries loaded with dlopen where [notify], [metrics] or [mqtt] needs them
        // (linked, they cost every earshotd about 6 MB of resident memory); these C targets hold the loaders and
        // wrappers (typed ones for the variadic calls).
        .target(name: "CCurlShims"),
        .target(name: "CMosquittoShims"),
        .target(name: "CMicroHTTPDShims"),
        .target(name: "EarshotKernels"),
        .target(name: "EarshotKernelsAVX512"),
        // The pipeline, one module per stage; each depends only on the ones below it (see README, Layout).
        .target(name: "EarshotSupport"),
        .target(name: "EarshotAudio", dependencies: ["EarshotSupport", "CSndFile", "CSoxr", "CMpg123", "COgg"]),
        .target(name: "EarshotCapture", dependencies: ["EarshotSupport", "EarshotAudio", "CALSA"]),
        .target(
            name: "EarshotModel", dependencies: ["EarshotSupport", "EarshotKernels", "EarshotKernelsAVX512", "CFFTW"]
        ),
        .target(name: "EarshotAnalysis", dependencies: ["EarshotSupport", "EarshotAudio", "EarshotModel"]),
        .target(name: "EarshotDetection", dependencies: ["EarshotSupport", "EarshotModel", "EarshotAnalysis", "CFFTW"]),
        .target(
            name: "EarshotOutputs",
            dependencies: [
                "EarshotSupport", "EarshotAudio", "EarshotModel", "EarshotAnalysis", "EarshotDetection",
                "CSystemd", "CSQLite", "CSndFile", "CMosquittoShims", "CMicroHTTPDShims", "CCurlShims",
            ]
        ),
        .target(
            name: "EarshotService",
            dependencies: [
                "EarshotSupport", "EarshotAudio", "EarshotCapture", "EarshotModel", "EarshotAnalysis",
                "EarshotDetection",
                "EarshotOutputs", "CSystemd", "CINIH",
            ]
        ),
        // Used by the command line only (training, enrollment, benchmarks, evaluations, history listing, the
        // subscribe client): earshotd never links it (a test checks its symbols).
        .target(
            name: "EarshotTools",
            dependencies: [
                "EarshotSupport", "EarshotAudio", "EarshotCapture", "EarshotModel", "EarshotAnalysis",
                "EarshotDetection",
                "EarshotOutputs", "EarshotService", "CSndFile", "CALSA",
            ]
        ),
        // The library product: Sound Analysis for Linux (re-exports Support, Audio, Capture, Model, Analysis).
        .target(
            name: "Earshot",
            dependencies: ["EarshotSupport", "EarshotAudio", "EarshotCapture", "EarshotModel", "EarshotAnalysis"]
        ),
        .target(name: "EarshotPNG", dependencies: ["EarshotSupport", "EarshotService", "CRSVG"]),
        // See `staticRuntimeFlags`. The daemon's code imports FoundationEssentials, never Foundation (ICU).
        .executableTarget(
            name: "EarshotDaemon", dependencies: ["EarshotService"], exclude: ["code-order.txt"],
            linkerSettings: [.unsafeFlags(staticRuntimeFlags + codeOrderFlags)]
        ),
        .executableTarget(
            name: "EarshotCLI", dependencies: ["Earshot", "EarshotTools", "EarshotService", "EarshotPNG"]
        ),
        .testTarget(
            name: "EarshotTests",
            dependencies: [
                "Earshot", "EarshotSupport", "EarshotAudio", "EarshotCapture", "EarshotModel", "EarshotAnalysis",
                "EarshotDetection", "EarshotOutputs", "EarshotService", "EarshotTools", "EarshotPNG", "CRSVG",
            ]
        ),
    ]
)
