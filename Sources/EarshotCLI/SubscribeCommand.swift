import Foundation

/// `earshot subscribe` (being built).
enum SubscribeCommand {
    static func run(_ arguments: [String]) -> Int32 {
        FileHandle.standardError.write(Data("earshot: subscribe is not built yet\n".utf8))
        return 69
    }
}
