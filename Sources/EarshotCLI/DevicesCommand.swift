import Foundation

/// `earshot devices` (being built).
enum DevicesCommand {
    static func run(_ arguments: [String]) -> Int32 {
        FileHandle.standardError.write(Data("earshot: devices is not built yet\n".utf8))
        return 69
    }
}
