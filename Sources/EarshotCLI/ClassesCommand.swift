import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot classes`: the built-in classifier's 521 AudioSet class labels, one `INDEX<TAB>LABEL` line each.
enum ClassesCommand: EarshotCommand {
    static let name = "classes"
    static let usage = "usage: earshot classes"
    static let help = """
        \(usage)

        Lists the built-in classifier's AudioSet class labels, one "INDEX<TAB>LABEL" line each (index 0 to 520).
        """
    static let flags: [String] = []

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) {
        if let item = try parser.next() { throw parser.unexpected(item.text) }
    }

    static func execute(_ options: Void) -> Int32 {
        let labels: [String]
        do {
            labels = try ClassifySoundRequest().knownClassifications()
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
        var output = ""
        for (index, label) in labels.enumerated() { output += "\(index)\t\(label)\n" }
        StandardOutput.write(output)
        return 0
    }
}
