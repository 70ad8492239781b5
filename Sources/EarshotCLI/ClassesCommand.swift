import Foundation

/// `earshot classes` (being built).
enum ClassesCommand {
    static func run(_ arguments: [String]) -> Int32 {
        FileHandle.standardError.write(Data("earshot: classes is not built yet\n".utf8))
        return 69
    }
}
