import FoundationEssentials
import Glibc
import EarshotSupport

/// A labelled-recordings manifest, `MANIFEST.tsv` (as `scripts/make-detection-set` and `../shared/audio` write
/// it): UTF-8 text, tab-separated, a header line whose first columns are ``headerColumns``, then one recording per
/// line (its path relative to the manifest's folder in the first column, its label in the fourth).
package enum Manifest {
    /// The columns every manifest starts with; more may follow (`duration_s`, `group`, `onset`, ...).
    package static let headerColumns = ["path", "source", "license", "label"]
    /// Larger than any manifest (the shared set's is 0.3 MB); a bigger file is not one.
    package static let maximumBytes = 64 << 20

    /// The header's columns and the rows after it, each split at tabs (empty lines dropped).
    ///
    /// - Throws: `EarshotError(.noInput)` when the file cannot be opened (`cannot read the manifest PATH (check the
    ///   path)`) or is not a regular file; `.data` when it is not a manifest: not UTF-8 text, or a first line that
    ///   is not the header (`PATH is not a MANIFEST.tsv: its first line must be the tab-separated header path,
    ///   source, license, label, ... (found "a,b,c")`), so that a wrong file is refused instead of giving empty
    ///   tables.
    package static func read(_ manifest: URL) throws(EarshotError) -> (header: [String], rows: [[String]]) {
        let path = manifest.path
        let bytes: [UInt8]
        do {
            bytes = try RegularFile.read(path, limit: maximumBytes)
        } catch {
            switch error {
            case .cannotOpen(let code) where code == ENOENT:
                throw EarshotError(.noInput, "cannot read the manifest \(path) (check the path)", cause: error.reason)
            case .tooLarge:
                throw EarshotError(.data, "\(path) is not a MANIFEST.tsv: it \(error.reason) (a manifest lists recordings, one line each)")
            case .notRegularFile:
                throw EarshotError(.noInput, "cannot read the manifest \(path): it \(error.reason) (give a MANIFEST.tsv file)")
            default:
                throw EarshotError(.noInput, "cannot read the manifest \(path): \(error.reason) (check the path and its permissions)", cause: error.reason)
            }
        }
        let expected = "the tab-separated header " + headerColumns.joined(separator: ", ") + ", ..."
        guard let text = String(validating: bytes, as: UTF8.self), !bytes.contains(0) else {
            throw EarshotError(.data, "\(path) is not a MANIFEST.tsv: it is not UTF-8 text (a manifest starts with \(expected))")
        }
        let lines = text.split(separator: "\n").map {
            $0.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
        }
        let header = lines.first ?? []
        guard Array(header.prefix(headerColumns.count)) == headerColumns else {
            let found = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
            throw EarshotError(
                .data,
                "\(path) is not a MANIFEST.tsv: its first line must be \(expected) (found \"\(DisplayText.escaped(found, limit: 80))\")")
        }
        return (header, Array(lines.dropFirst()))
    }
}
