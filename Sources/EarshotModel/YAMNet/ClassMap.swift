import FoundationEssentials
import Glibc
import Dispatch
import EarshotSupport

/// Reads AudioSet class labels from a YAMNet class map CSV (`index,mid,display_name`, display names quoted when they
/// contain commas, as in the reference `yamnet_class_map.csv`).
package enum ClassMap {
    /// The display names in index order.
    /// - Throws: `EarshotError(.noInput)` when the file cannot be read, `.data` when a row is malformed or the
    ///   indices are not 0, 1, 2, ...
    package static func load(path: String) throws(EarshotError) -> [String] {
        guard let bytes = try? RegularFile.read(path, limit: 1 << 20), let text = String(validating: bytes, as: UTF8.self)
        else {
            throw EarshotError(.noInput, "cannot read class map \(path) (reinstall Earshot or re-run Models/convert-yamnet)")
        }
        var labels: [String] = []
        for (lineNumber, line) in text.split(whereSeparator: \.isNewline).enumerated() where lineNumber > 0 {
            let fields = parseCSVLine(String(line))
            guard fields.count == 3, Int(fields[0]) == labels.count else {
                throw EarshotError(.data, "class map \(path):\(lineNumber + 1): expected \"index,mid,display_name\" with index \(labels.count)")
            }
            labels.append(fields[2])
        }
        return labels
    }

    /// Splits one CSV line: fields separated by commas, a field in double quotes may hold commas and `""` quotes.
    package static func parseCSVLine(_ line: String) -> [String] {
        var fields: [String] = []
        var field = ""
        var quoted = false
        var iterator = line.makeIterator()
        while let character = iterator.next() {
            switch (character, quoted) {
            case ("\"", true):
                if let next = iterator.next() {
                    if next == "\"" { field.append("\"") } else {
                        quoted = false
                        if next == "," { fields.append(field); field = "" } else { field.append(next) }
                    }
                } else {
                    quoted = false
                }
            case ("\"", false) where field.isEmpty: quoted = true
            case (",", false): fields.append(field); field = ""
            default: field.append(character)
            }
        }
        fields.append(field)
        return fields
    }
}
