import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport

/// Finds the directory holding the built-in model (`yamnet.safetensors` and `yamnet_class_map.csv`).
///
/// Search order: `$EARSHOT_MODELS_DIR`; `<executable dir>/../share/earshot` (so `/usr/local/bin/earshot` finds
/// `/usr/local/share/earshot`, where the README installs the model); `/usr/local/share/earshot`;
/// `/usr/share/earshot`; a `Models/` directory in the executable's directory or any parent (a source checkout, e.g.
/// `.build/release/earshot`); the source tree this library was built from.
public enum ModelLocator {
    /// The file every candidate directory must contain.
    public static let weightsFileName = "yamnet.safetensors"
    /// The class map file beside it.
    public static let classMapFileName = "yamnet_class_map.csv"

    /// The first candidate directory that holds the weights.
    /// - Throws: `EarshotError(.noInput)` listing where it looked and how to fix it.
    public static func builtInDirectory() throws(EarshotError) -> URL {
        let candidates = candidateDirectories()
        for directory in candidates
        where FileManager.default.fileExists(atPath: directory.appendingPathComponent(weightsFileName).path) {
            return directory
        }
        throw EarshotError(
            .noInput,
            "cannot find \(weightsFileName) (looked in \(candidates.map(\.path).joined(separator: ", "))); set EARSHOT_MODELS_DIR to the folder holding it")
    }

    package static func candidateDirectories() -> [URL] {
        var result: [URL] = []
        if let override = ProcessInfo.processInfo.environment["EARSHOT_MODELS_DIR"], !override.isEmpty {
            result.append(URL(fileURLWithPath: override))
        }
        let executable = executablePath() ?? URL(fileURLWithPath: CommandLine.arguments.first ?? "").resolvingSymlinksInPath().path
        var directory = URL(fileURLWithPath: executable).deletingLastPathComponent()
        result.append(directory.appendingPathComponent("../share/earshot").standardized)
        result.append(URL(fileURLWithPath: "/usr/local/share/earshot"))
        result.append(URL(fileURLWithPath: "/usr/share/earshot"))
        while directory.path != "/" {
            result.append(directory.appendingPathComponent("Models"))
            directory.deleteLastPathComponent()
        }
        let sourceRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        result.append(sourceRoot.appendingPathComponent("Models"))
        return result
    }

    /// The running executable's path, read from `/proc/self/exe`.
    package static func executablePath() -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
