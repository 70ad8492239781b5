import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot classes`: the built-in classifier's 521 AudioSet class labels, one `INDEX<TAB>LABEL` line each.
enum ClassesCommand {
    static let usage = "usage: earshot classes"

    static func run(_ arguments: [String]) -> Int32 {
        if arguments == ["--help"] || arguments == ["-h"] {
            print("\(usage)\n\nLists the built-in classifier's AudioSet class labels, one \"INDEX<TAB>LABEL\" line each (index 0 to 520).")
            return 0
        }
        guard arguments.isEmpty else {
            FileHandle.standardError.write(Data("earshot: classes takes no arguments, not \"\(arguments[0])\" (\(usage))\n".utf8))
            return 64
        }
        let labels: [String]
        do {
            labels = try ClassifySoundRequest().knownClassifications()
        } catch {
            FileHandle.standardError.write(Data("earshot: \(error.message)\n".utf8))
            return error.exitStatus
        }
        var output = ""
        for (index, label) in labels.enumerated() { output += "\(index)\t\(label)\n" }
        StandardOutput.write(output)
        return 0
    }
}
