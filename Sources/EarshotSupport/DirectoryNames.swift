import Glibc

/// The names in a directory stream, as `readdir` gives them.
///
/// The corresponding C function is `readdir`.
package enum DirectoryNames {
    /// The names of `stream`'s entries from where it stands to its end, `.` and `..` left out, in `readdir`'s order;
    /// `error` is the `errno` that `readdir` set when it stopped early (`EIO` on a damaged disk), 0 when it read to
    /// the end. The caller opens and closes the stream.
    package static func read(_ stream: OpaquePointer) -> (names: [String], error: Int32) {
        var names: [String] = []
        while true {
            errno = 0
            guard let entry = readdir(stream) else { return (names, errno) }
            let name = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
    }
}
