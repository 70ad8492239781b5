import Foundation

/// `earshot analyze` (being built).
enum AnalyzeCommand {
    static func run(_ arguments: [String]) -> Int32 {
        FileHandle.standardError.write(Data("earshot: analyze is not built yet\n".utf8))
        return 69
    }
}
