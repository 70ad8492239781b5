import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport
import EarshotAudio
import EarshotCapture
import EarshotModel
import EarshotAnalysis
import EarshotDetection
import EarshotOutputs
import EarshotService

/// A training folder: one sub-folder per label holding that label's recordings (any format the decoder reads; files
/// in nested folders count too; names starting with `.` are skipped). A sub-folder named `background` is the
/// negative class: sounds that are none of the others.
package struct LabelledFolders: Sendable {
    /// One recording and its label.
    package struct File: Sendable, Equatable {
        package var url: URL
        /// Index into ``LabelledFolders/labels``.
        package var label: Int
    }

    /// The folder that was scanned.
    package let directory: URL
    /// The sub-folder names, sorted (byte order), index = label index.
    package let labels: [String]
    /// Every file, grouped by label in label order, sorted by path within a label.
    package let files: [File]

    /// The name of the negative class's folder.
    package static let backgroundLabel = "background"

    /// Lists `directory`.
    /// - Throws: ``EarshotError`` `.noInput` when it is missing or not a folder; `.data` when it has fewer than two
    ///   label folders, a label folder holds no files, or a folder name cannot be a label (it contains `:` or `|`,
    ///   which the daemon's configuration uses as separators, or a control character).
    package static func scan(_ directory: URL) throws(EarshotError) -> LabelledFolders {
        let path = directory.relativePath
        let kind = PathKind(path: path)
        guard kind != .missing else {
            throw .posix(.noInput, "cannot read training folder \(path)", errno: ENOENT)
        }
        guard kind == .directory else {
            throw EarshotError(.noInput, "training folder \(path) is not a folder (give a folder with one sub-folder of recordings per label)")
        }
        let entries: [String]
        do {
            entries = try FileManager.default.contentsOfDirectory(atPath: path)
        } catch {
            throw .posix(.noInput, "cannot read training folder \(path)", errno: EACCES)
        }
        var labels: [String] = []
        for name in entries.sorted(by: { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }) where !name.hasPrefix(".") {
            guard PathKind(path: directory.appendingPathComponent(name).path) == .directory else { continue }
            if let problem = labelProblem(name) {
                throw EarshotError(.data, "label folder \(directory.appendingPathComponent(name).relativePath): \(problem) (rename the folder)")
            }
            labels.append(name)
        }
        guard labels.count >= 2 else {
            throw EarshotError(
                .data,
                "training folder \(path) has \(labels.count) label folder\(labels.count == 1 ? "" : "s"); it needs at least 2 (one sub-folder of recordings per label, e.g. doorbell/ and background/)")
        }
        var files: [File] = []
        for (index, label) in labels.enumerated() {
            let folder = directory.appendingPathComponent(label)
            let found = regularFiles(under: folder).sorted { $0.path < $1.path }
            guard !found.isEmpty else {
                throw EarshotError(.data, "label folder \(folder.relativePath) holds no files (add recordings of \"\(label)\" or remove the folder)")
            }
            files += found.map { File(url: $0, label: index) }
        }
        return LabelledFolders(directory: directory, labels: labels, files: files)
    }

    /// Why `name` cannot be a label, or nil when it can.
    package static func labelProblem(_ name: String) -> String? {
        if name.contains(":") || name.contains("|") {
            return "\"\(name)\" cannot be a label: ':' and '|' separate model and class names in the daemon's configuration"
        }
        if name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f }) {
            return "a label cannot contain control characters"
        }
        if name.isEmpty {
            return "a label cannot be empty (name the sound, e.g. doorbell)"
        }
        if name.trimmingSpaces() != name {
            return "\"\(name)\" cannot be a label: it starts or ends with a space"
        }
        return nil
    }

    /// Regular files (following symbolic links) under `folder`, at any depth, skipping names that start with `.`;
    /// a folder reached twice (a symbolic link to a parent) is read once.
    package static func regularFiles(under folder: URL) -> [URL] {
        var visited: Set<String> = []
        return regularFiles(under: folder, visited: &visited)
    }

    private static func regularFiles(under folder: URL, visited: inout Set<String>) -> [URL] {
        guard visited.insert(folder.resolvingSymlinksInPath().path).inserted,
              let names = try? FileManager.default.contentsOfDirectory(atPath: folder.path)
        else { return [] }
        var result: [URL] = []
        for name in names where !name.hasPrefix(".") {
            let url = folder.appendingPathComponent(name)
            let kind = PathKind(path: url.path)
            if kind == .missing {
                // A name that is not UTF-8 (listed with U+FFFD; the decoder finds the file by its bytes) or a
                // dangling link: kept, so that the decoder opens it or training names it in a `skipped:` line
                // (the decoder's error says why) instead of dropping it without a word.
                result.append(url)
                continue
            }
            if kind == .directory {
                result += regularFiles(under: url, visited: &visited)
            } else {
                result.append(url)
            }
        }
        return result
    }
}

/// Splits of files into training and held-out sets, stratified by label and reproducible from a seed.
package enum FileSplit {
    /// Holds out `round(fraction * n)` of each label's `n` files (at least 1 and at most `n - 1` when `n >= 2` and
    /// `fraction > 0`; none when `n == 1`), chosen at random with `seed`.
    /// - Parameter fileLabels: the label of each file, index = file index.
    /// - Returns: file indices for training and for validation.
    package static func stratified(fileLabels: [Int], fraction: Double, seed: UInt64) -> (training: [Int], validation: [Int]) {
        var random = SeededRandom(seed: seed ^ 0x5EED_5A17)
        var training: [Int] = [], validation: [Int] = []
        for label in Set(fileLabels).sorted() {
            var members = fileLabels.indices.filter { fileLabels[$0] == label }
            members.shuffle(using: &random)
            var held = Int((fraction * Double(members.count)).rounded())
            if fraction > 0, members.count >= 2 { held = min(max(held, 1), members.count - 1) } else if members.count < 2 { held = 0 }
            validation += members[0..<held]
            training += members[held...]
        }
        return (training.sorted(), validation.sorted())
    }

    /// Deals each label's files, shuffled with `seed`, round-robin into `folds` folds (continuing the rotation from
    /// one label to the next, so small labels do not all land in the first fold).
    /// - Returns: `folds` arrays of file indices.
    package static func folds(fileLabels: [Int], folds: Int, seed: UInt64) -> [[Int]] {
        var random = SeededRandom(seed: seed ^ 0xF01D_5EED)
        var result = [[Int]](repeating: [], count: folds)
        var next = 0
        for label in Set(fileLabels).sorted() {
            var members = fileLabels.indices.filter { fileLabels[$0] == label }
            members.shuffle(using: &random)
            for member in members {
                result[next % folds].append(member)
                next += 1
            }
        }
        return result.map { $0.sorted() }
    }
}
